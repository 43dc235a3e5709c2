/* .npy files, NumPy's array format, so tensors move between numpy and C.
 *
 * A file is the magic "\x93NUMPY", a version (major, minor byte), the header
 * length (little-endian; 2 bytes in format 1.0, 4 in 2.0 and 3.0), the header,
 * which is a Python dict literal such as
 *     {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a '\n', and then the elements, raw, in C order.
 *
 * The header comes from whoever wrote the file, so it is parsed by hand (never
 * evaluated), accepting only what numpy could write for the dtypes we hold,
 * and the byte count it implies is checked against the real file size before
 * anything is allocated for the data. */
#include "core/internal.h"
#include "core/npy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Elements are copied as raw bytes, which is '<' (little-endian) order only
 * on a little-endian host. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif
/* A byte count that fits int64 then fits size_t for malloc and fread. */
_Static_assert(SIZE_MAX >= (uint64_t)INT64_MAX,
               "npy.c assumes a 64-bit size_t");

/* The file starts with MAGIC, two version bytes and the header length: 2
 * bytes of it in format 1.0, 4 in 2.0 and 3.0. */
enum { MAGIC_LEN = 6, PREFIX_V1 = 10, PREFIX_V2 = 12 };
static const char MAGIC[MAGIC_LEN] = "\x93NUMPY";

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

typedef struct npy_file {
    const char *path;
    FILE *f;           /* the file, or NULL for read */
    tg__npy_read read; /* the bytes in order (tg__npy_read_stream) */
    void *ctx;         /* read's */
    int64_t size;      /* bytes in the file */
} npy_file;

/* The next n bytes: as many as came (n unless the file ends or fails). */
static size_t next(const npy_file *in, void *buf, size_t n)
{
    return in->f ? fread(buf, 1, n, in->f) : in->read(in->ctx, buf, n);
}

/* Sets the error "load_npy: <path>: <problem>" and returns false. */
#define fail(in, ...) tg__file_error("load_npy", (in)->path, __VA_ARGS__)

/* What the header says, once parsed. */
typedef struct npy_header {
    const char *descr; /* as in the file: '<f8' */
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
} npy_header;

/* ---- the header dict ---------------------------------------------------- */

/* A position in the header text. */
typedef struct cursor {
    const char *start, *p, *end;
    const npy_file *in;
} cursor;

static void skip_space(cursor *c)
{
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips whitespace, then consumes ch if it comes next. */
static bool accept(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* Skips whitespace, then consumes word if it comes next. */
static bool accept_word(cursor *c, const char *word)
{
    size_t n = strlen(word);
    skip_space(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* A syntax error: what was expected where the parse stopped. */
static bool syntax(const cursor *c, const char *expected)
{
    if (c->p >= c->end)
        return fail(c->in, "header is unterminated: expected %s", expected);
    return fail(c->in, "malformed header: expected %s at byte %td", expected,
                c->p - c->start);
}

/* A quoted string as Python's repr writes it, in single or double quotes.
 * The keys and dtypes we accept never need escapes, so a backslash (or any
 * byte outside printable ASCII) is an error rather than something to decode;
 * this also keeps what we quote in error messages on one printable line. */
static bool parse_string(cursor *c, const char *what, const char **s,
                         size_t *len)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return syntax(c, what);
    char quote = *c->p++;
    *s = c->p;
    while (c->p < c->end && *c->p != quote) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < ' ' || ch > '~')
            return fail(c->in,
                        "malformed header: unsupported character in a "
                        "string at byte %td",
                        c->p - c->start);
        c->p++;
    }
    if (c->p >= c->end)
        return syntax(c, "a closing quote");
    *len = (size_t)(c->p++ - *s);
    return true;
}

/* Up to this many characters of a string from the file go into a message. */
#define QUOTE_MAX    40
#define QUOTE_LEN(n) ((int)((n) < QUOTE_MAX ? (n) : QUOTE_MAX))

static bool parse_descr(cursor *c, npy_header *h)
{
    static const struct {
        const char *descr;
        tg_dtype dtype;
    } known[] = {{"<f4", TG_FLOAT32},
                 {"<f8", TG_FLOAT64},
                 {"|b1", TG_BOOL},
                 {"|u1", TG_BOOL},
                 {"<i8", TG_INT64}};
    const char *s;
    size_t n;
    if (!parse_string(c, "a dtype string", &s, &n))
        return false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (n == strlen(known[i].descr) && memcmp(s, known[i].descr, n) == 0) {
            h->descr = known[i].descr;
            h->dtype = known[i].dtype;
            return true;
        }
    }
    if (n > 0 && s[0] == '>')
        return fail(c->in, "big-endian dtype '%.*s' is not supported",
                    QUOTE_LEN(n), s);
    return fail(c->in,
                "unsupported dtype '%.*s' (want '<f4', '<f8', '|b1', "
                "'|u1' or '<i8')",
                QUOTE_LEN(n), s);
}

