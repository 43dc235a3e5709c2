/* Every allocation of the library passes here: tg__malloc, tg__calloc,
 * tg__realloc, tg__posix_memalign and tg__strdup wrap the C library's, and
 * tg__alloc_fails stands for the few that take memory elsewhere (a block
 * from the storage pool, a mapping, realpath's buffer). Their memory is the
 * C library's: free() it as usual.
 *
 * So one counter sees them all, and a test can make any one of them fail:
 * after tg__alloc_fail_at(k, every_after), allocation number k from then on
 * (and with every_after each one after it) fails as though the system had
 * no memory left, returning NULL with errno ENOMEM. A test that runs a
 * program once to count its allocations, then once for each k, reaches
 * every failure path the program can take. Off (the default), the cost is
 * one relaxed atomic load per allocation.
 *
 * The counter is one for the process, not per thread: the worker threads'
 * allocations (attention's tiles) count too. A ground floor beside
 * core/error.c: it calls nothing else of the library.
 *
 * A pool that hands out again memory it kept (core/storage.c) is a point
 * that can fail too (tg__alloc_reuse_fails), so that which allocation is
 * k-th does not depend on what the pools hold; but it takes nothing from
 * the system. A second count, tg__alloc_system_counted, leaves such reuses
 * out: what a steady training step must keep at 0. */
#include "core/error.h"
#include "core/exported.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_bool counting;
static _Atomic int64_t counted;     /* allocations since counting began */
static _Atomic int64_t fail_at;     /* the one that fails; 0: none */
static atomic_bool keep_failing;    /* and every one after it */
static _Atomic int64_t from_system; /* of them, not a pool's reuse */

void tg__alloc_fail_at(int64_t k, bool every_after)
{
    atomic_store(&counting, false);
    atomic_store(&counted, 0);
    atomic_store(&from_system, 0);
    atomic_store(&fail_at, k > 0 ? k : 0);
    atomic_store(&keep_failing, every_after);
    atomic_store(&counting, k >= 0);
}

int64_t tg__alloc_counted(void) { return atomic_load(&counted); }

int64_t tg__alloc_system_counted(void) { return atomic_load(&from_system); }

bool tg__alloc_fails(void)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed))
        return false;
    atomic_fetch_add_explicit(&from_system, 1, memory_order_relaxed);
    return tg__alloc_reuse_fails();
}

bool tg__alloc_reuse_fails(void)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed))
        return false;
    int64_t k =
        atomic_fetch_add_explicit(&counted, 1, memory_order_relaxed) + 1;
    int64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (at == 0 || k < at || (k > at && !atomic_load(&keep_failing)))
        return false;
    errno = ENOMEM;
    return true;
}

void *tg__malloc(size_t n) { return tg__alloc_fails() ? NULL : malloc(n); }

void *tg__calloc(size_t n, size_t size)
{
    return tg__alloc_fails() ? NULL : calloc(n, size);
}

/* The exported twins, for libtapegrad_dist (core/exported.h). */
void *tg__x_malloc(size_t n) { return tg__malloc(n); }
void *tg__x_calloc(size_t n, size_t size) { return tg__calloc(n, size); }

void *tg__realloc(void *p, size_t n)
{
    return tg__alloc_fails() ? NULL : realloc(p, n);
}

int tg__posix_memalign(void **p, size_t align, size_t n)
{
    return tg__alloc_fails() ? ENOMEM : posix_memalign(p, align, n);
}

char *tg__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = tg__malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}
