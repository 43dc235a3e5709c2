/* The HTML report (tapegrad_report.h): the page's structure as the browser
 * test relies on it (sections fig-1.. with their kinds, the content
 * security policy, nothing fetched), the numbers in its JSON equal to the
 * tensors' (parsed back and compared exactly), escaping, downsampling with
 * a note and a bounded size, the atomic write, pages without gnuplot or
 * Graphviz, and the tape's gradient statistics (|grad| and exact zeros).
 * The page's script is exercised in a real browser by tests/browser/. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at: the fault injection */

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- scratch files and reading pages back -------------------------------- */

/* The whole file (the caller frees it); its size in *len. */
static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
    text[n] = '\0';
    fclose(f);
    if (len)
        *len = n;
    return text;
}

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Section fig-n of the page: from its opening tag to its "</section>", in
 * a new string. */
static char *section_of(const char *page, int n)
{
    char id[64];
    snprintf(id, sizeof id, "<section class=\"tg-section\" id=\"fig-%d\"", n);
    const char *start = strstr(page, id);
    ck_assert_msg(start != NULL, "no section fig-%d", n);
    const char *end = strstr(start, "</section>");
    ck_assert_ptr_nonnull(end);
    size_t len = (size_t)(end - start) + strlen("</section>");
    char *s = malloc(len + 1);
    memcpy(s, start, len);
    s[len] = '\0';
    return s;
}

/* The numbers of the JSON array "key":[...] in text, into v (the first cap
 * of them); "nan", "inf", "-inf" as themselves. Returns how many. */
static int64_t json_numbers(const char *text, const char *key, double *v,
                            int64_t cap)
{
    char open[64];
    snprintf(open, sizeof open, "\"%s\":[", key);
    const char *p = strstr(text, open);
    ck_assert_msg(p != NULL, "no %s in the data", open);
    p += strlen(open);
    int64_t n = 0;
    while (*p && *p != ']' && n < cap) {
        if (*p == '"') {
            v[n++] = !strncmp(p, "\"nan\"", 5)    ? NAN
                     : !strncmp(p, "\"inf\"", 5)  ? INFINITY
                     : !strncmp(p, "\"-inf\"", 6) ? -INFINITY
                                                  : 12345;
            p = strchr(p + 1, '"') + 1;
        } else {
            char *end;
            v[n++] = strtod(p, &end);
            ck_assert_msg(end != p, "not a number at %.20s", p);
            p = end;
        }
        if (*p == ',')
            p++;
    }
    return n;
}

/* Two doubles equal as stored values: the same bits, NaN equal to NaN. */
static bool same(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* ---- the page's structure ------------------------------------------------ */

static const char *const TOKENS[4] = {"The", "cat", "sat", "."};

/* A (4,4) causal mask: true above the diagonal. */
static tg_tensor *future4(void)
{
    return tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT32, TG_SHAPE(4, 4)), 0), 0);
}

START_TEST(page_has_every_kind_in_order)
{
    tg_scope_begin();
    tg_report *r = tg_report_new("all kinds");
    ck_assert_ptr_nonnull(r);
    tg_tensor *m = tg_arange(TG_FLOAT32, 0, 16, 1);
    m = tg_reshape(m, TG_SHAPE(4, 4));
    double y[3] = {3, 2, 1};
    tg_series s = {"loss", NULL, y, 3};
    const char *cells[4] = {"a", "b", "1", "2"};
    ck_assert_int_eq(tg_report_text(r, "t", "one\n\ntwo"), 1);
    ck_assert_int_eq(tg_report_pre(r, "p", "  x = 1"), 2);
    ck_assert_int_eq(tg_report_table(r, "c", 2, 2, cells), 3);
    ck_assert_int_eq(tg_report_heatmap(r, "h", m, future4(), TOKENS, TOKENS),
                     4);
    ck_assert_int_eq(tg_report_lines(r, "l", &s, 1, "x", "y", true), 5);
    ck_assert_int_eq(tg_report_tape(r, "tape"), 6);
    ck_assert_int_eq(tg_report_averaging(r, "avg", m, TOKENS), 7);
    ck_assert_int_eq(tg_report_attention(r, "att", m, future4(), TOKENS, 1.5),
                     8);
    const char *path = scratch_path("kinds.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();

    char *page = slurp(path, NULL);
    ck_assert_msg(!strncmp(page, "<!DOCTYPE html>", 15), "%.40s", page);
    ck_assert_ptr_nonnull(
        strstr(page, "<meta http-equiv=\"Content-Security-Policy\" "
                     "content=\"default-src 'none'; script-src "
                     "'unsafe-inline'; style-src 'unsafe-inline'; img-src "
                     "data:\">"));
    static const char *const kinds[8] = {"text",      "pre",      "table",
                                         "heatmap",   "lines",    "tape",
                                         "averaging", "attention"};
    ck_assert_int_eq(count(page, "<section class=\"tg-section\""), 8);
    const char *at = page;
    for (int i = 0; i < 8; i++) {
        char open[128];
        snprintf(open, sizeof open,
                 "<section class=\"tg-section\" id=\"fig-%d\" "
                 "data-kind=\"%s\">\n<h2>",
                 i + 1, kinds[i]);
        const char *p = strstr(page, open);
        ck_assert_msg(p != NULL && p > at,
                      "section %d (%s) missing or out "
                      "of order",
                      i + 1, kinds[i]);
        at = p;
        char *sec = section_of(page, i + 1);
        bool figure = i == 3 || i == 4 || i == 6 || i == 7;
        if (figure) {
            ck_assert_int_eq(count(sec, "<div class=\"tg-readout\">"), 1);
            bool drawn = i >= 6 || tg_plot_available();
            ck_assert_int_eq(count(sec, "<canvas") >= 1, drawn);
        }
        free(sec);
    }
    char *att = section_of(page, 8);
    ck_assert_ptr_nonnull(strstr(att, "<input type=\"range\" "
                                      "class=\"tg-temperature\" min=\""));
    ck_assert_ptr_nonnull(strstr(att, "value=\"1.5\""));
    ck_assert_ptr_nonnull(
        strstr(att, "<span class=\"tg-temperature-value\">1.5</span>"));
    ck_assert_ptr_nonnull(strstr(att, "<div class=\"tg-rowstats\">"));
    free(att);
    /* paragraphs split at the blank line */
    char *text = section_of(page, 1);
    ck_assert_ptr_nonnull(strstr(text, "<p>one</p>\n<p>two</p>"));
    free(text);
    /* nothing fetched: no URL, and every src a data: URL */
    ck_assert_ptr_null(strstr(page, "http:"));
    ck_assert_ptr_null(strstr(page, "https:"));
    ck_assert_ptr_null(strstr(page, "href="));
    for (const char *p = page; (p = strstr(p, "src")); p += 3) {
        const char *q = p + 3;
        while (*q == ' ')
            q++;
        if (*q != '=')
            continue;
        q++;
        while (*q == ' ')
            q++;
        ck_assert_msg(!strncmp(q, "\"data:", 6), "src not data: at %.40s", p);
    }
    free(page);
}
END_TEST

/* A failed call leaves the report as it was: the next section is number 1. */
START_TEST(failed_call_adds_nothing)
{
    tg_report *r = tg_report_new(NULL);
    tg_tensor *m = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 4));
    tg_tensor *bad = tg_zeros(TG_BOOL, TG_SHAPE(4, 3));
    ck_assert_int_eq(tg_report_heatmap(r, "h", m, bad, NULL, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(4,3)"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(3,4)"));
    ck_assert_int_eq(tg_report_attention(r, "a", m, NULL, NULL, 1), -1);
    ck_assert_int_eq(tg_report_attention(r, "a", m, NULL, NULL, -1), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "temperature"));
    ck_assert_int_eq(tg_report_pre(r, "p", "x"), 1);
    tg_release(m);
    tg_release(bad);
    tg_report_free(r);
}
END_TEST

