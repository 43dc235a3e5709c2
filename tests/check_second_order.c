/* Second order and forward mode against PyTorch
 * (tests/fixtures/gen_second_order.py, the so_ fixtures):
 *
 *  - double backward of each op: with L = <u, f(x)>, g = dL/dx from
 *    tg_grads with TG_CREATE_GRAPH, then h = d<g, w>/dx = H w, once by
 *    tg_grads again and once by tg_backward through the recorded graph;
 *    g and h to 1e-10;
 *  - the lesson's causal head under the project's mean-of-squares loss:
 *    tg_hvp with respect to w_q and to x (the latter through the public ops
 *    and through tg_head_forward on each of its three paths), and
 *    tg_hessian with respect to one query's row of raw scores, whose masked
 *    keys must give exact zeros;
 *  - tg_jvp against torch.autograd.forward_ad: the head's output, the
 *    masked softmax (composed and fused), layer_norm (every tangent, and x's
 *    alone with NULL for the others) and gelu(x @ w), to 1e-12, the value
 *    being f's own, bit for bit.
 *
 * Every result is compared as |got - want| <= tol * max(1, |want|): the
 * second derivatives here are of order 1e-3 to 10, and float64 rounding of
 * two computations that sum in other orders stays near 1e-15 of the
 * largest term. A zero that is structural (a masked score, an input the
 * gradient does not depend on) must be exactly 0: nothing flows there, so
 * any other value is a leak through the mask, not rounding. */
#include "tests.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECOND_TOL 1e-10
#define JVP_TOL    1e-12
#define MAX_IN     3
#define LN_EPS     1e-5

/* gen_second_order.py's head (B 2): T, C, hs, and the query whose raw
 * score row so_head_row_hessian is taken over. */
enum { HEAD_T = 4, HEAD_C = 8, HEAD_HS = 4, HEAD_ROW = 2 };

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* ---- fixtures and comparisons ------------------------------------------ */

/* so_<stem>_<what>.npy, what printf-formatted. */
static tg_tensor *so_fixture(const char *stem, const char *what, ...)
{
    char part[32], name[128];
    va_list ap;
    va_start(ap, what);
    vsnprintf(part, sizeof part, what, ap);
    va_end(ap);
    snprintf(name, sizeof name, "so_%s_%s.npy", stem, part);
    return load_fixture(name);
}

/* Which zeros of the reference must be exactly zero in the result. */
typedef enum {
    /* wherever the reference is exactly 0 (where every such zero is
     * structural: gen_second_order.py asserts it) */
    ZEROS_EXACT,
    /* where the last two dims' column is past the row: the keys a causal
     * mask hides from each query */
    ZEROS_MASKED,
} zeros_rule;

/* Asserts got has want's shape and |got - want| <= tol * max(1, |want|)
 * everywhere, exactly 0 where rule says so (what names the comparison). */
static void assert_matches(const char *what, const tg_tensor *got,
                           const tg_tensor *want, double tol, zeros_rule rule)
{
    ck_assert_msg(got != NULL, "%s: NULL (%s)", what, tg_last_error());
    assert_shape(got, tg_ndim(want), tg_shape(want));
    const int64_t n = tg_numel(want);
    const int nd = tg_ndim(want);
    const int64_t cols = nd >= 1 ? tg_size(want, -1) : 1;
    const int64_t rows = nd >= 2 ? tg_size(want, -2) : 1;
    double *g = values_of(got), *w = values_of(want);
    for (int64_t i = 0; i < n; i++) {
        const int64_t col = i % cols, row = i / cols % rows;
        const bool exact =
            rule == ZEROS_EXACT ? w[i] == 0 : nd >= 2 && col > row;
        const bool ok = exact ? g[i] == 0 && w[i] == 0
                              : fabs(g[i] - w[i]) <= tol * fmax(1, fabs(w[i]));
        if (!ok) {
            const double gi = g[i], wi = w[i];
            free(g);
            free(w);
            ck_abort_msg("%s: element %lld: got %.17g, want %.17g (%s)", what,
                         (long long)i, gi, wi,
                         exact ? "exactly 0" : "within tolerance");
        }
    }
    free(g);
    free(w);
}

