/* Private to nn/: an index of names sorted once, for what the loaders and
 * savers ask of a whole list of names (nn/names.c): is a name held twice,
 * and where is the one called x. A scan of the list for every name made
 * reading a file of n tensors take n^2 / 2 comparisons (40,000 tensors:
 * 800 million, seconds); sorted, it takes about n log2 n, and a lookup
 * log2 n. Sorting rather than hashing keeps the bound for any names a file
 * may hold: no set of names can make it slower. */
#ifndef TAPEGRAD_NN_NAMES_H
#define TAPEGRAD_NN_NAMES_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One name (borrowed: it must outlive the index) and its position in the
 * caller's list. */
typedef struct tg__named {
    const char *name;
    size_t pos;
} tg__named;

typedef struct tg__names {
    tg__named *e;
    size_t n, cap;
} tg__names;

/* Room for cap names. false when out of memory (the caller words the
 * error, naming what it was reading). */
TG_HIDDEN bool tg__names_init(tg__names *ix, size_t cap);

/* Adds name at position pos; at most cap of them. */
static inline void tg__names_add(tg__names *ix, const char *name, size_t pos)
{
    if (ix->n < ix->cap)
        ix->e[ix->n++] = (tg__named){name, pos};
}

/* Sorts the index by name (equal names by position). Returns the first
 * name, in the order of positions, that repeats one before it (what a scan
 * adding them one by one would stop at), or NULL when every name is there
 * once. */
TG_HIDDEN const char *tg__names_sort(tg__names *ix);

/* After tg__names_sort: the position of the name, or -1 when it is not
 * there (the first position for a name added twice). */
TG_HIDDEN int64_t tg__names_find(const tg__names *ix, const char *name);

TG_HIDDEN void tg__names_free(tg__names *ix);

/* The string comparisons made so far by the lookups by name (the index's
 * sorts and searches, tg_params_get's scan): what the tests bound to hold
 * the readers to n log n. */
TG_HIDDEN uint64_t tg__name_compares(void);
TG_HIDDEN void tg__name_compared(uint64_t n);

#endif /* TAPEGRAD_NN_NAMES_H */
