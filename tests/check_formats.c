/* Checkpoint formats: .safetensors (jansson) and .npz through libzip.
 * Values against files numpy and torch wrote (tests/fixtures/gen_formats.py:
 * formats_model.safetensors with F32, F64, I64, BF16, F16, BOOL and the
 * narrower integer tensors laid
 * out as the safetensors library lays them out, and a
 * numpy.savez_compressed archive), each compared with the same arrays
 * saved as plain .npy; round trips bit for bit; and every kind of lying
 * header refused with its reason, nothing half-loaded. */
#include "core/internal.h" /* a tensor's bytes; core/error.h: the counter */
#include "tests.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Suite *formats_suite(void);

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* Asserts a and b hold the same dtype, shape and element bytes. */
static void assert_same_bits(const tg_tensor *a, const tg_tensor *b,
                             const char *what)
{
    ck_assert_msg(a->dtype == b->dtype, "%s: dtype %s vs %s", what,
                  tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
    ck_assert_msg(
        a->ndim == b->ndim &&
            memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0,
        "%s: shapes differ", what);
    ck_assert(tg_is_contiguous(a) && tg_is_contiguous(b));
    size_t es = tg_dtype_size(a->dtype);
    ck_assert_msg(memcmp((const char *)a->storage->data + a->offset * es,
                         (const char *)b->storage->data + b->offset * es,
                         (size_t)tg_numel(a) * es) == 0,
                  "%s: values differ", what);
}

/* ---- .safetensors: values from the fixture ---------------------------- */

static const char *const MODEL_NAMES[] = {
    "tokens",
    "transformer.h.0.attn.c_attn.bias",
    "int32",
    "scale",
    "transformer.wte.weight",
    "uint32",
    "int16",
    "lm_head.weight",
    "ln_f.weight",
    "uint16",
    "h.0.attn.bias",
    "int8",
    "uint8",
};
enum { N_MODEL = sizeof MODEL_NAMES / sizeof *MODEL_NAMES };

/* The fixture's values of tensor name (formats_model_<name>.npy), as dt,
 * or as saved for a negative dt. */
static tg_tensor *model_value_as(const char *name, int dt)
{
    char file[256];
    int n = snprintf(file, sizeof file, "formats_model_%s.npy", name);
    for (int i = 0; i < n; i++)
        if (file[i] == '.' && i < n - 4)
            file[i] = '_';
    return dt < 0 ? load_fixture(file) : fixture_as(file, (tg_dtype)dt);
}

static tg_tensor *model_value(const char *name)
{
    return model_value_as(name, -1);
}

/* Every tensor, in the header's order, each the value torch and numpy
 * hold: BF16 and F16 widened to float32 exactly, int64 beyond 2^53 whole,
 * the narrower integers' extremes widened to int64 (numpy's astype), BOOL
 * as bool. */
START_TEST(read_safetensors_values)
{
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_msg(tg_read_safetensors(fixture_path("formats_model.safetensors"),
                                      &ps) == 0,
                  "%s", tg_last_error());
    ck_assert_int_eq(ps.n, N_MODEL);
    for (int i = 0; i < N_MODEL; i++) {
        ck_assert_str_eq(ps.items[i].name, MODEL_NAMES[i]);
        tg_tensor *want = model_value(MODEL_NAMES[i]);
        assert_same_bits(ps.items[i].t, want, MODEL_NAMES[i]);
        tg_release(want);
    }
    tg_params_release(&ps);
    ck_assert_int_eq(ps.n, 0);
    ck_assert_ptr_null(ps.items);
}
END_TEST

/* By name into float64 and float32 parameters (converted), a subset of the
 * file; the file's other tensors are ignored. */
START_TEST(load_safetensors_by_name)
{
    tg_dtype dt = _i ? TG_FLOAT64 : TG_FLOAT32;
    tg_tensor *lm = tg_zeros(dt, TG_SHAPE(3, 4));
    tg_tensor *bias = tg_zeros(dt, TG_SHAPE(6));
    tg_tensor *ln = tg_zeros(dt, TG_SHAPE(7));
    tg_tensor *tok = tg_zeros(TG_INT64, TG_SHAPE(4));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "lm_head.weight", lm);
    tg_params_add(&ps, "transformer.h.0.attn.c_attn", "bias", bias);
    tg_params_add(&ps, "ln_f", "weight", ln);
    tg_params_add(&ps, NULL, "tokens", tok);
    ck_assert_msg(tg_load_safetensors(
                      &ps, fixture_path("formats_model.safetensors")) == 0,
                  "%s", tg_last_error());
    for (int i = 0; i < 3; i++) {
        /* Rounded once, to dt, as numpy's astype rounds. */
        tg_tensor *want = model_value_as(ps.items[i].name, (int)dt);
        assert_close(ps.items[i].t, want, 0);
        tg_release(want);
    }
    tg_tensor *want = model_value("tokens");
    assert_same_bits(tok, want, "tokens");
    tg_release(want);
    tg_params_free(&ps);
    tg_release(lm);
    tg_release(bias);
    tg_release(ln);
    tg_release(tok);
}
END_TEST

