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
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fdopen */

#include <tapegrad.h>
#include <tapegrad_dist.h>
#include <tapegrad_nn.h>
#include <tapegrad_plot.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "make_dir.h"

/* The largest text read: each byte becomes an 8-byte token id, so 256 MiB
 * of text is 2 GiB of ids, more than a character model this size needs. */
#define MAX_TEXT_MIB 256

typedef struct options {
    const char *text_path, *save_path;
    const char *init_from, *eval_ids; /* --init-from, --eval-ids */
    const char *out_dir, *resume;     /* --out-dir, --resume */
    const char *plot;                 /* --plot stem, NULL for --no-plot */
    int n_head;                       /* --n-head, for --init-from */
    bool block_given;                 /* --block on the command line */
    bool model_given;                 /* --dropout, --bias, --tie... given */
    tg_dtype dtype;                   /* --dtype (float32) */
    int steps, batch, block, embd, heads, layers;
    int eval_every, eval_batches, sample_len;
    double lr, temperature;
    long seed;
    /* nanoGPT's model and training knobs */
    double dropout;      /* embedding, attention and residual dropout */
    tg_gpt_bias bias;    /* --bias: ALL, --no-bias: NONE */
    bool tie;            /* --tie: lm_head is the token table */
    double weight_decay; /* on the tensors of 2 or more dims only */
    double beta2;        /* AdamW's */
    double grad_clip;    /* the gradient norm's bound; 0: no clipping */
    bool decay_lr;       /* warmup + cosine, else a constant lr */
    int stop_at;         /* --stop-at: end this run there; -1: --steps */
    int warmup_iters;    /* -1: steps / 20 */
    int lr_decay_iters;  /* -1: steps */
    double min_lr;       /* -1: lr / 10 */
    bool print_losses;   /* "step N loss X" for every step */
    int top_k;           /* TG_TOP_K_ALL, or 1..vocab */
    double top_p;        /* (0, 1] */
    /* under mpirun: how the gradients are averaged over the ranks */
    bool overlap;  /* --allreduce overlap (tg_ddp) or blocking */
    int bucket_kb; /* --bucket-kb: tg_ddp's buckets; 0: its default */
} options;

/* The text as token ids, and the table back to bytes. */
typedef struct corpus {
    int64_t *ids;
    int64_t n, n_train; /* ids[0, n_train) train, ids[n_train, n) validate */
    int vocab;
    unsigned char byte_of[256]; /* id -> byte */
} corpus;

/* Set by report(): a failure already explained on stderr. main explains
 * any other from tg_last_error(). */
static bool reported;

/* The processes of the run: one (d NULL, the program as it always was)
 * unless an MPI launcher started several. The collective calls below are
 * made only when size > 1, so the one-process run is unchanged. */
static struct {
    tg_dist *d;
    int rank, size;
    int64_t lo, hi; /* this rank's windows [lo, hi) of each batch */
    tg_ddp *ddp;    /* --allreduce overlap */
    /* with dropout on several ranks: this rank's mask generator (see the
     * top of the file) */
    bool own_masks;
    tg_rng masks;
} world = {.size = 1};

/* Collective with several ranks: 0 when every rank passed 0, else -1 on
 * every rank. One process: rc. */
static int agree(int rc)
{
    return world.size > 1 ? tg_dist_agree(world.d, rc) : rc;
}

/* Prints "tiny_gpt: <message>" on stderr, after what stdout holds. */
__attribute__((format(printf, 1, 2))) static void report(const char *fmt, ...)
{
    fflush(stdout);
    fputs("tiny_gpt: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    reported = true;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the data --------------------------------------------------------- */

/* The whole of a regular file of at most MAX_TEXT_MIB, malloc'd, its
 * length in *n; or NULL with a message on stderr. Not a device or a pipe:
 * /dev/zero never ends and a FIFO's open waits for a writer (the open does
 * not block, and fstat refuses them). */
static unsigned char *read_text(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        report("%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0)
        report("%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        report("%s is not a regular file (a device, a pipe or a directory): "
               "give a text file",
               path);
    else if (st.st_size > (off_t)MAX_TEXT_MIB << 20)
        report("%s is %lld bytes, larger than the limit of %d MiB for a text",
               path, (long long)st.st_size, MAX_TEXT_MIB);
    else if (!(f = fdopen(fd, "rb")))
        report("%s: %s", path, strerror(errno));
    if (!f) {
        close(fd);
        return NULL;
    }
    /* one byte more than the size, to see a file that grew meanwhile */
    size_t size = (size_t)st.st_size;
    unsigned char *text = malloc(size + 1);
    *n = text ? fread(text, 1, size + 1, f) : 0;
    bool read_error = ferror(f);
    fclose(f);
    if (!text || read_error || *n != size) {
        report("cannot read %s: %s", path,
               !text        ? "out of memory"
               : read_error ? "read error"
                            : "it changed while being read");
        free(text);
        return NULL;
    }
    return text;
}

/* Reads the whole file and turns it into ids: the distinct bytes, sorted,
 * numbered 0..V-1. Returns 0, or -1 with a message on stderr. */
static int load_corpus(corpus *cp, const char *path, int block)
{
    size_t n;
    unsigned char *text = read_text(path, &n);
    if (!text)
        return -1;

    int id_of[256];
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++)
        seen[text[i]] = true;
    cp->vocab = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c]) {
            id_of[c] = cp->vocab;
            cp->byte_of[cp->vocab++] = (unsigned char)c;
        }
    cp->n = (int64_t)n;
    cp->n_train = (int64_t)(0.9 * (double)n);
    cp->ids = malloc((n ? n : 1) * sizeof *cp->ids);
    if (cp->ids)
        for (size_t i = 0; i < n; i++)
            cp->ids[i] = id_of[text[i]];
    free(text);
    if (!cp->ids) {
        report("%s: out of memory for %zu token ids", path, n);
        return -1;
    }
    /* both splits must hold at least one window of block + 1 bytes */
    if (cp->n - cp->n_train <= block) {
        report("%s has %lld bytes; its last 10%% must be longer than the "
               "block (%d)",
               path, (long long)n, block);
        return -1;
    }
    return 0;
}

/* B random windows from ids[0, n): x = ids[s, s+T), y = ids[s+1, s+T+1],
 * both (B,T) int64, of which this rank keeps rows [world.lo, world.hi)
 * (all of them in one process). Every rank draws all B starts, so the
 * generator stays in step on every rank. Returns 0 with two new
 * references, or -1 (a message on stderr when the batch itself does not
 * fit in memory). */
static int get_batch(const int64_t *ids, int64_t n, int B, int T, tg_rng *rng,
                     tg_tensor **x, tg_tensor **y)
{
    int64_t lo = world.lo, hi = world.hi, nb = hi - lo;
    /* B, T <= 10^9 (the options' limit): 2 B T 8 < 2^64, no overflow */
    size_t bytes = 2 * (size_t)nb * (size_t)T * sizeof(int64_t);
    int64_t *buf = malloc(bytes);
    if (!buf) {
        report("cannot allocate a batch of %d windows of %d tokens (%.3g GB "
               "of token ids): lower --batch or --block",
               B, T, (double)bytes / 1e9);
        return -1;
    }
    for (int b = 0; b < B; b++) {
        /* a start in [0, n - T - 1], uniformly */
        int64_t s = (int64_t)(tg_rng_uniform(rng) * (double)(n - T));
        if (b < lo || b >= hi)
            continue;
        size_t row = (size_t)(b - lo);
        memcpy(buf + row * T, ids + s, (size_t)T * sizeof *buf);
        memcpy(buf + ((size_t)nb + row) * T, ids + s + 1,
               (size_t)T * sizeof *buf);
    }
    *x = tg_from_data(TG_INT64, TG_SHAPE(nb, T), buf);
    *y = tg_from_data(TG_INT64, TG_SHAPE(nb, T), buf + (size_t)nb * T);
    free(buf);
    return *x && *y ? 0 : -1;
}

