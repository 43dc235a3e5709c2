/* Bad input, one table row per mistake: every public function that takes
 * tensors or shapes fails with a return value (NULL, -1, NaN, false), never
 * an abort, and leaves one line in tg_last_error() naming the function and,
 * where they matter, the shapes. A failing call leaves its inputs as they
 * were and records nothing on the tape.
 *
 * A second table passes NULL tensors: the call fails quietly and keeps the
 * error already there, so a chain of calls reports its first cause. */
#include "tests.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The inputs every row may use, made fresh for each row. */
typedef struct {
    tg_tensor *x;    /* (4,8,32) float64, requires grad */
    tg_tensor *m;    /* (16,32)  float64 */
    tg_tensor *x32;  /* (4,8,32) float32 */
    tg_tensor *mask; /* (4,8,32) bool */
    tg_tensor *v3;   /* (3,)     float64 */
    tg_tensor *s;    /* ()       float64 */
} env;

#define ENV_N 6
/* The inputs as an array, in the struct's order. */
static void env_list(const env *e, tg_tensor *out[ENV_N])
{
    tg_tensor *const all[ENV_N] = {e->x, e->m, e->x32, e->mask, e->v3, e->s};
    memcpy(out, all, sizeof all);
}

static void env_make(env *e)
{
    e->x = tg_arange(TG_FLOAT64, 0, 1024, 1);
    tg_tensor *x = tg_reshape(e->x, TG_SHAPE(4, 8, 32));
    tg_release(e->x);
    e->x = x;
    tg_set_requires_grad(e->x, true);
    e->m = tg_full(TG_FLOAT64, TG_SHAPE(16, 32), 0.5);
    e->x32 = tg_to(e->x, TG_FLOAT32);
    tg_tensor *detached = tg_detach(e->x32); /* a plain leaf */
    tg_release(e->x32);
    e->x32 = detached;
    e->mask = tg_gt_scalar(e->x, 511);
    e->v3 = tg_arange(TG_FLOAT64, 1, 4, 1);
    e->s = tg_scalar(TG_FLOAT64, 2);
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++)
        ck_assert_ptr_nonnull(all[i]);
}

static void env_free(env *e)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++)
        tg_release(all[i]);
}

/* Every element of every input, as float64, to compare after the call. */
typedef struct {
    double *values[ENV_N];
    int64_t shape[ENV_N][TG_MAX_DIMS];
    int ndim[ENV_N];
} snapshot;

static void snapshot_take(env *e, snapshot *sn)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++) {
        tg_tensor *t = all[i];
        sn->ndim[i] = tg_ndim(t);
        memcpy(sn->shape[i], tg_shape(t), sizeof(int64_t) * (size_t)tg_ndim(t));
        sn->values[i] = malloc(sizeof(double) * (size_t)tg_numel(t));
        ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, sn->values[i]), 0);
    }
}

/* The first problem a row found. Rows note problems and assert once, after
 * freeing their inputs: with CK_FORK=no a failed assert mid-row would leak
 * them into valgrind's report, hiding the library's own leaks. */
static char problem[1024];

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    if (problem[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
}

static void snapshot_check_and_free(env *e, snapshot *sn, const char *row)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++) {
        tg_tensor *t = all[i];
        if (tg_ndim(t) != sn->ndim[i] ||
            memcmp(tg_shape(t), sn->shape[i], sizeof(int64_t) * (size_t)sn->ndim[i]))
            note("%s: input %d changed shape", row, i);
        int64_t n = tg_numel(t);
        double *now = malloc(sizeof(double) * (size_t)n);
        tg_copy_out(t, TG_FLOAT64, now);
        if (memcmp(now, sn->values[i], sizeof(double) * (size_t)n))
            note("%s: input %d changed values", row, i);
        free(now);
        free(sn->values[i]);
    }
}

/* ---- the calls ---------------------------------------------------------- */

/* True when the call failed; a tensor it returned anyway is released. */
static bool failed(tg_tensor *t)
{
    if (!t)
        return true;
    tg_release(t);
    return false;
}

/* One row's call: a static function of the inputs, true when it failed. */
#define CALL(name, expr)                                                       \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        return failed(expr);                                                   \
    }
#define CALL_RC(name, expr)                                                    \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        return (expr) < 0;                                                     \
    }
#define CALL_NAN(name, expr)                                                   \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        return isnan(expr);                                                    \
    }

static const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int64_t huge = INT64_C(1) << 40;