/* A missing tensor, another shape, an I64 into a float parameter: each
 * fails naming it, and no parameter changes, not even those before it. */
START_TEST(load_safetensors_all_or_nothing)
{
    static const struct {
        const char *name;
        tg_dtype dt;
        int64_t n;
        const char *why;
    } cases[] = {
        {"nope", TG_FLOAT32, 3, "no tensor 'nope' for parameter 'nope'"},
        {"scale", TG_FLOAT32, 2,
         "has shape (2,) but tensor 'scale' has "
         "shape ()"},
        {"tokens", TG_FLOAT64, 4,
         "parameter 'tokens' is float64 but tensor "
         "'tokens' is I64"},
        {"ln_f.weight", TG_INT64, 7,
         "is int64 but tensor 'ln_f.weight' is "
         "F16"},
    };
    tg_tensor *wte = tg_full(TG_FLOAT32, TG_SHAPE(5, 4), 7);
    tg_tensor *last = tg_full(cases[_i].dt, TG_SHAPE(cases[_i].n), 7);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "transformer.wte.weight", wte);
    tg_params_add(&ps, NULL, cases[_i].name, last);
    ck_assert_int_eq(
        tg_load_safetensors(&ps, fixture_path("formats_model.safetensors")),
        -1);
    const char *err = tg_last_error();
    ck_assert_msg(strstr(err, "load_safetensors: ") &&
                      strstr(err, "formats_"
                                  "model") &&
                      strstr(err, cases[_i].why),
                  "%s", err);
    tg_tensor *sevens = tg_full(TG_FLOAT32, TG_SHAPE(5, 4), 7);
    assert_close(wte, sevens, 0);
    tg_release(sevens);
    tg_params_free(&ps);
    tg_release(wte);
    tg_release(last);
}
END_TEST

/* float32, float64 and int64 parameters, saved and read back bit for bit;
 * the file is laid out as the reference library lays one out. */
START_TEST(safetensors_round_trip)
{
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_tensor *a = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(3, 5)); /* 60 bytes */
    tg_tensor *b = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 1, 3));
    int64_t big[] = {(INT64_C(1) << 53) + 1, -3, INT64_MAX, INT64_MIN};
    tg_tensor *c = tg_from_data(TG_INT64, TG_SHAPE(4), big);
    tg_tensor *s = tg_scalar(TG_FLOAT32, -0.0);
    tg_tensor *e = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 4));
    tg_tensor *at = tg_transpose(a, 0, 1); /* a view: saved in C order */
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, "blk", "a", at);
    tg_params_add(&ps, "blk", "b", b);
    tg_params_add(&ps, NULL, "c", c);
    tg_params_add(&ps, NULL, "s", s);
    tg_params_add(&ps, NULL, "e", e);
    const char *path = scratch_path("rt.safetensors");
    ck_assert_msg(tg_save_safetensors(&ps, path) == 0, "%s", tg_last_error());

    tg_params back;
    tg_params_init(&back);
    ck_assert_msg(tg_read_safetensors(path, &back) == 0, "%s", tg_last_error());
    ck_assert_int_eq(back.n, ps.n);
    for (int i = 0; i < ps.n; i++) {
        ck_assert_str_eq(back.items[i].name, ps.items[i].name);
        tg_tensor *want = tg_contiguous(ps.items[i].t);
        assert_same_bits(back.items[i].t, want, ps.items[i].name);
        tg_release(want);
    }
    tg_params_release(&back);

    /* The layout: header length + 8 a multiple of 8, the 8-byte dtypes
     * first, the metadata as torch's save_file writes it. */
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    uint64_t hlen = 0;
    for (int i = 8; i-- > 0;)
        hlen = hlen << 8 | bytes[i];
    ck_assert_uint_eq((8 + hlen) % 8, 0);
    ck_assert_uint_eq(n, 8 + hlen + 60 + 48 + 32 + 4 + 0);
    char *header = strndup((const char *)bytes + 8, hlen);
    ck_assert_msg(strstr(header, "\"__metadata__\":{\"format\":\"pt\"}") &&
                      strstr(header, "\"blk.b\":{\"dtype\":\"F64\",\"shape\":"
                                     "[2,1,3],\"data_offsets\":[0,48]}") &&
                      strstr(header, "\"c\":{\"dtype\":\"I64\",\"shape\":[4],"
                                     "\"data_offsets\":[48,80]}") &&
                      strstr(header, "\"blk.a\":{\"dtype\":\"F32\",\"shape\":"
                                     "[5,3],\"data_offsets\":[80,140]}") &&
                      strstr(header, "\"s\":{\"dtype\":\"F32\",\"shape\":[],"
                                     "\"data_offsets\":[140,144]}"),
                  "%s", header);
    free(header);
    free(bytes);

    /* Loaded by name into fresh parameters: the same values. */
    tg_tensor *a2 = tg_zeros(TG_FLOAT64, TG_SHAPE(5, 3));
    tg_params into;
    tg_params_init(&into);
    tg_params_add(&into, NULL, "blk.a", a2);
    ck_assert_msg(tg_load_safetensors(&into, path) == 0, "%s", tg_last_error());
    assert_close(a2, at, 0);
    tg_params_free(&into);
    tg_release(a2);

    tg_params_free(&ps);
    tg_release(at);
    tg_release(a);
    tg_release(b);
    tg_release(c);
    tg_release(s);
    tg_release(e);
}
END_TEST

