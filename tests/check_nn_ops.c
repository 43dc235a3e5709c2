/* The ops for transformers: cat, chunk, embedding, gather, layer_norm, gelu,
 * cross_entropy and mse_loss, against PyTorch (fixtures from
 * fixtures/gen_nn_ops.py, nnops_*) in float64 and float32; gradients by
 * central differences on contiguous, transposed and sliced inputs, and
 * against torch autograd where the gradient is the point (embedding's
 * repeated ids, cross-entropy, layer norm's parameters); masked logits with
 * exactly 0 gradient; and every op's errors. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

/* The fixture nnops_<name>.npy (a new reference). */
static tg_tensor *fx(const char *name)
{
    char file[128];
    snprintf(file, sizeof file, "nnops_%s.npy", name);
    return load_fixture(file);
}

/* The float64 fixture converted to dt. */
static tg_tensor *fx_as(const char *name, tg_dtype dt)
{
    tg_tensor *raw = fx(name);
    tg_tensor *t = tg_to(raw, dt);
    tg_release(raw);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* The float64 fixture as a leaf that requires grad. */
static tg_tensor *fx_leaf(const char *name)
{
    tg_tensor *t = fx(name);
    tg_set_requires_grad(t, true);
    return t;
}

/* A normal float64 leaf requiring grad: C order, or the transpose of dims 0
 * and last of a tensor drawn in the reversed shape (not contiguous). */
static tg_tensor *randn_leaf(int ndim, const int64_t *shape, bool transposed,
                             uint32_t seed)
{
    int64_t drawn[TG_MAX_DIMS];
    memcpy(drawn, shape, sizeof(int64_t) * (size_t)ndim);
    if (transposed)
        drawn[0] = shape[ndim - 1], drawn[ndim - 1] = shape[0];
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tensor *base = tg_randn(&rng, TG_FLOAT64, ndim, drawn);
    tg_tensor *t = transposed ? tg_transpose(base, 0, -1) : tg_retain(base);
    tg_release(base);
    ck_assert(!transposed || !tg_is_contiguous(t));
    tg_set_requires_grad(t, true);
    return t;
}

/* Asserts got matches fixture `name` within tol, then releases got. */
static void expect(tg_tensor *got, const char *name, double tol)
{
    tg_tensor *want = fx(name);
    assert_close(got, want, tol);
    tg_release(want);
    tg_release(got);
}

static const tg_dtype float_dtypes[] = {TG_FLOAT64, TG_FLOAT32};
static double tol_for(tg_dtype dt) { return dt == TG_FLOAT32 ? 2e-6 : 1e-12; }

/* ---- forward: cat and chunk ---------------------------------------------- */

START_TEST(cat_forward)
{
    tg_dtype dt = float_dtypes[_i];
    tg_tensor *x0 = fx_as("cat_x0", dt), *x1 = fx_as("cat_x1", dt),
              *x2 = fx_as("cat_x2", dt), *y = fx_as("cat_y", dt);
    double tol = tol_for(dt);
    expect(tg_cat((tg_tensor *[]){x0, x1, x2}, 3, 1), "cat_d1", tol);
    expect(tg_cat((tg_tensor *[]){x0, x1, x2}, 3, -2), "cat_d1", tol);
    expect(tg_cat((tg_tensor *[]){x0, y}, 2, -1), "cat_dm1", tol);
    expect(tg_cat((tg_tensor *[]){x0, x1, x2, x1, x0}, 5, 1), "cat_five", tol);
    tg_tensor *x0t = tg_transpose(x0, 0, 2), *yt = tg_transpose(y, 0, 2);
    expect(tg_cat((tg_tensor *[]){x0t, yt}, 2, 0), "cat_t", tol);
    tg_tensor *x0s = tg_slice(x0, 2, 1, 3);
    expect(tg_cat((tg_tensor *[]){x0s, y}, 2, 2), "cat_s", tol);
    tg_tensor *one = tg_cat(&x1, 1, 0); /* a copy of a single tensor */
    ck_assert_int_eq(tg_dtype_of(one), dt);
    expect(one, "cat_x1", tol);
    tg_release(x0s);
    tg_release(yt);
    tg_release(x0t);
    tg_release(y);
    tg_release(x2);
    tg_release(x1);
    tg_release(x0);
}
END_TEST

/* Other dtypes join too (no gradient): int64 ids, with empty parts. */
START_TEST(cat_int64_and_empty)
{
    tg_tensor *a = tg_from_data(TG_INT64, TG_SHAPE(2), (const int64_t[]){7, 8});
    tg_tensor *e = tg_zeros(TG_INT64, TG_SHAPE(0));
    tg_tensor *b = tg_from_data(TG_INT64, TG_SHAPE(1), (const int64_t[]){-1});
    tg_tensor *c = tg_cat((tg_tensor *[]){a, e, b, e}, 4, 0);
    int64_t v[3];
    ck_assert_int_eq(tg_copy_out(c, TG_INT64, v), 0);
    ck_assert(tg_dtype_of(c) == TG_INT64 && tg_numel(c) == 3);
    ck_assert(v[0] == 7 && v[1] == 8 && v[2] == -1);
    tg_release(c);
    tg_release(b);
    tg_release(e);
    tg_release(a);
}
END_TEST

START_TEST(chunk_forward)
{
    tg_tensor *x0 = fx("cat_x0"), *parts[3];
    ck_assert_int_eq(tg_chunk(x0, 2, -1, parts), 0);
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "chunk_dm1_%d", i);
        ck_assert(!tg_is_contiguous(parts[i])); /* views, not copies */
        expect(parts[i], name, 0);
    }
    ck_assert_int_eq(tg_chunk(x0, 3, 1, parts), 0);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "chunk_d1_%d", i);
        expect(parts[i], name, 0);
    }
    ck_assert_int_eq(tg_chunk(x0, 1, 0, parts), 0);
    expect(parts[0], "cat_x0", 0);
    tg_release(x0);
}
END_TEST

