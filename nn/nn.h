/* Private to nn/: what the module files share. nn/ sees tensors only
 * through the public API, plus the error helpers (core/error.h), core's
 * offer to the floors above (core/shared.h, core/npy.h) and the
 * optimizers' update kernels (ops/update.h). */
#ifndef TAPEGRAD_NN_PRIVATE_H
#define TAPEGRAD_NN_PRIVATE_H

#include "core/error.h"
#include "tapegrad_nn.h"

/* The prefix of a nested module's parameters (nn/params.c): "prefix.name",
 * or "prefix.name.index" when index >= 0 (just "name..." without a
 * prefix), written into buf (TG_PARAM_NAME_MAX bytes). NULL with an error
 * naming op when it does not fit in a parameter name. */
TG_HIDDEN const char *tg__param_prefix(const char *op, char *buf,
                                       const char *prefix, const char *name,
                                       int index);
#endif /* TAPEGRAD_NN_PRIVATE_H */
