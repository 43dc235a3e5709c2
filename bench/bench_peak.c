/* bench_peak: what one core of this machine can do at best, the yardsticks
 * `make bench` sets the GEMM and the step against.
 *
 * FMA peak, float32 and float64: a tight loop of independent fused
 * multiply-adds, acc_k = acc_k * m + c for K_ACC accumulators, each a full
 * vector register. An FMA's latency is ~4 cycles and a core issues up to 2
 * a cycle, so 8 or more independent chains keep both units busy; K_ACC = 12
 * leaves room. flops = 2 * lanes * K_ACC per iteration. The accumulators
 * converge to c / (1 - m) (= 1), so no value overflows or goes subnormal.
 * The kernel is compiled for AVX-512F and for AVX2+FMA with gcc target
 * attributes and chosen by cpuid at run time (__builtin_cpu_supports, which
 * also checks that the OS saves the registers); elsewhere SSE2 (a multiply
 * and an add, 2 flops, per lane) or plain C. Each is run several times and
 * the best kept, timed by the thread's CPU clock (what a core did, not how
 * long the machine made it wait).
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

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define X86 1
#else
#define X86 0
#endif

enum { K_ACC = 12, RUNS = 5 };

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Written once at the end of every kernel, so the loop is not dead code. */
static volatile double sink;

/* The kernels: iters iterations of K_ACC independent FMAs each. One body,
 * instantiated per ISA and type by the macros below. */
#define FMA_KERNEL(name, target, vec, set1, fma, add, store, T, lanes)         \
    target static void name(int64_t iters)                                     \
    {                                                                          \
        const vec m = set1((T)0.999), c = set1((T)0.001);                      \
        vec a0 = set1((T)0.5), a1 = set1((T)0.6), a2 = set1((T)0.7);           \
        vec a3 = set1((T)0.8), a4 = set1((T)0.9), a5 = set1((T)1.1);           \
        vec a6 = set1((T)1.2), a7 = set1((T)1.3), a8 = set1((T)1.4);           \
        vec a9 = set1((T)1.5), a10 = set1((T)1.6), a11 = set1((T)1.7);         \
        for (int64_t i = 0; i < iters; i++) {                                  \
            a0 = fma(a0, m, c), a1 = fma(a1, m, c), a2 = fma(a2, m, c);        \
            a3 = fma(a3, m, c), a4 = fma(a4, m, c), a5 = fma(a5, m, c);        \
            a6 = fma(a6, m, c), a7 = fma(a7, m, c), a8 = fma(a8, m, c);        \
            a9 = fma(a9, m, c), a10 = fma(a10, m, c), a11 = fma(a11, m, c);    \
        }                                                                      \
        vec s =                                                                \
            add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))); \
        s = add(s, add(add(a8, a9), add(a10, a11)));                           \
        T out[lanes];                                                          \
        store(out, s);                                                         \
        double t = 0;                                                          \
        for (int l = 0; l < (lanes); l++)                                      \
            t += out[l];                                                       \
        sink = t;                                                              \
    }

#if X86
#define AVX512 __attribute__((target("avx512f")))
#define AVX2   __attribute__((target("avx2,fma")))
#define SSE2   __attribute__((target("sse2")))
FMA_KERNEL(fma512_f32, AVX512, __m512, _mm512_set1_ps, _mm512_fmadd_ps,
           _mm512_add_ps, _mm512_storeu_ps, float, 16)
FMA_KERNEL(fma512_f64, AVX512, __m512d, _mm512_set1_pd, _mm512_fmadd_pd,
           _mm512_add_pd, _mm512_storeu_pd, double, 8)
FMA_KERNEL(fma256_f32, AVX2, __m256, _mm256_set1_ps, _mm256_fmadd_ps,
           _mm256_add_ps, _mm256_storeu_ps, float, 8)
FMA_KERNEL(fma256_f64, AVX2, __m256d, _mm256_set1_pd, _mm256_fmadd_pd,
           _mm256_add_pd, _mm256_storeu_pd, double, 4)
/* SSE2 has no FMA: a multiply then an add, the same 2 flops a lane. */
SSE2 static inline __m128 muladd_ps(__m128 a, __m128 m, __m128 c)
{
    return _mm_add_ps(_mm_mul_ps(a, m), c);
}
SSE2 static inline __m128d muladd_pd(__m128d a, __m128d m, __m128d c)
{
    return _mm_add_pd(_mm_mul_pd(a, m), c);
}
FMA_KERNEL(sse2_f32, SSE2, __m128, _mm_set1_ps, muladd_ps, _mm_add_ps,
           _mm_storeu_ps, float, 4)
FMA_KERNEL(sse2_f64, SSE2, __m128d, _mm_set1_pd, muladd_pd, _mm_add_pd,
           _mm_storeu_pd, double, 2)
#endif

/* Plain C: one lane, a multiply and an add (-ffp-contract=off keeps them
 * two operations). */
static inline float muladd_f(float a, float m, float c) { return a * m + c; }
static inline double muladd_d(double a, double m, double c)
{
    return a * m + c;
}
static inline float id_f(float x) { return x; }
static inline double id_d(double x) { return x; }
static inline float add_f(float a, float b) { return a + b; }
static inline double add_d(double a, double b) { return a + b; }
static inline void store_f(float *p, float x) { *p = x; }
static inline void store_d(double *p, double x) { *p = x; }
FMA_KERNEL(scalar_f32, , float, id_f, muladd_f, add_f, store_f, float, 1)
FMA_KERNEL(scalar_f64, , double, id_d, muladd_d, add_d, store_d, double, 1)

typedef struct isa {
    const char *name;
    void (*f32)(int64_t), (*f64)(int64_t);
    int lanes32; /* float32 lanes; float64 has half */
} isa;

/* The widest kernel this CPU runs. */
static isa pick_isa(void)
{
#if X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return (isa){"avx512f", fma512_f32, fma512_f64, 16};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (isa){"avx2+fma", fma256_f32, fma256_f64, 8};
    if (__builtin_cpu_supports("sse2"))
        return (isa){"sse2", sse2_f32, sse2_f64, 4};
#endif
    return (isa){"scalar", scalar_f32, scalar_f64, 1};
}

/* Best GFLOP/s of kernel (lanes wide) over RUNS runs of ~seconds / RUNS
 * each, by the thread's CPU time. */
static double fma_gflops(void (*kernel)(int64_t), int lanes, double seconds)
{
    const clockid_t cpu = CLOCK_THREAD_CPUTIME_ID;
    int64_t iters = 1000;
    double t;
    /* grow until one call takes a fifth of a run */
    for (;;) {
        double t0 = clock_s(cpu);
        kernel(iters);
        t = clock_s(cpu) - t0;
        if (t >= seconds / RUNS / 5 || iters > (INT64_C(1) << 40))
            break;
        iters *= 4;
    }
    iters = (int64_t)((double)iters * (seconds / RUNS) / (t > 1e-9 ? t : 1e-9));
    iters = iters < 1000 ? 1000 : iters;
    double best = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = clock_s(cpu);
        kernel(iters);
        t = clock_s(cpu) - t0;
        double gf = 2.0 * lanes * K_ACC * (double)iters / t * 1e-9;
        best = gf > best ? gf : best;
    }
    return best;
}

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
