/* Printing tensors exactly as numpy prints arrays, and numpy.allclose.
 *
 * The text is str(arr) with np.set_printoptions(precision=p) and every other
 * option at its default (numpy/core/arrayprint.py, numpy >= 1.14 style):
 *
 *   - each float is the shortest decimal that reads back as the same float32
 *     or float64 (Steele & White / Burger & Dybvig "free-format" digits, the
 *     Dragon4 variant numpy uses, with round-half-even margins), cut at p
 *     fractional digits and then rounded exactly;
 *   - all elements share one width: positional ("-0.38", "1.  ") unless the
 *     nonzero magnitudes ask for scientific notation ("1.5e-05"), which they
 *     do when max >= 1e8, min < 1e-4 or max / min > 1000;
 *   - rows wrap at 75 columns; more than 1000 elements are summarised with
 *     "..." keeping 3 items at each edge of every long axis;
 *   - a 0-d tensor prints as numpy's scalar str ("0.5", "1.0", "1e-05").
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LINE_WIDTH 75
#define THRESHOLD 1000 /* summarise above this many elements */
#define EDGE_ITEMS 3   /* items kept at each edge of a summarised axis */
#define DEFAULT_PRECISION 8
/* Beyond ~25 fractional digits precision changes nothing (the shortest
 * round-trip digits end first); the cap only keeps the arithmetic small. */
#define MAX_PRECISION 1000

/* ===================================================================== */
/* A growable string                                                      */
/* ===================================================================== */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putc(sbuf *b, char c) { sb_putn(b, &c, 1); }

static void sb_repeat(sbuf *b, char c, int n)
{
    for (int i = 0; i < n; i++)
        sb_putc(b, c);
}

/* Appends src and frees it (an oom in src carries over). */
static void sb_take(sbuf *b, sbuf *src)
{
    if (src->oom)
        b->oom = true;
    if (src->len)
        sb_putn(b, src->p, src->len);
    free(src->p);
    *src = (sbuf){0};
}

/* ===================================================================== */
/* Unsigned big integers, just enough for exact float-to-decimal          */
/* ===================================================================== */

/* A float64 is at most 2^1024 and at least 2^-1074; scaled to integers and
 * times 10 per digit, every quantity below stays under 1200 bits. */
#define BIG_BLOCKS 48

typedef struct big {
    int len;                  /* blocks in use; no leading zero blocks */
    uint32_t b[BIG_BLOCKS];   /* little-endian base 2^32 */
} big;

static void big_set(big *x, uint64_t v)
{
    x->len = 0;
    while (v) {
        x->b[x->len++] = (uint32_t)v;
        v >>= 32;
    }
}

static int big_cmp(const big *x, const big *y)
{
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    for (int i = x->len - 1; i >= 0; i--)
        if (x->b[i] != y->b[i])
            return x->b[i] < y->b[i] ? -1 : 1;
    return 0;
}

/* x *= m */
static void big_mul_small(big *x, uint32_t m)
{
    uint64_t carry = 0;
    for (int i = 0; i < x->len; i++) {
        uint64_t p = (uint64_t)x->b[i] * m + carry;
        x->b[i] = (uint32_t)p;
        carry = p >> 32;
    }
    if (carry) {
        TG_ASSERT(x->len < BIG_BLOCKS);
        x->b[x->len++] = (uint32_t)carry;
    }
}

/* x *= 10^n */
static void big_mul_pow10(big *x, int n)
{
    static const uint32_t pow10[] = {1,      10,      100,      1000,     10000,
                                     100000, 1000000, 10000000, 100000000};
    for (; n >= 9; n -= 9)
        big_mul_small(x, 1000000000u);
    big_mul_small(x, pow10[n]);
}

