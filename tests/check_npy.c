/* .npy files: numpy's own files load with their values, tg_save_npy writes
 * what np.save writes byte for byte and round-trips every dtype and shape,
 * and malformed files fail with a message naming the file and the problem.
 * The fixtures come from tests/fixtures/gen_npy.py. */
#include "tests.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void write_bytes(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* The whole file, malloc'd; its length in *len. */
static char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    ck_assert_msg(feof(f), "%s is larger than a fixture should be", path);
    fclose(f);
    return buf;
}

/* Writes a .npy file of format major.0 with this header text, unpadded, and
 * data_len bytes of data (zeros when data is NULL). */
static void write_npy(const char *path, int major, const char *header,
                      const char *data, size_t data_len)
{
    static const char zeros[64];
    size_t hlen = strlen(header), prefix = major == 1 ? 10 : 12;
    ck_assert_uint_le(data_len, sizeof zeros);
    char *file = malloc(prefix + hlen + data_len);
    memcpy(file, "\x93NUMPY", 6);
    file[6] = (char)major;
    file[7] = 0;
    for (size_t i = 8; i < prefix; i++)
        file[i] = (char)(hlen >> 8 * (i - 8));
    memcpy(file + prefix, header, hlen);
    memcpy(file + prefix + hlen, data ? data : zeros, data_len);
    write_bytes(path, file, prefix + hlen + data_len);
    free(file);
}

/* ---- helpers ------------------------------------------------------------ */

/* t's elements as doubles (caller frees). */
static double *values(const tg_tensor *t)
{
    double *v = malloc(sizeof(double) * (size_t)(tg_numel(t) + 1));
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    return v;
}

static void assert_values(const tg_tensor *t, const double *want, int64_t n)
{
    ck_assert_int_eq(tg_numel(t), n);
    double *got = values(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %lld: got %.17g, want %.17g",
                      (long long)i, got[i], want[i]);
    free(got);
}

/* A tensor whose element i is i * 0.37 - 1.1 (as a float in float32), or
 * i % 3 == 0 for bool: distinct values, so a misplaced one shows. */
static tg_tensor *counting(tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_zeros(dt, ndim, shape);
    ck_assert_ptr_nonnull(t);
    int64_t n = tg_numel(t), idx[TG_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        double v = dt == TG_BOOL ? i % 3 == 0 : (double)i * 0.37 - 1.1;
        ck_assert_int_eq(tg_set(t, idx, v), 0);
        for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--)
            idx[d] = 0;
    }
    return t;
}

/* Asserts that a and b hold the same dtype, shape and element bytes. */
static void assert_identical(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_dtype_of(a), tg_dtype_of(b));
    assert_shape(a, tg_ndim(b), tg_shape(b));
    size_t n = (size_t)tg_numel(a) * tg_dtype_size(tg_dtype_of(a));
    char *pa = malloc(n + 1), *pb = malloc(n + 1);
    ck_assert_int_eq(tg_copy_out(a, tg_dtype_of(a), pa), 0);
    ck_assert_int_eq(tg_copy_out(b, tg_dtype_of(b), pb), 0);
    ck_assert_int_eq(memcmp(pa, pb, n), 0);
    free(pa);
    free(pb);
}

/* ---- loading numpy's files ---------------------------------------------- */

START_TEST(load_f4)
{
    tg_tensor *t = load_fixture("npy_f4.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT32);
    assert_shape(t, TG_SHAPE(2, 3));
    float got[6];
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT32, got), 0);
    const float want[6] = {1.5f, -2.25f, 3.0f, 0.1f, 1e30f, -0.0f};
    ck_assert_int_eq(memcmp(got, want, sizeof got), 0);
    ck_assert(signbit(got[5]));
    tg_release(t);
}
END_TEST

