/* tiny_gpt_options.c: tiny_gpt's command line: its defaults, the table of
 * its options (examples/options.h) with their lines of the usage, and the
 * checks that look at several options at once. */
#include "options.h"
#include "tiny_gpt.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static const options defaults = {
    .text_path = "/usr/share/common-licenses/GPL-3",
    .plot = "pictures/tiny_gpt_loss",
    .steps = 800,
    .batch = 32,
    .block = 32,
    .embd = 64,
    .heads = 4,
    .layers = 2,
    .eval_every = 100,
    .eval_batches = 8,
    .sample_len = 400,
    .lr = 4e-3,
    .temperature = 0.8,
    .seed = 1337,
    .dtype = TG_FLOAT32,
    .dropout = 0,
    .bias = TG_GPT_BIAS_LINEAR,
    .tie = false,
    .weight_decay = 0.1,
    .beta2 = 0.99,
    .grad_clip = 1.0,
    .decay_lr = true,
    .stop_at = -1,
    .warmup_iters = -1,
    .lr_decay_iters = -1,
    .min_lr = -1,
    .top_k = TG_TOP_K_ALL,
    .top_p = 1,
    .overlap = true,
    .bucket_kb = 0,
};

static void usage(FILE *f);

/* The largest whole number an option takes: with --batch and --block at
 * most this, a batch's 2 B T 8 bytes stay below 2^64 (get_batch). */
#define MAX_N 1e9

