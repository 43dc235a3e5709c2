/* Selection by a mask: where, masked_fill, and tril/triu. */
#include "core/tape.h"

#include <string.h>

/* Operands {out, cond, a, b} of one where. */
typedef struct where_job {
    tg_tensor *out;
    const tg_tensor *cond, *a, *b;
} where_job;

/* Both values read first, whichever the select keeps: as a ternary's
 * operand, a load is conditional, and the compiler left the loop scalar
 * with a branch per element (3.3x slower on masked_fill's runs). */
#define WHERE_LOOP(so, sc, sx, sy)                                             \
    TG_SIMD                                                                    \
    for (int64_t i = 0; i < len; i++) {                                        \
        const T xi = x[i * (sx)], yi = y[i * (sy)];                            \
        o[i * (so)] = c[i * (sc)] != 0 ? xi : yi;                              \
    }

/* out = cond ? a : b over one run. Adjacent operands, or a scalar a or b
 * (masked_fill's value, the zero of the backwards), have constant steps
 * and loops of their own, which the compiler vectorises for each level's
 * target (TG_LEVELS; where_run picks the level): a select per element, so
 * the same bits at every level. This replaced hand-written AVX2 and
 * AVX-512 blends (bool cond, float operands only): masked_fill of
 * (16,1024,1024) float32 scores with a (1024,1024) mask, medians of six
 * interleaved runs, 1 thread (Zen 5), took 5.45 ms against their 5.39 at
 * the AVX-512 level, 3.43 against 4.07 at AVX2's, and the same on 2
 * threads (2.30 against 2.37). */
TG_LEVELS(where_levels,
          (const where_job *j, const int64_t *off, const int64_t *step,
           int64_t len),
          TG_DISPATCH_ANY(j->cond->dtype, C, {
              TG_DISPATCH_FLOAT(j->out->dtype, T, {
                  T *o = TG_DATA(T, j->out) + off[0];
                  const C *c = TG_DATA(C, j->cond) + off[1];
                  const T *x = TG_DATA(T, j->a) + off[2],
                          *y = TG_DATA(T, j->b) + off[3];
                  if (step[0] == 1 && step[1] == 1 && step[2] == 1 &&
                      step[3] == 1) {
                      WHERE_LOOP(1, 1, 1, 1)
                  } else if (step[0] == 1 && step[1] == 1 && step[2] == 0 &&
                             step[3] == 1) {
                      WHERE_LOOP(1, 1, 0, 1)
                  } else if (step[0] == 1 && step[1] == 1 && step[2] == 1 &&
                             step[3] == 0) {
                      WHERE_LOOP(1, 1, 1, 0)
                  } else {
                      WHERE_LOOP(step[0], step[1], step[2], step[3])
                  }
              });
          });)

static void where_run(void *job, int64_t start, const int64_t *off,
                      const int64_t *step, int64_t len)
{
    (void)start;
    TG_BY_LEVEL(where_levels)(job, off, step, len);
}
#undef WHERE_LOOP

/* out = cond ? a : b elementwise, all three broadcast to out's shape.
 * cond may be bool or float (nonzero is true). */
static void where_kernel(tg_tensor *out, const tg_tensor *cond,
                         const tg_tensor *a, const tg_tensor *b)
{
    tg_loop L;
    tg__loop_init(&L, out->ndim, out->shape, 4,
                  (const tg_tensor *const[]){out, cond, a, b});
    tg__loop_run(&L, 1, where_run, &(where_job){out, cond, a, b});
}

/* cond ? a : b into a new tensor of the broadcast shape, unrecorded; NULL
 * for a NULL operand (its error kept). */
static tg_tensor *select_new(const char *op, const tg_tensor *cond,
                             const tg_tensor *a, const tg_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(op, 3, (const tg_tensor *const[]){cond, a, b}, &ndim,
                       shape))
        return NULL;
    tg_tensor *y = tg__new(op, a->dtype, ndim, shape, false);
    if (y)
        where_kernel(y, cond, a, b);
    return y;
}

/* forward:  y = cond ? a : b
 * backward: each y element came from exactly one of a, b:
 *           da = cond ? dy : 0      db = cond ? 0 : dy
 *           (summed back to a's and b's shapes where they were broadcast) */
