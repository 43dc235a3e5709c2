/* Fused attention: out = softmax(q @ k^T * scale + mask) @ v as one op, in
 * blocks of queries, so that the (Tq,Tk) scores are never held whole.
 *
 * q (...,Tq,d), k (...,Tk,d), v (...,Tk,dv) -> out (...,Tq,dv). The batch
 * dims (...) are identical (no broadcasting); each of their nb entries is one
 * attention problem on contiguous matrices (an input that is not contiguous
 * is copied once: O(T*d)). causal masks key j > query i, aligned at the start
 * (the lesson's tril(ones(Tq,Tk)), torch's is_causal): query i sees keys
 * 0..i, so every row keeps key 0 and none is entirely masked (with Tq == Tk,
 * every row keeps its diagonal). Tq != Tk is allowed either way.
 *
 * Forward, for a block of up to TILE queries Q_i against the kend keys they
 * see (all Tk, or causal: up to the block's last query):
 *     S   = Q_i K^T * scale, -inf where key > query        (TILE,kend)
 *     P   = exp(S - m), m the row's max;  l = rowsum P
 *     O_i = (P V) / l;  L = m + log l, the row's logsumexp  (TILE,dv)
 * with L kept for backward ((...,Tq) float64: O(T)). Causal: the keys past
 * a block's last query are never computed, so the masked upper triangle
 * costs nothing beyond the block's own triangle, whose entries exp(-inf)
 * gives weight 0 exactly. Each block is one product for S and one for O:
 * long ones, which the GEMM layer runs near its peak, where key tiles of
 * 64 (FlashAttention-2's online softmax) made many short ones that each
 * packed their operands (15% of the time went to packing at (16,1024,64);
 * by blocks the forward ran 5-23% and the backward 3-20% faster, four
 * interleaved runs, 1 thread).
 * The backward (above attention_backward) recomputes S and P per block.
 * P's exp is the vector exp of kernels/vmath.h (SLEEF, in the rows' type)
 * where the CPU has one, libm's otherwise.
 *
 * Memory: out and L, plus per thread a block's rows of S and, in the
 * backward, of dP: (TILE,Tk) each, O(T*dv + TILE*Tk), never O(Tq*Tk).
 *
 * Block products go to the GEMM layer (tg__gemm, kernels/gemm.h). Threads (the
 * library's pool, tg__parallel_for): the forward splits over (entry, query
 * block); the backward over entries only, because dK and dV sum over query
 * blocks: splitting one entry would need atomics or a second pass. Small
 * calls stay on one thread, and so do calls whose products OpenBLAS would
 * thread itself (configured --with-gemm=openblas). */
#include <config.h>

#include "ops/ops.h"

#include "kernels/gemm.h"
#include "kernels/vmath.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <tgmath.h> /* exp and log of a float are expf and logf */

enum { TILE = 64 }; /* queries per block */

/* Below this many multiply-adds (four entries of 64 queries and 64 keys at
 * d = dv = 64) a call runs on one thread: waking the others would cost
 * more. */
#define PARALLEL_MIN 2e6

static void attention_backward(tg_node *n, tg_tensor *dy);

/* The blocks, their products and their split among threads are fixed by
 * the shapes (each block's rows computed alone), so the recorded inputs
 * give the recorded bits again. */
static tg_tensor *attention_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_attention(in[0], in[1], in[2], n->ip[0] != 0, n->p[0]);
}

/* Parameters: p[0] the scale, ip[0] causal. Saved: L (...,Tq) float64.
 * Backward reads the output as n->out. The vjp and jvp, which recompute
 * the probabilities with public ops, are in ops/attention_rules.c. */
static const tg_op attention_op = {.name = "attention",
                                   .backward = attention_backward,
                                   .reads_out = true,
                                   .replay = attention_replay,
                                   .vjp = tg__attention_vjp,
                                   .jvp = tg__attention_jvp};

/* One call: nb entries of q (tq,d), k (tk,d), v (tk,dv), out (tq,dv) and
 * lse (tq, float64), each contiguous; entry b starts at b * rows * cols. */
typedef struct {
    tg_dtype dt;
    int64_t nb;
    int tq, tk, d, dv;
    bool causal;
    double scale;
    const void *q, *k, *v;
    void *out;
    double *lse;
    atomic_bool *failed; /* set when a piece ran out of memory */
} problem;

