/* The layout of llm.c's GPT-2 checkpoint (nn/llmc_model.h has the format),
 * as both its reader and its writer need it: the table of the 16 kinds of
 * tensor in the file's order, their GPT-2 names and their slices' shapes,
 * and the header's sizes, read and checked or written. A file being loaded
 * may come from anyone, so before any model is built its header is held to
 * the format: llm.c's magic, a version read, sizes that make a model, and
 * a file of exactly the bytes they ask for. */
#include "nn/llmc_model.h"

#include <string.h>

enum { MAGIC = 20240326 };

const llmc_kind tg__llmc_kinds[N_KINDS] = {
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
void tg__llmc_kind_name(int k, int l, char name[TG_PARAM_NAME_MAX])
{
    if (KINDS[k].per_layer)
        snprintf(name, TG_PARAM_NAME_MAX, "h.%d.%s", l, KINDS[k].name);
    else
        snprintf(name, TG_PARAM_NAME_MAX, "%s", KINDS[k].name);
}

/* Kind k's slice for one layer: rows (1 for a vector) and columns. */
void tg__llmc_slice_shape(const llmc_dims *d, int k, int64_t *rows,
                          int64_t *cols)
{
    *rows = k == WTE   ? d->Vp
            : k == WPE ? d->maxT
                       : (KINDS[k].rows ? KINDS[k].rows * d->C : 1);
    *cols = KINDS[k].cols * d->C;
}

/* Elements of the whole file's weights, or false when that overflows. */
static bool count_all(const llmc_dims *d, uint64_t *n)
{
    uint64_t total = 0;
    for (int k = 0; k < N_KINDS; k++) {
        int64_t rows, cols;
        tg__llmc_slice_shape(d, k, &rows, &cols);
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
static bool few_enough_tensors(const char *path, const llmc_dims *d,
                               int64_t size)
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
bool tg__llmc_read_dims(const char *path, FILE *f, int64_t size, llmc_dims *d)
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
    *d = (llmc_dims){.maxT = h[2],
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

/* The header's ints where tg__llmc_read_dims reads them. */
void tg__llmc_header_of(const llmc_dims *d, int32_t h[LLMC_HEADER_INTS])
{
    memset(h, 0, sizeof(int32_t) * LLMC_HEADER_INTS);
    const int32_t set[] = {MAGIC,         d->version,    (int32_t)d->maxT,
                           (int32_t)d->V, (int32_t)d->L, (int32_t)d->NH,
                           (int32_t)d->C, (int32_t)d->Vp};
    memcpy(h, set, sizeof set);
}
