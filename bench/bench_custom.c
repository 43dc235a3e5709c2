/* bench_custom: what one call of a custom op (tg_custom) costs beyond the
 * built-in op it wraps. One step, the same in bench/peer_torch_custom.py:
 *     y = 2 x                 x float32 of n elements, requires grad
 *     loss = sum(y); backward (dx = 2 dy); drop x's gradient
 * done two ways:
 *     builtin  y = tg_scale(x, 2), the op's own backward
 *     custom   y = tg_custom1(&twice, ...), whose forward is tg_scale(x, 2)
 *              and whose backward is tg_scale(dy, 2): the same kernels, so
 *              the difference is the custom op's fixed cost (its context,
 *              the calls into the user's functions, the entry under the
 *              op's own name)
 * for each n of --sizes: at a small n that fixed cost is most of the step,
 * at a large one the kernels hide it.
 *
 * A step at small n takes a microsecond or two, too short to time alone:
 * the steps are timed in samples of `batch` steps (batch chosen so a
 * sample lasts about SAMPLE_MS), and the two ways alternate sample by
 * sample, so that the load of a shared machine, which comes and goes in
 * phases, falls on both alike. A way's figure is the median of its
 * samples, per step.
 *
 * Output: one line of key=value fields per size and way, on stdout
 * (bench/run.sh joins them):
 *     bench impl=tapegrad variant=custom-op n=16 path=builtin dtype=f32
 *     threads=1 batch=... samples=... median_ms=... min_ms=... max_ms=...
 *     cpu_ms=...
 * all per step (ms, to the nanosecond); cpu_ms is the median CPU time of
 * the process per step. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <tapegrad.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

enum { MAX_SIZES = 16, MIN_SAMPLES = 3, MAX_SAMPLES = 100000 };
/* A sample's length: long against the clock's cost and resolution, short
 * against the load's phases (a second or two), so that most samples fall
 * within one phase and the median picks the common one. */
#define SAMPLE_MS 0.2

typedef struct options {
    int64_t sizes[MAX_SIZES];
    int n_sizes;
    int threads;
    double seconds;        /* timed budget for every size and both ways */
    double warmup_seconds; /* per size and way, after at least 2 steps */
} options;

enum path { BUILTIN, CUSTOM, N_PATHS };
static const char *const path_names[N_PATHS] = {"builtin", "custom"};

/* ---- the custom op: y = 2 x through the public op, dx = 2 dy ---------- */

/* Both run with grad mode off (tg_custom turns it off around them), so
 * tg_scale records nothing here: the tape holds the one custom entry. */
static int twice_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    (void)c;
    y[0] = tg_scale(x[0], 2);
    return y[0] ? 0 : -1;
}

static int twice_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                          tg_tensor **dx)
{
    if (!tg_custom_needs_grad(c, 0))
        return 0;
    dx[0] = tg_scale(dy[0], 2);
    return dx[0] ? 0 : -1;
}

static const tg_custom_op twice = {"twice",        1,    1,    twice_forward,
                                   twice_backward, NULL, false};

/* One step the path's way; the scope frees y and the loss, and x's
 * gradient is dropped, as PyTorch's peer sets x.grad = None, so that each
 * step allocates the same. 0 or -1. */
static int step(tg_tensor *x, enum path path)
{
    tg_scope_begin();
    tg_tensor *y = path == CUSTOM ? tg_custom1(&twice, NULL, (tg_tensor *[]){x})
                                  : tg_scale(x, 2);
    tg_tensor *loss = y ? tg_sum_all(y) : NULL;
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    tg_zero_grad(x);
    tg_scope_end();
    return rc;
}

/* ---- the timing ------------------------------------------------------- */

typedef struct samples {
    int n;
    double *ms, *cpu; /* per step, one value a sample */
} samples;

/* Warms the path up (at least 2 steps and o->warmup_seconds) and returns
 * its shortest step after the first in ms, or -1: the shortest, not the
 * mean, since on a loaded machine a step the process waited through for a
 * core would make the mean, and so the batch, much off. */
static double warm_up(tg_tensor *x, enum path path, const options *o)
{
    double start = now_ms(), shortest = -1;
    for (int steps = 0; steps < 2 || now_ms() - start < o->warmup_seconds * 1e3;
         steps++) {
        double t0 = now_ms();
        if (step(x, path) < 0)
            return -1;
        double ms = now_ms() - t0;
        if (steps > 0 && (shortest < 0 || ms < shortest))
            shortest = ms;
    }
    return shortest;
}

/* One sample of batch steps into s. 0 or -1. */
static int sample(tg_tensor *x, enum path path, int batch, samples *s)
{
    double c0 = cpu_ms(), t0 = now_ms();
    for (int i = 0; i < batch; i++)
        if (step(x, path) < 0)
            return -1;
    s->ms[s->n] = (now_ms() - t0) / batch;
    s->cpu[s->n] = (cpu_ms() - c0) / batch;
    s->n++;
    return 0;
}

