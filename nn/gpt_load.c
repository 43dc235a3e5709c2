/* nanoGPT and Hugging Face GPT-2 state dicts into a tg_gpt: the names
 * mapped, the fused q/k/v split into heads, the weights transposed to ours
 * (x @ W, W (in,out)) where the file's layout needs it. The mapping is
 * documented in include/tapegrad_nn.h, beside the declarations. */
#include "core/shared.h"
#include "nn/formats.h"
#include "nn/names.h"
#include "nn/nn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The two layouts of a linear layer's weight in such files. */
typedef enum layout {
    LINEAR, /* torch.nn.Linear (nanoGPT): (out,in), y = x @ W^T + b */
    CONV1D  /* Hugging Face's Conv1D (GPT-2): (in,out), y = x @ W + b */
} layout;

/* The state dict as the loader reads it: names below a prefix, and which
 * entries a mapping (or the ignored buffers) has used, so that whatever is
 * left over is an unknown name. */
typedef struct source {
    const tg_params *sd;
    const char *prefix;  /* before every name but lm_head's */
    const char *outer;   /* before lm_head.weight */
    bool *used;          /* sd->n flags */
    tg__names by_name;   /* sd's names sorted: a lookup is log n comparisons,
                           where a scan per name made a state dict of n
                           tensors n^2 / 2 (a hostile llm.c file of 8,000
                           layers: 100 s) */
    tg__st_stream *file; /* where the values are read from when sd holds
                            placeholders (tg_gpt_load_pretrained), or NULL */
} source;

/* Where the name prefix + fmt... sits in the state dict, or -1. */
__attribute__((format(printf, 3, 4))) static int
find(const source *s, const char *prefix, const char *fmt, ...)
{
    char name[2 * TG_PARAM_NAME_MAX];
    int len = snprintf(name, sizeof name, "%s", prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + len, sizeof name - (size_t)len, fmt, ap);
    va_end(ap);
    return (int)tg__names_find(&s->by_name, name);
}

/* One tensor the model needs: its place in the state dict. */
typedef struct entry {
    int index;
} entry;

/* Errors unless the entry called prefix + name exists with the given shape
 * and a float dtype; marks it used. */
static bool expect(const source *s, entry *e, const char *prefix,
                   const char *name, int ndim, int64_t d0, int64_t d1)
{
    char full[2 * TG_PARAM_NAME_MAX];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    e->index = find(s, prefix, "%s", name);
    if (e->index < 0) {
        tg__error("gpt_from_state_dict: missing tensor '%s'", full);
        return false;
    }
    tg_tensor *t = s->sd->items[e->index].t;
    s->used[e->index] = true;
    char want[TG_SHAPE_STR];
    tg__shape_str(ndim, (const int64_t[]){d0, d1}, want);
    if (!t) {
        tg__error("gpt_from_state_dict: tensor '%s' is NULL", full);
        return false;
    }
    if (tg_ndim(t) != ndim || tg_size(t, 0) != d0 ||
        (ndim == 2 && tg_size(t, 1) != d1)) {
        tg__error("gpt_from_state_dict: tensor '%s' has shape %s, the model "
                  "needs %s",
                  full, TG_SHP(t), want);
        return false;
    }
    if (tg_dtype_of(t) != TG_FLOAT32 && tg_dtype_of(t) != TG_FLOAT64) {
        tg__error("gpt_from_state_dict: tensor '%s' is %s, not float", full,
                  tg_dtype_name(tg_dtype_of(t)));
        return false;
    }
    return true;
}

/* The entries of one block, in the file's names below "h.<i>.". */
typedef struct block_entries {
    entry ln_1_w, ln_1_b, ln_2_w, ln_2_b;
    entry c_attn_w, c_attn_b, attn_proj_w, attn_proj_b;
    entry c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b;
} block_entries;

/* The whole model's entries and what the shapes say. */
typedef struct plan {
    tg_gpt_config cfg;
    layout lay;
    entry wte, wpe, ln_f_w, ln_f_b, lm_head;
    bool has_lm_head;
    block_entries *blocks;
} plan;