/* The lesson's causal mask for n queries and n keys: true where key j >
 * query i, i.e. tril(ones(n, n)) == 0. */
static tg_tensor *future_mask(int64_t n)
{
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(n, n));
    tg_tensor *tril = tg_tril(ones, 0);
    tg_tensor *future = tg_eq_scalar(tril, 0);
    tg_release(ones);
    tg_release(tril);
    return future;
}

/* softmax(masked_fill(scores, future, -inf), -1), op by op. */
static tg_tensor *masked_softmax(tg_tensor *scores)
{
    tg_tensor *future = future_mask(tg_size(scores, -1));
    tg_tensor *masked = tg_masked_fill(scores, future, -INFINITY);
    tg_tensor *attn = tg_softmax(masked, -1);
    tg_release(future);
    tg_release(masked);
    return attn;
}

/* ---- the functions, one per op ------------------------------------------ */

static tg_tensor *f_exp(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_exp(x[0]);
}
static tg_tensor *f_log(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_log(x[0]);
}
static tg_tensor *f_sqrt(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_sqrt(x[0]);
}
static tg_tensor *f_pow3(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_pow_scalar(x[0], 3);
}
static tg_tensor *f_pow05(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_pow_scalar(x[0], 0.5);
}
static tg_tensor *f_sigmoid(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_sigmoid(x[0]);
}
static tg_tensor *f_tanh(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_tanh(x[0]);
}
static tg_tensor *f_gelu(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_gelu(x[0]);
}
static tg_tensor *f_gelu_tanh(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_gelu_tanh(x[0]);
}
static tg_tensor *f_mul(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_mul(x[0], x[1]);
}
static tg_tensor *f_div(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_div(x[0], x[1]);
}
static tg_tensor *f_matmul(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_matmul(x[0], x[1]);
}
static tg_tensor *f_softmax(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_softmax(x[0], -1);
}
static tg_tensor *f_log_softmax(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_log_softmax(x[0], -1);
}
static tg_tensor *f_masked_softmax(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return masked_softmax(x[0]);
}
/* The same function as one tg_attention_softmax entry (scale 1): its
 * recorded backward and its forward rule are its own, not the composed
 * ops'. */
static tg_tensor *f_fused_softmax(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_attention_softmax(x[0], 1.0, true);
}
static tg_tensor *f_layer_norm(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_layer_norm(x[0], x[1], x[2], LN_EPS);
}
/* ctx: the int64 targets. */
static tg_tensor *f_cross_entropy(tg_tensor *const *x, void *ctx)
{
    return tg_cross_entropy(x[0], ctx);
}
static tg_tensor *f_mse_loss(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    return tg_mse_loss(x[0], x[1]);
}
/* s * s with s = sum(x, 1): sum is linear (its own Hessian is 0), so the
 * square is what puts its recorded backward on the second derivative's
 * path: g = 2 s u broadcast back along dim 1, which depends on x. */
static tg_tensor *f_sum(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    tg_tensor *s = tg_sum(x[0], 1, false);
    tg_tensor *y = tg_mul(s, s);
    tg_release(s);
    return y;
}
/* m * m with m = mean(x, 0), as f_sum. */
static tg_tensor *f_mean(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    tg_tensor *m = tg_mean(x[0], 0, false);
    tg_tensor *y = tg_mul(m, m);
    tg_release(m);
    return y;
}
/* gelu(x0 @ x1). */
static tg_tensor *f_matmul_gelu(tg_tensor *const *x, void *ctx)
{
    (void)ctx;
    tg_tensor *z = tg_matmul(x[0], x[1]);
    tg_tensor *y = tg_gelu(z);
    tg_release(z);
    return y;
}

/* ---- double backward ----------------------------------------------------- */

typedef struct {
    const char *name;    /* the case, for messages */
    const char *fixture; /* so_<fixture>_... */
    int n;               /* inputs */
    tg_fn f;
    bool causal;         /* keys past the query masked: exact zeros there */
    const char *targets; /* a constant fixture handed to f as ctx, or NULL */
} db_case;

