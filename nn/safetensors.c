/* Checkpoints as .safetensors, the format of Hugging Face's safetensors
 * library (and of nanoGPT and GPT-2 exports; nn/safetensors.h has the
 * layout): the tensors of a header that nn/safetensors_header.c has read
 * and checked, and the writer. The header is written with jansson;
 * "__metadata__" is written with "format": "pt". */
#include "nn/safetensors.h"
#include "core/npy.h"
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/nn.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies little-endian bytes as they are"
#endif

/* Reads len bytes at off, which the caller has checked lie in the file. */
bool tg__st_read_at(st_file *r, uint64_t off, size_t len, void *buf)
{
    if (!r->f) {
        memcpy(buf, r->mem + off, len);
        return true;
    }
    /* The tensors are read in the file's order, mostly: a seek (a system
     * call, most of the time of a file of a million small tensors) only
     * where the stream does not stand at off already. */
    if ((r->at != off && fseeko(r->f, (off_t)off, SEEK_SET) != 0) ||
        fread(buf, 1, len, r->f) != len) {
        r->at = UINT64_MAX; /* unknown */
        return fail(r, "cannot read %zu bytes at byte %llu: %s", len,
                    (unsigned long long)off,
                    ferror(r->f) ? strerror(errno) : "unexpected end of file");
    }
    r->at = off + len;
    return true;
}

static void close_file(st_file *r)
{
    free(r->names);
    free(r->entries);
    tg__names_free(&r->by_name);
    if (r->f)
        fclose(r->f);
}

static bool open_file(st_file *r)
{
    int64_t size;
    r->f = tg__file_open_regular(r->op, r->path, &size);
    if (!r->f)
        return false;
    r->size = (uint64_t)size;
    return tg__st_parse_header(r);
}

/* ---- Tensors -------------------------------------------------------------- */

/* bfloat16 is float32's top half: sign, 8 exponent bits, 7 mantissa bits. */
static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE half: sign, 5 exponent bits (bias 15), 10 mantissa bits. Normal:
 * (-1)^s 2^(e-15) (1 + m/1024); subnormal (e = 0): (-1)^s 2^-14 m/1024;
 * e = 31: infinity (m = 0) or NaN. Every half is a float exactly. */
