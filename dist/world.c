/* tapegrad dist: the world a tg_dist stands for (include/tapegrad_dist.h).
 * Joining it (MPI, or without MPI the one process), its rank and size.
 * The agreement every public call of the library makes on its outcome is
 * dist/agree.c's.
 *
 * libtapegrad_dist is its own library, on libtapegrad's public API (plus
 * the few helpers core/exported.h exports for it), so that a program that
 * does not use it never links MPI. Built without MPI (TG_HAVE_MPI
 * undefined), every call works for one process.
 *
 * The rule that keeps a job from hanging: a rank never skips a collective
 * because it failed locally. Each public call first checks what it can
 * alone, then agrees on the outcome (tg_dist_agree, dist/agree.c), and
 * only then communicates data; a failure found in the middle (a gradient
 * missing, no memory) still takes part in every remaining collective, with
 * zeros, and the call agrees at its end. */
#include <config.h>

#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ------------------------------------------------------ */

const char *tg__dist_shape_str(int ndim, const int64_t *shape, char *buf,
                               size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
                              (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, ")");
    return buf;
}

#ifdef TG_HAVE_MPI
/* After an MPI failure the job's state is unknown: the call returns -1 on
 * this rank; the others may see their own failure or hang in their next
 * collective, which is what MPI_Abort is for, and the library leaves that
 * choice to the program. */
int tg__dist_mpi_fail(const char *op, const char *what, int code)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", code);
    tg__x_error("%s: %s failed: %s", op, what, s);
    return -1;
}
#endif

/* ---- joining ------------------------------------------------------- */

bool tg_dist_available(void)
{
#ifdef TG_HAVE_MPI
    return true;
#else
    return false;
#endif
}

#ifndef TG_HAVE_MPI
/* The world size a launcher announces in the environment (Open MPI, MPICH
 * and Slurm's PMI, PMIx), or 1. */
static long launcher_size(const char **var)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                       "PMIX_SIZE", "PMI_UNIVERSE_SIZE",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            long n = strtol(v, NULL, 10);
            if (n > 1) {
                *var = vars[i];
                return n;
            }
        }
    }
    return 1;
}
#endif

#ifdef TG_HAVE_MPI
static tg_dist *from_comm(MPI_Comm comm, bool finalize)
{
    tg_dist *d = tg__x_calloc(1, sizeof *d);
    if (!d) {
        tg__x_error("dist_init: out of memory");
        return NULL;
    }
    d->finalize = finalize;
    int rc = MPI_Comm_dup(comm, &d->comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(d->comm, &d->rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(d->comm, &d->size);
    if (rc != MPI_SUCCESS) {
        tg__dist_mpi_fail("dist_init", "joining the communicator", rc);
        if (d->comm != MPI_COMM_NULL)
            MPI_Comm_free(&d->comm);
        free(d);
        return NULL;
    }
    return d;
}

tg_dist *tg_dist_from_comm(MPI_Comm comm)
{
    int on = 0;
    MPI_Initialized(&on);
    if (!on || comm == MPI_COMM_NULL) {
        tg__x_error("dist_from_comm: %s",
                    on ? "MPI_COMM_NULL given" : "MPI is not initialized");
        return NULL;
    }
    return from_comm(comm, false);
}
#endif

tg_dist *tg_dist_init(int *argc, char ***argv)
{
#ifdef TG_HAVE_MPI
    int on = 0, done = 0;
    MPI_Initialized(&on);
    MPI_Finalized(&done);
    if (done) {
        tg__x_error("dist_init: MPI was finalized already");
        return NULL;
    }
    bool mine = false;
    if (!on) {
        int provided = 0;
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            tg__x_error("dist_init: MPI_Init_thread failed (error %d)", rc);
            return NULL;
        }
        /* the library's own threads (the pool, OpenBLAS) run inside a
         * call, but every MPI call comes from the thread that initialized
         * MPI: FUNNELED is what that needs, and less is refused */
        if (provided < MPI_THREAD_FUNNELED) {
            tg__x_error("dist_init: MPI gives thread level %d, below "
                        "MPI_THREAD_FUNNELED (%d) that the library needs",
                        provided, MPI_THREAD_FUNNELED);
            MPI_Finalize();
            return NULL;
        }
        mine = true;
    }
    tg_dist *d = from_comm(MPI_COMM_WORLD, mine);
    if (!d && mine)
        MPI_Finalize();
    return d;
#else
    (void)argc;
    (void)argv;
    const char *var = NULL;
    long n = launcher_size(&var);
    if (n > 1) {
        tg__x_error("dist_init: started as one of %ld ranks (%s=%ld), but "
                    "libtapegrad_dist was built without MPI: reconfigure "
                    "tapegrad with --with-mpi (apt-get install libopenmpi-dev)",
                    n, var, n);
        return NULL;
    }
    tg_dist *d = tg__x_calloc(1, sizeof *d);
    if (!d) {
        tg__x_error("dist_init: out of memory");
        return NULL;
    }
    d->rank = 0;
    d->size = 1;
    return d;
#endif
}

void tg_dist_free(tg_dist *d)
{
    if (!d)
        return;
#ifdef TG_HAVE_MPI
    if (d->comm != MPI_COMM_NULL)
        MPI_Comm_free(&d->comm);
    int done = 0;
    MPI_Finalized(&done);
    if (d->finalize && !done)
        MPI_Finalize();
#endif
    free(d);
}

int tg_dist_rank(const tg_dist *d) { return d ? d->rank : 0; }
int tg_dist_size(const tg_dist *d) { return d ? d->size : 1; }
