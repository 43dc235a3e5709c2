/* libtapegrad_dist under mpirun (tests/dist.test runs it with 1, 2 and 3
 * ranks). A plain program with its own check macro, not a Check suite:
 * Check forks each test, and an MPI process must not fork after MPI_Init
 * (Open MPI warns, and the child cannot use the job's connections); and
 * every rank must run the same tests in the same order, which one main()
 * makes plain. A failed check prints the rank and line and the run goes on
 * (stopping one rank would hang the others in their next collective); the
 * ranks agree on the outcome at the end. */
#include <config.h>

#ifdef TG_HAVE_MPI
#include <mpi.h> /* before tapegrad_dist.h: declares tg_dist_from_comm */
#endif

#include "tapegrad_dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_, failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr,                                                    \
                    "rank %d: %s:%d: check failed: %s [last error: %s]\n",     \
                    rank_, __FILE__, __LINE__, #cond, tg_last_error());        \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* A leaf of shape (n0, n1) (n1 = 0: 1-d) with values from seed. */
static tg_tensor *param(tg_dtype dt, int64_t n0, int64_t n1, uint32_t seed)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *t = n1 ? tg_randn(&r, dt, 2, (int64_t[]){n0, n1})
                      : tg_randn(&r, dt, 1, (int64_t[]){n0});
    tg_set_requires_grad(t, true);
    return t;
}

/* Whether a and b hold the same bits (same dtype and shape). */
static bool same_bits(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b || tg_dtype_of(a) != tg_dtype_of(b) ||
        tg_numel(a) != tg_numel(b))
        return false;
    size_t n = (size_t)tg_numel(a) * tg_dtype_size(tg_dtype_of(a));
    unsigned char *x = malloc(n + 1), *y = malloc(n + 1);
    bool same = x && y && tg_copy_out(a, tg_dtype_of(a), x) == 0 &&
                tg_copy_out(b, tg_dtype_of(b), y) == 0 && memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

/* max |a - b| / max(|b|, tiny) over the elements, in double. */
static double max_rel(const tg_tensor *a, const tg_tensor *b)
{
    int64_t n = tg_numel(a);
    double *x = malloc((size_t)(n + 1) * sizeof *x),
           *y = malloc((size_t)(n + 1) * sizeof *y), worst = 0;
    if (!x || !y || tg_copy_out(a, TG_FLOAT64, x) ||
        tg_copy_out(b, TG_FLOAT64, y))
        worst = INFINITY;
    for (int64_t i = 0; worst < INFINITY && i < n; i++) {
        double e = fabs(x[i] - y[i]) / fmax(fabs(y[i]), 1e-30);
        worst = e > worst ? e : worst;
    }
    free(x);
    free(y);
    return worst;
}

/* ---- shards ---------------------------------------------------------- */

static void test_shard(tg_dist *d)
{
    int64_t b, e;
    for (int64_t n = size_; n < size_ + 9; n++) {
        CHECK(tg_dist_shard(d, n, &b, &e) == 0);
        /* ranks below n % size take one more, in rank order */
        int64_t q = n / size_, r = n % size_;
        CHECK(b == rank_ * q + (rank_ < r ? rank_ : r));
        CHECK(e - b == q + (rank_ < r));
        /* every item once: the shard sizes sum to n over the ranks */
        double len = (double)(e - b);
        CHECK(tg_dist_mean(d, &len, 1) == 0);
        CHECK(fabs(len * size_ - (double)n) < 1e-9);
    }
    tg_clear_error();
    CHECK(tg_dist_shard(d, size_ - 1, &b, &e) == -1);
    CHECK(strstr(tg_last_error(), "dist_shard") != NULL);
    CHECK(tg_dist_shard(d, 10, NULL, &e) == -1);

    /* rows: row i of t holds i (and 100 + i in its second column) */
    int64_t n = 2 * size_ + 1; /* not divisible */
    tg_tensor *rows = tg_arange(TG_FLOAT64, 0, (double)n, 1);
    tg_tensor *col = tg_reshape(rows, 2, (int64_t[]){n, 1});
    tg_tensor *hi = tg_full(TG_FLOAT64, 2, (int64_t[]){n, 1}, 100);
    tg_tensor *col2 = tg_add(col, hi);
    tg_tensor *parts[2] = {col, col2};
    tg_tensor *t = tg_cat(parts, 2, 1); /* (n, 2) */
    tg_tensor *tt = tg_transpose(t, 0, 1), *tn = tg_contiguous(tt);
    tg_tensor *strided_src = tg_transpose(tn, 0, 1); /* not contiguous */
    for (int k = 0; k < 2; k++) {
        tg_tensor *src = k ? strided_src : t;
        tg_tensor *c = tg_dist_shard_rows(d, src, TG_SHARD_CONTIGUOUS);
        CHECK(tg_dist_shard(d, n, &b, &e) == 0);
        CHECK(c && tg_shape(c)[0] == e - b && tg_shape(c)[1] == 2);
        for (int64_t i = 0; c && i < e - b; i++) {
            CHECK(tg_get(c, (int64_t[]){i, 0}) == (double)(b + i));
            CHECK(tg_get(c, (int64_t[]){i, 1}) == 100.0 + (double)(b + i));
        }
        tg_tensor *s = tg_dist_shard_rows(d, src, TG_SHARD_STRIDED);
        int64_t m = (n - rank_ + size_ - 1) / size_;
        CHECK(s && tg_shape(s)[0] == m && tg_shape(s)[1] == 2);
        for (int64_t i = 0; s && i < m; i++) {
            CHECK(tg_get(s, (int64_t[]){i, 0}) == (double)(rank_ + i * size_));
            CHECK(tg_get(s, (int64_t[]){i, 1}) ==
                  100.0 + (double)(rank_ + i * size_));
        }
        tg_release(c);
        tg_release(s);
    }
    /* fewer rows than ranks, a 0-d tensor, an unknown kind: refused */
    tg_tensor *few = tg_narrow(t, 0, 0, size_ - 1);
    if (size_ > 1) {
        CHECK(tg_dist_shard_rows(d, few, TG_SHARD_STRIDED) == NULL);
        CHECK(strstr(tg_last_error(), "fewer than the") != NULL);
    }
    tg_tensor *scalar = tg_full(TG_FLOAT64, 0, NULL, 1.0);
    CHECK(tg_dist_shard_rows(d, scalar, TG_SHARD_CONTIGUOUS) == NULL);
    CHECK(strstr(tg_last_error(), "0-d") != NULL);
    CHECK(tg_dist_shard_rows(d, t, (tg_shard_kind)7) == NULL);
    CHECK(tg_dist_shard_rows(d, NULL, TG_SHARD_CONTIGUOUS) == NULL);
    tg_release(scalar);
    tg_release(few);
    tg_release(strided_src);
    tg_release(tn);
    tg_release(tt);
    tg_release(t);
    tg_release(col2);
    tg_release(hi);
    tg_release(col);
    tg_release(rows);
}

