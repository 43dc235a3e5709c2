/* tg_gpt_load_pretrained streaming a .safetensors (nn/safetensors_stream.c's
 * tg__st_open, nn/gpt_load.c): the model it gives is, bit for bit, the one
 * the file's tensors read whole give (tg_read_safetensors, then
 * tg_gpt_from_state_dict) for both layouts, tied and untied heads, every
 * float dtype of the file and of the model; its peak of live tensor bytes
 * is the model's and a small part, where reading whole takes twice the
 * model; every allocation failing leaves the model zeroed with nothing
 * leaked; a file shortened while it is read is an error, not a crash. */
#include "core/internal.h" /* tg__storage_peak_bytes; core/error.h: the
                              allocation counter */
#include "nn/formats.h"    /* tg__st_open */
#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_HEAD 2

static const char *fixture_file(const char *tag)
{
    static char name[256];
    snprintf(name, sizeof name, "gpt2/%s.safetensors", tag);
    return fixture_path(name);
}

/* A GPT-2-shaped model of V tokens, C = 32, 2 layers, drawn from seed 7:
 * the wte of V = 5000 is 625 KiB in float32, over a MiB in float64, so
 * that the stream copies and compares it in several chunks. */
static void make_model(tg_gpt *g, int V, bool tied, tg_dtype dt)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_gpt_config c = {.vocab_size = V,
                       .block_size = 16,
                       .n_embd = 32,
                       .n_head = N_HEAD,
                       .n_layer = 2,
                       .gelu = true,
                       .gelu_tanh = true,
                       .dtype = dt,
                       .bias = TG_GPT_BIAS_ALL,
                       .tie_weights = tied};
    ck_assert_int_eq(tg_gpt_init(g, c, &rng), 0);
}

/* The old way: every tensor read, then the model built from them. */
static int load_whole(tg_gpt *g, const char *path, tg_dtype dt)
{
    tg_params sd;
    tg_params_init(&sd);
    int rc = tg_read_safetensors(path, &sd);
    if (rc == 0)
        rc = tg_gpt_from_state_dict(g, &sd, N_HEAD, dt);
    tg_params_release(&sd);
    return rc;
}

void assert_same_gpt(tg_gpt *a, tg_gpt *b, const char *what)
{
    ck_assert_int_eq(a->cfg.tie_weights, b->cfg.tie_weights);
    ck_assert_int_eq(a->cfg.bias, b->cfg.bias);
    ck_assert_int_eq(a->cfg.gelu_tanh, b->cfg.gelu_tanh);
    tg_params pa, pb;
    tg_params_init(&pa);
    tg_params_init(&pb);
    ck_assert_int_eq(tg_gpt_params(a, &pa, NULL), 0);
    ck_assert_int_eq(tg_gpt_params(b, &pb, NULL), 0);
    ck_assert_int_eq(pa.n, pb.n);
    for (int i = 0; i < pa.n; i++) {
        tg_tensor *x = pa.items[i].t, *y = pb.items[i].t;
        ck_assert_str_eq(pa.items[i].name, pb.items[i].name);
        ck_assert_int_eq(tg_dtype_of(x), tg_dtype_of(y));
        assert_shape(x, tg_ndim(y), tg_shape(y));
        size_t n = (size_t)tg_numel(x) * tg_dtype_size(tg_dtype_of(x));
        char *bx = malloc(n + 1), *by = malloc(n + 1);
        ck_assert_int_eq(tg_copy_out(x, tg_dtype_of(x), bx), 0);
        ck_assert_int_eq(tg_copy_out(y, tg_dtype_of(y), by), 0);
        ck_assert_msg(!memcmp(bx, by, n), "%s: %s differs", what,
                      pa.items[i].name);
        free(bx);
        free(by);
    }
    tg_params_free(&pa);
    tg_params_free(&pb);
}

/* path loaded both ways into both float dtypes: the same bits. */
static void assert_loads_alike(const char *path, bool tied)
{
    static const tg_dtype dts[] = {TG_FLOAT32, TG_FLOAT64};
    for (size_t k = 0; k < 2; k++) {
        tg_gpt a, b;
        int rc = tg_gpt_load_pretrained(&a, path, N_HEAD, dts[k]);
        ck_assert_msg(rc == 0, "%s: %s", path, tg_last_error());
        ck_assert_msg(load_whole(&b, path, dts[k]) == 0, "%s: %s", path,
                      tg_last_error());
        ck_assert_int_eq(a.cfg.tie_weights, tied);
        assert_same_gpt(&a, &b, path);
        tg_gpt_free(&a);
        tg_gpt_free(&b);
    }
}

