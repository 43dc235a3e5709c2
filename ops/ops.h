/* Private to ops/: what the op files share beyond core/internal.h. Not
 * installed, and not for the floors above (tests/layers.test). */
#ifndef TAPEGRAD_OPS_H
#define TAPEGRAD_OPS_H

#include "core/tape.h"

/* Indices (ops/embedding.c, shared with the losses): a contiguous int64
 * tensor holding ids's values (new), after checking every value lies in
 * [0, limit). NULL and an error naming op, the offending value (a `noun` of
 * the tensor `name`), its position in ids, and `range_of` (what the limit
 * is, e.g. "weight (5,3)"). ids must be TG_INT64 (else an error). */
TG_HIDDEN tg_tensor *tg__checked_ids(const char *op, const char *name,
                                     const char *noun, tg_tensor *ids,
                                     int64_t limit, const char *range_of);

/* tg_softmax's kernels (ops/softmax.c), for ops/attention_softmax.c, with
 * no tape entry and the same bits as tg_softmax and its backward:
 *
 *   y  = softmax(x) along dim d          y may be x itself (in place)
 *   dx = y * (dy - sum(y * dy)) along d  dx a tensor of y's shape
 *
 * All of one float dtype; any strides; d a valid dim (not checked). */
TG_HIDDEN void tg__softmax_rows(const tg_tensor *x, tg_tensor *y, int d);
TG_HIDDEN void tg__softmax_backward_rows(const tg_tensor *y,
                                         const tg_tensor *dy, tg_tensor *dx,
                                         int d);

/* p * (v - sum(p * v, d, keepdim)) as public ops (recorded when grad mode
 * is on): the softmax's vjp (v = dy) and jvp (v = t) for p = softmax(x)
 * along d (ops/softmax.c). New reference; NULL when an op fails (error
 * set) or p or v is NULL. */
TG_HIDDEN tg_tensor *tg__softmax_rule(tg_tensor *p, tg_tensor *v, int d);

/* tg_attention's vjp and jvp (ops/attention_rules.c): tg_op.vjp and
 * tg_op.jvp of its entry (core/tape.h). */
TG_HIDDEN int tg__attention_vjp(const tg_node *n, tg_tensor *dy,
                                tg_tensor **dx);
TG_HIDDEN int tg__attention_jvp(const tg_node *n, tg_tensor *const *t,
                                tg_tensor **ty);

#endif /* TAPEGRAD_OPS_H */
