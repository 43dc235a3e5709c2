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

#endif /* TAPEGRAD_FORMATS_H */
