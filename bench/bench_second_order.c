/* bench_second_order: what a Hessian-vector product and a Jacobian-vector
 * product cost against one forward + backward of the attention head's
 * loss, at one of bench/sizes.h's sizes (medium by default), 1 thread.
 *
 * The loss, op for op as bench_head composes it (nn/head.c's composed
 * path) and bench/peer_torch_second_order.py in PyTorch:
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v
 *     scores  = masked_fill(q @ k^T * 1/sqrt(hs), future, -inf)
 *     loss    = mean((softmax(scores, -1) @ v - target)^2)
 * The ways, each one call timed:
 *     fwd      the loss, the three weights requiring grad (the tape kept)
 *     fwdbwd   the same and tg_backward: the head's step without AdamW
 *     hvp      tg_hvp of loss(W_q) along v (reverse over reverse)
 *     jvp      tg_jvp of loss(W_q) along v (forward mode)
 *     fwdrev   tg_jvp of W_q -> tg_grads(loss, W_q, TG_CREATE_GRAPH) along
 *              v: H v as forward over reverse, tg_hvp's alternative
 * W_k, W_v are constants for the last three (the functions are of W_q
 * alone, as torch.autograd.functional.hvp's is), v is drawn once.
 *
 * The ways alternate sample by sample (one call a sample: each lasts
 * milliseconds, long against the clock), so that the load of a shared
 * machine, which comes and goes in phases, falls on all alike; a way's
 * figure is the median of its samples. A way that fails in its warm-up
 * (an op without a recorded backward or a forward-mode rule) is reported
 * failed=1, its error on stderr, and the others run on.
 *
 * Output, per dtype: a `check` line (hvp against fwdrev, jvp against the
 * gradient's dot with v, relative: a bench of wrong numbers is no
 * bench), then one line of key=value fields per way (bench/run.sh joins
 * them):
 *     bench impl=tapegrad variant=second-order config=medium dtype=f64
 *     path=hvp threads=1 samples=... median_ms=... min_ms=... max_ms=...
 *     cpu_ms=...
 * cpu_ms is the median CPU time of the process per call. --threads sets
 * OpenMP's and OpenBLAS's pools alike. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <tapegrad.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sizes.h"
#include "timing.h"

enum { MIN_SAMPLES = 3, MAX_SAMPLES = 10000, MAX_DTYPES = 2 };

typedef struct options {
    const size_config *size;
    tg_dtype dtypes[MAX_DTYPES];
    int n_dtypes;
    int threads;
    double seconds;        /* timed budget for all dtypes and ways */
    double warmup_seconds; /* per dtype and way, after at least 2 calls */
} options;

enum way { FWD, FWDBWD, HVP, JVP, FWDREV, N_WAYS };
static const char *const way_names[N_WAYS] = {"fwd", "fwdbwd", "hvp", "jvp",
                                              "fwdrev"};

/* ---- the loss ---------------------------------------------------------- */

typedef struct head {
    int64_t T;
    double scale;                 /* 1/sqrt(hs) */
    tg_tensor *x, *target;        /* (B,T,C), (B,T,hs) */
    tg_tensor *w_q, *w_k, *w_v;   /* (C,hs) leaves requiring grad */
    tg_tensor *k_const, *v_const; /* W_k, W_v detached: constants */
    tg_tensor *v;                 /* the direction, (C,hs) */
} head;

/* tril(ones(T,T)) == 0, rebuilt each forward as nn/head.c does. */
static tg_tensor *future_mask(int64_t T)
{
    tg_tensor *ones = tg_ones(TG_BOOL, TG_SHAPE(T, T));
    return tg_eq_scalar(tg_tril(ones, 0), 0);
}

/* The loss of the head with these weights; temporaries in a scope of its
 * own, so that a function the checkers call leaves nothing behind. */
static tg_tensor *head_loss(const head *h, tg_tensor *w_q, tg_tensor *w_k,
                            tg_tensor *w_v)
{
    tg_scope_begin();
    tg_tensor *q = tg_matmul(h->x, w_q), *k = tg_matmul(h->x, w_k);
    tg_tensor *v = tg_matmul(h->x, w_v);
    tg_tensor *scores = tg_scale(tg_matmul(q, tg_transpose(k, 1, 2)), h->scale);
    scores = tg_masked_fill(scores, future_mask(h->T), -INFINITY);
    tg_tensor *out = tg_matmul(tg_softmax(scores, -1), v);
    tg_tensor *loss = tg_scope_return(tg_mse_loss(out, h->target));
    tg_scope_end();
    return loss;
}