/* ---- the data equal the tensors ------------------------------------------ */

/* float32 values (their shortest digits read back as the same float), NaN
 * and infinities as strings, the mask as 0/1; then a transposed float64
 * view (any strides), its values to the last bit. */
START_TEST(heatmap_data_are_the_tensors_values)
{
    tg_scope_begin();
    tg_rng g;
    tg_rng_seed(&g, 7);
    tg_tensor *a = tg_randn(&g, TG_FLOAT32, TG_SHAPE(4, 4));
    tg_set(a, (int64_t[]){1, 0}, NAN);
    tg_set(a, (int64_t[]){2, 1}, INFINITY);
    tg_set(a, (int64_t[]){3, 2}, -INFINITY);
    tg_set(a, (int64_t[]){3, 3}, 1e-7);
    tg_tensor *b = tg_transpose(tg_randn(&g, TG_FLOAT64, TG_SHAPE(5, 3)), 0, 1);
    tg_tensor *mask = future4();
    tg_report *r = tg_report_new("data");
    ck_assert_int_eq(tg_report_heatmap(r, "a", a, mask, NULL, NULL), 1);
    ck_assert_int_eq(tg_report_heatmap(r, "b", b, NULL, NULL, NULL), 2);
    ck_assert_int_eq(tg_report_attention(r, "s", a, mask, TOKENS, 2), 3);
    const char *path = scratch_path("data.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);

    char *page = slurp(path, NULL);
    double v[64], want[16], mk[16];
    bool mask_v[16];
    tg_copy_out(a, TG_FLOAT64, want);
    tg_copy_out(mask, TG_BOOL, mask_v);
    for (int fig = 1; fig <= 3; fig += 2) {
        char *sec = section_of(page, fig);
        ck_assert_int_eq(json_numbers(sec, "v", v, 17), 16);
        for (int i = 0; i < 16; i++)
            ck_assert_msg(same((float)v[i], want[i]),
                          "fig-%d cell %d: %.9g != %.9g", fig, i, v[i],
                          want[i]);
        ck_assert_int_eq(json_numbers(sec, "mask", mk, 16), 16);
        ck_assert_ptr_nonnull(strstr(sec, "\"mask\":[0,1,1,1,0,0,1,1,"));
        for (int i = 0; i < 16; i++)
            ck_assert_int_eq(mk[i] == 1, mask_v[i]);
        free(sec);
    }
    char *sec = section_of(page, 2);
    double want_b[15];
    tg_copy_out(b, TG_FLOAT64, want_b);
    ck_assert_int_eq(json_numbers(sec, "v", v, 16), 15);
    for (int i = 0; i < 15; i++)
        ck_assert_msg(v[i] == want_b[i], "cell %d: %.17g != %.17g", i, v[i],
                      want_b[i]);
    ck_assert_ptr_nonnull(strstr(sec, "\"rows\":3,\"cols\":5"));
    free(sec);
    sec = section_of(page, 3);
    ck_assert_ptr_nonnull(strstr(sec, "\"temp\":2,"));
    free(sec);
    free(page);
    tg_scope_end();
}
END_TEST

/* The forward strip's data: the scores are q @ k^T (tg_matmul's, to the
 * last bit for these small integers and halves), v as given (a transposed
 * view: any strides), the sizes and the followed row; a bad row adds
 * nothing. */
START_TEST(forward_strip_data_are_the_head)
{
    tg_scope_begin();
    const double qv[6] = {1, 2, -0.5, 3, 0, 4}, kv[6] = {2, 1, 1, -1, 0.5, 0};
    tg_tensor *q = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 2), qv);
    tg_tensor *k = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 2), kv);
    tg_rng g;
    tg_rng_seed(&g, 5);
    tg_tensor *v = tg_transpose(tg_randn(&g, TG_FLOAT64, TG_SHAPE(4, 3)), 0, 1);
    tg_report *r = tg_report_new("strip");
    ck_assert_int_eq(tg_report_forward_strip(r, "s", q, k, v, NULL, 3), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "row 3"));
    ck_assert_int_eq(tg_report_forward_strip(r, "s", q, k, v, TOKENS, 2), 1);
    const char *path = scratch_path("strip.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);

    char *page = slurp(path, NULL);
    char *sec = section_of(page, 1);
    ck_assert_ptr_nonnull(strstr(sec, "data-kind=\"strip\""));
    ck_assert_ptr_nonnull(strstr(sec, "\"T\":3,\"hs\":2,\"dv\":4,\"row\":2,"));
    double got[16], want[12];
    tg_copy_out(tg_matmul(q, tg_transpose(k, 0, 1)), TG_FLOAT64, want);
    ck_assert_int_eq(json_numbers(sec, "scores", got, 16), 9);
    for (int i = 0; i < 9; i++)
        ck_assert_msg(got[i] == want[i], "score %d: %.17g != %.17g", i, got[i],
                      want[i]);
    tg_copy_out(v, TG_FLOAT64, want);
    ck_assert_int_eq(json_numbers(sec, "v", got, 16), 12);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(got[i] == want[i], "v %d: %.17g != %.17g", i, got[i],
                      want[i]);
    ck_assert_ptr_nonnull(strstr(sec, "\"tok\":[\"The\",\"cat\",\"sat\"]"));
    ck_assert_int_eq(count(page, "tgfig1-"), 7); /* six stages, the bars */
    free(sec);
    free(page);
    tg_scope_end();
}
END_TEST

