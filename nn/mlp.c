/* The feed-forward half of a transformer block: each position on its own,
 * widened to 4C, passed through a nonlinearity, projected back:
 *     out = act(x @ W_fc + b_fc) @ W_proj + b_proj    (B,T,C) -> (B,T,4C) ->
 * (B,T,C) with act = gelu (GPT-2's choice; exact, or its tanh form) or
 * relu (the original transformer's), then dropout(out) in training. */
#include "nn/nn.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

tg_mlp_config tg_mlp_config_default(int n_embd)
{
    return (tg_mlp_config){.n_embd = n_embd, .bias = true, .gelu = true};
}

/* Draws fc (C -> 4C: weight, bias), then proj (4C -> C: weight, bias). On
 * error the module is left zeroed. */
int tg_mlp_init_with(tg_mlp *m, tg_dtype dt, const tg_mlp_config *cfg,
                     tg_rng *rng)
{
    /* the parts' inits check the dtype and the rng */
    if (!tg__init_begin("mlp_init", "the module", m, sizeof *m, TG__INIT_CONFIG,
                        dt, cfg, rng))
        return -1;
    int n_embd = cfg->n_embd;
    if (n_embd <= 0 || n_embd > INT_MAX / 4) {
        tg__error("mlp_init: n_embd must be in 1..%d, got %d", INT_MAX / 4,
                  n_embd);
        return -1;
    }
    if (!tg__check_dropout("mlp_init", "dropout", cfg->dropout))
        return -1;
    m->gelu = cfg->gelu;
    m->gelu_tanh = cfg->gelu_tanh;
    m->dropout = cfg->dropout;
    m->training = true;
    tg_linear_config fc = tg_linear_config_default(n_embd, 4 * n_embd);
    tg_linear_config proj = tg_linear_config_default(4 * n_embd, n_embd);
    fc.bias = proj.bias = cfg->bias;
    if (tg_linear_init_with(&m->fc, dt, &fc, rng) < 0 ||
        tg_linear_init_with(&m->proj, dt, &proj, rng) < 0) {
        tg_mlp_free(m);
        return tg__error_wrap("mlp_init");
    }
    return 0;
}

int tg_mlp_init(tg_mlp *m, tg_dtype dt, int n_embd, bool gelu, tg_rng *rng)
{
    tg_mlp_config cfg = tg_mlp_config_default(n_embd);
    cfg.gelu = gelu;
    return tg_mlp_init_with(m, dt, &cfg, rng);
}

void tg_mlp_free(tg_mlp *m)
{
    if (!m)
        return;
    tg_linear_free(&m->fc);
    tg_linear_free(&m->proj);
    memset(m, 0, sizeof *m);
}

/* Errors unless m is initialised (op names the caller). */
static bool check_module(const char *op, const tg_mlp *m)
{
    return tg__module_ready(op, "the module", m, m && m->fc.weight);
}

/* dropout(proj(act(fc(x))))                          (...,C) -> (...,C)
 * (fc checks x's shape and dtype). */
tg_tensor *tg_mlp_forward(tg_mlp *m, tg_tensor *x)
{
    if (!check_module("mlp", m) || !x)
        return NULL;
    tg_tensor *hidden = tg_linear_forward(&m->fc, x); /* (...,4C) */
    tg_tensor *act = !m->gelu       ? tg_relu(hidden)
                     : m->gelu_tanh ? tg_gelu_tanh(hidden)
                                    : tg_gelu(hidden);
    tg_tensor *out = tg_linear_forward(&m->proj, act);
    tg_release(hidden);
    tg_release(act);
    if (!out)
        tg__error_wrap("mlp");
    return tg__module_dropout("mlp", "tg_mlp_train", out, m->dropout,
                              m->training, m->rng);
}

int tg_mlp_train(tg_mlp *m, bool on, tg_rng *rng)
{
    if (!check_module("mlp_train", m))
        return -1;
    m->training = on;
    m->rng = rng;
    return 0;
}

/* fc.weight, fc.bias, proj.weight, proj.bias. */
int tg_mlp_params(tg_mlp *m, tg_params *ps, const char *prefix)
{
    if (!check_module("mlp_params", m))
        return -1;
    char name[TG_PARAM_NAME_MAX];
    if (!tg__param_prefix("mlp_params", name, prefix, "fc", -1) ||
        tg_linear_params(&m->fc, ps, name) < 0 ||
        !tg__param_prefix("mlp_params", name, prefix, "proj", -1) ||
        tg_linear_params(&m->proj, ps, name) < 0)
        return tg__error_wrap("mlp_params");
    return 0;
}
