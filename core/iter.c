/* numpy broadcasting and the strided loop every elementwise kernel runs on. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

bool tg__broadcast(const char *op, int n, const tg_tensor *const *ts, int *ndim,
                   int64_t *shape)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (ts[i]->ndim > nd)
            nd = ts[i]->ndim;
    /* Right-align the shapes; a dim of size 1 stretches to the other's. */
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (nd - ts[i]->ndim);
            if (k < 0 || ts[i]->shape[k] == 1)
                continue;
            if (size != 1 && ts[i]->shape[k] != size) {
                char msg[4 * TG_SHAPE_STR];
                size_t len = 0;
                for (int j = 0; j < n; j++)
                    len += (size_t)snprintf(
                        msg + len, sizeof msg - len, "%s%s",
                        j ? (j == n - 1 ? " and " : ", ") : "", TG_SHP(ts[j]));
                tg__error("%s: shapes %s cannot be broadcast together", op,
                          msg);
                return false;
            }
            size = ts[i]->shape[k];
        }
        shape[d] = size;
    }
    *ndim = nd;
    return true;
}

void tg__loop_init(tg_loop *L, int ndim, const int64_t *shape, int nop,
                   const tg_tensor *const *ops)
{
    TG_ASSERT(nop >= 1 && nop <= TG_LOOP_MAX);
    /* shape and strides are set (and read) up to ndim only */
    L->nop = nop;
    L->ndim = 0;
    memset(L->idx, 0, sizeof L->idx);
    memset(L->off, 0, sizeof L->off);
    memset(L->step, 0, sizeof L->step);

    /* Each operand's strides against the loop shape: right-aligned, 0 where
     * the operand is missing the dim or has size 1 (broadcast). */
    int64_t st[TG_LOOP_MAX][TG_MAX_DIMS];
    int64_t shp[TG_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue; /* size-1 dims add nothing to the loop */
        shp[nd] = shape[d];
        for (int i = 0; i < nop; i++) {
            int k = d - (ndim - ops[i]->ndim);
            st[i][nd] =
                (k < 0 || ops[i]->shape[k] == 1) ? 0 : ops[i]->strides[k];
        }
        nd++;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    if (numel == 0) {
        L->inner = 0;
        L->ndim = 0;
        return;
    }
    if (nd == 0) { /* a single element */
        L->inner = 1;
        return;
    }
    /* Merge dim d into d+1 when, for every operand, stepping d is the same
     * as stepping d+1 all the way: stride[d] == stride[d+1] * shape[d+1]. */
    int m = 0;
    for (int d = 1; d < nd; d++) {
        bool merge = true;
        for (int i = 0; i < nop; i++)
            if (st[i][m] != st[i][d] * shp[d])
                merge = false;
        if (merge) {
            shp[m] *= shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        } else {
            m++;
            shp[m] = shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        }
    }
    nd = m + 1;
    /* The last merged dim is the inner run; the rest are outer dims. */
    L->inner = shp[nd - 1];
    for (int i = 0; i < nop; i++)
        L->step[i] = st[i][nd - 1];
    L->ndim = nd - 1;
    for (int d = 0; d < L->ndim; d++) {
        L->shape[d] = shp[d];
        for (int i = 0; i < nop; i++)
            L->strides[i][d] = st[i][d];
    }
}

bool tg__loop_next(tg_loop *L)
{
    for (int d = L->ndim - 1; d >= 0; d--) {
        if (++L->idx[d] < L->shape[d]) {
            for (int i = 0; i < L->nop; i++)
                L->off[i] += L->strides[i][d];
            return true;
        }
        L->idx[d] = 0;
        for (int i = 0; i < L->nop; i++)
            L->off[i] -= L->strides[i][d] * (L->shape[d] - 1);
    }
    return false;
}

void tg__rows_loop(tg_loop *L, const tg_tensor *x, int d, int nop,
                   const tg_tensor *const *ops)
{
    int64_t rows[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        rows[i] = i == d ? 1 : x->shape[i];
    tg__loop_init(L, x->ndim, rows, nop, ops);
}

/* ---- parallel loops ----------------------------------------------------- *
 *
 * A small pool of worker threads, not OpenMP parallel regions: between
 * regions libgomp's idle threads spin (GOMP_SPINCOUNT pauses, milliseconds
 * on recent x86), taking a core from OpenBLAS's threads and everything else
 * on a 2-core machine, and a region ends only when every thread of its team
 * has arrived, so on a busy machine one late thread holds up the step.
 * Here idle workers sleep; a job is cut into pieces that whoever runs (the
 * caller too) takes one at a time; the caller waits for the pieces taken,
 * never for a worker that has not woken up. OMP_NUM_THREADS (through
 * omp_get_max_threads) sets the number of threads, the caller included. */

/* Pieces per thread: a late thread's share is taken by the others. */
enum { PIECES_PER_THREAD = 4, MAX_WORKERS = 63 };

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* for workers: pieces to take, or quit */
    pthread_cond_t done; /* for the caller: the last piece finished */
    pthread_t workers[MAX_WORKERS];
    int started;
    bool busy, quit; /* a job is in progress; workers are to exit */
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t n, pieces, next, unfinished; /* the job's pieces */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

/* Runs piece t of the job (lock held on entry and exit). */
static void run_piece(int64_t t)
{
    const int64_t q = pool.n / pool.pieces, r = pool.n % pool.pieces;
    int64_t lo = t * q + (t < r ? t : r), hi = lo + q + (t < r);
    void (*fn)(void *, int64_t, int64_t) = pool.fn;
    void *ctx = pool.ctx;
    pthread_mutex_unlock(&pool.lock);
    fn(ctx, lo, hi);
    pthread_mutex_lock(&pool.lock);
    if (--pool.unfinished == 0)
        pthread_cond_signal(&pool.done);
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (!pool.quit && !(pool.busy && pool.next < pool.pieces))
            pthread_cond_wait(&pool.wake, &pool.lock);
        if (pool.quit)
            break;
        run_piece(pool.next++);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

static void stop_workers(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.quit = true;
    pthread_cond_broadcast(&pool.wake);
    int started = pool.started;
    pool.started = 0;
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < started; i++)
        pthread_join(pool.workers[i], NULL);
}

/* Threads to use, the caller included. */
static int thread_count(void)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n < 1 ? 1 : n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n;
#else
    return 1;
#endif
}

/* Starts workers up to want (lock held); false if none could start. */
static bool start_workers(int want)
{
    static bool registered;
    if (!registered) {
        registered = true;
        atexit(stop_workers);
    }
    while (!pool.quit && pool.started < want &&
           pthread_create(&pool.workers[pool.started], NULL, worker_main,
                          NULL) == 0)
        pool.started++;
    return pool.started > 0;
}

/* Threads for n pieces of this much work in all: 1 below TG_PARALLEL_MIN. */
static int threads_for(int64_t n, int64_t work)
{
    return work >= TG_PARALLEL_MIN && n > 1 ? thread_count() : 1;
}

void tg__parallel_for(int64_t n, int64_t work,
                      void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx)
{
    int threads = threads_for(n, work);
    if (threads > 1) {
        pthread_mutex_lock(&pool.lock);
        /* One job at a time: a second caller (another thread, or a piece
         * of a job) runs its loop alone. */
        if (!pool.busy && start_workers(threads - 1)) {
            int64_t pieces = (int64_t)threads * PIECES_PER_THREAD;
            pool.busy = true;
            pool.fn = fn;
            pool.ctx = ctx;
            pool.n = n;
            pool.pieces = pieces < n ? pieces : n;
            pool.next = 0;
            pool.unfinished = pool.pieces;
            pthread_cond_broadcast(&pool.wake);
            while (pool.next < pool.pieces)
                run_piece(pool.next++);
            while (pool.unfinished > 0)
                pthread_cond_wait(&pool.done, &pool.lock);
            pool.busy = false;
            pthread_mutex_unlock(&pool.lock);
            return;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    fn(ctx, 0, n);
}

/* Moves a fresh loop (at its first run) to the start of run r, counting
 * runs in the order tg__loop_next takes them. */
static void loop_seek(tg_loop *L, int64_t r)
{
    for (int d = L->ndim - 1; d >= 0 && r > 0; d--) {
        L->idx[d] = r % L->shape[d];
        r /= L->shape[d];
        for (int i = 0; i < L->nop; i++)
            L->off[i] += L->idx[d] * L->strides[i][d];
    }
}

typedef struct run_job {
    const tg_loop *L;
    tg_run_fn fn;
    void *ctx;
} run_job;

/* Elements [lo, hi) of the loop, in C order, as runs. */
static void run_range(void *job, int64_t lo, int64_t hi)
{
    const run_job *j = job;
    tg_loop L = *j->L;
    int64_t pos = lo % L.inner;
    loop_seek(&L, lo / L.inner);
    for (;;) {
        int64_t len = L.inner - pos < hi - lo ? L.inner - pos : hi - lo;
        int64_t off[TG_LOOP_MAX];
        for (int i = 0; i < L.nop; i++)
            off[i] = L.off[i] + pos * L.step[i];
        j->fn(j->ctx, lo, off, L.step, len);
        lo += len;
        pos = 0;
        if (lo >= hi || !tg__loop_next(&L))
            break;
    }
}

void tg__loop_run(tg_loop *L, int64_t cost, tg_run_fn fn, void *ctx)
{
    int64_t n = L->inner;
    for (int d = 0; d < L->ndim; d++)
        n *= L->shape[d];
    if (n == 0)
        return;
    if (threads_for(n, n * cost) > 1) {
        tg__parallel_for(n, n * cost, run_range, &(run_job){L, fn, ctx});
        return;
    }
    int64_t start = 0; /* on this thread: L itself, run by run */
    do {
        fn(ctx, start, L->off, L->step, L->inner);
        start += L->inner;
    } while (tg__loop_next(L));
}

typedef struct pair_job {
    tg_tensor *dst;
    const tg_tensor *src;
} pair_job;

/* dst += src over one run (operands {src, dst}). */
static void add_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const pair_job *j = job;
    (void)start;
    TG_DISPATCH_FLOAT(j->dst->dtype, T, {
        const T *s = TG_DATA(T, j->src) + off[0];
        T *d = TG_DATA(T, j->dst) + off[1];
        if (step[0] == 1 && step[1] == 1) {
            TG_SIMD
            for (int64_t i = 0; i < len; i++)
                d[i] += s[i];
        } else {
            for (int64_t i = 0; i < len; i++)
                d[i * step[1]] += s[i * step[0]];
        }
    });
}

void tg__add_into(tg_tensor *dst, const tg_tensor *src)
{
    TG_ASSERT(dst->dtype == src->dtype);
    tg_loop L;
    tg__loop_init(&L, src->ndim, src->shape, 2,
                  (const tg_tensor *const[]){src, dst});
    pair_job job = {dst, src};
    bool summing = dst->ndim != src->ndim ||
                   memcmp(dst->shape, src->shape,
                          sizeof(int64_t) * (size_t)dst->ndim) != 0;
    if (!summing) {
        tg__loop_run(&L, 1, add_run, &job);
        return;
    }
    /* dst is broadcast: many src elements add into one, in C order, on
     * this thread (the order of the additions fixes the result). */
    do
        add_run(&job, 0, L.off, L.step, L.inner);
    while (tg__loop_next(&L));
}

/* dst = src over one run (operands {dst, src}), same dtype. */
static void copy_run(void *job, int64_t start, const int64_t *off,
                     const int64_t *step, int64_t len)
{
    const pair_job *j = job;
    (void)start;
    TG_DISPATCH_ANY(j->dst->dtype, T, {
        T *d = TG_DATA(T, j->dst) + off[0];
        const T *s = TG_DATA(T, j->src) + off[1];
        if (step[0] == 1 && step[1] == 1)
            memcpy(d, s, sizeof(T) * (size_t)len);
        else
            for (int64_t i = 0; i < len; i++)
                d[i * step[0]] = s[i * step[1]];
    });
}

void tg__copy_into(tg_tensor *dst, const tg_tensor *src)
{
    tg_loop L;
    tg__loop_init(&L, dst->ndim, dst->shape, 2,
                  (const tg_tensor *const[]){dst, src});
    if (dst->dtype == src->dtype) {
        tg__loop_run(&L, 1, copy_run, &(pair_job){dst, src});
        return;
    }
    /* Conversions are rare (tg_to): one generic load/store per element. */
    size_t ds = tg_dtype_size(dst->dtype), ss = tg_dtype_size(src->dtype);
    char *dbase = (char *)dst->storage->data + (size_t)dst->offset * ds;
    const char *sbase =
        (const char *)src->storage->data + (size_t)src->offset * ss;
    do {
        for (int64_t i = 0; i < L.inner; i++)
            tg__store(dst->dtype, dbase + (size_t)L.off[0] * ds, i * L.step[0],
                      tg__load(src->dtype, sbase + (size_t)L.off[1] * ss,
                               i * L.step[1]));
    } while (tg__loop_next(&L));
}

tg_tensor *tg__copy(const char *op, const tg_tensor *t)
{
    tg_tensor *c = tg__new(op, t->dtype, t->ndim, t->shape, false);
    if (c)
        tg__copy_into(c, t);
    return c;
}
