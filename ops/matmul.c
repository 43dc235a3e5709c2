/* Matmul: numpy.matmul, (...,n,k) @ (...,k,m) -> (...,n,m) with the batch
 * dims broadcast, as products of the GEMM layer (tg__gemm, kernels/gemm.h:
 * our packed micro-kernels on AVX2 and AVX-512, OpenBLAS below them when
 * configure found it, a portable blocked kernel otherwise).
 *
 * Each operand is read as a stack of strided matrices: its batch dims, then
 * (rows, cols) with their strides. A 1-D left operand is one row (1,k), a 1-D
 * right operand one column (k,1). The batch loop steps each operand by its own
 * batch strides, 0 along a dim it is broadcast over, so (T,T) @ (B,T,C) reads
 * the one (T,T) matrix B times and never materialises it.
 *
 * gemm reads a matrix in place when its elements along one dim are adjacent:
 * col stride 1 is a row-major matrix (lda = row stride); row stride 1, as in a
 * transposed view tg_transpose(k, -2, -1), is the row-major matrix of its
 * transpose, passed transposed (lda = col stride). Only a matrix with
 * neither stride 1 (e.g. tg_select of a last dim) or with a stride 0 inside
 * it (tg_expand of a row) is packed into a contiguous copy first: gemm has no
 * way to read it. */
#include <config.h>

#include "core/tape.h"

#include "kernels/gemm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One operand as a stack of matrices (batch..., rows, cols); strides in
 * elements. bshape/bstride point into the tensor's own shape and strides. */
typedef struct {
    int nbatch;
    const int64_t *bshape, *bstride;
    int64_t rows, cols, rs, cs;
} mats;

static mats as_mats(const tg_tensor *t, bool left)
{
    mats m = {.bshape = t->shape, .bstride = t->strides};
    if (t->ndim == 1) { /* (k): a row (1,k) left, a column (k,1) right */
        m.rows = left ? 1 : t->shape[0];
        m.cols = left ? t->shape[0] : 1;
        m.rs = left ? 0 : t->strides[0];
        m.cs = left ? t->strides[0] : 0;
        return m;
    }
    int nd = t->ndim;
    m.nbatch = nd - 2;
    m.rows = t->shape[nd - 2], m.cols = t->shape[nd - 1];
    m.rs = t->strides[nd - 2], m.cs = t->strides[nd - 1];
    return m;
}

/* The broadcast batch shape, and each operand's stride along it (0 where the
 * operand is missing the dim or has size 1). */
typedef struct {
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t astride[TG_MAX_DIMS], bstride[TG_MAX_DIMS];
    int64_t count; /* matrices in the batch */
} batch;

static bool broadcast_batch(const tg_tensor *a, const tg_tensor *b,
                            const mats *A, const mats *B, batch *bt)
{
    int nb = A->nbatch > B->nbatch ? A->nbatch : B->nbatch;
    bt->ndim = nb;
    bt->count = 1;
    for (int d = 0; d < nb; d++) {
        int ka = d - (nb - A->nbatch), kb = d - (nb - B->nbatch);
        int64_t na = ka < 0 ? 1 : A->bshape[ka];
        int64_t nbb = kb < 0 ? 1 : B->bshape[kb];
        if (na != nbb && na != 1 && nbb != 1) {
            tg__error("matmul: shapes %s and %s cannot be broadcast in the "
                      "batch dims (all but the last two): %lld != %lld",
                      TG_SHP(a), TG_SHP(b), (long long)na, (long long)nbb);
            return false;
        }
        bt->shape[d] = na == 1 ? nbb : na;
        bt->astride[d] = na == 1 ? 0 : A->bstride[ka];
        bt->bstride[d] = nbb == 1 ? 0 : B->bstride[kb];
    }
    /* The batch count, checked: 0 when a batch dim is empty, however large
     * the others, and 0 too when each product is empty (no rows of a or no
     * columns of b: the result holds nothing whatever the batch); an error
     * when it passes what a tensor can hold. */
    char out[TG_SHAPE_STR];
    if (A->rows == 0 || B->cols == 0)
        bt->count = 0;
    else if (!tg__count(nb, bt->shape, &bt->count)) {
        tg__error("matmul: shapes %s and %s broadcast to batch dims %s, more "
                  "elements than a tensor can hold",
                  TG_SHP(a), TG_SHP(b), tg__shape_str(nb, bt->shape, out));
        return false;
    }
    return true;
}