/* Errors unless block i's entries exist with the shapes of C = n_embd in
 * the layout (and biases exactly when the model has them). */
static bool expect_block(const source *s, const plan *p, int i,
                         block_entries *b)
{
    char pre[TG_PARAM_NAME_MAX + 32];
    snprintf(pre, sizeof pre, "%sh.%d.", s->prefix, i);
    int64_t C = p->cfg.n_embd, F = 4 * C;
    bool lin = p->lay == LINEAR, bias = p->cfg.bias != TG_GPT_BIAS_NONE;
    /* a Linear's (out,in) is a Conv1D's (in,out) transposed */
#define W(e, name, in, out)                                                    \
    expect(s, &b->e, pre, name, 2, lin ? (out) : (in), lin ? (in) : (out))
#define V(e, name, n) (!bias || expect(s, &b->e, pre, name, 1, n, 0))
    return expect(s, &b->ln_1_w, pre, "ln_1.weight", 1, C, 0) &&
           V(ln_1_b, "ln_1.bias", C) &&
           W(c_attn_w, "attn.c_attn.weight", C, 3 * C) &&
           V(c_attn_b, "attn.c_attn.bias", 3 * C) &&
           W(attn_proj_w, "attn.c_proj.weight", C, C) &&
           V(attn_proj_b, "attn.c_proj.bias", C) &&
           expect(s, &b->ln_2_w, pre, "ln_2.weight", 1, C, 0) &&
           V(ln_2_b, "ln_2.bias", C) && W(c_fc_w, "mlp.c_fc.weight", C, F) &&
           V(c_fc_b, "mlp.c_fc.bias", F) &&
           W(mlp_proj_w, "mlp.c_proj.weight", F, C) &&
           V(mlp_proj_b, "mlp.c_proj.bias", C);
#undef W
#undef V
}

/* The name prefix of the file, found by wpe (the one tensor every such file
 * has under the prefix: wte may be saved as lm_head.weight, see
 * token_table): nanoGPT's "transformer.", none (GPT-2's GPT2Model), or
 * either below "_orig_mod." (a torch.compile'd model's state dict, which
 * nanoGPT's train.py strips the same way). */
static bool find_prefix(source *s)
{
    static const char *const prefixes[][2] = {
        {"transformer.", ""},
        {"", ""},
        {"_orig_mod.transformer.", "_orig_mod."},
        {"_orig_mod.", "_orig_mod."}};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (find(s, prefixes[k][0], "wpe.weight") >= 0) {
            s->prefix = prefixes[k][0];
            s->outer = prefixes[k][1];
            return true;
        }
    tg__error("gpt_from_state_dict: no 'transformer.wpe.weight' or "
              "'wpe.weight' among the %d tensors: not a nanoGPT or GPT-2 "
              "state dict",
              s->sd->n);
    return false;
}

/* n_layer: one more than the largest i of a name "<prefix>h.<i>.". */
static int count_layers(const source *s)
{
    size_t len = strlen(s->prefix);
    long n = 0;
    for (int i = 0; i < s->sd->n; i++) {
        const char *name = s->sd->items[i].name;
        if (strncmp(name, s->prefix, len) || strncmp(name + len, "h.", 2))
            continue;
        char *end;
        long k = strtol(name + len + 2, &end, 10);
        if (end != name + len + 2 && *end == '.' && k >= 0 && k < 100000 &&
            k + 1 > n)
            n = k + 1;
    }
    return (int)n;
}

/* Marks the causal-mask buffers as used: nanoGPT's "attn.bias" (1,1,T,T)
 * when it runs without flash attention, GPT-2's "attn.bias" and
 * "attn.masked_bias". Ours builds its mask, so their values do not
 * matter. */
static void skip_buffers(const source *s, int n_layer)
{
    for (int i = 0; i < n_layer; i++) {
        int a = find(s, s->prefix, "h.%d.attn.bias", i);
        int m = find(s, s->prefix, "h.%d.attn.masked_bias", i);
        if (a >= 0)
            s->used[a] = true;
        if (m >= 0)
            s->used[m] = true;
    }
}

