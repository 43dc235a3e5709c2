/* tapegrad dist: tg_ddp, the mean of the gradients all-reduced while
 * backward still runs. The parameters are grouped into buckets, last
 * parameter first (the order backward finishes them in); each parameter's
 * post-accumulate-grad hook copies its final gradient into its bucket, and
 * a full bucket starts its MPI_Iallreduce at once, so that communication
 * overlaps the gradients still being computed. The buckets start in index
 * order on every rank, whatever order the gradients come in, so that every
 * rank starts the same collectives in the same order. */
#include <config.h>

#include "dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- during backward: the hook ------------------------------------ */

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

/* ---- the engine, made and freed ------------------------------------ */

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

/* What the engine takes beyond tg__dist_params_check: float leaves (their
 * gradients are what backward accumulates), each small enough for one MPI
 * message, no tensor listed twice (it would have two hooks). */
static int check_ddp_params(const char *op, const tg_params *ps)
{
    for (int i = 0; i < ps->n; i++) {
        const tg_param *q = &ps->items[i];
        char s[200];
        if (!is_float(tg_dtype_of(q->t)) || !tg_is_leaf(q->t)) {
            tg__x_error(
                "%s: parameter %d '%s' (%s %s) is %s", op, i, q->name,
                tg_dtype_name(tg_dtype_of(q->t)),
                tg__dist_shape_str(tg_ndim(q->t), tg_shape(q->t), s, sizeof s),
                tg_is_leaf(q->t) ? "not float32 or float64"
                                 : "not a leaf (an op's output)");
            return -1;
        }
        if (tg_numel(q->t) > INT_MAX) {
            tg__x_error("%s: parameter %d '%s' has %lld elements, more than "
                        "one MPI message holds",
                        op, i, q->name, (long long)tg_numel(q->t));
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (ps->items[j].t == q->t) {
                tg__x_error("%s: parameters %d '%s' and %d '%s' are the same "
                            "tensor",
                            op, j, ps->items[j].name, i, q->name);
                return -1;
            }
    }
    return 0;
}

/* The engine and its per-parameter arrays, zeroed, into *out (which may
 * be set, partly allocated, on a failure: tg_ddp_free it with n = 0). */
static int alloc_engine(const char *op, const tg_params *ps, tg_ddp **out)
{
    tg_ddp *p = tg__x_calloc(1, sizeof *p);
    *out = p;
    if (p && ps->n > 0) {
        p->params = tg__x_calloc((size_t)ps->n, sizeof *p->params);
        p->has = tg__x_calloc((size_t)ps->n, 1);
    }
    if (!p || (ps->n > 0 && (!p->params || !p->has))) {
        tg__x_error("%s: out of memory", op);
        return -1;
    }
    return 0;
}

/* The parameters recorded, grouped into buckets of at most bucket_bytes
 * (0: 25 MiB), and each bucket's buffer allocated. */
static int alloc_buckets(tg_ddp *p, const char *op, const tg_params *ps,
                         size_t bucket_bytes)
{
    p->n = ps->n;
    for (int i = 0; i < ps->n; i++)
        p->params[i] = (ddp_param){p, ps->items[i].t,           0,
                                   0, tg_numel(ps->items[i].t), false};
    size_t limit = bucket_bytes ? bucket_bytes : (size_t)25 << 20;
    p->nb = plan_buckets(p, limit, false);
    p->buckets = p->nb ? tg__x_calloc((size_t)p->nb, sizeof *p->buckets) : NULL;
    if (p->nb && !p->buckets) {
        p->nb = 0; /* tg_ddp_free walks nb buckets: there are none */
        tg__x_error("%s: out of memory", op);
        return -1;
    }
    plan_buckets(p, limit, true);
    int st = 0;
    for (int k = 0; st == 0 && k < p->nb; k++) {
        ddp_bucket *b = &p->buckets[k];
        size_t bytes = (size_t)b->numel * tg_dtype_size(b->dt);
        if (bytes && !(b->buf = tg__x_malloc(bytes))) {
            tg__x_error("%s: out of memory for a bucket of %zu bytes", op,
                        bytes);
            st = -1;
        }
        if (b->numel > INT_MAX) {
            tg__x_error("%s: a bucket of %lld elements is more than one MPI "
                        "message holds: give a smaller bucket_bytes",
                        op, (long long)b->numel);
            st = -1;
        }
    }
    return st;
}

tg_ddp *tg_ddp_new(tg_dist *d, const tg_params *ps, size_t bucket_bytes)
{
    const char *op = "ddp_new";
    int st = tg__dist_params_check(op, ps);
    if (st == 0)
        st = check_ddp_params(op, ps);
    tg_ddp *p = NULL;
    if (st == 0)
        st = alloc_engine(op, ps, &p);
    if (st == 0) {
        p->d = d;
        st = alloc_buckets(p, op, ps, bucket_bytes);
    }
    if (tg_dist_agree(d, st) < 0 ||
        (talks(d) && tg__dist_compare_params(d, op, ps) < 0)) {
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

/* ---- a step -------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The loss backward starts from: one float element (NULL keeps the error
 * of the call that gave it). */
static int check_loss(const char *op, tg_tensor *loss)
{
    if (!loss) {
        if (!*tg_last_error())
            tg__x_error("%s: no loss (NULL)", op);
        return -1;
    }
    if (tg_numel(loss) != 1 || !is_float(tg_dtype_of(loss))) {
        char s[200];
        tg__x_error(
            "%s: the loss must be one float element, got %s %s", op,
            tg_dtype_name(tg_dtype_of(loss)),
            tg__dist_shape_str(tg_ndim(loss), tg_shape(loss), s, sizeof s));
        return -1;
    }
    return 0;
}

#ifdef TG_HAVE_MPI
/* Every bucket waits for all its parameters again; none started. */
static void begin_step(tg_ddp *p)
{
    for (int k = 0; k < p->nb; k++)
        p->buckets[k].pending = p->buckets[k].n_params;
    for (int i = 0; i < p->n; i++)
        p->params[i].ready = false;
    p->next = 0;
    p->failed = 0;
    p->mpi_rc = MPI_SUCCESS;
    p->active = true;
}

/* After backward: what the walk did not reach (or, after a failure, did not
 * finish) goes now, last parameter first, so that every rank starts every
 * bucket, in order; then every bucket is waited for. Returns how many
 * buckets had started with data and already finished (the overlap). */
static int64_t drain(tg_ddp *p)
{
    for (int i = p->n - 1; i >= 0; i--)
        if (!p->params[i].ready) {
            param_ready(p, &p->params[i]);
            launch_ready(p);
        }
    p->active = false;
    int64_t early = 0;
    for (int k = 0; k < p->nb; k++)
        early +=
            p->buckets[k].numel > 0 && p->buckets[k].req == MPI_REQUEST_NULL;
    for (int k = 0; k < p->nb; k++)
        if (p->buckets[k].req != MPI_REQUEST_NULL) {
            int w = MPI_Wait(&p->buckets[k].req, MPI_STATUS_IGNORE);
            if (w != MPI_SUCCESS && p->mpi_rc == MPI_SUCCESS)
                p->mpi_rc = w;
        }
    return early;
}

/* The sums, divided by the world size, into the gradients; a parameter
 * that has no gradient here but has one on another rank gets one. What can
 * fail (that gradient of zeros; each write check: a pending tape entry may
 * hold a gradient) is done first and agreed on, and only then are the
 * gradients written, which cannot fail: after a failure no gradient is half
 * reduced. */
static int write_means(tg_ddp *p, const char *op)
{
    tg_dist *d = p->d;
    int st = 0;
    for (int i = 0; st == 0 && i < p->n; i++) {
        ddp_param *pp = &p->params[i];
        if (!p->has[i] || pp->numel == 0)
            continue;
        if (!tg_grad(pp->t) && tg__dist_zero_grad_of(pp->t) < 0)
            st = -1;
        else if (!tg__x_write_check(op, tg_grad(pp->t)))
            st = -1;
    }
    if (tg_dist_agree(d, st) < 0)
        return -1;
    for (int k = 0; k < p->nb; k++)
        tg__dist_divide(p->buckets[k].buf, p->buckets[k].dt,
                        p->buckets[k].numel, d->size);
    for (int i = 0; i < p->n; i++) {
        ddp_param *pp = &p->params[i];
        if (!p->has[i] || pp->numel == 0)
            continue;
        ddp_bucket *b = &p->buckets[pp->bucket];
        if (tg_copy_in(tg_grad(pp->t), b->dt,
                       b->buf + (size_t)pp->offset * tg_dtype_size(b->dt)) < 0)
            st = -1; /* (checked above: cannot happen) */
    }
    return tg_dist_agree(d, st);
}

/* The step on more than one rank, from t0 (the loss agreed on): backward
 * with the hooks active, the buckets drained, the means written. */
static int overlapped_step(tg_ddp *p, tg_tensor *loss, double t0)
{
    const char *op = "ddp_backward";
    begin_step(p);
    int rc = tg_backward(loss);
    char err[MSG_MAX];
    snprintf(err, sizeof err, "%s", tg_last_error());
    double t1 = now_s();
    int64_t early = drain(p);
    double t2 = now_s();
    if (p->mpi_rc != MPI_SUCCESS)
        return tg__dist_mpi_fail(op, "MPI_Iallreduce", p->mpi_rc);
    if (rc < 0)
        tg__x_error("%s", err); /* the backward's, not a later one's */
    int st = rc < 0 || p->failed ? -1 : 0;
    if (tg_dist_agree(p->d, st) < 0 ||
        tg__dist_any_rank_has(p->d, op, p->has, p->n) < 0)
        return -1;
    if (write_means(p, op) < 0)
        return -1;
    p->stats.steps++;
    p->stats.backward_s += t1 - t0;
    p->stats.wait_s += t2 - t1;
    p->stats.early += early;
    return 0;
}
#endif

int tg_ddp_backward(tg_ddp *p, tg_tensor *loss)
{
    const char *op = "ddp_backward";
    if (!p) {
        tg__x_error("%s: NULL tg_ddp", op);
        return -1;
    }
    tg_dist *d = p->d;
    if (tg_dist_agree(d, check_loss(op, loss)) < 0)
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
    return overlapped_step(p, loss, t0);
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
