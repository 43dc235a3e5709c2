/* Bad input to the ops floor (ops/): views, elementwise, comparisons, where,
 * matmul, reductions, softmax, attention, cat and chunk, embedding and
 * gather, layer_norm and gelu, losses; sigmoid, tanh, abs, clamp, argmax,
 * argmin, logical and / or / not, outer; and the same with NULL tensors. What
 * each row checks is in errors_table.h. */
#include "errors_table.h"

#include <string.h>

/* Inputs for the rows whose counts pass what a tensor can hold. */
#define E16 10000000000000000 /* 1e16 */
/* (0, 2^62) float64: empty, with a huge second dim. */
static tg_tensor *empty_wide(void)
{
    return temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, (int64_t)1 << 62)));
}
/* cat of t with itself along dim. */
static tg_tensor *cat_twice(tg_tensor *t, int dim)
{
    return tg_cat((tg_tensor *[]){t, t}, 2, dim);
}
/* (2^32,1) and (1,2^32) float64 ones, expanded from one element: they
 * broadcast to 2^64 elements. */
static tg_tensor *column(void)
{
    return temp(tg_expand(temp(tg_ones(TG_FLOAT64, TG_SHAPE(1, 1))),
                          TG_SHAPE((int64_t)1 << 32, 1)));
}
static tg_tensor *row(void)
{
    return temp(tg_expand(temp(tg_ones(TG_FLOAT64, TG_SHAPE(1, 1))),
                          TG_SHAPE(1, (int64_t)1 << 32)));
}

static const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

/* attention(q, kv, kv): keys and values one tensor. */
static tg_tensor *attention_kv(tg_tensor *q, tg_tensor *kv, bool causal,
                               double scale)
{
    return tg_attention(q, kv, kv, causal, scale);
}

/* tg_chunk(t, n, dim) into an out array filled with t: true when it failed.
 * A chunk refused for its arguments leaves out untouched: each out[i] is
 * still t. */
static bool chunk_failed(tg_tensor *t, int n, int dim)
{
    tg_tensor *out[4] = {t, t, t, t};
    bool f = tg_chunk(t, n, dim, out) < 0;
    for (int i = 0; i < 4; i++)
        if (out[i] != t)
            note("chunk: out[%d] was written by a refused call", i);
    return f;
}

/* tg_chunk(NULL, 2, 0) into an out array filled with `fill`: true when it
 * failed and left both out[i] as they were. */
static bool chunk_null_leaves_out(tg_tensor *fill)
{
    tg_tensor *out[2] = {fill, fill};
    bool f = tg_chunk(NUL, 2, 0, out) < 0;
    return f && out[0] == fill && out[1] == fill;
}

/* ---- the table ---------------------------------------------------------- */

