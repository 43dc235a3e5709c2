/* Fused attention: out = softmax(q @ k^T * scale + mask) @ v as one op, tiled
 * as FlashAttention-2 so the (Tq,Tk) scores are never held whole.
 *
 * q (...,Tq,d), k (...,Tk,d), v (...,Tk,dv) -> out (...,Tq,dv). The batch
 * dims (...) are identical (no broadcasting); each of their nb entries is one
 * attention problem on contiguous matrices (an input that is not contiguous
 * is copied once: O(T*d)). causal masks key j > query i, aligned at the start
 * (the lesson's tril(ones(Tq,Tk)), torch's is_causal): query i sees keys
 * 0..i, so every row keeps key 0 and none is entirely masked (with Tq == Tk,
 * every row keeps its diagonal). Tq != Tk is allowed either way.
 *
 * Forward, for a tile of up to TILE queries Q_i, over the key tiles K_j, V_j
 * with a running max m and sum l per row (the online softmax):
 *     S  = Q_i K_j^T * scale, -inf where key > query         (TILE,TILE)
 *     m' = max(m, rowmax S);  a = exp(m - m');  P = exp(S - m')
 *     l  = a l + rowsum P;    O_i = a O_i + P V_j            (TILE,dv)
 * then O_i /= l and L = m + log l, the row's logsumexp, kept for backward
 * ((...,Tq) float64: O(T)). Causal: key tiles right of the diagonal tile are
 * never visited, so the masked upper triangle costs nothing; only diagonal
 * tiles hold masked entries, and exp(-inf - m') gives them weight 0 exactly.
 * The backward (above attention_backward) recomputes S and P per tile.
 * P's exp is the vector exp of ops/vmath.h (SLEEF, in the tiles' type)
 * where the CPU has one, libm's otherwise.
 *
 * Memory: out and L, plus per thread two (TILE,TILE) tiles and two rows of
 * TILE: O(T*dv + tile^2), never O(Tq*Tk).
 *
 * Tile products go to the GEMM layer (tg__gemm, ops/gemm.h). Threads (the
 * library's pool, tg__parallel_for): the forward splits over (entry, query
 * tile); the backward over entries only, because dQ_i sums over key tiles
 * and dK_j, dV_j over query tiles: splitting one entry would need atomics or
 * a second pass. Small calls stay on one thread, and so do calls whose tile
 * products gemm threads itself (with OpenBLAS, head sizes past 64). */
#include <config.h>

#include "core/internal.h"

#include "ops/gemm.h"
#include "ops/vmath.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <tgmath.h> /* exp and log of a float are expf and logf */

enum { TILE = 64 }; /* queries and keys per tile */

/* Below this many multiply-adds (four 64-wide tile pairs at d = dv = 64) a
 * call runs on one thread: waking the others would cost more. */
#define PARALLEL_MIN 2e6

static void attention_backward(tg_node *n, tg_tensor *dy);

/* Parameters: p[0] the scale, ip[0] causal. Saved: L (...,Tq) float64.
 * Backward reads the output as n->out. */
static const tg_op attention_op = {
    .name = "attention", .backward = attention_backward, .reads_out = true};

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

/* One thread's tiles: room for TILE*TILE elements of either float type. */
typedef struct {
    double scores[TILE * TILE]; /* S, then P (forward) */
    double row_max[TILE];       /* m (forward) */
    double row_sum[TILE];       /* l (forward); D (backward) */
} scratch;

static int min_int(int a, int b) { return a < b ? a : b; }

/* Element i of an array of the problem's dtype. */
static void *at(const problem *pr, const void *base, int64_t i)
{
    return (char *)base + (size_t)i * tg_dtype_size(pr->dt);
}

/* The first key no query of the tile i0..i0+bq-1 sees (causal), or tk. */
static int key_end(const problem *pr, int i0, int bq)
{
    return pr->causal ? min_int(pr->tk, i0 + bq) : pr->tk;
}

