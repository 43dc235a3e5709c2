/* The .safetensors header, read and checked (nn/safetensors.h has the
 * format). A file being loaded may come from anyone, so before any tensor
 * is made the whole header is held to what the reference library accepts:
 * valid JSON, no tensor named twice and no entry giving "dtype", "shape" or
 * "data_offsets" twice (the reference reads an entry as a struct, other
 * keys ignored), a length within the file, every shape of at most
 * TG_MAX_DIMS dims whose size times the dtype's is exactly end - begin, and
 * spans that tile the data buffer with no gap and no overlap, each
 * beginning at a multiple of its element size. "__metadata__" is checked
 * to be JSON, given once, and otherwise ignored (its keys unchecked).
 *
 * The JSON is walked in one pass (nn/json_scan.c) keeping only what each
 * entry holds: a DOM of a million-tensor header (jansson's) took 4.7 s of
 * an 8.3 s read and 20 times the header's bytes; a streaming parser from
 * the distribution (yajl) dereferences a failed allocation. */
#include "nn/json_scan.h"
#include "nn/safetensors.h"

#include <stdlib.h>
#include <string.h>

const st_dtype_info tg__st_dtypes[ST_N_DTYPES] = {
    [ST_F32] = {"F32", 4, TG_FLOAT32}, [ST_F64] = {"F64", 8, TG_FLOAT64},
    [ST_I64] = {"I64", 8, TG_INT64},   [ST_BF16] = {"BF16", 2, TG_FLOAT32},
    [ST_F16] = {"F16", 2, TG_FLOAT32}, [ST_BOOL] = {"BOOL", 1, TG_BOOL},
    [ST_U8] = {"U8", 1, TG_INT64},     [ST_I8] = {"I8", 1, TG_INT64},
    [ST_U16] = {"U16", 2, TG_INT64},   [ST_I16] = {"I16", 2, TG_INT64},
    [ST_U32] = {"U32", 4, TG_INT64},   [ST_I32] = {"I32", 4, TG_INT64},
};
/* The format's other dtypes, named as such in the error (U64: its values
 * past 2^63 have no int64). */
static const char *const OTHER_DTYPES[] = {"U64", "F8_E4M3", "F8_E5M2"};

/* What one entry's object held, before it is checked. */
typedef struct raw_entry {
    unsigned seen;  /* the keys met: 1 << K_DTYPE... */
    bool dtype_str; /* "dtype" is a string, in dtype */
    char dtype[48]; /* its first 47 bytes (no dtype name is longer) */
    bool shape_arr; /* "shape" is an array */
    size_t nd;      /* of nd elements, the first TG_MAX_DIMS in dims */
    long bad_dim;   /* the first not an integer in [0, 2^59], or -1 */
    int64_t dims[TG_MAX_DIMS];
    bool offs_arr; /* "data_offsets" is an array */
    size_t n_offs; /* of n_offs elements, the first two in offs */
    long bad_off;  /* the first not an integer >= 0, or -1 */
    int64_t offs[2];
} raw_entry;
enum { K_OTHER, K_DTYPE, K_SHAPE, K_OFFSETS };

/* The walk's state: the names as they come, in one growing block. */
typedef struct walk {
    st_file *r;
    tg__json j;
    size_t names_len, names_cap, cap;
    size_t *name_at; /* entry i's name at r->names + name_at[i] */
    int metadata;    /* "__metadata__" keys met */
} walk;

/* "bad JSON header: <what the scanner found> at byte K". */
static bool bad_json(walk *w)
{
    return fail(w->r, "bad JSON header: %s", w->j.err);
}

/* An array of integers in [0, hi] at the reader: up to max kept in v;
 * *count all elements; *bad the first index of another value, or -1. */
static bool int_array(tg__json *j, int64_t *v, size_t max, int64_t hi,
                      size_t *count, long *bad)
{
    *count = 0;
    *bad = -1;
    bool more;
    if (!tg__json_open(j, '[', ']', &more))
        return false;
    while (more) {
        int c = tg__json_peek(j);
        bool is_int = false;
        int64_t x = 0;
        bool ok = c == '-' || (c >= '0' && c <= '9')
                      ? tg__json_number(j, &is_int, &x)
                      : tg__json_skip(j, 3);
        if (!ok)
            return false;
        if ((!is_int || x < 0 || x > hi) && *bad < 0)
            *bad = (long)*count;
        if (*count < max)
            v[*count] = x;
        ++*count;
        if (!tg__json_next(j, ']', &more))
            return false;
    }
    return true;
}

