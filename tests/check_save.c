/* Saving over a file that is already there. Each writer (tg_save_npy,
 * tg_save_npz, the plot's .dat and .gp) first saves a good file; then a save
 * over it fails: a file-size limit hit midway, a disk that fills at the last
 * flush (the same limit, below what stdio holds back until the flush), a
 * directory that refuses new files, a checkpoint past zip's limits. After
 * each, the old file must be byte for byte as it was, no temporary may be
 * left in the directory, and the error must name the op and the path. A
 * save that succeeds must put a new file in place (a new inode, never the
 * old one truncated), with the old file's mode, or the umask's for a new
 * one.
 *
 * SIGXFSZ is ignored around the limited saves, so the write fails with
 * EFBIG instead of killing the process, as tg_save_npy's comment tells
 * programs to do. Limits, handlers, the umask and the effective user are
 * restored before anything is asserted: with CK_FORK=no (valgrind) this is
 * the runner itself. */
#include "tests.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Sizes of a save, in values per tensor or points per line: the good file;
 * a save that passes stdio's 4 KiB buffer, so it fails while writing; and
 * one that stays under it, so it fails only at the final flush. */
enum { N_GOOD = 4, N_BIG = 2000, N_SMALL = 100 };

/* ---- scratch files ------------------------------------------------------ */

/* A new empty directory scratch_dir/name_i, each test working in one of
 * its own, whose listing it checks; its path in dir. */
static void test_dir(char *dir, size_t size, const char *name, int i)
{
    snprintf(dir, size, "%s/%s_%d", scratch_dir, name, i);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
}

/* The whole file, malloc'd; its length in *len. */
static char *read_bytes(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "cannot open %s", path);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(read(fd, buf, (size_t)st.st_size), st.st_size);
    close(fd);
    buf[st.st_size] = '\0';
    *len = (size_t)st.st_size;
    return buf;
}

/* n values n, n + 1/4, n + 2/4...: exact in binary, different for each n. */
static double *ramp(int64_t n)
{
    double *v = malloc(sizeof(double) * (size_t)n);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)n + (double)i / 4;
    return v;
}

static tg_tensor *ramp_tensor(int64_t n)
{
    double *v = ramp(n);
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(n), v);
    free(v);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* Asserts that t is the (n) ramp. */
static void assert_ramp(const tg_tensor *t, int64_t n)
{
    ck_assert_msg(t != NULL, "%s", tg_last_error());
    ck_assert_int_eq(tg_ndim(t), 1);
    ck_assert_int_eq(tg_size(t, 0), n);
    double *want = ramp(n), *got = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, got), 0);
    for (int64_t i = 0; i < n; i++)
        ck_assert_double_eq(got[i], want[i]);
    free(want);
    free(got);
}

/* ---- the writers -------------------------------------------------------- */

static int npy_save(const char *path, int64_t n)
{
    tg_tensor *t = ramp_tensor(n);
    int rc = tg_save_npy(t, path);
    tg_release(t);
    return rc;
}

static void npy_check(const char *path, int64_t n)
{
    tg_tensor *t = tg_load_npy(path);
    assert_ramp(t, n);
    tg_release(t);
}

/* Two parameters, "w" and "b", each the (n) ramp. */
static int npz_save(const char *path, int64_t n)
{
    tg_tensor *w = ramp_tensor(n), *b = ramp_tensor(n);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    tg_params_add(&ps, NULL, "b", b);
    int rc = tg_save_npz(&ps, path);
    tg_params_free(&ps);
    tg_release(w);
    tg_release(b);
    return rc;
}

static void npz_check(const char *path, int64_t n)
{
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(n));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(n));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    tg_params_add(&ps, NULL, "b", b);
    ck_assert_msg(tg_load_npz(&ps, path) == 0, "%s", tg_last_error());
    assert_ramp(w, n);
    assert_ramp(b, n);
    tg_params_free(&ps);
    tg_release(w);
    tg_release(b);
}

/* A line chart of the (n) ramp, without gnuplot: stem.dat and stem.gp. The
 * line saying how to draw it later goes to /dev/null, not the test log. */
static int plot_save(const char *stem, int64_t n)
{
    double *y = ramp(n);
    const tg_series s = {"loss", NULL, y, n};
    ck_assert_int_eq(setenv("TG_NO_GNUPLOT", "1", 1), 0);
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(null, 0);
    dup2(null, 2);
    close(null);
    int rc = tg_plot_lines(stem, &s, 1, "loss", "step", NULL, false, false);
    dup2(saved, 2);
    close(saved);
    unsetenv("TG_NO_GNUPLOT");
    free(y);
    return rc;
}