/* Whether a call is worth sharing among the pool's threads. Not when gemm
 * threads the tile products, TILE * TILE * max(d, dv), itself: called from
 * our threads, its threads and ours would fight over the cores; the tiles
 * then run in turn and gemm threads each product. */
static bool worth_threads(const problem *pr)
{
    if (tg__gemm_threaded(TILE, TILE, pr->d > pr->dv ? pr->d : pr->dv))
        return false;
    return (double)pr->nb * pr->tq * pr->tk * (pr->d + pr->dv) >= PARALLEL_MIN;
}

/* The work to announce to tg__parallel_for: enough to share, or none. */
static int64_t pool_work(const problem *pr)
{
    return worth_threads(pr) ? TG_PARALLEL_MIN : 0;
}

/* Out of memory on one of the pool's threads (its tiles, gemm's
 * workspace) cannot set the caller's error, which is per thread: the tile
 * products note it here, and the piece passes it on to the call's
 * problem.failed, which the caller reads after the loop. */
static _Thread_local bool tiles_oom;

/* Tiles for one piece of a parallel loop (each piece has its own), from
 * the storage pool, so that a training step's calls reuse the last step's
 * (no system allocation in a steady step); NULL when out of memory. */
static scratch *scratch_new(void) { return tg__pool_get(sizeof(scratch)); }

/* ---- tile products ------------------------------------------------------ */

/* c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, row-major, op(x)
 * being x^T when ta (tb). When gemm runs out of memory for its workspace (at
 * most two 64x64 blocks), notes it in tiles_oom. */
static void gemm(tg_dtype dt, bool ta, bool tb, int m, int n, int k,
                 double alpha, const void *a, int lda, const void *b, int ldb,
                 double beta, void *c, int ldc)
{
    if (!tg__gemm(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        tiles_oom = true;
}

/* A piece's end: when it ran out of memory (no scratch w, or a tile
 * product failed), says so in the call's flag. Frees w. */
static void end_piece(const problem *pr, scratch *w)
{
    if (!w || tiles_oom)
        atomic_store(pr->failed, true);
    tiles_oom = false;
    tg__pool_put(w, sizeof(scratch));
}

/* S = Q_i K_j^T * scale, -inf where key j0+c > query i0+r when causal:
 * queries i0..i0+bq-1 and keys j0..j0+bk-1 of entry b.        (bq,bk), ld lds
 * The scale is gemm's alpha (rounded to T, as tg_scale rounds it); only a
 * tile reaching past the diagonal has entries to mask. */
static void scores_tile(const problem *pr, int64_t b, int i0, int j0, int bq,
                        int bk, void *S, int lds)
{
    const int64_t q0 = b * pr->tq + i0, k0 = b * pr->tk + j0;
    gemm(pr->dt, false, true, bq, bk, pr->d, pr->scale,
         at(pr, pr->q, q0 * pr->d), pr->d, at(pr, pr->k, k0 * pr->d), pr->d, 0,
         S, lds);
    if (!pr->causal || j0 + bk <= i0 + 1)
        return;
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) /* keys past query i0+r: c > i0+r-j0 */
            for (int c = i0 + r + 1 - j0 < 0 ? 0 : i0 + r + 1 - j0; c < bk; c++)
                ((T *)S)[(int64_t)r * lds + c] = (T)-INFINITY;
    });
}

/* ---- forward ------------------------------------------------------------ */

/* One key tile of the online softmax, rows r < bq: S (bq,bk) becomes
 * P = exp(S - m'), and m, l and the partial output O (bq,dv) are brought to
 * the new max m' (O_i and l scaled by a = exp(m - m')). */
