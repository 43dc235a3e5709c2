/* Private to libtapegrad: what core offers the floors above ops (nn, plot)
 * beyond the public API, each for a named use. Like core/error.h it sees
 * tensors only as the public API's opaque pointers. */
#ifndef TAPEGRAD_SHARED_H
#define TAPEGRAD_SHARED_H

#include "core/error.h"

/* Drops a reference the library retained itself (a tape entry's input, an
 * optimizer's parameter). Unlike tg_release it never takes t out of its
 * scope: the scope's reference is someone else's. (core/tensor.c) */
TG_HIDDEN void tg__drop(tg_tensor *t);

/* dst = src elementwise, src broadcast to dst's shape; converts dtypes. No
 * tape entry: for checkpoint loading, which writes parameters in place.
 * (core/iter.c) */
TG_HIDDEN void tg__copy_into(tg_tensor *dst, const tg_tensor *src);

/* Sum of g's squared elements, in double: in fixed blocks shared among the
 * threads, so the same bits with any thread count. For the tape's |grad|
 * and clip_grad_norm. (core/tape.c) */
TG_HIDDEN double tg__sum_squares(const tg_tensor *g);

#endif /* TAPEGRAD_SHARED_H */
