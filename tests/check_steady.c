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

Suite *steady_suite(void)
{
    Suite *s = suite_create("steady");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, steady_step_f32);
    tcase_add_test(tc, steady_step_f64);
    tcase_add_test(tc, steady_step_fused_paths);
    tcase_add_test(tc, steady_reuse_can_fail);
    suite_add_tcase(s, tc);
    return s;
}
