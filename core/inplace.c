/* In-place updates: add_, mul_, copy_, copy_in, fill_, zero_. They write a
 * tensor's elements where they are and record nothing on the tape, for the
 * work outside the graph (an SGD step, loading weights, resetting a
 * buffer); so they must never change what a backward still to run reads.
 *
 * Two guards, as PyTorch has two: each call refuses a tensor whose storage
 * a live tape entry holds (tg_storage.tape_refs > 0), naming the entry, at
 * the line that would break the graph; and each write adds one to the
 * storage's version, which the entries note when they record, so that a
 * write that did not pass here (tg_set) is caught when backward starts
 * (core/backward.c, versions_hold). PyTorch has only the second: it lets the
 * write happen and fails the backward. Refusing the write itself is
 * stricter (a graph that is never backpropagated but still alive blocks
 * the update too: release it first, or compute it with grad mode off), and
 * it points at the line of the mistake, which is what a student needs.
 *
 * The two guards are one pair, tg__write_check and tg__write_done
 * (core/shared.h), which every other write of a tensor the user holds makes
 * too: the optimizer step (nn/optim.c) and the checkpoint loaders.
 *
 * A floor of its own beside print.c: it calls the tape (tg__tape_holder)
 * and the tensor below it. */
#include "core/tape.h"
#include "core/exported.h"

#include <string.h>

/* The checks every call makes on the tensor it writes (core/shared.h: the
 * optimizer step and the loaders make them too); false with an error
 * naming op. */
bool tg__write_check(const char *op, tg_tensor *t)
{
    if (TG_BAD(op, t) || tg__lend_refuses(t, true, op))
        return false;
    if (atomic_load_explicit(&t->storage->tape_refs, memory_order_relaxed) >
        0) {
        const char *file = NULL;
        int line = 0;
        const char *by = tg__tape_holder(t->storage, &line, &file);
        char site[300] = "";
        if (by && file)
            snprintf(site, sizeof site, " (recorded at %s:%d)", file, line);
        tg__error("%s: the %s %s tensor is held for a backward that has not "
                  "run, by the tape entry of '%s'%s: run that backward "
                  "first, or release the outputs that hold the graph",
                  op, tg_dtype_name(t->dtype), TG_SHP(t),
                  by ? by : "another thread's op", site);
        return false;
    }
    if (t->node && tg_is_grad_enabled()) {
        tg__error("%s: the %s tensor is the output of '%s' on the tape: an "
                  "in-place write would not be seen by its gradient; detach "
                  "it first, or write it with grad mode off",
                  op, TG_SHP(t), t->node->op->name);
        return false;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1) {
            tg__error("%s: the %s tensor is broadcast along dim %d (stride "
                      "0): its elements overlap, so it cannot be written in "
                      "place; write a contiguous copy",
                      op, TG_SHP(t), d);
            return false;
        }
    return true;
}

/* The exported twin, for libtapegrad_dist (core/exported.h). */
bool tg__x_write_check(const char *op, tg_tensor *t)
{
    return tg__write_check(op, t);
}

void tg__write_done(tg_tensor *t) { t->storage->version++; }

/* other must broadcast to t's shape exactly (t's shape never changes). */
static bool fits_into(const char *op, const tg_tensor *t,
                      const tg_tensor *other)
{
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(op, 2, (const tg_tensor *const[]){t, other}, &ndim,
                       shape))
        return false;
    if (ndim == t->ndim &&
        (ndim == 0 ||
         memcmp(shape, t->shape, sizeof(int64_t) * (size_t)ndim) == 0))
        return true;
    tg__error("%s: %s does not broadcast into the shape %s of the tensor "
              "written in place (its shape never changes)",
              op, TG_SHP(other), TG_SHP(t));
    return false;
}

/* other as the kernel may read it while t is written: itself, or a copy
 * when it shares t's storage in another layout (a shifted view would read
 * elements already written). *copy is what to release after. */
static const tg_tensor *readable(const tg_tensor *t, tg_tensor *other,
                                 tg_tensor **copy)
{
    *copy = NULL;
    bool same_layout =
        other->offset == t->offset && other->ndim == t->ndim &&
        memcmp(other->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim) ==
            0 &&
        memcmp(other->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) == 0;
    if (other->storage != t->storage || same_layout)
        return other;
    *copy = tg__copy("inplace", other);
    if (*copy)
        tg__unscope(*copy);
    return *copy;
}

typedef enum { ADD_, MUL_ } update_kind;

/* t = t + alpha * other, or t = t * other, elementwise, in the dtype of t
 * (float: the same rounding as tg_add(t, tg_scale(other, alpha)) when
 * alpha is 1, and as one multiply and one add otherwise). */