/* Where the token table is: wte.weight; or, when the file has none,
 * lm_head.weight, the same tensor in a tied model, under the name that
 * safetensors' save_model keeps of the two (the first in sorted order:
 * "lm_head.weight" < "transformer.wte.weight"). -1 with an error when
 * neither is there; *as_lm_head tells which. */
static int token_table(const source *s, bool *as_lm_head)
{
    int w = find(s, s->prefix, "wte.weight");
    int lm = find(s, s->outer, "lm_head.weight");
    *as_lm_head = w < 0 && lm >= 0;
    if (w < 0 && lm < 0)
        tg__error("gpt_from_state_dict: missing tensor '%swte.weight' (nor "
                  "is there a tied '%slm_head.weight')",
                  s->prefix, s->outer);
    return w >= 0 ? w : lm;
}

/* The layout of the file's linear weights, told by block 0's c_attn: a
 * Conv1D's is (C,3C), a Linear's (3C,C) (or anything else, which
 * expect_block then refuses in the Linear's terms). */
static layout layout_of(const source *s, int64_t C)
{
    int ca = find(s, s->prefix, "h.0.attn.c_attn.weight");
    tg_tensor *c_attn = ca >= 0 ? s->sd->items[ca].t : NULL;
    return c_attn && tg_ndim(c_attn) == 2 && tg_size(c_attn, 0) == C &&
                   tg_size(c_attn, 1) == 3 * C
               ? CONV1D
               : LINEAR;
}

/* Errors unless the sizes read off the shapes make a model: V = vocab_size
 * and C = n_embd from the token table wte (named wte_name), T = block_size
 * from wpe, n_layer blocks, and n_head dividing C. */
static bool check_sizes(const source *s, const char *wte_name,
                        const tg_tensor *wte, int64_t T, int n_layer,
                        int n_head)
{
    int64_t V = tg_size(wte, 0), C = tg_size(wte, 1);
    if (n_layer == 0) {
        tg__error("gpt_from_state_dict: no blocks ('%sh.0.*') in the state "
                  "dict",
                  s->prefix);
        return false;
    }
    if (V > 1 << 30 || C > 1 << 30 || T > 1 << 30) {
        tg__error("gpt_from_state_dict: sizes too large: vocab_size %lld, "
                  "n_embd %lld, block_size %lld",
                  (long long)V, (long long)C, (long long)T);
        return false;
    }
    if (n_head <= 0 || C % n_head) {
        tg__error("gpt_from_state_dict: n_head %d does not divide n_embd "
                  "%lld (from '%s' %s)",
                  n_head, (long long)C, wte_name, TG_SHP(wte));
        return false;
    }
    return true;
}

/* Step 1 of the plan: finds the name prefix and the token table (*w, and
 * whether it is lm_head.weight), then reads p->cfg and p->lay off the
 * shapes: V and C from the table (V,C), T from wpe (T,C), n_layer from the
 * block names, biases from ln_f.bias; the GELU form from the layout unless
 * o names one, the attention path from o. tie_weights is settled later, by
 * tie_lm_head. */
static bool read_config(const source *s, const tg_gpt_load_opts *o, plan *p,
                        int *w, bool *as_lm_head)
{
    *w = token_table(s, as_lm_head);
    if (*w < 0)
        return false;
    const char *wte_name = s->sd->items[*w].name;
    tg_tensor *wte = s->sd->items[*w].t;
    if (!wte || tg_ndim(wte) != 2) {
        tg__error("gpt_from_state_dict: tensor '%s' must be (vocab_size, "
                  "n_embd), got %s",
                  wte_name, wte ? TG_SHP(wte) : "NULL");
        return false;
    }
    int wp = find(s, s->prefix, "wpe.weight");
    tg_tensor *wpe = wp >= 0 ? s->sd->items[wp].t : NULL;
    int64_t T = wpe && tg_ndim(wpe) == 2 ? tg_size(wpe, 0) : 1;
    int n_layer = count_layers(s);
    if (!check_sizes(s, wte_name, wte, T, n_layer, o->n_head))
        return false;
    int64_t V = tg_size(wte, 0), C = tg_size(wte, 1);
    p->lay = layout_of(s, C);
    bool bias = find(s, s->prefix, "ln_f.bias") >= 0;
    p->cfg = (tg_gpt_config){
        .vocab_size = (int)V,
        .block_size = (int)T,
        .n_embd = (int)C,
        .n_head = o->n_head,
        .n_layer = n_layer,
        .gelu = true,
        .dtype = o->dtype,
        .bias = bias ? TG_GPT_BIAS_ALL : TG_GPT_BIAS_NONE,
        .tie_weights = true,
        .gelu_tanh = o->gelu == TG_GELU_AUTO ? p->lay == CONV1D
                                             : o->gelu == TG_GELU_TANH,
        .attn_path = o->attn_path,
    };
    return true;
}

