/* stress_threads: the thread model of include/tapegrad.h ("Threads") under
 * load, for make check and for the ThreadSanitizer and AddressSanitizer
 * builds (.ci/run). Three parts, each checked against values computed
 * first on one thread, bit for bit:
 *
 * 1. shared inputs: threads each build their own small graph, again and
 *    again, on one read-only dataset x and frozen weights (requires_grad
 *    false, made by the main thread): matmul, softmax, a view of x, sum; then
 *    backward into a leaf of their own. Every op retains and releases x and
 *    the weights from all threads at once (their refcounts). Meanwhile every
 *    other thread turns grad mode off and on and runs in anomaly mode, which
 *    must change nothing for the others.
 * 2. release across threads: in pairs, a producer makes a tensor whose tape
 *    entry sits on its own tape, in a scope of its own, and hands it over;
 *    the consumer checks it and releases it, unlinking the entry from the
 *    producer's tape while the producer keeps recording.
 * 3. entries outliving their thread: threads record entries, hand them to
 *    the main thread and exit; the main thread releases them afterwards.
 *
 * Usage: stress_threads [threads [iterations [parts]]]: by default 4, 3000
 * and all three parts ("123"), a fraction of a second, and a few seconds
 * under ThreadSanitizer. Prints one line of figures; exits 1 on a wrong
 * value (a crash or a sanitizer's report fails it too). */
#include <tapegrad.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    N = 8,
    D = 16,
    K = 8,
    VARIANTS = 4,
    QUEUE = 16,
    EXIT_ROUNDS = 40,
    EXIT_TENSORS = 16
};

static int n_threads = 4, iters = 3000;
static atomic_int failures;

static void fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&failures, 1) >= 10)
        return; /* ten messages say enough */
    va_list ap;
    va_start(ap, fmt);
    fputs("stress_threads: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- 1. shared inputs -------------------------------------------------- */

/* Read by every thread, written by none: made before the threads start. */
static tg_tensor *x;      /* (N,D) the dataset */
static tg_tensor *bias;   /* (K,)  frozen */
static tg_tensor *target; /* (N,K) frozen */
static double v_init[D * K];

/* What variant k computes, from the main thread. */
static struct {
    double loss;
    double dv[D * K];
} want[VARIANTS];

/* loss = sum(softmax((x @ v + bias) * (0.5 + k), -1) * target)
 *      + sum((x[k] @ v)^2)
 * into v's gradient; returns the loss (NAN on an error). */
static double step(tg_tensor *v, int k)
{
    tg_scope_begin();
    tg_tensor *z = tg_add(tg_matmul(x, v), bias);
    tg_tensor *p = tg_softmax(tg_scale(z, 0.5 + k), -1);
    tg_tensor *q = tg_matmul(tg_select(x, 0, k), v); /* a view of x */
    tg_tensor *loss =
        tg_add(tg_sum_all(tg_mul(p, target)), tg_sum_all(tg_mul(q, q)));
    double value = loss && tg_backward(loss) == 0 ? tg_item(loss) : NAN;
    tg_scope_end();
    return value;
}

static tg_tensor *new_leaf(void)
{
    tg_tensor *v = tg_from_data(TG_FLOAT64, TG_SHAPE(D, K), v_init);
    tg_set_requires_grad(v, true);
    return v;
}

static void *shared_inputs(void *arg)
{
    int id = (int)(intptr_t)arg;
    bool odd = id % 2;
    tg_set_anomaly_mode(odd);
    tg_tensor *v = new_leaf();
    double dv[D * K];
    for (int it = 0; it < iters; it++) {
        if (odd) { /* grad mode off here, and on in the other threads */
            bool was = tg_set_grad_enabled(false);
            tg_tensor *y = tg_matmul(x, v);
            if (!y || tg_requires_grad(y))
                fail("shared inputs: thread %d recorded with grad mode off",
                     id);
            tg_release(y);
            tg_set_grad_enabled(was);
        }
        int k = (id + it) % VARIANTS;
        double loss = step(v, k);
        if (tg_copy_out(tg_grad(v), TG_FLOAT64, dv) != 0 ||
            memcmp(&loss, &want[k].loss, sizeof loss) != 0 ||
            memcmp(dv, want[k].dv, sizeof dv) != 0) {
            fail("shared inputs: thread %d, iteration %d: loss %.17g, want "
                 "%.17g, or a gradient differs (%s)",
                 id, it, loss, want[k].loss, tg_last_error());
            break;
        }
        tg_zero_grad(v);
    }
    if (tg_tape_size() != 0)
        fail("shared inputs: thread %d ends with %lld entries on its tape", id,
             (long long)tg_tape_size());
    tg_release(v);
    /* the last error is this thread's own */
    char index[32];
    snprintf(index, sizeof index, "index %d ", N + id);
    if (tg_select(x, 0, N + id) || !strstr(tg_last_error(), index))
        fail("shared inputs: thread %d's last error is '%s'", id,
             tg_last_error());
    return NULL;
}

static void run_shared_inputs(void)
{
    pthread_t th[64];
    for (intptr_t t = 0; t < n_threads; t++)
        pthread_create(&th[t], NULL, shared_inputs, (void *)t);
    for (int t = 0; t < n_threads; t++)
        pthread_join(th[t], NULL);
    printf("  1. shared inputs: %d threads x %d iterations\n", n_threads,
           iters);
}

/* ---- 2. release across threads ----------------------------------------- */

/* A producer's tensors on their way to its consumer: a bounded queue. */
typedef struct pair {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    tg_tensor *slot[QUEUE];
    int head, count;
    int id;
} pair;

static void push(pair *q, tg_tensor *t)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == QUEUE)
        pthread_cond_wait(&q->changed, &q->lock);
    q->slot[(q->head + q->count++) % QUEUE] = t;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
}

