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
#include "tapegrad_nn.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
        if (p->t->dtype != TG_FLOAT32 && p->t->dtype != TG_FLOAT64) {
            tg__error("optim_new: parameter '%s' is %s %s, not float32 or "
                      "float64",
                      p->name, tg_dtype_name(p->t->dtype), TG_SHP(p->t));
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

/* One parameter's update: operands {p, g, m, v} (m, v NULL when unused) in
 * a loop over p's shape, run in pieces (on several threads for a large
 * parameter: every element is updated on its own, so the bits are the
 * same). */
typedef struct update_job {
    const tg_optim_config *c;
    tg_tensor *p, *m, *v;
    const tg_tensor *g;
    bool first; /* SGD: the momentum buffer's first step */
    int64_t t;  /* Adam: the step, from 1 */
} update_job;

static void run_update(update_job *job, tg_run_fn fn)
{
    tg_tensor *p = job->p;
    const tg_tensor *ops[] = {p, job->g, job->m ? job->m : p,
                              job->v ? job->v : p};
    tg_loop L;
    tg__loop_init(&L, p->ndim, p->shape, 4, ops);
    tg__loop_run(&L, 1, fn, job);
}

/* torch.optim.SGD (dampening 0, no nesterov), per element:
 *   d   = g + wd * p                                   (when wd != 0)
 *   buf = d              at the first step             (when momentum != 0)
 *   buf = momentum * buf + d   afterwards;   d = buf
 *   p   = p + (-lr) * d
 * buf is NULL without momentum. */
static void sgd_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const update_job *j = job;
    const tg_optim_config *c = j->c;
    const bool first = j->first;
    (void)start;
    TG_DISPATCH_FLOAT(j->p->dtype, T, {
        const T wd = (T)c->weight_decay, momentum = (T)c->momentum;
        const T neg_lr = (T)-c->lr;
        T *pp = TG_DATA(T, j->p) + off[0];
        const T *gg = TG_DATA(T, j->g) + off[1];
        T *bb = j->m ? TG_DATA(T, j->m) + off[2] : NULL;
        for (int64_t i = 0; i < len; i++) {
            T *pi = &pp[i * step[0]];
            T d = gg[i * step[1]];
            if (c->weight_decay != 0)
                d = d + wd * *pi;
            if (bb) {
                T *b = &bb[i * step[2]];
                *b = first ? d : *b * momentum + d;
                d = *b;
            }
            *pi = *pi + neg_lr * d;
        }
    });
}

/* torch.optim.Adam / AdamW at step t (counted from 1), per element:
 *   p  = p * (1 - lr * wd)                          (AdamW: decoupled decay)
 *   g  = g + wd * p                                 (Adam, when wd != 0)
 *   m  = m * b1 + (1 - b1) * g
 *   v  = v * b2 + (1 - b2) * g * g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p  = p + (-lr / (1 - b1^t)) * m / denom
 * The square root is taken in double and rounded, which for a float is
 * the float square root itself (a double has more than twice the bits), so
 * float32 takes sqrtf.
 * When p, g, m and v are adjacent (the usual case), a run goes in blocks
 * of three loops: the updates of p (decay), g, m, v, then the square roots,
 * then p's step. GCC vectorises the first and the last; not sqrt, which may
 * set errno, so SSE2 takes the roots four (two) at a time itself. */
enum { ADAM_BLOCK = 256 };

/* sqrt(x) in T: the float square root for a float */
#define ROOT(x)                                                                \
    (sizeof(T) == sizeof(float) ? (T)sqrtf((float)(x)) : (T)sqrt((double)(x)))

/* root[i] = sqrt(v[i]), i < n, correctly rounded as sqrtf and sqrt are. */
static void roots_float(float *root, const float *v, int64_t n)
{
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(root + i, _mm_sqrt_ps(_mm_loadu_ps(v + i)));
#endif
    for (; i < n; i++)
        root[i] = sqrtf(v[i]);
}

static void roots_double(double *root, const double *v, int64_t n)
{
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 2 <= n; i += 2)
        _mm_storeu_pd(root + i, _mm_sqrt_pd(_mm_loadu_pd(v + i)));
