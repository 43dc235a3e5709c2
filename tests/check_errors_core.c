/* Bad input to the core floor: creating tensors, random numbers, inspection
 * and element access, autograd and scopes, gradcheck, .npy files and
 * printing; the same with NULL tensors; the NULL-safe functions; and the one
 * abort, a second tg_release. What each row checks is in errors_table.h. */
#include "errors_table.h"

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int64_t huge = INT64_C(1) << 40;
static double dst[1024]; /* room for any input of env, for copy_out */
/* tg_precision_check's report in its rows (each fails: nothing to free) */
static tg_precision_report prec_rep;

static tg_tensor *exp_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_exp(in[0]);
}

static tg_tensor *misaligned_fn(tg_tensor *const *in, void *ctx)
{
    return tg_matmul(in[0], (tg_tensor *)ctx);
}

/* A function that fails without saying why. */
static tg_tensor *silent_null_fn(tg_tensor *const *in, void *ctx)
{
    (void)in;
    (void)ctx;
    return NULL;
}

/* tg_set_requires_grad(t, flag): true when the flag did not become `flag`
 * (the call returns nothing; the error and the flag are the signs). */
static bool requires_grad_refused(tg_tensor *t, bool flag)
{
    tg_set_requires_grad(t, flag);
    return tg_requires_grad(t) != flag;
}

/* A second backward through a loss whose first one went through. */
static bool backward_twice(env *e)
{
    tg_tensor *loss = tg_sum_all(e->x);
    if (tg_backward(loss) < 0)
        note("backward twice: the first call failed: %s", tg_last_error());
    bool f = tg_backward(loss) < 0;
    tg_release(loss);
    tg_zero_grad(e->x);
    return f;
}

static bool backward_with_twice(env *e)
{
    tg_tensor *y = tg_exp(e->x);
    tg_tensor *dy = tg_ones_like(y);
    if (tg_backward_with(y, dy) < 0)
        note("backward_with twice: the first call failed: %s", tg_last_error());
    bool f = tg_backward_with(y, dy) < 0;
    tg_release(dy);
    tg_release(y);
    tg_zero_grad(e->x);
    return f;
}

/* The loss's graph released by its scope before backward: only the loss
 * itself, kept, survives; its entry still holds what backward needs. A
 * second backward finds the entries consumed. */
static bool backward_after_scope(env *e)
{
    tg_scope_begin();
    tg_tensor *loss = tg_keep(tg_sum_all(tg_exp(tg_scale(e->x, 0.001))));
    tg_scope_end();
    if (tg_backward(loss) < 0)
        note("backward after scope: the first call failed: %s",
             tg_last_error());
    bool f = tg_backward(loss) < 0;
    tg_release(loss);
    tg_zero_grad(e->x);
    return f;
}

/* tg_gradcheck of exp at a leaf copy of v3, with this eps. */
static bool gradcheck_eps(env *e, double eps)
{
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.eps = eps;
    tg_tensor *v = tg_detach(e->v3);
    tg_set_requires_grad(v, true);
    bool f = tg_gradcheck(exp_fn, NULL, 1, &v, &o, NULL) < 0;
    tg_release(v);
    return f;
}

/* A float32 (3,) leaf that requires grad, released after the row. */
static tg_tensor *f32_leaf(void)
{
    tg_tensor *t = temp(tg_ones(TG_FLOAT32, TG_SHAPE(3)));
    tg_set_requires_grad(t, true);
    return t;
}

/* A float64 leaf (3,) that requires grad. */
static tg_tensor *grad_leaf(void)
{
    tg_tensor *t = temp(tg_ones(TG_FLOAT64, TG_SHAPE(3)));
    tg_set_requires_grad(t, true);
    return t;
}

/* Room for the gradients of the rows of tg_grads and tg_jvp (each fails:
 * nothing to free). */
static tg_tensor *two_out[2];

/* Room for what the grad_fn rows would write (each fails first). */
static tg_grad_fn_info fn_info;
static tg_tensor *fn_in;
static double fn_vals[1];

/* sum(exp(x)): a scalar for tg_hvp and tg_hessian. */
static tg_tensor *sum_exp_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *y = tg_exp(in[0]), *s = tg_sum_all(y);
    tg_release(y);
    return s;
}

/* A function whose output is float32 (for gradcheck's refusal). */
static tg_tensor *to_f32_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_to(in[0], TG_FLOAT32);
}

/* tg_fprint(t) into memory: true when it failed and wrote nothing. */
static bool fprint_failed(const tg_tensor *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = tg_fprint(f, t, -1);
    fclose(f);
    bool f_ok = rc < 0 && len == 0;
    free(buf);
    return f_ok;
}

static bool format_failed(const tg_tensor *t)
{
    char *s = tg_format(t, -1);
    free(s);
    return s == NULL;
}

/* ---- custom ops, and functions that misuse what a check lends them --- */

/* y = exp(x), dx = y dy: a right op, whose descriptor the rows break. */
static int cexp_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    y[0] = tg_exp(x[0]);
    return y[0] && tg_custom_save(c, y[0]) >= 0 ? 0 : -1;
}

static int cexp_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    dx[0] = tg_mul(dy[0], tg_custom_saved(c, 0));
    return dx[0] ? 0 : -1;
}

static int two_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    (void)c;
    y[0] = tg_exp(x[0]);
    y[1] = tg_exp(x[0]);
    return y[0] && y[1] ? 0 : -1;
}

/* Forwards that misuse the context (each returns the call's -1). */
static int save_null_forward(tg_custom_ctx *c, tg_tensor *const *x,
                             tg_tensor **y)
{
    (void)x;
    (void)y;
    return tg_custom_save(c, NULL); /* no error before: one of its own */
}

static int saved_in_forward(tg_custom_ctx *c, tg_tensor *const *x,
                            tg_tensor **y)
{
    (void)x;
    (void)y;
    return tg_custom_saved(c, 0) ? 0 : -1;
}

static int non_diff_forward(tg_custom_ctx *c, tg_tensor *const *x,
                            tg_tensor **y)
{
    (void)x;
    (void)y;
    return tg_custom_non_differentiable(c, 1); /* one output: 0 only */
}

static int fail_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    (void)x;
    (void)y;
    return tg_custom_fail(c, "rows must be %d", 3);
}

/* A backward that saves: tg_custom_save is for the forward. */
static int save_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    (void)dx;
    return tg_custom_save(c, dy[0]);
}

static const tg_custom_op cexp_op = {"cexp",        1,    1,    cexp_forward,
                                     cexp_backward, NULL, false};
static const tg_custom_op cexp_once_op = {.name = "cexp_once",
                                          .n_inputs = 1,
                                          .n_outputs = 1,
                                          .forward = cexp_forward,
                                          .backward = cexp_backward,
                                          .once_differentiable = true};

