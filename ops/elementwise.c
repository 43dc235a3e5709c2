/* Elementwise arithmetic: binary ops with numpy broadcasting (add, sub, mul,
 * div) and unary maps (neg, scale, add_scalar, exp, log, sqrt, pow, relu,
 * gelu).
 * One kernel per family; the op is chosen outside the inner loop, so each
 * inner loop is a plain loop, vectorised where the operands are adjacent (or
 * one is a scalar along the run), and large tensors are split across
 * threads (every element is computed alone: the same bits either way). */
#include "kernels/vmath.h"
#include "ops/elementwise_rules.h"

#include <math.h>

/* ---- binary ------------------------------------------------------------ */

typedef enum { ADD, SUB, MUL, DIV } binary_kind;

typedef struct binary_job {
    binary_kind kind;
    tg_tensor *out;
    const tg_tensor *a, *b;
} binary_job;

/* o = x (op) y over one run of len, stepping so, sx, sy. */
#define BINARY_LOOP(so, sx, sy)                                                \
    switch (kind) {                                                            \
    case ADD:                                                                  \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = x[i * (sx)] + y[i * (sy)];                           \
        break;                                                                 \
    case SUB:                                                                  \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = x[i * (sx)] - y[i * (sy)];                           \
        break;                                                                 \
    case MUL:                                                                  \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = x[i * (sx)] * y[i * (sy)];                           \
        break;                                                                 \
    case DIV:                                                                  \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = x[i * (sx)] / y[i * (sy)];                           \
        break;                                                                 \
    }

/* The common layouts: out adjacent, x and y adjacent or one of them fixed
 * along the run (sx, sy each 1 or 0, not both 0). Constant steps, so the
 * loops are vectorised: compiled three times, for the baseline and for
 * AVX2 and AVX-512 (twice and four times the lanes of the baseline's SSE2),
 * and called by tg__cpu_level(). Each element is one IEEE operation
 * whatever the width: the same bits from all three. */
#define BINARY_ADJACENT                                                        \
    TG_DISPATCH_FLOAT(dt, T, {                                                 \
        T *o = out;                                                            \
        const T *x = a, *y = b;                                                \
        if (sx == 1 && sy == 1) {                                              \
            BINARY_LOOP(1, 1, 1)                                               \
        } else if (sy == 0) {                                                  \
            BINARY_LOOP(1, 1, 0)                                               \
        } else {                                                               \
            BINARY_LOOP(1, 0, 1)                                               \
        }                                                                      \
    });
#define BINARY_ADJACENT_ARGS                                                   \
    binary_kind kind, tg_dtype dt, int64_t len, void *out, const void *a,      \
        int64_t sx, const void *b, int64_t sy

TG_LEVELS(binary_adjacent, (BINARY_ADJACENT_ARGS), BINARY_ADJACENT)

static void binary_run(void *job, int64_t start, const int64_t *off,
                       const int64_t *step, int64_t len)
{
    const binary_job *j = job;
    const binary_kind kind = j->kind;
    const tg_dtype dt = j->out->dtype;
    const int64_t so = step[0], sx = step[1], sy = step[2];
    (void)start;
    TG_DISPATCH_FLOAT(dt, T, {
        T *o = TG_DATA(T, j->out) + off[0];
        const T *x = TG_DATA(T, j->a) + off[1], *y = TG_DATA(T, j->b) + off[2];
        if (so == 1 && sx <= 1 && sy <= 1 && sx + sy > 0) {
            TG_BY_LEVEL(binary_adjacent)(kind, dt, len, o, x, sx, y, sy);
        } else {
            BINARY_LOOP(so, sx, sy)
        }
    });
}
#undef BINARY_ADJACENT
#undef BINARY_LOOP

static void binary_kernel(binary_kind kind, tg_tensor *out, const tg_tensor *a,
                          const tg_tensor *b)
{
    tg_loop L;
    tg__loop_init(&L, out->ndim, out->shape, 3,
                  (const tg_tensor *const[]){out, a, b});
    tg__loop_run(&L, 1, binary_run, &(binary_job){kind, out, a, b});
}