/* A 16-bit pattern for element i of tensor t: any F16 or BF16 but the
 * infinities and NaNs (exponent all ones), so that the models compare. */
static uint16_t half_bits(int t, int64_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(t * 40503u);
    h = (h >> 7) & 0xffff;
    return (uint16_t)((h & 0x7c00) == 0x7c00 ? h & ~0x4000u : h);
}

/* sd written as a .safetensors of mixed dtypes, tensor i as dtypes[i % 4]:
 * F16 and BF16 of half_bits, F32 and F64 of the tensor's values. */
static void write_mixed(const tg_params *sd, const char *path)
{
    static const char *const dtypes[] = {"F16", "BF16", "F32", "F64"};
    static const size_t sizes[] = {2, 2, 4, 8};
    size_t cap = 4096 + 256 * (size_t)sd->n, len = 0, at = 0;
    char *json = malloc(cap);
    len += (size_t)snprintf(json, cap, "{");
    for (int i = 0; i < sd->n; i++) {
        const tg_tensor *t = sd->items[i].t;
        size_t bytes = (size_t)tg_numel(t) * sizes[i % 4];
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                i ? "," : "", sd->items[i].name, dtypes[i % 4]);
        for (int d = 0; d < tg_ndim(t); d++)
            len += (size_t)snprintf(json + len, cap - len, "%s%lld",
                                    d ? "," : "", (long long)tg_size(t, d));
        len +=
            (size_t)snprintf(json + len, cap - len,
                             "],\"data_offsets\":[%zu,%zu]}", at, at + bytes);
        at += bytes;
    }
    len += (size_t)snprintf(json + len, cap - len, "}");
    ck_assert_uint_lt(len, cap);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t n = len;
    unsigned char nb[8];
    for (int k = 0; k < 8; k++)
        nb[k] = (unsigned char)(n >> (8 * k));
    fwrite(nb, 1, 8, f);
    fwrite(json, 1, len, f);
    for (int i = 0; i < sd->n; i++) {
        const tg_tensor *t = sd->items[i].t;
        int64_t m = tg_numel(t);
        double *v = values_of(t);
        for (int64_t j = 0; j < m; j++) {
            uint16_t h = half_bits(i, j);
            float f32 = (float)v[j];
            if (i % 4 < 2)
                fwrite(&h, 2, 1, f);
            else if (i % 4 == 2)
                fwrite(&f32, 4, 1, f);
            else
                fwrite(&v[j], 8, 1, f);
        }
        free(v);
    }
    ck_assert_int_eq(fclose(f), 0);
    free(json);
}

/* The fixtures: GPT-2's Conv1D layout and nanoGPT's Linear, with and
 * without biases, float64 files, tied heads. */
START_TEST(same_as_read_whole_fixtures)
{
    assert_loads_alike(fixture_file("hf"), true);
    assert_loads_alike(fixture_file("nanogpt_bias"), true);
    assert_loads_alike(fixture_file("nanogpt_nobias"), true);
}
END_TEST

/* Untied heads (GPT-2's names with lm_head.weight), in float32 and in a
 * file of every float dtype; lm_head a copy of wte, which ties, and a copy
 * differing in its last element, which does not (compared a chunk at a
 * time: wte is several chunks in float64). */
START_TEST(same_as_read_whole_untied)
{
    tg_gpt g;
    make_model(&g, 5000, false, TG_FLOAT32);
    const char *f32 = scratch_path("untied_f32.safetensors");
    ck_assert_int_eq(tg_gpt_save_pretrained(&g, f32), 0);
    assert_loads_alike(f32, false);
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_gpt_state_dict(&g, &sd), 0);
    const char *mixed = scratch_path("untied_mixed.safetensors");
    write_mixed(&sd, mixed);
    assert_loads_alike(mixed, false);

    tg_tensor *wte = tg_params_get(&sd, "wte.weight");
    tg_tensor *wte64 = tg_to(wte, TG_FLOAT64);
    tg_param *lm = NULL;
    for (int i = 0; i < sd.n; i++)
        if (!strcmp(sd.items[i].name, "lm_head.weight"))
            lm = &sd.items[i];
    ck_assert_ptr_nonnull(lm);
    tg_release(lm->t);
    lm->t = wte64; /* the same values in another dtype: tied */
    const char *copy = scratch_path("lm_head_copy.safetensors");
    ck_assert_int_eq(tg_save_safetensors(&sd, copy), 0);
    assert_loads_alike(copy, true);
    double *v = values_of(wte);
    v[tg_numel(wte) - 1] += 0.5; /* the last chunk's last element */
    tg_release(wte64);
    lm->t = tg_from_data(TG_FLOAT64, tg_ndim(wte), tg_shape(wte), v);
    free(v);
    ck_assert_int_eq(tg_save_safetensors(&sd, copy), 0);
    assert_loads_alike(copy, false);
    tg_params_release(&sd);
    tg_gpt_free(&g);
}
END_TEST