/* The loss as a function of W_q alone (tg_fn). */
static tg_tensor *loss_of_w_q(tg_tensor *const *in, void *ctx)
{
    const head *h = ctx;
    return head_loss(h, in[0], h->k_const, h->v_const);
}

/* The loss's gradient with respect to W_q, recorded, so that tg_jvp
 * carries v's tangent through it (forward over reverse). */
static tg_tensor *grad_of_w_q(tg_tensor *const *in, void *ctx)
{
    tg_tensor *loss = loss_of_w_q(in, ctx), *g = NULL;
    if (loss && tg_grads(loss, NULL, 1, in, &g, TG_CREATE_GRAPH) < 0)
        g = NULL;
    tg_release(loss);
    return g;
}

/* A (C,hs) weight drawn N(0, 1/C), as tg_head_init draws them. */
static tg_tensor *weight(tg_rng *rng, tg_dtype dt, int C, int hs)
{
    tg_tensor *w = tg_keep(
        tg_scale(tg_randn(rng, dt, TG_SHAPE(C, hs)), 1 / sqrt((double)C)));
    if (w)
        tg_set_requires_grad(w, true);
    return w;
}

static int head_init(head *h, const size_config *s, tg_dtype dt)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    memset(h, 0, sizeof *h);
    h->T = s->T;
    h->scale = 1 / sqrt((double)s->hs);
    tg_scope_begin();
    h->w_q = weight(&rng, dt, s->C, s->hs);
    h->w_k = weight(&rng, dt, s->C, s->hs);
    h->w_v = weight(&rng, dt, s->C, s->hs);
    h->x = tg_keep(tg_randn(&rng, dt, TG_SHAPE(s->B, s->T, s->C)));
    h->target = tg_keep(tg_randn(&rng, dt, TG_SHAPE(s->B, s->T, s->hs)));
    h->v = tg_keep(tg_randn(&rng, dt, TG_SHAPE(s->C, s->hs)));
    h->k_const = h->w_k ? tg_keep(tg_detach(h->w_k)) : NULL;
    h->v_const = h->w_v ? tg_keep(tg_detach(h->w_v)) : NULL;
    tg_scope_end();
    return h->w_q && h->x && h->target && h->v && h->k_const && h->v_const ? 0
                                                                           : -1;
}

static void head_free(head *h)
{
    tg_tensor *all[] = {h->x,   h->target,  h->w_q,     h->w_k,
                        h->w_v, h->k_const, h->v_const, h->v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tg_release(all[i]);
}

/* ---- the ways ---------------------------------------------------------- */

/* One call the way's way; its result into *out when out is not NULL (a
 * new reference: the gradient of W_q for fwdbwd, H v, J v), else
 * released. The scope frees the call's temporaries; the result is taken
 * out of it (tg_keep) to outlive it. 0 or -1. */
static int call(head *h, enum way way, tg_tensor **out)
{
    tg_tensor *r = NULL, *value = NULL;
    int rc = 0;
    tg_scope_begin();
    if (way == FWD || way == FWDBWD) {
        tg_tensor *loss = head_loss(h, h->w_q, h->w_k, h->w_v);
        rc = loss ? 0 : -1;
        if (rc == 0 && way == FWDBWD && (rc = tg_backward(loss)) == 0)
            r = tg_detach(tg_grad(h->w_q));
        tg_zero_grad(h->w_q);
        tg_zero_grad(h->w_k);
        tg_zero_grad(h->w_v);
    } else if (way == HVP) {
        rc = (r = tg_hvp(loss_of_w_q, h, h->w_q, h->v)) ? 0 : -1;
    } else {
        tg_fn f = way == JVP ? loss_of_w_q : grad_of_w_q;
        rc = tg_jvp(f, h, 1, &h->w_q, &h->v, &value, &r);
        tg_release(value);
    }
    r = tg_keep(r);
    if (out)
        *out = rc == 0 ? r : NULL;
    if (!out || rc < 0)
        tg_release(r);
    tg_scope_end();
    return rc;
}

/* t's elements as doubles (malloc'd), or NULL. */
static double *elements(const tg_tensor *t)
{
    double *d = t ? malloc((size_t)tg_numel(t) * sizeof *d) : NULL;
    if (d && tg_copy_out(t, TG_FLOAT64, d) < 0) {
        free(d);
        return NULL;
    }
    return d;
}

/* max |a - b| / max |b|, or NAN when either is missing. */
static double rel_diff(const tg_tensor *a, const tg_tensor *b)
{
    double *x = elements(a), *y = elements(b), num = 0, den = 0;
    int64_t n = x && y ? tg_numel(b) : 0;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs(x[i] - y[i]));
        den = fmax(den, fabs(y[i]));
    }
    free(x);
    free(y);
    return n ? num / (den > 0 ? den : 1) : NAN;
}