/* Gradients of y = a (op) b; tg__accumulate sums each back to its input's
 * shape where the input was broadcast.
 *   add: da = dy          db = dy
 *   sub: da = dy          db = -dy
 *   mul: da = dy * b      db = dy * a
 *   div: da = dy / b      db = -dy * a / b^2 = -(dy / b) * y */
static void add_backward(tg_node *n, tg_tensor *dy)
{
    tg__accumulate(n, 0, dy);
    tg__accumulate(n, 1, dy);
}

static void sub_backward(tg_node *n, tg_tensor *dy)
{
    tg__accumulate(n, 0, dy);
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = tg_neg(dy);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
}

static void mul_backward(tg_node *n, tg_tensor *dy)
{
    for (int i = 0; i < 2; i++) {
        if (!tg__needs_grad(n, i))
            continue;
        tg_tensor *d = tg_mul(dy, n->in[1 - i]);
        tg__accumulate(n, i, d);
        tg_release(d);
    }
}

static void div_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *da = tg_div(dy, n->in[1]);
    tg__accumulate(n, 0, da);
    if (tg__needs_grad(n, 1)) {
        tg_tensor *da_y = tg_mul(da, n->out);
        tg_tensor *db = tg_neg(da_y);
        tg__accumulate(n, 1, db);
        tg_release(db);
        tg_release(da_y);
    }
    tg_release(da);
}

static tg_tensor *binary_replay(const tg_node *n, tg_tensor *const *in);

static const tg_op binary_ops[] = {
    [ADD] = {.name = "add",
             .backward = add_backward,
             .replay = binary_replay,
             .vjp = tg__add_vjp,
             .jvp = tg__add_jvp},
    [SUB] = {.name = "sub",
             .backward = sub_backward,
             .replay = binary_replay,
             .vjp = tg__sub_vjp,
             .jvp = tg__sub_jvp},
    [MUL] = {.name = "mul",
             .backward = mul_backward,
             .replay = binary_replay,
             .vjp = tg__mul_vjp,
             .jvp = tg__mul_jvp},
    [DIV] = {.name = "div",
             .backward = div_backward,
             .reads_out = true,
             .replay = binary_replay,
             .vjp = tg__div_vjp,
             .jvp = tg__div_jvp},
};

static tg_tensor *binary(binary_kind kind, tg_tensor *a, tg_tensor *b)
{
    const char *name = binary_ops[kind].name;
    if (!a || !b)
        return NULL;
    if (!tg__check_same_float(name, a, b))
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(name, 2, (const tg_tensor *const[]){a, b}, &ndim, shape))
        return NULL;
    tg_tensor *y = tg__new(name, a->dtype, ndim, shape, false);
    if (!y)
        return NULL;
    binary_kernel(kind, y, a, b);
    return tg__record(&binary_ops[kind], y, 2, (tg_tensor *[]){a, b});
}

/* The kind is the entry's place in the table. */
static tg_tensor *binary_replay(const tg_node *n, tg_tensor *const *in)
{
    return binary((binary_kind)(n->op - binary_ops), in[0], in[1]);
}

tg_tensor *tg_add(tg_tensor *a, tg_tensor *b) { return binary(ADD, a, b); }
tg_tensor *tg_sub(tg_tensor *a, tg_tensor *b) { return binary(SUB, a, b); }
tg_tensor *tg_mul(tg_tensor *a, tg_tensor *b) { return binary(MUL, a, b); }
tg_tensor *tg_div(tg_tensor *a, tg_tensor *b) { return binary(DIV, a, b); }

/* ---- unary ------------------------------------------------------------- */

typedef enum { NEG, SCALE, ADD_SCALAR, EXP, LOG, SQRT, POW, RELU } unary_kind;

typedef struct unary_job {
    unary_kind kind;
    double p;
    tg_tensor *out;
    const tg_tensor *x;
} unary_job;

