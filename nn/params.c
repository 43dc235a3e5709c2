/* Parameter lists: named, borrowed leaf tensors, so optimizers, zero_grad,
 * gradient clipping and checkpoints can walk any model. */
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/name_hash.h"
#include "nn/names.h"
#include "nn/nn.h"
#include "kernels/update.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg_params_init(tg_params *ps)
{
    if (!ps)
        return;
    ps->items = NULL;
    ps->n = ps->cap = 0;
    ps->index = NULL;
}

void tg_params_free(tg_params *ps)
{
    if (!ps)
        return;
    free(ps->items);
    tg__name_hash_free(ps);
    tg_params_init(ps);
}

/* Grows the list to hold n more items (doubling, so that adding one at a
 * time stays linear). */
static bool reserve(tg_params *ps, size_t n)
{
    size_t need = (size_t)ps->n + n;
    if (need <= (size_t)ps->cap)
        return true;
    size_t cap = ps->cap ? 2 * (size_t)ps->cap : 16;
    if (cap < need)
        cap = need;
    tg_param *items =
        cap <= INT_MAX ? tg__realloc(ps->items, sizeof *items * cap) : NULL;
    if (!items) {
        tg__error("params_add: out of memory for %zu parameters", cap);
        return false;
    }
    ps->items = items;
    ps->cap = (int)cap;
    return true;
}

/* Appends t as full (shorter than TG_PARAM_NAME_MAX: the caller checked),
 * after reserve. */
static void append(tg_params *ps, const char *full, tg_tensor *t)
{
    tg_param *p = &ps->items[ps->n++];
    snprintf(p->name, sizeof p->name, "%s", full);
    p->t = t;
}

/* Appends t as "prefix.name". A NULL t (a module whose init failed) returns
 * -1 and keeps the first error. A name that is too long or already taken is
 * an error: checkpoints find parameters by name, so names must be unique.
 * The names' hash (nn/name_hash.c) makes the check O(1). (The readers,
 * which add thousands of names at once, go through tg__params_adopt.) */
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
    if (!tg__name_hash_sync(ps, 1)) {
        tg__error("params_add: out of memory for the names' hash");
        return -1;
    }
    if (tg_params_get(ps, full)) {
        tg__error("params_add: duplicate parameter name '%s'", full);
        return -1;
    }
    if (!reserve(ps, 1))
        return -1;
    append(ps, full, t);
    tg__name_hash_sync(ps, 0); /* the room was made: puts the name, only */
    return 0;
}

tg_tensor *tg_params_get(const tg_params *ps, const char *name)
{
    if (!ps || !name)
        return NULL;
    int at = tg__name_hash_find(ps, name);
    if (at != -2)
        return at >= 0 ? ps->items[at].t : NULL;
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->items[i].name, name) == 0) {
            tg__name_compared((uint64_t)i + 1);
            return ps->items[i].t;
        }
    tg__name_compared((uint64_t)ps->n);
    return NULL;
}

/* Every name, those out has and the n new ones, in one sorted index: a
 * name twice is found in n log n comparisons, where tg_params_add's scan
 * for each would take n^2 / 2. */
int tg__params_adopt(const char *op, const char *path, tg_params *out, size_t n,
                     char (*names)[TG_PARAM_NAME_MAX], tg_tensor **ts)
{
    size_t n0 = (size_t)out->n;
    tg__names ix = {0};
    bool ok = n <= (size_t)INT_MAX - n0 && tg__names_init(&ix, n0 + n);
    if (!ok)
        tg__error("%s: %s: out of memory for %zu names", op, path, n0 + n);
    for (size_t i = 0; ok && i < n0; i++)
        tg__names_add(&ix, out->items[i].name, i);
    for (size_t k = 0; ok && k < n; k++)
        tg__names_add(&ix, names[k], n0 + k);
    const char *twice = ok ? tg__names_sort(&ix) : NULL;
    if (twice) {
        tg__error("%s: %s: duplicate parameter name '%s'", op, path, twice);
        ok = false;
    }
    if (ok && !reserve(out, n)) {
        tg__error_wrap(op); /* "<op>: params_add: out of memory..." */
        ok = false;
    }
    tg__names_free(&ix);
    for (size_t k = 0; ok && k < n; k++)
        append(out, names[k], ts[k]);
    if (ok)
        tg__name_hash_sync(out, 0); /* out of memory: lookups scan */
    for (size_t k = 0; !ok && k < n; k++)
        tg_release(ts[k]); /* the list is as it was */
    return ok ? 0 : -1;
}

void tg__params_truncate(tg_params *ps, int n)
{
    ps->n = n;
    tg__name_hash_free(ps); /* hashed anew by the next tg_params_add */
}

void tg_params_release(tg_params *ps)
{
    if (!ps)
        return;
    for (int i = 0; i < ps->n; i++)
        tg_release(ps->items[i].t);
    tg_params_free(ps);
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
