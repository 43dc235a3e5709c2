/* Times the loops of a training step other than the matmuls, each on its
 * own at the large config's sizes (B*T = 8192 rows of C = 384):
 *   layer_norm  forward and backward of tg_layer_norm, (8192,384)
 *   embedding   forward and backward of tg_embedding, 8192 ids of (1024,384)
 *   bias_grad   backward of x + bias: the bias gradient sums 8192 rows
 *   adamw       one tg_optim_step of AdamW over 4 x (384,1536) parameters
 * and prints one line per kernel:
 *     bench impl=tapegrad kernel=layer_norm dtype=f32 threads=1 cpu=avx2
 *           reps=.. median_ms=.. min_ms=.. cpu_ms=..
 * cpu_ms is the median CPU time per rep of the process (all threads).
 * --threads N sets OpenMP's threads, which the library's pool follows;
 * TG_CPU=scalar|avx2 in the environment caps the vector level (printed as
 * cpu=, "best" when unset). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <tapegrad.h>
#include <tapegrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum { ROWS = 8192, C = 384, VOCAB = 1024, MAX_REPS = 400 };

static double clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One kernel: its state, made once, and one rep. */
typedef struct kernel {
    const char *name;
    void *(*make)(tg_dtype dt);
    void (*rep)(void *state);
    void (*done)(void *state);
} kernel;

static tg_tensor *randn(tg_dtype dt, int ndim, const int64_t *shape)
{
    static tg_rng rng;
    static bool seeded;
    if (!seeded) {
        tg_rng_seed(&rng, 1234);
        seeded = true;
    }
    return tg_randn(&rng, dt, ndim, shape);
}

/* ---- layer_norm: x (ROWS,C), gamma, beta; y's gradient dy ---------------- */
typedef struct ln_state {
    tg_tensor *x, *gamma, *beta, *dy;
} ln_state;

static void *ln_make(tg_dtype dt)
{
    ln_state *s = calloc(1, sizeof *s);
    s->x = randn(dt, 2, (const int64_t[]){ROWS, C});
    s->gamma = randn(dt, 1, (const int64_t[]){C});
    s->beta = randn(dt, 1, (const int64_t[]){C});
    s->dy = randn(dt, 2, (const int64_t[]){ROWS, C});
    tg_set_requires_grad(s->x, true);
    tg_set_requires_grad(s->gamma, true);
    tg_set_requires_grad(s->beta, true);
    return s;
}

static void ln_rep(void *state)
{
    ln_state *s = state;
    tg_tensor *y = tg_layer_norm(s->x, s->gamma, s->beta, 1e-5);
    tg_backward_with(y, s->dy);
    tg_release(y);
    tg_zero_grad(s->x);
    tg_zero_grad(s->gamma);
    tg_zero_grad(s->beta);
}

static void ln_done(void *state)
{
    ln_state *s = state;
    tg_release(s->x);
    tg_release(s->gamma);
    tg_release(s->beta);
    tg_release(s->dy);
    free(s);
}

/* ---- embedding: weight (VOCAB,C), ROWS ids, dy ------------------------- */
typedef struct emb_state {
    tg_tensor *w, *ids, *dy;
} emb_state;

static void *emb_make(tg_dtype dt)
{
    emb_state *s = calloc(1, sizeof *s);
    s->w = randn(dt, 2, (const int64_t[]){VOCAB, C});
    tg_set_requires_grad(s->w, true);
    int64_t *ids = malloc(sizeof(int64_t) * ROWS);
    for (int64_t p = 0; p < ROWS; p++)
        ids[p] = (p * 7919) % VOCAB;
    s->ids = tg_from_data(TG_INT64, 1, (const int64_t[]){ROWS}, ids);
    free(ids);
    s->dy = randn(dt, 2, (const int64_t[]){ROWS, C});
    return s;
}

static void emb_rep(void *state)
{
    emb_state *s = state;
    tg_tensor *y = tg_embedding(s->w, s->ids);
    tg_backward_with(y, s->dy);
    tg_release(y);
    tg_zero_grad(s->w);
}

static void emb_done(void *state)
{
    emb_state *s = state;
    tg_release(s->w);
    tg_release(s->ids);
    tg_release(s->dy);
    free(s);
}