/* The value of one of the entry's keys, into e. */
static bool member_value(tg__json *j, int key, raw_entry *e)
{
    int c = tg__json_peek(j);
    if (key == K_DTYPE && c == '"') {
        if (!tg__json_string(j))
            return false;
        e->dtype_str = true;
        snprintf(e->dtype, sizeof e->dtype, "%s", j->str);
        return true;
    }
    if (key == K_SHAPE && c == '[')
        return e->shape_arr = true, int_array(j, e->dims, TG_MAX_DIMS,
                                              NUMEL_MAX, &e->nd, &e->bad_dim);
    if (key == K_OFFSETS && c == '[')
        return e->offs_arr = true,
               int_array(j, e->offs, 2, INT64_MAX, &e->n_offs, &e->bad_off);
    return tg__json_skip(j, 3); /* another key, or a value of the wrong kind */
}

/* The members of the entry object of tensor `name`, into e. */
static bool entry_members(walk *w, const char *name, raw_entry *e)
{
    tg__json *j = &w->j;
    if (tg__json_peek(j) != '{') /* a value of another kind, or no value */
        return tg__json_skip(j, 2)
                   ? fail(w->r, "tensor '%s': not a JSON object", name)
                   : bad_json(w);
    bool more;
    if (!tg__json_open(j, '{', '}', &more))
        return bad_json(w);
    while (more) {
        if (!tg__json_string(j) || !tg__json_expect(j, ':'))
            return bad_json(w);
        int key = strcmp(j->str, "dtype") == 0          ? K_DTYPE
                  : strcmp(j->str, "shape") == 0        ? K_SHAPE
                  : strcmp(j->str, "data_offsets") == 0 ? K_OFFSETS
                                                        : K_OTHER;
        if (key != K_OTHER && (e->seen >> key & 1))
            return fail(w->r,
                        "bad JSON header: duplicate object key '%s' in "
                        "tensor '%s'",
                        j->str, name);
        e->seen |= 1u << key;
        if (!member_value(j, key, e) || !tg__json_next(j, '}', &more))
            return bad_json(w);
    }
    return true;
}

/* ---- One entry, checked ----------------------------------------------- */

static bool check_dtype(const st_file *r, const char *name, const raw_entry *w,
                        st_dtype *dt)
{
    if (!w->dtype_str)
        return fail(r, "tensor '%s': \"dtype\" is missing or not a string",
                    name);
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(w->dtype, DTYPES[i].name) == 0) {
            *dt = (st_dtype)i;
            return true;
        }
    for (size_t i = 0; i < sizeof OTHER_DTYPES / sizeof *OTHER_DTYPES; i++)
        if (strcmp(w->dtype, OTHER_DTYPES[i]) == 0)
            return fail(r,
                        "tensor '%s' has dtype %s, which tapegrad does not "
                        "read (F32, F64, I64, BF16, F16, BOOL, U8, I8, U16, "
                        "I16, U32, I32)",
                        name, w->dtype);
    return fail(r, "tensor '%s' has an unknown dtype '%.40s'", name, w->dtype);
}

/* The shape: at most TG_MAX_DIMS dims, each in [0, 2^59]; *numel their
 * product, within tapegrad's 2^59 elements. */
static bool check_shape(const st_file *r, st_entry *e, const raw_entry *w,
                        uint64_t *numel)
{
    if (!w->shape_arr || w->nd > TG_MAX_DIMS)
        return fail(
            r, "tensor '%s': \"shape\" is %s (at most %d dims)", e->name,
            w->shape_arr ? "too long" : "missing or not an array", TG_MAX_DIMS);
    if (w->bad_dim >= 0)
        return fail(r,
                    "tensor '%s': \"shape\" dim %ld is not an integer in "
                    "[0, 2^59]",
                    e->name, w->bad_dim);
    e->ndim = (int)w->nd;
    *numel = 1;
    bool zero = false;
    for (int d = 0; d < e->ndim; d++) {
        uint64_t n = (uint64_t)(e->shape[d] = w->dims[d]);
        zero = zero || n == 0;
        *numel = *numel > (uint64_t)NUMEL_MAX / (n ? n : 1) ? UINT64_MAX
                                                            : *numel * n;
    }
    if (zero)
        *numel = 0;
    if (*numel > (uint64_t)NUMEL_MAX)
        return fail(r, "tensor '%s' has more than 2^59 elements", e->name);
    return true;
}