/* creation */
CALL(zeros_ndim9, tg_zeros(TG_FLOAT64, 9, nine))
CALL(zeros_ndim_neg, tg_zeros(TG_FLOAT64, -1, nine))
CALL(zeros_neg_size, tg_zeros(TG_FLOAT64, TG_SHAPE(2, -3)))
CALL(zeros_bad_dtype, tg_zeros((tg_dtype)7, TG_SHAPE(2)))
CALL(zeros_null_shape, tg_zeros(TG_FLOAT64, 2, NULL))
CALL(zeros_overflow, tg_zeros(TG_FLOAT64, TG_SHAPE(huge, huge)))
CALL(ones_neg_size, tg_ones(TG_FLOAT32, TG_SHAPE(2, -3)))
CALL(full_ndim9, tg_full(TG_FLOAT64, 9, nine, 1))
CALL(scalar_bad_dtype, tg_scalar((tg_dtype)7, 1))
CALL(from_data_ndim9, tg_from_data(TG_FLOAT64, 9, nine, nine))
CALL(from_data_null, tg_from_data(TG_FLOAT64, TG_SHAPE(2), NULL))
CALL(from_data_neg, tg_from_data(TG_FLOAT64, TG_SHAPE(-1), nine))
CALL(arange_step0, tg_arange(TG_FLOAT64, 0, 1, 0))
CALL(arange_nan, tg_arange(TG_FLOAT64, 0, NAN, 1))
CALL(arange_too_long, tg_arange(TG_FLOAT64, 0, 1e19, 1))
static bool randn_ndim9(env *e)
{
    (void)e;
    tg_rng r;
    tg_rng_seed(&r, 0);
    return failed(tg_randn(&r, TG_FLOAT64, 9, nine));
}
static bool rand_bool(env *e)
{
    (void)e;
    tg_rng r;
    tg_rng_seed(&r, 0);
    return failed(tg_rand(&r, TG_BOOL, TG_SHAPE(2)));
}
static bool pcg64_neg(env *e)
{
    (void)e;
    tg_pcg64 g;
    tg_pcg64_seed(&g, 0);
    return failed(tg_pcg64_randn(&g, TG_FLOAT64, TG_SHAPE(-2)));
}

/* inspection and element access */
CALL_RC(size_dim3, tg_size(e->x, 3))
static bool stride_dim_neg4(env *e) { return tg_stride(e->x, -4) == 0; }
CALL_NAN(get_out_of_range, tg_get(e->x, (int64_t[]){4, 0, 0}))
CALL_NAN(get_null_idx, tg_get(e->x, NULL))
CALL_RC(set_out_of_range, tg_set(e->x, (int64_t[]){0, -9, 0}, 1))
CALL_NAN(item_not_one, tg_item(e->x))
static bool copy_out_bad_dtype(env *e)
{
    double dst[1024];
    return tg_copy_out(e->x, (tg_dtype)7, dst) < 0;
}
CALL_RC(copy_out_null_dst, tg_copy_out(e->x, TG_FLOAT64, NULL))

/* views */
CALL(transpose_dim3, tg_transpose(e->x, 0, 3))
CALL(slice_dim_neg4, tg_slice(e->x, -4, 0, 1))
CALL(narrow_past_end, tg_narrow(e->x, 0, 2, 3))
CALL(narrow_neg_length, tg_narrow(e->x, 0, 0, -1))
CALL(select_index4, tg_select(e->x, 0, 4))
CALL(select_dim3, tg_select(e->x, 3, 0))
CALL(expand_mismatch, tg_expand(e->x, TG_SHAPE(4, 8, 16)))
CALL(expand_fewer_dims, tg_expand(e->x, TG_SHAPE(8, 32)))
CALL(expand_ndim9, tg_expand(e->x, 9, nine))
CALL(expand_neg, tg_expand(e->x, TG_SHAPE(4, -2, 32)))
CALL(reshape_numel, tg_reshape(e->x, TG_SHAPE(5, -1)))
CALL(reshape_neg, tg_reshape(e->x, TG_SHAPE(4, -8, 32)))
CALL(reshape_two_infer, tg_reshape(e->x, TG_SHAPE(-1, -1)))
CALL(reshape_ndim9, tg_reshape(e->x, 9, nine))
CALL(reshape_null_shape, tg_reshape(e->x, 3, NULL))
CALL(unsqueeze_dim5, tg_unsqueeze(e->x, 5))
static bool unsqueeze_9th(env *e)
{
    (void)e;
    tg_tensor *t8 = tg_zeros(TG_FLOAT64, 8, nine);
    bool f = failed(tg_unsqueeze(t8, 0));
    tg_release(t8);
    return f;
}
CALL(squeeze_not_one, tg_squeeze(e->x, 0))
CALL(squeeze_dim3, tg_squeeze(e->x, 3))
CALL(to_bad_dtype, tg_to(e->x, (tg_dtype)7))