/* o = f(v) over one run of len, stepping so, sv. */
#define UNARY_LOOP(so, sv)                                                     \
    switch (j->kind) {                                                         \
    case NEG:                                                                  \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = -v[i * (sv)];                                        \
        break;                                                                 \
    case SCALE:                                                                \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = s * v[i * (sv)];                                     \
        break;                                                                 \
    case ADD_SCALAR:                                                           \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = v[i * (sv)] + s;                                     \
        break;                                                                 \
    case EXP:                                                                  \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = (T)exp(v[i * (sv)]);                                 \
        break;                                                                 \
    case LOG:                                                                  \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = (T)log(v[i * (sv)]);                                 \
        break;                                                                 \
    case SQRT:                                                                 \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = (T)sqrt(v[i * (sv)]);                                \
        break;                                                                 \
    case POW:                                                                  \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = (T)pow(v[i * (sv)], j->p);                           \
        break;                                                                 \
    case RELU:                                                                 \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++)                                      \
            o[i * (so)] = !(v[i * (sv)] <= 0) ? v[i * (sv)] : 0;               \
        break;                                                                 \
    }

/* neg, scale, add_scalar and relu over an adjacent run, compiled for the
 * baseline, AVX2 and AVX-512 as binary_adjacent is (the same bits from
 * each: one IEEE operation, or a select, an element). */
#define UNARY_ADJACENT                                                         \
    TG_DISPATCH_FLOAT(dt, T, {                                                 \
        T *o = out;                                                            \
        const T *v = in, s = (T)p;                                             \
        switch (kind) {                                                        \
        case NEG:                                                              \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = -v[i];                                                  \
            break;                                                             \
        case SCALE:                                                            \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = s * v[i];                                               \
            break;                                                             \
        case ADD_SCALAR:                                                       \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = v[i] + s;                                               \
            break;                                                             \
        case SQRT: /* correctly rounded in every width: the same bits */       \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = SQRT_OF(v[i]);                                          \
            break;                                                             \
        default: /* RELU */                                                    \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = !(v[i] <= 0) ? v[i] : 0;                                \
            break;                                                             \
        }                                                                      \
    });
/* sqrt of float or double without errno (the builtins, which the
 * vectoriser turns into vsqrtps / vsqrtpd; errno is never read here, and a
 * negative input gives NaN either way). sqrt is correctly rounded, so the
 * float result is the double sqrt rounded, as the scalar loop computes it. */
#define SQRT_OF(x)                                                             \
    _Generic((x), float : __builtin_sqrtf, default : __builtin_sqrt)(x)
#define UNARY_ADJACENT_ARGS                                                    \
    unary_kind kind, tg_dtype dt, int64_t len, void *out, const void *in,      \
        double p

TG_LEVELS(unary_adjacent, (UNARY_ADJACENT_ARGS), UNARY_ADJACENT)
#undef UNARY_ADJACENT

/* The simple maps over an adjacent run at the CPU's level; false for the
 * other maps. */
static bool unary_simple(unary_kind kind, tg_dtype dt, int64_t len,
                         const void *v, void *o, double p)
{
    if (kind != NEG && kind != SCALE && kind != ADD_SCALAR && kind != RELU &&
        kind != SQRT)
        return false;
    TG_BY_LEVEL(unary_adjacent)(kind, dt, len, o, v, p);
    return true;
}

/* exp and log over an adjacent run by the vector math of kernels/vmath.h
 * (SLEEF, in the tensor's type: within 1 ulp of the scalar loop's double
 * libm rounded once, not bit for bit). false when there is no vector path
 * (CPU, build) or the map has none. */
static bool unary_vector(unary_kind kind, tg_dtype dt, int64_t len,
                         const void *v, void *o)
{
    if (!tg__vrows() || (kind != EXP && kind != LOG))
        return false;
    tg__vmap(kind == EXP ? TG_VEXP : TG_VLOG, dt, len, v, o);
    return true;
}

static void unary_run(void *job, int64_t start, const int64_t *off,
                      const int64_t *step, int64_t len)
{
    const unary_job *j = job;
    (void)start;
    TG_DISPATCH_FLOAT(j->out->dtype, T, {
        const T s = (T)j->p;
        T *o = TG_DATA(T, j->out) + off[0];
        const T *v = TG_DATA(T, j->x) + off[1];
        if (step[0] == 1 && step[1] == 1 &&
            (unary_simple(j->kind, j->out->dtype, len, v, o, j->p) ||
             unary_vector(j->kind, j->out->dtype, len, v, o))) {
            /* done by the vector paths above */
        } else if (step[0] == 1 && step[1] == 1) {
            UNARY_LOOP(1, 1)
        } else {
            UNARY_LOOP(step[0], step[1])
        }
    });
}
#undef UNARY_LOOP