/* ---- forward: embedding and gather ------------------------------------- */

START_TEST(embedding_forward)
{
    tg_dtype dt = float_dtypes[_i];
    tg_tensor *w = fx_as("emb_w", dt), *ids = fx("emb_ids"),
              *ids1 = fx("emb_ids1");
    ck_assert_int_eq(tg_dtype_of(ids), TG_INT64);
    tg_tensor *out = tg_embedding(w, ids);
    assert_shape(out, 3, (const int64_t[]){2, 4, 3});
    ck_assert_int_eq(tg_dtype_of(out), dt);
    expect(out, dt == TG_FLOAT32 ? "emb_out_f4" : "emb_out", tol_for(dt));
    expect(tg_embedding(w, ids1), "emb_out1", tol_for(dt));
    /* A 0-d id gives one row, (C,). */
    tg_tensor *id = tg_from_data(TG_INT64, 0, NULL, (const int64_t[]){4});
    tg_tensor *row = tg_embedding(w, id), *want = tg_select(w, 0, 4);
    assert_close(row, want, 0);
    /* A transposed (non-contiguous) table and non-contiguous ids. */
    tg_tensor *wt = tg_transpose(w, 0, 1), *wtc = tg_contiguous(wt);
    tg_tensor *w2 = tg_transpose(wtc, 0, 1), *idst = tg_transpose(ids, 0, 1);
    tg_tensor *o2 = tg_embedding(w2, idst), *o1 = tg_embedding(w, idst);
    ck_assert(!tg_is_contiguous(w2) && !tg_is_contiguous(idst));
    assert_shape(o2, 3, (const int64_t[]){4, 2, 3});
    assert_close(o2, o1, 0);
    tg_release(o1);
    tg_release(o2);
    tg_release(idst);
    tg_release(w2);
    tg_release(wtc);
    tg_release(wt);
    tg_release(want);
    tg_release(row);
    tg_release(id);
    tg_release(ids1);
    tg_release(ids);
    tg_release(w);
}
END_TEST

START_TEST(gather_forward)
{
    tg_dtype dt = float_dtypes[_i];
    tg_tensor *t = fx_as("gather_t", dt), *t3 = fx_as("gather_t3", dt);
    tg_tensor *i0 = fx("gather_idx0"), *i1 = fx("gather_idx1"),
              *i3 = fx("gather_idx3");
    double tol = tol_for(dt);
    expect(tg_gather(t, 0, i0), "gather_d0", tol);
    expect(tg_gather(t, -1, i1), "gather_d1", tol);
    expect(tg_gather(t3, 1, i3), "gather_d3", tol);
    /* gather(t^T, 1, i) = gather(t, 0, i^T)^T on a transposed t. */
    tg_tensor *tt = tg_transpose(t, 0, 1), *i0t = tg_transpose(i0, 0, 1);
    tg_tensor *g = tg_gather(tt, 1, i0t), *gt = tg_transpose(g, 0, 1);
    expect(gt, "gather_d0", tol);
    tg_release(g);
    tg_release(i0t);
    tg_release(tt);
    tg_release(i3);
    tg_release(i1);
    tg_release(i0);
    tg_release(t3);
    tg_release(t);
}
END_TEST

/* ---- forward: layer_norm, gelu ----------------------------------------- */

START_TEST(layer_norm_forward)
{
    tg_dtype dt = float_dtypes[_i];
    bool f4 = dt == TG_FLOAT32;
    tg_tensor *x = fx_as("ln_x", dt), *g = fx_as("ln_gamma", dt),
              *b = fx_as("ln_beta", dt);
    expect(tg_layer_norm(x, g, b, 1e-5), f4 ? "ln_affine_f4" : "ln_affine",
           tol_for(dt));
    expect(tg_layer_norm(x, NULL, NULL, 1e-5), f4 ? "ln_plain_f4" : "ln_plain",
           tol_for(dt));
    /* Transposed x reads in place: the same as its contiguous copy. */
    tg_tensor *xt = tg_transpose(x, 0, 1), *xc = tg_contiguous(xt);
    tg_tensor *yt = tg_layer_norm(xt, g, b, 1e-5),
              *yc = tg_layer_norm(xc, g, b, 1e-5);
    assert_close(yt, yc, 0);
    tg_release(yc);
    tg_release(yt);
    tg_release(xc);
    tg_release(xt);
    tg_release(b);
    tg_release(g);
    tg_release(x);
}
END_TEST

/* A constant row has variance 0: y = beta (no NaN), rstd = 1/sqrt(eps). */
START_TEST(layer_norm_constant_row)
{
    tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(2, 4), 3.0);
    tg_tensor *b = tg_full(TG_FLOAT64, TG_SHAPE(4), 0.25);
    tg_tensor *y = tg_layer_norm(x, NULL, b, 1e-5);
    tg_tensor *want = tg_full(TG_FLOAT64, TG_SHAPE(2, 4), 0.25);
    assert_close(y, want, 0);
    tg_release(want);
    tg_release(y);
    tg_release(b);
    tg_release(x);
}
END_TEST

START_TEST(gelu_forward)
{
    tg_dtype dt = float_dtypes[_i];
    tg_tensor *x = fx_as("gelu_x", dt);
    expect(tg_gelu(x), dt == TG_FLOAT32 ? "gelu_y_f4" : "gelu_y", tol_for(dt));
    tg_tensor *xt = tg_transpose(x, 0, 1), *yt = tg_gelu(xt),
              *y = tg_transpose(yt, 0, 1);
    expect(y, dt == TG_FLOAT32 ? "gelu_y_f4" : "gelu_y", tol_for(dt));
    tg_release(yt);
    tg_release(xt);
    tg_release(x);
}
END_TEST

/* ---- forward: losses ----------------------------------------------------- */

