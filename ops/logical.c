/* Logical and, or, not, as torch.logical_and / logical_or / logical_not:
 * TG_BOOL results, numpy broadcasting between the two operands, no
 * gradient. Operands of any dtype count nonzero as true (NaN included, as
 * in torch), and the two may differ in dtype: a bool mask and a float
 * tensor combine without a conversion first. */
#include "core/internal.h"

typedef enum { AND, OR, NOT } logic_kind;
static const char *const logic_names[] = {"logical_and", "logical_or",
                                          "logical_not"};

/* Whether element i of an array of dt is nonzero. */
static uint8_t truth(tg_dtype dt, const void *base, int64_t i)
{
    if (dt == TG_BOOL)
        return ((const uint8_t *)base)[i] != 0;
    return tg__load(dt, base, i) != 0; /* NaN != 0 holds: true */
}

typedef struct logic_job {
    logic_kind kind;
    tg_tensor *out;
    const tg_tensor *a, *b; /* b: NULL for not */
} logic_job;

static void logic_run(void *job, int64_t start, const int64_t *off,
                      const int64_t *step, int64_t len)
{
    const logic_job *j = job;
    uint8_t *o = TG_DATA(uint8_t, j->out) + off[0];
    const tg_tensor *a = j->a, *b = j->b;
    const size_t sa = tg_dtype_size(a->dtype);
    const char *xa = (const char *)a->storage->data + (size_t)a->offset * sa;
    (void)start;
    if (j->kind == NOT) {
        for (int64_t i = 0; i < len; i++)
            o[i * step[0]] = !truth(a->dtype, xa, off[1] + i * step[1]);
        return;
    }
    const size_t sb = tg_dtype_size(b->dtype);
    const char *xb = (const char *)b->storage->data + (size_t)b->offset * sb;
    if (a->dtype == TG_BOOL && b->dtype == TG_BOOL) { /* masks: bytes */
        const uint8_t *x = (const uint8_t *)xa + off[1];
        const uint8_t *y = (const uint8_t *)xb + off[2];
        for (int64_t i = 0; i < len; i++) {
            bool p = x[i * step[1]], q = y[i * step[2]];
            o[i * step[0]] = j->kind == AND ? p && q : p || q;
        }
        return;
    }
    for (int64_t i = 0; i < len; i++) {
        bool p = truth(a->dtype, xa, off[1] + i * step[1]);
        bool q = truth(b->dtype, xb, off[2] + i * step[2]);
        o[i * step[0]] = j->kind == AND ? p && q : p || q;
    }
}

static tg_tensor *logic(logic_kind kind, tg_tensor *a, tg_tensor *b)
{
    const char *name = logic_names[kind];
    int n = kind == NOT ? 1 : 2;
    if (!a || (n == 2 && !b))
        return NULL;
    const tg_tensor *const ops[2] = {a, b};
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(name, n, ops, &ndim, shape))
        return NULL;
    tg_tensor *y = tg__new(name, TG_BOOL, ndim, shape, false);
    if (!y)
        return NULL;
    tg_loop L;
    tg__loop_init(&L, ndim, shape, n + 1, (const tg_tensor *const[]){y, a, b});
    tg__loop_run(&L, 1, logic_run,
                 &(logic_job){.kind = kind, .out = y, .a = a, .b = b});
    return y;
}

tg_tensor *tg_logical_and(tg_tensor *a, tg_tensor *b)
{
    return logic(AND, a, b);
}

tg_tensor *tg_logical_or(tg_tensor *a, tg_tensor *b) { return logic(OR, a, b); }

tg_tensor *tg_logical_not(tg_tensor *t) { return logic(NOT, t, NULL); }