/* stem.dat holds n lines "i y[i]" under its comments, the last one exact. */
static void plot_check(const char *stem, int64_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s.dat", stem);
    size_t len;
    char *text = read_bytes(path, &len);
    int64_t lines = 0;
    double x = -1, y = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (*line != '#') {
            lines++;
            ck_assert_int_eq(sscanf(line, "%lf %lf", &x, &y), 2);
        }
    ck_assert_int_eq(lines, n);
    ck_assert_double_eq(x, (double)(n - 1));
    ck_assert_double_eq(y, (double)n + (double)(n - 1) / 4);
    free(text);
}

static const struct writer {
    const char *op;       /* what its errors start with */
    const char *target;   /* the path it is given, in the test's directory */
    const char *files[3]; /* the files it writes: target + each suffix */
    int (*save)(const char *target, int64_t n);
    void (*check)(const char *target, int64_t n);
} WRITERS[] = {
    {"save_npy", "weights.npy", {""}, npy_save, npy_check},
    {"save_npz", "ckpt.npz", {""}, npz_save, npz_check},
    {"plot_lines", "loss", {".dat", ".gp"}, plot_save, plot_check},
};

/* ---- what a failed save must leave -------------------------------------- */

/* The bytes of the files a writer made, to compare after a failed save. */
typedef struct snapshot {
    char path[2][1024];
    char *bytes[2];
    size_t len[2];
    int n;
} snapshot;

static void take(snapshot *s, const struct writer *w, const char *target)
{
    s->n = 0;
    for (int i = 0; w->files[i]; i++, s->n++) {
        snprintf(s->path[i], sizeof s->path[i], "%s%s", target, w->files[i]);
        s->bytes[i] = read_bytes(s->path[i], &s->len[i]);
    }
}

/* Every file as it was, byte for byte; frees the snapshot. */
static void assert_unchanged(snapshot *s)
{
    for (int i = 0; i < s->n; i++) {
        size_t len;
        char *now = read_bytes(s->path[i], &len);
        ck_assert_msg(len == s->len[i] && memcmp(now, s->bytes[i], len) == 0,
                      "%s changed: %zu bytes, was %zu", s->path[i], len,
                      s->len[i]);
        free(now);
        free(s->bytes[i]);
    }
}

/* dir holds exactly the writer's files (and want_extra more, named by the
 * test), and nothing whose name starts with '.', which is how a temporary
 * left behind would be named. */
static void assert_no_temporary(const char *dir, const struct writer *w,
                                int want_extra)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    char stray[256] = "";
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (e->d_name[0] == '.')
            snprintf(stray, sizeof stray, "%s", e->d_name);
        n++;
    }
    closedir(d);
    ck_assert_msg(!*stray, "%s: left behind: %s", dir, stray);
    int n_files = 0;
    while (w->files[n_files])
        n_files++;
    ck_assert_int_eq(n, n_files + want_extra);
}

/* The error names the op first, then the file. */
static void assert_error_names(const char *op, const char *path,
                               const char *why)
{
    const char *err = tg_last_error();
    ck_assert_msg(strncmp(err, op, strlen(op)) == 0 && err[strlen(op)] == ':',
                  "error '%s' does not start with '%s:'", err, op);
    ck_assert_msg(strstr(err, path) != NULL, "error '%s' lacks the path %s",
                  err, path);
    ck_assert_msg(strstr(err, why) != NULL, "error '%s' lacks '%s'", err, why);
}

/* ---- failures ------------------------------------------------------------ */

/* Saves n values with writer w under a file-size limit of limit bytes,
 * SIGXFSZ ignored; both restored before returning the save's result. */
static int save_limited(const struct writer *w, const char *target, int64_t n,
                        rlim_t limit)
{
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = limit;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = w->save(target, n);
    int restored = setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(restored, 0);
    return rc;
}

/* The good file first, then a failing save over it; the old bytes must
 * survive. kind 0: the limit is hit while writing (N_BIG values); kind 1: a
 * "full disk" that refuses the bytes stdio held back, at the final flush
 * (N_SMALL values, fewer bytes than its buffer). */
