/* Post-accumulate-grad hooks (tg_register_post_accumulate_grad_hook): each
 * hooked leaf's call comes once per walk, as soon as its gradient is final
 * (the reverse of the order of use), holding that final gradient; over two
 * backwards, for a leaf used several times, with tg_backward_retain and
 * tg_backward_with; removal; a failing walk (fault injection) gives every
 * gradient back as it was; non-leaves refused. tg_ddp (tapegrad_dist.h)
 * starts its all-reduces from these calls. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at */

#include <stdlib.h>
#include <string.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* What the hooks saw: which leaf, in call order, and its gradient's values
 * then (none when it had none). The hook allocates nothing, so that the
 * fault-injection test fails only the walk's allocations. */
enum { MAX_CALLS = 16, MAX_VALS = 64 };
typedef struct seen {
    int n;
    tg_tensor *who[MAX_CALLS];
    bool has[MAX_CALLS];
    double val[MAX_CALLS][MAX_VALS];
} seen;

static void record(tg_tensor *t, void *ctx)
{
    seen *s = ctx;
    if (s->n >= MAX_CALLS)
        return;
    tg_tensor *g = tg_grad(t);
    s->who[s->n] = t;
    s->has[s->n] = g && tg_numel(g) <= MAX_VALS &&
                   tg_copy_out(g, TG_FLOAT64, s->val[s->n]) == 0;
    s->n++;
}

/* Whether call i saw the values g holds now. */
static bool saw(const seen *s, int i, const tg_tensor *g)
{
    double now[MAX_VALS];
    return s->has[i] && g && tg_numel(g) <= MAX_VALS &&
           tg_copy_out(g, TG_FLOAT64, now) == 0 &&
           memcmp(now, s->val[i], (size_t)tg_numel(g) * sizeof *now) == 0;
}

static void seen_free(seen *s) { s->n = 0; }

static bool same_bits(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b || tg_numel(a) != tg_numel(b) ||
        tg_dtype_of(a) != tg_dtype_of(b))
        return false;
    int64_t n = tg_numel(a);
    double *x = calloc((size_t)n + 1, sizeof *x),
           *y = calloc((size_t)n + 1, sizeof *y);
    bool same = tg_copy_out(a, TG_FLOAT64, x) == 0 &&
                tg_copy_out(b, TG_FLOAT64, y) == 0 &&
                memcmp(x, y, (size_t)n * sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

static tg_tensor *leaf(uint32_t seed, int64_t n)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *t = tg_randn(&r, TG_FLOAT64, 2, (int64_t[]){n, n});
    tg_set_requires_grad(t, true);
    return t;
}

/* loss = sum(tanh(x @ w1) @ w2 * w3): w1 is used first, w3 last. */
static tg_tensor *chain(tg_tensor *x, tg_tensor *w1, tg_tensor *w2,
                        tg_tensor *w3)
{
    return tg_sum_all(tg_mul(tg_matmul(tg_tanh(tg_matmul(x, w1)), w2), w3));
}

/* Called once per leaf, last used first, with the gradient tg_grad holds
 * after the walk (the same bits); the gradient stays the tensor it was. */
