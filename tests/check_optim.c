/* Parameter lists, gradient clipping, optimizers and .npz checkpoints.
 * Clipping and every optimizer step are checked against torch (fixtures from
 * tests/fixtures/gen_optim.py); checkpoints against numpy's own .npz files,
 * and against corrupt ones. */
#include "tests.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- scratch files ------------------------------------------------------ */

/* A new empty file in the scratch directory (mkstemp); its path in path. */
static void tmp_file(char *path, size_t size)
{
    snprintf(path, size, "%s/ckpt_XXXXXX", scratch_dir);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void write_bytes(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* The whole file, malloc'd; its length in *len. */
static unsigned char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    ck_assert(feof(f));
    fclose(f);
    return buf;
}

/* ---- the model of gen_optim.py ------------------------------------------ */

/* Three parameters, a (3,4), b (5,), c (2,1,3), whose values the fixtures
 * hold flattened and concatenated into rows of N_VALUES. */
#define N_PARAMS 3
#define N_VALUES 23
#define N_STEPS  4
static const char *const NAMES[N_PARAMS] = {"a", "b", "c"};
static const int NDIMS[N_PARAMS] = {2, 1, 3};
static const int64_t SHAPES[N_PARAMS][3] = {{3, 4}, {5}, {2, 1, 3}};
static const int64_t SIZES[N_PARAMS] = {12, 5, 6};
/* b (parameter 1) has no gradient at step 1. */
static const int SKIP_PARAM = 1, SKIP_STEP = 1;

typedef struct model {
    tg_tensor *p[N_PARAMS];
    tg_params ps;
} model;

/* A fixture's values as doubles, n of them. */
static void load_values(const char *name, double *v, int64_t n)
{
    tg_tensor *t = load_fixture(name);
    ck_assert_int_eq(tg_numel(t), n);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    tg_release(t);
}

/* The tensor of parameter i's slice of row, in dtype dt. */
static tg_tensor *slice_of(const double *row, int i, tg_dtype dt)
{
    int64_t k = 0;
    for (int j = 0; j < i; j++)
        k += SIZES[j];
    tg_tensor *f8 = tg_from_data(TG_FLOAT64, NDIMS[i], SHAPES[i], row + k);
    tg_tensor *t = tg_to(f8, dt);
    tg_release(f8);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void model_init(model *m, tg_dtype dt, const double *row)
{
    tg_params_init(&m->ps);
    for (int i = 0; i < N_PARAMS; i++) {
        m->p[i] = slice_of(row, i, dt);
        tg_set_requires_grad(m->p[i], true);
        ck_assert_int_eq(tg_params_add(&m->ps, NULL, NAMES[i], m->p[i]), 0);
    }
}

static void model_free(model *m)
{
    for (int i = 0; i < N_PARAMS; i++)
        tg_release(m->p[i]);
    tg_params_free(&m->ps);
}

/* Gives parameter i the gradient grad (its slice of row), exactly: the
 * gradient of sum(p * grad) with respect to p. */
static void set_grad(model *m, int i, const double *row)
{
    tg_zero_grad(m->p[i]);
    tg_scope_begin();
    tg_tensor *g = slice_of(row, i, tg_dtype_of(m->p[i]));
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(m->p[i], g))), 0);
    tg_scope_end();
}

/* All parameters' values as one row. */
static void model_values(const model *m, double *row)
{
    for (int i = 0; i < N_PARAMS; i++) {
        ck_assert_int_eq(tg_copy_out(m->p[i], TG_FLOAT64, row), 0);
        row += SIZES[i];
    }
}

/* ---- parameter lists ----------------------------------------------------- */

START_TEST(params_add_get_numel)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    ck_assert_int_eq(tg_params_add(&ps, "blocks.0.attn", "w", w), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "b", b), 0);
    ck_assert_int_eq(tg_params_add(&ps, "", "b2", b), 0);
    ck_assert_int_eq(ps.n, 3);
    ck_assert_str_eq(ps.items[0].name, "blocks.0.attn.w");
    ck_assert_str_eq(ps.items[1].name, "b");
    ck_assert_str_eq(ps.items[2].name, "b2");
    ck_assert_ptr_eq(tg_params_get(&ps, "blocks.0.attn.w"), w);
    ck_assert_ptr_eq(tg_params_get(&ps, "b2"), b);
    ck_assert_ptr_null(tg_params_get(&ps, "w"));
    ck_assert_int_eq(tg_params_numel(&ps), 6 + 3 + 3);
    tg_params_free(&ps);
    ck_assert_int_eq(ps.n, 0);
    ck_assert_ptr_null(ps.items);
    tg_params_free(&ps); /* twice is fine */
    tg_release(w);
    tg_release(b);
}
END_TEST

