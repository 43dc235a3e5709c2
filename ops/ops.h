/* Private to ops/: what the op files share beyond core/internal.h. */
#ifndef TAPEGRAD_OPS_H
#define TAPEGRAD_OPS_H

#include "core/internal.h"

/* Indices (ops/embedding.c, shared with the losses): a contiguous int64
 * tensor holding ids's values (new), after checking every value lies in
 * [0, limit). NULL and an error naming op, the offending value (a `noun` of
 * the tensor `name`), its position in ids, and `range_of` (what the limit
 * is, e.g. "weight (5,3)"). ids must be TG_INT64 (else an error). */
TG_HIDDEN tg_tensor *tg__checked_ids(const char *op, const char *name,
                                     const char *noun, tg_tensor *ids,
                                     int64_t limit, const char *range_of);
/* The attention's softmax (ops/softmax.c), for nn/head.c: softmax along the
 * last dim of z = scale * x, where with causal the future is masked (entry
 * j of row i, counting rows along the dim before, is -inf when j > i). One
 * tape entry ("causal_softmax" / "scaled_softmax") that computes, forward
 * and backward, the same bits as tg_scale (skipped for scale 1), then
 * tg_masked_fill with tril(ones(T,T)) == 0, then tg_softmax, without the
 * (T,T) mask or the intermediate tensors. A new reference, or NULL. */
TG_HIDDEN tg_tensor *tg__attention_softmax(tg_tensor *x, double scale,
                                           bool causal);
#endif /* TAPEGRAD_OPS_H */