/* x <<= n */
static void big_shl(big *x, int n)
{
    if (x->len == 0 || n == 0)
        return;
    int blocks = n / 32, bits = n % 32;
    TG_ASSERT(x->len + blocks + 1 <= BIG_BLOCKS);
    x->b[x->len + blocks] = 0;
    for (int i = x->len - 1; i >= 0; i--) {
        uint64_t v = (uint64_t)x->b[i] << bits;
        x->b[i + blocks + 1] |= (uint32_t)(v >> 32);
        x->b[i + blocks] = (uint32_t)v;
    }
    for (int i = 0; i < blocks; i++)
        x->b[i] = 0;
    x->len += blocks + 1;
    while (x->len && !x->b[x->len - 1])
        x->len--;
}

static void big_pow2(big *x, int n)
{
    big_set(x, 1);
    big_shl(x, n);
}

/* r = x + y */
static void big_add(big *r, const big *x, const big *y)
{
    if (x->len < y->len) {
        const big *t = x;
        x = y;
        y = t;
    }
    uint64_t carry = 0;
    for (int i = 0; i < x->len; i++) {
        uint64_t s = (uint64_t)x->b[i] + (i < y->len ? y->b[i] : 0) + carry;
        r->b[i] = (uint32_t)s;
        carry = s >> 32;
    }
    r->len = x->len;
    if (carry) {
        TG_ASSERT(r->len < BIG_BLOCKS);
        r->b[r->len++] = 1;
    }
}

/* x -= y, with x >= y */
static void big_sub(big *x, const big *y)
{
    int64_t borrow = 0;
    for (int i = 0; i < x->len; i++) {
        int64_t d = (int64_t)x->b[i] - (i < y->len ? y->b[i] : 0) - borrow;
        borrow = d < 0;
        x->b[i] = (uint32_t)(d + (borrow ? ((int64_t)1 << 32) : 0));
    }
    while (x->len && !x->b[x->len - 1])
        x->len--;
}

/* The next decimal digit: q = x / y (0..9), x = x mod y. */
static int big_divmod_digit(big *x, const big *y)
{
    int q = 0;
    while (big_cmp(x, y) >= 0) {
        big_sub(x, y);
        q++;
    }
    TG_ASSERT(q <= 9);
    return q;
}

/* ===================================================================== */
/* Shortest round-trip digits (numpy's Dragon4, unique mode)              */
/* ===================================================================== */

/* A finite float as mantissa * 2^exponent. The high margin (half the gap
 * to the next float up) is twice the low one at a power of two. */
typedef struct fparts {
    uint64_t mantissa;
    int exponent;
    int mantissa_bit; /* index of the highest set bit of mantissa */
    bool unequal_margins;
    bool negative;
} fparts;

static int highest_bit(uint64_t v)
{
    int n = -1;
    while (v) {
        v >>= 1;
        n++;
    }
    return n;
}

/* v must be finite; for float32, v holds the float's exact value. */
static fparts decompose(tg_dtype dt, double v)
{
    fparts f;
    if (dt == TG_FLOAT32) {
        float x = (float)v;
        uint32_t bits;
        memcpy(&bits, &x, sizeof bits);
        uint32_t frac = bits & 0x7fffffu, e = (bits >> 23) & 0xffu;
        f.negative = bits >> 31;
        if (e) {
            f.mantissa = (1u << 23) | frac;
            f.exponent = (int)e - 127 - 23;
            f.unequal_margins = e != 1 && frac == 0;
        } else {
            f.mantissa = frac;
            f.exponent = 1 - 127 - 23;
            f.unequal_margins = false;
        }
    } else {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        uint64_t frac = bits & 0xfffffffffffffull;
        int e = (int)((bits >> 52) & 0x7ff);
        f.negative = bits >> 63;
        if (e) {
            f.mantissa = (1ull << 52) | frac;
            f.exponent = e - 1023 - 52;
            f.unequal_margins = e != 1 && frac == 0;
        } else {
            f.mantissa = frac;
            f.exponent = 1 - 1023 - 52;
            f.unequal_margins = false;
        }
    }
    f.mantissa_bit = highest_bit(f.mantissa);
    return f;
}

