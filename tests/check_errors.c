/* Bad input, one table row per mistake: every public function that takes
 * tensors, shapes, dims, paths, modules or optimizers fails with a return
 * value (NULL, -1, NaN, false), never an abort, and leaves one line in
 * tg_last_error() naming the function and, where they matter, the shapes.
 * A failing call leaves its inputs as they were and records nothing on the
 * tape; a failing init leaves its module zeroed. Value errors found inside
 * a composite call (a token id past the vocabulary, through gpt_forward)
 * are named by the op that reads the values (embedding), as a chain of
 * calls reports its first cause.
 *
 * A second table passes NULL tensors: the call fails quietly and keeps the
 * error already there, so a chain of calls reports its first cause.
 *
 * A third group holds rows about errors raised inside modules (named with
 * the function called, then the inner cause), gradcheck's options, and the
 * abort of a second tg_release (fork mode only). tests/errors_coverage.test
 * checks that every
 * public function is named below "the calls" or listed here.
 *
 * Not in the table, deliberately (no argument that can be wrong, or no
 * failure value to return; the NULL-safe ones are run by quiet_on_null):
 *   tg_last_error tg_clear_error tg_scope_begin tg_live_tensors
 *   tg_tape_size tg_plot_available tg_is_grad_enabled tg_anomaly_mode
 *       take nothing.
 *   tg_set_grad_enabled tg_set_anomaly_mode
 *       take a bool; every value is valid.
 *   tg_dtype_name tg_dtype_size tg_dtype_of
 *       total accessors: an unknown dtype gives "unknown" and 0, a NULL
 *       tensor TG_FLOAT32.
 *   tg_release
 *       NULL-safe; releasing a dead tensor asserts, which is not an error
 *       value (release_twice_aborts).
 *   tg_set_callsite tg_print_live_tensors tg_tape_print tg_tape_dot
 *       void; any file name is recorded as given, a NULL FILE does nothing.
 *   tg_params_init tg_params_free tg_params_zero_grad tg_optim_free
 *   tg_optim_zero_grad tg_head_free tg_linear_free tg_embed_free
 *   tg_layernorm_free tg_mha_free tg_mlp_free tg_block_free tg_gpt_free
 *       void and NULL-safe (a zeroed module frees to nothing).
 *   tg_params_get tg_params_numel tg_clip_grad_norm
 *       no failure value: NULL means "no such name", 0 is an empty list's
 *       size and norm.
 *   tg_gradcheck_defaults tg_sgd_config tg_adam_config tg_adamw_config
 *       build plain values; tg_gradcheck and tg_optim_new check them.
 */
#include "tests.h"

#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The inputs every row may use, made fresh for each row. */
typedef struct {
    tg_tensor *x;    /* (4,8,32) float64, requires grad */
    tg_tensor *m;    /* (16,32)  float64 */
    tg_tensor *x32;  /* (4,8,32) float32 */
    tg_tensor *mask; /* (4,8,32) bool */
    tg_tensor *v3;   /* (3,)     float64 */
    tg_tensor *s;    /* ()       float64 */
    tg_tensor *ids;  /* (4,8)    int64, values in [0, 16) */
} env;

#define ENV_N 7
/* The inputs as an array, in the struct's order. */
static void env_list(const env *e, tg_tensor *out[ENV_N])
{
    tg_tensor *const all[ENV_N] = {e->x,  e->m, e->x32, e->mask,
                                   e->v3, e->s, e->ids};
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
    int64_t ids[32];
    for (int i = 0; i < 32; i++)
        ids[i] = (i * 7) % 16;
    e->ids = tg_from_data(TG_INT64, TG_SHAPE(4, 8), ids);
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
            memcmp(tg_shape(t), sn->shape[i],
                   sizeof(int64_t) * (size_t)sn->ndim[i]))
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
static bool allclose_unbroadcastable(env *e)
{
    return !tg_allclose(e->x, e->v3, 0, 0);
}

/* random numbers: a NULL generator */
static bool rng_seed_null(env *e)
{
    (void)e;
    tg_rng_seed(NULL, 0); /* void: the error is the only sign */
    return true;
}
CALL_NAN(rng_uniform_null, tg_rng_uniform(NULL))
CALL_NAN(rng_normal_null, tg_rng_normal(NULL))
CALL(randn_null_rng, tg_randn(NULL, TG_FLOAT64, TG_SHAPE(2)))
static bool pcg64_seed_null(env *e)
{
    (void)e;
    tg_pcg64_seed(NULL, 0);
    return true;
}
CALL_NAN(pcg64_uniform_null, tg_pcg64_uniform(NULL))
CALL_NAN(pcg64_normal_null, tg_pcg64_normal(NULL))
CALL(pcg64_randn_null, tg_pcg64_randn(NULL, TG_FLOAT64, TG_SHAPE(2)))

/* more creation and comparison */
CALL(ones_null_shape, tg_ones(TG_FLOAT64, 1, NULL))
CALL(full_neg_size, tg_full(TG_FLOAT32, TG_SHAPE(-1), 0))
CALL(ne_mixed, tg_ne(e->x32, e->x))
CALL(le_unbroadcastable, tg_le(e->v3, e->m))
CALL(gt_unbroadcastable, tg_gt(e->x, e->m))

/* fused attention */
#define ZEROS_ROW(name, shape, expr)                                           \
    static bool name(env *e)                                                   \
    {                                                                          \
        tg_tensor *z = tg_zeros(TG_FLOAT64, shape);                            \
        bool f = failed(expr);                                                 \
        tg_release(z);                                                         \
        return f;                                                              \
    }
ZEROS_ROW(attention_d, TG_SHAPE(4, 8, 16), tg_attention(e->x, z, e->x, true, 1))
ZEROS_ROW(attention_keys, TG_SHAPE(4, 7, 32),
          tg_attention(e->x, e->x, z, true, 1))
ZEROS_ROW(attention_batch, TG_SHAPE(3, 8, 32),
          tg_attention(e->x, z, z, false, 1))
CALL(attention_1d, tg_attention(e->v3, e->v3, e->v3, false, 1))
CALL(attention_mixed, tg_attention(e->x, e->x32, e->x, true, 1))
CALL(attention_bool, tg_attention(e->mask, e->mask, e->mask, true, 1))
CALL(attention_scale_nan, tg_attention(e->x, e->x, e->x, true, NAN))
CALL(attention_scale_inf, tg_attention(e->x, e->x, e->x, true, INFINITY))

/* cat and chunk */
CALL(cat_null_array, tg_cat(NULL, 2, 0))
CALL(cat_zero, tg_cat(&e->x, 0, 0))
CALL(cat_negative, tg_cat(&e->x, -1, 0))
CALL(cat_mixed, tg_cat((tg_tensor *[]){e->x, e->x32}, 2, 0))
CALL(cat_shapes, tg_cat((tg_tensor *[]){e->x, e->m}, 2, 0))
CALL(cat_dim3, tg_cat((tg_tensor *[]){e->x, e->x}, 2, 3))
/* A failed chunk leaves every out[i] NULL. */
static bool chunk_failed(tg_tensor *t, int n, int dim)
{
    tg_tensor *out[4] = {t, t, t, t};
    bool f = tg_chunk(t, n, dim, out) < 0;
    for (int i = 0; i < 4 && i < n; i++)
        if (out[i])
            note("chunk: out[%d] is not NULL after a failure", i);
    return f;
}
CALL_RC(chunk_null_out, tg_chunk(e->x, 2, 0, NULL))
static bool chunk_zero(env *e) { return chunk_failed(e->x, 0, 0); }
static bool chunk_negative(env *e) { return chunk_failed(e->x, -2, 0); }
static bool chunk_uneven(env *e) { return chunk_failed(e->x, 3, 0); }
static bool chunk_dim3(env *e) { return chunk_failed(e->x, 2, 3); }

/* embedding and gather: index dtypes, shapes and values */
static bool int64_row(env *e, int which, int ndim, const int64_t *shape,
                      double value)
{
    tg_tensor *ids = tg_full(TG_INT64, ndim, shape, value);
    bool f = which == 0   ? failed(tg_embedding(e->m, ids))
             : which == 1 ? failed(tg_gather(e->x, 2, ids))
                          : failed(tg_cross_entropy(e->x, ids));
    tg_release(ids);
    return f;
}
CALL(embedding_weight_1d, tg_embedding(e->v3, e->ids))
CALL(embedding_float_ids, tg_embedding(e->m, e->x))
static bool embedding_id_16(env *e)
{
    return int64_row(e, 0, TG_SHAPE(2, 3), 16);
}
static bool embedding_id_neg(env *e)
{
    return int64_row(e, 0, TG_SHAPE(5), -1);
}
CALL(embedding_bool_weight, tg_embedding(e->mask, e->ids))
CALL(gather_float_index, tg_gather(e->x, 2, e->x))
CALL(gather_ndim, tg_gather(e->x, 0, e->ids))
CALL(gather_dim3, tg_gather(e->x, 3, e->x))
static bool gather_index_32(env *e)
{
    return int64_row(e, 1, TG_SHAPE(4, 8, 1), 32);
}
static bool gather_index_neg(env *e)
{
    return int64_row(e, 1, TG_SHAPE(4, 8, 1), -1);
}
static bool gather_too_big(env *e)
{
    return int64_row(e, 1, TG_SHAPE(5, 8, 1), 0);
}

/* layer_norm, gelu, losses */
CALL(layer_norm_gamma, tg_layer_norm(e->x, e->v3, NULL, 1e-5))
CALL(layer_norm_beta, tg_layer_norm(e->x, NULL, e->m, 1e-5))
CALL(layer_norm_eps_neg, tg_layer_norm(e->x, NULL, NULL, -1))
CALL(layer_norm_eps_nan, tg_layer_norm(e->x, NULL, NULL, NAN))
CALL(layer_norm_0d, tg_layer_norm(e->s, NULL, NULL, 1e-5))
CALL(layer_norm_bool, tg_layer_norm(e->mask, NULL, NULL, 1e-5))
static bool layer_norm_mixed(env *e)
{
    tg_tensor *gamma = tg_ones(TG_FLOAT32, TG_SHAPE(32));
    bool f = failed(tg_layer_norm(e->x, gamma, NULL, 1e-5));
    tg_release(gamma);
    return f;
}
CALL(gelu_bool, tg_gelu(e->mask))
CALL(cross_entropy_float_targets, tg_cross_entropy(e->x, e->x))
static bool cross_entropy_shape(env *e)
{
    return int64_row(e, 2, TG_SHAPE(4, 7), 0);
}
static bool cross_entropy_32(env *e)
{
    return int64_row(e, 2, TG_SHAPE(4, 8), 32);
}
static bool cross_entropy_neg(env *e)
{
    return int64_row(e, 2, TG_SHAPE(4, 8), -1);
}
CALL(cross_entropy_0d, tg_cross_entropy(e->s, e->ids))
CALL(cross_entropy_bool, tg_cross_entropy(e->mask, e->ids))
CALL(mse_unbroadcastable, tg_mse_loss(e->x, e->v3))
CALL(mse_mixed, tg_mse_loss(e->x, e->x32))
CALL(mse_bool, tg_mse_loss(e->mask, e->mask))

