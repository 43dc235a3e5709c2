/* Out of memory, everywhere: a program that builds a head and a small GPT,
 * runs them forward and backward (twice, accumulating gradients), steps
 * AdamW and saves and loads a checkpoint, run once for every allocation it
 * makes with that allocation failing (core/alloc.c's fault injection), and
 * again with every allocation from that one on failing. Each run must end
 * in a clean error that says "out of memory" or in success, never in a
 * crash or an abort; a failed backward must leave the gradients as they
 * were, a failed step the parameters; a backward that returned 0 must have
 * left every parameter a gradient, and a run that succeeded must end with
 * the reference run's parameters to the bit (no failure quietly absorbed).
 * The same sweep runs over a tour of every op (forward, backward, .npy
 * I/O, printing), a gradcheck and sampling, and the three plots; then the
 * documented state after a failure is checked directly: the gradients
 * after a failed backward, a scope tg_scope_begin could not open.
 * Leaks show under valgrind and ASan (make valgrind, the sanitizer build)
 * and in the leak audit (TG_DEBUG_LEAKS=1, checked after every run); the
 * tape must be empty after every run. Natively every point runs (about a
 * second in all); under valgrind every 7th. */
#include "tests.h"

#include <math.h>

#include "kernels/gemm.h" /* and core/error.h */

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* The steps of the program, in order; a run ends at the first that fails. */
typedef enum {
    HEAD_INIT,
    GPT_INIT,
    PARAMS,
    OPTIM_NEW,
    INPUTS,
    FORWARD,
    BACKWARD,
    SCOPE_END,
    FORWARD2,
    BACKWARD2,
    SCOPE_END2,
    OPTIM_STEP,
    SAVE,
    LOAD,
    N_STEPS, /* the run succeeded */
} step;

static const char *const step_names[] = {
    "head_init",       "gpt_init",        "params",     "optim_new",
    "inputs",          "forward",         "backward",   "scope_end",
    "forward2",        "backward2",       "scope_end2", "optim_step",
    "save_checkpoint", "load_checkpoint", "success"};

/* How a run ended. */
typedef struct outcome {
    step failed;      /* N_STEPS for success */
    char error[512];  /* tg_last_error() at the end */
    char broken[512]; /* an invariant that did not hold, or "" */
    double *values;   /* on success: the parameters' final values */
    int64_t n_values;
} outcome;

/* Notes the first invariant that did not hold. */
__attribute__((format(printf, 2, 3))) static void broken(outcome *o,
                                                         const char *fmt, ...)
{
    if (o->broken[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->broken, sizeof o->broken, fmt, ap);
    va_end(ap);
}

/* The parameters' gradients (grads) or values, in order, as doubles: a new
 * array of *n (free it), or NULL with *n = -1 when a parameter has no
 * gradient. The test's own memory, outside the library's count. */
static double *snapshot(const tg_params *ps, bool grads, int64_t *n)
{
    *n = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = grads ? tg_grad(ps->items[i].t) : ps->items[i].t;
        if (!t) {
            *n = -1;
            return NULL;
        }
        *n += tg_numel(t);
    }
    double *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    ck_assert_ptr_nonnull(v);
    int64_t k = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = grads ? tg_grad(ps->items[i].t) : ps->items[i].t;
        tg_copy_out(t, TG_FLOAT64, v + k);
        k += tg_numel(t);
    }
    return v;
}

/* Whether a and b hold the same n doubles, to the bit. */
static bool same(const double *a, const double *b, int64_t n)
{
    return memcmp(a, b, sizeof *a * (size_t)n) == 0;
}

/* The model: small, so that a run takes about a quarter of a millisecond. */
enum { B = 2, T = 4, C = 8, HS = 4, V = 7 };

/* loss = mean(head(x)^2) + gpt_loss(ids, targets) inside a scope, and its
 * backward: the steps first, first + 1 (backward) and first + 2 (the scope's
 * end). Returns the step that failed, or N_STEPS. */
static step forward_backward(tg_head *h, tg_gpt *g, tg_tensor *const *in,
                             step first, outcome *o)
{
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(h, in[0]);
    tg_tensor *sq = tg_mul(out, out);
    tg_tensor *head_loss = tg_mean_all(sq);
    tg_tensor *gpt_loss = tg_gpt_loss(g, in[1], in[2]);
    tg_tensor *loss = tg_add(head_loss, gpt_loss);
    step failed = N_STEPS;
    if (out && !h->attn)
        broken(o, "head_forward succeeded without keeping h->attn");
    if (!loss)
        failed = first;
    else if (tg_backward(loss) != 0)
        failed = first + 1;
    if (tg_scope_end() != 0 && failed == N_STEPS)
        failed = first + 2;
    return failed;
}