/* How cutoff_max / cutoff_min count digits: past the decimal point
 * (positional) or in total (scientific). */
typedef enum { CUT_FRACTION, CUT_TOTAL } cutoff_mode;

#define MAX_DIGITS 128

/* Writes the decimal digits of |f| into digits (no NUL) and returns how many;
 * *exp10 is the power of ten of the first digit. Digits are generated until
 * they identify f uniquely among its neighbours (and at least cutoff_min of
 * them, when >= 0), but never past cutoff_max (when >= 0); the last digit is
 * rounded to nearest, ties to even. A value of 0 gives "0", exponent 0.
 *
 * All quantities are integers over a common scale:
 *   value = |f| / 10^k,  mlow / mhigh = half the gap to the float below /
 *   above, and a digit is stripped per step with value = 10 * (value mod 1).
 * low: the digits so far are within mlow below f; high: the digits plus one
 * unit are within mhigh above f. With an even mantissa the margins are
 * inclusive, as round-half-even reading would land on f. */
static int dragon4(const fparts *f, cutoff_mode mode, int cutoff_max,
                   int cutoff_min, char *digits, int *exp10)
{
    if (f->mantissa == 0) {
        digits[0] = '0';
        *exp10 = 0;
        return 1;
    }
    const bool is_even = (f->mantissa & 1) == 0;
    const int margin_shift = f->unequal_margins ? 2 : 1;
    big value, scale, mlow, mhigh, value_high;

    /* value / scale = mantissa * 2^exponent, margins over the same scale,
     * everything doubled (quadrupled with unequal margins) to stay integer. */
    big_set(&value, f->mantissa);
    if (f->exponent > 0) {
        big_shl(&value, f->exponent + margin_shift);
        big_set(&scale, (uint64_t)1 << margin_shift);
        big_pow2(&mlow, f->exponent);
    } else {
        big_shl(&value, margin_shift);
        big_pow2(&scale, -f->exponent + margin_shift);
        big_set(&mlow, 1);
    }

    /* k = floor(log10 |f|) + 1, or one less: the estimate is fixed below. */
    int k = (int)ceil((double)(f->mantissa_bit + f->exponent) *
                          0.30102999566398119521373889472449 -
                      0.69);
    /* Positional output never needs digits left of the first kept one. */
    if (cutoff_max >= 0 && mode == CUT_FRACTION && k <= -cutoff_max)
        k = -cutoff_max + 1;
    if (k > 0) {
        big_mul_pow10(&scale, k);
    } else if (k < 0) {
        big_mul_pow10(&value, -k);
        big_mul_pow10(&mlow, -k);
    }
    if (big_cmp(&value, &scale) >= 0) {
        k++;
    } else {
        big_mul_small(&value, 10);
        big_mul_small(&mlow, 10);
    }
    mhigh = mlow;
    if (f->unequal_margins)
        big_mul_small(&mhigh, 2);

    /* The exponents of the last digit allowed and the last one required. */
    int last_allowed = k - MAX_DIGITS;
    if (cutoff_max >= 0) {
        int want = mode == CUT_TOTAL ? k - cutoff_max : -cutoff_max;
        if (want > last_allowed)
            last_allowed = want;
    }
    int last_required = k;
    if (cutoff_min >= 0) {
        int want = mode == CUT_TOTAL ? k - cutoff_min : -cutoff_min;
        if (want < last_required)
            last_required = want;
    }
    *exp10 = k - 1;

    int n = 0, digit;
    bool low, high;
    for (;;) {
        k--;
        digit = big_divmod_digit(&value, &scale);
        big_add(&value_high, &value, &mhigh);
        int cmp_low = big_cmp(&value, &mlow);
        int cmp_high = big_cmp(&value_high, &scale);
        low = is_even ? cmp_low <= 0 : cmp_low < 0;
        high = is_even ? cmp_high >= 0 : cmp_high > 0;
        if (((low || high) && k <= last_required) || k == last_allowed)
            break;
        digits[n++] = (char)('0' + digit);
        big_mul_small(&value, 10);
        big_mul_small(&mlow, 10);
        big_mul_small(&mhigh, 10);
    }

    /* Round the last digit: down if only the low end is close, up if only
     * the high end is, otherwise to nearest with ties to even. */
    bool round_down = low;
    if (low == high) {
        big_mul_small(&value, 2);
        int c = big_cmp(&value, &scale);
        round_down = c < 0 || (c == 0 && digit % 2 == 0);
    }
    if (round_down || digit < 9) {
        digits[n++] = (char)('0' + digit + !round_down);
        return n;
    }
    /* Round up through a run of 9s: 0.0999 -> 0.1. */
    for (;;) {
        if (n == 0) {
            digits[n++] = '1';
            *exp10 += 1;
            return n;
        }
        if (digits[--n] != '9') {
            digits[n++]++;
            return n;
        }
    }
}