/* autograd: seeds and consumed tapes */
static bool backward_with_dtype(env *e)
{
    tg_tensor *y = tg_scale(e->x, 2);
    tg_tensor *dy = tg_ones(TG_FLOAT32, TG_SHAPE(4, 8, 32));
    bool f = tg_backward_with(y, dy) < 0;
    tg_release(dy);
    tg_release(y);
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

/* gradcheck's own arguments */
CALL_RC(gradcheck_null_fn, tg_gradcheck(NULL, NULL, 1, &e->x, NULL, NULL))
CALL_RC(gradcheck_zero_inputs, tg_gradcheck(exp_fn, NULL, 0, &e->x, NULL, NULL))
CALL_RC(gradcheck_null_inputs, tg_gradcheck(exp_fn, NULL, 1, NULL, NULL, NULL))
static bool gradcheck_non_leaf(env *e)
{
    tg_tensor *y = tg_scale(e->x, 2);
    bool f = tg_gradcheck(exp_fn, NULL, 1, &y, NULL, NULL) < 0;
    tg_release(y);
    return f;
}
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
static bool gradcheck_eps_zero(env *e) { return gradcheck_eps(e, 0); }
static bool gradcheck_eps_nan(env *e) { return gradcheck_eps(e, NAN); }
static tg_tensor *misaligned_fn(tg_tensor *const *in, void *ctx)
{
    return tg_matmul(in[0], (tg_tensor *)ctx);
}
CALL_RC(gradcheck_fn_fails,
        tg_gradcheck(misaligned_fn, e->m, 1, &e->x, NULL, NULL))

/* files */
CALL(load_npy_null, tg_load_npy(NULL))
CALL(load_npy_empty_file, tg_load_npy("/dev/null"))
CALL(load_npy_directory, tg_load_npy("/"))
CALL_RC(save_npy_null, tg_save_npy(e->v3, NULL))
CALL_RC(save_npy_directory, tg_save_npy(e->v3, "/"))

/* ---- nn: parameter lists -------------------------------------------------- */

/* A list of (name, tensor) pairs: n of them, NULL tensors allowed. */
static void params_of(tg_params *ps, int n, const char *const *names,
                      tg_tensor *const *ts)
{
    tg_params_init(ps);
    ps->items = calloc((size_t)n, sizeof *ps->items);
    for (int i = 0; i < n; i++) {
        snprintf(ps->items[i].name, TG_PARAM_NAME_MAX, "%s", names[i]);
        ps->items[i].t = ts[i];
    }
    ps->n = ps->cap = n;
}

static char long_name[200];

static const char *make_long_name(void)
{
    memset(long_name, 'w', sizeof long_name - 1);
    return long_name;
}
CALL_RC(params_add_null_list, tg_params_add(NULL, NULL, "w", e->x))
static bool params_add_with(env *e, const char *prefix, const char *name,
                            const char *again)
{
    tg_params ps;
    tg_params_init(&ps);
    bool f = tg_params_add(&ps, prefix, name, e->x) < 0;
    if (again && !f)
        f = tg_params_add(&ps, prefix, again, e->m) < 0;
    tg_params_free(&ps);
    return f;
}
static bool params_add_null_name(env *e)
{
    return params_add_with(e, "p", NULL, NULL);
}
static bool params_add_long(env *e)
{
    return params_add_with(e, "p", make_long_name(), NULL);
}
static bool params_add_duplicate(env *e)
{
    return params_add_with(e, "p", "w", "w");
}

/* ---- nn: modules ---------------------------------------------------------- */

/* Each module sized for env's x (4,8,32) float64: C = 32, 4 heads of 16,
 * a vocabulary of 16 and a block of 8 tokens. */
#define GPT_CFG                                                                \
    ((tg_gpt_config){.vocab_size = 16,                                         \
                     .block_size = 8,                                          \
                     .n_embd = 32,                                             \
                     .n_head = 4,                                              \
                     .n_layer = 1,                                             \
                     .gelu = true,                                             \
                     .dtype = TG_FLOAT64})
#define HEAD_INIT      tg_head_init(&mod, TG_FLOAT64, 32, 16, &rng)
#define LINEAR_INIT    tg_linear_init(&mod, TG_FLOAT64, 32, 16, true, &rng)
#define EMBED_INIT     tg_embed_init(&mod, TG_FLOAT64, 16, 32, &rng)
#define LAYERNORM_INIT tg_layernorm_init(&mod, TG_FLOAT64, 32)
#define MHA_INIT       tg_mha_init(&mod, TG_FLOAT64, 32, 4, &rng)
#define MLP_INIT       tg_mlp_init(&mod, TG_FLOAT64, 32, true, &rng)
#define BLOCK_INIT     tg_block_init(&mod, TG_FLOAT64, 32, 4, true, &rng)
#define GPT_INIT       tg_gpt_init(&mod, GPT_CFG, &rng)
/* A module left as zeros: never initialised (or freed). */
#define ZEROED (memset(&mod, 0, sizeof mod), 0)

/* A row on a module `mod` of this type made by `init` (with a seeded `rng`
 * at hand): `bad` is the call, true when it failed. The module is freed
 * after. */
#define MODULE_ROW(name, type, init, free_fn, bad)                             \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        type mod;                                                              \
        tg_rng rng;                                                            \
        tg_rng_seed(&rng, 0);                                                  \
        (void)rng;                                                             \
        if ((init) < 0) {                                                      \
            note(#name ": setting up failed: %s", tg_last_error());            \
            return false;                                                      \
        }                                                                      \
        bool f = (bad);                                                        \
        free_fn(&mod);                                                         \
        return f;                                                              \
    }

/* A row whose bad call is an init into `mod`: it must fail and leave the
 * module zeroed, holding nothing. */
#define INIT_ROW(name, type, bad)                                              \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        type mod, zero;                                                        \
        memset(&mod, 0, sizeof mod);                                           \
        memset(&zero, 0, sizeof zero);                                         \
        tg_rng rng;                                                            \
        tg_rng_seed(&rng, 0);                                                  \
        (void)rng;                                                             \
        bool f = (bad) < 0;                                                    \
        if (memcmp(&mod, &zero, sizeof mod))                                   \
            note(#name ": a failed init left the module not zeroed");          \
        return f;                                                              \
    }

static bool negative(int rc) { return rc < 0; }

/* head */
INIT_ROW(head_init_null, tg_head, tg_head_init(NULL, TG_FLOAT64, 32, 16, &rng))
INIT_ROW(head_init_null_rng, tg_head,
         tg_head_init(&mod, TG_FLOAT64, 32, 16, NULL))
INIT_ROW(head_init_bool, tg_head, tg_head_init(&mod, TG_BOOL, 32, 16, &rng))
INIT_ROW(head_init_zero, tg_head, tg_head_init(&mod, TG_FLOAT64, 0, 16, &rng))
INIT_ROW(head_init_neg, tg_head, tg_head_init(&mod, TG_FLOAT64, 32, -16, &rng))
CALL(head_forward_null, tg_head_forward(NULL, e->x))
MODULE_ROW(head_forward_zeroed, tg_head, ZEROED, tg_head_free,
           failed(tg_head_forward(&mod, e->x)))
MODULE_ROW(head_forward_2d, tg_head, HEAD_INIT, tg_head_free,
           failed(tg_head_forward(&mod, e->m)))
MODULE_ROW(head_forward_dtype, tg_head, HEAD_INIT, tg_head_free,
           failed(tg_head_forward(&mod, e->x32)))
CALL_RC(head_params_null, tg_head_params(NULL, NULL, "h"))
MODULE_ROW(head_params_zeroed, tg_head, ZEROED, tg_head_free,
           negative(tg_head_params(&mod, NULL, "h")))
MODULE_ROW(head_params_null_list, tg_head, HEAD_INIT, tg_head_free,
           negative(tg_head_params(&mod, NULL, "h")))

/* linear */
INIT_ROW(linear_init_null, tg_linear,
         tg_linear_init(NULL, TG_FLOAT64, 32, 16, true, &rng))
INIT_ROW(linear_init_null_rng, tg_linear,
         tg_linear_init(&mod, TG_FLOAT64, 32, 16, true, NULL))
INIT_ROW(linear_init_int64, tg_linear,
         tg_linear_init(&mod, TG_INT64, 32, 16, true, &rng))
INIT_ROW(linear_init_zero, tg_linear,
         tg_linear_init(&mod, TG_FLOAT64, 32, 0, false, &rng))
CALL(linear_forward_null, tg_linear_forward(NULL, e->x))
MODULE_ROW(linear_forward_zeroed, tg_linear, ZEROED, tg_linear_free,
           failed(tg_linear_forward(&mod, e->x)))
MODULE_ROW(linear_forward_in, tg_linear, LINEAR_INIT, tg_linear_free,
           failed(tg_linear_forward(&mod, e->v3)))
MODULE_ROW(linear_forward_0d, tg_linear, LINEAR_INIT, tg_linear_free,
           failed(tg_linear_forward(&mod, e->s)))
MODULE_ROW(linear_forward_dtype, tg_linear, LINEAR_INIT, tg_linear_free,
           failed(tg_linear_forward(&mod, e->x32)))
CALL_RC(linear_params_null, tg_linear_params(NULL, NULL, "l"))
MODULE_ROW(linear_params_zeroed, tg_linear, ZEROED, tg_linear_free,
           negative(tg_linear_params(&mod, NULL, "l")))
MODULE_ROW(linear_params_null_list, tg_linear, LINEAR_INIT, tg_linear_free,
           negative(tg_linear_params(&mod, NULL, "l")))

/* embed */
INIT_ROW(embed_init_null, tg_embed,
         tg_embed_init(NULL, TG_FLOAT64, 16, 32, &rng))
INIT_ROW(embed_init_null_rng, tg_embed,
         tg_embed_init(&mod, TG_FLOAT64, 16, 32, NULL))
INIT_ROW(embed_init_bool, tg_embed, tg_embed_init(&mod, TG_BOOL, 16, 32, &rng))
INIT_ROW(embed_init_neg, tg_embed,
         tg_embed_init(&mod, TG_FLOAT64, -16, 32, &rng))
CALL(embed_forward_null, tg_embed_forward(NULL, e->ids))
MODULE_ROW(embed_forward_zeroed, tg_embed, ZEROED, tg_embed_free,
           failed(tg_embed_forward(&mod, e->ids)))
MODULE_ROW(embed_forward_float, tg_embed, EMBED_INIT, tg_embed_free,
           failed(tg_embed_forward(&mod, e->x)))
static bool embed_forward_id_16(env *e)
{
    (void)e;
    tg_embed mod;
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    if (EMBED_INIT < 0)
        return false;
    tg_tensor *ids = tg_full(TG_INT64, TG_SHAPE(2), 16);
    bool f = failed(tg_embed_forward(&mod, ids));
    tg_release(ids);
    tg_embed_free(&mod);
    return f;
}
CALL(embed_positions_null, tg_embed_positions(NULL, 4))
MODULE_ROW(embed_positions_zeroed, tg_embed, ZEROED, tg_embed_free,
           failed(tg_embed_positions(&mod, 4)))
MODULE_ROW(embed_positions_neg, tg_embed, EMBED_INIT, tg_embed_free,
           failed(tg_embed_positions(&mod, -1)))
MODULE_ROW(embed_positions_17, tg_embed, EMBED_INIT, tg_embed_free,
           failed(tg_embed_positions(&mod, 17)))
CALL_RC(embed_params_null, tg_embed_params(NULL, NULL, "e"))
MODULE_ROW(embed_params_zeroed, tg_embed, ZEROED, tg_embed_free,
           negative(tg_embed_params(&mod, NULL, "e")))
MODULE_ROW(embed_params_null_list, tg_embed, EMBED_INIT, tg_embed_free,
           negative(tg_embed_params(&mod, NULL, "e")))

/* layernorm */
INIT_ROW(layernorm_init_null, tg_layernorm,
         tg_layernorm_init(NULL, TG_FLOAT64, 32))
INIT_ROW(layernorm_init_bool, tg_layernorm,
         tg_layernorm_init(&mod, TG_BOOL, 32))
INIT_ROW(layernorm_init_zero, tg_layernorm,
         tg_layernorm_init(&mod, TG_FLOAT64, 0))
CALL(layernorm_forward_null, tg_layernorm_forward(NULL, e->x))
MODULE_ROW(layernorm_forward_zeroed, tg_layernorm, ZEROED, tg_layernorm_free,
           failed(tg_layernorm_forward(&mod, e->x)))
MODULE_ROW(layernorm_forward_dim, tg_layernorm, LAYERNORM_INIT,
           tg_layernorm_free, failed(tg_layernorm_forward(&mod, e->v3)))
MODULE_ROW(layernorm_forward_dtype, tg_layernorm, LAYERNORM_INIT,
           tg_layernorm_free, failed(tg_layernorm_forward(&mod, e->x32)))
CALL_RC(layernorm_params_null, tg_layernorm_params(NULL, NULL, "n"))
MODULE_ROW(layernorm_params_zeroed, tg_layernorm, ZEROED, tg_layernorm_free,
           negative(tg_layernorm_params(&mod, NULL, "n")))
MODULE_ROW(layernorm_params_null_list, tg_layernorm, LAYERNORM_INIT,
           tg_layernorm_free, negative(tg_layernorm_params(&mod, NULL, "n")))

/* mha */
INIT_ROW(mha_init_null, tg_mha, tg_mha_init(NULL, TG_FLOAT64, 32, 4, &rng))
INIT_ROW(mha_init_null_rng, tg_mha, tg_mha_init(&mod, TG_FLOAT64, 32, 4, NULL))
INIT_ROW(mha_init_bool, tg_mha, tg_mha_init(&mod, TG_BOOL, 32, 4, &rng))
INIT_ROW(mha_init_indivisible, tg_mha,
         tg_mha_init(&mod, TG_FLOAT64, 32, 5, &rng))
INIT_ROW(mha_init_zero_heads, tg_mha,
         tg_mha_init(&mod, TG_FLOAT64, 32, 0, &rng))
CALL(mha_forward_null, tg_mha_forward(NULL, e->x))
MODULE_ROW(mha_forward_zeroed, tg_mha, ZEROED, tg_mha_free,
           failed(tg_mha_forward(&mod, e->x)))
MODULE_ROW(mha_forward_2d, tg_mha, MHA_INIT, tg_mha_free,
           failed(tg_mha_forward(&mod, e->m)))
MODULE_ROW(mha_forward_dtype, tg_mha, MHA_INIT, tg_mha_free,
           failed(tg_mha_forward(&mod, e->x32)))
CALL_RC(mha_params_null, tg_mha_params(NULL, NULL, "a"))
MODULE_ROW(mha_params_zeroed, tg_mha, ZEROED, tg_mha_free,
           negative(tg_mha_params(&mod, NULL, "a")))
MODULE_ROW(mha_params_null_list, tg_mha, MHA_INIT, tg_mha_free,
           negative(tg_mha_params(&mod, NULL, "a")))
static bool mha_params_long_prefix(env *e)
{
    (void)e;
    tg_mha mod;
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    if (MHA_INIT < 0)
        return false;
    tg_params ps;
    tg_params_init(&ps);
    bool f = tg_mha_params(&mod, &ps, make_long_name()) < 0;
    tg_params_free(&ps);
    tg_mha_free(&mod);
    return f;
}

/* mlp */
INIT_ROW(mlp_init_null, tg_mlp, tg_mlp_init(NULL, TG_FLOAT64, 32, true, &rng))
INIT_ROW(mlp_init_null_rng, tg_mlp,
         tg_mlp_init(&mod, TG_FLOAT64, 32, true, NULL))
INIT_ROW(mlp_init_bool, tg_mlp, tg_mlp_init(&mod, TG_BOOL, 32, true, &rng))
INIT_ROW(mlp_init_zero, tg_mlp, tg_mlp_init(&mod, TG_FLOAT64, 0, true, &rng))
CALL(mlp_forward_null, tg_mlp_forward(NULL, e->x))
MODULE_ROW(mlp_forward_zeroed, tg_mlp, ZEROED, tg_mlp_free,
           failed(tg_mlp_forward(&mod, e->x)))
MODULE_ROW(mlp_forward_in, tg_mlp, MLP_INIT, tg_mlp_free,
           failed(tg_mlp_forward(&mod, e->v3)))
MODULE_ROW(mlp_forward_dtype, tg_mlp, MLP_INIT, tg_mlp_free,
           failed(tg_mlp_forward(&mod, e->x32)))
CALL_RC(mlp_params_null, tg_mlp_params(NULL, NULL, "f"))
MODULE_ROW(mlp_params_zeroed, tg_mlp, ZEROED, tg_mlp_free,
           negative(tg_mlp_params(&mod, NULL, "f")))
MODULE_ROW(mlp_params_null_list, tg_mlp, MLP_INIT, tg_mlp_free,
           negative(tg_mlp_params(&mod, NULL, "f")))

/* block */
INIT_ROW(block_init_null, tg_block,
         tg_block_init(NULL, TG_FLOAT64, 32, 4, true, &rng))
INIT_ROW(block_init_null_rng, tg_block,
         tg_block_init(&mod, TG_FLOAT64, 32, 4, true, NULL))
INIT_ROW(block_init_bool, tg_block,
         tg_block_init(&mod, TG_BOOL, 32, 4, true, &rng))
INIT_ROW(block_init_zero, tg_block,
         tg_block_init(&mod, TG_FLOAT64, 0, 4, true, &rng))
INIT_ROW(block_init_indivisible, tg_block,
         tg_block_init(&mod, TG_FLOAT64, 32, 3, true, &rng))
CALL(block_forward_null, tg_block_forward(NULL, e->x))
MODULE_ROW(block_forward_zeroed, tg_block, ZEROED, tg_block_free,
           failed(tg_block_forward(&mod, e->x)))
MODULE_ROW(block_forward_2d, tg_block, BLOCK_INIT, tg_block_free,
           failed(tg_block_forward(&mod, e->m)))
MODULE_ROW(block_forward_dtype, tg_block, BLOCK_INIT, tg_block_free,
           failed(tg_block_forward(&mod, e->x32)))
CALL_RC(block_params_null, tg_block_params(NULL, NULL, "b"))
MODULE_ROW(block_params_zeroed, tg_block, ZEROED, tg_block_free,
           negative(tg_block_params(&mod, NULL, "b")))
MODULE_ROW(block_params_null_list, tg_block, BLOCK_INIT, tg_block_free,
           negative(tg_block_params(&mod, NULL, "b")))

/* gpt */
static tg_gpt_config gpt_cfg_with(int which, int value)
{
    tg_gpt_config c = GPT_CFG;
    int *field[] = {&c.vocab_size, &c.block_size, &c.n_embd, &c.n_head,
                    &c.n_layer};
    if (which < 5)
        *field[which] = value;
    else
        c.dtype = (tg_dtype)value;
    return c;
}
INIT_ROW(gpt_init_null, tg_gpt, tg_gpt_init(NULL, GPT_CFG, &rng))
INIT_ROW(gpt_init_null_rng, tg_gpt, tg_gpt_init(&mod, GPT_CFG, NULL))
INIT_ROW(gpt_init_vocab0, tg_gpt, tg_gpt_init(&mod, gpt_cfg_with(0, 0), &rng))
INIT_ROW(gpt_init_layers_neg, tg_gpt,
         tg_gpt_init(&mod, gpt_cfg_with(4, -1), &rng))
INIT_ROW(gpt_init_int64, tg_gpt,
         tg_gpt_init(&mod, gpt_cfg_with(5, TG_INT64), &rng))
INIT_ROW(gpt_init_indivisible, tg_gpt,
         tg_gpt_init(&mod, gpt_cfg_with(3, 5), &rng))
CALL(gpt_forward_null, tg_gpt_forward(NULL, e->ids))
MODULE_ROW(gpt_forward_zeroed, tg_gpt, ZEROED, tg_gpt_free,
           failed(tg_gpt_forward(&mod, e->ids)))
MODULE_ROW(gpt_forward_float_ids, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_forward(&mod, e->m)))
MODULE_ROW(gpt_forward_1d, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_forward(&mod, e->v3)))
/* A gpt row with an int64 tensor of this shape and value as `ids`. */
#define GPT_IDS_ROW(name, shape, value, bad)                                   \
    static bool name(env *e)                                                   \
    {                                                                          \
        (void)e;                                                               \
        tg_gpt mod;                                                            \
        tg_rng rng;                                                            \
        tg_rng_seed(&rng, 0);                                                  \
        if (GPT_INIT < 0)                                                      \
            return false;                                                      \
        tg_tensor *ids = tg_full(TG_INT64, shape, value);                      \
        bool f = (bad);                                                        \
        tg_release(ids);                                                       \
        tg_gpt_free(&mod);                                                     \
        return f;                                                              \
    }
