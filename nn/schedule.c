/* Learning-rate schedules, as small functions of the iteration (set the
 * result with tg_optim_set_lr before each step), and the split of a
 * model's parameters into the two groups nanoGPT gives AdamW. */
#include "nn/nn.h"

#include <math.h>

/* Python's math.pi: the double nearest pi (M_PI is not C11). */
static const double PI = 3.141592653589793;

double tg_lr_constant(int it, double lr)
{
    if (it < 0 || !(lr >= 0 && lr < INFINITY)) {
        tg__error("lr_constant: invalid %s %g", it < 0 ? "it" : "lr",
                  it < 0 ? (double)it : lr);
        return NAN;
    }
    return lr;
}

/* torch.optim.lr_scheduler.StepLR, in its chained form: at every multiple
 * of step_size the rate is multiplied by gamma, so after k = it / step_size
 * of them lr * gamma * ... * gamma (k products, rounded one by one as torch
 * rounds them; not lr * gamma^k, which rounds once). */
double tg_lr_step(int it, double lr, int step_size, double gamma)
{
    const char *bad = it < 0                              ? "it"
                      : !(lr >= 0 && lr < INFINITY)       ? "lr"
                      : step_size <= 0                    ? "step_size"
                      : !(gamma >= 0 && gamma < INFINITY) ? "gamma"
                                                          : NULL;
    if (bad) {
        double v = it < 0          ? it
                   : bad[0] == 'l' ? lr
                   : bad[0] == 's' ? step_size
                                   : gamma;
        tg__error("lr_step: invalid %s %g", bad, v);
        return NAN;
    }
    for (int k = it / step_size; k > 0 && lr != 0 && gamma != 1; k--)
        lr *= gamma;
    return lr;
}

/* nanoGPT's get_lr(it), operation for operation:
 *   it < warmup:          max_lr * (it + 1) / (warmup + 1)
 *   it > lr_decay_iters:  min_lr
 *   otherwise:            ratio = (it - warmup) / (lr_decay_iters - warmup)
 *                         coeff = 0.5 * (1 + cos(pi * ratio))
 *                         min_lr + coeff * (max_lr - min_lr)
 * (Python's floats are doubles and its math.cos is the C library's.) */
double tg_lr_warmup_cosine(int it, double max_lr, double min_lr,
                           int warmup_iters, int lr_decay_iters)
{
    const char *bad = it < 0                                ? "it"
                      : !(max_lr >= 0 && max_lr < INFINITY) ? "max_lr"
                      : !(min_lr >= 0 && min_lr < INFINITY) ? "min_lr"
                      : warmup_iters < 0                    ? "warmup_iters"
                      : lr_decay_iters <= warmup_iters      ? "lr_decay_iters"
                                                            : NULL;
    if (bad) {
        tg__error("lr_warmup_cosine: invalid %s (it %d, max_lr %g, min_lr %g, "
                  "warmup_iters %d, lr_decay_iters %d: need it >= 0, rates "
                  ">= 0, 0 <= warmup_iters < lr_decay_iters)",
                  bad, it, max_lr, min_lr, warmup_iters, lr_decay_iters);
        return NAN;
    }
    if (it < warmup_iters)
        return max_lr * (it + 1) / (warmup_iters + 1);
    if (it > lr_decay_iters)
        return min_lr;
    double ratio =
        (double)(it - warmup_iters) / (lr_decay_iters - warmup_iters);
    double coeff = 0.5 * (1.0 + cos(PI * ratio));
    return min_lr + coeff * (max_lr - min_lr);
}

/* nanoGPT's configure_optimizers: every parameter with 2 or more dims
 * (matmul weights, embeddings) decays, the others (biases, layer-norm
 * gains) do not. */
int tg_params_split_decay(const tg_params *all, tg_params *decay,
                          tg_params *no_decay)
{
    if (!all || !decay || !no_decay) {
        tg__error("params_split_decay: %s is NULL", !all     ? "the list"
                                                    : !decay ? "decay"
                                                             : "no_decay");
        return -1;
    }
    if (decay == no_decay || decay == all || no_decay == all) {
        tg__error("params_split_decay: the three lists must be distinct");
        return -1;
    }
    const int n_decay = decay->n, n_no_decay = no_decay->n;
    for (int i = 0; i < all->n; i++) {
        const tg_param *p = &all->items[i];
        if (!p->t) {
            tg__error("params_split_decay: parameter '%s' is NULL", p->name);
            goto fail;
        }
        tg_params *into = tg_ndim(p->t) >= 2 ? decay : no_decay;
        if (tg_params_add(into, NULL, p->name, p->t) < 0) {
            tg__error_wrap("params_split_decay");
            goto fail;
        }
    }
    return 0;
fail: /* both lists as they were */
    tg__params_truncate(decay, n_decay);
    tg__params_truncate(no_decay, n_no_decay);
    return -1;
}
