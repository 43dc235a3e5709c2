/* tapegrad dist: data-parallel training over MPI (include/tapegrad_dist.h).
 *
 * Its own library, libtapegrad_dist, on libtapegrad's public API (plus the
 * few helpers core/exported.h exports for it), so that a program that does
 * not use it never links MPI. Built without MPI (TG_HAVE_MPI undefined),
 * every call works for one process.
 *
 * The rule that keeps a job from hanging: a rank never skips a collective
 * because it failed locally. Each public call first checks what it can
 * alone, then agrees on the outcome (tg_dist_agree: one MPI_Allreduce(MIN)
 * of "my rank if I failed, else the world size", then the lowest failing
 * rank's message by MPI_Bcast), and only then communicates data; a failure
 * found in the middle (a gradient missing, no memory) still takes part in
 * every remaining collective, with zeros, and the call agrees at its end. */
#include <config.h>

#ifdef TG_HAVE_MPI
#include <mpi.h>
#endif

#include "tapegrad_dist.h"

#include "core/exported.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- small helpers ------------------------------------------------- */

static bool is_float(tg_dtype dt)
{
    return dt == TG_FLOAT32 || dt == TG_FLOAT64;
}

/* "(8,4)" into buf (at least 200 bytes: 8 dims of 20 digits). */
static const char *shape_str(int ndim, const int64_t *shape, char *buf,
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Communication happens only with MPI and more than one rank. */
static bool talks(const tg_dist *d)
{
#ifdef TG_HAVE_MPI
    return d && d->size > 1;
#else
    (void)d;
    return false;
#endif
}

#ifdef TG_HAVE_MPI
/* An MPI call's failure as our error (the communicator returns errors:
 * MPI_ERRORS_RETURN). After one, the job's state is unknown: the call
 * returns -1 on this rank; the others may see their own failure or hang
 * in their next collective, which is what MPI_Abort is for, and the library
 * leaves that choice to the program. */
static int mpi_fail(const char *op, const char *what, int code)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", code);
    tg__x_error("%s: %s failed: %s", op, what, s);
    return -1;
}
#define MPI_CHECK(op, call)                                                    \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS)                                                \
            return mpi_fail(op, #call, rc_);                                   \
    } while (0)
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
        mpi_fail("dist_init", "joining the communicator", rc);
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

/* ---- agreement ----------------------------------------------------- */

int tg_dist_agree(tg_dist *d, int status)
{
    int rank = d ? d->rank : 0;
    if (!talks(d)) {
        if (status == 0)
            return 0;
        char msg[MSG_MAX];
        snprintf(msg, sizeof msg, "%s",
                 *tg_last_error() ? tg_last_error() : "failed");
        tg__x_error("rank %d: %s", rank, msg);
        return -1;
    }
#ifdef TG_HAVE_MPI
    int mine = status ? d->rank : d->size, low = d->size;
    MPI_CHECK("dist_agree",
              MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, d->comm));
    if (low == d->size)
        return 0;
    char msg[MSG_MAX];
    memset(msg, 0, sizeof msg);
    if (d->rank == low)
        snprintf(msg, sizeof msg, "%s",
                 *tg_last_error() ? tg_last_error() : "failed");
    MPI_CHECK("dist_agree", MPI_Bcast(msg, MSG_MAX, MPI_CHAR, low, d->comm));
    msg[MSG_MAX - 1] = '\0';
    tg__x_error("rank %d: %s", low, msg);
#endif
    return -1;
}

/* ---- parameter lists ----------------------------------------------- */

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

/* "'w_q' is float32 (8,4)" */
static void describe(const tg_param *p, char *buf, size_t n)
{
    char s[200];
    snprintf(buf, n, "'%s' is %s %s", p->name, tg_dtype_name(tg_dtype_of(p->t)),
             shape_str(tg_ndim(p->t), tg_shape(p->t), s, sizeof s));
}

#endif

/* The checks one rank makes alone: a list, and a tensor in each entry. */
static int local_params_check(const char *op, const tg_params *ps)
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

#define CHUNK 256

/* The collective part of tg_dist_check_params, after the local checks
 * agreed: the digest of the whole list compared by MIN and MAX; on a
 * difference, rank 0's per-parameter digests go out CHUNK at a time, each
 * rank finds its first parameter that differs from rank 0's, and the lowest
 * (index, rank) pair (MINLOC) is described by rank 0 and by that rank. */
