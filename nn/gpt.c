/* A tiny GPT: ids -> token + position embeddings -> n_layer blocks -> final
 * layer norm -> vocabulary logits; its next-token loss; and sampling. */
#include "core/shared.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors unless every size is positive and the dtype is a float one
 * (n_head dividing n_embd is mha's check). */
static bool check_config(tg_gpt_config c)
{
    if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_embd <= 0 ||
        c.n_head <= 0 || c.n_layer <= 0) {
        tg__error("gpt_init: sizes must be positive, got vocab_size %d, "
                  "block_size %d, n_embd %d, n_head %d, n_layer %d",
                  c.vocab_size, c.block_size, c.n_embd, c.n_head, c.n_layer);
        return false;
    }
    if (!tg__check_float_dtype("gpt_init", c.dtype))
        return false;
    if ((unsigned)c.bias > TG_GPT_BIAS_NONE) {
        tg__error("gpt_init: bias %d is not a tg_gpt_bias (0..%d)", (int)c.bias,
                  TG_GPT_BIAS_NONE);
        return false;
    }
    if (!(c.ln_eps >= 0) || (c.has_attn_scale && !isfinite(c.attn_scale))) {
        tg__error("gpt_init: need ln_eps >= 0 and a finite attn_scale, got "
                  "%g and %g",
                  c.ln_eps, c.attn_scale);
        return false;
    }
    if ((unsigned)c.attn_path > TG_HEAD_TILED) {
        tg__error("gpt_init: attn_path %d is not a tg_head_path (0..%d)",
                  (int)c.attn_path, TG_HEAD_TILED);
        return false;
    }
    return tg__check_dropout("gpt_init", "embd_dropout", c.embd_dropout) &&
           tg__check_dropout("gpt_init", "attn_dropout", c.attn_dropout) &&
           tg__check_dropout("gpt_init", "resid_dropout", c.resid_dropout);
}

/* The blocks' config from the model's: its bias mode, activation, eps (0:
 * torch's 1e-5), scale and dropouts. */
static tg_block_config block_config(const tg_gpt_config *c)
{
    tg_block_config b = tg_block_config_default(c->n_embd, c->n_head);
    b.bias = c->bias != TG_GPT_BIAS_NONE;
    b.qkv_bias = c->bias == TG_GPT_BIAS_ALL;
    b.ln_eps = c->ln_eps > 0 ? c->ln_eps : 1e-5;
    b.gelu = c->gelu;
    b.gelu_tanh = c->gelu_tanh;
    if (c->has_attn_scale)
        b.scale = c->attn_scale;
    b.attn_dropout = c->attn_dropout;
    b.resid_dropout = c->resid_dropout;
    return b;
}

/* The attention path of every head of b (the block's config has none: the
 * path is the model's choice, made here in one place). */
static void set_path(tg_block *b, tg_head_path path)
{
    for (int h = 0; h < b->attn.n_heads; h++)
        b->attn.heads[h].path = path;
}

/* Initialises tok (V,C), pos (block_size,C), blocks 0..n_layer-1, ln_f and
 * lm_head (C -> V, no bias; not at all when tied to tok), in the struct's
 * order, each drawing from rng as its own init says. On error the model is
 * left zeroed. */
