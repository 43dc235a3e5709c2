/* tiny_gpt_ranks.c: what every rank of a run under mpirun must hold the
 * same, compared before the first step (tg_dist_check_same).
 *
 * Each rank reads its own command line and its own copy of the text, and
 * nothing but this comparison would notice when they differ: another
 * --seed, --lr or --batch trains a different model on each rank and
 * averages their gradients all the same; another --steps or --eval-every
 * makes the ranks call different collectives, and the job waits for ever
 * in the last one. So every option that shapes the model, the optimizer
 * and its schedule, the batches, the steps, the evaluations and the
 * checkpoints is compared as text (reals as %.17g: every bit), and so are
 * the text's size and hash; the first difference ends the run on every
 * rank, naming the option and each rank's value. The point a --resume
 * starts from needs no comparison: rank 0 alone reads the checkpoint and
 * sends it to the others (tiny_gpt_checkpoint.c). Paths are not compared
 * (each machine has its own), only whether they were given. */
#include "tiny_gpt.h"

#include <stdarg.h>
#include <stdio.h>

/* Collective: the setting name, its value fmt, the same on every rank. */
__attribute__((format(printf, 2, 3))) static int same(const char *name,
                                                      const char *fmt, ...)
{
    char value[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    return tg_dist_check_same(world.d, name, value);
}

static const char *given(const char *path)
{
    return path ? "given" : "not given";
}

/* The model's and the sampler's options (every rank checks that the
 * sample fits the model, tiny_gpt_sample.c). */
static int model_agrees(const options *o)
{
    return same("--layers", "%d", o->layers) < 0 ||
                   same("--heads", "%d", o->heads) < 0 ||
                   same("--embd", "%d", o->embd) < 0 ||
                   same("--block", "%d", o->block) < 0 ||
                   same("--dropout", "%.17g", o->dropout) < 0 ||
                   same("--bias", "%d", o->bias) < 0 ||
                   same("--tie", "%d", o->tie) < 0 ||
                   same("--dtype", "%s", tg_dtype_name(o->dtype)) < 0 ||
                   same("--init-from", "%s", given(o->init_from)) < 0 ||
                   same("--n-head", "%d", o->n_head) < 0 ||
                   same("--sample", "%d", o->sample_len) < 0 ||
                   same("--temperature", "%.17g", o->temperature) < 0 ||
                   same("--top-k", "%d", o->top_k) < 0 ||
                   same("--top-p", "%.17g", o->top_p) < 0
               ? -1
               : 0;
}

/* The optimizer, its schedule (after check_options filled in what was
 * left to --steps), the batches, the steps and what happens along them. */
static int training_agrees(const options *o)
{
    return same("--steps", "%d", o->steps) < 0 ||
                   same("--stop-at", "%d", o->stop_at) < 0 ||
                   same("--batch", "%d", o->batch) < 0 ||
                   same("--seed", "%u", (unsigned)o->seed) < 0 ||
                   same("--lr", "%.17g", o->lr) < 0 ||
                   same("--decay-lr", "%d", o->decay_lr) < 0 ||
                   same("--warmup-iters", "%d", o->warmup_iters) < 0 ||
                   same("--lr-decay-iters", "%d", o->lr_decay_iters) < 0 ||
                   same("--min-lr", "%.17g", o->min_lr) < 0 ||
                   same("--weight-decay", "%.17g", o->weight_decay) < 0 ||
                   same("--beta2", "%.17g", o->beta2) < 0 ||
                   same("--grad-clip", "%.17g", o->grad_clip) < 0 ||
                   same("--eval-every", "%d", o->eval_every) < 0 ||
                   same("--eval-batches", "%d", o->eval_batches) < 0 ||
                   same("--eval-ids", "%s", given(o->eval_ids)) < 0 ||
                   same("--out-dir", "%s", given(o->out_dir)) < 0 ||
                   same("--resume", "%s", given(o->resume)) < 0 ||
                   same("--allreduce", "%d", o->overlap) < 0 ||
                   same("--bucket-kb", "%d", o->bucket_kb) < 0
               ? -1
               : 0;
}

int options_agree(const options *o)
{
    if (world.size == 1)
        return 0;
    return model_agrees(o) < 0 || training_agrees(o) < 0 ? -1 : 0;
}

/* The text as the model sees it: its bytes (each id's byte), hashed with
 * 64-bit FNV-1a (h = (h ^ byte) * 0x100000001b3 from 0xcbf29ce484222325),
 * and its length. */
int text_agrees(const corpus *cp)
{
    if (world.size == 1)
        return 0;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int64_t i = 0; i < cp->n; i++)
        h = (h ^ cp->byte_of[cp->ids[i]]) * UINT64_C(0x100000001b3);
    return same("the text", "%lld bytes, FNV-1a %016llx", (long long)cp->n,
                (unsigned long long)h);
}
