/* Elementwise maps of one tensor with their own gradients: sigmoid, tanh,
 * abs and clamp. (ops/elementwise.c holds the arithmetic family; these sit
 * apart because each backward reads the forward's output or input through a
 * kernel of its own rather than the public ops.)
 *
 * Forward and backward are one tg_loop each, split across threads for large
 * tensors; every element is computed alone, so the bits do not depend on
 * the number of threads. tanh and sigmoid take the vector math of
 * kernels/vmath.h (SLEEF) on contiguous runs where this CPU and build have it,
 * and libm in double, rounded once, elsewhere: the two agree to a couple
 * of ulps. */
#include "core/tape.h"
#include "kernels/vmath.h"

#include <math.h>

typedef enum { SIGMOID, TANH, ABS, CLAMP } map_kind;

static void map_backward(tg_node *n, tg_tensor *dy);
static tg_tensor *map_replay(const tg_node *n, tg_tensor *const *in);
static int map_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int map_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);

/* Parameters: ip[0] the kind; clamp's bounds in p[0], p[1] rounded to the
 * dtype (what the backward compares with) and in p[2], p[3] as the caller
 * gave them (what a replay at another dtype rounds). */
static const tg_op map_ops[] = {
    [SIGMOID] = {.name = "sigmoid",
                 .backward = map_backward,
                 .reads_out = true,
                 .replay = map_replay,
                 .vjp = map_vjp,
                 .jvp = map_jvp},
    [TANH] = {.name = "tanh",
              .backward = map_backward,
              .reads_out = true,
              .replay = map_replay,
              .vjp = map_vjp,
              .jvp = map_jvp},
    [ABS] = {.name = "abs",
             .backward = map_backward,
             .replay = map_replay,
             .vjp = map_vjp,
             .jvp = map_jvp},
    [CLAMP] = {.name = "clamp",
               .backward = map_backward,
               .replay = map_replay,
               .vjp = map_vjp,
               .jvp = map_jvp},
};

typedef struct map_job {
    map_kind kind;
    double lo, hi;  /* clamp's bounds, already rounded to the dtype */
    tg_tensor *out; /* forward: y; backward: dx */
    const tg_tensor *x, *dy;
} map_job;

/* ---- forward ------------------------------------------------------------ */

/* sigmoid(v) = 1 / (1 + e^-v), written so that no exp overflows: with
 * e = exp(-|v|) in (0, 1],
 *     v >= 0:  1 / (1 + e)
 *     v <  0:  e / (1 + e)        (= 1 / (1 + e^-v) multiplied through by e)
 * so a large |v| gives 1 or a tiny positive number, never inf / inf. */
static double sigmoid_of(double v)
{
    double e = exp(-fabs(v));
    return (v >= 0 ? 1 : e) / (1 + e);
}

/* One contiguous run by the vector math; false when this CPU or build has
 * none (tg__vrows) or the map has no use for it. sigmoid takes e =
 * exp(-|v|) from tg__vmap, computed in place in o, then the formula above
 * as a select and one division (no branch: the loop vectorises). */
static bool map_vector(map_kind kind, tg_dtype dt, int64_t len, const void *v,
                       void *o)
{
    if (!tg__vrows() || (kind != TANH && kind != SIGMOID))
        return false;
    if (kind == TANH) {
        tg__vmap(TG_VTANH, dt, len, v, o);
        return true;
    }
    TG_DISPATCH_FLOAT(dt, T, {
        const T *x = v;
        T *y = o;
        TG_SIMD
        for (int64_t i = 0; i < len; i++)
            y[i] = -(T)fabs(x[i]);
        tg__vmap(TG_VEXP, dt, len, y, y);
        TG_SIMD
        for (int64_t i = 0; i < len; i++)
            y[i] = (x[i] >= 0 ? 1 : y[i]) / (1 + y[i]);
    });
    return true;
}

/* y = f(x) over one run: sigmoid and tanh by the vector math on adjacent
 * runs, else libm in double rounded once; abs and clamp in the tensor's
 * type (exact), as selects the compiler vectorises.
 *   clamp: v = v < lo ? lo : v; v = v > hi ? hi : v   (torch's
 *          min(max(v, lo), hi): NaN fails both tests and stays NaN, and
 *          with lo > hi every v ends at hi) */
