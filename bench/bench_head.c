/* bench_head: the time of one training step of the lesson's causal
 * attention head, one configuration per process (so peak RSS is that
 * configuration's own).
 *
 * The step, the same in bench/peer_torch.py:
 *     out  = head(x)                       (B,T,C) -> (B,T,hs), tg_head_forward
 *     loss = mean((out - target)^2)        target fixed, drawn once
 *     backward; AdamW step (lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01);
 *     zero grads
 * Steps run after a warm-up; each is timed alone; the line printed gives the
 * median, min and max ms/step, GFLOP/s at the median, and peak RSS.
 *
 * Output: one line of key=value fields on stdout (bench/run.sh joins them):
 *     bench impl=tapegrad variant=composed config=large dtype=f32 threads=1
 *     B=32 T=256 C=384 hs=64 warmup=4 reps=57 median_ms=... min_ms=...
 *     max_ms=... cpu_ms=... gflops=... peak_rss_kb=... base_rss_kb=... blas=...
 *     blas_threads=1 omp_threads=1
 * cpu_ms is the median CPU time per step of the process (all threads; on a
 * loaded machine the steadier number for one thread, since it leaves out
 * waiting for a core); base_rss_kb is the peak RSS before the first step;
 * blas is OpenBLAS's kernel name, and the two thread counts are what the
 * pools report after --threads set them.
 *
 * --profile runs the same warm-up, then as many steps as the timed run
 * would, with the tape's timing mode on (tg_profile_start), and prints
 * instead a `profile` line (step_ms, matmul_share: the GEMM's per cent)
 * and one `profile_op` line per op (calls, forward_ms and backward_ms per
 * step, share in per cent, then op=NAME, last since a name may hold
 * spaces), longest first. It is a process of its own, so that the timed
 * steps never run with profiling on. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getrusage */

#include <tapegrad.h>
#include <tapegrad_nn.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sizes.h"
#include "timing.h"

typedef struct options {
    const size_config *size;
    tg_dtype dtype;
    int threads;
    tg_head_path path;
    double seconds; /* timed budget: reps = seconds / (ms per step) */
    int min_reps, max_reps;
    double warmup_seconds; /* at least 2 warm-up steps, and this long */
    bool profile;          /* --profile: the per-op breakdown, no timing */
} options;

/* --path's names, by tg_head_path; also the variant= field printed. */
static const char *const path_names[] = {
    [TG_HEAD_COMPOSED] = "composed",
    [TG_HEAD_FUSED_SOFTMAX] = "fused-softmax",
    [TG_HEAD_TILED] = "tiled",
};

/* The tg_head_path named name, or -1. */
static int find_path(const char *name)
{
    for (int p = 0; p < (int)(sizeof path_names / sizeof *path_names); p++)
        if (!strcmp(name, path_names[p]))
            return p;
    return -1;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: bench_head [--config NAME] [--dtype f32|f64] [--threads N]\n"
           "                  [--path P] [--seconds S] [--min-reps N]\n"
           "                  [--max-reps N] [--warmup-seconds S] [--profile]\n"
           "       bench_head --info | --list | --help\n"
           "\n"
           "Times one training step of the causal attention head (forward,\n"
           "MSE loss, backward, AdamW step, zero grads) and prints one line\n"
           "of key=value fields: median/min/max ms per step, GFLOP/s of the\n"
           "six matmuls (forward and backward) at the median, peak RSS.\n"
           "\n"
           "  --config NAME   tiny (4,8,32,16), small (16,64,64,16),\n"
           "                  medium (32,128,128,32), large (32,256,384,64),\n"
           "                  xl (16,1024,512,64) as (B,T,C,head_size);\n"
           "                  default tiny\n"
           "  --dtype         f32 (default) or f64\n"
           "  --threads N     BLAS and OpenMP threads (default 1)\n"
           "  --path P        the head's path (h.path): composed (default),\n"
           "                  fused-softmax or tiled (tg_attention)\n"
           "  --seconds S     time budget of the timed steps (default 1.5)\n"
           "  --min-reps N    at least N timed steps (default 3)\n"
           "  --max-reps N    at most N timed steps (default 5000)\n"
           "  --warmup-seconds S  warm up at least S seconds (default 0.25)\n"
           "  --profile       instead of the timing line, each op's share of\n"
           "                  the step from the tape's timing mode\n"
           "                  (tg_profile_start), over the same number of\n"
           "                  steps: a `profile` line, then one `profile_op`\n"
           "                  line per op, longest first\n"
           "  --info          print the BLAS build and kernel, and exit\n"
           "  --list          print the configurations, and exit\n");
}

