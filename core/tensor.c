/* The tensor: a refcounted header (shape, strides, offset) over a refcounted
 * storage that views share (core/storage.c). Creation, accessors, element
 * access, lifetimes, and the end of a scope (which releases what the scope
 * stack of core/scope.c holds). A dying tensor frees the tape entry that
 * made it (tg__node_free): the one circle of core, with core/tape.c. */
#include "core/tape.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- headers ----------------------------------------------------------- */

void tg__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    /* An empty tensor may have huge other dims ((0, 1e16, 1e16) is a valid
     * numpy shape): its strides are never stepped, so they saturate rather
     * than overflow. */
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = st;
        if (__builtin_mul_overflow(st, shape[d] > 0 ? shape[d] : 1, &st))
            st = INT64_MAX;
    }
}

/* The process's tensors in creation order (tg_tensor.id): one counter for
 * every thread, so that two tensors alive at once never share an id (the
 * printouts number leaves by it), and a single-threaded program still gets
 * the same ids every run. A relaxed increment: only uniqueness matters. */
static _Atomic uint64_t next_id = 1;

/* Headers come from the pool (core/storage.c), as storage does: a training
 * step makes and frees the same tensors every step, and then takes no
 * memory from the system for them. */
static tg_tensor *header_new(tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg__pool_get(sizeof *t);
    if (!t)
        return NULL;
    memset(t, 0, sizeof *t);
    atomic_init(&t->refcount, 1);
    t->magic = TG_MAGIC_LIVE;
    t->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim > 0) /* a 0-d shape may be NULL, and memcpy(x, NULL, 0) is UB */
        memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->scope_slot = -1;
    return t;
}

static void header_free(tg_tensor *t) { tg__pool_put(t, sizeof *t); }

/* ---- poison: the quarantine of released headers -------------------------
 *
 * A released tensor's header is poisoned (TG_MAGIC_DEAD, the release's call
 * site), so that a later use through a pointer the caller kept is an error
 * naming both lines instead of a read of freed memory. The pool would hand
 * the header out again at once (a training step reuses the same ones), so
 * the last QUARANTINE headers each thread released stay out of it, in a
 * ring, and go back to the pool as newer ones push them out. The mark is
 * thus certain for a use within the thread's next QUARANTINE releases, and
 * lasts until the pool
 * reuses the header after that (a use then reaches whichever tensor has the
 * header now: C has no safe pointers). With the leak audit on
 * (TG_DEBUG_LEAKS=1) the ring holds QUARANTINE_AUDIT headers, ~1.3 MiB:
 * the debugging run is the one that should catch every use. The ring is
 * small otherwise so that a steady training step still takes no memory
 * from the system after two warm-up steps (tests/check_steady.c): it ties
 * up QUARANTINE headers, no more. Its headers go back at exit. */
enum { QUARANTINE = 16, QUARANTINE_AUDIT = 4096 }; /* powers of 2 */

/* Without the audit, each thread's ring is its own (no lock: a release is
 * a hot path) and goes back to the pool when the thread exits (a key's
 * destructor) or, for the thread that calls exit, at exit. With the audit
 * on, which takes a lock per tensor anyway, one ring for the process. */
static TG_THREAD_LOCAL tg_tensor *my_ring[QUARANTINE];
static TG_THREAD_LOCAL unsigned my_head, my_len;
static TG_THREAD_LOCAL bool my_ring_ready;

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
/* Set once, in ring_init (pthread_once: before any thread reads it), and
 * never cleared: after ring_flush at exit, ring is NULL and header_bury
 * sends each header straight back under ring_lock, so a thread still
 * releasing while another runs exit never reads a flag being written. */
static bool audit_ring;
static tg_tensor **ring;
static unsigned ring_head, ring_len;
static pthread_key_t ring_key;
static bool ring_key_made;

static void my_ring_flush(void)
{
    for (unsigned i = 0; i < my_len; i++)
        header_free(my_ring[(my_head + i) & (QUARANTINE - 1)]);
    my_len = my_head = 0;
}

static void ring_flush(void)
{
    my_ring_flush();
    pthread_mutex_lock(&ring_lock);
    for (unsigned i = 0; i < ring_len; i++)
        header_free(ring[(ring_head + i) & (QUARANTINE_AUDIT - 1)]);
    ring_len = ring_head = 0;
    free(ring);
    ring = NULL; /* later releases: straight back (header_bury) */
    pthread_mutex_unlock(&ring_lock);
}

static void ring_thread_exit(void *arg)
{
    (void)arg;
    my_ring_flush();
}

