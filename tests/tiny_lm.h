/* A tiny language model written with public ops only, and nanoGPT's
 * training loop around it: for the parity test against PyTorch
 * (tests/check_train.c, fixtures from tests/fixtures/gen_train.py, which
 * writes the same model in torch) and the exact-resume tests (the same
 * file, and tests/resume_run.c run twice by tests/resume.test).
 *
 *   x      = wte[idx] + wpe[:T]                                   (B,T,C)
 *   x      = x + (gelu(ln1(x) @ fc.w + fc.b) @ proj.w + proj.b)   (B,T,C)
 *   logits = lnf(x) @ head.w                                      (B,T,V)
 *   loss   = cross_entropy(logits, targets), targets of -100 ignored
 *
 * No Check here: functions return 0 / -1 or NULL, with tg_last_error. */
#ifndef TAPEGRAD_TINY_LM_H
#define TAPEGRAD_TINY_LM_H

#include <tapegrad_nn.h>

#include <stdint.h>

enum { LM_V = 11, LM_C = 8, LM_T = 6, LM_H = 16, LM_B = 3, LM_N_PARAMS = 11 };

/* The parameters, in the fixtures' order. */
static const char *const LM_NAMES[LM_N_PARAMS] = {
    "wte",    "wpe",    "ln1.g", "ln1.b", "fc.w",  "fc.b",
    "proj.w", "proj.b", "lnf.g", "lnf.b", "head.w"};
static const int64_t LM_SHAPES[LM_N_PARAMS][2] = {
    {LM_V, LM_C}, {LM_T, LM_C}, {LM_C, 0}, {LM_C, 0}, {LM_C, LM_H}, {LM_H, 0},
    {LM_H, LM_C}, {LM_C, 0},    {LM_C, 0}, {LM_C, 0}, {LM_C, LM_V}};

/* The number of values of all parameters together. */
static inline int64_t lm_numel(void)
{
    int64_t n = 0;
    for (int i = 0; i < LM_N_PARAMS; i++)
        n += LM_SHAPES[i][0] * (LM_SHAPES[i][1] ? LM_SHAPES[i][1] : 1);
    return n;
}

typedef struct tiny_lm {
    tg_tensor *p[LM_N_PARAMS];
    tg_params ps; /* named as LM_NAMES */
} tiny_lm;

static inline void tiny_lm_free(tiny_lm *m)
{
    for (int i = 0; i < LM_N_PARAMS; i++)
        tg_release(m->p[i]);
    tg_params_free(&m->ps);
}

/* A float64 model holding values (lm_numel() of them, in order). */
static inline int tiny_lm_init(tiny_lm *m, const double *values)
{
    tg_params_init(&m->ps);
    for (int i = 0; i < LM_N_PARAMS; i++) {
        int ndim = LM_SHAPES[i][1] ? 2 : 1;
        m->p[i] = tg_from_data(TG_FLOAT64, ndim, LM_SHAPES[i], values);
        values += LM_SHAPES[i][0] * (ndim == 2 ? LM_SHAPES[i][1] : 1);
        tg_set_requires_grad(m->p[i], true); /* NULL-safe */
        if (!m->p[i] || tg_params_add(&m->ps, NULL, LM_NAMES[i], m->p[i]) < 0) {
            for (int j = i + 1; j < LM_N_PARAMS; j++)
                m->p[j] = NULL;
            tiny_lm_free(m);
            return -1;
        }
    }
    return 0;
}

/* All parameters' values, in order, into values (lm_numel() of them). */
static inline int tiny_lm_values(const tiny_lm *m, double *values)
{
    for (int i = 0; i < LM_N_PARAMS; i++) {
        if (tg_copy_out(m->p[i], TG_FLOAT64, values) < 0)
            return -1;
        values += tg_numel(m->p[i]);
    }
    return 0;
}

/* The batch of iteration it (gen_train.py's lm_batch): token ids and
 * targets (B,T), some targets -100. */
static inline void lm_batch(int it, int64_t *idx, int64_t *targets)
{
    for (int b = 0; b < LM_B; b++)
        for (int t = 0; t < LM_T; t++) {
            int64_t id = (it * 7 + b * 5 + t * 3 + it * b * t) % LM_V;
            idx[b * LM_T + t] = id;
            targets[b * LM_T + t] =
                (it + 2 * b + t) % 7 == 0 ? -100 : (id * 3 + b + 1) % LM_V;
        }
}