GPT_IDS_ROW(gpt_forward_long, TG_SHAPE(2, 9), 0,
            failed(tg_gpt_forward(&mod, ids)))
GPT_IDS_ROW(gpt_forward_id_16, TG_SHAPE(2, 4), 16,
            failed(tg_gpt_forward(&mod, ids)))
GPT_IDS_ROW(gpt_loss_targets_shape, TG_SHAPE(4, 7), 0,
            failed(tg_gpt_loss(&mod, e->ids, ids)))
MODULE_ROW(gpt_loss_float_targets, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_loss(&mod, e->ids, e->m)))
CALL(gpt_loss_null, tg_gpt_loss(NULL, e->ids, e->ids))
GPT_IDS_ROW(gpt_loss_target_16, TG_SHAPE(4, 8), 16,
            failed(tg_gpt_loss(&mod, e->ids, ids)))
GPT_IDS_ROW(gpt_generate_neg, TG_SHAPE(1, 3), 0,
            failed(tg_gpt_generate(&mod, ids, -1, 1, &rng)))
GPT_IDS_ROW(gpt_generate_temp0, TG_SHAPE(1, 3), 0,
            failed(tg_gpt_generate(&mod, ids, 2, 0, &rng)))
GPT_IDS_ROW(gpt_generate_null_rng, TG_SHAPE(1, 3), 0,
            failed(tg_gpt_generate(&mod, ids, 2, 1, NULL)))
