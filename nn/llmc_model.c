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
 * Reading builds llm.c's model from the header (tanh GELU unless the
 * options say otherwise, every bias, the tied head) and streams each
 * tensor into its parameter (below); writing goes through the state dict
 * of GPT-2's names (tg_gpt_state_dict). */
#include "nn/llmc.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAGIC = 20240326, PAD = 128 };

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

/* The 16 tensors in file order: GPT-2's name (after "h.<layer>." for one
 * per layer), rows and columns in units of C (rows 0: a vector), per layer
 * or not, stored (out, in). */
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

/* The model is built first (nothing drawn: tg__gpt_build) and each tensor
 * of the file read, in its order, straight into the parameter it belongs
 * to: a float32 file's rows that land as they lie go from the file into the
 * parameter's memory; the rest (a Linear's (out, in) into our (in, out), a
 * bfloat16 file, a float64 model) pass through one buffer of a MiB (or of
 * one row, when a row is more). The load peaks at the model's bytes and
 * the buffer, where reading the file into a state dict first held both. */
enum { CHUNK_FLOATS = (1 << 20) / 4 };

/* Whether a float's bytes in memory are the file's (little-endian). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define LITTLE_ENDIAN_HOST false
#else
#define LITTLE_ENDIAN_HOST true
#endif

typedef struct reader {
    const char *path;
    FILE *f;
    const dims *d;
    float *buf; /* cap floats */
    size_t cap;
} reader;

static bool read_failed(const reader *r)
{
    return tg__file_error("gpt_load_llmc", r->path, "cannot read: %s",
                          ferror(r->f) ? strerror(errno) : "unexpected end");
}

/* The next n elements of the file (float32 or bfloat16, little-endian) as
 * floats, into out (n <= r->cap). */
static bool read_floats(const reader *r, float *out, size_t n)
{
    size_t es = r->d->version == 3 ? 4 : 2;
    unsigned char *raw = (unsigned char *)out; /* read in place, widened */
    unsigned char *at = raw + n * (4 - es);    /* from the back: see below */
    if (fread(at, es, n, r->f) != n)
        return read_failed(r);
    if (es == 4 && LITTLE_ENDIAN_HOST) /* the floats as they lie */
        return true;
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

/* The file's next n float32 elements read straight into dst's memory,
 * when dst is contiguous float32 and they land as they lie (the host
 * little-endian, as the file): 1 read, 0 failed, -1 not so. */
static int read_direct(const reader *r, tg_tensor *dst, size_t n)
{
    void *at = r->d->version == 3 && LITTLE_ENDIAN_HOST
                   ? tg__contiguous_bytes(dst, TG_FLOAT32)
                   : NULL;
    if (!at)
        return -1;
    if (!tg__write_check("gpt_load_llmc", dst))
        return 0;
    bool ok = fread(at, 4, n, r->f) == n;
    tg__write_done(dst);
    return ok ? 1 : read_failed(r);
}

/* The file's next (rows, cols) elements into dst (rows, cols) (a vector:
 * rows elements, cols 1): straight into its memory when they land as they
 * lie, else through the buffer as many whole rows at a time as it holds. */
static bool fill_rows(const reader *r, tg_tensor *dst, int64_t rows,
                      int64_t cols)
{
    int direct = read_direct(r, dst, (size_t)(rows * cols));
    if (direct >= 0)
        return direct == 1;
    int64_t per = (int64_t)r->cap / cols;
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t k = rows - r0 < per ? rows - r0 : per;
        if (!read_floats(r, r->buf, (size_t)(k * cols)))
            return false;
        tg_tensor *part = tg_narrow(dst, 0, r0, k);
        int rc = part ? tg_copy_in(part, TG_FLOAT32, r->buf) : -1;
        tg_release(part);
        if (rc < 0) {
            tg__error_wrap("gpt_load_llmc");
            return false;
        }
    }
    return true;
}

/* Rows [r0, r0 + k) of a (rows, cols) matrix, in buf (k, cols), as
 * columns [r0, r0 + k) of its transpose at dst (cols, rows), float32 or
 * (f64) float64: 8 rows of buf at a time, read along as 8 streams, each
 * row of dst getting a run of 8. (A strided copy element by element
 * through tg_copy_in took 3x the whole load's time; 32 x 32 tiles 1.7x
 * this loop's user time at GPT-2 124M, dst's rows 12 KiB apart falling in
 * the same cache sets.) */
