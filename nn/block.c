/* A pre-norm transformer block (GPT-2's layout): each half normalises its
 * input, and its output is added back onto the residual stream:
 *     x = x + mha(ln1(x))        tokens talk to each other
 *     x = x + mlp(ln2(x))        each token thinks on its own     (B,T,C) */
#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

tg_block_config tg_block_config_default(int n_embd, int n_heads)
{
    tg_mha_config a = tg_mha_config_default(n_embd, n_heads);
    return (tg_block_config){.n_embd = n_embd,
                             .n_heads = n_heads,
                             .bias = true,
                             .ln_eps = 1e-5,
                             .gelu = true,
                             .scale = a.scale};
}

/* Initialises ln1, ln2, attn, mlp in the struct's order; only attn (heads,
 * then proj) and mlp (fc, then proj) draw from rng. On error the block is
 * left zeroed. */
int tg_block_init_with(tg_block *b, tg_dtype dt, const tg_block_config *cfg,
                       tg_rng *rng)
{
    /* the parts' inits check the dtype and the rng */
    if (!tg__init_begin("block_init", "the block", b, sizeof *b,
                        TG__INIT_CONFIG, dt, cfg, rng))
        return -1;
    tg_layernorm_config ln = tg_layernorm_config_default(cfg->n_embd);
    ln.eps = cfg->ln_eps;
    ln.bias = cfg->bias;
    tg_mha_config attn = tg_mha_config_default(cfg->n_embd, cfg->n_heads);
    attn.bias = cfg->bias;
    attn.qkv_bias = cfg->qkv_bias;
    attn.scale = cfg->scale;
    attn.attn_dropout = cfg->attn_dropout;
    attn.resid_dropout = cfg->resid_dropout;
    tg_mlp_config mlp = tg_mlp_config_default(cfg->n_embd);
    mlp.bias = cfg->bias;
    mlp.gelu = cfg->gelu;
    mlp.gelu_tanh = cfg->gelu_tanh;
    mlp.dropout = cfg->resid_dropout;
    if (tg_layernorm_init_with(&b->ln1, dt, &ln) < 0 ||
        tg_layernorm_init_with(&b->ln2, dt, &ln) < 0 ||
        tg_mha_init_with(&b->attn, dt, &attn, rng) < 0 ||
        tg_mlp_init_with(&b->mlp, dt, &mlp, rng) < 0) {
        tg_block_free(b);
        return tg__error_wrap("block_init");
    }
    return 0;
}

int tg_block_init(tg_block *b, tg_dtype dt, int n_embd, int n_heads, bool gelu,
                  tg_rng *rng)
{
    tg_block_config cfg = tg_block_config_default(n_embd, n_heads);
    cfg.gelu = gelu;
    return tg_block_init_with(b, dt, &cfg, rng);
}

void tg_block_free(tg_block *b)
{
    if (!b)
        return;
    tg_layernorm_free(&b->ln1);
    tg_layernorm_free(&b->ln2);
    tg_mha_free(&b->attn);
    tg_mlp_free(&b->mlp);
    memset(b, 0, sizeof *b);
}

/* Errors unless b is initialised (op names the caller). */
static bool check_module(const char *op, const tg_block *b)
{
    return tg__module_ready(op, "the block", b, b && b->ln1.gamma);
}

/* x must be (B,T,C) in the block's dtype. A NULL x keeps the first error. */
static bool check_input(const tg_block *b, const tg_tensor *x)
{
    if (!check_module("block", b) || !x)
        return false;
    tg_dtype dt = tg_dtype_of(b->ln1.gamma);
    if (tg_ndim(x) != 3 || tg_size(x, 2) != b->ln1.dim ||
        tg_dtype_of(x) != dt) {
        tg__error("block: x must be (B,T,%d) %s, got %s %s", b->ln1.dim,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return false;
    }
    return true;
}

/* x + mha(ln1(x)), then that + mlp(ln2(that))            (B,T,C) -> (B,T,C) */
tg_tensor *tg_block_forward(tg_block *b, tg_tensor *x)
{
    if (!check_input(b, x))
        return NULL;
    tg_tensor *norm1 = tg_layernorm_forward(&b->ln1, x);
    tg_tensor *attended = tg_mha_forward(&b->attn, norm1);
    tg_tensor *mid = tg_add(x, attended);
    tg_tensor *norm2 = tg_layernorm_forward(&b->ln2, mid);
    tg_tensor *fed = tg_mlp_forward(&b->mlp, norm2);
    tg_tensor *out = tg_add(mid, fed);
    tg_release(norm1);
    tg_release(attended);
    tg_release(mid);
    tg_release(norm2);
    tg_release(fed);
    return out;
}

/* attn and mlp (the layer norms have no dropout). */
int tg_block_train(tg_block *b, bool on, tg_rng *rng)
{
    if (!check_module("block_train", b))
        return -1;
    tg_mha_train(&b->attn, on, rng);
    tg_mlp_train(&b->mlp, on, rng);
    return 0;
}

/* ln1.*, attn.*, ln2.*, mlp.*: the order the forward uses them. */
int tg_block_params(tg_block *b, tg_params *ps, const char *prefix)
{
    if (!check_module("block_params", b))
        return -1;
    char name[TG_PARAM_NAME_MAX];
    if (!tg__param_prefix("block_params", name, prefix, "ln1", -1) ||
        tg_layernorm_params(&b->ln1, ps, name) < 0 ||
        !tg__param_prefix("block_params", name, prefix, "attn", -1) ||
        tg_mha_params(&b->attn, ps, name) < 0 ||
        !tg__param_prefix("block_params", name, prefix, "ln2", -1) ||
        tg_layernorm_params(&b->ln2, ps, name) < 0 ||
        !tg__param_prefix("block_params", name, prefix, "mlp", -1) ||
        tg_mlp_params(&b->mlp, ps, name) < 0)
        return tg__error_wrap("block_params");
    return 0;
}
