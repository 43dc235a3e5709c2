/* The backward stepper's exact zeros, by cause.
 *
 * An element c of an entry's upstream gradient dL/d(out) is exactly 0 for
 * one of three causes, decided once per element, so that they partition
 * the zeros (every zero gets exactly one):
 *
 *   masked       a mask cut it off: masked_fill's or where's output does
 *                not read c, or c is a -inf input of softmax (p_c = 0, so
 *                dx_c = p_c (...) = 0) or a future score of the fused
 *                causal attention_softmax; or every gradient reaching c
 *                came from such cells only;
 *   one-choice   a softmax row with one unmasked element: p = 1 there, so
 *                dx = p (dy - sum(p dy)) = dy - dy = 0 for any dy; or every
 *                gradient reaching c came from such cells or masked ones,
 *                one of them one-choice;
 *   not read     the rest: the loss does not read c (a select or slice
 *                passes it nothing, or the cells it reaches are themselves
 *                not read, as the rows before the last token's when the
 *                loss reads only that token), or an op other than those
 *                above cuts it (its derivative is 0 there: relu below 0,
 *                a product with 0); the page says "not read by the loss,
 *                or cut by an op".
 *
 * A zero an entry makes itself (its Jacobian's column at c is 0: the mask,
 * a -inf input, a one-choice row) takes that entry's cause, whatever
 * reaches it (a masked cell in a row the loss does not read is "masked").
 * A zero it passes on takes the causes it reaches: a cell reaching both
 * masked and unread cells is "not read", the weakest explanation winning
 * (masked < one-choice < not read), as across an entry's consumers. A cell
 * whose gradient is a sum of nonzero terms that cancel exactly (none on
 * the lesson's tapes) falls in the residue, "not read".
 *
 * The stepper walks from the loss down; entry k's consumers come before it,
 * and each says, for each zero of what it passed, why (tg__bw_note), into
 * agg[k]; the cause of a zero of dy[k] is the largest they said
 * (tg__bw_causes). Whether a consumer's zero at c comes from the entry
 * itself or from its upstream zeros is read off its Jacobian J by probes:
 * J^T w over random positive weights w (the sign pattern of J cannot cancel
 * them but by chance) is 0 at c when the entry does not read c at all;
 * else J^T (w on dy's cells of one cause) says which causes c reaches. */
#include "plot/report_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t tg__bw_index(const bwalk *w, const tg_tensor *t)
{
    for (int64_t k = 0; t && k < w->n; k++)
        if (w->outs[k] == t)
            return k;
    return -1;
}

void tg__bw_causes(bwalk *w, int64_t k, int64_t counts[4])
{
    int64_t m = tg_numel(w->outs[k]);
    memset(counts, 0, 4 * sizeof *counts);
    for (int64_t c = 0; c < m; c++) {
        unsigned char a = w->agg[k][c], z = BW_LIVE;
        if (w->dy[k][c] == 0)
            z = (a & BW_FED) || !(a & 3) ? BW_NOT_READ : a & 3;
        w->zero[k][c] = z;
        counts[z]++;
    }
}

/* J^T v at every element of input i of entry k, v = w on dy[k]'s elements
 * whose cause is in `which` (a bit per cause; bit 4: every element), 0
 * elsewhere: into r (m elements). */
static bool probe(const bwalk *w, int64_t k, int i, unsigned which, double *r,
                  int64_t m)
{
    tg_tensor *out = w->outs[k];
    int64_t n = tg_numel(out);
    double *v = tg__malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v)
        return tg__error("report_backward: out of memory"), false;
    uint32_t s = w->seed;
    for (int64_t c = 0; c < n; c++) {
        s = s * 1664525u + 1013904223u; /* weights in [0.5, 1.5) */
        double u = 0.5 + (double)(s >> 8) / 16777216.0;
        bool on = (which & 16) || (which & (1u << w->zero[k][c]));
        v[c] = on ? u : 0;
    }
    tg_tensor *vt = tg_from_f64(tg_ndim(out), tg_shape(out), v);
    free(v);
    int rc = vt ? tg_grad_fn_check(out, vt, i, m, NULL, 1e-6, r, NULL) : -1;
    tg_release(vt);
    return rc == 0;
}