int tg_gpt_init(tg_gpt *g, tg_gpt_config cfg, tg_rng *rng)
{
    /* cfg comes by value; the parts' inits check the rng, and check_config
     * the dtype, after the sizes (so the order of the errors stays) */
    if (!tg__init_begin("gpt_init", "the model", g, sizeof *g, 0, cfg.dtype,
                        NULL, rng))
        return -1;
    if (!check_config(cfg))
        return -1;
    g->blocks = tg__calloc((size_t)cfg.n_layer, sizeof *g->blocks);
    if (!g->blocks) {
        tg__error("gpt_init: out of memory for %d blocks", cfg.n_layer);
        return -1;
    }
    g->cfg = cfg;
    g->training = true;
    tg_dtype dt = cfg.dtype;
    tg_block_config bc = block_config(&cfg);
    tg_layernorm_config lc = tg_layernorm_config_default(cfg.n_embd);
    lc.eps = bc.ln_eps;
    lc.bias = bc.bias;
    if (tg_embed_init(&g->tok, dt, cfg.vocab_size, cfg.n_embd, rng) < 0 ||
        tg_embed_init(&g->pos, dt, cfg.block_size, cfg.n_embd, rng) < 0)
        goto fail;
    for (int i = 0; i < cfg.n_layer; i++) {
        if (tg_block_init_with(&g->blocks[i], dt, &bc, rng) < 0)
            goto fail;
        set_path(&g->blocks[i], cfg.attn_path);
    }
    if (tg_layernorm_init_with(&g->ln_f, dt, &lc) < 0 ||
        (!cfg.tie_weights && tg_linear_init(&g->lm_head, dt, cfg.n_embd,
                                            cfg.vocab_size, false, rng) < 0))
        goto fail;
    return 0;
fail:
    tg_gpt_free(g);
    return tg__error_wrap("gpt_init");
}

/* tg_gpt_init without the draws, for a loader that writes every weight
 * (tg__no_draw: they are left unset). */
int tg__gpt_build(tg_gpt *g, tg_gpt_config cfg)
{
    return tg_gpt_init(g, cfg, &tg__no_draw);
}

void tg_gpt_free(tg_gpt *g)
{
    if (!g)
        return;
    tg_embed_free(&g->tok);
    tg_embed_free(&g->pos);
    for (int i = 0; g->blocks && i < g->cfg.n_layer; i++)
        tg_block_free(&g->blocks[i]);
    free(g->blocks);
    tg_layernorm_free(&g->ln_f);
    tg_linear_free(&g->lm_head);
    memset(g, 0, sizeof *g);
}

/* Errors unless g is initialised (op names the caller). */
static bool check_module(const char *op, const tg_gpt *g)
{
    return tg__module_ready(op, "the model", g, g && g->tok.weight);
}

/* ids must be int64 (B,T) with 1 <= T <= block_size (positions beyond it
 * have no embedding). A NULL ids keeps the first error. */
static bool check_ids(const char *op, const tg_gpt *g, const tg_tensor *ids)
{
    if (!check_module(op, g) || !ids)
        return false;
    if (tg_dtype_of(ids) != TG_INT64 || tg_ndim(ids) != 2 ||
        tg_size(ids, 1) < 1) {
        tg__error("%s: ids must be int64 (B,T), got %s %s", op,
                  tg_dtype_name(tg_dtype_of(ids)), TG_SHP(ids));
        return false;
    }
    if (tg_size(ids, 1) > g->cfg.block_size) {
        tg__error("%s: ids %s: T = %lld exceeds block_size %d", op, TG_SHP(ids),
                  (long long)tg_size(ids, 1), g->cfg.block_size);
        return false;
    }
    return true;
}

/* The block (ctx) as a tg_checkpoint segment: in[0] is x, the rest its
 * parameters, which it reads from the block itself. */
static tg_tensor *block_segment(tg_tensor *const *in, void *ctx)
{
    return tg_block_forward(ctx, in[0]);
}

/* Block i of x, as a checkpointed segment when the config asks and the
 * tape would record it (cfg.checkpoint): its inputs x and the block's
 * parameters, its rng the dropout's. */
static tg_tensor *block_step(tg_gpt *g, int i, tg_tensor *x)
{
    tg_block *b = &g->blocks[i];
    if (!g->cfg.checkpoint || !x || !tg_is_grad_enabled())
        return tg_block_forward(b, x);
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor **in = NULL;
    tg_tensor *y = NULL;
    if (tg_block_params(b, &ps, NULL) == 0 &&
        !(in = tg__calloc((size_t)ps.n + 1, sizeof *in)))
        tg__error("gpt: out of memory for block %d's checkpoint", i);
    if (in) {
        in[0] = x;
        for (int k = 0; k < ps.n; k++)
            in[k + 1] = ps.items[k].t;
        y = tg_checkpoint(block_segment, b, ps.n + 1, in,
                          g->training ? g->rng : NULL);
    }
    free(in);
    tg_params_free(&ps);
    return y;
}

