/* A linear layer, y = x @ weight + bias, initialised as torch.nn.Linear.
 *
 * torch stores weight as (out, in) and computes x @ weight^T; we store it as
 * (in, out), the lesson's W_q layout, so the forward is a plain x @ weight. */
#include "nn/nn.h"

#include <math.h>
#include <string.h>

/* A leaf drawn U(-bound, bound) as (2u - 1) * bound with u = tg_rand (numpy's
 * np.random.rand), in C order, computed in double and rounded once to dt.
 * Requires grad; owned by the module (taken out of any open scope). */
static tg_tensor *uniform(tg_rng *rng, tg_dtype dt, int ndim,
                          const int64_t *shape, double bound)
{
    if (rng == &tg__no_draw)
        return tg__blank_weight(dt, ndim, shape);
    tg_tensor *u = tg_rand(rng, TG_FLOAT64, ndim, shape);
    tg_tensor *u2 = tg_scale(u, 2.0);
    tg_tensor *centred = tg_add_scalar(u2, -1.0); /* U(-1, 1) */
    tg_tensor *drawn = tg_scale(centred, bound);
    tg_tensor *p = tg_keep(tg_to(drawn, dt));
    tg_release(u);
    tg_release(u2);
    tg_release(centred);
    tg_release(drawn);
    tg_set_requires_grad(p, true);
    return p;
}

tg_linear_config tg_linear_config_default(int in, int out)
{
    return (tg_linear_config){.in = in, .out = out, .bias = true};
}

/* Draws weight (in,out), then bias (out), both U(-1/sqrt(in), 1/sqrt(in)),
 * torch's default (kaiming_uniform with a = sqrt(5) comes to this bound). On
 * error the layer is left zeroed. */
int tg_linear_init_with(tg_linear *l, tg_dtype dt, const tg_linear_config *cfg,
                        tg_rng *rng)
{
    if (!tg__init_begin("linear_init", "the layer", l, sizeof *l,
                        TG__INIT_RNG | TG__INIT_CONFIG | TG__INIT_FLOAT, dt,
                        cfg, rng))
        return -1;
    int in = cfg->in, out = cfg->out;
    if (in <= 0 || out <= 0) {
        tg__error("linear_init: sizes must be positive, got in %d, out %d", in,
                  out);
        return -1;
    }
    l->in = in;
    l->out = out;
    double bound = 1.0 / sqrt(in);
    l->weight = uniform(rng, dt, TG_SHAPE(in, out), bound);
    if (l->weight && cfg->bias)
        l->bias = uniform(rng, dt, TG_SHAPE(out), bound);
    if (!l->weight || (cfg->bias && !l->bias)) {
        tg_linear_free(l);
        return -1;
    }
    return 0;
}

int tg_linear_init(tg_linear *l, tg_dtype dt, int in, int out, bool bias,
                   tg_rng *rng)
{
    tg_linear_config cfg = tg_linear_config_default(in, out);
    cfg.bias = bias;
    return tg_linear_init_with(l, dt, &cfg, rng);
}

void tg_linear_free(tg_linear *l)
{
    if (!l)
        return;
    tg_release(l->weight);
    tg_release(l->bias);
    memset(l, 0, sizeof *l);
}

/* x must be (..., in) in the layer's dtype. A NULL x keeps the first error. */
static bool check_input(const tg_linear *l, const tg_tensor *x)
{
    if (!tg__module_ready("linear", "the layer", l, l && l->weight) || !x)
        return false;
    tg_dtype dt = tg_dtype_of(l->weight);
    if (tg_ndim(x) < 1 || tg_size(x, -1) != l->in || tg_dtype_of(x) != dt) {
        tg__error("linear: x must be (...,%d) %s, got %s %s", l->in,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return false;
    }
    return true;
}

/* y = x @ weight + bias                 (...,in) @ (in,out) + (out) ->
 * (...,out) */
tg_tensor *tg_linear_forward(tg_linear *l, tg_tensor *x)
{
    if (!check_input(l, x))
        return NULL;
    tg_tensor *y = tg_matmul(x, l->weight);
    if (!l->bias)
        return y;
    tg_tensor *biased = tg_add(y, l->bias);
    tg_release(y);
    return biased;
}

int tg_linear_params(tg_linear *l, tg_params *ps, const char *prefix)
{
    if (!tg__module_ready("linear_params", "the layer", l, l && l->weight))
        return -1;
    if (tg_params_add(ps, prefix, "weight", l->weight) < 0 ||
        (l->bias && tg_params_add(ps, prefix, "bias", l->bias) < 0))
        return tg__error_wrap("linear_params");
    return 0;
}