static void ops_table(table_walk *w, env *e)
{
    /* views */
    ROW("transpose dim 3", tg_transpose(e->x, 0, 3), "transpose:", "dim 3",
        "(4,8,32)");
    ROW("slice dim -4", tg_slice(e->x, -4, 0, 1), "slice:", "dim -4",
        "(4,8,32)");
    ROW("narrow past end", tg_narrow(e->x, 0, 2, 3), "narrow:", "length 3",
        "(4,8,32)");
    ROW("narrow negative length", tg_narrow(e->x, 0, 0, -1),
        "narrow:", "length -1", "(4,8,32)");
    ROW("narrow start+length past int64", tg_narrow(e->v3, 0, 1, INT64_MAX),
        "narrow:", "start 1, length 9223372036854775807", "(3,)");
    ROW("expand count past 2^59",
        tg_expand(temp(tg_ones(TG_FLOAT64, TG_SHAPE(1, 1))),
                  TG_SHAPE((int64_t)1 << 40, (int64_t)1 << 40)),
        "expand:", "(1099511627776,1099511627776)", "more elements");
    ROW("reshape count past int64",
        tg_reshape(e->v3, TG_SHAPE(4611686018427387905, 4)),
        "reshape:", "(4611686018427387905,4)", "more elements");
    ROW("reshape -1, count past int64",
        tg_reshape(e->v3, TG_SHAPE(-1, 4611686018427387905, 4)),
        "reshape:", "(-1,4611686018427387905,4)", "more elements");
    ROW("select index 4", tg_select(e->x, 0, 4), "select:", "index 4",
        "(4,8,32)");
    ROW("select dim 3", tg_select(e->x, 3, 0), "select:", "dim 3", "(4,8,32)");
    ROW("expand mismatch", tg_expand(e->x, TG_SHAPE(4, 8, 16)),
        "expand:", "(4,8,32)", "(4,8,16)");
    ROW("expand fewer dims", tg_expand(e->x, TG_SHAPE(8, 32)),
        "expand:", "(4,8,32)");
    ROW("expand ndim 9", tg_expand(e->x, 9, nine), "expand:", "(4,8,32)", "9");
    ROW("expand negative size", tg_expand(e->x, TG_SHAPE(4, -2, 32)),
        "expand:", "(4,8,32)", "(4,-2,32)");
    ROW("reshape numel", tg_reshape(e->x, TG_SHAPE(5, -1)),
        "reshape:", "(4,8,32)", "(5,-1)");
    ROW("reshape negative size", tg_reshape(e->x, TG_SHAPE(4, -8, 32)),
        "reshape:", "(4,8,32)", "(4,-8,32)");
    ROW("reshape two -1", tg_reshape(e->x, TG_SHAPE(-1, -1)),
        "reshape:", "(4,8,32)", "(-1,-1)");
    ROW("reshape ndim 9", tg_reshape(e->x, 9, nine), "reshape:", "ndim 9");
    ROW("reshape NULL shape", tg_reshape(e->x, 3, NULL), "reshape:", "NULL");
    ROW("unsqueeze dim 5", tg_unsqueeze(e->x, 5), "unsqueeze:", "dim 5",
        "(4,8,32)");
    ROW("unsqueeze a 9th dim",
        tg_unsqueeze(temp(tg_zeros(TG_FLOAT64, 8, nine)), 0),
        "unsqueeze:", "(1,1,1,1,1,1,1,1)");
    ROW("squeeze size 4", tg_squeeze(e->x, 0), "squeeze:", "(4,8,32)",
        "size 4");
    ROW("squeeze dim 3", tg_squeeze(e->x, 3), "squeeze:", "dim 3", "(4,8,32)");
    ROW("to unknown dtype", tg_to(e->x, (tg_dtype)7), "to:", "dtype 7");

    /* elementwise */
    ROW("add unbroadcastable", tg_add(e->x, e->v3), "add:", "(4,8,32)", "(3,)");
    ROW("sub unbroadcastable", tg_sub(e->x, e->m), "sub:", "(4,8,32)",
        "(16,32)");
    ROW("mul unbroadcastable", tg_mul(e->m, e->x), "mul:", "(16,32)",
        "(4,8,32)");
    ROW("div unbroadcastable", tg_div(e->v3, e->x), "div:", "(3,)", "(4,8,32)");
    ROW("add float64 + float32", tg_add(e->x, e->x32),
        "add:", "float64 (4,8,32)", "float32 (4,8,32)");
    ROW("mul float32 * float64", tg_mul(e->x32, e->x),
        "mul:", "float32 (4,8,32)", "float64 (4,8,32)");
    ROW("add bool", tg_add(e->mask, e->mask), "add:", "bool (4,8,32)");
    ROW("div by bool", tg_div(e->x, e->mask), "div:", "bool (4,8,32)");
    ROW("neg bool", tg_neg(e->mask), "neg:", "bool (4,8,32)");
    ROW("scale bool", tg_scale(e->mask, 2), "scale:", "bool (4,8,32)");
    ROW("add_scalar bool", tg_add_scalar(e->mask, 1),
        "add_scalar:", "bool (4,8,32)");
    ROW("exp bool", tg_exp(e->mask), "exp:", "bool (4,8,32)");
    ROW("log bool", tg_log(e->mask), "log:", "bool (4,8,32)");
    ROW("sqrt bool", tg_sqrt(e->mask), "sqrt:", "bool (4,8,32)");
    ROW("pow bool", tg_pow_scalar(e->mask, 2), "pow:", "bool (4,8,32)");
    ROW("relu bool", tg_relu(e->mask), "relu:", "bool (4,8,32)");

    /* comparisons */
    ROW("eq float64 == float32", tg_eq(e->x, e->x32), "eq:", "float64 (4,8,32)",
        "float32 (4,8,32)");
    ROW("ne float32 != float64", tg_ne(e->x32, e->x), "ne:", "float32 (4,8,32)",
        "float64 (4,8,32)");
    ROW("lt unbroadcastable", tg_lt(e->x, e->v3), "lt:", "(4,8,32)", "(3,)");
    ROW("le unbroadcastable", tg_le(e->v3, e->m), "le:", "(3,)", "(16,32)");
    ROW("gt unbroadcastable", tg_gt(e->x, e->m), "gt:", "(4,8,32)", "(16,32)");
    ROW("ge unbroadcastable", tg_ge(e->m, e->x), "ge:", "(16,32)", "(4,8,32)");

    /* where, masked_fill, tril and triu */
    ROW("where float64 / float32", tg_where(e->mask, e->x, e->x32),
        "where:", "float64", "float32");
    ROW("where cond shape", tg_where(e->v3, e->x, e->x), "where:", "(3,)",
        "(4,8,32)");
    ROW("where bool values", tg_where(e->mask, e->mask, e->mask),
        "where:", "bool (4,8,32)");
    ROW("masked_fill short mask",
        tg_masked_fill(e->x, temp(tg_gt_scalar(e->v3, 0)), 0),
        "masked_fill:", "(4,8,32)", "(3,)");
    ROW("masked_fill mask (16,32)",
        tg_masked_fill(e->x, temp(tg_gt_scalar(e->m, 0)), 0),
        "masked_fill:", "(4,8,32)", "(16,32)");
    ROW("masked_fill bool", tg_masked_fill(e->mask, e->mask, 0),
        "masked_fill:", "bool (4,8,32)");
    ROW("tril 1-d", tg_tril(e->v3, 0), "tril:", "(3,)");
    ROW("triu 0-d", tg_triu(e->s, 0), "triu:", "()");

    /* matmul */
    ROW("matmul misaligned", tg_matmul(e->x, e->m), MATMUL_MSG);
    ROW("matmul batch",
        tg_matmul(e->x, temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 32, 5)))),
        "matmul:", "(4,8,32)", "(3,32,5)");
    ROW("matmul 0-d", tg_matmul(e->s, e->x), "matmul:", "()", "(4,8,32)");
    ROW("matmul vector", tg_matmul(e->v3, e->x), "matmul:", "(3,)", "(4,8,32)");
    ROW("matmul float32 @ float64", tg_matmul(e->x32, e->m),
        "matmul:", "float32 (4,8,32)", "float64 (16,32)");
    ROW("matmul bool", tg_matmul(e->mask, e->mask), "matmul:", "bool (4,8,32)");

    /* reductions and softmax */
    ROW("sum dim 3", tg_sum(e->x, 3, false), "sum:", "dim 3", "(4,8,32)");
    ROW("mean dim -4", tg_mean(e->x, -4, true), "mean:", "dim -4", "(4,8,32)");
    ROW("max dim 3", tg_max(e->x, 3, false), "max:", "dim 3", "(4,8,32)");
    ROW("max over empty dim",
        tg_max(temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3))), 0, false),
        "max:", "(0,3)");
    ROW("sum bool", tg_sum(e->mask, 0, false), "sum:", "bool (4,8,32)");
    ROW("sum_all bool", tg_sum_all(e->mask), "sum", "bool (4,8,32)");
    ROW("mean_all bool", tg_mean_all(e->mask), "mean", "bool (4,8,32)");
    ROW("max bool", tg_max(e->mask, 0, false), "max:", "bool (4,8,32)");
    ROW("softmax dim 3", tg_softmax(e->x, 3), "softmax:", "dim 3", "(4,8,32)");
    ROW("log_softmax dim -4", tg_log_softmax(e->x, -4),
        "log_softmax:", "dim -4", "(4,8,32)");
    ROW("softmax bool", tg_softmax(e->mask, 0), "softmax:", "bool (4,8,32)");
    ROW("attention_softmax bool", tg_attention_softmax(e->mask, 1, true),
        "attention_softmax:", "expected a float32 or float64", "(4,8,32)");
    ROW("attention_softmax 1-d", tg_attention_softmax(e->v3, 1, false),
        "attention_softmax:", "at least 2 dims", "(3,)");
    ROW("attention_softmax inf scale",
        tg_attention_softmax(e->x, INFINITY, true),
        "attention_softmax:", "scale must be finite", "inf");
    ROW("attention_softmax NaN scale", tg_attention_softmax(e->x, NAN, false),
        "attention_softmax:", "scale must be finite", "nan");

    /* fused attention */
    ROW("attention d differs",
        tg_attention(e->x, temp(tg_zeros(TG_FLOAT64, TG_SHAPE(4, 8, 16))), e->x,
                     true, 1),
        "attention:", "(4,8,32)", "(4,8,16)");
    ROW("attention keys differ",
        tg_attention(e->x, e->x, temp(tg_zeros(TG_FLOAT64, TG_SHAPE(4, 7, 32))),
                     true, 1),
        "attention:", "(4,8,32)", "(4,7,32)");
    ROW("attention batch differs",
        attention_kv(e->x, temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 8, 32))),
                     false, 1),
        "attention:", "(4,8,32)", "(3,8,32)");
    ROW("attention 1-d", tg_attention(e->v3, e->v3, e->v3, false, 1),
        "attention:", "(3,)");
    ROW("attention float64 / float32",
        tg_attention(e->x, e->x32, e->x, true, 1), "attention:", "float64",
        "float32");
    ROW("attention bool", tg_attention(e->mask, e->mask, e->mask, true, 1),
        "attention:", "bool (4,8,32)");
    ROW("attention scale NaN", tg_attention(e->x, e->x, e->x, true, NAN),
        "attention:", "scale", "nan");
    ROW("attention scale inf", tg_attention(e->x, e->x, e->x, true, INFINITY),
        "attention:", "scale", "inf");

    /* cat and chunk (a refused chunk leaves out untouched) */
    ROW("cat NULL array", tg_cat(NULL, 2, 0), "cat:", "NULL");
    ROW("cat of 0", tg_cat(&e->x, 0, 0), "cat:", "0");
    ROW("cat of -1", tg_cat(&e->x, -1, 0), "cat:", "-1");
    ROW("cat float64 + float32", tg_cat((tg_tensor *[]){e->x, e->x32}, 2, 0),
        "cat:", "float32 (4,8,32)", "float64 (4,8,32)");
    ROW("cat shapes", tg_cat((tg_tensor *[]){e->x, e->m}, 2, 0),
        "cat:", "(16,32)", "(4,8,32)");
    ROW("cat dim 3", tg_cat((tg_tensor *[]){e->x, e->x}, 2, 3), "cat:", "dim 3",
        "(4,8,32)");
    ROW("cat sizes past int64", cat_twice(empty_wide(), 1),
        "cat:", "past int64", "(0,4611686018427387904)");
    ROW("add broadcast past 2^59", tg_add(column(), row()),
        "add:", "(4294967296,1) and (1,4294967296)", "more elements");
    ROW("mse_loss broadcast past 2^59", tg_mse_loss(column(), row()),
        "mse_loss:", "(4294967296,1) and (1,4294967296)", "more elements");
    ROW("layer_norm rows past 2^59",
        tg_layer_norm(temp(tg_zeros(TG_FLOAT64, TG_SHAPE(E16, E16, 0))), NULL,
                      NULL, 1e-5),
        "layer_norm:", "(10000000000000000,10000000000000000,0)", "more rows");
    ROW("sum result past 2^59",
        tg_sum(temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, E16, E16))), 0, false),
        "sum:", "more elements");
    ROW("matmul batch past 2^59",
        tg_matmul(
            temp(tg_expand(temp(tg_ones(TG_FLOAT64, TG_SHAPE(1, 1, 2, 2))),
                           TG_SHAPE((int64_t)1 << 32, 1, 2, 2))),
            temp(tg_expand(temp(tg_ones(TG_FLOAT64, TG_SHAPE(1, 1, 2, 2))),
                           TG_SHAPE(1, (int64_t)1 << 32, 2, 2)))),
        "matmul:", "(4294967296,1,2,2) and (1,4294967296,2,2)",
        "more elements");
    ROW_RC("chunk NULL out", tg_chunk(e->x, 2, 0, NULL), "chunk:", "NULL",
           "(4,8,32)");
    ROW_IF("chunk into 0", chunk_failed(e->x, 0, 0), "chunk:", "got 0",
           "(4,8,32)");
    ROW_IF("chunk into -2", chunk_failed(e->x, -2, 0), "chunk:", "got -2",
           "(4,8,32)");
    ROW_IF("chunk uneven", chunk_failed(e->x, 3, 0), "chunk:", "size 4",
           "3 chunks");
    ROW_IF("chunk dim 3", chunk_failed(e->x, 2, 3), "chunk:", "dim 3",
           "(4,8,32)");

    /* embedding and gather: index dtypes, shapes and values */
    ROW("embedding 1-d weight", tg_embedding(e->v3, e->ids),
        "embedding:", "(3,)");
    ROW("embedding float ids", tg_embedding(e->m, e->x), "embedding:", "int64",
        "float64 (4,8,32)");
    ROW("embedding id 16 of 16",
        tg_embedding(e->m, int64_full(TG_SHAPE(2, 3), 16)), "embedding:", "16",
        "[0, 16)");
    ROW("embedding id -1", tg_embedding(e->m, int64_full(TG_SHAPE(5), -1)),
        "embedding:", "-1", "[0, 16)");
    ROW("embedding bool weight", tg_embedding(e->mask, e->ids),
        "embedding:", "bool");
    ROW("gather float index", tg_gather(e->x, 2, e->x), "gather:", "int64",
        "float64 (4,8,32)");
    ROW("gather index ndim", tg_gather(e->x, 0, e->ids), "gather:", "(4,8)",
        "(4,8,32)");
    ROW("gather dim 3", tg_gather(e->x, 3, e->x), "gather:", "dim 3",
        "(4,8,32)");
    ROW("gather index 32",
        tg_gather(e->x, 2, int64_full(TG_SHAPE(4, 8, 1), 32)), "gather:", "32",
        "[0, 32)");
    ROW("gather index -1",
        tg_gather(e->x, 2, int64_full(TG_SHAPE(4, 8, 1), -1)), "gather:", "-1",
        "[0, 32)");
    ROW("gather index too big",
        tg_gather(e->x, 2, int64_full(TG_SHAPE(5, 8, 1), 0)),
        "gather:", "(5,8,1)", "(4,8,32)");

    /* layer_norm and gelu */
    ROW("layer_norm gamma shape", tg_layer_norm(e->x, e->v3, NULL, 1e-5),
        "layer_norm:", "gamma", "(3,)");
    ROW("layer_norm beta shape", tg_layer_norm(e->x, NULL, e->m, 1e-5),
        "layer_norm:", "beta", "(16,32)");
    ROW("layer_norm eps -1", tg_layer_norm(e->x, NULL, NULL, -1),
        "layer_norm:", "eps", "-1");
    ROW("layer_norm eps NaN", tg_layer_norm(e->x, NULL, NULL, NAN),
        "layer_norm:", "eps", "nan");
    ROW("layer_norm 0-d", tg_layer_norm(e->s, NULL, NULL, 1e-5),
        "layer_norm:", "()");
    ROW("layer_norm bool", tg_layer_norm(e->mask, NULL, NULL, 1e-5),
        "layer_norm:", "bool (4,8,32)");
    ROW("layer_norm float32 gamma",
        tg_layer_norm(e->x, temp(tg_ones(TG_FLOAT32, TG_SHAPE(32))), NULL,
                      1e-5),
        "layer_norm:", "float64", "float32 (32,)");
    ROW("gelu bool", tg_gelu(e->mask), "gelu:", "bool (4,8,32)");

    /* losses */
    ROW("cross_entropy float targets", tg_cross_entropy(e->x, e->x),
        "cross_entropy:", "int64", "float64");
    ROW("cross_entropy targets shape",
        tg_cross_entropy(e->x, int64_full(TG_SHAPE(4, 7), 0)),
        "cross_entropy:", "(4,7)", "(4,8,32)");
    ROW("cross_entropy target 32",
        tg_cross_entropy(e->x, int64_full(TG_SHAPE(4, 8), 32)),
        "cross_entropy:", "32");
    ROW("cross_entropy target -1",
        tg_cross_entropy(e->x, int64_full(TG_SHAPE(4, 8), -1)),
        "cross_entropy:", "-1");
    ROW("cross_entropy 0-d logits", tg_cross_entropy(e->s, e->ids),
        "cross_entropy:", "()");
    ROW("cross_entropy bool logits", tg_cross_entropy(e->mask, e->ids),
        "cross_entropy:", "bool (4,8,32)");
    ROW("cross_entropy target -101",
        tg_cross_entropy(e->x, int64_full(TG_SHAPE(4, 8), -101)),
        "cross_entropy:", "-101", "not ignore_index -100");
    ROW("cross_entropy_with -100 not ignored",
        tg_cross_entropy_with(e->x, int64_full(TG_SHAPE(4, 8), -100), 3,
                              TG_REDUCTION_NONE),
        "cross_entropy:", "target -100 at position (0,0)", "ignore_index 3");
    ROW("cross_entropy_with reduction 7",
        tg_cross_entropy_with(e->x, e->ids, -100, (tg_reduction)7),
        "cross_entropy:", "reduction 7");
    ROW("cross_entropy_with targets shape",
        tg_cross_entropy_with(e->x, e->v3, -100, TG_REDUCTION_SUM),
        "cross_entropy:", "int64", "(3,)");
    /* linear_cross_entropy: x (4,8,32) with a weight (32,16) */
