/* The random number generators against numpy, bit for bit (tolerance 0): the
 * legacy MT19937 generator (np.random.seed / randn / rand) and default_rng's
 * PCG64 with its ziggurat normals. tests/fixtures/gen_rng.py writes the
 * fixtures and says what each holds. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t legacy_seeds[] = {0, 1, 42, 1337, 4294967295U};
static const uint64_t pcg64_seeds[] = {0, 1, 12345};
/* The last one has two 32-bit words of entropy, where the others have one. */
static const uint64_t pcg64_random_seeds[] = {0, 1, 12345,
                                              9223372036854788153ULL};

#define COUNT(a)   ((int)(sizeof(a) / sizeof((a)[0])))
#define N_NORMALS  200000 /* per seed, as gen_rng.py draws them */
#define STRIDE     97     /* gen_rng.py keeps every 97th */
#define ZIGGURAT_R 3.6541528853610088

/* A fixture name with a seed in it: "rng_<kind>_s<seed><suffix>.npy", e.g.
 * seeded_name("legacy_randn", 42, "") is "rng_legacy_randn_s42.npy". */
static const char *seeded_name(const char *kind, uint64_t seed,
                               const char *suffix)
{
    static char name[128];
    snprintf(name, sizeof name, "rng_%s_s%llu%s.npy", kind,
             (unsigned long long)seed, suffix);
    return name;
}

/* A fixture's elements as float64, in a malloc'd array of n. */
static double *load_doubles(const char *name, int64_t n)
{
    tg_tensor *t = load_fixture(name);
    ck_assert_int_eq(tg_numel(t), n);
    double *values = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, values), 0);
    tg_release(t);
    return values;
}

/* Asserts got[i] and want[i] have the same bits, for i < n. */
static void assert_same_doubles(const double *got, const double *want,
                                int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof(double)) == 0,
                      "%s, element %lld: got %.17g, want %.17g", what,
                      (long long)i, got[i], want[i]);
}

/* Asserts t is a new tensor of dtype dt equal to the fixture, exactly. */
static void assert_matches_fixture(tg_tensor *t, tg_dtype dt, const char *name)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_dtype_of(t), dt);
    tg_tensor *want = load_fixture(name);
    assert_close(t, want, 0.0);
    tg_release(want);
    tg_release(t);
}

/* ---- legacy ------------------------------------------------------------ */

START_TEST(test_legacy_randn)
{
    tg_rng r;
    tg_rng_seed(&r, legacy_seeds[_i]);
    tg_tensor *t = tg_randn(&r, TG_FLOAT64, TG_SHAPE(8, 125));
    assert_matches_fixture(t, TG_FLOAT64,
                           seeded_name("legacy_randn", legacy_seeds[_i], ""));
}
END_TEST

START_TEST(test_legacy_rand)
{
    tg_rng r;
    tg_rng_seed(&r, legacy_seeds[_i]);
    tg_tensor *t = tg_rand(&r, TG_FLOAT64, TG_SHAPE(8, 125));
    assert_matches_fixture(t, TG_FLOAT64,
                           seeded_name("legacy_rand", legacy_seeds[_i], ""));
}
END_TEST

/* randn(3,5) leaves the 16th normal cached; rand(7) must not touch it, and
 * randn(4) must start with it. */
START_TEST(test_legacy_mixed_calls_carry_the_cached_gauss)
{
    tg_rng r;
    tg_rng_seed(&r, 2024);
    tg_tensor *parts[3] = {tg_randn(&r, TG_FLOAT64, TG_SHAPE(3, 5)),
                           tg_rand(&r, TG_FLOAT64, TG_SHAPE(7)),
                           tg_randn(&r, TG_FLOAT64, TG_SHAPE(4))};
    double got[26];
    int64_t at = 0;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(tg_copy_out(parts[k], TG_FLOAT64, got + at), 0);
        at += tg_numel(parts[k]);
        tg_release(parts[k]);
    }
    ck_assert_int_eq(at, 26);
    double *want = load_doubles("rng_legacy_mixed.npy", 26);
    assert_same_doubles(got, want, 26, "randn(3,5), rand(7), randn(4)");
    free(want);
}
END_TEST

/* One draw at a time gives the same stream as a tensor, and seeding again
 * drops a pending cached normal: after an odd count, a reseed restarts the
 * stream at its first value, not at the cached second one. */
START_TEST(test_legacy_scalars_and_reseed)
{
    double *normals = load_doubles("rng_legacy_randn_s42.npy", 1000);
    double *uniforms = load_doubles("rng_legacy_rand_s42.npy", 1000);
    tg_rng r;
    tg_rng_seed(&r, 42);
    double got[3];
    for (int i = 0; i < 3; i++)
        got[i] = tg_rng_normal(&r);
    assert_same_doubles(got, normals, 3, "tg_rng_normal");
    tg_rng_seed(&r, 42);
    got[0] = tg_rng_normal(&r);
    assert_same_doubles(got, normals, 1, "first normal after a reseed");
    tg_rng_seed(&r, 42);
    for (int i = 0; i < 3; i++)
        got[i] = tg_rng_uniform(&r);
    assert_same_doubles(got, uniforms, 3, "tg_rng_uniform");
    free(normals);
    free(uniforms);
}
END_TEST

