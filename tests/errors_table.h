/* Bad input, one table row per mistake: every public function that takes
 * tensors, shapes, dims, paths, modules or optimizers fails with a return
 * value (NULL, -1, NaN, false), never an abort, and leaves one line in
 * tg_last_error() naming the function and, where they matter, the shapes.
 * A failing call leaves its inputs as they were and records nothing on the
 * tape; a failing init leaves its module zeroed. Value errors found inside
 * a composite call (a token id past the vocabulary, through gpt_forward)
 * are named by the op that reads the values (embedding), as a chain of
 * calls reports its first cause; errors raised inside a module carry the
 * function called first ("block_init: mha_init: ...").
 *
 * One table per floor of the library, each its own suite:
 *   check_errors_core.c  tensors: creation, inspection, autograd and scopes,
 *                        gradcheck, random numbers, .npy files, printing;
 *                        and the one abort, a second tg_release
 *   check_errors_ops.c   ops/: views, elementwise, comparisons, where,
 *                        matmul, reductions, softmax, attention, cat and
 *                        chunk, embedding and gather, layer_norm, losses
 *   check_errors_nn.c    modules, parameter lists, optimizers, checkpoints
 *                        and plots
 * Each also has a table of NULL tensors: the call fails quietly and keeps
 * the error already there, so a chain of calls reports its first cause.
 * This header and errors_table.c are the runner they share.
 * tests/errors_coverage.test checks that every public function is called in
 * one of the three files or listed here.
 *
 * Not in the table, deliberately (no argument that can be wrong, or no
 * failure value to return; the NULL-safe ones are run by quiet_on_null):
 *   tg_last_error tg_clear_error tg_scope_begin tg_live_tensors
 *   tg_tape_size tg_plot_available tg_is_grad_enabled tg_anomaly_mode
 *       take nothing.
 *   tg_set_grad_enabled tg_set_anomaly_mode tg_tape_record_norms
 *   tg_tape_keep_record
 *       take a bool; every value is valid (keep_record's one failure is
 *       out of memory for the tape, which tests/check_retain.c covers).
 *   tg_shape_str
 *       total: a NULL or released tensor writes "(null)", a NULL buf gives
 *       NULL (run by quiet_on_null).
 *   tg_profile_start tg_profile_mark
 *       void; start takes nothing (out of memory is reported by
 *       tg_profile_stop), every label is valid for mark (NULL: none).
 *   tg_dtype_name tg_dtype_size tg_dtype_of
 *       total accessors: an unknown dtype gives "unknown" and 0, a NULL
 *       tensor TG_FLOAT32.
 *   tg_release
 *       NULL-safe; releasing a dead tensor is an error, with no return
 *       value to carry it (release_twice_names_both_lines).
 *   tg_set_callsite tg_print_live_tensors tg_tape_print tg_tape_dot
 *       void; any file name is recorded as given, a NULL FILE does nothing.
 *   tg_params_init tg_params_free tg_params_zero_grad tg_optim_free
 *   tg_params_release
 *   tg_optim_zero_grad tg_head_free tg_linear_free tg_embed_free
 *   tg_layernorm_free tg_mha_free tg_mlp_free tg_block_free tg_gpt_free
 *       void and NULL-safe (a zeroed module frees to nothing).
 *   tg_dist_available tg_dist_init tg_dist_free tg_dist_rank tg_dist_size
 *   tg_dist_agree tg_dist_agree_why tg_dist_check_same tg_dist_abort
 *   tg_dist_check_params tg_dist_broadcast_params
 *   tg_dist_mean tg_dist_allreduce_grads tg_dist_shard tg_dist_shard_rows
 *   tg_ddp_new tg_ddp_free tg_ddp_backward tg_ddp_get_stats
 *   tg_dist_from_comm
 *       libtapegrad_dist's, which this program does not link: their bad
 *       input is tried on every rank by tests/dist_check.c (tests/dist.test).
 *   tg_params_get tg_params_numel tg_clip_grad_norm
 *       no failure value: NULL means "no such name", 0 is an empty list's
 *       size and norm.
 *   tg_gradcheck_defaults tg_sgd_config tg_adam_config tg_adamw_config
 *       build plain values; tg_gradcheck and tg_optim_new check them.
 *   tg_precision_report_free
 *       void and NULL-safe (an empty report frees to nothing).
 *   tg_custom_user tg_custom_needs_grad
 *       total accessors of a custom op's context, which only the op's own
 *       forward and backward hold: NULL for a NULL context, false for an
 *       input out of range.
 *   tg_linear_config_default tg_layernorm_config_default
 *   tg_head_config_default tg_mha_config_default tg_mlp_config_default
 *   tg_block_config_default tg_gpt_sampling_default
 *       build plain values; the _init_with functions and
 *       tg_gpt_generate_with check them.
 *
 * A table is a function of (w, e) whose body is its rows, one statement
 * each, in this form:
 *   ROW(label, call, fragments...)        the call returns a tensor: NULL
 *   ROW_RC(label, call, fragments...)     the call returns an int: < 0
 *   ROW_IF(label, failure, fragments...)  failure: true when the call failed
 *                                         (a NaN, a flag unchanged, ...)
 *   NULL_ROW(label, call), NULL_ROW_RC(label, call),
 *   NULL_ROW_IF(label, failure)           the same for the NULL tables
 * The runner walks the function once per row and runs only that row's call,
 * on inputs `e` made fresh for it; each fragment must be in the error. */
