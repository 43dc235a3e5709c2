/* Storage: refcounted buffers that tensors and their views share, from a
 * pool. Below the tensor: it knows bytes, not shapes.
 *
 * A training step makes and frees the same tensors every step. Giving their
 * memory back to the system and asking for it again costs more than the
 * arithmetic on small tensors, and large ones (which malloc maps and unmaps)
 * would have every page faulted in again each step. So a storage that dies
 * goes to a pool, by size class, and the next request of its class reuses
 * it; after the first step, a steady loop takes nothing from the system.
 *
 * - Classes: 64-byte steps up to 256 bytes, then four per power of two (a
 *   block is at most 25% larger than asked). From 2 MiB up, blocks are
 *   mapped with mmap and madvise(MADV_HUGEPAGE), so that faulting them in
 *   costs one fault per 2 MiB rather than one per 4 KiB page: each multiple
 *   of 2 MiB is a class up to 1 GiB (a block wastes less than one huge
 *   page), then four per power of two again.
 * - A block is one allocation: [data, cap bytes][its header]; a huge block's
 *   header sits on a small page of its own after the 2 MiB pages.
 * - What is kept: for each class, as many blocks as were live at once at
 *   the peak of the last POOL_EPOCHS epochs (an epoch ends with each
 *   backward, a training step's natural boundary, and after every
 *   EPOCH_ALLOCS blocks handed out). A steady loop keeps what its step
 *   needs; what a shrinking workload no longer uses goes back.
 * - A high-water mark in bytes: the most bytes live at once over the same
 *   epochs (hwm). When a request takes a new block from the system and the
 *   blocks live plus those cached would exceed it, the cached blocks of
 *   idle classes go back first, the largest classes first: a class is idle
 *   when no block of it was handed out in the last 2 epochs' worth of
 *   requests (2x the last epoch's count; 1024 in the first epoch). So what
 *   a model's initialisation used once (GPT-2 124M's draws in float64, a
 *   309 MB table among them) is not kept beside the first steps' memory,
 *   while a steady loop, whose every class is used each step, keeps what
 *   its step needs and takes no new pages once its classes are stocked
 *   (the per-class counts keep the sum of each class's peak, which may be
 *   above the peak of the sum: evicting towards the latter every step
 *   would fault pages in every step).
 * - TG_POOL_MAX_MB=N in the environment caps the bytes the pool caches
 *   (free blocks) at N MiB: a block that dies beyond it goes back to the
 *   system (0: nothing is cached; unset or not a whole number: no cap).
 * - One mutex guards the pool (a tensor may die on another thread).
 * - The rest of a step's memory comes from the same classes: tensor headers
 *   and tape entries (tg__pool_get / tg__pool_put, raw blocks of the same
 *   layout), so that a steady step takes nothing from the system at all.
 *   One locked pool rather than one per thread: a header may die on another
 *   thread than its maker's, and the lock is uncontended in a training
 *   loop, where a get and a put cost fewer instructions than the calloc and
 *   free they replace (about 340 against 410 for a header, callgrind of
 *   bench_head --config small).
 * - TG_NO_POOL=1 in the environment turns it off: every storage is malloc'd
 *   and freed, so valgrind and AddressSanitizer see each one. It is off by
 *   default under both (TG_NO_POOL=0 turns it on there, with cached blocks
 *   marked inaccessible). The blocks cached at exit are freed then, and the
 *   pool closes: blocks that die later go back to the system. Whether it is
 *   on never changes after the first request (tg__pool_on), so a block is
 *   given back the way it was taken. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */

#include "core/internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifdef HAVE_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define POOL_EPOCHS  4
#define EPOCH_ALLOCS 65536
#define HUGE_BLOCK   ((size_t)2 << 20)
#define HUGE_MAX     ((size_t)1 << 30)
/* Classes: 4 of 64..256 bytes; 4 for each power 2^e, e = 8..20 (up to
 * 2 MiB); one for each multiple of 2 MiB from 4 MiB to 1 GiB; 4 for each
 * power 2^e, e = 30..62. */
#define MID_CLASSES  (4 * 13)
#define HUGE_CLASSES 511
#define N_CLASSES    (4 + MID_CLASSES + HUGE_CLASSES + 4 * 33)

