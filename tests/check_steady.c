/* A steady training step takes no memory from the system: the attention
 * head of bench/bench_head (forward, MSE, backward, AdamW, zero grads, in a
 * scope), after two warm-up steps, allocates nothing: tensor headers, tape
 * entries, storage, the scope's stack and backward's walk arrays all come
 * back from the pools (core/storage.c) and the thread's kept arrays. Counted
 * by core/alloc.c, whose second count leaves out the pools' reuses
 * (tg__alloc_system_counted). With the pools off (valgrind, ASan,
 * TG_NO_POOL=1) every step allocates, by design: the test is skipped. */
#include "tests.h"

#include "core/internal.h" /* tg__pool_on; core/error.h: the counter */

#include <math.h>
#include <string.h>

enum { B = 2, T = 8, C = 16, HS = 8 };

typedef struct model {
    tg_head head;
    tg_params params;
    tg_optim *adamw;
    tg_tensor *x, *target;
} model;

static void model_init(model *m, tg_dtype dt, tg_head_path path)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_params_init(&m->params);
    ck_assert_int_eq(tg_head_init(&m->head, dt, C, HS, &rng), 0);
    m->head.path = path;
    ck_assert_int_eq(tg_head_params(&m->head, &m->params, "head"), 0);
    m->adamw = tg_optim_new(&m->params, tg_adamw_config(1e-2, 0.01));
    m->x = tg_randn(&rng, dt, TG_SHAPE(B, T, C));
    m->target = tg_randn(&rng, dt, TG_SHAPE(B, T, HS));
    ck_assert(m->adamw && m->x && m->target);
}

static void model_free(model *m)
{
    tg_release(m->x);
    tg_release(m->target);
    tg_optim_free(m->adamw);
    tg_params_free(&m->params);
    tg_head_free(&m->head);
}

/* One step, as bench_head's; the loss before the update. */
static double step(model *m)
{
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(&m->head, m->x);
    tg_tensor *loss = tg_mse_loss(out, m->target);
    double l = loss ? tg_item(loss) : NAN;
    int rc = loss && tg_backward(loss) == 0 ? tg_optim_step(m->adamw) : -1;
    tg_optim_zero_grad(m->adamw);
    tg_scope_end();
    ck_assert_msg(rc == 0, "step failed: %s", tg_last_error());
    return l;
}

static void steady_step_allocates_nothing(tg_dtype dt, tg_head_path path)
{
    if (!tg__pool_on())
        return; /* every step allocates, so the checkers see each block */
    model m;
    model_init(&m, dt, path);
    double first = step(&m);
    step(&m);
    tg__alloc_fail_at(0, false); /* count, fail none */
    double l3 = step(&m);
    int64_t third = tg__alloc_system_counted();
    int64_t points = tg__alloc_counted();
    double l4 = step(&m);
    int64_t fourth = tg__alloc_system_counted() - third;
    tg__alloc_fail_at(-1, false);
    ck_assert_msg(third == 0 && fourth == 0,
                  "%s, path %d: steps 3 and 4 took %lld and %lld allocations "
                  "from the system",
                  tg_dtype_name(dt), (int)path, (long long)third,
                  (long long)fourth);
    /* The count is on: the pools' reuses are its allocation points. */
    ck_assert_int_gt(points, 10);
    /* The steps trained: AdamW lowers the loss of this fixed batch. */
    ck_assert(isfinite(first) && isfinite(l4));
    ck_assert_double_lt(l3, first);
    ck_assert_double_lt(l4, l3);
    model_free(&m);
}

START_TEST(steady_step_f32)
{
    steady_step_allocates_nothing(TG_FLOAT32, TG_HEAD_COMPOSED);
}
END_TEST

START_TEST(steady_step_f64)
{
    steady_step_allocates_nothing(TG_FLOAT64, TG_HEAD_COMPOSED);
}
END_TEST

/* The fused softmax and the tiled attention op (its tiles come from the
 * pool too). */
START_TEST(steady_step_fused_paths)
{
    steady_step_allocates_nothing(TG_FLOAT32, TG_HEAD_FUSED_SOFTMAX);
    steady_step_allocates_nothing(TG_FLOAT32, TG_HEAD_TILED);
    steady_step_allocates_nothing(TG_FLOAT64, TG_HEAD_TILED);
}
END_TEST

/* The pool's reuse is an allocation point like any other: made to fail, a
 * step ends in a clean out-of-memory error, and the next step works. */
START_TEST(steady_reuse_can_fail)
{
    model m;
    model_init(&m, TG_FLOAT64, TG_HEAD_COMPOSED);
    step(&m);
    step(&m);
    tg__alloc_fail_at(1, false);
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(&m.head, m.x);
    tg__alloc_fail_at(-1, false);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(tg_last_error(), "out of memory"), "%s",
                  tg_last_error());
    tg_scope_end();
    ck_assert(isfinite(step(&m)));
    model_free(&m);
}
END_TEST