/* ===================================================================== */
/* numpy's format_float_positional / format_float_scientific              */
/* ===================================================================== */

/* Trailing-zero trimming, as numpy's trim= argument. */
typedef enum {
    TRIM_NONE,     /* 'k': keep trailing zeros and the point */
    TRIM_ZEROS,    /* '.': drop trailing zeros, keep the point ("1.") */
    TRIM_ONE_ZERO, /* '0': drop trailing zeros but one ("1.0") */
    TRIM_POINT,    /* '-': drop trailing zeros and the point ("1") */
} trim_mode;

/* Drops trailing fractional zeros from b (whose fraction holds *nfrac
 * digits), then applies the mode's rule for a bare point. */
static void trim_zeros(sbuf *b, int *nfrac, trim_mode trim)
{
    if (trim == TRIM_NONE || *nfrac == 0)
        return;
    while (b->len && b->p[b->len - 1] == '0') {
        b->len--;
        --*nfrac;
    }
    if (b->len && b->p[b->len - 1] == '.') {
        if (trim == TRIM_ONE_ZERO) {
            b->p[b->len++] = '0';
            ++*nfrac;
        } else if (trim == TRIM_POINT) {
            b->len--;
        }
    }
    b->p[b->len] = '\0';
}

/* Positional "ddd.ddd": at most precision fractional digits (< 0: no cut),
 * at least min_digits of them. Padded with spaces to pad_left characters
 * before the point and pad_right after it (< 0: none). */
static void format_positional(sbuf *out, const fparts *f, int precision,
                              int min_digits, trim_mode trim, int pad_left,
                              int pad_right)
{
    char digits[MAX_DIGITS];
    int exp10;
    int n = dragon4(f, CUT_FRACTION, precision, min_digits, digits, &exp10);

    sbuf b = {0};
    if (f->negative)
        sb_putc(&b, '-');
    int nwhole, nfrac = 0;
    if (exp10 >= 0) {
        nwhole = exp10 + 1;
        int head = n < nwhole ? n : nwhole;
        sb_putn(&b, digits, (size_t)head);
        sb_repeat(&b, '0', nwhole - head);
        if (n > nwhole) {
            nfrac = n - nwhole;
            sb_putc(&b, '.');
            sb_putn(&b, digits + nwhole, (size_t)nfrac);
        }
    } else {
        nwhole = 1;
        nfrac = -(exp10 + 1) + n;
        sb_puts(&b, "0.");
        sb_repeat(&b, '0', -(exp10 + 1));
        sb_putn(&b, digits, (size_t)n);
    }
    if (nfrac == 0 && trim != TRIM_POINT)
        sb_putc(&b, '.');
    int want_frac = min_digits > 0 ? min_digits : 0;
    if (trim == TRIM_ONE_ZERO && nfrac == 0) {
        sb_putc(&b, '0');
        nfrac = 1;
    } else if (trim == TRIM_NONE && want_frac > nfrac) {
        sb_repeat(&b, '0', want_frac - nfrac);
        nfrac = want_frac;
    }
    if (!b.oom)
        trim_zeros(&b, &nfrac, trim);

    int left = nwhole + f->negative;
    if (pad_left > left)
        sb_repeat(out, ' ', pad_left - left);
    sb_take(out, &b);
    if (pad_right >= nfrac) {
        if (trim == TRIM_POINT && nfrac == 0)
            sb_putc(out, ' ');
        sb_repeat(out, ' ', pad_right - nfrac);
    }
}

