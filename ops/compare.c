/* Comparisons: eq, ne, lt, le, gt, ge between two tensors (numpy
 * broadcasting) or against a scalar. Results are TG_BOOL masks and carry no
 * gradient (a step function's derivative is 0 almost everywhere). */
#include "core/internal.h"

typedef enum { EQ, NE, LT, LE, GT, GE } cmp_kind;
static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

/* One comparison: out = a (kind) b, b broadcast, or a (kind) v when b is
 * NULL. */
typedef struct cmp_job {
    cmp_kind kind;
    tg_tensor *out;
    const tg_tensor *a, *b;
    double v;
} cmp_job;

/* o[i] = x[i] OP y[i] over one run, y of type Y (y's step 0: one value
 * for all), the adjacent cases as loops of their own, marked for the
 * compiler to vectorise (TG_SIMD: out is a new tensor, so no store of o
 * reaches x or y) for each level's target (TG_LEVELS, below: gt_scalar of
 * a million float32 0.05-0.07 ms, against 0.12-0.15 at the baseline's
 * SSE2; Zen 5, 1 thread). */
#define CMP_LOOP(OP, Y)                                                        \
    do {                                                                       \
        if (so == 1 && sx == 1 && sy == 1) {                                   \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = x[i] OP y[i];                                           \
        } else if (so == 1 && sx == 1 && sy == 0) {                            \
            const Y y0 = *y;                                                   \
            TG_SIMD                                                            \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i] = x[i] OP y0;                                             \
        } else {                                                               \
            for (int64_t i = 0; i < len; i++)                                  \
                o[i * so] = x[i * sx] OP y[i * sy];                            \
        }                                                                      \
    } while (0)

/* CMP_LOOP for the job's kind: the switch outside the loop. */
#define CMP_KIND(kind, Y)                                                      \
    do {                                                                       \
        switch (kind) {                                                        \
        case EQ: CMP_LOOP(==, Y); break;                                       \
        case NE: CMP_LOOP(!=, Y); break;                                       \
        case LT: CMP_LOOP(<, Y); break;                                        \
        case LE: CMP_LOOP(<=, Y); break;                                       \
        case GT: CMP_LOOP(>, Y); break;                                        \
        case GE: CMP_LOOP(>=, Y); break;                                       \
        }                                                                      \
    } while (0)

/* x (kind) y for one pair. */
static bool holds(cmp_kind kind, double x, double y)
{
    switch (kind) {
    case EQ: return x == y;
    case NE: return x != y;
    case LT: return x < y;
    case LE: return x <= y;
    case GT: return x > y;
    case GE: return x >= y;
    }
    return false;
}

/* A bool tensor against a scalar: each element is 0 or 1 (checked where
 * bools enter the library: tg__bad_bool), so the answer is one of two,
 * looked up. */
static void bool_scalar_run(const cmp_job *j, const int64_t *off,
                            const int64_t *step, int64_t len)
{
    const uint8_t r0 = holds(j->kind, 0, j->v), r1 = holds(j->kind, 1, j->v);
    uint8_t *o = TG_DATA(uint8_t, j->out) + off[0];
    const uint8_t *x = TG_DATA(uint8_t, j->a) + off[1];
    if (step[0] == 1 && step[1] == 1) {
        TG_SIMD
        for (int64_t i = 0; i < len; i++)
            o[i] = x[i] ? r1 : r0;
    } else {
        for (int64_t i = 0; i < len; i++)
            o[i * step[0]] = x[i * step[1]] ? r1 : r0;
    }
}

/* One run of a comparison. Two tensors (of one dtype) compare in their
 * own type: exactly, int64 too (through double, 2^53 + 1 would equal
 * 2^53). A scalar v compares with a float tensor in its type (v is already
 * rounded to it, so as in double), with a bool or int64 one in double, as
 * numpy compares an integer array with a Python float. */