/* The gradients of one backward: dout (tq,dv) per entry, and dq, dk, dv
 * (zeroed, accumulated into), each NULL when not needed. */
typedef struct {
    const void *dout;
    void *dq, *dk, *dv;
} grads;

/* One piece's room (each piece of a parallel loop has its own): a query
 * block's rows of S, then P, and of dP (the backward's, when it needs dS),
 * each (min(TILE,tq),tk) of the problem's dtype with row stride tk; and
 * per row the forward's max m and sum l. */
typedef struct {
    void *P, *dP; /* dP: NULL in the forward */
    size_t bytes; /* of P, and of dP */
    double row_max[TILE];
    double row_sum[TILE];
} scratch;

static int min_int(int a, int b) { return a < b ? a : b; }

/* Element i of an array of the problem's dtype. */
static void *at(const problem *pr, const void *base, int64_t i)
{
    return (char *)base + (size_t)i * tg_dtype_size(pr->dt);
}

/* The first key no query of the block i0..i0+bq-1 sees (causal), or tk. */
static int key_end(const problem *pr, int i0, int bq)
{
    return pr->causal ? min_int(pr->tk, i0 + bq) : pr->tk;
}

/* Whether a call is worth sharing among the pool's threads. Not when gemm
 * would run the block products, up to TILE * tk * max(d, dv), on threads
 * outside the pool (OpenBLAS's): called from our threads, its threads and
 * ours would fight over the cores; the blocks then run in turn and gemm
 * threads each product. (Our own kernels, called from one of the pool's
 * threads, run on it alone.) */
static bool worth_threads(const problem *pr)
{
    if (tg__gemm_blas_threaded(TILE, pr->tk, pr->d > pr->dv ? pr->d : pr->dv))
        return false;
    return (double)pr->nb * pr->tq * pr->tk * (pr->d + pr->dv) >= PARALLEL_MIN;
}

/* The work to announce to tg__parallel_for: enough to share, or none. */
static int64_t pool_work(const problem *pr)
{
    return worth_threads(pr) ? TG_PARALLEL_MIN : 0;
}

/* Out of memory on one of the pool's threads (its rows, gemm's
 * workspace) cannot set the caller's error, which is per thread: the
 * products note it here, and the piece passes it on to the call's
 * problem.failed, which the caller reads after the loop. */
static _Thread_local bool rows_oom;

/* A piece's room, with dP when with_dp, from the storage pool, so that a
 * training step's calls reuse the last step's (no system allocation in a
 * steady step); NULL, or with P or dP NULL, when out of memory. */
static scratch *scratch_new(const problem *pr, bool with_dp)
{
    scratch *w = tg__pool_get(sizeof(scratch));
    if (!w)
        return NULL;
    w->bytes =
        (size_t)min_int(TILE, pr->tq) * (size_t)pr->tk * tg_dtype_size(pr->dt);
    if (!w->bytes)
        w->bytes = 1; /* no keys or queries: room for nothing, but a valid
                       * pointer */
    w->P = tg__pool_get(w->bytes);
    w->dP = with_dp ? tg__pool_get(w->bytes) : NULL;
    if (!w->P || (with_dp && !w->dP))
        rows_oom = true;
    return w;
}

/* A piece's end: when it ran out of memory (no room w, or a product
 * failed), says so in the call's flag. Frees w. */
static void end_piece(const problem *pr, scratch *w)
{
    if (!w || rows_oom)
        atomic_store(pr->failed, true);
    rows_oom = false;
    if (w) {
        tg__pool_put(w->P, w->bytes);
        tg__pool_put(w->dP, w->bytes);
    }
    tg__pool_put(w, sizeof(scratch));
}

/* ---- block products ----------------------------------------------------- */

/* c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, row-major, op(x)
 * being x^T when ta (tb). When gemm runs out of memory for its workspace,
 * notes it in rows_oom. */
