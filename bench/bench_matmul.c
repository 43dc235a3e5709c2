/* bench_matmul: what tg_matmul costs over calling BLAS directly, on the
 * attention head's own products, and what gemm reaches on this machine.
 *
 * For each size of bench_head (B,T,C,hs) and each product the head's step
 * makes, forward or backward, the median time of
 *     ours: r = tg_matmul(a, b) (a fresh output each call, as in a step);
 *           tg_release(r)
 *     BLAS: the cblas_?gemm calls that compute the same product on the same
 *           layout (one per batch entry, or one for a folded batch) into a
 *           preallocated output
 * and their ratio, the cost of our layer. Operands marked "view" are
 * tg_transpose views that tg_matmul must hand to BLAS as transpose flags.
 * "dW" is the weight gradient of x @ W, sum_b x_b^T @ dq_b, the way
 * matmul's backward computes it: the batch folded into the rows, one
 * product of K = B*T through tg_reshape and tg_transpose views; its BLAS
 * column is that same one gemm.
 *
 * Then the reference: ?gemm's GFLOP/s at 1024^3 on 1 and 2 threads, ours
 * (tg_matmul) beside BLAS's; on 1 thread called in turn with each other
 * and with the FMA loop (the peak the 90% target is a share of, measured
 * in the same moments: on a shared host the load comes and goes in
 * phases), on 2 one after the other.
 *
 * And the ceiling: the FMA peak of one core, measured by a loop of 12
 * independent chains of vector FMAs (AVX2's, or AVX-512's on a CPU that has
 * it), float32 and float64; every GFLOP/s is also given as its % of it.
 *
 * Configured --without-blas, only our column is printed (the portable
 * kernel has no BLAS to be compared with). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <config.h>

#include <tapegrad.h>

#ifdef TG_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fma_peak.h"
#include "sizes.h"
#include "timing.h"

/* One operand: the shape of its contiguous storage, and whether tg_matmul
 * gets the transpose of its last two dims (a view) instead. */
typedef struct operand {
    int ndim;
    int64_t shape[3];
    bool transposed;
} operand;

/* The BLAS calls for a product: count gemms C_i (m,n) = op(A_i) @ op(B_i)
 * with A_i at A + i*stride_a (0: one A for all) and so on, row-major. */
typedef struct gemm_plan {
    int count;
    int64_t stride_a, stride_b;
    bool ta, tb;
    int m, n, k, lda, ldb;
} gemm_plan;

typedef struct mm_case {
    const char *name;
    operand a, b;
    bool sum_batch; /* ours: the sum over dim 0 of the products (dW) */
    gemm_plan blas;
} mm_case;

enum { N_CASES = 9 };

/* The head's products at size s. BT = B*T rows once the batch folds. */
static void head_cases(const size_config *s, mm_case *c)
{
    const int B = s->B, T = s->T, C = s->C, hs = s->hs, BT = B * T;
    const int64_t Tt = (int64_t)T * T, Ths = (int64_t)T * hs;
    mm_case cases[N_CASES] = {
        {"x2d @ W",
         {2, {BT, C}, false},
         {2, {C, hs}, false},
         false,
         {1, 0, 0, false, false, BT, hs, C, C, hs}},
        {"x @ W (bcast)",
         {3, {B, T, C}, false},
         {2, {C, hs}, false},
         false,
         {1, 0, 0, false, false, BT, hs, C, C, hs}},
        {"dq @ W^T (bcast, view)",
         {3, {B, T, hs}, false},
         {2, {C, hs}, true},
         false,
         {1, 0, 0, false, true, BT, C, hs, hs, hs}},
        {"x2d^T @ dq2d (view)",
         {2, {BT, C}, true},
         {2, {BT, hs}, false},
         false,
         {1, 0, 0, true, false, C, hs, BT, C, hs}},
        {"dW: x^T @ dq, B folded",
         {3, {B, T, C}, true},
         {3, {B, T, hs}, false},
         true,
         {1, 0, 0, true, false, C, hs, BT, C, hs}},
        {"q @ k^T (view)",
         {3, {B, T, hs}, false},
         {3, {B, T, hs}, true},
         false,
         {B, Ths, Ths, false, true, T, T, hs, hs, hs}},
        {"attn @ v",
         {3, {B, T, T}, false},
         {3, {B, T, hs}, false},
         false,
         {B, Tt, Ths, false, false, T, hs, T, T, hs}},
        {"attn^T @ dout (view)",
         {3, {B, T, T}, true},
         {3, {B, T, hs}, false},
         false,
         {B, Tt, Ths, true, false, T, hs, T, T, hs}},
        {"(T,T) @ v (bcast)",
         {2, {T, T}, false},
         {3, {B, T, hs}, false},
         false,
         {B, 0, Ths, false, false, T, hs, T, T, hs}},
    };
    memcpy(c, cases, sizeof cases);
}

