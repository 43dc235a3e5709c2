/* my_softmax_page.c: the page of examples/my_softmax: what it printed,
 * the check's result, the wrong entry's fields, dL/dscores as a heatmap
 * (the masked cells above the diagonal, exactly 0 when the backward is
 * right) and where float32 loses precision. */
#include <tapegrad.h>
#include <tapegrad_report.h>

#include "my_softmax.h"
#include "page_echo.h"

#include <stdio.h>
#include <stdlib.h>

enum { FIELDS = 8 };

/* A table of two columns, a field and its value a row, under the header
 * "field", "value". 0 or -1. */
static int field_table(tg_report *rep, const char *caption, int n,
                       const char *const *fields, char (*values)[ENTRY_CELL])
{
    const char *cells[2 * (FIELDS + 1)] = {"field", "value"};
    for (int i = 0; i < n; i++) {
        cells[2 * (i + 1)] = fields[i];
        cells[2 * (i + 1) + 1] = values[i];
    }
    return tg_report_table(rep, caption, n + 1, 2, cells) > 0 ? 0 : -1;
}

/* The check's figures. */
static int check_table(tg_report *rep, const run *r)
{
    static const char *const fields[] = {"result",
                                         "elements checked",
                                         "max abs err",
                                         "max rel err",
                                         "entries checked on their own",
                                         "of which wrong"};
    char v[FIELDS][ENTRY_CELL];
    const tg_gradcheck_report *g = &r->rep;
    snprintf(v[0], ENTRY_CELL, "%s", r->check_rc ? "FAIL" : "PASS");
    snprintf(v[1], ENTRY_CELL, "%lld", (long long)g->n_checked);
    snprintf(v[2], ENTRY_CELL, "%.1e", g->max_abs_err);
    snprintf(v[3], ENTRY_CELL, "%.1e", g->max_rel_err);
    snprintf(v[4], ENTRY_CELL, "%d", g->n_entries_checked);
    snprintf(v[5], ENTRY_CELL, "%d", g->n_entries_wrong);
    return field_table(rep,
                       "tg_gradcheck of the head's out over x, W_q, W_k, W_v "
                       "(float64)",
                       6, fields, v);
}

/* The first wrong entry of a failed check, its fields. */
static int entry_table(tg_report *rep, const run *r)
{
    const char *fields[ENTRY_FIELDS];
    char v[ENTRY_FIELDS][ENTRY_CELL];
    int n = entry_fields(r, fields, v);
    return field_table(rep,
                       "The first wrong entry, checked on its own "
                       "(tg_gradcheck_report.entry)",
                       n, fields, v);
}

/* dL/dscores (T, T), its rows and columns numbered, on the diverging scale
 * (a gradient is signed: 0 the neutral centre). A masked cell whose
 * gradient is exactly 0, as it must be, is drawn as masked (grey); one
 * given a gradient (--bug no-mask) keeps its colour, so it stands out
 * above the diagonal; any other exact 0 is hatched and counted. */
static int grad_heatmap(tg_report *rep, const run *r)
{
    char text[T][8];
    const char *labels[T];
    for (int t = 0; t < T; t++) {
        snprintf(text[t], sizeof text[t], "%d", t);
        labels[t] = text[t];
    }
    char title[320];
    snprintf(title, sizeof title,
             "dL/dscores from my_softmax's backward, L = sum(out * u): grey, "
             "the masked cells (above the diagonal) whose gradient is exactly "
             "0, %d of %d; a coloured cell above the diagonal is a masked "
             "cell given a gradient",
             r->masked_zero, r->n_masked);
    tg_scope_begin();
    tg_tensor *zero_masked =
        tg_logical_and(r->future, tg_eq_scalar(r->dscores, 0));
    const tg_heatmap_opts o = {.scale = TG_SCALE_DIVERGING,
                               .xlabel = "key position s",
                               .ylabel = "query position t",
                               .cblabel = "dL/dscores"};
    int rc = tg_report_heatmap_with(rep, title, r->dscores, zero_masked, labels,
                                    labels, &o) > 0
                 ? 0
                 : -1;
    tg_scope_end();
    return rc;
}

/* tg_precision_report as a table, an entry a row numbered from 1 as
 * tg_precision_print numbers them, the worst marked. */
static int precision_table(tg_report *rep, const tg_precision_report *p)
{
    enum { COLS = 9, W = 64 };
    static const char *const head[COLS] = {
        "#",         "op",           "name",     "shape",      "dtype",
        "value err", "value growth", "grad err", "grad growth"};
    int n = p->n_entries;
    const char **cells = malloc(sizeof *cells * (size_t)(n + 1) * COLS);
    char(*text)[COLS][W] = malloc(sizeof *text * (size_t)(n ? n : 1));
    int rc = cells && text ? 0 : -1;
    for (int j = 0; rc == 0 && j < COLS; j++)
        cells[j] = head[j];
    for (int i = 0; rc == 0 && i < n; i++) {
        const tg_precision_entry *e = &p->entries[i];
        snprintf(text[i][0], W, "%d", i + 1);
        snprintf(text[i][1], W, "%s", e->op);
        snprintf(text[i][2], W, "%s", e->name);
        snprintf(text[i][3], W, "%s", e->shape);
        snprintf(text[i][4], W, "%s", e->float32 ? "float32" : "float64");
        snprintf(text[i][5], W, "%.2e", e->value_err);
        snprintf(text[i][6], W, "%.3g%s", e->value_growth,
                 i == p->worst_value ? " (worst)" : "");
        snprintf(text[i][7], W, "%.2e", e->grad_err);
        snprintf(text[i][8], W, "%.3g%s", e->grad_growth,
                 i == p->worst_grad ? " (worst)" : "");
        for (int j = 0; j < COLS; j++)
            cells[(i + 1) * COLS + j] = text[i][j];
    }
    if (rc == 0)
        rc = tg_report_table(rep,
                             "Where float32 loses precision: the head in "
                             "float32 against its float64 replay "
                             "(tg_precision_check)",
                             n + 1, COLS, cells) > 0
                 ? 0
                 : -1;
    free(cells);
    free(text);
    return rc;
}

int write_page(const run *r, const char *path)
{
    tg_report *rep = tg_report_new("my_softmax: your own op, checked");
    if (!rep)
        return -1;
    int rc =
        tg_report_text(
            rep, "What this is",
            "Causal masked softmax written as a custom op, my_softmax, with "
            "its backward by hand: ds = p * (dp - sum(p * dp)), softmax's "
            "Jacobian diag(p) - p p^T applied to the upstream gradient dp, "
            "exactly 0 under the mask. tg_gradcheck compares the lesson's "
            "head through it with central differences; when a backward is "
            "wrong, the report names the op, its call site, the element and "
            "both values.") > 0 &&
                tg_report_pre(rep, "What my_softmax printed",
                              page_echo_text()) > 0
            ? check_table(rep, r)
            : -1;
    if (rc == 0 && r->rep.entry.found)
        rc = entry_table(rep, r);
    if (rc == 0)
        rc = grad_heatmap(rep, r);
    if (rc == 0)
        rc = precision_table(rep, &r->prec);
    return page_write(rep, rc, path);
}