/* The "scale" of section n's JSON: its kind, range and counts. */
static void section_scale(const char *page, int n, char kind[16], double *lo,
                          double *hi, long *zeros, long *masked)
{
    char *sec = section_of(page, n);
    const char *p = strstr(sec, "\"scale\":{\"kind\":\"");
    ck_assert_msg(p != NULL, "fig-%d has no scale", n);
    ck_assert_int_eq(sscanf(p,
                            "\"scale\":{\"kind\":\"%15[a-z]\",\"lo\":%lf,"
                            "\"hi\":%lf,\"zeros\":%ld,\"masked\":%ld",
                            kind, lo, hi, zeros, masked),
                     5);
    free(sec);
}

/* Each heatmap says its scale: a signed gradient on [-m, m], m the largest
 * |v| (0 the neutral centre), its exact zeros counted in the caption but
 * not the masked cells; weights on [0, 1] whatever they are; by default
 * the data's own range. Nothing is guessed from the data. */
START_TEST(heatmap_scales_are_said_not_guessed)
{
    tg_scope_begin();
    const double g[3][3] = {{0, 0, 0}, {0.25, -0.75, 0}, {1e-9, 0.5, -0.5}};
    const double w[3][3] = {{1, 0, 0}, {0.5, 0.5, 0}, {0.2, 0.3, 0.5}};
    tg_tensor *grad = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), g);
    tg_tensor *wei = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), w);
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT32, TG_SHAPE(3, 3)), 0), 0);
    tg_report *r = tg_report_new("scales");
    const tg_heatmap_opts div = {
        .scale = TG_SCALE_DIVERGING, .xlabel = "key <s>", .cblabel = "dL/ds"};
    const tg_heatmap_opts unit = {.scale = TG_SCALE_UNIT};
    ck_assert_int_eq(
        tg_report_heatmap_with(r, "g", grad, NULL, NULL, NULL, &div), 1);
    ck_assert_int_eq(
        tg_report_heatmap_with(r, "g", grad, future, NULL, NULL, &div), 2);
    ck_assert_int_eq(
        tg_report_heatmap_with(r, "w", wei, future, NULL, NULL, &unit), 3);
    ck_assert_int_eq(tg_report_heatmap(r, "w", wei, future, NULL, NULL), 4);
    const char *path = scratch_path("scales.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);

    char *page = slurp(path, NULL), kind[16];
    double lo, hi;
    long zeros, masked;
    section_scale(page, 1, kind, &lo, &hi, &zeros, &masked);
    ck_assert_str_eq(kind, "diverging");
    ck_assert_msg(lo == -0.75 && hi == 0.75, "[%g, %g]", lo, hi);
    ck_assert_int_eq(zeros, 4); /* 1e-9 is not 0 */
    ck_assert_int_eq(masked, 0);
    char *sec = section_of(page, 1);
    ck_assert_ptr_nonnull(strstr(sec, "symmetric range [-0.75, 0.75]"));
    ck_assert_ptr_nonnull(strstr(sec, "hatched (4 cells)"));
    free(sec);
    section_scale(page, 2, kind, &lo, &hi, &zeros, &masked);
    ck_assert_int_eq(zeros, 1); /* the three above the diagonal are masked */
    ck_assert_int_eq(masked, 3);
    sec = section_of(page, 2);
    ck_assert_ptr_nonnull(strstr(sec, "hatched (1 cell); grey: masked (3 "
                                      "cells)"));
    free(sec);
    section_scale(page, 3, kind, &lo, &hi, &zeros, &masked);
    ck_assert_str_eq(kind, "unit");
    ck_assert_msg(lo == 0 && hi == 1, "[%g, %g]", lo, hi);
    section_scale(page, 4, kind, &lo, &hi, &zeros, &masked);
    ck_assert_str_eq(kind, "sequential");
    ck_assert_msg(lo == 0.2 && hi == 1, "[%g, %g]", lo, hi); /* unmasked */
    free(page);
    tg_scope_end();
}
END_TEST

/* A 1000 x 1000 matrix is drawn as 250 x 250 block means, with a note; the
 * page stays small (well under 2 MB: numbers as float32 digits, the picture
 * one PNG). */