static int compare_params(tg_dist *d, const char *op, const tg_params *ps)
{
#ifdef TG_HAVE_MPI
    uint64_t h = FNV_BASIS;
    for (int i = 0; i < ps->n; i++) {
        uint64_t pi = param_digest(&ps->items[i]);
        h = fnv1a(h, &pi, sizeof pi);
    }
    h = fnv1a(h, &ps->n, sizeof ps->n);
    uint64_t lo = 0, hi = 0;
    MPI_CHECK(op, MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, d->comm));
    MPI_CHECK(op, MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, d->comm));
    if (lo == hi)
        return 0;
    int n0 = ps->n;
    MPI_CHECK(op, MPI_Bcast(&n0, 1, MPI_INT, 0, d->comm));
    int first = INT_MAX; /* my first parameter that differs from rank 0's */
    uint64_t chunk[CHUNK];
    for (int base = 0; base < n0; base += CHUNK) {
        int m = n0 - base < CHUNK ? n0 - base : CHUNK;
        if (d->rank == 0)
            for (int j = 0; j < m; j++)
                chunk[j] = param_digest(&ps->items[base + j]);
        MPI_CHECK(op, MPI_Bcast(chunk, m, MPI_UINT64_T, 0, d->comm));
        for (int j = 0; j < m && first == INT_MAX; j++)
            if (base + j >= ps->n ||
                param_digest(&ps->items[base + j]) != chunk[j])
                first = base + j;
    }
    if (first == INT_MAX && ps->n > n0)
        first = n0;
    struct {
        int index, rank;
    } mine = {first, d->rank}, low;
    MPI_CHECK(op, MPI_Allreduce(&mine, &low, 1, MPI_2INT, MPI_MINLOC, d->comm));
    char on0[512], onr[512];
    memset(on0, 0, sizeof on0);
    memset(onr, 0, sizeof onr);
    int idx = low.index, r = low.rank;
    if (idx == INT_MAX) { /* the digests collided the other way round */
        tg__x_error("%s: the parameter lists differ between ranks", op);
        return -1;
    }
    if (d->rank == 0) {
        if (idx < ps->n)
            describe(&ps->items[idx], on0, sizeof on0);
        else
            snprintf(on0, sizeof on0, "missing");
    }
    if (d->rank == r) {
        if (idx < ps->n)
            describe(&ps->items[idx], onr, sizeof onr);
        else
            snprintf(onr, sizeof onr, "missing");
    }
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
#else
    (void)d;
    (void)op;
    (void)ps;
    return 0;
#endif
}

int tg_dist_check_params(tg_dist *d, const tg_params *ps)
{
    int st = local_params_check("dist_check_params", ps);
    if (tg_dist_agree(d, st) < 0)
        return -1;
    if (!talks(d))
        return 0;
    return compare_params(d, "dist_check_params", ps);
}

int tg_dist_broadcast_params(tg_dist *d, const tg_params *ps)
{
    const char *op = "dist_broadcast_params";
    int st = local_params_check(op, ps);
    /* every write first checked, so that a refusal changes nothing */
    if (st == 0 && d && d->rank != 0)
        for (int i = 0; i < ps->n && st == 0; i++)
            if (!tg__x_write_check(op, ps->items[i].t))
                st = -1;
    if (tg_dist_agree(d, st) < 0)
        return -1;
    if (!talks(d))
        return 0;
#ifdef TG_HAVE_MPI
    if (compare_params(d, op, ps) < 0)
        return -1;
    /* Rank 0 reads every parameter into one buffer, all agree that it
     * could, the buffer goes out, and only then does any rank write: a
     * failure anywhere changes no rank's parameters. The buffer starts as
     * zeros, so its bytes are defined whatever rank 0 could read. */
    size_t total = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        total += (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    }
    unsigned char *buf = total ? tg__x_calloc(total, 1) : NULL;
    st = total && !buf ? -1 : 0;
    if (st < 0)
        tg__x_error("%s: out of memory for a buffer of %zu bytes", op, total);
    size_t off = 0;
    for (int i = 0; st == 0 && d->rank == 0 && i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        tg_dtype dt = tg_dtype_of(t);
        size_t bytes = (size_t)tg_numel(t) * tg_dtype_size(dt);
        if (bytes && tg_copy_out(t, dt, buf + off) < 0) {
            st = -1; /* its error is set (a parameter released since the
                        check); nothing is sent */
            memset(buf + off, 0, bytes);
        }
        off += bytes;
    }
    if (tg_dist_agree(d, st) < 0) {
        free(buf);
        return -1;
    }
    for (off = 0; off < total; off += INT_MAX) {
        size_t n = total - off < INT_MAX ? total - off : INT_MAX;
        int rc = MPI_Bcast(buf + off, (int)n, MPI_BYTE, 0, d->comm);
        if (rc != MPI_SUCCESS) { /* nothing written yet */
            free(buf);
            return mpi_fail(op, "MPI_Bcast", rc);
        }
    }
    /* every write checked at the start: these cannot fail */
    off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        tg_dtype dt = tg_dtype_of(t);
        size_t bytes = (size_t)tg_numel(t) * tg_dtype_size(dt);
        if (bytes && d->rank != 0 && tg_copy_in(t, dt, buf + off) < 0)
            st = -1;
        off += bytes;
    }
    free(buf);
    return tg_dist_agree(d, st);