/* nanoGPT's Linear layout, every weight transposed on the way in, with an
 * untied lm_head (V,C), in a float32 file. */
START_TEST(same_as_read_whole_linear_untied)
{
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_read_safetensors(fixture_file("nanogpt_bias"), &sd), 0);
    for (int i = 0; i < sd.n; i++) {
        tg_tensor *t = tg_to(sd.items[i].t, TG_FLOAT32);
        tg_release(sd.items[i].t);
        sd.items[i].t = t;
    }
    tg_tensor *wte = tg_params_get(&sd, "transformer.wte.weight");
    ck_assert_ptr_nonnull(wte);
    tg_rng rng;
    tg_rng_seed(&rng, 11);
    tg_tensor *head = tg_randn(&rng, TG_FLOAT32, tg_ndim(wte), tg_shape(wte));
    ck_assert_int_eq(tg_params_add(&sd, NULL, "lm_head.weight", head), 0);
    const char *path = scratch_path("nanogpt_untied.safetensors");
    ck_assert_int_eq(tg_save_safetensors(&sd, path), 0);
    assert_loads_alike(path, false);
    tg_params_release(&sd);
}
END_TEST

/* The live tensor bytes at the load's peak, less those before it. */
static int64_t load_peak(const char *path, bool whole, int64_t *model_bytes)
{
    tg_gpt g;
    int64_t before = tg__storage_peak_reset();
    int rc = whole ? load_whole(&g, path, TG_FLOAT32)
                   : tg_gpt_load_pretrained(&g, path, N_HEAD, TG_FLOAT32);
    ck_assert_msg(rc == 0, "%s", tg_last_error());
    int64_t peak = tg__storage_peak_bytes() - before;
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    *model_bytes = 0;
    for (int i = 0; i < ps.n; i++)
        *model_bytes += tg_numel(ps.items[i].t) * 4;
    tg_params_free(&ps);
    tg_gpt_free(&g);
    return peak;
}

/* Streamed, the load holds the model and two entries' values (the c_attn
 * weight and bias it splits into heads, 3C^2 + 3C floats), nothing of the
 * size of the file;
 * read whole, the file's tensors and the model at once. */
START_TEST(peak_is_the_model)
{
    tg_gpt g;
    make_model(&g, 20000, true, TG_FLOAT32);
    const char *path = scratch_path("peak.safetensors");
    ck_assert_int_eq(tg_gpt_save_pretrained(&g, path), 0);
    tg_gpt_free(&g);
    int64_t model, model2;
    int64_t streamed = load_peak(path, false, &model);
    int64_t whole = load_peak(path, true, &model2);
    int64_t C = 32, slack = (3 * C * C + 3 * C) * 4 + 4096;
    ck_assert_int_eq(model, model2);
    ck_assert_msg(streamed <= model + slack,
                  "streamed load peaks at %lld bytes, the model is %lld",
                  (long long)streamed, (long long)model);
    ck_assert_msg(whole >= 2 * model, "read whole: %lld bytes, model %lld",
                  (long long)whole, (long long)model);
}
END_TEST

/* With allocation k failing (and with every_after each one after it): the
 * load either gives want's bits or fails with "out of memory", the model
 * zeroed (the suite's leak audit checks that nothing stays). False once k
 * is past the load's allocations. */
static bool load_failing_at(int64_t k, bool every_after, const char *path,
                            tg_gpt *want)
{
    tg_gpt g, zero;
    memset(&zero, 0, sizeof zero);
    tg__alloc_fail_at(k, every_after);
    int rc = tg_gpt_load_pretrained(&g, path, N_HEAD, TG_FLOAT32);
    bool reached = tg__alloc_counted() >= k;
    tg__alloc_fail_at(-1, false);
    if (rc < 0) {
        ck_assert_msg(strstr(tg_last_error(), "out of memory"),
                      "allocation %lld failing: '%s'", (long long)k,
                      tg_last_error());
        ck_assert_msg(!memcmp(&g, &zero, sizeof g), "the model is not zeroed");
        return reached;
    }
    assert_same_gpt(&g, want, path);
    tg_gpt_free(&g);
    return reached;
}

/* Every allocation of a streamed load of an untied, mixed-dtype file (the
 * widening, the chunked compare of the heads, a cached c_attn) failing in
 * turn. */