START_TEST(load_f8_special_values)
{
    tg_tensor *t = load_fixture("npy_f8.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT64);
    assert_shape(t, TG_SHAPE(6));
    double *v = values(t);
    ck_assert(isnan(v[0]));
    ck_assert(isinf(v[1]) && v[1] > 0);
    ck_assert(isinf(v[2]) && v[2] < 0);
    ck_assert(v[3] == 0 && signbit(v[3]));
    ck_assert(v[4] == 1e-300);
    ck_assert(v[5] == 5e-324); /* the smallest subnormal */
    free(v);
    tg_release(t);
}
END_TEST

START_TEST(load_b1)
{
    tg_tensor *t = load_fixture("npy_b1.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_BOOL);
    assert_values(t, (const double[]){1, 0, 0, 1}, 4);
    tg_release(t);
}
END_TEST

START_TEST(load_u1_as_bool)
{
    tg_tensor *t = load_fixture("npy_u1.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_BOOL);
    assert_shape(t, TG_SHAPE(2, 2));
    assert_values(t, (const double[]){0, 1, 1, 1}, 4);
    tg_release(t);
}
END_TEST

START_TEST(load_scalar)
{
    tg_tensor *t = load_fixture("npy_scalar.npy");
    ck_assert_int_eq(tg_ndim(t), 0);
    ck_assert(tg_item(t) == 2.5);
    tg_release(t);
}
END_TEST

START_TEST(load_zero_size)
{
    tg_tensor *t = load_fixture("npy_empty.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT32);
    assert_shape(t, TG_SHAPE(0, 3));
    ck_assert_int_eq(tg_numel(t), 0);
    tg_release(t);
}
END_TEST

START_TEST(load_5d)
{
    tg_tensor *t = load_fixture("npy_5d.npy");
    assert_shape(t, TG_SHAPE(2, 1, 3, 1, 2));
    double want[12];
    for (int i = 0; i < 12; i++)
        want[i] = i / 4.0;
    assert_values(t, want, 12);
    tg_release(t);
}
END_TEST

START_TEST(load_format_2)
{
    tg_tensor *t = load_fixture("npy_v2.npy");
    assert_shape(t, TG_SHAPE(2, 2));
    assert_values(t, (const double[]){1, 2, 3, 4}, 4);
    tg_release(t);
}
END_TEST

START_TEST(load_format_3)
{
    tg_tensor *t = load_fixture("npy_v3.npy");
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT32);
    assert_shape(t, TG_SHAPE(3));
    assert_values(t, (const double[]){-1, 0, 1}, 3);
    tg_release(t);
}
END_TEST

/* Headers numpy would read though np.save never writes them so. */
static const struct {
    const char *what, *header;
    int ndim;
    int64_t shape[2];
} GOOD_HEADERS[] = {
    {"double quotes, no trailing comma",
     "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2,)}",
     1,
     {2}},
    {"keys reordered, no spaces",
     "{'shape':(2,),'fortran_order':False,'descr':'<f8'}",
     1,
     {2}},
    {"whitespace everywhere",
     " \t{ 'fortran_order' : False ,\n'shape' : ( 2 , ) ,\r\n 'descr' : "
     "'<f8' , }  \n",
     1,
     {2}},
    {"mixed quotes",
     "{'descr': \"<f8\", 'fortran_order': False, "
     "'shape': (2,), }\n",
     1,
     {2}},
    {"trailing comma in a 2-tuple",
     "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2,), }",
     2,
     {1, 2}},
};

START_TEST(load_accepts_header_variants)
{
    const double data[2] = {1.5, -2.0};
    const char *path = scratch_path("good.npy");
    write_npy(path, 1, GOOD_HEADERS[_i].header, (const char *)data,
              sizeof data);
    tg_tensor *t = tg_load_npy(path);
    ck_assert_msg(t != NULL, "%s: %s", GOOD_HEADERS[_i].what, tg_last_error());
    assert_shape(t, GOOD_HEADERS[_i].ndim, GOOD_HEADERS[_i].shape);
    assert_values(t, data, 2);
    tg_release(t);
}
END_TEST

/* ---- saving ------------------------------------------------------------- */

/* numpy's files, loaded and saved again, must come back byte for byte: the
 * header text, its padding and the data all match np.save. */
static const char *const NUMPY_SAVED[] = {
    "npy_f4.npy",    "npy_f8.npy", "npy_b1.npy",     "npy_scalar.npy",
    "npy_empty.npy", "npy_5d.npy", "npy_growth.npy",
};

START_TEST(save_matches_np_save)
{
    const char *name = NUMPY_SAVED[_i];
    tg_tensor *t = load_fixture(name);
    ck_assert_int_eq(tg_save_npy(t, scratch_path(name)), 0);
    size_t want_len, got_len;
    char *want = read_bytes(fixture_path(name), &want_len);
    char *got = read_bytes(scratch_path(name), &got_len);
    ck_assert_msg(got_len == want_len && memcmp(got, want, got_len) == 0,
                  "%s: saved file differs from numpy's", name);
    free(want);
    free(got);
    tg_release(t);
}
END_TEST

static const struct {
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
} ROUND_TRIPS[] = {
    {TG_FLOAT32, 2, {3, 4}},
    {TG_FLOAT64, 1, {7}},
    {TG_BOOL, 2, {2, 3}},
    {TG_FLOAT64, 0, {0}},
    {TG_FLOAT32, 5, {2, 1, 3, 1, 2}},
    {TG_FLOAT64, 2, {0, 3}},
    {TG_BOOL, 1, {0}},
    {TG_FLOAT64, 8, {1, 2, 1, 2, 1, 2, 1, 2}},
};

START_TEST(save_load_round_trip)
{
    tg_tensor *t = counting(ROUND_TRIPS[_i].dtype, ROUND_TRIPS[_i].ndim,
                            ROUND_TRIPS[_i].shape);
    ck_assert_int_eq(tg_save_npy(t, scratch_path("rt.npy")), 0);
    tg_tensor *back = tg_load_npy(scratch_path("rt.npy"));
    ck_assert_msg(back != NULL, "%s", tg_last_error());
    assert_identical(back, t);
    tg_release(back);
    tg_release(t);
}
END_TEST

START_TEST(save_transposed_view_in_c_order)
{
    tg_tensor *t = counting(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *tt = tg_transpose(t, 0, 1); /* (3,2), strides (1,3) */
    ck_assert_ptr_nonnull(tt);
    ck_assert(!tg_is_contiguous(tt));
    ck_assert_int_eq(tg_save_npy(tt, scratch_path("tt.npy")), 0);
    tg_tensor *back = tg_load_npy(scratch_path("tt.npy"));
    ck_assert_msg(back != NULL, "%s", tg_last_error());
    assert_shape(back, TG_SHAPE(3, 2));
    double *v = values(t);
    assert_values(back, (const double[]){v[0], v[3], v[1], v[4], v[2], v[5]},
                  6);
    free(v);
    tg_release(back);
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(save_null_keeps_first_error)
{
    ASSERT_FAILS_WITH(tg_load_npy(NULL), "load_npy: path is NULL");
    ck_assert_int_eq(tg_save_npy(NULL, scratch_path("null.npy")), -1);
    ck_assert_str_eq(tg_last_error(), "load_npy: path is NULL");
    ck_assert_int_ne(access(scratch_path("null.npy"), F_OK), 0);
}
END_TEST

START_TEST(save_to_missing_dir_fails)
{
    tg_tensor *t = tg_scalar(TG_FLOAT32, 1);
    const char *path = scratch_path("no/such/dir.npy");
    ck_assert_int_eq(tg_save_npy(t, path), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "save_npy"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), path));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "No such file or directory"));
    tg_release(t);
}
END_TEST

/* A file size limit makes the write fail midway (EFBIG; SIGXFSZ is ignored so
 * the process lives), leaving a partial file that save must remove. The
 * limit and the handler are restored: with CK_FORK=no this is the runner. */
START_TEST(save_removes_partial_file)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(1000));
    const char *path = scratch_path("partial.npy");
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 256;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = tg_save_npy(t, path);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "save_npy"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "write failed"));
    ck_assert_int_ne(access(path, F_OK), 0);
    tg_release(t);
}
END_TEST

