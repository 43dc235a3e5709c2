/** @file
 * tapegrad dist: data-parallel training over MPI. Include
 * `<tapegrad_dist.h>`; it includes `<tapegrad_nn.h>` itself.
 *
 * Every rank holds the whole model and runs the same program on its own
 * shard of each global batch; after backward the gradients are summed over
 * the ranks and divided by the world size, so every rank takes the same
 * optimizer step, and N ranks on a global batch of N*b compute what one
 * process computes on that batch (to rounding: the sum's order differs).
 *
 *     tg_dist *d = tg_dist_init(&argc, &argv);       // or tg_dist_from_comm
 *     ... build the model with the same seed on every rank, list its params
 *     tg_dist_broadcast_params(d, &ps);              // rank 0's values
 *     tg_ddp *ddp = tg_ddp_new(d, &ps, 0);           // 25 MiB buckets
 *     for (step...) {
 *         tg_dist_shard(d, batch, &lo, &hi);          // this rank's rows
 *         tg_tensor *loss = ...forward on rows [lo, hi)...;   // NULL on error
 *         if (tg_ddp_backward(ddp, loss) < 0) ...    // -1 on every rank
 *         tg_optim_step(o); tg_optim_zero_grad(o);
 *     }
 *     tg_ddp_free(ddp); tg_dist_free(d);
 *
 * Collective calls (marked so) must be made by every rank, in the same
 * order; each returns the same status on every rank: when one rank fails
 * (bad input, out of memory, a forward that gave NULL), every rank returns
 * -1 with the error "rank R: <that rank's message>" (R the lowest failing
 * rank) instead of hanging. MPI_Abort is called only by tg_dist_abort,
 * when the program asks.
 *
 * A program keeps its own steps from hanging the same way: every rank
 * checks what it can alone (its options, its files), then all agree on the
 * outcome (tg_dist_agree, tg_dist_agree_why) before the next collective;
 * what must be the same on every rank (the options that shape the model,
 * the schedule and the number of steps, the data) is compared at start
 * (tg_dist_check_same); and a rank that fails where no agreement follows
 * ends the whole job (tg_dist_abort) rather than leave the others waiting
 * in a collective it will never reach.
 *
 * Built without MPI (configure without --with-mpi, or MPI not found), the
 * same calls work for one process (world size 1, no communication), and
 * tg_dist_init fails with a clear error when the launcher says there are
 * more ranks (the program was started by mpirun against a library without
 * MPI). With world size 1 no MPI call is made after init. Threads: call
 * these from one thread (MPI_THREAD_FUNNELED); the library's worker threads
 * never call MPI. */
#ifndef TAPEGRAD_DIST_H
#define TAPEGRAD_DIST_H

#include "tapegrad_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator and what the library keeps about it. */
typedef struct tg_dist tg_dist;

/** True when the library was built with MPI (configure --with-mpi). */
bool tg_dist_available(void);

/** Joins the job: MPI_Init_thread (FUNNELED) unless MPI is already
 * initialized, on MPI_COMM_WORLD (duplicated, so our messages never meet
 * the program's). argc/argv may be NULL. tg_dist_free finalizes MPI when
 * this call initialized it. NULL with tg_last_error on failure, including
 * a library without MPI started as one of several ranks. */
tg_dist *tg_dist_init(int *argc, char ***argv);

#if defined(MPI_VERSION)
/** Joins through an existing communicator (duplicated; MPI stays the
 * caller's to finalize). Declared when <mpi.h> is included before this
 * header. */
tg_dist *tg_dist_from_comm(MPI_Comm comm);
#endif

/** Frees d (NULL is a no-op); finalizes MPI if tg_dist_init initialized it. */
void tg_dist_free(tg_dist *d);

/** This rank (0..size-1) and the world size; 0 and 1 for a NULL d. */
int tg_dist_rank(const tg_dist *d);
int tg_dist_size(const tg_dist *d);