/* sum(g * v) against J v, relative, or NAN. */
static double dot_diff(const tg_tensor *g, const tg_tensor *v,
                       const tg_tensor *jv)
{
    double *a = elements(g), *b = elements(v), dot = 0;
    int64_t n = a && b && jv ? tg_numel(g) : 0;
    for (int64_t i = 0; i < n; i++)
        dot += a[i] * b[i];
    free(a);
    free(b);
    return n ? fabs(tg_item(jv) - dot) / fmax(fabs(dot), 1e-300) : NAN;
}

/* ---- the timing -------------------------------------------------------- */

typedef struct samples {
    int n;
    bool failed;
    double ms[MAX_SAMPLES], cpu[MAX_SAMPLES];
} samples;

/* Warms the way up: at least 2 calls and o->warmup_seconds. 0, or -1 with
 * the way's error printed (it is then left out of the timing). */
static int warm_up(head *h, enum way way, const options *o, const char *dt)
{
    double start = now_ms();
    for (int calls = 0; calls < 2 || now_ms() - start < o->warmup_seconds * 1e3;
         calls++)
        if (call(h, way, NULL) < 0) {
            fprintf(stderr, "bench_second_order: %s %s: %s\n", dt,
                    way_names[way], tg_last_error());
            tg_clear_error();
            return -1;
        }
    return 0;
}

/* The results of the ways against each other, once: a `check` line. */
static void check(head *h, const char *dt, const samples s[N_WAYS])
{
    tg_tensor *r[N_WAYS] = {0};
    for (int w = FWDBWD; w < N_WAYS; w++)
        if (!s[w].failed && call(h, (enum way)w, &r[w]) < 0)
            tg_clear_error();
    printf("check impl=tapegrad variant=second-order dtype=%s "
           "fwdrev_vs_hvp=%.3g jvp_vs_grad_dot_v=%.3g\n",
           dt, rel_diff(r[FWDREV], r[HVP]), dot_diff(r[FWDBWD], h->v, r[JVP]));
    for (int w = 0; w < N_WAYS; w++)
        tg_release(r[w]);
}

static void report(const options *o, const char *dt, enum way way, samples *s)
{
    printf("bench impl=tapegrad variant=second-order config=%s dtype=%s "
           "path=%s threads=%d",
           o->size->name, dt, way_names[way], o->threads);
    if (s->failed || s->n == 0) {
        printf(" failed=1\n");
        return;
    }
    qsort(s->ms, (size_t)s->n, sizeof *s->ms, by_value);
    qsort(s->cpu, (size_t)s->n, sizeof *s->cpu, by_value);
    printf(" samples=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f cpu_ms=%.4f\n",
           s->n, median(s->ms, s->n), s->ms[0], s->ms[s->n - 1],
           median(s->cpu, s->n));
}

/* Times the ways that warmed up, one call of each in turn, within the
 * dtype's share of the budget; prints the check and the ways' lines. 0,
 * or -1 when forward + backward, the yardstick, fails. */
static int run_dtype(tg_dtype dtype, const options *o, samples s[N_WAYS])
{
    const char *dt = dtype == TG_FLOAT32 ? "f32" : "f64";
    head h;
    if (head_init(&h, o->size, dtype) < 0) {
        head_free(&h);
        return -1;
    }
    for (int w = 0; w < N_WAYS; w++) {
        s[w].n = 0;
        s[w].failed = warm_up(&h, (enum way)w, o, dt) < 0;
    }
    double budget_ms = o->seconds * 1e3 / o->n_dtypes, start = now_ms();
    int rc = s[FWDBWD].failed ? -1 : 0;
    while (rc == 0 && s[FWDBWD].n < MAX_SAMPLES &&
           (s[FWDBWD].n < MIN_SAMPLES || now_ms() - start < budget_ms))
        for (int w = 0; rc == 0 && w < N_WAYS; w++) {
            if (s[w].failed)
                continue;
            /* the CPU clock is a system call: outside the wall interval */
            double c0 = cpu_ms(), t0 = now_ms();
            rc = call(&h, (enum way)w, NULL);
            s[w].ms[s[w].n] = now_ms() - t0;
            s[w].cpu[s[w].n++] = cpu_ms() - c0;
        }
    if (rc == 0) {
        check(&h, dt, s);
        for (int w = 0; w < N_WAYS; w++)
            report(o, dt, (enum way)w, &s[w]);
    }
    head_free(&h);
    return rc;
}

