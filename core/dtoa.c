/* Exact float-to-decimal, as numpy's format_float_positional and
 * format_float_scientific: the shortest decimal that reads back as the same
 * float32 or float64 (Steele & White / Burger & Dybvig free-format digits,
 * the Dragon4 variant numpy uses, with round-half-even margins), optionally
 * cut at a number of digits and then rounded exactly. */
#include "core/dtoa.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* A growable string                                                      */
/* ===================================================================== */

void tg__sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = tg__realloc(b->p, cap);
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

void tg__sb_puts(sbuf *b, const char *s) { tg__sb_putn(b, s, strlen(s)); }

void tg__sb_putc(sbuf *b, char c) { tg__sb_putn(b, &c, 1); }

void tg__sb_repeat(sbuf *b, char c, int n)
{
    for (int i = 0; i < n; i++)
        tg__sb_putc(b, c);
}

void tg__sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0 || b->oom)
        return;
    if ((size_t)n < sizeof small) {
        tg__sb_putn(b, small, (size_t)n);
        return;
    }
    char *big = tg__malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    tg__sb_putn(b, big, (size_t)n);
    free(big);
}

char *tg__sb_detach(sbuf *b)
{
    char *p = b->oom ? NULL : b->p;
    if (b->oom)
        free(b->p);
    else if (!p)
        p = tg__strdup("");
    *b = (sbuf){0};
    return p;
}

