/* tg_attention's rules as public ops (ops/attention.c has the op): its
 * vjp, the backward again as recorded ops so that a gradient of a gradient
 * can go through it, and its jvp, the forward mode.
 *
 * Both recompute the probabilities from q and k, with the ops the fast
 * path fuses (ops/attention.c never holds them whole, and its saved
 * logsumexp L is off the tape: a second derivative must see how P moves
 * with q and k):
 *
 *     R = Q K^T                                  (...,Tq,Tk)   tg_matmul
 *     P = softmax(scale * R, -inf where key > query when causal)
 *                                                  tg_attention_softmax
 *
 * tg_attention_softmax's causal mask is the attention's (aligned at the
 * start: query i sees keys 0..i, also when Tq != Tk), and a row of -inf
 * scores gives P = 0 there as the fast path's does. So these hold (Tq,Tk)
 * tensors: O(T^2) memory where the fast path's is O(T), the price of a
 * graph that can be differentiated again. */
#include "ops/ops.h"

/* P = attention_softmax(q k^T, scale, causal) of entry n; NULL when an op
 * fails (error set). */
static tg_tensor *probs(const tg_node *n)
{
    tg_tensor *kt = tg_transpose(n->in[1], -2, -1);
    tg_tensor *r = tg_matmul(n->in[0], kt);
    tg_tensor *p = tg_attention_softmax(r, n->p[0], n->ip[0] != 0);
    tg_release(kt);
    tg_release(r);
    return p;
}

/* a @ b^T (transpose_b) or a^T @ b (!transpose_b) over the last two dims. */
static tg_tensor *matmul_t(tg_tensor *a, tg_tensor *b, bool transpose_b)
{
    tg_tensor *t = tg_transpose(transpose_b ? b : a, -2, -1);
    tg_tensor *r = transpose_b ? tg_matmul(a, t) : tg_matmul(t, b);
    tg_release(t);
    return r;
}

/* vjp:  P as above, then
 *       dV = P^T dO
 *       dR = scale * P * (dP - sum(P * dP, -1)),  dP = dO V^T
 *       dQ = dR K,   dK = dR^T Q
 * A masked pair has P = 0, so dR = 0 there (and on a row of P = 0), as
 * the fast backward's; its derivatives are 0 there too (dR is P times
 * something, and P's own backward is P times something). */
int tg__attention_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    const bool need[3] = {tg__needs_grad(n, 0), tg__needs_grad(n, 1),
                          tg__needs_grad(n, 2)};
    if (!need[0] && !need[1] && !need[2])
        return 0;
    tg_tensor *p = probs(n);
    if (need[2])
        dx[2] = matmul_t(p, dy, false);
    tg_tensor *dr = NULL;
    if (need[0] || need[1]) {
        tg_tensor *dp = matmul_t(dy, n->in[2], true);
        tg_tensor *ds = tg__softmax_rule(p, dp, -1);
        dr = n->p[0] == 1 ? tg_retain(ds) : tg_scale(ds, n->p[0]);
        tg_release(dp);
        tg_release(ds);
    }
    if (need[0])
        dx[0] = tg_matmul(dr, n->in[1]);
    if (need[1])
        dx[1] = matmul_t(dr, n->in[0], false);
    tg_release(dr);
    tg_release(p);
    return tg__rule_done(dx, 3, need);
}

/* jvp, the product rule through R, P and O = P V:
 *       tR = tQ K^T + Q tK^T
 *       tP = scale * P * (tR - sum(P * tR, -1))
 *       tO = tP V + P tV
 * (tP is 0 at a masked pair and on a row of P = 0.) A NULL tangent is
 * zero: its terms are skipped. */
int tg__attention_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0] && !t[1] && !t[2])
        return 0;
    tg_tensor *p = probs(n), *tr = NULL, *to = NULL;
    bool ok = p != NULL;
    if (ok && t[0])
        ok = tg__rule_add(&tr, matmul_t(t[0], n->in[1], true));
    if (ok && t[1])
        ok = tg__rule_add(&tr, matmul_t(n->in[0], t[1], true));
    if (ok && tr) {
        tg_tensor *ts = tg__softmax_rule(p, tr, -1);
        tg_tensor *tp = n->p[0] == 1 ? tg_retain(ts) : tg_scale(ts, n->p[0]);
        ok = tg__rule_add(&to, tg_matmul(tp, n->in[2]));
        tg_release(ts);
        tg_release(tp);
    }
    if (ok && t[2])
        ok = tg__rule_add(&to, tg_matmul(p, t[2]));
    tg_release(tr);
    tg_release(p);
    if (!ok) {
        tg_release(to);
        return -1;
    }
    *ty = to;
    return 0;
}