/* ---- rejecting malformed files ------------------------------------------ */

/* A header for dtype d, fortran_order f and shape s. */
#define HDR(d, f, s)                                                           \
    "{'descr': '" d "', 'fortran_order': " f ", 'shape': " s ", }"
/* 2**62: two such dims overflow int64 elements, let alone bytes. */
#define TWO_62 "4611686018427387904"
/* A whole file given as a string literal. */
#define RAW(s) .raw = s, .raw_len = sizeof s - 1

static const struct {
    const char *raw; /* the whole file, raw_len bytes; or, when NULL, */
    size_t raw_len;
    const char *header; /* a format 1.0 file with this header */
    const char *data;   /* and data_len bytes of data (zeros if NULL) */
    size_t data_len;
    const char *needle; /* what the error must say */
} BAD_FILES[] = {
    {RAW("\x93NUM"), .needle = "too short"},
    {RAW("\x93NUMPY\x02\x00\x02\x00"), .needle = "too short"},
    {RAW("\x93NUMPX\x01\x00\x02\x00{}"), .needle = "bad magic"},
    {RAW("\x93NUMPY\x09\x00\x02\x00{}"), .needle = "version 9.0"},
    {RAW("\x93NUMPY\x01\x00\xff\xff{}"), .needle = "runs past the end"},
    {RAW("\x93NUMPY\x03\x00\x00\x00\x00\x80{}"), .needle = "runs past the end"},
    {.header = HDR(">f8", "False", "(2,)"),
     .data_len = 16,
     .needle = "big-endian dtype '>f8'"},
    {.header = HDR("<i4", "False", "(2,)"),
     .data_len = 8,
     .needle = "unsupported dtype '<i4'"},
    {.header = HDR("<f8", "True", "(2, 2)"),
     .data_len = 32,
     .needle = "Fortran-order"},
    {.header = HDR("<f8", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"),
     .data_len = 8,
     .needle = "more than 8 dims"},
    {.header = HDR("<f8", "False", "(-3,)"), .needle = "negative dim -3"},
    {.header = HDR("<f8", "False", "(" TWO_62 ", " TWO_62 ")"),
     .needle = "shape (4611686018427387904,4611686018427387904) has more "
               "elements than a tensor can hold"},
    {.header = HDR("<f8", "False", "(99999999999999999999,)"),
     .needle = "overflows int64"},
    /* Claims 8 TB: rejected against the file size, before tg__new could
     * try to allocate it (whose error would say "out of memory"). */
    {.header = HDR("<f8", "False", "(1000000000000,)"),
     .data_len = 8,
     .needle = "needs 8000000000000 bytes"},
    {.header = HDR("<f8", "False", "(2,)"),
     .data_len = 15,
     .needle = "truncated"},
    {.header = HDR("<f8", "False", "(2,)"),
     .data_len = 17,
     .needle = "trailing bytes"},
    {.header = "hello, world", .needle = "not a dict"},
    {.header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)",
     .data_len = 16,
     .needle = "unterminated"},
    {.header = "{'descr': '<f8", .needle = "unterminated"},
    {.header = "{'descr': '<f8', 'shape': (2,), }",
     .data_len = 16,
     .needle = "lacks the key 'fortran_order'"},
    {.header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), "
               "'extra': 1}",
     .data_len = 16,
     .needle = "unknown key 'extra'"},
    {.header = "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, "
               "'shape': (2,)}",
     .data_len = 16,
     .needle = "duplicate key 'descr'"},
    {.header = HDR("<f8", "False", "(2)"),
     .data_len = 16,
     .needle = "not a tuple"},
    {.header = HDR("<f8", "0", "(2,)"),
     .data_len = 16,
     .needle = "True or False"},
    {.header = "{'descr': [('a', '<f8')], 'fortran_order': False, "
               "'shape': (2,)}",
     .data_len = 16,
     .needle = "expected a dtype string"},
    {.header = "{'descr' '<f8'}", .needle = "expected ':'"},
    {.header = HDR("<f8", "False", "(2,)") " x",
     .data_len = 16,
     .needle = "text after the dict"},
    {.header = "{'de\\x73cr': '<f8'}", .needle = "unsupported character"},
    {.header = HDR("|u1", "False", "(3,)"),
     .data = "\1\0\2",
     .data_len = 3,
     .needle = "'|u1' element 2 is 2"},
    {.header = HDR("|b1", "False", "(1,)"),
     .data = "\xff",
     .data_len = 1,
     .needle = "'|b1' element 0 is 255"},
};