#define LCE_W temp(tg_ones(TG_FLOAT64, TG_SHAPE(32, 16)))
    ROW("linear_cross_entropy weight rows",
        tg_linear_cross_entropy(e->x, e->m, e->ids),
        "linear_cross_entropy:", "(4,8,32)", "weight float64 (16,32)");
    ROW("linear_cross_entropy weight 1-d",
        tg_linear_cross_entropy(e->x, e->v3, e->ids),
        "linear_cross_entropy:", "(3,)", "(C,V)");
    ROW("linear_cross_entropy weight float32",
        tg_linear_cross_entropy(
            e->x, temp(tg_ones(TG_FLOAT32, TG_SHAPE(32, 16))), e->ids),
        "linear_cross_entropy:", "float32 (32,16)", "one dtype");
    ROW("linear_cross_entropy 0-d x",
        tg_linear_cross_entropy(e->s, LCE_W, e->ids),
        "linear_cross_entropy:", "()");
    ROW("linear_cross_entropy bool x",
        tg_linear_cross_entropy(e->mask, LCE_W, e->ids),
        "linear_cross_entropy:", "bool (4,8,32)");
    ROW("linear_cross_entropy target 16",
        tg_linear_cross_entropy(e->x, LCE_W, int64_full(TG_SHAPE(4, 8), 16)),
        "linear_cross_entropy:", "target 16", "[0, 16) for weight (32,16)");
    ROW("linear_cross_entropy targets shape",
        tg_linear_cross_entropy(e->x, LCE_W, int64_full(TG_SHAPE(4, 7), 0)),
        "linear_cross_entropy:", "(4,7)", "x (4,8,32)");
    ROW("linear_cross_entropy float targets",
        tg_linear_cross_entropy(e->x, LCE_W, e->x),
        "linear_cross_entropy:", "int64", "float64");
    ROW("linear_cross_entropy_with reduction 7",
        tg_linear_cross_entropy_with(e->x, LCE_W, e->ids, -100,
                                     (tg_reduction)7),
        "linear_cross_entropy:", "reduction 7");