/* The program; path is the checkpoint's. */
static void program(const char *path, outcome *o)
{
    memset(o, 0, sizeof *o);
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_head h;
    tg_gpt g;
    tg_params ps;
    tg_params_init(&ps);
    tg_optim *opt = NULL;
    tg_tensor *in[3] = {NULL, NULL, NULL};
    double *before = NULL, *after = NULL;
    int64_t n_before, n_after;
    const tg_gpt_config cfg = {.vocab_size = V,
                               .block_size = T,
                               .n_embd = C,
                               .n_head = 2,
                               .n_layer = 1,
                               .gelu = true,
                               .dtype = TG_FLOAT32};
    int64_t ids[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 3) % V, targets[i] = (i * 5 + 1) % V;

    step s = HEAD_INIT;
    if (tg_head_init(&h, TG_FLOAT32, C, HS, &rng) != 0)
        goto done;
    s = GPT_INIT;
    if (tg_gpt_init(&g, cfg, &rng) != 0)
        goto done;
    s = PARAMS;
    if (tg_head_params(&h, &ps, "head") != 0 ||
        tg_gpt_params(&g, &ps, "gpt") != 0)
        goto done;
    s = OPTIM_NEW; /* nanoGPT's two groups */
    tg_params decay, no_decay;
    tg_params_init(&decay);
    tg_params_init(&no_decay);
    if (tg_params_split_decay(&ps, &decay, &no_decay) == 0)
        opt = tg_optim_new_groups(
            (tg_param_group[]){{&decay, 0.1, 1}, {&no_decay, 0, 1}}, 2,
            tg_adamw_config(1e-2, 0));
    tg_params_free(&decay);
    tg_params_free(&no_decay);
    if (!opt)
        goto done;
    s = INPUTS;
    in[0] = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(B, T, C));
    in[1] = tg_from_data(TG_INT64, TG_SHAPE(B, T), ids);
    in[2] = tg_from_data(TG_INT64, TG_SHAPE(B, T), targets);
    if (!in[0] || !in[1] || !in[2])
        goto done;

    /* Two micro-batches: the second backward adds into the first's
     * gradients, and when it fails must leave them as they were. */
    if ((s = forward_backward(&h, &g, in, FORWARD, o)) != N_STEPS)
        goto done;
    if (!(before = snapshot(&ps, true, &n_before))) {
        broken(o, "backward returned 0 with a gradient missing");
        goto done;
    }
    s = forward_backward(&h, &g, in, FORWARD2, o);
    after = snapshot(&ps, true, &n_after);
    if (s != N_STEPS) {
        if (n_after != n_before || !same(before, after, n_before))
            broken(o, "%s failed (%s) but changed the gradients", step_names[s],
                   tg_last_error());
        goto done;
    }
    if (n_after != n_before) {
        broken(o, "backward returned 0 with a gradient missing");
        goto done;
    }

    /* A step that fails changes no parameter. */
    s = OPTIM_STEP;
    free(before);
    free(after);
    before = snapshot(&ps, false, &n_before);
    bool stepped = tg_optim_step(opt) == 0;
    after = snapshot(&ps, false, &n_after);
    if (!stepped) {
        if (!same(before, after, n_before))
            broken(o, "optim_step failed (%s) but changed a parameter",
                   tg_last_error());
        goto done;
    }
    s = SAVE; /* the parameters and the optimizer's state */
    if (tg_save_checkpoint(&ps, opt, path) != 0)
        goto done;
    s = LOAD;
    if (tg_load_checkpoint(&ps, opt, path) != 0)
        goto done;
    s = N_STEPS;

done:
    o->failed = s;
    snprintf(o->error, sizeof o->error, "%s", tg_last_error());
    if (s == N_STEPS)
        o->values = snapshot(&ps, false, &o->n_values);
    free(before);
    free(after);
    for (int i = 0; i < 3; i++)
        tg_release(in[i]);
    tg_optim_free(opt);
    tg_params_free(&ps);
    if (s > GPT_INIT)
        tg_gpt_free(&g);
    if (s > HEAD_INIT)
        tg_head_free(&h);
}

/* A checkpoint path in a fresh directory (temp_remove removes both). */
typedef struct {
    char dir[256], path[300];
} temp_path;

static void temp_make(temp_path *t)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/tapegrad_oom.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/model.npz", t->dir);
}

static void temp_remove(const temp_path *t)
{
    unlink(t->path);
    rmdir(t->dir);
}

/* The reference run: counts the program's allocations (*n_allocs) and
 * keeps what every run that succeeds must end with (ref->values). It is the
 * second run: the first makes what the library makes once per thread or
 * process (this thread's tape, the checkpoint file), so that every run
 * after it makes the same allocations. */
static void reference(const char *path, int64_t *n_allocs, outcome *ref)
{
    program(path, ref);
    free(ref->values);
    tg__alloc_fail_at(0, false);
    program(path, ref);
    *n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_msg(ref->failed == N_STEPS && !ref->broken[0],
                  "the reference run failed at %s: %s %s",
                  step_names[ref->failed], ref->error, ref->broken);
}

/* Runs the program with allocation k failing (and every one after it when
 * every_after) and checks how it ended. Returns the step it ended at. */
static step run_point(const char *path, int64_t k, bool every_after,
                      const outcome *ref)
{
    outcome o;
    const char *how = every_after ? " (and every one after it)" : "";
    tg_clear_error();
    tg__alloc_fail_at(k, every_after);
    program(path, &o);
    tg__alloc_fail_at(-1, false);
    bool as_ref =
        o.failed != N_STEPS || (o.n_values == ref->n_values &&
                                same(o.values, ref->values, o.n_values));
    free(o.values);
    ck_assert_msg(!o.broken[0], "allocation %lld failing%s: %s", (long long)k,
                  how, o.broken);
    ck_assert_msg(as_ref,
                  "allocation %lld failing%s: the run succeeded with other "
                  "parameters than the reference run's",
                  (long long)k, how);
    ck_assert_msg(o.failed == N_STEPS || strstr(o.error, "out of memory"),
                  "allocation %lld failing%s: %s failed with '%s', which is "
                  "not out of memory",
                  (long long)k, how, step_names[o.failed], o.error);
    ck_assert_msg(tg_tape_size() == 0,
                  "allocation %lld failing%s: %lld tape entries outlive the "
                  "run",
                  (long long)k, how, (long long)tg_tape_size());
    int64_t alive = tg_live_tensors(); /* -1: the audit is off */
    ck_assert_msg(alive <= 0,
                  "allocation %lld failing%s: %lld tensors outlive the run",
                  (long long)k, how, (long long)alive);
    return o.failed;
}

/* The sweep: every failure point natively, every 7th under valgrind (where
 * each run is ~50x slower; the sanitizer build runs them all). With
 * TG_OOM_REPORT set, prints where the runs ended. */