/* OpenBLAS, as libtapegrad loaded it: its functions are looked up at run
 * time in the process's global symbols (libtapegrad's dependencies are
 * there), so this program needs no BLAS on its link line and the threads it
 * sets are those of the very library the matmuls run on. Without OpenBLAS
 * (configure --without-blas, or another cblas) the pointers stay NULL. */
typedef struct openblas_api {
    char *(*get_corename)(void);
    char *(*get_config)(void);
    void (*set_num_threads)(int);
    int (*get_num_threads)(void);
} openblas_api;

static openblas_api openblas(void)
{
    openblas_api api = {0};
    void *self = dlopen(NULL, RTLD_NOW);
    if (!self)
        return api;
    /* POSIX's way from void * to a function pointer: copy the bytes. */
    void *p[4] = {dlsym(self, "openblas_get_corename"),
                  dlsym(self, "openblas_get_config"),
                  dlsym(self, "openblas_set_num_threads"),
                  dlsym(self, "openblas_get_num_threads")};
    if (p[0] && p[1] && p[2] && p[3]) {
        memcpy(&api.get_corename, &p[0], sizeof p[0]);
        memcpy(&api.get_config, &p[1], sizeof p[1]);
        memcpy(&api.set_num_threads, &p[2], sizeof p[2]);
        memcpy(&api.get_num_threads, &p[3], sizeof p[3]);
    }
    return api;
}

/* The kernel OpenBLAS chose for this CPU (it honours OPENBLAS_CORETYPE), a
 * word without spaces; "none" when the matmuls run without OpenBLAS. */
static const char *blas_kernel(const openblas_api *ob)
{
    return ob->get_corename ? ob->get_corename() : "none";
}

static void print_info(const openblas_api *ob)
{
    if (ob->get_corename)
        printf("tapegrad matmul: OpenBLAS, kernel %s (%s)\n",
               ob->get_corename(), ob->get_config());
    else
        printf("tapegrad matmul: no OpenBLAS loaded (the portable kernel, "
               "or another cblas)\n");
}

/* Both thread pools: OpenBLAS reads OPENBLAS_NUM_THREADS only when it loads,
 * so the count is set through its API too. */