/* ---- options ----------------------------------------------------------- */

typedef struct options {
    const size_config *run[N_SIZES];
    int n_run;
    tg_dtype dtype;
    int threads;
    double seconds; /* per measurement */
    bool reference;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_matmul [--config LIST] [--dtype f32|f64]\n"
            "                    [--threads N] [--seconds S] [--no-reference]\n"
            "\n"
            "tg_matmul against direct cblas_?gemm calls on the attention\n"
            "head's products (median ms and the ratio ours/BLAS), then\n"
            "?gemm's GFLOP/s at 1024^3 on 1 and 2 threads.\n"
            "\n"
            "  --config LIST   sizes, comma-separated, of tiny small medium\n"
            "                  large xl (bench_head's); default all\n"
            "  --dtype         f32 (default) or f64\n"
            "  --threads N     BLAS and OpenMP threads for the table (1)\n"
            "  --seconds S     time budget per measurement (default 0.2)\n"
            "  --no-reference  skip the 1024^3 reference\n");
}

static int parse_sizes(const char *list, options *o)
{
    o->n_run = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save, *name = strtok_r(buf, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < N_SIZES && strcmp(sizes[i].name, name) != 0)
            i++;
        if (i == N_SIZES || o->n_run == N_SIZES) {
            fprintf(stderr, "bench_matmul: unknown or repeated size '%s'\n",
                    name);
            return -1;
        }
        o->run[o->n_run++] = &sizes[i];
    }
    return o->n_run > 0 ? 0 : -1;
}

/* 0 to run, 1 after --help, -1 on a bad argument (printed). */
static int parse(int argc, char **argv, options *o)
{
    *o = (options){
        .dtype = TG_FLOAT32, .threads = 1, .seconds = 0.2, .reference = true};
    for (int i = 0; i < N_SIZES; i++)
        o->run[o->n_run++] = &sizes[i];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--no-reference")) {
            o->reference = false;
            continue;
        } else if (!v) {
            fprintf(stderr,
                    "bench_matmul: unknown option or missing value: "
                    "%s (--help)\n",
                    a);
            return -1;
        } else if (!strcmp(a, "--config")) {
            if (parse_sizes(v, o) < 0)
                return -1;
        } else if (!strcmp(a, "--dtype") &&
                   (!strcmp(v, "f32") || !strcmp(v, "f64"))) {
            o->dtype = strcmp(v, "f32") ? TG_FLOAT64 : TG_FLOAT32;
        } else if (!strcmp(a, "--threads") && atoi(v) > 0) {
            o->threads = atoi(v);
        } else if (!strcmp(a, "--seconds") && strtod(v, NULL) > 0) {
            o->seconds = strtod(v, NULL);
        } else {
            fprintf(stderr, "bench_matmul: bad option %s %s (--help)\n", a, v);
            return -1;
        }
        i++;
    }
    return 0;
}

/* ---- timing -------------------------------------------------------------- */

typedef int (*run_fn)(void *ctx);

static double median_sorted(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return median(v, n);
}

/* Median wall and CPU ms of one call; wall < 0 when the run failed. */
typedef struct medians {
    double wall, cpu;
} medians;