START_TEST(load_rejects_malformed)
{
    const char *path = scratch_path("bad.npy");
    if (BAD_FILES[_i].raw)
        write_bytes(path, BAD_FILES[_i].raw, BAD_FILES[_i].raw_len);
    else
        write_npy(path, 1, BAD_FILES[_i].header, BAD_FILES[_i].data,
                  BAD_FILES[_i].data_len);
    tg_clear_error();
    ASSERT_FAILS_WITH(tg_load_npy(path), BAD_FILES[_i].needle);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "load_npy: "));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), path));
    ck_assert_ptr_null(strchr(tg_last_error(), '\n'));
}
END_TEST

/* A shape with a 0 holds nothing, whatever its other dims: (2^62, 2^62, 0)
 * loads (its count is 0, never 2^124), where the byte size used to be
 * multiplied up dim by dim and overflowed before the 0. */
START_TEST(load_empty_with_huge_dims)
{
    const char *path = scratch_path("empty.npy");
    write_npy(path, 1, HDR("<f8", "False", "(" TWO_62 ", " TWO_62 ", 0)"), NULL,
              0);
    tg_tensor *t = tg_load_npy(path);
    ck_assert_msg(t != NULL, "%s", tg_last_error());
    int64_t two_62 = (int64_t)1 << 62;
    assert_shape(t, TG_SHAPE(two_62, two_62, 0));
    ck_assert_int_eq(tg_numel(t), 0);
    tg_release(t);
}
END_TEST

