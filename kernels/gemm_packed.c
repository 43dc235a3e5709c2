/* The driver of the packed micro-kernels (kernels/gemm_kernels.h), in the
 * GotoBLAS / BLIS loop order, for one (mc x nc) block of c at a time:
 *
 *     for j0 in 0, nc, 2nc, ...
 *       for p0 in 0, kc, 2kc, ...        (in order: c's sums run along k;
 *                                         one block when k <= k_one)
 *         Bp = op(b)[p0:p0+kc, j0:j0+nc] packed in nr-column slivers
 *         for i0 in 0, mc, 2mc, ...
 *             Ap = op(a)[i0:i0+mc, p0:p0+kc] packed in mr-row panels
 *             for jr (slivers of Bp), for ir (panels of Ap):
 *                 c tile (mr,nr) = alpha * Ap_ir @ Bp_jr + beta' * c tile
 *
 * with beta' = beta for the first k block and 1 after. Packing reads a and
 * b in whichever layout they are stored, so the kernel sees the same panels
 * for every transpose; panels past m or n are padded with zeros, and an
 * edge tile is run on a scratch tile and copied out, so each element of c
 * goes through the same arithmetic wherever it lies. A kernel may bring
 * its own packers (tg__gemm_ukernel's pack_a, pack_b: the same copies in
 * vector registers); pack_a and pack_b below are the portable ones.
 *
 * Threads: c is cut in one rectangle per thread (along n first, so each
 * packs only its share of b), run on tg__parallel_for's threads; never the
 * k loop, so the result does not depend on how many
 * there are. A worker that calls in runs alone (the pool takes one job at
 * a time), which keeps attention's per-tile products on their thread. */
#include <config.h>

#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
static int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

/* ---- packing buffers, kept between calls ---------------------------------- */

/* A few buffers taken and given back by the threads that run products, so
 * a product allocates nothing once they have grown to its blocks. A thread
 * that finds all taken (more threads than slots) allocates its own for the
 * call. The kept ones are reachable from here until exit. */
enum { N_SLOTS = 8 };
static struct {
    atomic_bool taken;
    void *mem;
    size_t size;
} slots[N_SLOTS];

/* A buffer of at least size bytes, 64-byte aligned, and its slot in *slot
 * (-1 for one of its own); NULL when out of memory. */
static void *take_buffer(size_t size, int *slot)
{
    for (int s = 0; s < N_SLOTS; s++) {
        bool expected = false;
        if (!atomic_compare_exchange_strong_explicit(&slots[s].taken, &expected,
                                                     true, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        if (slots[s].size < size) {
            void *mem;
            if (tg__posix_memalign(&mem, 64, size) != 0) {
                atomic_store_explicit(&slots[s].taken, false,
                                      memory_order_release);
                return NULL;
            }
            free(slots[s].mem);
            slots[s].mem = mem, slots[s].size = size;
        }
        *slot = s;
        return slots[s].mem;
    }
    void *mem;
    *slot = -1;
    return tg__posix_memalign(&mem, 64, size) == 0 ? mem : NULL;
}

static void give_back(void *mem, int slot)
{
    if (slot < 0)
        free(mem);
    else
        atomic_store_explicit(&slots[slot].taken, false, memory_order_release);
}

/* ---- packing ---------------------------------------------------------------- */

/* Ap = op(a)[i0:i0+mb, p0:p0+kb] in mr-row panels: panel r holds
 * Ap[r][p*mr + i] = op(a)(i0 + r*mr + i, p0 + p), zero past row mb.
 * op(a)(i,p) is a[i*lda + p], or a[p*lda + i] when transposed. Storage is
 * read row by row either way (a column walk over rows a page apart misses
 * the TLB and one cache set at every step). */
static void pack_a(const tg__gemm_product *g, int mr, int64_t i0, int64_t mb,
                   int64_t p0, int64_t kb, void *ap)
{
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T *a = g->a;
        T *dst = ap;
        if (g->ta) {
            /* storage row p0+p is column p of op(a): every panel's p-th */
            for (int64_t p = 0; p < kb; p++) {
                const T *src = a + (p0 + p) * g->lda + i0;
                for (int64_t r = 0; r < mb; r += mr) {
                    const int64_t rows = min64(mr, mb - r);
                    T *d = dst + r * kb + p * mr;
                    for (int64_t i = 0; i < rows; i++)
                        d[i] = src[r + i];
                    for (int64_t i = rows; i < mr; i++)
                        d[i] = 0;
                }
            }
            return;
        }
        for (int64_t r = 0; r < mb; r += mr, dst += mr * kb) {
            const int64_t rows = min64(mr, mb - r);
            const T *src = a + (i0 + r) * g->lda + p0;
            for (int64_t p = 0; p < kb; p++) {
                for (int64_t i = 0; i < rows; i++)
                    dst[p * mr + i] = src[i * g->lda + p];
                for (int64_t i = rows; i < mr; i++)
                    dst[p * mr + i] = 0;
            }
        }
    });
}