static const db_case db_cases[] = {
    {"exp", "exp", 1, f_exp, false, NULL},
    {"log", "log", 1, f_log, false, NULL},
    {"sqrt", "sqrt", 1, f_sqrt, false, NULL},
    {"pow 3", "pow3", 1, f_pow3, false, NULL},
    {"pow 0.5", "pow05", 1, f_pow05, false, NULL},
    {"sigmoid", "sigmoid", 1, f_sigmoid, false, NULL},
    {"tanh", "tanh", 1, f_tanh, false, NULL},
    {"gelu", "gelu", 1, f_gelu, false, NULL},
    {"gelu_tanh", "gelu_tanh", 1, f_gelu_tanh, false, NULL},
    {"mul", "mul", 2, f_mul, false, NULL},
    {"div", "div", 2, f_div, false, NULL},
    {"matmul", "matmul", 2, f_matmul, false, NULL},
    {"softmax", "softmax", 1, f_softmax, false, NULL},
    {"log_softmax", "log_softmax", 1, f_log_softmax, false, NULL},
    {"masked softmax", "masked_softmax", 1, f_masked_softmax, true, NULL},
    {"attention_softmax", "masked_softmax", 1, f_fused_softmax, true, NULL},
    {"layer_norm", "layer_norm", 3, f_layer_norm, false, NULL},
    {"cross_entropy", "cross_entropy", 1, f_cross_entropy, false, "targets"},
    {"mse_loss", "mse_loss", 2, f_mse_loss, false, NULL},
    {"sum", "sum", 1, f_sum, false, NULL},
    {"mean", "mean", 1, f_mean, false, NULL},
};
#define N_DB ((int)(sizeof db_cases / sizeof *db_cases))

/* sum_i <g[i], w[i]>: the first derivative of L along w, a scalar whose
 * gradient is H w (H the Hessian of L, symmetric). */
static tg_tensor *along(tg_tensor *const *g, tg_tensor *const *w, int n)
{
    tg_tensor *s = NULL;
    for (int i = 0; i < n; i++) {
        tg_tensor *gw = tg_mul(g[i], w[i]);
        tg_tensor *term = tg_sum_all(gw);
        tg_release(gw);
        if (!s) {
            s = term;
            continue;
        }
        tg_tensor *next = tg_add(s, term);
        tg_release(s);
        tg_release(term);
        s = next;
    }
    return s;
}

/* Case _i / 2; _i % 2 picks the second walk: 0, tg_grads (of g along w
 * directly for one input, as torch.autograd.grad(g, x, w); of <g, w>
 * summed over the inputs for several); 1, tg_backward of <g, w>, which
 * accumulates H w into the inputs' gradients (tg_grads left them
 * untouched). */