static void ring_init(void)
{
    /* the audit's ring, when it can be had; else the threads' own */
    if (tg_live_tensors() >= 0)
        ring = tg__malloc(QUARANTINE_AUDIT * sizeof *ring);
    audit_ring = ring != NULL;
    ring_key_made = pthread_key_create(&ring_key, ring_thread_exit) == 0;
    atexit(ring_flush);
}

/* t's last reference is gone (its storage, entry and gradient already
 * released): poison it and put it in the ring, whose oldest goes back. */
static void header_bury(tg_tensor *t)
{
    if (!my_ring_ready) {
        pthread_once(&ring_once, ring_init);
        if (ring_key_made) /* any non-NULL value: the destructor runs */
            pthread_setspecific(ring_key, &my_ring_ready);
        my_ring_ready = true;
    }
    t->magic = TG_MAGIC_DEAD;
    tg__callsite(&t->released_file, &t->released_line);
    t->storage = NULL;
    t->node = NULL;
    t->grad = NULL;
    tg_tensor *out = NULL;
    if (!audit_ring) {
        if (my_len == QUARANTINE) {
            out = my_ring[my_head];
            my_ring[my_head] = t;
            my_head = (my_head + 1) & (QUARANTINE - 1);
        } else
            my_ring[(my_head + my_len++) & (QUARANTINE - 1)] = t;
    } else {
        pthread_mutex_lock(&ring_lock);
        if (!ring) /* closed at exit: straight back */
            out = t;
        else if (ring_len == QUARANTINE_AUDIT) {
            out = ring[ring_head];
            ring[ring_head] = t;
            ring_head = (ring_head + 1) & (QUARANTINE_AUDIT - 1);
        } else
            ring[(ring_head + ring_len++) & (QUARANTINE_AUDIT - 1)] = t;
        pthread_mutex_unlock(&ring_lock);
    }
    if (out)
        header_free(out);
}

static bool check_dtype(const char *op, tg_dtype dt)
{
    if (dt == TG_FLOAT32 || dt == TG_FLOAT64 || dt == TG_BOOL || dt == TG_INT64)
        return true;
    tg__error("%s: unknown dtype %d", op, (int)dt);
    return false;
}

tg_tensor *tg__new(const char *op, tg_dtype dt, int ndim, const int64_t *shape,
                   bool zero_fill)
{
    if (!check_dtype(op, dt))
        return NULL;
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg__error("%s: ndim %d is out of range 0..%d", op, ndim, TG_MAX_DIMS);
        return NULL;
    }
    if (ndim > 0 && !shape) {
        tg__error("%s: shape is NULL for ndim %d", op, ndim);
        return NULL;
    }
    int64_t n;
    if (!tg__check_count(op, ndim, shape, &n))
        return NULL;
    tg_tensor *t = header_new(dt, ndim, shape);
    if (t)
        t->storage = tg__storage_new((size_t)n * tg_dtype_size(dt), zero_fill);
    if (!t || !t->storage) {
        header_free(t);
        tg__error("%s: out of memory for shape %s", op,
                  tg__shape_str(ndim, shape, (char[TG_SHAPE_STR]){0}));
        return NULL;
    }
    if (!tg__scope_register(t, op)) {
        tg__storage_release(t->storage);
        header_free(t);
        return NULL;
    }
    tg__contiguous_strides(ndim, shape, t->strides);
    tg__audit_born(t, op);
    return t;
}

/* Whether a view of (ndim, shape, strides, offset) over s, of dt elements,
 * is countable and reaches only elements of s. With any element, its
 * offsets offset + sum_d i_d * strides[d] (0 <= i_d < shape[d]) span
 *   [offset + sum_{strides[d] < 0} (shape[d] - 1) * strides[d],
 *    offset + sum_{strides[d] > 0} (shape[d] - 1) * strides[d]]
 * and that span must lie in [0, elements of s). Each term is computed
 * checked: a view whose reach passes int64 reaches outside s anyway. */
static bool view_fits(const tg_storage *s, tg_dtype dt, int ndim,
                      const int64_t *shape, const int64_t *strides,
                      int64_t offset)
{
    int64_t n;
    if (!tg__count(ndim, shape, &n))
        return false;
    if (n == 0)
        return true;
    int64_t lo = offset, hi = offset;
    for (int d = 0; d < ndim; d++) {
        int64_t reach;
        if (!tg__mul(shape[d] - 1, strides[d], &reach) ||
            !(reach < 0 ? tg__add(lo, reach, &lo) : tg__add(hi, reach, &hi)))
            return false;
    }
    return lo >= 0 && hi < (int64_t)(s->nbytes / tg_dtype_size(dt));
}