/* The options in the order of the usage, with their lines of it. */
#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {NULL, OPT_ARG, F(text_path), .help = NULL}, /* TEXT_FILE */
    {NULL, OPT_TEXT, 0, .help = "\nThe model:\n"},
    {"--layers", OPT_INT, F(layers), .lo = 1, .hi = MAX_N,
     .help = "  --layers N        transformer blocks (%d)\n"},
    {"--heads", OPT_INT, F(heads), .lo = 1, .hi = MAX_N,
     .help = "  --heads N         attention heads per layer (%d)\n"},
    {"--embd", OPT_INT, F(embd), .lo = 1, .hi = MAX_N,
     .help = "  --embd N          embedding size (%d)\n"},
    {"--block", OPT_INT, F(block), .lo = 1, .hi = MAX_N,
     .help = "  --block N         window length, the context (%d)\n"},
    {"--dropout", OPT_REAL, F(dropout), .lo = 0, .hi = 1, .hi_open = true,
     .help = "  --dropout P       on embeddings, attention weights and "
             "residual\n"
             "                    branches, in training, in [0, 1) (%g)\n"},
    {"--bias", OPT_SET, F(bias), .set = TG_GPT_BIAS_ALL,
     .help = "  --bias, --no-bias biases everywhere, q/k/v too (nanoGPT's\n"
             "                    bias=True), or nowhere (bias=False); the\n"
             "                    default: all but q/k/v\n"},
    {"--no-bias", OPT_SET, F(bias), .set = TG_GPT_BIAS_NONE, .help = NULL},
    {"--tie", OPT_TRUE, F(tie),
     .help = "  --tie, --no-tie   lm_head is the token table (nanoGPT's), or "
             "its\n"
             "                    own matrix (the default)\n"},
    {"--no-tie", OPT_FALSE, F(tie), .help = NULL},
    {"--dtype", OPT_CHOICE, F(dtype), .words = {"f32", "f64"},
     .values = {TG_FLOAT32, TG_FLOAT64},
     .help = "  --dtype f32|f64   the model's float type (f32)\n"},
    {"--gelu", OPT_CHOICE, F(gelu), .words = {"erf", "tanh"},
     .values = {TG_GELU_ERF, TG_GELU_TANH},
     .help = "  --gelu erf|tanh   the GELU form: exact (a new model's) or "
             "GPT-2's\n"
             "                    tanh; with --init-from it overrides what "
             "the\n"
             "                    file's naming implies\n"},
    {"--attn", OPT_CHOICE, F(attn), .words = {"composed", "fused", "tiled"},
     .values = {TG_HEAD_COMPOSED, TG_HEAD_FUSED_SOFTMAX, TG_HEAD_TILED},
     .help = "  --attn composed|fused|tiled\n"
             "                    how the heads compute attention, one model\n"
             "                    (within rounding): an op a step (the "
             "default),\n"
             "                    scale, mask and softmax fused, or tiled "
             "(never\n"
             "                    holding the (T,T) weights; no --dropout)\n"},

    {NULL, OPT_TEXT, 0, .help = "\nTraining (AdamW, betas (0.9, beta2)):\n"},
    {"--steps", OPT_INT, F(steps), .lo = 0, .hi = MAX_N,
     .help = "  --steps N         optimisation steps, nanoGPT's max_iters "
             "(%d)\n"},
    {"--stop-at", OPT_INT, F(stop_at), .lo = 0, .hi = MAX_N,
     .help = "  --stop-at N       end this run after step N (a checkpoint\n"
             "                    there with --out-dir), the schedule still\n"
             "                    --steps long: --resume goes on from it\n"},
    {"--batch", OPT_INT, F(batch), .lo = 1, .hi = MAX_N,
     .help = "  --batch N         windows per step (%d)\n"},
    {"--lr", OPT_REAL, F(lr), .lo = 0, .lo_open = true, .hi = INFINITY,
     .help = "  --lr X            the peak learning rate (%g)\n"},
    {"--decay-lr", OPT_TRUE, F(decay_lr),
     .help = "  --decay-lr, --no-decay-lr\n"
             "                    nanoGPT's get_lr: linear warmup, cosine "
             "decay\n"
             "                    (the default), or the rate --lr "
             "throughout\n"},
    {"--no-decay-lr", OPT_FALSE, F(decay_lr), .help = NULL},
    {"--warmup-iters", OPT_INT, F(warmup_iters), .lo = 0, .hi = MAX_N,
     .help = "  --warmup-iters N  warmup steps (--steps / 20)\n"},
    {"--lr-decay-iters", OPT_INT, F(lr_decay_iters), .lo = 1, .hi = MAX_N,
     .help = "  --lr-decay-iters N  where the cosine reaches --min-lr "
             "(--steps)\n"},
    {"--min-lr", OPT_REAL, F(min_lr), .lo = 0, .hi = INFINITY,
     .help = "  --min-lr X        the floor (--lr / 10)\n"},
    {"--weight-decay", OPT_REAL, F(weight_decay), .lo = 0, .hi = INFINITY,
     .help = "  --weight-decay X  on tensors of 2 or more dims only (%g)\n"},
    {"--beta2", OPT_REAL, F(beta2), .lo = 0, .hi = 1, .hi_open = true,
     .help = "  --beta2 X         AdamW's beta2 (%g)\n"},
    {"--grad-clip", OPT_REAL, F(grad_clip), .lo = 0, .hi = INFINITY,
     .help = "  --grad-clip X     the gradient norm's bound, 0 for none "
             "(%g)\n"},
    {"--eval-every", OPT_INT, F(eval_every), .lo = 1, .hi = MAX_N,
     .help = "  --eval-every N    steps between loss reports and checkpoints "
             "(%d)\n"},
    {"--eval-batches", OPT_INT, F(eval_batches), .lo = 1, .hi = MAX_N,
     .help = "  --eval-batches N  batches averaged per estimate (%d)\n"},
    {"--print-losses", OPT_TRUE, F(print_losses),
     .help = "  --print-losses    print \"step N loss X\" for every step: "
             "the\n"
             "                    batch's mean loss before the update "
             "(%%.17g)\n"},
    {"--seed", OPT_U32, F(seed), .lo = 0, .hi = MAX_N,
     .help = "  --seed N          seeds the model, the batches, dropout and "
             "the\n"
             "                    sample (%u)\n"},

    {NULL, OPT_TEXT, 0, .help = "\nCheckpoints and output:\n"},
    {"--out-dir", OPT_STRING, F(out_dir),
     .help = "  --out-dir DIR     write DIR/ckpt.npz at every evaluation: "
             "model,\n"
             "                    optimizer, iteration, random state\n"},
    {"--resume", OPT_STRING, F(resume),
     .help = "  --resume PATH     continue from such a checkpoint, exactly as "
             "if\n"
             "                    never stopped (its model; give the same\n"
             "                    training options, --steps the total)\n"},
    {"--save", OPT_STRING, F(save_path),
     .help = "  --save PATH       save the trained parameters as .npz\n"},
    {"--plot", OPT_STRING, F(plot),
     .help = "  --plot STEM       the loss curves into STEM.png, .dat, .gp\n"
             "                    (%s), and beside them the last block's\n"
             "                    attention, tiny_gpt_attn_headN.png\n"},
    {"--no-plot", OPT_CLEAR, F(plot),
     .help = "  --no-plot         no curves\n"},
    {"--html", OPT_STRING, F(html), .nonempty = true,
     .help = "  --html FILE       a page of the loss curves and of what one\n"
             "                    head attends to on the validation text\n"},

    {NULL, OPT_TEXT, 0, .help = "\nSampling at the end:\n"},
    {"--sample", OPT_INT, F(sample_len), .lo = 0, .hi = MAX_N,
     .help = "  --sample N        bytes to generate (%d)\n"},
    {"--temperature", OPT_REAL, F(temperature), .lo = 0, .lo_open = true,
     .hi = INFINITY, .help = "  --temperature X   sampling temperature (%g)\n"},
    {"--top-k", OPT_INT, F(top_k), .lo = 1, .hi = MAX_N,
     .help = "  --top-k K         keep the K most likely bytes (all)\n"},
    {"--top-p", OPT_REAL, F(top_p), .lo = 0, .lo_open = true, .hi = 1,
     .help = "  --top-p P         keep the nucleus of probability P, (0, 1] "
             "(1)\n"},

    {NULL, OPT_TEXT, 0,
     .help = "\nSeveral processes (mpirun -np N tiny_gpt ...; --batch is then "
             "the\n"
             "global batch, a multiple of N, split over the processes):\n"},
    {"--allreduce", OPT_CHOICE, F(overlap), .words = {"overlap", "blocking"},
     .values = {true, false},
     .help = "  --allreduce overlap|blocking\n"
             "                    average the gradients while backward "
             "runs,\n"
             "                    in buckets (the default), or after it\n"},
    {"--bucket-kb", OPT_INT, F(bucket_kb), .lo = 1, .hi = MAX_N,
     .help = "  --bucket-kb N     the buckets' size in KiB (25 MiB)\n"},

    {NULL, OPT_TEXT, 0, .help = "\nPretrained models:\n"},
    {"--init-from", OPT_STRING, F(init_from),
     .help = "  --init-from FILE  start from a nanoGPT / GPT-2 .safetensors\n"
             "                    checkpoint (sizes from the file)\n"},
    {"--n-head", OPT_INT, F(n_head), .lo = 1, .hi = MAX_N,
     .help = "  --n-head H        its number of heads (needed with "
             "--init-from)\n"},
    {"--eval-ids", OPT_STRING, F(eval_ids),
     .help = "  --eval-ids IDS    with --init-from: print the mean loss over\n"
             "                    the int64 (B, T+1) windows of IDS.npy as\n"
             "                    the last line, \"loss: X\", and stop\n"},
    {NULL, OPT_TEXT, 0, .help = "  --help            this text\n"},
};
#undef F

