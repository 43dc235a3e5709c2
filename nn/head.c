/* One causal self-attention head: the lesson's attention_head as a module.
 *
 *     def attention_head(x, W_q, W_k, W_v):
 *         B, T, C = x.shape; hs = W_q.shape[1]
 *         q, k, v = x @ W_q, x @ W_k, x @ W_v
 *         scores = (q @ k.transpose(0,2,1)) / hs**0.5
 *         scores = np.where(np.tril(np.ones((T,T))) == 0, -np.inf, scores)
 *         return softmax(scores, -1) @ v
 *
 * The forward below is those lines, op for op, on the tape (the scale, mask
 * and softmax as one entry that computes what the three would), so backward
 * comes from the ops' own derivations. Temporaries are released as soon as
 * the next op holds them (not through a private scope): the output must stay
 * in the caller's scope, if one is open. */
#include "tapegrad_nn.h"
#include "internal.h"

#include <math.h>
#include <string.h>

/* A (C,hs) projection drawn N(0, 1/C), i.e. randn(C, hs) * (1/sqrt(C)): each
 * q . k then sums hs products of unit-variance terms at the start. Drawn and
 * scaled in double, then rounded once to dt. A leaf that requires grad,
 * owned by the module (taken out of any open scope). */
static tg_tensor *projection(tg_rng *rng, tg_dtype dt, int n_embd, int hs)
{
    tg_tensor *draw = tg_randn(rng, TG_FLOAT64, TG_SHAPE(n_embd, hs));
    tg_tensor *scaled = tg_scale(draw, 1.0 / sqrt(n_embd));
    tg_tensor *w = tg_keep(tg_to(scaled, dt));
    tg_release(draw);
    tg_release(scaled);
    tg_set_requires_grad(w, true);
    return w;
}

/* Draws w_q, w_k, w_v in that order (the struct's), so a seed reproduces the
 * head. On error the head is left zeroed. */
int tg_head_init(tg_head *h, tg_dtype dt, int n_embd, int head_size,
                 tg_rng *rng)
{
    if (!h || !rng) {
        tg__error("head_init: %s is NULL", h ? "rng" : "the head");
        return -1;
    }
    memset(h, 0, sizeof *h);
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg__error("head_init: dtype must be float32 or float64, got %s",
                  tg_dtype_name(dt));
        return -1;
    }
    if (n_embd <= 0 || head_size <= 0) {
        tg__error("head_init: sizes must be positive, got n_embd %d, "
                  "head_size %d",
                  n_embd, head_size);
        return -1;
    }
    h->n_embd = n_embd;
    h->head_size = head_size;
    h->scaled = h->causal = true;
    tg_tensor **w[3] = {&h->w_q, &h->w_k, &h->w_v};
    for (int i = 0; i < 3; i++) {
        *w[i] = projection(rng, dt, n_embd, head_size);
        if (!*w[i]) {
            tg_head_free(h);
            return -1;
        }
    }
    return 0;
}

void tg_head_free(tg_head *h)
{
    if (!h)
        return;
    tg_release(h->w_q);
    tg_release(h->w_k);
    tg_release(h->w_v);
    tg_release(h->attn);
    memset(h, 0, sizeof *h);
}

/* x must be (B,T,C) with C = n_embd, in the head's dtype. A NULL x (an
 * earlier call failed) keeps the first error. */
static bool check_input(const tg_head *h, const tg_tensor *x)
{
    if (!h || !h->w_q) {
        tg__error("head: %s",
                  h ? "the head is not initialised" : "the head is NULL");
        return false;
    }
    if (!x)
        return false;
    tg_dtype dt = tg_dtype_of(h->w_q);
    if (tg_ndim(x) != 3 || tg_size(x, 2) != h->n_embd || tg_dtype_of(x) != dt) {
        tg__error("head: x must be (B,T,%d) %s, got %s %s", h->n_embd,
                  tg_dtype_name(dt), TG_SHP(x), tg_dtype_name(tg_dtype_of(x)));
        return false;
    }
    return true;
}

