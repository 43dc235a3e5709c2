/* tiny_gpt: a character-level GPT trained on one text file.
 *
 * The vocabulary is the distinct bytes of the text; each byte becomes a
 * token id. The first 90% of the text trains, the last 10% validates. A
 * training step takes B random windows of block_size + 1 bytes: the first
 * block_size are the input, the same window shifted by one the targets, so
 * every position learns to predict the byte after it from the bytes before
 * it (the causal mask hides the rest):
 *
 *     logits = gpt(ids)                                      (B,T,V)
 *     loss   = mean over (b,t) of -log softmax(logits[b,t])[targets[b,t]]
 *
 * Two baselines say what the loss numbers mean (in nats per character):
 *   log V     a model that knows nothing: every byte equally likely;
 *   unigram   one that knows only how often each byte occurs, not which
 *             follows which. Beating it means the model uses context.
 *
 * The loop is nanoGPT's train.py: AdamW with betas (0.9, --beta2) in two
 * parameter groups (weight decay on the tensors of 2 or more dims, none on
 * biases and layer-norm gains: tg_params_split_decay); the learning rate of
 * get_lr, a linear warmup then a cosine down to --min-lr
 * (tg_lr_warmup_cosine, set before every step); the gradient norm clipped
 * to --grad-clip; dropout in training mode, none in the estimates, which run
 * in evaluation mode; a checkpoint at every evaluation (--out-dir) holding
 * what --resume needs to go on bit for bit: the parameters, the optimizer's
 * moments and step counts, the iteration and the generator that draws the
 * batches and the dropout masks. At the end it plots train and validation
 * loss (the plot module, gnuplot) and samples with --top-k / --top-p.
 *
 * The model options are nanoGPT's too (--dropout, --bias / --no-bias,
 * --tie / --no-tie), but the defaults keep the model as it was: biases
 * everywhere but q/k/v, lm_head its own matrix, no dropout. Tying is worse
 * here, as our embeddings start N(0, 1) as torch.nn.Embedding's (nanoGPT
 * draws them with std 0.02): tied, the first logits are sums of 64 unit
 * squares and the loss starts near 40, ending at 2.17 (2.01 untied). And
 * dropout does not pay in 800 steps: 0.05 ends at 2.015.
 *
 * The default text (the GPL, 35 KB) is small for 111k parameters: the
 * validation loss flattens near 2.01 while the training loss keeps falling.
 * That gap is memorisation; more steps will not close it, more text will.
 * The defaults stop there, 20-40 seconds on two cores.
 *
 * --init-from FILE.safetensors --n-head H starts from a nanoGPT or Hugging
 * Face GPT-2 checkpoint instead (tg_gpt_load_pretrained: the sizes come
 * from the file, the number of heads from H). With --eval-ids IDS.npy, an
 * int64 (B, T+1) array of token windows, it only evaluates: the mean
 * cross-entropy of predicting ids[:, 1:] from ids[:, :-1], printed as the
 * last line, "loss: <%.17g>" (with --dtype f64, PyTorch's float64 loss of
 * the same model to rounding). Without, it trains (--steps 0: samples) on
 * the text, whose byte ids must fit the file's vocabulary.
 *
 * Under `mpirun -np N` (the same command line) it trains data-parallel
 * (tapegrad_dist.h): --batch is the global batch, N * b windows, and rank r
 * keeps windows [r b, (r + 1) b) of it (tg_dist_shard). Every rank draws
 * the whole global batch from the same generator, so the draws stay in
 * step, and builds the model from the same seed (then rank 0's values,
 * tg_dist_broadcast_params). Since the shards are equal, the global loss is
 * the mean of the ranks' means, and its gradient the mean of theirs:
 *
 *     L = (1/N) sum_r L_r,      dL/dw = (1/N) sum_r dL_r/dw
 *
 * which tg_ddp_backward computes while backward runs (--allreduce overlap,
 * the default: buckets of --bucket-kb) or tg_dist_allreduce_grads after it
 * (--allreduce blocking). Every rank then holds the same gradient, clips it
 * the same way and takes the same AdamW step, so N processes follow the
 * one-process run to rounding (the sums are taken in another order): the
 * "step N loss X" lines agree to about 1e-15 relative in float64. The
 * estimates shard their batches the same way. Only rank 0 prints, plots,
 * samples and writes checkpoints; --resume is read by rank 0 alone, which
 * sends the model, the optimizer's state and the run's state to the others,
 * so the checkpoint need not be on a disk the other machines see (the text
 * must be on each). With --dropout > 0 several ranks cannot draw the masks
 * one process draws (it draws them for the whole batch in C order from the
 * batch generator, MT19937, which cannot skip ahead over the other ranks'
 * rows): each rank then draws its masks from a generator of its own,
 * reseeded at every step from the batch generator and its rank, so the run
 * is reproducible and resumable but differs from one process by its masks.
 *
 * This file starts the run: the command line, the processes, the text, the
 * training, and the messages of a failure. tiny_gpt.h lists the others.
 */
#define _POSIX_C_SOURCE 200809L /* mkdir, in make_dir.h */

#include "tiny_gpt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "make_dir.h"
#include "options.h"

/* Set by report(): a failure already explained on stderr. main explains
 * any other from tg_last_error(). */