START_TEST(load_rejects_missing_file)
{
    ASSERT_FAILS_WITH(tg_load_npy(scratch_path("missing.npy")),
                      "cannot open: No such file or directory");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "load_npy: "));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), scratch_path("missing.npy")));
}
END_TEST

START_TEST(load_rejects_directory)
{
    ASSERT_FAILS_WITH(tg_load_npy(scratch_dir), "not a regular file");
}
END_TEST

/* The loaders must not wait on a FIFO that nobody writes: opening one for
 * reading blocks until a writer comes. Each load runs in a child with an
 * alarm, so a loader that blocks fails the test instead of hanging the
 * suite; the child exits 0 when the load failed promptly and said why. */
static void assert_refuses_fifo(bool (*load)(const char *path), const char *op)
{
    const char *path = scratch_path("fifo");
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* the default action, not a handler inherited from the runner */
        signal(SIGALRM, SIG_DFL);
        alarm(2);
        bool refused = load(path) && strstr(tg_last_error(), op) &&
                       strstr(tg_last_error(), path) &&
                       strstr(tg_last_error(), "not a regular file");
        if (!refused)
            fprintf(stderr, "%s of a FIFO: '%s'\n", op, tg_last_error());
        _exit(refused ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    unlink(path);
    ck_assert_msg(!WIFSIGNALED(status) || WTERMSIG(status) != SIGALRM,
                  "%s blocked on a FIFO for 2 s", op);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s of a FIFO did not fail with 'not a regular file'", op);
}

/* True when tg_load_npy(path) failed. */
static bool npy_load_fails(const char *path)
{
    tg_tensor *t = tg_load_npy(path);
    tg_release(t);
    return t == NULL;
}

/* True when tg_load_npz(path) into a one-parameter list failed. */
static bool npz_load_fails(const char *path)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2));
    tg_params ps;
    tg_params_init(&ps);
    bool failed =
        tg_params_add(&ps, NULL, "x", x) < 0 || tg_load_npz(&ps, path) < 0;
    tg_params_free(&ps);
    tg_release(x);
    return failed;
}

START_TEST(load_refuses_fifo)
{
    assert_refuses_fifo(npy_load_fails, "load_npy");
    assert_refuses_fifo(npz_load_fails, "load_npz");
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static TCase *tcase_with_scratch(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, scratch_setup, scratch_teardown);
    return tc;
}

Suite *npy_suite(void)
{
    Suite *s = suite_create("npy");

    TCase *load = tcase_with_scratch("load");
    tcase_add_test(load, load_f4);
    tcase_add_test(load, load_f8_special_values);
    tcase_add_test(load, load_b1);
    tcase_add_test(load, load_u1_as_bool);
    tcase_add_test(load, load_scalar);
    tcase_add_test(load, load_zero_size);
    tcase_add_test(load, load_5d);
    tcase_add_test(load, load_format_2);
    tcase_add_test(load, load_format_3);
    tcase_add_loop_test(load, load_accepts_header_variants, 0,
                        COUNT(GOOD_HEADERS));
    tcase_add_test(load, load_empty_with_huge_dims);
    suite_add_tcase(s, load);

    TCase *save = tcase_with_scratch("save");
    tcase_add_loop_test(save, save_matches_np_save, 0, COUNT(NUMPY_SAVED));
    tcase_add_loop_test(save, save_load_round_trip, 0, COUNT(ROUND_TRIPS));
    tcase_add_test(save, save_transposed_view_in_c_order);
    tcase_add_test(save, save_null_keeps_first_error);
    tcase_add_test(save, save_to_missing_dir_fails);
    tcase_add_test(save, save_removes_partial_file);
    suite_add_tcase(s, save);

    TCase *errors = tcase_with_scratch("errors");
    tcase_add_loop_test(errors, load_rejects_malformed, 0, COUNT(BAD_FILES));
    tcase_add_test(errors, load_rejects_missing_file);
    tcase_add_test(errors, load_rejects_directory);
    tcase_add_test(errors, load_refuses_fifo);
    suite_add_tcase(s, errors);

    return s;
}