/* The unigram baseline: predict every byte by its frequency in the training
 * split, p(c) = (count(c) + 1) / (n_train + V) (add-one, so a byte seen only
 * in validation costs a finite amount), and score that on validation:
 *     H = -(1/n_val) sum_i log p(c_i)         nats per character */
static double unigram_baseline(const corpus *cp)
{
    double count[256] = {0};
    for (int64_t i = 0; i < cp->n_train; i++)
        count[cp->ids[i]] += 1;
    double h = 0;
    for (int64_t i = cp->n_train; i < cp->n; i++)
        h -= log((count[cp->ids[i]] + 1) / (double)(cp->n_train + cp->vocab));
    return h / (double)(cp->n - cp->n_train);
}

/* ---- training --------------------------------------------------------- */

/* The mean loss over n_batches random batches of ids[0, n), with grad off
 * and the model in evaluation mode (no dropout: nanoGPT's model.eval() in
 * estimate_loss), into *mean (NaN or inf when the model has diverged). The
 * batches come from a generator seeded the same way at every call, so
 * successive estimates differ only because the model changed, and the
 * training generator is not touched (a resumed run draws what the
 * uninterrupted one draws). Training mode is restored, with model_rng (the
 * generator of the dropout masks). With several ranks each evaluates its
 * shard of every batch, and the estimate is the mean of theirs (equal
 * shards: the batches' mean). Collective then. 0, or -1 on error. */
static int estimate_loss(tg_gpt *g, const int64_t *ids, int64_t n,
                         const options *o, tg_rng *model_rng, double *mean)
{
    tg_rng rng;
    tg_rng_seed(&rng, (uint32_t)o->seed + 1);
    tg_gpt_train(g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    double total = 0;
    int rc = 0;
    for (int i = 0; i < o->eval_batches && rc == 0; i++) {
        tg_scope_begin();
        tg_tensor *x, *y, *loss = NULL;
        if (get_batch(ids, n, o->batch, o->block, &rng, &x, &y) == 0)
            loss = tg_gpt_loss(g, x, y);
        if (loss)
            total += tg_item(loss);
        else
            rc = -1;
        tg_scope_end();
    }
    tg_set_grad_enabled(was);
    if (tg_gpt_train(g, true, model_rng) < 0)
        rc = -1;
    *mean = total / o->eval_batches;
    if (world.size > 1 && (agree(rc) < 0 || tg_dist_mean(world.d, mean, 1) < 0))
        rc = -1;
    return rc;
}

/* nanoGPT's get_lr(it): a linear warmup to lr over warmup_iters, a cosine
 * down to min_lr at lr_decay_iters, min_lr after (tg_lr_warmup_cosine);
 * or lr throughout without --decay-lr. */
static double lr_at(int it, const options *o)
{
    if (!o->decay_lr)
        return o->lr;
    return tg_lr_warmup_cosine(it, o->lr, o->min_lr, o->warmup_iters,
                               o->lr_decay_iters);
}

/* tg_backward(loss) in one process. With several ranks (collective): the
 * backward, and every gradient replaced by its mean over the ranks, while
 * backward runs (tg_ddp_backward) or after it (tg_dist_allreduce_grads);
 * a NULL loss (this rank's forward failed) fails every rank. 0 or -1. */
static int backward_all(const tg_params *ps, tg_tensor *loss)
{
    if (world.size == 1)
        return loss ? tg_backward(loss) : -1;
    if (world.ddp)
        return tg_ddp_backward(world.ddp, loss);
    if (agree(loss ? 0 : -1) < 0 || agree(tg_backward(loss)) < 0)
        return -1;
    return tg_dist_allreduce_grads(world.d, ps);
}

/* One optimisation step, number step: the schedule's lr, a batch drawn
 * from rng (dropout masks from it too, the model holds it; with several
 * ranks, from this rank's generator, reseeded from rng), the gradient
 * (averaged over the ranks) norm clipped to --grad-clip, the update. Its
 * batch loss (before the update; the ranks' mean) into *loss_value, and on
 * stdout as "step N loss X" with --print-losses. 0, or -1 on error. */
static int train_step(tg_gpt *g, const tg_params *ps, tg_optim *opt,
                      const corpus *cp, const options *o, int step, tg_rng *rng,
                      double *loss_value)
{
    if (tg_optim_set_lr(opt, lr_at(step, o)) < 0)
        return -1;
    if (world.own_masks) {
        /* one draw on every rank keeps rng in step; the rank makes the
         * masks of the ranks differ */
        uint32_t s = (uint32_t)(tg_rng_uniform(rng) * 4294967296.0);
        tg_rng_seed(&world.masks, s ^ (0x9e3779b9u * (uint32_t)world.rank));
    }
    int rc = -1;
    tg_scope_begin();
    tg_tensor *x, *y, *loss = NULL;
    if (get_batch(cp->ids, cp->n_train, o->batch, o->block, rng, &x, &y) == 0)
        loss = tg_gpt_loss(g, x, y);
    if (backward_all(ps, loss) == 0) {
        /* one unlucky batch must not throw the weights far: rescale the
         * whole gradient to norm <= grad_clip before the update (the same
         * gradient on every rank, after the all-reduce) */
        if (o->grad_clip > 0)
            tg_clip_grad_norm(ps, o->grad_clip);
        double v = tg_item(loss);
        if (agree(tg_optim_step(opt)) == 0 &&
            (world.size == 1 || tg_dist_mean(world.d, &v, 1) == 0)) {
            *loss_value = v;
            if (o->print_losses)
                printf("step %d loss %.17g\n", step, *loss_value);
            rc = 0;
        }
    }
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return rc;
}

/* False, with the reason on stderr, once a loss is NaN or infinite: the
 * updates overshot (the learning rate is too large) and every later step
 * would be NaN too. */
static bool loss_is_finite(double loss, int step, const options *o)
{
    if (isfinite(loss))
        return true;
    report("the loss became %s at step %d: training diverged; lower --lr "
           "(now %g)",
           isnan(loss) ? "NaN" : "infinite", step, o->lr);
    return false;
}

/* Prints n_new bytes sampled from the model in evaluation mode (--top-k,
 * --top-p, --temperature; one uniform from rng per byte), starting from a
 * newline (or id 0 when the text has none). Returns 0 or -1. */
static int print_sample(tg_gpt *g, const corpus *cp, const options *o,
                        tg_rng *rng)
{
    int64_t start = 0;
    for (int i = 0; i < cp->vocab; i++)
        if (cp->byte_of[i] == '\n')
            start = i;
    tg_gpt_train(g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_gpt_sampling s = {o->temperature, o->top_k, o->top_p};
    tg_tensor *prompt = tg_from_data(TG_INT64, TG_SHAPE(1, 1), &start);
    tg_tensor *ids = tg_gpt_generate_with(g, prompt, o->sample_len, &s, rng);
    int64_t n = ids ? tg_numel(ids) : 0;
    int64_t *out = ids ? malloc((size_t)n * sizeof *out) : NULL;
    int rc = -1;
    if (out && tg_copy_out(ids, TG_INT64, out) == 0) {
        for (int64_t i = 1; i < n;
             i++) /* a loaded model's vocab may be larger */
            putchar(out[i] < cp->vocab ? cp->byte_of[out[i]] : '?');
        putchar('\n');
        rc = 0;
    }
    free(out);
    tg_scope_end();
    tg_set_grad_enabled(was);
    return rc;
}

/* The model of --init-from, checked against the text's vocabulary and
 * --block (whose default becomes the file's block size). 0, or -1 with g
 * zeroed. */
static int load_model(tg_gpt *g, options *o, const corpus *cp)
{
    if (tg_gpt_load_pretrained(g, o->init_from, o->n_head, o->dtype) < 0)
        return -1;
    const tg_gpt_config *c = &g->cfg;
    if (cp->vocab > c->vocab_size)
        report("%s has a vocabulary of %d tokens, the text %d distinct "
               "bytes",
               o->init_from, c->vocab_size, cp->vocab);
    else if (o->block_given && o->block > c->block_size)
        report("--block %d is larger than the block size of %s (%d)", o->block,
               o->init_from, c->block_size);
    else if (cp->n - cp->n_train <= (o->block_given ? o->block : c->block_size))
        report("the last 10%% of the text must be longer than the block (%d)",
               o->block_given ? o->block : c->block_size);
    else {
        if (!o->block_given)
            o->block = c->block_size;
        o->embd = c->n_embd;
        o->heads = c->n_head;
        o->layers = c->n_layer;
        printf("model: from %s\n", o->init_from);
        return 0;
    }
    tg_gpt_free(g);
    return -1;
}

/* Creates the directory of path's last '/' (one level), if any. */
static int make_parent_dir(const char *path)
{
    char dir[4096];
    if (example_make_parent(path, dir, sizeof dir) == 0)
        return 0;
    report("cannot create the directory %s: %s", dir, strerror(errno));
    return -1;
}

/* The estimates made at each evaluation. */
typedef struct curves {
    double *step, *train, *val;
    int n, cap;
} curves;

static int curves_add(curves *c, double step, double train, double val)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        double *s = realloc(c->step, (size_t)cap * sizeof *s);
        if (s)
            c->step = s;
        double *t = s ? realloc(c->train, (size_t)cap * sizeof *t) : NULL;
        if (t)
            c->train = t;
        double *v = t ? realloc(c->val, (size_t)cap * sizeof *v) : NULL;
        if (!v) {
            report("out of memory for the loss curves");
            return -1;
        }
        c->val = v;
        c->cap = cap;
    }
    c->step[c->n] = step;
    c->train[c->n] = train;
    c->val[c->n++] = val;
    return 0;
}