START_TEST(hooks_order_and_final_value)
{
    tg_scope_begin();
    tg_tensor *x = leaf(1, 3), *w1 = leaf(2, 3), *w2 = leaf(3, 3),
              *w3 = leaf(4, 3);
    tg_set_requires_grad(x, false);
    seen s = {0};
    tg_tensor *w[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            tg_register_post_accumulate_grad_hook(w[i], record, &s), 0);
    /* first backward: no gradient before */
    ck_assert_int_eq(tg_backward(chain(x, w1, w2, w3)), 0);
    ck_assert_int_eq(s.n, 3);
    ck_assert_ptr_eq(s.who[0], w3);
    ck_assert_ptr_eq(s.who[1], w2);
    ck_assert_ptr_eq(s.who[2], w1);
    for (int i = 0; i < 3; i++)
        ck_assert(saw(&s, i, tg_grad(s.who[i])));
    seen_free(&s);
    /* second backward accumulates: the hook sees old + new, and tg_grad is
     * the same tensor as before it, with those values */
    tg_tensor *g_before[3];
    for (int i = 0; i < 3; i++)
        g_before[i] = tg_grad(w[i]);
    ck_assert_int_eq(tg_backward(chain(x, w1, w2, w3)), 0);
    ck_assert_int_eq(s.n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_eq(tg_grad(w[i]), g_before[i]);
        ck_assert(saw(&s, 2 - i, tg_grad(w[i])));
    }
    /* and equal to a run without hooks: two backwards, summed by the engine */
    seen_free(&s);
    tg_tensor *v1 = leaf(2, 3), *v2 = leaf(3, 3), *v3 = leaf(4, 3);
    ck_assert_int_eq(tg_backward(chain(x, v1, v2, v3)), 0);
    ck_assert_int_eq(tg_backward(chain(x, v1, v2, v3)), 0);
    ck_assert(same_bits(tg_grad(v1), tg_grad(w1)));
    ck_assert(same_bits(tg_grad(v2), tg_grad(w2)));
    ck_assert(same_bits(tg_grad(v3), tg_grad(w3)));
    ck_assert_int_eq(s.n, 0);
    tg_scope_end();
}
END_TEST

/* A leaf used by several entries: one call, after the last contribution
 * (the one nearest the inputs), with the sum of all of them. */
START_TEST(hooks_leaf_used_several_times)
{
    tg_scope_begin();
    tg_tensor *x = leaf(5, 3), *w = leaf(6, 3), *u = leaf(7, 3);
    tg_set_requires_grad(x, false);
    seen s = {0};
    tg_register_post_accumulate_grad_hook(w, record, &s);
    tg_register_post_accumulate_grad_hook(u, record, &s);
    /* w at the start and at the end, u in the middle */
    tg_tensor *h = tg_tanh(tg_matmul(x, w));
    tg_tensor *loss = tg_sum_all(tg_mul(tg_matmul(tg_mul(h, u), w), w));
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_ptr_eq(s.who[0], u);
    ck_assert_ptr_eq(s.who[1], w);
    ck_assert(saw(&s, 0, tg_grad(u)));
    ck_assert(saw(&s, 1, tg_grad(w)));
    seen_free(&s);
    /* x * x: the same leaf twice in one entry */
    tg_set_requires_grad(x, true);
    tg_register_post_accumulate_grad_hook(x, record, &s);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(x, x))), 0);
    ck_assert_int_eq(s.n, 1);
    ck_assert(saw(&s, 0, tg_grad(x)));
    seen_free(&s);
    tg_scope_end();
}
END_TEST

/* tg_backward_retain and tg_backward_with call them too; a leaf not in the
 * walk is not called; a leaf out (a walk of its own) is. */
START_TEST(hooks_retain_with_and_leaves)
{
    tg_scope_begin();
    tg_tensor *a = leaf(8, 2), *b = leaf(9, 2), *other = leaf(10, 2);
    seen s = {0};
    tg_register_post_accumulate_grad_hook(a, record, &s);
    tg_register_post_accumulate_grad_hook(b, record, &s);
    tg_register_post_accumulate_grad_hook(other, record, &s);
    tg_tensor *y = tg_mul(tg_tanh(a), b);
    ck_assert_int_eq(tg_backward_retain(y, tg_ones_like(y)), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_ptr_eq(s.who[0], b);
    ck_assert_ptr_eq(s.who[1], a);
    ck_assert_int_eq(tg_backward_with(y, tg_ones_like(y)), 0);
    ck_assert_int_eq(s.n, 4);
    ck_assert(saw(&s, 2, tg_grad(b)));
    ck_assert(saw(&s, 3, tg_grad(a)));
    /* out a leaf: its gradient is dout, and its hook runs */
    ck_assert_int_eq(tg_backward_with(other, tg_ones_like(other)), 0);
    ck_assert_int_eq(s.n, 5);
    ck_assert_ptr_eq(s.who[4], other);
    ck_assert(saw(&s, 4, tg_grad(other)));
    seen_free(&s);
    tg_scope_end();
}
END_TEST

/* fn NULL removes the hook; a new one replaces the old. */
START_TEST(hooks_removed_and_replaced)
{
    tg_scope_begin();
    tg_tensor *a = leaf(11, 2);
    seen s = {0}, t = {0};
    tg_register_post_accumulate_grad_hook(a, record, &s);
    tg_register_post_accumulate_grad_hook(a, record, &t); /* replaces */
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_tanh(a))), 0);
    ck_assert_int_eq(s.n, 0);
    ck_assert_int_eq(t.n, 1);
    ck_assert_int_eq(tg_register_post_accumulate_grad_hook(a, NULL, &t), 0);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_tanh(a))), 0);
    ck_assert_int_eq(t.n, 1);
    seen_free(&t);
    tg_scope_end();
}
END_TEST