/* Bool parameters are written as BOOL after the 4-byte ones (an odd
 * count of them before an F32 would misalign it), and read back the same
 * bits, beside int64 and float32. */
START_TEST(safetensors_bool_round_trip)
{
    const uint8_t bits[] = {1, 0, 1};
    tg_tensor *m = tg_from_data(TG_BOOL, TG_SHAPE(3), bits);
    tg_tensor *w = tg_full(TG_FLOAT32, TG_SHAPE(2), -1.5);
    tg_tensor *i = tg_full(TG_INT64, TG_SHAPE(1), 7);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "m", m);
    tg_params_add(&ps, NULL, "w", w);
    tg_params_add(&ps, NULL, "i", i);
    const char *path = scratch_path("bool.safetensors");
    ck_assert_msg(tg_save_safetensors(&ps, path) == 0, "%s", tg_last_error());
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    char *header = strndup((const char *)bytes + 8, n - 8 - 8 - 8 - 3);
    ck_assert_msg(strstr(header, "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],"
                                 "\"data_offsets\":[16,19]}"),
                  "%s", header);
    free(header);
    free(bytes);
    tg_params back;
    tg_params_init(&back);
    ck_assert_msg(tg_read_safetensors(path, &back) == 0, "%s", tg_last_error());
    ck_assert_int_eq(back.n, 3);
    for (int k = 0; k < 3; k++)
        assert_same_bits(back.items[k].t, ps.items[k].t, ps.items[k].name);
    tg_params_release(&back);
    tg_params_free(&ps);
    tg_release(m);
    tg_release(w);
    tg_release(i);
}
END_TEST