static void unary_kernel(unary_kind kind, double p, tg_tensor *out,
                         const tg_tensor *x)
{
    tg_loop L;
    tg__loop_init(&L, out->ndim, out->shape, 2,
                  (const tg_tensor *const[]){out, x});
    tg__loop_run(&L, 1, unary_run, &(unary_job){kind, p, out, x});
}

/* Applies a unary map without recording (backwards use it on dy). A NULL x
 * gives NULL. */
static tg_tensor *unary_apply(const char *name, unary_kind kind, double p,
                              const tg_tensor *x)
{
    if (!x)
        return NULL;
    tg_tensor *y = tg__new(name, x->dtype, x->ndim, x->shape, false);
    if (y)
        unary_kernel(kind, p, y, x);
    return y;
}

/* Gradients of y = f(x), with p the op's scalar:
 *   neg:        dx = -dy
 *   scale:      dx = p * dy
 *   add_scalar: dx = dy
 *   exp:        dx = dy * y                      (d/dx e^x = e^x)
 *   log:        dx = dy / x
 *   sqrt:       dx = dy / (2 y)                  (d/dx x^(1/2) = 1 / (2 sqrt x))
 *   pow:        dx = dy * p * x^(p-1)            (p != 0)
 *               dx = 0                           (p == 0: y = x^0 = 1 is
 *               constant; p * x^(p-1) would be 0 * inf = NaN at x = 0;
 *               0 for every x and dy, as PyTorch's pow_backward)
 *   relu:       dx = dy where x > 0, else 0      (0 at the kink, as PyTorch;
 *               relu passes NaN through, as PyTorch) */