/* ---- broadcast --------------------------------------------------------- */

static void test_broadcast(tg_dist *d)
{
    /* every rank starts different (its own seed); rank 0's values win */
    tg_tensor *a = param(TG_FLOAT64, 3, 5, 10 + (uint32_t)rank_);
    tg_tensor *b = param(TG_FLOAT32, 7, 0, 20 + (uint32_t)rank_);
    tg_tensor *z = param(TG_FLOAT64, 0, 4, 1); /* zero-size */
    tg_tensor *a0 = param(TG_FLOAT64, 3, 5, 10),
              *b0 = param(TG_FLOAT32, 7, 0, 20);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, NULL, "b", b);
    tg_params_add(&ps, NULL, "z", z);
    CHECK(tg_dist_broadcast_params(d, &ps) == 0);
    CHECK(same_bits(a, a0));
    CHECK(same_bits(b, b0));
    /* refused on every rank while a pending backward holds one on a rank
     * that is to be written */
    tg_scope_begin();
    if (rank_ == size_ - 1 && rank_ > 0)
        tg_mul(a, a); /* holds a for its backward */
    tg_clear_error();
    int rc = tg_dist_broadcast_params(d, &ps);
    if (size_ > 1) {
        char want[32];
        snprintf(want, sizeof want, "rank %d: ", size_ - 1);
        CHECK(rc == -1);
        CHECK(strncmp(tg_last_error(), want, strlen(want)) == 0);
    } else {
        CHECK(rc == 0); /* rank 0 is never written */
    }
    tg_scope_end(); /* (the graph goes with it) */
    CHECK(tg_dist_broadcast_params(d, NULL) == -1);
    tg_params_free(&ps);
    tg_release(a);
    tg_release(b);
    tg_release(z);
    tg_release(a0);
    tg_release(b0);
}

/* ---- parameter lists that differ ---------------------------------------- */