START_TEST(params_grow)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *t[100];
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        t[i] = tg_zeros(TG_FLOAT32, TG_SHAPE(i + 1));
        ck_assert_int_eq(tg_params_add(&ps, "m", name, t[i]), 0);
    }
    ck_assert_int_eq(tg_params_numel(&ps), 100 * 101 / 2);
    ck_assert_ptr_eq(tg_params_get(&ps, "m.p0"), t[0]);
    ck_assert_ptr_eq(tg_params_get(&ps, "m.p99"), t[99]);
    for (int i = 0; i < 100; i++)
        tg_release(t[i]);
    tg_params_free(&ps);
}
END_TEST

START_TEST(params_add_errors)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(2));
    ck_assert_int_eq(tg_params_add(&ps, "lin", "w", w), 0);
    ck_assert_int_eq(tg_params_add(&ps, "lin", "w", w), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "duplicate"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "'lin.w'"));
    char long_name[TG_PARAM_NAME_MAX];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    ck_assert_int_eq(tg_params_add(&ps, NULL, long_name, w), 0); /* 127 fits */
    ck_assert_int_eq(tg_params_add(&ps, "m", long_name, w), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "longer than 127"));
    /* A NULL tensor (a failed init) keeps the first error. */
    tg_clear_error();
    ck_assert_ptr_null(tg_zeros(TG_FLOAT64, TG_SHAPE(-1)));
    char first[256];
    snprintf(first, sizeof first, "%s", tg_last_error());
    ck_assert_int_eq(tg_params_add(&ps, NULL, "v", NULL), -1);
    ck_assert_str_eq(tg_last_error(), first);
    ck_assert_int_eq(ps.n, 2);
    tg_params_free(&ps);
    tg_release(w);
}
END_TEST

START_TEST(params_zero_grad)
{
    double init[N_VALUES], grads[N_STEPS * N_VALUES];
    load_values("optim_init.npy", init, N_VALUES);
    load_values("optim_grads.npy", grads, N_STEPS * N_VALUES);
    model m;
    model_init(&m, TG_FLOAT64, init);
    for (int i = 0; i < N_PARAMS; i++)
        set_grad(&m, i, grads);
    for (int i = 0; i < N_PARAMS; i++)
        ck_assert_ptr_nonnull(tg_grad(m.p[i]));
    tg_params_zero_grad(&m.ps);
    for (int i = 0; i < N_PARAMS; i++)
        ck_assert_ptr_null(tg_grad(m.p[i]));
    model_free(&m);
}
END_TEST

/* ---- gradient clipping -------------------------------------------------- */

START_TEST(clip_matches_torch)
{
    double init[N_VALUES], grads[N_STEPS * N_VALUES], want[N_VALUES], norm;
    load_values("optim_init.npy", init, N_VALUES);
    load_values("optim_grads.npy", grads, N_STEPS * N_VALUES);
    load_values("optim_clip_grads.npy", want, N_VALUES);
    load_values("optim_clip_norm.npy", &norm, 1);
    model m;
    model_init(&m, TG_FLOAT64, init);
    for (int i = 0; i < N_PARAMS; i++)
        set_grad(&m, i, grads);
    ck_assert_double_eq_tol(tg_clip_grad_norm(&m.ps, 1.0), norm, 1e-12);
    int64_t k = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        double g[12];
        ck_assert_int_eq(tg_copy_out(tg_grad(m.p[i]), TG_FLOAT64, g), 0);
        for (int64_t j = 0; j < SIZES[i]; j++, k++)
            ck_assert_double_eq_tol(g[j], want[k], 1e-15);
    }
    /* The clipped gradients' norm is norm / (norm + 1e-6), just below 1. */
    ck_assert_double_eq_tol(tg_clip_grad_norm(&m.ps, 1.0), 1.0, 1e-6);
    ck_assert_double_lt(tg_clip_grad_norm(&m.ps, 1.0), 1.0);
    model_free(&m);
}
END_TEST

