/** @file
 * tapegrad nn: modules, optimizers, checkpoints. Include `<tapegrad_nn.h>`
 * for these; it includes `<tapegrad.h>` (tensors, ops, autograd, gradcheck,
 * I/O) itself. `<tapegrad_all.h>` is everything, pictures too.
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
 * Each also has a config form, for the options beyond the sizes:
 *
 *     tg_X_config tg_X_config_default(<sizes>);     today's module, as a value
 *     int  tg_X_init_with(tg_X *m, tg_dtype dt, const tg_X_config *cfg,
 *                         tg_rng *rng);              0 or -1
 *
 * Start from the default, change the fields you need, pass a pointer; the
 * plain _init is _init_with of the default config. Modules with dropout
 * (head, mha, mlp, block, gpt) also have a train/eval switch:
 *
 *     int  tg_X_train(tg_X *m, bool on, tg_rng *rng);    0 or -1
 *
 * It sets the module and every module inside it to training (on) or
 * evaluation (off: dropout does nothing). rng is borrowed, not copied: the
 * modules keep the pointer and draw their dropout masks from it in every
 * training forward, so it must outlive training (NULL is fine for eval, and
 * for models without dropout). Modules start in training mode with no rng,
 * as torch's start in train(); a training forward that must drop without an
 * rng fails, naming the module and tg_X_train.
 *
 * _params appends the module's parameters, named "prefix.name" (nested
 * modules extend the prefix: "blocks.0.attn.heads.1.w_q"), so optimizers,
 * zero_grad, gradcheck and checkpoints can walk any model. Initialisation
 * draws from rng in a fixed order, so a seed reproduces a model.
 *
 * Errors, for every module: _init returns -1 and leaves the module zeroed
 * for a NULL module or rng, a dtype other than float32 / float64, or a size
 * that is not positive. _forward returns NULL for a NULL module, a module
 * never initialised (zeroed) and inputs of the wrong shape or dtype; a NULL
 * input keeps the first error. _params returns -1 for a NULL or zeroed
 * module, a NULL list, or a name longer than TG_PARAM_NAME_MAX - 1. _free is
 * NULL-safe, and freeing a zeroed module does nothing. */
#ifndef TAPEGRAD_NN_H
#define TAPEGRAD_NN_H

#include "tapegrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Parameter lists                                                        */
/* ===================================================================== */

/** Room for a parameter's full name, with its terminating NUL. */
#define TG_PARAM_NAME_MAX 128

/** One named parameter. */
typedef struct tg_param {
    char name[TG_PARAM_NAME_MAX]; /**< "prefix.name" */
    tg_tensor *t;                 /**< borrowed: the module owns it */
} tg_param;

/** A growable list of named parameters; start it with tg_params_init.
 * Read items and n freely, and swap an item's tensor; change names and n
 * only through the calls, which keep the names' hash: a name written over,
 * or n lowered and the list grown again, by hand, leaves tg_params_get and
 * the duplicate check of tg_params_add unsure of what the list holds. */
typedef struct tg_params {
    tg_param *items;
    int n, cap;
    /** private: the names hashed, so that adding and finding by name cost
     * O(1) each (nn/name_hash.c) */
    struct tg__name_hash *index;
} tg_params;

/** An empty list (no allocation). NULL-safe. */
void tg_params_init(tg_params *ps);
/** Frees the list (not the tensors, which the modules own) and leaves it
 * empty. NULL-safe. */
void tg_params_free(tg_params *ps);
/** Appends t (borrowed) as "prefix.name" (just "name" when prefix is NULL or
 * ""). Returns 0, or -1 for a NULL list or name, a full name longer than
 * TG_PARAM_NAME_MAX - 1, a name already in the list, or no memory. A NULL t
 * (a module whose init failed) returns -1 and keeps the first error. */
int tg_params_add(tg_params *ps, const char *prefix, const char *name,
                  tg_tensor *t);
/** The parameter called name, or NULL (also for a NULL list or name; not an
 * error). Borrowed. */
tg_tensor *tg_params_get(const tg_params *ps, const char *name);
/** Total number of elements of the parameters; 0 for a NULL or empty
 * list. */
int64_t tg_params_numel(const tg_params *ps);
/** tg_zero_grad on every parameter. NULL-safe. */
void tg_params_zero_grad(const tg_params *ps);
/** torch.nn.utils.clip_grad_norm_: the L2 norm of all gradients together;
 * when it exceeds max_norm, every gradient is scaled in place by
 * max_norm / (norm + 1e-6). Returns the norm before clipping (0 for a NULL
 * list). As in torch, max_norm is not checked: a negative one flips the
 * gradients' sign, and NaN makes them NaN. */
double tg_clip_grad_norm(const tg_params *ps, double max_norm);

/* ===================================================================== */
/* Modules                                                                */
/* ===================================================================== */

/** How tg_head_forward computes the attention. Each path gives the same
 * output and gradients; they differ in tape entries, memory and speed. */
typedef enum tg_head_path {
    /** The lesson's ops, one tape entry each: tg_scale, tg_masked_fill with
     * the (T,T) future mask, tg_softmax (the default). */
    TG_HEAD_COMPOSED = 0,
    /** Scale, mask and softmax as one tg_attention_softmax entry: the same
     * bits as TG_HEAD_COMPOSED, without the mask and intermediates. */
    TG_HEAD_FUSED_SOFTMAX,
    /** One tg_attention op from q, k, v to out: never holds the (B,T,T)
     * weights (h->attn is not kept); equal to the others within rounding. */
    TG_HEAD_TILED
} tg_head_path;

/** Causal self-attention head, exactly the lesson's:
 *
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v   (+ b_q, b_k, b_v)  (B,T,hs) each
 *     scores  = q @ k^T * scale   (scale = 1/sqrt(hs))         (B,T,T)
 *     scores  = masked_fill(scores, future, -inf)              causal
 *     attn    = softmax(scores, -1);  out = dropout(attn) @ v  (B,T,hs)
 *
 * W_* are (C, hs), drawn N(0, 1/C); b_* (hs) start at 0, as nanoGPT's
 * _init_weights sets every bias (no draw). Options (set after init, or
 * through tg_head_config): scaled (default true; false drops the scale),
 * scale, causal (default true), path (default TG_HEAD_COMPOSED),
 * attn_dropout (default 0: TG_HEAD_TILED never forms attn, so it refuses a
 * training forward with attn_dropout > 0). */
typedef struct tg_head {
    int n_embd, head_size;
    bool scaled, causal;
    tg_head_path path; /**< how the attention is computed (tg_head_path) */
    tg_tensor *w_q, *w_k, *w_v;
    tg_tensor *attn; /**< last forward's weights (B,T,T), detached, before
                        dropout; or NULL */
    tg_tensor *b_q, *b_k, *b_v; /**< (hs) each, or all NULL (no q/k/v bias) */
    double scale;        /**< the scores' factor when scaled (1/sqrt(hs)) */
    double attn_dropout; /**< on attn in training, in [0, 1) (0) */
    bool training;       /**< tg_head_train; true after init */
    tg_rng *rng;         /**< borrowed, for dropout (tg_head_train) */
} tg_head;