MODULE_ROW(gpt_generate_batch, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_generate(&mod, e->ids, 2, 1, &rng)))
GPT_IDS_ROW(gpt_generate_id_16, TG_SHAPE(1, 3), 16,
            failed(tg_gpt_generate(&mod, ids, 2, 1, &rng)))
static bool gpt_generate_null(env *e)
{
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    return failed(tg_gpt_generate(NULL, e->ids, 2, 1, &rng));
}
MODULE_ROW(gpt_generate_zeroed, tg_gpt, ZEROED, tg_gpt_free,
           failed(tg_gpt_generate(&mod, e->ids, 2, 1, &rng)))
CALL_RC(gpt_params_null, tg_gpt_params(NULL, NULL, "g"))
MODULE_ROW(gpt_params_zeroed, tg_gpt, ZEROED, tg_gpt_free,
           negative(tg_gpt_params(&mod, NULL, "g")))
MODULE_ROW(gpt_params_null_list, tg_gpt, GPT_INIT, tg_gpt_free,
           negative(tg_gpt_params(&mod, NULL, "g")))

/* ---- nn: optimizers ------------------------------------------------------- */

/* optim_new over ("x": x, "second": second) with cfg; true when it failed. */
static bool optim_new_fails(env *e, tg_optim_config cfg, tg_tensor *second)
{
    tg_params ps;
    params_of(&ps, 2, (const char *[]){"x", "second"},
              (tg_tensor *[]){e->x, second});
    tg_optim *o = tg_optim_new(&ps, cfg);
    tg_params_free(&ps);
    tg_optim_free(o);
    return o == NULL;
}
#define OPTIM_ROW(name, cfg_expr, field, value)                                \
    static bool name(env *e)                                                   \
    {                                                                          \
        tg_optim_config cfg = cfg_expr;                                        \
        cfg.field = value;                                                     \
        return optim_new_fails(e, cfg, e->m);                                  \
    }
OPTIM_ROW(optim_lr_neg, tg_adam_config(1e-3), lr, -0.1)
OPTIM_ROW(optim_lr_nan, tg_sgd_config(0.1, 0, 0), lr, NAN)
OPTIM_ROW(optim_wd_neg, tg_adamw_config(1e-3, 0.01), weight_decay, -0.5)
OPTIM_ROW(optim_momentum_neg, tg_sgd_config(0.1, 0.9, 0), momentum, -0.9)
OPTIM_ROW(optim_beta1_one, tg_adam_config(1e-3), beta1, 1.0)
OPTIM_ROW(optim_beta2_neg, tg_adamw_config(1e-3, 0.01), beta2, -0.5)
OPTIM_ROW(optim_eps_neg, tg_adam_config(1e-3), eps, -1e-8)
OPTIM_ROW(optim_kind, tg_adam_config(1e-3), kind, (tg_optim_kind)7)
static bool optim_null_list(env *e)
{
    (void)e;
    return tg_optim_new(NULL, tg_adam_config(1e-3)) == NULL;
}
static bool optim_null_param(env *e)
{
    return optim_new_fails(e, tg_adam_config(1e-3), NULL);
}
static bool optim_bool_param(env *e)
{
    return optim_new_fails(e, tg_adam_config(1e-3), e->mask);
}
static bool optim_same_twice(env *e)
{
    return optim_new_fails(e, tg_adam_config(1e-3), e->x);
}
CALL_RC(optim_step_null, tg_optim_step(NULL))

/* ---- nn: checkpoints ------------------------------------------------------ */

/* A path in /tmp of this process's own. */
static const char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/tapegrad-errors-%ld-%s", (long)getpid(),
             name);
    return path;
}

CALL_RC(save_npz_null_list, tg_save_npz(NULL, tmp_path("a.npz")))
static bool npz_row(env *e, int which)
{
    tg_params ps;
    params_of(&ps, 2, (const char *[]){"x", "v"},
              (tg_tensor *[]){e->x, which == 3 || which == 6 ? NULL : e->v3});
    const char *path = tmp_path("a.npz");
    bool f = which == 0   ? tg_save_npz(&ps, NULL) < 0
             : which == 1 ? tg_save_npz(&ps, "/nonexistent/tapegrad/a.npz") < 0
             : which == 2 ? tg_save_npz(&ps, "/") < 0
             : which == 3 ? tg_save_npz(&ps, path) < 0
             : which == 4 ? tg_load_npz(&ps, NULL) < 0
             : which == 5 ? tg_load_npz(&ps, "/nonexistent/tapegrad/a.npz") < 0
             : which == 6 ? tg_load_npz(&ps, path) < 0
             : which == 7 ? tg_load_npz(&ps, "/dev/null") < 0
                          : tg_load_npz(&ps, "/") < 0;
    unlink(path);
    tg_params_free(&ps);
    return f;
}
static bool save_npz_null_path(env *e) { return npz_row(e, 0); }
static bool save_npz_missing_dir(env *e) { return npz_row(e, 1); }
static bool save_npz_directory(env *e) { return npz_row(e, 2); }
static bool save_npz_null_param(env *e) { return npz_row(e, 3); }
static bool load_npz_null_path(env *e) { return npz_row(e, 4); }
static bool load_npz_missing(env *e) { return npz_row(e, 5); }
static bool load_npz_null_param(env *e) { return npz_row(e, 6); }
static bool load_npz_empty_file(env *e) { return npz_row(e, 7); }
static bool load_npz_directory(env *e) { return npz_row(e, 8); }
CALL_RC(load_npz_null_list, tg_load_npz(NULL, tmp_path("a.npz")))

/* Saves ("x": zeros (4,8,32), "v": (3,) of `saved_dt`), then loads that into
 * ("x": e->x, "v": into): the mismatch at "v" must fail the whole load and
 * leave e->x as it was (the snapshot checks it). */
static bool load_npz_mismatch(env *e, tg_tensor *into, tg_dtype saved_dt,
                              const char *saved_name)
{
    tg_tensor *zeros = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 8, 32));
    tg_tensor *v = tg_zeros(saved_dt, TG_SHAPE(3));
    tg_params saved, loaded;
    params_of(&saved, 2, (const char *[]){"x", saved_name},
              (tg_tensor *[]){zeros, v});
    params_of(&loaded, 2, (const char *[]){"x", "v"},
              (tg_tensor *[]){e->x, into});
    const char *path = tmp_path("mismatch.npz");
    bool f = false;
    if (tg_save_npz(&saved, path) < 0)
        note("load_npz mismatch: saving failed: %s", tg_last_error());
    else
        f = tg_load_npz(&loaded, path) < 0;
    unlink(path);
    tg_params_free(&saved);
    tg_params_free(&loaded);
    tg_release(zeros);
    tg_release(v);
    return f;
}
static bool load_npz_shape(env *e)
{
    return load_npz_mismatch(e, e->m, TG_FLOAT64, "v");
}
static bool load_npz_dtype(env *e)
{
    return load_npz_mismatch(e, e->v3, TG_INT64, "v");
}
static bool load_npz_missing_entry(env *e)
{
    return load_npz_mismatch(e, e->v3, TG_FLOAT64, "w");
}

/* ---- plots ---------------------------------------------------------------- */

static const double ys[3] = {1, 2, 3};
static const char *const bar_labels[3] = {"a", "b", "c"};

CALL_RC(heatmap_null_stem, tg_plot_heatmap(NULL, e->m, "t", "x", "y", false))
CALL_RC(heatmap_empty_stem, tg_plot_heatmap("", e->m, "t", "x", "y", false))
CALL_RC(heatmap_dir_stem, tg_plot_heatmap("/tmp/", e->m, "t", "x", "y", false))
CALL_RC(heatmap_missing_dir, tg_plot_heatmap("/nonexistent/tapegrad/h", e->m,
                                             NULL, NULL, NULL, true))
CALL_RC(heatmap_3d, tg_plot_heatmap(tmp_path("h"), e->x, "t", "x", "y", false))
static bool heatmap_empty(env *e)
{
    (void)e;
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3));
    bool f = tg_plot_heatmap(tmp_path("h"), t, "t", "x", "y", false) < 0;
    tg_release(t);
    return f;
}
static bool lines_row(int which)
{
    tg_series s = {.label = "y", .x = NULL, .y = ys, .n = 3};
    if (which == 2)
        s.y = NULL;
    if (which == 3)
        s.n = 0;
    if (which == 4)
        s.n = -3;
    const char *stem = which == 5   ? NULL
                       : which == 6 ? "/nonexistent/tapegrad/l"
                                    : tmp_path("l");
    return tg_plot_lines(stem, which == 0 ? NULL : &s, which == 1 ? 0 : 1, "t",
                         "x", "y", false, false) < 0;
}
static bool lines_null_series(env *e)
{
    (void)e;
    return lines_row(0);
}
static bool lines_zero_series(env *e)
{
    (void)e;
    return lines_row(1);
}
static bool lines_null_y(env *e)
{
    (void)e;
    return lines_row(2);
}
static bool lines_empty(env *e)
{
    (void)e;
    return lines_row(3);
}
static bool lines_negative_n(env *e)
{
    (void)e;
    return lines_row(4);
}
static bool lines_null_stem(env *e)
{
    (void)e;
    return lines_row(5);
}
static bool lines_missing_dir(env *e)
{
    (void)e;
    return lines_row(6);
}
CALL_RC(bars_zero, tg_plot_bars(tmp_path("b"), bar_labels, ys, 0, "t", "y"))
CALL_RC(bars_null_labels, tg_plot_bars(tmp_path("b"), NULL, ys, 3, "t", "y"))
CALL_RC(bars_null_values,
        tg_plot_bars(tmp_path("b"), bar_labels, NULL, 3, "t", "y"))
CALL_RC(bars_null_label,
        tg_plot_bars(tmp_path("b"), (const char *[]){"a", NULL, "c"}, ys, 3,
                     "t", "y"))
CALL_RC(bars_null_stem, tg_plot_bars(NULL, bar_labels, ys, 3, "t", "y"))
CALL_RC(bars_missing_dir,
        tg_plot_bars("/nonexistent/tapegrad/b", bar_labels, ys, 3, NULL, NULL))

/* ---- the table -------------------------------------------------------- */

