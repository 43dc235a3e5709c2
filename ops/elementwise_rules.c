/* The recorded backward (tg_op.vjp) and the forward-mode rule (tg_op.jvp)
 * of the ops of ops/elementwise.c, as public differentiable ops, so that
 * with grad mode on they go on the tape and can be differentiated again
 * (core/tape.h states the contract).
 *
 * The unary maps are elementwise: their Jacobian is the diagonal
 * diag(f'(x)), its own transpose, so vjp and jvp are one product
 * v * f'(x), applied to dy or to the tangent t. f'(x) is built from x
 * (and from the output y where the op reads it, tg_op.reads_out), never
 * from a value the fast backward keeps detached (gelu's erfc).
 *
 * gelu's slope needs the normal CDF Phi, which no public op computes: an
 * internal op of its own here, "normal_cdf" (ops/ops.def), whose
 * derivative is the density, written with public ops. */
#include "ops/elementwise_rules.h"
#include "kernels/vmath.h"

#include <math.h>

/* ---- shared endings ----------------------------------------------------- */

/* The end of a vjp: 0 when every input that needs a gradient got one;
 * otherwise (an op failed, its error set) every dx released and NULL, -1. */
static int vjp_done(const tg_node *n, tg_tensor **dx)
{
    bool ok = true;
    for (int i = 0; i < n->n_in; i++)
        ok &= !tg__needs_grad(n, i) || dx[i];
    if (ok)
        return 0;
    for (int i = 0; i < n->n_in; i++) {
        tg_release(dx[i]);
        dx[i] = NULL;
    }
    return -1;
}

/* A diagonal rule: J v = J^T v = v * f'(x), computed by apply(n, v). */
typedef tg_tensor *(*slope_fn)(const tg_node *n, tg_tensor *v);

static int diagonal_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx,
                        slope_fn apply)
{
    if (tg__needs_grad(n, 0))
        dx[0] = apply(n, dy);
    return vjp_done(n, dx);
}

static int diagonal_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty,
                        slope_fn apply)
{
    *ty = t[0] ? apply(n, t[0]) : NULL;
    return t[0] && !*ty ? -1 : 0;
}

/* tg__<op>_vjp and tg__<op>_jvp from <op>_apply. */
#define DIAGONAL_RULES(op)                                                     \
    int tg__##op##_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)        \
    {                                                                          \
        return diagonal_vjp(n, dy, dx, op##_apply);                            \
    }                                                                          \
    int tg__##op##_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)  \
    {                                                                          \
        return diagonal_jvp(n, t, ty, op##_apply);                             \
    }

/* ---- binary: y = a (op) b, broadcast ------------------------------------ */

/* dx[i] may keep dy's (the output's) shape: the walk sums it down to a
 * broadcast input's. A tangent has its input's shape, which broadcasts to
 * the output's. */

/* vjp: da = dy, db = dy ;  jvp: ty = ta + tb */
int tg__add_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    for (int i = 0; i < 2; i++)
        if (tg__needs_grad(n, i))
            dx[i] = tg_retain(dy);
    return 0;
}

int tg__add_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    (void)n;
    *ty = t[0] && t[1] ? tg_add(t[0], t[1]) : tg_retain(t[0] ? t[0] : t[1]);
    return (t[0] || t[1]) && !*ty ? -1 : 0;
}

/* vjp: da = dy, db = -dy ;  jvp: ty = ta - tb */
int tg__sub_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (tg__needs_grad(n, 0))
        dx[0] = tg_retain(dy);
    if (tg__needs_grad(n, 1))
        dx[1] = tg_neg(dy);
    return vjp_done(n, dx);
}

int tg__sub_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    (void)n;
    *ty = t[0] && t[1] ? tg_sub(t[0], t[1])
          : t[0]       ? tg_retain(t[0])
          : t[1]       ? tg_neg(t[1])
                       : NULL;
    return (t[0] || t[1]) && !*ty ? -1 : 0;
}

