/* Private to nn/: a one-pass reader of JSON text held in memory, for the
 * .safetensors header (nn/safetensors_header.c). The caller walks the
 * document itself, asking for the next string, number or value to skip,
 * so nothing is built for the parts it does not keep: a million-tensor
 * header is read without a million objects (a DOM took 57% of such a
 * read). Strict RFC 8259, as jansson reads it: valid UTF-8 only, \u
 * escapes with paired surrogates, no \u0000, no control character in a
 * string, no leading zeros, nesting at most TG__JSON_DEPTH deep. Every
 * allocation goes through the library's allocator and its failure is an
 * error like any other. */
#ifndef TAPEGRAD_JSON_SCAN_H
#define TAPEGRAD_JSON_SCAN_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deep enough for any header (the reference library reads "__metadata__"
 * as a flat map of strings); shallow enough that the recursion that skips a
 * value (two small frames a level) fits a thread's smallest stack. */
#define TG__JSON_DEPTH 128

typedef struct tg__json {
    const unsigned char *s;
    size_t n, at;  /* the text and where the reader stands */
    char *str;     /* the last string read, decoded, NUL-terminated */
    size_t len;    /* its bytes, without the NUL */
    size_t cap;    /* str's room */
    char err[160]; /* what went wrong, once a call returned false */
} tg__json;

/* Skips white space; then the next byte, or -1 at the end of the text. */
TG_HIDDEN int tg__json_peek(tg__json *j);
/* Skips white space and then c, or fails "expected 'c'". */
TG_HIDDEN bool tg__json_expect(tg__json *j, char c);
/* After white space, ',' (true, *more) or the closing c (true, !*more);
 * anything else fails. */
TG_HIDDEN bool tg__json_next(tg__json *j, char close, bool *more);
/* After white space, the opening byte open; *more unless the container
 * closes at once (its closing byte close then read too). */
TG_HIDDEN bool tg__json_open(tg__json *j, char open, char close, bool *more);
/* A string, decoded into j->str / j->len. */
TG_HIDDEN bool tg__json_string(tg__json *j);
/* A number. *is_int when it has no fraction or exponent and fits int64
 * (then *v is its value). */
TG_HIDDEN bool tg__json_number(tg__json *j, bool *is_int, int64_t *v);
/* Any value, checked and dropped; depth is how deep it lies. */
TG_HIDDEN bool tg__json_skip(tg__json *j, int depth);
/* Sets j->err from fmt and returns false. */
TG_HIDDEN bool tg__json_fail(tg__json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
TG_HIDDEN void tg__json_free(tg__json *j);

#endif /* TAPEGRAD_JSON_SCAN_H */