START_TEST(test_double_backward)
{
    const db_case *c = &db_cases[_i / 2];
    const bool walk = _i % 2;
    char what[96];
    tg_scope_begin();
    tg_tensor *x[MAX_IN], *w[MAX_IN], *g[MAX_IN] = {0}, *h[MAX_IN] = {0};
    for (int i = 0; i < c->n; i++) {
        x[i] = so_fixture(c->fixture, "x%d", i);
        w[i] = so_fixture(c->fixture, "w%d", i);
        tg_set_requires_grad(x[i], true);
    }
    tg_tensor *u = so_fixture(c->fixture, "u");
    tg_tensor *targets =
        c->targets ? so_fixture(c->fixture, "%s", c->targets) : NULL;
    const zeros_rule zeros = c->causal ? ZEROS_MASKED : ZEROS_EXACT;

    tg_tensor *y = c->f(x, targets);
    ck_assert_msg(y != NULL, "%s: %s", c->name, tg_last_error());
    ck_assert_msg(tg_grads(y, u, c->n, x, g, TG_CREATE_GRAPH) == 0,
                  "%s: tg_grads: %s", c->name, tg_last_error());
    for (int i = 0; i < c->n; i++) {
        snprintf(what, sizeof what, "%s: g%d", c->name, i);
        assert_matches(what, g[i], so_fixture(c->fixture, "g%d", i), SECOND_TOL,
                       zeros);
        ck_assert_msg(tg_grad(x[i]) == NULL, "%s: tg_grads accumulated", what);
    }

    if (!walk && c->n == 1) {
        ck_assert_msg(tg_grads(g[0], w[0], 1, x, h, TG_ALLOW_UNUSED) == 0,
                      "%s: second tg_grads: %s", c->name, tg_last_error());
    } else {
        tg_tensor *s = along(g, w, c->n);
        ck_assert_msg(s != NULL, "%s: <g, w>: %s", c->name, tg_last_error());
        if (!walk) {
            ck_assert_msg(tg_grads(s, NULL, c->n, x, h, TG_ALLOW_UNUSED) == 0,
                          "%s: second tg_grads: %s", c->name, tg_last_error());
        } else {
            ck_assert_msg(tg_backward(s) == 0, "%s: tg_backward: %s", c->name,
                          tg_last_error());
            /* an input the walk never reached has no gradient: zeros */
            for (int i = 0; i < c->n; i++)
                h[i] = tg_grad(x[i]) ? tg_grad(x[i]) : tg_zeros_like(x[i]);
        }
        tg_release(s);
    }
    for (int i = 0; i < c->n; i++) {
        snprintf(what, sizeof what, "%s: h%d (%s)", c->name, i,
                 walk ? "tg_backward" : "tg_grads");
        assert_matches(what, h[i], so_fixture(c->fixture, "h%d", i), SECOND_TOL,
                       zeros);
        tg_release(g[i]);
        /* tg_grads' are ours; a gradient tg_backward left is x's */
        if (!walk || !tg_grad(x[i]))
            tg_release(h[i]);
    }
    tg_scope_end();
}
END_TEST

/* ---- the head's loss --------------------------------------------------- */

/* The so_head_ fixtures, and what the loss functions read: a module to run
 * instead of the public ops (NULL: the ops), the row's constants. */
typedef struct {
    tg_tensor *x, *w_q, *w_k, *w_v, *target;
    tg_tensor *base, *onehot; /* so_head_row_: the other raw scores, e_ROW */
    tg_head *module;
} head_ctx;

static void head_load(head_ctx *c)
{
    memset(c, 0, sizeof *c);
    c->x = so_fixture("head", "x");
    c->w_q = so_fixture("head", "w_q");
    c->w_k = so_fixture("head", "w_k");
    c->w_v = so_fixture("head", "w_v");
    c->target = so_fixture("head", "target");
    c->base = so_fixture("head_row", "base");
    c->onehot = so_fixture("head_row", "onehot");
}

/* A float64 head holding the fixture's weights, on path. */
static void head_module(tg_head *h, const head_ctx *c, tg_head_path path)
{
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    ck_assert_int_eq(tg_head_init(h, TG_FLOAT64, HEAD_C, HEAD_HS, &rng), 0);
    ck_assert_int_eq(tg_copy_(h->w_q, c->w_q), 0);
    ck_assert_int_eq(tg_copy_(h->w_k, c->w_k), 0);
    ck_assert_int_eq(tg_copy_(h->w_v, c->w_v), 0);
    h->path = path;
}

/* attn @ (x @ w_v), attn = softmax(masked(raw / sqrt(hs))): the head from
 * its raw scores q . k on. */
static tg_tensor *attend(tg_tensor *raw, tg_tensor *x, tg_tensor *w_v)
{
    tg_scope_begin();
    tg_tensor *scores = tg_scale(raw, 1 / sqrt((double)tg_size(w_v, 1)));
    tg_tensor *attn = masked_softmax(scores);
    tg_tensor *out = tg_scope_return(tg_matmul(attn, tg_matmul(x, w_v)));
    tg_scope_end();
    return out;
}

/* The lesson's head in public ops, as nn/head.c composes it:
 * softmax(masked(q @ k^T / sqrt(hs))) @ v, q, k, v = x @ w_q, w_k, w_v. */