#else
    return 0; /* (not reached: one rank does not talk) */
#endif
}

int tg_dist_mean(tg_dist *d, double *v, int n)
{
    int st = 0;
    if (n < 0 || (n > 0 && !v)) {
        tg__x_error("dist_mean: %s", n < 0 ? "negative count" : "NULL values");
        st = -1;
    }
    if (tg_dist_agree(d, st) < 0)
        return -1;
    if (!talks(d) || n == 0)
        return 0;
#ifdef TG_HAVE_MPI
    MPI_CHECK("dist_mean",
              MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, d->comm));
    for (int i = 0; i < n; i++)
        v[i] /= d->size;
#endif
    return 0;
}

/* ---- gradients ----------------------------------------------------- */

/* Gives the leaf t a gradient of zeros, through the public autograd: the
 * backward of a view of t seeded with zeros, which adds 0 (the library has
 * no call that sets a gradient). For a parameter some other rank has a
 * gradient of and this one has not. */
static int zero_grad_of(tg_tensor *t)
{
    bool was = tg_set_grad_enabled(true);
    int64_t n = tg_numel(t);
    tg_tensor *v = tg_reshape(t, 1, &n);
    tg_tensor *z = v ? tg_zeros(tg_dtype_of(t), 1, &n) : NULL;
    int rc = z ? tg_backward_with(v, z) : -1;
    tg_release(z);
    tg_release(v);
    tg_set_grad_enabled(was);
    return rc;
}

#ifdef TG_HAVE_MPI
/* The mean of n values in place: divided, not multiplied by 1/size, which is
 * not exact for a size like 3. */
static void divide(void *buf, tg_dtype dt, int64_t n, int size)
{
    if (dt == TG_FLOAT32) {
        float *f = buf, s = (float)size;
        for (int64_t i = 0; i < n; i++)
            f[i] /= s;
    } else {
        double *f = buf, s = (double)size;
        for (int64_t i = 0; i < n; i++)
            f[i] /= s;
    }
}
#endif

/* Which parameters have a gradient on some rank: has[i] in, any[i] out
 * (MPI_MAX of 0/1). */
static int any_rank_has(tg_dist *d, const char *op, unsigned char *has, int n)
{
#ifdef TG_HAVE_MPI
    if (talks(d) && n > 0)
        MPI_CHECK(op, MPI_Allreduce(MPI_IN_PLACE, has, n, MPI_UNSIGNED_CHAR,
                                    MPI_MAX, d->comm));
#else
    (void)d;
    (void)op;
    (void)has;
    (void)n;
#endif
    return 0;
}

/* A float parameter's gradient is contiguous and shaped as the parameter
 * (the engine makes it so); checked anyway, as the header promises. */
static int grad_check(const char *op, const tg_param *p, tg_tensor *g)
{
    tg_tensor *t = p->t;
    if (tg_dtype_of(g) != tg_dtype_of(t) || tg_ndim(g) != tg_ndim(t) ||
        memcmp(tg_shape(g), tg_shape(t),
               (size_t)tg_ndim(t) * sizeof(int64_t))) {
        char a[200], b[200];
        tg__x_error("%s: parameter '%s' is %s %s but its gradient %s %s", op,
                    p->name, tg_dtype_name(tg_dtype_of(t)),
                    shape_str(tg_ndim(t), tg_shape(t), a, sizeof a),
                    tg_dtype_name(tg_dtype_of(g)),
                    shape_str(tg_ndim(g), tg_shape(g), b, sizeof b));
        return -1;
    }
    return 0;
}

