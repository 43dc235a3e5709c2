/* Activation checkpointing (tg_checkpoint, core/recompute.c): a small
 * GPT's gradients the same bits with and without its blocks checkpointed
 * (float64 and float32, dropout on and off, each attention path), the
 * dropout masks drawn again and the rng left as it was, tg_gradcheck
 * through a checkpointed segment, and a tape that holds fewer bytes. The
 * bad input is tests/check_errors_core.c's, running out of memory
 * tests/check_oom.c's. */
#include "core/tape_state.h" /* the tape's entries, for the bytes it holds */
#include "tests.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the bytes a tape holds --------------------------------------------- */

/* The bytes of the distinct storages that this thread's live, unconsumed
 * entries hold for their backward: inputs, saved tensors, an output its
 * backward reads. */
static int64_t tape_held_bytes(void)
{
    const tg_storage *seen[4096];
    int n = 0;
    int64_t bytes = 0;
    for (tg_node *e = tg__tape_lock(); e; e = e->next) {
        if (e->consumed || !e->out)
            continue;
        const tg_tensor *held[64];
        int k = 0;
        for (int i = 0; i < e->n_in && k < 60; i++)
            held[k++] = e->in[i];
        for (int i = 0; i < TG_NODE_MAX_SAVED; i++)
            held[k++] = e->saved[i];
        if (e->holds_out)
            held[k++] = e->out;
        for (int i = 0; i < k; i++) {
            if (!held[i])
                continue;
            const tg_storage *s = held[i]->storage;
            int j = 0;
            while (j < n && seen[j] != s)
                j++;
            if (j < n)
                continue;
            ck_assert_int_lt(n, 4096);
            seen[n++] = s;
            bytes += (int64_t)s->nbytes;
        }
    }
    tg__tape_unlock();
    return bytes;
}

/* ---- a small GPT, with and without checkpointing -------------------------- */

typedef struct gpt_case {
    tg_dtype dtype;
    double dropout;
    tg_head_path path;
} gpt_case;

/* What one training step gives: the loss, every parameter's gradient (as
 * float64: exact for float32), the rng after it, the tape's held bytes
 * and entries before the backward. */
typedef struct step_out {
    double loss;
    double *grads;
    int64_t n_grads;
    tg_rng rng;
    int64_t held_bytes, entries;
} step_out;

enum { B = 4, T = 8, V = 11 };

static tg_gpt_config small_config(const gpt_case *c, bool checkpoint)
{
    return (tg_gpt_config){.vocab_size = V,
                           .block_size = T,
                           .n_embd = 16,
                           .n_head = 2,
                           .n_layer = 2,
                           .gelu = true,
                           .gelu_tanh = true,
                           .dtype = c->dtype,
                           .bias = TG_GPT_BIAS_ALL,
                           .embd_dropout = c->dropout,
                           /* the tiled path forms no weights to drop */
                           .attn_dropout =
                               c->path == TG_HEAD_TILED ? 0 : c->dropout,
                           .resid_dropout = c->dropout,
                           .checkpoint = checkpoint};
}

/* Two training steps' forward and backward (gradients zeroed between) of
 * the model seeded 5, on ids drawn from seed 6, dropout from seed 7. */