static void map_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const map_job *j = job;
    const tg_dtype dt = j->out->dtype;
    (void)start;
    TG_DISPATCH_FLOAT(dt, T, {
        T *o = TG_DATA(T, j->out) + off[0];
        const T *x = TG_DATA(T, j->x) + off[1];
        const int64_t so = step[0], sx = step[1];
        const T lo = (T)j->lo, hi = (T)j->hi;
        switch (j->kind) {
        case SIGMOID:
        case TANH:
            if (so == 1 && sx == 1 && map_vector(j->kind, dt, len, x, o))
                break;
            for (int64_t i = 0; i < len; i++)
                o[i * so] = (T)(j->kind == SIGMOID ? sigmoid_of(x[i * sx])
                                                   : tanh(x[i * sx]));
            break;
        case ABS:
            TG_SIMD
            for (int64_t i = 0; i < len; i++)
                o[i * so] = (T)fabs(x[i * sx]);
            break;
        case CLAMP:
            TG_SIMD
            for (int64_t i = 0; i < len; i++) {
                T v = x[i * sx];
                v = v < lo ? lo : v;
                o[i * so] = v > hi ? hi : v;
            }
            break;
        }
    });
}

static tg_tensor *map(map_kind kind, tg_tensor *x, double min, double max)
{
    const char *name = map_ops[kind].name;
    if (!x || !tg__check_float(name, x))
        return NULL;
    double lo = min, hi = max;
    if (x->dtype == TG_FLOAT32) { /* the bounds in the tensor's dtype */
        lo = (float)lo;
        hi = (float)hi;
    }
    tg_tensor *y = tg__new(name, x->dtype, x->ndim, x->shape, false);
    if (!y)
        return NULL;
    tg_loop L;
    tg__loop_init(&L, y->ndim, y->shape, 2, (const tg_tensor *const[]){y, x});
    tg__loop_run(
        &L, 1, map_run,
        &(map_job){.kind = kind, .lo = lo, .hi = hi, .out = y, .x = x});
    y = tg__record(&map_ops[kind], y, 1, &x);
    if (y && y->node) {
        y->node->ip[0] = kind;
        y->node->p[0] = lo;
        y->node->p[1] = hi;
        y->node->p[2] = min;
        y->node->p[3] = max;
    }
    return y;
}

static tg_tensor *map_replay(const tg_node *n, tg_tensor *const *in)
{
    return map((map_kind)n->ip[0], in[0], n->p[2], n->p[3]);
}

tg_tensor *tg_sigmoid(tg_tensor *t) { return map(SIGMOID, t, 0, 0); }
tg_tensor *tg_tanh(tg_tensor *t) { return map(TANH, t, 0, 0); }
tg_tensor *tg_abs(tg_tensor *t) { return map(ABS, t, 0, 0); }

tg_tensor *tg_clamp(tg_tensor *t, double min, double max)
{
    if (!t)
        return NULL;
    if (isnan(min) || isnan(max)) {
        tg__error("clamp: bounds (%g, %g) on %s %s: a bound is NaN; pass "
                  "-INFINITY or INFINITY for a missing one",
                  min, max, tg_dtype_name(t->dtype), TG_SHP(t));
        return NULL;
    }
    return map(CLAMP, t, min, max);
}

/* ---- backward ----------------------------------------------------------- */

/* forward:  y = sigmoid(x)           backward: dx = dy * y * (1 - y)
 *           (d/dx 1/(1+e^-x) = e^-x / (1+e^-x)^2 = y (1 - y))
 * forward:  y = tanh(x)              backward: dx = dy * (1 - y^2)
 * forward:  y = |x|                  backward: dx = dy * sign(x)
 *           (sign(0) = 0, and 0 for NaN, as torch's abs_backward)
 * forward:  y = clamp(x, lo, hi)     backward: dx = dy where lo <= x <= hi,
 *           0 elsewhere (both ends inclusive, as torch; a NaN x gets 0)
 * All of x's shape (B,T,C) or any other; operands {dx, dy, y or x}. */
static void map_grad_run(void *job, int64_t start, const int64_t *off,
                         const int64_t *step, int64_t len)
{
    const map_job *j = job;
    (void)start;
    TG_DISPATCH_FLOAT(j->out->dtype, T, {
        T *dx = TG_DATA(T, j->out) + off[0];
        const T *dy = TG_DATA(T, j->dy) + off[1];
        const T *v = TG_DATA(T, j->x) + off[2]; /* y for sigmoid, tanh */
        const int64_t s0 = step[0], s1 = step[1], s2 = step[2];
        const T lo = (T)j->lo, hi = (T)j->hi;
        switch (j->kind) {
        case SIGMOID:
            for (int64_t i = 0; i < len; i++)
                dx[i * s0] = dy[i * s1] * (v[i * s2] * (1 - v[i * s2]));
            break;
        case TANH:
            for (int64_t i = 0; i < len; i++)
                dx[i * s0] = dy[i * s1] * (1 - v[i * s2] * v[i * s2]);
            break;
        case ABS:
            for (int64_t i = 0; i < len; i++)
                dx[i * s0] = v[i * s2] > 0   ? dy[i * s1]
                             : v[i * s2] < 0 ? -dy[i * s1]
                                             : 0;
            break;
        case CLAMP:
            for (int64_t i = 0; i < len; i++)
                dx[i * s0] =
                    v[i * s2] >= lo && v[i * s2] <= hi ? dy[i * s1] : 0;
            break;
        }
    });
}