static void fails_under_limit(int i, int kind)
{
    const struct writer *w = &WRITERS[i];
    char dir[512], target[1024], first[1100];
    test_dir(dir, sizeof dir, kind ? "full_at_flush" : "size_limit", i);
    snprintf(target, sizeof target, "%s/%s", dir, w->target);
    snprintf(first, sizeof first, "%s%s", target, w->files[0]);
    ck_assert_msg(w->save(target, N_GOOD) == 0, "%s", tg_last_error());
    snapshot before;
    take(&before, w, target);

    int rc = kind ? save_limited(w, target, N_SMALL, 64)
                  : save_limited(w, target, N_BIG, 1024);
    ck_assert_int_eq(rc, -1);
    assert_error_names(w->op, first, "File too large");
    assert_unchanged(&before);
    assert_no_temporary(dir, w, 0);
    w->check(target, N_GOOD);
}

START_TEST(size_limit_midway_keeps_old_file) { fails_under_limit(_i, 0); }
END_TEST

START_TEST(full_at_last_flush_keeps_old_file) { fails_under_limit(_i, 1); }
END_TEST

/* Makes dir refuse new files to this process: mode 0555; and for root,
 * whom modes do not stop, an effective user and group of nobody as well,
 * with the files in dir given to nobody, so that the old file itself stays
 * writable and only the directory refuses (a save that wrote the file in
 * place would then succeed, and fail the test). Returns false, with
 * everything restored, when new files can still be made there. */
enum { NOBODY = 65534 };

static void writable_again(const char *dir, bool dropped)
{
    if (dropped) {
        ck_assert_int_eq(seteuid(0), 0);
        ck_assert_int_eq(setegid(0), 0);
    }
    ck_assert_int_eq(chmod(dir, 0700), 0);
}

static bool read_only(const char *dir, bool *dropped)
{
    *dropped = false;
    if (geteuid() == 0) {
        DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        char path[1024];
        for (struct dirent *e; (e = readdir(d));) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (e->d_name[0] != '.')
                ck_assert_int_eq(chown(path, NOBODY, NOBODY), 0);
        }
        closedir(d);
    }
    ck_assert_int_eq(chmod(dir, 0555), 0);
    if (geteuid() == 0) {
        bool gid = setegid(NOBODY) == 0, uid = gid && seteuid(NOBODY) == 0;
        if (gid && !uid)
            ck_assert_int_eq(setegid(0), 0);
        if (!uid) {
            writable_again(dir, false);
            return false;
        }
        *dropped = true;
    }
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return true;
    close(fd);
    unlink(probe);
    writable_again(dir, *dropped);
    return false;
}

START_TEST(unwritable_directory_keeps_old_file)
{
    const struct writer *w = &WRITERS[_i];
    char dir[512], target[1024], first[1100];
    test_dir(dir, sizeof dir, "read_only", _i);
    snprintf(target, sizeof target, "%s/%s", dir, w->target);
    snprintf(first, sizeof first, "%s%s", target, w->files[0]);
    ck_assert_msg(w->save(target, N_GOOD) == 0, "%s", tg_last_error());
    snapshot before;
    take(&before, w, target);

    bool dropped;
    if (!read_only(dir, &dropped)) {
        printf("check_save: unwritable_directory skipped: this process can "
               "create files in a directory of mode 0555 (as root, without "
               "the right to take another user id)\n");
        for (int i = 0; i < before.n; i++)
            free(before.bytes[i]);
        return;
    }
    int rc = w->save(target, N_SMALL);
    writable_again(dir, dropped);
    ck_assert_int_eq(rc, -1);
    assert_error_names(w->op, first, "Permission denied");
    assert_unchanged(&before);
    assert_no_temporary(dir, w, 0);
    w->check(target, N_GOOD);
}
END_TEST

/* A checkpoint past zip's limits is refused before anything is written: past
 * 4 GiB (a broadcast view declares 4 GiB of float64 and holds 8 bytes) and
 * past 65534 entries. */
