/* numpy's legacy generator, bit for bit: np.random.seed / random_sample /
 * standard_normal / randn / rand. The bits come from MT19937 (Matsumoto and
 * Nishimura's Mersenne Twister), doubles take 53 of them, and normals come
 * from the polar Box-Muller method, which makes two at a time and keeps the
 * second for the next call (numpy's legacy_gauss). */
#include "core/internal.h"

#include <math.h>

/* numpy rounds every product before the sum that uses it; a fused
 * multiply-add (x1*x1 + x2*x2 as one fma) would change last bits. GCC never
 * fuses in -std=c11 mode and warns at this pragma, so it is clang's alone. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- MT19937 ----------------------------------------------------------- */

#define MT_N        624
#define MT_M        397
#define MT_MATRIX_A 0x9908b0dfU /* the twist matrix's last row */
#define MT_UPPER    0x80000000U /* the top bit of a word */
#define MT_LOWER    0x7fffffffU /* the 31 bits below it */

/* np.random.seed(int), MT's init_genrand: mt[0] = seed and
 * mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i (mod 2^32), with the
 * state spent (mti = 624) so that the first draw twists. seed() also drops a
 * cached Gaussian, so a reseeded generator repeats itself exactly. */
void tg_rng_seed(tg_rng *r, uint32_t seed)
{
    if (!r) {
        tg__error("rng_seed: rng is NULL");
        return;
    }
    r->mt[0] = seed;
    for (int i = 1; i < MT_N; i++)
        r->mt[i] =
            1812433253U * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = MT_N;
    r->has_gauss = 0;
    r->gauss = 0.0;
}

/* Regenerates all 624 words: word i becomes mt[i+397] ^ A(y), where y joins
 * the top bit of mt[i] to the low 31 bits of mt[i+1] and A(y) = y >> 1,
 * xored with MATRIX_A when y is odd. Indices wrap mod 624; the words past the
 * wrap are already new, exactly as in the reference's three loops. */
static void twist(uint32_t *mt)
{
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (mt[i] & MT_UPPER) | (mt[(i + 1) % MT_N] & MT_LOWER);
        mt[i] = mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ (y & 1 ? MT_MATRIX_A : 0);
    }
}

/* The next word, tempered (the shifts and masks that equidistribute the
 * output bits). */
static uint32_t next32(tg_rng *r)
{
    if (r->mti >= MT_N) {
        twist(r->mt);
        r->mti = 0;
    }
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    return y ^ (y >> 18);
}

/* random_sample: 27 bits of one word and 26 of the next make a 53-bit
 * integer, (a * 2^26 + b) / 2^53, uniform in [0, 1). Two statements, because
 * the order of the draws matters and C leaves operand order unspecified. */
static double next_double(tg_rng *r)
{
    uint32_t a = next32(r) >> 5;
    uint32_t b = next32(r) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* legacy_gauss, the polar method: (x1, x2) uniform in the square [-1, 1)^2
 * until r2 = x1^2 + x2^2 falls in (0, 1); then with f = sqrt(-2 ln(r2) / r2),
 * f*x1 and f*x2 are two independent standard normals. Return f*x2 and cache
 * f*x1 for the next call. */
static double next_gauss(tg_rng *r)
{
    if (r->has_gauss) {
        double cached = r->gauss;
        r->has_gauss = 0;
        r->gauss = 0.0;
        return cached;
    }
    double x1, x2, r2;
    do {
        x1 = 2.0 * next_double(r) - 1.0;
        x2 = 2.0 * next_double(r) - 1.0;
        r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    double f = sqrt(-2.0 * log(r2) / r2);
    r->gauss = f * x1;
    r->has_gauss = 1;
    return f * x2;
}

double tg_rng_uniform(tg_rng *r)
{
    if (!r) {
        tg__error("rng_uniform: rng is NULL");
        return NAN;
    }
    return next_double(r);
}

double tg_rng_normal(tg_rng *r)
{
    if (!r) {
        tg__error("rng_normal: rng is NULL");
        return NAN;
    }
    return next_gauss(r);
}

/* ---- Tensors ----------------------------------------------------------- */

/* A new tensor of draws in C order. float32 takes the same doubles, rounded
 * to nearest, so the stream does not depend on the dtype. */
static tg_tensor *fill(const char *op, tg_rng *r, double (*draw)(tg_rng *),
                       tg_dtype dt, int ndim, const int64_t *shape)
{
    if (!r) {
        tg__error("%s: rng is NULL", op);
        return NULL;
    }
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64) {
        tg__error("%s: dtype must be float32 or float64, got %s", op,
                  tg_dtype_name(dt));
        return NULL;
    }
    tg_tensor *t = tg__new(op, dt, ndim, shape, false);
    if (!t)
        return NULL;
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++)
        tg__store(dt, t->storage->data, i, draw(r));
    return t;
}

tg_tensor *tg_randn(tg_rng *r, tg_dtype dt, int ndim, const int64_t *shape)
{
    return fill("randn", r, next_gauss, dt, ndim, shape);
}

tg_tensor *tg_rand(tg_rng *r, tg_dtype dt, int ndim, const int64_t *shape)
{
    return fill("rand", r, next_double, dt, ndim, shape);
}

/* The next tempered 32-bit word, for core/create.c's integer draws
 * (numpy's next_uint32 of the legacy generator). */
uint32_t tg__rng_next32(tg_rng *r) { return next32(r); }