/* Element offsets of a's and b's matrices for batch entry i (C order). */
static void batch_offsets(const batch *bt, int64_t i, int64_t *oa, int64_t *ob)
{
    *oa = *ob = 0;
    for (int d = bt->ndim - 1; d >= 0; d--) {
        int64_t j = i % bt->shape[d];
        i /= bt->shape[d];
        *oa += j * bt->astride[d], *ob += j * bt->bstride[d];
    }
}

/* When every batch entry uses the same b matrix and a's batch dims step
 * evenly into its rows, the batch folds into a's rows: (B,T,C) @ (C,H) is one
 * (B*T,C) @ (C,H) product instead of B small ones. The output is contiguous,
 * so its rows fold the same way. */
static void fold_batch_into_rows(mats *A, batch *bt)
{
    int64_t span = A->rs * A->rows;
    if (span == 0)
        return; /* a stride-0 (broadcast) row: folding would pack every copy */
    for (int d = bt->ndim - 1; d >= 0; d--) {
        if (bt->shape[d] == 1)
            continue;
        if (bt->bstride[d] != 0 || bt->astride[d] != span)
            return;
        span *= bt->shape[d];
    }
    A->rows *= bt->count;
    bt->ndim = 0;
    bt->count = 1;
}

/* ---- the products: C (n,m) = A (n,k) @ B (k,m), C contiguous ----------- */

/* How gemm reads one operand: in place (row-major or transposed), or packed
 * into a contiguous scratch matrix when neither layout fits. */
typedef struct {
    bool trans;
    int64_t ld;
    void *packed; /* rows*cols scratch elements, or NULL when read in place */
    const void *packed_from; /* the matrix in packed (reused if broadcast) */
} gemm_arg;

static bool gemm_arg_init(gemm_arg *arg, const mats *M, tg_dtype dt)
{
    arg->packed = NULL;
    arg->packed_from = NULL;
    if ((M->cols == 1 || M->cs == 1) && (M->rows == 1 || M->rs >= M->cols)) {
        arg->trans = false; /* row i at i*rs, its elements adjacent */
        arg->ld = M->rows == 1 ? M->cols : M->rs;
    } else if ((M->rows == 1 || M->rs == 1) &&
               (M->cols == 1 || M->cs >= M->rows)) {
        arg->trans = true; /* column j at j*cs, its elements adjacent */
        arg->ld = M->cols == 1 ? M->rows : M->cs;
    } else {
        arg->trans = false;
        arg->ld = M->cols;
        arg->packed =
            tg__malloc((size_t)(M->rows * M->cols) * tg_dtype_size(dt));
        return arg->packed != NULL;
    }
    return true;
}

/* The matrix at p as gemm reads it: p itself, or its packed copy. */
static const void *gemm_arg_data(gemm_arg *arg, const mats *M, tg_dtype dt,
                                 const void *p)
{
    if (!arg->packed || arg->packed_from == p)
        return arg->packed ? arg->packed : p;
    arg->packed_from = p;
    TG_DISPATCH_FLOAT(dt, T, {
        const T *src = p;
        T *dst = arg->packed;
        for (int64_t i = 0; i < M->rows; i++)
            for (int64_t j = 0; j < M->cols; j++)
                dst[i * M->cols + j] = src[i * M->rs + j * M->cs];
    });
    return arg->packed;
}

/* One call's batch: entry i's product C_i = A_i @ B_i. */
typedef struct {
    tg_dtype dt;
    const mats *A, *B;
    const char *a, *b;
    char *c;
    double beta; /* 0: c = a @ b; 1: c += a @ b */
    const batch *bt;
    atomic_bool failed; /* a piece ran out of memory */
} multiply_job;