/* x = dropout(tok[ids] + pos[0:T])             (B,T,C) + (T,C) -> (B,T,C)
 * x = block_i(x), i = 0..n_layer-1                               (B,T,C)
 * h = ln_f(x)                                                    (B,T,C) */
static tg_tensor *hidden(tg_gpt *g, tg_tensor *ids)
{
    tg_tensor *tok = tg_embed_forward(&g->tok, ids);
    tg_tensor *pos = tg_embed_positions(&g->pos, tg_size(ids, 1));
    tg_tensor *x = tg_add(tok, pos);
    tg_release(tok);
    tg_release(pos);
    x = tg__module_dropout("gpt", "tg_gpt_train", x, g->cfg.embd_dropout,
                           g->training, g->rng);
    for (int i = 0; i < g->cfg.n_layer; i++)
        x = tg__then(x, block_step(g, i, x));
    return tg__then(x, tg_layernorm_forward(&g->ln_f, x));
}

/* The head's weight W_lm (C,V): tok.weight^T when tied (a view, *view,
 * to release: backward adds both uses' gradients into the one tok.weight
 * grad), else lm_head's. NULL with the error when the view fails. */
static tg_tensor *head_weight(tg_gpt *g, tg_tensor **view)
{
    *view = g->cfg.tie_weights ? tg_transpose(g->tok.weight, 0, 1) : NULL;
    return g->cfg.tie_weights ? *view : g->lm_head.weight;
}

/* logits = hidden(ids) @ W_lm                                    (B,T,V) */
tg_tensor *tg_gpt_forward(tg_gpt *g, tg_tensor *ids)
{
    if (!check_ids("gpt", g, ids))
        return NULL;
    tg_tensor *view = NULL, *x = hidden(g, ids);
    tg_tensor *w = x ? head_weight(g, &view) : NULL;
    tg_tensor *logits = w ? tg_matmul(x, w) : NULL;
    tg_release(view);
    tg_release(x);
    return logits;
}

/* The embedding dropout here, and every block. */
int tg_gpt_train(tg_gpt *g, bool on, tg_rng *rng)
{
    if (!check_module("gpt_train", g))
        return -1;
    g->training = on;
    g->rng = rng;
    for (int i = 0; i < g->cfg.n_layer; i++)
        tg_block_train(&g->blocks[i], on, rng);
    return 0;
}

/* mean over (b,t) of logsumexp(logits[b,t]) - logits[b,t,targets[b,t]]
 * with logits = hidden(ids) @ W_lm:
 * position t predicts token t+1, so targets are ids shifted by one. */
tg_tensor *tg_gpt_loss(tg_gpt *g, tg_tensor *ids, tg_tensor *targets)
{
    if (!check_ids("gpt_loss", g, ids) || !targets)
        return NULL;
    if (tg_dtype_of(targets) != TG_INT64 || tg_ndim(targets) != 2 ||
        tg_size(targets, 0) != tg_size(ids, 0) ||
        tg_size(targets, 1) != tg_size(ids, 1)) {
        tg__error("gpt_loss: targets must be int64 %s like ids, got %s %s",
                  TG_SHP(ids), tg_dtype_name(tg_dtype_of(targets)),
                  TG_SHP(targets));
        return NULL;
    }
    /* cross_entropy(h @ W_lm, targets) fused: the (B,T,V) logits and
     * their gradient never live whole (ops/linear_ce.c) */
    tg_tensor *view = NULL, *x = hidden(g, ids);
    tg_tensor *w = x ? head_weight(g, &view) : NULL;
    tg_tensor *loss = w ? tg_linear_cross_entropy(x, w, targets) : NULL;
    tg_release(view);
    tg_release(x);
    return loss;
}

/* probs = softmax(logits[0, T-1] / temperature) for the context ctx (T ids),
 * into probs (V doubles). 0 or -1. */