START_TEST(clip_below_max_and_skips)
{
    tg_tensor *a = tg_ones(TG_FLOAT32, TG_SHAPE(2, 2));
    tg_tensor *b = tg_ones(TG_FLOAT32, TG_SHAPE(3)); /* no gradient */
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_double_eq(tg_clip_grad_norm(&ps, 1.0), 0.0); /* empty */
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "b", b);
    ck_assert_double_eq(tg_clip_grad_norm(&ps, 1.0), 0.0); /* no grads */
    tg_scope_begin();
    tg_tensor *g = tg_full(TG_FLOAT32, TG_SHAPE(2, 2), 1.5);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(a, g))), 0);
    tg_scope_end();
    /* |g| = sqrt(4 * 1.5^2) = 3 <= 5: returned, nothing scaled. */
    ck_assert_double_eq(tg_clip_grad_norm(&ps, 5.0), 3.0);
    ck_assert_double_eq(tg_get(tg_grad(a), (int64_t[]){1, 1}), 1.5);
    ck_assert_ptr_null(tg_grad(b));
    /* 3 > 2: scaled by 2 / (3 + 1e-6), in float32. */
    ck_assert_double_eq(tg_clip_grad_norm(&ps, 2.0), 3.0);
    ck_assert_double_eq(tg_get(tg_grad(a), (int64_t[]){0, 1}),
                        (double)(1.5f * (float)(2.0 / (3.0 + 1e-6))));
    tg_params_free(&ps);
    tg_release(a);
    tg_release(b);
}
END_TEST

/* ---- optimizers against torch ------------------------------------------- */

typedef struct optim_case {
    const char *fixture;
    tg_optim_config (*config)(void);
    tg_dtype dtype;
    double tol;
} optim_case;

static tg_optim_config sgd(void) { return tg_sgd_config(0.1, 0.9, 0.01); }
static tg_optim_config sgd_plain(void) { return tg_sgd_config(0.1, 0, 0); }
static tg_optim_config adam(void) { return tg_adam_config(0.01); }
static tg_optim_config adam_wd(void)
{
    tg_optim_config c = tg_adam_config(0.01);
    c.weight_decay = 0.01;
    return c;
}
static tg_optim_config adamw(void) { return tg_adamw_config(0.01, 0.01); }

/* float64 agrees with torch to rounding; float32 to a few float ulps of
 * values of size ~3 (torch's vectorised kernels fuse multiply-adds). */
static const optim_case OPTIM_CASES[] = {
    {"optim_sgd_f8.npy", sgd, TG_FLOAT64, 1e-12},
    {"optim_sgd_plain_f8.npy", sgd_plain, TG_FLOAT64, 1e-12},
    {"optim_adam_f8.npy", adam, TG_FLOAT64, 1e-12},
    {"optim_adam_wd_f8.npy", adam_wd, TG_FLOAT64, 1e-12},
    {"optim_adamw_f8.npy", adamw, TG_FLOAT64, 1e-12},
    {"optim_sgd_f4.npy", sgd, TG_FLOAT32, 1e-6},
    {"optim_sgd_plain_f4.npy", sgd_plain, TG_FLOAT32, 1e-6},
    {"optim_adam_f4.npy", adam, TG_FLOAT32, 1e-6},
    {"optim_adam_wd_f4.npy", adam_wd, TG_FLOAT32, 1e-6},
    {"optim_adamw_f4.npy", adamw, TG_FLOAT32, 1e-6},
};

/* N_STEPS steps from the fixture gradients (b skipping step 1), each
 * compared with torch's parameters after that step. */