/* Entries lo..hi-1, one gemm each, with their own packing scratch (each
 * piece of a parallel loop its own). */
static void multiply_range(void *ctx, int64_t lo, int64_t hi)
{
    multiply_job *j = ctx;
    const tg_dtype dt = j->dt;
    const int64_t n = j->A->rows, k = j->A->cols, m = j->B->cols;
    gemm_arg ea, eb;
    if (!gemm_arg_init(&ea, j->A, dt)) {
        atomic_store(&j->failed, true);
        return;
    }
    if (!gemm_arg_init(&eb, j->B, dt)) {
        free(ea.packed);
        atomic_store(&j->failed, true);
        return;
    }
    size_t es = tg_dtype_size(dt);
    bool ok = true;
    for (int64_t i = lo; ok && i < hi; i++) {
        int64_t oa, ob;
        batch_offsets(j->bt, i, &oa, &ob);
        const void *pa = gemm_arg_data(&ea, j->A, dt, j->a + (size_t)oa * es);
        const void *pb = gemm_arg_data(&eb, j->B, dt, j->b + (size_t)ob * es);
        void *pc = j->c + (size_t)(i * n * m) * es;
        ok = tg__gemm(dt, ea.trans, eb.trans, n, m, k, 1, pa, ea.ld, pb, eb.ld,
                      j->beta, pc, m);
    }
    if (!ok)
        atomic_store(&j->failed, true);
    free(ea.packed);
    free(eb.packed);
}

/* Every batch entry's product, one gemm each. A batch of several entries
 * shares them among the pool's threads, each product whole on one thread
 * (gemm called from a piece runs there alone): attn @ v at (32,128,128,32)
 * is 32 products of 5e5 multiply-adds, too small for gemm to thread, and
 * q @ k^T at (32,256,64) 32 of 4.2e6, each of which gemm would split in
 * two, waking the pool 32 times. Large products in a short batch (fewer
 * than 4 per thread, where whole products would leave a thread idle) are
 * left to gemm to split; so are products OpenBLAS would thread itself
 * (its threads and ours would fight). Each product is the same sums
 * whichever thread runs it: the same bits. false when out of memory. */
static bool multiply(tg_dtype dt, const mats *A, const char *a, const mats *B,
                     const char *b, char *c, double beta, const batch *bt)
{
    const int64_t n = A->rows, k = A->cols, m = B->cols;
    multiply_job j = {.dt = dt,
                      .A = A,
                      .B = B,
                      .a = a,
                      .b = b,
                      .c = c,
                      .beta = beta,
                      .bt = bt};
    atomic_init(&j.failed, false);
    const double each = (double)n * (double)m * (double)k;
    const int threads = tg__parallel_threads(bt->count, TG_PARALLEL_MIN);
    const bool share =
        bt->count > 1 && each * (double)bt->count >= TG_GEMM_THREADED_MIN &&
        (each < TG_GEMM_THREADED_MIN || bt->count >= 4 * threads) &&
        !tg__gemm_blas_threaded(n, m, k);
    tg__parallel_for(bt->count, share ? TG_PARALLEL_MIN : 0, multiply_range,
                     &j);
    return !atomic_load(&j.failed);
}

/* ---- the op ------------------------------------------------------------- */

/* out = a @ b (beta 0: whatever out held) or out += a @ b (beta 1) into
 * the contiguous out. false with an error. */
static bool compute(tg_tensor *out, const tg_tensor *a, const tg_tensor *b,
                    mats A, mats B, batch bt, double beta)
{
    size_t es = tg_dtype_size(a->dtype);
    char *pc = (char *)out->storage->data + (size_t)out->offset * es;
    if (bt.count == 0 || A.rows == 0 || B.cols == 0)
        return true;   /* no elements */
    if (A.cols == 0) { /* k == 0 sums nothing: zeros, or nothing added */
        if (beta == 0)
            memset(pc, 0, (size_t)tg_numel(out) * es);
        return true;
    }
    fold_batch_into_rows(&A, &bt);
    const char *pa = (const char *)a->storage->data + (size_t)a->offset * es;
    const char *pb = (const char *)b->storage->data + (size_t)b->offset * es;
    if (!multiply(a->dtype, &A, pa, &B, pb, pc, beta, &bt)) {
        tg__error("matmul: out of memory for %s @ %s", TG_SHP(a), TG_SHP(b));
        return false;
    }
    return true;
}

