/* Private to libtapegrad: .npy bytes in memory, for the .npz checkpoints
 * (nn/checkpoint.c), which hold one .npy file per parameter inside a zip,
 * and a tensor's exact element bytes, for both checkpoint writers (.npz and
 * nn/safetensors.c). The format itself is described and implemented in core/npy.c. */
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

/* Copies t's elements, their own bytes in C order, into dst (numel times
 * the dtype's size): exact for every dtype, where tg_copy_out goes through
 * double and rounds an int64 beyond 2^53. For the checkpoint writers (.npz,
 * .safetensors). 0, or -1 with "<op>: out of memory ..." set. */
TG_HIDDEN int tg__npy_elements(const char *op, const tg_tensor *t, void *dst);

#endif /* TAPEGRAD_NPY_H */
