/* One causal self-attention head: the lesson's attention_head as a module.
 *
 *     def attention_head(x, W_q, W_k, W_v):
 *         B, T, C = x.shape; hs = W_q.shape[1]
 *         q, k, v = x @ W_q, x @ W_k, x @ W_v
 *         scores = (q @ k.transpose(0,2,1)) / hs**0.5
 *         scores = np.where(np.tril(np.ones((T,T))) == 0, -np.inf, scores)
 *         return softmax(scores, -1) @ v
 *
 * The forward below (tg_head_forward and attention_weights) is those lines,
 * op for op, in public ops on the tape: tg_matmul, tg_transpose, tg_scale,
 * tg_masked_fill with the (T,T) future mask that tg_ones, tg_tril and
 * tg_eq_scalar build, tg_softmax, tg_matmul; so backward comes from each
 * op's own derivation. h->path picks another route to the same numbers:
 *  - TG_HEAD_FUSED_SOFTMAX: the scale, mask and softmax lines become one
 *    tg_attention_softmax entry, which computes the same bits forward and
 *    backward without building the mask or keeping the (B,T,T)
 *    intermediates;
 *  - TG_HEAD_TILED: everything after the projections, up to @ v, is one
 *    tg_attention op, in blocks of queries, so the (B,T,T) weights never
 *    exist (h->attn is not kept); it sums in another order, so it agrees
 *    within rounding.
 * Temporaries are released as soon as the next op holds them (not through
 * a private scope): the output must stay in the caller's scope, if one is
 * open. */
#include "core/shared.h"
#include "nn/nn.h"

#include <math.h>
#include <string.h>

/* A (C,hs) projection drawn N(0, 1/C), i.e. randn(C, hs) * (1/sqrt(C)): each
 * q . k then sums hs products of unit-variance terms at the start. Drawn and
 * scaled in double, then rounded once to dt. A leaf that requires grad,
 * owned by the module (taken out of any open scope). */
static tg_tensor *projection(tg_rng *rng, tg_dtype dt, int n_embd, int hs)
{
    if (rng == &tg__no_draw)
        return tg__blank_weight(dt, TG_SHAPE(n_embd, hs));
    tg_tensor *draw = tg_randn(rng, TG_FLOAT64, TG_SHAPE(n_embd, hs));
    tg_tensor *scaled = tg_scale(draw, 1.0 / sqrt(n_embd));
    tg_tensor *w = tg_keep(tg_to(scaled, dt));
    tg_release(draw);
    tg_release(scaled);
    tg_set_requires_grad(w, true);
    return w;
}

tg_head_config tg_head_config_default(int n_embd, int head_size)
{
    return (tg_head_config){.n_embd = n_embd,
                            .head_size = head_size,
                            .causal = true,
                            .scale = head_size > 0 ? 1.0 / sqrt(head_size) : 0,
                            .path = TG_HEAD_COMPOSED};
}

/* Errors unless cfg's options make sense (the sizes are checked apart). */
static bool check_options(const tg_head_config *cfg)
{
    if (!isfinite(cfg->scale)) {
        tg__error("head_init: scale must be finite, got %g", cfg->scale);
        return false;
    }
    if (!tg__check_dropout("head_init", "attn_dropout", cfg->attn_dropout))
        return false;
    if ((unsigned)cfg->path > TG_HEAD_TILED) {
        tg__error("head_init: path %d is not a tg_head_path (0..%d)",
                  (int)cfg->path, TG_HEAD_TILED);
        return false;
    }
    return true;
}

/* A leaf (hs) of zeros that requires grad, owned by the head: a q/k/v bias
 * at its start (nanoGPT's _init_weights zeroes every bias). */
static tg_tensor *zero_bias(tg_dtype dt, int hs)
{
    tg_tensor *b = tg_keep(tg_zeros(dt, TG_SHAPE(hs)));
    tg_set_requires_grad(b, true);
    return b;
}

/* Draws w_q, w_k, w_v in that order (the struct's), so a seed reproduces the
 * head; the biases draw nothing. On error the head is left zeroed. */