/* Scientific "d.ddde+XX": at most precision digits after the point (< 0: no
 * cut), at least min_digits. pad_left pads the part before the point; the
 * exponent has at least exp_digits digits (< 0: two). */
static void format_scientific(sbuf *out, const fparts *f, int precision,
                              int min_digits, trim_mode trim, int pad_left,
                              int exp_digits)
{
    char digits[MAX_DIGITS];
    int exp10;
    int n = dragon4(f, CUT_TOTAL, precision < 0 ? -1 : precision + 1,
                    min_digits < 0 ? -1 : min_digits + 1, digits, &exp10);

    int left = 1 + f->negative;
    if (pad_left > left)
        sb_repeat(out, ' ', pad_left - left);
    sbuf b = {0};
    if (f->negative)
        sb_putc(&b, '-');
    sb_putc(&b, digits[0]);
    int nfrac = n - 1;
    if (nfrac > 0 || trim != TRIM_POINT)
        sb_putc(&b, '.');
    sb_putn(&b, digits + 1, (size_t)nfrac);
    int want_frac = min_digits > 0 ? min_digits : 0;
    if (trim == TRIM_ONE_ZERO && nfrac == 0) {
        sb_putc(&b, '0');
        nfrac = 1;
    } else if (trim == TRIM_NONE && want_frac > nfrac) {
        sb_repeat(&b, '0', want_frac - nfrac);
        nfrac = want_frac;
    }
    /* Unlike positional output, a bare point survives trimming here. */
    if (!b.oom)
        trim_zeros(&b, &nfrac, trim == TRIM_POINT ? TRIM_ZEROS : trim);
    sb_take(out, &b);

    char exp[16];
    snprintf(exp, sizeof exp, "e%c%0*d", exp10 < 0 ? '-' : '+',
             exp_digits < 0 ? 2 : exp_digits > 5 ? 5 : exp_digits,
             exp10 < 0 ? -exp10 : exp10);
    sb_puts(out, exp);
}

/* ===================================================================== */
/* One format for all the elements shown (numpy's FloatingFormat)         */
/* ===================================================================== */

typedef struct float_format {
    tg_dtype dt;
    bool scientific;
    int precision, min_digits;
    trim_mode trim;
    int pad_left, pad_right; /* characters before / after the point */
    int exp_size;            /* exponent digits in scientific mode */
} float_format;

/* Lengths of the parts of s (no padding): before '.', after '.' up to 'e'
 * (or the end), and after 'e'. */
static void part_lengths(const char *s, int *before, int *after, int *exp)
{
    const char *point = strchr(s, '.');
    const char *e = strchr(s, 'e');
    const char *end = e ? e : s + strlen(s);
    *before = (int)((point ? point : end) - s);
    *after = point ? (int)(end - point - 1) : 0;
    *exp = e ? (int)strlen(e + 1) : 0;
}

/* numpy's FloatingFormat.fillFormat over the n values shown, for
 * floatmode='maxprec': one pass formatting every finite value with at most
 * `precision` fractional digits fixes the widths. */