static void test_mismatch(tg_dist *d)
{
    tg_tensor *a = param(TG_FLOAT64, 3, 2, 1);
    tg_tensor *b =
        rank_ == 1 ? param(TG_FLOAT32, 2, 4, 2) : param(TG_FLOAT32, 4, 2, 2);
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "a", a);
    tg_params_add(&ps, "layer", "w_q", b);
    tg_clear_error();
    int rc = tg_dist_check_params(d, &ps);
    if (size_ > 1) {
        CHECK(rc == -1);
        CHECK(strstr(tg_last_error(),
                     "parameter 1 'layer.w_q' is float32 (4,2) on rank 0 but "
                     "float32 (2,4) on rank 1") != NULL);
        tg_ddp *p = tg_ddp_new(d, &ps, 0);
        CHECK(p == NULL);
        CHECK(strstr(tg_last_error(), "on rank 1") != NULL);
        tg_ddp_free(p);
        CHECK(tg_dist_broadcast_params(d, &ps) == -1);
    } else {
        CHECK(rc == 0);
    }
    /* one more parameter on the last rank */
    tg_tensor *c = param(TG_FLOAT64, 2, 0, 3);
    tg_release(b);
    b = param(TG_FLOAT32, 4, 2, 2);
    ps.items[1].t = b;
    if (rank_ == size_ - 1)
        tg_params_add(&ps, NULL, "c", c);
    rc = tg_dist_check_params(d, &ps);
    if (size_ > 1) {
        char want[96];
        snprintf(want, sizeof want,
                 "parameter 2 is missing on rank 0 (it lists 2) but 'c' is "
                 "float64 (2) on rank %d",
                 size_ - 1);
        CHECK(rc == -1);
        CHECK(strstr(tg_last_error(), want) != NULL);
    }
    /* another name on the last rank */
    if (rank_ == size_ - 1)
        ps.n = 2, snprintf(ps.items[0].name, TG_PARAM_NAME_MAX, "a2");
    rc = tg_dist_check_params(d, &ps);
    if (size_ > 1) {
        char want[96];
        snprintf(want, sizeof want,
                 "parameter 0 'a' is float64 (3,2) on rank 0 but 'a2' is "
                 "float64 (3,2) on rank %d",
                 size_ - 1);
        CHECK(rc == -1);
        CHECK(strstr(tg_last_error(), want) != NULL);
    }
    CHECK(tg_dist_check_params(d, NULL) == -1);
    CHECK(strncmp(tg_last_error(), "rank 0: ", 8) == 0);
    tg_params_free(&ps);
    tg_release(a);
    tg_release(b);
    tg_release(c);
}

/* ---- agreement ----------------------------------------------------------- */

static void test_agree(tg_dist *d)
{
    CHECK(tg_dist_agree(d, 0) == 0);
    /* ranks 1.. fail with their own messages; the lowest one's wins */
    int fail_from = size_ > 1 ? 1 : 0;
    tg_clear_error();
    if (rank_ >= fail_from) {
        /* a rank's own error, here from a failing call */
        tg_tensor *bad = tg_zeros(TG_FLOAT64, 1, (int64_t[]){-rank_ - 1});
        CHECK(bad == NULL);
    }
    int rc = tg_dist_agree(d, rank_ >= fail_from ? -1 : 0);
    char want[32];
    snprintf(want, sizeof want, "rank %d: ", fail_from);
    CHECK(rc == -1);
    CHECK(strncmp(tg_last_error(), want, strlen(want)) == 0);
    char shape[32];
    snprintf(shape, sizeof shape, "-%d", fail_from + 1);
    CHECK(strstr(tg_last_error(), shape) != NULL);
    double v[3] = {rank_, 1.0, -2.0 * rank_};
    CHECK(tg_dist_mean(d, v, 3) == 0);
    CHECK(v[0] == (double)(size_ - 1) / 2 && v[1] == 1.0 &&
          v[2] == -(double)(size_ - 1));
    CHECK(tg_dist_mean(d, NULL, 2) == -1);
    CHECK(tg_dist_mean(d, v, 0) == 0);
}

/* A program's own failure agreed with its own message, and a setting
 * compared: the same everywhere passes; the last rank's other value is
 * refused on every rank, naming the setting and each rank's value. */
static void test_check_same(tg_dist *d)
{
    int last = size_ - 1;
    CHECK(tg_dist_agree_why(d, 0, "unused") == 0);
    tg_clear_error();
    CHECK(tg_dist_agree_why(d, rank_ == last ? -1 : 0, "--lr wants > 0") == -1);
    char want[128];
    snprintf(want, sizeof want, "rank %d: --lr wants > 0", last);
    CHECK(strcmp(tg_last_error(), want) == 0);
    CHECK(tg_dist_check_same(d, "--steps", "800") == 0);
    int rc = tg_dist_check_same(d, "--lr", rank_ == last ? "-1" : "0.004");
    if (size_ > 1) {
        CHECK(rc == -1);
        CHECK(strstr(tg_last_error(), "dist_check_same: the ranks disagree on "
                                      "--lr: '0.004' on rank 0, ") != NULL);
        snprintf(want, sizeof want, "'-1' on rank %d", last);
        CHECK(strstr(tg_last_error(), want) != NULL);
    } else {
        CHECK(rc == 0);
    }
    char big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(tg_dist_check_same(d, "--text", rank_ == last ? big : "x") == -1);
    CHECK(strstr(tg_last_error(), "longer than 127 characters") != NULL);
    CHECK(tg_dist_check_same(d, "--text", rank_ == last ? NULL : "x") == -1);
    CHECK(strstr(tg_last_error(), "dist_check_same: the value is NULL"));
    CHECK(tg_dist_check_same(d, "--after", "1") == 0); /* still in step */
}

/* dist_check --abort: the last rank stops the job while the others wait in
 * a collective it never reaches; tests/dist.test wants the job ended (not
 * a timeout) with its message. One process: tg_dist_abort returns. */