int tg_dist_allreduce_grads(tg_dist *d, const tg_params *ps)
{
    const char *op = "dist_allreduce_grads";
    int st = local_params_check(op, ps);
    unsigned char *has = NULL;
    if (st == 0 && ps->n > 0) {
        has = tg__x_calloc((size_t)ps->n, 1);
        if (!has) {
            tg__x_error("%s: out of memory", op);
            st = -1;
        }
    }
    for (int i = 0; st == 0 && i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t, *g = tg_grad(t);
        if (!is_float(tg_dtype_of(t)) || !g)
            continue;
        if (grad_check(op, &ps->items[i], g) < 0)
            st = -1;
        has[i] = 1;
    }
    if (tg_dist_agree(d, st) < 0) {
        free(has);
        return -1;
    }
    if (talks(d) && compare_params(d, op, ps) < 0) {
        free(has);
        return -1;
    }
    if (!talks(d)) {
        free(has);
        return 0; /* the mean over one rank is the gradient itself */
    }
    /* the gradients some rank has: zeros where this one has none */
    if (any_rank_has(d, op, has, ps->n) < 0) {
        free(has);
        return -1;
    }
    /* Every step that can fail first, on every rank, then one agree, then
     * the writes, which cannot fail: so that after a failure no gradient
     * is half reduced (the header's promise). The steps: a gradient of
     * zeros where another rank has one, each gradient's write check (a
     * pending tape entry may hold it), the size of one MPI message, and
     * every gradient copied into one buffer of them all (a buffer per
     * parameter would have to write each before reading the next). */
    size_t total = 0;
    for (int i = 0; st == 0 && i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        if (!has[i])
            continue;
        if (tg_numel(t) > INT_MAX) { /* checked alike on every rank */
            tg__x_error("%s: parameter '%s' has %lld elements, more than one "
                        "MPI message holds",
                        op, ps->items[i].name, (long long)tg_numel(t));
            st = -1;
            break;
        }
        total += (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
        if (!tg_grad(t) && zero_grad_of(t) < 0)
            st = -1;
        else if (!tg__x_write_check(op, tg_grad(t)))
            st = -1;
    }
    unsigned char *buf = st == 0 && total ? tg__x_malloc(total) : NULL;
    if (st == 0 && total && !buf) {
        tg__x_error("%s: out of memory for a buffer of %zu bytes", op, total);
        st = -1;
    }
    size_t off = 0;
    for (int i = 0; st == 0 && i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        tg_dtype dt = tg_dtype_of(t);
        size_t b = (size_t)tg_numel(t) * tg_dtype_size(dt);
        if (!has[i] || b == 0)
            continue;
        if (tg_copy_out(tg_grad(t), dt, buf + off) < 0)
            st = -1; /* its error is set */
        off += b;
    }
    if (tg_dist_agree(d, st) < 0) {
        free(buf);
        free(has);
        return -1;
    }
#ifdef TG_HAVE_MPI
    off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        int64_t n = tg_numel(t);
        if (!has[i] || n == 0)
            continue;
        tg_dtype dt = tg_dtype_of(t);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n,
                               dt == TG_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE,
                               MPI_SUM, d->comm);
        if (rc != MPI_SUCCESS) { /* nothing written yet */
            free(buf);
            free(has);
            return mpi_fail(op, "MPI_Allreduce", rc);
        }
        divide(buf + off, dt, n, d->size);
        off += (size_t)n * tg_dtype_size(dt);
    }
    /* checked above: these writes cannot fail */
    off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        int64_t n = tg_numel(t);
        if (!has[i] || n == 0)
            continue;
        tg_dtype dt = tg_dtype_of(t);
        if (tg_copy_in(tg_grad(t), dt, buf + off) < 0)
            st = -1;
        off += (size_t)n * tg_dtype_size(dt);
    }
#endif
    free(buf);
    free(has);
    return tg_dist_agree(d, st);
}

/* ---- shards -------------------------------------------------------- */

