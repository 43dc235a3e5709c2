/* Checkpoints as .safetensors, the format of Hugging Face's safetensors
 * library (and of nanoGPT and GPT-2 exports):
 *
 *   8 bytes   N, the header's length, unsigned little-endian
 *   N bytes   a JSON object, UTF-8, padded with spaces:
 *             {"__metadata__": {"format": "pt"},
 *              "<name>": {"dtype": "F32", "shape": [2, 3],
 *                         "data_offsets": [begin, end]}, ...}
 *   the rest  the data buffer: each tensor's elements, little-endian, C
 *             order, at [begin, end) of the buffer
 *
 * The header is parsed and written with jansson. A file being loaded may
 * come from anyone, so before any tensor is made the whole header is held to
 * what the reference library accepts: JSON without duplicate keys, a length
 * within the file, every shape of at most TG_MAX_DIMS dims whose size times
 * the dtype's is exactly end - begin, and spans that tile the data buffer
 * with no gap and no overlap, each beginning at a multiple of its element
 * size. "__metadata__" is ignored on read and written with "format": "pt". */
#include "core/npy.h"
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/names.h"
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

#define LEN_BYTES  8
#define HEADER_MAX UINT64_C(100000000) /* the reference library's limit */
#define METADATA   "__metadata__"
#define NUMEL_MAX  (INT64_C(1) << 59) /* tapegrad's bound on a tensor */

/* The dtypes of the format that we read, and how each becomes ours: the
 * halves widened to float32 and the narrower integers to int64, exactly, as
 * numpy's astype would (tapegrad has no other types; older GPT-2 exports
 * keep their causal-mask buffers as U8 or BOOL). */
typedef enum {
    ST_F32,
    ST_F64,
    ST_I64,
    ST_BF16,
    ST_F16,
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_U16,
    ST_I16,
    ST_U32,
    ST_I32
} st_dtype;
static const struct {
    const char *name;
    size_t size;   /* bytes per element in the file */
    tg_dtype into; /* what it is read as */
} DTYPES[] = {
    [ST_F32] = {"F32", 4, TG_FLOAT32}, [ST_F64] = {"F64", 8, TG_FLOAT64},
    [ST_I64] = {"I64", 8, TG_INT64},   [ST_BF16] = {"BF16", 2, TG_FLOAT32},
    [ST_F16] = {"F16", 2, TG_FLOAT32}, [ST_BOOL] = {"BOOL", 1, TG_BOOL},
    [ST_U8] = {"U8", 1, TG_INT64},     [ST_I8] = {"I8", 1, TG_INT64},
    [ST_U16] = {"U16", 2, TG_INT64},   [ST_I16] = {"I16", 2, TG_INT64},
    [ST_U32] = {"U32", 4, TG_INT64},   [ST_I32] = {"I32", 4, TG_INT64},
};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))
/* The format's other dtypes, named as such in the error (U64: its values
 * past 2^63 have no int64). */
static const char *const OTHER_DTYPES[] = {"U64", "F8_E4M3", "F8_E5M2"};

/* One tensor of the header, checked. */
typedef struct st_entry {
    const char *name; /* the header's key, in st_file.names */
    st_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    uint64_t begin, end; /* into the data buffer */
} st_entry;

typedef struct st_file {
    const char *op, *path; /* for messages */
    FILE *f;               /* the file, or NULL for bytes in memory */
    const unsigned char *mem;
    uint64_t size;    /* bytes in all */
    uint64_t data_at; /* where the data buffer starts: 8 + N */
    uint64_t at;  /* where the stream stands: read_at seeks only elsewhere */
    json_t *root; /* the header, until its entries are taken out */
    char *names;  /* every entry's name, NUL after each */
    st_entry *entries;
    size_t n;
    tg__names by_name; /* the entries by name, for a load (find) */
} st_file;

/* Sets the error "<op>: <path>: <problem>" and returns false. */
#define fail(r, ...) tg__file_error((r)->op, (r)->path, __VA_ARGS__)

/* Reads len bytes at off, which the caller has checked lie in the file. */
static bool read_at(st_file *r, uint64_t off, size_t len, void *buf)
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

/* ---- The header --------------------------------------------------------- */