#define MATMUL_MSG                                                             \
    "matmul: shapes (4,8,32) and (16,32) are not aligned: 32 != 16"

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
    {"zeros overflow",
     zeros_overflow,
     {"zeros:", "(1099511627776,1099511627776)"}},
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
    {"narrow negative length",
     narrow_neg_length,
     {"narrow:", "length -1", "(4,8,32)"}},
    {"select index 4", select_index4, {"select:", "index 4", "(4,8,32)"}},
    {"select dim 3", select_dim3, {"select:", "dim 3", "(4,8,32)"}},
    {"expand mismatch", expand_mismatch, {"expand:", "(4,8,32)", "(4,8,16)"}},
    {"expand fewer dims", expand_fewer_dims, {"expand:", "(4,8,32)"}},
    {"expand ndim 9", expand_ndim9, {"expand:", "(4,8,32)", "9"}},
    {"expand negative size", expand_neg, {"expand:", "(4,8,32)", "(4,-2,32)"}},
    {"reshape numel", reshape_numel, {"reshape:", "(4,8,32)", "(5,-1)"}},
    {"reshape negative size",
     reshape_neg,
     {"reshape:", "(4,8,32)", "(4,-8,32)"}},
    {"reshape two -1", reshape_two_infer, {"reshape:", "(4,8,32)", "(-1,-1)"}},
    {"reshape ndim 9", reshape_ndim9, {"reshape:", "ndim 9"}},
    {"reshape NULL shape", reshape_null_shape, {"reshape:", "NULL"}},
    {"unsqueeze dim 5", unsqueeze_dim5, {"unsqueeze:", "dim 5", "(4,8,32)"}},
    {"unsqueeze a 9th dim", unsqueeze_9th, {"unsqueeze:", "(1,1,1,1,1,1,1,1)"}},
    {"squeeze size 4", squeeze_not_one, {"squeeze:", "(4,8,32)", "size 4"}},
    {"squeeze dim 3", squeeze_dim3, {"squeeze:", "dim 3", "(4,8,32)"}},
    {"to unknown dtype", to_bad_dtype, {"to:", "dtype 7"}},

    {"add unbroadcastable", add_unbroadcastable, {"add:", "(4,8,32)", "(3,)"}},
    {"sub unbroadcastable",
     sub_unbroadcastable,
     {"sub:", "(4,8,32)", "(16,32)"}},
    {"mul unbroadcastable",
     mul_unbroadcastable,
     {"mul:", "(16,32)", "(4,8,32)"}},
    {"div unbroadcastable", div_unbroadcastable, {"div:", "(3,)", "(4,8,32)"}},
    {"add float64 + float32",
     add_mixed,
     {"add:", "float64 (4,8,32)", "float32 (4,8,32)"}},
    {"mul float32 * float64",
     mul_mixed,
     {"mul:", "float32 (4,8,32)", "float64 (4,8,32)"}},
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
    {"eq float64 == float32",
     eq_mixed,
     {"eq:", "float64 (4,8,32)", "float32 (4,8,32)"}},
    {"lt unbroadcastable", lt_unbroadcastable, {"lt:", "(4,8,32)", "(3,)"}},
    {"ge unbroadcastable", ge_unbroadcastable, {"ge:", "(16,32)", "(4,8,32)"}},
    {"where float64 / float32", where_mixed, {"where:", "float64", "float32"}},
    {"where cond shape", where_cond_shape, {"where:", "(3,)", "(4,8,32)"}},
    {"where bool values", where_bool_values, {"where:", "bool (4,8,32)"}},
    {"masked_fill short mask",
     masked_fill_short_mask,
     {"masked_fill:", "(4,8,32)", "(3,)"}},
    {"masked_fill big mask",
     masked_fill_big_mask,
     {"masked_fill:", "(4,8,32)", "(2,4,8,32)"}},
    {"masked_fill bool", masked_fill_bool, {"masked_fill:", "bool (4,8,32)"}},
    {"tril 1-d", tril_1d, {"tril:", "(3,)"}},
    {"triu 0-d", triu_0d, {"triu:", "()"}},

    {"matmul misaligned", matmul_misaligned, {MATMUL_MSG}},
    {"matmul batch", matmul_batch, {"matmul:", "(4,8,32)", "(3,32,5)"}},
    {"matmul 0-d", matmul_0d, {"matmul:", "()", "(4,8,32)"}},
    {"matmul vector", matmul_vector, {"matmul:", "(3,)", "(4,8,32)"}},
    {"matmul float32 @ float64",
     matmul_mixed,
     {"matmul:", "float32 (4,8,32)", "float64 (16,32)"}},
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
    {"log_softmax dim -4",
     log_softmax_dim_neg4,
     {"log_softmax:", "dim -4", "(4,8,32)"}},
    {"softmax bool", softmax_bool, {"softmax:", "bool (4,8,32)"}},

    {"backward non-scalar", backward_non_scalar, {"backward", "(4,8,32)"}},
    {"backward without grad", backward_no_grad, {"backward", "require"}},
    {"backward bool", backward_bool, {"backward", "bool"}},
    {"backward_with shape",
     backward_with_shape,
     {"backward", "(16,32)", "(4,8,32)"}},
    {"backward twice", backward_twice, {"backward", "consumed"}},
    {"set_requires_grad bool",
     requires_grad_bool,
     {"set_requires_grad", "bool (4,8,32)"}},
    {"set_requires_grad non-leaf",
     requires_grad_non_leaf,
     {"set_requires_grad", "(4,8,32)", "not a leaf"}},
    {"gradcheck without grad",
     gradcheck_no_grad,
     {"gradcheck", "requires grad"}},
    {"scope_end unopened", scope_end_unopened, {"scope_end"}},

    {"load_npy missing",
     load_missing,
     {"load_npy", "/nonexistent/tapegrad/x.npy"}},
    {"save_npy missing dir",
     save_missing_dir,
     {"save_npy", "/nonexistent/tapegrad/x.npy"}},
    {"fprint NULL file", fprint_null_file, {"fprint"}},
    {"allclose unbroadcastable",
     allclose_unbroadcastable,
     {"allclose", "(4,8,32)", "(3,)"}},

    {"rng_seed NULL", rng_seed_null, {"rng_seed:", "NULL"}},
    {"rng_uniform NULL", rng_uniform_null, {"rng_uniform:", "NULL"}},
    {"rng_normal NULL", rng_normal_null, {"rng_normal:", "NULL"}},
    {"randn NULL rng", randn_null_rng, {"randn:", "NULL"}},
    {"pcg64_seed NULL", pcg64_seed_null, {"pcg64_seed:", "NULL"}},
    {"pcg64_uniform NULL", pcg64_uniform_null, {"pcg64_uniform:", "NULL"}},
    {"pcg64_normal NULL", pcg64_normal_null, {"pcg64_normal:", "NULL"}},
    {"pcg64_randn NULL", pcg64_randn_null, {"pcg64_randn:", "NULL"}},
    {"ones NULL shape", ones_null_shape, {"ones:", "NULL"}},
    {"full negative size", full_neg_size, {"full:", "(-1,)"}},
    {"ne float32 != float64",
     ne_mixed,
     {"ne:", "float32 (4,8,32)", "float64 (4,8,32)"}},
    {"le unbroadcastable", le_unbroadcastable, {"le:", "(3,)", "(16,32)"}},
    {"gt unbroadcastable", gt_unbroadcastable, {"gt:", "(4,8,32)", "(16,32)"}},

    {"attention d differs",
     attention_d,
     {"attention:", "(4,8,32)", "(4,8,16)"}},
    {"attention keys differ",
     attention_keys,
     {"attention:", "(4,8,32)", "(4,7,32)"}},
    {"attention batch differs",
     attention_batch,
     {"attention:", "(4,8,32)", "(3,8,32)"}},
    {"attention 1-d", attention_1d, {"attention:", "(3,)"}},
    {"attention float64 / float32",
     attention_mixed,
     {"attention:", "float64", "float32"}},
    {"attention bool", attention_bool, {"attention:", "bool (4,8,32)"}},
    {"attention scale NaN",
     attention_scale_nan,
     {"attention:", "scale", "nan"}},
    {"attention scale inf",
     attention_scale_inf,
     {"attention:", "scale", "inf"}},
    {"cat NULL array", cat_null_array, {"cat:", "NULL"}},
    {"cat of 0", cat_zero, {"cat:", "0"}},
    {"cat of -1", cat_negative, {"cat:", "-1"}},
    {"cat float64 + float32",
     cat_mixed,
     {"cat:", "float32 (4,8,32)", "float64 (4,8,32)"}},
    {"cat shapes", cat_shapes, {"cat:", "(16,32)", "(4,8,32)"}},
    {"cat dim 3", cat_dim3, {"cat:", "dim 3", "(4,8,32)"}},
    {"chunk NULL out", chunk_null_out, {"chunk:", "NULL", "(4,8,32)"}},
    {"chunk into 0", chunk_zero, {"chunk:", "got 0", "(4,8,32)"}},
    {"chunk into -2", chunk_negative, {"chunk:", "got -2", "(4,8,32)"}},
    {"chunk uneven", chunk_uneven, {"chunk:", "size 4", "3 chunks"}},
    {"chunk dim 3", chunk_dim3, {"chunk:", "dim 3", "(4,8,32)"}},
    {"embedding 1-d weight", embedding_weight_1d, {"embedding:", "(3,)"}},
    {"embedding float ids",
     embedding_float_ids,
     {"embedding:", "int64", "float64 (4,8,32)"}},
    {"embedding id 16 of 16", embedding_id_16, {"embedding:", "16", "[0, 16)"}},
    {"embedding id -1", embedding_id_neg, {"embedding:", "-1", "[0, 16)"}},
    {"embedding bool weight", embedding_bool_weight, {"embedding:", "bool"}},
    {"gather float index",
     gather_float_index,
     {"gather:", "int64", "float64 (4,8,32)"}},
    {"gather index ndim", gather_ndim, {"gather:", "(4,8)", "(4,8,32)"}},
    {"gather dim 3", gather_dim3, {"gather:", "dim 3", "(4,8,32)"}},
    {"gather index 32", gather_index_32, {"gather:", "32", "[0, 32)"}},
    {"gather index -1", gather_index_neg, {"gather:", "-1", "[0, 32)"}},
    {"gather index too big",
     gather_too_big,
     {"gather:", "(5,8,1)", "(4,8,32)"}},
    {"layer_norm gamma shape",
     layer_norm_gamma,
     {"layer_norm:", "gamma", "(3,)"}},
    {"layer_norm beta shape",
     layer_norm_beta,
     {"layer_norm:", "beta", "(16,32)"}},
    {"layer_norm eps -1", layer_norm_eps_neg, {"layer_norm:", "eps", "-1"}},
    {"layer_norm eps NaN", layer_norm_eps_nan, {"layer_norm:", "eps", "nan"}},
    {"layer_norm 0-d", layer_norm_0d, {"layer_norm:", "()"}},
    {"layer_norm bool", layer_norm_bool, {"layer_norm:", "bool (4,8,32)"}},
    {"layer_norm float32 gamma",
     layer_norm_mixed,
     {"layer_norm:", "float64", "float32 (32,)"}},
    {"gelu bool", gelu_bool, {"gelu:", "bool (4,8,32)"}},
    {"cross_entropy float targets",
     cross_entropy_float_targets,
     {"cross_entropy:", "int64", "float64"}},
    {"cross_entropy targets shape",
     cross_entropy_shape,
     {"cross_entropy:", "(4,7)", "(4,8,32)"}},
    {"cross_entropy target 32", cross_entropy_32, {"cross_entropy:", "32"}},
    {"cross_entropy target -1", cross_entropy_neg, {"cross_entropy:", "-1"}},
    {"cross_entropy 0-d logits", cross_entropy_0d, {"cross_entropy:", "()"}},
    {"cross_entropy bool logits",
     cross_entropy_bool,
     {"cross_entropy:", "bool (4,8,32)"}},
    {"mse_loss unbroadcastable",
     mse_unbroadcastable,
     {"mse_loss:", "(4,8,32)", "(3,)"}},
    {"mse_loss float64 / float32",
     mse_mixed,
     {"mse_loss:", "float64", "float32"}},
    {"mse_loss bool", mse_bool, {"mse_loss:", "bool (4,8,32)"}},

    {"backward_with float32 seed",
     backward_with_dtype,
     {"backward", "float32"}},
    {"backward_with twice", backward_with_twice, {"backward", "consumed"}},
    {"backward twice after scope_end",
     backward_after_scope,
     {"backward", "consumed"}},
    {"gradcheck NULL function", gradcheck_null_fn, {"gradcheck:", "function"}},
    {"gradcheck 0 inputs", gradcheck_zero_inputs, {"gradcheck:", "input"}},
    {"gradcheck NULL inputs", gradcheck_null_inputs, {"gradcheck:", "input"}},
    {"gradcheck non-leaf input",
     gradcheck_non_leaf,
     {"gradcheck:", "not a leaf", "(4,8,32)"}},
    {"gradcheck function fails", gradcheck_fn_fails, {MATMUL_MSG}},
    {"load_npy NULL path", load_npy_null, {"load_npy:", "NULL"}},
    {"load_npy empty file", load_npy_empty_file, {"load_npy:", "/dev/null"}},
    {"load_npy directory", load_npy_directory, {"load_npy:", "/"}},
    {"save_npy NULL path", save_npy_null, {"save_npy:", "NULL"}},
    {"save_npy directory", save_npy_directory, {"save_npy:", "/"}},

    {"params_add NULL list", params_add_null_list, {"params_add:", "NULL"}},
    {"params_add NULL name", params_add_null_name, {"params_add:", "NULL"}},
    {"params_add long name", params_add_long, {"params_add:", "127"}},
    {"params_add duplicate",
     params_add_duplicate,
     {"params_add:", "duplicate", "'p.w'"}},

    {"head_init NULL", head_init_null, {"head_init:", "NULL"}},
    {"head_init NULL rng", head_init_null_rng, {"head_init:", "rng"}},
    {"head_init bool", head_init_bool, {"head_init:", "bool"}},
    {"head_init n_embd 0", head_init_zero, {"head_init:", "n_embd 0"}},
    {"head_init head_size -16", head_init_neg, {"head_init:", "head_size -16"}},
    {"head_forward NULL head", head_forward_null, {"head:", "NULL"}},
    {"head_forward zeroed head",
     head_forward_zeroed,
     {"head:", "not initialised"}},
    {"head_forward 2-d x", head_forward_2d, {"head:", "(16,32)"}},
    {"head_forward float32 x", head_forward_dtype, {"head:", "float32"}},
    {"head_params NULL head", head_params_null, {"head_params:", "NULL"}},
    {"head_params zeroed head",
     head_params_zeroed,
     {"head_params:", "not initialised"}},

    {"linear_init NULL", linear_init_null, {"linear_init:", "NULL"}},
    {"linear_init NULL rng", linear_init_null_rng, {"linear_init:", "rng"}},
    {"linear_init int64", linear_init_int64, {"linear_init:", "int64"}},
    {"linear_init out 0", linear_init_zero, {"linear_init:", "out 0"}},
    {"linear_forward NULL layer", linear_forward_null, {"linear:", "NULL"}},
    {"linear_forward zeroed layer",
     linear_forward_zeroed,
     {"linear:", "not initialised"}},
    {"linear_forward in 3", linear_forward_in, {"linear:", "(3,)"}},
    {"linear_forward 0-d x", linear_forward_0d, {"linear:", "()"}},
    {"linear_forward float32 x", linear_forward_dtype, {"linear:", "float32"}},
    {"linear_params NULL layer",
     linear_params_null,
     {"linear_params:", "NULL"}},
    {"linear_params zeroed layer",
     linear_params_zeroed,
     {"linear_params:", "not initialised"}},

    {"embed_init NULL", embed_init_null, {"embed_init:", "NULL"}},
    {"embed_init NULL rng", embed_init_null_rng, {"embed_init:", "rng"}},
    {"embed_init bool", embed_init_bool, {"embed_init:", "bool"}},
    {"embed_init num -16", embed_init_neg, {"embed_init:", "num -16"}},
    {"embed_forward NULL table", embed_forward_null, {"embed:", "NULL"}},
    {"embed_forward zeroed table",
     embed_forward_zeroed,
     {"embed:", "not initialised"}},
    {"embed_forward float ids",
     embed_forward_float,
     {"embed:", "int64", "float64"}},
    {"embed_forward id 16",
     embed_forward_id_16,
     {"embedding:", "id 16", "[0, 16)"}},
    {"embed_positions NULL table",
     embed_positions_null,
     {"embed_positions:", "NULL"}},
    {"embed_positions zeroed table",
     embed_positions_zeroed,
     {"embed_positions:", "not initialised"}},
    {"embed_positions -1", embed_positions_neg, {"embed_positions:", "-1"}},
    {"embed_positions 17 of 16",
     embed_positions_17,
     {"embed_positions:", "17", "16"}},
    {"embed_params NULL table", embed_params_null, {"embed_params:", "NULL"}},
    {"embed_params zeroed table",
     embed_params_zeroed,
     {"embed_params:", "not initialised"}},

    {"layernorm_init NULL", layernorm_init_null, {"layernorm_init:", "NULL"}},
    {"layernorm_init bool", layernorm_init_bool, {"layernorm_init:", "bool"}},
    {"layernorm_init dim 0", layernorm_init_zero, {"layernorm_init:", "dim"}},
    {"layernorm_forward NULL", layernorm_forward_null, {"layernorm:", "NULL"}},
    {"layernorm_forward zeroed",
     layernorm_forward_zeroed,
     {"layernorm:", "not initialised"}},
    {"layernorm_forward dim 3", layernorm_forward_dim, {"layernorm:", "(3,)"}},
    {"layernorm_forward float32 x",
     layernorm_forward_dtype,
     {"layernorm:", "float32"}},
    {"layernorm_params NULL",
     layernorm_params_null,
     {"layernorm_params:", "NULL"}},
    {"layernorm_params zeroed",
     layernorm_params_zeroed,
     {"layernorm_params:", "not initialised"}},

    {"mha_init NULL", mha_init_null, {"mha_init:", "NULL"}},
    {"mha_init 5 heads of 32", mha_init_indivisible, {"mha_init:", "5", "32"}},
    {"mha_init 0 heads", mha_init_zero_heads, {"mha_init:", "0"}},
    {"mha_forward NULL", mha_forward_null, {"mha:", "NULL"}},
    {"mha_forward zeroed", mha_forward_zeroed, {"mha:", "not initialised"}},
    {"mha_forward 2-d x", mha_forward_2d, {"mha:", "(16,32)"}},
    {"mha_forward float32 x", mha_forward_dtype, {"mha:", "float32"}},
    {"mha_params NULL", mha_params_null, {"mha_params:", "NULL"}},
    {"mha_params zeroed",
     mha_params_zeroed,
     {"mha_params:", "not initialised"}},
    {"mha_params long prefix",
     mha_params_long_prefix,
     {"mha_params", "too long"}},

    {"mlp_init NULL", mlp_init_null, {"mlp_init:", "NULL"}},
    {"mlp_init n_embd 0", mlp_init_zero, {"mlp_init:", "0"}},
    {"mlp_forward NULL", mlp_forward_null, {"mlp:", "NULL"}},
    {"mlp_forward zeroed", mlp_forward_zeroed, {"mlp:", "not initialised"}},
    {"mlp_params NULL", mlp_params_null, {"mlp_params:", "NULL"}},
    {"mlp_params zeroed",
     mlp_params_zeroed,
     {"mlp_params:", "not initialised"}},

    {"block_init NULL", block_init_null, {"block_init:", "NULL"}},
    {"block_forward NULL", block_forward_null, {"block:", "NULL"}},
    {"block_forward zeroed",
     block_forward_zeroed,
     {"block:", "not initialised"}},
    {"block_forward 2-d x", block_forward_2d, {"block:", "(16,32)"}},
    {"block_forward float32 x", block_forward_dtype, {"block:", "float32"}},
    {"block_params NULL", block_params_null, {"block_params:", "NULL"}},
    {"block_params zeroed",
     block_params_zeroed,
     {"block_params:", "not initialised"}},

    {"gpt_init NULL", gpt_init_null, {"gpt_init:", "NULL"}},
    {"gpt_init vocab_size 0", gpt_init_vocab0, {"gpt_init:", "vocab_size 0"}},
    {"gpt_init n_layer -1", gpt_init_layers_neg, {"gpt_init:", "n_layer -1"}},
    {"gpt_init int64", gpt_init_int64, {"gpt_init:", "int64"}},
    {"gpt_forward NULL", gpt_forward_null, {"gpt:", "NULL"}},
    {"gpt_forward zeroed", gpt_forward_zeroed, {"gpt:", "not initialised"}},
    {"gpt_forward float ids",
     gpt_forward_float_ids,
     {"gpt:", "int64", "float64 (16,32)"}},
    {"gpt_forward 1-d ids", gpt_forward_1d, {"gpt:", "(3,)"}},
    {"gpt_forward T 9 > 8",
     gpt_forward_long,
     {"gpt:", "(2,9)", "block_size 8"}},
    {"gpt_forward id 16",
     gpt_forward_id_16,
     {"embedding:", "id 16", "[0, 16)"}},
    {"gpt_loss NULL", gpt_loss_null, {"gpt_loss:", "NULL"}},
    {"gpt_loss targets shape",
     gpt_loss_targets_shape,
     {"gpt_loss:", "(4,7)", "(4,8)"}},
    {"gpt_loss float targets",
     gpt_loss_float_targets,
     {"gpt_loss:", "int64", "float64"}},
    {"gpt_loss target 16",
     gpt_loss_target_16,
     {"cross_entropy:", "target 16", "[0, 16)"}},
    {"gpt_generate NULL", gpt_generate_null, {"gpt_generate:", "NULL"}},
    {"gpt_generate zeroed",
     gpt_generate_zeroed,
     {"gpt_generate:", "not initialised"}},
    {"gpt_generate n_new -1", gpt_generate_neg, {"gpt_generate:", "-1"}},
    {"gpt_generate temperature 0",
     gpt_generate_temp0,
     {"gpt_generate:", "temperature"}},
    {"gpt_generate NULL rng", gpt_generate_null_rng, {"gpt_generate:", "NULL"}},
    {"gpt_generate batch of 4",
     gpt_generate_batch,
     {"gpt_generate:", "(1,T)", "(4,8)"}},
    {"gpt_generate id 16",
     gpt_generate_id_16,
     {"embedding:", "id 16", "[0, 16)"}},
    {"gpt_params NULL", gpt_params_null, {"gpt_params:", "NULL"}},
    {"gpt_params zeroed",
     gpt_params_zeroed,
     {"gpt_params:", "not initialised"}},

    {"optim_new lr -0.1", optim_lr_neg, {"optim_new:", "lr -0.1"}},
    {"optim_new lr NaN", optim_lr_nan, {"optim_new:", "lr nan"}},
    {"optim_new weight_decay -0.5",
     optim_wd_neg,
     {"optim_new:", "weight_decay -0.5"}},
    {"optim_new momentum -0.9",
     optim_momentum_neg,
     {"optim_new:", "momentum -0.9"}},
    {"optim_new beta1 1", optim_beta1_one, {"optim_new:", "beta1 1"}},
    {"optim_new beta2 -0.5", optim_beta2_neg, {"optim_new:", "beta2 -0.5"}},
    {"optim_new eps -1e-8", optim_eps_neg, {"optim_new:", "eps -1e-08"}},
    {"optim_new kind 7", optim_kind, {"optim_new:", "kind 7"}},
    {"optim_new NULL list", optim_null_list, {"optim_new:", "NULL"}},
    {"optim_new NULL parameter",
     optim_null_param,
     {"optim_new:", "'second'", "NULL"}},
    {"optim_new bool parameter",
     optim_bool_param,
     {"optim_new:", "'second'", "bool (4,8,32)"}},
    {"optim_new same tensor twice",
     optim_same_twice,
     {"optim_new:", "'x'", "'second'"}},
    {"optim_step NULL", optim_step_null, {"optim_step:", "NULL"}},

    {"save_npz NULL list", save_npz_null_list, {"save_npz:", "NULL"}},
    {"save_npz NULL path", save_npz_null_path, {"save_npz:", "NULL"}},
    {"save_npz missing dir",
     save_npz_missing_dir,
     {"save_npz:", "/nonexistent/tapegrad/a.npz"}},
    {"save_npz directory", save_npz_directory, {"save_npz:", "/"}},
    {"save_npz NULL parameter",
     save_npz_null_param,
     {"save_npz:", "'v'", "NULL"}},
    {"load_npz NULL list", load_npz_null_list, {"load_npz:", "NULL"}},
    {"load_npz NULL path", load_npz_null_path, {"load_npz:", "NULL"}},
    {"load_npz missing file",
     load_npz_missing,
     {"load_npz:", "/nonexistent/tapegrad/a.npz"}},
    {"load_npz NULL parameter",
     load_npz_null_param,
     {"load_npz:", "'v'", "NULL"}},
    {"load_npz empty file", load_npz_empty_file, {"load_npz:", "/dev/null"}},
    {"load_npz directory", load_npz_directory, {"load_npz:", "/"}},
    {"load_npz shape", load_npz_shape, {"load_npz:", "'v'", "(16,32)"}},
    {"load_npz int64 into float64",
     load_npz_dtype,
     {"load_npz:", "'v'", "int64"}},
    {"load_npz missing entry", load_npz_missing_entry, {"load_npz:", "'v'"}},

    {"plot_heatmap NULL stem",
     heatmap_null_stem,
     {"plot_heatmap:", "stem is NULL"}},
    {"plot_heatmap empty stem",
     heatmap_empty_stem,
     {"plot_heatmap:", "stem is empty"}},
    {"plot_heatmap stem /tmp/", heatmap_dir_stem, {"plot_heatmap:", "'/tmp/'"}},
    {"plot_heatmap missing dir",
     heatmap_missing_dir,
     {"plot_heatmap:", "/nonexistent/tapegrad/h"}},
    {"plot_heatmap 3-d", heatmap_3d, {"plot_heatmap:", "(4,8,32)"}},
    {"plot_heatmap empty", heatmap_empty, {"plot_heatmap:", "(0,3)"}},
    {"plot_lines NULL series", lines_null_series, {"plot_lines:", "NULL"}},
    {"plot_lines 0 series", lines_zero_series, {"plot_lines:", "n_series 0"}},
    {"plot_lines y NULL", lines_null_y, {"plot_lines:", "series 0", "NULL"}},
    {"plot_lines n 0", lines_empty, {"plot_lines:", "series 0", "0"}},
    {"plot_lines n -3", lines_negative_n, {"plot_lines:", "series 0", "-3"}},
    {"plot_lines NULL stem", lines_null_stem, {"plot_lines:", "stem is NULL"}},
    {"plot_lines missing dir",
     lines_missing_dir,
     {"plot_lines:", "/nonexistent/tapegrad/l"}},
    {"plot_bars 0 bars", bars_zero, {"plot_bars:", "n 0"}},
    {"plot_bars NULL labels", bars_null_labels, {"plot_bars:", "NULL"}},
    {"plot_bars NULL values", bars_null_values, {"plot_bars:", "NULL"}},
    {"plot_bars NULL label",
     bars_null_label,
     {"plot_bars:", "label 1", "NULL"}},
    {"plot_bars NULL stem", bars_null_stem, {"plot_bars:", "stem is NULL"}},
    {"plot_bars missing dir",
     bars_missing_dir,
     {"plot_bars:", "/nonexistent/tapegrad/b"}},
};