static void unary_backward(tg_node *n, tg_tensor *dy)
{
    unary_kind kind = (unary_kind)n->ip[0];
    double p = n->p[0];
    tg_tensor *x = n->in[0], *y = n->out, *dx = NULL;
    switch (kind) {
    case NEG: dx = unary_apply("neg", NEG, 0, dy); break;
    case SCALE: dx = unary_apply("scale", SCALE, p, dy); break;
    case ADD_SCALAR: dx = tg_retain(dy); break;
    case EXP: dx = tg_mul(dy, y); break;
    case LOG: dx = tg_div(dy, x); break;
    case SQRT: {
        tg_tensor *two_y = unary_apply("sqrt", SCALE, 2, y);
        dx = tg_div(dy, two_y);
        tg_release(two_y);
        break;
    }
    case POW: {
        if (p == 0) {
            dx = tg__new("pow", x->dtype, x->ndim, x->shape, true);
            break;
        }
        tg_tensor *xp = unary_apply("pow", POW, p - 1, x);
        tg_tensor *slope = unary_apply("pow", SCALE, p, xp);
        dx = tg_mul(dy, slope);
        tg_release(slope);
        tg_release(xp);
        break;
    }
    case RELU: {
        tg_tensor *off = tg_le_scalar(x, 0);
        dx = tg_masked_fill(dy, off, 0);
        tg_release(off);
        break;
    }
    }
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

static tg_tensor *unary_replay(const tg_node *n, tg_tensor *const *in);

/* The rules (tg__<op>_vjp, tg__<op>_jvp): ops/elementwise_rules.c. */
#define UNARY_OP(kind, op, out)                                                \
    [kind] = {.name = #op,                                                     \
              .backward = unary_backward,                                      \
              .reads_out = out,                                                \
              .replay = unary_replay,                                          \
              .vjp = tg__##op##_vjp,                                           \
              .jvp = tg__##op##_jvp}
static const tg_op unary_ops[] = {
    UNARY_OP(NEG, neg, false),
    UNARY_OP(SCALE, scale, false),
    UNARY_OP(ADD_SCALAR, add_scalar, false),
    UNARY_OP(EXP, exp, true), /* dx = dy * y */
    UNARY_OP(LOG, log, false),
    UNARY_OP(SQRT, sqrt, true), /* dx = dy / (2 y) */
    UNARY_OP(POW, pow, false),
    UNARY_OP(RELU, relu, false),
};
#undef UNARY_OP

static tg_tensor *unary(unary_kind kind, double p, tg_tensor *x)
{
    const char *name = unary_ops[kind].name;
    if (!x || !tg__check_float(name, x))
        return NULL;
    tg_tensor *y =
        tg__record(&unary_ops[kind], unary_apply(name, kind, p, x), 1, &x);
    if (y && y->node) {
        y->node->ip[0] = kind;
        y->node->p[0] = p;
    }
    return y;
}

/* The kind and the scalar as recorded: p[0] is the scalar as the caller
 * gave it (the kernel rounds it to the dtype), so a float64 replay of a
 * float32 entry scales by the double the float64 call would. */
static tg_tensor *unary_replay(const tg_node *n, tg_tensor *const *in)
{
    return unary((unary_kind)n->ip[0], n->p[0], in[0]);
}

tg_tensor *tg_neg(tg_tensor *t) { return unary(NEG, 0, t); }
tg_tensor *tg_scale(tg_tensor *t, double s) { return unary(SCALE, s, t); }
tg_tensor *tg_add_scalar(tg_tensor *t, double s)
{
    return unary(ADD_SCALAR, s, t);
}
tg_tensor *tg_exp(tg_tensor *t) { return unary(EXP, 0, t); }
tg_tensor *tg_log(tg_tensor *t) { return unary(LOG, 0, t); }
tg_tensor *tg_sqrt(tg_tensor *t) { return unary(SQRT, 0, t); }
tg_tensor *tg_pow_scalar(tg_tensor *t, double p) { return unary(POW, p, t); }
tg_tensor *tg_relu(tg_tensor *t) { return unary(RELU, 0, t); }

/* ---- gelu ----------------------------------------------------------------- */

/* y = x Phi(x), Phi the normal CDF, from c = erfc(|x| / sqrt 2):
 *   2 Phi(x) = c          x < 0 (x's sign bit set)
 *            = 2 - c      x >= 0
 * rather than 1 + erf(x / sqrt 2), its equal: for x below -1 that sum
 * cancels (erf near -1 has ulps of 6e-8 in float32 and 1e-16 in double,
 * while Phi(-5.5) is 2e-8 and Phi(-8.5) 1e-17), where c is relative to
 * Phi itself however small; for x >= 0, c <= 1 and 2 - c loses nothing.
 * This loop takes erfc in double of the exact |x| / sqrt 2; the float32
 * vector path rounds that to float first, which moves erfc by up to
 * about x^2 ulps for x < 0 (151 near -13.1), and corrects for it to
 * first order (kernels/vmath_isa.h, gelu_out_f): within 4 ulps of this loop
 * for |x| <= 12.8 (measured over every float; torch's float32 1 + erf
 * has lost every digit of Phi below -5.5).
 * A recorded gelu keeps c, the value its forward computed (a tensor of
 * x's shape and dtype, from the storage pool), so that the backward
 * evaluates no erfc: one erfc per element per training step instead of
 * two (erfc is the costliest map, several exps). Not recorded (grad off,
 * or x not requiring grad): no c is made. */

/* The forward over one run; operands {y, x, c}, c NULL when not kept. The
 * vector path: tg__vgelu (the expressions below, its erfc in T). */
static void gelu_run(void *job, int64_t start, const int64_t *off,
                     const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* y, x, c */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *y = TG_DATA(T, t[0]) + off[0];
        const T *x = TG_DATA(T, t[1]) + off[1];
        T *c = t[2] ? TG_DATA(T, t[2]) + off[2] : NULL;
        if (step[0] == 1 && step[1] == 1 && (!c || step[2] == 1) &&
            tg__vrows()) {
            tg__vgelu(t[0]->dtype, len, x, y, c);
            return;
        }
        for (int64_t i = 0; i < len; i++) {
            const double xi = x[i * step[1]];
            const double ci = erfc(fabs(xi) * TG_INV_SQRT2);
            y[i * step[0]] = (T)(0.5 * xi * (signbit(xi) ? ci : 2 - ci));
            if (c)
                c[i * step[2]] = (T)ci;
        }
    });
}

/* y = x Phi(x)        Phi(x) the normal CDF, whose derivative is the
 *                     density phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 * dx = dy * (Phi(x) + x phi(x))                  (the product rule)
 *    = dy * (0.5 (x < 0 ? c : 2 - c) + x exp(-x^2 / 2) / sqrt(2 pi)),
 * c = erfc(|x| / sqrt 2) kept by the forward. Over one run; operands {dx, dy, x, c}. The vector path:
 * tg__vgelu_grad (the same expressions, exp by SLEEF). */
