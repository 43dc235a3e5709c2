/* Multi-head attention: n_heads independent heads of size C / n_heads read
 * the same x, their outputs are joined on the channel dim, and a biased
 * linear mixes them:
 *     out = cat(head_0(x), ..., head_{n-1}(x), -1) @ W_proj + b_proj   (B,T,C)
 * then dropout(out) in training (nanoGPT's resid_dropout). */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tg_mha_config tg_mha_config_default(int n_embd, int n_heads)
{
    bool divides = n_embd > 0 && n_heads > 0 && n_embd % n_heads == 0;
    return (tg_mha_config){.n_embd = n_embd,
                           .n_heads = n_heads,
                           .bias = true,
                           .causal = true,
                           .scale = divides ? 1.0 / sqrt(n_embd / n_heads) : 0};
}

/* Draws heads 0..n_heads-1 (each w_q, w_k, w_v), then proj (weight, bias):
 * the struct's order. On error the module is left zeroed. */
int tg_mha_init_with(tg_mha *m, tg_dtype dt, const tg_mha_config *cfg,
                     tg_rng *rng)
{
    /* the parts' inits check the dtype and the rng */
    if (!tg__init_begin("mha_init", "the module", m, sizeof *m, TG__INIT_CONFIG,
                        dt, cfg, rng))
        return -1;
    int n_embd = cfg->n_embd, n_heads = cfg->n_heads;
    if (n_embd <= 0 || n_heads <= 0 || n_embd % n_heads != 0) {
        tg__error("mha_init: n_heads %d does not divide n_embd %d", n_heads,
                  n_embd);
        return -1;
    }
    if (!tg__check_dropout("mha_init", "resid_dropout", cfg->resid_dropout))
        return -1;
    m->heads = tg__calloc((size_t)n_heads, sizeof *m->heads);
    if (!m->heads) {
        tg__error("mha_init: out of memory for %d heads", n_heads);
        return -1;
    }
    m->n_heads = n_heads;
    m->resid_dropout = cfg->resid_dropout;
    m->training = true;
    tg_head_config hc = tg_head_config_default(n_embd, n_embd / n_heads);
    hc.qkv_bias = cfg->qkv_bias;
    hc.causal = cfg->causal;
    hc.scale = cfg->scale;
    hc.attn_dropout = cfg->attn_dropout;
    for (int i = 0; i < n_heads; i++)
        if (tg_head_init_with(&m->heads[i], dt, &hc, rng) < 0)
            goto fail;
    tg_linear_config pc = tg_linear_config_default(n_embd, n_embd);
    pc.bias = cfg->bias;
    if (tg_linear_init_with(&m->proj, dt, &pc, rng) < 0)
        goto fail;
    return 0;
fail:
    tg_mha_free(m);
    return tg__error_wrap("mha_init");
}

int tg_mha_init(tg_mha *m, tg_dtype dt, int n_embd, int n_heads, tg_rng *rng)
{
    tg_mha_config cfg = tg_mha_config_default(n_embd, n_heads);
    return tg_mha_init_with(m, dt, &cfg, rng);
}

void tg_mha_free(tg_mha *m)
{
    if (!m)
        return;
    for (int i = 0; m->heads && i < m->n_heads; i++)
        tg_head_free(&m->heads[i]);
    free(m->heads);
    tg_linear_free(&m->proj);
    memset(m, 0, sizeof *m);
}

/* Errors unless m is initialised (op names the caller). */
static bool check_module(const char *op, const tg_mha *m)
{
    return tg__module_ready(op, "the module", m, m && m->heads);
}

/* x must be (B,T,C) in the module's dtype. A NULL x keeps the first error. */
static bool check_input(const tg_mha *m, const tg_tensor *x)
{
    if (!check_module("mha", m) || !x)
        return false;
    tg_dtype dt = tg_dtype_of(m->proj.weight);
    if (tg_ndim(x) != 3 || tg_size(x, 2) != m->proj.in ||
        tg_dtype_of(x) != dt) {
        tg__error("mha: x must be (B,T,%d) %s, got %s %s", m->proj.in,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return false;
    }
    return true;
}

/* cat(head_i(x) for each i, -1)          n_heads x (B,T,hs) -> (B,T,C) */
static tg_tensor *all_heads(tg_mha *m, tg_tensor *x)
{
    tg_tensor **outs = tg__calloc((size_t)m->n_heads, sizeof *outs);
    if (!outs) {
        tg__error("mha: out of memory for %d head outputs", m->n_heads);
        return NULL;
    }
    for (int i = 0; i < m->n_heads; i++)
        outs[i] = tg_head_forward(&m->heads[i], x);
    tg_tensor *joined = tg_cat(outs, m->n_heads, -1);
    for (int i = 0; i < m->n_heads; i++)
        tg_release(outs[i]);
    free(outs);
    return joined;
}

/* dropout(proj(cat(heads)))                             (B,T,C) -> (B,T,C) */
tg_tensor *tg_mha_forward(tg_mha *m, tg_tensor *x)
{
    if (!check_input(m, x))
        return NULL;
    tg_tensor *joined = all_heads(m, x);
    tg_tensor *out = tg_linear_forward(&m->proj, joined);
    tg_release(joined);
    return tg__module_dropout("mha", "tg_mha_train", out, m->resid_dropout,
                              m->training, m->rng);
}

/* m and each head. */
int tg_mha_train(tg_mha *m, bool on, tg_rng *rng)
{
    if (!check_module("mha_train", m))
        return -1;
    m->training = on;
    m->rng = rng;
    for (int i = 0; i < m->n_heads; i++)
        tg_head_train(&m->heads[i], on, rng);
    return 0;
}

/* heads.<i>.w_q/w_k/w_v for each head, then proj.weight, proj.bias. */
int tg_mha_params(tg_mha *m, tg_params *ps, const char *prefix)
{
    if (!check_module("mha_params", m))
        return -1;
    char name[TG_PARAM_NAME_MAX];
    for (int i = 0; i < m->n_heads; i++)
        if (!tg__param_prefix("mha_params", name, prefix, "heads", i) ||
            tg_head_params(&m->heads[i], ps, name) < 0)
            return tg__error_wrap("mha_params");
    if (!tg__param_prefix("mha_params", name, prefix, "proj", -1) ||
        tg_linear_params(&m->proj, ps, name) < 0)
        return tg__error_wrap("mha_params");
    return 0;
}
