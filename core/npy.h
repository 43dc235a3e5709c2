/* Private to libtapegrad: .npy bytes in memory, for the .npz checkpoints
 * (nn/checkpoint.c), which hold one .npy file per parameter inside a zip,
 * and a tensor's exact element bytes, for both checkpoint writers (.npz and
 * nn/safetensors_save.c). The format itself is described and implemented
 * in core/npy.c. */
#ifndef TAPEGRAD_NPY_H
#define TAPEGRAD_NPY_H

#include "core/error.h"

/* Room for the header tg__npy_header writes, whatever the shape. */
#define TG_NPY_HEADER_MAX 512

/* Writes t's .npy header (magic, version 1.0, length and padded dict), the
 * bytes tg_save_npy puts before the data, into buf (TG_NPY_HEADER_MAX
 * bytes). Returns its length, a multiple of 64. */
TG_HIDDEN size_t tg__npy_header(const tg_tensor *t, char *buf);

/* Parses len bytes of a whole .npy file held in memory into a new tensor,
 * with tg_load_npy's checks; errors read "load_npy: <name>: <problem>". */
TG_HIDDEN tg_tensor *tg__npy_parse(const char *name, const void *bytes,
                                   size_t len);

/* What a reader expects of a .npy file's dtype and shape, asked once the
 * header is read and before the data is: true to go on; false, with its
 * own error set, to refuse the file. */
typedef bool (*tg__npy_check)(void *ctx, tg_dtype dt, int ndim,
                              const int64_t *shape);

/* How tg__npy_read_stream gets its bytes: the next n into buf; returns
 * how many came (fewer only at the end or on a failure). */
typedef size_t (*tg__npy_read)(void *ctx, void *buf, size_t n);

/* tg__npy_parse on exactly size bytes that read gives once, in order (a
 * zip entry as it is inflated), and never a byte more than the parser
 * asks for: the header first, checked against size (the data must fill
 * the rest exactly) and by check (when not NULL), before anything is
 * allocated or read for the data; then the bytes the header declares,
 * straight into the new tensor. Errors as tg__npy_parse's, or check's. */
TG_HIDDEN tg_tensor *tg__npy_read_stream(const char *name, tg__npy_read read,
                                         void *read_ctx, int64_t size,
                                         tg__npy_check check, void *check_ctx);

/* Copies t's elements, their own bytes in C order, into dst (numel times
 * the dtype's size): exact for every dtype, where tg_copy_out goes through
 * double and rounds an int64 beyond 2^53. For the checkpoint writers (.npz,
 * .safetensors). 0, or -1 with "<op>: out of memory ..." set. */
TG_HIDDEN int tg__npy_elements(const char *op, const tg_tensor *t, void *dst);

#endif /* TAPEGRAD_NPY_H */