static int abort_job(tg_dist *d)
{
    if (rank_ == size_ - 1) {
        fprintf(stderr, "dist_check --abort: rank %d stops the job\n", rank_);
        tg_dist_abort(d, 3);
        tg_dist_free(d);
        return 3;
    }
    tg_dist_agree(d, 0); /* never answered */
    tg_dist_free(d);
    return 0;
}

/* ---- the blocking all-reduce ---------------------------------------------- */

/* Rank r's gradient for element i: a multiple of 1/64 below 2^10, so that
 * any sum over the ranks, in any order, is exact, and the mean is sum/size
 * rounded once. */
static double known(int r, int i, int salt)
{
    return (double)(((i * 37 + r * 101 + salt * 13) % 2001) - 1000) / 64.0;
}

/* loss = sum(w * c), c rank r's known values: dloss/dw = c. */
static void grad_known(tg_tensor *w, int r, int salt)
{
    int64_t n = tg_numel(w);
    double *c = malloc((size_t)(n + 1) * sizeof *c);
    for (int64_t i = 0; i < n; i++)
        c[i] = known(r, (int)i, salt);
    tg_tensor *ct = tg_zeros(tg_dtype_of(w), tg_ndim(w), tg_shape(w));
    tg_copy_in(ct, TG_FLOAT64, c);
    tg_scope_begin();
    CHECK(tg_backward(tg_sum_all(tg_mul(w, ct))) == 0);
    tg_scope_end();
    tg_release(ct);
    free(c);
}

static void expect_mean(tg_tensor *w, int salt)
{
    int64_t n = tg_numel(w);
    double *got = malloc((size_t)(n + 1) * sizeof *got);
    CHECK(tg_grad(w) && tg_copy_out(tg_grad(w), TG_FLOAT64, got) == 0);
    for (int64_t i = 0; tg_grad(w) && i < n; i++) {
        double s = 0;
        for (int r = 0; r < size_; r++)
            s += known(r, (int)i, salt);
        double want = tg_dtype_of(w) == TG_FLOAT32
                          ? (double)((float)s / (float)size_)
                          : s / size_;
        if (got[i] != want) {
            CHECK(got[i] == want);
            break;
        }
    }
    free(got);
}

static void test_allreduce(tg_dist *d)
{
    tg_tensor *w64 = param(TG_FLOAT64, 5, 7, 1),
              *w32 = param(TG_FLOAT32, 33, 0, 2);
    tg_tensor *none = param(TG_FLOAT64, 2, 0, 3); /* no gradient anywhere */
    tg_tensor *some = param(TG_FLOAT32, 3, 0, 4); /* a gradient on rank 0 */
    tg_params ps;
    tg_params_init(&ps);
    tg_params_add(&ps, NULL, "w64", w64);
    tg_params_add(&ps, NULL, "none", none);
    tg_params_add(&ps, NULL, "w32", w32);
    tg_params_add(&ps, NULL, "some", some);
    grad_known(w64, rank_, 1);
    grad_known(w32, rank_, 2);
    if (rank_ == 0)
        grad_known(some, 0, 3);
    CHECK(tg_dist_allreduce_grads(d, &ps) == 0);
    expect_mean(w64, 1);
    expect_mean(w32, 2);
    CHECK(tg_grad(none) == NULL);
    /* "some": rank 0's values / size, the others counted as zeros */
    CHECK(tg_grad(some) != NULL);
    for (int i = 0; tg_grad(some) && i < 3; i++)
        CHECK(tg_get(tg_grad(some), (int64_t[]){i}) ==
              (double)((float)known(0, i, 3) / (float)size_));
    CHECK(tg_dist_allreduce_grads(d, NULL) == -1);
    tg_params_free(&ps);
    tg_release(w64);
    tg_release(w32);
    tg_release(none);
    tg_release(some);
}

/* ---- tg_ddp against the blocking all-reduce ------------------------------- */

enum { N_MODEL = 7 };
typedef struct model {
    tg_tensor *p[N_MODEL];
    tg_params ps;
} model;

/* float64 and float32 parameters (a dtype change splits the buckets), one
 * of zero size, one unused on every rank, one unused on rank 1. */
static void model_init(model *m)
{
    static const char *const names[N_MODEL] = {
        "w1", "b1", "empty", "w2", "unused", "w3", "rank1_skips"};
    m->p[0] = param(TG_FLOAT64, 4, 6, 11);
    m->p[1] = param(TG_FLOAT64, 6, 0, 12);
    m->p[2] = param(TG_FLOAT64, 0, 6, 13);
    m->p[3] = param(TG_FLOAT64, 6, 3, 14);
    m->p[4] = param(TG_FLOAT64, 5, 0, 15);
    m->p[5] = param(TG_FLOAT32, 3, 40, 16);
    m->p[6] = param(TG_FLOAT32, 40, 0, 17);
    tg_params_init(&m->ps);
    for (int i = 0; i < N_MODEL; i++)
        tg_params_add(&m->ps, NULL, names[i], m->p[i]);
}