/* ---- checkpoints (--out-dir, --resume) -------------------------------- */

/* A checkpoint is one .npz (tg_save_checkpoint): the parameters under their
 * names, the AdamW state under "optim.", and three entries of ours:
 *
 *   run.config  int64 (11)  vocab, block, embd, heads, layers, bias, tie,
 *                          dtype, gelu_tanh: the model to rebuild; whether
 *                          it came from --init-from (then its vocabulary
 *                          may be larger than the text's); the window
 *                          length (--block, the model's or shorter)
 *   run.state   int64 (3 + 624)  the next iteration, then the training
 *                          generator (MT19937: mti, has_gauss, mt[624]),
 *                          which draws the batches and the dropout masks
 *   run.real    float64 (3)  the generator's cached normal; the dropout
 *                          and the layer norms' eps (the model too)
 *
 *   run.curves  float64 (3, n)  the evaluations so far: steps, train and
 *                          validation losses, so that the plot of a
 *                          resumed run shows the whole run
 *
 * (The dropout goes in float64, not as its bits in int64: int64 entries
 * pass through a double on their way in and out, exact only to 2^53.)
 *
 * With those, a resumed run draws the same batches and masks, steps at the
 * same rates from the same moments, and prints the same losses, bit for
 * bit, as the run that never stopped. */
#define N_CONFIG 11
#define N_STATE  (3 + 624)

typedef struct run_state {
    tg_tensor *config, *state, *real;
} run_state;

static void run_state_free(run_state *r)
{
    tg_release(r->config);
    tg_release(r->state);
    tg_release(r->real);
    *r = (run_state){0};
}

/* Zeroed entries of the right shapes. 0 or -1. */
static int run_state_init(run_state *r)
{
    r->config = tg_zeros(TG_INT64, TG_SHAPE(N_CONFIG));
    r->state = tg_zeros(TG_INT64, TG_SHAPE(N_STATE));
    r->real = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    if (r->config && r->state && r->real)
        return 0;
    run_state_free(r);
    return -1;
}

static void config_to_ints(const tg_gpt_config *c, const options *o,
                           int64_t v[N_CONFIG])
{
    int64_t w[N_CONFIG] = {c->vocab_size,  c->block_size, c->n_embd,
                           c->n_head,      c->n_layer,    c->bias,
                           c->tie_weights, c->dtype,      c->gelu_tanh,
                           !!o->init_from, o->block};
    memcpy(v, w, sizeof w);
}

/* The model's list, the run's entries after it. 0 or -1. */
static int checkpoint_list(tg_params *ck, const tg_params *ps,
                           const run_state *r)
{
    tg_params_init(ck);
    for (int i = 0; i < ps->n; i++)
        if (tg_params_add(ck, NULL, ps->items[i].name, ps->items[i].t) < 0)
            return -1;
    return tg_params_add(ck, NULL, "run.config", r->config) < 0 ||
                   tg_params_add(ck, NULL, "run.state", r->state) < 0 ||
                   tg_params_add(ck, NULL, "run.real", r->real) < 0
               ? -1
               : 0;
}

/* Appends cv as run.curves (3, n) to ck, a new tensor owned by the open
 * scope. 0 or -1. */
static int curves_entry(tg_params *ck, const curves *cv)
{
    size_t n = (size_t)cv->n;
    double *buf = malloc(3 * n * sizeof *buf);
    if (!buf) {
        report("out of memory for the loss curves");
        return -1;
    }
    memcpy(buf, cv->step, n * sizeof *buf);
    memcpy(buf + n, cv->train, n * sizeof *buf);
    memcpy(buf + 2 * n, cv->val, n * sizeof *buf);
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(3, cv->n), buf);
    free(buf);
    return tg_params_add(ck, NULL, "run.curves", t);
}

