/* llm.c's files: its GPT-2 checkpoint and token shards, against what
 * tests/fixtures/gen_llmc.py wrote as llm.c's train_gpt2.py and
 * dev/data/data_common.py write them.
 *   - the model read gives the loss torch computes from the same weights
 *     (float32 and bfloat16 files), and written back is the file, byte for
 *     byte (the vocabulary's zero padding included);
 *   - streamed into the model, the file gives the bits that its tensors
 *     read whole into a state dict give through tg_gpt_from_state_dict,
 *     and the load's live tensor bytes peak at the model's (plus at most
 *     the reader's MiB), not the model's and the file's;
 *   - the shards read are the tokens, and a GPT-2 shard written is the
 *     file;
 *   - bad files and models llm.c cannot run are refused, named. */
#include "core/internal.h" /* tg__storage_peak_bytes */
#include "tests.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Suite *llmc_suite(void);

static const char *llmc(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "llmc/%s", name);
    return fixture_path(buf);
}

/* The whole of a file; *len its size. */
static unsigned char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)*len + 1);
    ck_assert_int_eq(fread(b, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return b;
}

static void assert_same_file(const char *got, const char *want)
{
    long n1, n2;
    unsigned char *a = slurp(got, &n1), *b = slurp(want, &n2);
    ck_assert_int_eq(n1, n2);
    long at = 0;
    while (at < n1 && a[at] == b[at])
        at++;
    ck_assert_msg(at == n1, "%s and %s differ first at byte %ld", got, want,
                  at);
    free(a);
    free(b);
}

/* The loss of gen_gpt2's windows under g. */
static double loss_of(tg_gpt *g)
{
    tg_tensor *ids = load_fixture("gpt2/ids.npy");
    int64_t T = tg_size(ids, 1) - 1;
    tg_tensor *x = tg_contiguous(tg_narrow(ids, 1, 0, T));
    tg_tensor *y = tg_contiguous(tg_narrow(ids, 1, 1, T));
    tg_tensor *loss = tg_gpt_loss(g, x, y);
    ck_assert_msg(loss, "%s", tg_last_error());
    double v = tg_item(loss);
    tg_release(loss);
    tg_release(x);
    tg_release(y);
    tg_release(ids);
    return v;
}

static double expected(const char *name)
{
    tg_tensor *t = tg_load_npy(llmc(name));
    ck_assert_msg(t, "%s", tg_last_error());
    double v = tg_item(t);
    tg_release(t);
    return v;
}

static const struct {
    const char *file, *loss;
} MODELS[] = {{"model.bin", "loss.npy"}, {"model_bf16.bin", "loss_bf16.npy"}};

START_TEST(model_read)
{
    tg_scope_begin();
    for (int dt = 0; dt < 2; dt++) {
        tg_gpt g;
        tg_dtype as = dt ? TG_FLOAT32 : TG_FLOAT64;
        ck_assert_msg(tg_gpt_load_llmc(&g, llmc(MODELS[_i].file), as) == 0,
                      "%s", tg_last_error());
        ck_assert_int_eq(g.cfg.vocab_size, 67); /* not the padded 128 */
        ck_assert_int_eq(g.cfg.block_size, 16);
        ck_assert_int_eq(g.cfg.n_layer, 2);
        ck_assert_int_eq(g.cfg.n_head, 2);
        ck_assert_int_eq(g.cfg.n_embd, 16);
        ck_assert(g.cfg.gelu && g.cfg.gelu_tanh && g.cfg.tie_weights);
        ck_assert_int_eq(g.cfg.bias, TG_GPT_BIAS_ALL);
        double got = loss_of(&g), want = expected(MODELS[_i].loss);
        /* float64: the same sums in another order; float32: its rounding */
        ck_assert_msg(fabs(got - want) <= (dt ? 1e-5 : 1e-12) * want,
                      "%s as %s: loss %.17g, torch %.17g", MODELS[_i].file,
                      dt ? "float32" : "float64", got, want);
        tg_gpt_free(&g);
    }
    tg_scope_end();
}
END_TEST

/* Read and written again, either dtype: llm.c's file byte for byte. (The
 * bfloat16 file's weights written as float32 are another file.) */
START_TEST(model_round_trip)
{
    tg_scope_begin();
    for (int dt = 0; dt < 2; dt++) {
        tg_gpt g;
        const char *out = scratch_path(dt ? "f32.bin" : "f64.bin");
        ck_assert_int_eq(tg_gpt_load_llmc(&g, llmc("model.bin"),
                                          dt ? TG_FLOAT32 : TG_FLOAT64),
                         0);
        ck_assert_msg(tg_gpt_save_llmc(&g, out) == 0, "%s", tg_last_error());
        assert_same_file(out, llmc("model.bin"));
        tg_gpt_free(&g);
    }
    tg_scope_end();
}
END_TEST

START_TEST(tokens)
{
    static const char *const files[][2] = {
        {"tokens.bin", "tokens.npy"},
        {"tokens_llama3.bin", "tokens_llama3.npy"}};
    for (int i = 0; i < 2; i++) {
        tg_tensor *got = tg_load_tokens_llmc(llmc(files[i][0]));
        ck_assert_msg(got, "%s", tg_last_error());
        tg_tensor *want = tg_load_npy(llmc(files[i][1]));
        ck_assert_int_eq(tg_dtype_of(got), TG_INT64);
        ck_assert_int_eq(tg_numel(got), tg_numel(want));
        ck_assert(tg_allclose(got, want, 0, 0));
        if (i == 0) { /* written back: the shard */
            const char *out = scratch_path("tokens.bin");
            ck_assert_int_eq(tg_save_tokens_llmc(got, out), 0);
            assert_same_file(out, llmc(files[i][0]));
        } else /* values above 65535 do not fit GPT-2's shard */
            ck_assert_int_eq(tg_save_tokens_llmc(got, scratch_path("x")), -1);
        tg_release(got);
        tg_release(want);
    }
}
END_TEST

/* path: model.bin's first n bytes (all when n < 0) with the int at index
 * k (k >= 0) set to v. */
static const char *bad_copy(const char *from, const char *name, long n, int k,
                            int32_t v)
{
    long len;
    unsigned char *b = slurp(llmc(from), &len);
    if (k >= 0)
        for (int i = 0; i < 4; i++)
            b[4 * k + i] = (unsigned char)((uint32_t)v >> (8 * i));
    const char *path = scratch_path(name);
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, (size_t)(n < 0 ? len : n), f);
    fclose(f);
    free(b);
    return path;
}

