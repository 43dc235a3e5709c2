/* Optimizers: SGD (with momentum), Adam and AdamW, update for update what
 * torch.optim (1.13, the single-tensor path, foreach=False) computes, in the
 * parameter's dtype, with torch's order of operations: for float64 the
 * results agree with torch to the last bit or two (torch's vectorised
 * kernels fuse a + s * b into one multiply-add; we round both steps).
 *
 * Parameters come in groups, as torch's param_groups: each group has its
 * own weight decay and a scale on the learning rate (a parameter's rate is
 * lr * lr_scale). The learning rate can be read and changed between steps,
 * which is all a schedule needs (nn/schedule.c computes them).
 *
 * Everything a step depends on is held as tensors, so that it can be saved
 * with the parameters and loaded back by name (tg_optim_state): the rate
 * and each group's settings (float64 0-d), each parameter's step count
 * (int64 0-d) and its buffers. The per-element updates, in torch's order of
 * operations, are kernels in kernels/update.c. */
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/nn.h"
#include "kernels/update.h"

#include <math.h>
#include <stdio.h>
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
 * buffers, allocated at its first step (or when the state is asked for):
 * SGD's momentum_buffer in m; Adam's exp_avg in m and exp_avg_sq in v. Same
 * dtype and shape as p, contiguous. */
typedef struct param_state {
    tg_tensor *step; /* int64 0-d */
    tg_tensor *m, *v;
    int group;
} param_state;

/* A group's settings (float64 0-d each) and the number of its parameters
 * (they follow each other in params, in group order). */
typedef struct group {
    tg_tensor *weight_decay, *lr_scale;
    int n;
} group;

/* The scalars that describe the optimizer's structure rather than its
 * progress: saved with the state so that loading can refuse another
 * optimizer's. Fixed at construction. */
enum { META_KIND, META_MOMENTUM, META_BETA1, META_BETA2, META_EPS, N_META };
static const char *const META_NAMES[N_META] = {"kind", "momentum", "beta1",
                                               "beta2", "eps"};

struct tg_optim {
    tg_optim_config cfg; /* kind, momentum, betas, eps; cfg.lr is lr's */
    tg_tensor *lr;       /* float64 0-d: the base learning rate */
    tg_tensor *meta[N_META], *n_groups; /* float64 0-d each; int64 0-d */
    tg_tensor **group_sizes;            /* int64 0-d, one per group */
    int n;       /* parameters, each retained (0 until construction ends) */
    int n_slots; /* state entries allocated (== n once built) */
    int n_group;
    tg_param *params;   /* copied; each tensor retained */
    param_state *state; /* one per parameter */
    group *groups;
};

/* ---- construction ------------------------------------------------------ */

/* torch.optim's checks on the hyperparameters. */
static bool check_config(const char *op, const tg_optim_config *c)
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
        tg__error("%s: invalid %s %g", op, bad, v);
    return !bad;
}

/* A group's settings: both finite and not negative. */
static bool check_group(const char *op, int g, double weight_decay,
                        double lr_scale)
{
    if (!(weight_decay >= 0 && weight_decay < INFINITY)) {
        tg__error("%s: group %d: invalid weight_decay %g", op, g, weight_decay);
        return false;
    }
    if (!(lr_scale >= 0 && lr_scale < INFINITY)) {
        tg__error("%s: group %d: invalid lr_scale %g", op, g, lr_scale);
        return false;
    }
    return true;
}

/* Every group's list and settings are good, every parameter is a float
 * tensor, and none appears twice (it would be updated twice per step),
 * within a group or across two. */
static bool check_groups(const tg_param_group *gs, int n_group)
{
    for (int g = 0; g < n_group; g++) {
        const tg_params *ps = gs[g].params;
        if (!ps) {
            tg__error("optim_new: group %d: the parameter list is NULL", g);
            return false;
        }
        if (!check_group("optim_new", g, gs[g].weight_decay, gs[g].lr_scale))
            return false;
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
            for (int h = 0; h <= g; h++)
                for (int j = 0; j < (h == g ? i : gs[h].params->n); j++) {
                    const tg_param *q = &gs[h].params->items[j];
                    if (q->t != p->t)
                        continue;
                    if (h == g)
                        tg__error("optim_new: parameters '%s' and '%s' are "
                                  "the same tensor",
                                  q->name, p->name);
                    else
                        tg__error("optim_new: parameter '%s' of group %d is "
                                  "'%s' of group %d: a parameter may be in "
                                  "one group only",
                                  p->name, g, q->name, h);
                    return false;
                }
        }
    }
    return true;
}

