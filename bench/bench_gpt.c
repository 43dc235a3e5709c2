/* bench_gpt: a GPT's training throughput, tokens per second, through the
 * public nn API (tapegrad_nn.h: tg_gpt...), one configuration per process.
 *
 * The default model is examples/tiny_gpt's: 2 pre-norm blocks (x = x +
 * mha(ln1(x)); x = x + mlp(ln2(x))), 4 heads, n_embd 64, block 32, exact
 * GELU, a final layer norm and a bias-free head to the vocabulary (76: the
 * distinct bytes of tiny_gpt's default text), float32; a batch of 32
 * windows of 32 tokens. --model small and --model gpt2 are GPT-2's layout
 * (tanh GELU, biases everywhere, q/k/v too, the head tied to the token
 * embedding) at L4 H4 C256 V8000, B8 T128 and at GPT-2 124M's sizes (L12
 * H12 C768 V50257, block 1024), B4 T64; --gelu, --bias, --tie and the size
 * options change a preset's fields (given after it). One step, as
 * bench/peer_torch_gpt.py's:
 *     loss = cross_entropy(gpt(ids), targets)      (mean over B*T)
 *     backward; AdamW (lr 2e-3, betas 0.9/0.999, eps 1e-8, wd 0.01); zero
 *     grads
 * (tiny_gpt also clips the gradient norm; both sides leave that out.) The
 * batch is drawn once and reused, so the steps time the model alone, not
 * the data. Warm-up of at least 2 steps and --warmup-seconds, then reps
 * steps timed one by one; tokens/s = B*T / the median step.
 *
 * Output: one line of key=value fields on stdout:
 *     bench impl=tapegrad variant=tiny_gpt B=32 T=32 C=64 heads=4
 *     layers=2 vocab=76 gelu=exact bias=linear tie=0 threads=1 warmup=...
 *     reps=... median_ms=...
 *     min_ms=... max_ms=... cpu_ms=... tokens_per_s=... peak_rss_kb=...
 *     faults_per_step=... (page faults per timed step: 0 when a steady
 *     step takes no new pages)
 * With --profile, instead, the step's per-op breakdown from the tape's
 * timing mode (a `profile` line, then `profile_op` lines, as bench_head's). */
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

typedef struct options {
    const char *variant; /* the model preset's name, for the output */
    int batch, block, embd, heads, layers, vocab, threads;
    int ctx;          /* the model's block_size (>= block: GPT-2's 1024) */
    bool gelu_tanh;   /* GPT-2's tanh GELU, else the exact (erf) one */
    tg_gpt_bias bias; /* TG_GPT_BIAS_LINEAR, _ALL or _NONE */
    bool tie;         /* lm_head tied to the token embedding */
    double seconds, warmup_seconds;
    int min_reps, max_reps;
    bool profile;
} options;

static double clock_ms(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *sorted, int n)
{
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* OpenBLAS's thread count, through its API when it is loaded (it reads
 * OPENBLAS_NUM_THREADS only at load), and OpenMP's. */
static void set_threads(int n)
{
    void *self = dlopen(NULL, RTLD_NOW);
    void *p = self ? dlsym(self, "openblas_set_num_threads") : NULL;
    if (p) {
        void (*set)(int);
        memcpy(&set, &p, sizeof p);
        set(n);
    }
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

typedef struct model {
    tg_gpt gpt;
    tg_params params;
    tg_optim *adamw;
    tg_tensor *ids, *targets; /* int64 (B,T) */
} model;

static int model_init(model *m, const options *o)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_params_init(&m->params);
    tg_gpt_config cfg = {.vocab_size = o->vocab,
                         .block_size = o->ctx > o->block ? o->ctx : o->block,
                         .n_embd = o->embd,
                         .n_head = o->heads,
                         .n_layer = o->layers,
                         .gelu = true,
                         .dtype = TG_FLOAT32,
                         .bias = o->bias,
                         .tie_weights = o->tie,
                         .gelu_tanh = o->gelu_tanh};
    if (tg_gpt_init(&m->gpt, cfg, &rng) < 0 ||
        tg_gpt_params(&m->gpt, &m->params, NULL) < 0 ||
        !(m->adamw = tg_optim_new(&m->params, tg_adamw_config(2e-3, 0.01))))
        return -1;
    /* A batch of random tokens; targets are the ids shifted by one, as a
     * window of text gives them. */
    size_t n = (size_t)o->batch * (size_t)o->block;
    int64_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids)
        return -1;
    for (size_t i = 0; i <= n; i++)
        ids[i] = (int64_t)(tg_rng_uniform(&rng) * o->vocab) % o->vocab;
    m->ids = tg_from_data(TG_INT64, TG_SHAPE(o->batch, o->block), ids);
    m->targets = tg_from_data(TG_INT64, TG_SHAPE(o->batch, o->block), ids + 1);
    free(ids);
    return m->ids && m->targets ? 0 : -1;
}