/* A failed save leaves the file that was there, byte for byte. */
START_TEST(safetensors_save_refused_keeps_file)
{
    tg_tensor *w = tg_ones(TG_FLOAT32, TG_SHAPE(2));
    tg_tensor *m = tg_zeros(TG_FLOAT32, TG_SHAPE(2));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    const char *path = scratch_path("keep.safetensors");
    ck_assert_int_eq(tg_save_safetensors(&ps, path), 0);
    size_t n0, n1;
    unsigned char *before = read_bytes(path, &n0);
    tg_params_add(&ps, NULL, "__metadata__", m);
    ck_assert_int_eq(tg_save_safetensors(&ps, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "may not be named '__metadata__'"),
                  "%s", tg_last_error());
    unsigned char *after = read_bytes(path, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    tg_params_free(&ps);
    tg_release(w);
    tg_release(m);
}
END_TEST

/* ---- .safetensors: bad input ------------------------------------------- */

/* Writes a file: header length (hlen_lie, or the text's length when 0),
 * the header text, then data_len bytes of 0x3f. */
static const char *write_st(const char *name, const char *text,
                            uint64_t hlen_lie, size_t data_len)
{
    const char *path = scratch_path(name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t hlen = hlen_lie ? hlen_lie : strlen(text);
    for (int i = 0; i < 8; i++)
        fputc((int)(hlen >> (8 * i)) & 0xff, f);
    fputs(text, f);
    for (size_t i = 0; i < data_len; i++)
        fputc(0x3f, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

#define T(name, dtype, shape, b, e)                                            \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape                   \
    ",\"data_offsets\":[" #b "," #e "]}"

static const struct bad_header {
    const char *label, *text;
    uint64_t hlen_lie;
    size_t data_len;
    const char *why;
} BAD[] = {
    {"bad JSON", "{\"a\": ", 0, 0, "bad JSON header"},
    {"not an object", "[1, 2]", 0, 0, "bad JSON header: not an object"},
    {"header past the file", "{}", 1000, 0,
     "header length 1000 is larger than the file"},
    {"offsets out of range", "{" T("a", "F32", "[2]", 0, 8) "}", 0, 4,
     "tensor 'a': data_offsets [0, 8] out of range"},
    {"overlap",
     "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 0, 12,
     "tensors 'a' and 'b' overlap"},
    {"gap", "{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}",
     0, 12, "a gap of 4 bytes in the data buffer before tensor 'b'"},
    {"unaligned",
     "{" T("h", "BF16", "[1]", 0, 2) "," T("a", "F32", "[1]", 2, 6) "}", 0, 6,
     "tensor 'a': data_offsets [2, 6] are not aligned to its 4-byte"},
    {"size not shape times dtype", "{" T("a", "F32", "[3]", 0, 8) "}", 0, 8,
     "hold 8 bytes but shape (3,) of F32 needs 12"},
    {"unknown dtype", "{" T("a", "Q7", "[1]", 0, 4) "}", 0, 4,
     "tensor 'a' has an unknown dtype 'Q7'"},
    {"unsupported dtype", "{" T("a", "U64", "[1]", 0, 8) "}", 0, 8,
     "tensor 'a' has dtype U64, which tapegrad does not read"},
    {"duplicate name",
     "{" T("a", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 0, 4) "}", 0, 4,
     "duplicate object key"},
    {"bytes left over", "{" T("a", "F32", "[1]", 0, 4) "}", 0, 8,
     "the tensors cover 4 bytes of a 8-byte data buffer"},
    {"negative dim", "{" T("a", "F32", "[-1]", 0, 4) "}", 0, 4,
     "\"shape\" dim 0 is not an integer"},
    {"too many dims", "{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 0, 4,
     "\"shape\" is too long"},
    {"end before begin", "{" T("a", "F32", "[0]", 4, 0) "}", 0, 4,
     "\"data_offsets\" is not [begin, end]"},
    {"no dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4,
     "\"dtype\" is missing"},
    {"file too short", "", 3, 0, "too short"},
    /* The header's JSON held to RFC 8259 as jansson held it (the reader
     * walks it in one pass, nn/json_scan.c). */
    {"name not UTF-8", "{" T("a\xC3(", "F32", "[1]", 0, 4) "}", 0, 4,
     "bad JSON header: invalid UTF-8 in a string at byte 3"},
    {"overlong UTF-8", "{" T("\xC0\xAF", "F32", "[1]", 0, 4) "}", 0, 4,
     "invalid UTF-8"},
    {"lone surrogate", "{" T("\\ud800x", "F32", "[1]", 0, 4) "}", 0, 4,
     "a lone high surrogate \\uD800"},
    {"NUL escape", "{" T("a\\u0000", "F32", "[1]", 0, 4) "}", 0, 4,
     "\\u0000 in a string"},
    {"control character", "{" T("a\tb", "F32", "[1]", 0, 4) "}", 0, 4,
     "control character 0x09"},
    {"text after the object", "{" T("a", "F32", "[1]", 0, 4) "} x", 0, 4,
     "text after the object"},
    {"leading zero", "{" T("a", "F32", "[01]", 0, 4) "}", 0, 4,
     "bad JSON header: not a number at byte 29"},
    {"dtype twice",
     "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],"
     "\"data_offsets\":[0,4]}}",
     0, 4, "duplicate object key 'dtype' in tensor 'a'"},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0,
     "duplicate object key '__metadata__'"},
    {"dim not an integer", "{" T("a", "F32", "[1.0]", 0, 4) "}", 0, 4,
     "\"shape\" dim 0 is not an integer"},
    {"dim past int64", "{" T("a", "F32", "[1,99999999999999999999]", 0, 4) "}",
     0, 4, "\"shape\" dim 1 is not an integer"},
    {"three offsets",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 0, 4,
     "\"data_offsets\" is not [begin, end]"},
    {"metadata too deep", NULL, 0, 0, "nested deeper than 128"}, /* made */
};
enum { N_BAD = sizeof BAD / sizeof BAD[0] };

/* Each lie fails both readers with its reason, naming the file; the list
 * being appended to and the parameter being loaded stay as they were. */
START_TEST(safetensors_bad_header)
{
    const struct bad_header *c = &BAD[_i];
    const char *path;
    if (strcmp(c->label, "file too short") == 0) {
        path = scratch_path("short.safetensors");
        FILE *f = fopen(path, "wb");
        fputs("abc", f);
        fclose(f);
    } else if (!c->text) { /* "__metadata__": 130 arrays, one in another */
        char deep[300] = "{\"__metadata__\":";
        size_t at = strlen(deep);
        for (int k = 0; k < 130; k++)
            deep[at + (size_t)k] = '[', deep[at + 130 + (size_t)k] = ']';
        strcpy(deep + at + 260, "}");
        path = write_st("bad.safetensors", deep, 0, 0);
    } else
        path = write_st("bad.safetensors", c->text, c->hlen_lie, c->data_len);
    tg_tensor *keep = tg_full(TG_FLOAT32, TG_SHAPE(1), 7);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", keep);
    ck_assert_int_eq(tg_read_safetensors(path, &ps), -1);
    const char *err = tg_last_error();
    ck_assert_msg(strstr(err, "read_safetensors: ") && strstr(err, path) &&
                      strstr(err, c->why),
                  "%s: '%s' lacks '%s'", c->label, err, c->why);
    ck_assert_int_eq(ps.n, 1);
    ck_assert_int_eq(tg_load_safetensors(&ps, path), -1);
    ck_assert_msg(strstr(tg_last_error(), c->why), "%s: %s", c->label,
                  tg_last_error());
    ck_assert_double_eq(tg_item(keep), 7);
    tg_params_free(&ps);
    tg_release(keep);
}
END_TEST

/* The header's JSON as any JSON writer may lay it out: escapes in names
 * decoded to their UTF-8 (a surrogate pair to one 4-byte character),
 * white space of every kind between tokens, keys in any order, keys of an
 * entry that are not the format's skipped whatever they hold. */
START_TEST(safetensors_json_layout)
{
    const char *path = write_st(
        "layout.safetensors",
        "\r\n\t{ \"caf\\u00e9\\ud83d\\ude00\\n\\\"q\\/\" :\n"
        "  {\"shape\" : [ 2 ] ,\"note\":{\"a\":[true,false,null,-1.5e3]},"
        "\"data_offsets\":[0 ,8],\"dtype\":\"F32\"},"
        "\"__metadata__\":{\"format\":\"pt\"} } ",
        0, 8);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_msg(tg_read_safetensors(path, &ps) == 0, "%s", tg_last_error());
    ck_assert_int_eq(ps.n, 1);
    ck_assert_str_eq(ps.items[0].name, "caf\xC3\xA9\xF0\x9F\x98\x80\n\"q/");
    ck_assert_int_eq(tg_numel(ps.items[0].t), 2);
    tg_params_release(&ps);
}
END_TEST

/* "__metadata__" is ignored, whatever it holds; a 0-element tensor may sit
 * anywhere; the data buffer may start unaligned (odd header length). */
START_TEST(safetensors_edge_cases_load)
{
    const char *path = write_st(
        "ok.safetensors",
        "{\"__metadata__\":{\"x\":[1,{}]}," T("z", "F64", "[0,3]", 0, 0) "," T(
            "a", "F32", "[1]", 0, 4) "," T("h", "F16", "[2]", 4, 8) "} ",
        0, 8);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_msg(tg_read_safetensors(path, &ps) == 0, "%s", tg_last_error());
    ck_assert_int_eq(ps.n, 3);
    ck_assert_int_eq(tg_numel(ps.items[0].t), 0);
    ck_assert_int_eq(tg_dtype_of(ps.items[2].t), TG_FLOAT32);
    /* 0x3f3f3f3f as a float, 0x3f3f as a half: 2^0 * (1 + 0x33f/1024). */
    ck_assert_double_eq(tg_item(ps.items[1].t), 0.7470588088035583);
    ck_assert_double_eq(tg_get(ps.items[2].t, (int64_t[]){1}),
                        1 + 0x33f / 1024.0);
    /* Appending names already in the list fails and keeps it. */
    ck_assert_int_eq(tg_read_safetensors(path, &ps), -1);
    ck_assert_msg(strstr(tg_last_error(), "duplicate parameter name 'z'"), "%s",
                  tg_last_error());
    ck_assert_int_eq(ps.n, 3);
    tg_params_release(&ps);
}
END_TEST

/* Into an int64 parameter from U8 and I32 (widened), into a bool one from
 * BOOL; a BOOL byte other than 0 or 1 is refused by both readers, naming
 * the tensor and the element, and nothing is loaded. */
START_TEST(safetensors_narrow_ints_and_bool)
{
    tg_tensor *u8 = tg_zeros(TG_INT64, TG_SHAPE(2, 3));
    tg_tensor *i32 = tg_zeros(TG_INT64, TG_SHAPE(2, 3));
    tg_tensor *mask = tg_zeros(TG_BOOL, TG_SHAPE(1, 1, 3, 3));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "uint8", u8);
    tg_params_add(&ps, NULL, "int32", i32);
    tg_params_add(&ps, "h.0.attn", "bias", mask);
    ck_assert_msg(tg_load_safetensors(
                      &ps, fixture_path("formats_model.safetensors")) == 0,
                  "%s", tg_last_error());
    for (int i = 0; i < ps.n; i++) {
        tg_tensor *want = model_value(ps.items[i].name);
        assert_same_bits(ps.items[i].t, want, ps.items[i].name);
        tg_release(want);
    }
    tg_params_free(&ps);
    /* data bytes are 0x3f: element 0 of a BOOL is no bool */
    const char *path = write_st(
        "bool.safetensors",
        "{" T("uint8", "U8", "[2,3]", 0, 6) "," T("m", "BOOL", "[2]", 6, 8) "}",
        0, 8);
    tg_tensor *m = tg_zeros(TG_BOOL, TG_SHAPE(2));
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "uint8", u8);
    tg_params_add(&ps, NULL, "m", m);
    ck_assert_int_eq(tg_load_safetensors(&ps, path), -1);
    const char *why = "tensor 'm': BOOL element 0 is the byte 63, not 0 or 1";
    ck_assert_msg(strstr(tg_last_error(), why), "%s", tg_last_error());
    ck_assert_int_eq(tg_get(u8, (int64_t[]){0, 1}), 255); /* as it was */
    tg_params back;
    tg_params_init(&back);
    ck_assert_int_eq(tg_read_safetensors(path, &back), -1);
    ck_assert_msg(strstr(tg_last_error(), why), "%s", tg_last_error());
    ck_assert_int_eq(back.n, 0);
    tg_params_free(&ps);
    tg_release(m);
    tg_release(u8);
    tg_release(i32);
    tg_release(mask);
}
END_TEST

/* Every truncation of a good file fails; no single-byte corruption
 * crashes, and those that load give a file-shaped result. */
START_TEST(safetensors_truncated_or_corrupt)
{
    size_t n;
    unsigned char *good =
        read_bytes(fixture_path("formats_model.safetensors"), &n);
    const char *path = scratch_path("cut.safetensors");
    for (size_t len = 0; len < n; len++) {
        FILE *f = fopen(path, "wb");
        fwrite(good, 1, len, f);
        fclose(f);
        tg_params ps;
        tg_params_init(&ps);
        ck_assert_msg(tg_read_safetensors(path, &ps) == -1, "%zu bytes", len);
        ck_assert_int_eq(ps.n, 0);
    }
    for (size_t i = 0; i < n; i++) {
        good[i] ^= 0x24;
        FILE *f = fopen(path, "wb");
        fwrite(good, 1, n, f);
        fclose(f);
        good[i] ^= 0x24;
        tg_params ps;
        tg_params_init(&ps);
        if (tg_read_safetensors(path, &ps) == 0)
            ck_assert_int_ge(ps.n, 1);
        else
            ck_assert_int_eq(ps.n, 0);
        tg_params_release(&ps);
    }
    free(good);
}
END_TEST

/* ---- .npz through libzip ------------------------------------------------ */

static const char *const NPZ_NAMES[] = {"a", "b", "i", "m"};

/* numpy.savez_compressed's deflated entries read back to numpy's values. */
START_TEST(read_npz_compressed)
{
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_msg(tg_read_npz(fixture_path("formats_compressed.npz"), &ps) == 0,
                  "%s", tg_last_error());
    ck_assert_int_eq(ps.n, 4);
    for (int i = 0; i < 4; i++) {
        char file[64];
        snprintf(file, sizeof file, "formats_compressed_%s.npy", NPZ_NAMES[i]);
        ck_assert_str_eq(ps.items[i].name, NPZ_NAMES[i]);
        tg_tensor *want = load_fixture(file);
        assert_same_bits(ps.items[i].t, want, file);
        tg_release(want);
    }
    tg_params_release(&ps);
}
END_TEST

START_TEST(load_npz_compressed_by_name)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(16, 24));
    tg_tensor *i = tg_zeros(TG_INT64, TG_SHAPE(5));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "i", i);
    ck_assert_msg(tg_load_npz(&ps, fixture_path("formats_compressed.npz")) == 0,
                  "%s", tg_last_error());
    tg_tensor *want_a = load_fixture("formats_compressed_a.npy");
    tg_tensor *want_i = load_fixture("formats_compressed_i.npy");
    assert_close(a, want_a, 0);
    assert_same_bits(i, want_i, "i");
    tg_release(want_a);
    tg_release(want_i);
    tg_params_free(&ps);
    tg_release(a);
    tg_release(i);
}
END_TEST

