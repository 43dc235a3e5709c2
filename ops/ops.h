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

/* The multi-index of element p (C order) of a tensor of t's shape, as
 * "(i,j,...)" in buf (TG_SHAPE_STR bytes), for the errors that name where
 * a bad index or target stands (ops/embedding.c). Returns buf. */
TG_HIDDEN const char *tg__position_str(const tg_tensor *t, int64_t p,
                                       char *buf);

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

/* Cross-entropy's shared parts (ops/cross_entropy_rules.c), for
 * tg_cross_entropy_with (ops/loss.c) and tg_linear_cross_entropy_with
 * (ops/linear_ce.c), whose entries keep the same attributes: saved[0] the
 * checked targets (contiguous int64), ip[TG__CE_IGNORE] the ignored
 * target, ip[TG__CE_REDUCTION] the reduction, p[0] the number N of counted
 * (not ignored) positions. */
enum { TG__CE_IGNORE, TG__CE_REDUCTION };

/* The targets as a contiguous int64 tensor (new), after checking they are
 * int64 shaped as ref without its last dim and that each lies in [0, V)
 * or equals ignore; *counted gets the number not ignored. NULL and an
 * error "op: ..." naming the targets and ref (called ref_name), and for a
 * bad target its value, its position and range_of ("logits (2,3,5)"). */
TG_HIDDEN tg_tensor *tg__ce_targets(const char *op, const char *ref_name,
                                    const tg_tensor *ref, tg_tensor *targets,
                                    int64_t V, int64_t ignore,
                                    const char *range_of, int64_t *counted);
/* Sets the block and keep sizes of tg_linear_cross_entropy_with
 * (ops/linear_ce.c), in elements of the logits, returning the old ones:
 * for the tests, which make small inputs take many blocks. */
TG_HIDDEN void tg__lce_tune(int64_t block, int64_t keep, int64_t *old_block,
                            int64_t *old_keep);
/* The loss from each row's loss (per_row, float64, (N)): 'none' a tensor
 * of ref's dtype and shape without its last dim; 'sum' and 'mean' (over
 * the counted rows) a 0-d one, summed in double in row order. New, or
 * NULL with an error naming op. */
TG_HIDDEN tg_tensor *tg__ce_reduce(const char *op, const tg_tensor *ref,
                                   const tg_tensor *per_row, int64_t counted,
                                   tg_reduction red);
/* The recorded backward's and forward-mode rule's pieces, as public ops
 * on logits x (...,V) of entry n (NULL in, NULL out; new references):
 *   row_grad:   g = softmax(x) - onehot(targets), rows ignored set to 0
 *   weight:     w = 1/N for the mean (0 when N = 0), else 1
 *   scale_grad: dlogits = g * dy * w      ('none': dy as (...,1))
 *   tangent:    ty = sum_k g * tl, reduced as the loss (times w) */
TG_HIDDEN tg_tensor *tg__ce_row_grad(tg_tensor *x, const tg_node *n);
TG_HIDDEN double tg__ce_weight(const tg_node *n);
/* dy's values as one weight per row ('none'), in double (malloc'd, to
 * free), or NULL with an error naming op */
TG_HIDDEN double *tg__ce_row_weights(const char *op, const tg_tensor *dy);
TG_HIDDEN tg_tensor *tg__ce_scale_grad(const tg_node *n, tg_tensor *g,
                                       tg_tensor *dy);
TG_HIDDEN tg_tensor *tg__ce_tangent(const tg_node *n, tg_tensor *g,
                                    tg_tensor *tl);

#endif /* TAPEGRAD_OPS_H */
