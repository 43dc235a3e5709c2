/* Checkpoints: every parameter as an entry "<name>.npy" of one .npz, which
 * is a zip archive of .npy files, stored (method 0, uncompressed) as
 * numpy.savez writes it, so numpy.load reads ours and we read numpy's.
 *
 * A zip file, all integers little-endian:
 *   per entry:  local header (30 bytes, "PK\3\4"), name, extra, data
 *   then:       central directory: per entry a header (46 bytes, "PK\1\2")
 *               repeating crc, sizes and name, plus the local header offset
 *   last:       end record (22 bytes, "PK\5\6"): entry count, directory
 *               size and offset, and an optional comment
 * We write no extras, no comment and a fixed date (1980-01-01), so a
 * checkpoint of the same values is the same bytes. Sizes and offsets are 32
 * bits without the zip64 extension, which we neither write nor read: a
 * checkpoint past 4 GiB is refused.
 *
 * A file being loaded may come from anyone, so every size and offset in it
 * is bounds-checked against the file before use, entries are CRC-checked,
 * and each .npy goes through the same parser as tg_load_npy. All entries are
 * read and checked before any parameter is written. */
#include "core/npy.h"
#include "core/shared.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum {
    LOCAL_SIG = 0x04034b50,
    CENTRAL_SIG = 0x02014b50,
    END_SIG = 0x06054b50,
    LOCAL_LEN = 30,
    CENTRAL_LEN = 46,
    END_LEN = 22,
    COMMENT_MAX = 0xffff,
    ENTRIES_MAX = 0xffff,       /* a count this high means zip64 */
    VERSION = 20,               /* zip 2.0: enough for stored entries */
    MADE_BY = 3 << 8 | VERSION, /* 3: Unix, as Python's zipfile */
    DOS_DATE_1980 = 1 << 5 | 1, /* (year - 1980) << 9 | month << 5 | day */
    STORED = 0,
    FLAG_ENCRYPTED = 1,
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

static unsigned get16(const unsigned char *b) { return b[0] | b[1] << 8; }

static uint32_t get32(const unsigned char *b)
{
    return get16(b) | (uint32_t)get16(b + 2) << 16;
}

/* ---- CRC-32 ------------------------------------------------------------ */

/* zip's CRC-32 (IEEE 802.3): the reflected polynomial 0xEDB88320, register
 * preset to ~0 and inverted at the end; one table lookup per byte. */
typedef struct crc_table {
    uint32_t t[256];
} crc_table;

static void crc_init(crc_table *c)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i;
        for (int k = 0; k < 8; k++)
            r = r & 1 ? 0xedb88320u ^ (r >> 1) : r >> 1;
        c->t[i] = r;
    }
}

