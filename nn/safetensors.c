/* Checkpoints read from .safetensors, the format of Hugging Face's
 * safetensors library (and of nanoGPT and GPT-2 exports; nn/safetensors.h
 * has the layout): the tensors of a header that nn/safetensors_header.c
 * has read and checked, read whole, into a list (tg_read_safetensors, and
 * from bytes in memory for the fuzzer) or into the parameters that name
 * them (tg_load_safetensors). The stream that a model's loader reads
 * tensor by tensor (nn/safetensors_stream.c) reads with the same code, so
 * that both refuse the same files with the same errors: here are the file
 * opened and closed, the elements read and widened (bf16 and f16 to
 * float32, the narrower integers to int64), BOOL bytes checked, an entry
 * made a tensor and every entry made a list. The writer is
 * nn/safetensors_save.c. */
#include "nn/safetensors.h"
#include "core/shared.h"
#include "nn/formats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

void tg__st_close_file(st_file *r)
{
    free(r->names);
    free(r->entries);
    tg__names_free(&r->by_name);
    if (r->f)
        fclose(r->f);
}

bool tg__st_open_file(st_file *r)
{
    int64_t size;
    r->f = tg__file_open_regular(r->op, r->path, &size);
    if (!r->f)
        return false;
    r->size = (uint64_t)size;
    return tg__st_parse_header(r);
}

/* ---- Tensors ------------------------------------------------------------- */

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
bool tg__st_read_elements(st_file *r, const st_entry *e, size_t first,
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
bool tg__st_check_bools(const st_file *r, const st_entry *e, size_t first,
                        const unsigned char *b, size_t n)
{
    const int64_t bad = tg__bad_bool(b, (int64_t)n);
    if (bad < 0)
        return true;
    return fail(r, "tensor '%s': BOOL element %lld is the byte %u, not 0 or 1",
                e->name, (long long)(first + (size_t)bad), (unsigned)b[bad]);
}

/* Entry e as a new tensor, read as tg__st_read_elements says, straight
 * into the tensor's memory. */
tg_tensor *tg__st_read_tensor(st_file *r, const st_entry *e)
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
    if (!tg__st_read_elements(r, e, 0, numel, at) ||
        (e->dtype == ST_BOOL && !tg__st_check_bools(r, e, 0, at, numel))) {
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
    return tg__st_read_tensor(r, e);
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
    ok = ok && tg__st_open_file(&r);
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
    tg__st_close_file(&r);
    return ok ? 0 : -1;
}

/* ---- Reading every tensor -------------------------------------------- */

/* Every entry of r appended to out, each made by make. */
int tg__st_read_all(st_file *r, tg_params *out, st_make_fn *make)
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
    int rc = tg__st_open_file(&r) ? tg__st_read_all(&r, out, tg__st_read_tensor)
                                  : -1;
    tg__st_close_file(&r);
    return rc;
}

int tg__safetensors_read_mem(const char *name, const void *bytes, size_t len,
                             tg_params *out)
{
    st_file r = {
        .op = "read_safetensors", .path = name, .mem = bytes, .size = len};
    int rc = tg__st_parse_header(&r)
                 ? tg__st_read_all(&r, out, tg__st_read_tensor)
                 : -1;
    tg__st_close_file(&r);
    return rc;
}