/** A head's options: tg_head_config_default(n_embd, head_size) gives
 * today's head, then change fields. */
typedef struct tg_head_config {
    int n_embd, head_size;
    bool qkv_bias;       /**< b_q, b_k, b_v (default false) */
    bool causal;         /**< the future mask (default true) */
    double scale;        /**< scores *= scale: 1/sqrt(head_size) by default; any
                      finite value, 0 too (uniform weights) */
    double attn_dropout; /**< in [0, 1) (default 0) */
    tg_head_path path;   /**< default TG_HEAD_COMPOSED */
} tg_head_config;

/** The default head config: no q/k/v bias, causal, scale 1/sqrt(head_size),
 * no dropout, TG_HEAD_COMPOSED. Sizes are checked by the init. */
tg_head_config tg_head_config_default(int n_embd, int head_size);
/** A head of cfg for x (B,T,n_embd) of dtype dt, drawing W_q, W_k, W_v in
 * that order (the biases start at 0). 0, or -1 with h zeroed: the module
 * errors above, a NULL cfg, a non-finite scale, attn_dropout outside [0, 1)
 * or an unknown path. */
int tg_head_init_with(tg_head *h, tg_dtype dt, const tg_head_config *cfg,
                      tg_rng *rng);
/** Training (on) or evaluation (off) mode, and the borrowed rng its dropout
 * draws from (see the top of this file). 0, or -1 for a NULL or zeroed
 * head. */
int tg_head_train(tg_head *h, bool on, tg_rng *rng);

/** A head for x (B,T,n_embd) of dtype dt, drawing W_q, W_k, W_v (n_embd,
 * head_size) in that order. 0, or -1 with h zeroed (see the module errors
 * above). */
int tg_head_init(tg_head *h, tg_dtype dt, int n_embd, int head_size,
                 tg_rng *rng);
/** Releases the weights and h->attn; h is zeroed. NULL-safe. */
void tg_head_free(tg_head *h);
/** x (B,T,C) in the head's dtype -> (B,T,hs), a new reference; also keeps
 * the attention weights in h->attn (owned by the head; released and left
 * NULL with TG_HEAD_TILED). NULL unless x is 3-D with C = n_embd and
 * h->path is one of tg_head_path's, or when memory runs out (also for
 * keeping the weights: a forward that returns its output has always set
 * h->attn). On NULL h->attn is as it was. */
tg_tensor *tg_head_forward(tg_head *h, tg_tensor *x);
/** Appends prefix.w_q, prefix.w_k, prefix.w_v (and prefix.b_q, .b_k, .b_v
 * when the head has them) to ps. 0 or -1. */
int tg_head_params(tg_head *h, tg_params *ps, const char *prefix);

/** y = x @ weight + bias: weight (in, out) drawn U(-1/sqrt(in), 1/sqrt(in))
 * as torch.nn.Linear, bias (out) likewise or absent. */
typedef struct tg_linear {
    int in, out;
    tg_tensor *weight, *bias; /**< bias NULL when built without */
} tg_linear;

/** A linear layer's options. */
typedef struct tg_linear_config {
    int in, out;
    bool bias; /**< default true */
} tg_linear_config;

/** {in, out, bias true}; sizes are checked by the init. */
tg_linear_config tg_linear_config_default(int in, int out);
/** A linear layer of cfg, dtype dt, drawing weight then bias (when it has
 * one). 0, or -1 with l zeroed (also for a NULL cfg). */
int tg_linear_init_with(tg_linear *l, tg_dtype dt, const tg_linear_config *cfg,
                        tg_rng *rng);
/** A linear layer in -> out of dtype dt, drawing weight then bias. 0, or -1
 * with l zeroed. */
int tg_linear_init(tg_linear *l, tg_dtype dt, int in, int out, bool bias,
                   tg_rng *rng);
/** Releases weight and bias; l is zeroed. NULL-safe. */
void tg_linear_free(tg_linear *l);
/** x (..., in) -> (..., out), a new reference; NULL for a 0-d x, a last dim
 * other than in, or another dtype. */
tg_tensor *tg_linear_forward(tg_linear *l, tg_tensor *x);
/** Appends prefix.weight (and prefix.bias) to ps. 0 or -1. */
int tg_linear_params(tg_linear *l, tg_params *ps, const char *prefix);

/** A table of num vectors of size dim, drawn N(0, 1) as torch.nn.Embedding:
 * token embeddings (forward on int64 ids) and position embeddings (the
 * first T rows). */
typedef struct tg_embed {
    int num, dim;
    tg_tensor *weight; /**< (num, dim) */
} tg_embed;

/** A table of num vectors of size dim, dtype dt. 0, or -1 with e zeroed. */
int tg_embed_init(tg_embed *e, tg_dtype dt, int num, int dim, tg_rng *rng);
/** Releases the table; e is zeroed. NULL-safe. */
void tg_embed_free(tg_embed *e);
/** ids int64 (...) -> (..., dim), row ids[i] at each position; a new
 * reference. NULL for ids that are not int64, or an id out of [0, num) (the
 * message, from tg_embedding, gives its position). */
tg_tensor *tg_embed_forward(tg_embed *e, tg_tensor *ids);
/** Rows 0..T-1: (T, dim), for position embeddings; a view of the table, new
 * reference. NULL unless 0 <= T <= num. */
tg_tensor *tg_embed_positions(tg_embed *e, int64_t T);
/** Appends prefix.weight to ps. 0 or -1. */
int tg_embed_params(tg_embed *e, tg_params *ps, const char *prefix);

/** Layer norm over the last dim with gamma = 1, beta = 0 to start. */
typedef struct tg_layernorm {
    int dim;
    double eps;              /**< 1e-5, as torch */
    tg_tensor *gamma, *beta; /**< beta NULL without a bias */
} tg_layernorm;

/** A layer norm's options, as torch.nn.LayerNorm(dim, eps, bias=...). */
typedef struct tg_layernorm_config {
    int dim;
    double eps; /**< >= 0 (default 1e-5) */
    bool bias;  /**< beta (default true); without, y = xhat * gamma */
} tg_layernorm_config;

/** {dim, 1e-5, bias true}; checked by the init. */
tg_layernorm_config tg_layernorm_config_default(int dim);
/** A layer norm of cfg, dtype dt (needs no rng). 0, or -1 with n zeroed:
 * also for a NULL cfg, or eps negative or NaN. */
int tg_layernorm_init_with(tg_layernorm *n, tg_dtype dt,
                           const tg_layernorm_config *cfg);

/** A layer norm over a last dim of size dim, dtype dt (needs no rng). 0, or
 * -1 with n zeroed. */
int tg_layernorm_init(tg_layernorm *n, tg_dtype dt, int dim);
/** Releases gamma and beta; n is zeroed. NULL-safe. */
void tg_layernorm_free(tg_layernorm *n);
/** tg_layer_norm(x, gamma, beta, eps): x (..., dim) -> the same shape, a new
 * reference. NULL for a last dim other than dim, or another dtype. */