#undef LCE_W
    ROW("mse_loss unbroadcastable", tg_mse_loss(e->x, e->v3),
        "mse_loss:", "(4,8,32)", "(3,)");
    ROW("mse_loss float64 / float32", tg_mse_loss(e->x, e->x32),
        "mse_loss:", "float64", "float32");
    ROW("mse_loss bool", tg_mse_loss(e->mask, e->mask),
        "mse_loss:", "bool (4,8,32)");

    /* sigmoid, tanh, abs, clamp; argmax and argmin; logical; outer */
    ROW("sigmoid bool", tg_sigmoid(e->mask), "sigmoid:", "bool (4,8,32)");
    ROW("tanh int64", tg_tanh(e->ids), "tanh:", "int64 (4,8)");
    ROW("abs bool", tg_abs(e->mask), "abs:", "bool (4,8,32)");
    ROW("clamp int64", tg_clamp(e->ids, 0, 1), "clamp:", "int64 (4,8)");
    ROW("clamp NaN min", tg_clamp(e->x, NAN, 1), "clamp:", "NaN",
        "float64 (4,8,32)");
    ROW("clamp NaN max", tg_clamp(e->x, -INFINITY, NAN), "clamp:", "NaN",
        "INFINITY");
    ROW("argmax dim 3", tg_argmax(e->x, 3, false), "argmax:", "dim 3",
        "(4,8,32)");
    ROW("argmin dim -4", tg_argmin(e->ids, -4, true), "argmin:", "dim -4",
        "(4,8)");
    ROW("argmax empty dim",
        tg_argmax(temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3))), 0, false),
        "argmax:", "empty dim 0", "(0,3)");
    ROW("argmin all of empty",
        tg_argmin(temp(tg_zeros(TG_INT64, TG_SHAPE(2, 0))), TG_ALL, true),
        "argmin:", "empty", "int64 (2,0)");
    ROW("logical_and unbroadcastable", tg_logical_and(e->mask, e->v3),
        "logical_and:", "(4,8,32)", "(3,)");
    ROW("logical_or unbroadcastable", tg_logical_or(e->m, e->ids),
        "logical_or:", "(16,32)", "(4,8)");
    ROW("logical_and count past 2^59", tg_logical_and(column(), row()),
        "logical_and:", "(4294967296,1)", "(1,4294967296)");
    ROW("outer 2-D", tg_outer(e->m, e->v3), "outer:", "1-D", "(16,32)");
    ROW("outer 0-d", tg_outer(e->v3, e->s), "outer:", "1-D", "()");
    ROW("outer float64 / float32",
        tg_outer(e->v3, temp(tg_ones(TG_FLOAT32, TG_SHAPE(2)))),
        "outer:", "float64", "float32 (2,)");
    ROW("outer bool",
        tg_outer(temp(tg_select(temp(tg_select(e->mask, 0, 0)), 0, 0)), e->v3),
        "outer:", "bool");
}

