/* bench_checkpoint: a GPT's training step with and without activation
 * checkpointing (tg_gpt_config.checkpoint: each block a tg_checkpoint
 * segment), one mode per process, so that /usr/bin/time -v gives each
 * its peak RSS.
 *
 * The model is GPT-2 124M's shape by default (L12 H12 C768 V50257, tied
 * head, tanh GELU, biases everywhere), randomly initialised, every head
 * on the tiled attention path (TG_HEAD_TILED: O(T) memory per head), at
 * B=4, T=1024, float32. One step, as bench/bench_gpt.c's:
 *     loss = cross_entropy(gpt(ids), targets); backward; AdamW; zero grads
 * on one batch of random tokens, drawn once.
 *
 * Usage: bench_checkpoint [--checkpoint 0|1] [--steps N] [--batch B]
 *        [--block T] [--layers L] [--heads H] [--embd C] [--vocab V]
 *        [--threads N]
 * Output: a `step` line per step (its wall and CPU time, the CPU time
 * the better measure on a busy machine, and its loss, the loss to all
 * digits: with and without checkpointing they must agree, bit for bit,
 * since the gradients do), then one line
 *     bench_checkpoint checkpoint=1 B=4 T=1024 ... steps=3 median_ms=...
 *     peak_rss_kb=...
 * where the median is over the steps after the first (which also pays
 * for first-touch page faults). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getrusage */

#include <tapegrad.h>
#include <tapegrad_nn.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "timing.h"

typedef struct options {
    int checkpoint, steps, batch, block, layers, heads, embd, vocab, threads;
} options;

static int parse(int argc, char **argv, options *o)
{
    *o = (options){1, 3, 4, 1024, 12, 12, 768, 50257, 1};
    const char *names[] = {"--checkpoint", "--steps",  "--batch",
                           "--block",      "--layers", "--heads",
                           "--embd",       "--vocab",  "--threads"};
    int *fields[] = {&o->checkpoint, &o->steps,  &o->batch,
                     &o->block,      &o->layers, &o->heads,
                     &o->embd,       &o->vocab,  &o->threads};
    for (int i = 1; i < argc; i += 2) {
        int k = 0;
        while (k < 9 && strcmp(argv[i], names[k]) != 0)
            k++;
        if (k == 9 || i + 1 >= argc) {
            fprintf(stderr,
                    "bench_checkpoint: unknown or incomplete option "
                    "'%s'\n",
                    argv[i]);
            return -1;
        }
        *fields[k] = atoi(argv[i + 1]);
    }
    return o->steps >= 1 && o->steps <= 64 ? 0 : -1;
}

/* The model of o, every head on the tiled path. */
static int model_init(tg_gpt *g, const options *o)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_gpt_config cfg = {.vocab_size = o->vocab,
                         .block_size = o->block,
                         .n_embd = o->embd,
                         .n_head = o->heads,
                         .n_layer = o->layers,
                         .gelu = true,
                         .gelu_tanh = true,
                         .dtype = TG_FLOAT32,
                         .bias = TG_GPT_BIAS_ALL,
                         .tie_weights = true,
                         .checkpoint = o->checkpoint != 0};
    if (tg_gpt_init(g, cfg, &rng) < 0)
        return -1;
    for (int i = 0; i < o->layers; i++)
        for (int h = 0; h < o->heads; h++)
            g->blocks[i].attn.heads[h].path = TG_HEAD_TILED;
    return 0;
}

/* ids and targets (B,T): random tokens, targets shifted by one. */
static int batch(const options *o, tg_tensor **ids, tg_tensor **targets)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    size_t n = (size_t)o->batch * (size_t)o->block;
    int64_t *v = malloc((n + 1) * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i <= n; i++)
        v[i] = (int64_t)(tg_rng_uniform(&rng) * o->vocab) % o->vocab;
    *ids = tg_from_data(TG_INT64, TG_SHAPE(o->batch, o->block), v);
    *targets = tg_from_data(TG_INT64, TG_SHAPE(o->batch, o->block), v + 1);
    free(v);
    return *ids && *targets ? 0 : -1;
}

/* One step: its loss into *loss_out. 0 or -1. */
static int step(tg_gpt *g, tg_optim *adamw, tg_tensor *ids, tg_tensor *tgt,
                double *loss_out)
{
    tg_scope_begin();
    tg_tensor *loss = tg_gpt_loss(g, ids, tgt);
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    if (rc == 0) {
        *loss_out = tg_item(loss);
        rc = tg_optim_step(adamw);
    }
    tg_optim_zero_grad(adamw);
    tg_scope_end();
    return rc;
}

static int run(const options *o, tg_gpt *g, tg_optim *adamw, tg_tensor *ids,
               tg_tensor *tgt)
{
    double ms[64];
    for (int s = 0; s < o->steps; s++) {
        double loss = 0, t0 = now_ms(), c0 = cpu_ms();
        if (step(g, adamw, ids, tgt, &loss) < 0)
            return -1;
        ms[s] = now_ms() - t0;
        printf("step %d ms=%.1f cpu_ms=%.1f loss=%.17g\n", s, ms[s],
               cpu_ms() - c0, loss);
        fflush(stdout);
    }
    int n = o->steps > 1 ? o->steps - 1 : 1;
    double *timed = o->steps > 1 ? ms + 1 : ms;
    qsort(timed, (size_t)n, sizeof *timed, by_value);
    double median =
        n % 2 ? timed[n / 2] : (timed[n / 2 - 1] + timed[n / 2]) / 2;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("bench_checkpoint checkpoint=%d B=%d T=%d C=%d heads=%d layers=%d "
           "vocab=%d threads=%d steps=%d median_ms=%.1f peak_rss_kb=%ld\n",
           o->checkpoint, o->batch, o->block, o->embd, o->heads, o->layers,
           o->vocab, o->threads, o->steps, median, ru.ru_maxrss);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    if (parse(argc, argv, &o) < 0)
        return 2;
#ifdef _OPENMP
    omp_set_num_threads(o.threads);
#endif
    tg_gpt g;
    tg_params ps;
    tg_params_init(&ps);
    tg_optim *adamw = NULL;
    tg_tensor *ids = NULL, *tgt = NULL;
    int rc = model_init(&g, &o) == 0 && tg_gpt_params(&g, &ps, NULL) == 0 &&
                     (adamw = tg_optim_new(&ps, tg_adamw_config(3e-4, 0.01))) &&
                     batch(&o, &ids, &tgt) == 0
                 ? run(&o, &g, adamw, ids, tgt)
                 : -1;
    if (rc < 0)
        fprintf(stderr, "bench_checkpoint: %s\n", tg_last_error());
    tg_release(ids);
    tg_release(tgt);
    tg_optim_free(adamw);
    tg_params_free(&ps);
    tg_gpt_free(&g);
    return rc < 0 ? 1 : 0;
}