/* Writes DIR/ckpt.npz for iteration it (the next to run), atomically. */
static int save_checkpoint(const options *o, const tg_gpt *g,
                           const tg_params *ps, tg_optim *opt,
                           const tg_rng *rng, int it, run_state *r,
                           const curves *cv)
{
    int64_t config[N_CONFIG], state[N_STATE];
    double real[3] = {rng->gauss, g->cfg.resid_dropout, g->cfg.ln_eps};
    config_to_ints(&g->cfg, o, config);
    state[0] = it;
    state[1] = rng->mti;
    state[2] = rng->has_gauss;
    for (int i = 0; i < 624; i++)
        state[3 + i] = rng->mt[i];
    char path[4096];
    snprintf(path, sizeof path, "%s/ckpt.npz", o->out_dir);
    tg_params ck;
    tg_params_init(&ck);
    tg_scope_begin(); /* run.curves */
    int rc = make_parent_dir(path) < 0 ||
                     tg_copy_in(r->config, TG_INT64, config) < 0 ||
                     tg_copy_in(r->state, TG_INT64, state) < 0 ||
                     tg_copy_in(r->real, TG_FLOAT64, real) < 0 ||
                     checkpoint_list(&ck, ps, r) < 0 ||
                     curves_entry(&ck, cv) < 0 ||
                     tg_save_checkpoint(&ck, opt, path) < 0
                 ? -1
                 : 0;
    tg_scope_end();
    tg_params_free(&ck);
    return rc;
}

/* The model of a checkpoint's run.config (its first nine entries: vocab,
 * block, embd, heads, layers, bias, tying, dtype, tanh GELU), with the
 * layer norm's eps and the dropout (all three places) beside it. */
static tg_gpt_config config_of(const int64_t v[9], double ln_eps,
                               double dropout)
{
    return (tg_gpt_config){.vocab_size = (int)v[0],
                           .block_size = (int)v[1],
                           .n_embd = (int)v[2],
                           .n_head = (int)v[3],
                           .n_layer = (int)v[4],
                           .gelu = true,
                           .bias = (tg_gpt_bias)v[5],
                           .tie_weights = v[6] != 0,
                           .dtype = (tg_dtype)v[7],
                           .gelu_tanh = v[8] != 0,
                           .ln_eps = ln_eps,
                           .embd_dropout = dropout,
                           .attn_dropout = dropout,
                           .resid_dropout = dropout};
}

/* The model config saved in --resume's checkpoint into *cfg (its vocab
 * must be the text's). 0, or -1 with a message. */
static int resume_config(options *o, const corpus *cp, tg_gpt_config *cfg,
                         curves *cv)
{
    tg_params all;
    tg_params_init(&all);
    if (tg_read_npz(o->resume, &all) < 0)
        return -1;
    tg_tensor *t = tg_params_get(&all, "run.config");
    tg_tensor *r = tg_params_get(&all, "run.real");
    int64_t v[N_CONFIG];
    double real[3];
    int rc = -1;
    if (!t || tg_dtype_of(t) != TG_INT64 || tg_numel(t) != N_CONFIG ||
        tg_copy_out(t, TG_INT64, v) < 0 || !r || tg_dtype_of(r) != TG_FLOAT64 ||
        tg_numel(r) != 3 || tg_copy_out(r, TG_FLOAT64, real) < 0)
        report("%s is not a checkpoint of tiny_gpt (no run.config of %d "
               "int64, run.real of 3 float64): give a DIR/ckpt.npz written "
               "with --out-dir",
               o->resume, N_CONFIG);
    else if (v[10] < 1 || v[10] > v[1])
        report("%s holds a window of %lld tokens for a block of %lld",
               o->resume, (long long)v[10], (long long)v[1]);
    else if (v[9] ? v[0] < cp->vocab : v[0] != cp->vocab)
        report("%s was trained on a %s of %lld distinct bytes, %s has %d",
               o->resume, v[9] ? "vocabulary" : "text", (long long)v[0],
               o->text_path, cp->vocab);
    else {
        double p = real[1];
        o->block = (int)v[10]; /* the windows, <= the model's block size */
        /* the curves so far, when the checkpoint has them */
        tg_tensor *c = tg_params_get(&all, "run.curves");
        int64_t n = c && tg_ndim(c) == 2 && tg_size(c, 0) == 3 &&
                            tg_dtype_of(c) == TG_FLOAT64
                        ? tg_size(c, 1)
                        : 0;
        double *buf = n ? malloc(3 * (size_t)n * sizeof *buf) : NULL;
        if (buf && tg_copy_out(c, TG_FLOAT64, buf) == 0)
            for (int64_t i = 0; i < n; i++)
                if (curves_add(cv, buf[i], buf[n + i], buf[2 * n + i]) < 0)
                    break;
        free(buf);
        *cfg = config_of(v, real[2], p);
        rc = 0;
    }
    tg_params_release(&all);
    return rc;
}

/* Loads --resume into the model, the optimizer and rng; the iteration to
 * go on from into *start. 0, or -1. */
static int resume_from(const options *o, const tg_params *ps, tg_optim *opt,
                       tg_rng *rng, int *start, run_state *r, const curves *cv)
{
    tg_params ck;
    int64_t state[N_STATE];
    double real[3];
    /* run.curves, which resume_config has read, goes in the list too, as
     * tg_load_checkpoint refuses an entry that nothing in it takes */
    tg_scope_begin();
    int rc = checkpoint_list(&ck, ps, r) < 0 ||
                     (cv->n > 0 && curves_entry(&ck, cv) < 0) ||
                     tg_load_checkpoint(&ck, opt, o->resume) < 0 ||
                     tg_copy_out(r->state, TG_INT64, state) < 0 ||
                     tg_copy_out(r->real, TG_FLOAT64, real) < 0
                 ? -1
                 : 0;
    tg_scope_end();
    tg_params_free(&ck);
    if (rc < 0)
        return -1;
    if (state[0] < 0 || state[0] > o->steps || state[1] < 0 || state[1] > 624) {
        report("%s holds iteration %lld, beyond --steps %d (or a broken "
               "generator state)",
               o->resume, (long long)state[0], o->steps);
        return -1;
    }
    *start = (int)state[0];
    rng->mti = (int)state[1];
    rng->has_gauss = (int)state[2];
    rng->gauss = real[0];
    for (int i = 0; i < 624; i++)
        rng->mt[i] = (uint32_t)state[3 + i];
    return 0;
}

/* ---- resuming on several ranks ----------------------------------------- */

/* Collective: n doubles from rank 0 to every rank, in place (a float64
 * tensor named name, through tg_dist_broadcast_params). 0 or -1. */
static int broadcast_doubles(double *v, int n, const char *name)
{
    tg_params l;
    tg_params_init(&l);
    tg_scope_begin();
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(n), v);
    int rc = agree(t && tg_params_add(&l, NULL, name, t) == 0 ? 0 : -1);
    if (rc == 0)
        rc = tg_dist_broadcast_params(world.d, &l);
    if (rc == 0)
        rc = tg_copy_out(t, TG_FLOAT64, v);
    tg_scope_end();
    tg_params_free(&l);
    return rc;
}

/* resume_config on rank 0 alone (the checkpoint need only be on its disk),
 * the model's config and window then sent to the others: every rank builds
 * the same model. 0, or -1 on every rank. */