static void sweep(bool every_after)
{
    temp_path tp;
    temp_make(&tp);
    int64_t n_allocs = 0;
    outcome ref;
    reference(tp.path, &n_allocs, &ref);
    ck_assert_int_gt(n_allocs, 500);
    int64_t stride = RUNNING_ON_VALGRIND ? 7 : 1;
    int64_t ended[N_STEPS + 1] = {0};
    for (int64_t k = 1; k <= n_allocs; k += stride)
        ended[run_point(tp.path, k, every_after, &ref)]++;
    /* past the last allocation nothing fails */
    ck_assert_int_eq(run_point(tp.path, n_allocs + 1, every_after, &ref),
                     N_STEPS);
    /* Each allocation of this program is one it needs (the library has no
     * fallbacks on its path), so none fails unnoticed. */
    ck_assert_int_eq(ended[N_STEPS], 0);
    if (getenv("TG_OOM_REPORT")) {
        printf("oom sweep%s: %lld allocations, runs ended at\n",
               every_after ? " (each failing with every one after it)" : "",
               (long long)n_allocs);
        for (int s = 0; s <= N_STEPS; s++)
            if (ended[s])
                printf("  %-10s %lld\n", step_names[s], (long long)ended[s]);
    }
    free(ref.values);
    temp_remove(&tp);
}

/* ---- every op ------------------------------------------------------------ */

/* What an op tour computed: its loss and every leaf's gradient. */
typedef struct tour_result {
    double v[1024];
    int64_t n;
} tour_result;

enum { N_TERMS = 48 };

/* The failure point being run, for messages. */
static int64_t tour_k;

/* Appends sum(t) to the tour's terms. */
static void term(tg_tensor **terms, int *n, tg_tensor *t)
{
    ck_assert_int_lt(*n, N_TERMS);
    terms[(*n)++] = tg_sum_all(t);
}

/* A custom op (core/custom.c) on the tour, by every path of its own that
 * allocates: its context, two differentiable outputs y = x e and e =
 * exp(x) (an entry each; backward runs once per output, with zeros made
 * for the other's dy), and saved tensors of both kinds: the input x and
 * the two outputs (held as detached aliases). dx = dy0 e (1 + x) + dy1 e. */
static int tour_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    y[1] = tg_exp(x[0]);
    y[0] = tg_mul(x[0], y[1]);
    if (!y[0] || !y[1])
        return -1;
    if (tg_custom_save(c, x[0]) < 0 || tg_custom_save(c, y[1]) < 0 ||
        tg_custom_save(c, y[0]) < 0)
        return -1;
    return 0;
}

static int tour_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    tg_tensor *x = tg_custom_saved(c, 0), *e = tg_custom_saved(c, 1);
    tg_tensor *x1 = tg_add_scalar(x, 1);
    tg_tensor *de = tg_mul(e, x1);     /* dy0/dx = e (1 + x) */
    tg_tensor *t0 = tg_mul(dy[0], de); /* (NULL-safe: a NULL keeps its */
    tg_tensor *t1 = tg_mul(dy[1], e);  /* error, and so on down) */
    dx[0] = tg_add(t0, t1);
    tg_release(x1);
    tg_release(de);
    tg_release(t0);
    tg_release(t1);
    return dx[0] ? 0 : -1;
}

static const tg_custom_op tour_op = {"tour_xexp",   1,    2,    tour_forward,
                                     tour_backward, NULL, false};

/* Appends the sums of tour_op's two outputs on x to the tour's terms. */
static void custom_terms(tg_tensor **terms, int *n, tg_tensor *x)
{
    tg_tensor *y[2] = {NULL, NULL};
    tg_custom(&tour_op, NULL, (tg_tensor *[]){x}, y); /* NULLs on failure */
    term(terms, n, y[0]);
    term(terms, n, y[1]);
}

/* Every differentiable op forward and backward on small float64 tensors,
 * summed into one loss (r gets it and every leaf's gradient); then the
 * comparisons, tg_format and .npy I/O (at path). 0, or -1 with the error
 * set. Everything it makes lives in one scope. */