static bool reported;

/* The processes of the run (tiny_gpt.h): this one alone until join_world
 * finds a launcher. */
processes world = {.size = 1};

/* Marks rc, a collective's outcome, as known to every rank. */
static int together(int rc)
{
    if (rc < 0)
        world.agreed = true;
    return rc;
}

/* Collective with several ranks: 0 when every rank passed 0, else -1 on
 * every rank. One process: rc. */
int agree(int rc)
{
    return world.size > 1 ? together(tg_dist_agree(world.d, rc)) : rc;
}

/* Prints "tiny_gpt: <message>" on stderr, after what stdout holds, as one
 * line written at once: the ranks of mpirun share stderr, and a line
 * written in pieces gets another rank's pieces in between. */
__attribute__((format(printf, 1, 2))) void report(const char *fmt, ...)
{
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    opt_vcomplain("tiny_gpt", fmt, ap);
    va_end(ap);
    reported = true;
}

/* Creates the directory of path's last '/' (one level), if any. */
int make_parent_dir(const char *path)
{
    char dir[4096];
    if (example_make_parent(path, dir, sizeof dir) == 0)
        return 0;
    report("cannot create the directory %s: %s", dir, strerror(errno));
    return -1;
}

/* True when an MPI launcher (mpirun, mpiexec, srun) started this process:
 * Open MPI, MPICH / Slurm's PMI and PMIx say so in the environment. Started
 * by hand the program does not join MPI at all (a singleton MPI_Init costs
 * about a second and wants shared memory): it is the one-process program,
 * byte for byte. */
static bool under_launcher(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                 "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

/* Joins the run's processes (world) when a launcher started this one: the
 * ranks but 0 send their stdout to /dev/null (only rank 0 prints). 0, or 1
 * with a message (the library has no MPI, MPI failed). */
static int join_world(int *argc, char ***argv)
{
    if (!under_launcher())
        return 0;
    world.d = tg_dist_init(argc, argv);
    if (!world.d) {
        report("cannot join the processes of mpirun: %s", tg_last_error());
        return 1;
    }
    world.rank = tg_dist_rank(world.d);
    world.size = tg_dist_size(world.d);
    if (world.rank > 0 && !freopen("/dev/null", "w", stdout)) {
        report("rank %d: cannot send its output to /dev/null: %s", world.rank,
               strerror(errno));
        return 1;
    }
    return 0;
}

/* Ends the run with status rc (1 on an error: explained from tg_last_error
 * when report() has not); leaves MPI. A failure of this rank alone, which
 * no agreement told the others of, ends every rank (tg_dist_abort): they
 * would wait for it in their next collective for ever. */
static int finish(int rc)
{
    if (rc == 1 && !reported)
        report("%s",
               tg_last_error()[0] ? tg_last_error() : "failed (no message)");
    if (rc != 0 && world.size > 1 && !world.agreed)
        tg_dist_abort(world.d, rc);
    tg_dist_free(world.d);
    return rc;
}

/* With several ranks, every rank stops when one cannot read its command
 * line (its complaint, or --help, then goes to the others), and when the
 * ranks read different ones (options_agree). parsed is parse_args'
 * result; returns as it does: 0 to run, 1 after --help, 2 to fail. */
static int start_together(const options *o, int parsed)
{
    if (world.size == 1)
        return parsed;
    const char *why = parsed == 1 ? "stopped after --help" : options_said();
    if (together(tg_dist_agree_why(world.d, parsed ? -1 : 0, why)) < 0) {
        if (!parsed) /* the failing rank has said why itself */
            report("%s", tg_last_error());
        return parsed ? parsed : 2;
    }
    if (together(options_agree(o)) < 0) {
        report("%s", tg_last_error());
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (join_world(&argc, &argv) != 0)
        return finish(1);
    options o;
    int started = start_together(&o, parse_args(argc, argv, &o));
    if (started)
        return finish(started == 1 ? 0 : 2);
    /* --batch is the global batch: N equal shards (every rank says so, of
     * the same --batch: a failure they all know of) */
    if (world.size > 1 && (o.batch < world.size || o.batch % world.size)) {
        report("--batch %d does not split over the %d processes of mpirun: "
               "the global batch must be a multiple of their number (rank "
               "%d)",
               o.batch, world.size, world.rank);
        world.agreed = true;
        return finish(2);
    }
    world.hi = o.batch;
    if (world.size > 1 &&
        tg_dist_shard(world.d, o.batch, &world.lo, &world.hi) < 0)
        return finish(1);

    if (o.eval_ids)
        return finish(eval_checkpoint(&o) == 0 ? 0 : 1);
    corpus cp = {0};
    if (agree(load_corpus(&cp, o.text_path, o.block)) < 0) {
        free(cp.ids);
        reported = true; /* on the failing rank's stderr */
        return finish(1);
    }
    if (together(text_agrees(&cp)) < 0) {
        free(cp.ids);
        return finish(1);
    }
    printf("text: %s, %lld bytes, %d distinct; %lld train / %lld validation\n",
           o.text_path, (long long)cp.n, cp.vocab, (long long)cp.n_train,
           (long long)(cp.n - cp.n_train));
    int rc = train(&o, &cp);
    free(cp.ids);
    return finish(rc < 0 ? 1 : 0);
}
