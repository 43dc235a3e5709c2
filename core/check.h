/* Private to the checkers: the element-wise gradient check
 * (core/gradcheck.c), one tape entry checked on its own
 * (core/entry_check.c), and what builds on them: tg_gradcheck with its
 * localisation (core/gradcheck_locate.c) and tg_precision_check
 * (core/precision.c). */
#ifndef TAPEGRAD_CHECK_H
#define TAPEGRAD_CHECK_H

#include "core/tape.h"

/* The check of f at inputs: leaves, the float ones that require grad
 * float64, all of them f's to read (lent). Element by element, or along
 * one random direction with o->fast_mode. 0 when it passes, 1 when not
 * (the worst element in report), -1 with an error (errors begin with
 * who). Leaves the inputs' gradients NULL. */
TG_HIDDEN int tg__gradcheck_run(const char *who, tg_fn f, void *ctx, int n,
                                tg_tensor *const *inputs,
                                const tg_gradcheck_opts *o,
                                tg_gradcheck_report *report);

/* Entry n, alive and unconsumed, checked on its own: its backward against
 * central differences of its own forward (n->op->replay) at the inputs it
 * recorded, in float64, with the tolerances of o (with o->fast_mode along
 * one direction first, element by element only when that fails). 0 when it
 * passes, 1 when not (res says where, with res->found), -1 with an
 * error. */
TG_HIDDEN int tg__entry_check(const tg_node *n, const tg_gradcheck_opts *o,
                              tg_gradcheck_entry *res);

/* A float64 copy of x (new, contiguous, out of any scope, no entry),
 * requiring grad as x does; NULL with an error. core/entry_check.c. */
TG_HIDDEN tg_tensor *tg__float64_copy(const tg_tensor *x);

/* "[2, 3]": the flat C-order index j of a tensor of shape (ndim, shape),
 * as numpy writes an index, into buf (size bytes). */
TG_HIDDEN void tg__index_str(int ndim, const int64_t *shape, int64_t j,
                             char *buf, size_t size);

/* The entries y depends on, oldest first (creation order, a topological
 * order), into *out (malloc'd, *count of them; NULL and 0 for a y with no
 * entry). false with an error when out of memory, or when an entry was
 * consumed by a backward. y's graph must stay alive while they are
 * used. */
TG_HIDDEN bool tg__graph_entries(tg_tensor *y, tg_node ***out, int64_t *count);

/* gradcheck's check_forward_ad (core/forward_check.c): tg_jvp with random
 * tangents against central differences of f and against the backward.
 * 0 when both agree, 1 when not (the error says where; rep's worst
 * element is the output's), -1 with an error. */
TG_HIDDEN int tg__forward_ad_check(tg_fn f, void *ctx, int n,
                                   tg_tensor *const *in,
                                   const tg_gradcheck_opts *o,
                                   tg_gradcheck_report *rep);

#endif /* TAPEGRAD_CHECK_H */