static int resume_config_all(options *o, const corpus *cp, tg_gpt_config *cfg,
                             curves *cv)
{
    if (world.size == 1)
        return resume_config(o, cp, cfg, cv);
    int rc = agree(world.rank == 0 ? resume_config(o, cp, cfg, cv) : 0);
    double v[12] = {cfg->vocab_size,  cfg->block_size,    cfg->n_embd,
                    cfg->n_head,      cfg->n_layer,       cfg->bias,
                    cfg->tie_weights, cfg->dtype,         cfg->gelu_tanh,
                    cfg->ln_eps,      cfg->resid_dropout, o->block};
    if (rc < 0 || broadcast_doubles(v, 12, "run.config") < 0)
        return -1;
    int64_t iv[9];
    for (int i = 0; i < 9; i++)
        iv[i] = (int64_t)v[i];
    *cfg = config_of(iv, v[9], v[10]);
    o->block = (int)v[11];
    return 0;
}

/* resume_from on rank 0 alone, then its parameters, the optimizer's state
 * (tg_optim_state: moments, step counts, rates) and the run's (the next
 * iteration, the generator) from rank 0 to the others. 0, or -1 on every
 * rank. */
static int resume_from_all(const options *o, const tg_params *ps, tg_optim *opt,
                           tg_rng *rng, int *start, run_state *r,
                           const curves *cv)
{
    if (world.size == 1)
        return resume_from(o, ps, opt, rng, start, r, cv);
    if (agree(world.rank == 0 ? resume_from(o, ps, opt, rng, start, r, cv)
                              : 0) < 0)
        return -1;
    tg_params all;
    tg_params_init(&all);
    int rc = 0;
    for (int i = 0; i < ps->n && rc == 0; i++)
        rc = tg_params_add(&all, NULL, ps->items[i].name, ps->items[i].t);
    if (rc == 0)
        rc = tg_optim_state(opt, &all, "optim");
    rc = agree(rc);
    if (rc == 0)
        rc = tg_dist_broadcast_params(world.d, &all);
    tg_params_free(&all);
    /* the iteration, then the generator: mti, has_gauss, gauss, mt[624]
     * (words < 2^32 and a double: exact in float64) */
    double v[4 + 624] = {*start, rng->mti, rng->has_gauss, rng->gauss};
    for (int i = 0; i < 624; i++)
        v[4 + i] = rng->mt[i];
    if (rc < 0 || broadcast_doubles(v, 4 + 624, "run.state") < 0)
        return -1;
    *start = (int)v[0];
    rng->mti = (int)v[1];
    rng->has_gauss = (int)v[2];
    rng->gauss = v[3];
    for (int i = 0; i < 624; i++)
        rng->mt[i] = (uint32_t)v[4 + i];
    return 0;
}

/* ---- the loss curves --------------------------------------------------- */

/* Train and val loss against the steps, the unigram baseline flat, into
 * <stem>.png (and .dat, .gp) through the plot module. 0 or -1. */
static int plot_curves(const options *o, const curves *c, double unigram)
{
    if (!o->plot || c->n == 0)
        return 0;
    if (make_parent_dir(o->plot) < 0)
        return -1;
    double ux[2] = {c->step[0], c->step[c->n - 1]}, uy[2] = {unigram, unigram};
    tg_series s[3] = {{"train", c->step, c->train, c->n},
                      {"validation", c->step, c->val, c->n},
                      {"unigram baseline (validation)", ux, uy, 2}};
    if (tg_plot_lines(o->plot, s, 3, "tiny_gpt: loss per character", "step",
                      "cross-entropy (nats/char)", false, false) < 0)
        return -1;
    if (tg_plot_available())
        printf("loss curves: %s.png\n", o->plot);
    else
        printf("no gnuplot: the loss curves' data and script are %s.dat and "
               "%s.gp\n",
               o->plot, o->plot);
    return 0;
}

/* ---- the run ------------------------------------------------------------ */