int tg_dist_shard(const tg_dist *d, int64_t n, int64_t *begin, int64_t *end)
{
    int size = tg_dist_size(d), rank = tg_dist_rank(d);
    if (!begin || !end) {
        tg__x_error("dist_shard: NULL begin or end");
        return -1;
    }
    if (n < size) {
        tg__x_error("dist_shard: %lld items cannot be shared among %d ranks "
                    "(some rank would get none)",
                    (long long)n, size);
        return -1;
    }
    int64_t q = n / size, r = n % size;
    *begin = rank * q + (rank < r ? rank : r);
    *end = *begin + q + (rank < r ? 1 : 0);
    return 0;
}

tg_tensor *tg_dist_shard_rows(const tg_dist *d, tg_tensor *t,
                              tg_shard_kind kind)
{
    if (!t)
        return NULL; /* keeps the error of the call that gave NULL */
    if (tg_ndim(t) == 0) {
        tg__x_error("dist_shard_rows: a 0-d tensor has no rows");
        return NULL;
    }
    int64_t n = tg_shape(t)[0], lo, hi;
    if (kind != TG_SHARD_CONTIGUOUS && kind != TG_SHARD_STRIDED) {
        tg__x_error("dist_shard_rows: unknown shard kind %d", (int)kind);
        return NULL;
    }
    if (tg_dist_shard(d, n, &lo, &hi) < 0) {
        char s[200];
        tg__x_error("dist_shard_rows: a tensor of shape %s has %lld rows, "
                    "fewer than the %d ranks",
                    shape_str(tg_ndim(t), tg_shape(t), s, sizeof s),
                    (long long)n, tg_dist_size(d));
        return NULL;
    }
    if (kind == TG_SHARD_CONTIGUOUS)
        return tg_narrow(t, 0, lo, hi - lo);
    /* Strided: rows rank, rank + size, ... The first q * size rows, seen as
     * (q, size, ...), give q of them as one select; a rank below n % size
     * has one more, row q * size + rank, joined by a copy (tg_cat). */
    int size = tg_dist_size(d), rank = tg_dist_rank(d), nd = tg_ndim(t);
    int64_t q = n / size, r = n % size;
    int64_t shp[9];
    shp[0] = q;
    shp[1] = size;
    memcpy(shp + 2, tg_shape(t) + 1, (size_t)(nd - 1) * sizeof(int64_t));
    tg_tensor *head = tg_narrow(t, 0, 0, q * size);
    tg_tensor *grid = tg_reshape(head, nd + 1, shp);
    tg_release(head);
    tg_tensor *mine = tg_select(grid, 1, rank);
    tg_release(grid);
    if (!mine || rank >= r)
        return mine;
    tg_tensor *last = tg_narrow(t, 0, q * size + rank, 1);
    tg_tensor *both[2] = {mine, last};
    tg_tensor *out = last ? tg_cat(both, 2, 0) : NULL;
    tg_release(last);
    tg_release(mine);
    return out;
}

/* ---- tg_ddp: all-reduce overlapped with backward -------------------- */

typedef struct ddp_param {
    tg_ddp *owner;
    tg_tensor *t;
    int bucket;
    int64_t offset, numel; /* in elements, into the bucket's buffer */
    bool ready;            /* copied into its bucket this step */
} ddp_param;

typedef struct ddp_bucket {
    tg_dtype dt;
    int64_t numel;
    int n_params, pending; /* pending: parameters not yet ready */
    unsigned char *buf;
#ifdef TG_HAVE_MPI
    MPI_Request req;
#endif
} ddp_bucket;

struct tg_ddp {
    tg_dist *d;
    const char *op;
    int n, nb;
    ddp_param *params;
    ddp_bucket *buckets;
    unsigned char *has; /* has[i]: parameter i had a gradient this step */
    int next;           /* the next bucket to start */
    bool active;        /* inside tg_ddp_backward's tg_backward */
    int failed;         /* a local failure during the step, its error set */
    int mpi_rc;         /* the first MPI failure of the step */
    tg_ddp_stats stats;
};

/* Starts every bucket that is ready, in index order: bucket k starts only
 * after 0..k-1 have, so that every rank starts the same collectives in the
 * same order whatever order its gradients came in. */