tg_tensor *tg__view(const char *op, const tg_tensor *src, int ndim,
                    const int64_t *shape, const int64_t *strides,
                    int64_t offset)
{
    TG_ASSERT(
        view_fits(src->storage, src->dtype, ndim, shape, strides, offset));
    tg_tensor *t = header_new(src->dtype, ndim, shape);
    if (!t) {
        tg__error("%s: out of memory for a view of %s", op, TG_SHP(src));
        return NULL;
    }
    if (!tg__scope_register(t, op)) {
        header_free(t);
        return NULL;
    }
    if (ndim > 0)
        memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    t->offset = offset;
    t->storage = src->storage;
    tg__storage_retain(t->storage);
    tg__audit_born(t, "view");
    return t;
}

/* ---- copies ------------------------------------------------------------ */

tg_tensor *tg__copy(const char *op, const tg_tensor *t)
{
    tg_tensor *c = tg__new(op, t->dtype, t->ndim, t->shape, false);
    if (c)
        tg__copy_into(c, t);
    return c;
}

/* ---- lifetime ---------------------------------------------------------- */

/* The counts are atomic (core/internal.h says which orders, and why). A
 * count read as 0 is a release too many, or a tensor already freed (whose
 * count stays 0 until its memory is reused): the caller's bug, asserted. */

tg_tensor *tg_retain(tg_tensor *t)
{
    if (t && tg__is_dead(t)) {
        tg__dead_error("retain", t);
        return NULL;
    }
    if (t) {
        int64_t was =
            atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
        TG_ASSERT(was > 0);
    }
    return t;
}

/* Freeing a tensor releases its node, whose inputs may die in turn: a long
 * tape would recurse as deep as it is long. A worklist keeps it flat. */
static TG_THREAD_LOCAL tg_tensor *dying;
static TG_THREAD_LOCAL bool draining;

void tg_release(tg_tensor *t)
{
    if (!t)
        return;
    /* A release too many: an error naming the caller's line (the call-site
     * macro records it) and the release that freed t, never an abort. */
    if (tg__is_dead(t)) {
        tg__dead_error("release", t);
        return;
    }
    /* A function under a check releasing what it was lent (core/lend.c):
     * refused, its lender fails with the error. */
    if (tg__lend_refuses(t, false, "release"))
        return;
    /* before the scope looks at t, whose slot is stale once it is freed */
    TG_ASSERT(atomic_load_explicit(&t->refcount, memory_order_relaxed) > 0);
    tg__scope_release(t);
    tg__drop(t);
}

void tg__drop(tg_tensor *t)
{
    if (!t)
        return;
    int64_t was =
        atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel);
    TG_ASSERT(was > 0);
    if (was > 1)
        return;
    /* The last reference, possibly on another thread than the one that
     * made t: t's entry leaves its own thread's tape (tg__node_free), and
     * what dies with t dies here, on this thread's worklist. */
    t->dying_next = dying;
    dying = t;
    if (draining)
        return;
    draining = true;
    while (dying) {
        tg_tensor *d = dying;
        dying = d->dying_next;
        tg__unscope(d);
        tg__audit_died(d);
        if (d->node)
            tg__node_free(d->node); /* releases the node's inputs */
        tg__drop(d->grad);
        tg__storage_release(d->storage);
        header_bury(d);
    }
    draining = false;
}

/* The scope's references, newest first: a tensor dying here may free
 * others in the scope (through its tape entry), which leave their slots
 * empty and are skipped. */
int tg_scope_end(void)
{
    if (tg__scope_close_lost()) {
        tg__error("scope_end: out of memory: tg_scope_begin could not open "
                  "this scope, so no tensor was made inside it");
        return -1;
    }
    if (!tg__scope_is_open()) {
        tg__error("scope_end: no scope is open");
        return -1;
    }
    tg_tensor *t;
    while ((t = tg__scope_take_newest()))
        tg__drop(t);
    /* the outermost scope's stack is kept for the next step while the
     * pool is on, as the pool keeps the step's storage */
    tg__scope_close(tg__pool_on());
    return 0;
}

/* ---- creation ---------------------------------------------------------- */

tg_tensor *tg_zeros(tg_dtype dt, int ndim, const int64_t *shape)
{
    return tg__new("zeros", dt, ndim, shape, true);
}

tg_tensor *tg__empty(const char *op, tg_dtype dt, int ndim,
                     const int64_t *shape)
{
    return tg__new(op, dt, ndim, shape, false);
}

/* Every element of t's storage set to v converted to t's dtype: one element
 * converted, copied over a block of up to 4 KiB in doubling steps, then the
 * block over the rest (memcpy's speed for every dtype; the element-by-element
 * conversion ran at 2-3 ns an element). */