/* Errors raised inside a module carry the function called first
 * ("block_init: mha_init: ..."); gradcheck checks its options. */
static const struct {
    const char *name;
    bool (*call)(env *e);
    const char *needles[3];
} nested_rows[] = {
    /* gradcheck takes any eps: 0, NaN and inf give 1 ("fails"), not -1 */
    {"gradcheck eps 0", gradcheck_eps_zero, {"gradcheck:", "eps"}},
    {"gradcheck eps NaN", gradcheck_eps_nan, {"gradcheck:", "eps"}},
    /* a module's _params with a NULL list: the error names params_add */
    {"head_params NULL list", head_params_null_list, {"head_params", "NULL"}},
    {"linear_params NULL list",
     linear_params_null_list,
     {"linear_params", "NULL"}},
    {"embed_params NULL list",
     embed_params_null_list,
     {"embed_params", "NULL"}},
    {"layernorm_params NULL list",
     layernorm_params_null_list,
     {"layernorm_params", "NULL"}},
    {"mha_params NULL list", mha_params_null_list, {"mha_params", "NULL"}},
    {"mlp_params NULL list", mlp_params_null_list, {"mlp_params", "NULL"}},
    {"block_params NULL list",
     block_params_null_list,
     {"block_params", "NULL"}},
    {"gpt_params NULL list", gpt_params_null_list, {"gpt_params", "NULL"}},
    /* a composite module's init: the error names the inner module's init */
    {"mha_init NULL rng", mha_init_null_rng, {"mha_init", "rng"}},
    {"mha_init bool", mha_init_bool, {"mha_init", "bool"}},
    {"mlp_init NULL rng", mlp_init_null_rng, {"mlp_init", "rng"}},
    {"mlp_init bool", mlp_init_bool, {"mlp_init", "bool"}},
    {"block_init NULL rng", block_init_null_rng, {"block_init", "rng"}},
    {"block_init bool", block_init_bool, {"block_init", "bool"}},
    {"block_init n_embd 0", block_init_zero, {"block_init", "0"}},
    {"block_init 3 heads of 32",
     block_init_indivisible,
     {"block_init", "3", "32"}},
    {"gpt_init NULL rng", gpt_init_null_rng, {"gpt_init", "rng"}},
    {"gpt_init 5 heads of 32", gpt_init_indivisible, {"gpt_init", "5", "32"}},
    /* mlp_forward's x is checked by its first linear: the error names linear */
    {"mlp_forward in 3", mlp_forward_in, {"mlp", "(3,)"}},
    {"mlp_forward float32 x", mlp_forward_dtype, {"mlp", "float32"}},
};

