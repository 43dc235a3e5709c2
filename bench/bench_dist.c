/* bench_dist: data-parallel training steps (tapegrad_dist.h) per second,
 * one configuration per run; started alone (one rank) or under `mpirun -np
 * N` (bench/bench_dist.sh runs the table of `make bench-dist`).
 *
 * The models, each on a global batch split over the ranks (tg_dist_shard):
 *   head  bench_head's "large" attention head, (B,T,C,hs) = (32,256,384,64)
 *         float32: loss = mean((head(x) - target)^2), AdamW (lr 1e-3, wd
 *         0.01), as bench/bench_head.c's step; x and target drawn once
 *   gpt   examples/tiny_gpt's default model (2 blocks, 4 heads, n_embd 64,
 *         block 32, vocabulary 76, float32) on 32 windows: loss =
 *         cross_entropy(gpt(ids), targets), AdamW (lr 2e-3, wd 0.01), as
 *         bench/bench_gpt.c's step; ids drawn once
 * The gradients are averaged over the ranks by tg_ddp_backward (--allreduce
 * overlap: the all-reduce of a bucket runs while backward computes the
 * next) or by tg_dist_allreduce_grads after tg_backward (--allreduce
 * blocking). Every step is timed alone after a warm-up.
 *
 * Output (rank 0): one line of key=value fields:
 *     bench_dist model=head ranks=2 threads=1 allreduce=overlap
 *     bucket_kb=... steps=... median_ms=... cpu_ms=... steps_per_s=...
 *     backward_ms=...
 *     wait_ms=... wait_share=... grad_bytes=... buckets=...
 * backward_ms: the mean time per step in backward (tg_backward, or the
 * backward inside tg_ddp_backward: tg_ddp_get_stats' backward_s per step);
 * wait_ms: the mean time per step spent waiting for the all-reduce after
 * backward (tg_ddp_get_stats' wait_s, or the whole blocking
 * tg_dist_allreduce_grads call: with it the wait for a slower rank to
 * arrive); wait_share: the waits' sum over the steps' sum, in per cent.
 * early (tg_ddp only): buckets per step whose all-reduce had finished
 * before that wait, i.e. moved its data while backward ran.
 * backward_cpu_ms: the process's CPU time per step in backward (blocking
 * only; 0 with tg_ddp). cpu_ms: rank 0's CPU time per step (all its threads; with MPI its
 * polling while it waits too). The figures are rank 0's (the ranks meet every step, so their step
 * times agree). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <tapegrad_dist.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sizes.h"

typedef struct options {
    const char *model; /* "head" or "gpt" */
    bool overlap;
    int bucket_kb, steps, warmup;
} options;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (every thread): on a shared machine the
 * steadier measure, as it leaves out the time spent waiting for a core. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The model of one run, its parameters and its (sharded) data. */
typedef struct bench {
    tg_head head;
    tg_gpt gpt;
    bool is_gpt;
    tg_params ps;
    tg_optim *adamw;
    tg_tensor *x, *y; /* this rank's rows of the global batch */
} bench;

/* The model from seed 1337 on every rank, the data drawn whole (the same
 * on every rank) and cut to this rank's rows. 0 or -1. */
static int bench_init(bench *b, tg_dist *d, const options *o)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_params_init(&b->ps);
    b->is_gpt = !strcmp(o->model, "gpt");
    tg_tensor *x = NULL, *y = NULL;
    double lr;
    if (b->is_gpt) {
        tg_gpt_config cfg = {.vocab_size = 76,
                             .block_size = 32,
                             .n_embd = 64,
                             .n_head = 4,
                             .n_layer = 2,
                             .gelu = true,
                             .dtype = TG_FLOAT32,
                             .bias = TG_GPT_BIAS_LINEAR};
        if (tg_gpt_init(&b->gpt, cfg, &rng) < 0 ||
            tg_gpt_params(&b->gpt, &b->ps, NULL) < 0)
            return -1;
        x = tg_randint(&rng, 0, 76, TG_SHAPE(32, 32));
        y = tg_randint(&rng, 0, 76, TG_SHAPE(32, 32));
        lr = 2e-3;
    } else {
        const size_config *s = &sizes[3]; /* "large" */
        if (tg_head_init(&b->head, TG_FLOAT32, s->C, s->hs, &rng) < 0 ||
            tg_head_params(&b->head, &b->ps, "head") < 0)
            return -1;
        x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(s->B, s->T, s->C));
        y = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(s->B, s->T, s->hs));
        lr = 1e-3;
    }
    b->adamw = tg_optim_new(&b->ps, tg_adamw_config(lr, 0.01));
    /* contiguous copies of this rank's rows */
    tg_scope_begin();
    tg_tensor *xs = x ? tg_dist_shard_rows(d, x, TG_SHARD_CONTIGUOUS) : NULL;
    tg_tensor *ys = y ? tg_dist_shard_rows(d, y, TG_SHARD_CONTIGUOUS) : NULL;
    b->x = xs ? tg_retain(tg_contiguous(xs)) : NULL;
    b->y = ys ? tg_retain(tg_contiguous(ys)) : NULL;
    tg_scope_end();
    tg_release(x);
    tg_release(y);
    return b->adamw && b->x && b->y ? 0 : -1;
}

static void bench_free(bench *b)
{
    tg_release(b->x);
    tg_release(b->y);
    tg_optim_free(b->adamw);
    tg_params_free(&b->ps);
    if (b->is_gpt)
        tg_gpt_free(&b->gpt);
    else
        tg_head_free(&b->head);
}

/* One step; the time in backward and in the blocking all-reduce are added
 * to *backward_s and *wait_s, and backward's CPU time to *backward_cpu_s
 * (blocking only: tg_ddp keeps its own). */