/* A 0-d tensor of dt holding v, outside any scope: the optimizer's own. */
static tg_tensor *own_scalar(tg_dtype dt, double v)
{
    return tg_keep(tg_scalar(dt, v));
}

/* Allocates o's arrays and scalars for n parameters in n_group groups.
 * False when out of memory (what was made is freed by tg_optim_free). */
static bool alloc_optim(tg_optim *o, int n, int n_group)
{
    size_t np = n ? (size_t)n : 1, ng = n_group ? (size_t)n_group : 1;
    o->params = tg__malloc(sizeof *o->params * np);
    o->state = tg__calloc(np, sizeof *o->state);
    o->groups = tg__calloc(ng, sizeof *o->groups);
    o->group_sizes = tg__calloc(ng, sizeof *o->group_sizes);
    if (!o->params || !o->state || !o->groups || !o->group_sizes)
        return false;
    o->n_slots = n;
    const tg_optim_config *c = &o->cfg;
    const double meta[N_META] = {c->kind, c->momentum, c->beta1, c->beta2,
                                 c->eps};
    for (int k = 0; k < N_META; k++)
        if (!(o->meta[k] = own_scalar(TG_FLOAT64, meta[k])))
            return false;
    if (!(o->lr = own_scalar(TG_FLOAT64, c->lr)) ||
        !(o->n_groups = own_scalar(TG_INT64, n_group)))
        return false;
    for (int i = 0; i < n; i++)
        if (!(o->state[i].step = own_scalar(TG_INT64, 0)))
            return false;
    return true;
}

tg_optim *tg_optim_new_groups(const tg_param_group *gs, int n_group,
                              tg_optim_config cfg)
{
    if (n_group < 0 || (!gs && n_group > 0)) {
        tg__error("optim_new: %s", n_group < 0 ? "negative number of groups"
                                               : "the group array is NULL");
        return NULL;
    }
    if (!check_config("optim_new", &cfg) || !check_groups(gs, n_group))
        return NULL;
    int n = 0;
    for (int g = 0; g < n_group; g++)
        n += gs[g].params->n;
    tg_optim *o = tg__calloc(1, sizeof *o);
    if (o) {
        o->cfg = cfg;
        o->n_group = n_group;
    }
    if (!o || !alloc_optim(o, n, n_group)) {
        tg_optim_free(o);
        tg__error("optim_new: out of memory for %d parameters", n);
        return NULL;
    }
    for (int g = 0; g < n_group; g++) {
        group *gr = &o->groups[g];
        gr->n = gs[g].params->n;
        if (!(gr->weight_decay = own_scalar(TG_FLOAT64, gs[g].weight_decay)) ||
            !(gr->lr_scale = own_scalar(TG_FLOAT64, gs[g].lr_scale)) ||
            !(o->group_sizes[g] = own_scalar(TG_INT64, gr->n))) {
            tg_optim_free(o);
            tg__error("optim_new: out of memory for %d parameters", n);
            return NULL;
        }
    }
    /* Nothing can fail from here on. */
    for (int g = 0, i = 0; g < n_group; g++)
        for (int j = 0; j < gs[g].params->n; j++, i++) {
            o->params[i] = gs[g].params->items[j];
            o->state[i].group = g;
            tg_retain(o->params[i].t);
        }
    o->n = n;
    return o;
}

tg_optim *tg_optim_new(const tg_params *ps, tg_optim_config cfg)
{
    if (!ps) {
        tg__error("optim_new: the parameter list is NULL");
        return NULL;
    }
    tg_param_group g = {
        .params = ps, .weight_decay = cfg.weight_decay, .lr_scale = 1};
    return tg_optim_new_groups(&g, 1, cfg);
}

void tg_optim_free(tg_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++)
        tg__drop(o->params[i].t);
    for (int i = 0; i < o->n_slots; i++) {
        tg__drop(o->state[i].step);
        tg__drop(o->state[i].m);
        tg__drop(o->state[i].v);
    }
    for (int g = 0; o->groups && o->group_sizes && g < o->n_group; g++) {
        tg__drop(o->groups[g].weight_decay);
        tg__drop(o->groups[g].lr_scale);
        tg__drop(o->group_sizes[g]);
    }
    for (int k = 0; k < N_META; k++)
        tg__drop(o->meta[k]);
    tg__drop(o->lr);
    tg__drop(o->n_groups);
    free(o->group_sizes);
    free(o->groups);
    free(o->state);
    free(o->params);
    free(o);
}

void tg_optim_zero_grad(tg_optim *o)
{
    for (int i = 0; o && i < o->n; i++)
        tg_zero_grad(o->params[i].t);
}