/** Collective: every rank passes its own status (0 ok, -1 failed, with its
 * tg_last_error); returns 0 on every rank when all passed 0, else -1 on
 * every rank with the error "rank R: <message>" of the lowest failing rank.
 * The building block of every check below, public so a program can agree
 * on its own steps (a failed forward, a missing file) before the next
 * collective. */
int tg_dist_agree(tg_dist *d, int status);

/** Collective: tg_dist_agree, with why (a program's own message, NULL for
 * tg_last_error) as this rank's message when status is -1: for the checks
 * a program makes itself (its command line, a file it reads), which set no
 * library error. Every rank then holds "rank R: <why of rank R>". */
int tg_dist_agree_why(tg_dist *d, int status, const char *why);

/** Collective: checks that every rank passes the same text value for the
 * setting what (an option's name, "the data"): 0 on every rank when all
 * are equal, else -1 on every rank with the error naming what and each
 * rank's value, "dist_check_same: the ranks disagree on --lr: '0.004' on
 * rank 0, '-1' on rank 1". -1 also for a NULL what or value, or a value
 * of 128 characters or more (compare a digest of a longer one). Call it
 * with the same settings in the same order on every rank, before the first
 * step: a setting that differs (--steps, the batch) would otherwise make
 * the ranks call different collectives and wait for ever. */
int tg_dist_check_same(tg_dist *d, const char *what, const char *value);

/** Ends every process of the job now (MPI_Abort with code on d's
 * communicator), after flushing stdout and stderr: for a rank that failed
 * where the others cannot learn it, outside any agreement (they would wait
 * for it in their next collective for ever). Say why on stderr first.
 * Does not return with several ranks; returns at once without MPI, for a
 * NULL d or with one process (there is no one else to stop: exit as
 * usual). */
void tg_dist_abort(tg_dist *d, int code);

/** Collective: checks that every rank lists the same parameters, in the
 * same order, with the same names, dtypes and shapes (a digest compared
 * across ranks, then the first mismatch named: "parameter 3 'w_q' is
 * float32 (8,4) on rank 0 but float32 (4,8) on rank 1"). 0 or -1. */
int tg_dist_check_params(tg_dist *d, const tg_params *ps);

/** Collective: tg_dist_check_params, then every parameter's values from
 * rank 0 to the others (in place, through the in-place guards: refused
 * while a tape entry holds one). Use it after building the model, and
 * after loading a checkpoint on rank 0 (pass tg_optim_state's list too, so
 * the optimizer's moments and steps follow). Rank 0 reads them all into
 * one buffer (as many bytes as the parameters), and no rank writes until
 * every rank has agreed that the read and the checks succeeded: after a
 * failure every rank's parameters are as they were. 0 or -1. */
int tg_dist_broadcast_params(tg_dist *d, const tg_params *ps);

/** Collective: sums the n doubles in v over the ranks and divides by the
 * world size, in place (the mean of a per-rank loss, a metric). 0 or -1. */
int tg_dist_mean(tg_dist *d, double *v, int n);

/** Collective, blocking, one call per step after tg_backward: checks (with
 * tg_dist_agree) that every rank has every gradient, shaped as its
 * parameter, then all-reduces them (MPI_Allreduce, sum, then divides by the
 * world size), float32 and float64. A parameter without a gradient on
 * every rank is left without one; on some ranks only, its gradient counts
 * as zero there (it gets a gradient of zeros before the sum). Every step
 * that can fail (those gradients of zeros, each gradient's write check,
 * reading them all into one buffer as large as the gradients) comes before
 * one agree, and the writes after it cannot fail: after a failure no
 * gradient is reduced (each is as backward left it, or zeros where it had
 * none). The teaching version of tg_ddp_backward, and its reference in the
 * tests. 0 or -1.
 *
 * Dividing by the world size gives the mean over the global batch only
 * when every rank holds as many rows (each rank's loss a mean over its
 * own). tg_dist_shard's shards are unequal when n % size != 0: then scale
 * each rank's loss by its rows * size / n first (examples/tiny_gpt refuses
 * such a batch instead). The same holds for tg_ddp_backward. */
int tg_dist_allreduce_grads(tg_dist *d, const tg_params *ps);

