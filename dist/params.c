/* tapegrad dist: is the parameter list the same on every rank? Each rank
 * checks its own list alone (tg__dist_params_check); then, collectively,
 * the ranks compare the lists' names, dtypes and shapes by digest, and
 * name the first parameter that differs (tg_dist_check_params, and the
 * first step of every call that communicates parameters or gradients). */
#include <config.h>

#include "dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int tg__dist_params_check(const char *op, const tg_params *ps)
{
    if (!ps) {
        tg__x_error("%s: NULL parameter list", op);
        return -1;
    }
    if (ps->n < 0 || (ps->n > 0 && !ps->items)) {
        tg__x_error("%s: a parameter list of %d items without storage", op,
                    ps->n);
        return -1;
    }
    for (int i = 0; i < ps->n; i++)
        if (!ps->items[i].t) {
            tg__x_error("%s: parameter %d '%s' is NULL", op, i,
                        ps->items[i].name);
            return -1;
        }
    return 0;
}

#ifdef TG_HAVE_MPI
/* FNV-1a, 64 bits, continued from h over n bytes. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}
#define FNV_BASIS 14695981039346656037ULL

/* One parameter's digest: its name, dtype and shape. */
static uint64_t param_digest(const tg_param *p)
{
    uint64_t h = fnv1a(FNV_BASIS, p->name, strlen(p->name) + 1);
    int32_t dt = (int32_t)tg_dtype_of(p->t), nd = (int32_t)tg_ndim(p->t);
    h = fnv1a(h, &dt, sizeof dt);
    h = fnv1a(h, &nd, sizeof nd);
    return fnv1a(h, tg_shape(p->t), (size_t)nd * sizeof(int64_t));
}

/* The whole list's digest: its parameters' digests in order, then the
 * count. */
static uint64_t list_digest(const tg_params *ps)
{
    uint64_t h = FNV_BASIS;
    for (int i = 0; i < ps->n; i++) {
        uint64_t pi = param_digest(&ps->items[i]);
        h = fnv1a(h, &pi, sizeof pi);
    }
    return fnv1a(h, &ps->n, sizeof ps->n);
}

/* "'w_q' is float32 (8,4)", or "missing" when the list has no parameter
 * idx. */
static void describe(const tg_params *ps, int idx, char *buf, size_t n)
{
    if (idx >= ps->n) {
        snprintf(buf, n, "missing");
        return;
    }
    const tg_param *p = &ps->items[idx];
    char s[200];
    snprintf(buf, n, "'%s' is %s %s", p->name, tg_dtype_name(tg_dtype_of(p->t)),
             tg__dist_shape_str(tg_ndim(p->t), tg_shape(p->t), s, sizeof s));
}

#define CHUNK 256

/* Rank 0's per-parameter digests go out CHUNK at a time (its count n0
 * first); *first is this rank's first parameter that differs from rank 0's
 * (n0 when it lists more, INT_MAX when none differs). */
static int first_difference(tg_dist *d, const char *op, const tg_params *ps,
                            int *n0_out, int *first)
{
    int n0 = ps->n; /* the error names the call as written: "&n0" */
    MPI_CHECK(op, MPI_Bcast(&n0, 1, MPI_INT, 0, d->comm));
    *n0_out = n0;
    *first = INT_MAX;
    uint64_t chunk[CHUNK];
    for (int base = 0; base < n0; base += CHUNK) {
        int m = n0 - base < CHUNK ? n0 - base : CHUNK;
        if (d->rank == 0)
            for (int j = 0; j < m; j++)
                chunk[j] = param_digest(&ps->items[base + j]);
        MPI_CHECK(op, MPI_Bcast(chunk, m, MPI_UINT64_T, 0, d->comm));
        for (int j = 0; j < m && *first == INT_MAX; j++)
            if (base + j >= ps->n ||
                param_digest(&ps->items[base + j]) != chunk[j])
                *first = base + j;
    }
    if (*first == INT_MAX && ps->n > n0)
        *first = n0;
    return 0;
}

/* Parameter idx as rank 0 and rank r list it, each described by its own
 * rank and broadcast, as every rank's error; returns -1. */
static int report_difference(tg_dist *d, const char *op, const tg_params *ps,
                             int n0, int idx, int r)
{
    char on0[512], onr[512];
    memset(on0, 0, sizeof on0);
    memset(onr, 0, sizeof onr);
    if (d->rank == 0)
        describe(ps, idx, on0, sizeof on0);
    if (d->rank == r)
        describe(ps, idx, onr, sizeof onr);
    MPI_CHECK(op, MPI_Bcast(on0, sizeof on0, MPI_CHAR, 0, d->comm));
    MPI_CHECK(op, MPI_Bcast(onr, sizeof onr, MPI_CHAR, r, d->comm));
    on0[sizeof on0 - 1] = onr[sizeof onr - 1] = '\0';
    /* "parameter 3 'w_q' is float32 (8,4) on rank 0 but ..." */
    if (strcmp(on0, "missing") == 0)
        tg__x_error("%s: parameter %d is missing on rank 0 (it lists %d) "
                    "but %s on rank %d",
                    op, idx, n0, onr, r);
    else if (strcmp(onr, "missing") == 0)
        tg__x_error("%s: parameter %d %s on rank 0 but is missing on rank %d",
                    op, idx, on0, r);
    else {
        /* the same name: "... on rank 0 but float32 (4,8) on rank 1" */
        const char *is = strstr(on0, "' is ");
        size_t k = is ? (size_t)(is - on0) + 5 : 0;
        const char *theirs = k && strncmp(on0, onr, k) == 0 ? onr + k : onr;
        tg__x_error("%s: parameter %d %s on rank 0 but %s on rank %d", op, idx,
                    on0, theirs, r);
    }
    return -1;
}
#endif

/* The digest of the whole list compared by MIN and MAX; on a difference,
 * each rank finds its first parameter that differs from rank 0's, and the
 * lowest (index, rank) pair (MINLOC) is described by rank 0 and by that
 * rank. */
int tg__dist_compare_params(tg_dist *d, const char *op, const tg_params *ps)
{
#ifdef TG_HAVE_MPI
    uint64_t h = list_digest(ps), lo = 0, hi = 0;
    MPI_CHECK(op, MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, d->comm));
    MPI_CHECK(op, MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, d->comm));
    if (lo == hi)
        return 0;
    int n0 = 0, first = INT_MAX;
    if (first_difference(d, op, ps, &n0, &first) < 0)
        return -1;
    struct {
        int index, rank;
    } mine = {first, d->rank}, low;
    MPI_CHECK(op, MPI_Allreduce(&mine, &low, 1, MPI_2INT, MPI_MINLOC, d->comm));
    if (low.index == INT_MAX) { /* the digests collided the other way round */
        tg__x_error("%s: the parameter lists differ between ranks", op);
        return -1;
    }
    return report_difference(d, op, ps, n0, low.index, low.rank);
#else
    (void)d;
    (void)op;
    (void)ps;
    return 0;
#endif
}

int tg_dist_check_params(tg_dist *d, const tg_params *ps)
{
    int st = tg__dist_params_check("dist_check_params", ps);
    if (tg_dist_agree(d, st) < 0)
        return -1;
    if (!talks(d))
        return 0;
    return tg__dist_compare_params(d, "dist_check_params", ps);
}