static void gelu_grad_run(void *job, int64_t start, const int64_t *off,
                          const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* dx, dy, x, c */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *d = TG_DATA(T, t[0]) + off[0];
        const T *g = TG_DATA(T, t[1]) + off[1], *x = TG_DATA(T, t[2]) + off[2];
        const T *c = TG_DATA(T, t[3]) + off[3];
        if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1 &&
            tg__vrows()) {
            tg__vgelu_grad(t[0]->dtype, len, x, c, g, d);
            return;
        }
        for (int64_t i = 0; i < len; i++) {
            const double xi = x[i * step[2]];
            const double ci = c[i * step[3]];
            const double cdf = 0.5 * (signbit(xi) ? ci : 2 - ci);
            const double pdf = TG_INV_SQRT_2PI * exp(-0.5 * xi * xi);
            d[i * step[0]] = (T)(g[i * step[1]] * (cdf + xi * pdf));
        }
    });
}

/* n->in[0] is x, n->saved[0] the forward's c (every recorded gelu keeps
 * it: see tg_gelu). */
static void gelu_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *x = n->in[0], *c = n->saved[0];
    tg_tensor *dx = tg__new("gelu", x->dtype, x->ndim, x->shape, false);
    if (dx) {
        tg_tensor *ops[4] = {dx, dy, x, c};
        tg_loop L;
        tg__loop_init(&L, dx->ndim, dx->shape, 4,
                      (const tg_tensor *const *)ops);
        tg__loop_run(&L, 1, gelu_grad_run, ops);
    }
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

static tg_tensor *gelu_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return tg_gelu(in[0]);
}
static const tg_op gelu_op = {.name = "gelu",
                              .backward = gelu_backward,
                              .replay = gelu_replay,
                              .vjp = tg__gelu_vjp,
                              .jvp = tg__gelu_jvp};

tg_tensor *tg_gelu(tg_tensor *x)
{
    if (!x || !tg__check_float("gelu", x))
        return NULL;
    /* tg__record records exactly when grad mode is on and x requires grad
     * (the one input): then, and only then, c is kept. */
    const bool keep = tg_is_grad_enabled() && x->requires_grad;
    tg_tensor *y = tg__new("gelu", x->dtype, x->ndim, x->shape, false);
    tg_tensor *c =
        keep && y ? tg__new("gelu", x->dtype, x->ndim, x->shape, false) : NULL;
    if (!y || (keep && !c)) {
        tg_release(y);
        return NULL;
    }
    tg_tensor *ops[3] = {y, x, c};
    tg_loop L;
    tg__loop_init(&L, y->ndim, y->shape, c ? 3 : 2,
                  (const tg_tensor *const *)ops);
    tg__loop_run(&L, 1, gelu_run, ops);
    y = tg__record(&gelu_op, y, 1, &x);
    if (y && y->node)
        tg__save(y->node, c);
    tg_release(c);
    return y;
}

/* ---- gelu, tanh form ----------------------------------------------------- */

/* GPT-2's approximation, torch's gelu(x, approximate='tanh'):
 *   y = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * computed in double and rounded once; an op of its own (not a unary_kind),
 * so the exact form's loops stay as they are. Its constants, GELU_TANH_K
 * and GELU_TANH_C, are in ops/elementwise_rules.h (its rules read them). */

/* u = k (x + c x^3), k = sqrt(2/pi), c = 0.044715: the tanh GELU's
 * argument, in double. */
static inline double gelu_tanh_u(double x)
{
    return GELU_TANH_K * (x + GELU_TANH_C * x * x * x);
}

/* th = tanh(u(x)) over n adjacent elements of dtype dt, for the forward
 * and the backward alike: u rounded to the type in th, then the vector
 * math's tanh (SLEEF, within 1 ulp of libm) in place, as gelu's exact form
 * does with erfc. */
static void gelu_tanh_th(tg_dtype dt, int64_t n, const void *x, void *th)
{
    TG_DISPATCH_FLOAT(dt, T, {
        const T *xs = x;
        T *o = th;
        for (int64_t i = 0; i < n; i++)
            o[i] = (T)gelu_tanh_u(xs[i]);
    });
    tg__vmap(TG_VTANH, dt, n, th, th);
}

