/* Private to libtapegrad: kernels one op file lends another, for ops built
 * from other ops' rows without their tape entries. Not installed. */
#ifndef TAPEGRAD_OPS_H
#define TAPEGRAD_OPS_H

#include "internal.h"

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

#endif
