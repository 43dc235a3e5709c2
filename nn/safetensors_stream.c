/* A .safetensors file streamed into a model's parameters, tensor by tensor
 * (nn/formats.h declares the stream; nn/safetensors.c reads the elements).
 *
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
#include "nn/safetensors.h"
#include "core/shared.h"
#include "nn/formats.h"

#include <stdlib.h>

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
        if (!tg__st_read_elements(r, e, at, k, buf) ||
            !tg__st_check_bools(r, e, at, buf, k))
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
    tg__st_close_file(&st->r);
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
    if (!tg__st_open_file(&st->r) ||
        tg__st_read_all(&st->r, out, placeholder) < 0) {
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
    tg_tensor *t = e ? tg__st_read_tensor(&st->r, e) : NULL;
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
        if (!tg__st_read_elements(&st->r, e, r0 * row_elems, k * row_elems,
                                  st->buf))
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
    if (!tg__st_read_elements(r, e, r0 * row_elems, k * row_elems, buf))
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