START_TEST(cross_entropy_forward)
{
    tg_dtype dt = float_dtypes[_i];
    bool f4 = dt == TG_FLOAT32;
    tg_tensor *l2 = fx_as("ce_logits", dt), *t2 = fx("ce_targets");
    tg_tensor *l3 = fx_as("ce_logits3", dt), *t3 = fx("ce_targets3");
    tg_tensor *loss = tg_cross_entropy(l2, t2);
    assert_shape(loss, 0, NULL);
    ck_assert_int_eq(tg_dtype_of(loss), dt);
    expect(loss, f4 ? "ce_loss_f4" : "ce_loss", tol_for(dt));
    expect(tg_cross_entropy(l3, t3), f4 ? "ce_loss3_f4" : "ce_loss3",
           tol_for(dt));
    /* (B,T,V) with non-contiguous logits: the transpose of a (B,V,T) copy. */
    tg_tensor *lt = tg_transpose(l3, 1, 2), *ltc = tg_contiguous(lt);
    tg_tensor *l3s = tg_transpose(ltc, 1, 2);
    ck_assert(!tg_is_contiguous(l3s));
    expect(tg_cross_entropy(l3s, t3), f4 ? "ce_loss3_f4" : "ce_loss3",
           tol_for(dt));
    tg_release(l3s);
    tg_release(ltc);
    tg_release(lt);
    tg_release(t3);
    tg_release(l3);
    tg_release(t2);
    tg_release(l2);
}
END_TEST

/* -inf logits at non-target classes cost nothing; a -inf target logit makes
 * the loss +inf; 500x logits do not overflow (max subtracted). */
START_TEST(cross_entropy_masked_and_big)
{
    tg_tensor *m = fx("ce_masked_logits"), *tm = fx("ce_targets_masked");
    expect(tg_cross_entropy(m, tm), "ce_masked_loss", 1e-12);
    tg_tensor *big = fx("ce_big_logits"), *t = fx("ce_targets");
    tg_tensor *loss = tg_cross_entropy(big, t);
    ck_assert(isfinite(tg_item(loss)));
    expect(loss, "ce_big_loss", 1e-9);
    tg_tensor *row = tg_from_data(TG_FLOAT64, TG_SHAPE(1, 3),
                                  (const double[]){0.5, -INFINITY, 1.0});
    tg_tensor *target1 =
        tg_from_data(TG_INT64, TG_SHAPE(1), (const int64_t[]){1});
    tg_tensor *inf = tg_cross_entropy(row, target1);
    ck_assert(tg_item(inf) == INFINITY);
    tg_release(inf);
    tg_release(target1);
    tg_release(row);
    tg_release(t);
    tg_release(big);
    tg_release(tm);
    tg_release(m);
}
END_TEST

START_TEST(mse_forward)
{
    tg_dtype dt = float_dtypes[_i];
    tg_tensor *a = fx_as("mse_a", dt), *b = fx_as("mse_b", dt),
              *b34 = fx_as("mse_b34", dt);
    tg_tensor *loss = tg_mse_loss(a, b);
    assert_shape(loss, 0, NULL);
    ck_assert_int_eq(tg_dtype_of(loss), dt);
    expect(loss, dt == TG_FLOAT32 ? "mse_loss_bcast_f4" : "mse_loss_bcast",
           tol_for(dt));
    expect(tg_mse_loss(b, a),
           dt == TG_FLOAT32 ? "mse_loss_bcast_f4" : "mse_loss_bcast",
           tol_for(dt));
    expect(tg_mse_loss(a, b34), "mse_loss_same",
           dt == TG_FLOAT32 ? 1e-5 : 1e-12);
    tg_release(b34);
    tg_release(b);
    tg_release(a);
}
END_TEST

/* Asserts t's gradient matches fixture `name` within tol. */
static void expect_grad(const tg_tensor *t, const char *name, double tol)
{
    tg_tensor *want = fx(name);
    assert_close(tg_grad(t), want, tol);
    tg_release(want);
}

/* ---- gradients: cat and chunk -------------------------------------------- */

typedef struct {
    int n, dim;
} cat_ctx;

static tg_tensor *cat_fn(tg_tensor *const *in, void *ctx)
{
    const cat_ctx *c = ctx;
    return tg_cat(in, c->n, c->dim);
}

/* Along each dim of plain inputs; 5 and 7 inputs; transposed and sliced
 * inputs. */
START_TEST(cat_gradcheck)
{
    tg_tensor *x0 = fx_leaf("cat_x0"), *x1 = fx_leaf("cat_x1"),
              *x2 = fx_leaf("cat_x2");
    assert_gradcheck(cat_fn, &(cat_ctx){3, 1}, 3, (tg_tensor *[]){x0, x1, x2});
    assert_gradcheck(cat_fn, &(cat_ctx){2, -3}, 2, (tg_tensor *[]){x0, x0});
    assert_gradcheck(cat_fn, &(cat_ctx){5, 1}, 5,
                     (tg_tensor *[]){x2, x1, x0, x1, x2});
    tg_tensor *seven[7] = {x0, x1, x2, x1, x0, x2, x1};
    assert_gradcheck(cat_fn, &(cat_ctx){7, 1}, 7, seven);
    tg_tensor *a = randn_leaf(TG_SHAPE(3, 2, 4), true, 1);
    tg_tensor *b = randn_leaf(TG_SHAPE(3, 2, 5), true, 2);
    tg_tensor *base = tg_ones(TG_FLOAT64, TG_SHAPE(3, 2, 9));
    tg_tensor *c = tg_slice(base, 2, 2, 8); /* (3,2,6), rows with gaps */
    tg_set_requires_grad(c, true);
    assert_gradcheck(cat_fn, &(cat_ctx){3, -1}, 3, (tg_tensor *[]){a, c, b});
    tg_release(c);
    tg_release(base);
    tg_release(b);
    tg_release(a);
    tg_release(x2);
    tg_release(x1);
    tg_release(x0);
}
END_TEST

