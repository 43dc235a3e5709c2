/* Writing a file so that a failed write never costs the old one (see
 * core/shared.h for the contract); and, for the loaders, opening one to
 * read without blocking on what is not a regular file.
 *
 * The bytes go to a temporary file beside the target (same directory, so
 * the same file system, where rename is atomic). Where the file system can
 * make one (Linux's O_TMPFILE) the temporary has no name while it is
 * written: a process killed midway leaves nothing behind, the kernel frees
 * the file with its last descriptor. Only when every byte is written,
 * flushed and synced is it given a name, ".<name>.XXXXXX" (linkat through
 * /proc/self/fd), and that name renamed over the target; the directory is
 * synced after that, so the rename itself survives a crash. Elsewhere the
 * temporary is created under that name from the start. Until the rename
 * the target is never opened for writing: a full disk, a file-size limit,
 * a format limit found midway or a killed process all leave it as it was.
 *
 * A named temporary is left behind when the process dies between its name
 * and the rename: for an unnamed one, the moment between linkat and
 * rename; without O_TMPFILE, the whole save. Every temporary is locked
 * (flock) while its save runs, and a lock dies with its process; so after
 * each save that succeeds, the temporaries of the same target whose lock
 * can be taken are a dead save's, and are removed (remove_stale). (A
 * named temporary is unlocked for the moment between its creation and its
 * flock: a save that loses it then fails at the rename, leaving the target
 * as it was.)
 *
 * The temporary is created with mode 0666 rather than mkstemp's 0600: the
 * kernel then applies the umask (and a default ACL) exactly as for any new
 * file, and reading the umask, which only umask(2) can do, would change it
 * for every thread for a moment. When the target already exists the
 * temporary takes its mode instead, and its owner where we may give it
 * one. */
#define _GNU_SOURCE /* O_TMPFILE, AT_SYMLINK_FOLLOW, flock, realpath */

#include "core/shared.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

bool tg__file_named_only;

struct tg__file {
    const char *op;
    char *path;   /* the target: the caller's path, or a symlink's target */
    char *dir;    /* its directory, for the temporary and the sync */
    char *tmp;    /* the temporary's name; NULL in place or unnamed */
    bool unnamed; /* the temporary has no name yet (O_TMPFILE) */
    int lock;     /* the temporary's descriptor again, locked; or -1 */
    FILE *f;      /* open on the temporary, or on path in place */
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

/* The temporaries' letters: ".<name>." and six of these. */
static const char letters[] = "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
#define NAME_CUT "200" /* the target's name cut to leave room under NAME_MAX */

/* The target's name, without its directory. */
static const char *base_of(const tg__file *w)
{
    const char *slash = strrchr(w->path, '/');
    return slash ? slash + 1 : w->path;
}

/* Makes a temporary "<dir>/.<name>.XXXXXX" with make(name, ctx) (which
 * fails with EEXIST when the name is taken), the Xs from the clock, the
 * process and a counter, drawn again while the name is taken. Returns
 * make's result (a descriptor, or 0) with the name in w->tmp, or -1 with
 * errno and w->tmp NULL. */
static int make_temp(tg__file *w, int (*make)(const char *name, void *ctx),
                     void *ctx)
{
    static _Atomic unsigned long counter;
    size_t cap = strlen(w->dir) + strlen(base_of(w)) + 16;
    free(w->tmp);
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
        snprintf(w->tmp, cap, "%s/.%." NAME_CUT "s.%s", w->dir, base_of(w), x6);
        int rc = make(w->tmp, ctx);
        if (rc >= 0)
            return rc;
        if (errno != EEXIST)
            break;
    }
    int err = errno; /* no name of ours: none to remove later */
    free(w->tmp);
    w->tmp = NULL;
    return errno = err, -1;
}

static int create_named(const char *name, void *ctx)
{
    (void)ctx;
    return open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
}