static void assert_error_has(const char *a, const char *b)
{
    const char *e = tg_last_error();
    ck_assert_msg(strstr(e, a) && (!b || strstr(e, b)), "'%s' lacks '%s'%s%s",
                  e, a, b ? " or " : "", b ? b : "");
}

START_TEST(bad_models)
{
    static const struct {
        long n;
        int k;
        int32_t v;
        const char *says, *and;
    } rows[] = {
        {2000, -1, 0, "asks for 36608 bytes", "the file has 2000"},
        {100, -1, 0, "100 bytes is shorter than llm.c's 1024-byte header",
         NULL},
        {-1, 0, 20240520, "not an llm.c model file: magic 20240520", NULL},
        {-1, 1, 4, "version 4: versions 3 (float32) and 5", NULL},
        {-1, 6, 15, "bad header", "C 15"},              /* NH 2 */
        {-1, 7, 60, "bad header", "Vp 60"},             /* < V 67 */
        {-1, 4, 3, "asks for", "the file has 36608"},   /* L 3 */
        {-1, 6, 1 << 30, "more than 2^63 bytes", NULL}, /* C 2^30 */
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const char *p =
            bad_copy("model.bin", "bad.bin", rows[i].n, rows[i].k, rows[i].v);
        tg_gpt g;
        ck_assert_int_eq(tg_gpt_load_llmc(&g, p, TG_FLOAT32), -1);
        ck_assert_ptr_null(g.blocks); /* zeroed */
        assert_error_has("gpt_load_llmc: ", rows[i].says);
        if (rows[i].and)
            assert_error_has(rows[i].and, NULL);
        ck_assert_msg(strstr(tg_last_error(), p), "%s", tg_last_error());
    }
    /* A consistent file of 2,000 layers of one channel (bfloat16: 50
     * bytes a layer) would make 36,002 tensors from 101 KB: refused before
     * any is made. */
    {
        enum { L = 2000, SIZE = 1024 + 2 * (128 + 1 + 25 * L + 2) };
        int32_t h[256] = {20240326, 5, 1, 1, L, 1, 1, 128};
        const char *p = scratch_path("many_layers.bin");
        FILE *f = fopen(p, "wb");
        fwrite(h, 4, 256, f);
        for (long i = 1024; i < SIZE; i++)
            fputc(0, f);
        fclose(f);
        tg_gpt g;
        ck_assert_int_eq(tg_gpt_load_llmc(&g, p, TG_FLOAT32), -1);
        assert_error_has("2000 layers of 1 heads make 36002 tensors",
                         "more than one per 64 bytes");
    }
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_load_llmc(NULL, llmc("model.bin"), TG_FLOAT32), -1);
    assert_error_has("gpt_load_llmc: the model is NULL", NULL);
    ck_assert_int_eq(tg_gpt_load_llmc(&g, NULL, TG_FLOAT32), -1);
    assert_error_has("gpt_load_llmc: the path is NULL", NULL);
    ck_assert_int_eq(tg_gpt_load_llmc(&g, llmc("model.bin"), TG_INT64), -1);
    assert_error_has("gpt_load_llmc", "int64");
}
END_TEST