/* The cause of a zero at c that entry k does not read at all (J^T w = 0):
 * a mask; a softmax's -inf input, or else its one-choice row; the fused
 * causal attention_softmax's future (column j > row i, its mask), or else
 * its one-choice row (row 0); else not read. */
static unsigned char own_zero(const tg_grad_fn_info *info, const tg_tensor *out,
                              const double *x, int64_t c)
{
    const char *op = info->op;
    if (!strcmp(op, "masked_fill") || !strcmp(op, "where"))
        return BW_MASKED;
    if (!strcmp(op, "softmax"))
        return x && isinf(x[c]) && x[c] < 0 ? BW_MASKED : BW_ONE_CHOICE;
    if (!strcmp(op, "attention_softmax") && info->iparams[0]) {
        int64_t cols = tg_size(out, -1), rows = tg_size(out, -2);
        int64_t j = c % cols, i = c / cols % rows;
        return j > i ? BW_MASKED : BW_ONE_CHOICE;
    }
    return BW_NOT_READ;
}

/* The probes' answers, p[0] every element, p[1..3] the masked, one-choice
 * and unread ones, p[4] the live ones; each m elements. */
static bool probes(const bwalk *w, int64_t k, int i, double *p[5], int64_t m)
{
    static const unsigned which[5] = {16, 1u << BW_MASKED, 1u << BW_ONE_CHOICE,
                                      1u << BW_NOT_READ, 1u << BW_LIVE};
    for (int q = 0; q < 5; q++)
        if (!probe(w, k, i, which[q], p[q], m))
            return false;
    return true;
}

/* The input's values, for softmax's -inf test; NULL when not softmax. */
static double *input_values(const tg_tensor *out, int i, const char *op,
                            bool *ok)
{
    tg_tensor *x = NULL;
    *ok = true;
    if (strcmp(op, "softmax") || tg_grad_fn_input(out, i, &x) < 0 || !x)
        return NULL;
    double *v = tg__malloc(sizeof *v * (size_t)(tg_numel(x) ? tg_numel(x) : 1));
    if (!v || tg_copy_out(x, TG_FLOAT64, v) < 0) {
        if (!v)
            tg__error("report_backward: out of memory");
        free(v);
        *ok = false;
        return NULL;
    }
    return v;
}

bool tg__bw_note(bwalk *w, int64_t k, int i, int64_t t, const double *dx,
                 int64_t m)
{
    unsigned char *agg = w->agg[t];
    bool zeros = false;
    for (int64_t c = 0; c < m; c++) {
        if (dx[c] != 0)
            agg[c] |= BW_FED;
        zeros |= dx[c] == 0;
    }
    if (!zeros)
        return true;
    tg_grad_fn_info info;
    if (tg_grad_fn(w->outs[k], &info) < 0)
        return false;
    double *buf = tg__malloc(sizeof *buf * 5 * (size_t)m);
    if (!buf) {
        tg__error("report_backward: out of memory");
        return false;
    }
    bool ok = true;
    double *p[5] = {buf, buf + m, buf + 2 * m, buf + 3 * m, buf + 4 * m};
    double *x = input_values(w->outs[k], i, info.op, &ok);
    ok = ok && probes(w, k, i, p, m);
    for (int64_t c = 0; ok && c < m; c++) {
        if (dx[c] != 0)
            continue;
        unsigned char z = p[0][c] == 0   ? own_zero(&info, w->outs[k], x, c)
                          : p[4][c] != 0 ? BW_NOT_READ /* cancelled */
                          : p[3][c] != 0 ? BW_NOT_READ
                          : p[2][c] != 0 ? BW_ONE_CHOICE
                                         : BW_MASKED;
        if (z > (agg[c] & 3))
            agg[c] = (unsigned char)((agg[c] & BW_FED) | z);
    }
    free(buf);
    free(x);
    return ok;
}