tg_tensor *tg_layernorm_forward(tg_layernorm *n, tg_tensor *x);
/** Appends prefix.gamma, prefix.beta (when it has one) to ps. 0 or -1. */
int tg_layernorm_params(tg_layernorm *n, tg_params *ps, const char *prefix);

/** Multi-head attention: n_heads heads of size n_embd / n_heads in parallel,
 * outputs concatenated on the last dim and projected (a biased linear),
 * then dropout (resid_dropout, in training): nanoGPT's CausalSelfAttention,
 * whose c_attn is the heads' q/k/v, split. */
typedef struct tg_mha {
    int n_heads;
    tg_head *heads;
    tg_linear proj;
    double resid_dropout; /**< after proj, in training, in [0, 1) (0) */
    bool training;        /**< tg_mha_train; true after init */
    tg_rng *rng;          /**< borrowed, for dropout (tg_mha_train) */
} tg_mha;

/** Multi-head attention's options. */
typedef struct tg_mha_config {
    int n_embd, n_heads;
    bool bias;     /**< the projection's (default true) */
    bool qkv_bias; /**< each head's b_q, b_k, b_v (default false) */
    bool causal;   /**< default true */
    double scale;  /**< each head's; 1/sqrt(n_embd / n_heads) by default */
    double attn_dropout;  /**< each head's, on its weights (default 0) */
    double resid_dropout; /**< after the projection (default 0) */
} tg_mha_config;

/** The default: projection bias, no q/k/v bias, causal, scale
 * 1/sqrt(n_embd / n_heads) (0 when n_heads does not divide n_embd, which
 * the init refuses), no dropout. */
tg_mha_config tg_mha_config_default(int n_embd, int n_heads);
/** The module of cfg: heads (each as tg_head_init_with), then the
 * projection, drawn in that order. 0, or -1 with m zeroed (also for a NULL
 * cfg or resid_dropout outside [0, 1)). */
int tg_mha_init_with(tg_mha *m, tg_dtype dt, const tg_mha_config *cfg,
                     tg_rng *rng);
/** Training or evaluation, for m and its heads (see the top of this file).
 * 0, or -1 for a NULL or zeroed module. */
int tg_mha_train(tg_mha *m, bool on, tg_rng *rng);

/** n_heads heads (n_heads must divide n_embd), then the projection, drawn
 * in that order. 0, or -1 with m zeroed (an error inside a head or the
 * projection is named by tg_head_init or tg_linear_init). */
int tg_mha_init(tg_mha *m, tg_dtype dt, int n_embd, int n_heads, tg_rng *rng);
/** Frees the heads and the projection; m is zeroed. NULL-safe. */
void tg_mha_free(tg_mha *m);
/** x (B,T,C) -> (B,T,C), a new reference; NULL unless x is 3-D with C =
 * n_embd in the module's dtype. */
tg_tensor *tg_mha_forward(tg_mha *m, tg_tensor *x);
/** Appends prefix.heads.0.w_q, .w_k, .w_v (.b_q, .b_k, .b_v), then heads 1,
 * 2... and prefix.proj.weight (.bias) to ps. 0 or -1. */
int tg_mha_params(tg_mha *m, tg_params *ps, const char *prefix);

/** Feed-forward: linear (C -> 4C), relu or gelu, linear (4C -> C), then
 * dropout (in training). */
typedef struct tg_mlp {
    bool gelu; /**< else relu */
    tg_linear fc, proj;
    bool gelu_tanh; /**< gelu's tanh form (tg_gelu_tanh), else exact */
    double dropout; /**< after proj, in training, in [0, 1) (0) */
    bool training;  /**< tg_mlp_train; true after init */
    tg_rng *rng;    /**< borrowed, for dropout (tg_mlp_train) */
} tg_mlp;

/** The MLP's options. */
typedef struct tg_mlp_config {
    int n_embd;
    bool bias;      /**< fc's and proj's (default true) */
    bool gelu;      /**< else relu (default true) */
    bool gelu_tanh; /**< with gelu: the tanh form (default false: exact) */
    double dropout; /**< after proj (default 0) */
} tg_mlp_config;

/** {n_embd, bias, exact gelu, no dropout}; checked by the init. */
tg_mlp_config tg_mlp_config_default(int n_embd);
/** The MLP of cfg: fc (n_embd -> 4 n_embd) then proj. 0, or -1 with m
 * zeroed (also for a NULL cfg or dropout outside [0, 1)). */
int tg_mlp_init_with(tg_mlp *m, tg_dtype dt, const tg_mlp_config *cfg,
                     tg_rng *rng);
/** Training or evaluation (see the top of this file). 0, or -1 for a NULL or
 * zeroed module. */
int tg_mlp_train(tg_mlp *m, bool on, tg_rng *rng);

/** fc (n_embd -> 4 n_embd) then proj, both biased. 0, or -1 with m zeroed
 * (errors in the layers are named by tg_linear_init). */
int tg_mlp_init(tg_mlp *m, tg_dtype dt, int n_embd, bool gelu, tg_rng *rng);
/** Frees both layers; m is zeroed. NULL-safe. */
void tg_mlp_free(tg_mlp *m);
/** proj(act(fc(x))): x (..., C) -> (..., C), a new reference. NULL for x of
 * another last dim or dtype (checked, and named, by the fc layer: "linear"). */
tg_tensor *tg_mlp_forward(tg_mlp *m, tg_tensor *x);
/** Appends prefix.fc.weight (.bias) and prefix.proj.weight (.bias) to ps. 0
 * or -1. */
int tg_mlp_params(tg_mlp *m, tg_params *ps, const char *prefix);

/** Pre-norm transformer block:
 *
 *     x = x + mha(ln1(x));  x = x + mlp(ln2(x))
 */
typedef struct tg_block {
    tg_layernorm ln1, ln2;
    tg_mha attn;
    tg_mlp mlp;
} tg_block;

/** A block's options: its layer norms', attention's and MLP's. */
typedef struct tg_block_config {
    int n_embd, n_heads;
    bool bias;      /**< layer norms' beta, projections' and MLP's biases
                      (default true; false is nanoGPT's bias=False) */
    bool qkv_bias;  /**< the heads' b_q, b_k, b_v (default false; nanoGPT's
                      bias=True has them) */
    double ln_eps;  /**< default 1e-5 */
    bool gelu;      /**< else relu (default true) */
    bool gelu_tanh; /**< default false (exact) */
    double scale;   /**< the heads' score scale, 1/sqrt(n_embd / n_heads) */
    double attn_dropout, resid_dropout; /**< default 0 */
} tg_block_config;

/** The default block config (values as above); checked by the init. */
tg_block_config tg_block_config_default(int n_embd, int n_heads);
/** The block of cfg: ln1, ln2, attn, mlp, initialised in that order. 0, or
 * -1 with b zeroed (also for a NULL cfg; errors in the parts are named by
 * the part's init). */
int tg_block_init_with(tg_block *b, tg_dtype dt, const tg_block_config *cfg,
                       tg_rng *rng);
