/* Printing tensors exactly as numpy prints arrays, and numpy.allclose.
 *
 * The text is str(arr) with np.set_printoptions(precision=p) and every other
 * option at its default (numpy/core/arrayprint.py, numpy >= 1.14 style):
 *
 *   - each float is the shortest decimal that reads back as the same float32
 *     or float64, cut at p fractional digits and then rounded exactly
 *     (core/dtoa.c);
 *   - all elements share one width: positional ("-0.38", "1.  ") unless the
 *     nonzero magnitudes ask for scientific notation ("1.5e-05"), which they
 *     do when max >= 1e8, min < 1e-4 or max / min > 1000;
 *   - rows wrap at 75 columns; more than 1000 elements are summarised with
 *     "..." keeping 3 items at each edge of every long axis;
 *   - a 0-d tensor prints as numpy's scalar str ("0.5", "1.0", "1e-05").
 */
#include "core/dtoa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LINE_WIDTH        75
#define THRESHOLD         1000 /* summarise above this many elements */
#define EDGE_ITEMS        3 /* items kept at each edge of a summarised axis */
#define DEFAULT_PRECISION 8
/* Beyond ~25 fractional digits precision changes nothing (the shortest
 * round-trip digits end first); the cap only keeps the arithmetic small. */
#define MAX_PRECISION 1000

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

/* fill_format's first pass: counts the finite values, says whether a -inf
 * is among the others, and picks the notation from the nonzero
 * magnitudes. */
static int64_t scan_values(float_format *ff, const double *vals, int64_t n,
                           bool *neg_inf)
{
    int64_t n_finite = 0;
    bool any_nonzero = false;
    double max_abs = 0, min_abs = INFINITY;
    *neg_inf = false;
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v)) {
            *neg_inf = *neg_inf || (isinf(v) && v < 0);
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
        if (ff->dt == TG_FLOAT32) {
            float ratio32 = (float)max_abs / (float)min_abs;
            ratio = ratio32;
        }
        ff->scientific = max_abs >= 1e8 || min_abs < 1e-4 || ratio > 1000.;
    }
    return n_finite;
}

/* fill_format's second pass: the longest parts (before the point, after it,
 * the exponent) of the finite values in ff's notation with at most
 * `precision` fractional digits. false when out of memory. */
static bool widest_parts(const float_format *ff, const double *vals, int64_t n,
                         int precision, int *before, int *after, int *exp)
{
    *before = *after = *exp = 0;
    sbuf s = {0};
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(vals[i]))
            continue;
        fparts f = tg__decompose(ff->dt, vals[i]);
        s.len = 0;
        if (ff->scientific)
            tg__format_scientific(&s, &f, precision, -1, TRIM_ZEROS, -1, -1);
        else
            tg__format_positional(&s, &f, precision, -1, TRIM_ZEROS, -1, -1);
        if (s.oom)
            break;
        int b, a, e;
        part_lengths(s.p, &b, &a, &e);
        *before = b > *before ? b : *before;
        *after = a > *after ? a : *after;
        *exp = e > *exp ? e : *exp;
    }
    bool oom = s.oom;
    free(s.p);
    return !oom;
}

/* numpy's FloatingFormat.fillFormat over the n values shown, for
 * floatmode='maxprec': one pass formatting every finite value with at most
 * `precision` fractional digits fixes the widths. */
static bool fill_format(float_format *ff, tg_dtype dt, const double *vals,
                        int64_t n, int precision)
{
    *ff = (float_format){.dt = dt,
                         .precision = precision,
                         .min_digits = -1,
                         .trim = TRIM_ZEROS,
                         .exp_size = -1};
    bool neg_inf;
    int64_t n_finite = scan_values(ff, vals, n, &neg_inf);
    if (n_finite > 0) {
        int before, after, exp;
        if (!widest_parts(ff, vals, n, precision, &before, &after, &exp))
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
        tg__sb_repeat(out, ' ',
                      ff->pad_left + ff->pad_right + 1 - (int)strlen(s));
        tg__sb_puts(out, s);
        return;
    }
    fparts f = tg__decompose(ff->dt, v);
    if (ff->scientific)
        tg__format_scientific(out, &f, ff->precision, ff->min_digits, ff->trim,
                              ff->pad_left, ff->exp_size);
    else
        tg__format_positional(out, &f, ff->precision, ff->min_digits, ff->trim,
                              ff->pad_left, ff->pad_right);
}

/* numpy's integer arrays: every element right-aligned to the widest of the
 * shown ones ("[ 1 -2 10]"); the width goes in pad_left. */
static void int_width(float_format *ff, const double *vals, int64_t n)
{
    ff->pad_left = 1;
    for (int64_t i = 0; i < n; i++) {
        char s[32];
        int len = snprintf(s, sizeof s, "%lld", (long long)vals[i]);
        if (len > ff->pad_left)
            ff->pad_left = len;
    }
}