static int next_token_probs(tg_gpt *g, const int64_t *ctx, int64_t T,
                            double temperature, double *probs)
{
    tg_tensor *ids = tg_from_data(TG_INT64, TG_SHAPE(1, T), ctx);
    tg_tensor *logits = tg_gpt_forward(g, ids); /* (1,T,V) */
    tg_tensor *last = tg_select(logits, 1, -1); /* (1,V) */
    tg_tensor *cooled = tg_scale(last, 1.0 / temperature);
    tg_tensor *p = tg_softmax(cooled, -1);
    int rc = p ? tg_copy_out(p, TG_FLOAT64, probs) : -1;
    tg_release(ids);
    tg_release(logits);
    tg_release(last);
    tg_release(cooled);
    tg_release(p);
    return rc;
}

/* Inverse CDF: the first i with u < p_0 + ... + p_i, i.e. numpy's
 * searchsorted(cumsum(p), u, side='right'). When rounding leaves the total
 * at or below u, the last i with p_i > 0. A p_i = 0 is never chosen. */
static int64_t sample(const double *p, int64_t V, double u)
{
    double cdf = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < V; i++) {
        cdf += p[i];
        if (u < cdf)
            return i;
        if (p[i] > 0)
            last = i;
    }
    return last;
}

tg_gpt_sampling tg_gpt_sampling_default(void)
{
    return (tg_gpt_sampling){
        .temperature = 1, .top_k = TG_TOP_K_ALL, .top_p = 1};
}

/* One token's probability, for sorting. */
typedef struct ranked {
    double p;
    int64_t id;
} ranked;

/* Larger probability first; equal ones in id order (qsort is not stable). */
static int by_prob_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->p > y->p   ? -1
           : x->p < y->p ? 1
                         : (x->id > y->id) - (x->id < y->id);
}

/* Zeroes the probabilities outside top-k and the nucleus, in place, given
 * order (V ids, scratch). Since softmax is monotone, the k largest logits
 * are the k largest probabilities: keep p_i >= the k-th largest (ties with
 * it too, as nanoGPT's logits < v[:, [-1]] test). Then, over the kept ones
 * renormalised, keep the fewest most likely whose sum reaches top_p (the
 * token that crosses it included). Returns the sum of what is kept. */
static double filter(double *p, int64_t V, const tg_gpt_sampling *s,
                     ranked *order)
{
    for (int64_t i = 0; i < V; i++)
        order[i] = (ranked){p[i], i};
    qsort(order, (size_t)V, sizeof *order, by_prob_desc);
    if (s->top_k != TG_TOP_K_ALL) {
        double kth = order[s->top_k - 1].p;
        for (int64_t i = 0; i < V; i++)
            if (p[i] < kth)
                p[i] = 0;
    }
    double kept = 0;
    for (int64_t r = 0; r < V; r++)
        kept += p[order[r].id];
    if (s->top_p < 1) {
        double cum = 0;
        int64_t r = 0;
        for (; r < V && cum < s->top_p * kept; r++)
            cum += p[order[r].id];
        for (; r < V; r++)
            p[order[r].id] = 0;
        kept = cum;
    }
    return kept;
}

/* Errors unless ids is int64 (1,T0), T0 >= 1, and the options make sense. */
static bool check_generate(const tg_gpt *g, const tg_tensor *ids, int n_new,
                           const tg_gpt_sampling *s, const tg_rng *rng)
{
    if (!check_module("gpt_generate", g) || !ids)
        return false;
    if (tg_dtype_of(ids) != TG_INT64 || tg_ndim(ids) != 2 ||
        tg_size(ids, 0) != 1 || tg_size(ids, 1) < 1) {
        tg__error("gpt_generate: ids must be int64 (1,T), got %s %s",
                  tg_dtype_name(tg_dtype_of(ids)), TG_SHP(ids));
        return false;
    }
    if (!s) {
        tg__error("gpt_generate: the sampling options are NULL");
        return false;
    }
    if (!rng || n_new < 0 || !(s->temperature > 0)) {
        tg__error("gpt_generate: need an rng, n_new >= 0 and temperature > 0, "
                  "got %s, %d, %g",
                  rng ? "an rng" : "NULL", n_new, s->temperature);
        return false;
    }
    if (s->top_k != TG_TOP_K_ALL &&
        (s->top_k < 1 || s->top_k > g->cfg.vocab_size)) {
        tg__error("gpt_generate: top_k must be in 1..%d (the vocabulary) or "
                  "TG_TOP_K_ALL, got %d",
                  g->cfg.vocab_size, s->top_k);
        return false;
    }
    if (!(s->top_p > 0 && s->top_p <= 1)) {
        tg__error("gpt_generate: top_p must be in (0, 1], got %g", s->top_p);
        return false;
    }
    return true;
}