/* Returns next after releasing prev: one step of a chain of ops on the same
 * value, e.g. scores = then(scores, tg_scale(scores, s)). */
static tg_tensor *then(tg_tensor *prev, tg_tensor *next)
{
    tg_release(prev);
    return next;
}

/* attn = softmax(q @ k^T [* 1/sqrt(hs)] [future -> -inf], -1)     (B,T,T)
 * where q, k = x @ W_q, x @ W_k                                  (B,T,hs)
 * Multiplying by 1/sqrt(hs) is the lesson's division by hs**0.5 exactly
 * when hs is a power of 4 (its 16: * 0.25), and within rounding otherwise.
 * The lesson's mask, tril(ones(T,T)) == 0, marks the future, which becomes
 * -inf, so softmax gives it weight exactly 0. Scale, mask and softmax are
 * one tape entry (tg__attention_softmax) with the bits, forward and
 * backward, of tg_scale, tg_masked_fill and tg_softmax in turn, and no
 * (T,T) mask or (B,T,T) intermediates to build each forward. */
static tg_tensor *attention_weights(tg_head *h, tg_tensor *x)
{
    tg_tensor *q = tg_matmul(x, h->w_q);
    tg_tensor *k = tg_matmul(x, h->w_k);
    tg_tensor *kt = tg_transpose(k, 1, 2); /* (B,hs,T) */
    tg_tensor *scores = tg_matmul(q, kt);  /* (B,T,T) */
    tg_release(q);
    tg_release(k);
    tg_release(kt);
    double scale = h->scaled ? 1.0 / sqrt(h->head_size) : 1.0;
    return then(scores, tg__attention_softmax(scores, scale, h->causal));
}

/* The fused path (h->fused): the same projections, then one tg_attention op
 * in place of the scores, scale, mask, softmax and attn @ v above, with the
 * same values and gradients. It never forms the (B,T,T) weights, so h->attn
 * is released and left NULL.
 *   out = attention(x @ W_q, x @ W_k, x @ W_v, causal, 1/sqrt(hs) or 1) */
static tg_tensor *fused_forward(tg_head *h, tg_tensor *x)
{
    tg_tensor *q = tg_matmul(x, h->w_q);
    tg_tensor *k = tg_matmul(x, h->w_k);
    tg_tensor *v = tg_matmul(x, h->w_v);
    double scale = h->scaled ? 1.0 / sqrt(h->head_size) : 1.0;
    tg_tensor *out = tg_attention(q, k, v, h->causal, scale);
    tg_release(q);
    tg_release(k);
    tg_release(v);
    if (out) {
        tg_release(h->attn);
        h->attn = NULL;
    }
    return out;
}

/* out = attn @ (x @ W_v)                                 (B,T,T) @ (B,T,hs)
 * and h->attn becomes a detached reference to attn (the previous one is
 * released). With h->fused, fused_forward instead (h->attn NULL). */
tg_tensor *tg_head_forward(tg_head *h, tg_tensor *x)
{
    if (!check_input(h, x))
        return NULL;
    if (h->fused)
        return fused_forward(h, x);
    tg_tensor *attn = attention_weights(h, x);
    tg_tensor *v = tg_matmul(x, h->w_v);
    tg_tensor *out = tg_matmul(attn, v);
    tg_release(v);
    if (out) {
        tg_release(h->attn);
        h->attn = tg_keep(tg_detach(attn));
    }
    tg_release(attn);
    return out;
}

int tg_head_params(tg_head *h, tg_params *ps, const char *prefix)
{
    if (!h || !h->w_q) {
        tg__error("head_params: %s",
                  h ? "the head is not initialised" : "the head is NULL");
        return -1;
    }
    if (tg_params_add(ps, prefix, "w_q", h->w_q) < 0 ||
        tg_params_add(ps, prefix, "w_k", h->w_k) < 0 ||
        tg_params_add(ps, prefix, "w_v", h->w_v) < 0)
        return tg__error_wrap("head_params");
    return 0;
}