/* Appends src and frees it (an oom in src carries over). */
void tg__sb_take(sbuf *b, sbuf *src)
{
    if (src->oom)
        b->oom = true;
    if (src->len)
        tg__sb_putn(b, src->p, src->len);
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
    int len;                /* blocks in use; no leading zero blocks */
    uint32_t b[BIG_BLOCKS]; /* little-endian base 2^32 */
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
fparts tg__decompose(tg_dtype dt, double v)
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

/* dragon4's numbers: value / scale is what is left of |f| in units of the
 * next digit, mlow / mhigh the margins over the same scale. */
typedef struct dragon {
    big value, scale, mlow, mhigh;
} dragon;

/* Sets d up for the first digit of |f| (not 0), that of 10^(k-1), and
 * returns k: floor(log10 |f|) + 1, raised in positional output with a
 * cutoff_max so that the first digit is at most the last one kept. */
static int dragon_start(dragon *d, const fparts *f, cutoff_mode mode,
                        int cutoff_max)
{
    const int margin_shift = f->unequal_margins ? 2 : 1;

    /* value / scale = mantissa * 2^exponent, margins over the same scale,
     * everything doubled (quadrupled with unequal margins) to stay integer. */
    big_set(&d->value, f->mantissa);
    if (f->exponent > 0) {
        big_shl(&d->value, f->exponent + margin_shift);
        big_set(&d->scale, (uint64_t)1 << margin_shift);
        big_pow2(&d->mlow, f->exponent);
    } else {
        big_shl(&d->value, margin_shift);
        big_pow2(&d->scale, -f->exponent + margin_shift);
        big_set(&d->mlow, 1);
    }

    /* k = floor(log10 |f|) + 1, or one less: the estimate is fixed below. */
    int k = (int)ceil((double)(f->mantissa_bit + f->exponent) *
                          0.30102999566398119521373889472449 -
                      0.69);
    /* Positional output never needs digits left of the first kept one. */
    if (cutoff_max >= 0 && mode == CUT_FRACTION && k <= -cutoff_max)
        k = -cutoff_max + 1;
    if (k > 0) {
        big_mul_pow10(&d->scale, k);
    } else if (k < 0) {
        big_mul_pow10(&d->value, -k);
        big_mul_pow10(&d->mlow, -k);
    }
    if (big_cmp(&d->value, &d->scale) >= 0) {
        k++;
    } else {
        big_mul_small(&d->value, 10);
        big_mul_small(&d->mlow, 10);
    }
    d->mhigh = d->mlow;
    if (f->unequal_margins)
        big_mul_small(&d->mhigh, 2);
    return k;
}

/* The exponents of the last digit allowed and of the last one required,
 * for digits starting below 10^k. */
static void digit_span(int k, cutoff_mode mode, int cutoff_max, int cutoff_min,
                       int *last_allowed, int *last_required)
{
    *last_allowed = k - MAX_DIGITS;
    if (cutoff_max >= 0) {
        int want = mode == CUT_TOTAL ? k - cutoff_max : -cutoff_max;
        if (want > *last_allowed)
            *last_allowed = want;
    }
    *last_required = k;
    if (cutoff_min >= 0) {
        int want = mode == CUT_TOTAL ? k - cutoff_min : -cutoff_min;
        if (want < *last_required)
            *last_required = want;
    }
}

/* Writes the last digit after the n in digits, rounded: down if only the
 * low end is close, up if only the high end is, otherwise to nearest with
 * ties to even. Returns the count of digits then (a carry through 9s may
 * shorten them, and one past the first adds 1 to *exp10). */
static int round_last(dragon *d, char *digits, int n, int digit, bool low,
                      bool high, int *exp10)
{
    bool round_down = low;
    if (low == high) {
        big_mul_small(&d->value, 2);
        int c = big_cmp(&d->value, &d->scale);
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
    dragon d;
    int k = dragon_start(&d, f, mode, cutoff_max);
    int last_allowed, last_required;
    digit_span(k, mode, cutoff_max, cutoff_min, &last_allowed, &last_required);
    *exp10 = k - 1;

    int n = 0, digit;
    bool low, high;
    big value_high;
    for (;;) {
        k--;
        digit = big_divmod_digit(&d.value, &d.scale);
        big_add(&value_high, &d.value, &d.mhigh);
        int cmp_low = big_cmp(&d.value, &d.mlow);
        int cmp_high = big_cmp(&value_high, &d.scale);
        low = is_even ? cmp_low <= 0 : cmp_low < 0;
        high = is_even ? cmp_high >= 0 : cmp_high > 0;
        if (((low || high) && k <= last_required) || k == last_allowed)
            break;
        digits[n++] = (char)('0' + digit);
        big_mul_small(&d.value, 10);
        big_mul_small(&d.mlow, 10);
        big_mul_small(&d.mhigh, 10);
    }
    return round_last(&d, digits, n, digit, low, high, exp10);
}

/* ===================================================================== */
/* numpy's format_float_positional / format_float_scientific              */
/* ===================================================================== */

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
void tg__format_positional(sbuf *out, const fparts *f, int precision,
                           int min_digits, trim_mode trim, int pad_left,
                           int pad_right)
{
    char digits[MAX_DIGITS];
    int exp10;
    int n = dragon4(f, CUT_FRACTION, precision, min_digits, digits, &exp10);

    sbuf b = {0};
    if (f->negative)
        tg__sb_putc(&b, '-');
    int nwhole, nfrac = 0;
    if (exp10 >= 0) {
        nwhole = exp10 + 1;
        int head = n < nwhole ? n : nwhole;
        tg__sb_putn(&b, digits, (size_t)head);
        tg__sb_repeat(&b, '0', nwhole - head);
        if (n > nwhole) {
            nfrac = n - nwhole;
            tg__sb_putc(&b, '.');
            tg__sb_putn(&b, digits + nwhole, (size_t)nfrac);
        }
    } else {
        nwhole = 1;
        nfrac = -(exp10 + 1) + n;
        tg__sb_puts(&b, "0.");
        tg__sb_repeat(&b, '0', -(exp10 + 1));
        tg__sb_putn(&b, digits, (size_t)n);
    }
    if (nfrac == 0 && trim != TRIM_POINT)
        tg__sb_putc(&b, '.');
    int want_frac = min_digits > 0 ? min_digits : 0;
    if (trim == TRIM_ONE_ZERO && nfrac == 0) {
        tg__sb_putc(&b, '0');
        nfrac = 1;
    } else if (trim == TRIM_NONE && want_frac > nfrac) {
        tg__sb_repeat(&b, '0', want_frac - nfrac);
        nfrac = want_frac;
    }
    if (!b.oom)
        trim_zeros(&b, &nfrac, trim);

    int left = nwhole + f->negative;
    if (pad_left > left)
        tg__sb_repeat(out, ' ', pad_left - left);
    tg__sb_take(out, &b);
    if (pad_right >= nfrac) {
        if (trim == TRIM_POINT && nfrac == 0)
            tg__sb_putc(out, ' ');
        tg__sb_repeat(out, ' ', pad_right - nfrac);
    }
}

/* Scientific "d.ddde+XX": at most precision digits after the point (< 0: no
 * cut), at least min_digits. pad_left pads the part before the point; the
 * exponent has at least exp_digits digits (< 0: two). */
void tg__format_scientific(sbuf *out, const fparts *f, int precision,
                           int min_digits, trim_mode trim, int pad_left,
                           int exp_digits)
{
    char digits[MAX_DIGITS];
    int exp10;
    int n = dragon4(f, CUT_TOTAL, precision < 0 ? -1 : precision + 1,
                    min_digits < 0 ? -1 : min_digits + 1, digits, &exp10);

    int left = 1 + f->negative;
    if (pad_left > left)
        tg__sb_repeat(out, ' ', pad_left - left);
    sbuf b = {0};
    if (f->negative)
        tg__sb_putc(&b, '-');
    tg__sb_putc(&b, digits[0]);
    int nfrac = n - 1;
    if (nfrac > 0 || trim != TRIM_POINT)
        tg__sb_putc(&b, '.');
    tg__sb_putn(&b, digits + 1, (size_t)nfrac);
    int want_frac = min_digits > 0 ? min_digits : 0;
    if (trim == TRIM_ONE_ZERO && nfrac == 0) {
        tg__sb_putc(&b, '0');
        nfrac = 1;
    } else if (trim == TRIM_NONE && want_frac > nfrac) {
        tg__sb_repeat(&b, '0', want_frac - nfrac);
        nfrac = want_frac;
    }
    /* Unlike positional output, a bare point survives trimming here. */
    if (!b.oom)
        trim_zeros(&b, &nfrac, trim == TRIM_POINT ? TRIM_ZEROS : trim);
    tg__sb_take(out, &b);

    char exp[16];
    snprintf(exp, sizeof exp, "e%c%0*d", exp10 < 0 ? '-' : '+',
             exp_digits < 0   ? 2
             : exp_digits > 5 ? 5
                              : exp_digits,
             exp10 < 0 ? -exp10 : exp10);
    tg__sb_puts(out, exp);
}
