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
    bool ok = tg__st_read_at(r, r->data_at + e->begin, nbytes, at);
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
    int rc = tg__st_parse_header(&r) ? read_all(&r, out) : -1;
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
