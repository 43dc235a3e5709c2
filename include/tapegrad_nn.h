/* tapegrad nn: modules, optimizers, checkpoints. Included by <tapegrad.h>.
 *
 * A module is a small struct you own (on the stack or inside another
 * module): its sizes, options, and parameters (leaf tensors that require
 * grad). Every module has the same four functions:
 *
 *     int  tg_X_init(tg_X *m, tg_dtype dt, <sizes>, tg_rng *rng);  0 or -1
 *     void tg_X_free(tg_X *m);                        releases what it holds
 *     tg_tensor *tg_X_forward(tg_X *m, <inputs>);     a new reference
 *     int  tg_X_params(tg_X *m, tg_params *ps, const char *prefix);
 *
 * _params appends the module's parameters, named "prefix.name" (nested
 * modules extend the prefix: "blocks.0.attn.heads.1.w_q"), so optimizers,
 * zero_grad, gradcheck and checkpoints can walk any model. Initialisation
 * draws from rng in a fixed order, so a seed reproduces a model. */
#ifndef TAPEGRAD_NN_H
#define TAPEGRAD_NN_H

#include "tapegrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Parameter lists                                                        */
/* ===================================================================== */

#define TG_PARAM_NAME_MAX 128

typedef struct tg_param {
    char name[TG_PARAM_NAME_MAX];
    tg_tensor *t; /* borrowed: the module owns it */
} tg_param;

typedef struct tg_params {
    tg_param *items;
    int n, cap;
} tg_params;

void tg_params_init(tg_params *ps);
/* Frees the list (not the tensors, which the modules own). */
void tg_params_free(tg_params *ps);
/* Appends t as "prefix.name" (just "name" when prefix is NULL or ""). */
int tg_params_add(tg_params *ps, const char *prefix, const char *name,
                  tg_tensor *t);
/* The parameter called name, or NULL. Borrowed. */
tg_tensor *tg_params_get(const tg_params *ps, const char *name);
/* Total number of elements. */
int64_t tg_params_numel(const tg_params *ps);
/* tg_zero_grad on every parameter. */
void tg_params_zero_grad(const tg_params *ps);
/* torch.nn.utils.clip_grad_norm_: the L2 norm of all gradients together;
 * when it exceeds max_norm, every gradient is scaled by
 * max_norm / (norm + 1e-6). Returns the norm before clipping. */
double tg_clip_grad_norm(const tg_params *ps, double max_norm);

/* ===================================================================== */
/* Modules                                                                */
/* ===================================================================== */

/* Causal self-attention head, exactly the lesson's:
 *   q, k, v = x @ W_q, x @ W_k, x @ W_v                      (B,T,hs) each
 *   scores  = q @ k^T / sqrt(hs)                             (B,T,T)
 *   scores  = masked_fill(scores, future, -inf)              causal
 *   attn    = softmax(scores, -1);  out = attn @ v           (B,T,hs)
 * W_* are (C, hs), drawn N(0, 1/C). Options (set after init): scaled
 * (default true; false drops 1/sqrt(hs)), causal (default true). */
typedef struct tg_head {
    int n_embd, head_size;
    bool scaled, causal;
    bool fused; /* one tg_attention op instead of the composed ops (default
                 * false); h->attn is then not kept */
    tg_tensor *w_q, *w_k, *w_v;
    tg_tensor *attn; /* last forward's weights (B,T,T), detached; or NULL */
} tg_head;

int tg_head_init(tg_head *h, tg_dtype dt, int n_embd, int head_size,
                 tg_rng *rng);
void tg_head_free(tg_head *h);
/* x (B,T,C) -> (B,T,hs); also keeps the attention weights in h->attn. */
tg_tensor *tg_head_forward(tg_head *h, tg_tensor *x);
int tg_head_params(tg_head *h, tg_params *ps, const char *prefix);

/* y = x @ weight + bias: weight (in, out) drawn U(-1/sqrt(in), 1/sqrt(in))
 * as torch.nn.Linear, bias (out) likewise or absent. */
typedef struct tg_linear {
    int in, out;
    tg_tensor *weight, *bias; /* bias NULL when built without */
} tg_linear;

int tg_linear_init(tg_linear *l, tg_dtype dt, int in, int out, bool bias,
                   tg_rng *rng);
void tg_linear_free(tg_linear *l);
tg_tensor *tg_linear_forward(tg_linear *l, tg_tensor *x); /* (..., in) -> (..., out) */
int tg_linear_params(tg_linear *l, tg_params *ps, const char *prefix);

/* A table of num vectors of size dim, drawn N(0, 1) as torch.nn.Embedding:
 * token embeddings (forward on int64 ids) and position embeddings (the
 * first T rows). */
typedef struct tg_embed {
    int num, dim;
    tg_tensor *weight; /* (num, dim) */
} tg_embed;

int tg_embed_init(tg_embed *e, tg_dtype dt, int num, int dim, tg_rng *rng);
void tg_embed_free(tg_embed *e);
/* ids int64 (...) -> (..., dim) */
tg_tensor *tg_embed_forward(tg_embed *e, tg_tensor *ids);
/* Rows 0..T-1: (T, dim), for position embeddings. */
tg_tensor *tg_embed_positions(tg_embed *e, int64_t T);
int tg_embed_params(tg_embed *e, tg_params *ps, const char *prefix);

/* Layer norm over the last dim with gamma = 1, beta = 0 to start. */
typedef struct tg_layernorm {
    int dim;
    double eps; /* 1e-5, as torch */
    tg_tensor *gamma, *beta;
} tg_layernorm;