#define N_OPTIONS (sizeof option_table / sizeof option_table[0])

static const opt_parser parser = {
    .prog = "tiny_gpt",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a value (see --help)",
    .unknown = "unknown option '%s' (see --help)",
    .invalid = NULL, /* what the option wants, and what it got */
    .value_first = true,
    .whole_digits = true,
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tiny_gpt [options] [TEXT_FILE]\n"
        "\n"
        "Trains a character-level GPT on TEXT_FILE as nanoGPT's train.py\n"
        "trains, printing train and validation loss against two baselines,\n"
        "plotting them, then a sample of generated text. TEXT_FILE, a\n"
        "regular file of at most %d MiB, defaults to\n"
        "  %s\n",
        MAX_TEXT_MIB, defaults.text_path);
    opt_help(&parser, &defaults, f);
}

/* What no single option can check: --init-from's companions, the heads
 * against the embedding, nanoGPT's schedule (its defaults scaled to
 * --steps). 0, or 2 after saying what is wrong. */
static int check_options(options *o)
{
    if (o->init_from && !o->n_head) {
        opt_complain("tiny_gpt", "--init-from needs --n-head (the file's "
                                 "shapes do not give the number of heads)");
        return 2;
    }
    if (o->eval_ids && !o->init_from) {
        opt_complain("tiny_gpt", "--eval-ids needs --init-from");
        return 2;
    }
    if (o->init_from && (o->resume || o->model_given)) {
        opt_complain("tiny_gpt",
                     "--init-from takes the model from the file: "
                     "no --resume, --dropout, --bias, --tie with it");
        return 2;
    }
    if (o->attn == TG_HEAD_TILED && o->dropout > 0) {
        opt_complain("tiny_gpt", "--attn tiled never forms the attention "
                                 "weights, so it cannot drop them: no "
                                 "--dropout with it");
        return 2;
    }
    if (!o->init_from && !o->resume && o->embd % o->heads) {
        opt_complain("tiny_gpt", "--embd %d is not a multiple of --heads %d",
                     o->embd, o->heads);
        return 2;
    }
    /* nanoGPT's schedule, its defaults scaled to --steps */
    if (o->lr_decay_iters < 0)
        o->lr_decay_iters = o->steps > 0 ? o->steps : 1;
    if (o->warmup_iters < 0)
        o->warmup_iters = o->steps / 20;
    if (o->min_lr < 0)
        o->min_lr = o->lr / 10;
    if (o->decay_lr && o->warmup_iters >= o->lr_decay_iters) {
        opt_complain("tiny_gpt",
                     "--warmup-iters %d must be below --lr-decay-iters "
                     "%d",
                     o->warmup_iters, o->lr_decay_iters);
        return 2;
    }
    return 0;
}