START_TEST(optim_matches_torch)
{
    const optim_case *c = &OPTIM_CASES[_i];
    double init[N_VALUES], grads[N_STEPS * N_VALUES];
    double want[N_STEPS * N_VALUES], got[N_VALUES], before[N_VALUES];
    load_values("optim_init.npy", init, N_VALUES);
    load_values("optim_grads.npy", grads, N_STEPS * N_VALUES);
    load_values(c->fixture, want, N_STEPS * N_VALUES);
    model m;
    model_init(&m, c->dtype, init);
    tg_optim *o = tg_optim_new(&m.ps, c->config());
    ck_assert_msg(o != NULL, "%s", tg_last_error());
    for (int s = 0; s < N_STEPS; s++) {
        model_values(&m, before);
        for (int i = 0; i < N_PARAMS; i++)
            if (i == SKIP_PARAM && s == SKIP_STEP)
                tg_zero_grad(m.p[i]);
            else
                set_grad(&m, i, grads + s * N_VALUES);
        ck_assert_int_eq(tg_optim_step(o), 0);
        model_values(&m, got);
        for (int k = 0; k < N_VALUES; k++)
            ck_assert_msg(fabs(got[k] - want[s * N_VALUES + k]) <= c->tol,
                          "%s step %d value %d: got %.17g, torch %.17g",
                          c->fixture, s, k, got[k], want[s * N_VALUES + k]);
        if (s == SKIP_STEP) /* b, without a gradient, is untouched */
            for (int k = 12; k < 12 + 5; k++)
                ck_assert_double_eq(got[k], before[k]);
    }
    tg_optim_zero_grad(o);
    for (int i = 0; i < N_PARAMS; i++)
        ck_assert_ptr_null(tg_grad(m.p[i]));
    tg_optim_free(o);
    model_free(&m);
}
END_TEST

START_TEST(optim_configs)
{
    tg_optim_config s = tg_sgd_config(0.5, 0.9, 1e-4);
    ck_assert_int_eq(s.kind, TG_SGD);
    ck_assert_double_eq(s.lr, 0.5);
    ck_assert_double_eq(s.momentum, 0.9);
    ck_assert_double_eq(s.weight_decay, 1e-4);
    tg_optim_config a = tg_adam_config(1e-3);
    ck_assert_int_eq(a.kind, TG_ADAM);
    ck_assert_double_eq(a.lr, 1e-3);
    ck_assert_double_eq(a.beta1, 0.9);
    ck_assert_double_eq(a.beta2, 0.999);
    ck_assert_double_eq(a.eps, 1e-8);
    ck_assert_double_eq(a.weight_decay, 0);
    tg_optim_config w = tg_adamw_config(1e-3, 0.01);
    ck_assert_int_eq(w.kind, TG_ADAMW);
    ck_assert_double_eq(w.weight_decay, 0.01);
    ck_assert_double_eq(w.beta2, 0.999);
}
END_TEST

/* The optimizer copies the list and holds its own references: the list and
 * the caller's tensors can go first. A step without gradients changes
 * nothing. */
START_TEST(optim_owns_its_params)
{
    double init[N_VALUES], grads[N_STEPS * N_VALUES], got[N_VALUES];
    load_values("optim_init.npy", init, N_VALUES);
    load_values("optim_grads.npy", grads, N_STEPS * N_VALUES);
    model m;
    model_init(&m, TG_FLOAT64, init);
    tg_optim *o = tg_optim_new(&m.ps, tg_adam_config(0.1));
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_step(o), 0); /* no gradients yet */
    model_values(&m, got);
    for (int k = 0; k < N_VALUES; k++)
        ck_assert_double_eq(got[k], init[k]);
    tg_tensor *a = tg_retain(m.p[0]);
    set_grad(&m, 0, grads);
    model_free(&m); /* the list and the other references */
    ck_assert_int_eq(tg_optim_step(o), 0);
    /* Adam's first step moves each element by lr * g / (|g| + eps). */
    ck_assert_double_eq_tol(tg_get(a, (int64_t[]){0, 0}),
                            init[0] - 0.1 * copysign(1.0, grads[0]), 1e-8);
    tg_optim_free(o);
    tg_release(a);
    tg_optim_free(NULL);
}
END_TEST