static int ops_tour(const char *path, tour_result *r)
{
    const tg_dtype F64 = TG_FLOAT64;
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, F64, TG_SHAPE(2, 3, 4));
    tg_tensor *w = tg_randn(&rng, F64, TG_SHAPE(4, 5));
    tg_tensor *b = tg_randn(&rng, F64, TG_SHAPE(5));
    tg_tensor *v = tg_randn(&rng, F64, TG_SHAPE(4));
    tg_tensor *gamma = tg_full(F64, TG_SHAPE(5), 1.5);
    tg_tensor *beta = tg_full(F64, TG_SHAPE(5), 0.25);
    tg_tensor *leaves[] = {x, w, b, v, gamma, beta};
    for (int i = 0; i < 6; i++) {
        if (!leaves[i]) { /* a NULL gamma or beta would mean "none" */
            tg_scope_end();
            return -1;
        }
        tg_set_requires_grad(leaves[i], true);
    }
    int64_t ids[6] = {0, 3, 1, 1, 2, 0}, picks[12], targets[6];
    for (int i = 0; i < 12; i++)
        picks[i] = (i * 7) % 5;
    for (int i = 0; i < 6; i++)
        targets[i] = (i * 2 + 1) % 5;
    tg_tensor *terms[N_TERMS];
    int nt = 0;

    /* a linear layer (the bias's gradient is summed over rows), the
     * elementwise ops */
    tg_tensor *h = tg_add(tg_matmul(x, w), b); /* (2,3,5) */
    term(terms, &nt, tg_gelu(h));
    term(terms, &nt, tg_relu(h));
    term(terms, &nt, tg_gelu_tanh(h));
    term(terms, &nt, tg_dropout(h, 0.3, true, &rng)); /* its mask, kept */
    term(terms, &nt, tg_exp(tg_scale(h, 0.1)));
    term(terms, &nt, tg_log(tg_add_scalar(tg_mul(h, h), 1)));
    term(terms, &nt, tg_sqrt(tg_add_scalar(tg_pow_scalar(h, 2), 1)));
    term(terms, &nt, tg_div(tg_neg(h), tg_add_scalar(tg_exp(h), 1)));
    term(terms, &nt, tg_sub(h, tg_pow_scalar(h, 0)));
    /* views */
    term(terms, &nt, tg_transpose(h, 0, 2));
    term(terms, &nt, tg_slice(h, 1, 1, 3));
    term(terms, &nt, tg_narrow(h, 2, 0, 2));
    term(terms, &nt, tg_select(h, 0, 1));
    term(terms, &nt, tg_reshape(tg_transpose(h, 1, 2), TG_SHAPE(10, 3)));
    term(terms, &nt, tg_squeeze(tg_unsqueeze(h, 0), 0));
    term(terms, &nt, tg_expand(tg_unsqueeze(b, 0), TG_SHAPE(3, 5)));
    term(terms, &nt, tg_contiguous(tg_transpose(h, 0, 1)));
    term(terms, &nt, tg_to(tg_to(h, TG_FLOAT32), F64));
    /* reductions */
    term(terms, &nt, tg_sum(h, 1, false));
    term(terms, &nt, tg_mean(h, 2, true));
    term(terms, &nt, tg_max(h, 1, false));
    /* softmax, masks, attention */
    tg_tensor *scores = tg_matmul(x, tg_transpose(x, 1, 2)); /* (2,3,3) */
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(F64, TG_SHAPE(3, 3)), 0), 0);
    term(terms, &nt, tg_softmax(h, -1));
    term(terms, &nt, tg_log_softmax(h, 1));
    term(terms, &nt, tg_attention_softmax(scores, 0.5, true));
    term(terms, &nt, tg_masked_fill(scores, future, 0.0));
    term(terms, &nt, tg_where(future, scores, tg_triu(scores, 1)));
    term(terms, &nt, tg_tril(scores, -1));
    term(terms, &nt, tg_attention(x, x, h, true, 0.5));
    /* joining and indexing */
    tg_tensor *parts[2] = {NULL, NULL};
    if (tg_chunk(x, 2, 2, parts) == 0) {
        term(terms, &nt, tg_mul(parts[0], parts[1]));
        tg_release(parts[0]);
        tg_release(parts[1]);
    } else {
        term(terms, &nt, NULL);
    }
    term(terms, &nt, tg_cat((tg_tensor *[]){h, x}, 2, 2));
    term(terms, &nt,
         tg_embedding(w, tg_from_data(TG_INT64, TG_SHAPE(2, 3), ids)));
    term(terms, &nt,
         tg_gather(h, 2, tg_from_data(TG_INT64, TG_SHAPE(2, 3, 2), picks)));
    /* matmul with 1-D operands and with a broadcast one (packed) */
    term(terms, &nt, tg_matmul(v, w));
    term(terms, &nt, tg_matmul(x, v));
    term(terms, &nt,
         tg_matmul(tg_expand(tg_unsqueeze(v, 0), TG_SHAPE(3, 4)), w));
    /* layer norm and the losses */
    term(terms, &nt, tg_layer_norm(h, gamma, beta, 1e-5));
    term(terms, &nt,
         tg_cross_entropy(h, tg_from_data(TG_INT64, TG_SHAPE(2, 3), targets)));
    term(terms, &nt,
         tg_cross_entropy_with(h,
                               tg_from_data(TG_INT64, TG_SHAPE(2, 3),
                                            (int64_t[]){1, -100, 4, 0, 2, 3}),
                               -100, TG_REDUCTION_NONE));
    term(terms, &nt, tg_mse_loss(h, b));
    /* the fused head: h (2,3,5) @ a (5,4) view of w's transpose */
    term(terms, &nt,
         tg_linear_cross_entropy(h, tg_transpose(w, 0, 1),
                                 tg_from_data(TG_INT64, TG_SHAPE(2, 3),
                                              (int64_t[]){1, 3, 0, 2, 3, 1})));
    /* activations, clamp, outer */
    term(terms, &nt, tg_sigmoid(h));
    term(terms, &nt, tg_tanh(h));
    term(terms, &nt, tg_abs(h));
    term(terms, &nt, tg_clamp(h, -0.5, 0.5));
    term(terms, &nt, tg_outer(v, b));
    /* a custom op, forward and backward */
    custom_terms(terms, &nt, tg_scale(h, 0.1));

    tg_tensor *loss = terms[0];
    for (int i = 1; i < nt; i++)
        loss = tg_add(loss, terms[i]);
    /* every differentiable op must be here; each entry is replayed, and a
     * replay that ran out of memory fails the tour as any op would */
    bool replayed = ops_list_toured(loss);
    int rc = loss && replayed ? tg_backward(loss) : -1;
    if (rc == 0) {
        r->n = 0;
        r->v[r->n++] = tg_item(loss);
        for (int i = 0; i < 6; i++) {
            tg_tensor *g = tg_grad(leaves[i]);
            ck_assert_msg(g,
                          "allocation %lld failing: backward returned 0 but "
                          "leaf %d has no gradient",
                          (long long)tour_k, i);
            ck_assert_int_le(r->n + tg_numel(g), 1024);
            tg_copy_out(g, F64, r->v + r->n);
            r->n += tg_numel(g);
        }
    }
    /* no tape: comparisons, printing, files */
    if (rc == 0 && (!tg_lt(h, b) || !tg_ge_scalar(h, 0)))
        rc = -1;
    /* no tape: indices, masks, creation */
    if (rc == 0 &&
        (!tg_argmax(h, 1, false) || !tg_argmin(h, TG_ALL, true) ||
         !tg_logical_or(tg_logical_not(tg_lt(h, b)), tg_gt_scalar(h, 1)) ||
         !tg_eye(F64, 3, 4) || !tg_linspace(F64, 0, 1, 5) ||
         !tg_randint(&rng, 0, 9, TG_SHAPE(2, 3)) || !tg_randperm(&rng, 5) ||
         !tg_from_i64(TG_SHAPE(6), ids)))
        rc = -1;
    char *text = rc == 0 ? tg_format(h, 4) : NULL;
    if (rc == 0 && !text)
        rc = -1;
    free(text);
    if (rc == 0 && (tg_save_npy(h, path) != 0 || !tg_load_npy(path)))
        rc = -1;
    if (tg_scope_end() != 0)
        rc = -1;
    return rc;
}