/* Times the k runners fns[j](ctxs[j]) call by call in turn, j = 0..k-1
 * each round, so that the host's load, which comes and goes in phases of a
 * second or two, falls on all of them alike: warm-up rounds (at least 2,
 * for a fifth of the budget), then as many rounds as fit in seconds, at
 * least 3 and at most 20000. out[j]: fns[j]'s medians. false when a call
 * failed or there was no memory. */
static bool time_interleaved(const run_fn *fns, void *const *ctxs, int k,
                             double seconds, medians *out)
{
    double start = now_ms(), after_first = 0;
    int warmup = 0;
    do {
        double t0 = now_ms();
        for (int j = 0; j < k; j++)
            if (fns[j](ctxs[j]) < 0)
                return false;
        if (warmup++ > 0)
            after_first += now_ms() - t0;
    } while (warmup < 2 || now_ms() - start < seconds * 200);
    double round_ms = after_first / (warmup - 1);
    double want = seconds * 1e3 / (round_ms > 1e-6 ? round_ms : 1e-6);
    int reps = want < 3 ? 3 : want > 20000 ? 20000 : (int)want;
    double *ms = malloc((size_t)(reps * k) * sizeof *ms);
    double *cpu = malloc((size_t)(reps * k) * sizeof *cpu);
    bool ok = ms && cpu;
    for (int i = 0; ok && i < reps; i++)
        for (int j = 0; ok && j < k; j++) {
            double c0 = cpu_ms(), t0 = now_ms();
            ok = fns[j](ctxs[j]) >= 0;
            ms[j * reps + i] = now_ms() - t0;
            cpu[j * reps + i] = cpu_ms() - c0;
        }
    for (int j = 0; ok && j < k; j++)
        out[j] = (medians){median_sorted(ms + j * reps, reps),
                           median_sorted(cpu + j * reps, reps)};
    free(ms);
    free(cpu);
    return ok;
}

/* Times fn call by call (time_interleaved with one runner): its medians,
 * wall < 0 when a call failed or there was no memory. */
static medians time_calls(run_fn fn, void *ctx, double seconds)
{
    medians m = {-1, -1};
    if (!time_interleaved(&fn, &ctx, 1, seconds, &m))
        m = (medians){-1, -1};
    return m;
}

static void set_threads(int n)
{
#if defined(TG_HAVE_BLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

/* ---- the FMA peak of one core ------------------------------------------ */

/* GFLOP/s of one core's FMA units, float32 and float64 (0: no vector FMA
 * here). 12 independent accumulators: more than latency (4-5 cycles) x
 * pipes (2) FMAs in flight, so the loop runs at the units' throughput. */
static double peak_gflops[2];

/* Measures peak_gflops (by CPU time: a loaded machine takes the core away,
 * not cycles from the loop; bench/fma_peak.h) and prints the line. */
static void measure_peak(void)
{
    const isa i = pick_isa();
    if (X86 && strcmp(i.name, "avx512f") != 0 &&
        strcmp(i.name, "avx2+fma") != 0) {
        printf("FMA peak: no AVX2 or AVX-512 FMA on this CPU\n");
        return;
    }
    peak_gflops[0] = fma_gflops(i.f32, i.lanes32, 0.5);
    peak_gflops[1] = fma_gflops(i.f64, i.lanes32 / 2, 0.5);
    printf("FMA peak of one core (%s, %d chains, CPU time): float32 %.1f "
           "GFLOP/s, float64 %.1f GFLOP/s\n",
           i.name, K_ACC, peak_gflops[0], peak_gflops[1]);
}

/* gflops as a % of the dtype's peak (0 when unmeasured). */
static double of_peak(double gflops, tg_dtype dt)
{
    const double peak = peak_gflops[dt == TG_FLOAT64];
    return peak > 0 ? 100 * gflops / peak : 0;
}

/* ---- one case: the operands as tensors and as plain arrays --------------- */

typedef struct prepared {
    const mm_case *c;
    tg_dtype dtype;
    tg_tensor *a, *b;   /* what tg_matmul gets (views where transposed) */
    void *pa, *pb, *pc; /* BLAS: copies of a's and b's storage, the output */
} prepared;

/* A random tensor stored as op->shape, then its transpose view if asked. */
static tg_tensor *make_operand(const operand *op, tg_dtype dt, tg_rng *rng,
                               void **copy)
{
    tg_tensor *stored = tg_randn(rng, dt, op->ndim, op->shape);
    if (!stored)
        return NULL;
    *copy = malloc((size_t)tg_numel(stored) * tg_dtype_size(dt));
    if (!*copy || tg_copy_out(stored, dt, *copy) < 0) {
        tg_release(stored);
        return NULL;
    }
    if (!op->transposed)
        return stored;
    tg_tensor *view = tg_transpose(stored, -2, -1);
    tg_release(stored);
    return view;
}

static void prepared_free(prepared *p)
{
    tg_release(p->a);
    tg_release(p->b);
    free(p->pa);
    free(p->pb);
    free(p->pc);
}

static int prepare(prepared *p, const mm_case *c, tg_dtype dt)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    *p = (prepared){.c = c, .dtype = dt};
    p->a = make_operand(&c->a, dt, &rng, &p->pa);
    p->b = make_operand(&c->b, dt, &rng, &p->pb);
    const gemm_plan *g = &c->blas;
    p->pc = malloc((size_t)g->count * g->m * g->n * tg_dtype_size(dt));
    return p->a && p->b && p->pc ? 0 : -1;
}