/* sum(cexp(x)) through the custom op (no jvp rule), and through its
 * once-differentiable twin. */
static tg_tensor *cexp_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_custom1(&cexp_op, NULL, in);
}

static tg_tensor *once_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *y = tg_custom1(&cexp_once_op, NULL, in), *s = tg_sum_all(y);
    tg_release(y);
    return s;
}

static const tg_custom_op no_backward_op = {
    "nobackward", 1, 1, cexp_forward, NULL, NULL, false};
static const tg_custom_op no_inputs_op = {
    "noinputs", 0, 1, cexp_forward, cexp_backward, NULL, false};
static const tg_custom_op many_outputs_op = {
    "many", 1, 17, cexp_forward, cexp_backward, NULL, false};
static const tg_custom_op two_op = {"two",         1,    2,    two_forward,
                                    cexp_backward, NULL, false};
static const tg_custom_op save_null_op = {
    "save_null", 1, 1, save_null_forward, cexp_backward, NULL, false};
static const tg_custom_op saved_in_forward_op = {
    "saved_early", 1, 1, saved_in_forward, cexp_backward, NULL, false};
static const tg_custom_op non_diff_op = {
    "non_diff", 1, 1, non_diff_forward, cexp_backward, NULL, false};
static const tg_custom_op fail_op = {"refuser",     1,    1,    fail_forward,
                                     cexp_backward, NULL, false};
static const tg_custom_op save_backward_op = {
    "save_late", 1, 1, cexp_forward, save_backward, NULL, false};

/* tg_custom1(op) on e->x, backward through it: true when the backward
 * failed. */
static bool custom_backward_fails(env *e, const tg_custom_op *op)
{
    tg_tensor *y = temp(tg_custom1(op, NULL, (tg_tensor *[]){e->x}));
    if (!y)
        note("%s: the forward failed: %s", op->name, tg_last_error());
    bool f = tg_backward(temp(tg_sum_all(y))) < 0;
    tg_zero_grad(e->x);
    return f;
}

/* tg_checkpoint's segments: exp of x (ctx NULL), or of x reshaped (ctx
 * a counter: the recomputation, the second call, is of another shape), or
 * failing when the counter reaches 1 (recompute), or reading ctx, a
 * tensor that requires grad and is no input. */
static tg_tensor *ck_reshaped_fn(tg_tensor *const *in, void *ctx)
{
    int *calls = ctx;
    if ((*calls)++ == 0)
        return tg_exp(in[0]);
    return tg_exp(temp(tg_reshape(in[0], TG_SHAPE(32, 32))));
}

static tg_tensor *ck_fails_later_fn(tg_tensor *const *in, void *ctx)
{
    int *calls = ctx;
    return (*calls)++ == 0 ? tg_exp(in[0]) : NULL;
}

static tg_tensor *ck_reads_ctx_fn(tg_tensor *const *in, void *ctx)
{
    return tg_mul(in[0], (tg_tensor *)ctx);
}

/* A float64 (32,) leaf that requires grad, released after the row. */
static tg_tensor *grad_leaf32(void)
{
    tg_tensor *t = temp(tg_ones(TG_FLOAT64, TG_SHAPE(32)));
    tg_set_requires_grad(t, true);
    return t;
}

static tg_tensor *ck_identity_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_retain(in[0]);
}

/* sum(tg_checkpoint(f, ctx, x)), then its backward: true when the
 * backward (or the forward) failed. */
static bool checkpoint_backward_fails(env *e, tg_fn f, void *ctx)
{
    tg_tensor *y = temp(tg_checkpoint(f, ctx, 1, &e->x, NULL));
    if (!y)
        note("tg_checkpoint: the forward failed: %s", tg_last_error());
    bool failed = tg_backward(temp(tg_sum_all(y))) < 0;
    tg_zero_grad(e->x);
    return failed;
}

/* The segment exp as a tg_fn: tg_checkpoint(exp) of in[0]. */
static tg_tensor *ck_exp_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_checkpoint(exp_fn, NULL, 1, in, NULL);
}

/* Functions under a check that misuse their lent input. */
static tg_tensor *releases_input_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_release(in[0]); /* the caller's reference: refused */
    return tg_exp(in[0]);
}

static tg_tensor *writes_input_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_mul_(in[0], in[0]); /* refused */
    return tg_exp(in[0]);
}

/* Returns a gradient: a backward inside, the copy of tg_grad out. */
static tg_tensor *gradient_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *x = tg_detach(in[0]);
    tg_set_requires_grad(x, true);
    tg_tensor *sq = tg_mul(x, x);
    tg_tensor *loss = tg_sum_all(sq);
    tg_tensor *g =
        loss && tg_backward(loss) == 0 ? tg_scale(tg_grad(x), 1) : NULL;
    tg_release(loss);
    tg_release(sq);
    tg_release(x);
    return g;
}

/* ---- in-place updates, poison, retain, jacobian ------------------------ */

/* add_ into e->m while an entry (matmul's, recorded here) holds a view of
 * it (its transpose). */
static tg_tensor *hold_m(env *e)
{
    return temp(tg_matmul(e->x, temp(tg_transpose(e->m, 0, 1))));
}

static int add_into_saved(env *e)
{
    hold_m(e);
    return tg_add_(e->m, e->m, 1);
}

static int fill_saved(env *e)
{
    hold_m(e);
    return tg_fill_(e->m, 0);
}

/* A backward through an entry whose input was written (tg_set) since it
 * recorded. */
static bool backward_after_set(env *e)
{
    tg_tensor *w = temp(tg_ones(TG_FLOAT64, TG_SHAPE(4, 8, 32)));
    tg_tensor *loss = temp(tg_sum_all(temp(tg_mul(e->x, w))));
    tg_set(w, (const int64_t[]){0, 0, 0}, 2);
    return tg_backward(loss) < 0;
}

/* A tensor made and released here: every use of it is an error. */
static tg_tensor *released(void)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_release(t);
    return t;
}

/* ---- the table ---------------------------------------------------------- */