/* The CRC of the bytes so far (crc, 0 for none) extended by buf[0..n). */
static uint32_t crc_update(const crc_table *c, uint32_t crc, const void *buf,
                           size_t n)
{
    const unsigned char *b = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = c->t[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

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
    crc_table crc;
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
    if (tg_copy_out(t, tg_dtype_of(t), buf + hlen) != 0) {
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
    e->crc = crc_update(&w->crc, 0, data, len);
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
    crc_init(&w.crc);
    saved_entry *es = tg__calloc((size_t)ps->n + 1, sizeof *es);
    bool ok = es != NULL;
    if (!ok)
        tg__error("save_npz: %s: out of memory", path);
    for (int i = 0; ok && i < ps->n; i++)
        ok = write_entry(&w, path, &ps->items[i], &es[i]);
    ok = ok && write_directory(&w, ps, es);
    free(es);
    if (!ok) {
        tg__file_abort(w.out);
        return -1;
    }
    return tg__file_commit(w.out);
}

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

/* One central directory record, as read (fields not yet trusted). */
typedef struct zip_entry {
    const char *name; /* into the directory; not NUL-terminated */
    unsigned name_len, flags, method;
    uint32_t crc, csize, usize, offset;
} zip_entry;

typedef struct zip_reader {
    const char *path;
    FILE *f;
    uint64_t size;       /* bytes in the file */
    unsigned char *dir;  /* the central directory */
    uint32_t dir_offset; /* where it starts: entries' data lie before */
    zip_entry *entries;
    unsigned n_entries;
    crc_table crc;
} zip_reader;

/* Sets the error "load_npz: <path>: <problem>" and returns false. */
__attribute__((format(printf, 2, 3))) static bool fail(const zip_reader *r,
                                                       const char *fmt, ...)
{
    char problem[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    tg__error("load_npz: %s: %s", r->path, problem);
    return false;
}

/* Reads len bytes at offset off, which must lie within the file. */
static bool read_at(const zip_reader *r, uint64_t off, size_t len, void *buf,
                    const char *what)
{
    if (off > r->size || len > r->size - off)
        return fail(r,
                    "%s at byte %llu (%zu bytes) runs past the end of the "
                    "file (%llu bytes)",
                    what, (unsigned long long)off, len,
                    (unsigned long long)r->size);
    if (fseeko(r->f, (off_t)off, SEEK_SET) != 0 ||
        fread(buf, 1, len, r->f) != len)
        return fail(r, "cannot read %s: %s", what,
                    ferror(r->f) ? strerror(errno) : "unexpected end of file");
    return true;
}

/* Finds the end record: the last "PK\5\6" in the final 22 + 65535 bytes
 * whose comment length reaches exactly to the end of the file. */
static bool find_end(const zip_reader *r, unsigned char *end, uint64_t *at)
{
    size_t tail = r->size < END_LEN + COMMENT_MAX ? (size_t)r->size
                                                  : END_LEN + COMMENT_MAX;
    if (tail < END_LEN)
        return fail(r, "not a zip file: %zu bytes is too short", tail);
    unsigned char *buf = tg__malloc(tail);
    if (!buf)
        return fail(r, "out of memory");
    bool ok = read_at(r, r->size - tail, tail, buf, "the end record");
    bool found = false;
    for (size_t i = tail - END_LEN + 1; ok && !found && i-- > 0;) {
        found = get32(buf + i) == END_SIG &&
                get16(buf + i + 20) == tail - END_LEN - i;
        if (found) {
            memcpy(end, buf + i, END_LEN);
            *at = r->size - tail + i;
        }
    }
    free(buf);
    if (ok && !found)
        return fail(r, "not a zip file (no end of central directory record)");
    return ok;
}

/* Reads the end record and the whole central directory into r->dir. */
static bool read_directory(zip_reader *r, uint32_t *dir_size)
{
    unsigned char end[END_LEN] = {0};
    uint64_t end_at = 0;
    if (!find_end(r, end, &end_at))
        return false;
    unsigned disk = get16(end + 4), dir_disk = get16(end + 6);
    unsigned n_disk = get16(end + 8), n = get16(end + 10);
    *dir_size = get32(end + 12);
    r->dir_offset = get32(end + 16);
    if (n == ENTRIES_MAX || *dir_size == ZIP_MAX || r->dir_offset == ZIP_MAX)
        return fail(r, "zip64 archives (past 4 GiB or 65535 entries) are not "
                       "supported");
    if (disk != 0 || dir_disk != 0 || n_disk != n)
        return fail(r, "multi-disk zip archives are not supported");
    if ((uint64_t)r->dir_offset + *dir_size > end_at)
        return fail(r,
                    "corrupt zip: the central directory (%lu bytes at "
                    "byte %lu) overlaps the end record at byte %llu",
                    (unsigned long)*dir_size, (unsigned long)r->dir_offset,
                    (unsigned long long)end_at);
    r->n_entries = n;
    r->dir = tg__malloc(*dir_size ? *dir_size : 1);
    if (!r->dir)
        return fail(r, "out of memory for the central directory");
    return read_at(r, r->dir_offset, *dir_size, r->dir,
                   "the central directory");
}

/* Splits the central directory into r->entries, checking that every record
 * lies within it and that the records fill it exactly. */
static bool index_entries(zip_reader *r, uint32_t dir_size)
{
    r->entries =
        tg__calloc(r->n_entries ? r->n_entries : 1, sizeof *r->entries);
    if (!r->entries)
        return fail(r, "out of memory for %u entries", r->n_entries);
    size_t pos = 0;
    for (unsigned k = 0; k < r->n_entries; k++) {
        const unsigned char *h = r->dir + pos;
        if (dir_size - pos < CENTRAL_LEN || get32(h) != CENTRAL_SIG)
            return fail(r,
                        "corrupt zip: central directory record %u of %u "
                        "is missing",
                        k + 1, r->n_entries);
        size_t rec = CENTRAL_LEN + (size_t)get16(h + 28) + get16(h + 30) +
                     get16(h + 32); /* name, extra field, comment */
        if (dir_size - pos < rec)
            return fail(r,
                        "corrupt zip: central directory record %u runs "
                        "past the directory",
                        k + 1);
        r->entries[k] = (zip_entry){.name = (const char *)h + CENTRAL_LEN,
                                    .name_len = get16(h + 28),
                                    .flags = get16(h + 8),
                                    .method = get16(h + 10),
                                    .crc = get32(h + 16),
                                    .csize = get32(h + 20),
                                    .usize = get32(h + 24),
                                    .offset = get32(h + 42)};
        pos += rec;
    }
    if (pos != dir_size)
        return fail(r,
                    "corrupt zip: %zu stray bytes after the central "
                    "directory's %u records",
                    dir_size - pos, r->n_entries);
    return true;
}

/* The entry "<name>.npy", or NULL (with an error) when there is none or
 * more than one. */
static const zip_entry *find_entry(const zip_reader *r, const char *name)
{
    size_t len = strlen(name);
    const zip_entry *found = NULL;
    for (unsigned k = 0; k < r->n_entries; k++) {
        const zip_entry *e = &r->entries[k];
        if (e->name_len != len + NPY_SUFFIX_LEN ||
            memcmp(e->name, name, len) != 0 ||
            memcmp(e->name + len, NPY_SUFFIX, NPY_SUFFIX_LEN) != 0)
            continue;
        if (found) {
            fail(r, "two entries are named '%s" NPY_SUFFIX "'", name);
            return NULL;
        }
        found = e;
    }
    if (!found)
        fail(r, "no entry '%s" NPY_SUFFIX "' for parameter '%s'", name, name);
    return found;
}

/* Where e's data starts, after its local header, name and extra field, all
 * of which must lie before the central directory; the local name must be
 * the central one. */
static bool locate_data(const zip_reader *r, const zip_entry *e,
                        const char *name, uint64_t *data_at)
{
    unsigned char h[LOCAL_LEN];
    char local_name[ENTRY_NAME_MAX];
    if ((uint64_t)e->offset + LOCAL_LEN > r->dir_offset)
        return fail(r,
                    "corrupt zip: entry '%s" NPY_SUFFIX "' starts past "
                    "the entries",
                    name);
    if (!read_at(r, e->offset, LOCAL_LEN, h, "a local header"))
        return false;
    unsigned name_len = get16(h + 26), extra_len = get16(h + 28);
    if (get32(h) != LOCAL_SIG || name_len != e->name_len ||
        name_len > sizeof local_name ||
        !read_at(r, e->offset + LOCAL_LEN, name_len, local_name,
                 "a local name") ||
        memcmp(local_name, e->name, name_len) != 0)
        return fail(r,
                    "corrupt zip: the local header of entry '%s" NPY_SUFFIX
                    "' does not match the central directory",
                    name);
    *data_at = (uint64_t)e->offset + LOCAL_LEN + name_len + extra_len;
    if (*data_at + e->usize > r->dir_offset)
        return fail(r,
                    "corrupt zip: entry '%s" NPY_SUFFIX "' (%lu bytes) "
                    "runs into the central directory",
                    name, (unsigned long)e->usize);
    return true;
}

/* Reads entry e (holding parameter name) and checks its CRC. A new buffer
 * of e->usize bytes, or NULL. */
static unsigned char *read_entry(const zip_reader *r, const zip_entry *e,
                                 const char *name)
{
    if (e->method != STORED) {
        fail(r,
             "entry '%s" NPY_SUFFIX "' is compressed; save with "
             "numpy.savez, not savez_compressed",
             name);
        return NULL;
    }
    if (e->flags & FLAG_ENCRYPTED) {
        fail(r, "entry '%s" NPY_SUFFIX "' is encrypted", name);
        return NULL;
    }
    if (e->csize != e->usize) {
        fail(r,
             "corrupt zip: stored entry '%s" NPY_SUFFIX "' has sizes %lu "
             "and %lu",
             name, (unsigned long)e->csize, (unsigned long)e->usize);
        return NULL;
    }
    uint64_t data_at = 0;
    if (!locate_data(r, e, name, &data_at))
        return NULL;
    unsigned char *buf = tg__malloc(e->usize ? e->usize : 1);
    if (!buf) {
        fail(r, "out of memory for entry '%s" NPY_SUFFIX "'", name);
        return NULL;
    }
    if (!read_at(r, data_at, e->usize, buf, "an entry's data")) {
        free(buf);
        return NULL;
    }
    if (crc_update(&r->crc, 0, buf, e->usize) != e->crc) {
        fail(r, "corrupt zip: entry '%s" NPY_SUFFIX "' fails its CRC check",
             name);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Parses entry e as .npy. The parser's error "load_npy: <where>: <problem>"
 * becomes "load_npz: <path>, entry '<name>.npy': <problem>". */
static tg_tensor *parse_entry(const zip_reader *r, const zip_entry *e,
                              const char *name)
{
    unsigned char *buf = read_entry(r, e, name);
    if (!buf)
        return NULL;
    char where[4096 + ENTRY_NAME_MAX];
    snprintf(where, sizeof where, "%s, entry '%s" NPY_SUFFIX "'", r->path,
             name);
    tg_tensor *t = tg__npy_parse(where, buf, e->usize);
    free(buf);
    if (!t) {
        static const char prefix[] = "load_npy: ";
        char msg[1024];
        const char *err = tg_last_error();
        if (strncmp(err, prefix, sizeof prefix - 1) == 0)
            err += sizeof prefix - 1;
        snprintf(msg, sizeof msg, "%s", err);
        tg__error("load_npz: %s", msg);
    }
    return t;
}

/* The value for parameter p, checked: the same shape, and a float dtype
 * for a float parameter (float32 and float64 convert) or else the same. */
static tg_tensor *load_value(const zip_reader *r, const tg_param *p)
{
    const zip_entry *e = find_entry(r, p->name);
    tg_tensor *t = e ? parse_entry(r, e, p->name) : NULL;
    if (!t)
        return NULL;
    tg_dtype have = tg_dtype_of(t), want = tg_dtype_of(p->t);
    bool floats = (have == TG_FLOAT32 || have == TG_FLOAT64) &&
                  (want == TG_FLOAT32 || want == TG_FLOAT64);
    int nd = tg_ndim(t);
    bool same_shape =
        nd == tg_ndim(p->t) &&
        memcmp(tg_shape(t), tg_shape(p->t), sizeof(int64_t) * (size_t)nd) == 0;
    if (!same_shape)
        fail(r,
             "parameter '%s' has shape %s but entry '%s" NPY_SUFFIX "' has "
             "shape %s",
             p->name, TG_SHP(p->t), p->name, TG_SHP(t));
    else if (!floats && have != want)
        fail(r, "parameter '%s' is %s but entry '%s" NPY_SUFFIX "' is %s",
             p->name, tg_dtype_name(want), p->name, tg_dtype_name(have));
    else
        return t;
    tg_release(t);
    return NULL;
}

/* Opens path and reads its directory into r. */
static bool open_zip(zip_reader *r)
{
    int64_t size;
    r->f = tg__file_open_regular("load_npz", r->path, &size);
    if (!r->f)
        return false;
    r->size = (uint64_t)size;
    crc_init(&r->crc);
    uint32_t dir_size = 0;
    return read_directory(r, &dir_size) && index_entries(r, dir_size);
}

int tg_load_npz(const tg_params *ps, const char *path)
{
    if (!ps || !path) {
        tg__error("load_npz: %s is NULL", ps ? "path" : "the parameter list");
        return -1;
    }
    for (int i = 0; i < ps->n; i++)
        if (!ps->items[i].t) {
            tg__error("load_npz: %s: parameter '%s' is NULL", path,
                      ps->items[i].name);
            return -1;
        }
    zip_reader r = {.path = path};
    tg_tensor **values = tg__calloc((size_t)ps->n + 1, sizeof *values);
    bool ok = values != NULL;
    if (!ok)
        tg__error("load_npz: %s: out of memory", path);
    ok = ok && open_zip(&r);
    for (int i = 0; ok && i < ps->n; i++)
        ok = (values[i] = load_value(&r, &ps->items[i])) != NULL;
    for (int i = 0; ok && i < ps->n; i++)
        tg__copy_into(ps->items[i].t, values[i]);
    for (int i = 0; values && i < ps->n; i++)
        tg_release(values[i]);
    free(values);
    free(r.entries);
    free(r.dir);
    if (r.f)
        fclose(r.f);
    return ok ? 0 : -1;
}
