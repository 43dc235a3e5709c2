/* A one-pass JSON reader over text in memory (see nn/json_scan.h). */
#include "nn/json_scan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool tg__json_fail(tg__json *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < sizeof j->err)
        snprintf(j->err + k, sizeof j->err - (size_t)k, " at byte %zu", j->at);
    return false;
}

void tg__json_free(tg__json *j)
{
    free(j->str);
    j->str = NULL;
    j->len = j->cap = 0;
}

int tg__json_peek(tg__json *j)
{
    while (j->at < j->n && (j->s[j->at] == ' ' || j->s[j->at] == '\t' ||
                            j->s[j->at] == '\n' || j->s[j->at] == '\r'))
        j->at++;
    return j->at < j->n ? j->s[j->at] : -1;
}

bool tg__json_expect(tg__json *j, char c)
{
    if (tg__json_peek(j) != (unsigned char)c)
        return tg__json_fail(j, "expected '%c'", c);
    j->at++;
    return true;
}

bool tg__json_open(tg__json *j, char open, char close, bool *more)
{
    if (!tg__json_expect(j, open))
        return false;
    *more = tg__json_peek(j) != (unsigned char)close;
    j->at += !*more;
    return true;
}

bool tg__json_next(tg__json *j, char close, bool *more)
{
    int c = tg__json_peek(j);
    if (c != ',' && c != (unsigned char)close)
        return tg__json_fail(j, "expected ',' or '%c'", close);
    j->at++;
    *more = c == ',';
    return true;
}

/* Appends n bytes to j->str, keeping it NUL-terminated. */
static bool put(tg__json *j, const void *p, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 64;
        while (cap < j->len + n + 1)
            cap *= 2;
        char *s = tg__realloc(j->str, cap);
        if (!s)
            return tg__json_fail(j, "out of memory for a %zu-byte string",
                                 j->len + n);
        j->str = s;
        j->cap = cap;
    }
    memcpy(j->str + j->len, p, n);
    j->len += n;
    j->str[j->len] = '\0';
    return true;
}

/* The length of the valid UTF-8 sequence at p (at most avail bytes), or 0:
 * no overlong form, no surrogate, nothing past U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    size_t k = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (k == 0 || k > avail)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) ||
        (c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
        return 0;
    return k;
}

/* Four hex digits at j->at into *u. */
static bool hex4(tg__json *j, unsigned *u)
{
    if (j->n - j->at < 4)
        return tg__json_fail(j, "a \\u escape is cut short");
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int c = j->s[j->at + (size_t)i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return tg__json_fail(j, "a \\u escape needs four hex digits");
        *u = *u << 4 | (unsigned)d;
    }
    j->at += 4;
    return true;
}

/* A \u escape (j->at past the 'u'), with its low surrogate if it is a high
 * one, appended as UTF-8. */
static bool unicode_escape(tg__json *j)
{
    unsigned u, lo;
    if (!hex4(j, &u))
        return false;
    if (u >= 0xDC00 && u <= 0xDFFF)
        return tg__json_fail(j, "a lone low surrogate \\u%04X", u);
    if (u >= 0xD800 && u <= 0xDBFF) {
        if (j->n - j->at < 2 || j->s[j->at] != '\\' || j->s[j->at + 1] != 'u')
            return tg__json_fail(j, "a lone high surrogate \\u%04X", u);
        j->at += 2;
        if (!hex4(j, &lo))
            return false;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return tg__json_fail(j, "\\u%04X is not a low surrogate", lo);
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (u == 0)
        return tg__json_fail(j, "\\u0000 in a string");
    unsigned char b[4];
    size_t k = u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
    static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = k; i-- > 1; u >>= 6)
        b[i] = (unsigned char)(0x80 | (u & 0x3F));
    b[0] = (unsigned char)(lead[k] | u);
    return put(j, b, k);
}

/* One escape (j->at past the backslash). */
static bool escape(tg__json *j)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (j->at >= j->n)
        return tg__json_fail(j, "a string is not closed");
    char c = (char)j->s[j->at++];
    if (c == 'u')
        return unicode_escape(j);
    const char *hit = strchr(from, c);
    if (!hit || c == '\0')
        return tg__json_fail(j, "an unknown escape '\\%c'", c);
    return put(j, &to[hit - from], 1);
}