/* The tour with allocation k failing (and every one after it when
 * every_after): a clean error or the reference's result, no tape left. */
static bool tour_point(const char *path, int64_t k, bool every_after,
                       const tour_result *ref)
{
    static tour_result got;
    tour_k = k;
    tg_clear_error();
    tg__alloc_fail_at(k, every_after);
    int rc = ops_tour(path, &got);
    tg__alloc_fail_at(-1, false);
    if (rc == 0)
        ck_assert_msg(got.n == ref->n && same(got.v, ref->v, ref->n),
                      "allocation %lld failing: the tour succeeded with "
                      "other values than the reference's",
                      (long long)k);
    else
        ck_assert_msg(strstr(tg_last_error(), "out of memory"),
                      "allocation %lld failing%s: the tour failed with "
                      "'%s', which is not out of memory",
                      (long long)k, every_after ? " (and after)" : "",
                      tg_last_error());
    ck_assert_int_eq(tg_tape_size(), 0);
    ck_assert_int_le(tg_live_tensors(), 0);
    return rc == 0;
}

static void sweep_tour(bool every_after)
{
    temp_path tp;
    temp_make(&tp);
    static tour_result ref;
    ops_tour(tp.path, &ref); /* warm up, as reference() */
    tg__alloc_fail_at(0, false);
    int rc = ops_tour(tp.path, &ref);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_msg(rc == 0, "the reference tour failed: %s", tg_last_error());
    ck_assert_int_gt(n_allocs, 300);
    int64_t stride = RUNNING_ON_VALGRIND ? 7 : 1, succeeded = 0;
    for (int64_t k = 1; k <= n_allocs; k += stride)
        succeeded += tour_point(tp.path, k, every_after, &ref);
    ck_assert(tour_point(tp.path, n_allocs + 1, every_after, &ref));
    ck_assert_int_eq(succeeded, 0);
    if (getenv("TG_OOM_REPORT"))
        printf("oom ops tour%s: %lld allocations, each failing ends in "
               "\"out of memory\"\n",
               every_after ? " (each failing with every one after it)" : "",
               (long long)n_allocs);
    temp_remove(&tp);
}

START_TEST(every_op_fails_cleanly) { sweep_tour(false); }
END_TEST

START_TEST(every_op_fails_cleanly_for_good) { sweep_tour(true); }
END_TEST

/* ---- gradcheck and sampling ----------------------------------------------- */

/* y = sum(x^3), the gradcheck's function. */
static tg_tensor *cube_sum(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *cube = tg_pow_scalar(in[0], 3);
    tg_tensor *y = tg_sum_all(cube);
    tg_release(cube);
    return y;
}

/* A gradcheck (which must never call out of memory a mismatch: 1) and a
 * tiny GPT's sampling. 0 with the tokens in tokens[6], or -1. */
static int check_and_sample(int64_t *tokens)
{
    tg_rng rng;
    tg_rng_seed(&rng, 11);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(3));
    tg_set_requires_grad(x, true);
    int rc = x ? tg_gradcheck(cube_sum, NULL, 1, &x, NULL, NULL) : -1;
    ck_assert_msg(rc != 1, "gradcheck found a mismatch: %s", tg_last_error());
    tg_release(x);
    tg_gpt g;
    const tg_gpt_config cfg = {.vocab_size = 5,
                               .block_size = 4,
                               .n_embd = 4,
                               .n_head = 1,
                               .n_layer = 1,
                               .dtype = TG_FLOAT32};
    if (rc == 0 && tg_gpt_init(&g, cfg, &rng) != 0)
        rc = -1;
    if (rc == 0) {
        tg_tensor *ids =
            tg_from_data(TG_INT64, TG_SHAPE(1, 2), (const int64_t[]){1, 3});
        tg_tensor *out = tg_gpt_generate(&g, ids, 4, 1.0, &rng);
        rc = out ? tg_copy_out(out, TG_INT64, tokens) : -1;
        tg_release(out);
        tg_release(ids);
        tg_gpt_free(&g);
    }
    return rc;
}

/* issue 30: the second order and forward mode through a masked softmax
 * head: f(w) = mean((softmax(masked(x w (x w)^T)) x - t)^2) */
static tg_tensor *masked_head_fn(tg_tensor *const *in, void *ctx)
{
    tg_tensor *x = ctx, *mask = NULL, *q = tg_matmul(x, in[0]);
    tg_tensor *qt = tg_transpose(q, 0, 1), *s = tg_matmul(q, qt);
    tg_tensor *ones = s ? tg_ones_like(s) : NULL;
    tg_tensor *up = ones ? tg_triu(ones, 1) : NULL;
    mask = up ? tg_gt_scalar(up, 0.5) : NULL;
    tg_tensor *m = mask ? tg_masked_fill(s, mask, -INFINITY) : NULL;
    tg_tensor *p = m ? tg_softmax(m, -1) : NULL;
    tg_tensor *o = p ? tg_matmul(p, x) : NULL;
    tg_tensor *l = o ? tg_mse_loss(o, x) : NULL;
    tg_release(q), tg_release(qt), tg_release(s), tg_release(ones);
    tg_release(up), tg_release(mask), tg_release(m), tg_release(p);
    tg_release(o);
    return l;
}