/* A walk that fails (the k-th allocation in it fails) after some hooks
 * ran: every gradient is back to what it was, the same tensor with the
 * same bits, and a walk that succeeds afterwards is the plain one. */
START_TEST(hooks_failed_walk_restores)
{
    tg_scope_begin();
    tg_tensor *x = leaf(12, 4), *w1 = leaf(13, 4), *w2 = leaf(14, 4),
              *w3 = leaf(15, 4);
    tg_set_requires_grad(x, false);
    tg_tensor *w[3] = {w1, w2, w3};
    seen s = {0};
    /* w1 has a gradient before, w2 and w3 none */
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_tanh(w1))), 0);
    tg_tensor *g1 = tg_grad(w1),
              *g1_copy = tg_zeros(TG_FLOAT64, 2, tg_shape(g1));
    tg_copy_(g1_copy, g1);
    for (int i = 0; i < 3; i++)
        tg_register_post_accumulate_grad_hook(w[i], record, &s);
    int failed_after_a_hook = 0;
    bool done = false;
    for (int64_t k = 1; !done && k < 400; k++) {
        tg_tensor *loss = chain(x, w1, w2, w3);
        ck_assert_ptr_nonnull(loss);
        tg__alloc_fail_at(k, false);
        int rc = tg_backward(loss);
        tg__alloc_fail_at(-1, false);
        tg_release(loss);
        if (rc == 0) {
            done = true;
            ck_assert_int_eq(s.n, 3);
            break;
        }
        ck_assert_msg(strstr(tg_last_error(), "out of memory"), "%s",
                      tg_last_error());
        failed_after_a_hook += s.n > 0;
        ck_assert_int_lt(s.n, 3);
        ck_assert_ptr_eq(tg_grad(w1), g1);
        ck_assert(same_bits(g1, g1_copy));
        ck_assert_ptr_null(tg_grad(w2));
        ck_assert_ptr_null(tg_grad(w3));
        seen_free(&s);
    }
    ck_assert(done);
    ck_assert_int_gt(failed_after_a_hook, 0);
    ck_assert_ptr_eq(tg_grad(w1), g1);
    seen_free(&s);
    tg_scope_end();
}
END_TEST

/* Bad input: NULL, a non-leaf (an op's output). */
START_TEST(hooks_bad_input)
{
    tg_scope_begin();
    tg_tensor *a = leaf(16, 2);
    ck_assert_int_eq(tg_register_post_accumulate_grad_hook(NULL, record, NULL),
                     -1);
    tg_tensor *y = tg_tanh(a);
    ck_assert_int_eq(tg_register_post_accumulate_grad_hook(y, record, NULL),
                     -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "not a leaf"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "'tanh'"));
    tg_scope_end();
}
END_TEST

Suite *hooks_suite(void)
{
    Suite *s = suite_create("hooks");
    TCase *tc = tcase_create("hooks");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, hooks_order_and_final_value);
    tcase_add_test(tc, hooks_leaf_used_several_times);
    tcase_add_test(tc, hooks_retain_with_and_leaves);
    tcase_add_test(tc, hooks_removed_and_replaced);
    tcase_add_test(tc, hooks_failed_walk_restores);
    tcase_add_test(tc, hooks_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
