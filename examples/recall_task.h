/* recall_task.h: the toy task that train_head and unscaled train on.
 *
 * "A pronoun finds its noun", reduced to associative recall. Every sequence
 * holds T tokens of C = K + D + 1 features:
 *
 *     x_t = [ key: one-hot among K | value: D numbers | query flag ]
 *
 * Positions 0..T-2 store pairs: a key (all distinct within the sequence) and
 * a value drawn N(0,1). The last position, T-1, is the query: it repeats
 * the key of one earlier position chosen at random, sets the flag, and
 * carries a decoy value of its own (so whatever weight the query keeps on
 * itself mixes noise into the answer). The answer is the value stored under
 * that key. It sits at a random earlier position, and which one depends on
 * what the query contains, so neither a fixed average of the past nor
 * anything that looks at the query alone can find it. Attention can.
 *
 * One causal head (W_q, W_k, W_v and nothing else) solves it as exactly as
 * a softmax can. With e_1..e_hs the unit vectors of the head (hs >= K, D):
 *
 *     W_q: key i -> a * e_i          the query asks for key i, loudly
 *     W_k: key i -> e_i,             each stored token advertises its key
 *          flag  -> -(e_1+...+e_K)   and the query's own key is cancelled
 *     W_v: value -> e_1..e_D         each token passes on its value
 *
 * The query then scores a on the matching position and 0 everywhere else
 * (itself included: a * e_i . (e_i - sum_j e_j) = 0), so the softmax puts
 * e^a / (e^a + T - 1) on the match, and the output's first D channels,
 * sum_s attn[T-1,s] * value_s, tend to the stored value as a grows.
 * Training has to find such weights from random ones; the loss only ever
 * approaches 0, never reaches it.
 *
 * Header-only (static inline), as make_dir.h and options.h; include it
 * after <tapegrad.h>, with _POSIX_C_SOURCE defined first for make_dir.h's
 * mkdir. */
#ifndef RECALL_TASK_H
#define RECALL_TASK_H

#include <tapegrad.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "make_dir.h"

/* The recall programs' (train_head, unscaled) complaints about their
 * options, one wording for both, in an opt_parser (options.h). */
#define RECALL_OPT_WORDING                                                     \
    .missing = "%s needs a value", .unknown = "unknown option %s",             \
    .invalid = "%s needs a valid value", .usage_on_unknown = true

typedef struct recall_task {
    int T;      /* tokens per sequence: T-1 stored pairs, then the query */
    int n_keys; /* K distinct keys (K >= T-1) */
    int d_val;  /* D numbers per value */
} recall_task;

/* The task both examples train on: 8 tokens (7 pairs and the query), 12
 * keys, values of 4 numbers, so C = 12 + 4 + 1 = 17. */
static const recall_task RECALL_TASK = {.T = 8, .n_keys = 12, .d_val = 4};

/* C, the features per token. */
static inline int recall_n_embd(recall_task task)
{
    return task.n_keys + task.d_val + 1;
}

typedef struct recall_batch {
    int B;
    tg_tensor *x;      /* (B,T,C) float64 tokens */
    tg_tensor *target; /* (B,D) the value stored under each query's key */
    int *match;        /* (B) where that key sits: the position to attend */
} recall_batch;

/* What the caller should print after a failure: the library's message, or
 * the one thing recall_batch_new can fail on by itself. */
static inline const char *recall_error(void)
{
    return tg_last_error()[0] ? tg_last_error() : "out of memory";
}

/* B fresh sequences drawn from rng. In a scope, x and target belong to the
 * scope like any tensor; recall_batch_free may still release them early.
 * Returns 0, or -1 (see recall_error) with nothing to free. */