static tg_tensor *head_out(tg_tensor *x, tg_tensor *w_q, tg_tensor *w_k,
                           tg_tensor *w_v)
{
    tg_scope_begin();
    tg_tensor *q = tg_matmul(x, w_q), *k = tg_matmul(x, w_k);
    tg_tensor *raw = tg_matmul(q, tg_transpose(k, 1, 2));
    tg_tensor *out = tg_scope_return(attend(raw, x, w_v));
    tg_scope_end();
    return out;
}

/* The project's loss for the head (examples/recall_task.h trains it with
 * tg_mse_loss), over the whole output: mean((out - target)^2). */
static tg_tensor *head_loss(tg_tensor *out, const head_ctx *c)
{
    tg_tensor *loss = tg_mse_loss(out, c->target);
    tg_release(out);
    return loss;
}

/* The head's output as a function of x (module or ops). */
static tg_tensor *out_of_x(tg_tensor *const *in, void *ctx)
{
    const head_ctx *c = ctx;
    return c->module ? tg_head_forward(c->module, in[0])
                     : head_out(in[0], c->w_q, c->w_k, c->w_v);
}

static tg_tensor *loss_of_x(tg_tensor *const *in, void *ctx)
{
    return head_loss(out_of_x(in, ctx), ctx);
}

static tg_tensor *loss_of_w_q(tg_tensor *const *in, void *ctx)
{
    const head_ctx *c = ctx;
    return head_loss(head_out(c->x, in[0], c->w_k, c->w_v), c);
}

/* The loss as a function of r, query ROW's raw scores in batch 0:
 * raw = base + onehot * r puts r in that row (base has it zeroed, onehot
 * is 1 there and 0 in every other row), the rest of the head as it is. */
static tg_tensor *loss_of_row(tg_tensor *const *in, void *ctx)
{
    const head_ctx *c = ctx;
    tg_scope_begin();
    tg_tensor *raw = tg_add(c->base, tg_mul(c->onehot, in[0]));
    tg_tensor *out = attend(raw, c->x, c->w_v);
    tg_tensor *loss = tg_scope_return(head_loss(out, c));
    tg_scope_end();
    return loss;
}

/* The public ops' head gives PyTorch's output, loss and gradient with
 * respect to w_q (a check of the function the HVP differentiates), then
 * tg_hvp along v: H v to 1e-10, w_q left as it was. */
START_TEST(test_head_hvp_w_q)
{
    tg_scope_begin();
    head_ctx c;
    head_load(&c);
    tg_tensor *leaf = tg_detach(c.w_q);
    tg_set_requires_grad(leaf, true);
    tg_tensor *out = head_out(c.x, leaf, c.w_k, c.w_v);
    assert_matches("head out", out, so_fixture("head", "out"), JVP_TOL,
                   ZEROS_EXACT);
    tg_tensor *loss = loss_of_w_q(&leaf, &c);
    assert_matches("head loss", loss, so_fixture("head", "loss"), JVP_TOL,
                   ZEROS_EXACT);
    tg_tensor *grad = NULL;
    ck_assert_msg(tg_grads(loss, NULL, 1, &leaf, &grad, 0) == 0, "%s",
                  tg_last_error());
    assert_matches("dloss/dw_q", grad, so_fixture("head", "dw_q"), SECOND_TOL,
                   ZEROS_EXACT);
    tg_release(grad);

    tg_tensor *hv = tg_hvp(loss_of_w_q, &c, c.w_q, so_fixture("head", "v_w_q"));
    assert_matches("H v, w_q", hv, so_fixture("head", "hvp_w_q"), SECOND_TOL,
                   ZEROS_EXACT);
    ck_assert(!tg_requires_grad(c.w_q));
    ck_assert_ptr_null(tg_grad(c.w_q));
    tg_release(hv);
    tg_scope_end();
}
END_TEST

/* H v for the loss as a function of x: through the public ops (_i 0) and
 * through tg_head_forward on each path (_i 1..3: composed, the fused
 * softmax, the tiled attention, whose recorded backwards differ). */
