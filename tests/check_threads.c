/* Results independent of the thread count: the same bits for 1, 2, 3 and
 * 4 threads, for each op on inputs large enough to be split among threads
 * (past TG_PARALLEL_MIN elements), forward and backward, and for whole
 * GPT training steps (forward, backward, AdamW). The library's loops cut
 * their work into pieces whose bounds do not depend on the thread count,
 * and every reduction adds in a fixed order, so the threads change who
 * computes a piece, never what it adds up. */
#include "tests.h"

#include <valgrind/valgrind.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *threads_suite(void);

enum { B = 16, T = 64, C = 192, MAX_THREADS = 4 };

/* FNV-1a of t's values as float64 (bits, not values: -0 and 0 differ). */
static uint64_t bits_of(tg_tensor *t, uint64_t h)
{
    double *v = values_of(t);
    const unsigned char *p = (const unsigned char *)v;
    for (int64_t i = 0; i < 8 * tg_numel(t); i++)
        h = (h ^ p[i]) * 1099511628211u;
    free(v);
    return h;
}

typedef struct inputs {
    tg_tensor *x, *w, *ids; /* (B,T,C), (C,C) leaves; (B,T) in [0, C) */
} inputs;

typedef tg_tensor *(*program)(const inputs *in);

#define PROG(name, expr)                                                       \
    static tg_tensor *name(const inputs *in)                                   \
    {                                                                          \
        tg_tensor *x = in->x, *w = in->w, *ids = in->ids;                      \
        (void)x, (void)w, (void)ids;                                           \
        return expr;                                                           \
    }

PROG(p_add, tg_add(x, tg_select(w, 0, 3)))
PROG(p_mul, tg_mul(x, x))
PROG(p_div, tg_div(x, tg_add_scalar(tg_abs(x), 1)))
PROG(p_exp_log, tg_log(tg_add_scalar(tg_exp(x), 1)))
PROG(p_sqrt_pow, tg_sqrt(tg_add_scalar(tg_pow_scalar(x, 2), 1)))
PROG(p_relu_gelu, tg_add(tg_relu(x), tg_add(tg_gelu(x), tg_gelu_tanh(x))))
PROG(p_sigmoid_tanh, tg_mul(tg_sigmoid(x), tg_tanh(x)))
PROG(p_clamp, tg_clamp(x, -0.5, 0.5))
PROG(p_where, tg_where(tg_gt_scalar(x, 0), x, tg_scale(x, 2)))
PROG(p_masked_fill, tg_masked_fill(x, tg_lt_scalar(x, 0), 0))
PROG(p_tril, tg_tril(x, 0))
PROG(p_matmul, tg_matmul(x, w))
PROG(p_sum, tg_add(tg_sum(x, 1, true), tg_mean(x, 2, true)))
PROG(p_max, tg_max(x, 2, false))
PROG(p_softmax, tg_add(tg_softmax(x, -1), tg_log_softmax(x, 1)))
PROG(p_attention_softmax,
     tg_attention_softmax(tg_matmul(x, tg_transpose(x, 1, 2)), 0.1, true))
PROG(p_attention, tg_attention(x, x, x, true, 0.1))
PROG(p_cat, tg_cat((tg_tensor *[]){x, tg_scale(x, 2)}, 2, 1))
PROG(p_embedding, tg_embedding(w, ids))
PROG(p_gather, tg_gather(x, 2, tg_unsqueeze(ids, 2)))
PROG(p_layer_norm,
     tg_layer_norm(x, tg_select(w, 0, 1), tg_select(w, 0, 2), 1e-5))
PROG(p_cross_entropy, tg_cross_entropy(tg_reshape(x, TG_SHAPE(B *T, C)),
                                       tg_reshape(ids, TG_SHAPE(B *T))))
PROG(p_mse, tg_mse_loss(x, tg_tanh(x)))
PROG(p_transpose, tg_contiguous(tg_transpose(x, 0, 2)))
PROG(p_outer, tg_outer(tg_reshape(tg_select(x, 0, 0), TG_SHAPE(T *C)),
                       tg_select(w, 0, 0)))

static const struct {
    const char *name;
    program run;
} PROGRAMS[] = {
    {"add", p_add},
    {"mul", p_mul},
    {"div", p_div},
    {"exp, log", p_exp_log},
    {"sqrt, pow", p_sqrt_pow},
    {"relu, gelu", p_relu_gelu},
    {"sigmoid, tanh", p_sigmoid_tanh},
    {"clamp", p_clamp},
    {"where", p_where},
    {"masked_fill", p_masked_fill},
    {"tril", p_tril},
    {"matmul", p_matmul},
    {"sum, mean", p_sum},
    {"max", p_max},
    {"softmax", p_softmax},
    {"attention_softmax", p_attention_softmax},
    {"attention", p_attention},
    {"cat", p_cat},
    {"embedding", p_embedding},
    {"gather", p_gather},
    {"layer_norm", p_layer_norm},
    {"cross_entropy", p_cross_entropy},
    {"mse_loss", p_mse},
    {"transpose", p_transpose},
    {"outer", p_outer},
};
#define N_PROGRAMS ((int)(sizeof PROGRAMS / sizeof *PROGRAMS))

/* Program k run forward and backward (through sum(y * u), u fixed) on
 * threads threads: the bits of y and of every gradient. */
