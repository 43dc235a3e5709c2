/* llm.c's GPT-2 checkpoint (gpt2_124M.bin and what train_gpt2.c writes),
 * read into and written from a tg_gpt. The layout, after the 256-int
 * header ([0] 20240326, [1] version: 3 float32, 5 bfloat16, [2] maxT,
 * [3] V, [4] L, [5] NH, [6] C, [7] Vp):
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
 * writing fills them with zeros, as llm.c's own export does.
 *
 * Reading builds the state dict under GPT-2's names in Conv1D's (in, out)
 * layout and hands it to tg_gpt_from_state_dict, which then chooses the
 * tanh GELU, every bias and the tied head, as llm.c's model is. */
#include "nn/llmc.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAGIC = 20240326, PAD = 128 };

/* The 16 tensors in file order: GPT-2's name (after "h.<layer>." for one
 * per layer), rows and columns in units of C (rows 0: a vector), per layer
 * or not, stored (out, in). */
enum { WTE, WPE, N_KINDS = 16 };
static const struct {
    const char *name;
    int rows, cols;
    bool per_layer, linear;
} KINDS[N_KINDS] = {
    {"wte.weight", 1, 1, false, false}, /* rows: Vp */
    {"wpe.weight", 1, 1, false, false}, /* rows: maxT */
    {"ln_1.weight", 0, 1, true, false},
    {"ln_1.bias", 0, 1, true, false},
    {"attn.c_attn.weight", 3, 1, true, true},
    {"attn.c_attn.bias", 0, 3, true, false},
    {"attn.c_proj.weight", 1, 1, true, true},
    {"attn.c_proj.bias", 0, 1, true, false},
    {"ln_2.weight", 0, 1, true, false},
    {"ln_2.bias", 0, 1, true, false},
    {"mlp.c_fc.weight", 4, 1, true, true},
    {"mlp.c_fc.bias", 0, 4, true, false},
    {"mlp.c_proj.weight", 1, 4, true, true},
    {"mlp.c_proj.bias", 0, 1, true, false},
    {"ln_f.weight", 0, 1, false, false},
    {"ln_f.bias", 0, 1, false, false},
};

/* Kind k's GPT-2 name for layer l: "h.<l>.<name>", or the name alone. */
static void kind_name(int k, int l, char name[TG_PARAM_NAME_MAX])
{
    if (KINDS[k].per_layer)
        snprintf(name, TG_PARAM_NAME_MAX, "h.%d.%s", l, KINDS[k].name);
    else
        snprintf(name, TG_PARAM_NAME_MAX, "%s", KINDS[k].name);
}

typedef struct dims {
    int64_t maxT, V, L, NH, C, Vp;
    int version; /* 3: float32, 5: bfloat16 */
} dims;

/* Kind k's slice for one layer: rows (1 for a vector) and columns. */
static void slice_shape(const dims *d, int k, int64_t *rows, int64_t *cols)
{
    *rows = k == WTE   ? d->Vp
            : k == WPE ? d->maxT
                       : (KINDS[k].rows ? KINDS[k].rows * d->C : 1);
    *cols = KINDS[k].cols * d->C;
}

/* The elements of the largest one-layer slice: the buffers' size. */
static int64_t largest_slice(const dims *d)
{
    int64_t most = 0;
    for (int k = 0; k < N_KINDS; k++) {
        int64_t rows, cols;
        slice_shape(d, k, &rows, &cols);
        most = rows * cols > most ? rows * cols : most;
    }
    return most;
}

/* Elements of the whole file's weights, or false when that overflows. */
static bool count_all(const dims *d, uint64_t *n)
{
    uint64_t total = 0;
    for (int k = 0; k < N_KINDS; k++) {
        int64_t rows, cols;
        slice_shape(d, k, &rows, &cols);
        uint64_t one, all;
        if (__builtin_mul_overflow((uint64_t)rows, (uint64_t)cols, &one) ||
            __builtin_mul_overflow(one, KINDS[k].per_layer ? d->L : 1, &all) ||
            __builtin_add_overflow(total, all, &total))
            return false;
    }
    *n = total;
    return true;
}

/* The model the header asks for makes 2 + 12 L tensors of the state dict
 * and 6 L NH of the heads, some hundreds of bytes each whatever their
 * size: a header of a million layers of one channel (50 bytes of bfloat16
 * a layer) would make a small file cost gigabytes. A real checkpoint has
 * thousands of bytes for each (GPT-2 124M: 1,010 tensors in 475 MiB), so
 * fewer than one tensor per 64 bytes of file, and at most 100,000 layers
 * (as tg_gpt_from_state_dict counts them), is asked. */