START_TEST(large_matrix_is_downsampled_with_a_note)
{
    tg_scope_begin();
    tg_rng g;
    tg_rng_seed(&g, 3);
    tg_tensor *m = tg_randn(&g, TG_FLOAT64, TG_SHAPE(1000, 1000));
    tg_report *r = tg_report_new("big");
    ck_assert_int_eq(tg_report_heatmap(r, "big", m, NULL, NULL, NULL), 1);
    const char *path = scratch_path("big.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    long len;
    char *page = slurp(path, &len);
    ck_assert_ptr_nonnull(strstr(page, "<p class=\"tg-note\">Downsampled from "
                                       "1000 x 1000 to 250 x 250"));
    ck_assert_ptr_nonnull(strstr(page, "\"rows\":250,\"cols\":250"));
    ck_assert_ptr_nonnull(strstr(page, "\"block\":{\"rows\":1000,\"cols\":1000,"
                                       "\"fr\":4,\"fc\":4}"));
    ck_assert_msg(len < 1500000, "page of %ld bytes", len);
    /* the first block's mean, as float32 digits */
    double first, want = 0;
    json_numbers(page, "v", &first, 1);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            want += tg_get(m, (int64_t[]){i, j});
    ck_assert_float_eq((float)first, (float)(want / 16));
    free(page);
    tg_scope_end();
}
END_TEST

/* A float64 matrix's block means stay double: blocks of 1e300, 1e-300
 * and DBL_MAX (whose plain sum overflows) come out finite and themselves
 * to 9 digits, not inf or 0 as through float. */
START_TEST(float64_block_means_keep_their_range)
{
    tg_scope_begin();
    enum { N = 500 }; /* drawn as 250 x 250 blocks of 2 x 2 */
    double *v = calloc((size_t)N * N, sizeof *v);
    ck_assert_ptr_nonnull(v);
    const double big[3] = {1e300, 1e-300, DBL_MAX};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                v[i * N + 2 * b + j] = big[b];
    tg_tensor *m = tg_from_f64(2, (int64_t[]){N, N}, v);
    free(v);
    tg_report *r = tg_report_new("range");
    ck_assert_int_eq(tg_report_heatmap(r, "range", m, NULL, NULL, NULL), 1);
    const char *path = scratch_path("range.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();
    char *page = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(page, "\"rows\":250,\"cols\":250"));
    double got[4];
    ck_assert_int_eq(json_numbers(page, "v", got, 4), 4);
    for (int b = 0; b < 3; b++)
        ck_assert_msg(isfinite(got[b]) &&
                          fabs(got[b] - big[b]) <= 1e-8 * big[b],
                      "block %d: %g, not %g", b, got[b], big[b]);
    ck_assert(got[3] == 0);
    free(page);
}
END_TEST

/* The temperature slider's bounds are numbers even where the spread
 * overflows: scores spanning +-DBL_MAX and a temperature of 1e308 give
 * max = DBL_MAX, never "inf" in the attribute. */
START_TEST(attention_slider_bound_is_finite)
{
    tg_scope_begin();
    double s[4] = {-DBL_MAX, DBL_MAX, 0, 1};
    tg_tensor *m = tg_from_f64(2, (int64_t[]){2, 2}, s);
    tg_report *r = tg_report_new("slider");
    ck_assert_int_eq(tg_report_attention(r, "spread", m, NULL, NULL, 1), 1);
    ck_assert_int_eq(tg_report_attention(r, "hot", m, NULL, NULL, 1e308), 2);
    const char *path = scratch_path("slider.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();
    char *page = slurp(path, NULL);
    ck_assert_ptr_null(strstr(page, "inf\"\""));
    ck_assert_int_eq(count(page, "class=\"tg-temperature\""), 2);
    for (const char *p = page; (p = strstr(p, "class=\"tg-temperature\""));
         p++) {
        const char *mx = strstr(p, " max=\"");
        ck_assert_ptr_nonnull(mx);
        char *end;
        double hi = strtod(mx + 6, &end);
        ck_assert_msg(end != mx + 6 && *end == '"' && hi == DBL_MAX,
                      "max=%.30s", mx + 6);
    }
    free(page);
}
END_TEST

/* A line chart of 200000 points is thinned to at most 20000 (each run's
 * lowest and highest y: the one spike survives), with a note naming the
 * series; the page stays small (unthinned it is about 10 MB). A short
 * series beside it is kept whole. */
START_TEST(long_series_is_thinned_with_a_note)
{
    enum { N = 200000 };
    double *y = malloc(sizeof *y * N);
    ck_assert_ptr_nonnull(y);
    for (int k = 0; k < N; k++)
        y[k] = 1 + sin(k * 1e-3);
    y[123457] = 1000; /* the spike */
    double short_y[3] = {1, 2, 3};
    tg_series s[2] = {{.y = y, .n = N, .label = "loss<"},
                      {.y = short_y, .n = 3, .label = "three"}};
    tg_report *r = tg_report_new("long");
    ck_assert_int_eq(tg_report_lines(r, "long", s, 2, "step", "loss", false),
                     1);
    const char *path = scratch_path("long.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    long len;
    char *page = slurp(path, &len);
    ck_assert_msg(len < 3000000, "page of %ld bytes", len);
    ck_assert_msg(strstr(page, "<p class=\"tg-note\">Series 1 (loss&lt;) "
                               "thinned from 200000 to "),
                  "no note");
    ck_assert_int_eq(count(page, "thinned from"), 1);
    double *got = malloc(sizeof *got * N);
    int64_t m = json_numbers(page, "y", got, N);
    ck_assert_msg(m > 1000 && m <= 20002, "%lld points kept", (long long)m);
    double top = 0;
    for (int64_t k = 0; k < m; k++)
        top = fmax(top, got[k]);
    ck_assert(top == 1000);
    /* the kept x are indices in order, each y its own */
    double *xs = malloc(sizeof *xs * N);
    ck_assert_int_eq(json_numbers(page, "x", xs, N), m);
    for (int64_t k = 0; k < m; k++) {
        ck_assert(k == 0 || xs[k] > xs[k - 1]);
        ck_assert(got[k] == y[(int64_t)xs[k]]);
    }
    /* the second series whole */
    const char *second = strstr(page, "{\"label\":\"three\"");
    ck_assert_ptr_nonnull(second);
    ck_assert_int_eq(json_numbers(second, "y", got, 10), 3);
    free(xs);
    free(got);
    free(page);
    free(y);
}
END_TEST

/* ---- escaping ------------------------------------------------------------ */

START_TEST(labels_and_titles_are_escaped)
{
    static const char evil[] = "<b>&\"'</script>";
    tg_scope_begin();
    tg_tensor *m = tg_ones(TG_FLOAT32, TG_SHAPE(2, 2));
    const char *labels[2] = {evil, "ok"};
    const char *cells[2] = {evil, evil};
    tg_report *r = tg_report_new(evil);
    ck_assert_int_eq(tg_report_text(r, evil, evil), 1);
    ck_assert_int_eq(tg_report_pre(r, evil, evil), 2);
    ck_assert_int_eq(tg_report_table(r, evil, 1, 2, cells), 3);
    ck_assert_int_eq(tg_report_heatmap(r, evil, m, NULL, labels, labels), 4);
    ck_assert_int_eq(tg_report_averaging(r, evil, m, labels), 5);
    ck_assert_int_eq(tg_report_attention(r, evil, m, NULL, labels, 1), 6);
    double y[2] = {1, 2};
    tg_series s = {evil, NULL, y, 2};
    ck_assert_int_eq(tg_report_lines(r, evil, &s, 1, evil, evil, false), 7);
    const char *path = scratch_path("evil.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    char *page = slurp(path, NULL);
    ck_assert_ptr_null(strstr(page, evil));
    /* "<b>" only inside gnuplot's JavaScript strings (its tick labels and
     * keys, drawn as text on the canvas), with "</" made "<\/" */
    ck_assert_int_eq(count(page, "<b>"),
                     count(page, "\"<b>&\\\"'<\\/script>\")"));
    ck_assert_ptr_nonnull(
        strstr(page, "<h1>&lt;b&gt;&amp;&quot;&#39;&lt;/script&gt;</h1>"));
    /* in the JSON: no "</" and no '<' at all */
    ck_assert_ptr_nonnull(
        strstr(page, "\"\\u003cb\\u003e\\u0026\\\"'\\u003c/script\\u003e\""));
    /* every "</script>" closes a script element */
    ck_assert_int_eq(count(page, "</script>"), count(page, "<script"));
    free(page);
    tg_scope_end();
}
END_TEST

/* gnuplot draws labels as given: tick labels, key and axis titles keep
 * < > & " ' \ and gnuplot's markup characters (the canvas terminal is
 * noenhanced; before, "a<b" showed as "a b", "&" cut the text and a label
 * "'" alone was lost), written as JavaScript strings ("<!--" and "</" made
 * inert). */
START_TEST(gnuplot_labels_keep_their_characters)
{
    if (getenv("TG_NO_GNUPLOT") || access("/usr/bin/gnuplot", X_OK) != 0)
        return;
    tg_scope_begin();
    tg_tensor *m = tg_ones(TG_FLOAT32, TG_SHAPE(2, 2));
    const char *labels[2] = {"a<b", "x&y \"q\" 'z' \\ ^_@~{}"};
    tg_report *r = tg_report_new("ticks");
    const char *cols[2] = {"'", "\\"}; /* a quote alone was lost */
    ck_assert_int_eq(tg_report_heatmap(r, "ticks", m, NULL, labels, cols), 1);
    double y[2] = {1, 2};
    tg_series s = {"<!--<script>", NULL, y, 2};
    ck_assert_int_eq(tg_report_lines(r, "key", &s, 1, "t<1", "l&2", false), 2);
    const char *path = scratch_path("ticks.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();
    char *page = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(page, "tg-gnuplot\""));
    ck_assert_ptr_nonnull(strstr(page, ",\"a<b\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"x&y \\\"q\\\" 'z' \\\\ ^_@~{}\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"t<1\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"'\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"\\\\\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"l&2\");"));
    ck_assert_ptr_nonnull(strstr(page, ",\"<\\!--<script>\");"));
    ck_assert_ptr_null(strstr(page, "<!--"));
    free(page);
}
END_TEST

/* ---- the atomic write ------------------------------------------------------ */

/* No ".name.XXXXXX" temporary left in the scratch directory. */
static void assert_no_temporary(void)
{
    DIR *d = opendir(scratch_dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(e->d_name[0] != '.' || !strcmp(e->d_name, ".") ||
                          !strcmp(e->d_name, ".."),
                      "temporary left: %s", e->d_name);
    closedir(d);
}

/* A file size limit makes the write fail midway (SIGXFSZ ignored, so the
 * process lives): the old page is byte for byte as it was, no temporary is
 * left. Limit and handler restored: with CK_FORK=no this is the runner. */
START_TEST(failed_write_leaves_the_old_page)
{
    const char *path = scratch_path("old.html");
    FILE *f = fopen(path, "w");
    fputs("the old page\n", f);
    fclose(f);
    tg_report *r = tg_report_new("new");
    char big[20000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(tg_report_pre(r, "big", big), 1);
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = tg_report_write(r, path);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "report_write"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), path));
    char *text = slurp(path, NULL);
    ck_assert_str_eq(text, "the old page\n");
    free(text);
    assert_no_temporary();
    /* and a write that succeeds replaces it */
    ck_assert_int_eq(tg_report_write(r, path), 0);
    text = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(text, big));
    free(text);
    assert_no_temporary();
    tg_report_free(r);
}
END_TEST

/* ---- without gnuplot or Graphviz ----------------------------------------- */

static void unset_switches(void)
{
    unsetenv("TG_NO_GNUPLOT");
    unsetenv("TG_NO_DOT");
}

START_TEST(page_says_what_is_missing)
{
    setenv("TG_NO_GNUPLOT", "1", 1);
    setenv("TG_NO_DOT", "1", 1);
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_sum_all(tg_scale(x, 2));
    ck_assert_ptr_nonnull(y);
    tg_report *r = tg_report_new("missing");
    double v[2] = {1, 2};
    tg_series s = {"a", NULL, v, 2};
    ck_assert_int_eq(tg_report_heatmap(r, "h", x, NULL, NULL, NULL), 1);
    ck_assert_int_eq(tg_report_lines(r, "l", &s, 1, NULL, NULL, false), 2);
    ck_assert_int_eq(tg_report_tape(r, "tape"), 3);
    const char *path = scratch_path("missing.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();
    unset_switches();
    char *page = slurp(path, NULL);
    for (int i = 1; i <= 3; i++) {
        char *sec = section_of(page, i);
        ck_assert_int_eq(count(sec, "<p class=\"tg-missing\">"), 1);
        ck_assert_ptr_nonnull(
            strstr(sec, i < 3 ? "TG_NO_GNUPLOT" : "TG_NO_DOT"));
        ck_assert_ptr_null(strstr(sec, "<canvas"));
        ck_assert_ptr_nonnull(strstr(sec, "class=\"tg-data\""));
        free(sec);
    }
    ck_assert_ptr_nonnull(strstr(page, "\"v\":[1,1,1,1,1,1]"));
    ck_assert_ptr_null(strstr(page, "gnuplot_common"));
    free(page);
}
END_TEST

/* ---- the tape: |grad| and the exact zeros under the mask ------------------ */

/* Backward through masked_fill(-inf) and softmax with the record kept: the
 * masked_fill entry's line shows as many zeros as its output's gradient
 * holds (counted here from the retained gradient), tg_tape_print and
 * tg_tape_dot both; the page's tape has a node per entry and per named
 * leaf, the names and the zeros in their titles. */
START_TEST(tape_shows_gradient_zeros)
{
    tg_scope_begin();
    bool was = tg_tape_keep_record(true);
    tg_rng g;
    tg_rng_seed(&g, 5);
    tg_tensor *x = tg_randn(&g, TG_FLOAT64, TG_SHAPE(8, 8));
    tg_set_requires_grad(x, true);
    tg_set_name(x, "scores<&>");
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(8, 8)), 0), 0);
    tg_tensor *masked = tg_masked_fill(x, future, -INFINITY);
    tg_set_name(masked, "masked");
    tg_retain_grad(masked);
    tg_tensor *p = tg_softmax(masked, -1);
    tg_tensor *w = tg_randn(&g, TG_FLOAT64, TG_SHAPE(8, 8));
    tg_tensor *loss = tg_sum_all(tg_mul(p, w));
    ck_assert_int_eq(tg_backward(loss), 0);
    double gm[64];
    tg_copy_out(tg_grad(masked), TG_FLOAT64, gm);
    int zeros = 0;
    for (int i = 0; i < 64; i++)
        zeros += gm[i] == 0;
    ck_assert_int_ge(zeros, 28); /* at least every masked entry */
    char want[64];
    snprintf(want, sizeof want, "zeros %d/64", zeros);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tg_tape_print(f);
    fclose(f);
    const char *line = strstr(text, "masked_fill(");
    ck_assert_ptr_nonnull(line);
    ck_assert_msg(strstr(line, want) && strstr(line, want) < strchr(line, '\n'),
                  "no '%s' on: %s", want, text);
    free(text);

    tg_report *r = tg_report_new("tape");
    ck_assert_int_eq(tg_report_tape(r, "the tape"), 1);
    const char *path = scratch_path("tape.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_tape_keep_record(was);
    tg_scope_end();

    char *page = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(page, "\"zeros\":"));
    ck_assert_ptr_nonnull(strstr(page, "class=\"tg-zeros\""));
    ck_assert_ptr_nonnull(strstr(page, want));
    if (!getenv("TG_NO_DOT") && access("/usr/bin/dot", X_OK) == 0) {
        /* entries: masked_fill, softmax, mul, sum; leaves: x, w */
        ck_assert_int_ge(count(page, "class=\"node\""), 6);
        ck_assert_ptr_nonnull(strstr(page, "<title>scores&lt;&amp;&gt;"));
        ck_assert_ptr_nonnull(strstr(page, "<title>#1 masked_fill\nmasked"));
        ck_assert_ptr_nonnull(strstr(page, "xlink:title="));
    }
    free(page);
}
END_TEST