static void core_table(table_walk *w, env *e)
{
    /* creation */
    ROW("zeros ndim 9", tg_zeros(TG_FLOAT64, 9, nine), "zeros:", "ndim 9");
    ROW("zeros ndim -1", tg_zeros(TG_FLOAT64, -1, nine), "zeros:", "ndim -1");
    ROW("zeros negative size", tg_zeros(TG_FLOAT64, TG_SHAPE(2, -3)),
        "zeros:", "(2,-3)");
    ROW("zeros unknown dtype", tg_zeros((tg_dtype)7, TG_SHAPE(2)),
        "zeros:", "dtype 7");
    ROW("zeros NULL shape", tg_zeros(TG_FLOAT64, 2, NULL), "zeros:", "NULL");
    ROW("zeros overflow", tg_zeros(TG_FLOAT64, TG_SHAPE(huge, huge)),
        "zeros:", "(1099511627776,1099511627776)");
    ROW("zeros count past 2^59",
        tg_zeros(TG_FLOAT64, TG_SHAPE((int64_t)1 << 30, (int64_t)1 << 30)),
        "zeros:", "(1073741824,1073741824)",
        "more elements than a tensor can hold");
    ROW("randn count past 2^59",
        tg_randn(&e->rng, TG_FLOAT64,
                 TG_SHAPE((int64_t)1 << 30, (int64_t)1 << 30)),
        "randn:", "more elements");
    ROW("ones negative size", tg_ones(TG_FLOAT32, TG_SHAPE(2, -3)),
        "ones:", "(2,-3)");
    ROW("ones NULL shape", tg_ones(TG_FLOAT64, 1, NULL), "ones:", "NULL");
    ROW("full ndim 9", tg_full(TG_FLOAT64, 9, nine, 1), "full:", "ndim 9");
    ROW("full negative size", tg_full(TG_FLOAT32, TG_SHAPE(-1), 0),
        "full:", "(-1,)");
    ROW("scalar unknown dtype", tg_scalar((tg_dtype)7, 1),
        "scalar:", "dtype 7");
    ROW("from_data ndim 9", tg_from_data(TG_FLOAT64, 9, nine, nine),
        "from_data:", "ndim 9");
    ROW("from_data NULL data", tg_from_data(TG_FLOAT64, TG_SHAPE(2), NULL),
        "from_data:", "NULL");
    ROW("from_data negative size", tg_from_data(TG_FLOAT64, TG_SHAPE(-1), nine),
        "from_data:", "(-1,)");
    ROW("from_data bool byte 2",
        tg_from_data(TG_BOOL, TG_SHAPE(3), (uint8_t[3]){1, 2, 0}),
        "from_data:", "element 1 of (3,)", "byte 2");
    ROW("arange step 0", tg_arange(TG_FLOAT64, 0, 1, 0), "arange:", "step");
    ROW("arange too long", tg_arange(TG_FLOAT64, 0, 0x1p61, 1),
        "arange:", "(2305843009213693952,)", "more elements");
    ROW("from_data count past 2^59",
        tg_from_data(TG_FLOAT32, TG_SHAPE(4, INT64_MAX), NULL),
        "from_data:", "(4,9223372036854775807)", "more elements");
    ROW("arange NaN stop", tg_arange(TG_FLOAT64, 0, NAN, 1), "arange:", "nan");
    ROW("arange too long", tg_arange(TG_FLOAT64, 0, 1e19, 1),
        "arange:", "1e+19");

    /* random numbers (the seeds return void: the error is the only sign) */
    ROW("randn ndim 9", tg_randn(&e->rng, TG_FLOAT64, 9, nine),
        "randn:", "ndim 9");
    ROW("rand bool", tg_rand(&e->rng, TG_BOOL, TG_SHAPE(2)), "rand:", "bool");
    ROW("randn NULL rng", tg_randn(NULL, TG_FLOAT64, TG_SHAPE(2)),
        "randn:", "NULL");
    ROW_IF("rng_seed NULL", (tg_rng_seed(NULL, 0), true), "rng_seed:", "NULL");
    ROW_IF("rng_uniform NULL", isnan(tg_rng_uniform(NULL)),
           "rng_uniform:", "NULL");
    ROW_IF("rng_normal NULL", isnan(tg_rng_normal(NULL)),
           "rng_normal:", "NULL");
    ROW("pcg64_randn negative size",
        tg_pcg64_randn(&e->pcg, TG_FLOAT64, TG_SHAPE(-2)),
        "pcg64_randn:", "(-2,)");
    ROW("pcg64_randn NULL", tg_pcg64_randn(NULL, TG_FLOAT64, TG_SHAPE(2)),
        "pcg64_randn:", "NULL");
    ROW_IF("pcg64_seed NULL", (tg_pcg64_seed(NULL, 0), true),
           "pcg64_seed:", "NULL");
    ROW_IF("pcg64_uniform NULL", isnan(tg_pcg64_uniform(NULL)),
           "pcg64_uniform:", "NULL");
    ROW_IF("pcg64_normal NULL", isnan(tg_pcg64_normal(NULL)),
           "pcg64_normal:", "NULL");

    /* inspection and element access */
    ROW_RC("size dim 3", tg_size(e->x, 3), "size:", "dim 3", "(4,8,32)");
    ROW_IF("stride dim -4", tg_stride(e->x, -4) == 0, "stride:", "dim -4",
           "(4,8,32)");
    ROW_IF("get out of range", isnan(tg_get(e->x, (int64_t[]){4, 0, 0})),
           "get:", "index 4", "(4,8,32)");
    ROW_IF("get NULL idx", isnan(tg_get(e->x, NULL)), "get:", "NULL",
           "(4,8,32)");
    ROW_RC("set out of range", tg_set(e->x, (int64_t[]){0, -9, 0}, 1),
           "set:", "index -9", "(4,8,32)");
    ROW_IF("item of many", isnan(tg_item(e->x)), "item:", "(4,8,32)", "1024");
    ROW_RC("copy_out unknown dtype", tg_copy_out(e->x, (tg_dtype)7, dst),
           "copy_out:", "dtype 7");
    ROW_RC("copy_out NULL dst", tg_copy_out(e->x, TG_FLOAT64, NULL),
           "copy_out:", "NULL");

    /* autograd and scopes */
    ROW_RC("profile_stop max < 0",
           tg_profile_stop((tg_profile_entry[1]){{0}}, -1),
           "profile_stop:", "max is -1");
    ROW_RC("profile_stop NULL out", tg_profile_stop(NULL, 3),
           "profile_stop:", "NULL", "max 3");
    ROW_RC("backward non-scalar", tg_backward(e->x), "backward", "(4,8,32)");
    ROW_RC("backward without grad", tg_backward(e->s), "backward", "require");
    ROW_RC("backward bool", tg_backward(temp(tg_zeros(TG_BOOL, 0, NULL))),
           "backward", "bool");
    ROW_RC("backward_with shape",
           tg_backward_with(temp(tg_scale(e->x, 2)), e->m), "backward",
           "(16,32)", "(4,8,32)");
    ROW_RC("backward_with float32 seed",
           tg_backward_with(temp(tg_scale(e->x, 2)),
                            temp(tg_ones(TG_FLOAT32, TG_SHAPE(4, 8, 32)))),
           "backward", "float32");
    ROW_IF("backward twice", backward_twice(e), "backward", "consumed");
    ROW_IF("backward_with twice", backward_with_twice(e), "backward",
           "consumed");
    ROW_IF("backward twice after scope_end", backward_after_scope(e),
           "backward", "consumed");
    ROW_IF("set_requires_grad bool", requires_grad_refused(e->mask, true),
           "set_requires_grad", "bool (4,8,32)");
    ROW_IF("set_requires_grad non-leaf",
           requires_grad_refused(temp(tg_exp(e->x)), false),
           "set_requires_grad", "(4,8,32)", "not a leaf");
    ROW_RC("scope_end unopened", tg_scope_end(), "scope_end");

    /* in-place updates: a saved tensor, shapes, dtypes, layouts */
    ROW_RC("add_ saved", add_into_saved(e), "add_:", "'matmul'", "backward");
    ROW_RC("fill_ saved", fill_saved(e), "fill_:", "'matmul'", "(16,32)");
    ROW_RC("add_ unbroadcastable", tg_add_(e->v3, e->m, 1), "add_", "(16,32)",
           "(3,)");
    ROW_RC("add_ grows t", tg_add_(e->s, e->v3, 1), "add_:", "(3,)",
           "never changes");
    ROW_RC("add_ mixed dtypes", tg_add_(e->x32, e->x, 1), "add_", "float32",
           "float64");
    ROW_RC("add_ bool", tg_add_(e->mask, e->mask, 1), "add_", "bool");
    ROW_RC("add_ non-leaf", tg_add_(temp(tg_neg(e->x)), e->x, 1),
           "add_:", "output of 'neg'");
    /* exp's backward reads its output: the entry holds it, detached too */
    ROW_RC("add_ output exp's backward reads",
           tg_add_(temp(tg_detach(temp(tg_exp(e->x)))), e->x, 1),
           "add_:", "held for a backward", "'exp'");
    ROW_RC("add_ broadcast view",
           tg_add_(temp(tg_expand(e->v3, TG_SHAPE(2, 3))), e->v3, 1),
           "add_:", "broadcast along dim 0");
    ROW_RC("mul_ unbroadcastable", tg_mul_(e->v3, e->m), "mul_", "(16,32)");
    ROW_RC("mul_ int64", tg_mul_(e->ids, e->ids), "mul_", "int64");
    ROW_RC("copy_ unbroadcastable", tg_copy_(e->v3, e->m), "copy_", "(16,32)",
           "(3,)");
    ROW_RC("copy_in unknown dtype",
           tg_copy_in(e->v3, (tg_dtype)7, (double[3]){0}),
           "copy_in:", "dtype 7");
    ROW_RC("copy_in NULL src", tg_copy_in(e->v3, TG_FLOAT64, NULL),
           "copy_in:", "NULL", "(3,)");
    ROW_RC("copy_in bool byte 7",
           tg_copy_in(e->v3, TG_BOOL, (uint8_t[3]){0, 1, 7}),
           "copy_in:", "element 2 for (3,)", "byte 7");
    ROW_RC("zero_ non-leaf", tg_zero_(temp(tg_scale(e->x, 2))),
           "zero_:", "output of 'scale'");
    ROW_IF("backward after tg_set", backward_after_set(e), "backward:", "'mul'",
           "modified in place");
    ROW_RC("backward_retain non-scalar", tg_backward_retain(e->x, NULL),
           "backward_retain", "(4,8,32)");
    ROW_RC("register_post_accumulate_grad_hook non-leaf",
           tg_register_post_accumulate_grad_hook(temp(tg_scale(e->x, 2)), NULL,
                                                 NULL),
           "register_post_accumulate_grad_hook:", "output of 'scale'",
           "(4,8,32)");

    /* a released tensor used: an error naming this file's line */
    ROW_RC("add_ released", tg_add_(released(), e->v3, 1), "add_",
           "used after it was released", "check_errors_core.c:");
    ROW("exp released", tg_exp(released()), "exp",
        "used after it was released");
    ROW("add released", tg_add(e->v3, released()), "add",
        "used after it was released");
    ROW("argmax TG_ALL released", tg_argmax(released(), TG_ALL, false),
        "argmax", "used after it was released");
    ROW("argmin TG_ALL released", tg_argmin(released(), TG_ALL, true), "argmin",
        "used after it was released");
    ROW("outer released", tg_outer(released(), e->v3), "outer",
        "used after it was released");
    ROW("scope_return released", tg_scope_return(released()), "scope_return",
        "used after it was released");
    ROW("keep released", tg_keep(released()), "keep",
        "used after it was released");
    ROW_RC("set_name released", tg_set_name(released(), "q"), "set_name",
           "used after it was released");
    ROW_IF("item released", isnan(tg_item(released())), "item",
           "used after it was released");
    ROW_RC("print released", tg_print(released()), "print",
           "used after it was released");

    /* jacobian */
    ROW("jacobian NULL f", tg_jacobian(NULL, NULL, e->v3), "jacobian:", "NULL");
    ROW("jacobian bool x", tg_jacobian(exp_fn, NULL, e->mask), "jacobian",
        "bool");
    ROW("jacobian f fails", tg_jacobian(misaligned_fn, e->m, e->x), MATMUL_MSG);
    ROW("jacobian past 8 dims",
        tg_jacobian(exp_fn, NULL,
                    temp(tg_zeros(TG_FLOAT64, TG_SHAPE(1, 1, 1, 1, 1)))),
        "jacobian", "past 8");

    /* gradcheck: its arguments, its options (eps > 0 and finite), and a
     * function that fails */
    ROW_RC("gradcheck without grad",
           tg_gradcheck(exp_fn, NULL, 1, &e->m, NULL, NULL), "gradcheck",
           "requires grad");
    ROW_RC("gradcheck NULL function",
           tg_gradcheck(NULL, NULL, 1, &e->x, NULL, NULL),
           "gradcheck:", "function");
    ROW_RC("gradcheck 0 inputs",
           tg_gradcheck(exp_fn, NULL, 0, &e->x, NULL, NULL),
           "gradcheck:", "input");
    ROW_RC("gradcheck NULL inputs",
           tg_gradcheck(exp_fn, NULL, 1, NULL, NULL, NULL),
           "gradcheck:", "input");
    ROW_RC("gradcheck non-leaf input",
           tg_gradcheck(exp_fn, NULL, 1,
                        (tg_tensor *[]){temp(tg_scale(e->x, 2))}, NULL, NULL),
           "gradcheck:", "not a leaf", "(4,8,32)");
    ROW_IF("gradcheck eps 0", gradcheck_eps(e, 0), "gradcheck:", "eps");
    ROW_IF("gradcheck eps NaN", gradcheck_eps(e, NAN), "gradcheck:", "eps nan");
    ROW_RC("gradcheck function fails",
           tg_gradcheck(misaligned_fn, e->m, 1, &e->x, NULL, NULL), MATMUL_MSG);
    ROW_RC("gradcheck function fails silently",
           tg_gradcheck(silent_null_fn, NULL, 1, &e->x, NULL, NULL),
           "gradcheck: the function returned NULL without an error");
    ROW_RC(
        "gradcheck float32 input",
        tg_gradcheck(exp_fn, NULL, 1, (tg_tensor *[]){f32_leaf()}, NULL, NULL),
        "gradcheck:", "float32 (3,)", "check in float64");
    ROW_RC("gradcheck float32 output",
           tg_gradcheck(to_f32_fn, NULL, 1, &e->x, NULL, NULL),
           "gradcheck:", "returned float32 (4,8,32)", "check in float64");
    /* issue 29: a NULL input with no error before it says so; a function
     * that releases or writes its lent input, or returns a gradient (its
     * derivative would be a silent zero) */
    ROW_RC("gradcheck NULL input",
           tg_gradcheck(exp_fn, NULL, 1, (tg_tensor *[]){NUL}, NULL, NULL),
           "gradcheck: input 0 is NULL");
    ROW_RC("gradcheck f releases its input",
           tg_gradcheck(releases_input_fn, NULL, 1, &e->x, NULL, NULL),
           "gradcheck: the function released its input 0 at",
           "check_errors_core.c:");
    ROW_RC("gradcheck f writes its input",
           tg_gradcheck(writes_input_fn, NULL, 1, &e->x, NULL, NULL),
           "gradcheck: the function wrote its input 0 in place (mul_) at",
           "check_errors_core.c:");
    ROW_RC("gradcheck f runs a backward",
           tg_gradcheck(gradient_fn, NULL, 1, &e->x, NULL, NULL),
           "gradcheck: the function ran a backward", "second order");

    /* issue 30: the gradients returned (tg_grads), forward mode, the
     * second order; a second derivative through a once-differentiable
     * custom op */
    ROW_RC("grads n 0",
           tg_grads(temp(tg_sum_all(e->x)), NULL, 0, &e->x, two_out, 0),
           "grads:", "n >= 1");
    ROW_RC("grads x without grad",
           tg_grads(temp(tg_sum_all(e->x)), NULL, 1, &e->m, two_out, 0),
           "grads:", "xs[0]", "does not require grad");
    ROW_RC("grads x unused",
           tg_grads(temp(tg_sum_all(e->x)), NULL, 1,
                    (tg_tensor *[]){grad_leaf()}, two_out, 0),
           "grads:", "does not depend on xs[0] (3,)", "TG_ALLOW_UNUSED");
    ROW_RC("grads no dy for many",
           tg_grads(temp(tg_exp(e->x)), NULL, 1, &e->x, two_out, 0),
           "grads:", "(4,8,32)", "give dy");
    ROW_RC("grads dy mismatch",
           tg_grads(temp(tg_exp(e->x)), e->v3, 1, &e->x, two_out, 0),
           "grads:", "gradient float64 (3,)", "output float64 (4,8,32)");
    ROW_RC("jvp NULL f", tg_jvp(NULL, NULL, 1, &e->x, &e->x, NULL, two_out),
           "jvp:", "need f");
    ROW_RC("jvp tangent mismatch",
           tg_jvp(exp_fn, NULL, 1, &e->x, &e->v3, NULL, two_out),
           "jvp:", "tangent 0 is float64 (3,)", "input 0 is float64 (4,8,32)");
    ROW_RC("jvp f fails",
           tg_jvp(misaligned_fn, e->m, 1, &e->x, &e->x, NULL, two_out),
           MATMUL_MSG);
    ROW_RC("jvp through a custom op without a rule",
           tg_jvp(cexp_fn, NULL, 1, &e->v3, &e->v3, NULL, two_out),
           "jvp:", "cexp", "no forward-mode rule");
    ROW("hvp NULL f", tg_hvp(NULL, NULL, e->v3, e->v3), "hvp:", "NULL");
    ROW("hvp v mismatch", tg_hvp(sum_exp_fn, NULL, e->x, e->v3),
        "hvp:", "v is float64 (3,)", "x is float64 (4,8,32)");
    ROW("hvp f not a scalar", tg_hvp(exp_fn, NULL, e->v3, e->v3),
        "hvp:", "one element", "(3,)");
    ROW("hvp through a once-differentiable op",
        tg_hvp(once_fn, NULL, e->v3, e->v3), "hvp:", "cexp_once",
        "once_differentiable");
    ROW("hessian NULL f", tg_hessian(NULL, NULL, e->v3), "hessian:", "NULL");
    ROW("hessian past 8 dims",
        tg_hessian(sum_exp_fn, NULL,
                   temp(tg_zeros(TG_FLOAT64, TG_SHAPE(1, 1, 1, 1, 1)))),
        "hessian", "past 8");
    ROW_RC("gradgradcheck NULL f",
           tg_gradgradcheck(NULL, NULL, 1, &e->x, NULL, NULL),
           "gradgradcheck:", "function");
    ROW_RC("gradgradcheck f fails",
           tg_gradgradcheck(misaligned_fn, e->m, 1, &e->x, NULL, NULL),
           MATMUL_MSG);

    /* a graph's entries one at a time (tg_grad_fn): a leaf has none, an
     * input out of range, dy of another shape */
    ROW_RC("graph_entries of a leaf", tg_graph_entries(e->x, 0, NULL),
           "graph_entries:", "no tape entry", "(4,8,32)");
    ROW_RC("graph_entries cap < 0",
           tg_graph_entries(temp(tg_sum_all(e->x)), -1, NULL),
           "graph_entries:", "cap >= 0", "-1");
    ROW_RC("grad_fn of a leaf", tg_grad_fn(e->x, &fn_info),
           "grad_fn:", "no tape entry");
    ROW_RC("grad_fn_input out of range",
           tg_grad_fn_input(temp(tg_exp(e->x)), 1, &fn_in),
           "grad_fn_input:", "'exp'", "no input 1");
    ROW_RC("grad_fn_check dy mismatch",
           tg_grad_fn_check(temp(tg_exp(e->x)), e->v3, 0, 1, NULL, 1e-6,
                            fn_vals, NULL),
           "grad_fn_check:", "dy (3,)", "output (4,8,32)");
    ROW_RC("grad_fn_check cell out of range",
           tg_grad_fn_check(temp(tg_exp(e->x)), e->x, 0, 1,
                            (const int64_t[]){1024}, 1e-6, fn_vals, NULL),
           "grad_fn_check:", "[0, 1024)");

    /* tg_precision_check: its arguments, a program with nothing on its
     * tape, a function that fails; the printout's arguments */
    ROW_RC("precision_check NULL function",
           tg_precision_check(NULL, NULL, 1, &e->x, 0, &prec_rep),
           "precision_check:", "a function, inputs and a report");
    ROW_RC("precision_check NULL report",
           tg_precision_check(exp_fn, NULL, 1, &e->x, 0, NULL),
           "precision_check:", "a report");
    ROW_RC("precision_check no entry",
           tg_precision_check(exp_fn, NULL, 1, &e->m, 0, &prec_rep),
           "precision_check:", "no entry on the tape", "(16,32)");
    ROW_RC("precision_check function fails",
           tg_precision_check(misaligned_fn, e->m, 1, &e->x, 0, &prec_rep),
           MATMUL_MSG);
    ROW_RC("precision_print NULL report", tg_precision_print(stdout, NULL),
           "precision_print:", "report");

    /* custom ops: the descriptor, the call, the forward's misuse of its
     * context (its error after the op, its line and "forward") */
    ROW("custom1 NULL op", tg_custom1(NULL, NULL, &e->x),
        "tg_custom:", "needs a name, a forward, a backward", "no name");
    ROW("custom no backward", tg_custom1(&no_backward_op, NULL, &e->x),
        "tg_custom:", "a backward", "nobackward, 1 inputs, 1 outputs");
    ROW("custom 0 inputs", tg_custom1(&no_inputs_op, NULL, &e->x),
        "tg_custom:", "1 to 16 inputs", "noinputs, 0 inputs");
    ROW_RC("custom 17 outputs",
           tg_custom(&many_outputs_op, NULL, &e->x, (tg_tensor *[17]){NULL}),
           "tg_custom:", "1 to 16", "17 outputs");
    ROW("custom1 NULL input", tg_custom1(&cexp_op, NULL, (tg_tensor *[]){NUL}),
        "cexp (at ", "check_errors_core.c:", "input 0 is NULL");
    ROW_RC("custom NULL outputs", tg_custom(&cexp_op, NULL, &e->x, NULL),
           "cexp (at ", "needs the arrays of its 1 inputs and 1 outputs");
    ROW("custom1 of two outputs", tg_custom1(&two_op, NULL, &e->x),
        "tg_custom1: two has 2 outputs", "call tg_custom");
    ROW("custom_save NULL", tg_custom1(&save_null_op, NULL, &e->x),
        "save_null (at ", "forward: ", "tg_custom_save");
    ROW("custom_saved in forward",
        tg_custom1(&saved_in_forward_op, NULL, &e->x), "saved_early (at ",
        "forward: ", "no saved tensor 0 (0 saved");
    ROW("custom_non_differentiable out of range",
        tg_custom1(&non_diff_op, NULL, &e->x), "non_diff (at ",
        "forward: ", "tg_custom_non_differentiable(1) is for the forward");
    ROW("custom_fail", tg_custom1(&fail_op, NULL, &e->x), "refuser (at ",
        "check_errors_core.c:", "forward: rows must be 3");
    ROW_IF("custom_save in backward",
           custom_backward_fails(e, &save_backward_op), "save_late (at ",
           "backward: ", "tg_custom_save is for the forward");

    /* activation checkpointing: the call, the segment at the forward and
     * at the recomputation, what it refuses (second order, forward mode) */
    ROW("checkpoint NULL f", tg_checkpoint(NULL, NULL, 1, &e->x, NULL),
        "tg_checkpoint:", "f NULL");
    ROW("checkpoint no inputs", tg_checkpoint(exp_fn, NULL, 0, &e->x, NULL),
        "tg_checkpoint:", "n >= 1 inputs", "n = 0");
    ROW("checkpoint NULL inputs", tg_checkpoint(exp_fn, NULL, 1, NULL, NULL),
        "tg_checkpoint:", "inputs NULL");
    ROW("checkpoint NULL input",
        tg_checkpoint(exp_fn, NULL, 1, (tg_tensor *[]){NUL}, NULL),
        "tg_checkpoint: input 0 is NULL");
    ROW("checkpoint input twice",
        tg_checkpoint(exp_fn, NULL, 2, (tg_tensor *[]){e->x, e->x}, NULL),
        "tg_checkpoint:", "inputs 0 and 1 are one tensor (4,8,32)");
    ROW("checkpoint segment fails",
        tg_checkpoint(misaligned_fn, e->m, 1, &e->x, NULL),
        "tg_checkpoint: segment: ", MATMUL_MSG);
    ROW("checkpoint segment returns NULL",
        tg_checkpoint(silent_null_fn, NULL, 1, &e->x, NULL),
        "tg_checkpoint: segment: ", "returned NULL");
    ROW("checkpoint segment returns its input",
        tg_checkpoint(ck_identity_fn, NULL, 1, &e->x, NULL),
        "tg_checkpoint:", "returned its input 0 itself");
    ROW_IF("checkpoint segment fails on recompute",
           checkpoint_backward_fails(e, ck_fails_later_fn, (int[]){0}),
           "backward of 'checkpoint'",
           "tg_checkpoint: recompute: ", "returned NULL");
    ROW_IF("checkpoint another shape on recompute",
           checkpoint_backward_fails(e, ck_reshaped_fn, (int[]){0}),
           "tg_checkpoint:", "float64 (32,32) on recompute",
           "float64 (4,8,32) in the forward");
    ROW_IF("checkpoint segment reads a tensor not an input",
           checkpoint_backward_fails(e, ck_reads_ctx_fn, grad_leaf32()),
           "tg_checkpoint:", "reads a tensor (32,) that requires grad",
           "not among its inputs");
    ROW_RC("checkpoint second order",
           tg_grads(temp(tg_sum_all(temp(ck_exp_fn(&e->x, NULL)))), NULL, 1,
                    &e->x, two_out, TG_CREATE_GRAPH),
           "tg_checkpoint:", "TG_CREATE_GRAPH", "second order");
    ROW_RC("checkpoint forward mode",
           tg_jvp(ck_exp_fn, NULL, 1, &e->x, &e->x, NULL, two_out),
           "tg_checkpoint:", "forward mode (tg_jvp) through tg_checkpoint");

    /* eye, linspace, randint, randperm; the typed constructors */
    ROW("eye negative size", tg_eye(TG_FLOAT64, 2, -1), "eye:", "-1");
    ROW("eye unknown dtype", tg_eye((tg_dtype)7, 2, 2), "eye:", "dtype 7");
    ROW("eye count past 2^59",
        tg_eye(TG_BOOL, (int64_t)1 << 30, (int64_t)1 << 30),
        "eye:", "more elements");
    ROW("linspace bool", tg_linspace(TG_BOOL, 0, 1, 3), "linspace:", "bool");
    ROW("linspace NaN start", tg_linspace(TG_FLOAT64, NAN, 1, 3),
        "linspace:", "nan");
    ROW("linspace inf stop", tg_linspace(TG_FLOAT32, 0, INFINITY, 3),
        "linspace:", "inf");
    ROW("linspace steps -1", tg_linspace(TG_FLOAT64, 0, 1, -1),
        "linspace:", "-1");
    ROW("linspace too long", tg_linspace(TG_FLOAT64, 0, 1, INT64_MAX),
        "linspace:", "more elements");
    ROW("randint NULL rng", tg_randint(NULL, 0, 2, TG_SHAPE(2)),
        "randint:", "NULL");
    ROW("randint low == high", tg_randint(&e->rng, 3, 3, TG_SHAPE(2)),
        "randint:", "[3, 3)");
    ROW("randint ndim 9", tg_randint(&e->rng, 0, 2, 9, nine),
        "randint:", "ndim 9");
    ROW("randint negative size", tg_randint(&e->rng, 0, 2, TG_SHAPE(2, -1)),
        "randint:", "(2,-1)");
    ROW("randperm NULL rng", tg_randperm(NULL, 3), "randperm:", "NULL");
    ROW("randperm -1", tg_randperm(&e->rng, -1), "randperm:", "-1");
    ROW("randperm count past 2^59", tg_randperm(&e->rng, INT64_MAX),
        "randperm:", "more elements");
    ROW("from_f32 NULL data", tg_from_f32(TG_SHAPE(2), NULL),
        "from_f32:", "NULL", "(2,)");
    ROW("from_f64 negative size", tg_from_f64(TG_SHAPE(-1), (double[]){0}),
        "from_f64:", "(-1,)");
    ROW("from_i64 ndim 9", tg_from_i64(9, nine, nine), "from_i64:", "ndim 9");
    ROW("from_bool NULL data", tg_from_bool(TG_SHAPE(1, 2), NULL),
        "from_bool:", "NULL", "(1,2)");

    /* files and printing */
    ROW("load_npy missing", tg_load_npy("/nonexistent/tapegrad/x.npy"),
        "load_npy", "/nonexistent/tapegrad/x.npy");
    ROW("load_npy NULL path", tg_load_npy(NULL), "load_npy:", "NULL");
    ROW("load_npy empty file", tg_load_npy("/dev/null"),
        "load_npy:", "/dev/null");
    ROW("load_npy directory", tg_load_npy("/"), "load_npy:", "/");
    ROW("load_npy device", tg_load_npy("/dev/zero"), "load_npy:", "/dev/zero",
        "not a regular file");
    ROW_RC("save_npy missing dir",
           tg_save_npy(e->v3, "/nonexistent/tapegrad/x.npy"), "save_npy",
           "/nonexistent/tapegrad/x.npy");
    ROW_RC("save_npy NULL path", tg_save_npy(e->v3, NULL), "save_npy:", "NULL");
    ROW_RC("save_npy directory", tg_save_npy(e->v3, "/"), "save_npy:", "/");
    ROW_RC("save_npy under a file", tg_save_npy(e->v3, "/etc/passwd/x.npy"),
           "save_npy:", "/etc/passwd/x.npy", "Not a directory");
    ROW_RC("fprint NULL file", tg_fprint(NULL, e->v3, -1), "fprint");
    ROW_IF("allclose unbroadcastable", !tg_allclose(e->x, e->v3, 0, 0),
           "allclose", "(4,8,32)", "(3,)");
}

