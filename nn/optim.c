/* Optimizers: SGD (with momentum), Adam and AdamW, update for update what
 * torch.optim (1.13, the single-tensor path, foreach=False) computes, in the
 * parameter's dtype, with torch's order of operations: for float64 the
 * results agree with torch to the last bit or two (torch's vectorised
 * kernels fuse a + s * b into one multiply-add; we round both steps).
 *
 * torch evaluates each in-place op as one expression per element; this
 * file writes them in that order:
 *   a.add_(b, alpha=s)       a + s * b
 *   a.addcmul_(b, c, value=s) a + s * b * c      ((s * b) * c)
 *   a.addcdiv_(b, c, value=s) a + s * b / c      ((s * b) / c)
 * Python-side scalars (1 - beta1, lr / bias_correction1, ...) are computed
 * in double and then rounded to the parameter's dtype, as torch does. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

tg_optim_config tg_sgd_config(double lr, double momentum, double weight_decay)
{
    return (tg_optim_config){.kind = TG_SGD, .lr = lr, .momentum = momentum,
                             .weight_decay = weight_decay, .beta1 = 0.9,
                             .beta2 = 0.999, .eps = 1e-8};
}

tg_optim_config tg_adam_config(double lr)
{
    return (tg_optim_config){.kind = TG_ADAM, .lr = lr, .beta1 = 0.9,
                             .beta2 = 0.999, .eps = 1e-8};
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
    tg_param *params;    /* copied; each tensor retained */
    param_state *state;  /* one per parameter */
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
        if (p->t->dtype != TG_FLOAT32 && p->t->dtype != TG_FLOAT64) {
            tg__error("optim_new: parameter '%s' is %s %s, not float32 or "
                      "float64", p->name, tg_dtype_name(p->t->dtype),
                      TG_SHP(p->t));
            return false;
        }
        for (int j = 0; j < i; j++)
            if (ps->items[j].t == p->t) {
                tg__error("optim_new: parameters '%s' and '%s' are the same "
                          "tensor", ps->items[j].name, p->name);
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
    tg_optim *o = calloc(1, sizeof *o);
    size_t n = (size_t)ps->n;
    if (o) {
        o->params = malloc(sizeof *o->params * (n ? n : 1));
        o->state = calloc(n ? n : 1, sizeof *o->state);
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

/* ---- the updates ------------------------------------------------------- */

/* torch.optim.SGD (dampening 0, no nesterov), per element:
 *   d   = g + wd * p                                   (when wd != 0)
 *   buf = d              at the first step             (when momentum != 0)
 *   buf = momentum * buf + d   afterwards;   d = buf
 *   p   = p + (-lr) * d
 * buf is NULL without momentum. */
static void sgd_update(const tg_optim_config *c, tg_tensor *p,
                       const tg_tensor *g, tg_tensor *buf, bool first)
{
    tg_loop L;
    tg__loop_init(&L, p->ndim, p->shape, 3,
                  (const tg_tensor *const[]){p, g, buf ? buf : p});
    TG_DISPATCH_FLOAT(p->dtype, T, {
        const T wd = (T)c->weight_decay, momentum = (T)c->momentum;
        const T neg_lr = (T)-c->lr;
        do {
            T *pp = TG_DATA(T, p) + L.off[0];
            const T *gg = TG_DATA(T, g) + L.off[1];
            T *bb = buf ? TG_DATA(T, buf) + L.off[2] : NULL;
            for (int64_t i = 0; i < L.inner; i++) {
                T *pi = &pp[i * L.step[0]];
                T d = gg[i * L.step[1]];
                if (c->weight_decay != 0)
                    d = d + wd * *pi;
                if (bb) {
                    T *b = &bb[i * L.step[2]];
                    *b = first ? d : *b * momentum + d;
                    d = *b;
                }
                *pi = *pi + neg_lr * d;
            }
        } while (tg__loop_next(&L));
    });
}

/* torch.optim.Adam / AdamW at step t (counted from 1), per element:
 *   p  = p * (1 - lr * wd)                          (AdamW: decoupled decay)
 *   g  = g + wd * p                                 (Adam, when wd != 0)
 *   m  = m * b1 + (1 - b1) * g
 *   v  = v * b2 + (1 - b2) * g * g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p  = p + (-lr / (1 - b1^t)) * m / denom */
static void adam_update(const tg_optim_config *c, tg_tensor *p,
                        const tg_tensor *g, tg_tensor *m, tg_tensor *v,
                        int64_t t)
{
    bool decoupled = c->kind == TG_ADAMW;
    bool l2 = !decoupled && c->weight_decay != 0;
    double bias_correction1 = 1 - pow(c->beta1, (double)t);
    double bias_correction2 = 1 - pow(c->beta2, (double)t);
    tg_loop L;
    tg__loop_init(&L, p->ndim, p->shape, 4,
                  (const tg_tensor *const[]){p, g, m, v});
    TG_DISPATCH_FLOAT(p->dtype, T, {
        const T decay = (T)(1 - c->lr * c->weight_decay);
        const T wd = (T)c->weight_decay, eps = (T)c->eps;
        const T b1 = (T)c->beta1, one_minus_b1 = (T)(1 - c->beta1);
        const T b2 = (T)c->beta2, one_minus_b2 = (T)(1 - c->beta2);
        const T bc2_sqrt = (T)sqrt(bias_correction2);
        const T neg_step_size = (T)-(c->lr / bias_correction1);
        do {
            T *pp = TG_DATA(T, p) + L.off[0];
            const T *gg = TG_DATA(T, g) + L.off[1];
            T *mm = TG_DATA(T, m) + L.off[2], *vv = TG_DATA(T, v) + L.off[3];
            for (int64_t i = 0; i < L.inner; i++) {
                T *pi = &pp[i * L.step[0]], *mi = &mm[i * L.step[2]];
                T *vi = &vv[i * L.step[3]];
                T gi = gg[i * L.step[1]];
                if (decoupled)
                    *pi = *pi * decay;
                if (l2)
                    gi = gi + wd * *pi;
                *mi = *mi * b1 + one_minus_b1 * gi;
                *vi = *vi * b2 + one_minus_b2 * gi * gi;
                T denom = (T)sqrt((double)*vi) / bc2_sqrt + eps;
                *pi = *pi + neg_step_size * *mi / denom;
            }
        } while (tg__loop_next(&L));
    });
}

/* ---- a step ------------------------------------------------------------ */

/* A new zero buffer shaped like p that outlives any open scope. */
static tg_tensor *new_buffer(const tg_tensor *p)
{
    tg_tensor *b = tg__new("optim_step", p->dtype, p->ndim, p->shape, true);
    if (b)
        tg__unscope(b);
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
        TG_ASSERT(g->dtype == p->dtype && g->ndim == p->ndim &&
                  memcmp(g->shape, p->shape,
                         sizeof(int64_t) * (size_t)p->ndim) == 0);
        s->step++;
        if (o->cfg.kind == TG_SGD)
            sgd_update(&o->cfg, p, g, s->m, s->step == 1);
        else
            adam_update(&o->cfg, p, g, s->m, s->v, s->step);
    }
    return 0;
}