/* Step 2: every entry the model of p->cfg needs exists with its shape:
 * the token table (as found: wte.weight, or lm_head.weight), wpe, each
 * block, ln_f. */
static bool expect_entries(const source *s, plan *p, bool as_lm_head)
{
    int64_t V = p->cfg.vocab_size, C = p->cfg.n_embd, T = p->cfg.block_size;
    bool bias = p->cfg.bias != TG_GPT_BIAS_NONE;
    p->blocks = tg__calloc((size_t)p->cfg.n_layer, sizeof *p->blocks);
    if (!p->blocks) {
        tg__error("gpt_from_state_dict: out of memory for %d blocks",
                  p->cfg.n_layer);
        return false;
    }
    if (!expect(s, &p->wte, as_lm_head ? s->outer : s->prefix,
                as_lm_head ? "lm_head.weight" : "wte.weight", 2, V, C) ||
        !expect(s, &p->wpe, s->prefix, "wpe.weight", 2, T, C))
        return false;
    for (int i = 0; i < p->cfg.n_layer; i++)
        if (!expect_block(s, p, i, &p->blocks[i]))
            return false;
    return expect(s, &p->ln_f_w, s->prefix, "ln_f.weight", 1, C, 0) &&
           (!bias || expect(s, &p->ln_f_b, s->prefix, "ln_f.bias", 1, C, 0));
}

/* Step 3: lm_head is an nn.Linear (V,C) in both families; tied when the
 * file drops it (safetensors keeps one of two shared tensors) or holds a
 * copy of wte (the tensor at index w). */
static bool tie_lm_head(const source *s, plan *p, int w, bool as_lm_head)
{
    p->has_lm_head = !as_lm_head && find(s, s->outer, "lm_head.weight") >= 0;
    if (p->has_lm_head && !expect(s, &p->lm_head, s->outer, "lm_head.weight", 2,
                                  p->cfg.vocab_size, p->cfg.n_embd))
        return false;
    if (!p->has_lm_head)
        return true;
    if (s->file)
        return tg__st_equal(s->file, p->lm_head.index, w,
                            &p->cfg.tie_weights) == 0;
    p->cfg.tie_weights =
        tg_allclose(s->sd->items[p->lm_head.index].t, s->sd->items[w].t, 0, 0);
    return true;
}

/* Step 4: once the entries and the buffers are marked used, any name left
 * over is one the model does not have. */
static bool check_unknown(const source *s, const plan *p)
{
    skip_buffers(s, p->cfg.n_layer);
    for (int i = 0; i < s->sd->n; i++)
        if (!s->used[i]) {
            tg__error("gpt_from_state_dict: unknown tensor '%s' (not a "
                      "name of a %s model with%s biases)",
                      s->sd->items[i].name,
                      p->lay == LINEAR ? "nanoGPT" : "GPT-2",
                      p->cfg.bias != TG_GPT_BIAS_NONE ? "" : "out");
            return false;
        }
    return true;
}

/* Reads the config off the shapes and checks every entry (all before the
 * model is touched), in the steps above. */
static bool make_plan(source *s, const tg_gpt_load_opts *o, plan *p)
{
    int w;
    bool as_lm_head;
    return find_prefix(s) && read_config(s, o, p, &w, &as_lm_head) &&
           expect_entries(s, p, as_lm_head) &&
           tie_lm_head(s, p, w, as_lm_head) && check_unknown(s, p);
}

