/* Private to libtapegrad: the in-place update loops kernels/ offers the
 * optimizers (nn/optim.c, nn/params.c), which see tensors only through the
 * public API. (kernels/update.c) */
#ifndef TAPEGRAD_UPDATE_H
#define TAPEGRAD_UPDATE_H

#include "core/error.h"

/* An optimizer's hyperparameters, as the kernels need them. */
typedef struct tg_update_config {
    double lr, momentum, weight_decay, beta1, beta2, eps;
    bool decoupled; /* AdamW's weight decay, not Adam's L2 term */
} tg_update_config;

/* torch.optim.SGD on p with gradient g; buf is the momentum buffer (NULL
 * without momentum), first tells its first step. g, buf: p's dtype and
 * shape. */
TG_HIDDEN void tg__sgd_update(const tg_update_config *c, tg_tensor *p,
                              const tg_tensor *g, tg_tensor *buf, bool first);
/* torch.optim.Adam / AdamW at step t (from 1) on p with gradient g and
 * moments m, v (p's dtype and shape). */
TG_HIDDEN void tg__adam_update(const tg_update_config *c, tg_tensor *p,
                               const tg_tensor *g, tg_tensor *m, tg_tensor *v,
                               int64_t t);
/* g *= coef, in place, in g's dtype (as torch's grad.mul_(clip_coef)). */
TG_HIDDEN void tg__scale_in_place(tg_tensor *g, double coef);

#endif /* TAPEGRAD_UPDATE_H */