static bool parse_fortran_order(cursor *c, npy_header *h)
{
    (void)h; /* only False is accepted, so there is nothing to record */
    if (accept_word(c, "False"))
        return true;
    if (accept_word(c, "True"))
        return fail(c->in, "Fortran-order arrays are not supported (save "
                           "np.ascontiguousarray(a) instead)");
    return syntax(c, "True or False for fortran_order");
}

/* One dim of the shape: a decimal int, as repr writes it. */
static bool parse_dim(cursor *c, int64_t *dim)
{
    skip_space(c);
    bool negative = c->p < c->end && *c->p == '-';
    if (negative)
        c->p++;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return syntax(c, "an integer in the shape");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int digit = *c->p++ - '0';
        if (v > (INT64_MAX - digit) / 10)
            return fail(c->in, "a dim in the shape overflows int64");
        v = v * 10 + digit;
    }
    if (negative)
        return fail(c->in, "negative dim -%lld in the shape", (long long)v);
    *dim = v;
    return true;
}

/* The shape tuple: "()", "(5,)", "(2, 3)" or "(2, 3,)". Python reads "(5)" as
 * the int 5, not a tuple, and numpy rejects it; so do we. */
static bool parse_shape(cursor *c, npy_header *h)
{
    if (!accept(c, '('))
        return syntax(c, "a shape tuple");
    int n = 0;
    bool comma = true; /* the first dim needs no comma before it */
    while (!accept(c, ')')) {
        if (!comma)
            return syntax(c, "',' or ')' in the shape");
        if (n == TG_MAX_DIMS)
            return fail(c->in, "shape has more than %d dims", TG_MAX_DIMS);
        if (!parse_dim(c, &h->shape[n++]))
            return false;
        comma = accept(c, ',');
    }
    if (n == 1 && !comma)
        return fail(c->in,
                    "shape (%lld) is not a tuple (a 1-tuple is "
                    "written (%lld,))",
                    (long long)h->shape[0], (long long)h->shape[0]);
    h->ndim = n;
    return true;
}

/* The keys numpy writes, each exactly once, and their value parsers. */
static const struct {
    const char *name;
    bool (*parse)(cursor *c, npy_header *h);
} KEYS[] = {{"descr", parse_descr},
            {"fortran_order", parse_fortran_order},
            {"shape", parse_shape}};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

static bool parse_item(cursor *c, npy_header *h, unsigned *seen)
{
    const char *s;
    size_t n;
    if (!parse_string(c, "a quoted key", &s, &n))
        return false;
    size_t k = 0;
    while (k < N_KEYS &&
           !(n == strlen(KEYS[k].name) && memcmp(s, KEYS[k].name, n) == 0))
        k++;
    if (k == N_KEYS)
        return fail(c->in, "unknown key '%.*s' in the header", QUOTE_LEN(n), s);
    if (*seen & 1u << k)
        return fail(c->in, "duplicate key '%s' in the header", KEYS[k].name);
    *seen |= 1u << k;
    if (!accept(c, ':'))
        return syntax(c, "':' after a key");
    return KEYS[k].parse(c, h);
}

/* The whole header: one dict literal, keys in any order, a trailing comma
 * allowed, whitespace (numpy's padding) around it. */
