/* Layer norm over the last dim with learned gain and shift, as
 * torch.nn.LayerNorm(dim): gamma = 1 and beta = 0 to start, eps = 1e-5; or
 * with another eps, or no beta (torch's bias=False), by its config. */
#include "nn/nn.h"

#include <string.h>

/* A leaf (dim) filled with value; requires grad; owned by the module (taken
 * out of any open scope). */
static tg_tensor *constant_param(tg_dtype dt, int dim, double value)
{
    tg_tensor *p = tg_keep(tg_full(dt, TG_SHAPE(dim), value));
    tg_set_requires_grad(p, true);
    return p;
}

tg_layernorm_config tg_layernorm_config_default(int dim)
{
    return (tg_layernorm_config){.dim = dim, .eps = 1e-5, .bias = true};
}

/* No random draws: the start is the identity map (up to normalising). On
 * error the module is left zeroed. */
int tg_layernorm_init_with(tg_layernorm *n, tg_dtype dt,
                           const tg_layernorm_config *cfg)
{
    if (!tg__init_begin("layernorm_init", "the layer norm", n, sizeof *n,
                        TG__INIT_CONFIG | TG__INIT_FLOAT, dt, cfg, NULL))
        return -1;
    if (cfg->dim <= 0) {
        tg__error("layernorm_init: dim must be positive, got %d", cfg->dim);
        return -1;
    }
    if (!(cfg->eps >= 0)) {
        tg__error("layernorm_init: eps must be >= 0, got %g", cfg->eps);
        return -1;
    }
    n->gamma = constant_param(dt, cfg->dim, 1.0);
    if (n->gamma && cfg->bias)
        n->beta = constant_param(dt, cfg->dim, 0.0);
    if (!n->gamma || (cfg->bias && !n->beta)) {
        tg_layernorm_free(n);
        return -1;
    }
    n->dim = cfg->dim;
    n->eps = cfg->eps;
    return 0;
}

int tg_layernorm_init(tg_layernorm *n, tg_dtype dt, int dim)
{
    tg_layernorm_config cfg = tg_layernorm_config_default(dim);
    return tg_layernorm_init_with(n, dt, &cfg);
}

void tg_layernorm_free(tg_layernorm *n)
{
    if (!n)
        return;
    tg_release(n->gamma);
    tg_release(n->beta);
    memset(n, 0, sizeof *n);
}

/* Errors unless n is initialised (op names the caller). */
static bool check_module(const char *op, const tg_layernorm *n)
{
    return tg__module_ready(op, "the layer norm", n, n && n->gamma);
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim, var
 * biased (no + beta without a bias: tg_layer_norm takes a NULL beta as 0).                                             (...,dim) -> (...,dim) */
tg_tensor *tg_layernorm_forward(tg_layernorm *n, tg_tensor *x)
{
    if (!check_module("layernorm", n) || !x)
        return NULL;
    tg_dtype dt = tg_dtype_of(n->gamma);
    if (tg_ndim(x) < 1 || tg_size(x, -1) != n->dim || tg_dtype_of(x) != dt) {
        tg__error("layernorm: x must be (...,%d) %s, got %s %s", n->dim,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return NULL;
    }
    return tg_layer_norm(x, n->gamma, n->beta, n->eps);
}

int tg_layernorm_params(tg_layernorm *n, tg_params *ps, const char *prefix)
{
    if (!check_module("layernorm_params", n))
        return -1;
    if (tg_params_add(ps, prefix, "gamma", n->gamma) < 0 ||
        (n->beta && tg_params_add(ps, prefix, "beta", n->beta) < 0))
        return tg__error_wrap("layernorm_params");
    return 0;
}