static int train(options *o, const corpus *cp)
{
    tg_rng rng;
    tg_rng_seed(&rng, (uint32_t)o->seed);
    tg_gpt g = {0};
    tg_gpt_config cfg = {.vocab_size = cp->vocab,
                         .block_size = o->block,
                         .n_embd = o->embd,
                         .n_head = o->heads,
                         .n_layer = o->layers,
                         .gelu = true,
                         .dtype = o->dtype,
                         .bias = o->bias,
                         .tie_weights = o->tie,
                         .embd_dropout = o->dropout,
                         .attn_dropout = o->dropout,
                         .resid_dropout = o->dropout};
    tg_params ps, decay, no_decay;
    tg_params_init(&ps);
    tg_params_init(&decay);
    tg_params_init(&no_decay);
    tg_optim *opt = NULL;
    run_state rs = {0};
    curves cv = {0};
    int rc = -1, start = 0;
    if (o->resume) {
        /* the model is the checkpoint's, whatever the model options say */
        if (resume_config_all(o, cp, &cfg, &cv) < 0)
            goto done;
        o->embd = cfg.n_embd;
        o->heads = cfg.n_head;
        o->layers = cfg.n_layer;
        o->dropout = cfg.resid_dropout;
        if (cp->n - cp->n_train <= o->block) {
            report("the last 10%% of the text must be longer than the block "
                   "(%d)",
                   o->block);
            goto done;
        }
    }
    if (agree(o->init_from ? load_model(&g, o, cp)
                           : tg_gpt_init(&g, cfg, &rng)) < 0)
        goto done;
    /* the dropout masks: from rng in one process, from a generator of
     * this rank's with several (see the top of the file) */
    world.own_masks = world.size > 1 && o->dropout > 0;
    tg_rng_seed(&world.masks, (uint32_t)o->seed);
    tg_rng *model_rng = world.own_masks ? &world.masks : &rng;
    /* nanoGPT's AdamW: betas (0.9, beta2), weight decay on the matmul
     * weights and embeddings (dim >= 2), none on biases and gains */
    tg_optim_config ocfg = tg_adamw_config(o->lr, 0);
    ocfg.beta2 = o->beta2;
    int made = tg_gpt_params(&g, &ps, NULL) < 0 ||
                       tg_params_split_decay(&ps, &decay, &no_decay) < 0 ||
                       !(opt = tg_optim_new_groups(
                             (tg_param_group[]){{&decay, o->weight_decay, 1},
                                                {&no_decay, 0, 1}},
                             2, ocfg)) ||
                       tg_gpt_train(&g, true, model_rng) < 0 ||
                       ((o->out_dir || o->resume) && run_state_init(&rs) < 0)
                   ? -1
                   : 0;
    /* several ranks: every one starts from rank 0's model (and state) */
    if (agree(made) < 0 ||
        (o->resume
             ? resume_from_all(o, &ps, opt, &rng, &start, &rs, &cv) < 0
             : world.size > 1 && tg_dist_broadcast_params(world.d, &ps) < 0))
        goto done;
    if (world.size > 1 && o->overlap &&
        !(world.ddp = tg_ddp_new(world.d, &ps, (size_t)o->bucket_kb * 1024)))
        goto done;

    /* the resumed run evaluates its first step again */
    while (cv.n > 0 && cv.step[cv.n - 1] >= start)
        cv.n--;
    /* refused now rather than after the training */
    if (o->top_k != TG_TOP_K_ALL && o->top_k > g.cfg.vocab_size) {
        report("--top-k %d is larger than the vocabulary (%d)", o->top_k,
               g.cfg.vocab_size);
        goto done;
    }
    const int64_t *val = cp->ids + cp->n_train;
    int64_t n_val = cp->n - cp->n_train;
    double unigram = unigram_baseline(cp);
    printf("model: %d layers, %d heads, n_embd %d, block %d, vocab %d, "
           "%s, bias %s, %s, dropout %g: %lld parameters\n",
           o->layers, o->heads, o->embd, o->block, g.cfg.vocab_size,
           tg_dtype_name(g.cfg.dtype),
           g.cfg.bias == TG_GPT_BIAS_ALL    ? "everywhere"
           : g.cfg.bias == TG_GPT_BIAS_NONE ? "nowhere"
                                            : "but q/k/v",
           g.cfg.tie_weights ? "tied" : "untied", g.cfg.embd_dropout,
           (long long)tg_params_numel(&ps));
    if (o->decay_lr)
        printf("training: %d steps of batch %d, AdamW lr %g (warmup %d, "
               "cosine to %g at %d), betas (0.9, %g), weight decay %g on "
               "%lld weights, clip %g\n",
               o->steps, o->batch, o->lr, o->warmup_iters, o->min_lr,
               o->lr_decay_iters, o->beta2, o->weight_decay,
               (long long)tg_params_numel(&decay), o->grad_clip);
    else
        printf("training: %d steps of batch %d, AdamW lr %g (constant), "
               "betas (0.9, %g), weight decay %g on %lld weights, clip %g\n",
               o->steps, o->batch, o->lr, o->beta2, o->weight_decay,
               (long long)tg_params_numel(&decay), o->grad_clip);
    if (world.size > 1)
        printf("data parallel: %d processes, %lld windows each, gradients "
               "averaged %s\n",
               world.size, (long long)(world.hi - world.lo),
               world.ddp ? "while backward runs (tg_ddp)"
                         : "after backward (blocking)");
    if (o->resume)
        printf("resumed from %s at step %d (the model is the checkpoint's; "
               "the training options are this command's)\n",
               o->resume, start);
    printf("\nbaselines (nats/char): uniform log V = %.4f, unigram on "
           "validation = %.4f\n\n",
           log(cp->vocab), unigram);
    printf("%6s  %10s  %10s  %9s  %8s\n", "step", "train", "val", "ms/step",
           "elapsed");

    double t0 = now_seconds(), t_last = t0, val_loss = NAN, t_train = 0;
    int last_step = start;
    /* --stop-at ends this run early (a checkpoint there, with --out-dir);
     * the schedule still runs to --steps, so --resume goes on exactly */
    int end = o->stop_at >= 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    for (int step = start; step <= end; step++) {
        if (step % o->eval_every == 0 || step == end) {
            double t = now_seconds();
            t_train += t - t_last;
            double train_loss;
            if (estimate_loss(&g, cp->ids, cp->n_train, o, model_rng,
                              &train_loss) < 0 ||
                estimate_loss(&g, val, n_val, o, model_rng, &val_loss) < 0 ||
                !loss_is_finite(train_loss, step, o) ||
                !loss_is_finite(val_loss, step, o) ||
                agree(curves_add(&cv, step, train_loss, val_loss)) < 0)
                goto done;
            double ms =
                step > last_step ? 1e3 * (t - t_last) / (step - last_step) : 0;
            printf("%6d  %10.4f  %10.4f  %9.1f  %7.1fs\n", step, train_loss,
                   val_loss, ms, t - t0);
            if (o->out_dir) {
                /* rank 0's, which every rank's model and state equal */
                if (agree(world.rank == 0
                              ? save_checkpoint(o, &g, &ps, opt, &rng, step,
                                                &rs, &cv)
                              : 0) < 0)
                    goto done;
                printf("%6s  saved %s/ckpt.npz\n", "", o->out_dir);
            }
            fflush(stdout);
            last_step = step;
            t_last = now_seconds(); /* the step time leaves evaluation out */
        }
        double loss;
        if (step < end &&
            (train_step(&g, &ps, opt, cp, o, step, &rng, &loss) < 0 ||
             !loss_is_finite(loss, step, o)))
            goto done;
    }

    printf("\nfinal validation loss %.4f vs unigram %.4f (%+.4f nats/char) "
           "and uniform %.4f\n",
           val_loss, unigram, val_loss - unigram, log(cp->vocab));
    if (end > start && t_train > 0)
        printf("training: %.0f tokens/s (%d steps of %d x %d tokens in "
               "%.1f s, evaluation left out)\n",
               (double)(end - start) * o->batch * o->block / t_train,
               end - start, o->batch, o->block, t_train);
    /* the rest is rank 0's: no collective call after the loop */
    if (world.rank > 0) {
        rc = 0;
        goto done;
    }
    if (plot_curves(o, &cv, unigram) < 0)
        goto done;
    const char *rule = "------------------------------------------------";
    char k[32] = "all";
    if (o->top_k != TG_TOP_K_ALL)
        snprintf(k, sizeof k, "%d", o->top_k);
    printf("\nsample (temperature %g, top-k %s, top-p %g):\n%s\n",
           o->temperature, k, o->top_p, rule);
    if (print_sample(&g, cp, o, &rng) < 0)
        goto done;
    printf("%s\n", rule);
    if (o->save_path) {
        if (tg_save_npz(&ps, o->save_path) < 0)
            goto done;
        printf("saved the parameters to %s\n", o->save_path);
    }
    rc = 0;
done:
    tg_ddp_free(world.ddp);
    world.ddp = NULL;
    free(cv.step);
    free(cv.train);
    free(cv.val);
    run_state_free(&rs);
    tg_optim_free(opt);
    tg_params_free(&decay);
    tg_params_free(&no_decay);
    tg_params_free(&ps);
    tg_gpt_free(&g);
    return rc;
}

/* ---- evaluating a checkpoint (--eval-ids) ------------------------------ */

/* Windows evaluated per forward: bounds the (B,T,V) logits' memory. */
#define EVAL_WINDOWS 16

/* The mean cross-entropy of windows [b0, b0 + nb) of ids (B, T+1): inputs
 * ids[:, :-1], targets ids[:, 1:], into *mean. 0 or -1. */
static int window_loss(tg_gpt *g, tg_tensor *ids, int64_t b0, int64_t nb,
                       double *mean)
{
    int64_t T = tg_size(ids, 1) - 1;
    tg_scope_begin();
    tg_tensor *rows = tg_narrow(ids, 0, b0, nb);
    tg_tensor *x = tg_contiguous(tg_narrow(rows, 1, 0, T));
    tg_tensor *y = tg_contiguous(tg_narrow(rows, 1, 1, T));
    tg_tensor *loss = tg_gpt_loss(g, x, y);
    if (loss)
        *mean = tg_item(loss);
    tg_scope_end();
    return loss ? 0 : -1;
}

/* --init-from with --eval-ids: the mean cross-entropy over every position
 * of every window, the last line of the output. 0 or -1. */
