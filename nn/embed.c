/* An embedding table: num vectors of size dim, looked up by int64 id (token
 * embeddings) or taken as its first T rows (position embeddings). */
#include "nn/nn.h"

#include <string.h>

/* Draws weight (num,dim) N(0, 1) as torch.nn.Embedding does, from
 * np.random.randn (in double, rounded once to dt). On error the table is left
 * zeroed. */
int tg_embed_init(tg_embed *e, tg_dtype dt, int num, int dim, tg_rng *rng)
{
    if (!tg__init_begin("embed_init", "the table", e, sizeof *e,
                        TG__INIT_RNG | TG__INIT_FLOAT, dt, NULL, rng))
        return -1;
    if (num <= 0 || dim <= 0) {
        tg__error("embed_init: sizes must be positive, got num %d, dim %d", num,
                  dim);
        return -1;
    }
    if (rng == &tg__no_draw)
        e->weight = tg__blank_weight(dt, TG_SHAPE(num, dim));
    else {
        tg_tensor *draw = tg_randn(rng, TG_FLOAT64, TG_SHAPE(num, dim));
        e->weight = tg_keep(tg_to(draw, dt)); /* owned, out of any scope */
        tg_release(draw);
    }
    if (!e->weight)
        return -1;
    tg_set_requires_grad(e->weight, true);
    e->num = num;
    e->dim = dim;
    return 0;
}

void tg_embed_free(tg_embed *e)
{
    if (!e)
        return;
    tg_release(e->weight);
    memset(e, 0, sizeof *e);
}

/* Errors unless e is an initialised table (op names the caller). */
static bool check_table(const char *op, const tg_embed *e)
{
    return tg__module_ready(op, "the table", e, e && e->weight);
}

/* out[..., :] = weight[ids[...], :]                 ids (...) -> (..., dim)
 * (tg_embedding checks that every id is in [0, num)). */
tg_tensor *tg_embed_forward(tg_embed *e, tg_tensor *ids)
{
    if (!check_table("embed", e) || !ids)
        return NULL;
    if (tg_dtype_of(ids) != TG_INT64) {
        tg__error("embed: ids must be int64, got %s %s",
                  tg_dtype_name(tg_dtype_of(ids)), TG_SHP(ids));
        return NULL;
    }
    return tg_embedding(e->weight, ids);
}

/* weight[0:T] as a view, so the gradient reaches those rows.   (T,dim) */
tg_tensor *tg_embed_positions(tg_embed *e, int64_t T)
{
    if (!check_table("embed_positions", e))
        return NULL;
    if (T < 0 || T > e->num) {
        tg__error("embed_positions: %lld positions, but the table has %d rows",
                  (long long)T, e->num);
        return NULL;
    }
    return tg_slice(e->weight, 0, 0, T);
}

int tg_embed_params(tg_embed *e, tg_params *ps, const char *prefix)
{
    if (!check_table("embed_params", e))
        return -1;
    if (tg_params_add(ps, prefix, "weight", e->weight) < 0)
        return tg__error_wrap("embed_params");
    return 0;
}