static void core_null_table(table_walk *w, env *e)
{
    /* tensors */
    NULL_ROW("retain", tg_retain(NUL));
    NULL_ROW("keep", tg_keep(NUL));
    NULL_ROW("zeros_like", tg_zeros_like(NUL));
    NULL_ROW("ones_like", tg_ones_like(NUL));
    NULL_ROW("full_like", tg_full_like(NUL, 1));
    NULL_ROW_RC("ndim", tg_ndim(NUL));
    NULL_ROW_RC("size", tg_size(NUL, 0));
    NULL_ROW_IF("shape", tg_shape(NUL) == NULL);
    NULL_ROW_IF("stride", tg_stride(NUL, 0) == 0);
    NULL_ROW_RC("numel", tg_numel(NUL));
    NULL_ROW_IF("is_contiguous", !tg_is_contiguous(NUL));
    NULL_ROW_RC("copy_out", tg_copy_out(NUL, TG_FLOAT64, dst));
    NULL_ROW_IF("get", isnan(tg_get(NUL, (int64_t[]){0})));
    NULL_ROW_IF("item", isnan(tg_item(NUL)));
    NULL_ROW_RC("set", tg_set(NUL, (int64_t[]){0}, 1));
    NULL_ROW("checkpoint",
             tg_checkpoint(exp_fn, NULL, 1, (tg_tensor *[]){NUL}, NULL));

    /* autograd (the void ones: the kept error is the only sign) */
    NULL_ROW_IF("set_requires_grad", (tg_set_requires_grad(NUL, true), true));
    NULL_ROW_IF("requires_grad", !tg_requires_grad(NUL));
    NULL_ROW_IF("is_leaf", !tg_is_leaf(NUL));
    NULL_ROW_IF("retain_grad", (tg_retain_grad(NUL), true));
    NULL_ROW_RC("backward", tg_backward(NUL));
    NULL_ROW_RC("backward_retain", tg_backward_retain(NUL, NULL));
    NULL_ROW_RC("register_post_accumulate_grad_hook",
                tg_register_post_accumulate_grad_hook(NUL, NULL, NULL));
    NULL_ROW("scope_return", tg_scope_return(NUL));
    NULL_ROW_RC("add_ (t)", tg_add_(NUL, e->v3, 1));
    NULL_ROW_RC("add_ (other)", tg_add_(e->v3, NUL, 1));
    NULL_ROW_RC("mul_ (t)", tg_mul_(NUL, e->v3));
    NULL_ROW_RC("mul_ (other)", tg_mul_(e->v3, NUL));
    NULL_ROW_RC("copy_ (dst)", tg_copy_(NUL, e->v3));
    NULL_ROW_RC("copy_ (src)", tg_copy_(e->v3, NUL));
    NULL_ROW_RC("copy_in", tg_copy_in(NUL, TG_FLOAT64, (double[1]){0}));
    NULL_ROW_RC("fill_", tg_fill_(NUL, 1));
    NULL_ROW_RC("zero_", tg_zero_(NUL));
    NULL_ROW_RC("set_name", tg_set_name(NUL, "q"));
    NULL_ROW_IF("name", tg_name(NUL) == NULL);
    NULL_ROW("jacobian", tg_jacobian(exp_fn, NULL, NUL));
    NULL_ROW_RC("print", tg_print(NUL));
    NULL_ROW_RC("backward_with (out)", tg_backward_with(NUL, e->m));
    NULL_ROW_RC("backward_with (dout)",
                tg_backward_with(temp(tg_scale(e->x, 2)), NUL));
    NULL_ROW_IF("grad", tg_grad(NUL) == NULL);
    NULL_ROW_IF("zero_grad", (tg_zero_grad(NUL), true));
    NULL_ROW("detach", tg_detach(NUL));
    NULL_ROW_RC(
        "gradcheck",
        tg_gradcheck(exp_fn, NULL, 2, (tg_tensor *[]){e->x, NUL}, NULL, NULL));
    NULL_ROW("check_result", tg_check_result(NUL, "tg_exp"));
    NULL_ROW("custom1", tg_custom1(&cexp_op, NULL, (tg_tensor *[]){NUL}));
    NULL_ROW_RC("custom", tg_custom(&cexp_op, NULL, (tg_tensor *[]){NUL},
                                    (tg_tensor *[1]){NULL}));

    /* files and printing */
    NULL_ROW_IF("fprint", fprint_failed(NUL));
    NULL_ROW_IF("format", format_failed(NUL));
    NULL_ROW_IF("allclose", !tg_allclose(e->x, NUL, 0, 0));
    NULL_ROW_RC("save_npy",
                tg_save_npy(NUL, "/tmp/tapegrad-never-written.npy"));
    NULL_ROW_RC("graph_entries", tg_graph_entries(NUL, 0, NULL));
    NULL_ROW_RC("grad_fn", tg_grad_fn(NUL, &fn_info));
    NULL_ROW_RC("grad_fn_input", tg_grad_fn_input(NUL, 0, &fn_in));
    NULL_ROW_RC("grad_fn_check", tg_grad_fn_check(temp(tg_exp(e->x)), NUL, 0, 1,
                                                  NULL, 1e-6, fn_vals, NULL));
}