/* Models llm.c does not run are not written as its files. */
START_TEST(unwritable_models)
{
    tg_scope_begin();
    static const struct {
        bool tanh, tied;
        tg_gpt_bias bias;
        const char *says;
    } rows[] = {
        {false, true, TG_GPT_BIAS_ALL, "the tanh GELU"},
        {true, false, TG_GPT_BIAS_ALL, "the head tied"},
    };
    const char *out = scratch_path("never.bin");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        tg_rng rng;
        tg_rng_seed(&rng, 1);
        tg_gpt g;
        tg_gpt_config c = {.vocab_size = 10,
                           .block_size = 4,
                           .n_embd = 8,
                           .n_head = 2,
                           .n_layer = 1,
                           .gelu = true,
                           .gelu_tanh = rows[i].tanh,
                           .dtype = TG_FLOAT32,
                           .bias = rows[i].bias,
                           .tie_weights = rows[i].tied};
        ck_assert_int_eq(tg_gpt_init(&g, c, &rng), 0);
        ck_assert_int_eq(tg_gpt_save_llmc(&g, out), -1);
        assert_error_has("gpt_save_llmc: ", rows[i].says);
        ck_assert_int_eq(access(out, F_OK), -1); /* nothing written */
        tg_gpt_free(&g);
    }
    ck_assert_int_eq(tg_gpt_save_llmc(NULL, out), -1);
    assert_error_has("gpt_save_llmc: the model is NULL", NULL);
    tg_scope_end();
}
END_TEST

START_TEST(bad_tokens)
{
    const char *p = bad_copy("tokens.bin", "t.bin", 1600, -1, 0);
    ck_assert_ptr_null(tg_load_tokens_llmc(p));
    assert_error_has("load_tokens_llmc: ", "the header says 300 tokens of 2");
    p = bad_copy("tokens.bin", "t.bin", -1, 0, 20240326);
    ck_assert_ptr_null(tg_load_tokens_llmc(p));
    assert_error_has("not an llm.c token file: magic 20240326", NULL);
    p = bad_copy("tokens.bin", "t.bin", -1, 1, 7);
    ck_assert_ptr_null(tg_load_tokens_llmc(p));
    assert_error_has("magic 20240520 with version 7, expected 1", NULL);
    p = bad_copy("tokens.bin", "t.bin", -1, 2, -5);
    ck_assert_ptr_null(tg_load_tokens_llmc(p));
    assert_error_has("the header says -5 tokens", NULL);
    ck_assert_ptr_null(tg_load_tokens_llmc(NULL));
    assert_error_has("load_tokens_llmc: the path is NULL", NULL);
    /* writing: out of range (named, with its index), not int64 */
    int64_t ids[3] = {5, -1, 7};
    tg_tensor *t = tg_from_data(TG_INT64, TG_SHAPE(3), ids);
    ck_assert_int_eq(tg_save_tokens_llmc(t, scratch_path("t2.bin")), -1);
    assert_error_has("save_tokens_llmc: ", "token 1 is -1");
    tg_tensor *f = tg_to(t, TG_FLOAT32);
    ck_assert_int_eq(tg_save_tokens_llmc(f, scratch_path("t2.bin")), -1);
    assert_error_has("the tokens are float32 (3,)", NULL);
    ck_assert_int_eq(tg_save_tokens_llmc(NULL, scratch_path("t2.bin")), -1);
    assert_error_has("the tokens are float32 (3,)", NULL); /* kept */
    ck_assert_int_eq(tg_save_tokens_llmc(t, NULL), -1);
    assert_error_has("save_tokens_llmc: the path is NULL", NULL);
    tg_release(f);
    tg_release(t);
}
END_TEST