/* The last complaint about the command line, for the other ranks. */
const char *options_said(void) { return opt_said; }

/* e's member in o as text, every bit of it: reals as %.17g, a choice as
 * its word, a flag as the int or bool it sets, a path only as given or not
 * (each machine has its own; the text itself is compared by its hash). */
static const char *value_text(const opt *e, const options *o, char *buf,
                              size_t cap)
{
    const void *m = (const char *)o + e->field;
    int i = *(const int *)m;
    if (e->kind == OPT_INT || e->kind == OPT_SET)
        snprintf(buf, cap, "%d", i);
    else if (e->kind == OPT_CHOICE) {
        int k = 0;
        while (k < 3 && e->words[k] && e->values[k] != i)
            k++;
        snprintf(buf, cap, "%s", k < 3 && e->words[k] ? e->words[k] : "auto");
    } else if (e->kind == OPT_U32)
        snprintf(buf, cap, "%u", (unsigned)*(const uint32_t *)m);
    else if (e->kind == OPT_REAL)
        snprintf(buf, cap, "%.17g", *(const double *)m);
    else if (e->kind == OPT_TRUE || e->kind == OPT_FALSE)
        snprintf(buf, cap, "%d", *(const bool *)m);
    else
        snprintf(buf, cap, "%s",
                 *(const char *const *)m ? "given" : "not given");
    return buf;
}

/* Under mpirun each rank reads its own command line, and nothing but this
 * comparison would notice when they differ: another --seed, --lr or
 * --batch trains a different model on each rank and averages their
 * gradients all the same; another --steps or --eval-every makes the ranks
 * call different collectives, and the job waits for ever in the last one.
 * So every option of the table is compared (tg_dist_check_same), as it
 * stands after check_options filled in what was left to --steps, once per
 * member (--bias and --no-bias set one); the first difference ends the run
 * on every rank, naming the option and each rank's value. The point a
 * --resume starts from needs no comparison: rank 0 alone reads the
 * checkpoint and sends it to the others (tiny_gpt_checkpoint.c). */
int options_agree(const options *o)
{
    for (size_t i = 0; world.size > 1 && i < N_OPTIONS; i++) {
        const opt *e = &option_table[i];
        bool again = false;
        for (size_t j = 0; j < i; j++)
            again |= option_table[j].name && option_table[j].field == e->field;
        char buf[64];
        if (e->name && e->kind != OPT_TEXT && !again &&
            tg_dist_check_same(world.d, e->name,
                               value_text(e, o, buf, sizeof buf)) < 0)
            return -1;
    }
    return 0;
}

/* Fills *o from argv. Returns 0 to run, 1 after --help, 2 on a bad option. */
int parse_args(int argc, char **argv, options *o)
{
    bool seen[N_OPTIONS] = {false};
    *o = defaults;
    int rc = opt_parse(&parser, argc, argv, o, seen);
    if (rc)
        return rc;
    o->block_given = opt_given(&parser, seen, "--block");
    o->model_given = opt_given(&parser, seen, "--dropout") ||
                     opt_given(&parser, seen, "--bias") ||
                     opt_given(&parser, seen, "--no-bias") ||
                     opt_given(&parser, seen, "--tie") ||
                     opt_given(&parser, seen, "--no-tie");
    return check_options(o);
}