/* Opens the temporary: unnamed where the file system makes one (and
 * /proc/self/fd is there to name it by later), else named. Locks it, and
 * keeps the lock on a descriptor of its own (w->lock), so that it lasts
 * until commit or abort however the stream is closed. Returns the
 * descriptor to write to, or -1 with errno. */
static int open_temp(tg__file *w)
{
    int fd = -1;
#ifdef O_TMPFILE
    if (!tg__file_named_only && access("/proc/self/fd", X_OK) == 0)
        fd = open(w->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    w->unnamed = fd >= 0;
#endif
    if (fd < 0)
        fd = make_temp(w, create_named, NULL);
    if (fd < 0)
        return -1;
    /* Where the file system has no locks, this save's temporary is
     * unlocked, and so would a dead one's be, which remove_stale then
     * leaves alone (it removes only what it can lock). */
    w->lock = dup(fd);
    if (w->lock >= 0)
        (void)flock(w->lock, LOCK_EX | LOCK_NB);
    if (w->lock < 0) {
        int err = errno;
        close(fd);
        if (w->tmp)
            unlink(w->tmp);
        return errno = err, -1;
    }
    return fd;
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
    int fd = w->dir ? open_temp(w) : (errno = ENOMEM, -1);
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
        if (w->tmp)
            unlink(w->tmp);
    }
    return ok;
}

/* Frees w and lets the temporary's lock go; the temporary, if any, must
 * be gone or renamed already. */
static void file_free(tg__file *w)
{
    if (w->lock >= 0)
        close(w->lock);
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
    w->lock = -1;
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
    fclose(w->f); /* an unnamed temporary goes with its last descriptor */
    if (w->tmp)
        unlink(w->tmp);
    file_free(w);
}

int tg__file_end(tg__file *w, bool ok)
{
    if (w && ok)
        return tg__file_commit(w);
    tg__file_abort(w);
    return -1;
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

#ifdef O_TMPFILE
/* linkat(2)'s way for an O_TMPFILE file: its /proc/self/fd link,
 * followed (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH). */
static int link_named(const char *name, void *ctx)
{
    return linkat(AT_FDCWD, ctx, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
}
#endif

/* The unnamed temporary, complete, given its name beside the target. */
static bool name_unnamed(tg__file *w)
{
#ifdef O_TMPFILE
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", w->lock);
    if (make_temp(w, link_named, proc) == 0) {
        w->unnamed = false;
        return true;
    }
#endif
    fail(w, "cannot link the temporary file into its directory", errno);
    return false;
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

/* Whether name is one of the target's temporaries: ".<name>." (the name
 * cut as make_temp cuts it) and six of its letters. */
static bool is_temp_of(const tg__file *w, const char *name)
{
    char head[256];
    int n = snprintf(head, sizeof head, ".%." NAME_CUT "s.", base_of(w));
    if (n < 0 || strncmp(name, head, (size_t)n) != 0 || strlen(name + n) != 6)
        return false;
    return strspn(name + n, letters) == 6;
}

/* Removes the target's temporaries left by saves that died (see the top):
 * those whose lock can be taken. Best effort, after a save that
 * succeeded: a temporary that cannot be opened or locked stays. */
static void remove_stale(const tg__file *w)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_temp_of(w, e->d_name))
            continue;
        int fd = openat(dirfd(d), e->d_name,
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        if (fd >= 0)
            close(fd); /* and the lock with it */
    }
    closedir(d);
}

int tg__file_commit(tg__file *w)
{
    bool temp = w->tmp || w->unnamed;
    bool ok = flush(w);
    if (ok && temp && !sync_fd(fileno(w->f))) {
        fail(w, "cannot sync", errno);
        ok = false;
    }
    if (fclose(w->f) != 0 && ok) { /* the lock stays, on w->lock */
        fail(w, "write failed", errno);
        ok = false;
    }
    if (ok && w->unnamed)
        ok = name_unnamed(w);
    if (ok && temp)
        ok = replace(w);
    if (w->tmp)
        unlink(w->tmp);
    if (ok && temp)
        remove_stale(w);
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