/* Reads N and the JSON object it measures into r->root. */
static bool read_header(st_file *r)
{
    unsigned char len_bytes[LEN_BYTES];
    if (r->size < LEN_BYTES)
        return fail(r,
                    "not a .safetensors file: %llu bytes is too short for "
                    "the header length",
                    (unsigned long long)r->size);
    if (!read_at(r, 0, LEN_BYTES, len_bytes))
        return false;
    uint64_t n = 0;
    for (int i = LEN_BYTES; i-- > 0;)
        n = n << 8 | len_bytes[i];
    if (n > r->size - LEN_BYTES)
        return fail(r,
                    "header length %llu is larger than the file (%llu "
                    "bytes after the length)",
                    (unsigned long long)n,
                    (unsigned long long)(r->size - LEN_BYTES));
    if (n > HEADER_MAX)
        return fail(r, "header length %llu is over the format's limit of %llu",
                    (unsigned long long)n, (unsigned long long)HEADER_MAX);
    r->data_at = LEN_BYTES + n;
    char *text = tg__malloc(n ? (size_t)n : 1);
    if (!text)
        return fail(r, "out of memory for the %llu-byte header",
                    (unsigned long long)n);
    bool ok = read_at(r, LEN_BYTES, (size_t)n, text);
    json_error_t je;
    r->root =
        ok ? json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &je) : NULL;
    free(text);
    if (ok && !r->root)
        return fail(r, "bad JSON header: %s (line %d, column %d)", je.text,
                    je.line, je.column);
    if (ok && !json_is_object(r->root))
        return fail(r, "bad JSON header: not an object");
    return ok;
}

/* A non-negative integer of the header, or false. */
static bool get_count(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static bool parse_dtype(const st_file *r, const char *name, const json_t *v,
                        st_dtype *dt)
{
    const char *s = json_string_value(v);
    if (!s)
        return fail(r, "tensor '%s': \"dtype\" is missing or not a string",
                    name);
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, DTYPES[i].name) == 0) {
            *dt = (st_dtype)i;
            return true;
        }
    for (size_t i = 0; i < sizeof OTHER_DTYPES / sizeof *OTHER_DTYPES; i++)
        if (strcmp(s, OTHER_DTYPES[i]) == 0)
            return fail(r,
                        "tensor '%s' has dtype %s, which tapegrad does not "
                        "read (F32, F64, I64, BF16, F16, BOOL, U8, I8, U16, "
                        "I16, U32, I32)",
                        name, s);
    return fail(r, "tensor '%s' has an unknown dtype '%.40s'", name, s);
}

/* The shape: at most TG_MAX_DIMS dims, each >= 0; *numel their product,
 * within tapegrad's 2^59 elements. */