START_TEST(optim_errors)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(2));
    tg_tensor *ids = tg_zeros(TG_INT64, TG_SHAPE(2));
    tg_params_add(&ps, NULL, "w", w);
    ck_assert_ptr_null(tg_optim_new(&ps, tg_sgd_config(-1, 0, 0)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "lr"));
    ck_assert_ptr_null(tg_optim_new(&ps, tg_sgd_config(0.1, -0.5, 0)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "momentum"));
    tg_optim_config c = tg_adam_config(0.1);
    c.beta2 = 1.0;
    ck_assert_ptr_null(tg_optim_new(&ps, c));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "beta2"));
    c = tg_adamw_config(NAN, 0.01);
    ck_assert_ptr_null(tg_optim_new(&ps, c));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "lr"));
    ck_assert_ptr_null(tg_optim_new(NULL, tg_adam_config(0.1)));
    tg_params_add(&ps, NULL, "again", w);
    ck_assert_ptr_null(tg_optim_new(&ps, tg_adam_config(0.1)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "same tensor"));
    tg_params_free(&ps);
    tg_params_add(&ps, NULL, "ids", ids);
    ck_assert_ptr_null(tg_optim_new(&ps, tg_adam_config(0.1)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "parameter 'ids' is int64"));
    ck_assert_int_eq(tg_optim_step(NULL), -1);
    tg_params_free(&ps);
    tg_release(w);
    tg_release(ids);
}
END_TEST

/* ---- checkpoints -------------------------------------------------------- */

/* Values i * 0.37 - 1.1 + offset in every parameter of m. */
static void fill(model *m, double offset)
{
    double row[N_VALUES];
    for (int k = 0; k < N_VALUES; k++)
        row[k] = k * 0.37 - 1.1 + offset;
    for (int i = 0; i < N_PARAMS; i++) {
        tg_tensor *t = slice_of(row, i, tg_dtype_of(m->p[i]));
        int64_t n = tg_numel(t), idx[3] = {0};
        double v[12];
        tg_copy_out(t, TG_FLOAT64, v);
        for (int64_t j = 0; j < n; j++) {
            ck_assert_int_eq(tg_set(m->p[i], idx, v[j]), 0);
            for (int d = NDIMS[i] - 1; d >= 0 && ++idx[d] == SHAPES[i][d]; d--)
                idx[d] = 0;
        }
        tg_release(t);
    }
}

static void assert_same_values(const model *a, const model *b)
{
    double va[N_VALUES], vb[N_VALUES];
    model_values(a, va);
    model_values(b, vb);
    for (int k = 0; k < N_VALUES; k++)
        ck_assert_msg(va[k] == vb[k], "value %d: %.17g != %.17g", k, va[k],
                      vb[k]);
}

START_TEST(npz_round_trip)
{
    tg_dtype dt = _i ? TG_FLOAT32 : TG_FLOAT64;
    double zeros[N_VALUES] = {0};
    model saved, loaded;
    model_init(&saved, dt, zeros);
    model_init(&loaded, dt, zeros);
    fill(&saved, 0.25);
    char path[256];
    tmp_file(path, sizeof path);
    ck_assert_int_eq(tg_save_npz(&saved.ps, path), 0);
    ck_assert_int_eq(tg_load_npz(&loaded.ps, path), 0);
    assert_same_values(&saved, &loaded);
    /* The same values save to the same bytes. */
    char again[256];
    tmp_file(again, sizeof again);
    ck_assert_int_eq(tg_save_npz(&loaded.ps, again), 0);
    size_t n1, n2;
    unsigned char *b1 = read_bytes(path, &n1), *b2 = read_bytes(again, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert_int_eq(memcmp(b1, b2, n1), 0);
    free(b1);
    free(b2);
    remove(path);
    remove(again);
    model_free(&saved);
    model_free(&loaded);
}
END_TEST

static uint32_t get32(const unsigned char *b)
{
    return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put32(unsigned char *b, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        b[k] = (unsigned char)(v >> 8 * k);
}

/* zip's CRC-32, bit by bit (the library uses a table). */
static uint32_t crc32_bitwise(const unsigned char *b, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

/* Each entry is the .npy file tg_save_npy writes, stored uncompressed, with
 * zip's CRC-32 of it. */
START_TEST(npz_entries_are_npy_files)
{
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), -0.5);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, "lin", "w", w);
    char npz[256], npy[256];
    tmp_file(npz, sizeof npz);
    tmp_file(npy, sizeof npy);
    ck_assert_int_eq(tg_save_npz(&ps, npz), 0);
    ck_assert_int_eq(tg_save_npy(w, npy), 0);
    size_t zn, yn;
    unsigned char *z = read_bytes(npz, &zn), *y = read_bytes(npy, &yn);
    ck_assert_int_eq(memcmp(z, "PK\3\4", 4), 0);
    ck_assert_int_eq(z[8] | z[9] << 8, 0); /* stored */
    ck_assert_uint_eq(z[26] | z[27] << 8, strlen("lin.w.npy"));
    ck_assert_int_eq(memcmp(z + 30, "lin.w.npy", 9), 0);
    ck_assert_int_eq(memcmp(z + 39, y, yn), 0); /* the .npy file */
    ck_assert_uint_eq(get32(z + 14), crc32_bitwise(y, yn));
    ck_assert_int_eq(memcmp(z + zn - 22, "PK\5\6", 4), 0);
    free(z);
    free(y);
    tg_params_free(&ps);
    tg_release(w);
}
END_TEST