static bool fill_format(float_format *ff, tg_dtype dt, const double *vals,
                        int64_t n, int precision)
{
    *ff = (float_format){.dt = dt, .precision = precision, .min_digits = -1,
                         .trim = TRIM_ZEROS, .exp_size = -1};
    int64_t n_finite = 0;
    bool any_nonzero = false, neg_inf = false;
    double max_abs = 0, min_abs = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v)) {
            neg_inf = neg_inf || (isinf(v) && v < 0);
            continue;
        }
        n_finite++;
        if (v != 0) {
            any_nonzero = true;
            max_abs = fmax(max_abs, fabs(v));
            min_abs = fmin(min_abs, fabs(v));
        }
    }
    if (any_nonzero) {
        /* numpy divides in the array's own dtype (and compares in double). */
        double ratio = max_abs / min_abs;
        if (dt == TG_FLOAT32) {
            float ratio32 = (float)max_abs / (float)min_abs;
            ratio = ratio32;
        }
        ff->scientific = max_abs >= 1e8 || min_abs < 1e-4 || ratio > 1000.;
    }

    if (n_finite > 0) {
        int before = 0, after = 0, exp = 0;
        sbuf s = {0};
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(vals[i]))
                continue;
            fparts f = decompose(dt, vals[i]);
            s.len = 0;
            if (ff->scientific)
                format_scientific(&s, &f, precision, -1, TRIM_ZEROS, -1, -1);
            else
                format_positional(&s, &f, precision, -1, TRIM_ZEROS, -1, -1);
            if (s.oom)
                break;
            int b, a, e;
            part_lengths(s.p, &b, &a, &e);
            before = b > before ? b : before;
            after = a > after ? a : after;
            exp = e > exp ? e : exp;
        }
        bool oom = s.oom;
        free(s.p);
        if (oom)
            return false;
        ff->pad_left = before;
        if (ff->scientific) {
            /* Every element gets the longest fraction, zero-filled. */
            ff->exp_size = exp - 1; /* the sign is not a digit */
            ff->precision = ff->min_digits = after;
            ff->trim = TRIM_NONE;
            ff->pad_right = ff->exp_size + 2 + after;
        } else {
            ff->pad_right = after;
            ff->min_digits = 0;
        }
    }
    /* "nan", "inf" and "-inf" are right-aligned in the same width. */
    if (n_finite < n) {
        int offset = ff->pad_right + 1;
        int need = 3 + neg_inf - offset;
        if (need > ff->pad_left)
            ff->pad_left = need;
    }
    return true;
}

static void format_float(sbuf *out, const float_format *ff, double v)
{
    if (!isfinite(v)) {
        const char *s = isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
        sb_repeat(out, ' ', ff->pad_left + ff->pad_right + 1 - (int)strlen(s));
        sb_puts(out, s);
        return;
    }
    fparts f = decompose(ff->dt, v);
    if (ff->scientific)
        format_scientific(out, &f, ff->precision, ff->min_digits, ff->trim,
                          ff->pad_left, ff->exp_size);
    else
        format_positional(out, &f, ff->precision, ff->min_digits, ff->trim,
                          ff->pad_left, ff->pad_right);
}

/* numpy's scalar str: the shortest round-trip digits, positional ("1.0",
 * "0.5") for 1e-4 <= |v| < 1e16 and zero, scientific ("1e-05") otherwise. */