/* ---- bias_grad: x (ROWS,C) + bias (C), backward with dy ------------------ */
static void *bias_make(tg_dtype dt)
{
    ln_state *s = calloc(1, sizeof *s);
    s->x = randn(dt, 2, (const int64_t[]){ROWS, C});
    s->beta = randn(dt, 1, (const int64_t[]){C});
    s->dy = randn(dt, 2, (const int64_t[]){ROWS, C});
    tg_set_requires_grad(s->x, true);
    tg_set_requires_grad(s->beta, true);
    return s;
}

static void bias_rep(void *state)
{
    ln_state *s = state;
    tg_tensor *y = tg_add(s->x, s->beta);
    tg_backward_with(y, s->dy);
    tg_release(y);
    tg_zero_grad(s->x);
    tg_zero_grad(s->beta);
}

/* ---- adamw: 4 parameters (C, 4C) with gradients ------------------------- */
typedef struct adam_state {
    tg_tensor *w[4]; /* the list borrows them */
    tg_params ps;
    tg_optim *o;
} adam_state;

static void *adam_make(tg_dtype dt)
{
    adam_state *s = calloc(1, sizeof *s);
    tg_params_init(&s->ps);
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        tg_tensor *w = s->w[i] = randn(dt, 2, (const int64_t[]){C, 4 * C});
        tg_set_requires_grad(w, true);
        /* a gradient: r, from the backward of w + r seeded with r */
        tg_tensor *r = randn(dt, 2, (const int64_t[]){C, 4 * C});
        tg_tensor *y = tg_add(w, r);
        tg_backward_with(y, r);
        tg_release(y);
        tg_release(r);
        tg_params_add(&s->ps, "", name, w);
    }
    s->o = tg_optim_new(&s->ps, tg_adamw_config(1e-3, 0.01));
    return s;
}

static void adam_rep(void *state) { tg_optim_step(((adam_state *)state)->o); }

static void adam_done(void *state)
{
    adam_state *s = state;
    tg_optim_free(s->o);
    tg_params_free(&s->ps);
    for (int i = 0; i < 4; i++)
        tg_release(s->w[i]);
    free(s);
}

static const kernel kernels[] = {
    {"layer_norm", ln_make, ln_rep, ln_done},
    {"embedding", emb_make, emb_rep, emb_done},
    {"bias_grad", bias_make, bias_rep, ln_done},
    {"adamw", adam_make, adam_rep, adam_done},
};

int main(int argc, char **argv)
{
    int threads = 1;
    double seconds = 1.0;
    tg_dtype dt = TG_FLOAT32;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc)
            dt = strcmp(argv[++i], "f64") == 0 ? TG_FLOAT64 : TG_FLOAT32;
        else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_loops [--threads N] [--seconds S] "
                            "[--dtype f32|f64] [--kernel NAME]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    const char *level = getenv("TG_CPU");
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        const kernel *K = &kernels[k];
        if (only && strcmp(only, K->name) != 0)
            continue;
        void *state = K->make(dt);
        K->rep(state); /* warm up: pages, the pool's threads */
        double wall[MAX_REPS], cpu[MAX_REPS];
        int reps = 0;
        const double end = clock_ms(CLOCK_MONOTONIC) + seconds * 1e3;
        while (reps < MAX_REPS &&
               (reps < 5 || clock_ms(CLOCK_MONOTONIC) < end)) {
            double w0 = clock_ms(CLOCK_MONOTONIC),
                   c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
            K->rep(state);
            wall[reps] = clock_ms(CLOCK_MONOTONIC) - w0;
            cpu[reps] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
            reps++;
        }
        K->done(state);
        qsort(wall, (size_t)reps, sizeof *wall, cmp_double);
        qsort(cpu, (size_t)reps, sizeof *cpu, cmp_double);
        printf("bench impl=tapegrad kernel=%s dtype=%s threads=%d cpu=%s "
               "reps=%d median_ms=%.4f min_ms=%.4f cpu_ms=%.4f\n",
               K->name, dt == TG_FLOAT32 ? "f32" : "f64", threads,
               level ? level : "best", reps, wall[reps / 2], wall[0],
               cpu[reps / 2]);
    }
    return 0;
}