static void model_free(model *m)
{
    tg_release(m->ids);
    tg_release(m->targets);
    tg_optim_free(m->adamw);
    tg_params_free(&m->params);
    tg_gpt_free(&m->gpt);
}

/* One step; the optimizer and the step's end are marked for --profile
 * (no-ops otherwise). 0 or -1. */
static int train_step(model *m)
{
    tg_scope_begin();
    tg_tensor *loss = tg_gpt_loss(&m->gpt, m->ids, m->targets);
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    if (rc == 0) {
        rc = tg_optim_step(m->adamw);
        tg_profile_mark("AdamW step");
    }
    tg_optim_zero_grad(m->adamw);
    tg_scope_end();
    tg_profile_mark("zero grads, scope end");
    return rc;
}

enum { MAX_ENTRIES = 64 };

/* tg_gpt_bias's names, in its order. */
static const char *const bias_names[] = {"linear", "all", "none"};

static int run(model *m, const options *o)
{
    double start = clock_ms(CLOCK_MONOTONIC), after_first = 0;
    int warmup = 0;
    while (warmup < 2 ||
           clock_ms(CLOCK_MONOTONIC) - start < o->warmup_seconds * 1e3) {
        double t0 = clock_ms(CLOCK_MONOTONIC);
        if (train_step(m) < 0)
            return -1;
        if (warmup > 0)
            after_first += clock_ms(CLOCK_MONOTONIC) - t0;
        warmup++;
    }
    double step_ms = after_first / (warmup - 1);
    double want = o->seconds * 1e3 / (step_ms > 1e-6 ? step_ms : 1e-6);
    int reps = want < o->min_reps   ? o->min_reps
               : want > o->max_reps ? o->max_reps
                                    : (int)want;
    if (o->profile) {
        tg_profile_entry e[MAX_ENTRIES];
        tg_profile_start();
        int rc = 0;
        for (int i = 0; rc == 0 && i < reps; i++)
            rc = train_step(m);
        int n = tg_profile_stop(e, MAX_ENTRIES);
        if (rc < 0 || n < 0)
            return -1;
        double total = 0, gemm = 0;
        for (int i = 0; i < n; i++) {
            total += e[i].forward_ms + e[i].backward_ms;
            if (strstr(e[i].op, "matmul"))
                gemm += e[i].forward_ms + e[i].backward_ms;
        }
        printf("profile impl=tapegrad variant=%s threads=%d steps=%d "
               "step_ms=%.4f matmul_share=%.2f\n",
               o->variant, o->threads, reps, total / reps,
               total > 0 ? 100 * gemm / total : 0);
        for (int i = 0; i < n; i++)
            printf("profile_op calls=%.6g forward_ms=%.4f backward_ms=%.4f "
                   "share=%.2f op=%s\n",
                   (double)e[i].calls / reps, e[i].forward_ms / reps,
                   e[i].backward_ms / reps,
                   total > 0
                       ? 100 * (e[i].forward_ms + e[i].backward_ms) / total
                       : 0,
                   e[i].op);
        return 0;
    }
    double *ms = malloc((size_t)reps * sizeof *ms);
    double *cpu = malloc((size_t)reps * sizeof *cpu);
    int rc = ms && cpu ? 0 : -1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long faults = ru.ru_minflt + ru.ru_majflt;
    for (int i = 0; rc == 0 && i < reps; i++) {
        double c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        double t0 = clock_ms(CLOCK_MONOTONIC);
        rc = train_step(m);
        ms[i] = clock_ms(CLOCK_MONOTONIC) - t0;
        cpu[i] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    if (rc == 0) {
        qsort(ms, (size_t)reps, sizeof *ms, by_value);
        qsort(cpu, (size_t)reps, sizeof *cpu, by_value);
        double med = median(ms, reps);
        getrusage(RUSAGE_SELF, &ru);
        faults = ru.ru_minflt + ru.ru_majflt - faults;
        printf("bench impl=tapegrad variant=%s B=%d T=%d C=%d heads=%d "
               "layers=%d vocab=%d gelu=%s bias=%s tie=%d threads=%d "
               "warmup=%d reps=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
               "cpu_ms=%.4f tokens_per_s=%.0f peak_rss_kb=%ld "
               "faults_per_step=%.1f\n",
               o->variant, o->batch, o->block, o->embd, o->heads, o->layers,
               o->vocab, o->gelu_tanh ? "tanh" : "exact", bias_names[o->bias],
               o->tie, o->threads, warmup, reps, med, ms[0], ms[reps - 1],
               median(cpu, reps), o->batch * o->block / (med * 1e-3),
               ru.ru_maxrss, (double)faults / reps);
    }
    free(ms);
    free(cpu);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_gpt [--model tiny|small|gpt2] [--batch N]\n"
            "                 [--block N] [--embd N] [--heads N] [--layers N]\n"
            "                 [--vocab N] [--gelu exact|tanh]\n"
            "                 [--bias linear|all|none] [--tie] [--threads N]\n"
            "                 [--seconds S] [--warmup-seconds S]\n"
            "                 [--min-reps N] [--max-reps N] [--profile]\n"
            "\n"
            "Times a GPT's training step (forward, cross-entropy,\n"
            "backward, AdamW, zero grads) on one fixed batch and prints\n"
            "tokens/s (batch * block / median step). Models: tiny\n"
            "(tiny_gpt's, the default: batch 32, block 32, embd 64, heads\n"
            "4, layers 2, vocab 76, exact GELU, linear biases, untied);\n"
            "small (batch 8, block 128, embd 256, heads 4, layers 4,\n"
            "vocab 8000) and gpt2 (batch 4, block 64 of a 1024 context,\n"
            "embd 768, heads 12, layers 12, vocab 50257), both GPT-2's\n"
            "layout: tanh GELU, all biases, tied head. Options after\n"
            "--model change its fields. 1 thread, 1.5 s of timed steps\n"
            "after >= 0.25 s of warm-up. --profile prints the step's\n"
            "per-op breakdown instead.\n");
}