static int update(const char *op, update_kind kind, tg_tensor *t,
                  tg_tensor *other, double alpha)
{
    if (!tg__write_check(op, t) || TG_BAD(op, other))
        return -1;
    if (!tg__check_same_float(op, t, other) || !fits_into(op, t, other))
        return -1;
    tg_tensor *copy;
    const tg_tensor *src = readable(t, other, &copy);
    if (!src) {
        tg__error("%s: out of memory copying an overlapping %s", op,
                  TG_SHP(other));
        return -1;
    }
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 2, (const tg_tensor *const[]){t, src});
    TG_DISPATCH_FLOAT(t->dtype, T, {
        const T a = (T)alpha;
        do {
            T *y = TG_DATA(T, t) + L.off[0];
            const T *x = TG_DATA(T, src) + L.off[1];
            int64_t sy = L.step[0], sx = L.step[1];
            if (kind == MUL_)
                for (int64_t i = 0; i < L.inner; i++)
                    y[i * sy] *= x[i * sx];
            else if (alpha == 1)
                for (int64_t i = 0; i < L.inner; i++)
                    y[i * sy] += x[i * sx];
            else
                for (int64_t i = 0; i < L.inner; i++)
                    y[i * sy] += a * x[i * sx];
        } while (tg__loop_next(&L));
    });
    tg_release(copy);
    tg__write_done(t);
    return 0;
}

int tg_add_(tg_tensor *t, tg_tensor *other, double alpha)
{
    return update("add_", ADD_, t, other, alpha);
}

int tg_mul_(tg_tensor *t, tg_tensor *other)
{
    return update("mul_", MUL_, t, other, 1);
}

int tg_copy_(tg_tensor *dst, tg_tensor *src)
{
    if (!tg__write_check("copy_", dst) || TG_BAD("copy_", src) ||
        !fits_into("copy_", dst, src))
        return -1;
    tg_tensor *copy;
    const tg_tensor *from = readable(dst, src, &copy);
    if (!from) {
        tg__error("copy_: out of memory copying an overlapping %s",
                  TG_SHP(src));
        return -1;
    }
    tg__copy_into(dst, from);
    tg_release(copy);
    tg__write_done(dst);
    return 0;
}

void *tg__contiguous_bytes(tg_tensor *t, tg_dtype dt)
{
    if (!t || t->dtype != dt || !tg_is_contiguous(t))
        return NULL;
    return (char *)t->storage->data + (size_t)t->offset * tg_dtype_size(dt);
}

int tg_copy_in(tg_tensor *t, tg_dtype as, const void *src)
{
    if (!tg__write_check("copy_in", t))
        return -1;
    if (tg_dtype_size(as) == 0) {
        tg__error("copy_in: unknown dtype %d", (int)as);
        return -1;
    }
    if (!src && tg_numel(t) > 0) {
        tg__error("copy_in: src is NULL for %s", TG_SHP(t));
        return -1;
    }
    const int64_t bad = as == TG_BOOL ? tg__bad_bool(src, tg_numel(t)) : -1;
    if (bad >= 0) {
        tg__error("copy_in: bool element %lld for %s is the byte %u, not 0 "
                  "or 1",
                  (long long)bad, TG_SHP(t), ((const uint8_t *)src)[bad]);
        return -1;
    }
    /* the elements in C order, as tg_copy_out writes them: the same dtype
     * byte for byte (through a double an int64 above 2^53 would round),
     * another converted */
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 1, (const tg_tensor *const[]){t});
    size_t es = tg_dtype_size(t->dtype);
    char *base = (char *)t->storage->data;
    const char *from = src;
    int64_t k = 0;
    do {
        char *dst = base + (size_t)(t->offset + L.off[0]) * es;
        if (as == t->dtype && L.step[0] == 1 && L.inner > 0)
            memcpy(dst, from + (size_t)k * es, (size_t)L.inner * es);
        else if (as == t->dtype)
            for (int64_t i = 0; i < L.inner; i++)
                memcpy(dst + (size_t)(i * L.step[0]) * es,
                       from + (size_t)(k + i) * es, es);
        else
            for (int64_t i = 0; i < L.inner; i++)
                tg__store(t->dtype, dst, i * L.step[0],
                          tg__load(as, src, k + i));
        k += L.inner;
    } while (tg__loop_next(&L));
    tg__write_done(t);
    return 0;
}

int tg_fill_(tg_tensor *t, double v)
{
    if (!tg__write_check("fill_", t))
        return -1;
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 1, (const tg_tensor *const[]){t});
    size_t es = tg_dtype_size(t->dtype);
    char *base = (char *)t->storage->data;
    do {
        void *dst = base + (size_t)(t->offset + L.off[0]) * es;
        for (int64_t i = 0; i < L.inner; i++)
            tg__store(t->dtype, dst, i * L.step[0], v);
    } while (tg__loop_next(&L));
    tg__write_done(t);
    return 0;
}

int tg_zero_(tg_tensor *t)
{
    if (!tg__write_check("zero_", t))
        return -1;
    return tg_fill_(t, 0);
}