static void model_free(model *m)
{
    tg_params_free(&m->ps);
    for (int i = 0; i < N_MODEL; i++)
        tg_release(m->p[i]);
}

/* A loss from this rank's data: tanh(x @ w1 + b1) @ w2, the sum of its
 * squares, plus float32 terms; the empty parameter's sum (0) joins in. */
static tg_tensor *model_loss(model *m, uint32_t seed)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *x = tg_randn(&r, TG_FLOAT64, 2, (int64_t[]){5, 4});
    tg_tensor *h = tg_tanh(tg_add(tg_matmul(x, m->p[0]), m->p[1]));
    tg_tensor *y = tg_matmul(h, m->p[3]);
    tg_tensor *l64 = tg_add(tg_sum_all(tg_mul(y, y)), tg_sum_all(m->p[2]));
    tg_tensor *x32 = tg_randn(&r, TG_FLOAT32, 2, (int64_t[]){2, 3});
    tg_tensor *l32 = tg_sum_all(tg_tanh(tg_matmul(x32, m->p[5])));
    if (rank_ != 1) {
        tg_tensor *v = tg_randn(&r, TG_FLOAT32, 1, (int64_t[]){40});
        l32 = tg_add(l32, tg_sum_all(tg_mul(v, m->p[6])));
        tg_release(v);
    }
    tg_tensor *loss = tg_add(l64, tg_to(l32, TG_FLOAT64));
    tg_release(x);
    tg_release(x32);
    return loss;
}

static void test_ddp(tg_dist *d)
{
    static const size_t sizes[] = {1, 64, 200, 0};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        tg_scope_begin();
        model ref, m;
        model_init(&ref);
        model_init(&m);
        /* the reference: backward, then the blocking all-reduce */
        CHECK(tg_backward(model_loss(&ref, 100 + (uint32_t)rank_)) == 0);
        CHECK(tg_dist_allreduce_grads(d, &ref.ps) == 0);
        tg_ddp *p = tg_ddp_new(d, &m.ps, sizes[k]);
        CHECK(p != NULL);
        CHECK(tg_ddp_backward(p, model_loss(&m, 100 + (uint32_t)rank_)) == 0);
        for (int i = 0; i < N_MODEL; i++) {
            tg_tensor *a = tg_grad(ref.p[i]), *b = tg_grad(m.p[i]);
            CHECK((a == NULL) == (b == NULL));
            if (a && b && !same_bits(a, b)) {
                fprintf(stderr,
                        "rank %d: bucket_bytes %zu, parameter %s: "
                        "max rel diff %g\n",
                        rank_, sizes[k], m.ps.items[i].name, max_rel(b, a));
                CHECK(same_bits(a, b));
            }
        }
        CHECK(tg_grad(m.p[4]) == NULL); /* unused everywhere */
        CHECK(tg_grad(m.p[6]) != NULL); /* unused on rank 1 only */
        tg_ddp_stats st;
        tg_ddp_get_stats(p, &st);
        CHECK(st.steps == 1);
        CHECK(st.bytes == (4 * 6 + 6 + 6 * 3 + 5) * 8 + (3 * 40 + 40) * 4);
        if (sizes[k] == 1) /* one parameter per bucket; the empty one
                            * (no bytes) shares the next one's */
            CHECK(st.buckets == N_MODEL - 1);
        if (sizes[k] == 0)
            CHECK(st.buckets == 2); /* one per dtype */
        /* a second step accumulates into the reduced gradients, as
         * tg_backward does, and the two stay equal */
        CHECK(tg_backward(model_loss(&ref, 200 + (uint32_t)rank_)) == 0);
        CHECK(tg_dist_allreduce_grads(d, &ref.ps) == 0);
        CHECK(tg_ddp_backward(p, model_loss(&m, 200 + (uint32_t)rank_)) == 0);
        for (int i = 0; i < N_MODEL; i++)
            CHECK((tg_grad(ref.p[i]) == NULL && tg_grad(m.p[i]) == NULL) ||
                  same_bits(tg_grad(ref.p[i]), tg_grad(m.p[i])));
        /* a rank whose forward failed (a bad shape: NULL): -1 everywhere,
         * naming it, no hang; the gradients are as they were */
        tg_tensor *g3 = tg_grad(m.p[3]);
        tg_tensor *before = tg_contiguous(g3);
        tg_clear_error();
        tg_tensor *loss = rank_ == size_ - 1
                              ? tg_matmul(m.p[0], m.p[0]) /* (4,6) @ (4,6) */
                              : model_loss(&m, 300);
        CHECK(tg_ddp_backward(p, loss) == -1);
        char want[64];
        snprintf(want, sizeof want, "rank %d: matmul", size_ - 1);
        CHECK(strncmp(tg_last_error(), want, strlen(want)) == 0);
        CHECK(tg_grad(m.p[3]) == g3 && same_bits(g3, before));
        tg_release(before);
        tg_release(loss);
        /* a backward that fails on one rank (not a one-element loss) */
        tg_tensor *wide =
            rank_ == 0 ? tg_add(m.p[1], m.p[1]) : tg_sum_all(m.p[1]);
        CHECK(tg_ddp_backward(p, wide) == -1);
        CHECK(strncmp(tg_last_error(), "rank 0: ddp_backward", 20) == 0);
        tg_release(wide);
        /* a backward that fails inside tg_ddp_backward on the last rank
         * (its graph consumed by an earlier backward): every rank finishes
         * its buckets, then -1 everywhere */
        tg_tensor *used = model_loss(&m, 400);
        if (rank_ == size_ - 1)
            CHECK(tg_backward(used) == 0);
        CHECK(tg_ddp_backward(p, used) == -1);
        snprintf(want, sizeof want, "rank %d: backward", size_ - 1);
        CHECK(strncmp(tg_last_error(), want, strlen(want)) == 0);
        tg_release(used);
        tg_ddp_get_stats(p, &st);
        CHECK(st.steps == 2);
        tg_ddp_free(p);
        model_free(&ref);
        model_free(&m);
        tg_scope_end();
    }
    CHECK(tg_ddp_new(d, NULL, 0) == NULL);
    CHECK(tg_ddp_backward(NULL, NULL) == -1);
    tg_ddp_free(NULL);
}