/* numpy.savez's file: w float64 (2,3), blocks.0.b float32 (4,), s (). */
typedef struct numpy_ckpt {
    tg_tensor *w, *b, *s;
    tg_params ps;
} numpy_ckpt;

static void numpy_ckpt_init(numpy_ckpt *c, tg_dtype b_dtype,
                            const int64_t *w_shape)
{
    c->w = tg_full(TG_FLOAT64, 2, w_shape, 7);
    c->b = tg_full(b_dtype, TG_SHAPE(4), 7);
    c->s = tg_scalar(TG_FLOAT64, 7);
    tg_params_init(&c->ps);
    tg_params_add(&c->ps, NULL, "s", c->s);
    tg_params_add(&c->ps, "blocks.0", "b", c->b);
    tg_params_add(&c->ps, NULL, "w", c->w);
}

static void numpy_ckpt_free(numpy_ckpt *c)
{
    tg_release(c->w);
    tg_release(c->b);
    tg_release(c->s);
    tg_params_free(&c->ps);
}

static void assert_all(const tg_tensor *t, double v)
{
    double got[8];
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, got), 0);
    for (int64_t i = 0; i < tg_numel(t); i++)
        ck_assert_double_eq(got[i], v);
}

START_TEST(npz_loads_numpy_savez)
{
    tg_dtype b_dtype = _i ? TG_FLOAT64 : TG_FLOAT32; /* float32 converts */
    numpy_ckpt c;
    numpy_ckpt_init(&c, b_dtype, (int64_t[]){2, 3});
    ck_assert_msg(tg_load_npz(&c.ps, fixture_path("optim_ckpt.npz")) == 0, "%s",
                  tg_last_error());
    for (int64_t i = 0; i < 6; i++)
        ck_assert_double_eq(tg_get(c.w, (int64_t[]){i / 3, i % 3}),
                            i / 4.0 - 1);
    static const double b[] = {0.5, -1.5, 2.25, 8};
    for (int64_t i = 0; i < 4; i++)
        ck_assert_double_eq(tg_get(c.b, &i), b[i]);
    ck_assert_double_eq(tg_item(c.s), 3.5);
    numpy_ckpt_free(&c);
}
END_TEST

/* A list of some of the entries loads those; the rest are ignored. */
START_TEST(npz_loads_a_subset)
{
    tg_tensor *s = tg_scalar(TG_FLOAT32, 0);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "s", s);
    ck_assert_int_eq(tg_load_npz(&ps, fixture_path("optim_ckpt.npz")), 0);
    ck_assert_double_eq(tg_item(s), 3.5);
    tg_params_free(&ps);
    tg_release(s);
}
END_TEST

START_TEST(npz_missing_entry)
{
    numpy_ckpt c;
    numpy_ckpt_init(&c, TG_FLOAT32, (int64_t[]){2, 3});
    tg_tensor *v = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    tg_params_add(&c.ps, "head", "v", v);
    ck_assert_int_eq(tg_load_npz(&c.ps, fixture_path("optim_ckpt.npz")), -1);
    ck_assert_msg(strstr(tg_last_error(), "no entry 'head.v.npy' for "
                                          "parameter 'head.v'"),
                  "%s", tg_last_error());
    assert_all(c.w, 7); /* nothing changed */
    assert_all(c.b, 7);
    assert_all(c.s, 7);
    tg_release(v);
    numpy_ckpt_free(&c);
}
END_TEST