/* A storage and how it was allocated. A tensor's storage pointer is the
 * block's (s comes first). */
typedef struct block {
    tg_storage s;
    struct block *next; /* in its class's free list */
    size_t cap;         /* bytes at s.data */
    int cls;            /* size class, or -1: malloc'd outside the pool */
} block;

typedef struct size_class {
    block *free; /* most recently freed first: warmest in cache */
    int64_t n_free, n_live;
    int64_t peak[POOL_EPOCHS]; /* most blocks live at once; [0]: this epoch */
    int64_t keep;              /* the peak of the previous epochs */
    int64_t last_take;         /* pool.seq at its last request */
    bool used;                 /* listed in pool.used */
} size_class;

static struct {
    pthread_mutex_t lock;
    bool on;     /* set once, by pool_init */
    bool closed; /* at exit: caches nothing more */
    int64_t cached_bytes;
    int64_t max_cached;             /* TG_POOL_MAX_MB, or INT64_MAX */
    int64_t live_bytes;             /* pooled blocks handed out, by cap */
    int64_t peak_live[POOL_EPOCHS]; /* most live bytes; [0] this epoch */
    int64_t hwm;                    /* peak_live's most, past epochs */
    int64_t seq;                    /* blocks handed out, ever */
    int64_t made;                   /* blocks taken from the system */
    int64_t idle_after;             /* requests that make a class idle */
    int64_t handed_out;             /* blocks handed out in this epoch */
    size_class cls[N_CLASSES];
    int used[N_CLASSES]; /* the classes ever used, n_used of them */
    int n_used;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static _Atomic int64_t storage_bytes, storage_peak; /* tg__storage_peak_bytes */
static size_t page_size = 4096;

/* The class of a request of n bytes, and its block size in *cap; -1 when
 * n is too large for any class. */
static int size_class_of(size_t n, size_t *cap)
{
    if (n <= 256) {
        size_t k = n <= 64 ? 1 : (n + 63) / 64;
        *cap = k * 64;
        return (int)k - 1;
    }
    if (n > HUGE_BLOCK && n <= HUGE_MAX) {
        size_t pages = (n + HUGE_BLOCK - 1) / HUGE_BLOCK; /* 2..512 */
        *cap = pages * HUGE_BLOCK;
        return 4 + MID_CLASSES + (int)pages - 2;
    }
    int e = 63 - __builtin_clzll(
                     (unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    if (e > 62)
        return -1;
    size_t step = (size_t)1 << (e - 2);
    size_t k = (n - 1 - ((size_t)1 << e)) / step + 1; /* 1..4 */
    *cap = ((size_t)1 << e) + k * step;
    return (int)k - 1 +
           (e < 30 ? 4 + 4 * (e - 8)
                   : 4 + MID_CLASSES + HUGE_CLASSES + 4 * (e - 30));
}

static bool is_huge(size_t cap)
{
#ifdef MAP_ANONYMOUS
    return cap >= HUGE_BLOCK;
#else
    (void)cap;
    return false;
#endif
}

/* While cached, a block's data is off limits to the memory checkers; handed
 * out, its first nbytes are accessible but undefined. */
static void mark_cached(block *b)
{
    (void)b;
#ifdef HAVE_MEMCHECK
    VALGRIND_MAKE_MEM_NOACCESS(b->s.data, b->cap);
#endif
#ifdef HAVE_ASAN
    ASAN_POISON_MEMORY_REGION(b->s.data, b->cap);
#endif
}

static void mark_handed_out(block *b, size_t nbytes)
{
    (void)b, (void)nbytes;
#ifdef HAVE_ASAN
    ASAN_UNPOISON_MEMORY_REGION(b->s.data, nbytes);
#endif
#ifdef HAVE_MEMCHECK
    VALGRIND_MAKE_MEM_UNDEFINED(b->s.data, nbytes);
#endif
}

#ifdef MAP_ANONYMOUS
/* cap bytes (a multiple of HUGE_BLOCK) aligned to HUGE_BLOCK, with one
 * small page after them for the header. NULL when mmap fails. */
static char *huge_map(size_t cap)
{
    size_t len = cap + page_size, span = len + HUGE_BLOCK;
    if (tg__alloc_fails())
        return NULL;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *data = (char *)(((uintptr_t)p + HUGE_BLOCK - 1) &
                          ~(uintptr_t)(HUGE_BLOCK - 1));
    if (data > p)
        munmap(p, (size_t)(data - p));
    if (p + span > data + len)
        munmap(data + len, (size_t)(p + span - (data + len)));
#ifdef MADV_HUGEPAGE
    /* Huge pages for the 2 MiB spans every request of the class fills: a
     * request of a class of k spans is over k - 1 of them, so the last is
     * left to small pages, touched only as far as the tensor reaches (a
     * 2.4 MB tensor held 4 MiB when its last span took a huge page). The
     * one-span class's requests fill at least 7/8 of it. */
    madvise(data, cap > HUGE_BLOCK ? cap - HUGE_BLOCK : cap, MADV_HUGEPAGE);
#endif
    return data;
}
#endif

/* A new block of class c (cap bytes) from the system; *zeroed tells whether
 * its data is known to be zero (fresh pages). NULL on no memory. */
static block *block_new(int c, size_t cap, bool *zeroed)
{
    char *data = NULL;
    *zeroed = false;
#ifdef MAP_ANONYMOUS
    if (is_huge(cap)) {
        data = huge_map(cap);
        *zeroed = true;
    }
#endif
    if (!is_huge(cap) &&
        tg__posix_memalign((void **)&data, 64, cap + sizeof(block)))
        data = NULL;
    if (!data)
        return NULL;
    block *b = (block *)(data + cap);
    b->s.data = data;
    b->cap = cap;
    b->cls = c;
    return b;
}

/* A block outside the pool, as the storage always was: two mallocs. */
static block *block_malloc(size_t nbytes)
{
    block *b = tg__malloc(sizeof *b);
    /* One byte at least, so a 0-element tensor has a valid pointer. */
    void *data = b ? tg__malloc(nbytes ? nbytes : 1) : NULL;
    if (!data) {
        free(b);
        return NULL;
    }
    b->s.data = data;
    b->cap = nbytes;
    b->cls = -1;
    return b;
}

static void block_free(block *b)
{
    if (b->cls < 0) {
        free(b->s.data);
        free(b);
        return;
    }
#ifdef MAP_ANONYMOUS
    if (is_huge(b->cap)) {
        munmap(b->s.data, b->cap + page_size);
        return;
    }
#endif
    free(b->s.data); /* the header goes with it */
}

/* Gives sc's most recently cached block back to the system (lock held). */
static void free_cached(size_class *sc)
{
    block *b = sc->free;
    sc->free = b->next;
    sc->n_free--;
    pool.cached_bytes -= (int64_t)b->cap;
    mark_handed_out(b, b->cap);
    block_free(b);
}

/* Frees cached blocks of sc until it owns at most keep (lock held). */
static void trim_class(size_class *sc, int64_t keep)
{
    while (sc->free && sc->n_free + sc->n_live > keep)
        free_cached(sc);
}

static void drain_at_exit(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.closed = true;
    for (int c = 0; c < N_CLASSES; c++)
        trim_class(&pool.cls[c], 0);
    pthread_mutex_unlock(&pool.lock);
}

static void pool_init(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0)
        page_size = (size_t)ps;
    bool on = true;
#ifdef HAVE_ASAN
    on = false;
#endif
#ifdef HAVE_MEMCHECK
    if (RUNNING_ON_VALGRIND)
        on = false;
#endif
    const char *v = getenv("TG_NO_POOL");
    if (v && *v)
        on = strcmp(v, "0") == 0;
    pool.on = on;
    pool.max_cached = INT64_MAX;
    pool.idle_after = 1024;
    const char *m = getenv("TG_POOL_MAX_MB");
    char *end = NULL;
    long long mb = m && *m ? strtoll(m, &end, 10) : -1;
    if (end && !*end && mb >= 0 && mb < ((long long)1 << 40))
        pool.max_cached = (int64_t)mb << 20;
    if (on)
        atexit(drain_at_exit);
}

/* Ends an epoch (lock held): each class keeps what the last epochs needed
 * at their peak, and gives back what it caches beyond that. */
static void end_epoch(void)
{
    pool.idle_after = 2 * pool.handed_out > 1024 ? 2 * pool.handed_out : 1024;
    pool.handed_out = 0;
    pool.hwm = 0;
    for (int i = POOL_EPOCHS - 1; i > 0; i--) {
        pool.peak_live[i] = pool.peak_live[i - 1];
        if (pool.peak_live[i] > pool.hwm)
            pool.hwm = pool.peak_live[i];
    }
    pool.peak_live[0] = pool.live_bytes;
    for (int u = 0; u < pool.n_used; u++) {
        size_class *sc = &pool.cls[pool.used[u]];
        sc->keep = 0;
        for (int i = POOL_EPOCHS - 1; i > 0; i--) {
            sc->peak[i] = sc->peak[i - 1];
            if (sc->peak[i] > sc->keep)
                sc->keep = sc->peak[i];
        }
        sc->peak[0] = sc->n_live;
        trim_class(sc, sc->keep > sc->n_live ? sc->keep : sc->n_live);
    }
}

void tg__pool_epoch(void)
{
    pthread_mutex_lock(&pool.lock);
    end_epoch();
    pthread_mutex_unlock(&pool.lock);
}

int64_t tg__pool_blocks_made(void)
{
    pthread_mutex_lock(&pool.lock);
    int64_t n = pool.made;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

int64_t tg__pool_cached_bytes(void)
{
    pthread_mutex_lock(&pool.lock);
    int64_t n = pool.cached_bytes;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

/* Gives the cached blocks of idle classes back to the system, the largest
 * classes first, until the blocks live and cached fit in the high-water
 * mark (lock held; called when a block is to come from the system,
 * live_bytes counting it). */
static void make_room(void)
{
    int64_t mark = pool.hwm > pool.peak_live[0] ? pool.hwm : pool.peak_live[0];
    for (int c = N_CLASSES - 1; c >= 0 && pool.cached_bytes > 0 &&
                                pool.live_bytes + pool.cached_bytes > mark;
         c--) {
        size_class *sc = &pool.cls[c];
        if (pool.seq - sc->last_take <= pool.idle_after)
            continue;
        while (sc->free && pool.live_bytes + pool.cached_bytes > mark)
            free_cached(sc);
    }
}

/* Takes a cached block of class c (cap bytes), or NULL, counting one more
 * live block of the class either way; with NULL, makes room for the new
 * block (make_room). false when the pool is off. Handing a cached
 * block out again is an allocation like any other (tg__alloc_fails), so
 * that which allocation a program makes k-th does not depend on what the
 * pool holds: when it is to fail, the block stays cached, *failed is set,
 * and nothing is counted. */
static bool pool_take(int c, size_t cap, block **b, bool *failed)
{
    pthread_mutex_lock(&pool.lock);
    bool on = pool.on;
    *failed = false;
    if (on) {
        size_class *sc = &pool.cls[c];
        if (!sc->used) {
            sc->used = true;
            pool.used[pool.n_used++] = c;
        }
        if (sc->free && tg__alloc_reuse_fails()) {
            pthread_mutex_unlock(&pool.lock);
            *failed = true;
            return on;
        }
        if ((*b = sc->free)) {
            sc->free = (*b)->next;
            sc->n_free--;
            pool.cached_bytes -= (int64_t)(*b)->cap;
        }
        if (++sc->n_live > sc->peak[0])
            sc->peak[0] = sc->n_live;
        sc->last_take = ++pool.seq;
        pool.live_bytes += (int64_t)cap;
        if (pool.live_bytes > pool.peak_live[0])
            pool.peak_live[0] = pool.live_bytes;
        if (!*b) {
            pool.made++;
            make_room();
        }
        if (++pool.handed_out >= EPOCH_ALLOCS)
            end_epoch();
    }
    pthread_mutex_unlock(&pool.lock);
    return on;
}

/* Undoes pool_take's count for a block the system did not give. */
static void unlive(int c, size_t cap)
{
    pthread_mutex_lock(&pool.lock);
    pool.cls[c].n_live--;
    pool.live_bytes -= (int64_t)cap;
    pthread_mutex_unlock(&pool.lock);
}

/* storage_bytes += n (every storage's nbytes, pooled or not), raising
 * storage_peak to it. */
static void count_bytes(int64_t n)
{
    int64_t now =
        atomic_fetch_add_explicit(&storage_bytes, n, memory_order_relaxed) + n;
    int64_t peak = atomic_load_explicit(&storage_peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak(&storage_peak, &peak, now))
        ;
}

int64_t tg__storage_peak_reset(void)
{
    int64_t now = atomic_load(&storage_bytes);
    atomic_store(&storage_peak, now);
    return now;
}

int64_t tg__storage_peak_bytes(void) { return atomic_load(&storage_peak); }

tg_storage *tg__storage_new(size_t nbytes, bool zero_fill)
{
    pthread_once(&pool_once, pool_init);
    size_t cap;
    int c = size_class_of(nbytes, &cap);
    block *b = NULL;
    bool zeroed = false, failed;
    if (c >= 0 && pool_take(c, cap, &b, &failed)) {
        if (failed)
            return NULL;
        if (b)
            mark_handed_out(b, nbytes);
        else if (!(b = block_new(c, cap, &zeroed))) {
            unlive(c, cap);
            return NULL;
        }
    } else if (!(b = block_malloc(nbytes)))
        return NULL;
    if (zero_fill && !zeroed)
        memset(b->s.data, 0, nbytes);
    b->s.nbytes = nbytes;
    b->s.version = 0;
    count_bytes((int64_t)nbytes);
    atomic_init(&b->s.tape_refs, 0);
    atomic_init(&b->s.refcount, 1);
    return &b->s;
}

/* Atomic counts, as the tensor's (core/internal.h). */
void tg__storage_retain(tg_storage *s)
{
    int64_t was =
        atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
    TG_ASSERT(was > 0);
}

/* Gives b to its class's free list, or back to the system when the pool
 * is off or closed or holds enough. */
static void pool_give(block *b)
{
    bool cached = false;
    if (b->cls >= 0) {
        pthread_mutex_lock(&pool.lock);
        size_class *sc = &pool.cls[b->cls];
        int64_t keep = sc->keep > sc->peak[0] ? sc->keep : sc->peak[0];
        cached = pool.on && !pool.closed && sc->n_free + sc->n_live <= keep &&
                 pool.cached_bytes + (int64_t)b->cap <= pool.max_cached;
        sc->n_live--;
        pool.live_bytes -= (int64_t)b->cap;
        if (cached) {
            mark_cached(b);
            b->next = sc->free;
            sc->free = b;
            sc->n_free++;
            pool.cached_bytes += (int64_t)b->cap;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    if (!cached)
        block_free(b);
}

/* Drops a reference; the last one gives the block back to the pool. */
void tg__storage_release(tg_storage *s)
{
    int64_t was =
        atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel);
    TG_ASSERT(was > 0);
    if (was == 1) {
        count_bytes(-(int64_t)s->nbytes);
        pool_give((block *)s);
    }
}

bool tg__pool_on(void)
{
    pthread_once(&pool_once, pool_init);
    return pool.on;
}

/* A raw block: the data of a pooled block (its header after it, where
 * size_class_of(n) says), or plain calloc'd memory when the pool is off. */
void *tg__pool_get(size_t n)
{
    if (!tg__pool_on()) /* calloc, as headers always were: the memory
                           checkers see a block of exactly n bytes */
        return tg__calloc(1, n);
    size_t cap;
    int c = size_class_of(n, &cap);
    TG_ASSERT(c >= 0);
    block *b = NULL;
    bool zeroed, failed;
    pool_take(c, cap, &b, &failed);
    if (failed)
        return NULL;
    if (b) {
        mark_handed_out(b, n);
        return b->s.data;
    }
    if (!(b = block_new(c, cap, &zeroed))) {
        unlive(c, cap);
        return NULL;
    }
    return b->s.data;
}

void tg__pool_put(void *p, size_t n)
{
    if (!p)
        return;
    if (!pool.on) {
        free(p);
        return;
    }
    size_t cap;
    int c = size_class_of(n, &cap);
    block *b = (block *)((char *)p + cap);
    TG_ASSERT(b->s.data == p && b->cls == c);
    pool_give(b);
}