/* --model NAME: o's sizes and layout set to the preset's; false for an
 * unknown name. */
static bool set_model(options *o, const char *name)
{
    static const struct {
        const char *name, *variant;
        int batch, block, ctx, embd, heads, layers, vocab;
        bool gpt2; /* tanh GELU, all biases, tied head */
    } presets[] = {{"tiny", "tiny_gpt", 32, 32, 32, 64, 4, 2, 76, false},
                   {"small", "small", 8, 128, 128, 256, 4, 4, 8000, true},
                   {"gpt2", "gpt2", 4, 64, 1024, 768, 12, 12, 50257, true}};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(name, presets[i].name)) {
            o->variant = presets[i].variant;
            o->batch = presets[i].batch;
            o->block = presets[i].block;
            o->ctx = presets[i].ctx;
            o->embd = presets[i].embd;
            o->heads = presets[i].heads;
            o->layers = presets[i].layers;
            o->vocab = presets[i].vocab;
            o->gelu_tanh = o->tie = presets[i].gpt2;
            o->bias = presets[i].gpt2 ? TG_GPT_BIAS_ALL : TG_GPT_BIAS_LINEAR;
            return true;
        }
    return false;
}

/* --model, --gelu, --bias: true when a is one of them and v is a value it
 * takes (*ok says whether it was). */
static bool named_option(options *o, const char *a, const char *v, bool *ok)
{
    if (!strcmp(a, "--model")) {
        *ok = set_model(o, v);
        return true;
    }
    if (!strcmp(a, "--gelu")) {
        *ok = !strcmp(v, "exact") || !strcmp(v, "tanh");
        o->gelu_tanh = !strcmp(v, "tanh");
        return true;
    }
    if (!strcmp(a, "--bias")) {
        for (int b = 0; b < 3; b++)
            if (!strcmp(v, bias_names[b])) {
                o->bias = (tg_gpt_bias)b;
                *ok = true;
            }
        return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    options o = {.threads = 1,
                 .seconds = 1.5,
                 .warmup_seconds = 0.25,
                 .min_reps = 3,
                 .max_reps = 5000};
    set_model(&o, "tiny");
    struct {
        const char *name;
        int *v;
    } ints[] = {{"--batch", &o.batch},      {"--block", &o.block},
                {"--embd", &o.embd},        {"--heads", &o.heads},
                {"--layers", &o.layers},    {"--vocab", &o.vocab},
                {"--threads", &o.threads},  {"--min-reps", &o.min_reps},
                {"--max-reps", &o.max_reps}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        bool ok = false;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--profile") || !strcmp(a, "--tie")) {
            *(a[2] == 'p' ? &o.profile : &o.tie) = true;
            continue;
        }
        if (v && named_option(&o, a, v, &ok)) {
            if (!ok)
                fprintf(stderr, "bench_gpt: bad value '%s' for %s\n", v, a);
            else {
                i++;
                continue;
            }
        }
        for (size_t k = 0; v && k < sizeof ints / sizeof *ints; k++)
            if (!strcmp(a, ints[k].name)) {
                long n = strtol(v, &end, 10);
                ok = *v && !*end && n > 0 && n < 1 << 20;
                *ints[k].v = (int)n;
            }
        if (v && (!strcmp(a, "--seconds") || !strcmp(a, "--warmup-seconds"))) {
            double s = strtod(v, &end);
            ok = *v && !*end && s > 0;
            *(!strcmp(a, "--seconds") ? &o.seconds : &o.warmup_seconds) = s;
        }
        if (!ok) {
            fprintf(stderr, "bench_gpt: bad argument '%s' (--help)\n", a);
            return 2;
        }
        i++;
    }
    if (o.max_reps < o.min_reps)
        o.max_reps = o.min_reps;
    set_threads(o.threads);
    model m = {0};
    int rc = model_init(&m, &o);
    if (rc == 0)
        rc = run(&m, &o);
    if (rc < 0)
        fprintf(stderr, "bench_gpt: %s\n",
                *tg_last_error() ? tg_last_error() : "out of memory");
    model_free(&m);
    return rc < 0 ? 1 : 0;
}