/* ---- the learning rate --------------------------------------------------- */

int tg_optim_set_lr(tg_optim *o, double lr)
{
    if (!o) {
        tg__error("optim_set_lr: the optimizer is NULL");
        return -1;
    }
    if (!(lr >= 0 && lr < INFINITY)) {
        tg__error("optim_set_lr: invalid lr %g", lr);
        return -1;
    }
    return tg_set(o->lr, NULL, lr);
}

double tg_optim_get_lr(const tg_optim *o)
{
    if (!o) {
        tg__error("optim_get_lr: the optimizer is NULL");
        return NAN;
    }
    return tg_item(o->lr);
}

/* ---- a step ------------------------------------------------------------ */

/* A new zero buffer shaped like p that outlives any open scope. */
static tg_tensor *new_buffer(const char *op, const tg_tensor *p)
{
    tg_tensor *b = tg_keep(tg_zeros_like(p));
    if (!b)
        tg__error_wrap(op);
    return b;
}

/* Allocates the buffers a parameter needs (SGD's momentum buffer only with
 * momentum), zero: at its first step, or when the state is asked for. */
static bool ensure_state(const char *op, const tg_optim_config *c,
                         param_state *s, const tg_tensor *p)
{
    bool wants_m = c->kind != TG_SGD || c->momentum != 0;
    bool wants_v = c->kind != TG_SGD;
    if (wants_m && !s->m && !(s->m = new_buffer(op, p)))
        return false;
    if (wants_v && !s->v && !(s->v = new_buffer(op, p)))
        return false;
    return true;
}

/* The settings a step reads from the state tensors (which a load may have
 * written): the rate, each group's, each step count; all must be valid. */
static bool check_live(const tg_optim *o, const char *op)
{
    double lr = tg_item(o->lr);
    if (!(lr >= 0 && lr < INFINITY)) {
        tg__error("%s: invalid lr %g", op, lr);
        return false;
    }
    for (int g = 0; g < o->n_group; g++)
        if (!check_group(op, g, tg_item(o->groups[g].weight_decay),
                         tg_item(o->groups[g].lr_scale)))
            return false;
    for (int i = 0; i < o->n; i++) {
        double step = tg_item(o->state[i].step);
        if (step < 0) {
            tg__error("%s: parameter '%s': negative step count %.0f", op,
                      o->params[i].name, step);
            return false;
        }
    }
    return true;
}

int tg_optim_step(tg_optim *o)
{
    if (!o) {
        tg__error("optim_step: the optimizer is NULL");
        return -1;
    }
    if (!check_live(o, "optim_step"))
        return -1;
    /* Every parameter it would write must be free to write (core/shared.h):
     * one a backward still to run holds would have that backward read the
     * stepped values. All of them first, so a refusal changes nothing. */
    for (int i = 0; i < o->n; i++) {
        tg_tensor *p = o->params[i].t;
        if (tg_grad(p) && !tg__write_check("optim_step", p)) {
            /* again, for the message to name the parameter (only now: a
             * step must not format a name per parameter) */
            char op[TG_PARAM_NAME_MAX + 40];
            snprintf(op, sizeof op, "optim_step: parameter '%s'",
                     o->params[i].name);
            tg__write_check(op, p);
            return -1;
        }
    }
    /* Buffers first, so running out of memory leaves every parameter as it
     * was rather than some of them stepped. */
    for (int i = 0; i < o->n; i++)
        if (tg_grad(o->params[i].t) &&
            !ensure_state("optim_step", &o->cfg, &o->state[i], o->params[i].t))
            return -1;
    const double lr = tg_item(o->lr);
    const tg_optim_config *c = &o->cfg;
    for (int i = 0; i < o->n; i++) {
        tg_tensor *p = o->params[i].t, *g = tg_grad(p);
        param_state *s = &o->state[i];
        if (!g)
            continue;
        const group *gr = &o->groups[s->group];
        int64_t step = (int64_t)tg_item(s->step) + 1;
        tg_set(s->step, NULL, (double)step);
        /* the group's rate: lr itself at scale 1 (x * 1 is exact) */
        tg_update_config u = {.lr = lr * tg_item(gr->lr_scale),
                              .momentum = c->momentum,
                              .weight_decay = tg_item(gr->weight_decay),
                              .beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .eps = c->eps,
                              .decoupled = c->kind == TG_ADAMW};
        if (c->kind == TG_SGD)
            tg__sgd_update(&u, p, g, s->m, step == 1);
        else
            tg__adam_update(&u, p, g, s->m, s->v, step);
        tg__write_done(p);
    }
    return 0;
}