static void fill(tg_tensor *t, double v)
{
    const int64_t n = tg_numel(t);
    if (n == 0)
        return;
    char *p = t->storage->data;
    const size_t total = (size_t)n * tg_dtype_size(t->dtype);
    const size_t block = total < 4096 ? total : 4096;
    tg__store(t->dtype, p, 0, v);
    for (size_t done = tg_dtype_size(t->dtype); done < block;) {
        const size_t k = done < block - done ? done : block - done;
        memcpy(p + done, p, k);
        done += k;
    }
    for (size_t off = block; off < total; off += block)
        memcpy(p + off, p, total - off < block ? total - off : block);
}

/* A new tensor filled with value; errors name op. */
static tg_tensor *filled(const char *op, tg_dtype dt, int ndim,
                         const int64_t *shape, double value)
{
    tg_tensor *t = tg__new(op, dt, ndim, shape, false);
    if (t)
        fill(t, value);
    return t;
}

tg_tensor *tg_full(tg_dtype dt, int ndim, const int64_t *shape, double value)
{
    return filled("full", dt, ndim, shape, value);
}

tg_tensor *tg_ones(tg_dtype dt, int ndim, const int64_t *shape)
{
    return filled("ones", dt, ndim, shape, 1.0);
}

tg_tensor *tg_scalar(tg_dtype dt, double value)
{
    return filled("scalar", dt, 0, NULL, value);
}

int64_t tg__bad_bool(const uint8_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return i;
    return -1;
}

tg_tensor *tg_from_data(tg_dtype dt, int ndim, const int64_t *shape,
                        const void *data)
{
    tg_tensor *t = tg__new("from_data", dt, ndim, shape, false);
    if (!t)
        return NULL;
    if (!data && tg_numel(t) > 0) {
        tg_release(t);
        tg__error("from_data: data is NULL");
        return NULL;
    }
    const int64_t bad = dt == TG_BOOL ? tg__bad_bool(data, tg_numel(t)) : -1;
    if (bad >= 0) {
        tg__error("from_data: bool element %lld of %s is the byte %u, not 0 "
                  "or 1",
                  (long long)bad, TG_SHP(t), ((const uint8_t *)data)[bad]);
        tg_release(t);
        return NULL;
    }
    if (tg_numel(t) > 0)
        memcpy(t->storage->data, data, t->storage->nbytes);
    return t;
}

tg_tensor *tg_arange(tg_dtype dt, double start, double stop, double step)
{
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        tg__error("arange: need finite start, stop and a nonzero step, got "
                  "(%g, %g, %g)",
                  start, stop, step);
        return NULL;
    }
    double len = ceil((stop - start) / step);
    if (!(len < 0x1p62)) { /* also catches a NaN from inf / inf */
        tg__error("arange: (%g, %g, %g) would have %g elements", start, stop,
                  step, len);
        return NULL;
    }
    int64_t n = len > 0 ? (int64_t)len : 0;
    tg_tensor *t = tg__new("arange", dt, 1, &n, false);
    for (int64_t i = 0; t && i < n; i++)
        tg__store(dt, t->storage->data, i, start + (double)i * step);
    return t;
}

tg_tensor *tg_zeros_like(const tg_tensor *t)
{
    return t ? tg__new("zeros_like", t->dtype, t->ndim, t->shape, true) : NULL;
}

tg_tensor *tg_ones_like(const tg_tensor *t)
{
    return t ? filled("ones_like", t->dtype, t->ndim, t->shape, 1.0) : NULL;
}

tg_tensor *tg_full_like(const tg_tensor *t, double value)
{
    return t ? filled("full_like", t->dtype, t->ndim, t->shape, value) : NULL;
}

/* ---- accessors --------------------------------------------------------- */

int tg_ndim(const tg_tensor *t) { return TG_BAD("ndim", t) ? -1 : t->ndim; }

int64_t tg_size(const tg_tensor *t, int dim)
{
    if (TG_BAD("size", t))
        return -1;
    int d = tg__dim_of("size", dim, t);
    return d < 0 ? -1 : t->shape[d];
}

const int64_t *tg_shape(const tg_tensor *t)
{
    return TG_BAD("shape", t) ? NULL : t->shape;
}

int64_t tg_stride(const tg_tensor *t, int dim)
{
    if (TG_BAD("stride", t))
        return 0;
    int d = tg__dim_of("stride", dim, t);
    return d < 0 ? 0 : t->strides[d];
}

