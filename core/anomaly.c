/* Anomaly mode.
 *
 * With anomaly mode on, tg__record checks every op's output and the engine
 * checks every gradient an op's backward produces. An op is the offender
 * when it makes a non-finite value none of its inputs had: a NaN or +inf
 * from finite inputs, or a -inf that is not a mask (-inf may come from
 * an op whose descriptor says so (masked_fill, where, log_softmax), or
 * pass through from an input). The
 * first offender's message is kept and the call turns into an error at the
 * API boundary (tg_check_result), so everything computed after it is
 * dropped, as torch.autograd.detect_anomaly raises. */
#include "core/tape.h"

#include <math.h>
#include <stdio.h>

static TG_THREAD_LOCAL bool anomaly_on;
static TG_THREAD_LOCAL bool pending; /* an anomaly was found in this call */

bool tg_set_anomaly_mode(bool on)
{
    bool was = anomaly_on;
    anomaly_on = on;
    pending = false;
    return was;
}

bool tg_anomaly_mode(void) { return anomaly_on; }

bool tg__anomaly_on(void) { return anomaly_on; }

/* Which kinds of non-finite value t holds: bit 0 NaN, 1 +inf, 2 -inf; and
 * the flat C-order index of the first one in *first. */
enum { HAS_NAN = 1, HAS_POS_INF = 2, HAS_NEG_INF = 4 };

static int nonfinite(const tg_tensor *t, int64_t *first)
{
    int kinds = 0;
    int64_t k = 0;
    *first = -1;
    if (t->dtype != TG_FLOAT32 && t->dtype != TG_FLOAT64)
        return 0;
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 1, (const tg_tensor *const[]){t});
    TG_DISPATCH_FLOAT(t->dtype, T, {
        do {
            const T *p = TG_DATA(T, t) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++, k++) {
                double v = (double)p[i * L.step[0]];
                if (isfinite(v))
                    continue;
                int kind = isnan(v) ? HAS_NAN
                           : v > 0  ? HAS_POS_INF
                                    : HAS_NEG_INF;
                if (!(kinds & kind) && *first < 0)
                    *first = k;
                kinds |= kind;
            }
        } while (tg__loop_next(&L));
    });
    return kinds;
}

static const char *kind_name(int kinds)
{
    return kinds & HAS_NAN ? "NaN" : kinds & HAS_POS_INF ? "inf" : "-inf";
}

/* Records the first anomaly of this call: its message becomes the error
 * (and is printed once, for programs that call without the macros). */
static void report(const char *what, const char *op, const char *file, int line,
                   int kinds, int64_t index, const tg_tensor *t)
{
    if (pending)
        return;
    pending = true;
    tg__error("anomaly: %s '%s' called at %s:%d made %s (first at flat index "
              "%lld of %s)",
              what, op, file ? file : "?", line, kind_name(kinds),
              (long long)index, TG_SHP(t));
    fprintf(stderr, "tapegrad: %s\n", tg_last_error());
}

void tg__anomaly_forward(const tg_op *op, const tg_tensor *out, int n_in,
                         tg_tensor *const *in)
{
    int64_t first;
    int made = nonfinite(out, &first);
    if (!made)
        return;
    int had = 0;
    for (int i = 0; i < n_in; i++) {
        int64_t unused;
        if (in[i])
            had |= nonfinite(in[i], &unused);
    }
    if (op->makes_neg_inf)
        had |= HAS_NEG_INF;
    int fresh = made & ~had;
    if (fresh) {
        const char *file;
        int line;
        tg__callsite(&file, &line);
        report("op", op->name, file, line, fresh, first, out);
    }
}

bool tg__anomaly_backward(const tg_node *n, int i, const tg_tensor *g)
{
    int64_t first, unused;
    int made = nonfinite(g, &first);
    int had = n->out->grad ? nonfinite(n->out->grad, &unused) : 0;
    int fresh = made & ~had;
    if (!fresh)
        return false;
    char what[64];
    snprintf(what, sizeof what, "the gradient of input %d by backward of", i);
    report(what, n->op->name, n->file, n->line, fresh, first, g);
    return true;
}

bool tg__anomaly_pending(void) { return pending; }

bool tg__anomaly_take(void)
{
    bool was = pending;
    pending = false;
    return was;
}

tg_tensor *tg_check_result(tg_tensor *t, const char *fn)
{
    (void)fn; /* the op inside the call is named in the message already */
    if (!tg__anomaly_take())
        return t;
    tg_release(t);
    return NULL;
}