/* a @ b's operands as matrix stacks, its batch and its shape (batch...,
 * n, m, without the dims of 1-D operands) in shape[*nd]; false with an
 * error for operands that do not multiply. */
static bool plan(const tg_tensor *a, const tg_tensor *b, mats *A, mats *B,
                 batch *bt, int64_t *shape, int *nd)
{
    if (!tg__check_same_float("matmul", a, b))
        return false;
    if (a->ndim == 0 || b->ndim == 0) {
        tg__error("matmul: shapes %s and %s: a 0-d operand has no matrix dims "
                  "(scale with tg_mul or tg_scale)",
                  TG_SHP(a), TG_SHP(b));
        return false;
    }
    *A = as_mats(a, true), *B = as_mats(b, false);
    if (A->cols != B->rows) {
        tg__error("matmul: shapes %s and %s are not aligned: %lld != %lld",
                  TG_SHP(a), TG_SHP(b), (long long)A->cols, (long long)B->rows);
        return false;
    }
    if (!broadcast_batch(a, b, A, B, bt))
        return false;
    *nd = bt->ndim;
    for (int d = 0; d < bt->ndim; d++)
        shape[d] = bt->shape[d];
    if (a->ndim > 1)
        shape[(*nd)++] = A->rows;
    if (b->ndim > 1)
        shape[(*nd)++] = B->cols;
    return true;
}

/* grad += a @ b in place, into input i's gradient when the walk lends it
 * (tg__grad_into) and it has exactly a @ b's shape: one GEMM with beta = 1
 * instead of a product into a new tensor and tg__accumulate's pass adding
 * it (h = ln(x) feeding the q, k and v of every head takes 3 * heads
 * contributions a step). Within one k block of the GEMM (k up to the
 * k_one of the kernel kernels/gemm.c picks for the product: 512 on AVX2, 1024
 * on AVX-512; any k on the portable kernel) each element gets grad + the
 * product's sum in one rounding, the bits the add gave; past it the
 * gradient joins the sum at the first block, a different rounding (and
 * OpenBLAS, when it runs the products, promises no order either way).
 * false when it does not apply (nothing written; a or b NULL included);
 * on failure (out of memory, with some products maybe added) it stops the
 * walk, which drops or restores the gradient, and returns true. */
static bool add_product_to_grad(tg_node *n, int i, const tg_tensor *a,
                                const tg_tensor *b)
{
    tg_tensor *g = a && b ? tg__grad_into(n, i) : NULL;
    if (!g || g->storage == a->storage || g->storage == b->storage)
        return false;
    mats A, B;
    batch bt;
    int64_t shape[TG_MAX_DIMS];
    int nd;
    if (!plan(a, b, &A, &B, &bt, shape, &nd) || nd != g->ndim ||
        memcmp(shape, g->shape, sizeof(int64_t) * (size_t)nd) != 0)
        return false;
    if (!compute(g, a, b, A, B, bt, 1))
        tg__accumulate(n, i, NULL);
    return true;
}

/* forward:  y[..., i, j] = sum_p a[..., i, p] * b[..., p, j]
 *           (...,n,k) @ (...,k,m) -> (...,n,m)
 * backward: da[..., i, p] += sum_j dy[..., i, j] * b[..., p, j]   da = dy @ b^T
 *           db[..., p, j] += sum_i a[..., i, p] * dy[..., i, j]   db = a^T @ dy
 * A 1-D a is the row (1,k) and a 1-D b the column (k,1): a, b and dy get the
 * dims the forward dropped back as size 1, so da (...,1,k) lines up with (k)
 * as it is, and db (...,k,1) loses its column dim again to line up with (k).
 * da and db come out at the broadcast batch shape; where a or b was broadcast
 * along a batch dim, one element fed every entry of it, so its gradient is
 * the sum over that dim, which tg__accumulate takes. */
