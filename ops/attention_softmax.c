/* The attention's softmax: its scale, causal mask and softmax as one op,
 *
 *     attn = softmax(masked(scale * scores), -1)                 (...,Tq,Tk)
 *
 * which is the lesson's three lines, one tape entry instead of three:
 *
 *     scores = scores / hs**0.5                                   tg_scale
 *     scores = np.where(np.tril(np.ones((T,T))) == 0, -np.inf, scores)
 *                                                           tg_masked_fill
 *     attn = softmax(scores, -1)                                 tg_softmax
 *
 * with the same bits forward and backward, but without the (T,T) mask and
 * the two (...,Tq,Tk) intermediates those ops make and the tape holds until
 * backward. (tg_attention, ops/attention.c, goes further and never holds the
 * scores whole, at the price of summing in another order.)
 *
 * The same bits by construction: each row of the output is first written as
 * tg_scale, then tg_masked_fill would write it, and then softmaxed in place
 * by tg_softmax's own kernel (ops/ops.h); backward runs tg_softmax's
 * backward kernel, then does to its result what masked_fill's and scale's
 * backwards do. With scale 1 and no mask the op is tg_softmax along -1.
 *
 * The mask: with causal, entry j of row i (rows counted along dim -2) is
 * masked when j > i. That is tril(ones(Tq,Tk)) == 0, aligned at the start
 * when Tq != Tk (query i sees keys 0..i), as tg_attention's; the batch dims
 * (...) are any number. */
#include "ops/ops.h"

#include <math.h>

static void attention_softmax_backward(tg_node *n, tg_tensor *dy);
static int attention_softmax_vjp(const tg_node *n, tg_tensor *dy,
                                 tg_tensor **dx);
static int attention_softmax_jvp(const tg_node *n, tg_tensor *const *t,
                                 tg_tensor **ty);
static tg_tensor *attention_softmax_replay(const tg_node *n,
                                           tg_tensor *const *in)
{
    return tg_attention_softmax(in[0], n->p[0], n->ip[0] != 0);
}

/* Parameters: p[0] the scale, ip[0] causal. Backward reads the output attn
 * as n->out. makes_neg_inf stays false: the -inf of the mask never reaches
 * the output (masked entries weigh 0), so anomaly mode checks it in full. */
static const tg_op attention_softmax_op = {.name = "attention_softmax",
                                           .backward =
                                               attention_softmax_backward,
                                           .reads_out = true,
                                           .replay = attention_softmax_replay,
                                           .vjp = attention_softmax_vjp,
                                           .jvp = attention_softmax_jvp};

/* One call over the rows along the last dim, of dst alone (in place) or of
 * src into dst. */
typedef struct mask_job {
    const tg_tensor *src;
    tg_tensor *dst;
    int64_t n;          /* row length, Tk */
    int64_t queries;    /* Tq: row r is query r % queries */
    int64_t srcs, dsts; /* strides along the row */
    double scale;
    bool causal;
} mask_job;

/* How many leading entries of row r (C order over the rows) the mask
 * leaves: keys 0..i of query i, or all of them without causal. */
static int64_t visible(const mask_job *j, int64_t r)
{
    if (!j->causal)
        return j->n;
    int64_t i = r % j->queries;
    return i + 1 < j->n ? i + 1 : j->n;
}

/* forward, per row i, the scores z the softmax then takes:
 *   z_j = scale * x_j    (rounded to T, as tg_scale)       j <= i
 *   z_j = -inf           (as tg_masked_fill)               j > i, causal
 *   attn = softmax(z)    (tg__softmax_rows, in place) */
static void scale_mask_run(void *job, int64_t start, const int64_t *off,
                           const int64_t *step, int64_t len)
{
    const mask_job *j = job;
    const int64_t n = j->n, xs = j->srcs, zs = j->dsts;
    TG_DISPATCH_FLOAT(j->dst->dtype, T, {
        const T sc = (T)j->scale;
        for (int64_t r = 0; r < len; r++) {
            const T *xr = TG_DATA(T, j->src) + off[0] + r * step[0];
            T *zr = TG_DATA(T, j->dst) + off[1] + r * step[1];
            const int64_t vis = visible(j, start + r);
            for (int64_t k = 0; k < vis; k++)
                zr[k * zs] = sc * xr[k * xs];
            for (int64_t k = vis; k < n; k++)
                zr[k * zs] = (T)-INFINITY;
        }
    });
}