static bool parse_header(cursor *c, npy_header *h)
{
    if (!accept(c, '{'))
        return fail(c->in, "header is not a dict");
    unsigned seen = 0;
    bool comma = true; /* the first item needs no comma before it */
    while (!accept(c, '}')) {
        if (!comma)
            return syntax(c, "',' or '}' in the header dict");
        if (!parse_item(c, h, &seen))
            return false;
        comma = accept(c, ',');
    }
    skip_space(c);
    if (c->p < c->end)
        return fail(c->in, "malformed header: text after the dict at byte %td",
                    c->p - c->start);
    for (size_t k = 0; k < N_KEYS; k++)
        if (!(seen & 1u << k))
            return fail(c->in, "header lacks the key '%s'", KEYS[k].name);
    return true;
}

/* ---- the file ----------------------------------------------------------- */

/* Reads the magic, version and header length, and no byte more (the
 * stream may be one that cannot seek: a zip entry being inflated); on
 * return the file is positioned at the header, *hlen bytes long, and the
 * data starts at byte *data_start. */
static bool read_prefix(npy_file *in, int64_t *hlen, int64_t *data_start)
{
    unsigned char b[PREFIX_V2];
    size_t got = next(in, b, PREFIX_V1);
    if (got < MAGIC_LEN + 2)
        return fail(in,
                    "file is too short (%zu bytes) to hold the .npy magic "
                    "and version",
                    got);
    if (memcmp(b, MAGIC, MAGIC_LEN) != 0)
        return fail(in, "not a .npy file (bad magic)");
    int major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0)
        return fail(in,
                    "unsupported .npy format version %d.%d (want 1.0, "
                    "2.0 or 3.0)",
                    major, minor);
    /* 1.0 has a 2-byte header length, 2.0 a 4-byte one; 3.0 differs from 2.0
     * only in allowing utf8 in the header, which the keys and dtypes we
     * accept never use. */
    size_t prefix = major == 1 ? PREFIX_V1 : PREFIX_V2;
    if (got == PREFIX_V1 && prefix > PREFIX_V1)
        got += next(in, b + PREFIX_V1, PREFIX_V2 - PREFIX_V1);
    if (got < prefix)
        return fail(in,
                    "file is too short (%zu bytes) to hold the header "
                    "length",
                    got);
    *hlen = b[8] | b[9] << 8;
    if (major > 1)
        *hlen |= (int64_t)b[10] << 16 | (int64_t)b[11] << 24;
    *data_start = (int64_t)prefix + *hlen;
    if (*data_start > in->size)
        return fail(in,
                    "header length %lld runs past the end of the file "
                    "(%lld bytes)",
                    (long long)*hlen, (long long)in->size);
    return true;
}

/* Reads and parses the header of length hlen (known to fit in the file). */
static bool read_header(npy_file *in, int64_t hlen, npy_header *h)
{
    char *text = tg__malloc((size_t)hlen + 1);
    if (!text)
        return fail(in, "out of memory for a %lld-byte header",
                    (long long)hlen);
    bool ok = next(in, text, (size_t)hlen) == (size_t)hlen;
    if (ok) {
        cursor c = {.start = text, .p = text, .end = text + hlen, .in = in};
        ok = parse_header(&c, h);
    } else {
        fail(in, "header is truncated");
    }
    free(text);
    return ok;
}

/* The data's byte count, checked: it must not overflow, and it must be
 * exactly the avail bytes the file holds after the header. numpy ignores
 * bytes after the data, since np.load reads from a stream on which several
 * arrays may follow one another; a loader given a path has no such use, and
 * extra bytes there most likely mean the header's shape is wrong, so we
 * reject them. */
static bool data_size(const npy_file *in, const npy_header *h, int64_t avail,
                      size_t *nbytes)
{
    char shape[TG_SHAPE_STR];
    tg__shape_str(h->ndim, h->shape, shape);
    /* The count tg__new will check, so a shape it cannot hold is rejected
     * here, before the file size is compared with it; within that count the
     * byte size (at most 8 an element) fits in int64. */
    int64_t count;
    if (!tg__count(h->ndim, h->shape, &count))
        return fail(in,
                    "shape %s has more elements than a tensor can hold "
                    "(2^59)",
                    shape);
    int64_t n = count * (int64_t)tg_dtype_size(h->dtype);
    if (n > avail)
        return fail(in,
                    "data is truncated: shape %s of %s needs %lld bytes, "
                    "the file holds %lld after the header",
                    shape, tg_dtype_name(h->dtype), (long long)n,
                    (long long)avail);
    if (n < avail)
        return fail(in,
                    "trailing bytes after the data: shape %s of %s takes "
                    "%lld bytes, the file holds %lld after the header",
                    shape, tg_dtype_name(h->dtype), (long long)n,
                    (long long)avail);
    *nbytes = (size_t)n;
    return true;
}