/* pack_a by uk's own packer when it has one */
static void pack_a_of(const tg__gemm_ukernel *uk, const tg__gemm_product *g,
                      int64_t i0, int64_t mb, int64_t p0, int64_t kb, void *ap)
{
    if (uk->pack_a)
        uk->pack_a(g, i0, mb, p0, kb, ap);
    else
        pack_a(g, uk->mr, i0, mb, p0, kb, ap);
}

enum { PACK_B_SLIVERS = 4 };

/* Bp = op(b)[p0:p0+kb, j0:j0+nb] in nr-column slivers: sliver s holds
 * Bp[s][p*nr + j] = op(b)(p0 + p, j0 + s*nr + j), zero past column nb.
 * op(b)(p,j) is b[p*ldb + j], or b[j*ldb + p] when transposed; read row by
 * row of storage, as pack_a. */
static void pack_b(const tg__gemm_product *g, int nr, int64_t p0, int64_t kb,
                   int64_t j0, int64_t nb, void *bp)
{
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T *b = g->b;
        T *dst = bp;
        if (!g->tb) {
            /* PACK_B_SLIVERS slivers at a time: their rows written side by
             * side, a few streams, for a few lines of each row read */
            for (int64_t s0 = 0; s0 < nb; s0 += PACK_B_SLIVERS * nr) {
                const int64_t s_end = min64(nb, s0 + PACK_B_SLIVERS * nr);
                for (int64_t p = 0; p < kb; p++) {
                    const T *src = b + (p0 + p) * g->ldb + j0;
                    for (int64_t s = s0; s < s_end; s += nr) {
                        const int64_t cols = min64(nr, nb - s);
                        T *d = dst + s * kb + p * nr;
                        for (int64_t j = 0; j < cols; j++)
                            d[j] = src[s + j];
                        for (int64_t j = cols; j < nr; j++)
                            d[j] = 0;
                    }
                }
            }
            return;
        }
        for (int64_t s = 0; s < nb; s += nr, dst += nr * kb) {
            const int64_t cols = min64(nr, nb - s);
            for (int64_t j = 0; j < nr; j++) {
                const T *src = b + (j0 + s + j) * g->ldb + p0;
                for (int64_t p = 0; p < kb; p++)
                    dst[p * nr + j] = j < cols ? src[p] : 0;
            }
        }
    });
}

/* ---- the blocks ------------------------------------------------------------- */

/* Where the micro-kernel reads the a panel of rows i0.. (mr of them), k
 * from p0: packed at ap when packed, else in place, full panels only. */
typedef struct {
    const char *base;
    int64_t rs, cs;
} a_panel;

/* A tile of rows < mr (the block's last panel, cut by m) with uk's
 * run_rows kernels, 4, 2 and 1 rows at a time, a's rows from pa (packed or
 * in place), onto ct (ldc apart): c itself, or the scratch tile. */