static void map_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const map_kind kind = (map_kind)n->ip[0];
    const tg_tensor *x = n->in[0];
    const tg_tensor *v = kind == SIGMOID || kind == TANH ? n->out : x;
    tg_tensor *dx = tg__new(n->op->name, x->dtype, x->ndim, x->shape, false);
    if (dx) {
        tg_loop L;
        tg__loop_init(&L, dx->ndim, dx->shape, 3,
                      (const tg_tensor *const[]){dx, dy, v});
        tg__loop_run(&L, 1, map_grad_run,
                     &(map_job){.kind = kind,
                                .lo = n->p[0],
                                .hi = n->p[1],
                                .out = dx,
                                .x = v,
                                .dy = dy});
    }
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

/* ---- recorded backward and forward mode --------------------------------- */

/* 1 - t, as recorded ops */
static tg_tensor *one_minus(tg_tensor *t)
{
    tg_tensor *m = tg_neg(t), *r = tg_add_scalar(m, 1);
    tg_release(m);
    return r;
}

/* Each map is elementwise: its Jacobian is diag(f'(x)), its own transpose,
 * so vjp (dx = f'(x) dy) and jvp (ty = f'(x) t) are one product, v * f'(x),
 * as public ops (core/tape.h, tg_op.vjp):
 *   sigmoid: v * (y (1 - y))          y = n->out (reads_out)
 *   tanh:    v * (1 - y^2)            y = n->out (reads_out)
 *   abs:     v where x > 0, -v where x < 0, 0 elsewhere (x = 0, NaN)
 *   clamp:   v where lo <= x <= hi, 0 elsewhere (NaN too)
 * abs's and clamp's masks are bool tensors from x, constants of the graph,
 * chosen as the backward chooses at the kinks: so the first derivative is
 * the backward's subgradient and the second exactly 0. */
static tg_tensor *map_apply(const tg_node *n, tg_tensor *v)
{
    tg_tensor *x = n->in[0], *y = n->out, *r = NULL;
    switch ((map_kind)n->ip[0]) {
    case SIGMOID: { /* y (1 - y) */
        tg_tensor *om = one_minus(y), *s = tg_mul(y, om);
        r = tg_mul(v, s);
        tg_release(s);
        tg_release(om);
        break;
    }
    case TANH: { /* 1 - y^2 */
        tg_tensor *y2 = tg_mul(y, y), *s = one_minus(y2);
        r = tg_mul(v, s);
        tg_release(s);
        tg_release(y2);
        break;
    }
    case ABS: {
        tg_tensor *pos = tg_gt_scalar(x, 0), *neg = tg_lt_scalar(x, 0);
        tg_tensor *not_neg = tg_logical_not(neg), *minus_v = tg_neg(v);
        tg_tensor *on_neg = tg_masked_fill(minus_v, not_neg, 0);
        r = tg_where(pos, v, on_neg);
        tg_release(on_neg);
        tg_release(minus_v);
        tg_release(not_neg);
        tg_release(neg);
        tg_release(pos);
        break;
    }
    case CLAMP: {
        /* p[0], p[1]: the bounds the backward compares with */
        tg_tensor *ge = tg_ge_scalar(x, n->p[0]),
                  *le = tg_le_scalar(x, n->p[1]);
        tg_tensor *in = tg_logical_and(ge, le), *out = tg_logical_not(in);
        r = tg_masked_fill(v, out, 0);
        tg_release(out);
        tg_release(in);
        tg_release(le);
        tg_release(ge);
        break;
    }
    }
    return r;
}

/* vjp: dx = dy * f'(x) */
static int map_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = map_apply(n, dy);
    return dx[0] ? 0 : -1;
}

/* jvp: ty = t * f'(x) */
static int map_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? map_apply(n, t[0]) : NULL;
    return t[0] && !*ty ? -1 : 0;
}