/* ---- the state as named tensors ---------------------------------------- */

/* Appends t as "prefix.a" (b NULL) or "prefix.a.b.c". */
static int add_named(tg_params *out, const char *prefix, const char *a,
                     const char *b, const char *c, tg_tensor *t)
{
    if (!b)
        return tg_params_add(out, prefix, a, t);
    char name[TG_PARAM_NAME_MAX];
    int len = snprintf(name, sizeof name, "%s.%s.%s", a, b, c);
    if (len < 0 || len >= TG_PARAM_NAME_MAX) {
        tg__error("the name of the state '%s' of '%s' is too long", c, b);
        return -1;
    }
    return tg_params_add(out, prefix, name, t);
}

/* The names the state's buffers go by, as torch's state_dict calls them. */
static void buffer_names(const tg_optim_config *c, const char **m,
                         const char **v)
{
    *m = c->kind == TG_SGD ? "momentum_buffer" : "exp_avg";
    *v = "exp_avg_sq";
}

/* Appends every state tensor of o to out under prefix (see the header for
 * the names). */
static int append_state(tg_optim *o, tg_params *out, const char *prefix)
{
    for (int k = 0; k < N_META; k++)
        if (add_named(out, prefix, META_NAMES[k], NULL, NULL, o->meta[k]) < 0)
            return -1;
    if (add_named(out, prefix, "lr", NULL, NULL, o->lr) < 0 ||
        add_named(out, prefix, "n_groups", NULL, NULL, o->n_groups) < 0)
        return -1;
    for (int g = 0; g < o->n_group; g++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", g);
        if (add_named(out, prefix, "groups", idx, "n_params",
                      o->group_sizes[g]) < 0 ||
            add_named(out, prefix, "groups", idx, "weight_decay",
                      o->groups[g].weight_decay) < 0 ||
            add_named(out, prefix, "groups", idx, "lr_scale",
                      o->groups[g].lr_scale) < 0)
            return -1;
    }
    const char *m_name, *v_name;
    buffer_names(&o->cfg, &m_name, &v_name);
    for (int i = 0; i < o->n; i++) {
        const char *pn = o->params[i].name;
        param_state *s = &o->state[i];
        if (add_named(out, prefix, "state", pn, "step", s->step) < 0 ||
            (s->m && add_named(out, prefix, "state", pn, m_name, s->m) < 0) ||
            (s->v && add_named(out, prefix, "state", pn, v_name, s->v) < 0))
            return -1;
    }
    return 0;
}

int tg_optim_state(tg_optim *o, tg_params *out, const char *prefix)
{
    if (!o || !out) {
        tg__error("optim_state: %s is NULL", o ? "the list" : "the optimizer");
        return -1;
    }
    for (int i = 0; i < o->n; i++)
        if (!ensure_state("optim_state", &o->cfg, &o->state[i], o->params[i].t))
            return -1;
    int n0 = out->n;
    if (append_state(o, out, prefix) < 0) {
        tg__params_truncate(out, n0); /* the list as it was */
        return tg__error_wrap("optim_state");
    }
    return 0;
}

/* ---- checkpoints with the optimizer ------------------------------------ */

/* The prefix of the optimizer's entries in a checkpoint. */
#define CKPT_PREFIX "optim"

/* model's parameters, then o's state under CKPT_PREFIX, in a new list. */
static int combined_list(const char *op, const tg_params *model, tg_optim *o,
                         tg_params *all)
{
    tg_params_init(all);
    for (int i = 0; i < model->n; i++)
        if (tg_params_add(all, NULL, model->items[i].name, model->items[i].t) <
            0) {
            tg_params_free(all);
            return tg__error_wrap(op);
        }
    if (tg_optim_state(o, all, CKPT_PREFIX) < 0) {
        tg_params_free(all);
        return tg__error_wrap(op);
    }
    return 0;
}

int tg_save_checkpoint(const tg_params *model, tg_optim *o, const char *path)
{
    if (!model || !o || !path) {
        tg__error("save_checkpoint: %s is NULL", !model ? "the model's list"
                                                 : !o   ? "the optimizer"
                                                        : "path");
        return -1;
    }
    tg_params all;
    if (combined_list("save_checkpoint", model, o, &all) < 0)
        return -1;
    int rc = tg_save_npz(&all, path);
    tg_params_free(&all);
    return rc < 0 ? tg__error_wrap("save_checkpoint") : 0;
}