/* Our product: tg_matmul(a, b); for dW, the way matmul's backward takes
 * the gradient of a shared weight (ops/matmul.c): the batch folded into the
 * rows, one product x2d^T @ dq2d of the (B*T,C) and (B*T,hs) views. */
static tg_tensor *our_product(const prepared *p)
{
    if (!p->c->sum_batch)
        return tg_matmul(p->a, p->b);
    tg_tensor *x = tg_transpose(p->a, -2, -1); /* (B,T,C) */
    tg_tensor *x2d =
        x ? tg_reshape(x, 2, (const int64_t[]){-1, p->c->a.shape[2]}) : NULL;
    tg_tensor *x2dT = x2d ? tg_transpose(x2d, 0, 1) : NULL;
    tg_tensor *dq2d =
        tg_reshape(p->b, 2, (const int64_t[]){-1, p->c->b.shape[2]});
    tg_tensor *r = x2dT && dq2d ? tg_matmul(x2dT, dq2d) : NULL;
    tg_release(x), tg_release(x2d), tg_release(x2dT), tg_release(dq2d);
    return r;
}

static int run_ours(void *ctx)
{
    const prepared *p = ctx;
    tg_tensor *r = our_product(p);
    if (!r)
        return -1;
    tg_release(r);
    return 0;
}

#ifdef TG_HAVE_BLAS
static int run_blas(void *ctx)
{
    const prepared *p = ctx;
    const gemm_plan *g = &p->c->blas;
    const enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans,
                               tb = g->tb ? CblasTrans : CblasNoTrans;
    const int64_t stride_c = (int64_t)g->m * g->n;
    for (int i = 0; i < g->count; i++) {
        if (p->dtype == TG_FLOAT32)
            cblas_sgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, 1.0f,
                        (const float *)p->pa + i * g->stride_a, g->lda,
                        (const float *)p->pb + i * g->stride_b, g->ldb, 0.0f,
                        (float *)p->pc + i * stride_c, g->n);
        else
            cblas_dgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, 1.0,
                        (const double *)p->pa + i * g->stride_a, g->lda,
                        (const double *)p->pb + i * g->stride_b, g->ldb, 0.0,
                        (double *)p->pc + i * stride_c, g->n);
    }
    return 0;
}

/* Does our product equal BLAS's (same plan, same data)? Guards the plans
 * above: a wrong lda would time the wrong product. Relative to the largest
 * magnitude, within 1e-3 (float32 sums in another order). */