/* Our own archive reads back whole, int64 beyond 2^53 included. */
START_TEST(npz_round_trip_exact)
{
    int64_t big[] = {(INT64_C(1) << 53) + 1, INT64_MIN};
    tg_tensor *c = tg_from_data(TG_INT64, TG_SHAPE(2), big);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, "x", "c", c);
    const char *path = scratch_path("rt.npz");
    ck_assert_int_eq(tg_save_npz(&ps, path), 0);
    tg_params back;
    tg_params_init(&back);
    ck_assert_msg(tg_read_npz(path, &back) == 0, "%s", tg_last_error());
    ck_assert_int_eq(back.n, 1);
    ck_assert_str_eq(back.items[0].name, "x.c");
    assert_same_bits(back.items[0].t, c, "x.c");
    /* A second read into the same list clashes, and keeps the list. */
    ck_assert_int_eq(tg_read_npz(path, &back), -1);
    ck_assert_msg(strstr(tg_last_error(), "read_npz: ") &&
                      strstr(tg_last_error(), "duplicate parameter name"),
                  "%s", tg_last_error());
    ck_assert_int_eq(back.n, 1);
    tg_params_release(&back);
    tg_params_free(&ps);
    tg_release(c);
}
END_TEST

/* Two entries of one name: which one is meant is unknowable, so the
 * archive is refused, by both readers, and nothing is loaded. */