static void gemm(tg_dtype dt, bool ta, bool tb, int m, int n, int k,
                 double alpha, const void *a, int lda, const void *b, int ldb,
                 double beta, void *c, int ldc)
{
    if (!tg__gemm(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        rows_oom = true;
}

/* S = Q_i K^T * scale over keys 0..kend-1, -inf where key c > query i0+r
 * when causal: queries i0..i0+bq-1 of entry b.            (bq,kend), ld tk
 * The scale is gemm's alpha (rounded to T, as tg_scale rounds it); only
 * the keys past the block's first query have entries to mask. */
static void scores_rows(const problem *pr, int64_t b, int i0, int bq, int kend,
                        void *S)
{
    const int64_t q0 = b * pr->tq + i0, k0 = b * pr->tk;
    gemm(pr->dt, false, true, bq, kend, pr->d, pr->scale,
         at(pr, pr->q, q0 * pr->d), pr->d, at(pr, pr->k, k0 * pr->d), pr->d, 0,
         S, pr->tk);
    if (!pr->causal || kend <= i0 + 1)
        return;
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) { /* keys past query i0+r */
            T *row = (T *)S + (int64_t)r * pr->tk;
            for (int c = i0 + r + 1; c < kend; c++)
                row[c] = (T)-INFINITY;
        }
    });
}

/* ---- forward ------------------------------------------------------------ */

/* Each row r < bq of S (n keys, ld tk) becomes P = exp(S - m_r), m_r the
 * row's max (NaN ignored), with m_r and l_r = sum P in w's rows; masked
 * entries give exp(-inf) = 0, and a row all -inf (m_r = -inf) is all 0. */
static void exp_rows(const problem *pr, scratch *w, int bq, int n)
{
    const bool vec = tg__vrows();
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            T *row = (T *)w->P + (int64_t)r * pr->tk;
            if (vec) { /* the same in the vector math of kernels/vmath.h, the
                        * sum in double lanes */
                tg__softmax_exp_row(pr->dt, n, row, &w->row_max[r],
                                    &w->row_sum[r]);
                continue;
            }
            double m = -INFINITY, sum = 0;
            for (int c = 0; c < n; c++)
                m = row[c] > m ? row[c] : m;
            /* m is a T value (or -inf, for a row with no key) */
            const T shift = m == -INFINITY ? 0 : (T)m;
            for (int c = 0; c < n; c++)
                sum += row[c] = exp(row[c] - shift);
            w->row_max[r] = m, w->row_sum[r] = sum;
        }
    });
}

/* O /= l and L = m + log l for the block's rows. l is 0 when a row weighs
 * no key (tk == 0, or every score -inf): O stays 0 and L is -inf. */
static void finish_rows(const problem *pr, const scratch *w, int bq, void *O,
                        double *L)
{
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            const double l = w->row_sum[r];
            const T inv = l > 0 ? (T)(1 / l) : 0;
            T *orow = (T *)O + (int64_t)r * pr->dv;
            TG_SIMD
            for (int c = 0; c < pr->dv; c++)
                orow[c] *= inv;
            L[r] = l > 0 ? w->row_max[r] + log(l) : -INFINITY;
        }
    });
}

/* Queries i0.. (up to TILE) of entry b: out rows and L. */
static void forward_block(const problem *pr, int64_t b, int i0, scratch *w)
{
    const int bq = min_int(TILE, pr->tq - i0), kend = key_end(pr, i0, bq);
    const int64_t q0 = b * pr->tq + i0;
    void *O = at(pr, pr->out, q0 * pr->dv);
    scores_rows(pr, b, i0, bq, kend, w->P);
    exp_rows(pr, w, bq, kend);
    /* O_i = P V                            (bq,kend) @ (kend,dv) -> (bq,dv) */
    gemm(pr->dt, false, false, bq, pr->dv, kend, 1, w->P, pr->tk,
         at(pr, pr->v, b * pr->tk * pr->dv), pr->dv, 0, O, pr->dv);
    finish_rows(pr, w, bq, O, pr->lse + q0);
}

/* (entry, query block) pairs lo..hi-1, numbered entry by entry. */
static void forward_range(void *ctx, int64_t lo, int64_t hi)
{
    const problem *pr = ctx;
    const int64_t nblocks = ((int64_t)pr->tq + TILE - 1) / TILE;
    scratch *w = scratch_new(pr, false);
    for (int64_t i = lo; w && !rows_oom && i < hi; i++)
        forward_block(pr, i / nblocks, (int)(i % nblocks) * TILE, w);
    end_piece(pr, w);
}

