/* Checkpoints: every parameter as an entry "<name>.npy" of one .npz,
 * which is a zip archive of .npy files, stored (method 0, uncompressed) as
 * numpy.savez writes it, so numpy.load reads ours and we read numpy's
 * (numpy.savez_compressed's deflated entries too).
 *
 * Writing is our own, below: libzip writes an archive through its own
 * temporary and rename (zip_close), which would give up core/file.c's rules
 * (a replaced file keeps its mode and owner, a symbolic link stays one, the
 * directory is synced, a refused save leaves no temporary), or else builds
 * the whole archive in memory first, twice the checkpoint's size; and it
 * dates its entries, where ours are the same bytes for the same values.
 * A zip file, all integers little-endian:
 *   per entry:  local header (30 bytes, "PK\3\4"), name, extra, data
 *   then:       central directory: per entry a header (46 bytes, "PK\1\2")
 *               repeating crc, sizes and name, plus the local header offset
 *   last:       end record (22 bytes, "PK\5\6"): entry count, directory
 *               size and offset, and an optional comment
 * We write no extras, no comment and a fixed date (1980-01-01). Sizes and
 * offsets are 32 bits without the zip64 extension, which we do not write: a
 * checkpoint past 4 GiB is refused.
 *
 * Reading is libzip's (see "Loading"). A file being loaded may come from
 * anyone: every entry's size is bounded before use, entries are
 * CRC-checked, and each .npy goes through the same parser as tg_load_npy.
 * All entries are read and checked before any parameter is written. */
#include "core/npy.h"
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/names.h"
#include "nn/zip_source.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zip.h>
#include <zlib.h>

enum {
    LOCAL_SIG = 0x04034b50,
    CENTRAL_SIG = 0x02014b50,
    END_SIG = 0x06054b50,
    LOCAL_LEN = 30,
    CENTRAL_LEN = 46,
    END_LEN = 22,
    ENTRIES_MAX = 0xffff,       /* a count this high means zip64 */
    VERSION = 20,               /* zip 2.0: enough for stored entries */
    MADE_BY = 3 << 8 | VERSION, /* 3: Unix, as Python's zipfile */
    DOS_DATE_1980 = 1 << 5 | 1, /* (year - 1980) << 9 | month << 5 | day */
    STORED = 0,
    FLAG_UTF8 = 1 << 11, /* the name is UTF-8 (non-ASCII) */
};
#define ZIP_MAX        UINT32_C(0xffffffff) /* sizes and offsets, without zip64 */
#define EXTERNAL_ATTR  (UINT32_C(0600) << 16) /* rw-------, as Python does */
#define NPY_SUFFIX     ".npy"
#define NPY_SUFFIX_LEN 4
#define ENTRY_NAME_MAX (TG_PARAM_NAME_MAX + NPY_SUFFIX_LEN)

static void put16(unsigned char *b, unsigned v)
{
    b[0] = (unsigned char)v;
    b[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *b, uint32_t v)
{
    put16(b, v & 0xffff);
    put16(b + 2, v >> 16);
}

/* zip's CRC-32 (IEEE 802.3, the reflected polynomial 0xEDB88320) is zlib's
 * crc32_z (zlib is libzip's own dependency): it folds several bytes a step
 * where our table did one, which took two thirds of a save (64 MiB of
 * float32: 0.26 s of CPU with the table, 0.085 s with zlib's). */

/* ===================================================================== */
/* Saving                                                                 */
/* ===================================================================== */

/* What the central directory repeats about an entry. */
typedef struct saved_entry {
    uint32_t crc, size, offset;
    unsigned flags;
} saved_entry;

typedef struct zip_writer {
    tg__file *out;
    uint64_t pos; /* bytes written so far */
} zip_writer;

static bool write_bytes(zip_writer *w, const void *buf, size_t n)
{
    if (!tg__file_write(w->out, buf, n))
        return false;
    w->pos += n;
    return true;
}

/* The entry name "<name>.npy" in buf, and its flags. */
static size_t entry_name(const char *name, char *buf, unsigned *flags)
{
    size_t n = (size_t)snprintf(buf, ENTRY_NAME_MAX, "%s" NPY_SUFFIX, name);
    *flags = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] >= 0x80)
            *flags = FLAG_UTF8;
    return n;
}