/* numpy's scalar str: the shortest round-trip digits, positional ("1.0",
 * "0.5") for 1e-4 <= |v| < 1e16 and zero, scientific ("1e-05") otherwise. */
static void format_scalar(sbuf *out, tg_dtype dt, double v)
{
    if (dt == TG_BOOL) {
        tg__sb_puts(out, v != 0 ? "True" : "False");
        return;
    }
    if (dt == TG_INT64) {
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)v);
        tg__sb_puts(out, s);
        return;
    }
    if (!isfinite(v)) {
        tg__sb_puts(out, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    fparts f = tg__decompose(dt, v);
    double a = fabs(v);
    if (a == 0 || (a >= 1e-4 && a < 1e16))
        tg__format_positional(out, &f, -1, -1, TRIM_ONE_ZERO, -1, -1);
    else
        tg__format_scientific(out, &f, -1, -1, TRIM_POINT, -1, -1);
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
        tg__sb_puts(out, v != 0 ? " True" : "False");
    else if (p->t->dtype == TG_INT64) { /* right-aligned to the widest */
        char s[32];
        snprintf(s, sizeof s, "%*lld", p->ff.pad_left, (long long)v);
        tg__sb_puts(out, s);
    } else
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
        tg__sb_putn(s, line->p, line->len);
        tg__sb_putc(s, '\n');
        line->len = 0;
        tg__sb_repeat(line, ' ', indent);
    }
    tg__sb_putn(line, word, word_len);
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
        tg__sb_repeat(&line, ' ', indent);
        for (int64_t j = 0; j < count; j++) {
            if (summary && j == EDGE_ITEMS) {
                extend_line(&s, &line, "...", 3, width - 1, indent);
                tg__sb_putc(&line, ' ');
            }
            p->idx[depth] = shown_index(p, depth, j);
            word.len = 0;
            format_element(&word, p);
            extend_line(&s, &line, word.p ? word.p : "", word.len, width - 1,
                        indent);
            if (j + 1 < count)
                tg__sb_putc(&line, ' ');
        }
        if (word.oom)
            s.oom = true;
        free(word.p);
        tg__sb_take(&s, &line);
    } else {
        /* Sub-arrays one per line, with dims_left - 2 blank lines between. */
        for (int64_t j = 0; j < count; j++) {
            if (summary && j == EDGE_ITEMS) {
                tg__sb_repeat(&s, ' ', indent);
                tg__sb_puts(&s, "...");
                tg__sb_repeat(&s, '\n', dims_left - 1);
            }
            p->idx[depth] = shown_index(p, depth, j);
            tg__sb_repeat(&s, ' ', indent);
            format_dims(&s, p, depth + 1, indent + 1, width - 1);
            if (j + 1 < count)
                tg__sb_repeat(&s, '\n', dims_left - 1);
        }
    }
    /* The first line's indent becomes the '['. */
    tg__sb_putc(out, '[');
    if (s.len >= (size_t)indent)
        tg__sb_putn(out, s.p + indent, s.len - (size_t)indent);
    if (s.oom)
        out->oom = true;
    free(s.p);
    tg__sb_putc(out, ']');
}

/* The values shown (every element, or the corners when summarising), in C
 * order: what numpy sizes the columns from. */
static double *shown_values(printer *p, int64_t *n_out)
{
    const tg_tensor *t = p->t;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= shown_count(p, d);
    double *vals = tg__malloc(sizeof(double) * (size_t)(n ? n : 1));
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
    if (TG_BAD("format", t))
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
        tg__sb_puts(&out, "[]");
    } else if (t->ndim == 0) {
        format_scalar(&out, t->dtype, element(&p));
    } else {
        if (t->dtype != TG_BOOL) {
            int64_t n;
            double *vals = shown_values(&p, &n);
            bool ok = vals &&
                      (t->dtype == TG_INT64
                           ? (int_width(&p.ff, vals, n), true)
                           : fill_format(&p.ff, t->dtype, vals, n, precision));
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
    if (TG_BAD("fprint", t))
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

int tg_print(const tg_tensor *t)
{
    if (TG_BAD("print", t))
        return -1;
    if (tg_fprint(stdout, t, -1) < 0)
        return tg__error_wrap("print");
    return putchar('\n') == EOF ? -1 : 0;
}

const char *tg_shape_str(const tg_tensor *t, char *buf, size_t size)
{
    if (!buf || size == 0)
        return NULL;
    if (!t || tg__is_dead(t)) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    /* numpy's tuple: "(4, 8, 32)", "(3,)", "()" */
    size_t n = (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < t->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld",
                              (long long)t->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, t->ndim == 1 ? ",)" : ")");
    return buf;
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