static void matmul_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *a = tg_retain(n->in[0]), *b = tg_retain(n->in[1]);
    tg_tensor *dY = tg_retain(dy);
    bool a_row = a->ndim == 1, b_col = b->ndim == 1;
    if (b_col) { /* dy (...,n) -> (...,n,1); b (k) -> (k,1) */
        dY = tg__then(dY, tg_unsqueeze(dY, tg_ndim(dY)));
        b = tg__then(b, tg_unsqueeze(b, 1));
    }
    if (a_row) { /* dy (...,m) -> (...,1,m); a (k) -> (1,k) */
        dY = tg__then(dY, tg_unsqueeze(dY, tg_ndim(dY) - 1));
        a = tg__then(a, tg_unsqueeze(a, 0));
    }
    if (!a || !b || !dY) { /* a view ran out of memory */
        tg__accumulate(n, 0, NULL);
        tg__accumulate(n, 1, NULL);
    }
    if (a && b && dY && tg__needs_grad(n, 0)) {
        tg_tensor *bT = tg_transpose(b, -2, -1); /* (...,m,k), a view */
        if (!add_product_to_grad(n, 0, dY, bT)) {
            tg_tensor *da = tg_matmul(dY, bT); /* (...,n,k) */
            tg__accumulate(n, 0, da);
            tg_release(da);
        }
        tg_release(bT);
    }
    if (a && b && dY && tg__needs_grad(n, 1)) {
        if (b->ndim == 2 && a->ndim > 2) {
            /* b is one matrix every batch entry shares (x @ W): its
             * gradient, the sum over the batch of a_i^T @ dy_i, is one
             * product over all the batch's rows, not B small ones:
             *   db = reshape(a, (-1,k))^T @ reshape(dy, (-1,m)) */
            a = tg__then(a,
                         tg_reshape(a, 2, (const int64_t[]){-1, b->shape[0]}));
            dY = tg__then(
                dY, tg_reshape(dY, 2, (const int64_t[]){-1, b->shape[1]}));
        }
        tg_tensor *aT = tg_transpose(a, -2, -1); /* (...,k,n), a view */
        if (b_col || !add_product_to_grad(n, 1, aT, dY)) {
            tg_tensor *db = tg_matmul(aT, dY); /* (...,k,m) */
            if (b_col)
                db =
                    tg__then(db, tg_squeeze(db, tg_ndim(db) - 1)); /* (...,k) */
            tg__accumulate(n, 1, db);
            tg_release(db);
        }
        tg_release(aT);
    }
    tg_release(dY);
    tg_release(a);
    tg_release(b);
}
/* The same inputs take the same path (GEMM kernel, packing, blocks), so a
 * replay on the recorded tensors gives the recorded bits. */
static tg_tensor *matmul_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return tg_matmul(in[0], in[1]);
}

/* a and b as the products of the rules read them: a 1-D a as the row
 * (1,k), a 1-D b as the column (k,1) (new references; NULL with the
 * error when a view runs out of memory). */
static bool as_matrices(const tg_node *n, tg_tensor **a, tg_tensor **b)
{
    *a = n->in[0]->ndim == 1 ? tg_unsqueeze(n->in[0], 0) : tg_retain(n->in[0]);
    *b = n->in[1]->ndim == 1 ? tg_unsqueeze(n->in[1], 1) : tg_retain(n->in[1]);
    if (*a && *b)
        return true;
    tg_release(*a);
    tg_release(*b);
    *a = *b = NULL;
    return false;
}

/* vjp: da = dy @ b^T (...,n,k)    db = a^T @ dy (...,k,m)
 *      as the backward, with a 1-D a the row (1,k) and a 1-D b the column
 *      (k,1), dy given back the dims the forward dropped, and da's row dim
 *      or db's column dim dropped again: da (...,k) and db (...,k) then.
 *      Both at the broadcast batch shape (the walk sums them down to a's
 *      and b's); b one matrix under a batched a (x @ W) gets the batch
 *      summed by the product itself:
 *        db = reshape(a, (-1,k))^T @ reshape(dy, (-1,m)) */