START_TEST(test_head_hvp_x)
{
    static const char *const label[] = {"ops", "composed", "fused softmax",
                                        "tiled"};
    static const tg_head_path paths[] = {TG_HEAD_COMPOSED, TG_HEAD_COMPOSED,
                                         TG_HEAD_FUSED_SOFTMAX, TG_HEAD_TILED};
    char what[64];
    tg_scope_begin();
    head_ctx c;
    head_load(&c);
    tg_head h = {0};
    if (_i > 0) {
        head_module(&h, &c, paths[_i]);
        c.module = &h;
    }
    tg_tensor *hv = tg_hvp(loss_of_x, &c, c.x, so_fixture("head", "v_x"));
    snprintf(what, sizeof what, "H v, x (%s)", label[_i]);
    assert_matches(what, hv, so_fixture("head", "hvp_x"), SECOND_TOL,
                   ZEROS_EXACT);
    ck_assert(!tg_requires_grad(c.x));
    ck_assert_ptr_null(tg_grad(c.x));
    tg_release(hv);
    if (_i > 0)
        tg_head_free(&h);
    tg_scope_end();
}
END_TEST

/* The Hessian with respect to query ROW's raw scores: (T,T), through the
 * scale, the mask and the softmax. Keys past ROW are masked to -inf before
 * the softmax, so the loss does not depend on their raw scores at all:
 * their rows and columns of the Hessian are exactly 0, as PyTorch's. */
START_TEST(test_head_row_hessian)
{
    tg_scope_begin();
    head_ctx c;
    head_load(&c);
    tg_tensor *r = so_fixture("head_row", "r");
    tg_tensor *loss = loss_of_row(&r, &c);
    assert_matches("row loss", loss, so_fixture("head", "loss"), JVP_TOL,
                   ZEROS_EXACT);
    tg_tensor *hess = tg_hessian(loss_of_row, &c, r);
    tg_tensor *want = so_fixture("head_row", "hessian");
    assert_matches("row Hessian", hess, want, SECOND_TOL, ZEROS_EXACT);
    for (int64_t j = HEAD_ROW + 1; j < HEAD_T; j++)
        for (int64_t k = 0; k < HEAD_T; k++) {
            ck_assert_double_eq(tg_get(want, (const int64_t[]){j, k}), 0);
            ck_assert_double_eq(tg_get(want, (const int64_t[]){k, j}), 0);
        }
    tg_release(hess);
    tg_scope_end();
}
END_TEST

/* ---- forward mode -------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *fixture; /* so_jvp_<fixture>_... */
    int n, n_tangents;   /* inputs; the first n_tangents have a tangent */
    tg_fn f;
    bool causal;
    int head; /* 0: not the head; 1: the head in ops; 2..4: on a path */
} jvp_case;

static const jvp_case jvp_cases[] = {
    {"head (ops)", "head", 1, 1, out_of_x, false, 1},
    {"head (composed)", "head", 1, 1, out_of_x, false, 2},
    {"head (fused softmax)", "head", 1, 1, out_of_x, false, 3},
    {"head (tiled)", "head", 1, 1, out_of_x, false, 4},
    {"masked softmax", "masked_softmax", 1, 1, f_masked_softmax, true, 0},
    {"attention_softmax", "masked_softmax", 1, 1, f_fused_softmax, true, 0},
    {"layer_norm", "layer_norm", 3, 3, f_layer_norm, false, 0},
    {"layer_norm, x only", "layer_norm_x", 3, 1, f_layer_norm, false, 0},
    {"gelu(x @ w)", "matmul_gelu", 2, 2, f_matmul_gelu, false, 0},
};
#define N_JVP ((int)(sizeof jvp_cases / sizeof *jvp_cases))

/* tg_jvp's tangent is forward_ad's to 1e-12; its value is PyTorch's to
 * 1e-12 and f's own exactly (f ran once, on the same elements); the inputs
 * come back as they were. */