/* ---- a failed reduction writes no gradient -------------------------------- */

/* Whether t holds only zeros. */
static bool all_zero(const tg_tensor *t)
{
    int64_t n = tg_numel(t);
    double *x = malloc((size_t)(n + 1) * sizeof *x);
    bool zero = x && tg_copy_out(t, TG_FLOAT64, x) == 0;
    for (int64_t i = 0; zero && i < n; i++)
        zero = x[i] == 0;
    free(x);
    return zero;
}

/* Whether every gradient of a equals b's, bit for bit, or both have none;
 * a's may be zeros where b has none (the header allows it: a parameter
 * another rank has a gradient of gets zeros before the agree). */
static bool same_grads(const model *a, const model *b)
{
    bool same = true;
    for (int i = 0; i < N_MODEL; i++) {
        tg_tensor *x = tg_grad(a->p[i]), *y = tg_grad(b->p[i]);
        if (x && !y && all_zero(x))
            continue;
        if ((x == NULL) != (y == NULL) || (x && !same_bits(x, y))) {
            fprintf(stderr, "rank %d: gradient of %s differs\n", rank_,
                    a->ps.items[i].name);
            same = false;
        }
    }
    return same;
}

/* The last rank cannot write one gradient (a pending tape entry holds it):
 * every rank fails, and every gradient is as backward left it, the
 * parameters before and after that one too (none averaged). */
static void test_no_half_reduce(tg_dist *d)
{
    if (size_ == 1)
        return; /* one rank writes nothing */
    tg_scope_begin();
    model ref, m;
    model_init(&ref);
    model_init(&m);
    /* tg_dist_allreduce_grads: parameter 5 (w3) held on the last rank */
    CHECK(tg_backward(model_loss(&ref, 700 + (uint32_t)rank_)) == 0);
    CHECK(tg_backward(model_loss(&m, 700 + (uint32_t)rank_)) == 0);
    tg_tensor *v = param(TG_FLOAT32, 3, 40, 98);
    tg_tensor *hold = rank_ == size_ - 1 ? tg_mul(tg_grad(m.p[5]), v) : NULL;
    CHECK(rank_ != size_ - 1 || hold);
    tg_clear_error();
    CHECK(tg_dist_allreduce_grads(d, &m.ps) == -1);
    char want[64];
    snprintf(want, sizeof want, "rank %d: dist_allreduce_grads", size_ - 1);
    CHECK(strncmp(tg_last_error(), want, strlen(want)) == 0);
    CHECK(same_grads(&m, &ref));
    tg_release(hold);
    /* tg_ddp_backward: parameter 6 (rank1_skips, which rank 1's loss does
     * not reach, so that its backward does not touch it) held on rank 1,
     * after a step that gave it a gradient there */
    tg_ddp *p = tg_ddp_new(d, &m.ps, 64);
    CHECK(p != NULL);
    CHECK(tg_ddp_backward(p, model_loss(&m, 710 + (uint32_t)rank_)) == 0);
    CHECK(tg_backward(model_loss(&ref, 710 + (uint32_t)rank_)) == 0);
    CHECK(tg_dist_allreduce_grads(d, &ref.ps) == 0);
    /* (both sum the two local gradients, then average: the same bits) */
    CHECK(same_grads(&m, &ref));
    tg_tensor *u = param(TG_FLOAT32, 40, 0, 99);
    hold = rank_ == 1 ? tg_mul(tg_grad(m.p[6]), u) : NULL;
    CHECK(rank_ != 1 || hold);
    CHECK(tg_backward(model_loss(&ref, 720 + (uint32_t)rank_)) == 0);
    tg_clear_error();
    CHECK(tg_ddp_backward(p, model_loss(&m, 720 + (uint32_t)rank_)) == -1);
    CHECK(strncmp(tg_last_error(), "rank 1: ddp_backward", 20) == 0);
    CHECK(same_grads(&m, &ref));
    tg_release(hold);
    tg_ddp_free(p);
    tg_release(u);
    tg_release(v);
    model_free(&ref);
    model_free(&m);
    tg_scope_end();
}