START_TEST(npz_duplicate_entry)
{
    tg_tensor *a = tg_full(TG_FLOAT64, TG_SHAPE(2), 1);
    tg_tensor *b = tg_full(TG_FLOAT64, TG_SHAPE(2), 2);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "b", b);
    const char *path = scratch_path("dup.npz");
    ck_assert_int_eq(tg_save_npz(&ps, path), 0);
    size_t n;
    unsigned char *z = read_bytes(path, &n);
    int renamed = 0; /* "b.npy" to "a.npy", in its local and central header */
    for (size_t i = 0; i + 5 <= n; i++)
        if (memcmp(z + i, "b.npy", 5) == 0) {
            z[i] = 'a';
            renamed++;
        }
    ck_assert_int_eq(renamed, 2);
    FILE *f = fopen(path, "wb");
    fwrite(z, 1, n, f);
    fclose(f);
    free(z);
    tg_params back;
    tg_params_init(&back);
    ck_assert_int_eq(tg_read_npz(path, &back), -1);
    ck_assert_msg(strstr(tg_last_error(), "read_npz: ") &&
                      strstr(tg_last_error(), "two entries have the same name"),
                  "%s", tg_last_error());
    ck_assert_int_eq(back.n, 0);
    tg_params_free(&ps);
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", a);
    tg_set(a, (int64_t[]){0}, 5);
    ck_assert_int_eq(tg_load_npz(&ps, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "two entries have the same name"),
                  "%s", tg_last_error());
    ck_assert_double_eq(tg_get(a, (int64_t[]){0}), 5);
    tg_params_free(&ps);
    tg_release(a);
    tg_release(b);
}
END_TEST