/* A tensor passed twice gets both windows of dy; only the inputs that
 * require grad get one. */
START_TEST(cat_grad_accumulates)
{
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *k = tg_zeros(TG_FLOAT64, TG_SHAPE(1, 3));
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_cat((tg_tensor *[]){k, k, k, k, x, k, x}, 7, 0);
    tg_tensor *dy = tg_arange(TG_FLOAT64, 0, 27, 1),
              *dys = tg_reshape(dy, TG_SHAPE(9, 3));
    ck_assert_int_eq(tg_backward_with(y, dys), 0);
    /* x fills rows 4-5 and 7-8 of y: grad = dy[4:6] + dy[7:9]. */
    for (int64_t r = 0; r < 2; r++)
        for (int64_t c = 0; c < 3; c++)
            ck_assert_double_eq(tg_get(tg_grad(x), (const int64_t[]){r, c}),
                                (double)((4 + r) * 3 + c + (7 + r) * 3 + c));
    ck_assert_ptr_null(tg_grad(k));
    tg_release(dys);
    tg_release(dy);
    tg_release(y);
    tg_release(k);
    tg_release(x);
}
END_TEST

/* Six inputs make one tape entry holding all six, and it goes with y. */
START_TEST(cat_one_entry)
{
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(1, 2));
    tg_set_requires_grad(x, true);
    int64_t before = tg_tape_size();
    tg_scope_begin();
    tg_tensor *y = tg_cat((tg_tensor *[]){x, x, x, x, x, x}, 6, 0);
    ck_assert_int_eq(tg_tape_size() - before, 1);
    assert_shape(y, 2, (const int64_t[]){6, 2});
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_double_eq(tg_get(tg_grad(x), (const int64_t[]){0, 1}), 6.0);
    tg_scope_end();
    ck_assert_int_eq(tg_tape_size(), before);
    tg_tensor *unused = tg_cat((tg_tensor *[]){x, x, x, x, x}, 5, 1);
    tg_release(unused); /* never backpropagated: its entry is freed */
    ck_assert_int_eq(tg_tape_size(), before);
    tg_release(x);
}
END_TEST

static tg_tensor *chunk_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *parts[3];
    if (tg_chunk(in[0], 3, -1, parts) < 0)
        return NULL;
    tg_tensor *y = tg_mul(parts[0], parts[2]);
    for (int i = 0; i < 3; i++)
        tg_release(parts[i]);
    return y;
}

START_TEST(chunk_gradcheck)
{
    tg_tensor *x = randn_leaf(TG_SHAPE(4, 2, 6), false, 3);
    tg_tensor *xt = randn_leaf(TG_SHAPE(6, 2, 6), true, 4);
    assert_gradcheck(chunk_fn, NULL, 1, &x);
    assert_gradcheck(chunk_fn, NULL, 1, &xt);
    tg_release(xt);
    tg_release(x);
}
END_TEST

/* ---- gradients: embedding and gather ----------------------------------- */

static tg_tensor *embedding_fn(tg_tensor *const *in, void *ids)
{
    return tg_embedding(in[0], ids);
}

START_TEST(embedding_gradcheck)
{
    tg_tensor *w = fx_leaf("emb_w"), *ids = fx("emb_ids"),
              *ids1 = fx("emb_ids1");
    assert_gradcheck(embedding_fn, ids, 1, &w);
    assert_gradcheck(embedding_fn, ids1, 1, &w);
    tg_tensor *wt = randn_leaf(TG_SHAPE(5, 3), true, 5);
    assert_gradcheck(embedding_fn, ids, 1, &wt);
    tg_release(wt);
    tg_release(ids1);
    tg_release(ids);
    tg_release(w);
}
END_TEST

/* torch's dweight: repeated ids sum their rows of dy, unused id 3 gets 0;
 * a second backward accumulates onto it. */
START_TEST(embedding_grad_torch)
{
    tg_tensor *w = fx_leaf("emb_w"), *ids = fx("emb_ids"), *dy = fx("emb_dy");
    tg_tensor *want = fx("emb_dw");
    for (int pass = 1; pass <= 2; pass++) {
        tg_tensor *out = tg_embedding(w, ids);
        ck_assert_int_eq(tg_backward_with(out, dy), 0);
        tg_tensor *scaled = tg_scale(want, pass);
        assert_close(tg_grad(w), scaled, 1e-12);
        tg_release(scaled);
        tg_release(out);
    }
    for (int64_t c = 0; c < 3; c++)
        ck_assert(tg_get(tg_grad(w), (const int64_t[]){3, c}) == 0.0);
    tg_release(want);
    tg_release(dy);
    tg_release(ids);
    tg_release(w);
}
END_TEST

typedef struct {
    int dim;
    tg_tensor *index;
} gather_ctx;

static tg_tensor *gather_fn(tg_tensor *const *in, void *ctx)
{
    const gather_ctx *c = ctx;
    return tg_gather(in[0], c->dim, c->index);
}

START_TEST(gather_gradcheck)
{
    tg_tensor *t = fx_leaf("gather_t"), *t3 = fx_leaf("gather_t3");
    tg_tensor *i0 = fx("gather_idx0"), *i1 = fx("gather_idx1"),
              *i3 = fx("gather_idx3");
    assert_gradcheck(gather_fn, &(gather_ctx){0, i0}, 1, &t);
    assert_gradcheck(gather_fn, &(gather_ctx){1, i1}, 1, &t);
    assert_gradcheck(gather_fn, &(gather_ctx){-2, i3}, 1, &t3);
    tg_tensor *tt = randn_leaf(TG_SHAPE(2, 3, 4), true, 6);
    assert_gradcheck(gather_fn, &(gather_ctx){1, i3}, 1, &tt);
    tg_release(tt);
    tg_release(i3);
    tg_release(i1);
    tg_release(i0);
    tg_release(t3);
    tg_release(t);
}
END_TEST