START_TEST(npz_wrong_shape)
{
    numpy_ckpt c;
    numpy_ckpt_init(&c, TG_FLOAT32, (int64_t[]){3, 2});
    ck_assert_int_eq(tg_load_npz(&c.ps, fixture_path("optim_ckpt.npz")), -1);
    const char *err = tg_last_error();
    ck_assert_msg(strstr(err, "parameter 'w' has shape (3,2)") &&
                      strstr(err, "entry 'w.npy' has shape (2,3)"),
                  "%s", err);
    assert_all(c.w, 7); /* nothing changed, not even s and b before it */
    assert_all(c.b, 7);
    assert_all(c.s, 7);
    numpy_ckpt_free(&c);
}
END_TEST

/* numpy.savez_compressed's deflated entries load as savez's stored ones. */
START_TEST(npz_compressed)
{
    numpy_ckpt c;
    numpy_ckpt_init(&c, TG_FLOAT32, (int64_t[]){2, 3});
    ck_assert_msg(
        tg_load_npz(&c.ps, fixture_path("optim_ckpt_compressed.npz")) == 0,
        "%s", tg_last_error());
    for (int64_t i = 0; i < 6; i++)
        ck_assert_double_eq(tg_get(c.w, (int64_t[]){i / 3, i % 3}),
                            i / 4.0 - 1);
    ck_assert_double_eq(tg_item(c.s), 3.5);
    numpy_ckpt_free(&c);
}
END_TEST

START_TEST(npz_not_a_file)
{
    numpy_ckpt c;
    numpy_ckpt_init(&c, TG_FLOAT32, (int64_t[]){2, 3});
    char path[256];
    snprintf(path, sizeof path, "%s/does_not_exist.npz", scratch_dir);
    ck_assert_int_eq(tg_load_npz(&c.ps, path), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "cannot open"));
    ck_assert_int_eq(tg_load_npz(&c.ps, scratch_dir), -1); /* a directory */
    ck_assert_int_eq(tg_load_npz(&c.ps, fixture_path("optim_init.npy")), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "not a zip file"));
    tmp_file(path, sizeof path); /* empty */
    ck_assert_int_eq(tg_load_npz(&c.ps, path), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "not a zip file"));
    ck_assert_int_eq(tg_load_npz(NULL, path), -1);
    ck_assert_int_eq(tg_load_npz(&c.ps, NULL), -1);
    assert_all(c.w, 7);
    remove(path);
    numpy_ckpt_free(&c);
}
END_TEST

/* Every truncation of a good checkpoint fails and leaves the parameters
 * alone. So does every single-byte corruption, except in the bytes a zip
 * reader does not need (dates, versions, attributes, the local copies of
 * CRC and sizes: about one in seven here), which load the right values. */
START_TEST(npz_truncated_or_corrupt)
{
    double zeros[N_VALUES] = {0};
    model saved, loaded;
    model_init(&saved, TG_FLOAT64, zeros);
    model_init(&loaded, TG_FLOAT64, zeros);
    fill(&saved, 0.5);
    char good[256], bad[256];
    tmp_file(good, sizeof good);
    tmp_file(bad, sizeof bad);
    ck_assert_int_eq(tg_save_npz(&saved.ps, good), 0);
    size_t n;
    unsigned char *bytes = read_bytes(good, &n);
    for (size_t len = 0; len < n; len++) {
        write_bytes(bad, bytes, len);
        fill(&loaded, 0);
        ck_assert_msg(tg_load_npz(&loaded.ps, bad) == -1,
                      "truncated to %zu bytes: loaded", len);
        ck_assert_ptr_nonnull(strstr(tg_last_error(), "load_npz: "));
        double v[N_VALUES];
        model_values(&loaded, v);
        ck_assert_double_eq(v[1], 0.37 - 1.1);
    }
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        bytes[i] ^= 0x5a;
        write_bytes(bad, bytes, n);
        bytes[i] ^= 0x5a;
        fill(&loaded, 0);
        if (tg_load_npz(&loaded.ps, bad) == 0) {
            assert_same_values(&saved, &loaded);
        } else {
            failures++;
            double v[N_VALUES];
            model_values(&loaded, v);
            ck_assert_double_eq(v[1], 0.37 - 1.1);
        }
    }
    ck_assert_int_gt(failures, (int)n * 4 / 5);
    free(bytes);
    remove(good);
    remove(bad);
    model_free(&saved);
    model_free(&loaded);
}
END_TEST