/* dst = src[start : start + len] along dim (the whole of src when len is
 * 0), transposed when transpose is set, src being the state dict's entry
 * index: a view of the file's tensor copied into the parameter in place,
 * converting the dtype. A whole entry of a streamed file goes straight
 * from the file, a chunk at a time; a part, from the entry read whole once
 * (tg__st_tensor keeps it for the next part). 0 or -1 (no memory for the
 * view, a read error). */
static int copy_part(const source *s, tg_tensor *dst, int index, int dim,
                     int64_t start, int64_t len, bool transpose)
{
    if (s->file && !len)
        return tg__st_copy(s->file, index, dst, transpose);
    tg_tensor *src =
        s->file ? tg__st_tensor(s->file, index) : s->sd->items[index].t;
    if (!src)
        return -1;
    tg_tensor *part = len ? tg_narrow(src, dim, start, len) : tg_retain(src);
    tg_tensor *view = part && transpose ? tg_transpose(part, 0, 1) : NULL;
    tg_tensor *from = transpose ? view : part;
    if (from)
        tg__copy_into(dst, from);
    tg_release(view);
    tg_release(part);
    return from ? 0 : -1;
}

/* A weight of the file into ours (in,out): a Linear's (out,in) transposed,
 * a Conv1D's as it is. */
static int copy_weight(const plan *p, const source *s, tg_tensor *dst,
                       const entry *e)
{
    return copy_part(s, dst, e->index, 0, 0, 0, p->lay == LINEAR);
}

static int copy_vector(const source *s, tg_tensor *dst, const entry *e)
{
    return copy_part(s, dst, e->index, 0, 0, 0, false);
}

/* Head h of the fused c_attn: q, k, v are the output columns [0,C),
 * [C,2C), [2C,3C) (nanoGPT's split(n_embd, dim=2)), and within each, head h
 * is [h hs, (h+1) hs) (its view(B,T,nh,hs)). In the file's layout the
 * output dim is 0 for a Linear (3C,C), 1 for a Conv1D (C,3C); ours is (C,hs)
 * and the bias (3C) splits the same way. */
static int copy_head(const plan *p, const source *s, const block_entries *b,
                     tg_head *head, int h)
{
    int64_t C = p->cfg.n_embd, hs = C / p->cfg.n_head;
    int out_dim = p->lay == LINEAR ? 0 : 1;
    bool lin = p->lay == LINEAR;
    tg_tensor *const ws[3] = {head->w_q, head->w_k, head->w_v};
    tg_tensor *const bs[3] = {head->b_q, head->b_k, head->b_v};
    for (int j = 0; j < 3; j++) {
        int64_t start = j * C + h * hs;
        if (copy_part(s, ws[j], b->c_attn_w.index, out_dim, start, hs, lin) <
                0 ||
            (bs[j] &&
             copy_part(s, bs[j], b->c_attn_b.index, 0, start, hs, false) < 0))
            return -1;
    }
    return 0;
}

static int copy_block(const plan *p, const source *s, const block_entries *e,
                      tg_block *b)
{
    bool bias = p->cfg.bias != TG_GPT_BIAS_NONE;
    if (copy_vector(s, b->ln1.gamma, &e->ln_1_w) < 0 ||
        copy_vector(s, b->ln2.gamma, &e->ln_2_w) < 0 ||
        copy_weight(p, s, b->attn.proj.weight, &e->attn_proj_w) < 0 ||
        copy_weight(p, s, b->mlp.fc.weight, &e->c_fc_w) < 0 ||
        copy_weight(p, s, b->mlp.proj.weight, &e->mlp_proj_w) < 0)
        return -1;
    if (bias && (copy_vector(s, b->ln1.beta, &e->ln_1_b) < 0 ||
                 copy_vector(s, b->ln2.beta, &e->ln_2_b) < 0 ||
                 copy_vector(s, b->attn.proj.bias, &e->attn_proj_b) < 0 ||
                 copy_vector(s, b->mlp.fc.bias, &e->c_fc_b) < 0 ||
                 copy_vector(s, b->mlp.proj.bias, &e->mlp_proj_b) < 0))
        return -1;
    for (int h = 0; h < p->cfg.n_head; h++)
        if (copy_head(p, s, e, &b->attn.heads[h], h) < 0)
            return -1;
    return 0;
}