/* H v, J v and the Hessian of masked_head_fn into out (4 + 4 + 16
 * values); 0, or -1 with the error. */
static int second_order_values(double *out)
{
    tg_tensor *x = tg_linspace(TG_FLOAT64, -1, 1, 6);
    tg_tensor *x2 = x ? tg_reshape(x, TG_SHAPE(3, 2)) : NULL;
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(2, 2), 0.3);
    tg_tensor *v = tg_full(TG_FLOAT64, TG_SHAPE(2, 2), -0.7);
    tg_tensor *hv = NULL, *jv = NULL, *h = NULL;
    int rc = x2 && w && v ? 0 : -1;
    if (rc == 0 && !(hv = tg_hvp(masked_head_fn, x2, w, v)))
        rc = -1;
    if (rc == 0)
        rc = tg_jvp(masked_head_fn, x2, 1, &w, &v, NULL, &jv);
    if (rc == 0 && !(h = tg_hessian(masked_head_fn, x2, w)))
        rc = -1;
    if (rc == 0) {
        ck_assert_int_eq(tg_copy_out(hv, TG_FLOAT64, out), 0);
        out[4] = tg_item(jv);
        ck_assert_int_eq(tg_copy_out(h, TG_FLOAT64, out + 5), 0);
    }
    tg_release(x), tg_release(x2), tg_release(w), tg_release(v);
    tg_release(hv), tg_release(jv), tg_release(h);
    return rc;
}

/* run(out) with each of its allocations failing in turn (every 7th under
 * valgrind): an error saying "out of memory", never an abort, no entry or
 * tensor left; then a run that succeeds writes what the reference did
 * (size bytes into want and got). */
static void each_allocation_fails(int (*run)(void *out), void *want, void *got,
                                  size_t size)
{
    run(want); /* warm up, as reference() */
    tg__alloc_fail_at(0, false);
    int rc = run(want);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_msg(rc == 0, "the reference run failed: %s", tg_last_error());
    for (int64_t k = 1; k <= n_allocs; k += RUNNING_ON_VALGRIND ? 7 : 1) {
        tg_clear_error();
        tg__alloc_fail_at(k, false);
        rc = run(got);
        tg__alloc_fail_at(-1, false);
        ck_assert_msg(rc == -1 && strstr(tg_last_error(), "out of memory"),
                      "allocation %lld failing: rc %d, '%s'", (long long)k, rc,
                      tg_last_error());
        ck_assert_int_eq(tg_tape_size(), 0);
        ck_assert_int_le(tg_live_tensors(), 0);
    }
    ck_assert_int_eq(run(got), 0);
    ck_assert(memcmp(got, want, size) == 0);
}

static int second_order_run(void *out) { return second_order_values(out); }

/* Each allocation of tg_hvp, tg_jvp and tg_hessian (the recorded
 * backward of matmul, softmax, masked_fill, mse_loss, their forward-mode
 * rules) failing in turn. */
START_TEST(second_order_fails_cleanly)
{
    double want[21], got[21];
    each_allocation_fails(second_order_run, want, got, sizeof want);
}
END_TEST

static int check_and_sample_run(void *out) { return check_and_sample(out); }

START_TEST(gradcheck_and_generate_fail_cleanly)
{
    int64_t want[6], got[6];
    each_allocation_fails(check_and_sample_run, want, got, sizeof want);
}
END_TEST

/* llm.c's files: the checkpoint read, a loss, the model written back; a
 * shard read; the bfloat16 checkpoint read into float64 (each tensor
 * converted through the reader's buffer, not read in place) and its
 * loss. */
static int llmc_run(void *out)
{
    double *v = out;
    char path[64];
    snprintf(path, sizeof path, "/tmp/tg_oom_llmc_%d.bin", (int)getpid());
    tg_gpt g, g16;
    tg_scope_begin();
    int rc = tg_gpt_load_llmc(&g, fixture_path("llmc/model.bin"), TG_FLOAT32);
    int rc16 =
        tg_gpt_load_llmc(&g16, fixture_path("llmc/model_bf16.bin"), TG_FLOAT64);
    tg_tensor *ids = tg_load_npy(fixture_path("gpt2/ids.npy")); /* (4,17) */
    tg_tensor *x = tg_contiguous(tg_narrow(ids, 1, 0, 16));
    tg_tensor *y = tg_contiguous(tg_narrow(ids, 1, 1, 16));
    tg_tensor *loss = rc == 0 && x && y ? tg_gpt_loss(&g, x, y) : NULL;
    tg_tensor *loss16 = rc16 == 0 && x && y ? tg_gpt_loss(&g16, x, y) : NULL;
    tg_tensor *shard = tg_load_tokens_llmc(fixture_path("llmc/tokens.bin"));
    rc = loss && loss16 && shard && tg_gpt_save_llmc(&g, path) == 0 ? 0 : -1;
    if (rc == 0) {
        v[0] = tg_item(loss);
        v[1] = (double)tg_numel(shard);
        v[2] = tg_item(loss16);
    }
    tg_gpt_free(&g);
    tg_gpt_free(&g16);
    tg_scope_end();
    unlink(path);
    return rc;
}

START_TEST(llmc_fails_cleanly)
{
    double want[3], got[3];
    each_allocation_fails(llmc_run, want, got, sizeof want);
}
END_TEST

/* A GPT step with its blocks checkpointed (tg_checkpoint): the forward
 * of each segment, its entry, and in backward the recomputation, its
 * walk and the gradients added; dropout on. */