static void set_threads(const openblas_api *ob, int n)
{
    if (ob->set_num_threads)
        ob->set_num_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

static int blas_threads(const openblas_api *ob)
{
    return ob->get_num_threads ? ob->get_num_threads() : 0;
}

static int omp_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 0;
#endif
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* Flops of the six matmuls of one step. Forward: q, k, v = x @ W_*
 * 3 * 2*B*T*C*hs; scores = q @ k^T 2*B*T*T*hs; attn @ v 2*B*T*T*hs. Backward
 * computes two products per forward one (da and db), twice the flops. The
 * causal half of the scores is counted too, as the dense ops compute it. */
static double step_flops(const size_config *s)
{
    double B = s->B, T = s->T, C = s->C, hs = s->hs;
    double forward = 3 * 2 * B * T * C * hs + 2 * (2 * B * T * T * hs);
    return 3 * forward;
}

/* ---- the model and the step -------------------------------------------- */

typedef struct bench {
    tg_head head;
    tg_params params;
    tg_optim *adamw;
    tg_tensor *x, *target; /* (B,T,C), (B,T,hs) */
} bench;

static int bench_init(bench *b, const options *o)
{
    const size_config *s = o->size;
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_params_init(&b->params);
    if (tg_head_init(&b->head, o->dtype, s->C, s->hs, &rng) < 0 ||
        tg_head_params(&b->head, &b->params, "head") < 0)
        return -1;
    b->head.path = o->path;
    b->adamw = tg_optim_new(&b->params, tg_adamw_config(1e-3, 0.01));
    b->x = tg_randn(&rng, o->dtype, TG_SHAPE(s->B, s->T, s->C));
    b->target = tg_randn(&rng, o->dtype, TG_SHAPE(s->B, s->T, s->hs));
    return b->adamw && b->x && b->target ? 0 : -1;
}

static void bench_free(bench *b)
{
    tg_release(b->x);
    tg_release(b->target);
    tg_optim_free(b->adamw);
    tg_params_free(&b->params);
    tg_head_free(&b->head);
}

/* One training step; the scope frees the step's temporaries. 0 or -1.
 * While the tape's timing mode is on, the optimizer's step and the end of
 * the step (zero grads, the scope freeing the temporaries), which are no
 * ops, are charged to entries of their own by marks: no-ops when it is
 * off. */
static int train_step(bench *b)
{
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(&b->head, b->x);
    tg_tensor *loss = tg_mse_loss(out, b->target);
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    if (rc == 0) {
        rc = tg_optim_step(b->adamw);
        tg_profile_mark("AdamW step");
    }
    tg_optim_zero_grad(b->adamw);
    tg_scope_end();
    tg_profile_mark("zero grads, scope end");
    return rc;
}

/* ---- the run ----------------------------------------------------------- */

typedef struct timing {
    int warmup, reps;
    double median_ms, min_ms, max_ms;
    double cpu_median_ms; /* median CPU time per step, all threads */
} timing;

/* Warms up (at least 2 steps: the first allocates AdamW's state and touches
 * fresh pages), then times reps steps one by one, reps chosen from the mean
 * warm-up step after the first so the timed steps take about o->seconds. */
static int measure(bench *b, const options *o, timing *t)
{
    double start = now_ms(), after_first = 0;
    t->warmup = 0;
    while (t->warmup < 2 || now_ms() - start < o->warmup_seconds * 1e3) {
        double t0 = now_ms();
        if (train_step(b) < 0)
            return -1;
        if (t->warmup > 0)
            after_first += now_ms() - t0;
        t->warmup++;
    }
    double step_ms = after_first / (t->warmup - 1);
    double want = o->seconds * 1e3 / (step_ms > 1e-6 ? step_ms : 1e-6);
    t->reps = want < o->min_reps   ? o->min_reps
              : want > o->max_reps ? o->max_reps
                                   : (int)want;
    double *ms = malloc((size_t)t->reps * sizeof *ms);
    double *cpu = malloc((size_t)t->reps * sizeof *cpu);
    int rc = ms && cpu ? 0 : -1;
    if (rc < 0)
        fprintf(stderr, "bench_head: out of memory\n");
    for (int i = 0; rc == 0 && i < t->reps; i++) {
        /* the CPU clock is a system call: read it outside the wall interval */
        double c0 = cpu_ms(), t0 = now_ms();
        rc = train_step(b);
        ms[i] = now_ms() - t0;
        cpu[i] = cpu_ms() - c0;
    }
    if (rc == 0) {
        qsort(ms, (size_t)t->reps, sizeof *ms, by_value);
        qsort(cpu, (size_t)t->reps, sizeof *cpu, by_value);
        t->median_ms = median(ms, t->reps);
        t->min_ms = ms[0];
        t->max_ms = ms[t->reps - 1];
        t->cpu_median_ms = median(cpu, t->reps);
    }
    free(ms);
    free(cpu);
    return rc;
}

/* --profile: the same warm-up, then as many steps as the timed run would
 * take, with the tape's timing mode on; prints the step's breakdown. The
 * profile is a run of its own: the timed run never has it on. */
enum { MAX_ENTRIES = 64 };

static int profile(bench *b, const options *o)
{
    timing t = {0};
    options warm = *o;
    warm.seconds = 1e-9; /* the warm-up alone, and min_reps timed steps */
    warm.min_reps = warm.max_reps = 1;
    if (measure(b, &warm, &t) < 0)
        return -1;
    double step_ms = t.median_ms > 1e-6 ? t.median_ms : 1e-6;
    double want = o->seconds * 1e3 / step_ms;
    int reps = want < o->min_reps   ? o->min_reps
               : want > o->max_reps ? o->max_reps
                                    : (int)want;
    tg_profile_entry e[MAX_ENTRIES];
    tg_profile_start();
    int rc = 0;
    for (int i = 0; rc == 0 && i < reps; i++)
        rc = train_step(b);
    int n = tg_profile_stop(e, MAX_ENTRIES);
    if (rc < 0 || n < 0)
        return -1;
    double total = 0, gemm = 0;
    for (int i = 0; i < n; i++) {
        double ms = e[i].forward_ms + e[i].backward_ms;
        total += ms;
        if (strstr(e[i].op, "matmul"))
            gemm += ms;
    }
    const size_config *s = o->size;
    printf("profile impl=tapegrad variant=%s config=%s dtype=%s threads=%d "
           "steps=%d step_ms=%.4f matmul_share=%.2f\n",
           path_names[o->path], s->name, o->dtype == TG_FLOAT32 ? "f32" : "f64",
           o->threads, reps, total / reps, total > 0 ? 100 * gemm / total : 0);
    /* The op last: its name may hold spaces ("(backward walk)"). */
    for (int i = 0; i < n; i++)
        printf("profile_op calls=%.6g forward_ms=%.4f backward_ms=%.4f "
               "share=%.2f op=%s\n",
               (double)e[i].calls / reps, e[i].forward_ms / reps,
               e[i].backward_ms / reps,
               total > 0 ? 100 * (e[i].forward_ms + e[i].backward_ms) / total
                         : 0,
               e[i].op);
    return 0;
}

static const size_config *find_size(const char *name)
{
    for (int i = 0; i < N_SIZES; i++)
        if (strcmp(sizes[i].name, name) == 0)
            return &sizes[i];
    return NULL;
}

/* Parses argv into o. Returns 0 to run, 1 when an action ran (help, info,
 * list), -1 on a bad argument (printed). */
static int parse(int argc, char **argv, const openblas_api *ob, options *o)
{
    *o = (options){.size = &sizes[0],
                   .dtype = TG_FLOAT32,
                   .threads = 1,
                   .seconds = 1.5,
                   .min_reps = 3,
                   .max_reps = 5000,
                   .warmup_seconds = 0.25};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--info")) {
            print_info(ob);
            return 1;
        } else if (!strcmp(a, "--list")) {
            for (int k = 0; k < N_SIZES; k++)
                printf("%s %d %d %d %d\n", sizes[k].name, sizes[k].B,
                       sizes[k].T, sizes[k].C, sizes[k].hs);
            return 1;
        } else if (!strcmp(a, "--profile")) {
            o->profile = true;
            takes_value = false;
        } else if (!v) {
            fprintf(stderr, "bench_head: %s needs a value (or is unknown)\n",
                    a);
            return -1;
        } else if (!strcmp(a, "--config")) {
            if (!(o->size = find_size(v))) {
                fprintf(stderr, "bench_head: unknown config '%s' (--list)\n",
                        v);
                return -1;
            }
        } else if (!strcmp(a, "--path")) {
            if (find_path(v) < 0) {
                fprintf(stderr, "bench_head: --path is composed, "
                                "fused-softmax or tiled\n");
                return -1;
            }
            o->path = (tg_head_path)find_path(v);
        } else if (!strcmp(a, "--dtype")) {
            if (strcmp(v, "f32") && strcmp(v, "f64")) {
                fprintf(stderr, "bench_head: --dtype is f32 or f64\n");
                return -1;
            }
            o->dtype = strcmp(v, "f32") ? TG_FLOAT64 : TG_FLOAT32;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--min-reps") ||
                   !strcmp(a, "--max-reps")) {
            double n = positive(v);
            if (n < 1 || n != (int)n) {
                fprintf(stderr, "bench_head: %s wants a positive integer\n", a);
                return -1;
            }
            *(!strcmp(a, "--threads")    ? &o->threads
              : !strcmp(a, "--min-reps") ? &o->min_reps
                                         : &o->max_reps) = (int)n;
        } else if (!strcmp(a, "--seconds") || !strcmp(a, "--warmup-seconds")) {
            double s = positive(v);
            if (s <= 0) {
                fprintf(stderr, "bench_head: %s wants a positive number\n", a);
                return -1;
            }
            *(!strcmp(a, "--seconds") ? &o->seconds : &o->warmup_seconds) = s;
        } else {
            fprintf(stderr, "bench_head: unknown option %s (--help)\n", a);
            return -1;
        }
        i += takes_value;
    }
    if (o->max_reps < o->min_reps)
        o->max_reps = o->min_reps;
    return 0;
}