/* Every (entry, query block), spread over the threads. false when out of
 * memory (no error set). */
static bool forward(const problem *pr)
{
    const int64_t nblocks = ((int64_t)pr->tq + TILE - 1) / TILE;
    tg__parallel_for(pr->nb * nblocks, pool_work(pr), forward_range,
                     (void *)pr);
    return !atomic_load(pr->failed);
}

/* ---- backward ----------------------------------------------------------- */

/* S becomes P = exp(S - L) (masked entries: exp(-inf) = 0).  (bq,n), ld tk
 * A row with L = -inf weighed no key (every score -inf, as when q . k
 * overflows): its P is 0, as the forward's output row is, where
 * exp(-inf - -inf) would be NaN. */
static void probs_rows(const problem *pr, const double *L, int bq, int n,
                       void *S)
{
    const bool vec = tg__vrows();
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            T *row = (T *)S + (int64_t)r * pr->tk;
            if (L[r] == -INFINITY) {
                for (int c = 0; c < n; c++)
                    row[c] = 0;
            } else if (vec) { /* the same as kernels/vmath.h's vector math */
                TG_SIMD
                for (int c = 0; c < n; c++)
                    row[c] = (T)(row[c] - L[r]);
                tg__vmap(TG_VEXP, pr->dt, n, row, row);
            } else {
                for (int c = 0; c < n; c++)
                    row[c] = exp((T)(row[c] - L[r]));
            }
        }
    });
}

/* dP becomes dS = P * (dP - D), D_r = sum_c P_rc dP_rc, row by row.
 *                                                          (bq,n), ld tk
 * The vector path is the softmax backward row kernel of kernels/vmath.h (D in
 * double lanes, rounded to T once; dS in T lanes); the scalar one keeps D
 * in double, summed key by key. */
static void dscores_rows(const problem *pr, scratch *w, int bq, int n)
{
    const bool vec = tg__vrows();
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            const T *prow = (const T *)w->P + (int64_t)r * pr->tk;
            T *drow = (T *)w->dP + (int64_t)r * pr->tk;
            if (vec) {
                tg__softmax_backward_row(pr->dt, n, prow, drow, drow);
                continue;
            }
            double dot = 0;
            for (int c = 0; c < n; c++)
                dot += (double)prow[c] * drow[c];
            for (int c = 0; c < n; c++)
                drow[c] = prow[c] * (T)(drow[c] - dot);
        }
    });
}

/* Queries i0.. (bq of them) of entry b against the kend keys they see:
 * P recomputed from S and the saved L, then the five products of
 * attention_backward, each over the whole block of keys. */
static void backward_block(const problem *pr, const grads *g, int64_t b, int i0,
                           scratch *w)
{
    const int bq = min_int(TILE, pr->tq - i0), kend = key_end(pr, i0, bq);
    const int d = pr->d, dv = pr->dv, ld = pr->tk;
    const int64_t q0 = b * pr->tq + i0, k0 = b * pr->tk;
    const void *dO = at(pr, g->dout, q0 * dv);
    scores_rows(pr, b, i0, bq, kend, w->P);
    probs_rows(pr, pr->lse + q0, bq, kend, w->P);
    if (g->dv) /* dV += P^T dO_i                      (kend,bq) @ (bq,dv) */
        gemm(pr->dt, true, false, kend, dv, bq, 1, w->P, ld, dO, dv, 1,
             at(pr, g->dv, k0 * dv), dv);
    if (!g->dq && !g->dk)
        return;
    /* dP = dO_i V^T                                  (bq,dv) @ (dv,kend) */
    gemm(pr->dt, false, true, bq, kend, dv, 1, dO, dv, at(pr, pr->v, k0 * dv),
         dv, 0, w->dP, ld);
    dscores_rows(pr, w, bq, kend);
    if (g->dq) /* dQ_i += scale dS K                  (bq,kend) @ (kend,d) */
        gemm(pr->dt, false, false, bq, d, kend, pr->scale, w->dP, ld,
             at(pr, pr->k, k0 * d), d, 1, at(pr, g->dq, q0 * d), d);
    if (g->dk) /* dK += scale dS^T Q_i                (kend,bq) @ (bq,d) */
        gemm(pr->dt, true, false, kend, d, bq, pr->scale, w->dP, ld,
             at(pr, pr->q, q0 * d), d, 1, at(pr, g->dk, k0 * d), d);
}