/* The mean loss of iteration it's batch, on the tape; in the open scope. */
static inline tg_tensor *tiny_lm_loss(tiny_lm *m, int it)
{
    int64_t idx[LM_B * LM_T], targets[LM_B * LM_T];
    lm_batch(it, idx, targets);
    tg_tensor *ids = tg_from_data(TG_INT64, 2, (int64_t[]){LM_B, LM_T}, idx);
    tg_tensor *tgt =
        tg_from_data(TG_INT64, 2, (int64_t[]){LM_B, LM_T}, targets);
    tg_tensor *pos = tg_arange(TG_INT64, 0, LM_T, 1);
    tg_tensor *x =
        tg_add(tg_embedding(m->p[0], ids), tg_embedding(m->p[1], pos));
    tg_tensor *h = tg_layer_norm(x, m->p[2], m->p[3], 1e-5);
    h = tg_gelu(tg_add(tg_matmul(h, m->p[4]), m->p[5]));
    h = tg_add(tg_matmul(h, m->p[6]), m->p[7]);
    x = tg_add(x, h);
    tg_tensor *logits =
        tg_matmul(tg_layer_norm(x, m->p[8], m->p[9], 1e-5), m->p[10]);
    return tg_cross_entropy(logits, tgt);
}

/* How the loop sets the rate and which optimizer it steps. */
typedef enum { LM_ADAMW_NANOGPT, LM_ADAM_STEP, LM_SGD_MOMENTUM } lm_recipe;

/* The rate of iteration it under recipe r. */
static inline double lm_lr(lm_recipe r, int it)
{
    switch (r) {
    case LM_ADAMW_NANOGPT: return tg_lr_warmup_cosine(it, 1e-2, 1e-3, 5, 15);
    case LM_ADAM_STEP: return tg_lr_step(it, 1e-2, 4, 0.5);
    default: return tg_lr_constant(it, 0.05);
    }
}

/* A fresh optimizer for recipe r over m: nanoGPT's AdamW (two groups by
 * tg_params_split_decay: decay 0.1 for dim >= 2, none for the rest; betas
 * 0.9, 0.95); Adam; SGD with momentum 0.9 and weight decay 1e-4. */
static inline tg_optim *lm_optim(lm_recipe r, tiny_lm *m)
{
    if (r == LM_ADAM_STEP)
        return tg_optim_new(&m->ps, tg_adam_config(1e-2));
    if (r == LM_SGD_MOMENTUM)
        return tg_optim_new(&m->ps, tg_sgd_config(0.05, 0.9, 1e-4));
    tg_params decay, no_decay;
    tg_params_init(&decay);
    tg_params_init(&no_decay);
    tg_optim *o = NULL;
    if (tg_params_split_decay(&m->ps, &decay, &no_decay) == 0) {
        tg_optim_config cfg = tg_adamw_config(1e-2, 0);
        cfg.beta2 = 0.95;
        tg_param_group g[2] = {{&decay, 0.1, 1}, {&no_decay, 0, 1}};
        o = tg_optim_new_groups(g, 2, cfg);
    }
    tg_params_free(&decay);
    tg_params_free(&no_decay);
    return o;
}

/* nanoGPT's loop, iterations from..to-1: set the rate, forward, backward,
 * clip the gradients' norm to 1, step, drop the gradients. Each
 * iteration's loss, rate and norm go into losses[it], lrs[it], norms[it]
 * when those are not NULL. 0 or -1. */
static inline int lm_train(tiny_lm *m, tg_optim *o, lm_recipe r, int from,
                           int to, double *losses, double *lrs, double *norms)
{
    for (int it = from; it < to; it++) {
        double lr = lm_lr(r, it);
        if (tg_optim_set_lr(o, lr) < 0)
            return -1;
        tg_scope_begin();
        tg_tensor *loss = tiny_lm_loss(m, it);
        int rc = loss ? tg_backward(loss) : -1;
        double value = loss ? tg_item(loss) : 0;
        tg_scope_end();
        if (rc < 0)
            return -1;
        double norm = tg_clip_grad_norm(&m->ps, 1.0);
        if (tg_optim_step(o) < 0)
            return -1;
        tg_optim_zero_grad(o);
        if (losses)
            losses[it] = value;
        if (lrs)
            lrs[it] = lr;
        if (norms)
            norms[it] = norm;
    }
    return 0;
}

#endif /* TAPEGRAD_TINY_LM_H */