static uint64_t run_once(int k, tg_dtype dt, int threads)
{
    int old = set_threads(threads);
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    inputs in = {tg_randn(&rng, dt, TG_SHAPE(B, T, C)),
                 tg_randn(&rng, dt, TG_SHAPE(C, C)),
                 tg_randint(&rng, 0, C, TG_SHAPE(B, T))};
    tg_set_requires_grad(in.x, true);
    tg_set_requires_grad(in.w, true);
    tg_tensor *y = PROGRAMS[k].run(&in);
    ck_assert_msg(y, "%s: %s", PROGRAMS[k].name, tg_last_error());
    tg_tensor *u = tg_randn(&rng, dt, tg_ndim(y), tg_shape(y));
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(y, u))), 0);
    uint64_t h = bits_of(y, 14695981039346656037u);
    tg_tensor *gx = tg_grad(in.x), *gw = tg_grad(in.w);
    ck_assert_msg(gx || gw, "%s: no gradient", PROGRAMS[k].name);
    h = gx ? bits_of(gx, h) : h;
    h = gw ? bits_of(gw, h) : h;
    tg_scope_end();
    set_threads(old);
    return h;
}

/* Under valgrind (some 50 times slower, and its threads run one at a
 * time) or a sanitizer (the plain build runs the whole): a sample, every
 * fifth op, float32, one step, 1 against 3 threads. */
#define SAMPLED (TESTS_SANITIZED || RUNNING_ON_VALGRIND)
static int most_threads(void) { return SAMPLED ? 3 : MAX_THREADS; }
static int op_stride(void) { return SAMPLED ? 5 : 1; }

/* Threads can be set here (OpenMP's count, which the library's pool
 * follows): else every run below would be one thread's. */
static void assert_threads_settable(void)
{
    int old = set_threads(3);
    ck_assert_msg(set_threads(old) == 3,
                  "the thread count cannot be set: nothing would be tested");
}

START_TEST(each_op)
{
    assert_threads_settable();
    for (int dt = 0; dt < (SAMPLED ? 1 : 2); dt++)
        for (int k = 0; k < N_PROGRAMS; k += op_stride()) {
            tg_dtype as = dt ? TG_FLOAT64 : TG_FLOAT32;
            uint64_t one = run_once(k, as, 1);
            for (int t = most_threads(); t >= 2; t -= SAMPLED ? 9 : 1)
                ck_assert_msg(run_once(k, as, t) == one,
                              "%s (%s): %d threads give other bits than 1",
                              PROGRAMS[k].name, tg_dtype_name(as), t);
        }
}
END_TEST

/* Three AdamW steps of a small GPT (the tanh GELU, every bias, tied; a
 * batch of B sequences of T, so its (B T, C) activations are split among
 * threads) on threads threads: the bits of the losses and of every
 * parameter after. */
static uint64_t gpt_steps(int threads, tg_head_path path)
{
    int old = set_threads(threads);
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_gpt g;
    tg_gpt_config c = {.vocab_size = 500,
                       .block_size = T,
                       .n_embd = 128,
                       .n_head = 4,
                       .n_layer = 2,
                       .gelu = true,
                       .gelu_tanh = true,
                       .dtype = TG_FLOAT32,
                       .bias = TG_GPT_BIAS_ALL,
                       .tie_weights = true,
                       .attn_path = path};
    ck_assert_int_eq(tg_gpt_init(&g, c, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    tg_optim *o = tg_optim_new(&ps, tg_adamw_config(1e-3, 0.1));
    tg_tensor *ids = /* (B T, C) activations: past TG_PARALLEL_MIN */
        tg_randint(&rng, 0, c.vocab_size, TG_SHAPE(B, T + 1));
    tg_tensor *x = tg_contiguous(tg_narrow(ids, 1, 0, T));
    tg_tensor *y = tg_contiguous(tg_narrow(ids, 1, 1, T));
    uint64_t h = 14695981039346656037u;
    for (int s = 0; s < (SAMPLED ? 1 : 3); s++) {
        tg_tensor *loss = tg_gpt_loss(&g, x, y);
        ck_assert_msg(loss, "%s", tg_last_error());
        h = bits_of(loss, h);
        ck_assert_int_eq(tg_backward(loss), 0);
        ck_assert_int_eq(tg_optim_step(o), 0);
        tg_params_zero_grad(&ps);
    }
    for (int i = 0; i < ps.n; i++)
        h = bits_of(ps.items[i].t, h);
    tg_optim_free(o);
    tg_params_free(&ps);
    tg_gpt_free(&g);
    tg_scope_end();
    set_threads(old);
    return h;
}

START_TEST(gpt_step)
{
    assert_threads_settable();
    static const tg_head_path paths[] = {TG_HEAD_COMPOSED,
                                         TG_HEAD_FUSED_SOFTMAX, TG_HEAD_TILED};
    for (int p = 0; p < (SAMPLED ? 1 : 3); p++) {
        uint64_t one = gpt_steps(1, paths[p]);
        for (int t = most_threads(); t >= 2; t -= SAMPLED ? 9 : 1)
            ck_assert_msg(gpt_steps(t, paths[p]) == one,
                          "GPT steps (path %d): %d threads give other bits "
                          "than 1",
                          p, t);
    }
}
END_TEST

Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("bits");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, each_op);
    tcase_add_test(tc, gpt_step);
    suite_add_tcase(s, tc);
    return s;
}