/* Prints the path's line for size n from its samples (sorted here). */
static void report(int64_t n, enum path path, int batch, samples *s,
                   const options *o)
{
    qsort(s->ms, (size_t)s->n, sizeof *s->ms, by_value);
    qsort(s->cpu, (size_t)s->n, sizeof *s->cpu, by_value);
    printf("bench impl=tapegrad variant=custom-op n=%lld path=%s dtype=f32 "
           "threads=%d batch=%d samples=%d median_ms=%.6f min_ms=%.6f "
           "max_ms=%.6f cpu_ms=%.6f\n",
           (long long)n, path_names[path], o->threads, batch, s->n,
           median(s->ms, s->n), s->ms[0], s->ms[s->n - 1],
           median(s->cpu, s->n));
}

/* Times both paths at size n, alternating samples within n's share of the
 * budget, and prints their lines. 0 or -1. */
static int run_size(int64_t n, const options *o, samples s[N_PATHS])
{
    tg_rng rng;
    tg_rng_seed(&rng, 1234);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(n));
    if (!x)
        return -1;
    tg_set_requires_grad(x, true);
    /* one batch for both, from the slower path, so that their samples
     * last alike and neither is shorter than SAMPLE_MS */
    double step_ms = 0;
    for (int p = 0; p < N_PATHS; p++) {
        double ms = warm_up(x, (enum path)p, o);
        if (ms < 0) {
            tg_release(x);
            return -1;
        }
        step_ms = ms > step_ms ? ms : step_ms;
    }
    int batch = step_ms >= SAMPLE_MS ? 1 : (int)(SAMPLE_MS / step_ms) + 1;
    double budget_ms = o->seconds * 1e3 / o->n_sizes, start = now_ms();
    int rc = 0;
    s[BUILTIN].n = s[CUSTOM].n = 0;
    while (rc == 0 && s[CUSTOM].n < MAX_SAMPLES &&
           (s[CUSTOM].n < MIN_SAMPLES || now_ms() - start < budget_ms))
        for (int p = 0; rc == 0 && p < N_PATHS; p++)
            rc = sample(x, (enum path)p, batch, &s[p]);
    tg_release(x);
    for (int p = 0; rc == 0 && p < N_PATHS; p++)
        report(n, (enum path)p, batch, &s[p], o);
    return rc;
}

/* ---- the options ------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_custom [--sizes N,N,...] [--seconds S]\n"
            "                    [--warmup-seconds S] [--threads N]\n"
            "\n"
            "Times one step of y = 2x, sum, backward in float32 through the\n"
            "built-in op (tg_scale) and through a custom op (tg_custom) that\n"
            "calls it, samples of the two alternating, and prints one line\n"
            "of key=value fields per size and way, in ms per step.\n"
            "\n"
            "  --sizes N,...   element counts (default 16,4096,262144)\n"
            "  --seconds S     timed budget for all of it (default 1.5)\n"
            "  --warmup-seconds S  warm-up per size and way (default 0.05)\n"
            "  --threads N     OpenMP threads (default 1)\n");
}

/* Parses a comma-separated list of positive counts into o. 0 or -1. */
static int parse_sizes(const char *v, options *o)
{
    o->n_sizes = 0;
    while (*v && o->n_sizes < MAX_SIZES) {
        char *end;
        long long n = strtoll(v, &end, 10);
        if (end == v || n < 1 || (*end && *end != ','))
            return -1;
        o->sizes[o->n_sizes++] = n;
        v = *end ? end + 1 : end;
    }
    return *v || o->n_sizes == 0 ? -1 : 0;
}

/* Parses argv into o. Returns 0 to run, 1 after --help, -1 on a bad
 * argument (printed). */
static int parse(int argc, char **argv, options *o)
{
    *o = (options){.sizes = {16, 4096, 262144},
                   .n_sizes = 3,
                   .threads = 1,
                   .seconds = 1.5,
                   .warmup_seconds = 0.05};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double num = v ? positive(v) : 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!v) {
            fprintf(stderr, "bench_custom: %s needs a value (or is unknown)\n",
                    a);
            return -1;
        } else if (!strcmp(a, "--sizes")) {
            if (parse_sizes(v, o) < 0) {
                fprintf(stderr,
                        "bench_custom: --sizes wants up to %d "
                        "positive counts, comma-separated\n",
                        MAX_SIZES);
                return -1;
            }
        } else if (!timing_option(a, num, &o->threads, &o->seconds,
                                  &o->warmup_seconds)) {
            fprintf(stderr,
                    "bench_custom: bad option or value: %s %s "
                    "(--help)\n",
                    a, v);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 2 : 0;
#ifdef _OPENMP
    omp_set_num_threads(o.threads);
#endif
    samples s[N_PATHS];
    for (int p = 0; p < N_PATHS; p++) {
        s[p].ms = malloc(MAX_SAMPLES * sizeof *s[p].ms);
        s[p].cpu = malloc(MAX_SAMPLES * sizeof *s[p].cpu);
        rc = s[p].ms && s[p].cpu ? rc : -1;
    }
    for (int i = 0; rc == 0 && i < o.n_sizes; i++)
        rc = run_size(o.sizes[i], &o, s);
    if (rc < 0)
        fprintf(stderr, "bench_custom: %s\n",
                *tg_last_error() ? tg_last_error() : "out of memory");
    for (int p = 0; p < N_PATHS; p++) {
        free(s[p].ms);
        free(s[p].cpu);
    }
    return rc < 0 ? 1 : 0;
}
