/* The feed-forward half of a transformer block: each position on its own,
 * widened to 4C, passed through a nonlinearity, projected back:
 *     out = act(x @ W_fc + b_fc) @ W_proj + b_proj    (B,T,C) -> (B,T,4C) ->
 * (B,T,C) with act = gelu (GPT-2's choice) or relu (the original
 * transformer's). */
#include "tapegrad_nn.h"
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Draws fc (C -> 4C: weight, bias), then proj (4C -> C: weight, bias). On
 * error the module is left zeroed. */
int tg_mlp_init(tg_mlp *m, tg_dtype dt, int n_embd, bool gelu, tg_rng *rng)
{
    if (!m) {
        tg__error("mlp_init: the module is NULL");
        return -1;
    }
    memset(m, 0, sizeof *m);
    if (n_embd <= 0 || n_embd > INT_MAX / 4) {
        tg__error("mlp_init: n_embd must be in 1..%d, got %d", INT_MAX / 4,
                  n_embd);
        return -1;
    }
    m->gelu = gelu;
    if (tg_linear_init(&m->fc, dt, n_embd, 4 * n_embd, true, rng) < 0 ||
        tg_linear_init(&m->proj, dt, 4 * n_embd, n_embd, true, rng) < 0) {
        tg_mlp_free(m);
        return tg__error_wrap("mlp_init");
    }
    return 0;
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
    if (m && m->fc.weight)
        return true;
    tg__error("%s: %s", op,
              m ? "the module is not initialised" : "the module is NULL");
    return false;
}

/* proj(act(fc(x)))                                   (...,C) -> (...,C)
 * (fc checks x's shape and dtype). */
tg_tensor *tg_mlp_forward(tg_mlp *m, tg_tensor *x)
{
    if (!check_module("mlp", m) || !x)
        return NULL;
    tg_tensor *hidden = tg_linear_forward(&m->fc, x); /* (...,4C) */
    tg_tensor *act = m->gelu ? tg_gelu(hidden) : tg_relu(hidden);
    tg_tensor *out = tg_linear_forward(&m->proj, act);
    tg_release(hidden);
    tg_release(act);
    if (!out)
        tg__error_wrap("mlp");
    return out;
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