/* Runs kernel over the rows of j->dst (and j->src, if any). */
static void mask_rows(mask_job *j, tg_run_fn kernel)
{
    const tg_tensor *dst = j->dst;
    const int d = dst->ndim - 1;
    j->n = dst->shape[d];
    j->queries = dst->shape[d - 1];
    j->dsts = dst->strides[d];
    tg_loop L;
    if (j->src) {
        j->srcs = j->src->strides[d];
        tg__rows_loop(&L, dst, d, 2, (const tg_tensor *const[]){j->src, dst});
    } else {
        tg__rows_loop(&L, dst, d, 1, (const tg_tensor *const[]){dst});
    }
    tg__loop_run(&L, j->n, kernel, j);
}

tg_tensor *tg_attention_softmax(tg_tensor *scores, double scale, bool causal)
{
    const char *op = attention_softmax_op.name;
    if (!scores || !tg__check_float(op, scores))
        return NULL;
    if (scores->ndim < 2) {
        tg__error("%s: scores must be (...,Tq,Tk), at least 2 dims, got %s", op,
                  TG_SHP(scores));
        return NULL;
    }
    if (!isfinite(scale)) {
        tg__error("%s: scale must be finite, got %g", op, scale);
        return NULL;
    }
    tg_tensor *attn =
        tg__new(op, scores->dtype, scores->ndim, scores->shape, false);
    if (!attn)
        return NULL;
    const tg_tensor *z = scores; /* scale 1, no mask: z is the scores */
    if (scale != 1 || causal) {
        mask_rows(
            &(mask_job){
                .src = scores, .dst = attn, .scale = scale, .causal = causal},
            scale_mask_run);
        z = attn;
    }
    tg__softmax_rows(z, attn, attn->ndim - 1);
    attn = tg__record(&attention_softmax_op, attn, 1, &scores);
    if (attn && attn->node) {
        attn->node->p[0] = scale;
        attn->node->ip[0] = causal;
    }
    return attn;
}

/* backward, per row i, after the softmax's (dz = attn * (dy - sum(attn *
 * dy)), tg__softmax_backward_rows), the two ops before it in reverse:
 *   dz_j = 0           j > i, causal: masked_fill put the constant -inf
 *                      there, which x_j does not move
 *   dx_j = scale * dz_j                         (rounded to T, as tg_scale)
 * so a masked entry gets scale * 0: exactly 0 (-0 for a negative scale,
 * as the three ops give). In place on dx. */
static void unmask_scale_run(void *job, int64_t start, const int64_t *off,
                             const int64_t *step, int64_t len)
{
    const mask_job *j = job;
    const int64_t n = j->n, dxs = j->dsts;
    TG_DISPATCH_FLOAT(j->dst->dtype, T, {
        const T sc = (T)j->scale;
        for (int64_t r = 0; r < len; r++) {
            T *dxr = TG_DATA(T, j->dst) + off[0] + r * step[0];
            const int64_t vis = visible(j, start + r);
            for (int64_t k = 0; k < vis; k++)
                dxr[k * dxs] = sc * dxr[k * dxs];
            for (int64_t k = vis; k < n; k++)
                dxr[k * dxs] = sc * (T)0;
        }
    });
}

static void attention_softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    const double scale = n->p[0];
    const bool causal = n->ip[0];
    tg_tensor *dx = tg__new(n->op->name, x->dtype, x->ndim, x->shape, false);
    if (dx) {
        tg__softmax_backward_rows(n->out, dy, dx, x->ndim - 1);
        if (scale != 1 || causal)
            mask_rows(&(mask_job){.dst = dx, .scale = scale, .causal = causal},
                      unmask_scale_run);
    }
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

/* The rules as public ops. attn = softmax(z), z = scale * x where not
 * masked and the constant -inf where masked; attn is 0 exactly at the
 * masked entries (and on a row of -inf scores), so the softmax's rule
 * attn * (v - sum(attn * v)) is already 0 there (masked_fill's backward),
 * and so is its derivative. attn = n->out, on the tape through this entry.
 * vjp: dx = scale * attn * (dy - sum(attn * dy))
 * jvp: ty = scale * attn * (t - sum(attn * t)) */
static tg_tensor *attention_softmax_rule(const tg_node *n, tg_tensor *v)
{
    tg_tensor *dz = tg__softmax_rule(n->out, v, -1);
    if (n->p[0] == 1)
        return dz;
    tg_tensor *r = tg_scale(dz, n->p[0]);
    tg_release(dz);
    return r;
}

static int attention_softmax_vjp(const tg_node *n, tg_tensor *dy,
                                 tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = attention_softmax_rule(n, dy);
    return dx[0] ? 0 : -1;
}

static int attention_softmax_jvp(const tg_node *n, tg_tensor *const *t,
                                 tg_tensor **ty)
{
    *ty = t[0] ? attention_softmax_rule(n, t[0]) : NULL;
    return t[0] && !*ty ? -1 : 0;
}