/* elementwise */
CALL(add_unbroadcastable, tg_add(e->x, e->v3))
CALL(sub_unbroadcastable, tg_sub(e->x, e->m))
CALL(mul_unbroadcastable, tg_mul(e->m, e->x))
CALL(div_unbroadcastable, tg_div(e->v3, e->x))
CALL(add_mixed, tg_add(e->x, e->x32))
CALL(mul_mixed, tg_mul(e->x32, e->x))
CALL(add_bool, tg_add(e->mask, e->mask))
CALL(div_bool, tg_div(e->x, e->mask))
CALL(neg_bool, tg_neg(e->mask))
CALL(scale_bool, tg_scale(e->mask, 2))
CALL(add_scalar_bool, tg_add_scalar(e->mask, 1))
CALL(exp_bool, tg_exp(e->mask))
CALL(log_bool, tg_log(e->mask))
CALL(sqrt_bool, tg_sqrt(e->mask))
CALL(pow_bool, tg_pow_scalar(e->mask, 2))
CALL(relu_bool, tg_relu(e->mask))
CALL(eq_mixed, tg_eq(e->x, e->x32))
CALL(lt_unbroadcastable, tg_lt(e->x, e->v3))
CALL(ge_unbroadcastable, tg_ge(e->m, e->x))
CALL(where_mixed, tg_where(e->mask, e->x, e->x32))
CALL(where_cond_shape, tg_where(e->v3, e->x, e->x))
CALL(where_bool_values, tg_where(e->mask, e->mask, e->mask))
static bool masked_fill_short_mask(env *e)
{
    tg_tensor *short_mask = tg_gt_scalar(e->v3, 0);
    bool f = failed(tg_masked_fill(e->x, short_mask, 0));
    tg_release(short_mask);
    return f;
}
static bool masked_fill_big_mask(env *e)
{
    tg_tensor *big = tg_expand(e->mask, TG_SHAPE(2, 4, 8, 32));
    bool f = failed(tg_masked_fill(e->x, big, 0));
    tg_release(big);
    return f;
}
CALL(masked_fill_bool, tg_masked_fill(e->mask, e->mask, 0))
CALL(tril_1d, tg_tril(e->v3, 0))
CALL(triu_0d, tg_triu(e->s, 0))

/* matmul */
CALL(matmul_misaligned, tg_matmul(e->x, e->m))
static bool matmul_batch(env *e)
{
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 32, 5));
    bool f = failed(tg_matmul(e->x, b));
    tg_release(b);
    return f;
}
CALL(matmul_0d, tg_matmul(e->s, e->x))
CALL(matmul_vector, tg_matmul(e->v3, e->x))
CALL(matmul_mixed, tg_matmul(e->x32, e->m))
CALL(matmul_bool, tg_matmul(e->mask, e->mask))

/* reductions and softmax */
CALL(sum_dim3, tg_sum(e->x, 3, false))
CALL(mean_dim_neg4, tg_mean(e->x, -4, true))
CALL(max_dim3, tg_max(e->x, 3, false))
static bool max_empty(env *e)
{
    (void)e;
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3));
    bool f = failed(tg_max(t, 0, false));
    tg_release(t);
    return f;
}
CALL(sum_bool, tg_sum(e->mask, 0, false))
CALL(sum_all_bool, tg_sum_all(e->mask))
CALL(mean_all_bool, tg_mean_all(e->mask))
CALL(max_bool, tg_max(e->mask, 0, false))
CALL(softmax_dim3, tg_softmax(e->x, 3))
CALL(log_softmax_dim_neg4, tg_log_softmax(e->x, -4))
CALL(softmax_bool, tg_softmax(e->mask, 0))

/* autograd */
CALL_RC(backward_non_scalar, tg_backward(e->x))
CALL_RC(backward_no_grad, tg_backward(e->s))
static bool backward_bool(env *e)
{
    (void)e;
    tg_tensor *b = tg_zeros(TG_BOOL, 0, NULL);
    bool f = tg_backward(b) < 0;
    tg_release(b);
    return f;
}
static bool backward_with_shape(env *e)
{
    tg_tensor *y = tg_scale(e->x, 2);
    bool f = tg_backward_with(y, e->m) < 0;
    tg_release(y);
    return f;
}
static bool backward_twice(env *e)
{
    tg_tensor *loss = tg_sum_all(e->x);
    ck_assert_int_eq(tg_backward(loss), 0);
    bool f = tg_backward(loss) < 0;
    tg_release(loss);
    tg_zero_grad(e->x);
    return f;
}
static bool requires_grad_bool(env *e)
{
    tg_set_requires_grad(e->mask, true);
    return !tg_requires_grad(e->mask);
}
static bool requires_grad_non_leaf(env *e)
{
    tg_tensor *y = tg_exp(e->x);
    tg_set_requires_grad(y, false);
    bool f = tg_requires_grad(y);
    tg_release(y);
    return f;
}
static tg_tensor *exp_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_exp(in[0]);
}
CALL_RC(gradcheck_no_grad, tg_gradcheck(exp_fn, NULL, 1, &e->m, NULL, NULL))
CALL_RC(scope_end_unopened, tg_scope_end())