/* One row: the call fails, the error names the function (and the needles),
 * is one line, and the inputs and the tape are as they were. */
static void check_row(const char *name, bool (*call)(env *e),
                      const char *const needles[3])
{
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    tg_clear_error();
    if (!call(&e))
        note("%s: the call did not fail", name);
    const char *err = tg_last_error();
    for (int k = 0; k < 3 && needles[k]; k++)
        if (!strstr(err, needles[k]))
            note("%s: error '%s' lacks '%s'", name, err, needles[k]);
    if (strchr(err, '\n'))
        note("%s: '%s' is not one line", name, err);
    if (tg_tape_size() != tape)
        note("%s: the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}

START_TEST(bad_input)
{
    check_row(rows[_i].name, rows[_i].call, rows[_i].needles);
}
END_TEST

START_TEST(nested)
{
    check_row(nested_rows[_i].name, nested_rows[_i].call,
              nested_rows[_i].needles);
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

/* ---- NULL tensors ------------------------------------------------------ */

#define NUL ((tg_tensor *)NULL)

CALL(n_retain, tg_retain(NUL))
CALL(n_keep, tg_keep(NUL))
CALL(n_zeros_like, tg_zeros_like(NUL))
CALL(n_ones_like, tg_ones_like(NUL))
CALL(n_full_like, tg_full_like(NUL, 1))
CALL_RC(n_ndim, tg_ndim(NUL))
CALL_RC(n_size, tg_size(NUL, 0))
static bool n_shape(env *e)
{
    (void)e;
    return tg_shape(NUL) == NULL;
}
static bool n_stride(env *e)
{
    (void)e;
    return tg_stride(NUL, 0) == 0;
}
CALL_RC(n_numel, tg_numel(NUL))
static bool n_contiguous(env *e)
{
    (void)e;
    return !tg_is_contiguous(NUL);
}
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
static bool n_requires_grad(env *e)
{
    (void)e;
    return !tg_requires_grad(NUL);
}
static bool n_is_leaf(env *e)
{
    (void)e;
    return !tg_is_leaf(NUL);
}
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
static bool n_grad(env *e)
{
    (void)e;
    return tg_grad(NUL) == NULL;
}
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
CALL(n_attention_q, tg_attention(NUL, e->x, e->x, true, 1))
CALL(n_attention_k, tg_attention(e->x, NUL, e->x, true, 1))
CALL(n_attention_v, tg_attention(e->x, e->x, NUL, true, 1))
CALL(n_cat, tg_cat((tg_tensor *[]){e->x, NUL}, 2, 0))
static bool n_chunk(env *e)
{
    (void)e;
    tg_tensor *out[2] = {e->x, e->x};
    bool f = tg_chunk(NUL, 2, 0, out) < 0;
    return f && !out[0] && !out[1];
}
CALL(n_embedding_weight, tg_embedding(NUL, e->ids))
CALL(n_embedding_ids, tg_embedding(e->m, NUL))
CALL(n_gather_t, tg_gather(NUL, 0, e->ids))
CALL(n_gather_index, tg_gather(e->x, 0, NUL))
CALL(n_layer_norm, tg_layer_norm(NUL, NULL, NULL, 1e-5))
CALL(n_gelu, tg_gelu(NUL))
CALL(n_cross_entropy_logits, tg_cross_entropy(NUL, e->ids))
CALL(n_cross_entropy_targets, tg_cross_entropy(e->x, NUL))
CALL(n_mse_a, tg_mse_loss(NUL, e->x))
CALL(n_mse_b, tg_mse_loss(e->x, NUL))
CALL(n_check_result, tg_check_result(NUL, "tg_exp"))
CALL_RC(n_params_add, tg_params_add(&(tg_params){0}, NULL, "w", NUL))
MODULE_ROW(n_head_forward, tg_head, HEAD_INIT, tg_head_free,
           failed(tg_head_forward(&mod, NUL)))
MODULE_ROW(n_linear_forward, tg_linear, LINEAR_INIT, tg_linear_free,
           failed(tg_linear_forward(&mod, NUL)))
MODULE_ROW(n_embed_forward, tg_embed, EMBED_INIT, tg_embed_free,
           failed(tg_embed_forward(&mod, NUL)))
MODULE_ROW(n_layernorm_forward, tg_layernorm, LAYERNORM_INIT, tg_layernorm_free,
           failed(tg_layernorm_forward(&mod, NUL)))
MODULE_ROW(n_mha_forward, tg_mha, MHA_INIT, tg_mha_free,
           failed(tg_mha_forward(&mod, NUL)))
MODULE_ROW(n_mlp_forward, tg_mlp, MLP_INIT, tg_mlp_free,
           failed(tg_mlp_forward(&mod, NUL)))
MODULE_ROW(n_block_forward, tg_block, BLOCK_INIT, tg_block_free,
           failed(tg_block_forward(&mod, NUL)))
MODULE_ROW(n_gpt_forward, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_forward(&mod, NUL)))
MODULE_ROW(n_gpt_loss_ids, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_loss(&mod, NUL, e->ids)))
MODULE_ROW(n_gpt_loss_targets, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_loss(&mod, e->ids, NUL)))
MODULE_ROW(n_gpt_generate, tg_gpt, GPT_INIT, tg_gpt_free,
           failed(tg_gpt_generate(&mod, NUL, 2, 1, &rng)))