START_TEST(gather_grad_torch)
{
    tg_tensor *t3 = fx_leaf("gather_t3"), *i3 = fx("gather_idx3"),
              *dy = fx("gather_dy3");
    tg_tensor *y = tg_gather(t3, 1, i3);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    tg_tensor *want = fx("gather_dt3");
    assert_close(tg_grad(t3), want, 1e-12);
    tg_release(want);
    tg_release(y);
    tg_release(dy);
    tg_release(i3);
    tg_release(t3);
}
END_TEST

/* ---- gradients: layer_norm, gelu ----------------------------------------- */

static tg_tensor *layer_norm_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_layer_norm(in[0], in[1], in[2], 1e-5);
}

static tg_tensor *layer_norm_plain_fn(tg_tensor *const *in, void *ctx)
{
    return tg_layer_norm(in[0], NULL, NULL, *(const double *)ctx);
}

START_TEST(layer_norm_gradcheck)
{
    tg_tensor *x = fx_leaf("ln_x"), *g = fx_leaf("ln_gamma"),
              *b = fx_leaf("ln_beta");
    assert_gradcheck(layer_norm_fn, NULL, 3, (tg_tensor *[]){x, g, b});
    assert_gradcheck(layer_norm_plain_fn, &(double){1e-5}, 1, &x);
    assert_gradcheck(layer_norm_plain_fn, &(double){0.5}, 1, &x);
    /* Transposed x (2,3,4) and a strided gamma: column 1 of a (4,2). */
    tg_tensor *xt = randn_leaf(TG_SHAPE(2, 3, 4), true, 7);
    tg_rng rng;
    tg_rng_seed(&rng, 13);
    tg_tensor *gbase = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 2));
    tg_tensor *gs = tg_select(gbase, 1, 1),
              *bt = randn_leaf(TG_SHAPE(4), false, 8);
    tg_set_requires_grad(gs, true);
    ck_assert(!tg_is_contiguous(gs));
    assert_gradcheck(layer_norm_fn, NULL, 3, (tg_tensor *[]){xt, gs, bt});
    tg_release(bt);
    tg_release(gs);
    tg_release(gbase);
    tg_release(xt);
    tg_release(b);
    tg_release(g);
    tg_release(x);
}
END_TEST

/* torch's dx, dgamma, dbeta for dy; float32 agrees with float64. */
START_TEST(layer_norm_grad_torch)
{
    for (int k = 0; k < 2; k++) {
        tg_dtype dt = float_dtypes[k];
        tg_tensor *x = fx_as("ln_x", dt), *g = fx_as("ln_gamma", dt),
                  *b = fx_as("ln_beta", dt), *dy = fx_as("ln_dy", dt);
        tg_set_requires_grad(x, true);
        tg_set_requires_grad(g, true);
        tg_set_requires_grad(b, true);
        tg_tensor *y = tg_layer_norm(x, g, b, 1e-5);
        ck_assert_int_eq(tg_backward_with(y, dy), 0);
        double tol = dt == TG_FLOAT32 ? 1e-5 : 1e-12;
        tg_tensor *dx = fx("ln_dx"), *dg = fx("ln_dgamma"),
                  *db = fx("ln_dbeta");
        assert_close(tg_grad(x), dx, tol);
        assert_close(tg_grad(g), dg, tol);
        assert_close(tg_grad(b), db, tol);
        ck_assert_int_eq(tg_dtype_of(tg_grad(g)), dt);
        tg_release(db);
        tg_release(dg);
        tg_release(dx);
        tg_release(y);
        tg_release(dy);
        tg_release(b);
        tg_release(g);
        tg_release(x);
    }
}
END_TEST

static tg_tensor *gelu_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_gelu(in[0]);
}

START_TEST(gelu_gradcheck)
{
    tg_tensor *x = fx_leaf("gelu_x");
    tg_tensor *xt = randn_leaf(TG_SHAPE(3, 2, 5), true, 9);
    assert_gradcheck(gelu_fn, NULL, 1, &x);
    assert_gradcheck(gelu_fn, NULL, 1, &xt);
    tg_tensor *y = tg_gelu(x), *sum = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(sum), 0);
    tg_tensor *want = fx("gelu_dx");
    assert_close(tg_grad(x), want, 1e-12);
    ck_assert_double_eq(tg_get(tg_grad(x), (const int64_t[]){0, 0}),
                        0.5); /* at 0 */
    tg_release(want);
    tg_release(sum);
    tg_release(y);
    tg_release(xt);
    tg_release(x);
}
END_TEST

/* ---- gradients: losses ---------------------------------------------------- */

static tg_tensor *cross_entropy_fn(tg_tensor *const *in, void *targets)
{
    return tg_cross_entropy(in[0], targets);
}

/* (N,V), (B,T,V), transposed logits, and masked logits (gradcheck demands
 * exactly 0 at their -inf entries). */
START_TEST(cross_entropy_gradcheck)
{
    tg_tensor *l2 = fx_leaf("ce_logits"), *t2 = fx("ce_targets");
    tg_tensor *l3 = fx_leaf("ce_logits3"), *t3 = fx("ce_targets3");
    tg_tensor *m = fx_leaf("ce_masked_logits"), *tm = fx("ce_targets_masked");
    tg_tensor *lt = randn_leaf(TG_SHAPE(6, 5), true, 10);
    assert_gradcheck(cross_entropy_fn, t2, 1, &l2);
    assert_gradcheck(cross_entropy_fn, t3, 1, &l3);
    assert_gradcheck(cross_entropy_fn, tm, 1, &m);
    assert_gradcheck(cross_entropy_fn, t2, 1, &lt);
    tg_release(lt);
    tg_release(tm);
    tg_release(m);
    tg_release(t3);
    tg_release(l3);
    tg_release(t2);
    tg_release(l2);
}
END_TEST

/* torch's dlogits = (softmax - onehot) / N, for (N,V), (B,T,V) and masked
 * logits (exactly 0.0 at every -inf entry). */