/* ---- Streamed, against the file read whole -------------------------------
 * The test's own reader of llm.c's layout (train_gpt2.py's write_model): the
 * header, then every tensor in its order as nn.Linear's (out, in), read
 * into a state dict under nanoGPT's names, which tg_gpt_from_state_dict
 * loads as it loads any nanoGPT file: the old path of tg_gpt_load_llmc. */

/* The little-endian 32-bit word at b. */
static uint32_t word_at(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

/* Element i of the file's weights at w: float32, or bfloat16 widened. */
static float weight_at(const unsigned char *w, int version, long i)
{
    uint32_t u = version == 3 ? word_at(w + 4 * i)
                              : (uint32_t)(w[2 * i] | w[2 * i + 1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The next tensor of the file, rows x cols (rows 0: a vector of cols), of
 * which the first keep rows go into sd as name. */
static void take(tg_params *sd, const unsigned char *w, int version, long *at,
                 const char *name, int64_t rows, int64_t cols, int64_t keep)
{
    int64_t n = (rows ? keep : 1) * cols;
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = weight_at(w, version, *at + i);
    *at += (rows ? rows : 1) * cols;
    tg_tensor *t = rows ? tg_from_data(TG_FLOAT32, TG_SHAPE(keep, cols), v)
                        : tg_from_data(TG_FLOAT32, TG_SHAPE(cols), v);
    ck_assert_int_eq(tg_params_add(sd, NULL, name, t), 0);
    free(v);
}

/* Every tensor of the llm.c file at path into sd, nanoGPT-named; the
 * header's number of heads. */
static int read_whole(const char *path, tg_params *sd)
{
    long len;
    unsigned char *b = slurp(path, &len);
    int32_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = (int32_t)word_at(b + 4 * i);
    int version = h[1];
    int64_t T = h[2], V = h[3], L = h[4], C = h[6], Vp = h[7];
    static const struct {
        const char *name;
        int rows, cols; /* in units of C; rows 0: a vector */
    } parts[] = {{"ln_1.weight", 0, 1},        {"ln_1.bias", 0, 1},
                 {"attn.c_attn.weight", 3, 1}, {"attn.c_attn.bias", 0, 3},
                 {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 0, 1},
                 {"ln_2.weight", 0, 1},        {"ln_2.bias", 0, 1},
                 {"mlp.c_fc.weight", 4, 1},    {"mlp.c_fc.bias", 0, 4},
                 {"mlp.c_proj.weight", 1, 4},  {"mlp.c_proj.bias", 0, 1}};
    const unsigned char *w = b + 1024;
    long at = 0;
    take(sd, w, version, &at, "transformer.wte.weight", Vp, C, V);
    take(sd, w, version, &at, "transformer.wpe.weight", T, C, T);
    char name[TG_PARAM_NAME_MAX];
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++)
        for (int l = 0; l < L; l++) {
            snprintf(name, sizeof name, "transformer.h.%d.%s", l,
                     parts[k].name);
            int64_t rows = parts[k].rows * C;
            take(sd, w, version, &at, name, rows, parts[k].cols * C, rows);
        }
    take(sd, w, version, &at, "transformer.ln_f.weight", 0, C, 0);
    take(sd, w, version, &at, "transformer.ln_f.bias", 0, C, 0);
    ck_assert_int_eq(1024 + at * (version == 3 ? 4 : 2), len); /* all */
    free(b);
    return h[5];
}

/* Both files (float32, bfloat16) into both dtypes: the streamed model is
 * the one the state dict of the file's tensors gives, with the tanh GELU
 * llm.c's model has (the nanoGPT naming alone would give erf). */
START_TEST(streamed_same_as_read_whole)
{
    tg_scope_begin();
    const char *file = MODELS[_i / 2].file;
    tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    tg_params sd;
    tg_params_init(&sd);
    int heads = read_whole(llmc(file), &sd);
    tg_gpt want, got;
    tg_gpt_load_opts o = {.n_head = heads, .dtype = dt, .gelu = TG_GELU_TANH};
    ck_assert_msg(tg_gpt_from_state_dict_with(&want, &sd, &o) == 0, "%s",
                  tg_last_error());
    tg_params_release(&sd);
    ck_assert_msg(tg_gpt_load_llmc(&got, llmc(file), dt) == 0, "%s",
                  tg_last_error());
    const tg_gpt_config *a = &got.cfg, *b = &want.cfg;
    ck_assert(a->vocab_size == b->vocab_size && a->n_embd == b->n_embd &&
              a->n_layer == b->n_layer && a->n_head == b->n_head &&
              a->block_size == b->block_size && a->dtype == b->dtype &&
              a->gelu_tanh && b->gelu_tanh && a->tie_weights &&
              b->tie_weights && a->bias == b->bias);
    assert_same_gpt(&got, &want, "llm.c streamed");
    tg_gpt_free(&want);
    tg_gpt_free(&got);
    tg_scope_end();
}
END_TEST

/* The model's bytes of dtype dt. */
static int64_t model_bytes(tg_gpt *g, tg_dtype dt)
{
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(g, &ps, NULL), 0);
    int64_t n = 0;
    for (int i = 0; i < ps.n; i++)
        n += tg_numel(ps.items[i].t);
    tg_params_free(&ps);
    return n * (int64_t)tg_dtype_size(dt);
}

/* A model of C 288 (c_fc's weight, 4 C^2 floats, is more than the reader's
 * MiB: two chunks transposed) and V 1000 (wte, 288,000 floats: two chunks
 * converted into float64) written by tg_gpt_save_llmc and read back in
 * either dtype: the bits its state dict gives, the load's live tensor
 * bytes at most the model's and the MiB buffer (today exactly the
 * model's: the buffer is no tensor); read whole into a state dict first,
 * the file's tensors besides the model. */
START_TEST(streamed_peak_is_the_model)
{
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_gpt_config c = {.vocab_size = 1000,
                       .block_size = 8,
                       .n_embd = 288,
                       .n_head = 2,
                       .n_layer = 1,
                       .gelu = true,
                       .gelu_tanh = true,
                       .dtype = TG_FLOAT32,
                       .bias = TG_GPT_BIAS_ALL,
                       .tie_weights = true};
    tg_gpt g0, g, want;
    ck_assert_int_eq(tg_gpt_init(&g0, c, &rng), 0);
    const char *path = scratch_path("c288.bin");
    ck_assert_int_eq(tg_gpt_save_llmc(&g0, path), 0);
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_gpt_state_dict(&g0, &sd), 0);
    int64_t model = 0;
    for (int f64 = 0; f64 < 2; f64++) {
        tg_dtype dt = f64 ? TG_FLOAT64 : TG_FLOAT32;
        int64_t before = tg__storage_peak_reset();
        ck_assert_msg(tg_gpt_load_llmc(&g, path, dt) == 0, "%s",
                      tg_last_error());
        int64_t peak = tg__storage_peak_bytes() - before;
        model = model_bytes(&g, dt);
        ck_assert_msg(peak <= model + (1 << 20),
                      "the load peaks at %lld bytes, the model is %lld",
                      (long long)peak, (long long)model);
        ck_assert_int_eq(tg_gpt_from_state_dict(&want, &sd, 2, dt), 0);
        assert_same_gpt(&g, &want, "llm.c streamed");
        tg_gpt_free(&want);
        tg_gpt_free(&g);
    }
    tg_params_release(&sd);
    tg_gpt_free(&g0);
    tg_params_init(&sd); /* the old way, into float64: 1.5 models */
    int64_t before = tg__storage_peak_reset();
    tg_gpt_load_opts o = {.n_head = read_whole(path, &sd),
                          .dtype = TG_FLOAT64,
                          .gelu = TG_GELU_TANH};
    ck_assert_int_eq(tg_gpt_from_state_dict_with(&want, &sd, &o), 0);
    int64_t whole = tg__storage_peak_bytes() - before;
    ck_assert_msg(whole >= model + model / 2,
                  "read whole: %lld bytes, model %lld", (long long)whole,
                  (long long)model);
    tg_params_release(&sd);
    tg_gpt_free(&want);
}
END_TEST

Suite *llmc_suite(void)
{
    Suite *s = suite_create("llmc");
    TCase *tc = tcase_create("files");
    tcase_add_unchecked_fixture(tc, scratch_setup, scratch_teardown);
    tcase_add_loop_test(tc, model_read, 0, 2);
    tcase_add_test(tc, model_round_trip);
    tcase_add_test(tc, tokens);
    tcase_add_test(tc, bad_models);
    tcase_add_test(tc, unwritable_models);
    tcase_add_test(tc, bad_tokens);
    tcase_add_loop_test(tc, streamed_same_as_read_whole, 0, 4);
    tcase_add_test(tc, streamed_peak_is_the_model);
    suite_add_tcase(s, tc);
    return s;
}