static bool few_enough_tensors(const char *path, const dims *d, int64_t size)
{
    double tensors = 2 + 12.0 * (double)d->L + 6.0 * (double)d->L * d->NH;
    if (d->L <= 100000 && tensors * 64 <= (double)size)
        return true;
    return tg__file_error("gpt_load_llmc", path,
                          "the header's %lld layers of %lld heads make %.0f "
                          "tensors: more than one per 64 bytes of a "
                          "%lld-byte file (or over 100,000 layers)",
                          (long long)d->L, (long long)d->NH, tensors,
                          (long long)size);
}

/* The header read and checked against the file's size. */
static bool read_dims(const char *path, FILE *f, int64_t size, dims *d)
{
    static const char op[] = "gpt_load_llmc";
    int32_t h[LLMC_HEADER_INTS];
    if (!tg__llmc_header(op, path, f, size, h))
        return false;
    if (h[0] != MAGIC)
        return tg__file_error(op, path,
                              "not an llm.c model file: magic %d, expected %d",
                              h[0], MAGIC);
    if (h[1] != 3 && h[1] != 5)
        return tg__file_error(op, path,
                              "version %d: versions 3 (float32) and 5 "
                              "(bfloat16) are read",
                              h[1]);
    *d = (dims){.maxT = h[2],
                .V = h[3],
                .L = h[4],
                .NH = h[5],
                .C = h[6],
                .Vp = h[7],
                .version = h[1]};
    if (d->maxT < 1 || d->V < 1 || d->L < 1 || d->NH < 1 || d->C < 1 ||
        d->Vp < d->V || d->C % d->NH)
        return tg__file_error(op, path,
                              "bad header: maxT %lld, V %lld, L %lld, NH %lld, "
                              "C %lld, Vp %lld (each >= 1, Vp >= V, NH "
                              "dividing C)",
                              (long long)d->maxT, (long long)d->V,
                              (long long)d->L, (long long)d->NH,
                              (long long)d->C, (long long)d->Vp);
    uint64_t n, bytes;
    int es = d->version == 3 ? 4 : 2;
    if (!count_all(d, &n) || __builtin_mul_overflow(n, es, &bytes) ||
        bytes > (uint64_t)INT64_MAX - LLMC_HEADER_BYTES)
        return tg__file_error(op, path,
                              "the header's sizes ask for more than 2^63 "
                              "bytes");
    if ((int64_t)bytes + LLMC_HEADER_BYTES != size)
        return tg__file_error(
            op, path,
            "the header (maxT %lld, V %lld, L %lld, NH %lld, C %lld, Vp "
            "%lld, version %d) asks for %llu bytes (1024 + %llu of weights); "
            "the file has %lld",
            (long long)d->maxT, (long long)d->V, (long long)d->L,
            (long long)d->NH, (long long)d->C, (long long)d->Vp, d->version,
            (unsigned long long)(bytes + LLMC_HEADER_BYTES),
            (unsigned long long)bytes, (long long)size);
    return few_enough_tensors(path, d, size);
}

/* ---- Reading ------------------------------------------------------------ */

/* n elements of the file (float32 or bfloat16, little-endian) as floats. */
static bool read_floats(const char *path, FILE *f, const dims *d, float *out,
                        size_t n)
{
    size_t es = d->version == 3 ? 4 : 2;
    unsigned char *raw = (unsigned char *)out; /* read in place, widened */
    unsigned char *at = raw + n * (4 - es);    /* from the back: see below */
    if (fread(at, es, n, f) != n)
        return tg__file_error("gpt_load_llmc", path, "cannot read: %s",
                              ferror(f) ? strerror(errno) : "unexpected end");
    /* Element i's float ends at 4 (i + 1) <= n (4 - es) + es (i + 1), where
     * its bytes start after element i - 1's were read: front to back,
     * nothing is overwritten before it is read. */
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = at + es * i;
        uint32_t w =
            es == 4 ? tg__llmc_u32(b) : (uint32_t)(b[0] | b[1] << 8) << 16;
        memcpy(out + i, &w, 4);
    }
    return true;
}

/* v (rows, cols) as its transpose (cols, rows), in tmp. */
static void transpose(const float *v, int64_t rows, int64_t cols, float *tmp)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            tmp[c * rows + r] = v[r * cols + c];
}