static tg_tensor *scale_at_odd_path(tg_tensor *x);

/* A name with a quote and a backslash cannot end a DOT string: tg_tape_dot
 * escapes it, and the call site's path too (scale_at_odd_path's file is
 * dir"q\uote.c), and Graphviz draws the tape (no tg-missing line). */
START_TEST(tape_names_are_escaped_for_dot)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2));
    tg_set_requires_grad(x, true);
    tg_set_name(x, "a\"b\\");
    tg_tensor *y = scale_at_odd_path(x);
    tg_set_name(y, "y\"");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tg_tape_dot(f);
    fclose(f);
    ck_assert_msg(strstr(text, "label=\"a\\\"b\\\\\\n(2,)\\nall 1\""), "%s",
                  text);
    ck_assert_msg(strstr(text, "\\ny\\\" (2,)"), "%s", text);
    ck_assert_msg(strstr(text, "\\ndir\\\"q\\\\uote.c:1\""), "%s", text);
    free(text);
    tg_report *r = tg_report_new("names");
    ck_assert_int_eq(tg_report_tape(r, "tape"), 1);
    const char *path = scratch_path("names.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_scope_end();
    char *page = slurp(path, NULL);
    if (access("/usr/bin/dot", X_OK) == 0) {
        ck_assert_ptr_null(strstr(page, "<p class=\"tg-missing\">"));
        ck_assert_ptr_nonnull(
            strstr(page, "<title>a&quot;b\\\n(2,)\nall 1</title>"));
    }
    free(page);
}
END_TEST