START_TEST(cross_entropy_grad_torch)
{
    const char *const cases[3][3] = {
        {"ce_logits", "ce_targets", "ce_dlogits"},
        {"ce_logits3", "ce_targets3", "ce_dlogits3"},
        {"ce_masked_logits", "ce_targets_masked", "ce_masked_dlogits"},
    };
    for (int k = 0; k < 3; k++) {
        tg_tensor *logits = fx_leaf(cases[k][0]), *targets = fx(cases[k][1]);
        tg_tensor *loss = tg_cross_entropy(logits, targets);
        ck_assert_int_eq(tg_backward(loss), 0);
        expect_grad(logits, cases[k][2], 1e-12);
        int64_t n = tg_numel(logits);
        double *x = malloc(sizeof *x * (size_t)n),
               *g = malloc(sizeof *g * (size_t)n);
        tg_copy_out(logits, TG_FLOAT64, x);
        tg_copy_out(tg_grad(logits), TG_FLOAT64, g);
        for (int64_t i = 0; i < n; i++)
            if (x[i] == -INFINITY)
                ck_assert(g[i] == 0.0);
        free(g);
        free(x);
        tg_release(loss);
        tg_release(targets);
        tg_release(logits);
    }
}
END_TEST

static tg_tensor *mse_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mse_loss(in[0], in[1]);
}

START_TEST(mse_gradcheck)
{
    tg_tensor *a = fx_leaf("mse_a"), *b = fx_leaf("mse_b"),
              *b34 = fx_leaf("mse_b34");
    tg_tensor *col = randn_leaf(TG_SHAPE(3, 1), false, 11);
    tg_tensor *at = randn_leaf(TG_SHAPE(3, 4), true, 12);
    assert_gradcheck(mse_fn, NULL, 2, (tg_tensor *[]){a, b});
    assert_gradcheck(mse_fn, NULL, 2, (tg_tensor *[]){b, a});
    assert_gradcheck(mse_fn, NULL, 2, (tg_tensor *[]){a, b34});
    assert_gradcheck(mse_fn, NULL, 2,
                     (tg_tensor *[]){col, b}); /* (3,1) vs (4,) */
    assert_gradcheck(mse_fn, NULL, 2, (tg_tensor *[]){at, col});
    tg_release(at);
    tg_release(col);
    tg_release(b34);
    tg_release(b);
    tg_release(a);
}
END_TEST

START_TEST(mse_grad_torch)
{
    tg_tensor *a = fx_leaf("mse_a"), *b = fx_leaf("mse_b");
    tg_tensor *loss = tg_mse_loss(a, b);
    ck_assert_int_eq(tg_backward(loss), 0);
    expect_grad(a, "mse_da_bcast", 1e-12);
    expect_grad(b, "mse_db_bcast", 1e-12);
    tg_release(loss);
    tg_release(b);
    tg_release(a);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

/* Asserts the last error also names `what` (a shape, a value). */
static void error_names(const char *what)
{
    ck_assert_msg(strstr(tg_last_error(), what) != NULL,
                  "error '%s' lacks '%s'", tg_last_error(), what);
}

START_TEST(cat_errors)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 5));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 4));
    tg_tensor *c = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 5));
    tg_tensor *v = tg_zeros(TG_FLOAT64, TG_SHAPE(5));
    tg_tensor *s = tg_scalar(TG_FLOAT64, 1);
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, b}, 2, 0),
                      "cat: tensor 1 has shape (3,4)");
    error_names("(2,5)");
    error_names("dim 0");
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, a, v}, 3, 1),
                      "cat: tensor 2 has shape (5,)");
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, c}, 2, 1),
                      "cat: tensor 1 is float32 (2,5)");
    error_names("float64 (2,5)");
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, a}, 2, 2),
                      "cat: dim 2 is out of range");
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, a}, 2, -3), "(2,5)");
    ASSERT_FAILS_WITH(tg_cat(&s, 1, 0), "cat: dim 0 is out of range");
    ASSERT_FAILS_WITH(tg_cat(&a, 0, 0), "cat: need at least one tensor");
    ASSERT_FAILS_WITH(tg_cat(NULL, 2, 0), "cat: the tensor array is NULL");
    /* A NULL in the list fails and keeps the first error. */
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){a, NULL}, 2, 0),
                      "cat: the tensor array");
    tg_release(s);
    tg_release(v);
    tg_release(c);
    tg_release(b);
    tg_release(a);
}
END_TEST

START_TEST(chunk_errors)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 5));
    tg_tensor *out[3] = {x, x, x};
    /* a refused call leaves out as it was */
    ck_assert_int_eq(tg_chunk(x, 3, 1, out), -1);
    ck_assert(out[0] == x && out[1] == x && out[2] == x);
    error_names(
        "chunk: dim 1 of (2,5) has size 5, which 3 chunks do not divide");
    ck_assert_int_eq(tg_chunk(x, 0, 1, out), -1);
    error_names("chunk: need a positive number of chunks, got 0");
    ck_assert_int_eq(tg_chunk(x, -2, 1, out), -1);
    error_names("got -2");
    ck_assert_int_eq(tg_chunk(x, 1, 2, out), -1);
    ck_assert(out[0] == x);
    error_names("chunk: dim 2 is out of range");
    ck_assert_int_eq(tg_chunk(x, 1, 0, NULL), -1);
    error_names("chunk: out is NULL");
    ck_assert_int_eq(tg_chunk(NULL, 2, 0, out), -1);
    ck_assert(out[0] == x && out[1] == x);
    error_names("chunk: out is NULL"); /* the first error is kept */
    tg_release(x);
}
END_TEST

/* An out array of exactly the count that is right (dim 1 of (2,6) into 3)
 * and a wrong n: 4 and 5 do not divide 6, and must not write out[3] or
 * out[4]. The canary after the array shows it in any run; the array of
 * exactly 3, alone in its heap block, shows it to valgrind and ASan. */