/** Training or evaluation, for b's attention and MLP (see the top of this
 * file). 0, or -1 for a NULL or zeroed block. */
int tg_block_train(tg_block *b, bool on, tg_rng *rng);
/** ln1, ln2, attn, mlp, initialised in that order. 0, or -1 with b zeroed
 * (the error is named by the part's init: layernorm_init, mha_init...). */
int tg_block_init(tg_block *b, tg_dtype dt, int n_embd, int n_heads, bool gelu,
                  tg_rng *rng);
/** Frees every part; b is zeroed. NULL-safe. */
void tg_block_free(tg_block *b);
/** x (B,T,C) -> (B,T,C), a new reference; NULL unless x is 3-D with C =
 * n_embd in the block's dtype. */
tg_tensor *tg_block_forward(tg_block *b, tg_tensor *x);
/** Appends prefix.ln1.*, prefix.attn.*, prefix.ln2.*, prefix.mlp.* to ps. 0
 * or -1. */
int tg_block_params(tg_block *b, tg_params *ps, const char *prefix);

/** Which biases a GPT's modules carry (tg_gpt_config.bias). */
typedef enum tg_gpt_bias {
    /** Layer norms, attention projections and MLPs biased, the heads' q/k/v
     * not (0: the model as it always was). */
    TG_GPT_BIAS_LINEAR = 0,
    /** Those and q/k/v too: nanoGPT's bias=True (and GPT-2's). */
    TG_GPT_BIAS_ALL,
    /** None anywhere, layer norms without beta: nanoGPT's bias=False. */
    TG_GPT_BIAS_NONE
} tg_gpt_bias;

/** A tiny GPT: token + position embeddings, n_layer blocks, a final layer
 * norm, and a linear head to vocabulary logits. Every field after dtype is
 * an option whose zero is the model as it always was, so a config written
 * with designated initializers, {.vocab_size = ..., .dtype = ...}, keeps
 * its meaning. nanoGPT's GPTConfig(bias=True, dropout=p) is
 * {.gelu = true, .bias = TG_GPT_BIAS_ALL, .tie_weights = true,
 * .embd_dropout = p, .attn_dropout = p, .resid_dropout = p}.
 *
 * The GELU form is the two booleans gelu and gelu_tanh: relu (gelu false),
 * the exact erf form (gelu, nanoGPT's nn.GELU()) or the tanh form (gelu and
 * gelu_tanh, GPT-2's "gelu_new"); gelu_tanh without gelu means relu. The
 * attention path, attn_path, is what tg_gpt_init sets in every head
 * (tg_head.path): the same model and values (within rounding), another
 * speed and memory, as Hugging Face's attn_implementation. */
typedef struct tg_gpt_config {
    int vocab_size, block_size, n_embd, n_head, n_layer;
    bool gelu;
    tg_dtype dtype;
    tg_gpt_bias bias;     /**< which biases (TG_GPT_BIAS_LINEAR) */
    bool tie_weights;     /**< lm_head is tok.weight: logits = x @ tok.weight^T,
                         one tensor, listed (and saved) once as tok.weight */
    bool gelu_tanh;       /**< with gelu: the tanh form (GPT-2's); else exact */
    double ln_eps;        /**< every layer norm's eps; 0 means 1e-5 */
    bool has_attn_scale;  /**< use attn_scale, else 1/sqrt(n_embd / n_head) */
    double attn_scale;    /**< the heads' score scale (any finite value, 0 too)
                            when has_attn_scale */
    double embd_dropout;  /**< on tok + pos, in training, in [0, 1) */
    double attn_dropout;  /**< on every head's weights, in training */
    double resid_dropout; /**< after each attention projection and MLP */
    tg_head_path attn_path; /**< every head's path (TG_HEAD_COMPOSED); what
                              tg_gpt_init set, a head changed after is not
                              reflected here */
    /** Each block a tg_checkpoint segment whenever grad mode is on: its
     * activations recomputed in backward, not kept (less memory, one more
     * block forward per step; the same gradients, bit for bit). The
     * entries borrow the model: free it only after the backward. */
    bool checkpoint;
} tg_gpt_config;

/** A tiny GPT built from cfg by tg_gpt_init. */
typedef struct tg_gpt {
    tg_gpt_config cfg;
    tg_embed tok, pos;
    tg_block *blocks;
    tg_layernorm ln_f;
    tg_linear lm_head; /**< zeroed (weight NULL) when cfg.tie_weights */
    bool training;     /**< tg_gpt_train; true after init */
    tg_rng *rng;       /**< borrowed, for dropout (tg_gpt_train) */
} tg_gpt;

/** The model of cfg (every size positive, n_head dividing n_embd, dtype
 * float32 or float64, a known bias, ln_eps >= 0, a finite attn_scale,
 * dropouts in [0, 1), attn_path one of tg_head_path's, set in every
 * head), drawn tok, pos, blocks, ln_f, lm_head in that order
 * (no lm_head draw when tied). 0, or -1 with g zeroed (errors in the parts
 * are named by the part's init). */
int tg_gpt_init(tg_gpt *g, tg_gpt_config cfg, tg_rng *rng);
/** Training or evaluation for the whole model (the embedding dropout and
 * every block), see the top of this file. 0, or -1 for a NULL or zeroed
 * model. */
int tg_gpt_train(tg_gpt *g, bool on, tg_rng *rng);
/** Frees every part; g is zeroed. NULL-safe. */
void tg_gpt_free(tg_gpt *g);
/** ids int64 (B,T), 1 <= T <= block_size, values in [0, vocab) -> logits
 * (B,T,vocab), a new reference. NULL on other ids (an id out of range is
 * named by tg_embedding). */
tg_tensor *tg_gpt_forward(tg_gpt *g, tg_tensor *ids);
/** Mean cross-entropy of the next-token logits against targets: int64
 * (B,T) like ids, values in [0, vocab). A 0-d new reference, or NULL. */
tg_tensor *tg_gpt_loss(tg_gpt *g, tg_tensor *ids, tg_tensor *targets);
/** Extends ids (1,T0) by n_new tokens sampled from softmax(logits /
 * temperature) of the last position (context cropped to block_size),
 * drawing one uniform from rng per token, with grad mode off. A new (1,
 * T0 + n_new) int64 tensor; NULL unless ids is int64 (1,T0) with T0 >= 1,
 * n_new >= 0, temperature > 0 and rng is not NULL. */
tg_tensor *tg_gpt_generate(tg_gpt *g, tg_tensor *ids, int n_new,
                           double temperature, tg_rng *rng);
/** How tg_gpt_generate_with picks each token from the last position's
 * logits, as nanoGPT's generate (then the nucleus, as Hugging Face's
 * top_p): logits / temperature; keep the top_k largest (ties with the k-th
 * kept too); softmax; keep the fewest most likely tokens whose
 * probabilities sum to at least top_p (the nucleus); draw from what is
 * kept, renormalised. */