int main(int argc, char **argv)
{
    openblas_api ob = openblas();
    options o;
    int rc = parse(argc, argv, &ob, &o);
    if (rc != 0)
        return rc < 0 ? 2 : 0;
    set_threads(&ob, o.threads);

    bench b = {0};
    timing t = {0};
    long base_rss = 0;
    rc = bench_init(&b, &o);
    if (rc == 0) {
        base_rss = peak_rss_kb();
        rc = o.profile ? profile(&b, &o) : measure(&b, &o, &t);
    }
    if (rc < 0) {
        if (*tg_last_error())
            fprintf(stderr, "bench_head: %s %s %s: %s\n", o.size->name,
                    tg_dtype_name(o.dtype), path_names[o.path],
                    tg_last_error());
        bench_free(&b);
        return 1;
    }
    if (o.profile) {
        bench_free(&b);
        return 0;
    }
    const size_config *s = o.size;
    printf("bench impl=tapegrad variant=%s config=%s dtype=%s threads=%d "
           "B=%d T=%d C=%d hs=%d warmup=%d reps=%d median_ms=%.4f "
           "min_ms=%.4f max_ms=%.4f cpu_ms=%.4f gflops=%.2f peak_rss_kb=%ld "
           "base_rss_kb=%ld blas=%s blas_threads=%d omp_threads=%d\n",
           path_names[o.path], s->name, o.dtype == TG_FLOAT32 ? "f32" : "f64",
           o.threads, s->B, s->T, s->C, s->hs, t.warmup, t.reps, t.median_ms,
           t.min_ms, t.max_ms, t.cpu_median_ms,
           step_flops(s) / (t.median_ms * 1e6), peak_rss_kb(), base_rss,
           blas_kernel(&ob), blas_threads(&ob), omp_threads());
    bench_free(&b);
    return 0;
}
