/* What the modules share: the checks before each init's own code, and the
 * check that a module is initialised before it is used. Every message
 * names the op ("linear_init: ..."), so a caller sees which module of a
 * nested one refused. */
#include "core/shared.h"
#include "nn/nn.h"

#include <string.h>

bool tg__check_float_dtype(const char *op, tg_dtype dt)
{
    if (dt == TG_FLOAT32 || dt == TG_FLOAT64)
        return true;
    tg__error("%s: dtype must be float32 or float64, got %s", op,
              tg_dtype_name(dt));
    return false;
}

/* m is zeroed before any check, so every error below leaves it zeroed, as
 * the public header promises for a failed init; the NULL checks go in the
 * order of the init's arguments (module, then rng, then config). */
bool tg__init_begin(const char *op, const char *what, void *m, size_t size,
                    unsigned takes, tg_dtype dt, const void *cfg,
                    const tg_rng *rng)
{
    if (m)
        memset(m, 0, size);
    const char *null = !m                                  ? what
                       : (takes & TG__INIT_RNG) && !rng    ? "rng"
                       : (takes & TG__INIT_CONFIG) && !cfg ? "the config"
                                                           : NULL;
    if (null) {
        tg__error("%s: %s is NULL", op, null);
        return false;
    }
    return !(takes & TG__INIT_FLOAT) || tg__check_float_dtype(op, dt);
}

bool tg__module_ready(const char *op, const char *what, const void *m,
                      bool initialised)
{
    if (m && initialised)
        return true;
    tg__error("%s: %s %s", op, what, m ? "is not initialised" : "is NULL");
    return false;
}

tg_rng tg__no_draw;

tg_tensor *tg__blank_weight(tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *w = tg_keep(tg__empty("init", dt, ndim, shape));
    tg_set_requires_grad(w, true);
    return w;
}