static void ops_null_table(table_walk *w, env *e)
{
    /* views */
    NULL_ROW("transpose", tg_transpose(NUL, 0, 1));
    NULL_ROW("slice", tg_slice(NUL, 0, 0, 1));
    NULL_ROW("narrow", tg_narrow(NUL, 0, 0, 1));
    NULL_ROW("select", tg_select(NUL, 0, 0));
    NULL_ROW("expand", tg_expand(NUL, TG_SHAPE(2)));
    NULL_ROW("reshape", tg_reshape(NUL, TG_SHAPE(2)));
    NULL_ROW("unsqueeze", tg_unsqueeze(NUL, 0));
    NULL_ROW("squeeze", tg_squeeze(NUL, 0));
    NULL_ROW("contiguous", tg_contiguous(NUL));
    NULL_ROW("to", tg_to(NUL, TG_FLOAT32));

    /* elementwise and comparisons */
    NULL_ROW("add (left)", tg_add(NUL, e->x));
    NULL_ROW("add (right)", tg_add(e->x, NUL));
    NULL_ROW("sub", tg_sub(e->x, NUL));
    NULL_ROW("mul", tg_mul(NUL, e->x));
    NULL_ROW("div", tg_div(e->x, NUL));
    NULL_ROW("neg", tg_neg(NUL));
    NULL_ROW("scale", tg_scale(NUL, 2));
    NULL_ROW("add_scalar", tg_add_scalar(NUL, 2));
    NULL_ROW("exp", tg_exp(NUL));
    NULL_ROW("log", tg_log(NUL));
    NULL_ROW("sqrt", tg_sqrt(NUL));
    NULL_ROW("pow_scalar", tg_pow_scalar(NUL, 2));
    NULL_ROW("relu", tg_relu(NUL));
    NULL_ROW("eq", tg_eq(NUL, e->x));
    NULL_ROW("ne", tg_ne(e->x, NUL));
    NULL_ROW("lt", tg_lt(NUL, e->x));
    NULL_ROW("le", tg_le(e->x, NUL));
    NULL_ROW("gt", tg_gt(NUL, e->x));
    NULL_ROW("ge", tg_ge(e->x, NUL));
    NULL_ROW("eq_scalar", tg_eq_scalar(NUL, 0));
    NULL_ROW("ne_scalar", tg_ne_scalar(NUL, 0));
    NULL_ROW("lt_scalar", tg_lt_scalar(NUL, 0));
    NULL_ROW("le_scalar", tg_le_scalar(NUL, 0));
    NULL_ROW("gt_scalar", tg_gt_scalar(NUL, 0));
    NULL_ROW("ge_scalar", tg_ge_scalar(NUL, 0));

    /* where, masked_fill, tril and triu */
    NULL_ROW("where (cond)", tg_where(NUL, e->x, e->x));
    NULL_ROW("where (a)", tg_where(e->mask, NUL, e->x));
    NULL_ROW("where (b)", tg_where(e->mask, e->x, NUL));
    NULL_ROW("masked_fill (t)", tg_masked_fill(NUL, e->mask, 0));
    NULL_ROW("masked_fill (mask)", tg_masked_fill(e->x, NUL, 0));
    NULL_ROW("tril", tg_tril(NUL, 0));
    NULL_ROW("triu", tg_triu(NUL, 0));

    /* matmul, reductions and softmax */
    NULL_ROW("matmul (a)", tg_matmul(NUL, e->m));
    NULL_ROW("matmul (b)", tg_matmul(e->x, NUL));
    NULL_ROW("sum", tg_sum(NUL, 0, false));
    NULL_ROW("sum_all", tg_sum_all(NUL));
    NULL_ROW("mean", tg_mean(NUL, 0, true));
    NULL_ROW("mean_all", tg_mean_all(NUL));
    NULL_ROW("max", tg_max(NUL, 0, false));
    NULL_ROW("softmax", tg_softmax(NUL, 0));
    NULL_ROW("log_softmax", tg_log_softmax(NUL, 0));
    NULL_ROW("attention_softmax", tg_attention_softmax(NUL, 1, true));

    /* attention, cat and chunk, embedding and gather, layer_norm and gelu,
     * losses */
    NULL_ROW("attention (q)", tg_attention(NUL, e->x, e->x, true, 1));
    NULL_ROW("attention (k)", tg_attention(e->x, NUL, e->x, true, 1));
    NULL_ROW("attention (v)", tg_attention(e->x, e->x, NUL, true, 1));
    NULL_ROW("cat", tg_cat((tg_tensor *[]){e->x, NUL}, 2, 0));
    NULL_ROW_IF("chunk", chunk_null_leaves_out(e->x));
    NULL_ROW("embedding (weight)", tg_embedding(NUL, e->ids));
    NULL_ROW("embedding (ids)", tg_embedding(e->m, NUL));
    NULL_ROW("gather (t)", tg_gather(NUL, 0, e->ids));
    NULL_ROW("gather (index)", tg_gather(e->x, 0, NUL));
    NULL_ROW("layer_norm", tg_layer_norm(NUL, NULL, NULL, 1e-5));
    NULL_ROW("gelu", tg_gelu(NUL));
    NULL_ROW("cross_entropy (logits)", tg_cross_entropy(NUL, e->ids));
    NULL_ROW("cross_entropy (targets)", tg_cross_entropy(e->x, NUL));
    NULL_ROW("cross_entropy_with (logits)",
             tg_cross_entropy_with(NUL, e->ids, -100, TG_REDUCTION_SUM));
    NULL_ROW("cross_entropy_with (targets)",
             tg_cross_entropy_with(e->x, NUL, -100, TG_REDUCTION_NONE));
    NULL_ROW("linear_cross_entropy (x)",
             tg_linear_cross_entropy(NUL, e->m, e->ids));
    NULL_ROW("linear_cross_entropy (weight)",
             tg_linear_cross_entropy(e->x, NUL, e->ids));
    NULL_ROW("linear_cross_entropy (targets)",
             tg_linear_cross_entropy(e->x, e->m, NUL));
    NULL_ROW("linear_cross_entropy_with (x)",
             tg_linear_cross_entropy_with(NUL, e->m, e->ids, -100,
                                          TG_REDUCTION_SUM));
    NULL_ROW("mse_loss (a)", tg_mse_loss(NUL, e->x));
    NULL_ROW("mse_loss (b)", tg_mse_loss(e->x, NUL));

    /* sigmoid, tanh, abs, clamp; argmax and argmin; logical; outer */
    NULL_ROW("sigmoid", tg_sigmoid(NUL));
    NULL_ROW("tanh", tg_tanh(NUL));
    NULL_ROW("abs", tg_abs(NUL));
    NULL_ROW("clamp", tg_clamp(NUL, 0, 1));
    NULL_ROW("clamp NaN bound", tg_clamp(NUL, NAN, 1));
    NULL_ROW("argmax", tg_argmax(NUL, 0, false));
    NULL_ROW("argmin", tg_argmin(NUL, TG_ALL, false));
    NULL_ROW("logical_and (a)", tg_logical_and(NUL, e->mask));
    NULL_ROW("logical_and (b)", tg_logical_and(e->mask, NUL));
    NULL_ROW("logical_or", tg_logical_or(e->mask, NUL));
    NULL_ROW("logical_not", tg_logical_not(NUL));
    NULL_ROW("outer (a)", tg_outer(NUL, e->v3));
    NULL_ROW("outer (b)", tg_outer(e->v3, NUL));
}