/* float32 tensors hold the float64 draws rounded to nearest. */
START_TEST(test_legacy_float32)
{
    tg_rng r;
    tg_rng_seed(&r, 7);
    assert_matches_fixture(tg_randn(&r, TG_FLOAT32, TG_SHAPE(6, 7)), TG_FLOAT32,
                           "rng_legacy_randn_f32.npy");
    tg_rng_seed(&r, 7);
    assert_matches_fixture(tg_rand(&r, TG_FLOAT32, TG_SHAPE(6, 7)), TG_FLOAT32,
                           "rng_legacy_rand_f32.npy");
}
END_TEST

/* A 0-d tensor takes one draw and an empty one takes none. */
START_TEST(test_legacy_scalar_and_empty_shapes)
{
    double *normals = load_doubles("rng_legacy_randn_s42.npy", 1000);
    tg_rng r;
    tg_rng_seed(&r, 42);
    tg_tensor *scalar = tg_randn(&r, TG_FLOAT64, 0, NULL);
    tg_tensor *empty = tg_randn(&r, TG_FLOAT64, TG_SHAPE(0, 3));
    assert_shape(scalar, 0, NULL);
    assert_shape(empty, 2, (const int64_t[]){0, 3});
    double got[2] = {tg_item(scalar), tg_rng_normal(&r)};
    assert_same_doubles(got, normals, 2, "randn(), randn(0,3), one normal");
    tg_release(scalar);
    tg_release(empty);
    free(normals);
}
END_TEST

/* ---- PCG64 ------------------------------------------------------------- */

START_TEST(test_pcg64_random)
{
    uint64_t seed = pcg64_random_seeds[_i];
    double *want = load_doubles(seeded_name("pcg64_random", seed, ""), 1000);
    tg_pcg64 g;
    tg_pcg64_seed(&g, seed);
    double got[1000];
    for (int i = 0; i < 1000; i++)
        got[i] = tg_pcg64_uniform(&g);
    assert_same_doubles(got, want, 1000, "default_rng(seed).random(1000)");
    free(want);
}
END_TEST

/* The digest gen_rng.py takes of a stream's float64 bit patterns: a bijection
 * per step, so one wrong bit in one sample changes it. */