static int step(bench *b, tg_dist *d, tg_ddp *ddp, double *backward_s,
                double *wait_s, double *backward_cpu_s)
{
    tg_scope_begin();
    tg_tensor *loss = b->is_gpt
                          ? tg_gpt_loss(&b->gpt, b->x, b->y)
                          : tg_mse_loss(tg_head_forward(&b->head, b->x), b->y);
    int rc;
    if (ddp)
        rc = tg_ddp_backward(ddp, loss);
    else {
        double t0 = now_s(), c0 = cpu_s();
        rc = tg_dist_agree(d, loss && tg_backward(loss) == 0 ? 0 : -1);
        double t1 = now_s();
        *backward_cpu_s += cpu_s() - c0;
        if (rc == 0)
            rc = tg_dist_allreduce_grads(d, &b->ps);
        *backward_s += t1 - t0;
        *wait_s += now_s() - t1;
    }
    if (rc == 0)
        rc = tg_dist_agree(d, tg_optim_step(b->adamw));
    tg_optim_zero_grad(b->adamw);
    tg_scope_end();
    return rc;
}

static int run(tg_dist *d, const options *o)
{
    bench b = {0};
    tg_ddp *ddp = NULL;
    double *ms = malloc((size_t)o->steps * sizeof *ms);
    int rc = tg_dist_agree(d, ms && bench_init(&b, d, o) == 0 ? 0 : -1);
    if (rc == 0 && tg_dist_broadcast_params(d, &b.ps) < 0)
        rc = -1;
    if (rc == 0 && o->overlap &&
        !(ddp = tg_ddp_new(d, &b.ps, (size_t)o->bucket_kb * 1024)))
        rc = -1;
    double bw = 0, wait = 0, bw_cpu = 0;
    for (int i = 0; rc == 0 && i < o->warmup; i++)
        rc = step(&b, d, ddp, &bw, &wait, &bw_cpu);
    tg_ddp_stats s0 = {0}, s1 = {0};
    if (ddp)
        tg_ddp_get_stats(ddp, &s0);
    bw = wait = bw_cpu = 0;
    double total = 0, cpu0 = cpu_s();
    for (int i = 0; rc == 0 && i < o->steps; i++) {
        double t0 = now_s();
        rc = step(&b, d, ddp, &bw, &wait, &bw_cpu);
        ms[i] = 1e3 * (now_s() - t0);
        total += ms[i] / 1e3;
    }
    double cpu_ms = 1e3 * (cpu_s() - cpu0) / o->steps;
    if (rc == 0) {
        int64_t bytes = 0, buckets = 0;
        if (ddp) {
            tg_ddp_get_stats(ddp, &s1);
            bw = s1.backward_s - s0.backward_s;
            wait = s1.wait_s - s0.wait_s;
            bytes = s1.bytes;
            buckets = s1.buckets;
        } else
            for (int i = 0; i < b.ps.n; i++)
                bytes += tg_numel(b.ps.items[i].t) * 4;
        qsort(ms, (size_t)o->steps, sizeof *ms, by_value);
        int n = o->steps;
        double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
        double wait_ms = 1e3 * wait / n, bw_ms = 1e3 * bw / n;
        printf(
            "bench_dist model=%s ranks=%d threads=%s allreduce=%s "
            "bucket_kb=%d steps=%d median_ms=%.3f cpu_ms=%.3f steps_per_s=%.3f "
            "backward_ms=%.3f backward_cpu_ms=%.3f wait_ms=%.3f "
            "wait_share=%.2f early=%.2f "
            "grad_bytes=%lld buckets=%lld params=%lld\n",
            o->model, tg_dist_size(d),
            getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "?",
            o->overlap ? "overlap" : "blocking", o->bucket_kb, n, med, cpu_ms,
            1e3 / med, bw_ms, 1e3 * bw_cpu / n, wait_ms, 100 * wait / total,
            (double)(s1.early - s0.early) / n, (long long)bytes,
            (long long)buckets, (long long)tg_params_numel(&b.ps));
    }
    tg_ddp_free(ddp);
    bench_free(&b);
    free(ms);
    return rc;
}

int main(int argc, char **argv)
{
    tg_dist *d = tg_dist_init(&argc, &argv);
    if (!d) {
        fprintf(stderr, "bench_dist: %s\n", tg_last_error());
        return 1;
    }
    if (tg_dist_rank(d) > 0 && !freopen("/dev/null", "w", stdout))
        return 1;
    options o = {"head", true, 0, 20, 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            o.model = argv[++i];
        else if (!strcmp(a, "--allreduce") && v)
            o.overlap = strcmp(argv[++i], "blocking") != 0;
        else if (!strcmp(a, "--bucket-kb") && v)
            o.bucket_kb = atoi(argv[++i]);
        else if (!strcmp(a, "--steps") && v)
            o.steps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && v)
            o.warmup = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: [mpirun -np N] bench_dist [--model head|gpt] "
                    "[--allreduce overlap|blocking] [--bucket-kb N] "
                    "[--steps N] [--warmup N]\n");
            tg_dist_free(d);
            return 2;
        }
    }
    if ((strcmp(o.model, "head") && strcmp(o.model, "gpt")) || o.steps < 1 ||
        o.bucket_kb < 0 || o.warmup < 0) {
        fprintf(stderr, "bench_dist: --model head|gpt, --steps >= 1, "
                        "--bucket-kb and --warmup >= 0\n");
        tg_dist_free(d);
        return 2;
    }
    int rc = run(d, &o);
    if (rc < 0)
        fprintf(stderr, "bench_dist: %s\n", tg_last_error());
    tg_dist_free(d);
    return rc < 0 ? 1 : 0;
}
