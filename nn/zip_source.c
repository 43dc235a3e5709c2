/* The .npz reader's libzip source: pread through a window (see
 * nn/zip_source.h for why). libzip drives it by commands: open, read,
 * seek and tell on a stream position of ours; stat gives the size; close
 * and free end it. The file is not read ahead beyond one window, so
 * memory stays WINDOW bytes whatever the archive holds. */
#include "nn/zip_source.h"
#include "core/shared.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Large enough that the local headers and small entries of a numpy
 * archive are read a window at a time; small beside any tensor. */
enum { WINDOW = 64 * 1024 };

typedef struct psrc {
    FILE *f;
    int fd;
    uint64_t size, pos; /* the file's bytes; the stream position */
    uint64_t win_at;    /* the window holds [win_at, win_at + win_n) */
    size_t win_n;
    zip_error_t err;
    unsigned char win[WINDOW];
} psrc;

/* n bytes at off read into buf, short only at the end of the file; -1 with
 * the error set. EINTR is retried. */
static int64_t pread_all(psrc *s, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k =
            pread(s->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            zip_error_set(&s->err, ZIP_ER_READ, errno);
            return -1;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (int64_t)got;
}

/* Up to n bytes at the stream position: from the window, refilled at the
 * position when it does not hold it; a read as large as the window goes
 * straight to buf. */
static int64_t read_some(psrc *s, void *buf, uint64_t n)
{
    if (s->pos >= s->size || n == 0)
        return 0;
    if (n > s->size - s->pos)
        n = s->size - s->pos;
    if (n >= WINDOW) {
        int64_t k = pread_all(s, buf, (size_t)n, s->pos);
        s->pos += k > 0 ? (uint64_t)k : 0;
        return k;
    }
    if (s->pos < s->win_at || s->pos + n > s->win_at + s->win_n) {
        int64_t k = pread_all(s, s->win, WINDOW, s->pos);
        if (k < 0)
            return -1;
        s->win_at = s->pos;
        s->win_n = (size_t)k;
        if (n > s->win_n) /* the file shrank under us */
            n = s->win_n;
    }
    memcpy(buf, s->win + (s->pos - s->win_at), (size_t)n);
    s->pos += n;
    return (int64_t)n;
}

static int64_t seek(psrc *s, void *data, zip_uint64_t len)
{
    zip_int64_t to =
        zip_source_seek_compute_offset(s->pos, s->size, data, len, &s->err);
    if (to < 0)
        return -1;
    s->pos = (uint64_t)to;
    return 0;
}

static int64_t stat_of(psrc *s, void *data, zip_uint64_t len)
{
    zip_stat_t *st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &s->err);
    if (!st)
        return -1;
    zip_stat_init(st);
    st->size = s->size;
    st->valid |= ZIP_STAT_SIZE;
    return sizeof *st;
}

static zip_int64_t command(void *ud, void *data, zip_uint64_t len,
                           zip_source_cmd_t cmd)
{
    psrc *s = ud;
    switch (cmd) {
    case ZIP_SOURCE_OPEN: s->pos = 0; return 0;
    case ZIP_SOURCE_READ: return read_some(s, data, len);
    case ZIP_SOURCE_SEEK: return seek(s, data, len);
    case ZIP_SOURCE_TELL: return (zip_int64_t)s->pos;
    case ZIP_SOURCE_STAT: return stat_of(s, data, len);
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&s->err, data, len);
    case ZIP_SOURCE_CLOSE: return 0;
    case ZIP_SOURCE_FREE:
        fclose(s->f);
        zip_error_fini(&s->err);
        free(s);
        return 0;
    case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(
            ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
            ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL,
            ZIP_SOURCE_SUPPORTS, -1);
    default: zip_error_set(&s->err, ZIP_ER_OPNOTSUPP, 0); return -1;
    }
}

zip_source_t *tg__zip_source_pread(FILE *f, uint64_t size)
{
    psrc *s = tg__calloc(1, sizeof *s);
    zip_source_t *src = NULL;
    if (s) {
        s->f = f;
        s->fd = fileno(f);
        s->size = size;
        zip_error_init(&s->err);
        src = zip_source_function_create(command, s, NULL);
    }
    if (!src) {
        if (s)
            zip_error_fini(&s->err);
        free(s);
        fclose(f);
    }
    return src;
}