TG_LEVELS(cmp_levels,
          (const cmp_job *j, const int64_t *off, const int64_t *step,
           int64_t len),
          const int64_t so = step[0], sx = step[1];
          const bool is_float = j->a->dtype == TG_FLOAT32 ||
                                j->a->dtype == TG_FLOAT64;
          TG_DISPATCH_ANY(j->a->dtype, T, {
              uint8_t *o = TG_DATA(uint8_t, j->out) + off[0];
              const T *x = TG_DATA(T, j->a) + off[1];
              if (j->b) {
                  const T *y = TG_DATA(T, j->b) + off[2];
                  const int64_t sy = step[2];
                  CMP_KIND(j->kind, T);
              } else if (is_float) {
                  const T v = (T)j->v, *y = &v;
                  const int64_t sy = 0;
                  CMP_KIND(j->kind, T);
              } else {
                  const double *y = &j->v;
                  const int64_t sy = 0;
                  CMP_KIND(j->kind, double);
              }
          });)

static void cmp_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const cmp_job *j = job;
    (void)start;
    if (!j->b && j->a->dtype == TG_BOOL)
        bool_scalar_run(j, off, step, len);
    else
        TG_BY_LEVEL(cmp_levels)(j, off, step, len);
}
#undef CMP_KIND
#undef CMP_LOOP

/* out = a (kind) b elementwise, b broadcast to out's shape; b == NULL
 * compares against v. */
static void cmp_kernel(cmp_kind kind, tg_tensor *out, const tg_tensor *a,
                       const tg_tensor *b, double v)
{
    tg_loop L;
    tg__loop_init(&L, out->ndim, out->shape, 3,
                  (const tg_tensor *const[]){out, a, b ? b : a});
    tg__loop_run(&L, 1, cmp_run, &(cmp_job){kind, out, a, b, v});
}

static tg_tensor *compare(cmp_kind kind, tg_tensor *a, tg_tensor *b)
{
    const char *name = cmp_names[kind];
    if (!a || !b)
        return NULL;
    if (a->dtype != b->dtype) {
        tg__error("%s: dtypes differ: %s %s and %s %s", name,
                  tg_dtype_name(a->dtype), TG_SHP(a), tg_dtype_name(b->dtype),
                  TG_SHP(b));
        return NULL;
    }
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(name, 2, (const tg_tensor *const[]){a, b}, &ndim, shape))
        return NULL;
    tg_tensor *y = tg__new(name, TG_BOOL, ndim, shape, false);
    if (y)
        cmp_kernel(kind, y, a, b, 0);
    return y;
}

static tg_tensor *compare_scalar(cmp_kind kind, tg_tensor *t, double v)
{
    if (!t)
        return NULL;
    /* The scalar takes the tensor's dtype first, as in numpy and torch:
     * float32(0.1) == 0.1 holds there, so it must here. */
    if (t->dtype == TG_FLOAT32)
        v = (float)v;
    tg_tensor *y = tg__new(cmp_names[kind], TG_BOOL, t->ndim, t->shape, false);
    if (y)
        cmp_kernel(kind, y, t, NULL, v);
    return y;
}

tg_tensor *tg_eq(tg_tensor *a, tg_tensor *b) { return compare(EQ, a, b); }
tg_tensor *tg_ne(tg_tensor *a, tg_tensor *b) { return compare(NE, a, b); }
tg_tensor *tg_lt(tg_tensor *a, tg_tensor *b) { return compare(LT, a, b); }
tg_tensor *tg_le(tg_tensor *a, tg_tensor *b) { return compare(LE, a, b); }
tg_tensor *tg_gt(tg_tensor *a, tg_tensor *b) { return compare(GT, a, b); }
tg_tensor *tg_ge(tg_tensor *a, tg_tensor *b) { return compare(GE, a, b); }
tg_tensor *tg_eq_scalar(tg_tensor *t, double v)
{
    return compare_scalar(EQ, t, v);
}
tg_tensor *tg_ne_scalar(tg_tensor *t, double v)
{
    return compare_scalar(NE, t, v);
}
tg_tensor *tg_lt_scalar(tg_tensor *t, double v)
{
    return compare_scalar(LT, t, v);
}
tg_tensor *tg_le_scalar(tg_tensor *t, double v)
{
    return compare_scalar(LE, t, v);
}
tg_tensor *tg_gt_scalar(tg_tensor *t, double v)
{
    return compare_scalar(GT, t, v);
}
tg_tensor *tg_ge_scalar(tg_tensor *t, double v)
{
    return compare_scalar(GE, t, v);
}