/* ---- tg_ddp's buckets progress during backward ------------------------- */

/* A chain of layers, one bucket each (1 byte: a parameter per bucket): the
 * last layer's bucket starts early in backward, and the hooks of the
 * layers before it drive it on (MPI_Test), so that it has finished before
 * the wait after backward. Without those calls Open MPI moves no data
 * outside MPI calls, and no bucket is ever done before the wait (early
 * stays 0). Timing decides each step; over many steps some bucket is. */
static void test_ddp_progress(tg_dist *d)
{
    enum { LAYERS = 8, MAX_STEPS = 60 };
    tg_scope_begin();
    tg_tensor *w[LAYERS];
    tg_params ps;
    tg_params_init(&ps);
    for (int i = 0; i < LAYERS; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = param(TG_FLOAT64, 48, 48, 500 + (uint32_t)i);
        tg_params_add(&ps, NULL, name, w[i]);
    }
    tg_ddp *p = tg_ddp_new(d, &ps, 1);
    CHECK(p != NULL);
    tg_ddp_stats st = {0};
    for (int s = 0; p && s < MAX_STEPS; s++) {
        tg_rng r;
        tg_rng_seed(&r, 600 + (uint32_t)(s * size_ + rank_));
        tg_tensor *h = tg_randn(&r, TG_FLOAT64, 2, (int64_t[]){256, 48});
        for (int i = 0; i < LAYERS; i++) {
            tg_tensor *n = tg_tanh(tg_matmul(h, w[i]));
            tg_release(h);
            h = n;
        }
        tg_tensor *loss = tg_sum_all(h);
        tg_release(h);
        CHECK(tg_ddp_backward(p, loss) == 0);
        tg_release(loss);
        tg_ddp_get_stats(p, &st);
        CHECK(st.early >= 0 && st.early <= st.steps * LAYERS);
        /* stop together: every rank's count known to every rank */
        double e = (double)st.early;
        CHECK(tg_dist_mean(d, &e, 1) == 0);
        if (size_ == 1 || e > 0)
            break;
    }
    if (size_ > 1) {
        double e = (double)st.early;
        CHECK(tg_dist_mean(d, &e, 1) == 0);
        if (!(e > 0))
            fprintf(stderr,
                    "rank %d: no bucket finished during backward in "
                    "%lld steps\n",
                    rank_, (long long)st.steps);
        CHECK(e > 0);
    }
    tg_ddp_free(p);
    tg_params_free(&ps);
    for (int i = 0; i < LAYERS; i++)
        tg_release(w[i]);
    tg_scope_end();
}

/* ---- joining through the program's communicator -------------------------- */

static void test_from_comm(tg_dist *d)
{
#ifdef TG_HAVE_MPI
    tg_dist *e = tg_dist_from_comm(MPI_COMM_WORLD);
    CHECK(e && tg_dist_rank(e) == rank_ && tg_dist_size(e) == size_);
    CHECK(tg_dist_agree(e, 0) == 0);
    tg_dist_free(e); /* MPI stays initialized: d still works */
    CHECK(tg_dist_agree(d, 0) == 0);
    CHECK(tg_dist_from_comm(MPI_COMM_NULL) == NULL);
    CHECK(strstr(tg_last_error(), "MPI_COMM_NULL") != NULL);
#else
    (void)d;
#endif
    CHECK(tg_dist_rank(NULL) == 0 && tg_dist_size(NULL) == 1);
    tg_dist_free(NULL);
}

/* ---- the head: N ranks on a global batch = one process on it ------------ */

/* max relative difference of the parameters after 3 AdamW steps, N ranks
 * against one process, for dt (with tg_ddp when ddp, else the blocking
 * all-reduce). */