/* The .npy file of t in one malloc'd buffer: header, then data. */
static unsigned char *npy_bytes(const char *path, const tg_tensor *t,
                                size_t *len)
{
    char header[TG_NPY_HEADER_MAX];
    size_t hlen = tg__npy_header(t, header);
    size_t nbytes = (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    unsigned char *buf = tg__malloc(hlen + nbytes);
    if (!buf) {
        tg__error("save_npz: %s: out of memory for %s %s", path,
                  tg_dtype_name(tg_dtype_of(t)), TG_SHP(t));
        return NULL;
    }
    memcpy(buf, header, hlen);
    if (tg__npy_elements("save_npz", t, buf + hlen) != 0) {
        free(buf);
        return NULL;
    }
    *len = hlen + nbytes;
    return buf;
}

/* Writes one local header, name and .npy file; fills *e. */
static bool write_entry(zip_writer *w, const char *path, const tg_param *p,
                        saved_entry *e)
{
    char name[ENTRY_NAME_MAX];
    size_t name_len = entry_name(p->name, name, &e->flags);
    size_t len = 0;
    unsigned char *data = npy_bytes(path, p->t, &len);
    if (!data)
        return false;
    e->crc = (uint32_t)crc32_z(0, data, len);
    e->size = (uint32_t)len;
    e->offset = (uint32_t)w->pos;
    unsigned char h[LOCAL_LEN] = {0};
    put32(h, LOCAL_SIG);
    put16(h + 4, VERSION);
    put16(h + 6, e->flags);
    put16(h + 8, STORED);
    put16(h + 12, DOS_DATE_1980); /* time (h + 10) is 00:00:00 */
    put32(h + 14, e->crc);
    put32(h + 18, e->size); /* compressed size */
    put32(h + 22, e->size); /* uncompressed size */
    put16(h + 26, (unsigned)name_len);
    bool ok = write_bytes(w, h, sizeof h) && write_bytes(w, name, name_len) &&
              write_bytes(w, data, len);
    free(data);
    return ok;
}

/* Writes the central directory and the end record. */
static bool write_directory(zip_writer *w, const tg_params *ps,
                            const saved_entry *es)
{
    uint64_t start = w->pos;
    for (int i = 0; i < ps->n; i++) {
        char name[ENTRY_NAME_MAX];
        unsigned flags;
        size_t name_len = entry_name(ps->items[i].name, name, &flags);
        unsigned char h[CENTRAL_LEN] = {0};
        put32(h, CENTRAL_SIG);
        put16(h + 4, MADE_BY);
        put16(h + 6, VERSION);
        put16(h + 8, es[i].flags);
        put16(h + 10, STORED);
        put16(h + 14, DOS_DATE_1980);
        put32(h + 16, es[i].crc);
        put32(h + 20, es[i].size);
        put32(h + 24, es[i].size);
        put16(h + 28, (unsigned)name_len);
        put32(h + 38, EXTERNAL_ATTR);
        put32(h + 42, es[i].offset);
        if (!write_bytes(w, h, sizeof h) || !write_bytes(w, name, name_len))
            return false;
    }
    unsigned char end[END_LEN] = {0};
    put32(end, END_SIG);
    put16(end + 8, (unsigned)ps->n);  /* entries on this disk */
    put16(end + 10, (unsigned)ps->n); /* entries in all */
    put32(end + 12, (uint32_t)(w->pos - start));
    put32(end + 16, (uint32_t)start);
    return write_bytes(w, end, sizeof end);
}

/* Whether the checkpoint of ps fits a zip without zip64, decided from its
 * size before anything is written: every size and offset in it must fit 32
 * bits, so the whole file must stay under 4 GiB. A tensor's bytes are
 * counted from its shape, so a broadcast view of a huge shape is refused
 * without being copied. */
static bool fits_zip(const tg_params *ps, const char *path)
{
    uint64_t size = END_LEN;
    for (int i = 0; i < ps->n && size <= ZIP_MAX; i++) {
        const tg_tensor *t = ps->items[i].t;
        char name[ENTRY_NAME_MAX], header[TG_NPY_HEADER_MAX];
        unsigned flags;
        size_t name_len = entry_name(ps->items[i].name, name, &flags);
        uint64_t nbytes = (uint64_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
        size +=
            LOCAL_LEN + CENTRAL_LEN + 2 * name_len + tg__npy_header(t, header);
        size += nbytes > ZIP_MAX ? ZIP_MAX : nbytes; /* no wrap-around */
    }
    if (size <= ZIP_MAX)
        return true;
    tg__error("save_npz: %s: the checkpoint would pass 4 GiB, which needs "
              "zip64 (not supported)",
              path);
    return false;
}

static bool check_save_args(const tg_params *ps, const char *path)
{
    if (!ps || !path) {
        tg__error("save_npz: %s is NULL", ps ? "path" : "the parameter list");
        return false;
    }
    if (ps->n >= ENTRIES_MAX) {
        tg__error("save_npz: %s: %d parameters, more than a zip without "
                  "zip64 holds (%d)",
                  path, ps->n, ENTRIES_MAX - 1);
        return false;
    }
    for (int i = 0; i < ps->n; i++)
        if (!ps->items[i].t) {
            tg__error("save_npz: %s: parameter '%s' is NULL", path,
                      ps->items[i].name);
            return false;
        }
    return fits_zip(ps, path);
}

/* Checked whole before anything is written, and written through a
 * temporary (core/shared.h): a failure leaves the old checkpoint as it was. */
int tg_save_npz(const tg_params *ps, const char *path)
{
    if (!check_save_args(ps, path))
        return -1;
    zip_writer w = {.out = tg__file_begin("save_npz", path)};
    if (!w.out)
        return -1;
    saved_entry *es = tg__calloc((size_t)ps->n + 1, sizeof *es);
    bool ok = es != NULL;
    if (!ok)
        tg__error("save_npz: %s: out of memory", path);
    for (int i = 0; ok && i < ps->n; i++)
        ok = write_entry(&w, path, &ps->items[i], &es[i]);
    ok = ok && write_directory(&w, ps, es);
    free(es);
    return tg__file_end(w.out, ok);
}

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

/* The archive is read with libzip, which finds the central directory,
 * checks it against the local headers (ZIP_CHECKCONS), inflates deflated
 * entries (numpy.savez_compressed) and checks each entry's CRC as its last
 * byte is read. Before an entry's buffer is allocated its claimed size is
 * bounded by what its compressed bytes can hold, so a lying directory costs
 * no memory; each entry then goes through tg_load_npy's own parser. All
 * entries are read and checked before any parameter is written. */

/* Deflate's best ratio: a 258-byte match coded in one bit or so, about 1032
 * to 1; a larger claim than comp_size * this (plus a block's slack) lies. */
#define DEFLATE_RATIO_MAX 1032
#define DEFLATE_SLACK     64

typedef struct npz_reader {
    const char *op;   /* "load_npz" or "read_npz", for messages */
    const char *path; /* the file, or the name of the bytes in memory */
    zip_t *za;
    uint64_t n_entries;
    uint64_t size; /* bytes in the archive */
} npz_reader;

/* Sets the error "<op>: <path>: <problem>" and returns false. */
#define fail(r, ...) tg__file_error((r)->op, (r)->path, __VA_ARGS__)

/* Opens the archive on src, which it then owns (freed here on failure). */
static bool open_archive(npz_reader *r, zip_source_t *src)
{
    zip_error_t ze;
    zip_error_init(&ze);
    r->za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!r->za) {
        int code = zip_error_code_zip(&ze);
        if (code == ZIP_ER_NOZIP)
            fail(r, "not a zip file (no end of central directory record)");
        else if (code == ZIP_ER_EXISTS) /* which one is meant? */
            fail(r, "corrupt zip: two entries have the same name");
        else if (code == ZIP_ER_MEMORY)
            fail(r, "out of memory");
        else
            fail(r, "corrupt zip: %s", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        zip_source_free(src);
        return false;
    }
    zip_error_fini(&ze);
    zip_int64_t n = zip_get_num_entries(r->za, 0);
    r->n_entries = n > 0 ? (uint64_t)n : 0;
    return true;
}

/* libzip takes an empty file for an empty archive; numpy writes none. */
static bool refuse_empty(const npz_reader *r)
{
    return r->size > 0 || fail(r, "not a zip file: it is empty (0 bytes)");
}

/* Opens path (a regular file, never blocking: core/shared.h) as r->za,
 * read through nn/zip_source.c's window. */
static bool open_file(npz_reader *r)
{
    int64_t size;
    FILE *f = tg__file_open_regular(r->op, r->path, &size);
    if (!f)
        return false;
    r->size = (uint64_t)size;
    if (!refuse_empty(r)) {
        fclose(f);
        return false;
    }
    zip_source_t *src = tg__zip_source_pread(f, r->size); /* owns f */
    return src ? open_archive(r, src) : fail(r, "out of memory");
}

/* Opens len bytes at bytes as r->za; the bytes are not copied. */
static bool open_memory(npz_reader *r, const void *bytes, size_t len)
{
    r->size = len;
    if (!refuse_empty(r))
        return false;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(bytes, len, 0, &ze);
    zip_error_fini(&ze);
    if (!src)
        return fail(r, "out of memory");
    return open_archive(r, src);
}

static void close_archive(npz_reader *r)
{
    if (r->za)
        zip_discard(r->za);
    r->za = NULL;
}

/* The index of the entry "<name>.npy", or -1 (with an error) when there is
 * none. (An archive with two of one name never opens: ZIP_CHECKCONS.) */
static int64_t find_entry(const npz_reader *r, const char *name)
{
    char want[ENTRY_NAME_MAX];
    snprintf(want, sizeof want, "%s" NPY_SUFFIX, name);
    zip_int64_t k = zip_name_locate(r->za, want, ZIP_FL_ENC_RAW);
    if (k < 0)
        fail(r, "no entry '%s' for parameter '%s'", want, name);
    return k;
}

/* Whether entry st may be read: stored or deflated, not encrypted, and
 * claiming no more bytes than its compressed ones can hold; else false
 * with the error set. */
static bool check_entry(const npz_reader *r, const zip_stat_t *st,
                        const char *entry)
{
    const zip_uint64_t need =
        ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
    if ((st->valid & need) != need)
        return fail(r, "corrupt zip: entry '%s' has no sizes", entry);
    if ((st->valid & ZIP_STAT_ENCRYPTION_METHOD) &&
        st->encryption_method != ZIP_EM_NONE)
        return fail(r, "entry '%s' is encrypted", entry);
    if (st->comp_method != ZIP_CM_STORE && st->comp_method != ZIP_CM_DEFLATE)
        return fail(r,
                    "entry '%s' is compressed with zip method %u; numpy "
                    "writes stored (0) or deflated (8) entries",
                    entry, (unsigned)st->comp_method);
    uint64_t most = st->comp_size;
    if (st->comp_method == ZIP_CM_DEFLATE)
        most = st->comp_size > r->size
                   ? UINT64_MAX
                   : st->comp_size * DEFLATE_RATIO_MAX + DEFLATE_SLACK;
    if (st->comp_size > r->size || st->size > most || st->size >= SIZE_MAX)
        return fail(r,
                    "corrupt zip: entry '%s' claims %llu bytes from %llu "
                    "compressed, in a file of %llu",
                    entry, (unsigned long long)st->size,
                    (unsigned long long)st->comp_size,
                    (unsigned long long)r->size);
    return true;
}

/* What went wrong reading zf: a CRC mismatch by name. */
static void fail_read(const npz_reader *r, zip_file_t *zf, const char *entry)
{
    zip_error_t *ze = zip_file_get_error(zf);
    if (zip_error_code_zip(ze) == ZIP_ER_CRC)
        fail(r, "corrupt zip: entry '%s' fails its CRC check", entry);
    else if (zip_error_code_zip(ze) == ZIP_ER_OK)
        fail(r, "corrupt zip: entry '%s' does not hold the size it claims",
             entry);
    else
        fail(r, "cannot read entry '%s': %s", entry, zip_error_strerror(ze));
}

/* A zip entry's next n bytes, inflated as the .npy parser asks for them
 * (tg__npy_read): nothing is inflated ahead of what it has checked. */
static size_t entry_read(void *zf, void *buf, size_t n)
{
    zip_int64_t got = zip_fread(zf, buf, n);
    return got < 0 ? 0 : (size_t)got;
}

/* What a load expects of an entry: parameter p's shape, and a float dtype
 * for a float parameter (float32 and float64 convert) or else the same. */
typedef struct expect {
    const npz_reader *r;
    const tg_param *p;
    const char *entry;
    bool refused; /* by check_value, with its own error */
} expect;

static bool check_value(void *ctx, tg_dtype have, int nd, const int64_t *shape)
{
    expect *e = ctx;
    const tg_param *p = e->p;
    tg_dtype want = tg_dtype_of(p->t);
    bool floats = (have == TG_FLOAT32 || have == TG_FLOAT64) &&
                  (want == TG_FLOAT32 || want == TG_FLOAT64);
    char shp[TG_SHAPE_STR];
    if (nd != tg_ndim(p->t) ||
        memcmp(shape, tg_shape(p->t), sizeof(int64_t) * (size_t)nd) != 0)
        e->refused = !fail(e->r,
                           "parameter '%s' has shape %s but entry '%s' has "
                           "shape %s",
                           p->name, TG_SHP(p->t), e->entry,
                           tg__shape_str(nd, shape, shp));
    else if (!floats && have != want)
        e->refused =
            !fail(e->r, "parameter '%s' is %s but entry '%s' is %s", p->name,
                  tg_dtype_name(want), e->entry, tg_dtype_name(have));
    return !e->refused;
}

/* The parser's error "load_npy: <where>: <problem>" as "<op>: <path>,
 * entry '<entry>': <problem>"; or what libzip found wrong with zf. */
static void fail_parse(const npz_reader *r, zip_file_t *zf, const char *entry)
{
    if (zip_error_code_zip(zip_file_get_error(zf)) != ZIP_ER_OK) {
        fail_read(r, zf, entry);
        return;
    }
    static const char prefix[] = "load_npy: ";
    char msg[1024];
    const char *err = tg_last_error();
    if (strncmp(err, prefix, sizeof prefix - 1) == 0)
        err += sizeof prefix - 1;
    snprintf(msg, sizeof msg, "%s", err);
    tg__error("%s: %s", r->op, msg);
}

/* Entry k (named entry) parsed as .npy while it is inflated (bounded, by
 * check_entry, before anything else): the header first, checked against
 * the entry's size and, when want->p is not NULL, the parameter's shape
 * and dtype, before any data is inflated; then the data, exactly the bytes
 * the header declares, into the new tensor; then one byte more, which must
 * be none, and there libzip checks the CRC. A bomb whose header claims
 * gigabytes is refused for its shape in its first bytes. */
static tg_tensor *parse_entry(const npz_reader *r, uint64_t k, expect *want)
{
    const char *entry = want->entry;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(r->za, k, 0, &st) != 0) {
        fail(r, "cannot read entry '%s': %s", entry, zip_strerror(r->za));
        return NULL;
    }
    if (!check_entry(r, &st, entry))
        return NULL;
    zip_file_t *zf = zip_fopen_index(r->za, k, 0);
    if (!zf) {
        fail(r, "cannot read entry '%s': %s", entry, zip_strerror(r->za));
        return NULL;
    }
    char where[4096 + ENTRY_NAME_MAX];
    snprintf(where, sizeof where, "%s, entry '%s'", r->path, entry);
    tg_tensor *t = tg__npy_read_stream(where, entry_read, zf, (int64_t)st.size,
                                       want->p ? check_value : NULL, want);
    if (!t && !want->refused)
        fail_parse(r, zf, entry);
    unsigned char past;
    if (t && zip_fread(zf, &past, 1) != 0) {
        fail_read(r, zf, entry);
        t = tg__then(t, NULL);
    }
    if (zip_fclose(zf) != 0 && t) {
        fail(r, "corrupt zip: entry '%s' fails its checks", entry);
        t = tg__then(t, NULL);
    }
    return t;
}

/* The value for parameter p, checked (check_value) before it is read. */
static tg_tensor *load_value(const npz_reader *r, const tg_param *p)
{
    int64_t k = find_entry(r, p->name);
    char entry[ENTRY_NAME_MAX];
    snprintf(entry, sizeof entry, "%s" NPY_SUFFIX, p->name);
    expect want = {.r = r, .p = p, .entry = entry};
    return k >= 0 ? parse_entry(r, (uint64_t)k, &want) : NULL;
}

static bool check_load_args(const tg_params *ps, const char *path)
{
    if (!ps || !path) {
        tg__error("load_npz: %s is NULL", ps ? "path" : "the parameter list");
        return false;
    }
    for (int i = 0; i < ps->n; i++)
        if (!ps->items[i].t) {
            tg__error("load_npz: %s: parameter '%s' is NULL", path,
                      ps->items[i].name);
            return false;
        }
    return true;
}

/* Every entry of the open archive is one of ps's parameters, or under
 * "<prefix>.". */
static bool entries_expected(const npz_reader *r, const tg_params *ps,
                             const char *prefix)
{
    const size_t plen = strlen(prefix);
    tg__names ix; /* ps by name: n log n, where a scan per entry is n^2 */
    if (!tg__names_init(&ix, (size_t)ps->n))
        return fail(r, "out of memory for %d names", ps->n);
    for (int i = 0; i < ps->n; i++)
        tg__names_add(&ix, ps->items[i].name, (size_t)i);
    tg__names_sort(&ix);
    bool ok = true;
    for (uint64_t k = 0; ok && k < r->n_entries; k++) {
        const char *entry = zip_get_name(r->za, k, ZIP_FL_ENC_RAW);
        char name[TG_PARAM_NAME_MAX];
        size_t len = entry ? strlen(entry) : 0;
        if (len > NPY_SUFFIX_LEN && len - NPY_SUFFIX_LEN < sizeof name &&
            strcmp(entry + len - NPY_SUFFIX_LEN, NPY_SUFFIX) == 0) {
            memcpy(name, entry, len - NPY_SUFFIX_LEN);
            name[len - NPY_SUFFIX_LEN] = '\0';
            if (tg__names_find(&ix, name) >= 0 ||
                (strncmp(name, prefix, plen) == 0 && name[plen] == '.'))
                continue;
        }
        ok = fail(r,
                  "entry '%s' is no parameter of the model (a checkpoint "
                  "of another model?)",
                  entry ? entry : "");
    }
    tg__names_free(&ix);
    return ok;
}

/* strict: refuse entries ps does not have but those under "<prefix>."
 * (prefix NULL: not strict). */
static int load_npz(const tg_params *ps, const char *path, const char *prefix)
{
    if (!check_load_args(ps, path))
        return -1;
    npz_reader r = {.op = "load_npz", .path = path};
    tg_tensor **values = tg__calloc((size_t)ps->n + 1, sizeof *values);
    bool ok = values != NULL;
    if (!ok)
        tg__error("load_npz: %s: out of memory", path);
    ok = ok && open_file(&r);
    for (int i = 0; ok && i < ps->n; i++)
        ok = (values[i] = load_value(&r, &ps->items[i])) != NULL;
    ok = ok && (!prefix || entries_expected(&r, ps, prefix));
    for (int i = 0; ok && i < ps->n; i++) /* all free to write, first */
        ok = tg__write_check("load_npz", ps->items[i].t);
    for (int i = 0; ok && i < ps->n; i++) {
        tg__copy_into(ps->items[i].t, values[i]);
        tg__write_done(ps->items[i].t);
    }
    for (int i = 0; values && i < ps->n; i++)
        tg_release(values[i]);
    free(values);
    close_archive(&r);
    return ok ? 0 : -1;
}

int tg_load_npz(const tg_params *ps, const char *path)
{
    return load_npz(ps, path, NULL);
}

int tg__load_npz_strict(const tg_params *ps, const char *path,
                        const char *prefix)
{
    return load_npz(ps, path, prefix);
}

/* ---- Reading every entry ----------------------------------------------- */

/* Every entry of the open archive as a new tensor appended to out. */
static int read_all(npz_reader *r, tg_params *out)
{
    size_t n = (size_t)r->n_entries;
    tg_tensor **ts = tg__calloc(n + 1, sizeof *ts);
    char(*names)[TG_PARAM_NAME_MAX] = tg__calloc(n + 1, sizeof *names);
    bool ok = ts && names;
    if (!ok)
        fail(r, "out of memory for %zu entries", n);
    for (size_t k = 0; ok && k < n; k++) {
        const char *entry = zip_get_name(r->za, k, ZIP_FL_ENC_RAW);
        size_t len = entry ? strlen(entry) : 0;
        if (len <= NPY_SUFFIX_LEN ||
            strcmp(entry + len - NPY_SUFFIX_LEN, NPY_SUFFIX) != 0)
            ok = fail(r, "entry '%s' is not named <name>" NPY_SUFFIX,
                      entry ? entry : "");
        else if (len - NPY_SUFFIX_LEN >= TG_PARAM_NAME_MAX)
            ok = fail(r, "entry '%s': the name is longer than %d characters",
                      entry, TG_PARAM_NAME_MAX - 1);
        else {
            memcpy(names[k], entry, len - NPY_SUFFIX_LEN);
            expect any = {.r = r, .entry = entry};
            ok = (ts[k] = parse_entry(r, k, &any)) != NULL;
        }
    }
    int rc = ok ? tg__params_adopt(r->op, r->path, out, n, names, ts) : -1;
    for (size_t k = 0; !ok && ts && k < n; k++)
        tg_release(ts[k]);
    free(ts);
    free(names);
    return rc;
}

int tg_read_npz(const char *path, tg_params *out)
{
    if (!path || !out) {
        tg__error("read_npz: %s is NULL", out ? "path" : "the parameter list");
        return -1;
    }
    npz_reader r = {.op = "read_npz", .path = path};
    int rc = open_file(&r) ? read_all(&r, out) : -1;
    close_archive(&r);
    return rc;
}

int tg__npz_read_mem(const char *name, const void *bytes, size_t len,
                     tg_params *out)
{
    npz_reader r = {.op = "read_npz", .path = name};
    int rc = open_memory(&r, bytes, len) ? read_all(&r, out) : -1;
    close_archive(&r);
    return rc;
}