/* A deflated entry whose data is damaged fails (inflate or CRC), and the
 * parameters stay. */
START_TEST(npz_compressed_corrupt)
{
    size_t n;
    unsigned char *z = read_bytes(fixture_path("formats_compressed.npz"), &n);
    const char *path = scratch_path("bad.npz");
    int failures = 0;
    for (size_t k = 40; k < 1500; k += 97) { /* inside a.npy's deflate data */
        z[k] ^= 0x41;
        FILE *f = fopen(path, "wb");
        fwrite(z, 1, n, f);
        fclose(f);
        z[k] ^= 0x41;
        tg_params ps;
        tg_params_init(&ps);
        if (tg_read_npz(path, &ps) != 0) {
            failures++;
            ck_assert_int_eq(ps.n, 0);
            ck_assert_ptr_nonnull(strstr(tg_last_error(), "entry 'a.npy'"));
        } else { /* a bit deflate never reads: the CRC vouches for it */
            tg_tensor *want = load_fixture("formats_compressed_a.npy");
            assert_same_bits(ps.items[0].t, want, "a");
            tg_release(want);
        }
        tg_params_release(&ps);
    }
    ck_assert_int_ge(failures, 12);
    free(z);
}
END_TEST

/* ---- out of memory ------------------------------------------------------ */

/* Saves, reads and loads a .safetensors file, and reads and loads a
 * deflated .npz, with the k-th of our allocations failing (and with
 * every_after, every one from it on; jansson's and libzip's own are not
 * counted): each call returns 0 with the right values, or -1 saying "out
 * of memory" with the parameters as they were and no list grown. Returns
 * false once k is past the allocations the run makes. */