static int checkpoint_run(void *out)
{
    double *v = out;
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_gpt_config cfg = {.vocab_size = 7,
                         .block_size = 4,
                         .n_embd = 8,
                         .n_head = 2,
                         .n_layer = 2,
                         .gelu = true,
                         .dtype = TG_FLOAT64,
                         .resid_dropout = 0.1,
                         .checkpoint = true};
    tg_gpt g;
    if (tg_gpt_init(&g, cfg, &rng) < 0)
        return -1;
    tg_gpt_train(&g, true, &rng);
    tg_tensor *ids = tg_randint(&rng, 0, 7, TG_SHAPE(2, 4));
    tg_tensor *loss = ids ? tg_gpt_loss(&g, ids, ids) : NULL;
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    const tg_tensor *gr = rc == 0 ? tg_grad(g.blocks[0].ln1.gamma) : NULL;
    if (gr) {
        v[0] = tg_item(loss);
        v[1] = tg_get(gr, (int64_t[]){0});
    }
    tg_release(loss);
    tg_release(ids);
    tg_gpt_free(&g);
    return gr ? 0 : -1;
}

START_TEST(checkpoint_fails_cleanly)
{
    double want[2], got[2];
    each_allocation_fails(checkpoint_run, want, got, sizeof want);
}
END_TEST

/* ---- pictures --------------------------------------------------------------- */

/* A heatmap (and one masked, on the diverging scale), a line chart and a
 * bar chart under dir, without gnuplot (the data and the scripts only). 0,
 * or -1 with the error set. */
static int three_plots(const char *dir)
{
    char heat[300], lines[300], bars[300];
    snprintf(heat, sizeof heat, "%s/heat", dir);
    snprintf(lines, sizeof lines, "%s/lines", dir);
    snprintf(bars, sizeof bars, "%s/bars", dir);
    const double ys[4] = {1, 0.5, 0.25, 0.125};
    tg_tensor *m = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), ys);
    tg_tensor *mask = tg_from_data(TG_BOOL, TG_SHAPE(2, 2),
                                   (const bool[]){false, true, false, false});
    const tg_heatmap_opts o = {.scale = TG_SCALE_DIVERGING, .annotate = true};
    int rc = m ? tg_plot_heatmap(heat, m, "h", "x", "y", true) : -1;
    if (rc == 0)
        rc = mask ? tg_plot_heatmap_with(heat, m, mask, "h", &o) : -1;
    tg_release(mask);
    tg_release(m);
    const tg_series line = {.label = "loss", .y = ys, .n = 4};
    if (rc == 0)
        rc = tg_plot_lines(lines, &line, 1, "l", "step", "loss", false, true);
    if (rc == 0)
        rc = tg_plot_bars(bars, (const char *const[]){"a", "b"}, ys, 2, "b",
                          "v");
    return rc;
}

START_TEST(plots_fail_cleanly)
{
    temp_path tp;
    temp_make(&tp);
    /* gnuplot off: each plot says so in a line on stderr, kept out of the
     * test's output */
    ck_assert_int_eq(setenv("TG_NO_GNUPLOT", "1", 1), 0);
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    ck_assert(saved >= 0 && null >= 0 && dup2(null, 2) == 2);
    three_plots(tp.dir); /* warm up, as reference() */
    tg__alloc_fail_at(0, false);
    int rc = three_plots(tp.dir);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    int64_t clean = 0;
    char first_bad[512] = "";
    for (int64_t k = 1; k <= n_allocs; k++) {
        tg_clear_error();
        tg__alloc_fail_at(k, false);
        int rk = three_plots(tp.dir);
        tg__alloc_fail_at(-1, false);
        if (rk == -1 && strstr(tg_last_error(), "out of memory"))
            clean++;
        else if (!first_bad[0])
            snprintf(first_bad, sizeof first_bad,
                     "allocation %lld: rc %d, '%s'", (long long)k, rk,
                     tg_last_error());
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(null);
    unsetenv("TG_NO_GNUPLOT");
    ck_assert_msg(rc == 0, "the reference plots failed: %s", tg_last_error());
    ck_assert_int_gt(n_allocs, 5);
    ck_assert_msg(clean == n_allocs, "%s", first_bad);
    const char *files[] = {"heat.dat", "heat.gp",  "lines.dat",
                           "lines.gp", "bars.dat", "bars.gp"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", tp.dir, files[i]);
        unlink(path);
    }
    temp_remove(&tp);
}
END_TEST

/* ---- what a failed backward leaves, and scopes ---------------------------- */

/* loss = sum((x @ w)^2) on fixed values, with y = x @ w retaining its
 * gradient. */
static tg_tensor *squares_loss(tg_tensor *x, tg_tensor *w, tg_tensor **y)
{
    *y = tg_matmul(x, w);
    tg_retain_grad(*y);
    tg_tensor *sq = tg_mul(*y, *y);
    tg_tensor *loss = tg_sum_all(sq);
    tg_release(sq);
    return loss;
}

START_TEST(failed_backward_leaves_gradients_as_they_were)
{
    double xs[6] = {1, -2, 0.5, 3, 0.25, -1}, ws[12];
    for (int i = 0; i < 12; i++)
        ws[i] = 0.1 * i - 0.4;
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), xs);
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 4), ws);
    tg_set_requires_grad(w, true);
    /* a first backward: w.grad holds 2 x^T (x @ w) */
    tg_tensor *y, *loss = squares_loss(x, w, &y);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_release(loss);
    tg_release(y);
    tg_tensor *grad = tg_grad(w);
    double before[12], now[12];
    tg_copy_out(grad, TG_FLOAT64, before);
    /* the backward's own allocations, counted on the same graph */
    loss = squares_loss(x, w, &y);
    tg__alloc_fail_at(0, false);
    ck_assert_int_eq(tg_backward(loss), 0);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    tg_release(loss);
    tg_release(y);
    ck_assert_int_ge(n_allocs, 5);
    y = NULL;
    for (int64_t k = 1; k <= n_allocs; k++) {
        /* w.grad as after the first backward, the same tensor */
        tg_release(y);
        tg_zero_grad(w);
        loss = squares_loss(x, w, &y);
        ck_assert_int_eq(tg_backward(loss), 0);
        tg_release(loss);
        tg_release(y);
        grad = tg_grad(w);
        loss = squares_loss(x, w, &y);
        tg__alloc_fail_at(k, false);
        int rc = tg_backward(loss);
        tg__alloc_fail_at(-1, false);
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strncmp(tg_last_error(), "backward: ", 10) == 0 &&
                          strstr(tg_last_error(), "out of memory"),
                      "allocation %lld: '%s'", (long long)k, tg_last_error());
        ck_assert_ptr_eq(tg_grad(w), grad); /* not replaced, */
        tg_copy_out(grad, TG_FLOAT64, now);
        ck_assert(memcmp(now, before, sizeof now) == 0); /* not added to */
        ck_assert_ptr_null(tg_grad(y)); /* and none of this call kept */
        /* The tape: as it was when the error came before the walk (the
         * seed, gathering the entries), else consumed. */
        char first[512];
        snprintf(first, sizeof first, "%s", tg_last_error());
        bool before_walk = strstr(first, "ones_like") ||
                           strstr(first, "gathering the tape entries");
        ck_assert_int_eq(tg_backward(loss), before_walk ? 0 : -1);
        ck_assert_msg(before_walk || strstr(tg_last_error(), "consumed"),
                      "after '%s': '%s'", first, tg_last_error());
        tg_release(loss);
    }
    ck_assert_int_eq(tg_tape_size(), 1); /* y's entry, never walked */
    tg_release(y);
    ck_assert_int_eq(tg_tape_size(), 0);
    tg_release(x);
    tg_release(w);
}
END_TEST