static void launch_ready(tg_ddp *p)
{
    while (p->next < p->nb && p->buckets[p->next].pending == 0) {
        ddp_bucket *b = &p->buckets[p->next++];
#ifdef TG_HAVE_MPI
        b->req = MPI_REQUEST_NULL;
        if (b->numel == 0 || p->mpi_rc != MPI_SUCCESS)
            continue;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->numel,
                                b->dt == TG_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE,
                                MPI_SUM, p->d->comm, &b->req);
        if (rc != MPI_SUCCESS) {
            p->mpi_rc = rc;
            b->req = MPI_REQUEST_NULL;
        }
#else
        (void)b;
#endif
    }
}

/* Parameter pp's gradient, final now, into its place in its bucket (zeros
 * when it has none). */
static void param_ready(tg_ddp *p, ddp_param *pp)
{
    ddp_bucket *b = &p->buckets[pp->bucket];
    tg_tensor *g = tg_grad(pp->t);
    size_t es = tg_dtype_size(b->dt);
    unsigned char *dst = b->buf + (size_t)pp->offset * es;
    p->has[pp - p->params] = g != NULL;
    if (pp->numel > 0) {
        if (!g || tg_copy_out(g, b->dt, dst) < 0) {
            if (g && !p->failed)
                p->failed = -1; /* its error is set */
            memset(dst, 0, (size_t)pp->numel * es);
        }
    }
    pp->ready = true;
    b->pending--;
}

/* Drives the started, unfinished buckets on. Open MPI's nonblocking
 * collectives (libnbc) advance their rounds only inside MPI calls (there is
 * no progress thread by default): without a call between gradients, a
 * started bucket would move its data only in the MPI_Wait after backward.
 * One MPI_Test per started bucket still pending, at every hook, lets each
 * round go while backward computes the next gradients. A request that
 * MPI_Test completes becomes MPI_REQUEST_NULL, which the wait skips. */
static void progress(tg_ddp *p)
{
#ifdef TG_HAVE_MPI
    for (int k = 0; k < p->next && p->mpi_rc == MPI_SUCCESS; k++) {
        ddp_bucket *b = &p->buckets[k];
        if (b->req == MPI_REQUEST_NULL)
            continue;
        int flag = 0;
        int rc = MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            p->mpi_rc = rc;
    }
#else
    (void)p;
#endif
}

/* The post-accumulate-grad hook: the gradient is final, its bucket may go,
 * and the buckets started before it advance. */
static void ddp_hook(tg_tensor *t, void *ctx)
{
    (void)t;
    ddp_param *pp = ctx;
    tg_ddp *p = pp->owner;
    if (!p->active || pp->ready)
        return;
    param_ready(p, pp);
    launch_ready(p);
    progress(p);
}

void tg_ddp_free(tg_ddp *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        if (p->params[i].t)
            tg_register_post_accumulate_grad_hook(p->params[i].t, NULL, NULL);
    for (int k = 0; k < p->nb; k++)
        free(p->buckets[k].buf);
    free(p->buckets);
    free(p->params);
    free(p->has);
    free(p);
}

/* Groups the parameters into buckets, from the last to the first (the
 * order backward finishes them in): a bucket takes parameters of one dtype
 * while their bytes fit in limit; a parameter larger than limit gets a
 * bucket of its own. Returns the count; with assign, records each
 * parameter's bucket and offset and each bucket's size. */
static int plan_buckets(tg_ddp *p, size_t limit, bool assign)
{
    int nb = 0;
    size_t bytes = 0;
    tg_dtype dt = TG_FLOAT32;
    for (int i = p->n - 1; i >= 0; i--) {
        ddp_param *pp = &p->params[i];
        tg_dtype pdt = tg_dtype_of(pp->t);
        size_t b = (size_t)pp->numel * tg_dtype_size(pdt);
        if (nb == 0 || pdt != dt || (bytes > 0 && bytes + b > limit)) {
            nb++;
            bytes = 0;
            dt = pdt;
            if (assign) {
                p->buckets[nb - 1].dt = pdt;
                p->buckets[nb - 1].numel = 0;
                p->buckets[nb - 1].n_params = 0;
            }
        }
        bytes += b;
        if (assign) {
            ddp_bucket *bk = &p->buckets[nb - 1];
            pp->bucket = nb - 1;
            pp->offset = bk->numel;
            bk->numel += pp->numel;
            bk->n_params++;
        }
    }
    return nb;
}