START_TEST(bad_input) { check_row(core_table, _i); }
END_TEST

START_TEST(null_input) { check_null_row(core_null_table, _i); }
END_TEST

/* The first failure in a chain is the one reported. */
START_TEST(chain_keeps_first_cause)
{
    env e;
    env_make(&e);
    int64_t tape = tg_tape_size();
    tg_clear_error();
    ck_assert_ptr_null(tg_exp(tg_matmul(e.x, e.m)));
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    ck_assert_ptr_null(
        tg_sum_all(tg_softmax(tg_scale(tg_matmul(e.x, e.m), 2), -1)));
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_matmul(e.x, e.m))), -1);
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    ck_assert_int_eq(tg_tape_size(), tape);
    env_free(&e);
}
END_TEST

START_TEST(clear_error)
{
    tg_clear_error();
    ck_assert_str_eq(tg_last_error(), "");
    ck_assert_ptr_null(tg_zeros(TG_FLOAT64, TG_SHAPE(-1)));
    ck_assert_str_ne(tg_last_error(), "");
    tg_clear_error();
    ck_assert_str_eq(tg_last_error(), "");
}
END_TEST

/* The core's functions with no failure value, given NULL or an unknown
 * dtype (check_quiet). */
static void core_quiet_calls(void)
{
    tg_release(NULL);
    if (strcmp(tg_dtype_name((tg_dtype)7), "unknown"))
        note("dtype_name(7) is '%s'", tg_dtype_name((tg_dtype)7));
    if (tg_dtype_size((tg_dtype)7) != 0)
        note("dtype_size(7) is %zu", tg_dtype_size((tg_dtype)7));
    if (tg_dtype_of(NULL) != TG_FLOAT32)
        note("dtype_of(NULL) is %s", tg_dtype_name(tg_dtype_of(NULL)));
    tg_print_live_tensors(NULL);
    char shp[16];
    if (strcmp(tg_shape_str(NULL, shp, sizeof shp), "(null)") != 0)
        note("shape_str(NULL) is '%s'", shp);
    if (tg_shape_str(NULL, NULL, 4) != NULL)
        note("shape_str with a NULL buf is not NULL");
    tg_tape_print(NULL);
    tg_tape_dot(NULL);
    tg_set_callsite(NULL, 0);
    /* a custom op's context calls, given no context */
    if (tg_custom_user(NULL) != NULL)
        note("custom_user(NULL) is not NULL");
    if (tg_custom_needs_grad(NULL, 0))
        note("custom_needs_grad(NULL, 0) is true");
    if (tg_custom_saved(NULL, 0) != NULL)
        note("custom_saved(NULL, 0) is not NULL");
    if (tg_custom_save(NULL, NULL) != -1)
        note("custom_save(NULL, NULL) is not -1");
    if (tg_custom_non_differentiable(NULL, 0) != -1)
        note("custom_non_differentiable(NULL, 0) is not -1");
}