typedef struct tg_gpt_sampling {
    double temperature; /**< > 0 (1) */
    int top_k;          /**< 1..vocab_size, or TG_TOP_K_ALL (the default) */
    double top_p;       /**< in (0, 1]; 1 keeps every token (the default) */
} tg_gpt_sampling;

/** tg_gpt_sampling.top_k for no top-k filter. */
#define TG_TOP_K_ALL (-1)

/** {temperature 1, TG_TOP_K_ALL, top_p 1}: plain sampling. */
tg_gpt_sampling tg_gpt_sampling_default(void);
/** Extends ids (1,T0) by n_new tokens drawn as s says, one tg_rng_uniform
 * from rng per token (inverse CDF over the kept tokens in id order), the
 * context cropped to block_size, with grad mode off; the model runs in
 * whatever mode it is in (tg_gpt_train(g, false, NULL) first for no
 * dropout, as nanoGPT's model.eval()). A new (1, T0 + n_new) int64 tensor;
 * NULL unless ids is int64 (1,T0) with T0 >= 1, n_new >= 0, rng is not
 * NULL, s is not NULL, temperature > 0, top_k is TG_TOP_K_ALL or in
 * 1..vocab_size, and top_p is in (0, 1]. With top_k = 1 it is greedy
 * (argmax). tg_gpt_generate(g, ids, n, t, rng) is this with {t,
 * TG_TOP_K_ALL, 1}, token for token. */
tg_tensor *tg_gpt_generate_with(tg_gpt *g, tg_tensor *ids, int n_new,
                                const tg_gpt_sampling *s, tg_rng *rng);
/** Appends prefix.tok.weight, prefix.pos.weight, prefix.blocks.0.*, ...,
 * prefix.ln_f.*, prefix.lm_head.weight (not when tied: tok.weight is it)
 * to ps. 0 or -1. */
int tg_gpt_params(tg_gpt *g, tg_params *ps, const char *prefix);

/* ===================================================================== */
/* Optimizers                                                             */
/* ===================================================================== */

/** Which update rule. */
typedef enum { TG_SGD, TG_ADAM, TG_ADAMW } tg_optim_kind;

/** Hyperparameters, with torch.optim's meanings and defaults. */
typedef struct tg_optim_config {
    tg_optim_kind kind;
    double lr;
    double momentum; /**< SGD (0) */
    double
        weight_decay; /**< SGD, Adam: added to the gradient (L2); AdamW: decoupled (0.01) */
    double beta1, beta2; /**< Adam(W) (0.9, 0.999) */
    double eps;          /**< Adam(W) (1e-8) */
} tg_optim_config;

/** torch.optim.SGD(lr, momentum, weight_decay); checked by tg_optim_new. */
tg_optim_config tg_sgd_config(double lr, double momentum, double weight_decay);
/** torch.optim.Adam(lr) with its defaults; checked by tg_optim_new. */
tg_optim_config tg_adam_config(double lr);
/** torch.optim.AdamW(lr, weight_decay) with its defaults; checked by
 * tg_optim_new. */
tg_optim_config tg_adamw_config(double lr, double weight_decay);

/** An optimizer: its config, the parameters and their state. Opaque. */
typedef struct tg_optim tg_optim;

/** An optimizer over the parameters in ps (the list is copied; the tensors
 * are retained). New, free with tg_optim_free. NULL on error: a NULL list, a
 * NULL, non-float or repeated parameter, a config torch.optim would reject
 * (lr, weight_decay, momentum or eps negative or NaN, beta1 or beta2 outside
 * [0, 1), an unknown kind), or no memory. */
tg_optim *tg_optim_new(const tg_params *ps, tg_optim_config cfg);
/** Releases the optimizer's references and state. NULL-safe. */
void tg_optim_free(tg_optim *o);
/** One update from the current gradients, exactly torch.optim's rule
 * (parameters without a gradient are skipped), in place, each parameter at
 * its group's rate lr * lr_scale and weight decay. 0, or -1 for a NULL
 * optimizer, no memory for the state, or a state written (tg_optim_state)
 * with a negative, infinite or NaN rate or group setting, or a negative
 * step count, or a parameter with a gradient that tg_add_ would refuse (a
 * tape entry of a backward still to run holds it: tg_backward_retain's
 * graph; the error names the parameter and the entry) (then no parameter
 * changed). Each step adds one to its parameters' versions (tg_set). */
int tg_optim_step(tg_optim *o);
/** tg_zero_grad on every parameter. NULL-safe. */
void tg_optim_zero_grad(tg_optim *o);

/* ---- Learning rate, parameter groups, schedules, state ------------- */
/* nanoGPT's training loop (train.py) with these:
 *
 *     tg_params decay, no_decay;               // dim >= 2 decays
 *     tg_params_init(&decay), tg_params_init(&no_decay);
 *     tg_params_split_decay(&model, &decay, &no_decay);
 *     tg_optim_config cfg = tg_adamw_config(6e-4, 0);
 *     cfg.beta2 = 0.95;
 *     tg_optim *o = tg_optim_new_groups(
 *         (tg_param_group[]){{&decay, 0.1, 1}, {&no_decay, 0, 1}}, 2, cfg);
 *     if (resuming) tg_load_checkpoint(&model, o, "ckpt.npz");
 *     for (int it = start; it < max_iters; it++) {
 *         tg_optim_set_lr(o, tg_lr_warmup_cosine(it, 6e-4, 6e-5, 2000,
 *                                                600000));
 *         ... loss, tg_backward(loss) ...
 *         tg_clip_grad_norm(&model, 1.0);
 *         tg_optim_step(o);
 *         tg_optim_zero_grad(o);
 *         if (it % eval_interval == 0)
 *             tg_save_checkpoint(&model, o, "ckpt.npz");
 *     }
 *
 * A run saved at iteration N and loaded into fresh objects continues bit
 * for bit as the run that never stopped (the start iteration is the
 * caller's to keep). */

/** The base learning rate from the next step on (each group's rate is lr
 * times its lr_scale); the moments and step counts are kept. 0, or -1 for a
 * NULL optimizer or an lr that is negative, infinite or NaN (then nothing
 * changes). */
int tg_optim_set_lr(tg_optim *o, double lr);
/** The base learning rate; NaN with an error for a NULL optimizer. */
double tg_optim_get_lr(const tg_optim *o);

/** A parameter group, as an entry of torch's param_groups: its parameters
 * (the list is copied by tg_optim_new_groups), its weight decay (replacing
 * the config's) and a scale on the learning rate: its parameters step with
 * lr * lr_scale (1 for the base rate). */
typedef struct tg_param_group {
    const tg_params *params;
    double weight_decay;
    double lr_scale;
} tg_param_group;

/** An optimizer over n groups (g[0..n), n >= 0), each with its own weight
 * decay and lr scale; cfg gives the kind, the base lr and the rest
 * (cfg.weight_decay is not used). New, free with tg_optim_free. NULL on the
 * errors of tg_optim_new, a NULL g with n > 0, a NULL group list, a
 * weight_decay or lr_scale that is negative, infinite or NaN, or a
 * parameter in two groups (the error names it and both groups).
 * tg_optim_new(ps, cfg) is one group {ps, cfg.weight_decay, 1}. */