START_TEST(chunk_bad_n_stays_in_array)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 6));
    tg_tensor *canary = tg_zeros(TG_FLOAT64, TG_SHAPE(1));
    tg_tensor **with_canary = malloc(4 * sizeof *with_canary);
    tg_tensor **exact = malloc(3 * sizeof *exact);
    ck_assert(with_canary && exact);
    for (int n = 4; n <= 5; n++) {
        for (int i = 0; i < 3; i++)
            with_canary[i] = exact[i] = x;
        with_canary[3] = canary;
        /* exact first: a write past it is valgrind's to see before an
         * assertion below ends the test */
        ck_assert_int_eq(tg_chunk(x, n, 1, exact), -1);
        error_names("which");
        ck_assert_int_eq(tg_chunk(x, n, 1, with_canary), -1);
        ck_assert_msg(with_canary[3] == canary,
                      "chunk into %d wrote past an array of 3", n);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(with_canary[i] == x, "out[%d] written", i);
    }
    /* and the right n fills the array */
    ck_assert_int_eq(tg_chunk(x, 3, 1, exact), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tg_size(exact[i], 1), 2);
        tg_release(exact[i]);
    }
    free(exact);
    free(with_canary);
    tg_release(canary);
    tg_release(x);
}
END_TEST

START_TEST(embedding_errors)
{
    tg_tensor *w = tg_zeros(TG_FLOAT64, TG_SHAPE(5, 3));
    tg_tensor *ids = tg_from_data(TG_INT64, TG_SHAPE(2, 3),
                                  (const int64_t[]){0, 1, 2, 3, 5, 4});
    tg_tensor *neg =
        tg_from_data(TG_INT64, TG_SHAPE(2), (const int64_t[]){0, -1});
    tg_tensor *fids = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 3));
    tg_tensor *w1 = tg_zeros(TG_FLOAT64, TG_SHAPE(5));
    tg_tensor *wi = tg_zeros(TG_INT64, TG_SHAPE(5, 3));
    ASSERT_FAILS_WITH(tg_embedding(w, ids),
                      "embedding: id 5 at position (1,1)");
    error_names("[0, 5)");
    error_names("weight (5,3)");
    ASSERT_FAILS_WITH(tg_embedding(w, neg),
                      "embedding: id -1 at position (1,)");
    ASSERT_FAILS_WITH(tg_embedding(w, fids),
                      "embedding: ids must be int64, got float32 (2,3)");
    ASSERT_FAILS_WITH(tg_embedding(w1, neg),
                      "embedding: weight must be 2-D (V,C), got (5,)");
    ASSERT_FAILS_WITH(tg_embedding(wi, neg),
                      "embedding: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_embedding(NULL, neg), "embedding: expected a float32");
    ASSERT_FAILS_WITH(tg_embedding(w, NULL), "embedding: expected a float32");
    tg_release(wi);
    tg_release(w1);
    tg_release(fids);
    tg_release(neg);
    tg_release(ids);
    tg_release(w);
}
END_TEST

START_TEST(gather_errors)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 4));
    tg_tensor *big = tg_zeros(TG_INT64, TG_SHAPE(4, 2));
    tg_tensor *flat = tg_zeros(TG_INT64, TG_SHAPE(3));
    tg_tensor *bad =
        tg_from_data(TG_INT64, TG_SHAPE(2, 2), (const int64_t[]){0, 1, 4, 2});
    tg_tensor *fidx = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 2));
    ASSERT_FAILS_WITH(tg_gather(t, 1, big),
                      "gather: index (4,2) does not fit (3,4)");
    ASSERT_FAILS_WITH(tg_gather(t, 0, flat),
                      "gather: index (3,) does not fit (3,4)");
    ASSERT_FAILS_WITH(tg_gather(t, 1, bad),
                      "gather: index 4 at position (1,0)");
    error_names("[0, 4) for dim 1 of (3,4)");
    ASSERT_FAILS_WITH(tg_gather(t, 1, fidx),
                      "gather: index must be int64, got float64");
    ASSERT_FAILS_WITH(tg_gather(t, 2, bad), "gather: dim 2 is out of range");
    ASSERT_FAILS_WITH(tg_gather(NULL, 0, bad), "gather: dim 2");
    ASSERT_FAILS_WITH(tg_gather(t, 0, NULL), "gather: dim 2");
    tg_release(fidx);
    tg_release(bad);
    tg_release(flat);
    tg_release(big);
    tg_release(t);
}
END_TEST

START_TEST(layer_norm_errors)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 5));
    tg_tensor *g4 = tg_ones(TG_FLOAT64, TG_SHAPE(4));
    tg_tensor *g15 = tg_ones(TG_FLOAT64, TG_SHAPE(1, 5));
    tg_tensor *g32 = tg_ones(TG_FLOAT32, TG_SHAPE(5));
    tg_tensor *s = tg_scalar(TG_FLOAT64, 1),
              *bx = tg_zeros(TG_BOOL, TG_SHAPE(2, 5));
    ASSERT_FAILS_WITH(
        tg_layer_norm(x, g4, NULL, 1e-5),
        "layer_norm: gamma has shape (4,) but x (2,5) needs (5,)");
    ASSERT_FAILS_WITH(tg_layer_norm(x, NULL, g15, 1e-5),
                      "layer_norm: beta has shape (1,5)");
    ASSERT_FAILS_WITH(tg_layer_norm(x, g32, NULL, 1e-5),
                      "layer_norm: dtypes differ");
    ASSERT_FAILS_WITH(tg_layer_norm(s, NULL, NULL, 1e-5),
                      "layer_norm: x must have at least 1 dim");
    ASSERT_FAILS_WITH(tg_layer_norm(bx, NULL, NULL, 1e-5),
                      "layer_norm: expected a float32");
    ASSERT_FAILS_WITH(tg_layer_norm(x, NULL, NULL, -1),
                      "layer_norm: eps must be >= 0, got -1");
    ASSERT_FAILS_WITH(tg_layer_norm(x, NULL, NULL, NAN),
                      "layer_norm: eps must be >= 0");
    ASSERT_FAILS_WITH(tg_layer_norm(NULL, NULL, NULL, 1e-5),
                      "layer_norm: eps must be");
    tg_release(bx);
    tg_release(s);
    tg_release(g32);
    tg_release(g15);
    tg_release(g4);
    tg_release(x);
}
END_TEST

