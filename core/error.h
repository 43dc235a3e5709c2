/* Private to libtapegrad: the error and allocation helpers every floor uses
 * (core, ops, nn, plot). The one core header besides core/shared.h and
 * core/npy.h that the floors above ops may include: it sees tensors only
 * through the public API, never their layout (core/internal.h). Names are tg__ (two
 * underscores): shared between files, never exported. */
#ifndef TAPEGRAD_ERROR_H
#define TAPEGRAD_ERROR_H

#include "tapegrad.h"

#define TG_HIDDEN __attribute__((visibility("hidden")))

/* ------------------------------------------------------------------ */
/* Internal invariants: a broken one is our bug, never the caller's.  */
/* ------------------------------------------------------------------ */

TG_HIDDEN _Noreturn void tg__panic(const char *file, int line, const char *msg)
    __attribute__((noreturn)); /* spelled twice: some checkers read only one */
#define TG_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond))                                                           \
            tg__panic(__FILE__, __LINE__, "assertion failed: " #cond);         \
    } while (0)

/* ------------------------------------------------------------------ */
/* Errors as values                                                   */
/* ------------------------------------------------------------------ */

/* Sets this thread's error: printf-style, one line, "op: what went wrong". */
TG_HIDDEN void tg__error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Puts "outer: " in front of the current error (once), so a failure
 * inside a module names the function that was called and the first cause:
 * "block_init: mha_init: n_heads 3 does not divide n_embd 32". Returns -1,
 * for `return tg__error_wrap("...")`. */
TG_HIDDEN int tg__error_wrap(const char *outer);
/* Sets the error "<op>: <path>: <problem>", the problem printf-style, and
 * returns false: for the file readers (.npy, .npz, .safetensors), whose
 * every complaint names the call and the file. */
TG_HIDDEN bool tg__file_error(const char *op, const char *path, const char *fmt,
                              ...) __attribute__((format(printf, 3, 4)));
/* Writes "(4,8,32)" for a shape into buf (at least TG_SHAPE_STR bytes). */
#define TG_SHAPE_STR 200
TG_HIDDEN const char *tg__shape_str(int ndim, const int64_t *shape, char *buf);
/* Shorthand for a tensor's shape string in an error message: a
 * compound-literal buffer that lives to the end of the enclosing block.
 * Through the public accessors here; core/internal.h defines it first,
 * reading the layout directly, for the floors that see it (error.c and the
 * loops sit below the accessors in core/tensor.c). */
#ifndef TG_SHP
#define TG_SHP(t)                                                              \
    tg__shape_str(tg_ndim(t), tg_shape(t), (char[TG_SHAPE_STR]){0})
#endif

/* ------------------------------------------------------------------ */
/* Allocation (core/alloc.c)                                          */
/* ------------------------------------------------------------------ */

/* The library allocates only through these (never malloc and friends
 * directly), so that one counter sees every allocation and a test can make
 * any one of them fail. The memory is the C library's: free() it. Each
 * returns what the C function returns, and fails as it does (NULL, or
 * ENOMEM for tg__posix_memalign, with errno ENOMEM). */
TG_HIDDEN void *tg__malloc(size_t n);
TG_HIDDEN void *tg__calloc(size_t n, size_t size);
TG_HIDDEN void *tg__realloc(void *p, size_t n);
TG_HIDDEN int tg__posix_memalign(void **p, size_t align, size_t n);
TG_HIDDEN char *tg__strdup(const char *s);
/* One allocation that takes memory other than through the functions above
 * (a block the storage pool hands out again, an mmap, realpath's buffer):
 * counts it, and true when it is to fail. */
TG_HIDDEN bool tg__alloc_fails(void);
/* Memory a pool kept and hands out again (core/storage.c): a point that
 * fails like any allocation (counted by tg__alloc_counted, so the k-th is
 * the same whatever the pools hold), but not one from the system. */
TG_HIDDEN bool tg__alloc_reuse_fails(void);
/* Fault injection, for the tests: starts counting allocations from 0; the
 * k-th from now (k >= 1) fails, and with every_after each one after it as
 * well. k = 0 counts without failing any; k < 0 stops counting (the
 * default). Process-wide: allocations on every thread count. */
TG_HIDDEN void tg__alloc_fail_at(int64_t k, bool every_after);
/* Allocations counted since the last tg__alloc_fail_at. */
TG_HIDDEN int64_t tg__alloc_counted(void);
/* Of them, those that took memory from the system: all but the pools'
 * reuses (tg__alloc_reuse_fails). */
TG_HIDDEN int64_t tg__alloc_system_counted(void);

/* The file:line of the user's current call (NULL, 0 if unknown), as the
 * call-site macros stored it with tg_set_callsite. */
TG_HIDDEN void tg__callsite(const char **file, int *line);

#endif /* TAPEGRAD_ERROR_H */
