/* bench_peak: what one core of this machine can do at best, the yardsticks
 * `make bench` sets the GEMM and the step against.
 *
 * FMA peak, float32 and float64: bench/fma_peak.h (a tight loop of
 * independent FMAs on the widest vectors this CPU runs, by its CPU clock).
 *
 * Memory bandwidth: STREAM's copy (a = b) and triad (a = b + s * c) over
 * arrays of --mb MiB each (default 128, far past any cache), counted as
 * STREAM does (copy 16 bytes per element, triad 24, double), best of
 * several passes, on OMP_NUM_THREADS threads (OpenMP builds; 1 without).
 *
 * Output: one line of key=value fields on stdout:
 *     peak isa=avx2+fma fma_f32_gflops=... fma_f64_gflops=... threads=1
 *     buffer_mb=128 copy_gbs=... triad_gbs=...
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#ifdef _OPENMP
#include <omp.h>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fma_peak.h"

/* STREAM copy and triad over n doubles, best of RUNS passes each, GB/s by
 * wall time (the memory is shared; the CPU clock would hide nothing). */
static int stream(size_t n, double *copy_gbs, double *triad_gbs)
{
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b),
           *c = malloc(n * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return -1;
    }
    const int64_t len = (int64_t)n;
    /* first touch by the threads that later use the pages */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < len; i++)
        a[i] = 0, b[i] = 1, c[i] = 2;
    const double s = 3;
    *copy_gbs = *triad_gbs = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = clock_s(CLOCK_MONOTONIC);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < len; i++)
            a[i] = b[i];
        double t1 = clock_s(CLOCK_MONOTONIC);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < len; i++)
            a[i] = b[i] + s * c[i];
        double t2 = clock_s(CLOCK_MONOTONIC);
        double cp = 16.0 * (double)n / (t1 - t0) * 1e-9;
        double tr = 24.0 * (double)n / (t2 - t1) * 1e-9;
        *copy_gbs = cp > *copy_gbs ? cp : *copy_gbs;
        *triad_gbs = tr > *triad_gbs ? tr : *triad_gbs;
    }
    sink = a[n / 2];
    free(a), free(b), free(c);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_peak [--seconds S] [--mb N] [--isa NAME]\n"
            "\n"
            "Measures one core's FMA peak (float32 and float64, GFLOP/s: a\n"
            "tight loop of independent FMAs in the widest vectors cpuid\n"
            "allows) and the memory bandwidth (STREAM copy and triad, GB/s,\n"
            "on OMP_NUM_THREADS threads), and prints one line of key=value\n"
            "fields.\n"
            "\n"
            "  --seconds S  time per FMA measure (default 0.5)\n"
            "  --mb N       MiB per STREAM array, three of them (default 128)\n"
            "  --isa NAME   force a narrower kernel: avx2+fma, sse2 or "
            "scalar\n");
}

int main(int argc, char **argv)
{
    double seconds = 0.5;
    long mb = 128;
    const char *force = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        char *end = NULL;
        if (v && !strcmp(a, "--seconds") && (seconds = strtod(v, &end)) > 0 &&
            !*end)
            i++;
        else if (v && !strcmp(a, "--mb") && (mb = strtol(v, &end, 10)) > 0 &&
                 !*end)
            i++;
        else if (v && !strcmp(a, "--isa"))
            force = argv[++i];
        else {
            fprintf(stderr, "bench_peak: bad argument '%s' (--help)\n", a);
            return 2;
        }
    }
    isa k = pick_isa();
    if (force && strcmp(force, k.name)) {
        isa all[] = {
#if X86
            {"avx2+fma", fma256_f32, fma256_f64, 8},
            {"sse2", sse2_f32, sse2_f64, 4},
#endif
            {"scalar", scalar_f32, scalar_f64, 1}
        };
        int found = 0;
        for (size_t j = 0; j < sizeof all / sizeof *all && !found; j++)
            if (!strcmp(force, all[j].name))
                k = all[j], found = 1;
#if X86
        if (found && !strcmp(force, "avx2+fma") &&
            !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
            found = 0;
#endif
        if (!found) {
            fprintf(stderr, "bench_peak: --isa %s: not available here\n",
                    force);
            return 2;
        }
    }
    double f32 = fma_gflops(k.f32, k.lanes32, seconds);
    double f64 =
        fma_gflops(k.f64, k.lanes32 / 2 > 0 ? k.lanes32 / 2 : 1, seconds);
    double copy = 0, triad = 0;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    if (stream((size_t)mb << 20 >> 3, &copy, &triad) < 0) {
        fprintf(stderr, "bench_peak: out of memory for 3 x %ld MiB\n", mb);
        return 1;
    }
    printf("peak isa=%s fma_f32_gflops=%.2f fma_f64_gflops=%.2f threads=%d "
           "buffer_mb=%ld copy_gbs=%.2f triad_gbs=%.2f\n",
           k.name, f32, f64, threads, mb, copy, triad);
    return 0;
}
