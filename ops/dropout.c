/* Inverted dropout (torch.nn.functional.dropout): in training each element
 * is zeroed with probability p and the survivors are scaled by 1 / (1 - p),
 * so the expected value of every element is unchanged and evaluation needs
 * no rescaling. The mask is drawn from the caller's tg_rng, one uniform per
 * element in row-major order, and kept on the tape for the backward. */
#include "core/tape.h"

#include <math.h>

/* y = x * mask over one run; operands {y, x, mask}. */
static void masked_scale_run(void *job, int64_t start, const int64_t *off,
                             const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* y, x, mask */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *y = TG_DATA(T, t[0]) + off[0];
        const T *x = TG_DATA(T, t[1]) + off[1], *m = TG_DATA(T, t[2]) + off[2];
        for (int64_t i = 0; i < len; i++)
            y[i * step[0]] = x[i * step[1]] * m[i * step[2]];
    });
}

/* mask[i] = (u_i >= p) / (1 - p) in t's dtype and shape, contiguous, u_i
 * the i-th tg_rng_uniform of rng (C order): kept with probability 1 - p. */
static tg_tensor *draw_mask(const tg_tensor *t, double p, tg_rng *rng)
{
    tg_tensor *u = tg_rand(rng, TG_FLOAT64, t->ndim, t->shape);
    tg_tensor *mask =
        u ? tg__new("dropout", t->dtype, t->ndim, t->shape, false) : NULL;
    if (mask) {
        const double *ud = TG_DATA(double, u), keep = 1.0 / (1.0 - p);
        int64_t n = tg_numel(mask);
        TG_DISPATCH_FLOAT(mask->dtype, T, {
            T *m = TG_DATA(T, mask);
            for (int64_t i = 0; i < n; i++)
                m[i] = ud[i] >= p ? (T)keep : (T)0;
        });
    }
    tg_release(u);
    return mask;
}

/* forward:  y = x * mask,  mask = (u >= p) / (1 - p)              (any shape)
 * backward: dx = dy * mask   (the same mask, saved forward: a dropped element
 *           gets gradient 0, a kept one dy / (1 - p))
 * Off (eval, or p = 0) the forward is y = x, a view, with no mask saved:
 *           dx = dy */
static void dropout_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx = n->saved[0] ? tg_mul(dy, n->saved[0]) : tg_retain(dy);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

static tg_tensor *dropout_replay(const tg_node *n, tg_tensor *const *in);

/* The mask is diagonal (and a constant of the graph), so its own transpose:
 * vjp: dx = dy * mask ;  jvp: ty = t * mask  (off: dx = dy, ty = t)
 * both the replay given dy or t, which applies the saved mask again (never
 * a new draw) and records a dropout entry whose rules are these again. */
static int dropout_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = dropout_replay(n, &dy);
    return dx[0] ? 0 : -1;
}
static int dropout_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? dropout_replay(n, t) : NULL;
    return t[0] && !*ty ? -1 : 0;
}

/* Parameters: saved[0] the mask (none when off), p[0] p. */
static const tg_op dropout_op = {.name = "dropout",
                                 .backward = dropout_backward,
                                 .replay = dropout_replay,
                                 .vjp = dropout_vjp,
                                 .jvp = dropout_jvp};

/* y = t * mask, mask of t's dtype and shape, recorded with the mask and p
 * kept. */
static tg_tensor *masked_scale(tg_tensor *t, tg_tensor *mask, double p)
{
    tg_tensor *y = tg__new("dropout", t->dtype, t->ndim, t->shape, false);
    if (y) {
        tg_tensor *ops[3] = {y, t, mask};
        tg_loop L; /* (tg__loop_init sets every field it reads) */
        // cppcheck-suppress ctuuninitvar
        tg__loop_init(&L, y->ndim, y->shape, 3, (const tg_tensor *const *)ops);
        tg__loop_run(&L, 1, masked_scale_run, ops);
    }
    y = tg__record(&dropout_op, y, 1, &t);
    if (y && y->node) {
        tg__save(y->node, mask);
        y->node->p[0] = p;
    }
    return y;
}

/* The recorded mask in dtype dt: the same elements kept, at (T)(1 / (1 -
 * p)) in dt, which is the mask draw_mask makes in dt from the same
 * uniforms (converting the mask would carry float32's rounding of the
 * scale into a float64 replay). */
static tg_tensor *mask_as(const tg_tensor *mask, tg_dtype dt, double p)
{
    tg_tensor *m = tg__new("dropout", dt, mask->ndim, mask->shape, false);
    if (!m)
        return NULL;
    const double keep = 1.0 / (1.0 - p);
    const int64_t n = tg_numel(m);
    TG_DISPATCH_FLOAT(mask->dtype, S, {
        const S *src = TG_DATA(S, mask);
        TG_DISPATCH_FLOAT(dt, T, {
            T *dst = TG_DATA(T, m);
            for (int64_t i = 0; i < n; i++)
                dst[i] = src[i] != 0 ? (T)keep : (T)0;
        });
    });
    return m;
}

/* The recorded mask again, never a new draw (the rng is not touched): in
 * the input's dtype when that is not the recorded one. Off, the view
 * again. */
static tg_tensor *dropout_replay(const tg_node *n, tg_tensor *const *in)
{
    tg_tensor *mask = n->saved[0];
    if (!mask)
        return tg_dropout(in[0], 0, false, NULL);
    if (!in[0] || !tg__check_float("dropout", in[0]))
        return NULL;
    if (mask->dtype == in[0]->dtype)
        return masked_scale(in[0], mask, n->p[0]);
    tg_tensor *m = mask_as(mask, in[0]->dtype, n->p[0]);
    tg_tensor *y = m ? masked_scale(in[0], m, n->p[0]) : NULL;
    tg_release(m);
    return y;
}

tg_tensor *tg_dropout(tg_tensor *t, double p, bool train, tg_rng *rng)
{
    if (!t || !tg__check_float("dropout", t))
        return NULL;
    if (!(p >= 0 && p < 1)) {
        tg__error("dropout: p must be in [0, 1), got %g (x %s)", p, TG_SHP(t));
        return NULL;
    }
    if (!train || p == 0) /* a new header on t's storage, owned like any
                             result (by the open scope, if any) */
        return tg__record(
            &dropout_op,
            tg__view("dropout", t, t->ndim, t->shape, t->strides, t->offset), 1,
            &t);
    if (!rng) {
        tg__error("dropout: training with p = %g needs an rng, got NULL "
                  "(x %s)",
                  p, TG_SHP(t));
        return NULL;
    }
    tg_tensor *mask = draw_mask(t, p, rng);
    tg_tensor *y = mask ? masked_scale(t, mask, p) : NULL;
    tg_release(mask);
    return y;
}