/* vjp: da = dy * b, db = dy * a ;  jvp: ty = ta * b + a * tb */
int tg__mul_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    for (int i = 0; i < 2; i++)
        if (tg__needs_grad(n, i))
            dx[i] = tg_mul(dy, n->in[1 - i]);
    return vjp_done(n, dx);
}

int tg__mul_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    tg_tensor *ta = t[0] ? tg_mul(t[0], n->in[1]) : NULL;
    tg_tensor *tb = t[1] ? tg_mul(n->in[0], t[1]) : NULL;
    const bool failed = (t[0] && !ta) || (t[1] && !tb);
    *ty = failed ? NULL : ta && tb ? tg_add(ta, tb) : tg_retain(ta ? ta : tb);
    tg_release(ta);
    tg_release(tb);
    return (t[0] || t[1]) && !*ty ? -1 : 0;
}

/* y = a / b (div reads its output):
 * vjp: da = dy / b, db = -(dy / b) * y   (= -dy a / b^2, as the backward)
 * jvp: ty = (ta - y tb) / b */
int tg__div_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    tg_tensor *da = tg_div(dy, n->in[1]);
    if (tg__needs_grad(n, 1)) {
        tg_tensor *da_y = tg_mul(da, n->out);
        dx[1] = tg_neg(da_y);
        tg_release(da_y);
    }
    if (tg__needs_grad(n, 0))
        dx[0] = tg_retain(da);
    tg_release(da);
    return vjp_done(n, dx);
}

int tg__div_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0] && !t[1])
        return 0;
    tg_tensor *y_tb = t[1] ? tg_mul(n->out, t[1]) : NULL;
    tg_tensor *num = !t[1]   ? tg_retain(t[0])
                     : !t[0] ? tg_neg(y_tb)
                             : tg_sub(t[0], y_tb);
    *ty = tg_div(num, n->in[1]);
    tg_release(num);
    tg_release(y_tb);
    return *ty ? 0 : -1;
}

/* ---- unary maps, y = f(x), p = n->p[0] ---------------------------------- */

/* neg:  vjp: dx = -dy ;  jvp: ty = -t */
static tg_tensor *neg_apply(const tg_node *n, tg_tensor *v)
{
    (void)n;
    return tg_neg(v);
}
DIAGONAL_RULES(neg)

/* scale (y = p x):  vjp: dx = p dy ;  jvp: ty = p t */
static tg_tensor *scale_apply(const tg_node *n, tg_tensor *v)
{
    return tg_scale(v, n->p[0]);
}
DIAGONAL_RULES(scale)

/* add_scalar (y = x + p):  vjp: dx = dy ;  jvp: ty = t */
static tg_tensor *add_scalar_apply(const tg_node *n, tg_tensor *v)
{
    (void)n;
    return tg_retain(v);
}
DIAGONAL_RULES(add_scalar)

/* exp (reads y = e^x):  vjp: dx = dy * y ;  jvp: ty = t * y */
static tg_tensor *exp_apply(const tg_node *n, tg_tensor *v)
{
    return tg_mul(v, n->out);
}
DIAGONAL_RULES(exp)

/* log:  vjp: dx = dy / x ;  jvp: ty = t / x */
static tg_tensor *log_apply(const tg_node *n, tg_tensor *v)
{
    return tg_div(v, n->in[0]);
}
DIAGONAL_RULES(log)

/* sqrt (reads y = x^(1/2)):  vjp: dx = dy / (2 y) ;  jvp: ty = t / (2 y) */
static tg_tensor *sqrt_apply(const tg_node *n, tg_tensor *v)
{
    tg_tensor *two_y = tg_scale(n->out, 2);
    tg_tensor *r = tg_div(v, two_y);
    tg_release(two_y);
    return r;
}
DIAGONAL_RULES(sqrt)