static tg_tensor *pop(pair *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == 0)
        pthread_cond_wait(&q->changed, &q->lock);
    tg_tensor *t = q->slot[q->head];
    q->head = (q->head + 1) % QUEUE;
    q->count--;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
    return t;
}

/* Hands over y = v * it, each with an entry on this thread's tape (v
 * requires grad), then records and backpropagates a graph of its own. y is
 * made in a scope: every other one leaves it with the scope's reference
 * (tg_keep); the others get a reference of the consumer's own, while the
 * scope keeps its one until its end, so either thread may free y. */
static void *producer(void *arg)
{
    pair *q = arg;
    tg_tensor *v = new_leaf();
    double dv[D * K];
    for (int it = 0; it < iters; it++) {
        tg_scope_begin();
        tg_tensor *y = tg_scale(v, it);
        push(q, it % 2 ? tg_retain(y) : tg_keep(y));
        int k = it % VARIANTS;
        double loss = step(v, k);
        tg_scope_end();
        if (tg_copy_out(tg_grad(v), TG_FLOAT64, dv) != 0 ||
            memcmp(&loss, &want[k].loss, sizeof loss) != 0 ||
            memcmp(dv, want[k].dv, sizeof dv) != 0) {
            fail("release across threads: producer %d, iteration %d: loss "
                 "%.17g, want %.17g, or a gradient differs",
                 q->id, it, loss, want[k].loss);
            break;
        }
        tg_zero_grad(v);
    }
    push(q, NULL);
    tg_release(v);
    return NULL;
}

static void *consumer(void *arg)
{
    pair *q = arg;
    tg_tensor *y;
    for (int it = 0; (y = pop(q)); it++) {
        double got = tg_get(y, (const int64_t[]){D - 1, K - 1});
        if (got != v_init[D * K - 1] * it || !tg_requires_grad(y))
            fail("release across threads: consumer %d, tensor %d holds %g, "
                 "want %g",
                 q->id, it, got, v_init[D * K - 1] * it);
        tg_release(y); /* maybe the last: its entry is on another tape */
        if (tg_tape_size() != 0)
            fail("release across threads: consumer %d's tape has %lld "
                 "entries, and it recorded none",
                 q->id, (long long)tg_tape_size());
    }
    return NULL;
}

static void run_release_across_threads(void)
{
    pthread_t th[64];
    pair pairs[32];
    int n_pairs = n_threads / 2;
    for (int p = 0; p < n_pairs; p++) {
        pthread_mutex_init(&pairs[p].lock, NULL);
        pthread_cond_init(&pairs[p].changed, NULL);
        pairs[p].head = pairs[p].count = 0;
        pairs[p].id = p;
        pthread_create(&th[2 * p], NULL, producer, &pairs[p]);
        pthread_create(&th[2 * p + 1], NULL, consumer, &pairs[p]);
    }
    for (int t = 0; t < 2 * n_pairs; t++)
        pthread_join(th[t], NULL);
    for (int p = 0; p < n_pairs; p++) {
        pthread_mutex_destroy(&pairs[p].lock);
        pthread_cond_destroy(&pairs[p].changed);
    }
    printf("  2. release across threads: %d pairs x %d hand-overs\n", n_pairs,
           iters);
}