/* Kind k of layer l (or the one of a kind not per layer) read into sd
 * under GPT-2's name; buf and tmp hold a slice each. */
static bool read_slice(const char *path, FILE *f, const dims *d, int k, int l,
                       float *buf, float *tmp, tg_params *sd)
{
    int64_t rows, cols;
    slice_shape(d, k, &rows, &cols);
    if (!read_floats(path, f, d, buf, (size_t)(rows * cols)))
        return false;
    char name[TG_PARAM_NAME_MAX];
    kind_name(k, l, name);
    tg_tensor *t;
    if (KINDS[k].linear) { /* (out, in) as Conv1D's (in, out) */
        transpose(buf, rows, cols, tmp);
        t = tg_from_data(TG_FLOAT32, TG_SHAPE(cols, rows), tmp);
    } else if (k == WTE) /* the padding rows dropped */
        t = tg_from_data(TG_FLOAT32, TG_SHAPE(d->V, cols), buf);
    else if (k == WPE)
        t = tg_from_data(TG_FLOAT32, TG_SHAPE(rows, cols), buf);
    else
        t = tg_from_data(TG_FLOAT32, TG_SHAPE(cols), buf);
    if (t && tg_params_add(sd, NULL, name, t) == 0)
        return true;
    tg_release(t);
    return false;
}

/* Every tensor of the file, in its order, into sd. */
static bool read_all(const char *path, FILE *f, const dims *d, tg_params *sd)
{
    int64_t most = largest_slice(d);
    float *buf = tg__malloc(sizeof(float) * (size_t)most);
    float *tmp = tg__malloc(sizeof(float) * (size_t)most);
    bool ok = buf && tmp;
    if (!ok)
        tg__file_error("gpt_load_llmc", path,
                       "out of memory for a slice of %lld floats",
                       (long long)most);
    for (int k = 0; ok && k < N_KINDS; k++)
        for (int l = 0; ok && l < (KINDS[k].per_layer ? d->L : 1); l++)
            ok = read_slice(path, f, d, k, l, buf, tmp, sd);
    free(buf);
    free(tmp);
    return ok;
}

/* opts->n_head: 0, or what the header says (the weights fit any divisor
 * of C, but the file's model has the header's). */
static bool check_heads(const char *path, const dims *d,
                        const tg_gpt_load_opts *opts)
{
    if (opts->n_head == 0 || opts->n_head == d->NH)
        return true;
    tg__file_error("gpt_load_llmc", path,
                   "opts n_head %d is not the header's %lld (give 0 for it)",
                   opts->n_head, (long long)d->NH);
    return false;
}

int tg_gpt_load_llmc_with(tg_gpt *g, const char *path,
                          const tg_gpt_load_opts *opts)
{
    if (g)
        memset(g, 0, sizeof *g);
    if (!g || !path) {
        tg__error("gpt_load_llmc: %s is NULL", g ? "the path" : "the model");
        return -1;
    }
    if (!tg__gpt_check_load_opts("gpt_load_llmc_with", opts))
        return -1;
    int64_t size;
    FILE *f = tg__file_open_regular("gpt_load_llmc", path, &size);
    if (!f)
        return -1;
    dims d = {0};
    tg_params sd;
    tg_params_init(&sd);
    bool was = tg_set_grad_enabled(false);
    bool ok = read_dims(path, f, size, &d) && check_heads(path, &d, opts) &&
              read_all(path, f, &d, &sd);
    fclose(f);
    tg_set_grad_enabled(was);
    tg_gpt_load_opts o = *opts;
    o.n_head = (int)d.NH;
    int rc =
        ok ? tg__gpt_from_state_dict_as(g, &sd, &o, "llm.c checkpoint") : -1;
    tg_params_release(&sd);
    if (ok && rc < 0) {
        char what[4096 + 32];
        snprintf(what, sizeof what, "gpt_load_llmc: %s", path);
        return tg__error_wrap(what);
    }
    return rc;
}

int tg_gpt_load_llmc(tg_gpt *g, const char *path, tg_dtype dt)
{
    tg_gpt_load_opts o = {.dtype = dt};
    return tg_gpt_load_llmc_with(g, path, &o);
}

/* ---- Writing ------------------------------------------------------------ */

/* What llm.c's model is, for a model to be written as one: "" when g is,
 * else what differs. (Biases a model lacks are written as zeros: the same
 * function.) */