static void format_scalar(sbuf *out, tg_dtype dt, double v)
{
    if (dt == TG_BOOL) {
        sb_puts(out, v != 0 ? "True" : "False");
        return;
    }
    if (!isfinite(v)) {
        sb_puts(out, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    fparts f = decompose(dt, v);
    double a = fabs(v);
    if (a == 0 || (a >= 1e-4 && a < 1e16))
        format_positional(out, &f, -1, -1, TRIM_ONE_ZERO, -1, -1);
    else
        format_scientific(out, &f, -1, -1, TRIM_POINT, -1, -1);
}

/* ===================================================================== */
/* Nesting, wrapping and summarising (numpy's _formatArray)               */
/* ===================================================================== */

typedef struct printer {
    const tg_tensor *t;
    const char *base; /* element 0 */
    bool summarize;
    float_format ff;
    int64_t idx[TG_MAX_DIMS];
} printer;

/* Elements shown along dim d, and the index of the j-th of them. */
static int64_t shown_count(const printer *p, int d)
{
    int64_t n = p->t->shape[d];
    return p->summarize && n > 2 * EDGE_ITEMS ? 2 * EDGE_ITEMS : n;
}

static int64_t shown_index(const printer *p, int d, int64_t j)
{
    int64_t n = p->t->shape[d];
    if (p->summarize && n > 2 * EDGE_ITEMS && j >= EDGE_ITEMS)
        return n - 2 * EDGE_ITEMS + j;
    return j;
}

static double element(const printer *p)
{
    int64_t off = 0;
    for (int d = 0; d < p->t->ndim; d++)
        off += p->idx[d] * p->t->strides[d];
    return tg__load(p->t->dtype, p->base, off);
}

static void format_element(sbuf *out, const printer *p)
{
    double v = element(p);
    if (p->t->dtype == TG_BOOL)
        sb_puts(out, v != 0 ? " True" : "False");
    else
        format_float(out, &p->ff, v);
}

/* numpy's _extendLine: word goes on the current line unless it would pass
 * width, and a line holding only its indent is never broken. */
static void extend_line(sbuf *s, sbuf *line, const char *word, size_t word_len,
                        int width, int indent)
{
    if (line->len + word_len > (size_t)width && line->len > (size_t)indent) {
        while (line->len && line->p[line->len - 1] == ' ')
            line->len--;
        sb_putn(s, line->p, line->len);
        sb_putc(s, '\n');
        line->len = 0;
        sb_repeat(line, ' ', indent);
    }
    sb_putn(line, word, word_len);
}

/* Formats the sub-array at dims depth.. (indices before depth fixed in
 * p->idx) as "[...]" into out. Continuation lines start with `indent`
 * spaces; lines end before column `width`. */
static void format_dims(sbuf *out, printer *p, int depth, int indent, int width)
{
    int64_t count = shown_count(p, depth);
    bool summary = count < p->t->shape[depth];
    int dims_left = p->t->ndim - depth;
    sbuf s = {0};

    if (dims_left == 1) {
        /* Last dim: elements separated by ' ', wrapped before width - 1
         * to leave room for the ']'. */
        sbuf line = {0}, word = {0};
        sb_repeat(&line, ' ', indent);
        for (int64_t j = 0; j < count; j++) {
            if (summary && j == EDGE_ITEMS) {
                extend_line(&s, &line, "...", 3, width - 1, indent);
                sb_putc(&line, ' ');
            }
            p->idx[depth] = shown_index(p, depth, j);
            word.len = 0;
            format_element(&word, p);
            extend_line(&s, &line, word.p ? word.p : "", word.len, width - 1,
                        indent);
            if (j + 1 < count)
                sb_putc(&line, ' ');
        }
        if (word.oom)
            s.oom = true;
        free(word.p);
        sb_take(&s, &line);
    } else {
        /* Sub-arrays one per line, with dims_left - 2 blank lines between. */
        for (int64_t j = 0; j < count; j++) {
            if (summary && j == EDGE_ITEMS) {
                sb_repeat(&s, ' ', indent);
                sb_puts(&s, "...");
                sb_repeat(&s, '\n', dims_left - 1);
            }
            p->idx[depth] = shown_index(p, depth, j);
            sb_repeat(&s, ' ', indent);
            format_dims(&s, p, depth + 1, indent + 1, width - 1);
            if (j + 1 < count)
                sb_repeat(&s, '\n', dims_left - 1);
        }
    }
    /* The first line's indent becomes the '['. */
    sb_putc(out, '[');
    if (s.len >= (size_t)indent)
        sb_putn(out, s.p + indent, s.len - (size_t)indent);
    if (s.oom)
        out->oom = true;
    free(s.p);
    sb_putc(out, ']');
}

/* The values shown (every element, or the corners when summarising), in C
 * order: what numpy sizes the columns from. */
static double *shown_values(printer *p, int64_t *n_out)
{
    const tg_tensor *t = p->t;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= shown_count(p, d);
    double *vals = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!vals)
        return NULL;
    int64_t j[TG_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        for (int d = 0; d < t->ndim; d++)
            p->idx[d] = shown_index(p, d, j[d]);
        vals[i] = element(p);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++j[d] < shown_count(p, d))
                break;
            j[d] = 0;
        }
    }
    *n_out = n;
    return vals;
}