CALL_RC(n_plot_heatmap,
        tg_plot_heatmap(tmp_path("h"), NUL, "t", "x", "y", false))

static const struct {
    const char *name;
    bool (*call)(env *e);
} null_rows[] = {
    {"retain", n_retain},
    {"keep", n_keep},
    {"zeros_like", n_zeros_like},
    {"ones_like", n_ones_like},
    {"full_like", n_full_like},
    {"ndim", n_ndim},
    {"size", n_size},
    {"shape", n_shape},
    {"stride", n_stride},
    {"numel", n_numel},
    {"is_contiguous", n_contiguous},
    {"copy_out", n_copy_out},
    {"get", n_get},
    {"item", n_item},
    {"set", n_set},
    {"transpose", n_transpose},
    {"slice", n_slice},
    {"narrow", n_narrow},
    {"select", n_select},
    {"expand", n_expand},
    {"reshape", n_reshape},
    {"unsqueeze", n_unsqueeze},
    {"squeeze", n_squeeze},
    {"contiguous", n_contiguous_op},
    {"to", n_to},
    {"add (left)", n_add_l},
    {"add (right)", n_add_r},
    {"sub", n_sub},
    {"mul", n_mul},
    {"div", n_div},
    {"neg", n_neg},
    {"scale", n_scale},
    {"add_scalar", n_add_scalar},
    {"exp", n_exp},
    {"log", n_log},
    {"sqrt", n_sqrt},
    {"pow_scalar", n_pow},
    {"relu", n_relu},
    {"eq", n_eq},
    {"ne", n_ne},
    {"lt", n_lt},
    {"le", n_le},
    {"gt", n_gt},
    {"ge", n_ge},
    {"eq_scalar", n_eq_scalar},
    {"ne_scalar", n_ne_scalar},
    {"lt_scalar", n_lt_scalar},
    {"le_scalar", n_le_scalar},
    {"gt_scalar", n_gt_scalar},
    {"ge_scalar", n_ge_scalar},
    {"where (cond)", n_where_cond},
    {"where (a)", n_where_a},
    {"where (b)", n_where_b},
    {"masked_fill (t)", n_masked_fill_t},
    {"masked_fill (mask)", n_masked_fill_mask},
    {"tril", n_tril},
    {"triu", n_triu},
    {"matmul (a)", n_matmul_l},
    {"matmul (b)", n_matmul_r},
    {"sum", n_sum},
    {"sum_all", n_sum_all},
    {"mean", n_mean},
    {"mean_all", n_mean_all},
    {"max", n_max},
    {"softmax", n_softmax},
    {"log_softmax", n_log_softmax},
    {"set_requires_grad", n_set_requires_grad},
    {"requires_grad", n_requires_grad},
    {"is_leaf", n_is_leaf},
    {"retain_grad", n_retain_grad},
    {"backward", n_backward},
    {"backward_with (out)", n_backward_with_out},
    {"backward_with (dout)", n_backward_with_dout},
    {"grad", n_grad},
    {"zero_grad", n_zero_grad},
    {"detach", n_detach},
    {"gradcheck", n_gradcheck},
    {"fprint", n_fprint},
    {"format", n_format},
    {"allclose", n_allclose},
    {"save_npy", n_save_npy},
    {"attention (q)", n_attention_q},
    {"attention (k)", n_attention_k},
    {"attention (v)", n_attention_v},
    {"cat", n_cat},
    {"chunk", n_chunk},
    {"embedding (weight)", n_embedding_weight},
    {"embedding (ids)", n_embedding_ids},
    {"gather (t)", n_gather_t},
    {"gather (index)", n_gather_index},
    {"layer_norm", n_layer_norm},
    {"gelu", n_gelu},
    {"cross_entropy (logits)", n_cross_entropy_logits},
    {"cross_entropy (targets)", n_cross_entropy_targets},
    {"mse_loss (a)", n_mse_a},
    {"mse_loss (b)", n_mse_b},
    {"check_result", n_check_result},
    {"params_add", n_params_add},
    {"head_forward", n_head_forward},
    {"linear_forward", n_linear_forward},
    {"embed_forward", n_embed_forward},
    {"layernorm_forward", n_layernorm_forward},
    {"mha_forward", n_mha_forward},
    {"mlp_forward", n_mlp_forward},
    {"block_forward", n_block_forward},
    {"gpt_forward", n_gpt_forward},
    {"gpt_loss (ids)", n_gpt_loss_ids},
    {"gpt_loss (targets)", n_gpt_loss_targets},
    {"gpt_generate", n_gpt_generate},
    {"plot_heatmap", n_plot_heatmap},
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
        note("%s(NULL) replaced the first error with '%s'", name,
             tg_last_error());
    if (tg_tape_size() != tape)
        note("%s(NULL): the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}
END_TEST

/* ---- functions with no failure channel ------------------------------------ */

/* Functions that return nothing (or a value with no error meaning) take NULL
 * and zeroed arguments quietly: no crash, no change to the inputs, the tape
 * or the error already there. */
START_TEST(quiet_on_null)
{
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    ck_assert_ptr_null(tg_matmul(e.x, e.m)); /* a known first cause */

    tg_release(NULL);
    if (strcmp(tg_dtype_name((tg_dtype)7), "unknown"))
        note("dtype_name(7) is '%s'", tg_dtype_name((tg_dtype)7));
    if (tg_dtype_size((tg_dtype)7) != 0)
        note("dtype_size(7) is %zu", tg_dtype_size((tg_dtype)7));
    if (tg_dtype_of(NULL) != TG_FLOAT32)
        note("dtype_of(NULL) is %s", tg_dtype_name(tg_dtype_of(NULL)));
    tg_params_init(NULL);
    tg_params_free(NULL);
    tg_params_zero_grad(NULL);
    if (tg_params_get(NULL, "x") || tg_params_get(&(tg_params){0}, NULL))
        note("params_get found something in nothing");
    if (tg_params_numel(NULL) != 0)
        note("params_numel(NULL) is %lld", (long long)tg_params_numel(NULL));
    if (tg_clip_grad_norm(NULL, 1) != 0)
        note("clip_grad_norm(NULL) is %g", tg_clip_grad_norm(NULL, 1));
    tg_optim_free(NULL);
    tg_optim_zero_grad(NULL);
    tg_print_live_tensors(NULL);
    tg_tape_print(NULL);
    tg_tape_dot(NULL);
    tg_set_callsite(NULL, 0);

    tg_head head = {0};
    tg_linear linear = {0};
    tg_embed embed = {0};
    tg_layernorm layernorm = {0};
    tg_mha mha = {0};
    tg_mlp mlp = {0};
    tg_block block = {0};
    tg_gpt gpt = {0};
    tg_head_free(NULL), tg_head_free(&head);
    tg_linear_free(NULL), tg_linear_free(&linear);
    tg_embed_free(NULL), tg_embed_free(&embed);
    tg_layernorm_free(NULL), tg_layernorm_free(&layernorm);
    tg_mha_free(NULL), tg_mha_free(&mha);
    tg_mlp_free(NULL), tg_mlp_free(&mlp);
    tg_block_free(NULL), tg_block_free(&block);
    tg_gpt_free(NULL), tg_gpt_free(&gpt);

    if (strcmp(tg_last_error(), MATMUL_MSG))
        note("the first error became '%s'", tg_last_error());
    if (tg_tape_size() != tape)
        note("the tape went from %lld to %lld entries", (long long)tape,
             (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, "quiet_on_null");
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}
END_TEST

/* ---- the one abort: a release with no reference left ---------------------- */

/* Releasing a tensor that has no references left is the caller's bug, and
 * the library asserts: "tapegrad: <file>:<line>: assertion failed: ...",
 * then abort(). Only in Check's fork mode (the process dies). */
START_TEST(release_twice_aborts)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_release(t);
    tg_release(t);
}
END_TEST

/* The same in a child of our own, to read the message from its stderr. */
START_TEST(release_twice_names_line)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
        tg_release(t);
        tg_release(t);
        _exit(0); /* only when it did not abort */
    }
    close(fds[1]);
    char msg[512];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof msg - 1 &&
           (got = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0)
        len += (size_t)got;
    msg[len] = '\0';
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
                  "a second release did not abort (status %d, stderr '%s')",
                  status, msg);
    const char *at = strstr(msg, ".c:");
    ck_assert_msg(strncmp(msg, "tapegrad: ", 10) == 0 && at &&
                      isdigit((unsigned char)at[3]) &&
                      strstr(msg, "assertion failed"),
                  "the abort message '%s' lacks file:line", msg);
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
    tcase_add_test(tc, quiet_on_null);
    suite_add_tcase(s, tc);

    /* The aborts need fork mode (a child to die). */
    const char *fork_mode = getenv("CK_FORK");
    bool forking = !fork_mode || strcmp(fork_mode, "no") != 0;
    tc = tcase_create("nested");
    tcase_add_loop_test(tc, nested, 0, COUNT(nested_rows));
    if (forking) {
#ifndef __SANITIZE_ADDRESS__ /* ASan reports the read of freed memory first */
        tcase_add_test_raise_signal(tc, release_twice_aborts, SIGABRT);
        tcase_add_test(tc, release_twice_names_line);
#endif
    }
    suite_add_tcase(s, tc);
    return s;
}
