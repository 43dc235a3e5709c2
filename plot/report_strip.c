/* The lesson's forward strip (tg_report_forward_strip): one causal head's
 * forward pass, stage by stage, as the lesson's cells walk it. Here the
 * tensors are checked and read, the scores q @ k^T computed, and the
 * section's frame written: a canvas per stage, the controls, the bar chart
 * of one row. The page's script for it, plot/strip.js, draws the stages and
 * recomputes everything after the scores as its switch and slider move:
 *
 *   scaled  = scores / sqrt(hs)            (or scores, the switch off)
 *   weights = softmax(masked(scaled) / t)  row by row, the future excluded
 *   out     = weights @ v
 *
 * so the numbers are those of the lesson's numpy code whenever the switch
 * is on and t = 1. */
#include "plot/report.h"
#include "plot/tools.h"

#include <stdio.h>
#include <stdlib.h>

enum { STRIP_MAX_T = 256 }; /* the grids' largest side, as a heatmap's */

/* The strip's stages, in order: each canvas is tgfigN-NAME. */
static const char *const stage_names[6] = {"averaging", "scores",  "scaled",
                                           "masked",    "softmax", "out"};

/* t is there, 2-D and not empty; false with the error set. */
static bool check_2d(const char *op, const char *what, const tg_tensor *t)
{
    if (!tg__report_check_tensor(op, what, t))
        return false;
    if (tg_ndim(t) != 2 || tg_numel(t) == 0) {
        tg__error("%s: %s must be a non-empty 2-D tensor, got shape %s", op,
                  what, TG_SHP(t));
        return false;
    }
    return true;
}

/* t (checked) into a new row-major array of doubles; NULL with the error
 * set. */
static double *read_2d(const char *op, const char *what, const tg_tensor *t)
{
    double *v = tg__malloc(sizeof(double) * (size_t)tg_numel(t));
    if (!v) {
        tg__error("%s: out of memory for %s of shape %s", op, what, TG_SHP(t));
        return NULL;
    }
    if (tg_copy_out(t, TG_FLOAT64, v) != 0) {
        free(v);
        tg__error_wrap(op);
        return NULL;
    }
    return v;
}

/* The shapes the strip needs, checked before anything is read: q (T,hs), k
 * as q, v (T,dv), T at most STRIP_MAX_T, row in [0,T). False with the
 * error set. */
static bool check_shapes(const char *op, const tg_tensor *q, const tg_tensor *k,
                         const tg_tensor *v, int row)
{
    if (!check_2d(op, "q", q) || !check_2d(op, "k", k) || !check_2d(op, "v", v))
        return false;
    int64_t T = tg_size(q, 0);
    if (tg_size(k, 0) != T || tg_size(k, 1) != tg_size(q, 1)) {
        tg__error("%s: k of shape %s does not match q %s", op, TG_SHP(k),
                  TG_SHP(q));
        return false;
    }
    if (tg_size(v, 0) != T) {
        tg__error("%s: v of shape %s does not have q's %lld rows (q %s)", op,
                  TG_SHP(v), (long long)T, TG_SHP(q));
        return false;
    }
    if (T > STRIP_MAX_T) {
        tg__error("%s: q of shape %s has too many tokens for the strip "
                  "(T <= %d)",
                  op, TG_SHP(q), STRIP_MAX_T);
        return false;
    }
    if (row < 0 || row >= T) {
        tg__error("%s: row %d is outside [0, %lld) (q %s)", op, row,
                  (long long)T, TG_SHP(q));
        return false;
    }
    return true;
}

/* name:[a[0],...,a[n-1]] for the section's JSON, in the shortest digits
 * (single: as float32s). */
static void json_array(sbuf *b, const char *name, const double *a, int64_t n,
                       bool single)
{
    tg__sb_printf(b, ",\"%s\":[", name);
    for (int64_t i = 0; i < n; i++) {
        if (i)
            tg__sb_putn(b, ",", 1);
        tg__put_num(b, a[i], single);
    }
    tg__sb_putn(b, "]", 1);
}

/* The section's numbers: sizes, the focused row, scores (T,T) = q @ k^T
 * summed in double over hs, v (T,dv), tokens. */
