/* Errors as values: a thread-local one-line message, and the shared checks
 * that produce the usual messages (bad dim, wrong dtype). And call sites:
 * the call-site macros (tapegrad_callsite.h) store the caller's file:line
 * here before each public call; tape entries, new tensors and anomaly
 * messages read it, so messages can point at the user's line. The library
 * is built without the macros, so calls it makes internally keep the
 * user's line. The ground floor: it calls nothing else of the library. */
#include "core/internal.h"
#include "core/exported.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Not TG_THREAD_LOCAL: 1 KiB is too much for the static TLS a dlopen may
 * find, and errors are not the hot path. */
static _Thread_local char last_error[1024];

const char *tg_last_error(void) { return last_error; }

void tg_clear_error(void) { last_error[0] = '\0'; }

void tg__error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

/* The exported twins, for libtapegrad_dist (core/exported.h). */
void tg__x_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

int tg__x_error_wrap(const char *outer) { return tg__error_wrap(outer); }

int tg__error_wrap(const char *outer)
{
    size_t n = strlen(outer);
    if (strncmp(last_error, outer, n) == 0 && last_error[n] == ':')
        return -1;
    char inner[sizeof last_error];
    memcpy(inner, last_error, sizeof inner);
    /* the inner message loses its tail if the two do not fit */
    int room = (int)(sizeof last_error - n - 3);
    snprintf(last_error, sizeof last_error, "%s: %.*s", outer,
             room > 0 ? room : 0, inner);
    return -1;
}

bool tg__file_error(const char *op, const char *path, const char *fmt, ...)
{
    char problem[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    tg__error("%s: %s: %s", op, path, problem);
    return false;
}

static TG_THREAD_LOCAL const char *site_file;
static TG_THREAD_LOCAL int site_line;

void tg_set_callsite(const char *file, int line)
{
    site_file = file;
    site_line = line;
}

void tg__callsite(const char **file, int *line)
{
    *file = site_file;
    *line = site_line;
}

void tg__panic(const char *file, int line, const char *msg)
{
    fprintf(stderr, "tapegrad: %s:%d: %s\n", file, line, msg);
    abort();
}

const char *tg__shape_str(int ndim, const int64_t *shape, char *buf)
{
    size_t n = 0;
    buf[n++] = '(';
    for (int d = 0; d < ndim && n < TG_SHAPE_STR - 24; d++)
        n += (size_t)snprintf(buf + n, TG_SHAPE_STR - n, d ? ",%lld" : "%lld",
                              (long long)shape[d]);
    if (ndim == 1)
        buf[n++] = ','; /* Python's 1-tuple: (4,) */
    buf[n++] = ')';
    buf[n] = '\0';
    return buf;
}

bool tg__count(int ndim, const int64_t *shape, int64_t *numel)
{
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return false;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) {
            *numel = 0;
            return true;
        }
    /* All dims >= 1, so the product only grows: stop once past the limit. */
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (!tg__mul(n, shape[d], &n) || n > TG_MAX_NUMEL)
            return false;
    *numel = n;
    return true;
}

bool tg__check_count(const char *op, int ndim, const int64_t *shape,
                     int64_t *numel)
{
    if (tg__count(ndim, shape, numel))
        return true;
    char str[TG_SHAPE_STR];
    tg__shape_str(ndim, shape, str);
    bool negative = false;
    for (int d = 0; d < ndim; d++)
        negative = negative || shape[d] < 0;
    if (negative)
        tg__error("%s: invalid shape %s: a dim is negative", op, str);
    else
        tg__error("%s: shape %s has more elements than a tensor can hold "
                  "(2^59)",
                  op, str);
    return false;
}

int tg__dim(const char *op, int dim, int ndim)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        tg__error("%s: dim %d is out of range for a %d-d tensor", op, dim,
                  ndim);
        return -1;
    }
    return d;
}

int tg__dim_of(const char *op, int dim, const tg_tensor *t)
{
    if (tg__is_dead(t)) {
        tg__dead_error(op, t);
        return -1;
    }
    int d = dim < 0 ? dim + t->ndim : dim;
    if (d < 0 || d >= t->ndim) {
        tg__error("%s: dim %d is out of range for a %d-d tensor of shape %s",
                  op, dim, t->ndim, TG_SHP(t));
        return -1;
    }
    return d;
}

const char *tg_dtype_name(tg_dtype dt)
{
    switch (dt) {
    case TG_FLOAT32: return "float32";
    case TG_FLOAT64: return "float64";
    case TG_BOOL: return "bool";
    case TG_INT64: return "int64";
    }
    return "unknown";
}

size_t tg_dtype_size(tg_dtype dt)
{
    switch (dt) {
    case TG_FLOAT32: return 4;
    case TG_FLOAT64: return 8;
    case TG_BOOL: return 1;
    case TG_INT64: return 8;
    }
    return 0;
}

bool tg__dead_error(const char *op, const tg_tensor *t)
{
    char shp[TG_SHAPE_STR];
    tg__shape_str(t->ndim, t->shape, shp);
    char used[300] = "", freed[300] = "";
    if (site_file)
        snprintf(used, sizeof used, "%s:%d: ", site_file, site_line);
    if (t->released_file)
        snprintf(freed, sizeof freed, " (its last reference went at %s:%d)",
                 t->released_file, t->released_line);
    tg__error("%s%s: a %s %s tensor used after it was released%s; keep it "
              "with tg_retain, tg_keep or tg_scope_return",
              used, op, tg_dtype_name(t->dtype), shp, freed);
    fprintf(stderr, "tapegrad: %s\n", last_error);
    return false;
}

bool tg__check_float(const char *op, const tg_tensor *t)
{
    if (tg__is_dead(t))
        return tg__dead_error(op, t);
    if (t->dtype == TG_FLOAT32 || t->dtype == TG_FLOAT64)
        return true;
    tg__error("%s: expected a float32 or float64 tensor, got %s %s", op,
              tg_dtype_name(t->dtype), TG_SHP(t));
    return false;
}

bool tg__check_same_float(const char *op, const tg_tensor *a,
                          const tg_tensor *b)
{
    if (tg__is_dead(a))
        return tg__dead_error(op, a);
    if (tg__is_dead(b))
        return tg__dead_error(op, b);
    if (!tg__check_float(op, a) || !tg__check_float(op, b))
        return false;
    if (a->dtype == b->dtype)
        return true;
    tg__error("%s: dtypes differ: %s %s and %s %s (convert one with tg_to)", op,
              tg_dtype_name(a->dtype), TG_SHP(a), tg_dtype_name(b->dtype),
              TG_SHP(b));
    return false;
}