int tg_layernorm_init(tg_layernorm *n, tg_dtype dt, int dim);
void tg_layernorm_free(tg_layernorm *n);
tg_tensor *tg_layernorm_forward(tg_layernorm *n, tg_tensor *x);
int tg_layernorm_params(tg_layernorm *n, tg_params *ps, const char *prefix);

/* Multi-head attention: n_heads heads of size n_embd / n_heads in parallel,
 * outputs concatenated on the last dim and projected (a biased linear). */
typedef struct tg_mha {
    int n_heads;
    tg_head *heads;
    tg_linear proj;
} tg_mha;

int tg_mha_init(tg_mha *m, tg_dtype dt, int n_embd, int n_heads, tg_rng *rng);
void tg_mha_free(tg_mha *m);
tg_tensor *tg_mha_forward(tg_mha *m, tg_tensor *x); /* (B,T,C) -> (B,T,C) */
int tg_mha_params(tg_mha *m, tg_params *ps, const char *prefix);

/* Feed-forward: linear (C -> 4C), relu or gelu, linear (4C -> C). */
typedef struct tg_mlp {
    bool gelu; /* else relu */
    tg_linear fc, proj;
} tg_mlp;

int tg_mlp_init(tg_mlp *m, tg_dtype dt, int n_embd, bool gelu, tg_rng *rng);
void tg_mlp_free(tg_mlp *m);
tg_tensor *tg_mlp_forward(tg_mlp *m, tg_tensor *x);
int tg_mlp_params(tg_mlp *m, tg_params *ps, const char *prefix);

/* Pre-norm transformer block:
 *   x = x + mha(ln1(x));  x = x + mlp(ln2(x)) */
typedef struct tg_block {
    tg_layernorm ln1, ln2;
    tg_mha attn;
    tg_mlp mlp;
} tg_block;

int tg_block_init(tg_block *b, tg_dtype dt, int n_embd, int n_heads, bool gelu,
                  tg_rng *rng);
void tg_block_free(tg_block *b);
tg_tensor *tg_block_forward(tg_block *b, tg_tensor *x);
int tg_block_params(tg_block *b, tg_params *ps, const char *prefix);

/* A tiny GPT: token + position embeddings, n_layer blocks, a final layer
 * norm, and a linear head to vocabulary logits. */
typedef struct tg_gpt_config {
    int vocab_size, block_size, n_embd, n_head, n_layer;
    bool gelu;
    tg_dtype dtype;
} tg_gpt_config;

typedef struct tg_gpt {
    tg_gpt_config cfg;
    tg_embed tok, pos;
    tg_block *blocks;
    tg_layernorm ln_f;
    tg_linear lm_head;
} tg_gpt;

int tg_gpt_init(tg_gpt *g, tg_gpt_config cfg, tg_rng *rng);
void tg_gpt_free(tg_gpt *g);
/* ids int64 (B,T), T <= block_size -> logits (B,T,vocab). */
tg_tensor *tg_gpt_forward(tg_gpt *g, tg_tensor *ids);
/* Mean cross-entropy of the next-token logits against targets (B,T). */
tg_tensor *tg_gpt_loss(tg_gpt *g, tg_tensor *ids, tg_tensor *targets);
/* Extends ids (1,T0) by n_new tokens sampled from softmax(logits /
 * temperature) of the last position (context cropped to block_size). */
tg_tensor *tg_gpt_generate(tg_gpt *g, tg_tensor *ids, int n_new,
                           double temperature, tg_rng *rng);
int tg_gpt_params(tg_gpt *g, tg_params *ps, const char *prefix);

/* ===================================================================== */
/* Optimizers                                                             */
/* ===================================================================== */

typedef enum { TG_SGD, TG_ADAM, TG_ADAMW } tg_optim_kind;

/* Hyperparameters, with torch.optim's meanings and defaults. */
typedef struct tg_optim_config {
    tg_optim_kind kind;
    double lr;
    double momentum;     /* SGD (0) */
    double weight_decay; /* SGD, Adam: added to the gradient (L2); AdamW: decoupled (0.01) */
    double beta1, beta2; /* Adam(W) (0.9, 0.999) */
    double eps;          /* Adam(W) (1e-8) */
} tg_optim_config;

tg_optim_config tg_sgd_config(double lr, double momentum, double weight_decay);
tg_optim_config tg_adam_config(double lr);
tg_optim_config tg_adamw_config(double lr, double weight_decay);

typedef struct tg_optim tg_optim;

/* An optimizer over the parameters in ps (the list is copied; the tensors
 * are retained). NULL on error. */
tg_optim *tg_optim_new(const tg_params *ps, tg_optim_config cfg);
void tg_optim_free(tg_optim *o);
/* One update from the current gradients, exactly torch.optim's rule
 * (parameters without a gradient are skipped). 0 or -1. */
int tg_optim_step(tg_optim *o);
/* tg_zero_grad on every parameter. */
void tg_optim_zero_grad(tg_optim *o);

/* ===================================================================== */
/* Checkpoints                                                            */
/* ===================================================================== */

/* Saves every parameter as an entry "<name>.npy" of one uncompressed .npz
 * (numpy.load reads it). 0 or -1. */
int tg_save_npz(const tg_params *ps, const char *path);
/* Loads values by name into the parameters (same shapes and dtypes as
 * saved; a missing entry or another shape is an error naming the
 * parameter, and then nothing is changed). 0 or -1. */
int tg_load_npz(const tg_params *ps, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_NN_H */
