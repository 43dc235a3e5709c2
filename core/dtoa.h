/* Exact float-to-decimal text as numpy writes it (format_float_positional
 * and format_float_scientific: Dragon4 shortest round-trip digits), and the
 * growable string it writes into. Private to core/: print.c lays arrays out
 * with it. Not installed. */
#ifndef TAPEGRAD_DTOA_H
#define TAPEGRAD_DTOA_H

#include "core/internal.h"

/* A finite float as mantissa * 2^exponent. The high margin (half the gap
 * to the next float up) is twice the low one at a power of two. */
typedef struct fparts {
    uint64_t mantissa;
    int exponent;
    int mantissa_bit; /* index of the highest set bit of mantissa */
    bool unequal_margins;
    bool negative;
} fparts;

/* v must be finite; for float32, v holds the float's exact value. */
TG_HIDDEN fparts tg__decompose(tg_dtype dt, double v);

/* Trailing-zero trimming, as numpy's trim= argument. */
typedef enum {
    TRIM_NONE,     /* 'k': keep trailing zeros and the point */
    TRIM_ZEROS,    /* '.': drop trailing zeros, keep the point ("1.") */
    TRIM_ONE_ZERO, /* '0': drop trailing zeros but one ("1.0") */
    TRIM_POINT,    /* '-': drop trailing zeros and the point ("1") */
} trim_mode;

/* Positional "ddd.ddd": at most precision fractional digits (< 0: no cut),
 * at least min_digits of them. Padded with spaces to pad_left characters
 * before the point and pad_right after it (< 0: none). */
TG_HIDDEN void tg__format_positional(sbuf *out, const fparts *f, int precision,
                                     int min_digits, trim_mode trim,
                                     int pad_left, int pad_right);
/* Scientific "d.ddde+XX": at most precision digits after the point (< 0: no
 * cut), at least min_digits. pad_left pads the part before the point; the
 * exponent has at least exp_digits digits (< 0: two). */
TG_HIDDEN void tg__format_scientific(sbuf *out, const fparts *f, int precision,
                                     int min_digits, trim_mode trim,
                                     int pad_left, int exp_digits);

#endif