static uint64_t digest_step(uint64_t h, double sample)
{
    uint64_t bits;
    memcpy(&bits, &sample, sizeof bits);
    h = (h ^ bits) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

/* 200000 normals: every layer of the ziggurat, its wedges and its tail. The
 * every-97th subset says where a stream goes wrong, the digest checks all of
 * it, and the count beyond R proves the tail was part of what we checked. */
START_TEST(test_pcg64_normal_stream)
{
    uint64_t seed = pcg64_seeds[_i];
    int64_t n_kept = (N_NORMALS + STRIDE - 1) / STRIDE;
    double *want = load_doubles(seeded_name("pcg64_normal", seed, ""), n_kept);
    double *want_digest =
        load_doubles(seeded_name("pcg64_normal", seed, "_digest"), 2);
    double *kept = malloc(sizeof(double) * (size_t)n_kept);
    tg_pcg64 g;
    tg_pcg64_seed(&g, seed);
    uint64_t h = 0;
    int n_tail = 0;
    for (int i = 0; i < N_NORMALS; i++) {
        double x = tg_pcg64_normal(&g);
        if (i % STRIDE == 0)
            kept[i / STRIDE] = x;
        h = digest_step(h, x);
        n_tail += fabs(x) > ZIGGURAT_R;
    }
    assert_same_doubles(kept, want, n_kept, "every 97th normal");
    uint64_t want_h =
        ((uint64_t)want_digest[0] << 32) | (uint64_t)want_digest[1];
    ck_assert_msg(h == want_h, "digest %016llx, want %016llx",
                  (unsigned long long)h, (unsigned long long)want_h);
    ck_assert_int_gt(n_tail, 20);
    free(kept);
    free(want);
    free(want_digest);
}
END_TEST

/* Normals and uniforms draw from one stream, with nothing cached between. */
START_TEST(test_pcg64_mixed_calls)
{
    double *want = load_doubles("rng_pcg64_mixed.npy", 12);
    tg_pcg64 g;
    tg_pcg64_seed(&g, 1);
    double got[12];
    for (int i = 0; i < 12; i++)
        got[i] = i < 5 || i >= 8 ? tg_pcg64_normal(&g) : tg_pcg64_uniform(&g);
    assert_same_doubles(got, want, 12, "normal(5), random(3), normal(4)");
    free(want);
}
END_TEST

START_TEST(test_pcg64_randn)
{
    tg_pcg64 g;
    tg_pcg64_seed(&g, 12345);
    tg_tensor *t = tg_pcg64_randn(&g, TG_FLOAT64, TG_SHAPE(4, 5, 6));
    assert_shape(t, 3, (const int64_t[]){4, 5, 6});
    assert_matches_fixture(t, TG_FLOAT64, "rng_pcg64_randn_s12345.npy");
    tg_pcg64_seed(&g, 12345);
    assert_matches_fixture(tg_pcg64_randn(&g, TG_FLOAT32, TG_SHAPE(4, 5, 6)),
                           TG_FLOAT32, "rng_pcg64_randn_s12345_f32.npy");
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

START_TEST(test_null_generator)
{
    ASSERT_FAILS_WITH(tg_randn(NULL, TG_FLOAT64, TG_SHAPE(2)), "randn:");
    ASSERT_FAILS_WITH(tg_rand(NULL, TG_FLOAT64, TG_SHAPE(2)), "rand:");
    ASSERT_FAILS_WITH(tg_pcg64_randn(NULL, TG_FLOAT64, TG_SHAPE(2)),
                      "pcg64_randn:");
    ck_assert(isnan(tg_rng_uniform(NULL)));
    ck_assert_str_eq(tg_last_error(), "rng_uniform: rng is NULL");
    ck_assert(isnan(tg_rng_normal(NULL)));
    ck_assert_str_eq(tg_last_error(), "rng_normal: rng is NULL");
    ck_assert(isnan(tg_pcg64_uniform(NULL)));
    ck_assert_str_eq(tg_last_error(), "pcg64_uniform: generator is NULL");
    ck_assert(isnan(tg_pcg64_normal(NULL)));
    ck_assert_str_eq(tg_last_error(), "pcg64_normal: generator is NULL");
    tg_rng_seed(NULL, 0);
    ck_assert_str_eq(tg_last_error(), "rng_seed: rng is NULL");
    tg_pcg64_seed(NULL, 0);
    ck_assert_str_eq(tg_last_error(), "pcg64_seed: generator is NULL");
}
END_TEST

/* A failed call draws nothing: the stream goes on where it was. */
START_TEST(test_bad_dtype_and_shape)
{
    double *normals = load_doubles("rng_legacy_randn_s42.npy", 1000);
    tg_rng r;
    tg_rng_seed(&r, 42);
    ASSERT_FAILS_WITH(tg_randn(&r, TG_BOOL, TG_SHAPE(2)),
                      "randn: dtype must be float32 or float64, got bool");
    ASSERT_FAILS_WITH(tg_rand(&r, TG_BOOL, TG_SHAPE(2)),
                      "rand: dtype must be float32 or float64, got bool");
    ASSERT_FAILS_WITH(tg_randn(&r, TG_FLOAT64, TG_SHAPE(2, -1)),
                      "randn: invalid shape (2,-1)");
    ASSERT_FAILS_WITH(tg_rand(&r, TG_FLOAT64, 9, (const int64_t[9]){0}),
                      "rand: ndim 9");
    double first = tg_rng_normal(&r);
    assert_same_doubles(&first, normals, 1, "first normal after failures");
    tg_pcg64 g;
    tg_pcg64_seed(&g, 0);
    ASSERT_FAILS_WITH(tg_pcg64_randn(&g, TG_BOOL, TG_SHAPE(2)),
                      "pcg64_randn: dtype must be float32 or float64, got "
                      "bool");
    free(normals);
}
END_TEST

Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *legacy = tcase_create("legacy");
    tcase_add_loop_test(legacy, test_legacy_randn, 0, COUNT(legacy_seeds));
    tcase_add_loop_test(legacy, test_legacy_rand, 0, COUNT(legacy_seeds));
    tcase_add_test(legacy, test_legacy_mixed_calls_carry_the_cached_gauss);
    tcase_add_test(legacy, test_legacy_scalars_and_reseed);
    tcase_add_test(legacy, test_legacy_float32);
    tcase_add_test(legacy, test_legacy_scalar_and_empty_shapes);
    suite_add_tcase(s, legacy);

    TCase *pcg64 = tcase_create("pcg64");
    tcase_add_loop_test(pcg64, test_pcg64_random, 0, COUNT(pcg64_random_seeds));
    tcase_add_loop_test(pcg64, test_pcg64_normal_stream, 0, COUNT(pcg64_seeds));
    tcase_add_test(pcg64, test_pcg64_mixed_calls);
    tcase_add_test(pcg64, test_pcg64_randn);
    suite_add_tcase(s, pcg64);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_null_generator);
    tcase_add_test(errors, test_bad_dtype_and_shape);
    suite_add_tcase(s, errors);
    return s;
}