static void online_softmax_tile(const problem *pr, scratch *w, int bq, int bk,
                                void *O)
{
    /* The scratch tiles are double arrays used as raw room for either
     * type: with T float they hold floats (never read as doubles). */
    const bool vec = tg__vrows();
    // cppcheck-suppress invalidPointerCast
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            T *row = (T *)w->scores + r * TILE, *orow = (T *)O + r * pr->dv;
            const double m = w->row_max[r];
            double m_new = m, sum = 0;
            if (vec) { /* the same in the vector math of ops/vmath.h, the
                        * sum in double lanes */
                tg__online_softmax_row(pr->dt, bk, row, &m_new, &sum);
            } else {
                for (int c = 0; c < bk; c++)
                    m_new = row[c] > m_new ? row[c] : m_new;
                /* m_new is a T value (or -inf, for a row masked so far) */
                const T shift = m_new == -INFINITY ? 0 : (T)m_new;
                for (int c = 0; c < bk; c++)
                    sum += row[c] = exp(row[c] - shift);
            }
            if (m_new != m) {
                const double a = exp(m - m_new);
                const T at = (T)a;
                w->row_sum[r] *= a;
                TG_SIMD
                for (int c = 0; c < pr->dv; c++)
                    orow[c] *= at;
            }
            w->row_sum[r] += sum;
            w->row_max[r] = m_new;
        }
    });
}

/* O /= l and L = m + log l for the tile's rows. l is 0 only when there are
 * no keys (tk == 0): O stays 0 and L is -inf. */
static void finish_rows(const problem *pr, const scratch *w, int bq, void *O,
                        double *L)
{
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            const double l = w->row_sum[r];
            const T inv = l > 0 ? (T)(1 / l) : 0;
            T *orow = (T *)O + r * pr->dv;
            TG_SIMD
            for (int c = 0; c < pr->dv; c++)
                orow[c] *= inv;
            L[r] = l > 0 ? w->row_max[r] + log(l) : -INFINITY;
        }
    });
}

/* Queries i0.. (up to TILE) of entry b: out rows and L. out starts zeroed. */
static void forward_tile(const problem *pr, int64_t b, int i0, scratch *w)
{
    const int bq = min_int(TILE, pr->tq - i0), kend = key_end(pr, i0, bq);
    const int64_t q0 = b * pr->tq + i0;
    void *O = at(pr, pr->out, q0 * pr->dv);
    for (int r = 0; r < bq; r++)
        w->row_max[r] = -INFINITY, w->row_sum[r] = 0;
    for (int j0 = 0; j0 < kend; j0 += TILE) {
        const int bk = min_int(TILE, kend - j0);
        scores_tile(pr, b, i0, j0, bq, bk, w->scores, TILE);
        online_softmax_tile(pr, w, bq, bk, O);
        /* O_i += P V_j                       (bq,bk) @ (bk,dv) -> (bq,dv) */
        gemm(pr->dt, false, false, bq, pr->dv, bk, 1, w->scores, TILE,
             at(pr, pr->v, (b * pr->tk + j0) * pr->dv), pr->dv, 1, O, pr->dv);
    }
    finish_rows(pr, w, bq, O, pr->lse + q0);
}

/* (entry, query tile) pairs lo..hi-1, numbered entry by entry. */
static void forward_range(void *ctx, int64_t lo, int64_t hi)
{
    const problem *pr = ctx;
    const int64_t ntiles = (pr->tq + TILE - 1) / TILE;
    scratch *w = scratch_new();
    for (int64_t i = lo; w && !tiles_oom && i < hi; i++)
        forward_tile(pr, i / ntiles, (int)(i % ntiles) * TILE, w);
    end_piece(pr, w);
}

/* Every (entry, query tile), spread over the threads. false when out of
 * memory (no error set). */
static bool forward(const problem *pr)
{
    const int64_t ntiles = (pr->tq + TILE - 1) / TILE;
    tg__parallel_for(pr->nb * ntiles, pool_work(pr), forward_range, (void *)pr);
    return !atomic_load(pr->failed);
}

/* ---- backward ----------------------------------------------------------- */

/* S becomes P = exp(S - L) (masked entries: exp(-inf) = 0).   (bq,bk), ld lds */
static void probs_tile(const problem *pr, const double *L, int bq, int bk,
                       void *S, int lds)
{
    const bool vec = tg__vrows();
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            T *row = (T *)S + (int64_t)r * lds;
            if (vec) { /* the same in the vector math of ops/vmath.h */
                TG_SIMD
                for (int c = 0; c < bk; c++)
                    row[c] = (T)(row[c] - L[r]);
                tg__vmap(TG_VEXP, pr->dt, bk, row, row);
            } else {
                for (int c = 0; c < bk; c++)
                    row[c] = exp((T)(row[c] - L[r]));
            }
        }
    });
}