static int eval_checkpoint(const options *o)
{
    tg_gpt g;
    if (tg_gpt_load_pretrained(&g, o->init_from, o->n_head, o->dtype) < 0)
        return -1;
    tg_gpt_train(&g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    tg_tensor *ids = tg_load_npy(o->eval_ids);
    int rc = -1;
    if (ids && (tg_dtype_of(ids) != TG_INT64 || tg_ndim(ids) != 2 ||
                tg_size(ids, 0) < 1 || tg_size(ids, 1) < 2))
        report("%s must hold int64 windows (B, T+1) with B >= 1 and T >= 1, "
               "not %s of %d dims",
               o->eval_ids, tg_dtype_name(tg_dtype_of(ids)), tg_ndim(ids));
    else if (ids) {
        const tg_gpt_config *c = &g.cfg;
        int64_t B = tg_size(ids, 0), T = tg_size(ids, 1) - 1;
        printf("model: %s: %d layers, %d heads, n_embd %d, block %d, vocab "
               "%d, %s\n",
               o->init_from, c->n_layer, c->n_head, c->n_embd, c->block_size,
               c->vocab_size, tg_dtype_name(c->dtype));
        printf("windows: %s, %lld of %lld tokens\n", o->eval_ids, (long long)B,
               (long long)T);
        /* the mean over all B T positions: each chunk's mean weighted by
         * its share of the windows */
        double total = 0, mean = 0;
        rc = 0;
        for (int64_t b0 = 0; b0 < B && rc == 0; b0 += EVAL_WINDOWS) {
            int64_t nb = B - b0 < EVAL_WINDOWS ? B - b0 : EVAL_WINDOWS;
            rc = window_loss(&g, ids, b0, nb, &mean);
            total += B <= EVAL_WINDOWS ? mean : mean * (double)nb / (double)B;
        }
        if (rc == 0)
            printf("loss: %.17g\n", total);
    }
    tg_release(ids);
    tg_set_grad_enabled(was);
    tg_gpt_free(&g);
    return rc;
}

/* ---- options ---------------------------------------------------------- */

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
        "  %s\n"
        "\n"
        "The model:\n"
        "  --layers N        transformer blocks (%d)\n"
        "  --heads N         attention heads per layer (%d)\n"
        "  --embd N          embedding size (%d)\n"
        "  --block N         window length, the context (%d)\n"
        "  --dropout P       on embeddings, attention weights and residual\n"
        "                    branches, in training, in [0, 1) (%g)\n"
        "  --bias, --no-bias biases everywhere, q/k/v too (nanoGPT's\n"
        "                    bias=True), or nowhere (bias=False); the\n"
        "                    default: all but q/k/v\n"
        "  --tie, --no-tie   lm_head is the token table (nanoGPT's), or its\n"
        "                    own matrix (the default)\n"
        "  --dtype f32|f64   the model's float type (f32)\n"
        "\n"
        "Training (AdamW, betas (0.9, beta2)):\n"
        "  --steps N         optimisation steps, nanoGPT's max_iters (%d)\n"
        "  --stop-at N       end this run after step N (a checkpoint\n"
        "                    there with --out-dir), the schedule still\n"
        "                    --steps long: --resume goes on from it\n"
        "  --batch N         windows per step (%d)\n"
        "  --lr X            the peak learning rate (%g)\n"
        "  --decay-lr, --no-decay-lr\n"
        "                    nanoGPT's get_lr: linear warmup, cosine decay\n"
        "                    (the default), or the rate --lr throughout\n"
        "  --warmup-iters N  warmup steps (--steps / 20)\n"
        "  --lr-decay-iters N  where the cosine reaches --min-lr (--steps)\n"
        "  --min-lr X        the floor (--lr / 10)\n"
        "  --weight-decay X  on tensors of 2 or more dims only (%g)\n"
        "  --beta2 X         AdamW's beta2 (%g)\n"
        "  --grad-clip X     the gradient norm's bound, 0 for none (%g)\n"
        "  --eval-every N    steps between loss reports and checkpoints "
        "(%d)\n"
        "  --eval-batches N  batches averaged per estimate (%d)\n"
        "  --print-losses    print \"step N loss X\" for every step: the\n"
        "                    batch's mean loss before the update (%%.17g)\n"
        "  --seed N          seeds the model, the batches, dropout and the\n"
        "                    sample (%ld)\n"
        "\n"
        "Checkpoints and output:\n"
        "  --out-dir DIR     write DIR/ckpt.npz at every evaluation: model,\n"
        "                    optimizer, iteration, random state\n"
        "  --resume PATH     continue from such a checkpoint, exactly as if\n"
        "                    never stopped (its model; give the same\n"
        "                    training options, --steps the total)\n"
        "  --save PATH       save the trained parameters as .npz\n"
        "  --plot STEM       the loss curves into STEM.png, .dat, .gp\n"
        "                    (%s)\n"
        "  --no-plot         no curves\n"
        "\n"
        "Sampling at the end:\n"
        "  --sample N        bytes to generate (%d)\n"
        "  --temperature X   sampling temperature (%g)\n"
        "  --top-k K         keep the K most likely bytes (all)\n"
        "  --top-p P         keep the nucleus of probability P, (0, 1] (1)\n"
        "\n"
        "Several processes (mpirun -np N tiny_gpt ...; --batch is then the\n"
        "global batch, a multiple of N, split over the processes):\n"
        "  --allreduce overlap|blocking\n"
        "                    average the gradients while backward runs,\n"
        "                    in buckets (the default), or after it\n"
        "  --bucket-kb N     the buckets' size in KiB (25 MiB)\n"
        "\n"
        "Pretrained models:\n"
        "  --init-from FILE  start from a nanoGPT / GPT-2 .safetensors\n"
        "                    checkpoint (sizes from the file)\n"
        "  --n-head H        its number of heads (needed with "
        "--init-from)\n"
        "  --eval-ids IDS    with --init-from: print the mean loss over\n"
        "                    the int64 (B, T+1) windows of IDS.npy as\n"
        "                    the last line, \"loss: X\", and stop\n"
        "  --help            this text\n",
        MAX_TEXT_MIB, defaults.text_path, defaults.layers, defaults.heads,
        defaults.embd, defaults.block, defaults.dropout, defaults.steps,
        defaults.batch, defaults.lr, defaults.weight_decay, defaults.beta2,
        defaults.grad_clip, defaults.eval_every, defaults.eval_batches,
        defaults.seed, defaults.plot, defaults.sample_len,
        defaults.temperature);
}

/* Reads the value of option name into *v (a whole number >= min). */
static bool int_arg(const char *name, const char *s, long min, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    if (errno || end == s || *end || *v < min || *v > 1000000000) {
        fprintf(stderr, "tiny_gpt: %s wants a whole number >= %ld, not '%s'\n",
                name, min, s);
        return false;
    }
    return true;
}

/* Reads the value of option name into *v: a finite number in [lo, hi],
 * without lo when lo_open, without hi when hi_open. */
static bool real_arg(const char *name, const char *s, double lo, bool lo_open,
                     double hi, bool hi_open, double *v)
{
    char *end;
    *v = strtod(s, &end);
    bool ok = end != s && !*end && isfinite(*v) &&
              (lo_open ? *v > lo : *v >= lo) && (hi_open ? *v < hi : *v <= hi);
    if (!ok) {
        if (hi == INFINITY)
            fprintf(stderr, "tiny_gpt: %s wants a number %s %g, not '%s'\n",
                    name, lo_open ? ">" : ">=", lo, s);
        else
            fprintf(stderr,
                    "tiny_gpt: %s wants a number in %c%g, %g%c, not '%s'\n",
                    name, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']', s);
    }
    return ok;
}