static bool run_failing_at(int64_t k, bool every_after)
{
    char fixture[4096], npz[4096]; /* fixture_path's buffer is reused */
    snprintf(fixture, sizeof fixture, "%s",
             fixture_path("formats_model.safetensors"));
    snprintf(npz, sizeof npz, "%s", fixture_path("formats_compressed.npz"));
    tg_tensor *w = tg_full(TG_FLOAT32, TG_SHAPE(5, 4), 7);
    tg_tensor *lm = tg_full(TG_FLOAT64, TG_SHAPE(3, 4), 7);
    tg_tensor *a = tg_full(TG_FLOAT32, TG_SHAPE(16, 24), 7);
    tg_params ps, only_a, back;
    tg_params_init(&ps);
    tg_params_init(&only_a);
    tg_params_init(&back);
    tg_params_add(&ps, NULL, "transformer.wte.weight", w);
    tg_params_add(&ps, NULL, "lm_head.weight", lm);
    tg_params_add(&only_a, NULL, "a", a);
    tg_tensor *want_lm = model_value_as("lm_head.weight", TG_FLOAT64);
    tg_tensor *want_a = load_fixture("formats_compressed_a.npy");
    tg_tensor *sevens = tg_full(TG_FLOAT64, TG_SHAPE(3, 4), 7);
    tg_tensor *sevens_a = tg_full(TG_FLOAT32, TG_SHAPE(16, 24), 7);

    tg__alloc_fail_at(k, every_after);
    int rc[5];
    const char *what[5] = {"save_safetensors", "read_safetensors",
                           "load_safetensors", "read_npz", "load_npz"};
    for (int i = 0; i < 5; i++) {
        switch (i) {
        case 0:
            rc[i] = tg_save_safetensors(&ps, scratch_path("oom.safetensors"));
            break;
        case 1: rc[i] = tg_read_safetensors(fixture, &back); break;
        case 2: rc[i] = tg_load_safetensors(&ps, fixture); break;
        case 3: rc[i] = tg_read_npz(npz, &back); break;
        default: rc[i] = tg_load_npz(&only_a, npz); break;
        }
        ck_assert_msg(rc[i] == 0 || (rc[i] == -1 &&
                                     strstr(tg_last_error(), "out of memory")),
                      "%s with allocation %lld failing: %d, '%s'", what[i],
                      (long long)k, rc[i], tg_last_error());
    }
    bool reached = tg__alloc_counted() >= k;
    tg__alloc_fail_at(-1, false);

    ck_assert_int_eq(back.n, (rc[1] == 0 ? N_MODEL : 0) + (rc[3] == 0 ? 4 : 0));
    assert_close(lm, rc[2] == 0 ? want_lm : sevens, 0);
    assert_close(a, rc[4] == 0 ? want_a : sevens_a, 0);
    tg_params_release(&back);
    tg_params_free(&ps);
    tg_params_free(&only_a);
    tg_release(w);
    tg_release(lm);
    tg_release(a);
    tg_release(want_lm);
    tg_release(want_a);
    tg_release(sevens);
    tg_release(sevens_a);
    return reached;
}

START_TEST(formats_out_of_memory)
{
    int64_t k = 1;
    while (run_failing_at(k, _i == 1))
        k++;
    ck_assert_int_gt(k, 10);
}
END_TEST

Suite *formats_suite(void)
{
    Suite *s = suite_create("formats");
    TCase *st = tcase_create("safetensors");
    tcase_add_unchecked_fixture(st, scratch_setup, scratch_teardown);
    tcase_add_test(st, read_safetensors_values);
    tcase_add_loop_test(st, load_safetensors_by_name, 0, 2);
    tcase_add_loop_test(st, load_safetensors_all_or_nothing, 0, 4);
    tcase_add_test(st, safetensors_round_trip);
    tcase_add_test(st, safetensors_save_refused_keeps_file);
    tcase_add_test(st, safetensors_bool_round_trip);
    tcase_add_loop_test(st, safetensors_bad_header, 0, N_BAD);
    tcase_add_test(st, safetensors_edge_cases_load);
    tcase_add_test(st, safetensors_json_layout);
    tcase_add_test(st, safetensors_narrow_ints_and_bool);
    tcase_add_test(st, safetensors_truncated_or_corrupt);
    suite_add_tcase(s, st);
    TCase *npz = tcase_create("npz");
    tcase_add_unchecked_fixture(npz, scratch_setup, scratch_teardown);
    tcase_add_test(npz, read_npz_compressed);
    tcase_add_test(npz, load_npz_compressed_by_name);
    tcase_add_test(npz, npz_round_trip_exact);
    tcase_add_test(npz, npz_compressed_corrupt);
    tcase_add_test(npz, npz_duplicate_entry);
    suite_add_tcase(s, npz);
    TCase *oom = tcase_create("oom");
    tcase_add_unchecked_fixture(oom, scratch_setup, scratch_teardown);
    tcase_add_loop_test(oom, formats_out_of_memory, 0, 2);
    suite_add_tcase(s, oom);
    return s;
}