/* D_r += sum_c P_rc dP_rc over one tile, in double, key by key. */
static void add_row_dots(const problem *pr, const void *P, const void *dP,
                         int bq, int bk, int ld, double *D)
{
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            const T *prow = (const T *)P + (int64_t)r * ld;
            const T *drow = (const T *)dP + (int64_t)r * ld;
            double dot = D[r];
            for (int c = 0; c < bk; c++)
                dot += (double)prow[c] * drow[c];
            D[r] = dot;
        }
    });
}

/* dP becomes dS = P * (dP - D), elementwise, D per row.       (bq,bk), ld ld */
static void dscores_tile(const problem *pr, const void *P, const double *D,
                         int bq, int bk, int ld, void *dP)
{
    TG_DISPATCH_FLOAT(pr->dt, T, {
        for (int r = 0; r < bq; r++) {
            const T *prow = (const T *)P + (int64_t)r * ld;
            T *drow = (T *)dP + (int64_t)r * ld;
            for (int c = 0; c < bk; c++)
                drow[c] = prow[c] * (T)(drow[c] - D[r]);
        }
    });
}

/* A query tile's rows of P and dP over every key it sees: (TILE, tk) each,
 * row stride tk, for one piece of the parallel loop. */
typedef struct {
    void *P, *dP;
} rows_scratch;

/* Queries i0.. (bq of them) of entry b against all their keys, in two
 * passes over the key tiles (see attention_backward): the first makes P
 * and dP and adds into dV (and, on the scalar path, into D); between the
 * passes the vector path turns each row of dP into dS whole; the second
 * (on the scalar path, turning dP into dS tile by tile) adds into dQ and
 * dK. */
static void backward_rows(const problem *pr, const grads *g, int64_t b, int i0,
                          int bq, int kend, scratch *w, const rows_scratch *rs)
{
    const int d = pr->d, dv = pr->dv, ld = pr->tk;
    const int64_t q0 = b * pr->tq + i0;
    const void *dO = at(pr, g->dout, q0 * dv);
    const bool need_ds = g->dq || g->dk, vec = tg__vrows();
    double *D = w->row_sum;
    for (int r = 0; r < bq; r++)
        D[r] = 0;
    for (int j0 = 0; j0 < kend; j0 += TILE) {
        const int bk = min_int(TILE, kend - j0);
        const int64_t k0 = b * pr->tk + j0;
        void *P = at(pr, rs->P, j0), *dP = at(pr, rs->dP, j0);
        scores_tile(pr, b, i0, j0, bq, bk, P, ld);
        probs_tile(pr, pr->lse + q0, bq, bk, P, ld);
        if (g->dv) /* dV_j += P^T dO_i              (bk,bq) @ (bq,dv) */
            gemm(pr->dt, true, false, bk, dv, bq, 1, P, ld, dO, dv, 1,
                 at(pr, g->dv, k0 * dv), dv);
        if (!need_ds)
            continue;
        /* dP = dO_i V_j^T                          (bq,dv) @ (dv,bk) */
        gemm(pr->dt, false, true, bq, bk, dv, 1, dO, dv, at(pr, pr->v, k0 * dv),
             dv, 0, dP, ld);
        if (!vec)
            add_row_dots(pr, P, dP, bq, bk, ld, D);
    }
    /* The vector path: each row's dS over all its keys at once, the
     * softmax backward row kernel of ops/vmath.h (D in double lanes,
     * rounded to T once; dS in T lanes), in place of dP. */
    for (int r = 0; need_ds && vec && r < bq; r++) {
        void *dp_row = at(pr, rs->dP, (int64_t)r * ld);
        tg__softmax_backward_row(pr->dt, kend, at(pr, rs->P, (int64_t)r * ld),
                                 dp_row, dp_row);
    }
    for (int j0 = 0; need_ds && j0 < kend; j0 += TILE) {
        const int bk = min_int(TILE, kend - j0);
        const int64_t k0 = b * pr->tk + j0;
        const void *P = at(pr, rs->P, j0);
        void *dS = at(pr, rs->dP, j0);
        if (!vec)
            dscores_tile(pr, P, D, bq, bk, ld, dS);
        if (g->dq) /* dQ_i += scale dS K_j          (bq,bk) @ (bk,d) */
            gemm(pr->dt, false, false, bq, d, bk, pr->scale, dS, ld,
                 at(pr, pr->k, k0 * d), d, 1, at(pr, g->dq, q0 * d), d);
        if (g->dk) /* dK_j += scale dS^T Q_i        (bk,bq) @ (bq,d) */
            gemm(pr->dt, true, false, bk, d, bq, pr->scale, dS, ld,
                 at(pr, pr->q, q0 * d), d, 1, at(pr, g->dk, k0 * d), d);
    }
}

