/* The library's worker threads: tg__parallel_for, on which the loops
 * (core/iter.c) and the kernels of ops/ split large work. Above the errors
 * only: it knows nothing of tensors. */
#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* A small pool of worker threads, not OpenMP parallel regions: between
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

int tg__parallel_threads(int64_t n, int64_t work)
{
    return work >= TG_PARALLEL_MIN && n > 1 ? thread_count() : 1;
}

void tg__parallel_for(int64_t n, int64_t work,
                      void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx)
{
    int threads = tg__parallel_threads(n, work);
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