static void run_cut_rows(const tg__gemm_ukernel *uk, const tg__gemm_product *g,
                         int64_t rows, int64_t kb, a_panel pa,
                         const char *b_sliver, double beta, char *ct,
                         int64_t ldc)
{
    const size_t es = tg_dtype_size(g->dt);
    for (int64_t done = 0; done < rows;) {
        const int h = rows - done >= 4 ? 4 : rows - done >= 2 ? 2 : 1;
        uk->run_rows[h == 4   ? 0
                     : h == 2 ? 1
                              : 2](kb, pa.base + (size_t)(done * pa.rs) * es,
                                   pa.rs, pa.cs, b_sliver, g->alpha, beta,
                                   ct + (size_t)(done * ldc) * es, ldc);
        done += h;
    }
}

/* One block: c (mb,nb) at c = alpha * op(a)[i0:, p0:] @ Bp + beta * c.
 * With a_packed, a's panels are in ap; else full panels are read in place,
 * and so is the last, cut by the edge, when uk has run_rows kernels (else
 * it was packed, to ap). A tile cut by the block's edge runs on c itself
 * when only its rows are cut and uk has run_rows; else on tile (mr x nr
 * scratch), copied out, its c values copied in first when beta reads
 * them. */
static void multiply_block(const tg__gemm_ukernel *uk,
                           const tg__gemm_product *g, int64_t i0, int64_t mb,
                           int64_t p0, int64_t kb, int64_t nb, bool a_packed,
                           const char *ap, const char *bp, double beta, char *c,
                           char *tile)
{
    const size_t es = tg_dtype_size(g->dt);
    const int mr = uk->mr, nr = uk->nr;
    const int64_t ldc = g->ldc;
    for (int64_t jr = 0; jr < nb; jr += nr) {
        const int64_t cols = min64(nr, nb - jr);
        const char *b_sliver = bp + (size_t)(jr * kb) * es;
        for (int64_t ir = 0; ir < mb; ir += mr) {
            const int64_t rows = min64(mr, mb - ir);
            const bool cut_rows = rows < mr && uk->run_rows[0];
            a_panel pa = {ap + (size_t)(ir * kb) * es, 1, mr};
            if (!a_packed && (rows == mr || cut_rows)) {
                pa.rs = g->ta ? 1 : g->lda, pa.cs = g->ta ? g->lda : 1;
                pa.base = (const char *)g->a +
                          (size_t)((i0 + ir) * pa.rs + p0 * pa.cs) * es;
            } else if (!a_packed) {
                pa.base = ap; /* the edge panel, packed alone */
            }
            char *ct = c + (size_t)(ir * ldc + jr) * es;
            if (rows == mr && cols == nr) {
                uk->run(kb, pa.base, pa.rs, pa.cs, b_sliver, g->alpha, beta, ct,
                        ldc);
                continue;
            }
            if (cut_rows && cols == nr) {
                run_cut_rows(uk, g, rows, kb, pa, b_sliver, beta, ct, ldc);
                continue;
            }
            for (int64_t i = 0; beta != 0 && i < rows; i++)
                memcpy(tile + (size_t)(i * nr) * es,
                       ct + (size_t)(i * ldc) * es, (size_t)cols * es);
            if (cut_rows)
                run_cut_rows(uk, g, rows, kb, pa, b_sliver, beta, tile, nr);
            else
                uk->run(kb, pa.base, pa.rs, pa.cs, b_sliver, g->alpha, beta,
                        tile, nr);
            for (int64_t i = 0; i < rows; i++)
                memcpy(ct + (size_t)(i * ldc) * es,
                       tile + (size_t)(i * nr) * es, (size_t)cols * es);
        }
    }
}

/* One product's split among threads: c in m_parts x n_parts rectangles of
 * rows x cols (the last ones cut), rectangle u at (u % m_parts,
 * u / m_parts). Each is a product of its own, run in (mc,nc) blocks. */
typedef struct {
    const tg__gemm_ukernel *uk;
    const tg__gemm_product *g;
    int64_t m_parts, rows, cols;
    atomic_bool failed;
} job;

