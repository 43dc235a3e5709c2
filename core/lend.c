/* Tensors lent to a user's function. tg_gradcheck, tg_jacobian and a
 * custom op call a function of yours on tensors they hold: the function
 * may read them, never release them (the caller's reference is not its to
 * drop: the graph would free the tensor under the checker, which then
 * writes its gradient into freed memory) nor write them in place
 * (gradcheck perturbs and restores them; a custom op's gradient would be
 * of a tensor that changed). So while one runs, its tensors are on this
 * thread's list of lent tensors, and tg_release and every in-place write
 * (tg__write_check) ask here first: a release or a write of a lent tensor
 * is refused, the error names the call and its line, and the lender, at
 * the end, fails with it. A write that passes neither (tg_set, a raw
 * pointer) still moves the storage's version, which the lender compares at
 * the end.
 *
 * Which release is refused: the function may take references of its own
 * (tg_retain, or an op that returns its input as it is) and release them;
 * only a release that would leave fewer references than the tensor had
 * when lent is the lender's. Tape entries take and drop references of
 * their own (tape_holds counts them), so what is compared is
 * refcount - tape_holds.
 *
 * A floor of its own beside the scopes: the tensor's release below it
 * asks here. */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static TG_THREAD_LOCAL tg__lend *top; /* the innermost lending, or NULL */

/* t's references other than its tape entries'. */
static int64_t own_refs(const tg_tensor *t)
{
    return atomic_load_explicit(&t->refcount, memory_order_relaxed) -
           atomic_load_explicit(&t->tape_holds, memory_order_relaxed);
}

bool tg__lend_begin(tg__lend *l, const char *who, const char *noun, int n,
                    tg_tensor *const *t)
{
    *l = (tg__lend){
        .who = who, .noun = noun, .n = n, .t = t, .outer = top, .bad = -1};
    size_t k = n > 0 ? (size_t)n : 1;
    l->version = tg__malloc(sizeof *l->version * k);
    l->own = tg__malloc(sizeof *l->own * k);
    if (!l->version || !l->own) {
        free(l->version);
        free(l->own);
        tg__error("%s: out of memory", who);
        return false;
    }
    for (int i = 0; i < n; i++) {
        l->version[i] = t[i] ? t[i]->storage->version : 0;
        l->own[i] = t[i] ? own_refs(t[i]) : 0;
    }
    top = l;
    return true;
}

/* The first breach of l, noted with the call's site: what is "released"
 * or the in-place op that wrote. */
static void breach(tg__lend *l, int i, const char *what)
{
    if (l->bad >= 0)
        return;
    l->bad = i;
    l->what = what;
    tg__callsite(&l->file, &l->line);
}

/* The error of l's breach (l->bad >= 0): "released its input 0 at x.c:3"
 * or "wrote its saved tensor 0 in place (fill_) at x.c:3". */
static void breach_error(const tg__lend *l)
{
    char site[300] = "", lender[300] = "";
    if (l->file)
        snprintf(site, sizeof site, " at %s:%d", l->file, l->line);
    if (l->at_file)
        snprintf(lender, sizeof lender, " (at %s:%d)", l->at_file, l->at_line);
    bool released = strcmp(l->what, "released") == 0;
    tg__error("%s%s%s%s: the function %s its %s %d%s%s%s%s; it is lent to "
              "the function, to read: compute new tensors from it, and "
              "release only what the function made",
              l->who, lender, l->step ? ": " : "", l->step ? l->step : "",
              released ? "released" : "wrote", l->noun, l->bad,
              released ? "" : " in place (", released ? "" : l->what,
              released ? "" : ")", site);
}

bool tg__is_lent(const tg_tensor *t)
{
    for (tg__lend *l = top; l; l = l->outer)
        for (int i = 0; i < l->n; i++)
            if (l->t[i] == t)
                return true;
    return false;
}

bool tg__lend_refuses(const tg_tensor *t, bool write, const char *op)
{
    for (tg__lend *l = top; l; l = l->outer)
        for (int i = 0; i < l->n; i++) {
            const tg_tensor *x = l->t[i];
            if (!x || (write ? x->storage != t->storage
                             : x != t || own_refs(t) > l->own[i]))
                continue;
            breach(l, i, write ? op : "released");
            breach_error(l);
            return true;
        }
    return false;
}

bool tg__lend_end(tg__lend *l)
{
    top = l->outer;
    for (int i = 0; l->bad < 0 && i < l->n; i++)
        if (l->t[i] && l->t[i]->storage->version != l->version[i]) {
            l->bad = i;
            l->what = "its storage's version moved";
        }
    free(l->version);
    free(l->own);
    if (l->bad < 0)
        return true;
    breach_error(l);
    return false;
}