START_TEST(quiet_on_null) { check_quiet("core", core_quiet_calls); }
END_TEST

/* ---- a release too many: an error, never an abort --------------------- */

/* Releasing a tensor that has no references left is the caller's bug: the
 * header is poisoned when freed (and held back from reuse a while), so the
 * second release is an error, also written to stderr, naming the line of
 * the second call and of the release that freed the tensor. In process:
 * nothing aborts, and nothing reads freed memory (valgrind, ASan). */
START_TEST(release_twice_names_both_lines)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    int first = __LINE__ + 1;
    tg_release(t);
    tg_clear_error();
    tg_release(t);
    int second = __LINE__ - 1;
    char want[512];
    snprintf(want, sizeof want,
             "%s:%d: release: a float64 (2,3) tensor used after it was "
             "released (its last reference went at %s:%d)",
             __FILE__, second, __FILE__, first);
    ck_assert_msg(strstr(tg_last_error(), want), "'%s' lacks '%s'",
                  tg_last_error(), want);
}
END_TEST

Suite *errors_core_suite(void)
{
    Suite *s = suite_create("errors_core");
    TCase *tc = tcase_create("bad input");
    tcase_add_loop_test(tc, bad_input, 0, table_rows(core_table));
    tcase_add_test(tc, chain_keeps_first_cause);
    tcase_add_test(tc, clear_error);
    suite_add_tcase(s, tc);

    tc = tcase_create("null");
    tcase_add_loop_test(tc, null_input, 0, table_rows(core_null_table));
    tcase_add_test(tc, quiet_on_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("release");
    tcase_add_test(tc, release_twice_names_both_lines);
    suite_add_tcase(s, tc);
    return s;
}