/* The small GPT in GPT-2's layout (tanh GELU, every bias, tied head), as
 * bench_gpt --model small at a toy size: steps 3 and 4 take no block from
 * the system into the pool, so its high-water mark (core/storage.c) never
 * gives back a block a steady step needs. (A step still callocs a few small
 * arrays outside the pool: tg__sum_to_shape's accumulators, the heads'
 * list in nn/mha.c; malloc reuses those without new pages.) */
START_TEST(steady_gpt_step)
{
    if (!tg__pool_on())
        return;
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_gpt g;
    tg_params params;
    tg_params_init(&params);
    tg_gpt_config cfg = {.vocab_size = 40,
                         .block_size = 8,
                         .n_embd = 16,
                         .n_head = 2,
                         .n_layer = 2,
                         .gelu = true,
                         .dtype = TG_FLOAT32,
                         .bias = TG_GPT_BIAS_ALL,
                         .tie_weights = true,
                         .gelu_tanh = true};
    ck_assert_int_eq(tg_gpt_init(&g, cfg, &rng), 0);
    ck_assert_int_eq(tg_gpt_params(&g, &params, NULL), 0);
    tg_optim *adamw = tg_optim_new(&params, tg_adamw_config(1e-2, 0.01));
    int64_t ids[2 * 8 + 1];
    for (int i = 0; i < 2 * 8 + 1; i++)
        ids[i] = (i * 7 + 3) % 40;
    tg_tensor *x = tg_from_data(TG_INT64, TG_SHAPE(2, 8), ids);
    tg_tensor *y = tg_from_data(TG_INT64, TG_SHAPE(2, 8), ids + 1);
    ck_assert(adamw && x && y);
    int64_t took[4];
    for (int k = 0; k < 4; k++) {
        int64_t before = tg__pool_blocks_made();
        tg_scope_begin();
        tg_tensor *loss = tg_gpt_loss(&g, x, y);
        int rc = loss && tg_backward(loss) == 0 ? tg_optim_step(adamw) : -1;
        tg_optim_zero_grad(adamw);
        tg_scope_end();
        ck_assert_msg(rc == 0, "step failed: %s", tg_last_error());
        took[k] = tg__pool_blocks_made() - before;
    }
    ck_assert_msg(took[0] > 0 && took[2] == 0 && took[3] == 0,
                  "steps 1, 3 and 4 took %lld, %lld and %lld blocks from the "
                  "system",
                  (long long)took[0], (long long)took[2], (long long)took[3]);
    tg_release(x);
    tg_release(y);
    tg_optim_free(adamw);
    tg_params_free(&params);
    tg_gpt_free(&g);
}
END_TEST

/* n float32 tensors of `numel` elements made and freed, one at a time. */
static void churn(int n, int64_t numel)
{
    for (int i = 0; i < n; i++)
        tg_release(tg_zeros(TG_FLOAT32, 1, &numel));
}

/* The high-water mark: a block cached from a class no longer used (idle:
 * no request of it in the last 1024 in the first epoch) goes back to the
 * system when a new class's block would take the pool past the most bytes
 * ever live; a recently used class's block stays. */
START_TEST(pool_returns_idle_blocks)
{
    if (!tg__pool_on())
        return;
    for (int idle = 0; idle < 2; idle++) {
        /* float32 counts: 12 and 20 MiB, then 28 and 36: classes of their
         * own (multiples of 2 MiB), none cached before */
        const int64_t first = (int64_t)(3 + 4 * idle) << 20,
                      next = (int64_t)(5 + 4 * idle) << 20;
        churn(1, first); /* cached */
        if (idle)
            churn(3000, 16); /* 3000 requests of another class */
        const int64_t cached = tg__pool_cached_bytes();
        ck_assert_int_ge(cached, first * 4);
        tg_tensor *t = tg_zeros(TG_FLOAT32, 1, &next); /* a new class */
        ck_assert_ptr_nonnull(t);
        const int64_t now = tg__pool_cached_bytes();
        if (idle)
            ck_assert_msg(now <= cached - first * 4,
                          "idle block kept: %lld bytes cached, were %lld",
                          (long long)now, (long long)cached);
        else /* small idle blocks (headers) may go, not the first one */
            ck_assert_msg(now >= cached - ((int64_t)1 << 20),
                          "a block in use was given back: %lld bytes cached, "
                          "were %lld",
                          (long long)now, (long long)cached);
        tg_release(t);
        tg__pool_epoch();
    }
}
END_TEST

Suite *steady_suite(void)
{
    Suite *s = suite_create("steady");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, steady_step_f32);
    tcase_add_test(tc, steady_step_f64);
    tcase_add_test(tc, steady_step_fused_paths);
    tcase_add_test(tc, steady_reuse_can_fail);
    tcase_add_test(tc, steady_gpt_step);
    tcase_add_test(tc, pool_returns_idle_blocks);
    suite_add_tcase(s, tc);
    return s;
}