/** The half-open range [*begin, *end) of n items that is this rank's
 * contiguous shard: ranks below n % size take one more, so the shards are
 * in rank order and cover 0..n-1 once. -1 (on every rank, no
 * communication needed) when n < world size: some rank would get nothing. */
int tg_dist_shard(const tg_dist *d, int64_t n, int64_t *begin, int64_t *end);

/** How tg_dist_shard_rows splits dim 0. */
typedef enum tg_shard_kind {
    TG_SHARD_CONTIGUOUS, /**< rows [begin, end) of tg_dist_shard */
    TG_SHARD_STRIDED     /**< rows rank, rank + size, rank + 2 size, ... */
} tg_shard_kind;

/** This rank's rows of t (dim 0): a new reference, NULL with an error for a
 * 0-d t or fewer rows than ranks. TG_SHARD_CONTIGUOUS gives a view
 * (tg_narrow). TG_SHARD_STRIDED gives a view when t is contiguous and this
 * rank has n / size rows (rank >= n % size): the first (n / size) * size
 * rows seen as (n / size, size, ...), column rank; otherwise a copy (that
 * view and the last row joined by tg_cat), as no public view takes every
 * size-th row. Differentiable either way. */
tg_tensor *tg_dist_shard_rows(const tg_dist *d, tg_tensor *t,
                              tg_shard_kind kind);

/** Data parallelism with the all-reduce overlapped with backward, as
 * production trainers do: the parameters are grouped in buckets (in
 * reverse order, as backward produces their gradients; one dtype per
 * bucket; a parameter larger than a bucket has one of its own), and a
 * bucket's MPI_Iallreduce starts as soon as backward has produced the last
 * gradient in it (tg_register_post_accumulate_grad_hook), buckets starting
 * in the same order on every rank. */
typedef struct tg_ddp tg_ddp;

/** Collective: tg_dist_check_params, then the buckets; bucket_bytes 0 means
 * 25 MiB (PyTorch's default). Installs a post-accumulate-grad hook on each
 * parameter (replacing any other). NULL with an error on every rank. */
tg_ddp *tg_ddp_new(tg_dist *d, const tg_params *ps, size_t bucket_bytes);

/** Removes the hooks and frees p (NULL is a no-op). Call it while the
 * parameters are alive (before freeing the model). */
void tg_ddp_free(tg_ddp *p);

/** Collective: agrees that every rank has a loss (NULL on a rank whose
 * forward failed, with its error), runs tg_backward(loss) while the buckets
 * all-reduce, then waits for them and leaves every parameter's gradient
 * the mean over the ranks. Gradients the backward did not reach count as
 * zero. Same status on every rank; after a failure no gradient is
 * reduced, not one (they are as backward left them, or as before it if
 * backward failed before reaching them; zeros where some other rank had a
 * gradient and this one had none): every step that can fail is agreed on
 * before the first write. While backward runs, each hook also tests the
 * buckets started before (MPI_Test), which is what moves their data: Open
 * MPI advances a nonblocking collective only inside MPI calls. The mean is
 * exact for equal shards (see tg_dist_allreduce_grads). */
int tg_ddp_backward(tg_ddp *p, tg_tensor *loss);

/** What the all-reduce cost so far, for the benchmark. */
typedef struct tg_ddp_stats {
    int64_t steps;     /**< tg_ddp_backward calls that succeeded */
    int64_t buckets;   /**< buckets per step */
    int64_t bytes;     /**< gradient bytes all-reduced per step */
    double backward_s; /**< time in tg_backward, summed over steps */
    double wait_s;     /**< time waiting for all-reduces after it */
    int64_t early;     /**< buckets whose all-reduce had finished before
                            the wait after backward, summed over steps */
} tg_ddp_stats;

void tg_ddp_get_stats(const tg_ddp *p, tg_ddp_stats *s);

#ifdef __cplusplus
}
#endif

#define TAPEGRAD_DIST_H_DECLARED
#include "tapegrad_callsite.h"

#endif /* TAPEGRAD_DIST_H */