/* The value of the scratch entry that stands for `t` of all. */
static double scratch_value(const tg_params *all, const tg_params *scratch,
                            const tg_tensor *t)
{
    for (int i = 0; i < all->n; i++)
        if (all->items[i].t == t)
            return tg_item(scratch->items[i].t);
    return NAN; /* not reached: every state tensor is in the list */
}

/* Loaded values (in scratch, entry for entry as all) that o cannot take:
 * another kind or other hyperparameters, another number of groups or of
 * parameters in one, a negative rate, group setting or step count. */
static bool check_loaded(const tg_optim *o, const tg_params *all,
                         const tg_params *scratch)
{
    const char *op = "load_checkpoint";
    for (int k = 0; k < N_META; k++) {
        double have = scratch_value(all, scratch, o->meta[k]),
               want = tg_item(o->meta[k]);
        if (have != want) {
            tg__error("%s: entry '%s.%s' is %g in the checkpoint but %g in "
                      "the optimizer: its state is another optimizer's",
                      op, CKPT_PREFIX, META_NAMES[k], have, want);
            return false;
        }
    }
    double groups = scratch_value(all, scratch, o->n_groups);
    if (groups != o->n_group) {
        tg__error("%s: entry '%s.n_groups' is %g in the checkpoint but the "
                  "optimizer has %d groups",
                  op, CKPT_PREFIX, groups, o->n_group);
        return false;
    }
    for (int g = 0; g < o->n_group; g++) {
        double n = scratch_value(all, scratch, o->group_sizes[g]);
        if (n != o->groups[g].n) {
            tg__error("%s: entry '%s.groups.%d.n_params' is %g in the "
                      "checkpoint but the optimizer's group %d has %d "
                      "parameters",
                      op, CKPT_PREFIX, g, n, g, o->groups[g].n);
            return false;
        }
        if (!check_group(op, g,
                         scratch_value(all, scratch, o->groups[g].weight_decay),
                         scratch_value(all, scratch, o->groups[g].lr_scale)))
            return false;
    }
    double lr = scratch_value(all, scratch, o->lr);
    if (!(lr >= 0 && lr < INFINITY)) {
        tg__error("%s: entry '%s.lr' is %g", op, CKPT_PREFIX, lr);
        return false;
    }
    for (int i = 0; i < o->n; i++)
        if (scratch_value(all, scratch, o->state[i].step) < 0) {
            tg__error("%s: entry '%s.state.%s.step' is negative", op,
                      CKPT_PREFIX, o->params[i].name);
            return false;
        }
    return true;
}

/* Frees scratch's tensors (made by load_scratch) and the list. */
static void free_scratch(tg_params *scratch)
{
    for (int i = 0; i < scratch->n; i++)
        tg_release(scratch->items[i].t);
    tg_params_free(scratch);
}

/* A tensor like each of all's, under the same name, loaded from path. */
static int load_scratch(const tg_params *all, tg_params *scratch,
                        const char *path)
{
    tg_params_init(scratch);
    for (int i = 0; i < all->n; i++) {
        tg_tensor *t = tg_keep(tg_zeros_like(all->items[i].t));
        if (!t || tg_params_add(scratch, NULL, all->items[i].name, t) < 0) {
            tg_release(t);
            free_scratch(scratch);
            return -1;
        }
    }
    if (tg__load_npz_strict(scratch, path, CKPT_PREFIX) < 0) {
        free_scratch(scratch);
        return -1;
    }
    return 0;
}

/* Loads everything into scratch tensors first, checks what the optimizer
 * would take, and only then copies it all in: so any failure (the file,
 * an entry, another optimizer's state) changes nothing. */
int tg_load_checkpoint(const tg_params *model, tg_optim *o, const char *path)
{
    const char *op = "load_checkpoint";
    if (!model || !o || !path) {
        tg__error("%s: %s is NULL", op,
                  !model ? "the model's list"
                  : !o   ? "the optimizer"
                         : "path");
        return -1;
    }
    tg_params all, scratch;
    if (combined_list(op, model, o, &all) < 0)
        return -1;
    if (load_scratch(&all, &scratch, path) < 0) {
        tg_params_free(&all);
        return tg__error_wrap(op);
    }
    bool ok = check_loaded(o, &all, &scratch);
    for (int i = 0; ok && i < all.n; i++) /* all free to write, first */
        ok = tg__write_check(op, all.items[i].t);
    for (int i = 0; ok && i < all.n; i++) {
        tg__copy_into(all.items[i].t, scratch.items[i].t);
        tg__write_done(all.items[i].t);
    }
    free_scratch(&scratch);
    tg_params_free(&all);
    return ok ? 0 : -1;
}
