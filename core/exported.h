/* Private to tapegrad's own libraries: what libtapegrad.so exports for
 * libtapegrad_dist (dist/), which is a shared library of its own (so that a
 * program that does not use it never links MPI) and so cannot reach the
 * hidden tg__ helpers of core/error.h. Each is the helper of the same name
 * without "x_", under a name Makefile.am's -export-symbols-regex lets
 * through (^tg__x_). Not public: no header in include/ declares them, and
 * their names may change with the library. An offer header: it includes
 * only public headers. */
#ifndef TAPEGRAD_EXPORTED_H
#define TAPEGRAD_EXPORTED_H

#include "tapegrad.h"

#define TG_EXPORTED __attribute__((visibility("default")))

/* tg__error: sets this thread's error, printf-style, one line. */
TG_EXPORTED void tg__x_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* tg__error_wrap: puts "outer: " in front of the current error (once);
 * returns -1. */
TG_EXPORTED int tg__x_error_wrap(const char *outer);
/* tg__malloc, tg__calloc: counted allocations (the tests' fault injection
 * reaches them); the memory is the C library's, free() it. */
TG_EXPORTED void *tg__x_malloc(size_t n);
TG_EXPORTED void *tg__x_calloc(size_t n, size_t size);

/* tg__write_check (core/shared.h): false, with an error, when t may not be
 * written in place now (a pending backward holds it...). For a write made
 * with tg_copy_in after communication, checked before it on every rank. */
TG_EXPORTED bool tg__x_write_check(const char *op, tg_tensor *t);

#endif /* TAPEGRAD_EXPORTED_H */