/* data_offsets [begin, end] within the data buffer, holding numel elements
 * of the dtype, aligned to them. */
static bool check_offsets(const st_file *r, st_entry *e, const raw_entry *w,
                          uint64_t numel)
{
    if (!w->offs_arr || w->n_offs != 2 || w->bad_off >= 0 ||
        w->offs[1] < w->offs[0])
        return fail(r,
                    "tensor '%s': \"data_offsets\" is not [begin, end] with "
                    "0 <= begin <= end",
                    e->name);
    e->begin = (uint64_t)w->offs[0];
    e->end = (uint64_t)w->offs[1];
    uint64_t data_len = r->size - r->data_at;
    if (e->end > data_len)
        return fail(r,
                    "tensor '%s': data_offsets [%llu, %llu] out of range: "
                    "the data buffer holds %llu bytes",
                    e->name, (unsigned long long)e->begin,
                    (unsigned long long)e->end, (unsigned long long)data_len);
    size_t es = DTYPES[e->dtype].size;
    if (e->end - e->begin != numel * es) {
        char shp[TG_SHAPE_STR];
        return fail(r,
                    "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes "
                    "but shape %s of %s needs %llu",
                    e->name, (unsigned long long)e->begin,
                    (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin),
                    tg__shape_str(e->ndim, e->shape, shp),
                    DTYPES[e->dtype].name, (unsigned long long)(numel * es));
    }
    if (e->end > e->begin &&
        e->begin % es != 0) /* an empty one fits anywhere */
        return fail(r,
                    "tensor '%s': data_offsets [%llu, %llu] are not aligned "
                    "to its %zu-byte elements",
                    e->name, (unsigned long long)e->begin,
                    (unsigned long long)e->end, es);
    return true;
}

/* ---- The whole header ------------------------------------------------- */

/* Room for one more entry and a name of len bytes. */
static bool grow(walk *w, size_t len)
{
    st_file *r = w->r;
    if (r->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        st_entry *e = tg__realloc(r->entries, cap * sizeof *e);
        if (e)
            r->entries = e;
        size_t *at = e ? tg__realloc(w->name_at, cap * sizeof *at) : NULL;
        if (!at)
            return fail(r, "out of memory for %zu tensors", cap);
        w->name_at = at;
        w->cap = cap;
    }
    if (w->names_len + len + 1 > w->names_cap) {
        size_t cap = w->names_cap ? w->names_cap : 4096;
        while (cap < w->names_len + len + 1)
            cap *= 2;
        char *s = tg__realloc(r->names, cap);
        if (!s)
            return fail(r, "out of memory for the names of %zu tensors", r->n);
        r->names = s;
        w->names_cap = cap;
    }
    return true;
}

/* The entry whose key the reader has just read, checked and added. */
static bool add_entry(walk *w)
{
    st_file *r = w->r;
    if (!grow(w, w->j.len))
        return false;
    char *name = r->names + w->names_len;
    memcpy(name, w->j.str, w->j.len + 1);
    w->name_at[r->n] = w->names_len;
    w->names_len += w->j.len + 1;
    raw_entry raw = {.bad_dim = -1, .bad_off = -1};
    st_entry *e = &r->entries[r->n];
    *e = (st_entry){.name = name};
    uint64_t numel = 0;
    if (!entry_members(w, name, &raw) ||
        !check_dtype(r, name, &raw, &e->dtype) ||
        !check_shape(r, e, &raw, &numel) || !check_offsets(r, e, &raw, numel))
        return false;
    r->n++;
    return true;
}

/* The top object: every member an entry, but "__metadata__". */
static bool walk_object(walk *w)
{
    tg__json *j = &w->j;
    bool more;
    if (tg__json_peek(j) != '{' || !tg__json_open(j, '{', '}', &more))
        return fail(w->r, "bad JSON header: not an object");
    while (more) {
        if (!tg__json_string(j) || !tg__json_expect(j, ':'))
            return bad_json(w);
        bool meta = strcmp(j->str, METADATA) == 0;
        if (meta && w->metadata++)
            return fail(w->r, "bad JSON header: duplicate object key '%s'",
                        METADATA);
        if (meta ? !tg__json_skip(j, 2) : !add_entry(w))
            return meta ? bad_json(w) : false;
        if (!tg__json_next(j, '}', &more))
            return bad_json(w);
    }
    if (tg__json_peek(j) != -1)
        return tg__json_fail(j, "text after the object"), bad_json(w);
    return true;
}