static bool same_result(const prepared *p)
{
    tg_tensor *r = our_product(p);
    const gemm_plan *g = &p->c->blas;
    int64_t n = (int64_t)g->count * g->m * g->n;
    if (!r || tg_numel(r) != n)
        return tg_release(r), false;
    double *ours = malloc((size_t)n * sizeof *ours);
    bool ok = ours && tg_copy_out(r, TG_FLOAT64, ours) == 0;
    tg_release(r);
    run_blas((void *)p);
    double diff = 0, scale = 1e-30;
    for (int64_t i = 0; ok && i < n; i++) {
        double want = p->dtype == TG_FLOAT32 ? ((const float *)p->pc)[i]
                                             : ((const double *)p->pc)[i];
        diff = fmax(diff, fabs(ours[i] - want));
        scale = fmax(scale, fabs(want));
    }
    free(ours);
    return ok && diff <= 1e-3 * scale;
}
#endif

/* "(4,8,32)" or "(4,32,8)^T" for one operand as tg_matmul sees it. */
static const char *shape_str(const operand *op, char *buf, size_t size)
{
    int64_t s[3];
    memcpy(s, op->shape, sizeof s);
    if (op->transposed) {
        int64_t t = s[op->ndim - 1];
        s[op->ndim - 1] = s[op->ndim - 2];
        s[op->ndim - 2] = t;
    }
    if (op->ndim == 2)
        snprintf(buf, size, "(%lld,%lld)%s", (long long)s[0], (long long)s[1],
                 op->transposed ? "v" : "");
    else
        snprintf(buf, size, "(%lld,%lld,%lld)%s", (long long)s[0],
                 (long long)s[1], (long long)s[2], op->transposed ? "v" : "");
    return buf;
}

/* Times every case at size s and prints its rows. -1 on an error. */
static int run_size(const size_config *s, const options *o)
{
    mm_case cases[N_CASES];
    head_cases(s, cases);
    for (int i = 0; i < N_CASES; i++) {
        prepared p;
        if (prepare(&p, &cases[i], o->dtype) < 0) {
            prepared_free(&p);
            return -1;
        }
        const gemm_plan *g = &cases[i].blas;
        double flops = 2.0 * g->count * g->m * g->n * g->k;
        char sa[48], sb[48], shapes[100];
        snprintf(shapes, sizeof shapes, "%s@%s",
                 shape_str(&cases[i].a, sa, sizeof sa),
                 shape_str(&cases[i].b, sb, sizeof sb));
        medians ours = time_calls(run_ours, &p, o->seconds);
        if (ours.wall < 0) {
            prepared_free(&p);
            return -1;
        }
        printf("%-7s %-24s %-27s %10.4f", s->name, cases[i].name, shapes,
               ours.wall);
#ifdef TG_HAVE_BLAS
        if (!same_result(&p)) {
            printf("\n");
            fprintf(stderr,
                    "bench_matmul: %s %s: tg_matmul and the BLAS plan "
                    "disagree (a bug in this benchmark's plan)\n",
                    s->name, cases[i].name);
            prepared_free(&p);
            return -1;
        }
        medians blas = time_calls(run_blas, &p, o->seconds);
        printf(" %10.4f %7.2f %7.2f %8.2f %8.2f %6.1f %6.1f\n", blas.wall,
               ours.wall / blas.wall, ours.cpu / blas.cpu,
               flops / (ours.wall * 1e6), flops / (blas.wall * 1e6),
               of_peak(flops / (ours.cpu * 1e6), o->dtype),
               of_peak(flops / (blas.cpu * 1e6), o->dtype));
#else
        printf(" %8.2f %6.1f\n", flops / (ours.wall * 1e6),
               of_peak(flops / (ours.cpu * 1e6), o->dtype));
#endif
        fflush(stdout);
        prepared_free(&p);
    }
    return 0;
}

/* ---- the reference: gemm at 1024^3 --------------------------------------- */

#ifdef TG_HAVE_BLAS
enum { REF_N = 1024 };

