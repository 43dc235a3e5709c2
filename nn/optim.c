/* Optimizers: SGD (with momentum), Adam and AdamW, update for update what
 * torch.optim (1.13, the single-tensor path, foreach=False) computes, in the
 * parameter's dtype, with torch's order of operations: for float64 the
 * results agree with torch to the last bit or two (torch's vectorised
 * kernels fuse a + s * b into one multiply-add; we round both steps).
 *
 * This file keeps the optimizer's state and steps it; the per-element
 * updates, in torch's order of operations, are kernels in ops/update.c. */
#include "core/shared.h"
#include "nn/nn.h"
#include "ops/update.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

tg_optim_config tg_sgd_config(double lr, double momentum, double weight_decay)
{
    return (tg_optim_config){.kind = TG_SGD,
                             .lr = lr,
                             .momentum = momentum,
                             .weight_decay = weight_decay,
                             .beta1 = 0.9,
                             .beta2 = 0.999,
                             .eps = 1e-8};
}

tg_optim_config tg_adam_config(double lr)
{
    return (tg_optim_config){
        .kind = TG_ADAM, .lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

tg_optim_config tg_adamw_config(double lr, double weight_decay)
{
    tg_optim_config c = tg_adam_config(lr);
    c.kind = TG_ADAMW;
    c.weight_decay = weight_decay;
    return c;
}

/* What torch keeps in optimizer.state[p]: the number of steps p took (a
 * parameter skipped for lack of a gradient does not count one), and the
 * buffers, allocated at its first step: SGD's momentum_buffer in m; Adam's
 * exp_avg in m and exp_avg_sq in v. Same dtype and shape as p, contiguous. */
typedef struct param_state {
    int64_t step;
    tg_tensor *m, *v;
} param_state;

struct tg_optim {
    tg_optim_config cfg;
    int n;
    tg_param *params;   /* copied; each tensor retained */
    param_state *state; /* one per parameter */
};

/* ---- construction ------------------------------------------------------ */

/* torch.optim's checks on the hyperparameters. */
static bool check_config(const tg_optim_config *c)
{
    const char *bad = NULL;
    double v = 0;
    if (c->kind != TG_SGD && c->kind != TG_ADAM && c->kind != TG_ADAMW)
        bad = "kind", v = c->kind;
    else if (!(c->lr >= 0))
        bad = "lr", v = c->lr;
    else if (!(c->weight_decay >= 0))
        bad = "weight_decay", v = c->weight_decay;
    else if (c->kind == TG_SGD && !(c->momentum >= 0))
        bad = "momentum", v = c->momentum;
    else if (c->kind != TG_SGD && !(c->beta1 >= 0 && c->beta1 < 1))
        bad = "beta1", v = c->beta1;
    else if (c->kind != TG_SGD && !(c->beta2 >= 0 && c->beta2 < 1))
        bad = "beta2", v = c->beta2;
    else if (c->kind != TG_SGD && !(c->eps >= 0))
        bad = "eps", v = c->eps;
    if (bad)
        tg__error("optim_new: invalid %s %g", bad, v);
    return !bad;
}

/* Every parameter is a float tensor, and none appears twice (it would be
 * updated twice per step). */
static bool check_params(const tg_params *ps)
{
    for (int i = 0; i < ps->n; i++) {
        const tg_param *p = &ps->items[i];
        if (!p->t) {
            tg__error("optim_new: parameter '%s' is NULL", p->name);
            return false;
        }
        tg_dtype dt = tg_dtype_of(p->t);
        if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
            tg__error("optim_new: parameter '%s' is %s %s, not float32 or "
                      "float64",
                      p->name, tg_dtype_name(dt), TG_SHP(p->t));
            return false;
        }
        for (int j = 0; j < i; j++)
            if (ps->items[j].t == p->t) {
                tg__error("optim_new: parameters '%s' and '%s' are the same "
                          "tensor",
                          ps->items[j].name, p->name);
                return false;
            }
    }
    return true;
}

tg_optim *tg_optim_new(const tg_params *ps, tg_optim_config cfg)
{
    if (!ps) {
        tg__error("optim_new: the parameter list is NULL");
        return NULL;
    }
    if (!check_config(&cfg) || !check_params(ps))
        return NULL;
    tg_optim *o = tg__calloc(1, sizeof *o);
    size_t n = (size_t)ps->n;
    if (o) {
        o->params = tg__malloc(sizeof *o->params * (n ? n : 1));
        o->state = tg__calloc(n ? n : 1, sizeof *o->state);
    }
    if (!o || !o->params || !o->state) {
        if (o) {
            free(o->params);
            free(o->state);
        }
        free(o);
        tg__error("optim_new: out of memory for %d parameters", ps->n);
        return NULL;
    }
    o->cfg = cfg;
    o->n = ps->n;
    if (n)
        memcpy(o->params, ps->items, sizeof *o->params * n);
    for (int i = 0; i < o->n; i++)
        tg_retain(o->params[i].t);
    return o;
}

void tg_optim_free(tg_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++) {
        tg__drop(o->state[i].m);
        tg__drop(o->state[i].v);
        tg__drop(o->params[i].t);
    }
    free(o->state);
    free(o->params);
    free(o);
}

void tg_optim_zero_grad(tg_optim *o)
{
    for (int i = 0; o && i < o->n; i++)
        tg_zero_grad(o->params[i].t);
}

/* ---- a step ------------------------------------------------------------ */

/* A new zero buffer shaped like p that outlives any open scope. */
static tg_tensor *new_buffer(const tg_tensor *p)
{
    tg_tensor *b = tg_keep(tg_zeros_like(p));
    if (!b)
        tg__error_wrap("optim_step");
    return b;
}

/* Allocates the buffers a parameter needs at its first step (SGD's momentum
 * buffer only with momentum). */
static bool ensure_state(const tg_optim_config *c, param_state *s,
                         const tg_tensor *p)
{
    bool wants_m = c->kind != TG_SGD || c->momentum != 0;
    bool wants_v = c->kind != TG_SGD;
    if (wants_m && !s->m && !(s->m = new_buffer(p)))
        return false;
    if (wants_v && !s->v && !(s->v = new_buffer(p)))
        return false;
    return true;
}

int tg_optim_step(tg_optim *o)
{
    if (!o) {
        tg__error("optim_step: the optimizer is NULL");
        return -1;
    }
    /* Buffers first, so running out of memory leaves every parameter as it
     * was rather than some of them stepped. */
    for (int i = 0; i < o->n; i++)
        if (tg_grad(o->params[i].t) &&
            !ensure_state(&o->cfg, &o->state[i], o->params[i].t))
            return -1;
    for (int i = 0; i < o->n; i++) {
        tg_tensor *p = o->params[i].t, *g = tg_grad(p);
        param_state *s = &o->state[i];
        if (!g)
            continue;
        s->step++;
        const tg_optim_config *c = &o->cfg;
        tg_update_config u = {.lr = c->lr,
                              .momentum = c->momentum,
                              .weight_decay = c->weight_decay,
                              .beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .eps = c->eps,
                              .decoupled = c->kind == TG_ADAMW};
        if (c->kind == TG_SGD)
            tg__sgd_update(&u, p, g, s->m, s->step == 1);
        else
            tg__adam_update(&u, p, g, s->m, s->v, s->step);
    }
    return 0;
}