/* Up to this many b slivers across c, a is read in place, not packed. */
enum { A_IN_PLACE_MAX_SLIVERS = 8 };

/* The k block: all of k when it is at most the kernel's k_one, else kc.
 * One block instead of two halves c's passes (each block reads and writes
 * all of c) and leaves no short last block: with k_one = 2 kc on AVX2,
 * the projections of the head, (16384,512) @ (512,64) and (8192,384) @
 * (384,64), ran 20-30% faster in float32 and 14-24% in float64 at k = 512
 * and 384 in one block than at 256 + 256 and 256 + 128 (medians of five
 * interleaved runs; 512^3 even; Zen 3, 1 thread). The AVX-512 kernels'
 * k_one, 2 kc as well, was measured on Zen 5 (kernels/gemm_avx512.c). It
 * depends on k alone, so the sum order stays the same for every layout
 * and thread count. */
static int64_t k_block(const tg__gemm_ukernel *uk, int64_t k)
{
    return k <= uk->k_one ? k : uk->kc;
}

/* Packing a pays when each panel then meets many b slivers; with few
 * (a narrow c), the kernel reads a where it lies. Except an a stored
 * transposed (rows of op(a) down storage's columns) with rows at least
 * the kernel's ta_pack_from bytes apart: read in place, its panels
 * walk storage a row per step, a new page per step once rows are
 * 4 KiB apart, and the same L1 set per step when exactly 4 KiB (or a
 * multiple) apart. Measured per kernel (1 thread):
 * - AVX2 float64 packs always: its 6-double panels (48 bytes a step)
 *   in place ran 9-23% slower than packed at 4 and 8 slivers (k^T @ dq
 *   shapes (256,64,256), (128,32,4096), (384,64,8192); Zen 3).
 * - AVX2 float32 packs from 4 KiB: attn^T @ dout at (16,1024,1024) x
 *   (16,1024,64) ran 47 ms in place against 34 ms packed (medians of
 *   three; 2 KiB rows even, 1 KiB and less in place 2-12% faster; its
 *   panels packed at 4 and 8 slivers 0-13% slower; Zen 3).
 * - AVX-512 never packs: its 14-element panels (56 or 112 bytes a
 *   step) in place ran the head's transposed float64 products at
 *   medium and large, rows under 4 KiB apart, at 72-87% of the FMA
 *   peak against 54-62% packed. From 4 KiB (GFLOP/s, medians of three
 *   interleaved runs of CPU time; Zen 5), the same attn^T @ dout:
 *     float32, rows 4096 bytes apart:  144-150 in place, 130-133 packed
 *     float32, rows 4160 bytes apart:  173-181 in place, 130-133 packed
 *     float64, rows 8192 bytes apart:  64 either way
 *     float64, rows 8256 bytes apart:  81-82 in place, 67-69 packed
 *   and float64 (32,512,512) x (32,512,64), rows 4096 bytes apart:
 *   80-81 in place, 64-66 packed. */
static bool a_packed_for(const tg__gemm_ukernel *uk, const tg__gemm_product *g,
                         size_t es)
{
    return g->n > A_IN_PLACE_MAX_SLIVERS * uk->nr ||
           (g->ta && (uint64_t)g->lda * es >= (uint64_t)uk->ta_pack_from);
}