typedef struct square {
    tg_dtype dtype;
    void *a, *b, *c;
    tg_tensor *ta, *tb; /* a and b as tensors, for ours */
} square;

static int run_square_ours(void *ctx)
{
    const square *q = ctx;
    tg_tensor *r = tg_matmul(q->ta, q->tb);
    tg_release(r);
    return r ? 0 : -1;
}

static int run_square(void *ctx)
{
    const square *q = ctx;
    if (q->dtype == TG_FLOAT32)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, REF_N, REF_N,
                    REF_N, 1.0f, q->a, REF_N, q->b, REF_N, 0.0f, q->c, REF_N);
    else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, REF_N, REF_N,
                    REF_N, 1.0, q->a, REF_N, q->b, REF_N, 0.0, q->c, REF_N);
    return 0;
}

/* The FMA loop as a runner (bench/fma_peak.h's kernel, iters iterations:
 * flops = 2 lanes K_ACC iters), to time beside the products. */
typedef struct fma_run {
    void (*kernel)(int64_t);
    int lanes;
    int64_t iters;
} fma_run;

static int run_fma(void *ctx)
{
    const fma_run *f = ctx;
    f->kernel(f->iters);
    return 0;
}

/* ?gemm at 1024^3, ours (tg_matmul, a fresh output each call) and BLAS's:
 * on 1 thread called in turn (time_interleaved) with the FMA loop as a
 * third runner, each of its calls doing a product's flops, so the peak
 * that the GFLOP/s are a % of was measured in the same moments, by the
 * same median; on 2 threads one after the other (below). The line
 * "<?gemm> FMA peak, alongside: X GFLOP/s" comes first; bench/run.sh reads
 * it and the two after. */
static int reference(double seconds)
{
    printf("\nreference: gemm (%d,%d)@(%d,%d), GFLOP/s at the median; on 1 "
           "thread ours, BLAS and the FMA loop called in turn\n",
           REF_N, REF_N, REF_N, REF_N);
    const double flops = 2.0 * REF_N * REF_N * REF_N;
    const isa fi = pick_isa();
    for (int d = 0; d < 2; d++) {
        square q = {d ? TG_FLOAT64 : TG_FLOAT32, NULL, NULL, NULL, NULL, NULL};
        size_t bytes = (size_t)REF_N * REF_N * tg_dtype_size(q.dtype);
        q.a = malloc(bytes), q.b = malloc(bytes), q.c = malloc(bytes);
        if (!q.a || !q.b || !q.c) {
            free(q.a), free(q.b), free(q.c);
            return -1;
        }
        tg_rng rng;
        tg_rng_seed(&rng, 3);
        for (size_t i = 0; i < (size_t)REF_N * REF_N; i++) {
            double va = tg_rng_uniform(&rng), vb = tg_rng_uniform(&rng);
            if (d == 0)
                ((float *)q.a)[i] = (float)va, ((float *)q.b)[i] = (float)vb;
            else
                ((double *)q.a)[i] = va, ((double *)q.b)[i] = vb;
        }
        const int64_t shape[2] = {REF_N, REF_N};
        q.ta = tg_from_data(q.dtype, 2, shape, q.a);
        q.tb = tg_from_data(q.dtype, 2, shape, q.b);
        /* the FMA loop doing a product's flops per call, 1 thread */
        fma_run f = {d ? fi.f64 : fi.f32, d ? fi.lanes32 / 2 : fi.lanes32, 0};
        f.iters = (int64_t)(flops / (2.0 * f.lanes * K_ACC));
        medians one[3], two[2];
        run_fn fns[3] = {run_square_ours, run_square, run_fma};
        void *ctxs[3] = {&q, &q, &f};
        bool ok = q.ta && q.tb;
        set_threads(1);
        ok = ok && time_interleaved(fns, ctxs, 3, 3 * seconds, one);
        /* 2 threads one after the other, not in turn: OpenBLAS's workers
         * spin a while after each of its calls, and ours, called next, ran
         * on one core's worth (sgemm 76 GFLOP/s on 2 threads against 126
         * alone, in one make bench) */
        set_threads(2);
        two[0] = ok ? time_calls(run_square_ours, &q, seconds) : two[0];
        two[1] = ok ? time_calls(run_square, &q, seconds) : two[1];
        ok = ok && two[0].wall >= 0 && two[1].wall >= 0;
        set_threads(1);
        if (ok) {
            const char *name = d ? "dgemm" : "sgemm";
            /* the loop's flops over its median CPU time: what the core
             * gave a tight FMA loop in these moments */
            const double along = flops / (one[2].cpu * 1e6);
            printf("  %s FMA peak, alongside: %.2f GFLOP/s (%s, %d chains, "
                   "the median CPU time of its calls; %.2f at the start)\n",
                   name, along, fi.name, K_ACC, peak_gflops[d]);
            for (int who = 0; who < 2; who++) {
                printf("  %s %-5s:", name, who ? "BLAS" : "ours");
                printf("  1 thread  %7.2f GFLOP/s (%.2f ms; by CPU time %.2f, "
                       "%.1f%% of the peak alongside)",
                       flops / (one[who].wall * 1e6), one[who].wall,
                       flops / (one[who].cpu * 1e6),
                       100 * (flops / (one[who].cpu * 1e6)) / along);
                printf("  2 threads %7.2f GFLOP/s (%.2f ms)\n",
                       flops / (two[who].wall * 1e6), two[who].wall);
            }
        }
        fflush(stdout);
        tg_release(q.ta), tg_release(q.tb);
        free(q.a), free(q.b), free(q.c);
        if (!ok) {
            fprintf(stderr, "bench_matmul: the %s reference failed: %s\n",
                    d ? "dgemm" : "sgemm",
                    tg_last_error()[0] ? tg_last_error() : "out of memory");
            return -1;
        }
    }
    return 0;
}
#endif

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 2 : 0;
    set_threads(o.threads);
    const char *dt = o.dtype == TG_FLOAT32 ? "float32" : "float64";