/* The flags without a value. True when arg is one (and sets it). */
static bool flag_arg(const char *arg, options *o)
{
    if (!strcmp(arg, "--bias"))
        o->bias = TG_GPT_BIAS_ALL;
    else if (!strcmp(arg, "--no-bias"))
        o->bias = TG_GPT_BIAS_NONE;
    else if (!strcmp(arg, "--tie"))
        o->tie = true;
    else if (!strcmp(arg, "--no-tie"))
        o->tie = false;
    else if (!strcmp(arg, "--decay-lr"))
        o->decay_lr = true;
    else if (!strcmp(arg, "--no-decay-lr"))
        o->decay_lr = false;
    else if (!strcmp(arg, "--print-losses"))
        o->print_losses = true;
    else if (!strcmp(arg, "--no-plot"))
        o->plot = NULL;
    else
        return false;
    o->model_given |= !strcmp(arg, "--bias") || !strcmp(arg, "--no-bias") ||
                      !strcmp(arg, "--tie") || !strcmp(arg, "--no-tie");
    return true;
}

/* Fills *o from argv. Returns 0 to run, 1 after --help, 2 on a bad option. */
static int parse_args(int argc, char **argv, options *o)
{
    struct {
        const char *name;
        int *value;
        long min;
    } ints[] = {{"--steps", &o->steps, 0},
                {"--batch", &o->batch, 1},
                {"--block", &o->block, 1},
                {"--embd", &o->embd, 1},
                {"--heads", &o->heads, 1},
                {"--n-head", &o->n_head, 1},
                {"--layers", &o->layers, 1},
                {"--eval-every", &o->eval_every, 1},
                {"--eval-batches", &o->eval_batches, 1},
                {"--sample", &o->sample_len, 0},
                {"--stop-at", &o->stop_at, 0},
                {"--warmup-iters", &o->warmup_iters, 0},
                {"--lr-decay-iters", &o->lr_decay_iters, 1},
                {"--top-k", &o->top_k, 1},
                {"--bucket-kb", &o->bucket_kb, 1}};
    struct {
        const char *name;
        double *value;
        double lo;
        bool lo_open;
        double hi;
        bool hi_open;
    } reals[] = {
        {"--lr", &o->lr, 0, true, INFINITY, false},
        {"--temperature", &o->temperature, 0, true, INFINITY, false},
        {"--dropout", &o->dropout, 0, false, 1, true},
        {"--weight-decay", &o->weight_decay, 0, false, INFINITY, false},
        {"--beta2", &o->beta2, 0, false, 1, true},
        {"--grad-clip", &o->grad_clip, 0, false, INFINITY, false},
        {"--min-lr", &o->min_lr, 0, false, INFINITY, false},
        {"--top-p", &o->top_p, 0, true, 1, false}};
    *o = defaults;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            o->text_path = arg;
            continue;
        }
        if (flag_arg(arg, o))
            continue;
        if (i + 1 == argc) {
            fprintf(stderr, "tiny_gpt: %s needs a value (see --help)\n", arg);
            return 2;
        }
        const char *value = argv[++i];
        bool known = false, ok = true;
        long n;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(arg, ints[k].name)) {
                known = true;
                ok = int_arg(arg, value, ints[k].min, &n);
                *ints[k].value = (int)n;
            }
        for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
            if (!strcmp(arg, reals[k].name)) {
                known = true;
                ok = real_arg(arg, value, reals[k].lo, reals[k].lo_open,
                              reals[k].hi, reals[k].hi_open, reals[k].value);
            }
        if (!strcmp(arg, "--seed")) {
            known = true;
            ok = int_arg(arg, value, 0, &o->seed);
        } else if (!strcmp(arg, "--save")) {
            known = true;
            o->save_path = value;
        } else if (!strcmp(arg, "--out-dir")) {
            known = true;
            o->out_dir = value;
        } else if (!strcmp(arg, "--resume")) {
            known = true;
            o->resume = value;
        } else if (!strcmp(arg, "--plot")) {
            known = true;
            o->plot = value;
        } else if (!strcmp(arg, "--init-from")) {
            known = true;
            o->init_from = value;
        } else if (!strcmp(arg, "--eval-ids")) {
            known = true;
            o->eval_ids = value;
        } else if (!strcmp(arg, "--allreduce")) {
            known = true;
            ok = !strcmp(value, "overlap") || !strcmp(value, "blocking");
            o->overlap = strcmp(value, "blocking") != 0;
            if (!ok)
                fprintf(stderr,
                        "tiny_gpt: --allreduce wants overlap or blocking, "
                        "not '%s'\n",
                        value);
        } else if (!strcmp(arg, "--dtype")) {
            known = true;
            ok = !strcmp(value, "f32") || !strcmp(value, "f64");
            o->dtype = !strcmp(value, "f64") ? TG_FLOAT64 : TG_FLOAT32;
            if (!ok)
                fprintf(stderr,
                        "tiny_gpt: --dtype wants f32 or f64, not "
                        "'%s'\n",
                        value);
        }
        o->block_given |= !strcmp(arg, "--block");
        o->model_given |= !strcmp(arg, "--dropout");
        if (!known)
            fprintf(stderr, "tiny_gpt: unknown option '%s' (see --help)\n",
                    arg);
        if (!known || !ok)
            return 2;
    }
    if (o->init_from && !o->n_head) {
        fprintf(stderr, "tiny_gpt: --init-from needs --n-head (the file's "
                        "shapes do not give the number of heads)\n");
        return 2;
    }
    if (o->eval_ids && !o->init_from) {
        fprintf(stderr, "tiny_gpt: --eval-ids needs --init-from\n");
        return 2;
    }
    if (o->init_from && (o->resume || o->model_given)) {
        fprintf(stderr, "tiny_gpt: --init-from takes the model from the file: "
                        "no --resume, --dropout, --bias, --tie with it\n");
        return 2;
    }
    if (!o->init_from && !o->resume && o->embd % o->heads) {
        fprintf(stderr, "tiny_gpt: --embd %d is not a multiple of --heads %d\n",
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
        fprintf(stderr,
                "tiny_gpt: --warmup-iters %d must be below --lr-decay-iters "
                "%d\n",
                o->warmup_iters, o->lr_decay_iters);
        return 2;
    }
    return 0;
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
 * when report() has not); leaves MPI. */
static int finish(int rc)
{
    if (rc == 1 && !reported)
        report("%s",
               tg_last_error()[0] ? tg_last_error() : "failed (no message)");
    tg_dist_free(world.d);
    return rc;
}

int main(int argc, char **argv)
{
    if (join_world(&argc, &argv) != 0)
        return finish(1);
    options o;
    int parsed = parse_args(argc, argv, &o);
    if (parsed)
        return finish(parsed == 1 ? 0 : 2);
    /* --batch is the global batch: N equal shards (every rank says so) */
    if (world.size > 1 && (o.batch < world.size || o.batch % world.size)) {
        fprintf(stderr,
                "tiny_gpt: --batch %d does not split over the %d processes "
                "of mpirun: the global batch must be a multiple of their "
                "number (rank %d)\n",
                o.batch, world.size, world.rank);
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
    printf("text: %s, %lld bytes, %d distinct; %lld train / %lld validation\n",
           o.text_path, (long long)cp.n, cp.vocab, (long long)cp.n_train,
           (long long)(cp.n - cp.n_train));
    int rc = train(&o, &cp);
    free(cp.ids);
    return finish(rc < 0 ? 1 : 0);
}