/* files and printing */
CALL(load_missing, tg_load_npy("/nonexistent/tapegrad/x.npy"))
CALL_RC(save_missing_dir, tg_save_npy(e->v3, "/nonexistent/tapegrad/x.npy"))
CALL_RC(fprint_null_file, tg_fprint(NULL, e->v3, -1))
static bool allclose_unbroadcastable(env *e) { return !tg_allclose(e->x, e->v3, 0, 0); }

/* ---- the table -------------------------------------------------------- */

#define MATMUL_MSG "matmul: shapes (4,8,32) and (16,32) are not aligned: 32 != 16"

static const struct {
    const char *name;
    bool (*call)(env *e);
    const char *needles[3]; /* each must be in the error */
} rows[] = {
    {"zeros ndim 9", zeros_ndim9, {"zeros:", "ndim 9"}},
    {"zeros ndim -1", zeros_ndim_neg, {"zeros:", "ndim -1"}},
    {"zeros negative size", zeros_neg_size, {"zeros:", "(2,-3)"}},
    {"zeros unknown dtype", zeros_bad_dtype, {"zeros:", "dtype 7"}},
    {"zeros NULL shape", zeros_null_shape, {"zeros:", "NULL"}},
    {"zeros overflow", zeros_overflow, {"zeros:", "(1099511627776,1099511627776)"}},
    {"ones negative size", ones_neg_size, {"ones:", "(2,-3)"}},
    {"full ndim 9", full_ndim9, {"full:", "ndim 9"}},
    {"scalar unknown dtype", scalar_bad_dtype, {"scalar:", "dtype 7"}},
    {"from_data ndim 9", from_data_ndim9, {"from_data:", "ndim 9"}},
    {"from_data NULL data", from_data_null, {"from_data:", "NULL"}},
    {"from_data negative size", from_data_neg, {"from_data:", "(-1,)"}},
    {"arange step 0", arange_step0, {"arange:", "step"}},
    {"arange NaN stop", arange_nan, {"arange:", "nan"}},
    {"arange too long", arange_too_long, {"arange:", "1e+19"}},
    {"randn ndim 9", randn_ndim9, {"randn:", "ndim 9"}},
    {"rand bool", rand_bool, {"rand:", "bool"}},
    {"pcg64_randn negative size", pcg64_neg, {"pcg64_randn:", "(-2,)"}},

    {"size dim 3", size_dim3, {"size:", "dim 3", "(4,8,32)"}},
    {"stride dim -4", stride_dim_neg4, {"stride:", "dim -4", "(4,8,32)"}},
    {"get out of range", get_out_of_range, {"get:", "index 4", "(4,8,32)"}},
    {"get NULL idx", get_null_idx, {"get:", "NULL", "(4,8,32)"}},
    {"set out of range", set_out_of_range, {"set:", "index -9", "(4,8,32)"}},
    {"item of many", item_not_one, {"item:", "(4,8,32)", "1024"}},
    {"copy_out unknown dtype", copy_out_bad_dtype, {"copy_out:", "dtype 7"}},
    {"copy_out NULL dst", copy_out_null_dst, {"copy_out:", "NULL"}},

    {"transpose dim 3", transpose_dim3, {"transpose:", "dim 3", "(4,8,32)"}},
    {"slice dim -4", slice_dim_neg4, {"slice:", "dim -4", "(4,8,32)"}},
    {"narrow past end", narrow_past_end, {"narrow:", "length 3", "(4,8,32)"}},
    {"narrow negative length", narrow_neg_length, {"narrow:", "length -1", "(4,8,32)"}},
    {"select index 4", select_index4, {"select:", "index 4", "(4,8,32)"}},
    {"select dim 3", select_dim3, {"select:", "dim 3", "(4,8,32)"}},
    {"expand mismatch", expand_mismatch, {"expand:", "(4,8,32)", "(4,8,16)"}},
    {"expand fewer dims", expand_fewer_dims, {"expand:", "(4,8,32)"}},
    {"expand ndim 9", expand_ndim9, {"expand:", "(4,8,32)", "9"}},
    {"expand negative size", expand_neg, {"expand:", "(4,8,32)", "(4,-2,32)"}},
    {"reshape numel", reshape_numel, {"reshape:", "(4,8,32)", "(5,-1)"}},
    {"reshape negative size", reshape_neg, {"reshape:", "(4,8,32)", "(4,-8,32)"}},
    {"reshape two -1", reshape_two_infer, {"reshape:", "(4,8,32)", "(-1,-1)"}},
    {"reshape ndim 9", reshape_ndim9, {"reshape:", "ndim 9"}},
    {"reshape NULL shape", reshape_null_shape, {"reshape:", "NULL"}},
    {"unsqueeze dim 5", unsqueeze_dim5, {"unsqueeze:", "dim 5", "(4,8,32)"}},
    {"unsqueeze a 9th dim", unsqueeze_9th, {"unsqueeze:", "(1,1,1,1,1,1,1,1)"}},
    {"squeeze size 4", squeeze_not_one, {"squeeze:", "(4,8,32)", "size 4"}},
    {"squeeze dim 3", squeeze_dim3, {"squeeze:", "dim 3", "(4,8,32)"}},
    {"to unknown dtype", to_bad_dtype, {"to:", "dtype 7"}},

    {"add unbroadcastable", add_unbroadcastable, {"add:", "(4,8,32)", "(3,)"}},
    {"sub unbroadcastable", sub_unbroadcastable, {"sub:", "(4,8,32)", "(16,32)"}},
    {"mul unbroadcastable", mul_unbroadcastable, {"mul:", "(16,32)", "(4,8,32)"}},
    {"div unbroadcastable", div_unbroadcastable, {"div:", "(3,)", "(4,8,32)"}},
    {"add float64 + float32", add_mixed, {"add:", "float64 (4,8,32)", "float32 (4,8,32)"}},
    {"mul float32 * float64", mul_mixed, {"mul:", "float32 (4,8,32)", "float64 (4,8,32)"}},
    {"add bool", add_bool, {"add:", "bool (4,8,32)"}},
    {"div by bool", div_bool, {"div:", "bool (4,8,32)"}},
    {"neg bool", neg_bool, {"neg:", "bool (4,8,32)"}},
    {"scale bool", scale_bool, {"scale:", "bool (4,8,32)"}},
    {"add_scalar bool", add_scalar_bool, {"add_scalar:", "bool (4,8,32)"}},
    {"exp bool", exp_bool, {"exp:", "bool (4,8,32)"}},
    {"log bool", log_bool, {"log:", "bool (4,8,32)"}},
    {"sqrt bool", sqrt_bool, {"sqrt:", "bool (4,8,32)"}},
    {"pow bool", pow_bool, {"pow:", "bool (4,8,32)"}},
    {"relu bool", relu_bool, {"relu:", "bool (4,8,32)"}},
    {"eq float64 == float32", eq_mixed, {"eq:", "float64 (4,8,32)", "float32 (4,8,32)"}},
    {"lt unbroadcastable", lt_unbroadcastable, {"lt:", "(4,8,32)", "(3,)"}},
    {"ge unbroadcastable", ge_unbroadcastable, {"ge:", "(16,32)", "(4,8,32)"}},
    {"where float64 / float32", where_mixed, {"where:", "float64", "float32"}},
    {"where cond shape", where_cond_shape, {"where:", "(3,)", "(4,8,32)"}},
    {"where bool values", where_bool_values, {"where:", "bool (4,8,32)"}},
    {"masked_fill short mask", masked_fill_short_mask, {"masked_fill:", "(4,8,32)", "(3,)"}},
    {"masked_fill big mask", masked_fill_big_mask, {"masked_fill:", "(4,8,32)", "(2,4,8,32)"}},
    {"masked_fill bool", masked_fill_bool, {"masked_fill:", "bool (4,8,32)"}},
    {"tril 1-d", tril_1d, {"tril:", "(3,)"}},
    {"triu 0-d", triu_0d, {"triu:", "()"}},

    {"matmul misaligned", matmul_misaligned, {MATMUL_MSG}},
    {"matmul batch", matmul_batch, {"matmul:", "(4,8,32)", "(3,32,5)"}},
    {"matmul 0-d", matmul_0d, {"matmul:", "()", "(4,8,32)"}},
    {"matmul vector", matmul_vector, {"matmul:", "(3,)", "(4,8,32)"}},
    {"matmul float32 @ float64", matmul_mixed, {"matmul:", "float32 (4,8,32)", "float64 (16,32)"}},
    {"matmul bool", matmul_bool, {"matmul:", "bool (4,8,32)"}},

    {"sum dim 3", sum_dim3, {"sum:", "dim 3", "(4,8,32)"}},
    {"mean dim -4", mean_dim_neg4, {"mean:", "dim -4", "(4,8,32)"}},
    {"max dim 3", max_dim3, {"max:", "dim 3", "(4,8,32)"}},
    {"max over empty dim", max_empty, {"max:", "(0,3)"}},
    {"sum bool", sum_bool, {"sum:", "bool (4,8,32)"}},
    {"sum_all bool", sum_all_bool, {"sum", "bool (4,8,32)"}},
    {"mean_all bool", mean_all_bool, {"mean", "bool (4,8,32)"}},
    {"max bool", max_bool, {"max:", "bool (4,8,32)"}},
    {"softmax dim 3", softmax_dim3, {"softmax:", "dim 3", "(4,8,32)"}},
    {"log_softmax dim -4", log_softmax_dim_neg4, {"log_softmax:", "dim -4", "(4,8,32)"}},
    {"softmax bool", softmax_bool, {"softmax:", "bool (4,8,32)"}},

    {"backward non-scalar", backward_non_scalar, {"backward", "(4,8,32)"}},
    {"backward without grad", backward_no_grad, {"backward", "require"}},
    {"backward bool", backward_bool, {"backward", "bool"}},
    {"backward_with shape", backward_with_shape, {"backward", "(16,32)", "(4,8,32)"}},
    {"backward twice", backward_twice, {"backward", "consumed"}},
    {"set_requires_grad bool", requires_grad_bool, {"set_requires_grad", "bool (4,8,32)"}},
    {"set_requires_grad non-leaf", requires_grad_non_leaf,
     {"set_requires_grad", "(4,8,32)", "not a leaf"}},
    {"gradcheck without grad", gradcheck_no_grad, {"gradcheck", "requires grad"}},
    {"scope_end unopened", scope_end_unopened, {"scope_end"}},

    {"load_npy missing", load_missing, {"load_npy", "/nonexistent/tapegrad/x.npy"}},
    {"save_npy missing dir", save_missing_dir, {"save_npy", "/nonexistent/tapegrad/x.npy"}},
    {"fprint NULL file", fprint_null_file, {"fprint"}},
    {"allclose unbroadcastable", allclose_unbroadcastable, {"allclose", "(4,8,32)", "(3,)"}},
};

