/* Soak: many training steps of one causal attention head, watching memory.
 *
 * Each step, inside tg_scope_begin / tg_scope_end:
 *   out  = head(x)                                  (B,T,C) -> (B,T,hs)
 *   loss = mean((out - target)^2)                   ()
 *   backward, AdamW step, zero_grad
 * with x and target fixed (float32, drawn once). Every --every steps it
 * samples the current resident set from /proc/self/statm (not the peak),
 * the tape size and, with TG_DEBUG_LEAKS=1, the number of live tensors.
 *
 * It fails (exit 1) when the last sample's anonymous RSS exceeds the first
 * sample after warm-up (step --every, default 1,000) by more than 1%, when
 * the tape is not empty between steps, or when the live-tensor count moves.
 * Anonymous RSS is statm's resident minus shared: the heap and stacks, where
 * a leak shows. The file-backed rest is the library's and libc's code,
 * faulted in page by page the first time a rare path runs (free's heap
 * trimming, say), which moves total RSS by 64 KiB at an unpredictable step
 * although nothing leaks; at ~5 MiB total that alone is over 1%. Both are
 * printed.
 *
 *     ./bench/soak [--steps N] [--every N]            (default 100000, 1000)
 */
#include <tapegrad.h>
#include <tapegrad_nn.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { B = 4, T = 8, C = 32, HS = 16 };

typedef struct {
    long step;
    long rss_kib, anon_kib; /* resident; resident - shared */
    int64_t tape;
    int64_t live; /* -1: audit off */
} sample;

/* The resident set and its anonymous part in KiB, from /proc/self/statm
 * (size resident shared ..., in pages); -1 each when it cannot be read. */
static void read_rss(long *rss_kib, long *anon_kib)
{
    long size, resident, shared, page_kib = sysconf(_SC_PAGESIZE) / 1024;
    FILE *f = fopen("/proc/self/statm", "r");
    int n = f ? fscanf(f, "%ld %ld %ld", &size, &resident, &shared) : 0;
    if (f)
        fclose(f);
    *rss_kib = n == 3 ? resident * page_kib : -1;
    *anon_kib = n == 3 ? (resident - shared) * page_kib : -1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: soak [--steps N] [--every N]\n"
            "  Trains one causal attention head (float32, B=%d T=%d C=%d "
            "hs=%d, MSE, AdamW)\n"
            "  for --steps steps (default 100000), sampling RSS, tape size "
            "and live tensors\n"
            "  (TG_DEBUG_LEAKS=1) every --every steps (default 1000). Fails "
            "when the last\n"
            "  anonymous RSS (statm resident - shared) exceeds the first "
            "sample by more\n"
            "  than 1%%, when the tape is not empty between steps, or when the "
            "live tensor\n"
            "  count moves.\n",
            B, T, C, HS);
}

/* A positive long from a command-line argument, or -1. */
static long parse_count(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v <= 0)
        return -1;
    return v;
}

/* One training step; returns the loss, or NAN on error. */
static double train_step(tg_head *head, tg_optim *opt, tg_tensor *x,
                         tg_tensor *target)
{
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(head, x);
    tg_tensor *loss = tg_mse_loss(out, target);
    double value = loss ? tg_item(loss) : NAN;
    if (tg_backward(loss) < 0 || tg_optim_step(opt) < 0)
        value = NAN;
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return value;
}