static step_out gpt_step(const gpt_case *c, bool checkpoint)
{
    step_out o = {0};
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_init(&g, small_config(c, checkpoint), &rng), 0);
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++)
            g.blocks[i].attn.heads[h].path = c->path;
    tg_rng_seed(&rng, 6);
    tg_tensor *ids = tg_randint(&rng, 0, V, TG_SHAPE(B, T));
    tg_tensor *targets = tg_randint(&rng, 0, V, TG_SHAPE(B, T));
    tg_rng_seed(&rng, 7);
    ck_assert_int_eq(tg_gpt_train(&g, true, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    for (int step = 0; step < 2; step++) {
        tg_params_zero_grad(&ps);
        tg_tensor *loss = tg_gpt_loss(&g, ids, targets);
        ck_assert_msg(loss != NULL, "%s", tg_last_error());
        o.loss = tg_item(loss);
        o.held_bytes = tape_held_bytes();
        o.entries = tg_tape_size();
        ck_assert_msg(tg_backward(loss) == 0, "%s", tg_last_error());
        tg_release(loss);
    }
    o.rng = rng;
    o.n_grads = tg_params_numel(&ps);
    o.grads = malloc(sizeof(double) * (size_t)o.n_grads);
    ck_assert_ptr_nonnull(o.grads);
    int64_t at = 0;
    for (int k = 0; k < ps.n; k++) {
        const tg_tensor *gr = tg_grad(ps.items[k].t);
        ck_assert_msg(gr != NULL, "%s has no gradient", ps.items[k].name);
        ck_assert_int_eq(tg_copy_out(gr, TG_FLOAT64, o.grads + at), 0);
        at += tg_numel(gr);
    }
    tg_params_free(&ps);
    tg_release(ids);
    tg_release(targets);
    tg_gpt_free(&g);
    return o;
}

/* Loop index: dtype (float64, float32) x dropout (0, 0.2) x attention
 * path (composed, fused softmax, tiled). */
START_TEST(gpt_gradients_bit_equal)
{
    const gpt_case c = {.dtype = _i / 6 ? TG_FLOAT32 : TG_FLOAT64,
                        .dropout = _i / 3 % 2 ? 0.2 : 0,
                        .path = (tg_head_path)(_i % 3)};
    step_out plain = gpt_step(&c, false), ckpt = gpt_step(&c, true);
    ck_assert(memcmp(&plain.loss, &ckpt.loss, sizeof plain.loss) == 0);
    ck_assert_int_eq(plain.n_grads, ckpt.n_grads);
    for (int64_t i = 0; i < plain.n_grads; i++)
        ck_assert_msg(memcmp(&plain.grads[i], &ckpt.grads[i], sizeof(double)) ==
                          0,
                      "gradient element %lld: %.17g without, %.17g with",
                      (long long)i, plain.grads[i], ckpt.grads[i]);
    /* the recomputation drew its masks from a rewound rng, and gave the
     * rng back: the second step drew as the plain one did */
    ck_assert(memcmp(&plain.rng, &ckpt.rng, sizeof plain.rng) == 0);
    /* a gradient of zeros everywhere would pass the above too */
    double norm = 0;
    for (int64_t i = 0; i < plain.n_grads; i++)
        norm += plain.grads[i] * plain.grads[i];
    ck_assert(norm > 0 && isfinite(norm));
    /* one entry per block instead of its dozens, and fewer bytes held */
    ck_assert_int_lt(ckpt.entries, plain.entries);
    ck_assert_int_lt(ckpt.held_bytes, plain.held_bytes);
    free(plain.grads);
    free(ckpt.grads);
}
END_TEST

/* ---- the tape's bytes ----------------------------------------------------- */

/* The composed path holds (B,T,T) scores per head and the MLP's (B,T,4C)
 * activations per block; with checkpointing the tape holds the blocks'
 * inputs and parameters only. The parameters of the small GPT: 2 blocks
 * of 12 C^2 + 13 C, embeddings (V + T) C, ln_f, lm_head V C + V. */
START_TEST(checkpoint_holds_fewer_bytes)
{
    const gpt_case c = {.dtype = TG_FLOAT64, .path = TG_HEAD_COMPOSED};
    step_out plain = gpt_step(&c, false), ckpt = gpt_step(&c, true);
    int64_t C = 16, params = 8 * plain.n_grads;
    int64_t act = 8 * B * T * C; /* one (B,T,C) float64 activation */
    /* the checkpointed tape: the parameters, the blocks' inputs and what
     * the layers outside the blocks keep, a few activations */
    ck_assert_int_le(ckpt.held_bytes, params + 8 * act);
    /* the plain one holds every block's activations too: dozens each */
    ck_assert_int_ge(plain.held_bytes - params, 2 * 20 * act);
    free(plain.grads);
    free(ckpt.grads);
}
END_TEST

/* ---- a segment on its own -------------------------------------------------- */

/* seg(h, w) = dropout(tanh(h @ w), 0.3) * h, the rng the context's. */
static tg_tensor *seg(tg_tensor *const *in, void *ctx)
{
    tg_tensor *a = tg_matmul(in[0], in[1]);
    tg_tensor *t = tg_tanh(a);
    tg_tensor *d = tg_dropout(t, 0.3, true, ctx);
    tg_tensor *y = tg_mul(d, in[0]);
    tg_release(a);
    tg_release(t);
    tg_release(d);
    return y;
}

typedef struct seg_ctx {
    tg_rng rng;
    bool checkpoint;
} seg_ctx;

/* f(x, w) = seg(exp(x), w), the segment checkpointed or not, the rng
 * seeded afresh each call (deterministic for gradcheck). exp(x) is an
 * input with an entry of its own: the checkpoint's walk stops at it. */
static tg_tensor *outer(tg_tensor *const *in, void *ctx)
{
    seg_ctx *s = ctx;
    tg_rng_seed(&s->rng, 3);
    tg_tensor *h = tg_exp(in[0]);
    tg_tensor *y =
        s->checkpoint
            ? tg_checkpoint(seg, &s->rng, 2, (tg_tensor *[]){h, in[1]}, &s->rng)
            : seg((tg_tensor *[]){h, in[1]}, &s->rng);
    tg_release(h);
    return y;
}

/* x (3,4), w (4,4) float64 leaves that require grad, from seed 11. */
static void seg_inputs(tg_tensor **x, tg_tensor **w)
{
    tg_rng r;
    tg_rng_seed(&r, 11);
    *x = tg_randn(&r, TG_FLOAT64, TG_SHAPE(3, 4));
    *w = tg_randn(&r, TG_FLOAT64, TG_SHAPE(4, 4));
    tg_set_requires_grad(*x, true);
    tg_set_requires_grad(*w, true);
}

START_TEST(gradcheck_through_checkpoint)
{
    tg_tensor *x, *w;
    seg_inputs(&x, &w);
    seg_ctx s = {.checkpoint = true};
    assert_gradcheck(outer, &s, 2, (tg_tensor *[]){x, w});
    tg_release(x);
    tg_release(w);
}
END_TEST

/* The gradients of sum(f(x, w)) (as tg_backward gives them, and as
 * tg_grads returns them) equal with and without the checkpoint; the rng
 * after the backward is as the forward left it. */
START_TEST(segment_bit_equal)
{
    double got[2][2][16];
    for (int k = 0; k < 2; k++) {
        tg_tensor *x, *w;
        seg_inputs(&x, &w);
        seg_ctx s = {.checkpoint = k == 1};
        tg_tensor *y = outer((tg_tensor *[]){x, w}, &s);
        tg_tensor *l = tg_sum_all(y);
        tg_rng after = s.rng;
        ck_assert_msg(tg_backward(l) == 0, "%s", tg_last_error());
        ck_assert(memcmp(&after, &s.rng, sizeof after) == 0);
        tg_copy_out(tg_grad(x), TG_FLOAT64, got[k][0]);
        tg_copy_out(tg_grad(w), TG_FLOAT64, got[k][1]);
        tg_release(l);
        tg_release(y);
        /* tg_grads' walk (asked for w only) through it gives the same */
        y = outer((tg_tensor *[]){x, w}, &s);
        l = tg_sum_all(y);
        tg_tensor *gw = NULL;
        ck_assert_int_eq(tg_grads(l, NULL, 1, &w, &gw, 0), 0);
        double v[16];
        tg_copy_out(gw, TG_FLOAT64, v);
        ck_assert(memcmp(v, got[k][1], sizeof v) == 0);
        tg_release(gw);
        tg_release(l);
        tg_release(y);
        tg_release(x);
        tg_release(w);
    }
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 16 && i < (j ? 16 : 12); i++)
            ck_assert_msg(
                memcmp(&got[0][j][i], &got[1][j][i], sizeof(double)) == 0,
                "%s element %d: %.17g without, %.17g with", j ? "w" : "x", i,
                got[0][j][i], got[1][j][i]);
}
END_TEST

/* With grad mode off, or no input that requires grad, nothing is
 * recorded: the segment's value only. */
START_TEST(no_entry_without_grad)
{
    tg_tensor *x, *w;
    seg_inputs(&x, &w);
    tg_rng r;
    tg_rng_seed(&r, 3);
    bool was = tg_set_grad_enabled(false);
    tg_tensor *y = tg_checkpoint(seg, &r, 2, (tg_tensor *[]){x, w}, &r);
    tg_set_grad_enabled(was);
    ck_assert_ptr_nonnull(y);
    ck_assert(!tg_requires_grad(y));
    ck_assert_int_eq(tg_tape_size(), 0);
    tg_release(y);
    tg_release(x);
    tg_release(w);
}
END_TEST

Suite *recompute_suite(void)
{
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, gpt_gradients_bit_equal, 0, 12);
    tcase_add_test(tc, checkpoint_holds_fewer_bytes);
    tcase_add_test(tc, gradcheck_through_checkpoint);
    tcase_add_test(tc, segment_bit_equal);
    tcase_add_test(tc, no_entry_without_grad);
    suite_add_tcase(s, tc);
    return s;
}
