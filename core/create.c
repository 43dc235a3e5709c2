/* Creation beyond filling a shape: the identity (eye), evenly spaced
 * values (linspace, torch's formula to the bit), and integer draws from
 * the caller's legacy generator (randint, randperm, numpy's
 * RandomState.randint and permutation to the bit); and the typed forms of
 * tg_from_data. Every function returns a new contiguous tensor with no tape
 * entry. */
#include "core/internal.h"

#include <math.h>
#include <string.h>

tg_tensor *tg_eye(tg_dtype dt, int64_t n, int64_t m)
{
    if (n < 0 || m < 0) {
        tg__error("eye: sizes (%lld, %lld) must be >= 0", (long long)n,
                  (long long)m);
        return NULL;
    }
    tg_tensor *t = tg__new("eye", dt, 2, (const int64_t[]){n, m}, true);
    for (int64_t i = 0; t && i < n && i < m; i++)
        tg__store(dt, t->storage->data, i * m + i, 1.0);
    return t;
}

/* torch.linspace's formula: step = (stop - start) / (steps - 1) in the
 * tensor's type, the first half counted up from start and the second (from
 * steps / 2 on) down from stop, so that both ends are exact:
 *     x[i] = start + i * step                   i <  steps / 2
 *     x[i] = stop - (steps - 1 - i) * step      i >= steps / 2
 * each a fused multiply-add, rounded once, in float for float32 (start,
 * stop and step rounded to float first) and double for float64. torch's
 * own last bits depend on its build (its vector width, and whether the
 * compiler fused the multiply-add); ours are the formula's, and within a
 * few ulps of the range of torch's. */
/* x * y + z rounded once, in x's type. */
#define fma_of(x, y, z)                                                        \
    _Generic((x), float : fmaf, default : fma)((x), (y), (z))

tg_tensor *tg_linspace(tg_dtype dt, double start, double stop, int64_t steps)
{
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg__error("linspace: dtype must be float32 or float64, got %s",
                  tg_dtype_name(dt));
        return NULL;
    }
    if (!isfinite(start) || !isfinite(stop) || steps < 0) {
        tg__error("linspace: need finite start and stop and steps >= 0, got "
                  "(%g, %g, %lld)",
                  start, stop, (long long)steps);
        return NULL;
    }
    tg_tensor *t = tg__new("linspace", dt, 1, &steps, false);
    if (!t || steps == 0)
        return t;
    TG_DISPATCH_FLOAT(dt, T, {
        T *x = TG_DATA(T, t);
        const T a = (T)start, b = (T)stop;
        const T step = steps > 1 ? (b - a) / (T)(steps - 1) : 0;
        const int64_t half = steps / 2;
        for (int64_t i = 0; i < steps; i++)
            x[i] = i < half ? fma_of(step, (T)i, a)
                            : fma_of(-step, (T)(steps - 1 - i), b);
    });
    if (steps == 1) /* torch: [start] */
        tg__store(dt, t->storage->data, 0, start);
    return t;
}

/* A value in [0, max] by numpy's masked rejection (legacy random_interval
 * and random_bounded_uint64's masked path): draw words, keep the bits of the
 * smallest mask 2^k - 1 >= max, until the value is <= max. 32-bit words
 * while max fits in them, else 64-bit ones, the first word high. */
static uint64_t draw_to(tg_rng *r, uint64_t max)
{
    uint64_t mask = max, v;
    for (int s = 1; s < 64; s *= 2)
        mask |= mask >> s;
    if (max <= 0xffffffffu) {
        while ((v = tg__rng_next32(r) & mask) > max)
            ;
    } else {
        do {
            uint64_t hi = tg__rng_next32(r);
            v = (hi << 32 | tg__rng_next32(r)) & mask;
        } while (v > max);
    }
    return v;
}

/* np.random.randint(low, high, size) of the legacy generator: each value
 * low + draw_to(high - low - 1), in C order; the range in uint64, so
 * (INT64_MIN, INT64_MAX) does not overflow. A range of 2^32 values takes
 * one whole word each, as numpy's (no mask to reject with). */
tg_tensor *tg_randint(tg_rng *r, int64_t low, int64_t high, int ndim,
                      const int64_t *shape)
{
    if (!r) {
        tg__error("randint: rng is NULL");
        return NULL;
    }
    if (low >= high) {
        tg__error("randint: need low < high, got [%lld, %lld)", (long long)low,
                  (long long)high);
        return NULL;
    }
    tg_tensor *t = tg__new("randint", TG_INT64, ndim, shape, false);
    if (!t)
        return NULL;
    const uint64_t max = (uint64_t)high - (uint64_t)low - 1;
    int64_t *v = TG_DATA(int64_t, t), n = tg_numel(t);
    for (int64_t i = 0; i < n; i++) /* numpy draws nothing for one value */
        v[i] =
            (int64_t)((uint64_t)low + (max == 0             ? 0
                                       : max == 0xffffffffu ? tg__rng_next32(r)
                                                            : draw_to(r, max)));
    return t;
}

/* np.random.permutation(n) of the legacy generator: 0..n-1 shuffled by
 * Fisher-Yates from the end, for i = n-1 down to 1 swapping x[i] with
 * x[j], j = draw_to(i) uniform in [0, i]: every one of the n! orders
 * equally likely. */
tg_tensor *tg_randperm(tg_rng *r, int64_t n)
{
    if (!r) {
        tg__error("randperm: rng is NULL");
        return NULL;
    }
    if (n < 0) {
        tg__error("randperm: n must be >= 0, got %lld", (long long)n);
        return NULL;
    }
    tg_tensor *t = tg__new("randperm", TG_INT64, 1, &n, false);
    if (!t)
        return NULL;
    int64_t *v = TG_DATA(int64_t, t);
    for (int64_t i = 0; i < n; i++)
        v[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)draw_to(r, (uint64_t)i);
        int64_t x = v[i];
        v[i] = v[j];
        v[j] = x;
    }
    return t;
}

/* ---- typed tg_from_data ------------------------------------------------- */

/* tg_from_data, its errors naming op. */
static tg_tensor *from(const char *op, tg_dtype dt, int ndim,
                       const int64_t *shape, const void *data)
{
    tg_tensor *t = tg__new(op, dt, ndim, shape, false);
    if (!t)
        return NULL;
    const int64_t n = tg_numel(t);
    if (!data && n > 0) {
        tg_release(t);
        tg__error("%s: data is NULL for shape %s", op,
                  tg__shape_str(ndim, shape, (char[TG_SHAPE_STR]){0}));
        return NULL;
    }
    if (n > 0)
        memcpy(t->storage->data, data, (size_t)n * tg_dtype_size(dt));
    return t;
}

tg_tensor *tg_from_f32(int ndim, const int64_t *shape, const float *data)
{
    return from("from_f32", TG_FLOAT32, ndim, shape, data);
}

tg_tensor *tg_from_f64(int ndim, const int64_t *shape, const double *data)
{
    return from("from_f64", TG_FLOAT64, ndim, shape, data);
}

tg_tensor *tg_from_i64(int ndim, const int64_t *shape, const int64_t *data)
{
    return from("from_i64", TG_INT64, ndim, shape, data);
}

/* bool is one byte holding 0 or 1 wherever C11 runs with this ABI, the
 * layout of TG_BOOL. */
_Static_assert(sizeof(bool) == 1, "TG_BOOL holds one byte an element");
tg_tensor *tg_from_bool(int ndim, const int64_t *shape, const bool *data)
{
    return from("from_bool", TG_BOOL, ndim, shape, data);
}