START_TEST(bad_input) { check_row(ops_table, _i); }
END_TEST

START_TEST(null_input) { check_null_row(ops_null_table, _i); }
END_TEST

START_TEST(matmul_message_exact)
{
    env e;
    env_make(&e);
    ck_assert_ptr_null(tg_matmul(e.x, e.m));
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
    env_free(&e);
}
END_TEST

/* ---- dropout and gelu's tanh form (issue 11) ---------------------------- */

static void dropout_table(table_walk *w, env *e)
{
    ROW("dropout p 1", tg_dropout(e->x, 1, true, &e->rng), "dropout:", "[0, 1)",
        "got 1 (x (4,8,32))");
    ROW("dropout p -0.5 in eval", tg_dropout(e->x, -0.5, false, &e->rng),
        "dropout:", "[0, 1)", "-0.5");
    ROW("dropout p NaN", tg_dropout(e->x, NAN, true, &e->rng),
        "dropout:", "nan");
    ROW("dropout NULL rng", tg_dropout(e->x, 0.5, true, NULL),
        "dropout:", "needs an rng", "(4,8,32)");
    ROW("dropout bool", tg_dropout(e->mask, 0.5, true, &e->rng),
        "dropout:", "bool");
    ROW("gelu_tanh bool", tg_gelu_tanh(e->mask), "gelu_tanh:", "bool");
    ROW("gelu_tanh int64", tg_gelu_tanh(e->ids), "gelu_tanh:", "int64");
}

