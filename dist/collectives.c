/* tapegrad dist: the blocking collectives over a parameter list: rank 0's
 * parameters to every rank (tg_dist_broadcast_params), the mean of a few
 * doubles (tg_dist_mean) and the mean of the gradients
 * (tg_dist_allreduce_grads), with the gradient steps the overlapped engine
 * (dist/ddp.c) takes too. Each agrees on every step that can fail before
 * it writes, so that after a failure no rank's tensors are half written. */
#include <config.h>

#include "dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ---------------------------------------------------- */

#ifdef TG_HAVE_MPI
/* Rank 0 reads every parameter into one buffer, all agree that it could,
 * the buffer goes out, and only then does any rank write: a failure
 * anywhere changes no rank's parameters. The buffer starts as zeros, so its
 * bytes are defined whatever rank 0 could read. */
static int send_params(tg_dist *d, const char *op, const tg_params *ps)
{
    size_t total = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        total += (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    }
    unsigned char *buf = total ? tg__x_calloc(total, 1) : NULL;
    int st = total && !buf ? -1 : 0;
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
            return tg__dist_mpi_fail(op, "MPI_Bcast", rc);
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
}
#endif

int tg_dist_broadcast_params(tg_dist *d, const tg_params *ps)
{
    const char *op = "dist_broadcast_params";
    int st = tg__dist_params_check(op, ps);
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
    if (tg__dist_compare_params(d, op, ps) < 0)
        return -1;
    return send_params(d, op, ps);
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

/* Through the public autograd: the backward of a view of t seeded with
 * zeros, which adds 0 (the library has no call that sets a gradient). */
int tg__dist_zero_grad_of(tg_tensor *t)
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
/* Divided, not multiplied by 1/size, which is not exact for a size like
 * 3. */
void tg__dist_divide(void *buf, tg_dtype dt, int64_t n, int size)
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

int tg__dist_any_rank_has(tg_dist *d, const char *op, unsigned char *has, int n)
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
                    tg__dist_shape_str(tg_ndim(t), tg_shape(t), a, sizeof a),
                    tg_dtype_name(tg_dtype_of(g)),
                    tg__dist_shape_str(tg_ndim(g), tg_shape(g), b, sizeof b));
        return -1;
    }
    return 0;
}

/* has[i] = 1 for each float parameter with a gradient here, each gradient
 * checked (grad_check). */
static int mark_grads(const char *op, const tg_params *ps, unsigned char *has)
{
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t, *g = tg_grad(t);
        if (!is_float(tg_dtype_of(t)) || !g)
            continue;
        if (grad_check(op, &ps->items[i], g) < 0)
            return -1;
        has[i] = 1;
    }
    return 0;
}

/* For each parameter some rank has a gradient of (has[i]): the size of one
 * MPI message, a gradient of zeros where this rank has none, its write
 * check (a pending tape entry may hold it); *total, the bytes of them
 * all. */
static int prepare_grads(const char *op, const tg_params *ps,
                         const unsigned char *has, size_t *total)
{
    int st = 0;
    for (int i = 0; st == 0 && i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        if (!has[i])
            continue;
        if (tg_numel(t) > INT_MAX) { /* checked alike on every rank */
            tg__x_error("%s: parameter '%s' has %lld elements, more than one "
                        "MPI message holds",
                        op, ps->items[i].name, (long long)tg_numel(t));
            return -1;
        }
        *total += (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
        if (!tg_grad(t) && tg__dist_zero_grad_of(t) < 0)
            st = -1;
        else if (!tg__x_write_check(op, tg_grad(t)))
            st = -1;
    }
    return st;
}

/* The gradients of has[] into buf, one after another in list order. */
static int gather_grads(const tg_params *ps, const unsigned char *has,
                        unsigned char *buf)
{
    size_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        tg_dtype dt = tg_dtype_of(t);
        size_t b = (size_t)tg_numel(t) * tg_dtype_size(dt);
        if (!has[i] || b == 0)
            continue;
        if (tg_copy_out(tg_grad(t), dt, buf + off) < 0)
            return -1; /* its error is set */
        off += b;
    }
    return 0;
}

#ifdef TG_HAVE_MPI
/* buf's gradients summed over the ranks, one MPI_Allreduce per parameter
 * (its dtype's), then divided by the world size: the mean. */
static int sum_grads(tg_dist *d, const char *op, const tg_params *ps,
                     const unsigned char *has, unsigned char *buf)
{
    size_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *t = ps->items[i].t;
        int64_t n = tg_numel(t);
        if (!has[i] || n == 0)
            continue;
        tg_dtype dt = tg_dtype_of(t);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n,
                               dt == TG_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE,
                               MPI_SUM, d->comm);
        if (rc != MPI_SUCCESS) /* nothing written yet */
            return tg__dist_mpi_fail(op, "MPI_Allreduce", rc);
        tg__dist_divide(buf + off, dt, n, d->size);
        off += (size_t)n * tg_dtype_size(dt);
    }
    return 0;
}

/* buf's means into the gradients of has[] (checked before: these writes
 * cannot fail). */
static int scatter_grads(const tg_params *ps, const unsigned char *has,
                         const unsigned char *buf)
{
    int st = 0;
    size_t off = 0;
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
    return st;
}
#endif

/* After the local checks agreed, on more than one rank. Every step that can
 * fail first, on every rank, then one agree, then the writes, which cannot
 * fail: so that after a failure no gradient is half reduced (the header's
 * promise). The steps: a gradient of zeros where another rank has one,
 * each gradient's write check, the size of one MPI message (prepare_grads),
 * and every gradient copied into one buffer of them all (a buffer per
 * parameter would have to write each before reading the next). */
static int reduce_grads(tg_dist *d, const char *op, const tg_params *ps,
                        unsigned char *has)
{
    /* the gradients some rank has: zeros where this one has none */
    if (tg__dist_any_rank_has(d, op, has, ps->n) < 0)
        return -1;
    size_t total = 0;
    int st = prepare_grads(op, ps, has, &total);
    unsigned char *buf = st == 0 && total ? tg__x_malloc(total) : NULL;
    if (st == 0 && total && !buf) {
        tg__x_error("%s: out of memory for a buffer of %zu bytes", op, total);
        st = -1;
    }
    if (st == 0)
        st = gather_grads(ps, has, buf);
    if (tg_dist_agree(d, st) < 0) {
        free(buf);
        return -1;
    }
#ifdef TG_HAVE_MPI
    if (sum_grads(d, op, ps, has, buf) < 0) {
        free(buf);
        return -1;
    }
    st = scatter_grads(ps, has, buf);
#endif
    free(buf);
    return tg_dist_agree(d, st);
}

int tg_dist_allreduce_grads(tg_dist *d, const tg_params *ps)
{
    const char *op = "dist_allreduce_grads";
    int st = tg__dist_params_check(op, ps);
    unsigned char *has = NULL;
    if (st == 0 && ps->n > 0) {
        has = tg__x_calloc((size_t)ps->n, 1);
        if (!has) {
            tg__x_error("%s: out of memory", op);
            st = -1;
        }
    }
    if (st == 0)
        st = mark_grads(op, ps, has);
    if (tg_dist_agree(d, st) < 0 ||
        (talks(d) && tg__dist_compare_params(d, op, ps) < 0)) {
        free(has);
        return -1;
    }
    if (!talks(d)) {
        free(has);
        return 0; /* the mean over one rank is the gradient itself */
    }
    st = reduce_grads(d, op, ps, has);
    free(has);
    return st;
}
