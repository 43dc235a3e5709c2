/* Layer norm over the last dim with learned gain and shift, as
 * torch.nn.LayerNorm(dim): gamma = 1 and beta = 0 to start, eps = 1e-5. */
#include "tapegrad_nn.h"
#include "internal.h"

#include <string.h>

/* A leaf (dim) filled with value; requires grad; owned by the module (taken
 * out of any open scope). */
static tg_tensor *constant_param(tg_dtype dt, int dim, double value)
{
    tg_tensor *p = tg_keep(tg_full(dt, TG_SHAPE(dim), value));
    tg_set_requires_grad(p, true);
    return p;
}

/* No random draws: the start is the identity map (up to normalising). On
 * error the module is left zeroed. */
int tg_layernorm_init(tg_layernorm *n, tg_dtype dt, int dim)
{
    if (!n) {
        tg__error("layernorm_init: the layer norm is NULL");
        return -1;
    }
    memset(n, 0, sizeof *n);
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg__error("layernorm_init: dtype must be float32 or float64, got %s",
                  tg_dtype_name(dt));
        return -1;
    }
    if (dim <= 0) {
        tg__error("layernorm_init: dim must be positive, got %d", dim);
        return -1;
    }
    n->gamma = constant_param(dt, dim, 1.0);
    n->beta = constant_param(dt, dim, 0.0);
    if (!n->gamma || !n->beta) {
        tg_layernorm_free(n);
        return -1;
    }
    n->dim = dim;
    n->eps = 1e-5;
    return 0;
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
    if (n && n->gamma)
        return true;
    tg__error("%s: %s", op,
              n ? "the layer norm is not initialised"
                : "the layer norm is NULL");
    return false;
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim, var
 * biased.                                             (...,dim) -> (...,dim) */
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
        tg_params_add(ps, prefix, "beta", n->beta) < 0)
        return tg__error_wrap("layernorm_params");
    return 0;
}
