/* tiny_gpt_pretrained.c: a nanoGPT or GPT-2 checkpoint instead of a new
 * model (--init-from FILE.safetensors --n-head H): trained on further as
 * any model, or, with --eval-ids, only its loss on given token windows. */
#include "tiny_gpt.h"

#include <stdbool.h>
#include <stdio.h>

/* The file of --init-from as --n-head, --dtype, --gelu and --attn say;
 * prints the loader's line of what it chose and why. 0, or -1 with g
 * zeroed. */
static int load_file(tg_gpt *g, const options *o)
{
    char info[TG_GPT_LOADING_INFO_MAX];
    tg_gpt_load_opts lo = {.n_head = o->n_head,
                           .dtype = (tg_dtype)o->dtype,
                           .gelu = (tg_gelu_form)o->gelu,
                           .attn_path = (tg_head_path)o->attn,
                           .loading_info = info,
                           .loading_info_size = sizeof info};
    if (tg_gpt_load_pretrained_with(g, o->init_from, &lo) < 0)
        return -1;
    printf("loaded: %s\n", info);
    return 0;
}

/* The model of --init-from, checked against the text's vocabulary and
 * --block (whose default becomes the file's block size). 0, or -1 with g
 * zeroed. */
int load_model(tg_gpt *g, options *o, const corpus *cp)
{
    if (load_file(g, o) < 0)
        return -1;
    const tg_gpt_config *c = &g->cfg;
    if (cp->vocab > c->vocab_size)
        report("%s has a vocabulary of %d tokens, the text %d distinct "
               "bytes",
               o->init_from, c->vocab_size, cp->vocab);
    else if (o->block_given && o->block > c->block_size)
        report("--block %d is larger than the block size of %s (%d)", o->block,
               o->init_from, c->block_size);
    else if (cp->n - cp->n_train <= (o->block_given ? o->block : c->block_size))
        report("the last 10%% of the text must be longer than the block (%d)",
               o->block_given ? o->block : c->block_size);
    else {
        if (!o->block_given)
            o->block = c->block_size;
        o->embd = c->n_embd;
        o->heads = c->n_head;
        o->layers = c->n_layer;
        printf("model: from %s\n", o->init_from);
        return 0;
    }
    tg_gpt_free(g);
    return -1;
}

/* Windows evaluated per forward: bounds the (B,T,V) logits' memory. */
#define EVAL_WINDOWS 16

/* The mean cross-entropy of windows [b0, b0 + nb) of ids (B, T+1): inputs
 * ids[:, :-1], targets ids[:, 1:], into *mean. 0 or -1. */
static int window_loss(tg_gpt *g, tg_tensor *ids, int64_t b0, int64_t nb,
                       double *mean)
{
    int64_t T = tg_size(ids, 1) - 1;
    tg_scope_begin();
    tg_tensor *rows = tg_narrow(ids, 0, b0, nb);
    tg_tensor *x = tg_contiguous(tg_narrow(rows, 1, 0, T));
    tg_tensor *y = tg_contiguous(tg_narrow(rows, 1, 1, T));
    tg_tensor *loss = tg_gpt_loss(g, x, y);
    if (loss)
        *mean = tg_item(loss);
    tg_scope_end();
    return loss ? 0 : -1;
}

/* --init-from with --eval-ids: the mean cross-entropy over every position
 * of every window, the last line of the output. 0 or -1. */
int eval_checkpoint(const options *o)
{
    tg_gpt g;
    if (load_file(&g, o) < 0)
        return -1;
    tg_gpt_train(&g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    tg_tensor *ids = tg_load_npy(o->eval_ids);
    int rc = -1;
    if (ids && (tg_dtype_of(ids) != TG_INT64 || tg_ndim(ids) != 2 ||
                tg_size(ids, 0) < 1 || tg_size(ids, 1) < 2))
        report("%s must hold int64 windows (B, T+1) with B >= 1 and T >= 1, "
               "not %s of %d dims",
               o->eval_ids, tg_dtype_name(tg_dtype_of(ids)), tg_ndim(ids));
    else if (ids) {
        const tg_gpt_config *c = &g.cfg;
        int64_t B = tg_size(ids, 0), T = tg_size(ids, 1) - 1;
        printf("model: %s: %d layers, %d heads, n_embd %d, block %d, vocab "
               "%d, %s\n",
               o->init_from, c->n_layer, c->n_head, c->n_embd, c->block_size,
               c->vocab_size, tg_dtype_name(c->dtype));
        printf("windows: %s, %lld of %lld tokens\n", o->eval_ids, (long long)B,
               (long long)T);
        /* the mean over all B T positions: each chunk's mean weighted by
         * its share of the windows */
        double total = 0, mean = 0;
        rc = 0;
        for (int64_t b0 = 0; b0 < B && rc == 0; b0 += EVAL_WINDOWS) {
            int64_t nb = B - b0 < EVAL_WINDOWS ? B - b0 : EVAL_WINDOWS;
            rc = window_loss(&g, ids, b0, nb, &mean);
            total += B <= EVAL_WINDOWS ? mean : mean * (double)nb / (double)B;
        }
        if (rc == 0)
            printf("loss: %.17g\n", total);
    }
    tg_release(ids);
    tg_set_grad_enabled(was);
    tg_gpt_free(&g);
    return rc;
}