/* The spans, in offset order, tile the data buffer: each begins where the
 * one before ends, and the last ends at the end of the file. */
static int by_offset(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a;
    const st_entry *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static bool check_spans(const st_file *r)
{
    const st_entry **order = tg__calloc(r->n + 1, sizeof *order);
    if (!order)
        return fail(r, "out of memory for %zu tensors", r->n);
    for (size_t i = 0; i < r->n; i++)
        order[i] = &r->entries[i];
    qsort(order, r->n, sizeof *order, by_offset);
    uint64_t at = 0, data_len = r->size - r->data_at;
    const char *prev = NULL;
    bool ok = true;
    for (size_t i = 0; ok && i < r->n; i++) {
        const st_entry *e = order[i];
        if (e->begin < at)
            ok = fail(r,
                      "tensors '%s' and '%s' overlap: data_offsets [%llu, "
                      "%llu] begin before byte %llu",
                      prev, e->name, (unsigned long long)e->begin,
                      (unsigned long long)e->end, (unsigned long long)at);
        else if (e->begin > at)
            ok = fail(r,
                      "a gap of %llu bytes in the data buffer before tensor "
                      "'%s' (data_offsets [%llu, %llu])",
                      (unsigned long long)(e->begin - at), e->name,
                      (unsigned long long)e->begin, (unsigned long long)e->end);
        at = e->end;
        prev = e->name;
    }
    if (ok && at != data_len)
        ok = fail(r,
                  "the tensors cover %llu bytes of a %llu-byte data "
                  "buffer",
                  (unsigned long long)at, (unsigned long long)data_len);
    free(order);
    return ok;
}

/* N, checked against the file; then the header's text: r->mem's own
 * bytes, or *text read from the file (the caller frees it). */
static bool header_text(st_file *r, const unsigned char **s, size_t *n,
                        unsigned char **text)
{
    unsigned char len_bytes[LEN_BYTES];
    if (r->size < LEN_BYTES)
        return fail(r,
                    "not a .safetensors file: %llu bytes is too short for "
                    "the header length",
                    (unsigned long long)r->size);
    if (!tg__st_read_at(r, 0, LEN_BYTES, len_bytes))
        return false;
    uint64_t len = 0;
    for (int i = LEN_BYTES; i-- > 0;)
        len = len << 8 | len_bytes[i];
    if (len > r->size - LEN_BYTES)
        return fail(r,
                    "header length %llu is larger than the file (%llu "
                    "bytes after the length)",
                    (unsigned long long)len,
                    (unsigned long long)(r->size - LEN_BYTES));
    if (len > HEADER_MAX)
        return fail(r, "header length %llu is over the format's limit of %llu",
                    (unsigned long long)len, (unsigned long long)HEADER_MAX);
    r->data_at = LEN_BYTES + len;
    *n = (size_t)len;
    if (r->mem) {
        *s = r->mem + LEN_BYTES;
        return true;
    }
    *s = *text = tg__malloc(len ? (size_t)len : 1);
    if (!*text)
        return fail(r, "out of memory for the %llu-byte header",
                    (unsigned long long)len);
    return tg__st_read_at(r, LEN_BYTES, (size_t)len, *text);
}

/* The entries' names where the walk left them; indexed by name, sorted,
 * which finds a name given twice. */
static bool index_names(walk *w)
{
    st_file *r = w->r;
    for (size_t i = 0; i < r->n; i++)
        r->entries[i].name = r->names + w->name_at[i];
    if (!tg__names_init(&r->by_name, r->n))
        return fail(r, "out of memory for %zu tensors", r->n);
    for (size_t i = 0; i < r->n; i++)
        tg__names_add(&r->by_name, r->entries[i].name, i);
    const char *twice = tg__names_sort(&r->by_name);
    if (twice)
        return fail(r, "bad JSON header: duplicate object key '%s'", twice);
    return true;
}

bool tg__st_parse_header(st_file *r)
{
    walk w = {.r = r};
    unsigned char *text = NULL;
    bool ok = header_text(r, &w.j.s, &w.j.n, &text) && walk_object(&w) &&
              index_names(&w) && check_spans(r);
    free(text);
    free(w.name_at);
    tg__json_free(&w.j);
    return ok;
}