/* pow (y = x^p):  vjp: dx = dy * (p x^(p-1)) ;  jvp: ty = t * (p x^(p-1));
 * p == 0: y = 1 is constant, dx = ty = 0 (as the backward: no 0 * inf) */
static tg_tensor *pow_apply(const tg_node *n, tg_tensor *v)
{
    const double p = n->p[0];
    if (p == 0)
        return tg_zeros_like(n->in[0]);
    tg_tensor *xp = tg_pow_scalar(n->in[0], p - 1);
    tg_tensor *slope = tg_scale(xp, p);
    tg_tensor *r = tg_mul(v, slope);
    tg_release(slope);
    tg_release(xp);
    return r;
}
DIAGONAL_RULES(pow)

/* relu:  vjp: dx = dy where x > 0, else 0 ;  jvp: ty = t where x > 0, else
 * 0. The mask is the backward's (x <= 0 filled: 0 at the kink, NaN passes),
 * a constant of the graph, so the second derivative is exactly 0. */
static tg_tensor *relu_apply(const tg_node *n, tg_tensor *v)
{
    tg_tensor *off = tg_le_scalar(n->in[0], 0);
    tg_tensor *r = tg_masked_fill(v, off, 0);
    tg_release(off);
    return r;
}
DIAGONAL_RULES(relu)

/* ---- normal_cdf: Phi(x), an internal op for gelu's rules ------------------ */

/* The density phi(x) = exp(-x^2 / 2) / sqrt(2 pi), as public ops. */
static tg_tensor *normal_pdf(tg_tensor *x)
{
    tg_tensor *x2 = tg_mul(x, x);
    tg_tensor *h = tg_scale(x2, -0.5);
    tg_tensor *e = tg_exp(h);
    tg_tensor *r = tg_scale(e, TG_INV_SQRT_2PI);
    tg_release(e);
    tg_release(h);
    tg_release(x2);
    return r;
}

/* y = Phi(x) over one run; operands {y, x}. As gelu's forward, from
 * c = erfc(|x| / sqrt 2): Phi = c / 2 for x < 0, 1 - c / 2 otherwise
 * (no cancellation in the left tail); in double, rounded once. */
static void normal_cdf_run(void *job, int64_t start, const int64_t *off,
                           const int64_t *step, int64_t len)
{
    tg_tensor *const *t = job; /* y, x */
    (void)start;
    TG_DISPATCH_FLOAT(t[0]->dtype, T, {
        T *y = TG_DATA(T, t[0]) + off[0];
        const T *x = TG_DATA(T, t[1]) + off[1];
        for (int64_t i = 0; i < len; i++) {
            const double xi = x[i * step[1]];
            const double ci = erfc(fabs(xi) * TG_INV_SQRT2);
            y[i * step[0]] = (T)(0.5 * (signbit(xi) ? ci : 2 - ci));
        }
    });
}

/* dPhi/dx = phi(x):  backward and vjp: dx = dy * phi(x) ;
 * jvp: ty = t * phi(x). phi is public ops: every order differentiates. */
static tg_tensor *normal_cdf_apply(const tg_node *n, tg_tensor *v)
{
    tg_tensor *pdf = normal_pdf(n->in[0]);
    tg_tensor *r = tg_mul(v, pdf);
    tg_release(pdf);
    return r;
}

static void normal_cdf_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    tg_tensor *dx = normal_cdf_apply(n, dy);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

static int normal_cdf_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    return diagonal_vjp(n, dy, dx, normal_cdf_apply);
}

static int normal_cdf_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    return diagonal_jvp(n, t, ty, normal_cdf_apply);
}

static tg_tensor *normal_cdf(tg_tensor *x);
static tg_tensor *normal_cdf_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return normal_cdf(in[0]);
}

static const tg_op normal_cdf_op = {.name = "normal_cdf",
                                    .backward = normal_cdf_backward,
                                    .replay = normal_cdf_replay,
                                    .vjp = normal_cdf_vjp,
                                    .jvp = normal_cdf_jvp};