int64_t tg_numel(const tg_tensor *t)
{
    if (TG_BAD("numel", t))
        return -1;
    /* Counted when t was made (tg__new, tg__view), so it fits; counting
     * again, rather than multiplying, keeps the product of an empty
     * (0, 1e16, 1e16)'s other dims from being computed. */
    int64_t n;
    bool counted = tg__count(t->ndim, t->shape, &n);
    TG_ASSERT(counted);
    return n;
}

tg_dtype tg_dtype_of(const tg_tensor *t) { return t ? t->dtype : TG_FLOAT32; }

bool tg_is_contiguous(const tg_tensor *t)
{
    if (TG_BAD("is_contiguous", t))
        return false;
    if (tg_numel(t) == 0) /* no element sits anywhere, as numpy and torch */
        return true;
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != st)
            return false;
        st *= t->shape[d];
    }
    return true;
}

int tg_copy_out(const tg_tensor *t, tg_dtype as, void *dst)
{
    if (TG_BAD("copy_out", t) || !dst) {
        if (!t || tg__is_dead(t))
            return -1;
        tg__error("copy_out: dst is NULL");
        return -1;
    }
    if (!check_dtype("copy_out", as))
        return -1;
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 1, (const tg_tensor *const[]){t});
    const char *base = (const char *)t->storage->data;
    size_t es = tg_dtype_size(t->dtype);
    /* the same dtype byte for byte (through a double an int64 above 2^53
     * would round), another converted */
    char *to = dst;
    int64_t k = 0;
    do {
        const char *src = base + (size_t)(t->offset + L.off[0]) * es;
        if (as == t->dtype && L.step[0] == 1 && L.inner > 0)
            memcpy(to + (size_t)k * es, src, (size_t)L.inner * es);
        else if (as == t->dtype)
            for (int64_t i = 0; i < L.inner; i++)
                memcpy(to + (size_t)(k + i) * es,
                       src + (size_t)(i * L.step[0]) * es, es);
        else
            for (int64_t i = 0; i < L.inner; i++)
                tg__store(as, dst, k + i,
                          tg__load(t->dtype, src, i * L.step[0]));
        k += L.inner;
    } while (tg__loop_next(&L));
    return 0;
}

/* Offset of idx in t, or -1 with an error. */
static int64_t index_offset(const char *op, const tg_tensor *t,
                            const int64_t *idx)
{
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t i = idx[d] < 0 ? idx[d] + t->shape[d] : idx[d];
        if (i < 0 || i >= t->shape[d]) {
            tg__error("%s: index %lld is out of range for dim %d of %s", op,
                      (long long)idx[d], d, TG_SHP(t));
            return -1;
        }
        off += i * t->strides[d];
    }
    return off;
}

double tg_get(const tg_tensor *t, const int64_t *idx)
{
    if (TG_BAD("get", t))
        return NAN;
    if (!idx && t->ndim > 0) {
        tg__error("get: idx is NULL for %s", TG_SHP(t));
        return NAN;
    }
    int64_t off = index_offset("get", t, idx);
    return off < 0 ? NAN : tg__load(t->dtype, t->storage->data, off);
}

int tg_set(tg_tensor *t, const int64_t *idx, double v)
{
    if (TG_BAD("set", t))
        return -1;
    if (!idx && t->ndim > 0) {
        tg__error("set: idx is NULL for %s", TG_SHP(t));
        return -1;
    }
    int64_t off = index_offset("set", t, idx);
    if (off < 0)
        return -1;
    tg__store(t->dtype, t->storage->data, off, v);
    t->storage->version++; /* a backward that saved t will refuse it */
    return 0;
}

double tg_item(const tg_tensor *t)
{
    if (TG_BAD("item", t))
        return NAN;
    if (tg_numel(t) != 1) {
        tg__error("item: tensor %s has %lld elements, not 1", TG_SHP(t),
                  (long long)tg_numel(t));
        return NAN;
    }
    return tg__load(t->dtype, t->storage->data, t->offset);
}

/* ---- names ------------------------------------------------------------- */

int tg_set_name(tg_tensor *t, const char *name)
{
    if (TG_BAD("set_name", t))
        return -1;
    /* copied into the header (cut to TG_NAME_MAX - 1 bytes): nothing is
     * allocated, named or not; a bounded copy, not snprintf, as modules
     * name their tensors on every forward */
    size_t len = name ? strnlen(name, sizeof t->name - 1) : 0;
    memcpy(t->name, name ? name : "", len);
    t->name[len] = '\0';
    return 0;
}

const char *tg_name(const tg_tensor *t)
{
    return TG_BAD("name", t) ? NULL : t->name;
}