static inline int recall_batch_new(recall_batch *rb, recall_task task, int B,
                                   tg_rng *rng)
{
    const int T = task.T, K = task.n_keys, D = task.d_val;
    const int C = recall_n_embd(task);
    memset(rb, 0, sizeof *rb);
    double *x = calloc((size_t)B * T * C, sizeof *x);
    double *target = malloc((size_t)B * D * sizeof *target);
    int *keys = malloc((size_t)K * sizeof *keys);
    rb->match = malloc((size_t)B * sizeof *rb->match);
    if (!x || !target || !keys || !rb->match || K < T - 1)
        goto fail;

    for (int b = 0; b < B; b++) {
        /* T-1 distinct keys: the first T-1 steps of a Fisher-Yates shuffle */
        for (int i = 0; i < K; i++)
            keys[i] = i;
        for (int i = 0; i < T - 1; i++) {
            int j = i + (int)(tg_rng_uniform(rng) * (K - i));
            int swap = keys[i];
            keys[i] = keys[j], keys[j] = swap;
        }
        for (int t = 0; t < T - 1; t++) {
            double *tok = x + ((size_t)b * T + t) * C;
            tok[keys[t]] = 1; /* key */
            for (int d = 0; d < D; d++)
                tok[K + d] = tg_rng_normal(rng); /* value */
        }
        int m = (int)(tg_rng_uniform(rng) * (T - 1));
        double *query = x + ((size_t)b * T + T - 1) * C;
        query[keys[m]] = 1; /* asks for key keys[m] */
        for (int d = 0; d < D; d++)
            query[K + d] = tg_rng_normal(rng); /* a decoy value */
        query[K + D] = 1;                      /* flag: "I am the query" */
        memcpy(target + (size_t)b * D, x + ((size_t)b * T + m) * C + K,
               (size_t)D * sizeof *target);
        rb->match[b] = m;
    }
    rb->B = B;
    rb->x = tg_from_data(TG_FLOAT64, TG_SHAPE(B, T, C), x);
    rb->target = tg_from_data(TG_FLOAT64, TG_SHAPE(B, D), target);
    if (!rb->x || !rb->target)
        goto fail;
    free(x), free(target), free(keys);
    return 0;
fail:
    tg_release(rb->x), tg_release(rb->target);
    free(rb->match);
    free(x), free(target), free(keys);
    memset(rb, 0, sizeof *rb);
    return -1;
}

static inline void recall_batch_free(recall_batch *rb)
{
    tg_release(rb->x), tg_release(rb->target);
    free(rb->match);
    memset(rb, 0, sizeof *rb);
}

/* The loss only asks about the query: the head's output at position T-1,
 * first D channels, against the stored value,
 *     loss = mean_{b,d} (out[b, T-1, d] - target[b, d])^2
 * out (B,T,hs) -> a 0-d tensor, or NULL. Like an op, it returns a new
 * reference that the innermost open scope owns (if one is open): the
 * temporaries are released here rather than in a scope of its own, which
 * would hand the loss back unscoped. */
static inline tg_tensor *recall_loss(tg_tensor *out, const recall_batch *rb)
{
    tg_tensor *last = tg_select(out, 1, -1); /* (B,hs) */
    tg_tensor *answer = tg_slice(last, 1, 0, tg_size(rb->target, 1));
    tg_tensor *loss = tg_mse_loss(answer, rb->target); /* (B,D) vs (B,D) */
    if (loss) { /* named for the tape's drawing */
        tg_set_name(last, "last");
        tg_set_name(answer, "answer");
        tg_set_name(loss, "loss");
    }
    tg_release(last);
    tg_release(answer);
    return loss;
}

/* attn (B,T,T): the fraction of queries whose largest weight lands on the
 * matching position, in [0, 1]; -1 on error. argmax[b] (may be NULL) gets
 * each query's most-attended position. */
static inline double recall_accuracy(tg_tensor *attn, const recall_batch *rb,
                                     int *argmax)
{
    if (!attn)
        return -1;
    int64_t T = tg_size(attn, -1);
    double *rows = malloc((size_t)rb->B * (size_t)T * sizeof *rows);
    tg_tensor *last = tg_select(attn, 1, -1); /* (B,T): the query's row */
    int rc = rows && last ? tg_copy_out(last, TG_FLOAT64, rows) : -1;
    tg_release(last);
    int hits = 0;
    for (int b = 0; rc == 0 && b < rb->B; b++) {
        int best = 0;
        for (int s = 1; s < T; s++)
            if (rows[b * T + s] > rows[b * T + best])
                best = s;
        hits += best == rb->match[b];
        if (argmax)
            argmax[b] = best;
    }
    free(rows);
    return rc == 0 ? (double)hits / rb->B : -1;
}

#endif /* RECALL_TASK_H */