tg_optim *tg_optim_new_groups(const tg_param_group *g, int n,
                              tg_optim_config cfg);

/** Appends the parameters of all with 2 or more dims (matmul weights,
 * embeddings) to decay and the others (biases, layer-norm gains) to
 * no_decay, under their names: nanoGPT's two AdamW groups. 0, or -1 for a
 * NULL or repeated list, a NULL parameter, a name already in the list it
 * goes to, or no memory; then both lists are as they were. */
int tg_params_split_decay(const tg_params *all, tg_params *decay,
                          tg_params *no_decay);

/** A constant schedule: lr at every iteration it >= 0. NaN with an error
 * for it < 0 or an lr negative, infinite or NaN (as the others). */
double tg_lr_constant(int it, double lr);
/** torch's StepLR: lr multiplied by gamma at every multiple of step_size,
 * i.e. lr * gamma ... * gamma, it / step_size times, rounded as torch's
 * chained updates round. NaN with an error for it < 0, step_size <= 0, or
 * lr or gamma negative, infinite or NaN. */
double tg_lr_step(int it, double lr, int step_size, double gamma);
/** nanoGPT's get_lr(it), exactly: linear warmup max_lr * (it + 1) /
 * (warmup_iters + 1) for it < warmup_iters, then cosine decay
 * min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr), r = (it -
 * warmup_iters) / (lr_decay_iters - warmup_iters), up to lr_decay_iters,
 * and min_lr after. NaN with an error for it < 0, a rate negative, infinite
 * or NaN, warmup_iters < 0 or lr_decay_iters <= warmup_iters. */
double tg_lr_warmup_cosine(int it, double max_lr, double min_lr,
                           int warmup_iters, int lr_decay_iters);

/** Appends the optimizer's whole state to out, as named tensors the
 * optimizer owns (borrowed, as modules' parameters; valid until
 * tg_optim_free), so that it saves with tg_save_npz next to the parameters
 * and loads back by name. Buffers are made (zero) for parameters that
 * never stepped, so a fresh optimizer's list can take a saved one. With
 * P = prefix (none when NULL or ""):
 *   P.kind, P.momentum, P.beta1, P.beta2, P.eps   float64 (), the config
 *   P.lr                                          float64 (), the base rate
 *   P.n_groups                                    int64 ()
 *   P.groups.G.n_params                           int64 ()
 *   P.groups.G.weight_decay, P.groups.G.lr_scale  float64 ()
 *   P.state.NAME.step                             int64 () steps taken
 *   P.state.NAME.exp_avg, .exp_avg_sq             Adam(W): NAME's shape
 *   P.state.NAME.momentum_buffer                  SGD with momentum
 * for each group G and parameter NAME. Writing into the rate, group
 * settings, steps and buffers changes the optimizer (tg_optim_step checks
 * the scalars); kind, config, n_groups and n_params are only read back by
 * tg_load_checkpoint, which checks them. 0, or -1 for a NULL optimizer or
 * list, a name longer than TG_PARAM_NAME_MAX - 1, a name already in out,
 * or no memory (out is then as it was). */
int tg_optim_state(tg_optim *o, tg_params *out, const char *prefix);

/** One .npz (tg_save_npz) holding the model's parameters under their names
 * and the optimizer's state under the prefix "optim" (tg_optim_state): all
 * a run needs to go on exactly where it stopped. 0, or -1 for a NULL
 * argument, a name clash, or the errors of tg_save_npz (atomic as it). */
int tg_save_checkpoint(const tg_params *model, tg_optim *o, const char *path);
/** Loads a tg_save_checkpoint file into the model's parameters and o (a
 * fresh optimizer made as the saved one was, or any such): the run then
 * continues bit for bit as the uninterrupted one. All or nothing: a missing
 * entry, another shape or dtype (the errors of tg_load_npz, naming the
 * entry), an entry this model and optimizer do not have (the checkpoint of
 * another model: named), or another optimizer's state (another kind or config, number of
 * groups or of parameters in a group, naming the entry), or a negative
 * rate, setting or step count, or a tensor tg_copy_ would refuse (held by
 * a backward still to run), is an error and changes nothing. Needs
 * memory for a second copy of the parameters and state while it loads.
 * 0 or -1. */
int tg_load_checkpoint(const tg_params *model, tg_optim *o, const char *path);

/* ===================================================================== */
/* Checkpoints                                                            */
/* ===================================================================== */

/** Saves every parameter as an entry `<name>.npy` of one uncompressed .npz
 * (numpy.load reads it). 0, or -1 for a NULL list or path, a NULL parameter,
 * a checkpoint past zip's limits without zip64 (4 GiB, 65534 parameters), a
 * file that cannot be written, or no memory.
 *
 * Atomic, as tg_save_npy: a failed save, or one refused for its size,
 * leaves the checkpoint that was at path byte for byte as it was. A program
 * that sets a file-size limit should ignore SIGXFSZ to get -1 rather than be
 * killed midway (see tg_save_npy). */
int tg_save_npz(const tg_params *ps, const char *path);
/** Loads values by name into the parameters, in place: each entry must have
 * the parameter's shape, and its dtype, except that float32 and float64
 * convert into each other. Entries may be stored or deflated (numpy.savez
 * and numpy.savez_compressed both load); the archive is read with libzip.
 * A missing entry, another shape or dtype, a file that is not a readable
 * .npz, or no memory is an error naming the parameter or the file, and then
 * nothing is changed. Entries no parameter asks for are left in the file:
 * a subset of a checkpoint loads (a pretrained part into a larger model),
 * while tg_load_checkpoint refuses a checkpoint with anything its model and
 * optimizer do not have. A parameter that a backward still to run holds
 * (tg_backward_retain) is refused, as by the in-place updates. 0 or -1. */
int tg_load_npz(const tg_params *ps, const char *path);

/* ---- Reading whole checkpoints, and .safetensors ----------------------- */

/** Reads every entry `<name>.npy` of the .npz at path as a NEW tensor
 * appended to out under `<name>` (in the archive's order), for loaders that
 * map names themselves. The tensors belong to out: release them with
 * tg_params_release, never with tg_params_free alone. All or nothing: on -1
 * (an entry that is not .npy, a name longer than TG_PARAM_NAME_MAX - 1 or
 * already in out, any error of tg_load_npz) out is as it was. 0 or -1. */
int tg_read_npz(const char *path, tg_params *out);

/** Saves every parameter into one .safetensors file (the format of Hugging
 * Face's safetensors library, safetensors.torch.save_file): 8 bytes of
 * header length (little-endian), a JSON header written with jansson,
 * `{"__metadata__":{"format":"pt"},"<name>":{"dtype":"F32","shape":[2,3],
 * "data_offsets":[begin,end]},...}` in the list's order, padded with spaces
 * so that the data starts at a multiple of 8, then the data, each tensor's
 * offset a multiple of its element size (8-byte dtypes first, bool last).
 * float32, float64, int64 and bool parameters are written as F32, F64, I64
 * and BOOL, bit for bit. 0, or -1 for a NULL list or path, a NULL
 * parameter, a name twice in the list, named "__metadata__" or not valid
 * UTF-8, a file that cannot be written, or no memory. Atomic as tg_save_npz: a failure leaves
 * the file that was at path byte for byte as it was. */