char *tg_format(const tg_tensor *t, int precision)
{
    if (!t)
        return NULL;
    if (precision < 0)
        precision = DEFAULT_PRECISION;
    if (precision > MAX_PRECISION)
        precision = MAX_PRECISION;

    printer p = {
        .t = t,
        .base = (const char *)t->storage->data +
                t->offset * (int64_t)tg_dtype_size(t->dtype),
        .summarize = tg_numel(t) > THRESHOLD,
    };
    sbuf out = {0};
    if (tg_numel(t) == 0) {
        sb_puts(&out, "[]");
    } else if (t->ndim == 0) {
        format_scalar(&out, t->dtype, element(&p));
    } else {
        if (t->dtype != TG_BOOL) {
            int64_t n;
            double *vals = shown_values(&p, &n);
            bool ok = vals && fill_format(&p.ff, t->dtype, vals, n, precision);
            free(vals);
            if (!ok) {
                tg__error("format: out of memory for shape %s", TG_SHP(t));
                return NULL;
            }
        }
        format_dims(&out, &p, 0, 1, LINE_WIDTH);
    }
    if (out.oom) {
        free(out.p);
        tg__error("format: out of memory for shape %s", TG_SHP(t));
        return NULL;
    }
    return out.p;
}

int tg_fprint(FILE *f, const tg_tensor *t, int precision)
{
    if (!t)
        return -1;
    if (!f) {
        tg__error("fprint: NULL file");
        return -1;
    }
    char *s = tg_format(t, precision);
    if (!s)
        return -1;
    int rc = fputs(s, f) < 0 ? -1 : 0;
    free(s);
    if (rc)
        tg__error("fprint: write failed for shape %s", TG_SHP(t));
    return rc;
}

/* ===================================================================== */
/* allclose                                                               */
/* ===================================================================== */

/* numpy.isclose with equal_nan=False: finite pairs within tolerance, or
 * identical non-finite values (inf == inf; NaN never). */
static bool is_close(double x, double y, double rtol, double atol)
{
    if (isfinite(x) && isfinite(y))
        return fabs(x - y) <= atol + rtol * fabs(y);
    return x == y;
}

bool tg_allclose(const tg_tensor *a, const tg_tensor *b, double rtol,
                 double atol)
{
    if (!a || !b)
        return false;
    const tg_tensor *ops[2] = {a, b};
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast("allclose", 2, ops, &ndim, shape))
        return false;
    const char *pa = (const char *)a->storage->data +
                     a->offset * (int64_t)tg_dtype_size(a->dtype);
    const char *pb = (const char *)b->storage->data +
                     b->offset * (int64_t)tg_dtype_size(b->dtype);
    tg_loop L;
    tg__loop_init(&L, ndim, shape, 2, ops);
    do {
        for (int64_t i = 0; i < L.inner; i++) {
            double x = tg__load(a->dtype, pa, L.off[0] + i * L.step[0]);
            double y = tg__load(b->dtype, pb, L.off[1] + i * L.step[1]);
            if (!is_close(x, y, rtol, atol))
                return false;
        }
    } while (tg__loop_next(&L));
    return true;
}