static bool parse_shape(const st_file *r, st_entry *e, const json_t *v,
                        uint64_t *numel)
{
    size_t nd = json_array_size(v);
    if (!json_is_array(v) || nd > TG_MAX_DIMS)
        return fail(r, "tensor '%s': \"shape\" is %s (at most %d dims)",
                    e->name,
                    json_is_array(v) ? "too long" : "missing or not an array",
                    TG_MAX_DIMS);
    e->ndim = (int)nd;
    *numel = 1;
    bool zero = false;
    for (size_t d = 0; d < nd; d++) {
        uint64_t n;
        if (!get_count(json_array_get(v, d), &n) || n > (uint64_t)NUMEL_MAX)
            return fail(r,
                        "tensor '%s': \"shape\" dim %zu is not an integer in "
                        "[0, 2^59]",
                        e->name, d);
        e->shape[d] = (int64_t)n;
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

/* One tensor's entry: dtype, shape and offsets, consistent with each other
 * and within the data buffer. */
static bool parse_entry(const st_file *r, const char *name, const json_t *v,
                        st_entry *e)
{
    *e = (st_entry){.name = name};
    if (!json_is_object(v))
        return fail(r, "tensor '%s': not a JSON object", name);
    uint64_t numel = 0;
    if (!parse_dtype(r, name, json_object_get(v, "dtype"), &e->dtype) ||
        !parse_shape(r, e, json_object_get(v, "shape"), &numel))
        return false;
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !get_count(json_array_get(offs, 0), &e->begin) ||
        !get_count(json_array_get(offs, 1), &e->end) || e->end < e->begin)
        return fail(r,
                    "tensor '%s': \"data_offsets\" is not [begin, end] with "
                    "0 <= begin <= end",
                    name);
    uint64_t data_len = r->size - r->data_at;
    if (e->end > data_len)
        return fail(r,
                    "tensor '%s': data_offsets [%llu, %llu] out of range: "
                    "the data buffer holds %llu bytes",
                    name, (unsigned long long)e->begin,
                    (unsigned long long)e->end, (unsigned long long)data_len);
    size_t es = DTYPES[e->dtype].size;
    if (e->end - e->begin != numel * es) {
        char shp[TG_SHAPE_STR];
        return fail(r,
                    "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes "
                    "but shape %s of %s needs %llu",
                    name, (unsigned long long)e->begin,
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
                    name, (unsigned long long)e->begin,
                    (unsigned long long)e->end, es);
    return true;
}

static int by_offset(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a;
    const st_entry *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The spans, in offset order, tile the data buffer: each begins where the
 * one before ends, and the last ends at the end of the file. */
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

/* The entries' names copied out of the JSON into r->names, so that the
 * JSON can go before any tensor is made: its objects take some 20 times
 * the header's bytes (a million-tensor file's: 1 GiB), and would else
 * stay while the tensors are read. */
static bool take_names(st_file *r)
{
    size_t bytes = 1;
    for (size_t i = 0; i < r->n; i++)
        bytes += strlen(r->entries[i].name) + 1;
    char *at = r->names = tg__malloc(bytes);
    if (!at)
        return fail(r, "out of memory for %zu names", r->n);
    for (size_t i = 0; i < r->n; i++) {
        size_t len = strlen(r->entries[i].name) + 1;
        memcpy(at, r->entries[i].name, len);
        r->entries[i].name = at;
        at += len;
    }
    json_decref(r->root);
    r->root = NULL;
    return true;
}

/* Reads and checks the header into r->entries (every tensor but
 * "__metadata__", in the header's order), then lets the JSON go. */
static bool parse_header(st_file *r)
{
    if (!read_header(r))
        return false;
    size_t n = json_object_size(r->root);
    r->entries = tg__calloc(n + 1, sizeof *r->entries);
    if (!r->entries)
        return fail(r, "out of memory for %zu tensors", n);
    const char *name;
    json_t *v;
    json_object_foreach(r->root, name, v)
    {
        if (strcmp(name, METADATA) == 0)
            continue;
        if (!parse_entry(r, name, v, &r->entries[r->n]))
            return false;
        r->n++;
    }
    return check_spans(r) && take_names(r);
}

static void close_file(st_file *r)
{
    json_decref(r->root);
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
    return parse_header(r);
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

/* Entry e as a new tensor: F32, F64, I64 and BOOL as they are, BF16 and F16
 * widened to float32, the narrower integers to int64. A BOOL byte other
 * than 0 or 1 is an error (torch writes 0 and 1; any other is no bool). */
static tg_tensor *read_tensor(st_file *r, const st_entry *e)
{
    size_t nbytes = (size_t)(e->end - e->begin);
    size_t es = DTYPES[e->dtype].size, numel = nbytes / es;
    size_t out_es = tg_dtype_size(DTYPES[e->dtype].into);
    size_t out_bytes = numel * out_es; /* no overflow: numel < 2^59 */
    unsigned char *buf = tg__malloc(out_bytes ? out_bytes : 1);
    if (!buf) {
        fail(r, "out of memory for tensor '%s' (%zu bytes)", e->name,
             out_bytes);
        return NULL;
    }
    tg_tensor *t = NULL;
    /* Narrower elements are read into the buffer's upper end, then widened
     * from the front: element i's wide value ends at or before element
     * i + 1 starts ((i + 1) out_es <= numel (out_es - es) + (i + 1) es),
     * and is written after element i is read. */
    unsigned char *at = buf + out_bytes - nbytes;
    bool ok = read_at(r, r->data_at + e->begin, nbytes, at);
    for (size_t i = 0; ok && es < out_es && i < numel; i++)
        widen(e->dtype, at + es * i, buf + out_es * i);
    const int64_t bad =
        ok && e->dtype == ST_BOOL ? tg__bad_bool(buf, (int64_t)numel) : -1;
    if (bad >= 0)
        ok =
            fail(r, "tensor '%s': BOOL element %lld is the byte %u, not 0 or 1",
                 e->name, (long long)bad, (unsigned)buf[bad]);
    if (ok) {
        t = tg_from_data(DTYPES[e->dtype].into, e->ndim, e->shape, buf);
        if (!t)
            tg__error_wrap(r->op);
    }
    free(buf);
    return t;
}

/* ---- Loading by name -------------------------------------------------- */

/* Indexes the entries by name, for find (a scan per parameter would make
 * a load of n tensors n^2 / 2 comparisons). */
static bool index_entries(st_file *r)
{
    if (!tg__names_init(&r->by_name, r->n))
        return fail(r, "out of memory for %zu tensors", r->n);
    for (size_t i = 0; i < r->n; i++)
        tg__names_add(&r->by_name, r->entries[i].name, i);
    tg__names_sort(&r->by_name); /* none twice: JSON_REJECT_DUPLICATES */
    return true;
}

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
    ok = ok && open_file(&r) && index_entries(&r);
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

static int read_all(st_file *r, tg_params *out)
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
            ok = (ts[i] = read_tensor(r, &r->entries[i])) != NULL;
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
    int rc = open_file(&r) ? read_all(&r, out) : -1;
    close_file(&r);
    return rc;
}

int tg__safetensors_read_mem(const char *name, const void *bytes, size_t len,
                             tg_params *out)
{
    st_file r = {
        .op = "read_safetensors", .path = name, .mem = bytes, .size = len};
    int rc = parse_header(&r) ? read_all(&r, out) : -1;
    close_file(&r);
    return rc;
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