/* Entry b, query tile by query tile. */
static void backward_entry(const problem *pr, const grads *g, int64_t b,
                           scratch *w, const rows_scratch *rs)
{
    for (int i0 = 0; i0 < pr->tq; i0 += TILE) {
        const int bq = min_int(TILE, pr->tq - i0);
        backward_rows(pr, g, b, i0, bq, key_end(pr, i0, bq), w, rs);
    }
}

typedef struct {
    const problem *pr;
    const grads *g;
} backward_job;

/* Entries lo..hi-1. */
static void backward_range(void *ctx, int64_t lo, int64_t hi)
{
    const backward_job *j = ctx;
    scratch *w = scratch_new();
    const size_t row_bytes =
        (size_t)TILE * (size_t)j->pr->tk * tg_dtype_size(j->pr->dt);
    const size_t rs_bytes = row_bytes ? row_bytes : 1;
    rows_scratch rs = {tg__pool_get(rs_bytes), tg__pool_get(rs_bytes)};
    if (!rs.P || !rs.dP)
        tiles_oom = true;
    for (int64_t b = lo; w && !tiles_oom && b < hi; b++)
        backward_entry(j->pr, j->g, b, w, &rs);
    tg__pool_put(rs.P, rs_bytes);
    tg__pool_put(rs.dP, rs_bytes);
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
 *             from the very p_ik and dp_ik the tiles hold, so that where a
 *             row is saturated (p_ij = 1, the rest 0) D_i is dp_ij itself
 *             and ds_ij is exactly 0, as it is in exact arithmetic; do_i .
 *             o_i, from the stored output, would keep dp_ij's rounding.
 *             So a query tile's rows of P and dP are kept over all its keys
 *             (TILE x Tk: O(T) memory, not O(T^2)) for a second pass.
 *           dq_i += scale sum_j ds_ij k_j                dQ = scale dS K
 *           dk_j += scale sum_i ds_ij q_i                dK = scale dS^T Q
 *           A masked pair has p_ij = 0, so ds_ij = 0 and it adds nothing;
 *           the tiles right of the diagonal are skipped as in the forward.
 *           P is recomputed tile by tile from S and the saved L.
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
            tg__error("attention: out of memory for the tiles of q %s",
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

/* Checks, runs the tiled forward on contiguous inputs, and records the entry
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
    tg_tensor *out = tg__new("attention", q->dtype, nd, shape, true);
    tg_tensor *lse = tg__new("attention", TG_FLOAT64, nd - 1, shape, false);
    bool ok = qc && kc && vc && out && lse;
    if (ok) {
        atomic_bool failed = false;
        problem pr = problem_of(q, k, v, causal, scale);
        pr.q = base(qc), pr.k = base(kc), pr.v = base(vc);
        pr.out = base(out), pr.lse = base(lse);
        pr.failed = &failed;
        if (!(ok = forward(&pr)))
            tg__error("attention: out of memory for the tiles of q %s",
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
