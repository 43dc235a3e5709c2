/* Private to libtapegrad_dist (dist/): what its files share. The tg_dist
 * itself (dist/world.c makes it), the messages and the MPI failure every
 * file reports with, and the steps over a parameter list that both ways of
 * reducing gradients take: the blocking collectives (dist/collectives.c)
 * and the all-reduce overlapped with backward (dist/ddp.c).
 *
 * Include <config.h> first: TG_HAVE_MPI decides whether a tg_dist holds a
 * communicator. The helpers are hidden, so that the library exports only
 * the public tg_ names, and carry tg__dist_, so that they meet no name of
 * libtapegrad's or a program's when the libraries are linked statically. */
#ifndef TAPEGRAD_DIST_DIST_H
#define TAPEGRAD_DIST_DIST_H

#ifdef TG_HAVE_MPI
#include <mpi.h>
#endif

#include "tapegrad_dist.h"

#include "core/exported.h"

#include <stddef.h>
#include <stdint.h>

#define TG_DIST_HIDDEN __attribute__((visibility("hidden")))

/* The error buffer's size in libtapegrad (core/error.c): a message of
 * another rank travels in one fixed-size broadcast. */
#define MSG_MAX 1024

struct tg_dist {
#ifdef TG_HAVE_MPI
    MPI_Comm comm; /* MPI_COMM_NULL for a one-process tg_dist */
    bool finalize; /* tg_dist_init called MPI_Init_thread */
#endif
    int rank, size;
};

/* The dtypes gradients are reduced in. */
static inline bool is_float(tg_dtype dt)
{
    return dt == TG_FLOAT32 || dt == TG_FLOAT64;
}

/* Communication happens only with MPI and more than one rank. */
static inline bool talks(const tg_dist *d)
{
#ifdef TG_HAVE_MPI
    return d && d->size > 1;
#else
    (void)d;
    return false;
#endif
}

/* ---- messages (dist/world.c) --------------------------------------- */

/* "(8,4)" into buf (at least 200 bytes: 8 dims of 20 digits). */
TG_DIST_HIDDEN const char *tg__dist_shape_str(int ndim, const int64_t *shape,
                                              char *buf, size_t n);

#ifdef TG_HAVE_MPI
/* An MPI call's failure as our error (the communicator returns errors:
 * MPI_ERRORS_RETURN): "<op>: <what> failed: <MPI's words>"; returns -1. */
TG_DIST_HIDDEN int tg__dist_mpi_fail(const char *op, const char *what,
                                     int code);
/* The MPI call, and on its failure the function returns -1 with it as the
 * error (tg__dist_mpi_fail). */
#define MPI_CHECK(op, call)                                                    \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS)                                                \
            return tg__dist_mpi_fail(op, #call, rc_);                          \
    } while (0)
#endif

/* ---- parameter lists (dist/params.c) ------------------------------- */

/* The checks one rank makes alone: a list, and a tensor in each entry.
 * 0, or -1 with "<op>: ..." set. */
TG_DIST_HIDDEN int tg__dist_params_check(const char *op, const tg_params *ps);

/* Collective, on more than one rank, after the local checks agreed: 0 when
 * every rank lists the same names, dtypes and shapes in the same order,
 * else -1 on every rank with the first difference as the error ("<op>:
 * parameter 3 'w_q' is float32 (8,4) on rank 0 but (4,8) on rank 1"). */
TG_DIST_HIDDEN int tg__dist_compare_params(tg_dist *d, const char *op,
                                           const tg_params *ps);

/* ---- gradients (dist/collectives.c) -------------------------------- */

/* Gives the leaf t a gradient of zeros (for a parameter some other rank has
 * a gradient of and this one has not). 0, or -1 with its error set. */
TG_DIST_HIDDEN int tg__dist_zero_grad_of(tg_tensor *t);

/* Which parameters have a gradient on some rank: has[i] in (0/1), the
 * MPI_MAX over the ranks out. 0, or -1 on an MPI failure. */
TG_DIST_HIDDEN int tg__dist_any_rank_has(tg_dist *d, const char *op,
                                         unsigned char *has, int n);

#ifdef TG_HAVE_MPI
/* The mean of n summed values of dtype dt (float32 or float64) in place:
 * each divided by size. */
TG_DIST_HIDDEN void tg__dist_divide(void *buf, tg_dtype dt, int64_t n,
                                    int size);
#endif

#endif /* TAPEGRAD_DIST_DIST_H */
