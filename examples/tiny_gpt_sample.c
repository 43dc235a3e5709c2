/* tiny_gpt_sample.c: the text the trained model writes at the end: bytes
 * drawn one at a time with --temperature, --top-k and --top-p, from a
 * newline. */
#include "tiny_gpt.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* 0 when --top-k fits g's vocabulary; else -1, said. Checked before the
 * training rather than after it. */
int sampling_fits(const tg_gpt *g, const options *o)
{
    if (o->top_k == TG_TOP_K_ALL || o->top_k <= g->cfg.vocab_size)
        return 0;
    report("--top-k %d is larger than the vocabulary (%d)", o->top_k,
           g->cfg.vocab_size);
    return -1;
}

/* Prints n_new bytes sampled from the model in evaluation mode (--top-k,
 * --top-p, --temperature; one uniform from rng per byte), starting from a
 * newline (or id 0 when the text has none). Returns 0 or -1. */
int print_sample(tg_gpt *g, const corpus *cp, const options *o, tg_rng *rng)
{
    int64_t start = 0;
    for (int i = 0; i < cp->vocab; i++)
        if (cp->byte_of[i] == '\n')
            start = i;
    tg_gpt_train(g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_gpt_sampling s = {o->temperature, o->top_k, o->top_p};
    tg_tensor *prompt = tg_from_data(TG_INT64, TG_SHAPE(1, 1), &start);
    tg_tensor *ids = tg_gpt_generate_with(g, prompt, o->sample_len, &s, rng);
    int64_t n = ids ? tg_numel(ids) : 0;
    int64_t *out = ids ? malloc((size_t)n * sizeof *out) : NULL;
    int rc = -1;
    if (out && tg_copy_out(ids, TG_INT64, out) == 0) {
        for (int64_t i = 1; i < n;
             i++) /* a loaded model's vocab may be larger */
            putchar(out[i] < cp->vocab ? cp->byte_of[out[i]] : '?');
        putchar('\n');
        rc = 0;
    }
    free(out);
    tg_scope_end();
    tg_set_grad_enabled(was);
    return rc;
}
