/* An index of names, sorted once (nn/names.h): duplicates are neighbours
 * after the sort, and a name is found by bisection. qsort is glibc's merge
 * sort when it can have a buffer, n log2 n comparisons at most; the order
 * is total (equal names by position), so any qsort gives the same index. */
#include "nn/names.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t compares;

uint64_t tg__name_compares(void)
{
    return atomic_load_explicit(&compares, memory_order_relaxed);
}

void tg__name_compared(uint64_t n)
{
    atomic_fetch_add_explicit(&compares, n, memory_order_relaxed);
}

bool tg__names_init(tg__names *ix, size_t cap)
{
    ix->n = 0;
    ix->cap = cap;
    ix->e = tg__calloc(cap ? cap : 1, sizeof *ix->e);
    return ix->e != NULL;
}

void tg__names_free(tg__names *ix)
{
    free(ix->e);
    ix->e = NULL;
    ix->n = ix->cap = 0;
}

static int by_name(const void *pa, const void *pb)
{
    const tg__named *a = pa, *b = pb;
    tg__name_compared(1);
    int c = strcmp(a->name, b->name);
    if (c)
        return c;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

const char *tg__names_sort(tg__names *ix)
{
    if (ix->n > 1)
        qsort(ix->e, ix->n, sizeof *ix->e, by_name);
    tg__name_compared(ix->n ? ix->n - 1 : 0); /* the neighbours, below */
    const tg__named *first = NULL; /* the earliest repeat in list order */
    for (size_t i = 1; i < ix->n; i++)
        if (strcmp(ix->e[i - 1].name, ix->e[i].name) == 0 &&
            (!first || ix->e[i].pos < first->pos))
            first = &ix->e[i];
    return first ? first->name : NULL;
}

/* The first entry whose name is not below name: lo..hi bisected, log2 n
 * comparisons. */
int64_t tg__names_find(const tg__names *ix, const char *name)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        tg__name_compared(1);
        if (strcmp(ix->e[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ix->n && strcmp(ix->e[lo].name, name) == 0)
        return (int64_t)ix->e[lo].pos;
    return -1;
}