START_TEST(load_out_of_memory)
{
    tg_gpt g;
    make_model(&g, 300, false, TG_FLOAT32);
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_gpt_state_dict(&g, &sd), 0);
    const char *path = scratch_path("oom_mixed.safetensors");
    write_mixed(&sd, path);
    tg_params_release(&sd);
    tg_gpt_free(&g);
    tg_gpt want;
    ck_assert_int_eq(load_whole(&want, path, TG_FLOAT32), 0);
    int64_t k = 1;
    while (load_failing_at(k, _i == 1, path, &want))
        k++;
    ck_assert_int_gt(k, 50);
    tg_gpt_free(&want);
}
END_TEST

/* A file shortened after its header was read and checked: a read error
 * naming the file, where a mapping of it would have died of SIGBUS. */
START_TEST(file_shortened_while_read)
{
    tg_gpt g;
    make_model(&g, 300, true, TG_FLOAT32);
    const char *path = scratch_path("short.safetensors");
    ck_assert_int_eq(tg_gpt_save_pretrained(&g, path), 0);
    tg_gpt_free(&g);
    tg_params sd;
    tg_params_init(&sd);
    tg__st_stream *st = tg__st_open(path, &sd);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(truncate(path, 200), 0);
    int k = 0; /* wte's place in the file's list, whatever the order */
    while (k < sd.n && strcmp(sd.items[k].name, "wte.weight") != 0)
        k++;
    ck_assert_int_lt(k, sd.n);
    tg_tensor *wte = sd.items[k].t;
    tg_tensor *dst = tg_zeros(TG_FLOAT32, tg_ndim(wte), tg_shape(wte));
    ck_assert_int_eq(tg__st_copy(st, k, dst, false), -1);
    ck_assert_msg(strstr(tg_last_error(), path) &&
                      strstr(tg_last_error(), "unexpected end of file"),
                  "%s", tg_last_error());
    tg_release(dst);
    tg__st_close(st);
    tg_params_release(&sd);
}
END_TEST

/* A BOOL buffer (GPT-2's attn.bias) with a byte other than 0 or 1: the
 * streamed load refuses it as tg_read_safetensors does, model untouched. */
START_TEST(bad_bool_refused)
{
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_read_safetensors(fixture_file("hf"), &sd), 0);
    uint8_t mask[4] = {1, 0, 2, 1};
    for (int i = 0; i < sd.n; i++)
        if (!strcmp(sd.items[i].name, "h.0.attn.bias")) {
            tg_release(sd.items[i].t); /* the file's F32 mask, as BOOL */
            sd.items[i].t = tg_zeros(TG_BOOL, TG_SHAPE(1, 1, 2, 2));
        }
    const char *path = scratch_path("bad_bool.safetensors");
    ck_assert_int_eq(tg_save_safetensors(&sd, path), 0);
    tg_params_release(&sd);
    /* the byte 2 written in place: the saver writes only 0 and 1 */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -4, SEEK_END), 0); /* BOOL data comes last */
    ck_assert_int_eq(fwrite(mask, 1, 4, f), 4);
    ck_assert_int_eq(fclose(f), 0);
    tg_params_init(&sd);
    ck_assert_int_eq(tg_read_safetensors(path, &sd), -1);
    char want[512];
    snprintf(want, sizeof want, "%s", tg_last_error());
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_load_pretrained(&g, path, N_HEAD, TG_FLOAT64), -1);
    ck_assert_msg(strstr(tg_last_error(), want), "'%s' lacks '%s'",
                  tg_last_error(), want);
    ck_assert_msg(strstr(want, "BOOL element 2 is the byte 2"), "%s", want);
    ck_assert_ptr_null(g.blocks);
}
END_TEST

Suite *load_suite(void)
{
    Suite *s = suite_create("load");
    TCase *same = tcase_create("same_bits");
    tcase_set_timeout(same, 120);
    tcase_add_unchecked_fixture(same, scratch_setup, scratch_teardown);
    tcase_add_test(same, same_as_read_whole_fixtures);
    tcase_add_test(same, same_as_read_whole_untied);
    tcase_add_test(same, same_as_read_whole_linear_untied);
    suite_add_tcase(s, same);
    TCase *mem = tcase_create("memory");
    tcase_set_timeout(mem, 300);
    tcase_add_unchecked_fixture(mem, scratch_setup, scratch_teardown);
    tcase_add_test(mem, peak_is_the_model);
    tcase_add_loop_test(mem, load_out_of_memory, 0, 2);
    tcase_add_test(mem, file_shortened_while_read);
    tcase_add_test(mem, bad_bool_refused);
    suite_add_tcase(s, mem);
    return s;
}