/* ---- 3. entries outliving their thread --------------------------------- */

typedef struct handed {
    int id;
    tg_tensor *out[EXIT_TENSORS];
} handed;

static void *record_and_exit(void *arg)
{
    handed *h = arg;
    tg_tensor *v = new_leaf();
    for (int i = 0; i < EXIT_TENSORS; i++)
        h->out[i] = tg_scale(v, h->id + i);
    if (tg_tape_size() != EXIT_TENSORS)
        fail("thread exit: thread %d has %lld entries on its tape, want %d",
             h->id, (long long)tg_tape_size(), EXIT_TENSORS);
    tg_release(v); /* the entries hold it */
    return NULL;
}

/* The main thread keeps an entry of its own on its tape throughout, and
 * releases the others' newest first, thread by thread in turn: no order the
 * tapes' lists would survive by luck if the entries were unlinked from the
 * main thread's tape. */
static void entries_outlive_threads(void)
{
    pthread_t th[64];
    handed h[64];
    tg_tensor *v = new_leaf();
    tg_tensor *mine = tg_scale(v, 2);
    for (int round = 0; round < EXIT_ROUNDS; round++) {
        for (int t = 0; t < n_threads; t++) {
            h[t].id = t;
            pthread_create(&th[t], NULL, record_and_exit, &h[t]);
        }
        for (int t = 0; t < n_threads; t++)
            pthread_join(th[t], NULL);
        for (int i = EXIT_TENSORS - 1; i >= 0; i--)
            for (int t = 0; t < n_threads; t++) {
                double got = tg_get(h[t].out[i], (const int64_t[]){0, 0});
                if (got != v_init[0] * (t + i))
                    fail("thread exit: tensor %d of thread %d holds %g, want "
                         "%g",
                         i, t, got, v_init[0] * (t + i));
                tg_release(h[t].out[i]); /* its thread's tape is gone */
            }
        tg_release(tg_scale(v, round)); /* an entry in and out of ours */
        if (tg_tape_size() != 1)
            fail("thread exit: the main thread's tape has %lld entries, want "
                 "1",
                 (long long)tg_tape_size());
    }
    tg_release(mine);
    tg_release(v);
    if (tg_tape_size() != 0)
        fail("thread exit: the main thread's tape has %lld entries, want 0",
             (long long)tg_tape_size());
    printf("  3. entries outliving their thread: %d rounds x %d threads x %d "
           "entries\n",
           EXIT_ROUNDS, n_threads, EXIT_TENSORS);
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc > 1)
        n_threads = atoi(argv[1]);
    if (argc > 2)
        iters = atoi(argv[2]);
    const char *parts = argc > 3 ? argv[3] : "123";
    if (n_threads < 2 || n_threads > 64 || iters < 1) {
        fprintf(stderr, "usage: stress_threads [threads 2..64 [iterations "
                        "[parts, e.g. 13]]]\n");
        return 2;
    }
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(N, D));
    bias = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(K));
    target = tg_rand(&rng, TG_FLOAT64, TG_SHAPE(N, K));
    for (int i = 0; i < D * K; i++)
        v_init[i] = 0.25 * tg_rng_normal(&rng);

    tg_tensor *v = new_leaf();
    for (int k = 0; k < VARIANTS; k++) {
        want[k].loss = step(v, k);
        if (tg_copy_out(tg_grad(v), TG_FLOAT64, want[k].dv) != 0) {
            fprintf(stderr, "stress_threads: reference: %s\n", tg_last_error());
            return 1;
        }
        tg_zero_grad(v);
    }
    tg_release(v);

    if (strchr(parts, '1'))
        run_shared_inputs();
    if (strchr(parts, '2'))
        run_release_across_threads();
    if (strchr(parts, '3'))
        entries_outlive_threads();

    tg_release(x);
    tg_release(bias);
    tg_release(target);
    int64_t live = tg_live_tensors(); /* -1 unless TG_DEBUG_LEAKS=1 */
    if (live > 0)
        fail("%lld tensors are still alive at the end", (long long)live);
    int failed = atomic_load(&failures);
    printf("stress_threads: %s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
