/* resume_run: the tiny model of tests/tiny_lm.h trained in separate
 * processes, for tests/resume.test, which checks that a run saved with
 * tg_save_checkpoint and continued by another process (a fresh model and
 * optimizer, tg_load_checkpoint) ends with the same bits as one process
 * running all the way:
 *
 *   resume_run whole RECIPE STEPS OUT         iterations 0..STEPS-1
 *   resume_run first RECIPE N CKPT            iterations 0..N-1, then save
 *   resume_run rest  RECIPE N STEPS CKPT OUT  load, iterations N..STEPS-1
 *
 * RECIPE: adamw (nanoGPT's groups, warmup + cosine, clipping), adam (step
 * schedule) or sgd (momentum). OUT gets the parameters' values as raw
 * float64s. The model starts from seeded random values; "rest" starts from
 * other values, which the checkpoint must replace. Exit 0, or 1 with a
 * message. */
#include "tiny_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "resume_run: %s: %s\n", what, tg_last_error());
    return 1;
}

/* A model of seeded normal values times scale. */
static int make_model(tiny_lm *m, uint32_t seed, double scale)
{
    const int64_t n = lm_numel();
    double *v = malloc(sizeof *v * (size_t)n);
    if (!v)
        return -1;
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    for (int64_t k = 0; k < n; k++)
        v[k] = scale * tg_rng_normal(&rng);
    int rc = tiny_lm_init(m, v);
    free(v);
    return rc;
}

static int write_values(const tiny_lm *m, const char *path)
{
    const int64_t n = lm_numel();
    double *v = malloc(sizeof *v * (size_t)n);
    FILE *f = v ? fopen(path, "wb") : NULL;
    int rc = f && tiny_lm_values(m, v) == 0 &&
                     fwrite(v, sizeof *v, (size_t)n, f) == (size_t)n
                 ? 0
                 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(v);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: resume_run whole|first|rest RECIPE ...\n");
        return 2;
    }
    const char *mode = argv[1], *name = argv[2];
    lm_recipe r = strcmp(name, "adamw") == 0  ? LM_ADAMW_NANOGPT
                  : strcmp(name, "adam") == 0 ? LM_ADAM_STEP
                                              : LM_SGD_MOMENTUM;
    bool rest = strcmp(mode, "rest") == 0;
    if (rest && argc != 7) {
        fprintf(stderr, "usage: resume_run rest RECIPE N STEPS CKPT OUT\n");
        return 2;
    }
    int from = rest ? atoi(argv[3]) : 0;
    int to = rest ? atoi(argv[4]) : atoi(argv[3]);
    tiny_lm m;
    if (make_model(&m, rest ? 99 : 7, 0.3) < 0)
        return fail("model");
    tg_optim *o = lm_optim(r, &m);
    int rc = 0;
    if (!o)
        rc = fail("optimizer");
    else if (rest && tg_load_checkpoint(&m.ps, o, argv[5]) < 0)
        rc = fail("load");
    else if (lm_train(&m, o, r, from, to, NULL, NULL, NULL) < 0)
        rc = fail("train");
    else if (strcmp(mode, "first") == 0 &&
             tg_save_checkpoint(&m.ps, o, argv[4]) < 0)
        rc = fail("save");
    else if (strcmp(mode, "first") != 0 &&
             write_values(&m, argv[rest ? 6 : 4]) < 0)
        rc = fail("write");
    tg_optim_free(o);
    tiny_lm_free(&m);
    return rc;
}