/* The JSON object of node id in the page's data, in a new string. */
static char *node_json(const char *page, const char *id)
{
    char key[64];
    snprintf(key, sizeof key, "{\"id\":\"%s\",", id);
    const char *start = strstr(page, key);
    ck_assert_msg(start != NULL, "no node %s in the data", id);
    const char *end = strchr(start, '}');
    ck_assert_ptr_nonnull(end);
    char *s = strndup(start, (size_t)(end - start) + 1);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* Names cannot fake the page's statistics or hide a node: an output named
 * "zeros 5/6 |grad| 99" keeps its own |grad| (sqrt 6, no zeros), a leaf
 * named "|grad| 7" gets its own (dL/dw = x = 1: sqrt 6), and a leaf named
 * "q->k" (a "->" inside a node's line) is still one of the nodes. */
START_TEST(tape_names_cannot_fake_statistics)
{
    tg_scope_begin();
    bool was = tg_tape_keep_record(true);
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 2);
    tg_set_requires_grad(x, true);
    tg_set_requires_grad(w, true);
    tg_set_name(x, "q->k");
    tg_set_name(w, "|grad| 7");
    tg_tensor *y = tg_relu(tg_mul(x, w));
    tg_set_name(y, "zeros 5/6 |grad| 99");
    tg_retain_grad(y);
    ck_assert_int_eq(tg_backward(tg_sum_all(y)), 0);
    double gy[6], norm = 0;
    tg_copy_out(tg_grad(y), TG_FLOAT64, gy);
    for (int i = 0; i < 6; i++)
        norm += gy[i] * gy[i];
    norm = sqrt(norm);
    tg_report *r = tg_report_new("names");
    ck_assert_int_eq(tg_report_tape(r, "tape"), 1);
    const char *path = scratch_path("fake.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_tape_keep_record(was);
    tg_scope_end();

    char *page = slurp(path, NULL);
    /* entries mul, relu, sum; leaves x, w: one node each */
    ck_assert_int_eq(count(page, "{\"id\":\"e"), 3);
    ck_assert_int_eq(count(page, "{\"id\":\"t"), 2);
    char *t1 = node_json(page, "t1"), *t2 = node_json(page, "t2"),
         *e2 = node_json(page, "e2");
    ck_assert_msg(strstr(t1, "\"text\":\"q-\\u003ek\\u000a(2,3)\\u000a"), "%s",
                  t1);
    const char *g2 = strstr(t2, "\"grad\":");
    ck_assert_msg(g2 && fabs(strtod(g2 + 7, NULL) - sqrt(6)) < 0.005, "%s", t2);
    ck_assert_msg(strstr(e2, "zeros 5/6 |grad| 99"), "%s", e2);
    const char *g = strstr(e2, "\"grad\":");
    ck_assert_msg(g != NULL, "%s", e2);
    double shown = strtod(g + 7, NULL);
    ck_assert_msg(fabs(shown - norm) < 0.005 * norm, "|grad| %g, not %g", shown,
                  norm);
    ck_assert_msg(!strstr(e2, "\"zeros\":"), "%s", e2);
    ck_assert_ptr_null(strstr(page, "class=\"tg-zeros\""));
    if (!getenv("TG_NO_DOT") && access("/usr/bin/dot", X_OK) == 0)
        ck_assert_ptr_nonnull(strstr(page, "<title>q-&gt;k\n(2,3)\n"));
    free(t1);
    free(t2);
    free(e2);
    free(page);
}
END_TEST

/* The tape a student can read: after backward each leaf carries the
 * gradient it received and each entry its values; a mask an op reads is a
 * node of its own with a dashed edge into the op; a legend says what the
 * shapes mean. w (3,3) -> masked_fill(w, future, -inf) -> softmax -> the
 * loss sum(p * c): w's gradient is exactly 0 at the 3 masked positions and
 * in row 0, whose single choice gives dx = p (dy - p dy) = 0 there. */
START_TEST(tape_leaves_masks_and_legend)
{
    tg_scope_begin();
    bool was = tg_tape_keep_record(true);
    const double wv[9] = {0.1, -0.4, 0.3, 0.7, 0.2, -0.5, 0.9, -0.8, 0.6};
    const double cv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), wv);
    tg_tensor *c = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), cv);
    tg_set_requires_grad(w, true);
    tg_set_name(w, "w");
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(3, 3)), 0), 0);
    tg_set_name(future, "future");
    tg_tensor *p = tg_softmax(tg_masked_fill(w, future, -INFINITY), -1);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(p, c))), 0);
    double g[9], norm = 0;
    int zeros = 0;
    tg_copy_out(tg_grad(w), TG_FLOAT64, g);
    for (int i = 0; i < 9; i++) {
        norm += g[i] * g[i];
        zeros += g[i] == 0;
    }
    ck_assert_int_eq(zeros, 4);
    tg_report *r = tg_report_new("leaves");
    ck_assert_int_eq(tg_report_tape(r, "tape"), 1);
    const char *path = scratch_path("leaves.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    tg_tape_keep_record(was);
    tg_scope_end();
    char *page = slurp(path, NULL);
    /* w: its values and its gradient, |grad| and zeros */
    char *t1 = node_json(page, "t1");
    ck_assert_msg(strstr(t1, "\"text\":\"w\\u000a(3,3)\\u000amin -0.8 mean "
                             "0.122 max 0.9"),
                  "%s", t1);
    const char *gs = strstr(t1, "\"grad\":");
    ck_assert_msg(gs && fabs(strtod(gs + 7, NULL) - sqrt(norm)) <
                            0.005 * sqrt(norm), /* %.3g */
                  "%s: |grad| %g", t1, sqrt(norm));
    ck_assert_msg(strstr(t1, "\"zeros\":4,\"numel\":9"), "%s", t1);
    /* the mask: its own node (3 of 9 masked), drawn into masked_fill (e1) */
    char *m = node_json(page, "m1");
    ck_assert_msg(strstr(m, "future\\u000a(3,3)\\u000atrue 3/9"), "%s", m);
    ck_assert_ptr_nonnull(
        strstr(page, "m1 -&gt; e1 [penwidth=1.00, color=&quot;#999999&quot;, "
                     "style=dashed, label=&quot;mask&quot;]"));
    /* masked_fill's output: its -inf counted */
    char *e2 = node_json(page, "e1");
    ck_assert_msg(strstr(e2, "-inf 3/9"), "%s", e2);
    /* the legend */
    ck_assert_ptr_nonnull(strstr(page, "class=\"tg-legend tg-tape-legend\""));
    ck_assert_ptr_nonnull(strstr(page, "<dt>dashed ellipse</dt>"));
    ck_assert_ptr_nonnull(strstr(page, "<dt>double blue border</dt>"));
    free(e2);
    free(m);
    free(t1);
    free(page);
}
END_TEST