typedef struct {
    const problem *pr;
    const grads *g;
} backward_job;

/* Entries lo..hi-1, query block by query block. */
static void backward_range(void *ctx, int64_t lo, int64_t hi)
{
    const backward_job *j = ctx;
    scratch *w = scratch_new(j->pr, j->g->dq || j->g->dk);
    for (int64_t b = lo; w && !rows_oom && b < hi; b++)
        for (int64_t i0 = 0; !rows_oom && i0 < j->pr->tq; i0 += TILE)
            backward_block(j->pr, j->g, b, (int)i0, w);
    end_piece(j->pr, w);
}

/* Every entry, spread over the threads. false when out of memory (no error
 * set). */
static bool backward(const problem *pr, const grads *g)
{
    tg__parallel_for(pr->nb, pool_work(pr), backward_range,
                     &(backward_job){pr, g});
    return !atomic_load(pr->failed);
}

/* ---- the op ------------------------------------------------------------- */

/* The address of t's element 0. */
static void *base(const tg_tensor *t)
{
    return (char *)t->storage->data +
           (size_t)t->offset * tg_dtype_size(t->dtype);
}

/* t when contiguous (retained), else a contiguous copy, off the tape; give
 * it back with tg__drop. NULL when the copy fails. */
static tg_tensor *dense(tg_tensor *t)
{
    return tg_is_contiguous(t) ? tg_retain(t) : tg__copy("attention", t);
}

/* The problem of q, k, v (checked) with the given contiguous data. */
static problem problem_of(const tg_tensor *q, const tg_tensor *k,
                          const tg_tensor *v, bool causal, double scale)
{
    const int nd = q->ndim;
    problem pr = {.dt = q->dtype, .nb = 1, .causal = causal, .scale = scale};
    for (int i = 0; i < nd - 2; i++)
        pr.nb *= q->shape[i];
    pr.tq = (int)q->shape[nd - 2], pr.d = (int)q->shape[nd - 1];
    pr.tk = (int)k->shape[nd - 2], pr.dv = (int)v->shape[nd - 1];
    return pr;
}

/* forward:  s_ij = scale q_i . k_j  (-inf for j > i when causal)
 *           p_ij = exp(s_ij - L_i),  L_i = log sum_j exp(s_ij)
 *           o_i  = sum_j p_ij v_j                       per entry: (Tq,dv)
 * backward: dv_j += sum_i p_ij do_i                      dV = P^T dO
 *           dp_ij = do_i . v_j                           dP = dO V^T
 *           softmax: ds_ij = p_ij (dp_ij - D_i), D_i = sum_k p_ik dp_ik.
 *             D_i equals do_i . o_i in exact arithmetic, but it is summed
 *             from the very p_ik and dp_ik the block holds, so that where
 *             a row is saturated (p_ij = 1, the rest 0) D_i is dp_ij itself
 *             and ds_ij is exactly 0, as it is in exact arithmetic; do_i .
 *             o_i, from the stored output, would keep dp_ij's rounding.
 *           dq_i += scale sum_j ds_ij k_j                dQ = scale dS K
 *           dk_j += scale sum_i ds_ij q_i                dK = scale dS^T Q
 *           A masked pair has p_ij = 0, so ds_ij = 0 and it adds nothing;
 *           the keys past a block's last query are skipped as in the
 *           forward. P is recomputed block by block from S and the saved L.
 *           dS = P * (dO V^T - D),  dQ = scale dS K,  dK = scale dS^T Q,
 *           dV = P^T dO */