static void where_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *cond = n->saved[0];
    tg_tensor *zero = tg_zeros(dy->dtype, 0, NULL);
    if (tg__needs_grad(n, 0)) {
        tg_tensor *da = select_new("where", cond, dy, zero);
        tg__accumulate(n, 0, da);
        tg_release(da);
    }
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = select_new("where", cond, zero, dy);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
    tg_release(zero);
}
/* saved[0] is cond, as recorded (a mask is no float: replayed as it is) */
static tg_tensor *where_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_where(n->saved[0], in[0], in[1]);
}
/* vjp: da = where(cond, dy, 0)   db = where(cond, 0, dy)   (exactly 0 in
 *      the cells the other one gave; of y's shape: the walk sums each down
 *      to a's and b's where they were broadcast);
 * jvp: ty = where(cond, ta, tb), zeros(a.shape) for a NULL ta (b's alike);
 *      NULL when both are */
static int where_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    tg_tensor *cond = n->saved[0];
    tg_tensor *zero = tg_zeros(dy->dtype, 0, NULL);
    if (!zero)
        return -1;
    if (tg__needs_grad(n, 0))
        dx[0] = tg_where(cond, dy, zero);
    if (tg__needs_grad(n, 1))
        dx[1] = tg_where(cond, zero, dy);
    tg_release(zero);
    if ((tg__needs_grad(n, 0) && !dx[0]) || (tg__needs_grad(n, 1) && !dx[1])) {
        for (int i = 0; i < 2; i++) {
            tg_release(dx[i]);
            dx[i] = NULL;
        }
        return -1;
    }
    return 0;
}
static int where_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0] && !t[1])
        return 0;
    tg_tensor *in[2];
    for (int i = 0; i < 2; i++)
        in[i] = t[i] ? tg_retain(t[i]) : tg_zeros_like(n->in[i]);
    if (in[0] && in[1])
        *ty = where_replay(n, in);
    tg_release(in[0]);
    tg_release(in[1]);
    return *ty ? 0 : -1;
}
static const tg_op where_op = {.name = "where",
                               .backward = where_backward,
                               .makes_neg_inf = true,
                               .replay = where_replay,
                               .vjp = where_vjp,
                               .jvp = where_jvp};

tg_tensor *tg_where(tg_tensor *cond, tg_tensor *a, tg_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    if (!tg__check_same_float("where", a, b))
        return NULL;
    tg_tensor *y = tg__record(&where_op, select_new("where", cond, a, b), 2,
                              (tg_tensor *[]){a, b});
    if (y && y->node)
        tg__save(y->node, cond);
    return y;
}

/* forward:  y = mask ? value : t, t and mask broadcast together (y has
 *           their broadcast shape, as torch.masked_fill out of place)
 * backward: value is a constant, so only unmasked positions pass dy on:
 *           dt = mask ? 0 : dy     (exactly 0 under the mask)
 *           summed back to t's shape where t was broadcast */
static void masked_fill_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *zero = tg_zeros(dy->dtype, 0, NULL);
    tg_tensor *dt = select_new("masked_fill", n->saved[0], zero, dy);
    tg__accumulate(n, 0, dt);
    tg_release(dt);
    tg_release(zero);
}
/* saved[0] the mask, p[0] the value as the caller gave it (tg_full rounds
 * it to the dtype of the replay's input) */
static tg_tensor *masked_fill_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_masked_fill(in[0], n->saved[0], n->p[0]);
}
/* vjp: dt = masked_fill(dy, mask, 0)  (exactly 0 under the mask, whatever
 *      the value filled, -inf included; of y's shape: the walk sums it down
 *      to t's where t was broadcast);
 * jvp: ty = masked_fill(tt, mask, 0), tt the tangent of t (the value is a
 *      constant) */
static int masked_fill_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = tg_masked_fill(dy, n->saved[0], 0.0);
    return dx[0] ? 0 : -1;
}
static int masked_fill_jvp(const tg_node *n, tg_tensor *const *t,
                           tg_tensor **ty)
{
    *ty = t[0] ? tg_masked_fill(t[0], n->saved[0], 0.0) : NULL;
    return t[0] && !*ty ? -1 : 0;
}
static const tg_op masked_fill_op = {.name = "masked_fill",
                                     .backward = masked_fill_backward,
                                     .makes_neg_inf = true,
                                     .replay = masked_fill_replay,
                                     .vjp = masked_fill_vjp,
                                     .jvp = masked_fill_jvp};