/* An empty tape gives a section that says so. */
START_TEST(empty_tape_says_so)
{
    tg_report *r = tg_report_new("empty");
    ck_assert_int_eq(tg_report_tape(r, NULL), 1);
    const char *path = scratch_path("empty.html");
    ck_assert_int_eq(tg_report_write(r, path), 0);
    tg_report_free(r);
    char *page = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(page, "The tape is empty."));
    free(page);
}
END_TEST

/* ---- out of memory ------------------------------------------------------- */

/* A page of every kind (gnuplot and dot off: the same allocations every
 * run) written to path. 0, or -1 with the error set. */
static int every_kind(const char *path)
{
    tg_scope_begin();
    const double v[4] = {1, 0.5, NAN, 0}; /* a 0: the hatching too */
    tg_tensor *m = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), v);
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2, 2));
    if (x)
        tg_set_requires_grad(x, true);
    tg_tensor *y = x ? tg_scale(x, 2) : NULL;
    const tg_series line = {.label = "loss", .y = v, .n = 2};
    const char *cells[2] = {"a", "b"};
    const tg_heatmap_opts div = {.scale = TG_SCALE_DIVERGING};
    tg_report *r = tg_report_new("oom");
    int rc = r && m && y && tg_report_text(r, "t", "a\n\nb") > 0 &&
                     tg_report_pre(r, "p", "x") > 0 &&
                     tg_report_table(r, "c", 1, 2, cells) > 0 &&
                     tg_report_heatmap(r, "h", m, NULL, cells, cells) > 0 &&
                     tg_report_heatmap_with(r, "g", m, NULL, cells, cells,
                                            &div) > 0 &&
                     tg_report_lines(r, "l", &line, 1, "x", "y", false) > 0 &&
                     tg_report_tape(r, "tape") > 0 &&
                     tg_report_averaging(r, "a", m, NULL) > 0 &&
                     tg_report_attention(r, "s", m, NULL, cells, 1) > 0 &&
                     tg_report_forward_strip(r, "f", x, x, m, cells, 1) > 0
                 ? tg_report_write(r, path)
                 : -1;
    tg_report_free(r);
    tg_scope_end();
    return rc;
}

