/* tapegrad dist: how the ranks agree, and how a job ends when they cannot
 * (include/tapegrad_dist.h).
 *
 *   tg_dist_agree, tg_dist_agree_why: every rank brings its status; one
 *     MPI_Allreduce(MIN) of "my rank if I failed, else the world size"
 *     gives the lowest failing rank (the world size: none failed), whose
 *     message then goes to every rank by one MPI_Bcast of a fixed-size
 *     buffer. Every rank returns the same status and holds the same error,
 *     "rank R: <message>". Two collectives when a rank failed, one when
 *     none did.
 *   tg_dist_check_same: every rank's text for one setting, gathered
 *     (MPI_Allgather of fixed-size slots), so that every rank sees every
 *     value and names the same disagreement without a further message.
 *   tg_dist_abort: for a rank that failed where the others cannot learn it
 *     (outside any agreement: they wait in a collective it will never
 *     reach), MPI_Abort ends every process of the job. The library calls
 *     it only when the program does. */
#include <config.h>

#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A setting's text travels in a slot of this many bytes (NUL included). */
#define VALUE_MAX 128

/* The outcome agreed; why (NULL: tg_last_error) is this rank's message
 * when it failed. */
static int agree(tg_dist *d, int status, const char *why)
{
    const char *mine = why ? why : tg_last_error();
    if (!*mine)
        mine = "failed";
    char msg[MSG_MAX];
    memset(msg, 0, sizeof msg);
    if (!talks(d)) {
        if (status == 0)
            return 0;
        snprintf(msg, sizeof msg, "%s", mine);
        tg__x_error("rank %d: %s", d ? d->rank : 0, msg);
        return -1;
    }
#ifdef TG_HAVE_MPI
    int me = status ? d->rank : d->size, low = d->size;
    MPI_CHECK("dist_agree",
              MPI_Allreduce(&me, &low, 1, MPI_INT, MPI_MIN, d->comm));
    if (low == d->size)
        return 0;
    if (d->rank == low)
        snprintf(msg, sizeof msg, "%s", mine);
    MPI_CHECK("dist_agree", MPI_Bcast(msg, MSG_MAX, MPI_CHAR, low, d->comm));
    msg[MSG_MAX - 1] = '\0';
    tg__x_error("rank %d: %s", low, msg);
#endif
    return -1;
}

int tg_dist_agree(tg_dist *d, int status) { return agree(d, status, NULL); }

int tg_dist_agree_why(tg_dist *d, int status, const char *why)
{
    return agree(d, status, why);
}

#ifdef TG_HAVE_MPI
/* "<op>: the ranks disagree on <what>: <v0> on rank 0, <v1> on rank 1,
 * ..." from the gathered slots, cut with "..." where the message ends. */
static void disagree(const char *op, const char *what, const char *all,
                     int size)
{
    char msg[MSG_MAX];
    size_t k = 0, cap = sizeof msg - 8; /* room for ", ..." */
    for (int r = 0; r < size && k < cap; r++)
        k += (size_t)snprintf(msg + k, cap - k, "%s'%s' on rank %d",
                              r ? ", " : "", all + (size_t)r * VALUE_MAX, r);
    if (k >= cap)
        snprintf(msg + cap - 1, sizeof msg - cap + 1, ", ...");
    tg__x_error("%s: the ranks disagree on %s: %s", op, what, msg);
}
#endif

int tg_dist_check_same(tg_dist *d, const char *what, const char *value)
{
    static const char op[] = "dist_check_same";
    int st = 0;
    if (!what || !value) {
        tg__x_error("%s: %s is NULL", op, what ? "the value" : "what");
        st = -1;
    } else if (strlen(value) >= VALUE_MAX) {
        tg__x_error("%s: %s: the value '%.40s...' is longer than %d "
                    "characters",
                    op, what, value, VALUE_MAX - 1);
        st = -1;
    }
    char *all = NULL;
#ifdef TG_HAVE_MPI
    if (st == 0 && talks(d) &&
        !(all = tg__x_calloc((size_t)d->size, VALUE_MAX))) {
        tg__x_error("%s: out of memory for %d values", op, d->size);
        st = -1;
    }
#endif
    if (tg_dist_agree(d, st) < 0 || !talks(d)) {
        free(all);
        return st == 0 && !talks(d) ? 0 : -1;
    }
    int rc = 0;
#ifdef TG_HAVE_MPI
    char mine[VALUE_MAX] = {0};
    snprintf(mine, sizeof mine, "%s", value);
    int mpi = MPI_Allgather(mine, VALUE_MAX, MPI_CHAR, all, VALUE_MAX, MPI_CHAR,
                            d->comm);
    if (mpi != MPI_SUCCESS)
        rc = tg__dist_mpi_fail(op, "MPI_Allgather", mpi);
    for (int r = 1; rc == 0 && r < d->size; r++)
        if (strcmp(all + (size_t)r * VALUE_MAX, all) != 0) {
            disagree(op, what, all, d->size);
            rc = -1;
        }
#endif
    free(all);
    return rc;
}

void tg_dist_abort(tg_dist *d, int code)
{
    /* what the program said before it asked: the kill loses buffers */
    fflush(stdout);
    fflush(stderr);
#ifdef TG_HAVE_MPI
    if (talks(d))
        MPI_Abort(d->comm, code);
#else
    (void)d;
    (void)code;
#endif
}
