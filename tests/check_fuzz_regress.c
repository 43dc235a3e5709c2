/* The fuzzers' findings, kept: every input fuzz/fuzz_npy ever crashed on
 * (tests/fixtures/fuzz_regress_*.npy) and the fuzzer's seed corpus
 * (fuzz/corpus/npy/) go through tg_load_npy. Each must give either NULL with
 * a message naming the file, or a tensor that tg_save_npy writes back with
 * the very data bytes the file holds. Likewise fuzz/fuzz_safetensors' and
 * fuzz/fuzz_npz's (tests/fixtures/fuzz_regress_*.safetensors and *.npz,
 * fuzz/corpus/safetensors/ and npz/) through tg_read_safetensors and
 * tg_read_npz: -1 with the list untouched and a message naming the file,
 * or 0 with contiguous tensors. Seeds named ok_* must load, bad_* must
 * fail. Under --enable-sanitizers this is where a regression shows as a
 * crash. */
#include "tests.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Also declared in tests.h, with the other suites. */
Suite *fuzz_regress_suite(void);

/* The whole file at path, in a new buffer of *size bytes. */
static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 4096, n = 0, got;
    uint8_t *bytes = malloc(cap);
    ck_assert_ptr_nonnull(bytes);
    while ((got = fread(bytes + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            bytes = realloc(bytes, cap);
            ck_assert_ptr_nonnull(bytes);
        }
    }
    fclose(f);
    *size = n;
    return bytes;
}

/* Loads path and checks the outcome; want_ok is 1 (must load), 0 (must
 * fail) or -1 (either). */
static void check_npy(const char *path, int want_ok)
{
    size_t size;
    uint8_t *file = read_file(path, &size);
    tg_clear_error();
    tg_tensor *t = tg_load_npy(path);
    if (!t) {
        ck_assert_msg(want_ok != 1, "%s: should load: %s", path,
                      tg_last_error());
        char prefix[4200];
        snprintf(prefix, sizeof prefix, "load_npy: %s: ", path);
        ck_assert_msg(strncmp(tg_last_error(), prefix, strlen(prefix)) == 0,
                      "%s: error '%s' does not name the file", path,
                      tg_last_error());
        free(file);
        return;
    }
    ck_assert_msg(want_ok != 0, "%s: should fail, loaded a %d-d tensor", path,
                  tg_ndim(t));
    ck_assert(tg_numel(t) == 0 || tg_is_contiguous(t));
    size_t nbytes = (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    ck_assert_msg(nbytes < size, "%s: %zu data bytes in a %zu-byte file", path,
                  nbytes, size);
    /* Saved again, the data must be the file's, byte for byte (an int64
     * beyond 2^53 once came back rounded). */
    char saved[] = "/tmp/tg_fuzz_regress_XXXXXX";
    int fd = mkstemp(saved);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(tg_save_npy(t, saved) == 0, "%s: save: %s", path,
                  tg_last_error());
    size_t saved_size;
    uint8_t *again = read_file(saved, &saved_size);
    remove(saved);
    ck_assert_msg(saved_size > nbytes &&
                      memcmp(again + saved_size - nbytes, file + size - nbytes,
                             nbytes) == 0,
                  "%s: saved data differs from the file's", path);
    free(again);
    free(file);
    tg_release(t);
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* path through a whole-file reader (tg_read_safetensors, tg_read_npz)
 * whose errors start "<op>: <path>". */
static void check_reader(const char *path, int want_ok, const char *op,
                         int (*read)(const char *, tg_params *))
{
    tg_params ps;
    tg_params_init(&ps);
    tg_clear_error();
    if (read(path, &ps) != 0) {
        ck_assert_msg(want_ok != 1, "%s: should load: %s", path,
                      tg_last_error());
        ck_assert_int_eq(ps.n, 0);
        char prefix[4200];
        snprintf(prefix, sizeof prefix, "%s: %s", op, path);
        ck_assert_msg(strncmp(tg_last_error(), prefix, strlen(prefix)) == 0,
                      "%s: error '%s' does not name the file", path,
                      tg_last_error());
        return;
    }
    ck_assert_msg(want_ok != 0, "%s: should fail, read %d tensors", path, ps.n);
    for (int i = 0; i < ps.n; i++)
        ck_assert(tg_numel(ps.items[i].t) == 0 ||
                  tg_is_contiguous(ps.items[i].t));
    tg_params_release(&ps);
}

static void check_safetensors(const char *path, int want_ok)
{
    check_reader(path, want_ok, "read_safetensors", tg_read_safetensors);
}

static void check_npz(const char *path, int want_ok)
{
    check_reader(path, want_ok, "read_npz", tg_read_npz);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Checks every file in dir whose name starts with prefix and ends with
 * suffix; returns how many. */
static int check_dir(const char *dir, const char *prefix, const char *suffix,
                     void (*check)(const char *, int))
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !starts_with(e->d_name, prefix) ||
            !ends_with(e->d_name, suffix))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        check(path, starts_with(e->d_name, "ok_")    ? 1
                    : starts_with(e->d_name, "bad_") ? 0
                                                     : -1);
        n++;
    }
    closedir(d);
    return n;
}

#define CORPUS TG_FIXTURES "/../../fuzz/corpus/"

START_TEST(crash_inputs)
{
    ck_assert_int_gt(check_dir(TG_FIXTURES, "fuzz_regress_", ".npy", check_npy),
                     0);
}
END_TEST

START_TEST(seed_corpus)
{
    ck_assert_int_gt(check_dir(CORPUS "npy", "", "", check_npy), 0);
}
END_TEST

START_TEST(safetensors_inputs)
{
    check_dir(TG_FIXTURES, "fuzz_regress_", ".safetensors", check_safetensors);
    ck_assert_int_gt(check_dir(CORPUS "safetensors", "", "", check_safetensors),
                     0);
}
END_TEST

START_TEST(npz_inputs)
{
    check_dir(TG_FIXTURES, "fuzz_regress_", ".npz", check_npz);
    ck_assert_int_gt(check_dir(CORPUS "npz", "", "", check_npz), 0);
}
END_TEST

Suite *fuzz_regress_suite(void)
{
    Suite *s = suite_create("fuzz_regress");
    TCase *tc = tcase_create("npy");
    tcase_add_test(tc, crash_inputs);
    tcase_add_test(tc, seed_corpus);
    suite_add_tcase(s, tc);
    TCase *formats = tcase_create("formats");
    tcase_add_test(formats, safetensors_inputs);
    tcase_add_test(formats, npz_inputs);
    suite_add_tcase(s, formats);
    return s;
}