#if defined(TG_HAVE_BLAS) && defined(OPENBLAS_VERSION)
    printf("matmul: tg_matmul vs direct cblas_%cgemm, %s, %d thread%s, "
           "OpenBLAS kernel %s\n",
           o.dtype == TG_FLOAT32 ? 's' : 'd', dt, o.threads,
           o.threads > 1 ? "s" : "", openblas_get_corename());
#elif defined(TG_HAVE_BLAS)
    printf("matmul: tg_matmul vs direct cblas_%cgemm, %s, %d thread%s\n",
           o.dtype == TG_FLOAT32 ? 's' : 'd', dt, o.threads,
           o.threads > 1 ? "s" : "");
#else
    printf("matmul: tg_matmul, %s (configured without BLAS: the portable "
           "kernel, with no BLAS to compare against)\n",
           dt);
#endif
    measure_peak();
    printf("(v: a tg_transpose view; ms: wall-time medians; cpu: the ratio of "
           "CPU-time medians; GFLOP/s at the wall median; %%pk: GFLOP/s at "
           "the CPU-time median, as a %% of the FMA peak)\n");
#ifdef TG_HAVE_BLAS
    printf("%-7s %-24s %-27s %10s %10s %7s %7s %8s %8s %6s %6s\n", "size",
           "product", "shapes", "ours ms", "BLAS ms", "ours/BL", "cpu",
           "GF/s us", "GF/s BL", "%pk us", "%pk BL");
#else
    printf("%-7s %-24s %-27s %10s %8s %6s\n", "size", "product", "shapes",
           "ours ms", "GFLOP/s", "%pk us");
#endif
    for (int i = 0; i < o.n_run; i++)
        if (run_size(o.run[i], &o) < 0) {
            fprintf(stderr, "bench_matmul: %s: %s\n", o.run[i]->name,
                    *tg_last_error() ? tg_last_error() : "out of memory");
            return 1;
        }
#ifdef TG_HAVE_BLAS
    if (o.reference && reference(o.seconds * 5) < 0)
        return 1; /* reference() said why */
#endif
    return 0;
}