/* TG_BOOL holds 0 or 1 only. A '|u1' byte of any other value is data, not a
 * mask, and a '|b1' one only comes from a corrupt file: reject both rather
 * than guess what was meant. */
static bool check_bools(const npy_file *in, const npy_header *h,
                        const tg_tensor *t)
{
    const uint8_t *b = t->storage->data;
    const int64_t i = tg__bad_bool(b, tg_numel(t));
    if (i >= 0)
        return fail(in, "'%s' element %lld is %u, but a bool must be 0 or 1",
                    h->descr, (long long)i, b[i]);
    return true;
}

/* Reads the whole file into a new tensor: the header, checked against the
 * file's size and by check (NULL: no check), before anything is allocated
 * for the data, which is then read into the tensor, exactly as many bytes
 * as the header says. */
static tg_tensor *read_npy(npy_file *in, tg__npy_check check, void *ctx)
{
    int64_t hlen = 0, data_start = 0;
    npy_header h = {0};
    size_t nbytes = 0;
    if (!read_prefix(in, &hlen, &data_start) || !read_header(in, hlen, &h) ||
        !data_size(in, &h, in->size - data_start, &nbytes) ||
        (check && !check(ctx, h.dtype, h.ndim, h.shape)))
        return NULL;
    tg_tensor *t = tg__new("load_npy", h.dtype, h.ndim, h.shape, false);
    if (!t) {
        /* tg__new refuses some shapes whose (empty) data the file does
         * hold, such as (1, 10**6, 10**16, 0), and fails when memory runs
         * out; its message "load_npy: <problem>" is made to name the file. */
        static const char prefix[] = "load_npy: ";
        char problem[512];
        const char *err = tg_last_error();
        if (strncmp(err, prefix, sizeof prefix - 1) == 0)
            err += sizeof prefix - 1;
        snprintf(problem, sizeof problem, "%s", err);
        fail(in, "%s", problem);
        return NULL;
    }
    if (next(in, t->storage->data, nbytes) != nbytes) {
        fail(in, "data is truncated (the file shrank while being read?)");
        tg_release(t);
        return NULL;
    }
    if (h.dtype == TG_BOOL && !check_bools(in, &h, t)) {
        tg_release(t);
        return NULL;
    }
    return t;
}

tg_tensor *tg_load_npy(const char *path)
{
    if (!path) {
        tg__error("load_npy: path is NULL");
        return NULL;
    }
    /* The size bounds every length the file claims, so it must be real:
     * only a regular file is read. */
    npy_file in = {.path = path};
    in.f = tg__file_open_regular("load_npy", path, &in.size);
    if (!in.f)
        return NULL;
    tg_tensor *t = read_npy(&in, NULL, NULL);
    fclose(in.f);
    return t;
}

/* ===================================================================== */
/* Saving                                                                 */
/* ===================================================================== */

/* Room for the longest header: 8 dims of 19 digits plus padding. */
#define HEADER_MAX 512

/* Appends printf-style text at buf + *n. */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t *n,
                                                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf + *n, HEADER_MAX - *n, fmt, ap);
    va_end(ap);
    TG_ASSERT(len >= 0 && *n + (size_t)len < HEADER_MAX);
    *n += (size_t)len;
}

/* Magic, version 1.0, header length and header, byte for byte as numpy
 * >= 1.24 writes them: keys sorted, the shape as Python's repr of a tuple,
 * 21 - len(repr(shape[0])) spare spaces so the first dim can later grow in
 * place, then spaces and a '\n' up to the next multiple of 64 bytes (at least
 * one space) so the data is aligned for mmap. The spare spaces usually vanish
 * into that padding, but not for every shape (tests/fixtures/npy_growth.npy).
 * Returns the length. */