static const char *not_llmc(const tg_gpt *g)
{
    const tg_gpt_config *c = &g->cfg;
    if (!c->gelu || !c->gelu_tanh)
        return "the tanh GELU";
    if (!c->tie_weights)
        return "the head tied to the token table (tie_weights)";
    return ""; /* eps and the score scale: tg_gpt_state_dict's checks */
}

/* Kind k of layer l as the file holds it, into out, from sd (GPT-2's names
 * and Conv1D layout: tg_gpt_state_dict): Linear's (out, in) transposed
 * back, wte padded with zero rows, a bias the model lacks as zeros. */
static bool make_slice(const tg_params *sd, const dims *d, int k, int l,
                       float *out, float *tmp)
{
    int64_t rows, cols;
    slice_shape(d, k, &rows, &cols);
    char name[TG_PARAM_NAME_MAX];
    kind_name(k, l, name);
    tg_tensor *t = tg_params_get(sd, name);
    memset(out, 0, sizeof(float) * (size_t)(rows * cols));
    if (!t) /* a bias of a model without */
        return true;
    if (!KINDS[k].linear) /* wte: its V rows, the rest stays 0 */
        return tg_copy_out(t, TG_FLOAT32, out) == 0;
    if (tg_copy_out(t, TG_FLOAT32, tmp) != 0)
        return false;
    transpose(tmp, cols, rows, out); /* (in, out) -> (out, in) */
    return true;
}

/* n floats as little-endian float32. */
static bool put_floats(tg__file *out, const float *v, size_t n,
                       unsigned char *bytes)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, v + i, 4);
        for (int b = 0; b < 4; b++)
            bytes[4 * i + (size_t)b] = (unsigned char)(w >> (8 * b));
    }
    return tg__file_write(out, bytes, 4 * n);
}

/* Every slice of the file, in its order, after the header. */
static bool write_all(tg__file *out, const tg_params *sd, const dims *d)
{
    int64_t most = largest_slice(d);
    float *buf = tg__malloc(sizeof(float) * (size_t)most);
    float *tmp = tg__malloc(sizeof(float) * (size_t)most);
    unsigned char *bytes = tg__malloc(4 * (size_t)most);
    bool ok = buf && tmp && bytes;
    if (!ok)
        tg__error("gpt_save_llmc: out of memory for a slice of %lld floats",
                  (long long)most);
    for (int k = 0; ok && k < N_KINDS; k++)
        for (int l = 0; ok && l < (KINDS[k].per_layer ? d->L : 1); l++) {
            int64_t rows, cols;
            slice_shape(d, k, &rows, &cols);
            ok = make_slice(sd, d, k, l, buf, tmp) &&
                 put_floats(out, buf, (size_t)(rows * cols), bytes);
        }
    free(buf);
    free(tmp);
    free(bytes);
    return ok;
}

int tg_gpt_save_llmc(tg_gpt *g, const char *path)
{
    if (!g || !path || !g->blocks) {
        tg__error("gpt_save_llmc: %s", !path ? "the path is NULL"
                                       : !g  ? "the model is NULL"
                                             : "the model is not initialised");
        return -1;
    }
    const char *need = not_llmc(g);
    if (*need) {
        tg__error("gpt_save_llmc: %s: llm.c's GPT-2 has %s; this model has "
                  "not",
                  path, need);
        return -1;
    }
    const tg_gpt_config *c = &g->cfg;
    dims d = {.maxT = c->block_size,
              .V = c->vocab_size,
              .L = c->n_layer,
              .NH = c->n_head,
              .C = c->n_embd,
              .version = 3};
    d.Vp = (d.V + PAD - 1) / PAD * PAD;
    int32_t h[LLMC_HEADER_INTS] = {MAGIC,           3,
                                   (int32_t)d.maxT, (int32_t)d.V,
                                   (int32_t)d.L,    (int32_t)d.NH,
                                   (int32_t)d.C,    (int32_t)d.Vp};
    tg_params sd;
    tg_params_init(&sd);
    if (tg_gpt_state_dict(g, &sd) < 0) {
        tg_params_release(&sd);
        return tg__error_wrap("gpt_save_llmc");
    }
    tg__file *out = tg__file_begin("gpt_save_llmc", path);
    bool ok = out && tg__llmc_put_header(out, h) && write_all(out, &sd, &d);
    tg_params_release(&sd);
    return tg__file_end(out, ok);
}