int tg_head_init_with(tg_head *h, tg_dtype dt, const tg_head_config *cfg,
                      tg_rng *rng)
{
    if (!tg__init_begin("head_init", "the head", h, sizeof *h,
                        TG__INIT_RNG | TG__INIT_CONFIG | TG__INIT_FLOAT, dt,
                        cfg, rng))
        return -1;
    int n_embd = cfg->n_embd, head_size = cfg->head_size;
    if (n_embd <= 0 || head_size <= 0) {
        tg__error("head_init: sizes must be positive, got n_embd %d, "
                  "head_size %d",
                  n_embd, head_size);
        return -1;
    }
    if (!check_options(cfg))
        return -1;
    h->n_embd = n_embd;
    h->head_size = head_size;
    h->scaled = true;
    h->causal = cfg->causal;
    h->scale = cfg->scale;
    h->path = cfg->path;
    h->attn_dropout = cfg->attn_dropout;
    h->training = true;
    tg_tensor **w[3] = {&h->w_q, &h->w_k, &h->w_v};
    tg_tensor **b[3] = {&h->b_q, &h->b_k, &h->b_v};
    for (int i = 0; i < 3; i++) {
        *w[i] = projection(rng, dt, n_embd, head_size);
        if (!*w[i]) {
            tg_head_free(h);
            return tg__error_wrap("head_init");
        }
    }
    for (int i = 0; cfg->qkv_bias && i < 3; i++) {
        *b[i] = zero_bias(dt, head_size);
        if (!*b[i]) {
            tg_head_free(h);
            return tg__error_wrap("head_init");
        }
    }
    return 0;
}

int tg_head_init(tg_head *h, tg_dtype dt, int n_embd, int head_size,
                 tg_rng *rng)
{
    tg_head_config cfg = tg_head_config_default(n_embd, head_size);
    return tg_head_init_with(h, dt, &cfg, rng);
}

/* Errors unless h is initialised (op names the caller). */
static bool check_module(const char *op, const tg_head *h)
{
    return tg__module_ready(op, "the head", h, h && h->w_q);
}

int tg_head_train(tg_head *h, bool on, tg_rng *rng)
{
    if (!check_module("head_train", h))
        return -1;
    h->training = on;
    h->rng = rng;
    return 0;
}

void tg_head_free(tg_head *h)
{
    if (!h)
        return;
    tg_release(h->w_q);
    tg_release(h->w_k);
    tg_release(h->w_v);
    tg_release(h->b_q);
    tg_release(h->b_k);
    tg_release(h->b_v);
    tg_release(h->attn);
    memset(h, 0, sizeof *h);
}

/* x must be (B,T,C) with C = n_embd, in the head's dtype. A NULL x (an
 * earlier call failed) keeps the first error. */