START_TEST(test_jvp)
{
    static const tg_head_path paths[] = {TG_HEAD_COMPOSED, TG_HEAD_COMPOSED,
                                         TG_HEAD_FUSED_SOFTMAX, TG_HEAD_TILED};
    const jvp_case *c = &jvp_cases[_i];
    char what[96];
    tg_scope_begin();
    char stem[48];
    snprintf(stem, sizeof stem, "jvp_%s", c->fixture);
    tg_tensor *x[MAX_IN], *t[MAX_IN] = {0};
    for (int i = 0; i < c->n; i++) {
        x[i] = so_fixture(stem, "x%d", i);
        if (i < c->n_tangents)
            t[i] = so_fixture(stem, "t%d", i);
    }
    head_ctx hc;
    tg_head h = {0};
    void *ctx = NULL;
    if (c->head) {
        head_load(&hc);
        if (c->head > 1) {
            head_module(&h, &hc, paths[c->head - 1]);
            hc.module = &h;
        }
        ctx = &hc;
    }
    const zeros_rule zeros = c->causal ? ZEROS_MASKED : ZEROS_EXACT;

    tg_tensor *value = NULL, *tangent = NULL;
    ck_assert_msg(tg_jvp(c->f, ctx, c->n, x, t, &value, &tangent) == 0,
                  "%s: tg_jvp: %s", c->name, tg_last_error());
    snprintf(what, sizeof what, "%s: tangent", c->name);
    assert_matches(what, tangent, so_fixture(stem, "tout"), JVP_TOL, zeros);
    snprintf(what, sizeof what, "%s: value", c->name);
    assert_matches(what, value, so_fixture(stem, "out"), JVP_TOL, zeros);
    tg_tensor *direct = c->f(x, ctx);
    snprintf(what, sizeof what, "%s: value against f", c->name);
    assert_matches(what, value, direct, 0, zeros);
    for (int i = 0; i < c->n; i++) {
        ck_assert(!tg_requires_grad(x[i]));
        ck_assert_ptr_null(tg_grad(x[i]));
    }
    tg_release(direct);
    tg_release(value);
    tg_release(tangent);
    if (c->head > 1)
        tg_head_free(&h);
    tg_scope_end();
}
END_TEST

/* ---- the engine's edges ---------------------------------------------- */

static tg_tensor *vec(double a, double b, double c, bool grad)
{
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(3), (double[]){a, b, c});
    tg_set_requires_grad(t, grad);
    return t;
}

/* tg_grads leaves every other tensor's gradient as it was: an
 * intermediate that retained one from an earlier backward neither adds it
 * in nor takes this call's; a recording call on it does not abort. */
START_TEST(grads_leave_retained_gradients)
{
    tg_scope_begin();
    tg_tensor *x = vec(1, 2, 3, true), *h = tg_mul(x, x), *g = NULL;
    tg_retain_grad(h);
    tg_tensor *z = tg_sum_all(h);
    ck_assert_int_eq(tg_backward_retain(z, NULL), 0);
    tg_tensor *h_grad = tg_grad(h), *x_grad = tg_grad(x);
    for (int flags = 0; flags <= TG_CREATE_GRAPH; flags += TG_CREATE_GRAPH) {
        ck_assert_msg(tg_grads(z, NULL, 1, &x, &g, TG_RETAIN_GRAPH | flags) ==
                          0,
                      "%s", tg_last_error());
        for (int64_t i = 0; i < 3; i++) /* dz/dx = 2 x */
            ck_assert_double_eq(tg_get(g, &i), 2.0 * (double)(i + 1));
        ck_assert_ptr_eq(tg_grad(h), h_grad);
        ck_assert_ptr_eq(tg_grad(x), x_grad);
        ck_assert_double_eq(tg_get(h_grad, (int64_t[]){0}), 1);
        tg_release(g);
        ck_assert_msg(tg_grads(h, h, 1, &x, &g, TG_RETAIN_GRAPH | flags) == 0,
                      "%s", tg_last_error());
        ck_assert_double_eq(tg_get(g, (int64_t[]){2}), 54); /* 2 x h = 2 x^3 */
        ck_assert_ptr_eq(tg_grad(h), h_grad);
        tg_release(g);
    }
    tg_scope_end();
}
END_TEST

/* A function of x that also takes the gradient of a parameter reached
 * through ctx (hooked, with a gradient from before). */
static int hook_calls;
static void count_hook(tg_tensor *t, void *ctx)
{
    (void)t, (void)ctx;
    hook_calls++;
}