tg_ddp *tg_ddp_new(tg_dist *d, const tg_params *ps, size_t bucket_bytes)
{
    const char *op = "ddp_new";
    int st = local_params_check(op, ps);
    for (int i = 0; st == 0 && i < ps->n; i++) {
        const tg_param *q = &ps->items[i];
        char s[200];
        if (!is_float(tg_dtype_of(q->t)) || !tg_is_leaf(q->t)) {
            tg__x_error("%s: parameter %d '%s' (%s %s) is %s", op, i, q->name,
                        tg_dtype_name(tg_dtype_of(q->t)),
                        shape_str(tg_ndim(q->t), tg_shape(q->t), s, sizeof s),
                        tg_is_leaf(q->t) ? "not float32 or float64"
                                         : "not a leaf (an op's output)");
            st = -1;
        } else if (tg_numel(q->t) > INT_MAX) {
            tg__x_error("%s: parameter %d '%s' has %lld elements, more than "
                        "one MPI message holds",
                        op, i, q->name, (long long)tg_numel(q->t));
            st = -1;
        }
        for (int j = 0; st == 0 && j < i; j++)
            if (ps->items[j].t == q->t) {
                tg__x_error("%s: parameters %d '%s' and %d '%s' are the same "
                            "tensor",
                            op, j, ps->items[j].name, i, q->name);
                st = -1;
            }
    }
    tg_ddp *p = NULL;
    if (st == 0) {
        p = tg__x_calloc(1, sizeof *p);
        if (p && ps->n > 0) {
            p->params = tg__x_calloc((size_t)ps->n, sizeof *p->params);
            p->has = tg__x_calloc((size_t)ps->n, 1);
        }
        if (!p || (ps->n > 0 && (!p->params || !p->has))) {
            tg__x_error("%s: out of memory", op);
            st = -1;
        }
    }
    if (st == 0) {
        p->d = d;
        p->n = ps->n;
        for (int i = 0; i < ps->n; i++)
            p->params[i] = (ddp_param){p, ps->items[i].t,           0,
                                       0, tg_numel(ps->items[i].t), false};
        size_t limit = bucket_bytes ? bucket_bytes : (size_t)25 << 20;
        p->nb = plan_buckets(p, limit, false);
        p->buckets =
            p->nb ? tg__x_calloc((size_t)p->nb, sizeof *p->buckets) : NULL;
        if (p->nb && !p->buckets) {
            tg__x_error("%s: out of memory", op);
            st = -1;
        } else {
            plan_buckets(p, limit, true);
            for (int k = 0; st == 0 && k < p->nb; k++) {
                ddp_bucket *b = &p->buckets[k];
                size_t bytes = (size_t)b->numel * tg_dtype_size(b->dt);
                if (bytes && !(b->buf = tg__x_malloc(bytes))) {
                    tg__x_error("%s: out of memory for a bucket of %zu bytes",
                                op, bytes);
                    st = -1;
                }
                if (b->numel > INT_MAX) {
                    tg__x_error("%s: a bucket of %lld elements is more than "
                                "one MPI message holds: give a smaller "
                                "bucket_bytes",
                                op, (long long)b->numel);
                    st = -1;
                }
            }
        }
    }
    if (tg_dist_agree(d, st) < 0 ||
        (talks(d) && compare_params(d, op, ps) < 0)) {
        if (p)
            p->n = 0; /* no hooks installed yet */
        tg_ddp_free(p);
        return NULL;
    }
    for (int i = 0; i < p->n; i++)
        tg_register_post_accumulate_grad_hook(p->params[i].t, ddp_hook,
                                              &p->params[i]);
    p->stats.buckets = p->nb;
    for (int k = 0; k < p->nb; k++)
        p->stats.bytes +=
            p->buckets[k].numel * (int64_t)tg_dtype_size(p->buckets[k].dt);
    return p;
}