static void attention_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *in[3], *dgrad[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        in[i] = dense(n->in[i]);
    tg_tensor *dout = dense(dy);
    bool ok = in[0] && in[1] && in[2] && dout;
    for (int i = 0; ok && i < 3; i++)
        if (tg__needs_grad(n, i))
            ok = (dgrad[i] = tg__new("attention", in[i]->dtype, in[i]->ndim,
                                     in[i]->shape, true)) != NULL;
    if (ok) {
        atomic_bool failed = false;
        problem pr = problem_of(in[0], in[1], in[2], n->ip[0] != 0, n->p[0]);
        pr.q = base(in[0]), pr.k = base(in[1]), pr.v = base(in[2]);
        pr.out = base(n->out);
        pr.lse = base(n->saved[0]);
        pr.failed = &failed;
        grads g = {.dout = base(dout)};
        g.dq = dgrad[0] ? base(dgrad[0]) : NULL;
        g.dk = dgrad[1] ? base(dgrad[1]) : NULL;
        g.dv = dgrad[2] ? base(dgrad[2]) : NULL;
        if (!(ok = backward(&pr, &g)))
            tg__error("attention: out of memory for the query blocks of q %s",
                      TG_SHP(in[0]));
    }
    /* Out of memory: a NULL gradient stops the walk (tg__accumulate). */
    for (int i = 0; i < 3; i++) {
        tg__accumulate(n, i, ok ? dgrad[i] : NULL);
        tg_release(dgrad[i]);
        tg__drop(in[i]);
    }
    tg__drop(dout);
}

/* false with an error naming the three shapes unless q (...,Tq,d),
 * k (...,Tk,d), v (...,Tk,dv) share their batch dims and float dtype. */
static bool check_args(const tg_tensor *q, const tg_tensor *k,
                       const tg_tensor *v, double scale)
{
    if (!tg__check_same_float("attention", q, k) ||
        !tg__check_same_float("attention", q, v))
        return false;
    const char *why = NULL;
    const int nd = q->ndim;
    if (nd < 2 || k->ndim != nd || v->ndim != nd)
        why = "expected q (...,Tq,d), k (...,Tk,d), v (...,Tk,dv) with the "
              "same number of dims, at least 2";
    else if (q->shape[nd - 1] != k->shape[nd - 1])
        why = "q and k differ in the last dim (d)";
    else if (k->shape[nd - 2] != v->shape[nd - 2])
        why = "k and v differ in the number of keys (dim -2)";
    for (int i = 0; !why && i < nd - 2; i++)
        if (k->shape[i] != q->shape[i] || v->shape[i] != q->shape[i])
            why = "the batch dims (all but the last two) differ";
    for (int i = nd - 2; !why && i < nd; i++)
        if (q->shape[i] > INT_MAX || k->shape[i] > INT_MAX ||
            v->shape[i] > INT_MAX)
            why = "a matrix dim is past INT_MAX";
    if (why) {
        tg__error("attention: q %s, k %s, v %s: %s", TG_SHP(q), TG_SHP(k),
                  TG_SHP(v), why);
        return false;
    }
    if (!isfinite(scale)) {
        tg__error("attention: scale must be finite, got %g", scale);
        return false;
    }
    return true;
}

/* Checks, runs the blocked forward on contiguous inputs, and records the entry
 * with L saved. */
tg_tensor *tg_attention(tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal,
                        double scale)
{
    if (!q || !k || !v || !check_args(q, k, v, scale))
        return NULL;
    const int nd = q->ndim;
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        shape[i] = q->shape[i];
    shape[nd - 1] = v->shape[nd - 1]; /* (...,Tq,dv) */
    tg_tensor *qc = dense(q), *kc = dense(k), *vc = dense(v);
    /* not zeroed: each block's O = P V overwrites its rows (beta 0) */
    tg_tensor *out = tg__new("attention", q->dtype, nd, shape, false);
    tg_tensor *lse = tg__new("attention", TG_FLOAT64, nd - 1, shape, false);
    bool ok = qc && kc && vc && out && lse;
    if (ok) {
        atomic_bool failed = false;
        problem pr = problem_of(q, k, v, causal, scale);
        pr.q = base(qc), pr.k = base(kc), pr.v = base(vc);
        pr.out = base(out), pr.lse = base(lse);
        pr.failed = &failed;
        if (!(ok = forward(&pr)))
            tg__error("attention: out of memory for the query blocks of q %s",
                      TG_SHP(q));
    }
    tg__drop(qc);
    tg__drop(kc);
    tg__drop(vc);
    if (!ok) {
        tg_release(out);
        tg_release(lse);
        return NULL;
    }
    out = tg__record(&attention_op, out, 3, (tg_tensor *[]){q, k, v});
    if (out && out->node) {
        out->node->p[0] = scale;
        out->node->ip[0] = causal;
        tg__save(out->node, lse);
    }
    tg_release(lse);
    return out;
}