static int matmul_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    const bool a_row = n->in[0]->ndim == 1, b_col = n->in[1]->ndim == 1;
    tg_tensor *a, *b, *dY = tg_retain(dy);
    dx[0] = dx[1] = NULL;
    if (!as_matrices(n, &a, &b)) {
        tg_release(dY);
        return -1;
    }
    if (b_col) /* dy (...,n) -> (...,n,1) */
        dY = tg__then(dY, tg_unsqueeze(dY, tg_ndim(dY)));
    if (a_row) /* dy (...,m) -> (...,1,m) */
        dY = tg__then(dY, tg_unsqueeze(dY, tg_ndim(dY) - 1));
    bool ok = dY != NULL;
    if (ok && tg__needs_grad(n, 0)) {
        tg_tensor *bT = tg_transpose(b, -2, -1);
        dx[0] = tg_matmul(dY, bT);
        if (a_row) /* (...,1,k) -> (...,k) */
            dx[0] = tg__then(dx[0], tg_squeeze(dx[0], -2));
        ok = dx[0] != NULL;
        tg_release(bT);
    }
    if (ok && tg__needs_grad(n, 1)) {
        if (b->ndim == 2 && a->ndim > 2) {
            /* the rows counted, not inferred: with k == 0 a -1 could be
             * anything */
            int64_t rows = 1;
            for (int i = 0; i < a->ndim - 1; i++)
                rows *= a->shape[i];
            const int64_t k = b->shape[0], m = b->shape[1];
            a = tg__then(a, tg_reshape(a, 2, (const int64_t[]){rows, k}));
            dY = tg__then(dY, tg_reshape(dY, 2, (const int64_t[]){rows, m}));
        }
        tg_tensor *aT = tg_transpose(a, -2, -1);
        dx[1] = tg_matmul(aT, dY);
        if (b_col) /* (...,k,1) -> (...,k) */
            dx[1] = tg__then(dx[1], tg_squeeze(dx[1], -1));
        ok = dx[1] != NULL;
        tg_release(aT);
    }
    tg_release(dY);
    tg_release(a);
    tg_release(b);
    if (ok)
        return 0;
    tg_release(dx[0]);
    tg_release(dx[1]);
    dx[0] = dx[1] = NULL;
    return -1;
}

/* jvp: ty = ta @ b + a @ tb   (the product rule; a NULL tangent adds
 *      nothing) */
static int matmul_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    tg_tensor *l = t[0] ? tg_matmul(t[0], n->in[1]) : NULL;
    tg_tensor *r = t[1] ? tg_matmul(n->in[0], t[1]) : NULL;
    if ((t[0] && !l) || (t[1] && !r)) {
        tg_release(l);
        tg_release(r);
        return -1;
    }
    *ty = l && r ? tg_add(l, r) : tg_retain(l ? l : r);
    tg_release(l);
    tg_release(r);
    return *ty || (!t[0] && !t[1]) ? 0 : -1;
}

static const tg_op matmul_op = {.name = "matmul",
                                .backward = matmul_backward,
                                .replay = matmul_replay,
                                .vjp = matmul_vjp,
                                .jvp = matmul_jvp};

tg_tensor *tg_matmul(tg_tensor *a, tg_tensor *b)
{
    if (!a || !b)
        return NULL;
    mats A, B;
    batch bt;
    int64_t shape[TG_MAX_DIMS];
    int nd;
    if (!plan(a, b, &A, &B, &bt, shape, &nd))
        return NULL;
    tg_tensor *out = tg__new("matmul", a->dtype, nd, shape, false);
    if (!out)
        return NULL;
    if (!compute(out, a, b, A, B, bt, 0)) {
        tg_release(out);
        return NULL;
    }
    return tg__record(&matmul_op, out, 2, (tg_tensor *[]){a, b});
}