static double head_run(tg_dist *d, tg_dtype dt, bool ddp)
{
    enum { B = 6, T = 5, C = 8, HS = 4, STEPS = 3 };
    tg_rng r;
    tg_head one, mine;
    tg_rng_seed(&r, 7);
    tg_head_init(&one, dt, C, HS, &r);
    tg_rng_seed(&r, 7);
    tg_head_init(&mine, dt, C, HS, &r);
    tg_params p1, pm;
    tg_params_init(&p1);
    tg_params_init(&pm);
    tg_head_params(&one, &p1, "head");
    tg_head_params(&mine, &pm, "head");
    tg_optim *o1 = tg_optim_new(&p1, tg_adamw_config(1e-2, 0.1));
    tg_optim *om = tg_optim_new(&pm, tg_adamw_config(1e-2, 0.1));
    CHECK(tg_dist_broadcast_params(d, &pm) == 0);
    tg_ddp *p = ddp ? tg_ddp_new(d, &pm, 64) : NULL;
    CHECK(!ddp || p);
    int64_t lo, hi;
    CHECK(tg_dist_shard(d, B, &lo, &hi) == 0);
    for (int s = 0; s < STEPS; s++) {
        tg_scope_begin();
        tg_rng_seed(&r, 1000 + (uint32_t)s); /* the global batch */
        tg_tensor *x = tg_randn(&r, dt, 3, (int64_t[]){B, T, C});
        tg_tensor *y = tg_randn(&r, dt, 3, (int64_t[]){B, T, HS});
        /* one process on the whole batch */
        CHECK(tg_backward(tg_mse_loss(tg_head_forward(&one, x), y)) == 0);
        CHECK(tg_optim_step(o1) == 0);
        tg_optim_zero_grad(o1);
        /* this rank on its rows: the mean of the ranks' means is the
         * batch's mean, the shards being equal */
        tg_tensor *xs = tg_narrow(x, 0, lo, hi - lo);
        tg_tensor *ys = tg_narrow(y, 0, lo, hi - lo);
        tg_tensor *loss = tg_mse_loss(tg_head_forward(&mine, xs), ys);
        if (ddp) {
            CHECK(tg_ddp_backward(p, loss) == 0);
        } else {
            CHECK(tg_backward(loss) == 0);
            CHECK(tg_dist_allreduce_grads(d, &pm) == 0);
        }
        CHECK(tg_optim_step(om) == 0);
        tg_optim_zero_grad(om);
        tg_scope_end();
    }
    double worst = 0;
    for (int i = 0; i < pm.n; i++) {
        double e = max_rel(pm.items[i].t, p1.items[i].t);
        worst = e > worst ? e : worst;
    }
    /* every rank holds the same parameters */
    double w = worst;
    CHECK(tg_dist_mean(d, &w, 1) == 0);
    tg_ddp_free(p);
    tg_optim_free(o1);
    tg_optim_free(om);
    tg_params_free(&p1);
    tg_params_free(&pm);
    tg_head_free(&one);
    tg_head_free(&mine);
    return worst;
}

static void test_head(tg_dist *d)
{
    if (6 % size_ != 0)
        return; /* equal shards only: 1, 2, 3 or 6 ranks */
    for (int ddp = 0; ddp < 2; ddp++) {
        double e64 = head_run(d, TG_FLOAT64, ddp);
        CHECK(e64 <= 1e-12);
        double e32 = head_run(d, TG_FLOAT32, ddp);
        CHECK(e32 <= 1e-5);
        if (rank_ == 0)
            printf("head, %d ranks, %s: max relative difference after 3 AdamW "
                   "steps: float64 %.3g, float32 %.3g\n",
                   size_, ddp ? "tg_ddp" : "blocking all-reduce", e64, e32);
    }
}

int main(int argc, char **argv)
{
    /* for tests/dist.test: whether to run under mpirun at all */
    if (argc > 1 && strcmp(argv[1], "--available") == 0) {
        puts(tg_dist_available() ? "yes" : "no");
        return 0;
    }
    /* started as one of several ranks against a library without MPI */
    if (argc > 1 && strcmp(argv[1], "--refused") == 0) {
        tg_dist *d = tg_dist_init(&argc, &argv);
        if (d || !strstr(tg_last_error(), "built without MPI")) {
            fprintf(stderr, "dist_check --refused: %s\n",
                    d ? "joined" : tg_last_error());
            tg_dist_free(d);
            return 1;
        }
        return 0;
    }
    tg_dist *d = tg_dist_init(&argc, &argv);
    if (!d) {
        fprintf(stderr, "dist_check: %s\n", tg_last_error());
        return 1;
    }
    rank_ = tg_dist_rank(d);
    size_ = tg_dist_size(d);
    if (argc > 1 && strcmp(argv[1], "--abort") == 0)
        return abort_job(d);
    test_agree(d);
    test_check_same(d);
    test_from_comm(d);
    test_shard(d);
    test_broadcast(d);
    test_mismatch(d);
    test_allreduce(d);
    test_ddp(d);
    test_ddp_progress(d);
    test_no_half_reduce(d);
    test_head(d);
    CHECK(tg_live_tensors() <= 0); /* all released (-1: no audit) */
    int rc = tg_dist_agree(d, failures ? -1 : 0);
    if (rank_ == 0)
        printf("dist_check: %d ranks (MPI %s): %s\n", size_,
               tg_dist_available() ? "yes" : "no", rc == 0 ? "ok" : "FAILED");
    tg_dist_free(d);
    return rc == 0 ? 0 : 1;
}