/* y = x/2 (1 + tanh(u)) over one run; operands {y, x}. Adjacent runs take
 * th from gelu_tanh_th, held in y; others libm's tanh of u in double. */
static void gelu_tanh_run(void *job, int64_t start, const int64_t *off,
                          const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* y, x */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *y = TG_DATA(T, t[0]) + off[0];
        const T *x = TG_DATA(T, t[1]) + off[1];
        if (step[0] == 1 && step[1] == 1 && tg__vrows()) {
            gelu_tanh_th(t[0]->dtype, len, x, y);
            for (int64_t i = 0; i < len; i++)
                y[i] = (T)(0.5 * (double)x[i] * (1 + (double)y[i]));
        } else {
            for (int64_t i = 0; i < len; i++) {
                double xi = x[i * step[1]];
                y[i * step[0]] = (T)(0.5 * xi * (1 + tanh(gelu_tanh_u(xi))));
            }
        }
    });
}

/* forward:  y = x/2 (1 + tanh(u)),  u = k (x + c x^3),  k = sqrt(2/pi)
 * backward: du/dx = k (1 + 3 c x^2),  d tanh(u)/du = 1 - tanh(u)^2, so
 *           dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh(u)^2) k (1 + 3 c x^2))
 * the slope from x and th = tanh(u), in double. */
static inline double gelu_tanh_slope(double x, double th)
{
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * GELU_TANH_K *
                                (1 + 3 * GELU_TANH_C * x * x);
}

/* dx = dy * slope over one run; operands {dx, dy, x}. Adjacent runs take
 * th from gelu_tanh_th, held in dx, as the forward does; other runs libm's
 * tanh of u in double. */
static void gelu_tanh_grad_run(void *job, int64_t start, const int64_t *off,
                               const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* dx, dy, x */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *d = TG_DATA(T, t[0]) + off[0];
        const T *g = TG_DATA(T, t[1]) + off[1], *v = TG_DATA(T, t[2]) + off[2];
        if (step[0] == 1 && step[1] == 1 && step[2] == 1 && tg__vrows()) {
            gelu_tanh_th(t[0]->dtype, len, v, d);
            for (int64_t i = 0; i < len; i++)
                d[i] = (T)(g[i] * gelu_tanh_slope(v[i], d[i]));
        } else {
            for (int64_t i = 0; i < len; i++) {
                double xi = v[i * step[2]];
                double th = tanh(gelu_tanh_u(xi));
                d[i * step[0]] = (T)(g[i * step[1]] * gelu_tanh_slope(xi, th));
            }
        }
    });
}

/* Runs one of the two kernels above: dst = f(operands...). */
static tg_tensor *gelu_tanh_map(tg_run_fn fn, int n, tg_tensor *const *ops)
{
    const tg_tensor *x = ops[n - 1];
    tg_tensor *dst = tg__new("gelu_tanh", x->dtype, x->ndim, x->shape, false);
    if (!dst)
        return NULL;
    tg_tensor *all[3] = {dst, ops[0], n > 1 ? ops[1] : NULL};
    tg_loop L;
    tg__loop_init(&L, dst->ndim, dst->shape, n + 1,
                  (const tg_tensor *const *)all);
    tg__loop_run(&L, 1, fn, all);
    return dst;
}

static void gelu_tanh_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx =
        gelu_tanh_map(gelu_tanh_grad_run, 2, (tg_tensor *[]){dy, n->in[0]});
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

static tg_tensor *gelu_tanh_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return tg_gelu_tanh(in[0]);
}
static const tg_op gelu_tanh_op = {.name = "gelu_tanh",
                                   .backward = gelu_tanh_backward,
                                   .replay = gelu_tanh_replay,
                                   .vjp = tg__gelu_tanh_vjp,
                                   .jvp = tg__gelu_tanh_jvp};

tg_tensor *tg_gelu_tanh(tg_tensor *t)
{
    if (!t || !tg__check_float("gelu_tanh", t))
        return NULL;
    return tg__record(&gelu_tanh_op, gelu_tanh_map(gelu_tanh_run, 1, &t), 1,
                      &t);
}