/* ---- the options ------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_second_order [--config NAME] [--dtypes f64,f32]\n"
            "                          [--seconds S] [--warmup-seconds S]\n"
            "                          [--threads N]\n"
            "\n"
            "Times, calls of each alternating, one forward (fwd), one\n"
            "forward + backward (fwdbwd), one Hessian-vector product\n"
            "(hvp, tg_hvp), one Jacobian-vector product (jvp, tg_jvp) and\n"
            "H v as forward over reverse (fwdrev) of the attention head's\n"
            "MSE loss as a function of W_q, and prints one line of\n"
            "key=value fields per dtype and way, in ms per call.\n"
            "\n"
            "  --config NAME   a size of bench_head --list (default medium)\n"
            "  --dtypes LIST   f64, f32 or both, comma-separated (default\n"
            "                  f64,f32)\n"
            "  --seconds S     timed budget for all of it (default 3)\n"
            "  --warmup-seconds S  warm-up per dtype and way (default 0.05)\n"
            "  --threads N     OpenMP and OpenBLAS threads (default 1)\n");
}

/* Parses "f64,f32" into o. 0 or -1. */
static int parse_dtypes(const char *v, options *o)
{
    o->n_dtypes = 0;
    while (*v && o->n_dtypes < MAX_DTYPES) {
        if (strncmp(v, "f32", 3) && strncmp(v, "f64", 3))
            return -1;
        o->dtypes[o->n_dtypes++] = v[1] == '3' ? TG_FLOAT32 : TG_FLOAT64;
        v += 3;
        if (*v && *v++ != ',')
            return -1;
    }
    return *v || o->n_dtypes == 0 ? -1 : 0;
}

static const size_config *find_size(const char *name)
{
    for (int i = 0; i < N_SIZES; i++)
        if (strcmp(sizes[i].name, name) == 0)
            return &sizes[i];
    return NULL;
}

/* Parses argv into o. Returns 0 to run, 1 after --help, -1 on a bad
 * argument (printed). */
static int parse(int argc, char **argv, options *o)
{
    *o = (options){.size = find_size("medium"),
                   .dtypes = {TG_FLOAT64, TG_FLOAT32},
                   .n_dtypes = 2,
                   .threads = 1,
                   .seconds = 3,
                   .warmup_seconds = 0.05};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double num = v ? positive(v) : 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!v) {
            fprintf(stderr,
                    "bench_second_order: %s needs a value (or is unknown)\n",
                    a);
            return -1;
        } else if (!strcmp(a, "--config") && find_size(v)) {
            o->size = find_size(v);
        } else if (!strcmp(a, "--dtypes")) {
            if (parse_dtypes(v, o) < 0) {
                fprintf(stderr, "bench_second_order: --dtypes is f64, f32 "
                                "or both, comma-separated\n");
                return -1;
            }
        } else if (!timing_option(a, num, &o->threads, &o->seconds,
                                  &o->warmup_seconds)) {
            fprintf(stderr,
                    "bench_second_order: bad option or value: %s %s "
                    "(--help)\n",
                    a, v);
            return -1;
        }
    }
    return 0;
}

/* Both thread pools: OpenBLAS reads OPENBLAS_NUM_THREADS only when it
 * loads, so its count is set through its API too, looked up at run time
 * (as bench_head does) so that no BLAS is on this program's link line. */
static void set_threads(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    void *self = dlopen(NULL, RTLD_NOW);
    void *p = self ? dlsym(self, "openblas_set_num_threads") : NULL;
    if (p) {
        void (*set)(int);
        /* POSIX's way from void * to a function pointer: copy the bytes */
        memcpy(&set, &p, sizeof p);
        set(n);
    }
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 2 : 0;
    set_threads(o.threads);
    samples *s = malloc(N_WAYS * sizeof *s);
    rc = s ? 0 : -1;
    for (int i = 0; rc == 0 && i < o.n_dtypes; i++)
        rc = run_dtype(o.dtypes[i], &o, s);
    if (rc < 0)
        fprintf(stderr, "bench_second_order: %s\n",
                *tg_last_error() ? tg_last_error() : "out of memory");
    free(s);
    return rc < 0 ? 1 : 0;
}
