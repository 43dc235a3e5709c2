/* Parameter lists: named, borrowed leaf tensors, so optimizers, zero_grad,
 * gradient clipping and checkpoints can walk any model. */
#include "core/shared.h"
#include "nn/nn.h"
#include "kernels/update.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tg_params_init(tg_params *ps)
{
    if (!ps)
        return;
    ps->items = NULL;
    ps->n = ps->cap = 0;
}

void tg_params_free(tg_params *ps)
{
    if (!ps)
        return;
    free(ps->items);
    tg_params_init(ps);
}

/* Grows the list to hold one more item. */
static bool reserve_one(tg_params *ps)
{
    if (ps->n < ps->cap)
        return true;
    int cap = ps->cap ? 2 * ps->cap : 16;
    tg_param *items = tg__realloc(ps->items, sizeof *items * (size_t)cap);
    if (!items) {
        tg__error("params_add: out of memory for %d parameters", cap);
        return false;
    }
    ps->items = items;
    ps->cap = cap;
    return true;
}

/* Appends t as "prefix.name". A NULL t (a module whose init failed) returns
 * -1 and keeps the first error. A name that is too long or already taken is
 * an error: checkpoints find parameters by name, so names must be unique. */
int tg_params_add(tg_params *ps, const char *prefix, const char *name,
                  tg_tensor *t)
{
    if (!t)
        return -1;
    if (!ps || !name) {
        tg__error("params_add: %s is NULL", ps ? "name" : "the list");
        return -1;
    }
    char full[TG_PARAM_NAME_MAX];
    int len = prefix && *prefix
                  ? snprintf(full, sizeof full, "%s.%s", prefix, name)
                  : snprintf(full, sizeof full, "%s", name);
    if (len < 0 || len >= TG_PARAM_NAME_MAX) {
        tg__error("params_add: name '%s%s%s' is longer than %d characters",
                  prefix && *prefix ? prefix : "", prefix && *prefix ? "." : "",
                  name, TG_PARAM_NAME_MAX - 1);
        return -1;
    }
    if (tg_params_get(ps, full)) {
        tg__error("params_add: duplicate parameter name '%s'", full);
        return -1;
    }
    if (!reserve_one(ps))
        return -1;
    tg_param *p = &ps->items[ps->n++];
    memcpy(p->name, full, (size_t)len + 1);
    p->t = t;
    return 0;
}

tg_tensor *tg_params_get(const tg_params *ps, const char *name)
{
    if (!ps || !name)
        return NULL;
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->items[i].name, name) == 0)
            return ps->items[i].t;
    return NULL;
}

int64_t tg_params_numel(const tg_params *ps)
{
    int64_t n = 0;
    for (int i = 0; ps && i < ps->n; i++)
        n += tg_numel(ps->items[i].t);
    return n;
}

void tg_params_zero_grad(const tg_params *ps)
{
    for (int i = 0; ps && i < ps->n; i++)
        tg_zero_grad(ps->items[i].t);
}

/* torch.nn.utils.clip_grad_norm_ (norm_type 2), in its order:
 *   n_i  = sqrt(sum of g_i^2)            each parameter's gradient apart
 *   norm = sqrt(sum_i n_i^2)             the norm of those norms
 *   coef = max_norm / (norm + 1e-6);  if coef < 1: g *= coef for every g
 * (summing all squares at once is the same norm in exact arithmetic, but
 * rounds differently: an ulp from torch's). A NaN coef, from a NaN norm,
 * scales too, as torch's clamp lets NaN through. Parameters without a
 * gradient are skipped. Returns norm (before clipping); 0 for an empty
 * list or one without gradients. */
double tg_clip_grad_norm(const tg_params *ps, double max_norm)
{
    if (!ps)
        return 0;
    double ss = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *g = tg_grad(ps->items[i].t);
        if (g) {
            double n_i = sqrt(tg__sum_squares(g));
            ss += n_i * n_i;
        }
    }
    double norm = sqrt(ss);
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0 || isnan(coef)) {
        for (int i = 0; i < ps->n; i++) {
            tg_tensor *g = tg_grad(ps->items[i].t);
            if (g)
                tg__scale_in_place(g, coef);
        }
    }
    return norm;
}

const char *tg__param_prefix(const char *op, char *buf, const char *prefix,
                             const char *name, int index)
{
    const char *p = prefix ? prefix : "", *dot = *p ? "." : "";
    int len =
        index >= 0
            ? snprintf(buf, TG_PARAM_NAME_MAX, "%s%s%s.%d", p, dot, name, index)
            : snprintf(buf, TG_PARAM_NAME_MAX, "%s%s%s", p, dot, name);
    if (len < 0 || len >= TG_PARAM_NAME_MAX) {
        tg__error("%s: prefix '%s' is too long", op, p);
        return NULL;
    }
    return buf;
}
