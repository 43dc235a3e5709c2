/* Writing a file so that a failed write never costs the old one (see
 * core/shared.h for the contract); and, for the loaders, opening one to
 * read without blocking on what is not a regular file.
 *
 * The bytes go to a temporary file beside the target (same directory, so
 * the same file system, where rename is atomic), named ".<name>.XXXXXX".
 * Only when every byte is written, flushed and synced is it renamed over the
 * target; the directory is synced after that, so the rename itself survives
 * a crash. Until the rename the target is never opened for writing: a full
 * disk, a file-size limit, a format limit found midway or a killed process
 * all leave it as it was.
 *
 * The temporary is created with open(O_CREAT | O_EXCL, 0666) rather than
 * mkstemp, which makes it 0600: the kernel then applies the umask (and a
 * default ACL) exactly as for any new file, and reading the umask, which
 * only umask(2) can do, would change it for every thread for a moment. When
 * the target already exists the temporary takes its mode instead, and its
 * owner where we may give it one. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "core/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tg__file {
    const char *op;
    char *path;   /* the target: the caller's path, or a symlink's target */
    char *dir;    /* its directory, for the temporary and the sync */
    char *tmp;    /* the temporary; NULL when writing in place */
    FILE *f;      /* open on tmp, or on path in place */
    bool failed;  /* a tg__file_write failed (its error is set) */
    char shown[]; /* the caller's path, for messages */
};

/* Sets "<op>: cannot write <path>: <what>: <strerror(err)>", the last
 * part "out of memory" for ENOMEM, as the library's other messages say. */
static void fail(const tg__file *w, const char *what, int err)
{
    tg__error("%s: cannot write %s: %s: %s", w->op, w->shown, what,
              err == ENOMEM ? "out of memory" : strerror(err));
}

/* The directory part of path: "." for "a.npy", "/" for "/a.npy". malloc'd;
 * NULL when out of memory. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return tg__strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = tg__malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

/* Creates the temporary "<dir>/.<name>.XXXXXX" (name cut to leave room
 * under NAME_MAX), the Xs from the clock, the process and a counter, drawn
 * again while the name is taken. Returns the descriptor, or -1 with errno. */
static int create_temp(tg__file *w)
{
    static _Atomic unsigned long counter;
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const char *slash = strrchr(w->path, '/');
    const char *name = slash ? slash + 1 : w->path;
    size_t cap = strlen(w->dir) + strlen(name) + 16;
    w->tmp = tg__malloc(cap);
    if (!w->tmp)
        return errno = ENOMEM, -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        unsigned long long x =
            (unsigned long long)now.tv_nsec ^
            (unsigned long long)now.tv_sec << 30 ^
            (unsigned long long)getpid() << 40 ^
            (unsigned long long)atomic_fetch_add(&counter, 1) *
                0x9e3779b97f4a7c15ull;
        char x6[7];
        for (int i = 0; i < 6; i++, x /= sizeof letters - 1)
            x6[i] = letters[x % (sizeof letters - 1)];
        x6[6] = '\0';
        snprintf(w->tmp, cap, "%s/.%.200s.%s", w->dir, name, x6);
        int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return errno = EEXIST, -1;
}

/* Gives the temporary the mode of the file it replaces, and its owner and
 * group. Only root may give a file away (EPERM for anyone else), and then
 * the new file is the saver's own, as an editor's save makes it. */
static bool keep_mode(tg__file *w, int fd, const struct stat *old)
{
    if ((old->st_uid != geteuid() || old->st_gid != getegid()) &&
        fchown(fd, old->st_uid, old->st_gid) != 0 && errno != EPERM) {
        fail(w, "cannot give the temporary file the old one's owner", errno);
        return false;
    }
    if (fchmod(fd, old->st_mode & 07777) != 0) {
        fail(w, "cannot give the temporary file the old one's mode", errno);
        return false;
    }
    return true;
}

/* Where the bytes go: a temporary beside the target, or, for an existing
 * target that is not a regular file (a device such as /dev/null, a pipe),
 * the target itself, which has no old bytes to keep and must never be
 * replaced by a regular file. */
static bool open_output(tg__file *w)
{
    struct stat st;
    bool exists = lstat(w->path, &st) == 0;
    if (!exists && errno != ENOENT) {
        fail(w, "cannot stat", errno);
        return false;
    }
    if (exists && S_ISLNK(st.st_mode)) {
        /* Replace what the link points to and keep the link. */
        char *target = tg__alloc_fails() ? NULL : realpath(w->path, NULL);
        if (!target) {
            fail(w, "cannot resolve the symbolic link", errno);
            return false;
        }
        free(w->path);
        w->path = target;
        exists = stat(w->path, &st) == 0;
        if (!exists) {
            fail(w, "cannot stat the link's target", errno);
            return false;
        }
    }
    if (exists && S_ISDIR(st.st_mode)) {
        tg__error("%s: cannot write %s: %s", w->op, w->shown, strerror(EISDIR));
        return false;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        w->f = fopen(w->path, "wb");
        if (!w->f)
            fail(w, "cannot open", errno);
        return w->f != NULL;
    }
    w->dir = dir_of(w->path);
    int fd = w->dir ? create_temp(w) : (errno = ENOMEM, -1);
    if (fd < 0) {
        int err = errno;
        char what[64 + 4096];
        snprintf(what, sizeof what, "cannot open a temporary file in %s",
                 w->dir ? w->dir : "its directory");
        fail(w, what, err);
        return false;
    }
    bool ok = !exists || keep_mode(w, fd, &st);
    if (ok && !(w->f = fdopen(fd, "wb"))) {
        fail(w, "cannot open", errno);
        ok = false;
    }
    if (!ok) {
        close(fd);
        unlink(w->tmp);
    }
    return ok;
}