bool tg__json_string(tg__json *j)
{
    if (!tg__json_expect(j, '"'))
        return false;
    j->len = 0;
    if (!put(j, "", 0))
        return false;
    for (;;) {
        size_t run = j->at; /* plain bytes are copied a run at a time */
        while (j->at < j->n && j->s[j->at] >= 0x20 && j->s[j->at] < 0x80 &&
               j->s[j->at] != '"' && j->s[j->at] != '\\')
            j->at++;
        if (j->at > run && !put(j, j->s + run, j->at - run))
            return false;
        if (j->at >= j->n)
            return tg__json_fail(j, "a string is not closed");
        unsigned char c = j->s[j->at];
        if (c == '"') {
            j->at++;
            return true;
        }
        if (c == '\\') {
            j->at++;
            if (!escape(j))
                return false;
            continue;
        }
        if (c < 0x20)
            return tg__json_fail(j, "control character 0x%02X in a string", c);
        size_t k = utf8_len(j->s + j->at, j->n - j->at);
        if (k == 0)
            return tg__json_fail(j, "invalid UTF-8 in a string");
        if (!put(j, j->s + j->at, k))
            return false;
        j->at += k;
    }
}

/* Digits at j->at: how many. */
static size_t digits(const tg__json *j, size_t at)
{
    size_t k = 0;
    while (at + k < j->n && j->s[at + k] >= '0' && j->s[at + k] <= '9')
        k++;
    return k;
}

bool tg__json_number(tg__json *j, bool *is_int, int64_t *v)
{
    tg__json_peek(j);
    size_t at = j->at;
    bool neg = at < j->n && j->s[at] == '-';
    at += neg;
    size_t k = digits(j, at);
    if (k == 0 || (k > 1 && j->s[at] == '0'))
        return tg__json_fail(j, "not a number");
    /* |value| accumulated negated, so that INT64_MIN fits. */
    int64_t acc = 0;
    bool fits = true;
    for (size_t i = 0; i < k; i++) {
        int d = j->s[at + i] - '0';
        fits = fits && acc >= (INT64_MIN + d) / 10;
        acc = fits ? acc * 10 - d : acc;
    }
    at += k;
    bool frac = at < j->n && j->s[at] == '.';
    if (frac && digits(j, at + 1) == 0)
        return tg__json_fail(j, "a fraction without digits");
    at += frac ? 1 + digits(j, at + 1) : 0;
    bool expo = at < j->n && (j->s[at] == 'e' || j->s[at] == 'E');
    if (expo) {
        at +=
            1 + (at + 1 < j->n && (j->s[at + 1] == '+' || j->s[at + 1] == '-'));
        if (digits(j, at) == 0)
            return tg__json_fail(j, "an exponent without digits");
        at += digits(j, at);
    }
    j->at = at;
    fits = fits && (neg || acc != INT64_MIN);
    *is_int = !frac && !expo && fits;
    *v = *is_int ? (neg ? acc : -acc) : 0;
    return true;
}

/* The literal word at j->at. */
static bool literal(tg__json *j, const char *word)
{
    size_t k = strlen(word);
    if (j->n - j->at < k || memcmp(j->s + j->at, word, k) != 0)
        return tg__json_fail(j, "not a JSON value");
    j->at += k;
    return true;
}

/* The members or elements of an object or array whose opening byte is at
 * j->at. */
static bool skip_container(tg__json *j, int depth)
{
    bool object = j->s[j->at] == '{', more;
    char close = object ? '}' : ']';
    if (!tg__json_open(j, object ? '{' : '[', close, &more))
        return false;
    while (more) {
        if (object && !(tg__json_string(j) && tg__json_expect(j, ':')))
            return false;
        if (!tg__json_skip(j, depth + 1) || !tg__json_next(j, close, &more))
            return false;
    }
    return true;
}

bool tg__json_skip(tg__json *j, int depth)
{
    if (depth > TG__JSON_DEPTH)
        return tg__json_fail(j, "nested deeper than %d", TG__JSON_DEPTH);
    int c = tg__json_peek(j);
    bool is_int;
    int64_t v;
    switch (c) {
    case '{':
    case '[': return skip_container(j, depth);
    case '"': return tg__json_string(j);
    case 't': return literal(j, "true");
    case 'f': return literal(j, "false");
    case 'n': return literal(j, "null");
    default:
        return c == '-' || (c >= '0' && c <= '9')
                   ? tg__json_number(j, &is_int, &v)
                   : tg__json_fail(j, "not a JSON value");
    }
}