int tg_ddp_backward(tg_ddp *p, tg_tensor *loss)
{
    const char *op = "ddp_backward";
    if (!p) {
        tg__x_error("%s: NULL tg_ddp", op);
        return -1;
    }
    tg_dist *d = p->d;
    int st = 0;
    if (!loss) {
        if (!*tg_last_error())
            tg__x_error("%s: no loss (NULL)", op);
        st = -1;
    } else if (tg_numel(loss) != 1 || !is_float(tg_dtype_of(loss))) {
        char s[200];
        tg__x_error("%s: the loss must be one float element, got %s %s", op,
                    tg_dtype_name(tg_dtype_of(loss)),
                    shape_str(tg_ndim(loss), tg_shape(loss), s, sizeof s));
        st = -1;
    }
    if (tg_dist_agree(d, st) < 0)
        return -1;
    double t0 = now_s();
    if (!talks(d)) { /* the mean over one rank is the gradient itself */
        int rc = tg_backward(loss);
        if (rc == 0) {
            p->stats.steps++;
            p->stats.backward_s += now_s() - t0;
        }
        return tg_dist_agree(d, rc);
    }
#ifdef TG_HAVE_MPI
    for (int k = 0; k < p->nb; k++)
        p->buckets[k].pending = p->buckets[k].n_params;
    for (int i = 0; i < p->n; i++)
        p->params[i].ready = false;
    p->next = 0;
    p->failed = 0;
    p->mpi_rc = MPI_SUCCESS;
    p->active = true;
    int rc = tg_backward(loss);
    char err[MSG_MAX];
    snprintf(err, sizeof err, "%s", tg_last_error());
    double t1 = now_s();
    /* What the walk did not reach (or, after a failure, did not finish)
     * goes now, last parameter first, so that every rank starts every
     * bucket, in order. */
    for (int i = p->n - 1; i >= 0; i--)
        if (!p->params[i].ready) {
            param_ready(p, &p->params[i]);
            launch_ready(p);
        }
    p->active = false;
    int64_t early = 0; /* started with data and already finished */
    for (int k = 0; k < p->nb; k++)
        early +=
            p->buckets[k].numel > 0 && p->buckets[k].req == MPI_REQUEST_NULL;
    for (int k = 0; k < p->nb; k++)
        if (p->buckets[k].req != MPI_REQUEST_NULL) {
            int w = MPI_Wait(&p->buckets[k].req, MPI_STATUS_IGNORE);
            if (w != MPI_SUCCESS && p->mpi_rc == MPI_SUCCESS)
                p->mpi_rc = w;
        }
    double t2 = now_s();
    if (p->mpi_rc != MPI_SUCCESS)
        return mpi_fail(op, "MPI_Iallreduce", p->mpi_rc);
    if (rc < 0)
        tg__x_error("%s", err); /* the backward's, not a later one's */
    st = rc < 0 || p->failed ? -1 : 0;
    if (tg_dist_agree(d, st) < 0 || any_rank_has(d, op, p->has, p->n) < 0)
        return -1;
    /* The sums, divided by the world size, into the gradients; a parameter
     * that has no gradient here but has one on another rank gets one.
     * What can fail (that gradient of zeros; each write check: a pending
     * tape entry may hold a gradient) is done first and agreed on, and only
     * then are the gradients written, which cannot fail: after a failure
     * no gradient is half reduced. */
    for (int i = 0; st == 0 && i < p->n; i++) {
        ddp_param *pp = &p->params[i];
        if (!p->has[i] || pp->numel == 0)
            continue;
        if (!tg_grad(pp->t) && zero_grad_of(pp->t) < 0)
            st = -1;
        else if (!tg__x_write_check(op, tg_grad(pp->t)))
            st = -1;
    }
    if (tg_dist_agree(d, st) < 0)
        return -1;
    for (int k = 0; k < p->nb; k++)
        divide(p->buckets[k].buf, p->buckets[k].dt, p->buckets[k].numel,
               d->size);
    for (int i = 0; i < p->n; i++) {
        ddp_param *pp = &p->params[i];
        if (!p->has[i] || pp->numel == 0)
            continue;
        ddp_bucket *b = &p->buckets[pp->bucket];
        if (tg_copy_in(tg_grad(pp->t), b->dt,
                       b->buf + (size_t)pp->offset * tg_dtype_size(b->dt)) < 0)
            st = -1; /* (checked above: cannot happen) */
    }
    if (tg_dist_agree(d, st) < 0)
        return -1;
    p->stats.steps++;
    p->stats.backward_s += t1 - t0;
    p->stats.wait_s += t2 - t1;
    p->stats.early += early;
    return 0;
#else
    return 0; /* (not reached: one rank does not talk) */
#endif
}

void tg_ddp_get_stats(const tg_ddp *p, tg_ddp_stats *s)
{
    if (!s)
        return;
    if (!p) {
        *s = (tg_ddp_stats){0};
        return;
    }
    *s = p->stats;
}