START_TEST(npz_crc_mismatch)
{
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(3), 2);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    char path[256];
    tmp_file(path, sizeof path);
    ck_assert_int_eq(tg_save_npz(&ps, path), 0);
    size_t n;
    unsigned char *bytes = read_bytes(path, &n);
    bytes[30 + 5 + 128] ^= 1; /* a data byte, after name and npy header */
    write_bytes(path, bytes, n);
    ck_assert_int_eq(tg_load_npz(&ps, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "entry 'w.npy' fails its CRC check"),
                  "%s", tg_last_error());
    assert_all(w, 2);
    free(bytes);
    remove(path);
    tg_params_free(&ps);
    tg_release(w);
}
END_TEST

/* An entry that is a valid zip member but not a .npy file fails with the
 * .npy parser's reason, naming the entry. */
START_TEST(npz_entry_not_npy)
{
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(3), 2);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    char path[256];
    tmp_file(path, sizeof path);
    ck_assert_int_eq(tg_save_npz(&ps, path), 0);
    size_t n;
    unsigned char *z = read_bytes(path, &n);
    size_t data = 30 + strlen("w.npy"), size = get32(z + 22);
    z[data] = 'X'; /* the .npy magic's first byte; then fix both CRCs */
    uint32_t crc = crc32_bitwise(z + data, size);
    put32(z + 14, crc);
    put32(z + get32(z + n - 22 + 16) + 16, crc);
    write_bytes(path, z, n);
    ck_assert_int_eq(tg_load_npz(&ps, path), -1);
    ck_assert_msg(
        strstr(tg_last_error(), "load_npz: ") &&
            strstr(tg_last_error(), ", entry 'w.npy': not a .npy file"),
        "%s", tg_last_error());
    assert_all(w, 2);
    free(z);
    remove(path);
    tg_params_free(&ps);
    tg_release(w);
}
END_TEST

START_TEST(npz_save_errors)
{
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w", w);
    char path[256];
    snprintf(path, sizeof path, "%s/no/such/dir.npz", scratch_dir);
    ck_assert_int_eq(tg_save_npz(&ps, path), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "save_npz: "));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "cannot open"));
    if (access("/dev/full", W_OK) == 0) {
        ck_assert_int_eq(tg_save_npz(&ps, "/dev/full"), -1);
        ck_assert_ptr_nonnull(strstr(tg_last_error(), "write failed"));
        ck_assert_int_eq(access("/dev/full", F_OK), 0); /* never unlinked */
    }
    ck_assert_int_eq(tg_save_npz(NULL, path), -1);
    ck_assert_int_eq(tg_save_npz(&ps, NULL), -1);
    tg_params_free(&ps);
    tg_release(w);
}
END_TEST

Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");

    TCase *params = tcase_create("params");
    tcase_add_test(params, params_add_get_numel);
    tcase_add_test(params, params_grow);
    tcase_add_test(params, params_add_errors);
    tcase_add_test(params, params_zero_grad);
    tcase_add_test(params, clip_matches_torch);
    tcase_add_test(params, clip_below_max_and_skips);
    suite_add_tcase(s, params);

    TCase *optim = tcase_create("optim");
    tcase_add_loop_test(optim, optim_matches_torch, 0, COUNT(OPTIM_CASES));
    tcase_add_test(optim, optim_configs);
    tcase_add_test(optim, optim_owns_its_params);
    tcase_add_test(optim, optim_errors);
    suite_add_tcase(s, optim);

    TCase *npz = tcase_create("npz");
    tcase_add_unchecked_fixture(npz, scratch_setup, scratch_teardown);
    tcase_add_loop_test(npz, npz_round_trip, 0, 2);
    tcase_add_test(npz, npz_entries_are_npy_files);
    tcase_add_loop_test(npz, npz_loads_numpy_savez, 0, 2);
    tcase_add_test(npz, npz_loads_a_subset);
    tcase_add_test(npz, npz_missing_entry);
    tcase_add_test(npz, npz_wrong_shape);
    tcase_add_test(npz, npz_compressed);
    tcase_add_test(npz, npz_not_a_file);
    tcase_add_test(npz, npz_truncated_or_corrupt);
    tcase_add_test(npz, npz_crc_mismatch);
    tcase_add_test(npz, npz_entry_not_npy);
    tcase_add_test(npz, npz_save_errors);
    suite_add_tcase(s, npz);
    return s;
}