static tg_tensor *uses_a_parameter(tg_tensor *const *in, void *ctx)
{
    tg_tensor *w = ctx, *wx = tg_mul(w, in[0]), *sq = tg_mul(wx, wx);
    tg_tensor *loss = tg_sum_all(sq);
    int rc = loss ? tg_backward_retain(loss, NULL) : -1;
    tg_release(wx), tg_release(sq);
    if (rc < 0)
        tg_release(loss), loss = NULL;
    return loss;
}

/* Inside tg_hvp, f's backward records; a parameter f reached through ctx
 * (not lent) gets its contribution added, detached, once, and its hook
 * runs once per walk; nothing is left alive holding a graph. */
START_TEST(forced_recording_leaves_parameters_plain)
{
    tg_scope_begin();
    tg_tensor *w = vec(1, 2, 3, true), *x = vec(0.5, -1, 2, false);
    tg_tensor *v = vec(1, 0, 0, false);
    tg_tensor *w0 = tg_grad(w); /* none yet: give it 100 */
    ck_assert_ptr_null(w0);
    tg_tensor *one = tg_sum_all(tg_scale(w, 100));
    ck_assert_int_eq(tg_backward(one), 0);
    ck_assert_int_eq(tg_register_post_accumulate_grad_hook(w, count_hook, NULL),
                     0);
    hook_calls = 0;
    tg_tensor *hv = tg_hvp(uses_a_parameter, w, x, v);
    ck_assert_msg(hv, "%s", tg_last_error());
    /* L = sum (w x)^2: d2L/dx2 = 2 diag(w^2), H v = (2, 0, 0) */
    ck_assert_double_eq_tol(tg_get(hv, (int64_t[]){0}), 2, 1e-12);
    /* dL/dw = 2 w x^2, added to 100 once per call of f (2: f runs once,
     * its walk once) */
    ck_assert_int_eq(hook_calls, 1);
    ck_assert(!tg_requires_grad(tg_grad(w)));
    ck_assert_double_eq_tol(tg_get(tg_grad(w), (int64_t[]){0}), 100.5, 1e-12);
    tg_register_post_accumulate_grad_hook(w, NULL, NULL);
    tg_scope_end();
    tg_zero_grad(w);
}
END_TEST

/* tg_jvp with one tensor given twice: each place carries its own
 * tangent, as torch.func.jvp: d(x y) = t1 y + x t2 at y = x. */
static tg_tensor *product(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mul(in[0], in[1]);
}

START_TEST(jvp_of_a_repeated_input)
{
    tg_scope_begin();
    tg_tensor *x = vec(1, 2, 3, false), *t1 = vec(1, 1, 1, false);
    tg_tensor *t2 = vec(10, 10, 10, false), *jv = NULL;
    ck_assert_int_eq(tg_jvp(product, NULL, 2, (tg_tensor *[]){x, x},
                            (tg_tensor *[]){t1, t2}, NULL, &jv),
                     0);
    for (int64_t i = 0; i < 3; i++)
        ck_assert_double_eq_tol(tg_get(jv, &i), 11.0 * (double)(i + 1), 1e-12);
    tg_scope_end();
}
END_TEST

Suite *second_order_suite(void)
{
    Suite *s = suite_create("second_order");
    TCase *tc = tcase_create("double_backward");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_loop_test(tc, test_double_backward, 0, 2 * N_DB);
    suite_add_tcase(s, tc);

    tc = tcase_create("head");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_head_hvp_w_q);
    tcase_add_loop_test(tc, test_head_hvp_x, 0, 4);
    tcase_add_test(tc, test_head_row_hessian);
    tcase_set_timeout(tc, 60); /* under valgrind */
    suite_add_tcase(s, tc);

    tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, grads_leave_retained_gradients);
    tcase_add_test(tc, forced_recording_leaves_parameters_plain);
    tcase_add_test(tc, jvp_of_a_repeated_input);
    suite_add_tcase(s, tc);

    tc = tcase_create("jvp");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_loop_test(tc, test_jvp, 0, N_JVP);
    suite_add_tcase(s, tc);
    return s;
}