/* Phi(x), recorded as entry normal_cdf when grad mode is on and x requires
 * grad. New reference, or NULL with an error. */
static tg_tensor *normal_cdf(tg_tensor *x)
{
    if (!x || !tg__check_float("normal_cdf", x))
        return NULL;
    tg_tensor *y = tg__new("normal_cdf", x->dtype, x->ndim, x->shape, false);
    if (!y)
        return NULL;
    tg_tensor *ops[2] = {y, x};
    tg_loop L;
    tg__loop_init(&L, y->ndim, y->shape, 2, (const tg_tensor *const *)ops);
    tg__loop_run(&L, 1, normal_cdf_run, ops);
    return tg__record(&normal_cdf_op, y, 1, &x);
}

/* ---- gelu and gelu_tanh -------------------------------------------------- */

/* gelu, y = x Phi(x):  gelu'(x) = Phi(x) + x phi(x)
 * vjp: dx = dy * (Phi(x) + x phi(x)) ;  jvp: ty = t * (Phi(x) + x phi(x))
 * Phi by normal_cdf, not the forward's kept erfc (detached). */
static tg_tensor *gelu_apply(const tg_node *n, tg_tensor *v)
{
    tg_tensor *x = n->in[0];
    tg_tensor *cdf = normal_cdf(x);
    tg_tensor *pdf = normal_pdf(x);
    tg_tensor *x_pdf = tg_mul(x, pdf);
    tg_tensor *slope = tg_add(cdf, x_pdf);
    tg_tensor *r = tg_mul(v, slope);
    tg_release(slope);
    tg_release(x_pdf);
    tg_release(pdf);
    tg_release(cdf);
    return r;
}
DIAGONAL_RULES(gelu)

/* gelu_tanh, y = x/2 (1 + tanh u), u = k (x + c x^3), k = sqrt(2/pi):
 *   y' = 1/2 (1 + tanh u) + 1/2 x (1 - tanh(u)^2) k (1 + 3 c x^2)
 * vjp: dx = dy * y' ;  jvp: ty = t * y' */
static tg_tensor *gelu_tanh_apply(const tg_node *n, tg_tensor *v)
{
    enum { N = 15 };
    tg_tensor *x = n->in[0], *s[N];
    s[0] = tg_mul(x, x);                                  /* x^2 */
    s[1] = tg_scale(s[0], GELU_TANH_C);                   /* c x^2 */
    s[2] = tg_add_scalar(s[1], 1);                        /* 1 + c x^2 */
    s[3] = tg_mul(x, s[2]);                               /* x + c x^3 */
    s[4] = tg_scale(s[3], GELU_TANH_K);                   /* u */
    s[5] = tg_tanh(s[4]);                                 /* tanh u */
    s[6] = tg_mul(s[5], s[5]);                            /* tanh(u)^2 */
    s[7] = tg_neg(s[6]);                                  /* -tanh(u)^2 */
    s[8] = tg_add_scalar(s[7], 1);                        /* 1 - tanh(u)^2 */
    s[9] = tg_scale(s[0], 3 * GELU_TANH_C * GELU_TANH_K); /* 3 c k x^2 */
    s[10] = tg_add_scalar(s[9], GELU_TANH_K);             /* k (1 + 3 c x^2) */
    s[11] = tg_mul(x, s[8]);                              /* x (1 - tanh^2) */
    s[12] = tg_mul(s[11], s[10]);                         /* x (1-th^2) du */
    s[13] = tg_add_scalar(s[5], 1);                       /* 1 + tanh u */
    s[14] = tg_add(s[13], s[12]);                         /* 2 y' */
    tg_tensor *slope = tg_scale(s[N - 1], 0.5);
    tg_tensor *r = tg_mul(v, slope);
    tg_release(slope);
    for (int i = 0; i < N; i++)
        tg_release(s[i]);
    return r;
}
DIAGONAL_RULES(gelu_tanh)