/* Repeats n_new times: look at the last block_size tokens at most, take the
 * last position's distribution softmax(logits / temperature), keep what
 * top_k and top_p allow, draw the next token from it with one
 * tg_rng_uniform (u scaled by the kept total), append. Unfiltered, u is
 * used as drawn, as tg_gpt_generate always did. No tape is recorded.
 * Returns the ids extended to (1, T0 + n_new). */
tg_tensor *tg_gpt_generate_with(tg_gpt *g, tg_tensor *ids, int n_new,
                                const tg_gpt_sampling *s, tg_rng *rng)
{
    if (!check_generate(g, ids, n_new, s, rng))
        return NULL;
    int64_t T0 = tg_size(ids, 1), n = T0 + n_new, V = g->cfg.vocab_size;
    bool filtered = s->top_k != TG_TOP_K_ALL || s->top_p < 1;
    int64_t *tokens = tg__malloc(sizeof *tokens * (size_t)n);
    double *probs = tg__malloc(sizeof *probs * (size_t)V);
    ranked *order = filtered ? tg__malloc(sizeof *order * (size_t)V) : NULL;
    bool have = tokens && probs && (order || !filtered);
    int rc = have ? tg_copy_out(ids, TG_INT64, tokens) : -1;
    if (!have)
        tg__error("gpt_generate: out of memory for %lld tokens", (long long)n);
    bool was = tg_set_grad_enabled(false);
    for (int64_t t = T0; t < n && rc == 0; t++) {
        int64_t T = t < g->cfg.block_size ? t : g->cfg.block_size;
        rc = next_token_probs(g, tokens + t - T, T, s->temperature, probs);
        if (rc != 0)
            break;
        double u = tg_rng_uniform(rng);
        if (filtered)
            u *= filter(probs, V, s, order);
        tokens[t] = sample(probs, V, u);
    }
    tg_set_grad_enabled(was);
    tg_tensor *out =
        rc == 0 ? tg_from_data(TG_INT64, TG_SHAPE(1, n), tokens) : NULL;
    free(tokens);
    free(probs);
    free(order);
    return out;
}

tg_tensor *tg_gpt_generate(tg_gpt *g, tg_tensor *ids, int n_new,
                           double temperature, tg_rng *rng)
{
    tg_gpt_sampling s = tg_gpt_sampling_default();
    s.temperature = temperature;
    return tg_gpt_generate_with(g, ids, n_new, &s, rng);
}

/* tok.weight, pos.weight, blocks.<i>.*, ln_f.gamma/beta, lm_head.weight
 * (which is tok.weight when tied: listed once, so an optimizer updates it
 * once and a checkpoint saves it once). */
int tg_gpt_params(tg_gpt *g, tg_params *ps, const char *prefix)
{
    if (!check_module("gpt_params", g))
        return -1;
    char name[TG_PARAM_NAME_MAX];
    const char *op = "gpt_params";
    if (!tg__param_prefix(op, name, prefix, "tok", -1) ||
        tg_embed_params(&g->tok, ps, name) < 0 ||
        !tg__param_prefix(op, name, prefix, "pos", -1) ||
        tg_embed_params(&g->pos, ps, name) < 0)
        return tg__error_wrap(op);
    for (int i = 0; i < g->cfg.n_layer; i++)
        if (!tg__param_prefix(op, name, prefix, "blocks", i) ||
            tg_block_params(&g->blocks[i], ps, name) < 0)
            return tg__error_wrap(op);
    if (!tg__param_prefix(op, name, prefix, "ln_f", -1) ||
        tg_layernorm_params(&g->ln_f, ps, name) < 0 ||
        (!g->cfg.tie_weights &&
         (!tg__param_prefix(op, name, prefix, "lm_head", -1) ||
          tg_linear_params(&g->lm_head, ps, name) < 0)))
        return tg__error_wrap(op);
    return 0;
}
