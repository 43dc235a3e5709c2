/* tiny_gpt.h: what the files of examples/tiny_gpt share: the options, the
 * text as token ids, the processes of the run, the loss curves and the
 * checkpoint's own entries, and the calls from one file into another.
 *
 * The program (tiny_gpt.c says what it does and runs it):
 *   tiny_gpt.c             main, the processes of mpirun, the messages
 *   tiny_gpt_options.c     the command line: defaults, table, checks
 *   tiny_gpt_data.c        the text, its batches and the unigram baseline
 *   tiny_gpt_train.c       the training loop and its steps
 *   tiny_gpt_checkpoint.c  --out-dir's checkpoints and --resume
 *   tiny_gpt_sample.c      the sample printed at the end
 *   tiny_gpt_pretrained.c  --init-from's model and --eval-ids */
#ifndef TAPEGRAD_EXAMPLES_TINY_GPT_H
#define TAPEGRAD_EXAMPLES_TINY_GPT_H

#include <tapegrad.h>
#include <tapegrad_dist.h>
#include <tapegrad_nn.h>

#include <stdbool.h>
#include <stdint.h>

/* The largest text read: each byte becomes an 8-byte token id, so 256 MiB
 * of text is 2 GiB of ids, more than a character model this size needs. */
#define MAX_TEXT_MIB 256

typedef struct options {
    const char *text_path, *save_path;
    const char *init_from, *eval_ids; /* --init-from, --eval-ids */
    const char *out_dir, *resume;     /* --out-dir, --resume */
    const char *plot;                 /* --plot stem, NULL for --no-plot */
    const char *html;                 /* --html FILE, NULL: no page */
    int n_head;                       /* --n-head, for --init-from */
    bool block_given;                 /* --block on the command line */
    bool model_given;                 /* --dropout, --bias, --tie... given */
    int dtype;                        /* --dtype, a tg_dtype (float32) */
    int gelu; /* --gelu, a tg_gelu_form: auto (a new model's erf, the
                 file's for --init-from), erf or tanh */
    int attn; /* --attn, every head's tg_head_path (composed) */
    int steps, batch, block, embd, heads, layers;
    int eval_every, eval_batches, sample_len;
    double lr, temperature;
    uint32_t seed;
    /* nanoGPT's model and training knobs */
    double dropout;      /* embedding, attention and residual dropout */
    int bias;            /* a tg_gpt_bias; --bias: ALL, --no-bias: NONE */
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
    int overlap;   /* --allreduce overlap (1, tg_ddp) or blocking (0) */
    int bucket_kb; /* --bucket-kb: tg_ddp's buckets; 0: its default */
} options;

/* The text as token ids, and the table back to bytes. */
typedef struct corpus {
    int64_t *ids;
    int64_t n, n_train; /* ids[0, n_train) train, ids[n_train, n) validate */
    int vocab;
    unsigned char byte_of[256]; /* id -> byte */
} corpus;

/* The processes of the run: one (d NULL, the program as it always was)
 * unless an MPI launcher started several. The collective calls are made
 * only when size > 1, so the one-process run is unchanged. */
typedef struct processes {
    tg_dist *d;
    int rank, size;
    int64_t lo, hi; /* this rank's windows [lo, hi) of each batch */
    tg_ddp *ddp;    /* --allreduce overlap */
    /* with dropout on several ranks: this rank's mask generator (see the
     * top of tiny_gpt.c) */
    bool own_masks;
    tg_rng masks;
    /* a failure every rank knows of (agree() said so): they all end
     * together; any other failure ends the job (tg_dist_abort) */
    bool agreed;
} processes;

extern processes world; /* tiny_gpt.c */

/* The estimates made at each evaluation. */
typedef struct curves {
    double *step, *train, *val;
    int n, cap;
} curves;

/* The checkpoint's entries of the run (tiny_gpt_checkpoint.c). */
typedef struct run_state {
    tg_tensor *config, *state, *real;
} run_state;

/* tiny_gpt.c */
int agree(int rc);
__attribute__((format(printf, 1, 2))) void report(const char *fmt, ...);
int make_parent_dir(const char *path);

/* tiny_gpt_options.c */
int parse_args(int argc, char **argv, options *o);
const char *options_said(void);
int options_agree(const options *o); /* collective; 0 with one rank */

/* tiny_gpt_data.c */
int load_corpus(corpus *cp, const char *path, int block);
int get_batch(const int64_t *ids, int64_t n, int B, int T, tg_rng *rng,
              tg_tensor **x, tg_tensor **y);
double unigram_baseline(const corpus *cp);
int text_agrees(const corpus *cp); /* collective; 0 with one rank */

/* tiny_gpt_train.c */
int train(options *o, const corpus *cp);
int curves_add(curves *c, double step, double train, double val);

/* tiny_gpt_checkpoint.c */
void run_state_free(run_state *r);
int run_state_init(run_state *r);
int save_checkpoint(const options *o, const tg_gpt *g, const tg_params *ps,
                    tg_optim *opt, const tg_rng *rng, int it, run_state *r,
                    const curves *cv);
int resume_config_all(options *o, const corpus *cp, tg_gpt_config *cfg,
                      curves *cv);
int resume_from_all(const options *o, const tg_params *ps, tg_optim *opt,
                    tg_rng *rng, int *start, run_state *r, const curves *cv);

/* tiny_gpt_sample.c */
int sampling_fits(const tg_gpt *g, const options *o);
/* tiny_gpt_attn.c: the last block's heads as pictures beside --plot's */
int plot_attention(tg_gpt *g, const corpus *cp, const options *o);
/* A forward of ids keeping every head's weights (h->attn) for a picture,
 * with --attn tiled too; the logits (a new reference) or NULL. */
tg_tensor *forward_keeping_weights(tg_gpt *g, tg_tensor *ids);
int print_sample(tg_gpt *g, const corpus *cp, const options *o, tg_rng *rng);

/* tiny_gpt_page.c: --html's page, the loss curves and one head's
 * attention on the validation text; prints "page: FILE". 0 or -1. */
int write_page(const options *o, tg_gpt *g, const corpus *cp, const curves *cv,
               double unigram);

/* tiny_gpt_pretrained.c */
int load_model(tg_gpt *g, options *o, const corpus *cp);
int eval_checkpoint(const options *o);

#endif /* TAPEGRAD_EXAMPLES_TINY_GPT_H */
