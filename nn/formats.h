/* Private to libtapegrad: the checkpoint readers' in-memory entries, for the
 * fuzzers (fuzz/fuzz_safetensors.c, fuzz/fuzz_npz.c) and the regression
 * tests; and the strict load of a whole checkpoint, for nn/optim.c. Each runs exactly the code the public reader runs on a file (the
 * file is only where the bytes come from), so an input that breaks one
 * breaks the other. */
#ifndef TAPEGRAD_FORMATS_H
#define TAPEGRAD_FORMATS_H

#include "core/error.h"
#include "tapegrad_nn.h"

/* tg_read_safetensors on len bytes held in memory; errors read
 * "read_safetensors: <name>: <problem>". 0 or -1, out unchanged on -1. */
TG_HIDDEN int tg__safetensors_read_mem(const char *name, const void *bytes,
                                       size_t len, tg_params *out);

/* tg_read_npz on len bytes held in memory; errors read
 * "read_npz: <name>: <problem>". 0 or -1, out unchanged on -1. */
TG_HIDDEN int tg__npz_read_mem(const char *name, const void *bytes, size_t len,
                               tg_params *out);

/* Appends the n new tensors ts to out, named names[k] (nn/params.c).
 * All or nothing: 0, and out owns them (tg_params_release); or -1 with
 * "<op>: <path>: <why>" set, every one of ts released and out as it was. */
TG_HIDDEN int tg__params_adopt(const char *op, const char *path, tg_params *out,
                               size_t n, char (*names)[TG_PARAM_NAME_MAX],
                               tg_tensor **ts);

/* tg_load_npz, and also refusing (an error naming it, nothing changed) an
 * entry that no parameter of ps asks for, but those under "<prefix>."
 * (which the caller checks itself: an optimizer's groups): a whole
 * checkpoint must be this model's (tg_load_checkpoint), where a plain load
 * takes a subset. */
TG_HIDDEN int tg__load_npz_strict(const tg_params *ps, const char *path,
                                  const char *prefix);

/* A .safetensors file open for a loader that streams it (nn/gpt_load.c):
 * the header read and checked as tg_read_safetensors checks it (the same
 * errors, "read_safetensors: <path>: ...", BOOL bytes included), and out
 * given one tensor per entry, in the header's order, holding its shape and
 * dtype but not its values (a broadcast element: no memory). The values
 * then go from the file into a model's parameters a chunk at a time, so a
 * load holds the model and a few MiB, never the file's tensors whole.
 * NULL on error, out as it was. (nn/safetensors_stream.c) */
typedef struct tg__st_stream tg__st_stream;
TG_HIDDEN tg__st_stream *tg__st_open(const char *path, tg_params *out);
/* Closes the file and frees the stream (not out's tensors). NULL-safe. */
TG_HIDDEN void tg__st_close(tg__st_stream *st);
/* dst = the value of out's item i, converted to dst's dtype as tg_copy_
 * converts; with transpose, dst is the 2-dim value transposed. dst has the
 * shape (checked by the caller). 0 or -1 (a read error, no memory). */
TG_HIDDEN int tg__st_copy(tg__st_stream *st, int i, tg_tensor *dst,
                          bool transpose);
/* Item i's whole value, as tg_read_safetensors reads it, for a loader
 * that takes parts of it (views): borrowed, kept while i is one of the
 * last two items asked for, until the stream closes. NULL on error. */
TG_HIDDEN tg_tensor *tg__st_tensor(tg__st_stream *st, int i);
/* *equal = tg_allclose(item a, item b, 0, 0), a chunk of each at a time.
 * 0 or -1 (a read error, no memory). */
TG_HIDDEN int tg__st_equal(tg__st_stream *st, int a, int b, bool *equal);

#endif /* TAPEGRAD_FORMATS_H */