/* Every value of the file into the model built from the plan. */
static int copy_all(const plan *p, const source *s, tg_gpt *g)
{
    if (copy_vector(s, g->tok.weight, &p->wte) < 0 ||
        copy_vector(s, g->pos.weight, &p->wpe) < 0 ||
        copy_vector(s, g->ln_f.gamma, &p->ln_f_w) < 0 ||
        (g->ln_f.beta && copy_vector(s, g->ln_f.beta, &p->ln_f_b) < 0))
        return -1;
    /* ours is (C,V): the nn.Linear (V,C) transposed */
    if (!p->cfg.tie_weights &&
        copy_part(s, g->lm_head.weight, p->lm_head.index, 0, 0, 0, true) < 0)
        return -1;
    for (int i = 0; i < p->cfg.n_layer; i++)
        if (copy_block(p, s, &p->blocks[i], &g->blocks[i]) < 0)
            return -1;
    return 0;
}

/* The attention paths by tg_head_path, as tiny_gpt's --attn names them. */
static const char *const path_names[] = {
    [TG_HEAD_COMPOSED] = "composed",
    [TG_HEAD_FUSED_SOFTMAX] = "fused",
    [TG_HEAD_TILED] = "tiled",
};

/* One line of what the loader chose and why into o->loading_info (when
 * given): the GELU form and where it came from (naming, else the layout's
 * name), the attention path, the sizes, the head, the biases, the dtype
 * (nn/nn.h). */
void tg__gpt_describe(const tg_gpt_load_opts *o, const tg_gpt_config *c,
                      bool implied, const char *naming)
{
    if (!o->loading_info || !o->loading_info_size)
        return;
    const char *form = c->gelu_tanh ? "tanh" : "erf";
    if (!naming)
        naming = implied ? "GPT-2 Conv1D naming" : "nanoGPT Linear naming";
    char gelu[128];
    if (o->gelu == TG_GELU_AUTO)
        snprintf(gelu, sizeof gelu, "%s (%s)", form, naming);
    else if (c->gelu_tanh == implied)
        snprintf(gelu, sizeof gelu, "%s (option, as the %s implies)", form,
                 naming);
    else
        snprintf(gelu, sizeof gelu, "%s (option; the %s implies %s)", form,
                 naming, implied ? "tanh" : "erf");
    snprintf(o->loading_info, o->loading_info_size,
             "gelu: %s, attention: %s (%s), %d layers, %d heads, C %d, block "
             "%d, vocab %d, %s head, %s, %s",
             gelu, path_names[c->attn_path],
             c->attn_path == TG_HEAD_COMPOSED ? "default" : "option",
             c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size,
             c->tie_weights ? "tied" : "untied",
             c->bias == TG_GPT_BIAS_NONE ? "no biases" : "biases",
             tg_dtype_name(c->dtype));
}

/* Checks every name and shape first (make_plan), then builds the model of
 * the config they give (drawing nothing: tg__gpt_build) and copies the
 * values in, from sd or, when file is set, from the file (sd then holds
 * its placeholders: tg__st_open), with no tape; on success says what it
 * chose into o->loading_info. */
static int from_state_dict(tg_gpt *g, const tg_params *sd, tg__st_stream *file,
                           const tg_gpt_load_opts *o)
{
    tg_dtype dt = o->dtype;
    if (!tg__check_float_dtype("gpt_from_state_dict", dt))
        return -1;
    source s = {.sd = sd,
                .used = tg__calloc((size_t)sd->n + 1, sizeof(bool)),
                .file = file};
    plan p = {0};
    int rc = -1;
    bool indexed = s.used && tg__names_init(&s.by_name, (size_t)sd->n);
    for (int i = 0; indexed && i < sd->n; i++)
        tg__names_add(&s.by_name, sd->items[i].name, (size_t)i);
    if (indexed)
        tg__names_sort(&s.by_name); /* a name twice: the first is found */
    if (!indexed)
        tg__error("gpt_from_state_dict: out of memory for %d names", sd->n);
    else if (make_plan(&s, o, &p)) {
        bool was = tg_set_grad_enabled(false);
        if (tg__gpt_build(g, p.cfg) == 0) {
            rc = copy_all(&p, &s, g);
            if (rc < 0) {
                tg_gpt_free(g);
                tg__error_wrap("gpt_from_state_dict");
            }
        } else {
            tg__error_wrap("gpt_from_state_dict");
        }
        tg_set_grad_enabled(was);
    }
    if (rc == 0)
        tg__gpt_describe(o, &p.cfg, p.lay == CONV1D, NULL);
    free(p.blocks);
    free(s.used);
    tg__names_free(&s.by_name);
    return rc;
}