int tg_save_safetensors(const tg_params *ps, const char *path);
/** Loads values by name into the parameters, in place, as tg_load_npz: each
 * tensor must have the parameter's shape; a float parameter takes F32, F64,
 * BF16 or F16 (converted), an int64 one I64, I32, U32, I16, U16, I8 or U8
 * (widened), a bool one BOOL. Tensors of the file that no parameter names
 * are ignored, and so is "__metadata__". The whole file is
 * checked first: a header that is not JSON or lies (its length past the
 * file, offsets out of range, overlapping, leaving gaps or not aligned to
 * the element size, sizes that do not match shape times dtype, an unknown
 * dtype, a name twice), a missing tensor, another shape or dtype is an
 * error naming the tensor or the file, and then nothing is changed; so is
 * a parameter that a backward still to run holds. 0 or -1. */
int tg_load_safetensors(const tg_params *ps, const char *path);
/** Reads every tensor of the .safetensors file at path as a NEW tensor
 * appended to out, named as in the file, in the header's order: F32, BF16
 * and F16 as float32, F64 as float64, I64, I32, U32, I16, U16, I8 and U8 as
 * int64 (every value exactly), BOOL as bool (a byte other than 0 or 1 is
 * an error); U64 and the 8-bit floats are refused. The tensors belong to
 * out: release them with tg_params_release. All or nothing, with
 * tg_load_safetensors' checks, plus a name longer than
 * TG_PARAM_NAME_MAX - 1 or already in out: on -1, out is as it was. 0 or
 * -1. */
int tg_read_safetensors(const char *path, tg_params *out);
/** For a list that owns its tensors (filled by tg_read_safetensors or
 * tg_read_npz): releases every tensor, then frees the list (as
 * tg_params_free) and leaves it empty. Never on a module's list, whose
 * tensors the module owns. NULL-safe. */
void tg_params_release(tg_params *ps);

/* ===================================================================== */
/* Pretrained GPT checkpoints (nanoGPT, Hugging Face GPT-2)               */
/* ===================================================================== */

/** Builds g from a state dict of nanoGPT's GPT or Hugging Face's GPT-2 (the
 * tensors of tg_read_safetensors or tg_read_npz), n_head heads, dtype dt.
 *
 * Naming: nanoGPT's "transformer.<name>" (its model.state_dict()), GPT-2's
 * "<name>" with no prefix (GPT2Model, as the Hugging Face files hold it),
 * either under "_orig_mod." too (a torch.compile'd model's); "lm_head.weight"
 * is never prefixed. Layout: nanoGPT's layers are torch.nn.Linear, weight
 * (out,in); GPT-2's are Conv1D, weight (in,out): told apart by
 * h.0.attn.c_attn.weight, (3C,C) or (C,3C). Ours is (in,out) (y = x @ W), so
 * Linear weights are transposed, Conv1D ones copied. With C = n_embd, hs =
 * C / n_head, L the layer:
 *
 *     wte.weight (V,C)             tok.weight                 V = vocab_size
 *     wpe.weight (T,C)             pos.weight                 T = block_size
 *     h.L.ln_1.weight, .bias (C)   blocks.L.ln1.gamma, .beta
 *     h.L.attn.c_attn.weight       blocks.L.attn.heads.H.w_q, w_k, w_v (C,hs):
 *       (3C,C) | (C,3C)              q, k, v are its outputs [0,C), [C,2C),
 *                                    [2C,3C); head H their [H hs, (H+1) hs)
 *     h.L.attn.c_attn.bias (3C)    blocks.L.attn.heads.H.b_q, b_k, b_v (hs),
 *                                    split the same way
 *     h.L.attn.c_proj.weight, .bias  blocks.L.attn.proj.weight (C,C), .bias
 *     h.L.ln_2.weight, .bias       blocks.L.ln2.gamma, .beta
 *     h.L.mlp.c_fc.weight, .bias   blocks.L.mlp.fc.weight (C,4C), .bias (4C)
 *     h.L.mlp.c_proj.weight, .bias blocks.L.mlp.proj.weight (4C,C), .bias
 *     ln_f.weight, .bias           ln_f.gamma, .beta
 *     lm_head.weight (V,C)         lm_head.weight (C,V), transposed; or tied
 *     h.L.attn.bias, h.L.attn.masked_bias   the causal-mask buffers: ignored
 *
 * The config comes from the shapes: vocab_size and n_embd from wte,
 * block_size from wpe, n_layer from the largest L, biases everywhere
 * (TG_GPT_BIAS_ALL: nanoGPT's bias=True, GPT-2) when ln_f.bias is there,
 * else none (TG_GPT_BIAS_NONE: bias=False); n_head, which the shapes do not
 * give, from the caller. lm_head is tied to wte (tie_weights) when the file
 * has no lm_head.weight (safetensors files keep one name of two shared
 * tensors) or one equal to wte; else it is a separate (C,V) weight. A file
 * with lm_head.weight and no wte.weight is a tied model saved under the
 * other name (safetensors' save_model keeps the first in sorted order,
 * "lm_head.weight"): that tensor is the token table. GELU: the exact (erf) form
 * for nanoGPT's Linear layout, the tanh form (gelu_tanh) for GPT-2's
 * Conv1D (tg_gpt_from_state_dict_with takes another). Layer norms' eps
 * 1e-5, no dropout; the model starts in training mode as tg_gpt_init
 * leaves it (without dropout this changes nothing).
 * Values convert to dt (float32 or float64 files, and what
 * tg_read_safetensors widens: BF16, F16).
 *
 * g is overwritten (not freed first: pass a zeroed or freed model); free it
 * with tg_gpt_free. sd is only read. 0, or -1 with g zeroed and nothing
 * built, for: a NULL g or sd, dt not float32 or float64, no wpe.weight
 * under a known prefix, neither wte.weight nor lm_head.weight, a
 * tensor missing (a bias missing in a biased model too) or of the wrong
 * shape ("tensor 'h.0.attn.c_proj.weight' has shape (16,8), the model
 * needs (16,16)"), not float, or unknown to the mapping (a bias in a model
 * without, "lm_head.bias", any other name), n_head not dividing n_embd, or
 * no memory. */
int tg_gpt_from_state_dict(tg_gpt *g, const tg_params *sd, int n_head,
                           tg_dtype dt);
/** Reads path (a .safetensors file; a .npz when its name ends in ".npz")
 * and builds g from it as tg_gpt_from_state_dict, releasing the file's
 * tensors. 0, or -1 with g zeroed: the errors of tg_read_safetensors /
 * tg_read_npz and tg_gpt_from_state_dict, prefixed with the path. */
int tg_gpt_load_pretrained(tg_gpt *g, const char *path, int n_head,
                           tg_dtype dt);