static void put_transposed(void *dst, bool f64, int64_t rows, int64_t r0,
                           const float *buf, int64_t k, int64_t cols)
{
    enum { RUN = 8 };
    for (int64_t i0 = 0; i0 < k; i0 += RUN) {
        int64_t i1 = i0 + RUN < k ? i0 + RUN : k;
        for (int64_t c = 0; c < cols; c++)
            for (int64_t i = i0; i < i1; i++) {
                float v = buf[i * cols + c];
                if (f64)
                    ((double *)dst)[c * rows + r0 + i] = v;
                else
                    ((float *)dst)[c * rows + r0 + i] = v;
            }
    }
}

/* The file's next (rows, cols) elements into dst (cols, rows) transposed
 * (a Linear's (out, in) as our (in, out)), as many whole rows at a time as
 * the buffer holds. dst is a parameter the loader built: contiguous, of
 * the model's float dtype. */
static bool fill_transposed(const reader *r, tg_tensor *dst, int64_t rows,
                            int64_t cols)
{
    tg_dtype dt = tg_dtype_of(dst);
    void *at = tg__contiguous_bytes(dst, dt);
    if (!at || !tg__write_check("gpt_load_llmc", dst))
        return tg__file_error("gpt_load_llmc", r->path,
                              "cannot write the model's %s parameter",
                              TG_SHP(dst));
    int64_t per = (int64_t)r->cap / cols;
    bool ok = true;
    for (int64_t r0 = 0; ok && r0 < rows; r0 += per) {
        int64_t k = rows - r0 < per ? rows - r0 : per;
        ok = read_floats(r, r->buf, (size_t)(k * cols));
        if (ok)
            put_transposed(at, dt == TG_FLOAT64, rows, r0, r->buf, k, cols);
    }
    tg__write_done(dst);
    return ok;
}

/* The parameter that kind k of layer l goes to whole (NULL for c_attn's,
 * which read_qkv splits into heads). */
static tg_tensor *target(tg_gpt *g, int k, int l)
{
    tg_block *b = &g->blocks[KINDS[k].per_layer ? l : 0];
    tg_tensor *const to[N_KINDS] = {[WTE] = g->tok.weight,
                                    [WPE] = g->pos.weight,
                                    [LN1W] = b->ln1.gamma,
                                    [LN1B] = b->ln1.beta,
                                    [ATTPROJW] = b->attn.proj.weight,
                                    [ATTPROJB] = b->attn.proj.bias,
                                    [LN2W] = b->ln2.gamma,
                                    [LN2B] = b->ln2.beta,
                                    [FCW] = b->mlp.fc.weight,
                                    [FCB] = b->mlp.fc.bias,
                                    [FCPROJW] = b->mlp.proj.weight,
                                    [FCPROJB] = b->mlp.proj.bias,
                                    [LNFW] = g->ln_f.gamma,
                                    [LNFB] = g->ln_f.beta};
    return to[k];
}

/* c_attn's weight (3C, C) (bias: (3C)) of block b: its rows are q, k, v's
 * output columns [0,C), [C,2C), [2C,3C) (train_gpt2.py's split(n_embd,
 * dim=2)), head h's hs of them at [h hs, (h+1) hs) within each (its
 * view(B,T,nh,hs)), in the file one after another; a head's weight is
 * ours (C, hs), those hs rows transposed. */
static bool read_qkv(const reader *r, tg_block *b, bool weight)
{
    int64_t C = r->d->C, hs = C / r->d->NH;
    for (int j = 0; j < 3; j++)
        for (int h = 0; h < b->attn.n_heads; h++) {
            tg_head *head = &b->attn.heads[h];
            tg_tensor *w[3] = {head->w_q, head->w_k, head->w_v};
            tg_tensor *v[3] = {head->b_q, head->b_k, head->b_v};
            if (!(weight ? fill_transposed(r, w[j], hs, C)
                         : fill_rows(r, v[j], hs, 1)))
                return false;
        }
    return true;
}

/* The file's next n elements passed over (wte's padding rows), through
 * the buffer: read, not sought, so that a file cut short is still told. */
static bool skip(const reader *r, int64_t n)
{
    for (int64_t k; n > 0; n -= k) {
        k = n < (int64_t)r->cap ? n : (int64_t)r->cap;
        if (!read_floats(r, r->buf, (size_t)k))
            return false;
    }
    return true;
}