/* Frees w; the temporary, if any, must be gone or renamed already. */
static void file_free(tg__file *w)
{
    free(w->tmp);
    free(w->dir);
    free(w->path);
    free(w);
}

tg__file *tg__file_begin(const char *op, const char *path)
{
    size_t n = strlen(path) + 1;
    tg__file *w = tg__calloc(1, sizeof *w + n);
    char *copy = tg__strdup(path);
    if (!w || !copy) {
        tg__error("%s: cannot write %s: out of memory", op, path);
        free(w);
        free(copy);
        return NULL;
    }
    memcpy(w->shown, path, n);
    w->op = op;
    w->path = copy;
    if (!open_output(w)) {
        file_free(w);
        return NULL;
    }
    return w;
}

FILE *tg__file_stream(tg__file *w) { return w->f; }

bool tg__file_write(tg__file *w, const void *buf, size_t n)
{
    if (w->failed)
        return false;
    if (n && fwrite(buf, 1, n, w->f) != n) {
        fail(w, "write failed", errno);
        w->failed = true;
    }
    return !w->failed;
}

void tg__file_abort(tg__file *w)
{
    if (!w)
        return;
    fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    file_free(w);
}

/* fsync, where the file system can: EINVAL says it has nothing to sync. */
static bool sync_fd(int fd) { return fsync(fd) == 0 || errno == EINVAL; }

/* Everything written reached the file: the stream flushed without error,
 * and no write before failed (an fprintf's failure shows only in ferror;
 * the flush usually retries what it left and says why). */
static bool flush(tg__file *w)
{
    if (w->failed)
        return false;
    errno = 0;
    if (fflush(w->f) != 0 || ferror(w->f)) {
        fail(w, "write failed", errno ? errno : EIO);
        return false;
    }
    return true;
}

/* Renames the temporary over the target and syncs the directory. Until the
 * rename succeeds, a failure leaves the target untouched. */
static bool replace(tg__file *w)
{
    /* Opened before the rename, so that failing to open it costs nothing.
     * A directory we may write but not read cannot be synced: the rename
     * still happens, and is as durable as the file system makes it. */
    int dir = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 && errno != EACCES) {
        fail(w, "cannot open its directory to sync it", errno);
        return false;
    }
    if (rename(w->tmp, w->path) != 0) {
        fail(w, "cannot rename the temporary file over it", errno);
        if (dir >= 0)
            close(dir);
        return false;
    }
    free(w->tmp);
    w->tmp = NULL;
    bool ok = dir < 0 || sync_fd(dir);
    if (!ok)
        fail(w,
             "the new file is in place, but syncing its directory failed "
             "(it may not survive a crash)",
             errno);
    if (dir >= 0)
        close(dir);
    return ok;
}

int tg__file_commit(tg__file *w)
{
    bool ok = flush(w);
    if (ok && w->tmp && !sync_fd(fileno(w->f))) {
        fail(w, "cannot sync", errno);
        ok = false;
    }
    if (fclose(w->f) != 0 && ok) {
        fail(w, "write failed", errno);
        ok = false;
    }
    if (ok && w->tmp)
        ok = replace(w);
    if (w->tmp)
        unlink(w->tmp);
    file_free(w);
    return ok ? 0 : -1;
}

/* ---- reading ------------------------------------------------------------ */

FILE *tg__file_open_regular(const char *op, const char *path, int64_t *size)
{
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer, forever if
     * none comes, and some devices wait likewise; nonblocking, the open
     * returns at once and fstat can refuse them. For a regular file the
     * flag means nothing, and it is cleared all the same before reading. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tg__error("%s: %s: cannot open: %s", op, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    int flags;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0)
        tg__error("%s: %s: cannot stat: %s", op, path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        tg__error("%s: %s: not a regular file", op, path);
    else if ((flags = fcntl(fd, F_GETFL)) < 0 ||
             fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ||
             !(f = fdopen(fd, "rb")))
        tg__error("%s: %s: cannot open: %s", op, path, strerror(errno));
    if (!f) {
        close(fd);
        return NULL;
    }
    *size = (int64_t)st.st_size;
    return f;
}
