/* Private to nn/: llm.c's GPT-2 checkpoint (gpt2_124M.bin and what
 * train_gpt2.c writes), what its three rooms share: the layout
 * (nn/llmc_model_layout.c), the reader into a tg_gpt (nn/llmc_model_load.c)
 * and the writer from one (nn/llmc_model_save.c). The layout, after the
 * 256-int header (nn/llmc.h: [0] 20240326, [1] version: 3 float32,
 * 5 bfloat16, [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp):
 *
 *     wte (Vp,C)  wpe (maxT,C)  ln1w ln1b (L,C)  qkvw (L,3C,C)  qkvb (L,3C)
 *     attprojw (L,C,C)  attprojb (L,C)  ln2w ln2b (L,C)  fcw (L,4C,C)
 *     fcb (L,4C)  fcprojw (L,C,4C)  fcprojb (L,C)  lnfw lnfb (C)
 *
 * one after another, each layer's slice in turn. Matrices are nn.Linear's
 * (out, in); the model is GPT-2's: every bias, the tanh GELU, layer norms
 * of eps 1e-5, the head tied to wte. wte's rows past V pad the vocabulary
 * to a multiple of 128: llm.c's softmax runs over the first V logits only,
 * so those rows get no gradient and never matter; reading drops them,
 * writing fills them with zeros, as llm.c's own export does. */
#ifndef TAPEGRAD_NN_LLMC_MODEL_H
#define TAPEGRAD_NN_LLMC_MODEL_H

#include "nn/llmc.h"
#include "tapegrad_nn.h"

/* The kinds of tensor in file order, by llm.c's names. */
enum {
    WTE,
    WPE,
    LN1W,
    LN1B,
    QKVW,
    QKVB,
    ATTPROJW,
    ATTPROJB,
    LN2W,
    LN2B,
    FCW,
    FCB,
    FCPROJW,
    FCPROJB,
    LNFW,
    LNFB,
    N_KINDS
};

/* A kind: GPT-2's name (after "h.<layer>." for one per layer), rows and
 * columns in units of C (rows 0: a vector), per layer or not, stored
 * (out, in). */
typedef struct llmc_kind {
    const char *name;
    int rows, cols;
    bool per_layer, linear;
} llmc_kind;
/* The 16 kinds in file order. */
TG_HIDDEN extern const llmc_kind tg__llmc_kinds[N_KINDS];
#define KINDS tg__llmc_kinds

/* The header's sizes. */
typedef struct llmc_dims {
    int64_t maxT, V, L, NH, C, Vp;
    int version; /* 3: float32, 5: bfloat16 */
} llmc_dims;

/* Kind k's GPT-2 name for layer l: "h.<l>.<name>", or the name alone. */
TG_HIDDEN void tg__llmc_kind_name(int k, int l, char name[TG_PARAM_NAME_MAX]);

/* Kind k's slice for one layer: rows (1 for a vector) and columns. */
TG_HIDDEN void tg__llmc_slice_shape(const llmc_dims *d, int k, int64_t *rows,
                                    int64_t *cols);

/* The header of path (opened as f, size bytes) read into d and checked
 * against the file's size; false with "gpt_load_llmc: <path>: ..." set. */
TG_HIDDEN bool tg__llmc_read_dims(const char *path, FILE *f, int64_t size,
                                  llmc_dims *d);

/* The header that says d (its ints past d's are 0), into h. */
TG_HIDDEN void tg__llmc_header_of(const llmc_dims *d,
                                  int32_t h[LLMC_HEADER_INTS]);

#endif /* TAPEGRAD_NN_LLMC_MODEL_H */