static void dropout_null_table(table_walk *w, env *e)
{
    NULL_ROW("dropout", tg_dropout(NUL, 0.5, true, &e->rng));
    NULL_ROW("dropout eval", tg_dropout(NUL, 0.5, false, NULL));
    NULL_ROW("gelu_tanh", tg_gelu_tanh(NUL));
}

START_TEST(dropout_bad_input) { check_row(dropout_table, _i); }
END_TEST

START_TEST(dropout_null_input) { check_null_row(dropout_null_table, _i); }
END_TEST

Suite *errors_ops_suite(void)
{
    Suite *s = suite_create("errors_ops");
    TCase *tc = tcase_create("bad input");
    tcase_add_loop_test(tc, bad_input, 0, table_rows(ops_table));
    tcase_add_test(tc, matmul_message_exact);
    suite_add_tcase(s, tc);

    tc = tcase_create("null");
    tcase_add_loop_test(tc, null_input, 0, table_rows(ops_null_table));
    suite_add_tcase(s, tc);

    tc = tcase_create("dropout");
    tcase_add_loop_test(tc, dropout_bad_input, 0, table_rows(dropout_table));
    tcase_add_loop_test(tc, dropout_null_input, 0,
                        table_rows(dropout_null_table));
    suite_add_tcase(s, tc);
    return s;
}