START_TEST(backward_adds_the_sum_of_its_contributions)
{
    /* x.grad = 1, then a call contributing 1e8 and -1e8: PyTorch's order,
     * 1 + (1e8 - 1e8) = 1; adding each in turn would give (1 + 1e8) - 1e8
     * = 0 in float32. */
    tg_tensor *x = tg_scalar(TG_FLOAT32, 2);
    tg_set_requires_grad(x, true);
    ck_assert_int_eq(tg_backward(x), 0);
    tg_tensor *grad = tg_grad(x);
    tg_tensor *a = tg_scale(x, 1e8), *b = tg_scale(x, -1e8);
    tg_tensor *loss = tg_add(a, b);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_ptr_eq(tg_grad(x), grad);
    ck_assert_double_eq(tg_item(grad), 1);
    tg_release(loss);
    tg_release(a);
    tg_release(b);
    tg_release(x);
}
END_TEST

START_TEST(a_scope_that_cannot_open)
{
    tg__alloc_fail_at(1, false);
    tg_scope_begin(); /* its first allocation, the stack of scopes, fails */
    ck_assert_int_eq(tg__alloc_counted(), 1);
    tg__alloc_fail_at(-1, false);
    ASSERT_FAILS_WITH(tg_zeros(TG_FLOAT32, TG_SHAPE(2)),
                      "zeros: out of memory: tg_scope_begin could not open");
    tg_scope_begin(); /* nested in it: lost too */
    ASSERT_FAILS_WITH(tg_ones(TG_FLOAT32, TG_SHAPE(2)), "ones: out of memory");
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert_ptr_nonnull(
        strstr(tg_last_error(), "scope_end: out of memory: tg_scope_begin"));
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no scope is open"));
    /* and the next one opens */
    tg_scope_begin();
    tg_tensor *t = tg_zeros(TG_FLOAT32, TG_SHAPE(2));
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_int_le(tg_live_tensors(), 0);
}
END_TEST

START_TEST(portable_gemm_out_of_memory)
{
    const double a[4] = {1, 2, 3, 4};
    double c[4] = {0};
    tg__alloc_fail_at(1, false);
    bool ok = tg__gemm_portable(TG_FLOAT64, false, false, 2, 2, 2, 1, a, 2, a,
                                2, 0, c, 2);
    tg__alloc_fail_at(-1, false);
    ck_assert(!ok);
    ck_assert(tg__gemm_portable(TG_FLOAT64, false, false, 2, 2, 2, 1, a, 2, a,
                                2, 0, c, 2));
    ck_assert_double_eq(c[0], 7);
}
END_TEST

START_TEST(every_allocation_fails_once) { sweep(false); }
END_TEST

START_TEST(every_allocation_fails_for_good) { sweep(true); }
END_TEST

Suite *oom_suite(void)
{
    Suite *s = suite_create("oom");
    TCase *tc = tcase_create("sweep");
    tcase_add_test(tc, every_allocation_fails_once);
    tcase_add_test(tc, every_allocation_fails_for_good);
    tcase_add_test(tc, every_op_fails_cleanly);
    tcase_add_test(tc, every_op_fails_cleanly_for_good);
    tcase_add_test(tc, gradcheck_and_generate_fail_cleanly);
    tcase_add_test(tc, second_order_fails_cleanly);
    tcase_add_test(tc, llmc_fails_cleanly);
    tcase_add_test(tc, checkpoint_fails_cleanly);
    tcase_add_test(tc, plots_fail_cleanly);
    suite_add_tcase(s, tc);
    tc = tcase_create("state");
    tcase_add_test(tc, failed_backward_leaves_gradients_as_they_were);
    tcase_add_test(tc, backward_adds_the_sum_of_its_contributions);
    tcase_add_test(tc, a_scope_that_cannot_open);
    tcase_add_test(tc, portable_gemm_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