START_TEST(gelu_errors)
{
    tg_tensor *b = tg_zeros(TG_BOOL, TG_SHAPE(3));
    tg_tensor *i = tg_zeros(TG_INT64, TG_SHAPE(3));
    ASSERT_FAILS_WITH(
        tg_gelu(b),
        "gelu: expected a float32 or float64 tensor, got bool (3,)");
    ASSERT_FAILS_WITH(tg_gelu(i),
                      "gelu: expected a float32 or float64 tensor, got int64");
    ASSERT_FAILS_WITH(tg_gelu(NULL), "got int64");
    tg_release(i);
    tg_release(b);
}
END_TEST

START_TEST(cross_entropy_errors)
{
    tg_tensor *l = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 5));
    tg_tensor *t = tg_from_data(TG_INT64, TG_SHAPE(2, 3),
                                (const int64_t[]){0, 1, 2, 3, 4, 5});
    tg_tensor *t32 = tg_zeros(TG_INT64, TG_SHAPE(3, 2));
    tg_tensor *tf = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *s = tg_scalar(TG_FLOAT64, 0), *s0 = tg_zeros(TG_INT64, 0, NULL);
    tg_tensor *li = tg_zeros(TG_INT64, TG_SHAPE(2, 3, 5));
    ASSERT_FAILS_WITH(tg_cross_entropy(l, t),
                      "cross_entropy: target 5 at position (1,2)");
    error_names("[0, 5) for logits (2,3,5)");
    ASSERT_FAILS_WITH(
        tg_cross_entropy(l, t32),
        "cross_entropy: targets (3,2) do not match logits (2,3,5): need (2,3)");
    ASSERT_FAILS_WITH(tg_cross_entropy(l, tf),
                      "cross_entropy: targets must be int64, got float64");
    ASSERT_FAILS_WITH(tg_cross_entropy(s, s0),
                      "cross_entropy: logits must have a class dim");
    ASSERT_FAILS_WITH(tg_cross_entropy(li, t),
                      "cross_entropy: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_cross_entropy(NULL, t),
                      "cross_entropy: expected a float32");
    ASSERT_FAILS_WITH(tg_cross_entropy(l, NULL),
                      "cross_entropy: expected a float32");
    tg_release(li);
    tg_release(s0);
    tg_release(s);
    tg_release(tf);
    tg_release(t32);
    tg_release(t);
    tg_release(l);
}
END_TEST

START_TEST(mse_errors)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 4));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    tg_tensor *c = tg_zeros(TG_FLOAT32, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(tg_mse_loss(a, b),
                      "mse_loss: shapes (3,4) and (3,) cannot be broadcast");
    ASSERT_FAILS_WITH(tg_mse_loss(a, c), "mse_loss: dtypes differ");
    ASSERT_FAILS_WITH(tg_mse_loss(NULL, a), "mse_loss: dtypes differ");
    ASSERT_FAILS_WITH(tg_mse_loss(a, NULL), "mse_loss: dtypes differ");
    tg_release(c);
    tg_release(b);
    tg_release(a);
}
END_TEST

Suite *nn_ops_suite(void)
{
    Suite *s = suite_create("nn_ops");
    TCase *forward = tcase_create("forward");
    tcase_add_loop_test(forward, cat_forward, 0, 2);
    tcase_add_test(forward, cat_int64_and_empty);
    tcase_add_test(forward, chunk_forward);
    tcase_add_loop_test(forward, embedding_forward, 0, 2);
    tcase_add_loop_test(forward, gather_forward, 0, 2);
    tcase_add_loop_test(forward, layer_norm_forward, 0, 2);
    tcase_add_test(forward, layer_norm_constant_row);
    tcase_add_loop_test(forward, gelu_forward, 0, 2);
    tcase_add_loop_test(forward, cross_entropy_forward, 0, 2);
    tcase_add_test(forward, cross_entropy_masked_and_big);
    tcase_add_loop_test(forward, mse_forward, 0, 2);
    suite_add_tcase(s, forward);

    TCase *grad = tcase_create("grad");
    tcase_add_test(grad, cat_gradcheck);
    tcase_add_test(grad, cat_grad_accumulates);
    tcase_add_test(grad, cat_one_entry);
    tcase_add_test(grad, chunk_gradcheck);
    tcase_add_test(grad, embedding_gradcheck);
    tcase_add_test(grad, embedding_grad_torch);
    tcase_add_test(grad, gather_gradcheck);
    tcase_add_test(grad, gather_grad_torch);
    tcase_add_test(grad, layer_norm_gradcheck);
    tcase_add_test(grad, layer_norm_grad_torch);
    tcase_add_test(grad, gelu_gradcheck);
    tcase_add_test(grad, cross_entropy_gradcheck);
    tcase_add_test(grad, cross_entropy_grad_torch);
    tcase_add_test(grad, mse_gradcheck);
    tcase_add_test(grad, mse_grad_torch);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, cat_errors);
    tcase_add_test(errors, chunk_errors);
    tcase_add_test(errors, chunk_bad_n_stays_in_array);
    tcase_add_test(errors, embedding_errors);
    tcase_add_test(errors, gather_errors);
    tcase_add_test(errors, layer_norm_errors);
    tcase_add_test(errors, gelu_errors);
    tcase_add_test(errors, cross_entropy_errors);
    tcase_add_test(errors, mse_errors);
    suite_add_tcase(s, errors);
    return s;
}
