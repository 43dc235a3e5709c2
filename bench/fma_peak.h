/* One core's FMA peak, float32 and float64, for bench_peak and
 * bench_matmul: a tight loop of independent fused multiply-adds,
 * acc_k = acc_k * m + c for K_ACC accumulators, each a full vector
 * register. An FMA's latency is ~4 cycles and a core issues up to 2 a
 * cycle, so 8 or more independent chains keep both units busy; K_ACC = 12
 * leaves room. flops = 2 * lanes * K_ACC per iteration. The accumulators
 * converge to c / (1 - m) (= 1), so no value overflows or goes subnormal.
 * The kernel is compiled for AVX-512F and for AVX2+FMA with gcc target
 * attributes and chosen by cpuid at run time (__builtin_cpu_supports, which
 * also checks that the OS saves the registers); elsewhere SSE2 (a multiply
 * and an add, 2 flops, per lane) or plain C. Each is run several times and
 * the best kept, timed by the thread's CPU clock (what a core did, not how
 * long the machine made it wait).
 *
 *     isa i = pick_isa();
 *     double gf32 = fma_gflops(i.f32, i.lanes32, seconds);
 *     double gf64 = fma_gflops(i.f64, i.lanes32 / 2, seconds);
 *
 * The includer defines _POSIX_C_SOURCE >= 199309L (clock_gettime). */
#ifndef BENCH_FMA_PEAK_H
#define BENCH_FMA_PEAK_H

#include <stdint.h>
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

#endif /* BENCH_FMA_PEAK_H */