static size_t format_header(const tg_tensor *t, char *buf)
{
    static const char *const descr[] = {[TG_FLOAT32] = "<f4",
                                        [TG_FLOAT64] = "<f8",
                                        [TG_BOOL] = "|b1",
                                        [TG_INT64] = "<i8"};
    size_t n = PREFIX_V1;
    append(buf, &n, "{'descr': '%s', 'fortran_order': False, 'shape': (",
           descr[t->dtype]);
    for (int d = 0; d < t->ndim; d++)
        append(buf, &n, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    append(buf, &n, "%s), }", t->ndim == 1 ? "," : "");
    if (t->ndim > 0) {
        int digits = snprintf(NULL, 0, "%lld", (long long)t->shape[0]);
        append(buf, &n, "%*s", 21 - digits, "");
    }
    size_t total = ((n + 1) / 64 + 1) * 64;
    memset(buf + n, ' ', total - 1 - n);
    buf[total - 1] = '\n';
    size_t hlen = total - PREFIX_V1;
    memcpy(buf, MAGIC, MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    return total;
}

/* Writes header and data to path through a temporary (core/shared.h), so a
 * failure leaves the file that was there as it was. */
static int write_file(const char *path, const char *header, size_t hlen,
                      const void *data, size_t nbytes)
{
    tg__file *out = tg__file_begin("save_npy", path);
    if (!out)
        return -1;
    if (!tg__file_write(out, header, hlen) ||
        !tg__file_write(out, data, nbytes)) {
        tg__file_abort(out);
        return -1;
    }
    return tg__file_commit(out);
}

int tg_save_npy(const tg_tensor *t, const char *path)
{
    if (!t)
        return -1;
    if (!path) {
        tg__error("save_npy: path is NULL");
        return -1;
    }
    char header[HEADER_MAX];
    size_t hlen = format_header(t, header);
    /* The elements' own bytes in C order, copied as bytes: tg_copy_out goes
     * through double, which rounds an int64 beyond 2^53. */
    tg_tensor *c = tg__copy("save_npy", t);
    if (!c)
        return -1;
    size_t nbytes = (size_t)tg_numel(c) * tg_dtype_size(c->dtype);
    int rc = write_file(path, header, hlen, c->storage->data, nbytes);
    tg_release(c);
    return rc;
}

/* ===================================================================== */
/* In memory, for .npz checkpoints (core/npy.h)                           */
/* ===================================================================== */

size_t tg__npy_header(const tg_tensor *t, char *buf)
{
    _Static_assert(TG_NPY_HEADER_MAX == HEADER_MAX, "npy.h's header room");
    return format_header(t, buf);
}

/* The bytes are read as a file through fmemopen, so they pass exactly the
 * checks a file on disk does. */
tg_tensor *tg__npy_parse(const char *name, const void *bytes, size_t len)
{
    npy_file in = {.path = name, .size = (int64_t)len};
    if (len == 0) { /* fmemopen may refuse an empty buffer */
        fail(&in, "file is too short (0 bytes) to hold the .npy magic and "
                  "version");
        return NULL;
    }
    in.f = fmemopen((void *)bytes, len, "rb");
    if (!in.f) {
        fail(&in, "cannot read from memory: %s", strerror(errno));
        return NULL;
    }
    tg_tensor *t = read_npy(&in, NULL, NULL);
    fclose(in.f);
    return t;
}

tg_tensor *tg__npy_read_stream(const char *name, tg__npy_read read,
                               void *read_ctx, int64_t size,
                               tg__npy_check check, void *check_ctx)
{
    npy_file in = {.path = name, .read = read, .ctx = read_ctx, .size = size};
    return read_npy(&in, check, check_ctx);
}

int tg__npy_elements(const char *op, const tg_tensor *t, void *dst)
{
    tg_tensor *c = tg__copy(op, t);
    if (!c)
        return -1;
    memcpy(dst, c->storage->data,
           (size_t)tg_numel(c) * tg_dtype_size(c->dtype));
    tg_release(c);
    return 0;
}