int main(int argc, char **argv)
{
    long steps = 100000, every = 1000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        long *dst = !strcmp(argv[i], "--steps")   ? &steps
                    : !strcmp(argv[i], "--every") ? &every
                                                  : NULL;
        if (!dst || i + 1 == argc || (*dst = parse_count(argv[++i])) < 0) {
            usage(stderr);
            return 2;
        }
    }
    if (steps < 2 * every) {
        fprintf(stderr, "soak: --steps must be at least twice --every\n");
        return 2;
    }

    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_head head;
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(B, T, C));
    tg_tensor *target = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(B, T, HS));
    tg_optim *opt = NULL;
    if (tg_head_init(&head, TG_FLOAT32, C, HS, &rng) == 0 &&
        tg_head_params(&head, &ps, "head") == 0)
        opt = tg_optim_new(&ps, tg_adamw_config(1e-3, 0.01));
    if (!x || !target || !opt) {
        fprintf(stderr, "soak: setup failed: %s\n", tg_last_error());
        return 1;
    }

    long n_samples = steps / every;
    /* Written through before step 1 (with "not sampled", -1: zeros would
     * let the compiler make this a calloc), so that filling it in does not
     * count as growth: fresh pages are not resident until touched. */
    sample *samples = malloc((size_t)n_samples * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "soak: out of memory\n");
        return 1;
    }
    for (long i = 0; i < n_samples; i++)
        samples[i] = (sample){-1, -1, -1, -1, -1};
    int ok = 1;
    double first_loss = NAN, loss = NAN;
    long rss, anon;
    read_rss(&rss, &anon); /* the first fopen's stdio buffers, before step 1 */
    double t0 = now_seconds();
    for (long step = 1; step <= steps && ok; step++) {
        loss = train_step(&head, opt, x, target);
        if (step == 1)
            first_loss = loss;
        if (isnan(loss)) {
            fprintf(stderr, "soak: step %ld failed: %s\n", step,
                    tg_last_error());
            ok = 0;
        }
        if (step % every == 0) {
            read_rss(&rss, &anon);
            samples[step / every - 1] =
                (sample){step, rss, anon, tg_tape_size(), tg_live_tensors()};
        }
    }
    double seconds = now_seconds() - t0;
    if (!ok)
        n_samples = 0;

    /* Six samples to a line, each step:rss/anon/tape/live. */
    printf("soak: %ld steps of one head (B=%d T=%d C=%d hs=%d float32, "
           "MSE, AdamW) in %.1f s (%.1f us/step)\n",
           steps, B, T, C, HS, seconds, seconds * 1e6 / (double)steps);
    printf("loss %.6g -> %.6g\n", first_loss, loss);
    printf("samples, step:rss_kib/anon_kib/tape/live (live -1: "
           "TG_DEBUG_LEAKS off):\n");
    for (long i = 0; i < n_samples; i++)
        printf("%s%ld:%ld/%ld/%lld/%lld%s", i % 6 ? " " : "  ", samples[i].step,
               samples[i].rss_kib, samples[i].anon_kib,
               (long long)samples[i].tape, (long long)samples[i].live,
               i % 6 == 5 || i == n_samples - 1 ? "\n" : "");

    /* The verdict: the first sample (step `every`) is the baseline. */
    if (ok) {
        const sample *base = &samples[0], *last = &samples[n_samples - 1];
        printf("rss:  %ld KiB at step %ld, %ld KiB at step %ld (%+.2f%%)\n",
               base->rss_kib, base->step, last->rss_kib, last->step,
               100.0 * (double)(last->rss_kib - base->rss_kib) /
                   (double)base->rss_kib);
        double growth = 100.0 * (double)(last->anon_kib - base->anon_kib) /
                        (double)base->anon_kib;
        printf("anon: %ld KiB at step %ld, %ld KiB at step %ld (%+.2f%%, "
               "limit +1%%)\n",
               base->anon_kib, base->step, last->anon_kib, last->step, growth);
        if (base->anon_kib <= 0 || growth > 1.0) {
            printf("FAIL: anonymous resident memory grew\n");
            ok = 0;
        }
        for (long i = 0; i < n_samples; i++) {
            if (samples[i].tape != 0) {
                printf("FAIL: %lld tape entries alive after step %ld\n",
                       (long long)samples[i].tape, samples[i].step);
                ok = 0;
                break;
            }
            if (samples[i].live != base->live) {
                printf("FAIL: %lld live tensors at step %ld, %lld at step "
                       "%ld\n",
                       (long long)samples[i].live, samples[i].step,
                       (long long)base->live, base->step);
                ok = 0;
                break;
            }
        }
    }
    free(samples);
    tg_optim_free(opt);
    tg_params_free(&ps);
    tg_head_free(&head);
    tg_release(x);
    tg_release(target);
    if (ok)
        printf("ok\n");
    return ok ? 0 : 1;
}