#endif
    for (; i < n; i++)
        root[i] = sqrt(v[i]);
}

/* root = sqrt(v) elementwise, for either float type (no casts). */
#define roots(root, v, n)                                                      \
    _Generic((root), float * : roots_float, double * : roots_double)(root, v, n)

static void adam_run(void *job, int64_t start, const int64_t *off,
                     const int64_t *step, int64_t len)
{
    const update_job *j = job;
    const tg_optim_config *c = j->c;
    const bool decoupled = c->kind == TG_ADAMW;
    const bool l2 = !decoupled && c->weight_decay != 0;
    const double bias_correction1 = 1 - pow(c->beta1, (double)j->t);
    const double bias_correction2 = 1 - pow(c->beta2, (double)j->t);
    (void)start;
    /* root is filled by roots() before it is read; cppcheck cannot see it */
    // cppcheck-suppress legacyUninitvar
    TG_DISPATCH_FLOAT(j->p->dtype, T, {
        /* p * 1 is p: the decay of Adam (not AdamW) */
        const T decay = decoupled ? (T)(1 - c->lr * c->weight_decay) : (T)1;
        const T wd = (T)c->weight_decay, eps = (T)c->eps;
        const T b1 = (T)c->beta1, one_minus_b1 = (T)(1 - c->beta1);
        const T b2 = (T)c->beta2, one_minus_b2 = (T)(1 - c->beta2);
        const T bc2_sqrt = (T)sqrt(bias_correction2);
        const T neg_step_size = (T) - (c->lr / bias_correction1);
        T *pp = TG_DATA(T, j->p) + off[0];
        const T *gg = TG_DATA(T, j->g) + off[1];
        T *mm = TG_DATA(T, j->m) + off[2], *vv = TG_DATA(T, j->v) + off[3];
        if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1) {
            for (int64_t b0 = 0; b0 < len; b0 += ADAM_BLOCK) {
                const int64_t n = len - b0 < ADAM_BLOCK ? len - b0 : ADAM_BLOCK;
                T *p = pp + b0, *m = mm + b0, *v = vv + b0, root[ADAM_BLOCK];
                const T *g = gg + b0;
                if (l2) {
                    TG_SIMD for (int64_t i = 0; i < n; i++)
                    {
                        T gi = g[i] + wd * p[i];
                        m[i] = m[i] * b1 + one_minus_b1 * gi;
                        v[i] = v[i] * b2 + one_minus_b2 * gi * gi;
                    }
                } else {
                    TG_SIMD for (int64_t i = 0; i < n; i++)
                    {
                        p[i] = p[i] * decay;
                        m[i] = m[i] * b1 + one_minus_b1 * g[i];
                        v[i] = v[i] * b2 + one_minus_b2 * g[i] * g[i];
                    }
                }
                roots(root, v, n);
                TG_SIMD for (int64_t i = 0; i < n; i++) p[i] =
                    p[i] + neg_step_size * m[i] / (root[i] / bc2_sqrt + eps);
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                T *pi = &pp[i * step[0]], *mi = &mm[i * step[2]];
                T *vi = &vv[i * step[3]];
                T gi = gg[i * step[1]];
                *pi = *pi * decay;
                if (l2)
                    gi = gi + wd * *pi;
                *mi = *mi * b1 + one_minus_b1 * gi;
                *vi = *vi * b2 + one_minus_b2 * gi * gi;
                T denom = ROOT(*vi) / bc2_sqrt + eps;
                *pi = *pi + neg_step_size * *mi / denom;
            }
        }
    });
}
#undef ROOT

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
        TG_ASSERT(
            g->dtype == p->dtype && g->ndim == p->ndim &&
            memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim) == 0);
        s->step++;
        update_job job = {.c = &o->cfg,
                          .p = p,
                          .g = g,
                          .m = s->m,
                          .v = s->v,
                          .first = s->step == 1,
                          .t = s->step};
        run_update(&job, o->cfg.kind == TG_SGD ? sgd_run : adam_run);
    }
    return 0;
}