/* Checked before any file is read (nn/nn.h). */
bool tg__gpt_check_load_opts(const char *op, const tg_gpt_load_opts *o)
{
    if (!o)
        tg__error("%s: opts is NULL", op);
    else if ((unsigned)o->gelu > TG_GELU_TANH)
        tg__error("%s: gelu %d is not a tg_gelu_form (0..%d)", op, (int)o->gelu,
                  TG_GELU_TANH);
    else if ((unsigned)o->attn_path > TG_HEAD_TILED)
        tg__error("%s: attn_path %d is not a tg_head_path (0..%d)", op,
                  (int)o->attn_path, TG_HEAD_TILED);
    else
        return true;
    return false;
}

/* The public loaders' common entry (nn/nn.h): the model, the state dict
 * and the options checked in that order, as tg_gpt_from_state_dict always
 * checked its arguments. */
static int checked_entry(tg_gpt *g, const tg_params *sd, tg__st_stream *file,
                         const tg_gpt_load_opts *opts)
{
    if (!tg__init_begin("gpt_from_state_dict", "the model", g, sizeof *g, 0,
                        TG_FLOAT32, NULL, NULL))
        return -1;
    if (!sd) {
        tg__error("gpt_from_state_dict: the state dict is NULL");
        return -1;
    }
    if (!tg__gpt_check_load_opts("gpt_from_state_dict_with", opts))
        return -1;
    return from_state_dict(g, sd, file, opts);
}

int tg_gpt_from_state_dict_with(tg_gpt *g, const tg_params *sd,
                                const tg_gpt_load_opts *opts)
{
    return checked_entry(g, sd, NULL, opts);
}

int tg_gpt_from_state_dict(tg_gpt *g, const tg_params *sd, int n_head,
                           tg_dtype dt)
{
    tg_gpt_load_opts o = {.n_head = n_head, .dtype = dt};
    return tg_gpt_from_state_dict_with(g, sd, &o);
}

/* A .npz (tg_read_npz) by its name, else .safetensors. */
int tg_gpt_load_pretrained_with(tg_gpt *g, const char *path,
                                const tg_gpt_load_opts *opts)
{
    if (g)
        memset(g, 0, sizeof *g);
    if (!g || !path) {
        tg__error("gpt_load_pretrained: %s is NULL",
                  g ? "the path" : "the model");
        return -1;
    }
    if (!tg__gpt_check_load_opts("gpt_load_pretrained_with", opts))
        return -1;
    size_t len = strlen(path);
    bool npz = len >= 4 && !strcmp(path + len - 4, ".npz");
    tg_params sd;
    tg_params_init(&sd);
    /* a .safetensors streamed: the model and a few MiB, not the file's
     * tensors and the model at once */
    tg__st_stream *file = npz ? NULL : tg__st_open(path, &sd);
    int rc = npz ? tg_read_npz(path, &sd) : file ? 0 : -1;
    if (rc == 0)
        rc = checked_entry(g, &sd, file, opts);
    tg__st_close(file);
    tg_params_release(&sd);
    if (rc < 0) {
        char what[TG_PARAM_NAME_MAX + 64];
        snprintf(what, sizeof what, "gpt_load_pretrained: %s", path);
        return tg__error_wrap(what);
    }
    return 0;
}

int tg_gpt_load_pretrained(tg_gpt *g, const char *path, int n_head, tg_dtype dt)
{
    tg_gpt_load_opts o = {.n_head = n_head, .dtype = dt};
    return tg_gpt_load_pretrained_with(g, path, &o);
}