START_TEST(npz_over_zip_limits_keeps_old_file)
{
    const struct writer *w = &WRITERS[1];
    char dir[512], target[1024];
    test_dir(dir, sizeof dir, "zip_limits", 0);
    snprintf(target, sizeof target, "%s/%s", dir, w->target);
    ck_assert_msg(w->save(target, N_GOOD) == 0, "%s", tg_last_error());
    snapshot before;

    tg_tensor *small = ramp_tensor(N_GOOD), *one = tg_scalar(TG_FLOAT64, 1);
    tg_tensor *huge = tg_expand(one, TG_SHAPE(INT64_C(1) << 29));
    ck_assert_ptr_nonnull(huge);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", small);
    tg_params_add(&ps, NULL, "huge", huge);
    take(&before, w, target);
    ck_assert_int_eq(tg_save_npz(&ps, target), -1);
    assert_error_names("save_npz", target, "4 GiB");
    assert_unchanged(&before);
    assert_no_temporary(dir, w, 0);
    tg_params_free(&ps);

    enum { N_ENTRIES = 65535 };
    for (int i = 0; i < N_ENTRIES; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        ck_assert_int_eq(tg_params_add(&ps, NULL, name, small), 0);
    }
    take(&before, w, target);
    ck_assert_int_eq(tg_save_npz(&ps, target), -1);
    assert_error_names("save_npz", target, "65534");
    assert_unchanged(&before);
    assert_no_temporary(dir, w, 0);
    tg_params_free(&ps);

    w->check(target, N_GOOD);
    tg_release(huge);
    tg_release(one);
    tg_release(small);
}
END_TEST

/* ---- success -------------------------------------------------------------- */

/* A new file gets 0666 less the umask (027: 0640); a save over a file puts a
 * new file (another inode) in its place with the old file's mode, and its
 * new content reads back. */
START_TEST(replace_swaps_in_a_new_file_with_the_old_mode)
{
    const struct writer *w = &WRITERS[_i];
    char dir[512], target[1024], path[1100];
    test_dir(dir, sizeof dir, "replace", _i);
    snprintf(target, sizeof target, "%s/%s", dir, w->target);
    mode_t old_umask = umask(027);
    int rc = w->save(target, N_GOOD);
    umask(old_umask);
    ck_assert_msg(rc == 0, "%s", tg_last_error());

    ino_t inode[3];
    for (int i = 0; w->files[i]; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s%s", target, w->files[i]);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0640);
        ck_assert_int_eq(chmod(path, 0604), 0);
        inode[i] = st.st_ino;
    }
    ck_assert_msg(w->save(target, N_SMALL) == 0, "%s", tg_last_error());
    for (int i = 0; w->files[i]; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s%s", target, w->files[i]);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0604);
        ck_assert_msg(st.st_ino != inode[i],
                      "%s: written in place (same inode), not replaced", path);
    }
    w->check(target, N_SMALL);
    assert_no_temporary(dir, w, 0);
}
END_TEST

/* Saving through a symbolic link replaces the file it points to and keeps
 * the link. */
START_TEST(save_through_symlink_keeps_link)
{
    const struct writer *w = &WRITERS[_i];
    char dir[512], real[1024], link[1024];
    test_dir(dir, sizeof dir, "symlink", _i);
    snprintf(real, sizeof real, "%s/%s", dir, w->target);
    snprintf(link, sizeof link, "%s/link", dir);
    ck_assert_msg(w->save(real, N_GOOD) == 0, "%s", tg_last_error());
    ck_assert_int_eq(symlink(w->target, link), 0);
    ck_assert_msg(w->save(link, N_SMALL) == 0, "%s", tg_last_error());
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    w->check(real, N_SMALL);
    assert_no_temporary(dir, w, 1);
}
END_TEST

Suite *save_suite(void)
{
    Suite *s = suite_create("save");

    TCase *fail = tcase_create("fail");
    tcase_add_unchecked_fixture(fail, scratch_setup, scratch_teardown);
    tcase_add_loop_test(fail, size_limit_midway_keeps_old_file, 0,
                        COUNT(WRITERS));
    tcase_add_loop_test(fail, full_at_last_flush_keeps_old_file, 0,
                        COUNT(WRITERS));
    tcase_add_loop_test(fail, unwritable_directory_keeps_old_file, 0,
                        COUNT(WRITERS));
    tcase_add_test(fail, npz_over_zip_limits_keeps_old_file);
    suite_add_tcase(s, fail);

    TCase *replace = tcase_create("replace");
    tcase_add_unchecked_fixture(replace, scratch_setup, scratch_teardown);
    tcase_add_loop_test(replace, replace_swaps_in_a_new_file_with_the_old_mode,
                        0, COUNT(WRITERS));
    tcase_add_loop_test(replace, save_through_symlink_keeps_link, 0, 2);
    suite_add_tcase(s, replace);
    return s;
}