static void run_parts(void *ctx, int64_t lo, int64_t hi)
{
    job *jb = ctx;
    const tg__gemm_ukernel *uk = jb->uk;
    const tg__gemm_product *g = jb->g;
    const size_t es = tg_dtype_size(g->dt);
    const int64_t kc = k_block(uk, g->k);
    const int64_t mc = min64(uk->mc, jb->rows), nc = min64(uk->nc, jb->cols);
    const int64_t a_size = ceil_div(mc, uk->mr) * uk->mr * kc;
    const int64_t b_size = ceil_div(nc, uk->nr) * uk->nr * kc;
    const int64_t tile_size = (int64_t)uk->mr * uk->nr;
    int slot;
    char *ap = take_buffer((size_t)(a_size + b_size + tile_size) * es, &slot);
    if (!ap) {
        atomic_store(&jb->failed, true);
        return;
    }
    char *bp = ap + (size_t)a_size * es, *tile = bp + (size_t)b_size * es;
    const bool a_packed = a_packed_for(uk, g, es);
    /* A row-major b of exactly one sliver's width, rows nr apart, is laid
     * out as its packed sliver already: the kernel reads it in place (the
     * (1024,16) dq of h^T @ dq was copied whole for each k block). */
    const bool b_in_place = !g->tb && g->n == uk->nr && g->ldb == uk->nr;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t i_lo = u % jb->m_parts * jb->rows;
        const int64_t i_hi = min64(g->m, i_lo + jb->rows);
        const int64_t j_lo = u / jb->m_parts * jb->cols;
        const int64_t j_hi = min64(g->n, j_lo + jb->cols);
        for (int64_t j0 = j_lo; j0 < j_hi; j0 += nc) {
            const int64_t nb = min64(nc, j_hi - j0);
            for (int64_t p0 = 0; p0 < g->k; p0 += kc) {
                const int64_t kb = min64(kc, g->k - p0);
                const double beta = p0 == 0 ? g->beta : 1;
                const char *bk = bp;
                if (b_in_place)
                    bk = (const char *)g->b + (size_t)(p0 * g->ldb + j0) * es;
                else if (uk->pack_b)
                    uk->pack_b(g, p0, kb, j0, nb, bp);
                else
                    pack_b(g, uk->nr, p0, kb, j0, nb, bp);
                for (int64_t i0 = i_lo; i0 < i_hi; i0 += mc) {
                    const int64_t mb = min64(mc, i_hi - i0);
                    if (a_packed)
                        pack_a_of(uk, g, i0, mb, p0, kb, ap);
                    else if (mb % uk->mr && !uk->run_rows[0])
                        pack_a_of(uk, g, i0 + mb - mb % uk->mr, mb % uk->mr, p0,
                                  kb, ap);
                    multiply_block(
                        uk, g, i0, mb, p0, kb, nb, a_packed, ap, bk, beta,
                        (char *)g->c + (size_t)(i0 * g->ldc + j0) * es, tile);
                }
            }
        }
    }
    give_back(ap, slot);
}

bool tg__gemm_packed_threaded(int64_t m, int64_t n, int64_t k)
{
    return (double)m * (double)n * (double)k >= TG_GEMM_THREADED_MIN &&
           tg__parallel_threads(2, TG_PARALLEL_MIN) > 1;
}

bool tg__gemm_packed(const tg__gemm_ukernel *uk, const tg__gemm_product *g,
                     bool threaded)
{
    job jb = {.uk = uk, .g = g, .m_parts = 1, .rows = g->m, .cols = g->n};
    const int64_t threads =
        threaded ? tg__parallel_threads(2, TG_PARALLEL_MIN) : 1;
    int64_t n_parts = 1;
    if (threads > 1) {
        /* One rectangle per thread, so each packs its b once: split the
         * columns while each part keeps 4 slivers, then the rows. (The
         * rectangles' sizes change no sum.) */
        n_parts = min64(threads, ceil_div(g->n, 4 * uk->nr));
        jb.m_parts = min64(ceil_div(threads, n_parts), ceil_div(g->m, uk->mr));
        jb.cols = ceil_div(ceil_div(g->n, n_parts), uk->nr) * uk->nr;
        jb.rows = ceil_div(ceil_div(g->m, jb.m_parts), uk->mr) * uk->mr;
        n_parts = ceil_div(g->n, jb.cols);
        jb.m_parts = ceil_div(g->m, jb.rows);
    }
    const int64_t parts = jb.m_parts * n_parts;
    atomic_init(&jb.failed, false);
    if (parts > 1)
        tg__parallel_for(parts, (int64_t)TG_PARALLEL_MIN, run_parts, &jb);
    else
        run_parts(&jb, 0, 1);
    return !atomic_load(&jb.failed);
}