START_TEST(bad_input)
{
    const char *name = rows[_i].name;
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    tg_clear_error();
    if (!rows[_i].call(&e))
        note("%s: the call did not fail", name);
    const char *err = tg_last_error();
    for (int k = 0; k < 3 && rows[_i].needles[k]; k++)
        if (!strstr(err, rows[_i].needles[k]))
            note("%s: error '%s' lacks '%s'", name, err, rows[_i].needles[k]);
    if (strchr(err, '\n'))
        note("%s: '%s' is not one line", name, err);
    if (tg_tape_size() != tape)
        note("%s: the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}
END_TEST

START_TEST(matmul_message_exact)
{
    env e;
    env_make(&e);
    ck_assert_ptr_null(tg_matmul(e.x, e.m));
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    env_free(&e);
}
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
    ck_assert_ptr_null(tg_sum_all(tg_softmax(tg_scale(tg_matmul(e.x, e.m), 2), -1)));
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

/* ---- NULL tensors ------------------------------------------------------ */

#define NUL ((tg_tensor *)NULL)

CALL(n_retain, tg_retain(NUL))
CALL(n_keep, tg_keep(NUL))
CALL(n_zeros_like, tg_zeros_like(NUL))
CALL(n_ones_like, tg_ones_like(NUL))
CALL(n_full_like, tg_full_like(NUL, 1))
CALL_RC(n_ndim, tg_ndim(NUL))
CALL_RC(n_size, tg_size(NUL, 0))
static bool n_shape(env *e) { (void)e; return tg_shape(NUL) == NULL; }
static bool n_stride(env *e) { (void)e; return tg_stride(NUL, 0) == 0; }
CALL_RC(n_numel, tg_numel(NUL))
static bool n_contiguous(env *e) { (void)e; return !tg_is_contiguous(NUL); }
static bool n_copy_out(env *e)
{
    (void)e;
    double dst[1];
    return tg_copy_out(NUL, TG_FLOAT64, dst) < 0;
}
CALL_NAN(n_get, tg_get(NUL, (int64_t[]){0}))
CALL_NAN(n_item, tg_item(NUL))
CALL_RC(n_set, tg_set(NUL, (int64_t[]){0}, 1))
CALL(n_transpose, tg_transpose(NUL, 0, 1))
CALL(n_slice, tg_slice(NUL, 0, 0, 1))
CALL(n_narrow, tg_narrow(NUL, 0, 0, 1))
CALL(n_select, tg_select(NUL, 0, 0))
CALL(n_expand, tg_expand(NUL, TG_SHAPE(2)))
CALL(n_reshape, tg_reshape(NUL, TG_SHAPE(2)))
CALL(n_unsqueeze, tg_unsqueeze(NUL, 0))
CALL(n_squeeze, tg_squeeze(NUL, 0))
CALL(n_contiguous_op, tg_contiguous(NUL))
CALL(n_to, tg_to(NUL, TG_FLOAT32))
CALL(n_add_l, tg_add(NUL, e->x))
CALL(n_add_r, tg_add(e->x, NUL))
CALL(n_sub, tg_sub(e->x, NUL))
CALL(n_mul, tg_mul(NUL, e->x))
CALL(n_div, tg_div(e->x, NUL))
CALL(n_neg, tg_neg(NUL))
CALL(n_scale, tg_scale(NUL, 2))
CALL(n_add_scalar, tg_add_scalar(NUL, 2))
CALL(n_exp, tg_exp(NUL))
CALL(n_log, tg_log(NUL))
CALL(n_sqrt, tg_sqrt(NUL))
CALL(n_pow, tg_pow_scalar(NUL, 2))
CALL(n_relu, tg_relu(NUL))
CALL(n_eq, tg_eq(NUL, e->x))
CALL(n_ne, tg_ne(e->x, NUL))
CALL(n_lt, tg_lt(NUL, e->x))
CALL(n_le, tg_le(e->x, NUL))
CALL(n_gt, tg_gt(NUL, e->x))
CALL(n_ge, tg_ge(e->x, NUL))
CALL(n_eq_scalar, tg_eq_scalar(NUL, 0))
CALL(n_ne_scalar, tg_ne_scalar(NUL, 0))
CALL(n_lt_scalar, tg_lt_scalar(NUL, 0))
CALL(n_le_scalar, tg_le_scalar(NUL, 0))
CALL(n_gt_scalar, tg_gt_scalar(NUL, 0))
CALL(n_ge_scalar, tg_ge_scalar(NUL, 0))
CALL(n_where_cond, tg_where(NUL, e->x, e->x))
CALL(n_where_a, tg_where(e->mask, NUL, e->x))
CALL(n_where_b, tg_where(e->mask, e->x, NUL))
CALL(n_masked_fill_t, tg_masked_fill(NUL, e->mask, 0))
CALL(n_masked_fill_mask, tg_masked_fill(e->x, NUL, 0))
CALL(n_tril, tg_tril(NUL, 0))
CALL(n_triu, tg_triu(NUL, 0))
CALL(n_matmul_l, tg_matmul(NUL, e->m))
CALL(n_matmul_r, tg_matmul(e->x, NUL))
CALL(n_sum, tg_sum(NUL, 0, false))
CALL(n_sum_all, tg_sum_all(NUL))
CALL(n_mean, tg_mean(NUL, 0, true))
CALL(n_mean_all, tg_mean_all(NUL))
CALL(n_max, tg_max(NUL, 0, false))
CALL(n_softmax, tg_softmax(NUL, 0))
CALL(n_log_softmax, tg_log_softmax(NUL, 0))
static bool n_set_requires_grad(env *e)
{
    (void)e;
    tg_set_requires_grad(NUL, true);
    return true;
}
static bool n_requires_grad(env *e) { (void)e; return !tg_requires_grad(NUL); }
static bool n_is_leaf(env *e) { (void)e; return !tg_is_leaf(NUL); }
static bool n_retain_grad(env *e)
{
    (void)e;
    tg_retain_grad(NUL);
    return true;
}
CALL_RC(n_backward, tg_backward(NUL))
CALL_RC(n_backward_with_out, tg_backward_with(NUL, e->m))
static bool n_backward_with_dout(env *e)
{
    tg_tensor *y = tg_scale(e->x, 2);
    bool f = tg_backward_with(y, NUL) < 0;
    tg_release(y);
    return f;
}
static bool n_grad(env *e) { (void)e; return tg_grad(NUL) == NULL; }
static bool n_zero_grad(env *e)
{
    (void)e;
    tg_zero_grad(NUL);
    return true;
}
CALL(n_detach, tg_detach(NUL))
static bool n_gradcheck(env *e)
{
    tg_tensor *in[] = {e->x, NUL};
    return tg_gradcheck(exp_fn, NULL, 2, in, NULL, NULL) < 0;
}
static bool n_fprint(env *e)
{
    (void)e;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = tg_fprint(f, NUL, -1);
    fclose(f);
    bool f_ok = rc < 0 && len == 0;
    free(buf);
    return f_ok;
}
static bool n_format(env *e)
{
    (void)e;
    char *s = tg_format(NUL, -1);
    free(s);
    return s == NULL;
}
static bool n_allclose(env *e) { return !tg_allclose(e->x, NUL, 0, 0); }
CALL_RC(n_save_npy, tg_save_npy(NUL, "/tmp/tapegrad-never-written.npy"))

static const struct {
    const char *name;
    bool (*call)(env *e);
} null_rows[] = {
    {"retain", n_retain}, {"keep", n_keep}, {"zeros_like", n_zeros_like},
    {"ones_like", n_ones_like}, {"full_like", n_full_like}, {"ndim", n_ndim},
    {"size", n_size}, {"shape", n_shape}, {"stride", n_stride},
    {"numel", n_numel}, {"is_contiguous", n_contiguous},
    {"copy_out", n_copy_out}, {"get", n_get}, {"item", n_item}, {"set", n_set},
    {"transpose", n_transpose}, {"slice", n_slice}, {"narrow", n_narrow},
    {"select", n_select}, {"expand", n_expand}, {"reshape", n_reshape},
    {"unsqueeze", n_unsqueeze}, {"squeeze", n_squeeze},
    {"contiguous", n_contiguous_op}, {"to", n_to}, {"add (left)", n_add_l},
    {"add (right)", n_add_r}, {"sub", n_sub}, {"mul", n_mul}, {"div", n_div},
    {"neg", n_neg}, {"scale", n_scale}, {"add_scalar", n_add_scalar},
    {"exp", n_exp}, {"log", n_log}, {"sqrt", n_sqrt}, {"pow_scalar", n_pow},
    {"relu", n_relu}, {"eq", n_eq}, {"ne", n_ne}, {"lt", n_lt}, {"le", n_le},
    {"gt", n_gt}, {"ge", n_ge}, {"eq_scalar", n_eq_scalar},
    {"ne_scalar", n_ne_scalar}, {"lt_scalar", n_lt_scalar},
    {"le_scalar", n_le_scalar}, {"gt_scalar", n_gt_scalar},
    {"ge_scalar", n_ge_scalar}, {"where (cond)", n_where_cond},
    {"where (a)", n_where_a}, {"where (b)", n_where_b},
    {"masked_fill (t)", n_masked_fill_t}, {"masked_fill (mask)", n_masked_fill_mask},
    {"tril", n_tril}, {"triu", n_triu}, {"matmul (a)", n_matmul_l},
    {"matmul (b)", n_matmul_r}, {"sum", n_sum}, {"sum_all", n_sum_all},
    {"mean", n_mean}, {"mean_all", n_mean_all}, {"max", n_max},
    {"softmax", n_softmax}, {"log_softmax", n_log_softmax},
    {"set_requires_grad", n_set_requires_grad},
    {"requires_grad", n_requires_grad}, {"is_leaf", n_is_leaf},
    {"retain_grad", n_retain_grad}, {"backward", n_backward},
    {"backward_with (out)", n_backward_with_out},
    {"backward_with (dout)", n_backward_with_dout}, {"grad", n_grad},
    {"zero_grad", n_zero_grad}, {"detach", n_detach},
    {"gradcheck", n_gradcheck}, {"fprint", n_fprint}, {"format", n_format},
    {"allclose", n_allclose}, {"save_npy", n_save_npy},
};

START_TEST(null_keeps_first_error)
{
    const char *name = null_rows[_i].name;
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    ck_assert_ptr_null(tg_matmul(e.x, e.m)); /* a known first cause */
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    if (!null_rows[_i].call(&e))
        note("%s(NULL) did not fail", name);
    if (strcmp(tg_last_error(), MATMUL_MSG))
        note("%s(NULL) replaced the first error with '%s'", name, tg_last_error());
    if (tg_tape_size() != tape)
        note("%s(NULL): the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}
END_TEST

Suite *errors_suite(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("bad input");
    tcase_add_loop_test(tc, bad_input, 0, COUNT(rows));
    tcase_add_test(tc, matmul_message_exact);
    tcase_add_test(tc, chain_keeps_first_cause);
    tcase_add_test(tc, clear_error);
    suite_add_tcase(s, tc);

    tc = tcase_create("null");
    tcase_add_loop_test(tc, null_keeps_first_error, 0, COUNT(null_rows));
    suite_add_tcase(s, tc);
    return s;
}