static void strip_data(sbuf *sec, const double *q, const double *k,
                       const double *v, int64_t T, int64_t hs, int64_t dv,
                       const char *const *tokens, int row, bool single)
{
    tg__report_data_open(sec);
    tg__sb_printf(sec,
                  "{\"T\":%lld,\"hs\":%lld,\"dv\":%lld,\"row\":%d,"
                  "\"scores\":[",
                  (long long)T, (long long)hs, (long long)dv, row);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            double s = 0;
            for (int64_t d = 0; d < hs; d++)
                s += q[i * hs + d] * k[j * hs + d];
            if (i || j)
                tg__sb_putn(sec, ",", 1);
            tg__put_num(sec, s, false);
        }
    tg__sb_putn(sec, "]", 1);
    json_array(sec, "v", v, T * dv, single);
    tg__sb_puts(sec, ",\"tok\":");
    tg__put_json_labels(sec, tokens, T);
    tg__sb_puts(sec, "}");
    tg__report_data_close(sec);
}

/* The controls: step back, play/pause, step, where the strip stands, the
 * sqrt(hs) switch and the temperature slider. */
static void strip_controls(sbuf *sec, int64_t hs)
{
    tg__sb_puts(sec, "<div class=\"tg-strip-controls\">"
                     "<button type=\"button\" class=\"tg-strip-back\">&#9664; "
                     "back</button> <button type=\"button\" "
                     "class=\"tg-strip-play\">&#9654; play</button> "
                     "<button type=\"button\" class=\"tg-strip-step\">step "
                     "&#9654;</button> <span class=\"tg-strip-where\"></span>"
                     "</div>\n<div class=\"tg-strip-controls\">"
                     "<label><input type=\"checkbox\" class=\"tg-strip-sqrt\" "
                     "checked> divide the scores by sqrt(hs) = sqrt(");
    tg__sb_printf(sec, "%lld", (long long)hs);
    tg__sb_puts(sec, ")</label> <label class=\"tg-temp\">temperature "
                     "<input type=\"range\" class=\"tg-temperature\" "
                     "min=\"0.05\" max=\"5\" step=\"0.01\" value=\"1\"> "
                     "<span class=\"tg-temperature-value\">1</span>"
                     "</label></div>\n");
}

/* The section's frame: hint, controls, one figure per stage, readout, the
 * bar chart of the focused row. */
static void strip_frame(sbuf *sec, int n, int64_t hs)
{
    tg__sb_puts(sec, "<p class=\"tg-hint\">Play the lesson's cells, or step "
                     "through them; hover a cell for its exact value; click "
                     "a stage to go there, a row to follow it (the line "
                     "under the strip, the bar chart); on the strip, the "
                     "arrow keys step and space plays. Hatched: masked, the "
                     "future.</p>\n");
    strip_controls(sec, hs);
    tg__sb_puts(sec, "<div class=\"tg-strip\">\n");
    for (int s = 0; s < 6; s++)
        tg__sb_printf(sec,
                      "<figure class=\"tg-strip-panel\" data-stage=\"%d\">"
                      "<figcaption></figcaption><canvas id=\"tgfig%d-%s\" "
                      "class=\"tg-canvas\" width=\"340\" height=\"380\">"
                      "</canvas></figure>\n",
                      s, n, stage_names[s]);
    tg__sb_printf(sec,
                  "</div>\n<div class=\"tg-strip-row\"></div>\n"
                  "<div class=\"tg-readout\"></div>\n"
                  "<canvas id=\"tgfig%d-bars\" class=\"tg-canvas "
                  "tg-strip-bars\" width=\"640\" height=\"300\"></canvas>\n",
                  n);
}

int tg_report_forward_strip(tg_report *r, const char *title, const tg_tensor *q,
                            const tg_tensor *k, const tg_tensor *v,
                            const char *const *tokens, int row)
{
    const char *op = "report_forward_strip";
    if (!tg__report_check(op, r))
        return -1;
    if (!check_shapes(op, q, k, v, row))
        return -1;
    double *qv = read_2d(op, "q", q);
    double *kv = qv ? read_2d(op, "k", k) : NULL;
    double *vv = kv ? read_2d(op, "v", v) : NULL;
    if (!vv) {
        free(qv);
        free(kv);
        free(vv);
        return -1;
    }
    int64_t T = tg_size(q, 0), hs = tg_size(q, 1), dv = tg_size(v, 1);
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    sbuf sec = {0};
    tg__report_open_section(&sec, n, "strip", title);
    strip_frame(&sec, n, hs);
    strip_data(&sec, qv, kv, vv, T, hs, dv, tokens, row,
               tg_dtype_of(v) == TG_FLOAT32);
    free(qv);
    free(kv);
    free(vv);
    tg__c_numbers_end(c);
    return tg__report_add_section(op, r, &sec, NULL);
}
