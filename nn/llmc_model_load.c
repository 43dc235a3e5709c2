/* llm.c's GPT-2 checkpoint read into a tg_gpt (nn/llmc_model.h has the
 * format): llm.c's model built from the header (tanh GELU unless the
 * options say otherwise, every bias, the tied head), each tensor streamed
 * into its parameter.
 *
 * The model is built first (nothing drawn: tg__gpt_build) and each tensor
 * of the file read, in its order, straight into the parameter it belongs
 * to: a float32 file's rows that land as they lie go from the file into the
 * parameter's memory; the rest (a Linear's (out, in) into our (in, out), a
 * bfloat16 file, a float64 model) pass through one buffer of a MiB (or of
 * one row, when a row is more). The load peaks at the model's bytes and
 * the buffer, where reading the file into a state dict first held both. */
#include "nn/llmc_model.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    const llmc_dims *d;
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
    const llmc_dims *d = r->d;
    if (k == QKVW || k == QKVB)
        return read_qkv(r, &g->blocks[l], k == QKVW);
    int64_t rows, cols;
    tg__llmc_slice_shape(d, k, &rows, &cols);
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
static bool read_all(const char *path, FILE *f, const llmc_dims *d, tg_gpt *g)
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
static bool check_heads(const char *path, const llmc_dims *d,
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
static tg_gpt_config config_of(const llmc_dims *d, const tg_gpt_load_opts *o)
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
static bool build_and_read(tg_gpt *g, const char *path, FILE *f,
                           const llmc_dims *d, const tg_gpt_load_opts *o)
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
    llmc_dims d = {0};
    bool ok = tg__llmc_read_dims(path, f, size, &d) &&
              check_heads(path, &d, opts) &&
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