/** The GELU form a loader gives the model (tg_gpt_load_opts.gelu). */
typedef enum tg_gelu_form {
    /** What the file implies (0): the exact erf form for nanoGPT's Linear
     * layout, the tanh form for GPT-2's Conv1D and for llm.c's files. */
    TG_GELU_AUTO = 0,
    TG_GELU_ERF,  /**< exact, x Phi(x): torch's nn.GELU(), "gelu" */
    TG_GELU_TANH, /**< the tanh approximation: GPT-2's "gelu_new" */
} tg_gelu_form;

/** A buffer of this many chars always holds the whole loading_info line. */
#define TG_GPT_LOADING_INFO_MAX 256

/** What a loader is told beyond the file, as the keyword overrides of
 * Hugging Face's from_pretrained(path, **kwargs): zero fields are the
 * defaults, so {.n_head = 12} loads as tg_gpt_load_pretrained(g, path, 12,
 * TG_FLOAT32) does. An override wins over what the weights' naming
 * implies. */
typedef struct tg_gpt_load_opts {
    int n_head;        /**< heads (the shapes do not give it): > 0, dividing
                      n_embd; for llm.c's files 0 (the header's) or the
                      header's */
    tg_dtype dtype;    /**< the model's: TG_FLOAT32 (0) or TG_FLOAT64 */
    tg_gelu_form gelu; /**< TG_GELU_AUTO: from the naming */
    tg_head_path attn_path; /**< tg_gpt_config.attn_path (TG_HEAD_COMPOSED) */
    /** When not NULL: loading_info_size chars that receive, on success, one
     * line of what was chosen and why (truncated to fit, NUL-terminated),
     * "gelu: tanh (GPT-2 Conv1D naming), attention: tiled (option), 12
     * layers, 12 heads, C 768, block 1024, vocab 50257, tied head, biases,
     * float32" (as from_pretrained's output_loading_info; the library
     * never prints). TG_GPT_LOADING_INFO_MAX chars always hold all of it. */
    char *loading_info;
    size_t loading_info_size;
} tg_gpt_load_opts;

/** tg_gpt_from_state_dict with the options of opts (n_head and dtype from
 * it, the GELU form and the attention path as it says). The same errors,
 * and for a NULL opts, a gelu that is not a tg_gelu_form or an attn_path
 * that is not a tg_head_path. */
int tg_gpt_from_state_dict_with(tg_gpt *g, const tg_params *sd,
                                const tg_gpt_load_opts *opts);
/** tg_gpt_load_pretrained with the options of opts (as
 * tg_gpt_from_state_dict_with); its errors, prefixed with the path. */
int tg_gpt_load_pretrained_with(tg_gpt *g, const char *path,
                                const tg_gpt_load_opts *opts);

/** g's parameters under GPT-2's names (Hugging Face's GPT2Model:
 * "wte.weight", "h.0.attn.c_attn.weight"..., Conv1D's (in, out) layout),
 * appended to out, the inverse of tg_gpt_from_state_dict: c_attn is the
 * heads' q | k | v (zeros for a model without q/k/v biases); an untied head
 * adds "lm_head.weight" (V,C); a model without biases has none. Tensors
 * that keep their layout are g's own (one more reference each, as torch's
 * state_dict shares storage); release with tg_params_release. 0, or -1 with
 * out as it was for NULL or uninitialised arguments, no memory, or a model
 * GPT-2's names would load as another: not the tanh GELU (GPT-2's layout
 * means it to tg_gpt_from_state_dict), a layer-norm eps other than 1e-5,
 * another score scale. */
int tg_gpt_state_dict(tg_gpt *g, tg_params *out);
/** tg_gpt_state_dict written as a .safetensors file (the model's dtype),
 * which tg_gpt_load_pretrained and Hugging Face's GPT2 read back. 0, or -1
 * with the error of either call. */
int tg_gpt_save_pretrained(tg_gpt *g, const char *path);

/* ---- llm.c's files ------------------------------------------------------ */

/** Reads llm.c's GPT-2 checkpoint (gpt2_124M.bin, what train_gpt2.c and
 * train_gpt2.py's write_model write: a 256-int header, magic 20240326,
 * version 3 for float32 weights or 5 for bfloat16, then the weights in
 * llm.c's order) and builds g from it: GPT-2 as llm.c runs it, every bias,
 * the tanh GELU, layer norms of eps 1e-5, the head tied to the token
 * table, n_head and the sizes from the header, values converted to dt
 * (float32 or float64). The vocabulary's padding rows (the header's Vp
 * beyond V; llm.c never reads them) are dropped. 0, or -1 with g zeroed
 * and the error naming the file: a magic, version or sizes that are not
 * llm.c's, a file that is not exactly the size its header asks for, a
 * read that fails, and tg_gpt_init's errors for the header's sizes. The
 * model is built first (no random draws) and each tensor read straight
 * into its parameter, so the load peaks at about the model's bytes. */
int tg_gpt_load_llmc(tg_gpt *g, const char *path, tg_dtype dt);
/** tg_gpt_load_llmc with the options of opts (tg_gpt_load_opts: dtype, the
 * GELU form, TG_GELU_AUTO being llm.c's tanh, the attention path,
 * loading_info); opts->n_head is 0 or the header's. Its errors, and a bad
 * opts's. */
int tg_gpt_load_llmc_with(tg_gpt *g, const char *path,
                          const tg_gpt_load_opts *opts);
/** Writes g as llm.c's checkpoint (version 3: float32, the vocabulary
 * padded with zero rows to a multiple of 128, as llm.c's export does), so
 * llm.c's train_gpt2.c can go on from it; biases g lacks are written as
 * zeros (the same function). Through a temporary renamed over path: on
 * failure an old file at path is as it was. 0, or -1 for a NULL or
 * uninitialised g or NULL path, a model llm.c cannot run (not the tanh
 * GELU, an untied head, and what tg_gpt_state_dict refuses; the error
 * names it), or a write that fails. */
int tg_gpt_save_llmc(tg_gpt *g, const char *path);
/** Reads an llm.c token shard (dev/data's .bin: a 256-int header, then
 * GPT-2's uint16 tokens, magic 20240520 version 1, or LLaMA 3's uint32,
 * magic 20240801 version 7) as an int64 tensor (n). NULL with an error
 * naming the file for another magic or version, or a size other than the
 * header's count says. */
tg_tensor *tg_load_tokens_llmc(const char *path);
/** Writes tokens (int64, any shape, in C order, each in [0, 65535]) as a
 * GPT-2 token shard llm.c's dataloader reads. Through a temporary, as
 * tg_gpt_save_llmc. 0, or -1 for NULL arguments, tokens not int64, a token
 * out of range (named, with its index), 2^31 tokens or more, or a write
 * that fails. */
int tg_save_tokens_llmc(const tg_tensor *tokens, const char *path);

#ifdef __cplusplus
}
#endif

/* This header's call-site macros, now that its declarations are complete
 * (see the end of tapegrad.h). */
#define TAPEGRAD_NN_H_DECLARED
#include "tapegrad_callsite.h"

#endif /* TAPEGRAD_NN_H */