/* Each allocation failing in turn: a clean "out of memory" error or a page
 * written, never a crash; no leak (the audit, valgrind), no temporary. */
START_TEST(out_of_memory_fails_cleanly)
{
    setenv("TG_NO_GNUPLOT", "1", 1);
    setenv("TG_NO_DOT", "1", 1);
    const char *path = scratch_path("oom.html");
    ck_assert_int_eq(every_kind(path), 0); /* warm up */
    tg__alloc_fail_at(0, false);
    int rc = every_kind(path);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_msg(rc == 0, "the reference page failed: %s", tg_last_error());
    ck_assert_int_gt(n_allocs, 20);
    char first_bad[512] = "";
    for (int64_t k = 1; k <= n_allocs; k++) {
        tg_clear_error();
        tg__alloc_fail_at(k, false);
        int rk = every_kind(path);
        tg__alloc_fail_at(-1, false);
        if (rk != 0 && !strstr(tg_last_error(), "out of memory") &&
            !first_bad[0])
            snprintf(first_bad, sizeof first_bad,
                     "allocation %lld: rc %d, '%s'", (long long)k, rk,
                     tg_last_error());
        ck_assert_int_le(tg_live_tensors(), 0);
    }
    unset_switches();
    ck_assert_msg(!first_bad[0], "%s", first_bad);
    assert_no_temporary();
}
END_TEST

Suite *report_suite(void)
{
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("pages");
    tcase_add_unchecked_fixture(tc, scratch_setup, scratch_teardown);
    tcase_add_checked_fixture(tc, NULL, unset_switches);
    tcase_set_timeout(tc, 120); /* gnuplot and dot run; slower under valgrind */
    tcase_add_test(tc, page_has_every_kind_in_order);
    tcase_add_test(tc, tape_leaves_masks_and_legend);
    tcase_add_test(tc, failed_call_adds_nothing);
    tcase_add_test(tc, heatmap_data_are_the_tensors_values);
    tcase_add_test(tc, forward_strip_data_are_the_head);
    tcase_add_test(tc, heatmap_scales_are_said_not_guessed);
    tcase_add_test(tc, large_matrix_is_downsampled_with_a_note);
    tcase_add_test(tc, float64_block_means_keep_their_range);
    tcase_add_test(tc, attention_slider_bound_is_finite);
    tcase_add_test(tc, long_series_is_thinned_with_a_note);
    tcase_add_test(tc, labels_and_titles_are_escaped);
    tcase_add_test(tc, gnuplot_labels_keep_their_characters);
    tcase_add_test(tc, failed_write_leaves_the_old_page);
    tcase_add_test(tc, page_says_what_is_missing);
    tcase_add_test(tc, tape_shows_gradient_zeros);
    tcase_add_test(tc, tape_names_are_escaped_for_dot);
    tcase_add_test(tc, tape_names_cannot_fake_statistics);
    tcase_add_test(tc, empty_tape_says_so);
    tcase_add_test(tc, out_of_memory_fails_cleanly);
    suite_add_tcase(s, tc);
    return s;
}

/* Last in the file: from here on __FILE__ holds a quote and a backslash,
 * the call site tape_names_are_escaped_for_dot puts on the tape. */
#line 1 "dir\"q\\uote.c"
static tg_tensor *scale_at_odd_path(tg_tensor *x) { return tg_scale(x, 3); }
