/* bench_load: the time and memory of loading a GPT-2 checkpoint
 * (tg_gpt_load_pretrained, or llm.c's tg_gpt_load_llmc), one load per
 * process, so that the process's peak resident set is the load's.
 *
 *   bench_load make PATH [--layers L] [--untied] [--llmc]
 *       writes GPT-2 124M's shape (V 50257, T 1024, C 768, 12 heads, 12
 *       layers, tanh GELU, biases, tied head; L layers instead of 12 with
 *       --layers, a separate lm_head with --untied), drawn from seed 0, as a
 *       .safetensors of GPT-2's names (tg_gpt_save_pretrained), or with
 *       --llmc as llm.c's gpt2_124M.bin (tg_gpt_save_llmc: float32, the
 *       vocabulary padded to 50304)
 *   bench_load load PATH [--float64] [--read-whole] [--llmc]
 *       loads it with tg_gpt_load_pretrained; with --read-whole, the way
 *       it was before loads streamed: tg_read_safetensors, then
 *       tg_gpt_from_state_dict (which built the model from random draws
 *       before the streaming change); with --llmc, an llm.c file with
 *       tg_gpt_load_llmc (variant=load_llmc)
 *
 * Output of load: one line of key=value fields on stdout:
 *     bench impl=tapegrad variant=load params=... model_mib=... load_s=...
 *     cpu_s=... peak_rss_kb=... peak_over_model=...
 * load_s is the wall clock, cpu_s the process's CPU time over the load (on
 * a loaded machine the wall clock also counts the time others ran).
 * peak_rss_kb is getrusage's ru_maxrss: the whole process's peak, the
 * library and its loading included. The peer is bench/peer_torch_load.py. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getrusage */

#include <tapegrad.h>
#include <tapegrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make(const char *path, int layers, bool untied, bool llmc)
{
    tg_gpt_config cfg = {.vocab_size = 50257,
                         .block_size = 1024,
                         .n_embd = 768,
                         .n_head = 12,
                         .n_layer = layers,
                         .gelu = true,
                         .gelu_tanh = true,
                         .dtype = TG_FLOAT32,
                         .bias = TG_GPT_BIAS_ALL,
                         .tie_weights = !untied};
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    tg_gpt g;
    if (tg_gpt_init(&g, cfg, &rng) < 0 ||
        (llmc ? tg_gpt_save_llmc(&g, path) : tg_gpt_save_pretrained(&g, path)) <
            0) {
        fprintf(stderr, "bench_load: %s\n", tg_last_error());
        tg_gpt_free(&g);
        return 1;
    }
    tg_gpt_free(&g);
    return 0;
}

/* The old way: every tensor of the file read, then the model built. */
static int read_whole(tg_gpt *g, const char *path, tg_dtype dt)
{
    tg_params sd;
    tg_params_init(&sd);
    int rc = tg_read_safetensors(path, &sd);
    if (rc == 0)
        rc = tg_gpt_from_state_dict(g, &sd, 12, dt);
    tg_params_release(&sd);
    return rc;
}

static int load(const char *path, tg_dtype dt, bool whole, bool llmc)
{
    tg_gpt g;
    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    int rc = llmc    ? tg_gpt_load_llmc(&g, path, dt)
             : whole ? read_whole(&g, path, dt)
                     : tg_gpt_load_pretrained(&g, path, 12, dt);
    double t1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    if (rc < 0) {
        fprintf(stderr, "bench_load: %s\n", tg_last_error());
        return 1;
    }
    tg_params ps;
    tg_params_init(&ps);
    int64_t n = 0;
    if (tg_gpt_params(&g, &ps, NULL) == 0)
        for (int i = 0; i < ps.n; i++)
            n += tg_numel(ps.items[i].t);
    tg_params_free(&ps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double model_kb = (double)n * tg_dtype_size(dt) / 1024;
    printf("bench impl=tapegrad variant=load%s dtype=%s params=%lld "
           "model_mib=%.1f load_s=%.3f cpu_s=%.3f peak_rss_kb=%ld "
           "peak_over_model=%.3f\n",
           llmc    ? "_llmc"
           : whole ? "_read_whole"
                   : "",
           tg_dtype_name(dt), (long long)n, model_kb / 1024, t1 - t0, c1 - c0,
           ru.ru_maxrss, ru.ru_maxrss / model_kb);
    tg_gpt_free(&g);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "make") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "usage: bench_load make PATH [--layers L] [--untied] "
                        "[--llmc]\n"
                        "       bench_load load PATH [--float64] "
                        "[--read-whole] [--llmc]\n");
        return 2;
    }
    int layers = 12;
    bool untied = false, f64 = false, whole = false, llmc = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--untied"))
            untied = true;
        else if (!strcmp(argv[i], "--float64"))
            f64 = true;
        else if (!strcmp(argv[i], "--read-whole"))
            whole = true;
        else if (!strcmp(argv[i], "--llmc"))
            llmc = true;
        else {
            fprintf(stderr, "bench_load: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!strcmp(argv[1], "make"))
        return make(argv[2], layers, untied, llmc);
    return load(argv[2], f64 ? TG_FLOAT64 : TG_FLOAT32, whole, llmc);
}