static float f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f,
             m = h & 0x3ff, bits;
    if (e == 0x1f)
        bits = sign | 0x7f800000u | m << 13;
    else if (e != 0)
        bits = sign | (e + 127 - 15) << 23 | m << 13;
    else {
        float f = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The element at src, of file dtype dt (a half or an integer narrower than
 * 8 bytes, little-endian), widened into dst: a float, or an int64. */
static void widen(st_dtype dt, const unsigned char *src, unsigned char *dst)
{
    if (dt == ST_BF16 || dt == ST_F16) {
        uint16_t h;
        memcpy(&h, src, 2);
        float f = dt == ST_BF16 ? bf16_to_float(h) : f16_to_float(h);
        memcpy(dst, &f, 4);
        return;
    }
    int64_t v = 0;
    switch (dt) {
    case ST_U8: v = src[0]; break;
    case ST_I8: v = (int8_t)src[0]; break;
    case ST_U16: {
        uint16_t u;
        memcpy(&u, src, 2);
        v = u;
    } break;
    case ST_I16: {
        int16_t s;
        memcpy(&s, src, 2);
        v = s;
    } break;
    case ST_U32: {
        uint32_t u;
        memcpy(&u, src, 4);
        v = u;
    } break;
    case ST_I32: {
        int32_t s;
        memcpy(&s, src, 4);
        v = s;
    } break;
    default: break; /* not called for the others */
    }
    memcpy(dst, &v, 8);
}

/* Elements [first, first + count) of entry e into buf (count times the
 * size of what e is read as): F32, F64, I64 and BOOL as they are, BF16 and
 * F16 widened to float32, the narrower integers to int64. Narrower elements
 * are read into the buffer's upper end, then widened from the front:
 * element i's wide value ends at or before element i + 1 starts ((i + 1)
 * out_es <= count (out_es - es) + (i + 1) es), and is written after
 * element i is read. */
static bool read_elements(st_file *r, const st_entry *e, size_t first,
                          size_t count, unsigned char *buf)
{
    size_t es = DTYPES[e->dtype].size;
    size_t out_es = tg_dtype_size(DTYPES[e->dtype].into);
    unsigned char *at = buf + count * (out_es - es);
    bool ok =
        tg__st_read_at(r, r->data_at + e->begin + first * es, count * es, at);
    for (size_t i = 0; ok && es < out_es && i < count; i++)
        widen(e->dtype, at + es * i, buf + out_es * i);
    return ok;
}

/* Errors unless each of the n bytes at b (elements [first, first + n) of
 * the BOOL entry e) is 0 or 1 (torch writes 0 and 1; any other is no
 * bool). */
static bool check_bools(const st_file *r, const st_entry *e, size_t first,
                        const unsigned char *b, size_t n)
{
    const int64_t bad = tg__bad_bool(b, (int64_t)n);
    if (bad < 0)
        return true;
    return fail(r, "tensor '%s': BOOL element %lld is the byte %u, not 0 or 1",
                e->name, (long long)(first + (size_t)bad), (unsigned)b[bad]);
}

/* Entry e as a new tensor, read as read_elements says, straight into the
 * tensor's memory. */
static tg_tensor *read_tensor(st_file *r, const st_entry *e)
{
    size_t numel = (size_t)(e->end - e->begin) / DTYPES[e->dtype].size;
    tg_dtype into = DTYPES[e->dtype].into;
    tg_tensor *t = tg__empty(r->op, into, e->ndim, e->shape);
    unsigned char *at = tg__contiguous_bytes(t, into);
    if (!at) {
        tg_release(t);
        fail(r, "out of memory for tensor '%s' (%zu bytes)", e->name,
             numel * tg_dtype_size(into));
        return NULL;
    }
    if (!read_elements(r, e, 0, numel, at) ||
        (e->dtype == ST_BOOL && !check_bools(r, e, 0, at, numel))) {
        tg_release(t);
        return NULL;
    }
    return t;
}

/* ---- Loading by name -------------------------------------------------- */

static const st_entry *find(const st_file *r, const char *name)
{
    int64_t i = tg__names_find(&r->by_name, name);
    if (i >= 0)
        return &r->entries[i];
    fail(r, "no tensor '%s' for parameter '%s'", name, name);
    return NULL;
}

/* The value for parameter p, checked: the same shape; a float dtype for a
 * float parameter (converted), an integer one for an int64 one (widened),
 * BOOL for a bool one. */
static tg_tensor *load_value(st_file *r, const tg_param *p)
{
    const st_entry *e = find(r, p->name);
    if (!e)
        return NULL;
    tg_dtype want = tg_dtype_of(p->t), have = DTYPES[e->dtype].into;
    bool floats = (have == TG_FLOAT32 || have == TG_FLOAT64) &&
                  (want == TG_FLOAT32 || want == TG_FLOAT64);
    char shp[TG_SHAPE_STR];
    if (e->ndim != tg_ndim(p->t) ||
        memcmp(e->shape, tg_shape(p->t), sizeof(int64_t) * (size_t)e->ndim)) {
        fail(r, "parameter '%s' has shape %s but tensor '%s' has shape %s",
             p->name, TG_SHP(p->t), e->name,
             tg__shape_str(e->ndim, e->shape, shp));
        return NULL;
    }
    if (!floats && have != want) {
        fail(r, "parameter '%s' is %s but tensor '%s' is %s", p->name,
             tg_dtype_name(want), e->name, DTYPES[e->dtype].name);
        return NULL;
    }
    return read_tensor(r, e);
}

int tg_load_safetensors(const tg_params *ps, const char *path)
{
    static const char op[] = "load_safetensors";
    if (!ps || !path) {
        tg__error("%s: %s is NULL", op, ps ? "path" : "the parameter list");
        return -1;
    }
    for (int i = 0; i < ps->n; i++)
        if (!ps->items[i].t) {
            tg__error("%s: %s: parameter '%s' is NULL", op, path,
                      ps->items[i].name);
            return -1;
        }
    st_file r = {.op = op, .path = path};
    tg_tensor **values = tg__calloc((size_t)ps->n + 1, sizeof *values);
    bool ok = values != NULL;
    if (!ok)
        tg__error("%s: %s: out of memory", op, path);
    ok = ok && open_file(&r);
    for (int i = 0; ok && i < ps->n; i++)
        ok = (values[i] = load_value(&r, &ps->items[i])) != NULL;
    for (int i = 0; ok && i < ps->n; i++) /* all free to write, first */
        ok = tg__write_check(op, ps->items[i].t);
    for (int i = 0; ok && i < ps->n; i++) {
        tg__copy_into(ps->items[i].t, values[i]);
        tg__write_done(ps->items[i].t);
    }
    for (int i = 0; values && i < ps->n; i++)
        tg_release(values[i]);
    free(values);
    close_file(&r);
    return ok ? 0 : -1;
}

/* ---- Reading every tensor -------------------------------------------- */

/* Makes entry e's tensor of a tg_params: read_tensor, or placeholder. */
typedef tg_tensor *make_fn(st_file *r, const st_entry *e);

static int read_all(st_file *r, tg_params *out, make_fn *make)
{
    tg_tensor **ts = tg__calloc(r->n + 1, sizeof *ts);
    char(*names)[TG_PARAM_NAME_MAX] = tg__calloc(r->n + 1, sizeof *names);
    bool ok = ts && names;
    if (!ok)
        fail(r, "out of memory for %zu tensors", r->n);
    for (size_t i = 0; ok && i < r->n; i++) {
        const char *name = r->entries[i].name;
        if (strlen(name) >= TG_PARAM_NAME_MAX)
            ok = fail(r,
                      "tensor '%.60s...': the name is longer than %d "
                      "characters",
                      name, TG_PARAM_NAME_MAX - 1);
        else {
            strcpy(names[i], name);
            ok = (ts[i] = make(r, &r->entries[i])) != NULL;
        }
    }
    int rc = ok ? tg__params_adopt(r->op, r->path, out, r->n, names, ts) : -1;
    for (size_t i = 0; !ok && ts && i < r->n; i++)
        tg_release(ts[i]);
    free(ts);
    free(names);
    return rc;
}

int tg_read_safetensors(const char *path, tg_params *out)
{
    if (!path || !out) {
        tg__error("read_safetensors: %s is NULL",
                  out ? "path" : "the parameter list");
        return -1;
    }
    st_file r = {.op = "read_safetensors", .path = path};
    int rc = open_file(&r) ? read_all(&r, out, read_tensor) : -1;
    close_file(&r);
    return rc;
}

int tg__safetensors_read_mem(const char *name, const void *bytes, size_t len,
                             tg_params *out)
{
    st_file r = {
        .op = "read_safetensors", .path = name, .mem = bytes, .size = len};
    int rc = tg__st_parse_header(&r) ? read_all(&r, out, read_tensor) : -1;
    close_file(&r);
    return rc;
}

/* ---- Streaming a load ------------------------------------------------
 * A model's loader (nn/gpt_load.c) needs every name, shape and dtype at
 * once, to check the whole file before it builds anything, but each value
 * only once, to copy it into a parameter. Reading every tensor first (as
 * tg_read_safetensors does) holds the file's values and the model's at
 * once: twice the model. So the stream's list holds placeholders (each
 * tensor's shape and dtype, broadcast from one element: no memory), and a
 * value goes from the file into its parameter STREAM_CHUNK bytes at a
 * time, read with the same checks (BOOL bytes too, at the open, so that a
 * load refuses what tg_read_safetensors refuses, before the model exists).
 *
 * Read through stdio into a small buffer rather than mapped: what a
 * mapping touches counts in the process's resident set until it is
 * dropped, and a file shortened by another process while mapped kills the
 * reader with SIGBUS, where a short read is an error like any other. The
 * copy out of the page cache costs about what the mapping's page faults
 * would. The values are copied, never borrowed, so a file changed later
 * changes nothing loaded. */
#define STREAM_CHUNK ((size_t)1 << 20)

struct tg__st_stream {
    st_file r;
    int base; /* the list's index of entry 0 */
    /* tg__st_tensor's last two entries read whole (a c_attn's weight and
     * bias, asked for in turn, head by head): cached[k] is the list's index
     * of cache[k], or -1; slot 0 the more recent */
    int cached[2];
    tg_tensor *cache[2];
    unsigned char *buf, *buf2; /* STREAM_CHUNK bytes each, or a row */
    size_t buf_bytes;
};

/* Errors unless every byte of the BOOL entry e is 0 or 1, read a chunk at
 * a time into buf (STREAM_CHUNK bytes). */
static bool check_bool_entry(st_file *r, const st_entry *e, unsigned char *buf)
{
    size_t n = (size_t)(e->end - e->begin);
    for (size_t at = 0; at < n; at += STREAM_CHUNK) {
        size_t k = n - at < STREAM_CHUNK ? n - at : STREAM_CHUNK;
        if (!read_elements(r, e, at, k, buf) || !check_bools(r, e, at, buf, k))
            return false;
    }
    return true;
}

/* Entry e's shape and dtype, without its values: one element broadcast
 * (an empty shape needs none). A BOOL entry's bytes are checked. */
static tg_tensor *placeholder(st_file *r, const st_entry *e)
{
    tg_dtype dt = DTYPES[e->dtype].into;
    if (e->dtype == ST_BOOL && !check_bool_entry(r, e, r->chunk))
        return NULL;
    tg_tensor *t;
    if (e->end == e->begin)
        t = tg_zeros(dt, e->ndim, e->shape);
    else {
        tg_tensor *one = tg_zeros(dt, 0, NULL);
        t = one ? tg_expand(one, e->ndim, e->shape) : NULL;
        tg_release(one);
    }
    if (!t)
        tg__error_wrap(r->op);
    return t;
}

void tg__st_close(tg__st_stream *st)
{
    if (!st)
        return;
    tg_release(st->cache[0]);
    tg_release(st->cache[1]);
    close_file(&st->r);
    free(st->buf);
    free(st->buf2);
    free(st);
}

tg__st_stream *tg__st_open(const char *path, tg_params *out)
{
    tg__st_stream *st = tg__calloc(1, sizeof *st);
    unsigned char *b1 = st ? tg__malloc(STREAM_CHUNK) : NULL;
    unsigned char *b2 = b1 ? tg__malloc(STREAM_CHUNK) : NULL;
    if (!b2) {
        tg__error("read_safetensors: %s: out of memory", path);
        free(b1);
        free(st);
        return NULL;
    }
    *st = (tg__st_stream){
        .r = {.op = "read_safetensors", .path = path, .chunk = b1},
        .base = out->n,
        .cached = {-1, -1},
        .buf = b1,
        .buf2 = b2,
        .buf_bytes = STREAM_CHUNK};
    if (!open_file(&st->r) || read_all(&st->r, out, placeholder) < 0) {
        tg__st_close(st);
        return NULL;
    }
    return st;
}

/* Entry i of the list (its index there), or NULL with an error. */
static const st_entry *stream_entry(const tg__st_stream *st, int i)
{
    if (i < st->base || (size_t)(i - st->base) >= st->r.n) {
        tg__error("read_safetensors: %s: no tensor %d", st->r.path, i);
        return NULL;
    }
    return &st->r.entries[i - st->base];
}

tg_tensor *tg__st_tensor(tg__st_stream *st, int i)
{
    if (st->cached[1] == i) { /* to the front */
        st->cached[1] = st->cached[0];
        st->cached[0] = i;
        tg_tensor *t = st->cache[1];
        st->cache[1] = st->cache[0];
        st->cache[0] = t;
    }
    if (st->cached[0] == i)
        return st->cache[0];
    tg_release(st->cache[1]); /* the older one goes, before the new comes */
    st->cache[1] = NULL;
    st->cached[1] = -1;
    const st_entry *e = stream_entry(st, i);
    tg_tensor *t = e ? read_tensor(&st->r, e) : NULL;
    if (!t)
        return NULL;
    st->cache[1] = st->cache[0];
    st->cached[1] = st->cached[0];
    st->cache[0] = t;
    st->cached[0] = i;
    return t;
}

/* Rows are entry e's elements along dim 0 (one row for a 0-dim entry):
 * *row_elems of them in each, *rows of them, and how many rows fit the
 * buffers, growing them when one row is more than they hold. */
static bool stream_rows(tg__st_stream *st, const st_entry *e, size_t *rows,
                        size_t *row_elems, size_t *per_chunk)
{
    size_t numel = (size_t)(e->end - e->begin) / DTYPES[e->dtype].size;
    *rows = e->ndim ? (size_t)e->shape[0] : 1;
    *row_elems = *rows ? numel / *rows : 0;
    size_t row_bytes = *row_elems * tg_dtype_size(DTYPES[e->dtype].into);
    if (row_bytes > st->buf_bytes) {
        unsigned char *b1 = tg__malloc(row_bytes);
        unsigned char *b2 = b1 ? tg__malloc(row_bytes) : NULL;
        if (!b2) {
            free(b1);
            return fail(&st->r,
                        "out of memory for a row of tensor '%s' "
                        "(%zu bytes)",
                        e->name, row_bytes);
        }
        free(st->buf);
        free(st->buf2);
        st->buf = b1;
        st->buf2 = b2;
        st->r.chunk = b1; /* the header's reader shares buf */
        st->buf_bytes = row_bytes;
    }
    *per_chunk = row_bytes ? st->buf_bytes / row_bytes : *rows;
    return true;
}

/* dst's part that rows [r0, r0 + k) of the file's tensor go to: the same
 * rows of dst, or with transpose (dst (K,R) of the file's (R,K)) its
 * columns, transposed. A new view; NULL on no memory. */
static tg_tensor *rows_of(tg_tensor *dst, int ndim, bool transpose, size_t r0,
                          size_t k)
{
    if (ndim == 0)
        return tg_retain(dst);
    if (!transpose)
        return tg_narrow(dst, 0, (int64_t)r0, (int64_t)k);
    tg_tensor *cols = tg_narrow(dst, 1, (int64_t)r0, (int64_t)k);
    tg_tensor *t = cols ? tg_transpose(cols, 0, 1) : NULL;
    tg_release(cols);
    return t;
}

/* Entry e's bytes read straight into dst (of e's dtype, contiguous, not
 * transposed): no buffer and no copy. -1 when it does not apply. */
static int read_into(tg__st_stream *st, const st_entry *e, tg_tensor *dst,
                     bool transpose)
{
    tg_dtype as = DTYPES[e->dtype].into;
    size_t es = DTYPES[e->dtype].size;
    unsigned char *at = tg__contiguous_bytes(dst, as);
    if (transpose || es != tg_dtype_size(as) || !at)
        return -1;
    if (!tg__write_check(st->r.op, dst))
        return 0;
    bool ok = tg__st_read_at(&st->r, st->r.data_at + e->begin,
                             (size_t)(e->end - e->begin), at);
    tg__write_done(dst);
    return ok;
}

int tg__st_copy(tg__st_stream *st, int i, tg_tensor *dst, bool transpose)
{
    const st_entry *e = stream_entry(st, i);
    if (!e)
        return -1;
    int direct = read_into(st, e, dst, transpose);
    if (direct >= 0)
        return direct ? 0 : -1;
    size_t rows, row_elems, per;
    if (!stream_rows(st, e, &rows, &row_elems, &per))
        return -1;
    tg_dtype as = DTYPES[e->dtype].into;
    for (size_t r0 = 0; r0 < rows; r0 += per) {
        size_t k = rows - r0 < per ? rows - r0 : per;
        if (!read_elements(&st->r, e, r0 * row_elems, k * row_elems, st->buf))
            return -1;
        tg_tensor *part = rows_of(dst, e->ndim, transpose, r0, k);
        int rc = part ? tg_copy_in(part, as, st->buf) : -1;
        tg_release(part);
        if (rc < 0)
            return tg__error_wrap(st->r.op);
    }
    return 0;
}

/* Rows [r0, r0 + k) of entry e, read into buf, as a new (k, row_elems)
 * tensor. */
static tg_tensor *rows_tensor(st_file *r, const st_entry *e, size_t r0,
                              size_t k, size_t row_elems, unsigned char *buf)
{
    if (!read_elements(r, e, r0 * row_elems, k * row_elems, buf))
        return NULL;
    tg_tensor *t = tg_from_data(DTYPES[e->dtype].into,
                                TG_SHAPE((int64_t)k, (int64_t)row_elems), buf);
    if (!t)
        tg__error_wrap(r->op);
    return t;
}

int tg__st_equal(tg__st_stream *st, int a, int b, bool *equal)
{
    const st_entry *ea = stream_entry(st, a), *eb = stream_entry(st, b);
    size_t rows, row_elems, per, rows_b, elems_b, per_b;
    if (!ea || !eb || !stream_rows(st, ea, &rows, &row_elems, &per) ||
        !stream_rows(st, eb, &rows_b, &elems_b, &per_b))
        return -1;
    if (per_b < per)
        per = per_b;
    *equal = rows == rows_b && row_elems == elems_b;
    for (size_t r0 = 0; *equal && r0 < rows; r0 += per) {
        size_t k = rows - r0 < per ? rows - r0 : per;
        tg_tensor *x = rows_tensor(&st->r, ea, r0, k, row_elems, st->buf);
        tg_tensor *y =
            x ? rows_tensor(&st->r, eb, r0, k, row_elems, st->buf2) : NULL;
        *equal = y && tg_allclose(x, y, 0, 0);
        tg_release(x);
        tg_release(y);
        if (!y)
            return -1;
    }
    return 0;
}

/* ---- Saving ------------------------------------------------------------- */

/* The parameters in the data buffer's order: 8-byte dtypes, then 4-byte,
 * then 1-byte (bool), each in the list's order, so every offset is a
 * multiple of its element size, as the reference library lays them out. */
static void data_order(const tg_params *ps, int *order)
{
    static const size_t sizes[] = {8, 4, 1};
    int k = 0;
    for (size_t pass = 0; pass < sizeof sizes / sizeof *sizes; pass++)
        for (int i = 0; i < ps->n; i++)
            if (tg_dtype_size(tg_dtype_of(ps->items[i].t)) == sizes[pass])
                order[k++] = i;
}

static const char *save_dtype(tg_dtype dt)
{
    return dt == TG_FLOAT32   ? "F32"
           : dt == TG_FLOAT64 ? "F64"
           : dt == TG_INT64   ? "I64"
           : dt == TG_BOOL    ? "BOOL"
                              : NULL;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}, or NULL. */
static json_t *entry_json(const tg_tensor *t, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (int d = 0; shape && d < tg_ndim(t); d++)
        if (json_array_append_new(shape, json_integer(tg_shape(t)[d])) != 0) {
            json_decref(shape);
            shape = NULL;
        }
    if (!shape)
        return NULL;
    return json_pack("{s:s, s:o, s:[I,I]}", "dtype", save_dtype(tg_dtype_of(t)),
                     "shape", shape, "data_offsets", (json_int_t)begin,
                     (json_int_t)end);
}

/* The header's JSON, padded with spaces so that 8 + its length is a
 * multiple of 8 (the data then starts aligned): a new string of *len bytes,
 * or NULL. Entries in the list's order, as torch's save_file keeps its
 * dict's; their data in the order of `order`. */
static char *header_text(const tg_params *ps, const int *order, size_t *len)
{
    uint64_t *begin = tg__calloc((size_t)ps->n + 1, sizeof *begin);
    json_t *root =
        begin ? json_pack("{s:{s:s}}", METADATA, "format", "pt") : NULL;
    uint64_t at = 0;
    for (int k = 0; root && k < ps->n; k++) {
        const tg_tensor *t = ps->items[order[k]].t;
        begin[order[k]] = at;
        at += (uint64_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    }
    for (int i = 0; root && i < ps->n; i++) {
        const tg_param *p = &ps->items[i];
        uint64_t nbytes =
            (uint64_t)tg_numel(p->t) * tg_dtype_size(tg_dtype_of(p->t));
        json_t *e = entry_json(p->t, begin[i], begin[i] + nbytes);
        if (!e || json_object_set_new(root, p->name, e) != 0) {
            json_decref(root);
            root = NULL;
        }
    }
    free(begin);
    char *text =
        root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return NULL;
    size_t n = strlen(text), padded = n + (8 - (LEN_BYTES + n) % 8) % 8;
    char *out = tg__malloc(padded + 1);
    if (out) {
        memcpy(out, text, n);
        memset(out + n, ' ', padded - n);
        out[padded] = '\0';
        *len = padded;
    }
    free(text);
    return out;
}

/* No name twice in ps: the header's keys must differ. */
static bool names_once(const char *op, const char *path, const tg_params *ps)
{
    tg__names ix;
    if (!tg__names_init(&ix, (size_t)ps->n)) {
        tg__error("%s: %s: out of memory for %d names", op, path, ps->n);
        return false;
    }
    for (int i = 0; i < ps->n; i++)
        tg__names_add(&ix, ps->items[i].name, (size_t)i);
    const char *twice = tg__names_sort(&ix);
    if (twice)
        tg__error("%s: %s: two parameters are named '%s'", op, path, twice);
    tg__names_free(&ix);
    return !twice;
}

static bool check_save_args(const tg_params *ps, const char *path)
{
    static const char op[] = "save_safetensors";
    if (!ps || !path) {
        tg__error("%s: %s is NULL", op, ps ? "path" : "the parameter list");
        return false;
    }
    for (int i = 0; i < ps->n; i++) {
        const tg_param *p = &ps->items[i];
        if (!p->t) {
            tg__error("%s: %s: parameter '%s' is NULL", op, path, p->name);
            return false;
        }
        if (!save_dtype(tg_dtype_of(p->t))) {
            tg__error("%s: %s: parameter '%s' is %s; safetensors are "
                      "written from float32, float64, int64 and bool",
                      op, path, p->name, tg_dtype_name(tg_dtype_of(p->t)));
            return false;
        }
        json_t *key = json_string(p->name); /* NULL: not valid UTF-8 */
        json_decref(key);
        if (!key) {
            tg__error("%s: %s: parameter name '%s' is not valid UTF-8, "
                      "which the JSON header needs",
                      op, path, p->name);
            return false;
        }
        if (strcmp(p->name, METADATA) == 0) {
            tg__error("%s: %s: a parameter may not be named '" METADATA "'", op,
                      path);
            return false;
        }
    }
    return names_once(op, path, ps);
}

/* Writes each tensor's bytes in the data buffer's order. */
static bool write_data(tg__file *out, const char *path, const tg_params *ps,
                       const int *order)
{
    for (int k = 0; k < ps->n; k++) {
        const tg_tensor *t = ps->items[order[k]].t;
        size_t nbytes = (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
        unsigned char *buf = tg__malloc(nbytes ? nbytes : 1);
        if (!buf) {
            tg__error("save_safetensors: %s: out of memory for '%s' %s", path,
                      ps->items[order[k]].name, TG_SHP(t));
            return false;
        }
        bool ok = tg__npy_elements("save_safetensors", t, buf) == 0 &&
                  tg__file_write(out, buf, nbytes);
        free(buf);
        if (!ok)
            return false;
    }
    return true;
}

int tg_save_safetensors(const tg_params *ps, const char *path)
{
    if (!check_save_args(ps, path))
        return -1;
    int *order = tg__calloc((size_t)ps->n + 1, sizeof *order);
    size_t hlen = 0;
    char *header = NULL;
    if (order) {
        data_order(ps, order);
        header = header_text(ps, order, &hlen);
    }
    if (!header) {
        tg__error("save_safetensors: %s: out of memory for the header", path);
        free(order);
        return -1;
    }
    unsigned char len_bytes[LEN_BYTES];
    for (int i = 0; i < LEN_BYTES; i++)
        len_bytes[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    tg__file *out = tg__file_begin("save_safetensors", path);
    bool ok = out && tg__file_write(out, len_bytes, LEN_BYTES) &&
              tg__file_write(out, header, hlen) &&
              write_data(out, path, ps, order);
    free(header);
    free(order);
    return tg__file_end(out, ok);
}