/* Kind k of layer l (or the one of a kind not per layer) into g: a
 * Linear's (out, in) as our (in, out), wte's first V rows. */
static bool read_slice(const reader *r, tg_gpt *g, int k, int l)
{
    const dims *d = r->d;
    if (k == QKVW || k == QKVB)
        return read_qkv(r, &g->blocks[l], k == QKVW);
    int64_t rows, cols;
    slice_shape(d, k, &rows, &cols);
    tg_tensor *dst = target(g, k, l);
    if (KINDS[k].linear)
        return fill_transposed(r, dst, rows, cols);
    if (tg_ndim(dst) == 1)
        return fill_rows(r, dst, cols, 1);
    if (k != WTE)
        return fill_rows(r, dst, rows, cols);
    return fill_rows(r, dst, d->V, cols) && skip(r, (d->Vp - d->V) * cols);
}

/* Every tensor of the file, in its order, into g. */
static bool read_all(const char *path, FILE *f, const dims *d, tg_gpt *g)
{
    reader r = {.path = path, .f = f, .d = d, .cap = CHUNK_FLOATS};
    if ((size_t)(4 * d->C) > r.cap) /* a row of c_proj's weight, the longest */
        r.cap = (size_t)(4 * d->C);
    r.buf = tg__malloc(sizeof(float) * r.cap);
    bool ok = r.buf != NULL;
    if (!ok)
        tg__file_error("gpt_load_llmc", path,
                       "out of memory for a buffer of %zu floats", r.cap);
    for (int k = 0; ok && k < N_KINDS; k++)
        for (int l = 0; ok && l < (KINDS[k].per_layer ? d->L : 1); l++)
            ok = read_slice(&r, g, k, l);
    free(r.buf);
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

/* llm.c's model of the header's sizes: every bias, the head tied to wte,
 * the tanh GELU unless the opts ask for erf, their dtype and attention
 * path; the vocabulary without the padding rows. */
static tg_gpt_config config_of(const dims *d, const tg_gpt_load_opts *o)
{
    return (tg_gpt_config){.vocab_size = (int)d->V,
                           .block_size = (int)d->maxT,
                           .n_embd = (int)d->C,
                           .n_head = (int)d->NH,
                           .n_layer = (int)d->L,
                           .gelu = true,
                           .dtype = o->dtype,
                           .bias = TG_GPT_BIAS_ALL,
                           .tie_weights = true,
                           .gelu_tanh = o->gelu != TG_GELU_ERF,
                           .attn_path = o->attn_path};
}

/* The model of the file's header built and every tensor read into it,
 * with no tape; g zeroed on failure. */
static bool build_and_read(tg_gpt *g, const char *path, FILE *f, const dims *d,
                           const tg_gpt_load_opts *o)
{
    bool was = tg_set_grad_enabled(false);
    bool built = tg__gpt_build(g, config_of(d, o)) == 0;
    bool ok = built && read_all(path, f, d, g);
    tg_set_grad_enabled(was);
    if (ok)
        return true;
    tg_gpt_free(g);
    if (!built) { /* gpt_init's error, named by the file */
        char what[4096 + 32];
        snprintf(what, sizeof what, "gpt_load_llmc: %s", path);
        tg__error_wrap(what);
    }
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
    if (!tg__gpt_check_load_opts("gpt_load_llmc_with", opts) ||
        !tg__check_float_dtype("gpt_load_llmc", opts->dtype))
        return -1;
    int64_t size;
    FILE *f = tg__file_open_regular("gpt_load_llmc", path, &size);
    if (!f)
        return -1;
    dims d = {0};
    bool ok = read_dims(path, f, size, &d) && check_heads(path, &d, opts) &&
              build_and_read(g, path, f, &d, opts);
    fclose(f);
    if (!ok)
        return -1;
    tg__gpt_describe(opts, &g->cfg, true, "llm.c checkpoint");
    return 0;
}

int tg_gpt_load_llmc(tg_gpt *g, const char *path, tg_dtype dt)
{
    tg_gpt_load_opts o = {.dtype = dt};
    return tg_gpt_load_llmc_with(g, path, &o);
}

/* ---- Writing ------------------------------------------------------------ */

/* v (rows, cols) as its transpose (cols, rows), in tmp. */
static void transpose(const float *v, int64_t rows, int64_t cols, float *tmp)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            tmp[c * rows + r] = v[r * cols + c];
}

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