#ifndef TAPEGRAD_ERRORS_TABLE_H
#define TAPEGRAD_ERRORS_TABLE_H

#include "tests.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The inputs every row may use, made fresh for each row. */
typedef struct {
    tg_tensor *x;    /* (4,8,32) float64, requires grad */
    tg_tensor *m;    /* (16,32)  float64 */
    tg_tensor *x32;  /* (4,8,32) float32 */
    tg_tensor *mask; /* (4,8,32) bool */
    tg_tensor *v3;   /* (3,)     float64 */
    tg_tensor *s;    /* ()       float64 */
    tg_tensor *ids;  /* (4,8)    int64, values in [0, 16) */
    tg_rng rng;      /* seeded with 0 */
    tg_pcg64 pcg;    /* seeded with 0 */
} env;

void env_make(env *e);
void env_free(env *e);

/* tg_matmul(e->x, e->m)'s error: the known first cause that calls given a
 * NULL tensor must leave as it is. */
#define MATMUL_MSG                                                             \
    "matmul: shapes (4,8,32) and (16,32) are not aligned: 32 != 16"

/* Fails the current test unless tg_matmul(e->x, e->m) fails with MATMUL_MSG. */
void set_first_cause(env *e);

#define NUL ((tg_tensor *)NULL)

/* ---- rows ------------------------------------------------------------- */

#define MAX_FRAGMENTS 3

/* One walk through a table function: it counts the rows and runs the one
 * wanted, recording its label, fragments and outcome. */
typedef struct {
    int want; /* the row to run; -1 to only count them */
    int n;    /* rows passed so far */
    const char *label;
    const char *fragments[MAX_FRAGMENTS + 1]; /* NULL-terminated */
    bool failed; /* the call returned its failure value */
} table_walk;

typedef void table_fn(table_walk *w, env *e);

/* True for the row the walk wants (its label and fragments, up to NULL, are
 * recorded); counts every row. */
bool row_here(table_walk *w, const char *label, const char *const *fragments);

#define ROW_HERE(label, ...)                                                   \
    row_here(w, (label), (const char *const[]){__VA_ARGS__, NULL})

#define ROW_IF(label, failure, ...)                                            \
    do {                                                                       \
        if (ROW_HERE(label, __VA_ARGS__))                                      \
            w->failed = (failure);                                             \
    } while (0)
#define ROW(label, call, ...)    ROW_IF(label, failed(call), __VA_ARGS__)
#define ROW_RC(label, call, ...) ROW_IF(label, (call) < 0, __VA_ARGS__)

#define NULL_ROW_IF(label, failure)                                            \
    do {                                                                       \
        if (row_here(w, (label), NULL))                                        \
            w->failed = (failure);                                             \
    } while (0)
#define NULL_ROW(label, call)    NULL_ROW_IF(label, failed(call))
#define NULL_ROW_RC(label, call) NULL_ROW_IF(label, (call) < 0)

/* True when the call failed (t is NULL); a tensor returned anyway is
 * released. */
bool failed(tg_tensor *t);

/* Queues fn(arg) to run when the row's call has returned, before the
 * checks: the cleanup of what a row made for its call. The last queued
 * runs first. */
void after_row(void (*fn)(void *), void *arg);
/* t, released after the row: a tensor made for one call. */
tg_tensor *temp(tg_tensor *t);
/* An int64 tensor of this shape, every element `value`, released after the
 * row: ids, indices and targets. */
tg_tensor *int64_full(int ndim, const int64_t *shape, double value);

/* Notes the first problem a row found. Rows note problems and the runner
 * asserts once, after freeing the inputs: with CK_FORK=no a failed assert
 * mid-row would leak them into valgrind's report, hiding the library's own
 * leaks. */
__attribute__((format(printf, 1, 2))) void note(const char *fmt, ...);

/* ---- the runner --------------------------------------------------------- */

/* The number of rows in a table (no call is made). */
int table_rows(table_fn *table);

/* Row i of a table of mistakes: the call fails, the error contains every
 * fragment and is one line, and the inputs and the tape are as they were. */
void check_row(table_fn *table, int i);

/* Row i of a table of NULL tensors: with the first cause set, the call fails
 * and keeps that error; the inputs and the tape are as they were. */
void check_null_row(table_fn *table, int i);

/* quiet_on_null for one floor (`name`): `calls`, to functions with no
 * failure value given NULL or zeroed arguments, run with the first cause
 * set: no crash, and no change to the inputs, the tape or the error. They
 * note() a value that is wrong. */
void check_quiet(const char *name, void (*calls)(void));

#endif