static bool check_input(const tg_head *h, const tg_tensor *x)
{
    if (!check_module("head", h) || !x)
        return false;
    if ((unsigned)h->path > TG_HEAD_TILED) {
        tg__error("head: path %d is not a tg_head_path (0..%d)", (int)h->path,
                  TG_HEAD_TILED);
        return false;
    }
    tg_dtype dt = tg_dtype_of(h->w_q);
    if (tg_ndim(x) != 3 || tg_size(x, 2) != h->n_embd || tg_dtype_of(x) != dt) {
        tg__error("head: x must be (B,T,%d) %s, got %s %s", h->n_embd,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return false;
    }
    return true;
}

/* The lesson's mask, tril(ones(T,T)) == 0: true at (i, j) for j > i, the
 * future of query i. (T,T) bool, broadcast over the batch. The ones are
 * bool too: the same mask from a byte per entry (rebuilt each forward, it
 * was 1.4% of the xl step from float64 ones: bench_head --config xl
 * --profile). */
static tg_tensor *future_mask(int64_t T)
{
    tg_tensor *ones = tg_ones(TG_BOOL, TG_SHAPE(T, T));
    tg_tensor *lower = tg_tril(ones, 0); /* 1 where j <= i: what i sees */
    tg_tensor *future = tg_eq_scalar(lower, 0);
    tg_release(ones);
    tg_release(lower);
    return future;
}

/* h->scale, by default 1/sqrt(hs), the lesson's division by hs**0.5
 * (exactly so when hs is a power of 4, its 16: * 0.25; within rounding
 * otherwise); 1 unscaled. */
static double scale_of(const tg_head *h) { return h->scaled ? h->scale : 1.0; }

/* t named for the tape's printouts (tg_tape_print, tg_tape_dot), by the
 * lesson's names, so that a drawing of the head's tape reads as the
 * lesson's cells; t itself (NULL stays NULL). */
static tg_tensor *named(tg_tensor *t, const char *name)
{
    if (t)
        tg_set_name(t, name);
    return t;
}

/* attn = softmax(q @ k^T [* 1/sqrt(hs)] [future -> -inf], -1)     (B,T,T)
 * from q, k (B,T,hs). The future becomes -inf, so softmax gives it weight
 * exactly 0, and its scores get gradient exactly 0. TG_HEAD_FUSED_SOFTMAX
 * does the scale, mask and softmax as one tg_attention_softmax entry, with
 * the same bits. */
static tg_tensor *attention_weights(const tg_head *h, tg_tensor *q,
                                    tg_tensor *k, int64_t T)
{
    tg_tensor *kt = named(tg_transpose(k, 1, 2), "k^T");   /* (B,hs,T) */
    tg_tensor *scores = named(tg_matmul(q, kt), "scores"); /* (B,T,T) */
    tg_release(kt);
    if (h->path == TG_HEAD_FUSED_SOFTMAX)
        return named(tg__then(scores, tg_attention_softmax(scores, scale_of(h),
                                                           h->causal)),
                     "attn");
    if (h->scaled)
        scores =
            named(tg__then(scores, tg_scale(scores, scale_of(h))), "scaled");
    if (h->causal) {
        tg_tensor *future = named(future_mask(T), "mask");
        scores =
            named(tg__then(scores, tg_masked_fill(scores, future, -INFINITY)),
                  "masked");
        tg_release(future);
    }
    return named(tg__then(scores, tg_softmax(scores, -1)), "attn");
}

/* x @ w (+ b)                                  (B,T,C) @ (C,hs) -> (B,T,hs) */
static tg_tensor *project(tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    tg_tensor *y = tg_matmul(x, w);
    return b ? tg__then(y, tg_add(y, b)) : y;
}

/* q, k, v = x @ W_q + b_q, x @ W_k + b_k, x @ W_v + b_v         (B,T,hs)
 * out = dropout(attn) @ v                               (B,T,T) @ (B,T,hs)
 * and h->attn becomes a detached reference to attn (the previous one is
 * released). TG_HEAD_TILED instead computes out from q, k, v in one
 * tg_attention op, which never forms attn: h->attn is released, NULL.
 * A forward that cannot keep attn (no memory for the detached view) fails
 * as a whole: success always leaves h->attn holding this forward's
 * weights, on the paths that keep them. */
tg_tensor *tg_head_forward(tg_head *h, tg_tensor *x)
{
    if (!check_input(h, x))
        return NULL;
    bool drop = h->training && h->attn_dropout > 0;
    if (drop && h->path == TG_HEAD_TILED) {
        tg__error("head: attention dropout %g in training needs the weights, "
                  "which TG_HEAD_TILED never forms (another path, or eval)",
                  h->attn_dropout);
        return NULL;
    }
    tg_tensor *q = named(project(x, h->w_q, h->b_q), "q");
    tg_tensor *k = named(project(x, h->w_k, h->b_k), "k");
    tg_tensor *v = named(project(x, h->w_v, h->b_v), "v");
    tg_tensor *attn = NULL, *kept = NULL, *out;
    if (h->path == TG_HEAD_TILED) {
        out = named(tg_attention(q, k, v, h->causal, scale_of(h)), "out");
    } else {
        attn = attention_weights(h, q, k, tg_size(x, 1));
        tg_tensor *dropped =
            tg__module_dropout("head", "tg_head_train", tg_retain(attn),
                               h->attn_dropout, h->training, h->rng);
        out = named(tg_matmul(dropped, v), "out");
        tg_release(dropped);
        kept = out ? tg_keep(tg_detach(attn)) : NULL;
        if (out && !kept) {
            tg__error_wrap("head_forward: keeping the attention weights");
            tg_release(out);
            out = NULL;
        }
    }
    tg_release(q);
    tg_release(k);
    tg_release(v);
    if (out) {
        tg_release(h->attn);
        h->attn = kept;
    }
    tg_release(attn);
    return out;
}

int tg_head_params(tg_head *h, tg_params *ps, const char *prefix)
{
    if (!check_module("head_params", h))
        return -1;
    if (tg_params_add(ps, prefix, "w_q", h->w_q) < 0 ||
        tg_params_add(ps, prefix, "w_k", h->w_k) < 0 ||
        tg_params_add(ps, prefix, "w_v", h->w_v) < 0 ||
        (h->b_q && (tg_params_add(ps, prefix, "b_q", h->b_q) < 0 ||
                    tg_params_add(ps, prefix, "b_k", h->b_k) < 0 ||
                    tg_params_add(ps, prefix, "b_v", h->b_v) < 0)))
        return tg__error_wrap("head_params");
    return 0;
}