tg_tensor *tg_masked_fill(tg_tensor *t, tg_tensor *mask, double value)
{
    if (!t || !mask)
        return NULL;
    if (!tg__check_float("masked_fill", t))
        return NULL;
    /* t and mask broadcast together, either way: t (3,) under a (2,3)
     * mask gives (2,3), as torch.masked_fill does out of place. */
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast("masked_fill", 2, (const tg_tensor *const[]){t, mask},
                       &ndim, shape))
        return NULL;
    tg_tensor *fill = tg_full(t->dtype, 0, NULL, value);
    tg_tensor *y = fill ? select_new("masked_fill", mask, fill, t) : NULL;
    tg_release(fill);
    y = tg__record(&masked_fill_op, y, 1, &t);
    if (y && y->node) {
        tg__save(y->node, mask);
        y->node->p[0] = value;
    }
    return y;
}

/* ---- tril / triu ---------------------------------------------------------- */

/* Zeroes, in every (rows, cols) matrix of contiguous t, the entries above
 * diagonal k (lower = true: j - i > k) or below it (j - i < k). */
static void zero_triangle(tg_tensor *t, int k, bool lower)
{
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t mats = rows > 0 && cols > 0 ? tg_numel(t) / (rows * cols) : 0;
    size_t es = tg_dtype_size(t->dtype);
    char *base = (char *)t->storage->data + (size_t)t->offset * es;
    /* Row i's zeros are one run of columns: j > i + k (tril) or j < i + k
     * (triu). Zero bytes are 0 in every dtype (+0.0 for floats), so each
     * run is one memset. */
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            int64_t lo = lower ? i + k + 1 : 0, hi = lower ? cols : i + k;
            lo = lo < 0 ? 0 : lo > cols ? cols : lo;
            hi = hi < 0 ? 0 : hi > cols ? cols : hi;
            if (lo < hi)
                memset(base + (size_t)((m * rows + i) * cols + lo) * es, 0,
                       (size_t)(hi - lo) * es);
        }
}

/* forward:  y = x where (j - i <= k) [tril] or (j - i >= k) [triu], else 0
 * backward: the kept entries pass dy through, the zeroed ones don't:
 *           dx = tril(dy, k)  [resp. triu(dy, k)] */
static void tri_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx =
        n->ip[1] ? tg_tril(dy, (int)n->ip[0]) : tg_triu(dy, (int)n->ip[0]);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
/* ip[0] the diagonal k, ip[1] whether tril */
static tg_tensor *tri_replay(const tg_node *n, tg_tensor *const *in)
{
    return n->ip[1] ? tg_tril(in[0], (int)n->ip[0])
                    : tg_triu(in[0], (int)n->ip[0]);
}
/* The mask is diagonal, so its own transpose:
 * vjp: dx = tril(dy, k) [triu(dy, k)] ;  jvp: ty = tril(t, k) [triu(t, k)]
 * (both the replay, given dy or t) */
static int tri_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = tri_replay(n, &dy);
    return dx[0] ? 0 : -1;
}
static int tri_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? tri_replay(n, t) : NULL;
    return t[0] && !*ty ? -1 : 0;
}
static const tg_op tril_op = {.name = "tril",
                              .backward = tri_backward,
                              .replay = tri_replay,
                              .vjp = tri_vjp,
                              .jvp = tri_jvp};
static const tg_op triu_op = {.name = "triu",
                              .backward = tri_backward,
                              .replay = tri_replay,
                              .vjp = tri_vjp,
                              .jvp = tri_jvp};

static tg_tensor *triangle(tg_tensor *t, int k, bool lower)
{
    const char *name = lower ? "tril" : "triu";
    if (!t)
        return NULL;
    if (t->ndim < 2) {
        tg__error("%s: needs at least 2 dims, got %s", name, TG_SHP(t));
        return NULL;
    }
    tg_tensor *y = tg__copy(name, t);
    if (!y)
        return NULL;
    zero_triangle(y, k, lower);
    if (t->dtype == TG_FLOAT32 || t->dtype == TG_FLOAT64)
        y = tg__record(lower ? &tril_op : &triu_op, y, 1, &t);
    if (y && y->node)
        y->node->ip[0] = k, y->node->ip[1] = lower;
    return y;
}

tg_tensor *tg_tril(tg_tensor *t, int k) { return triangle(t, k, true); }
tg_tensor *tg_triu(tg_tensor *t, int k) { return triangle(t, k, false); }
