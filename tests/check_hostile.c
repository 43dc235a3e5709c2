/* Files that cost more than they should: the readers' time and memory are
 * bounded by the file's size, whatever it holds.
 *   - many tensors: building a list of n named tensors, finding each by
 *     name, reading, loading and saving them makes O(n log n) name
 *     comparisons (counted: tg__name_compares), where a scan of the list
 *     for every name made n^2 / 2 (4096 tensors: 8.4 million, against at
 *     most 40 per tensor here). */
#include "nn/formats.h"
#include "nn/names.h"
#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *hostile_suite(void);

enum { MANY = 4096, PER_NAME = 40 };

/* The comparisons made by what runs between two calls. */
static uint64_t since(uint64_t *mark)
{
    uint64_t now = tg__name_compares(), n = now - *mark;
    *mark = now;
    return n;
}

#define ASSERT_LINEAR(what, mark)                                              \
    do {                                                                       \
        uint64_t c_ = since(mark);                                             \
        ck_assert_msg(c_ <= (uint64_t)PER_NAME * MANY,                         \
                      "%s: %llu name comparisons for %d tensors", what,        \
                      (unsigned long long)c_, MANY);                           \
    } while (0)

/* MANY tensors named "t<k>" in a scrambled order, k's value in each. */
static void many_params(tg_params *ps)
{
    tg_params_init(ps);
    for (int i = 0; i < MANY; i++) {
        int k = (int)((i * 2654435761u) % MANY); /* a permutation */
        char name[32];
        snprintf(name, sizeof name, "t%d", k);
        tg_tensor *t = tg_full(TG_FLOAT32, TG_SHAPE(1), k);
        ck_assert_int_eq(tg_params_add(ps, NULL, name, t), 0);
    }
}

/* Every tensor of got holds the number its name says. */
static void assert_named_values(const tg_params *got)
{
    ck_assert_int_eq(got->n, MANY);
    for (int i = 0; i < got->n; i++)
        ck_assert_double_eq(tg_item(got->items[i].t),
                            atof(got->items[i].name + 1));
}

START_TEST(many_tensors_linear)
{
    uint64_t mark = tg__name_compares();
    tg_params ps;
    many_params(&ps);
    ASSERT_LINEAR("params_add", &mark);
    for (int k = 0; k < MANY; k++) { /* each found by name */
        char name[32];
        snprintf(name, sizeof name, "t%d", k);
        ck_assert_double_eq(tg_item(tg_params_get(&ps, name)), k);
    }
    ASSERT_LINEAR("params_get", &mark);
    const char *st = scratch_path("many.safetensors");
    const char *npz = scratch_path("many.npz");
    ck_assert_msg(tg_save_safetensors(&ps, st) == 0, "%s", tg_last_error());
    ASSERT_LINEAR("save_safetensors", &mark);
    ck_assert_msg(tg_save_npz(&ps, npz) == 0, "%s", tg_last_error());
    since(&mark);
    tg_params got;
    tg_params_init(&got);
    ck_assert_msg(tg_read_safetensors(st, &got) == 0, "%s", tg_last_error());
    ASSERT_LINEAR("read_safetensors", &mark);
    assert_named_values(&got);
    tg_params_release(&got);
    ck_assert_msg(tg_read_npz(npz, &got) == 0, "%s", tg_last_error());
    ASSERT_LINEAR("read_npz", &mark);
    assert_named_values(&got);
    /* the whole list again: the first name of the file is the clash */
    ck_assert_int_eq(tg_read_npz(npz, &got), -1);
    ck_assert_msg(strstr(tg_last_error(), "duplicate parameter name 't0'"),
                  "%s", tg_last_error());
    ck_assert_int_eq(got.n, MANY);
    ASSERT_LINEAR("read_npz, refused", &mark);
    for (int i = 0; i < ps.n; i++) /* loads overwrite these */
        tg_fill_(ps.items[i].t, -1);
    ck_assert_msg(tg_load_safetensors(&ps, st) == 0, "%s", tg_last_error());
    ASSERT_LINEAR("load_safetensors", &mark);
    assert_named_values(&ps);
    ck_assert_msg(tg__load_npz_strict(&ps, npz, "optim") == 0, "%s",
                  tg_last_error());
    ASSERT_LINEAR("load_npz (strict)", &mark);
    assert_named_values(&ps);
    tg_params_release(&got);
    tg_params_release(&ps);
}
END_TEST

Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *many = tcase_create("many");
    tcase_add_unchecked_fixture(many, scratch_setup, scratch_teardown);
    tcase_add_test(many, many_tensors_linear);
    suite_add_tcase(s, many);
    return s;
}
