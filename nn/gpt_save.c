/* A GPT's parameters under GPT-2's names: the inverse of
 * tg_gpt_from_state_dict's mapping (nn/gpt_load.c), as Hugging Face's
 * GPT2Model names them, in its Conv1D (in, out) layout:
 *
 *     wte.weight (V,C)  wpe.weight (T,C)       tok.weight, pos.weight
 *     h.L.ln_1.weight, .bias                   blocks.L.ln1.gamma, .beta
 *     h.L.attn.c_attn.weight (C,3C), .bias     the heads' w_q | w_k | w_v,
 *                                              each [w_0 ... w_{H-1}]
 *     h.L.attn.c_proj.weight, .bias            blocks.L.attn.proj.*
 *     h.L.ln_2.weight, .bias                   blocks.L.ln2.gamma, .beta
 *     h.L.mlp.c_fc.*, h.L.mlp.c_proj.*         blocks.L.mlp.fc.*, .proj.*
 *     ln_f.weight, .bias                       ln_f.gamma, .beta
 *     lm_head.weight (V,C), untied only        lm_head.weight^T
 *
 * Parameters that keep their layout are listed as themselves (one more
 * reference, as torch's state_dict shares storage); c_attn and an untied
 * lm_head are new tensors. */
#include "nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What GPT-2's names cannot say of g: "" when they say all of it. */
static const char *not_gpt2(const tg_gpt *g)
{
    const tg_gpt_config *c = &g->cfg;
    if (!c->gelu || !c->gelu_tanh)
        return "the tanh GELU (GPT-2's layout means it to a loader)";
    if (c->ln_eps != 0 && c->ln_eps != 1e-5)
        return "layer norms of eps 1e-5";
    if (c->has_attn_scale && /* as computed, to rounding */
        fabs(c->attn_scale * sqrt((double)c->n_embd / c->n_head) - 1) > 1e-12)
        return "the score scale 1/sqrt(head size)";
    return "";
}

/* t (owned) added to out as name; false (t released) on failure. */
static bool put(tg_params *out, const char *name, tg_tensor *t)
{
    if (t && tg_params_add(out, NULL, name, t) == 0)
        return true;
    tg_release(t);
    return false;
}

/* Our parameter `ours` of layer l (l < 0: not per layer) as `gpt2`. */
static bool same(tg_params *out, const tg_params *ps, int l, const char *ours,
                 const char *gpt2)
{
    char a[TG_PARAM_NAME_MAX], b[TG_PARAM_NAME_MAX];
    if (l >= 0) {
        snprintf(a, sizeof a, "blocks.%d.%s", l, ours);
        snprintf(b, sizeof b, "h.%d.%s", l, gpt2);
    } else {
        snprintf(a, sizeof a, "%s", ours);
        snprintf(b, sizeof b, "%s", gpt2);
    }
    tg_tensor *t = tg_params_get(ps, a);
    if (!t)
        tg__error("gpt_state_dict: the model has no parameter '%s'", a);
    return t && put(out, b, tg_retain(t));
}

/* Layer l's c_attn weight (C,3C) or bias (3C): q | k | v, each the heads'
 * in order (zeros for a model without q/k/v biases). */
static tg_tensor *c_attn(const tg_gpt *g, int l, bool bias)
{
    const tg_mha *m = &g->blocks[l].attn;
    if (bias && !m->heads[0].b_q)
        return tg_keep(tg_zeros(tg_dtype_of(m->heads[0].w_q),
                                TG_SHAPE(3 * g->cfg.n_embd)));
    int n = 3 * m->n_heads;
    tg_tensor **parts = tg__calloc((size_t)n, sizeof *parts);
    if (!parts) {
        tg__error("gpt_state_dict: out of memory");
        return NULL;
    }
    for (int p = 0; p < 3; p++)
        for (int h = 0; h < m->n_heads; h++) {
            const tg_head *hd = &m->heads[h];
            tg_tensor *const w[3] = {hd->w_q, hd->w_k, hd->w_v};
            tg_tensor *const b[3] = {hd->b_q, hd->b_k, hd->b_v};
            parts[p * m->n_heads + h] = bias ? b[p] : w[p];
        }
    tg_tensor *t = tg_keep(tg_cat(parts, n, bias ? 0 : 1));
    free(parts);
    return t;
}

/* One block's tensors, in GPT2Model's order. */
static bool block(tg_params *out, const tg_params *ps, const tg_gpt *g, int l)
{
    static const char *const pairs[][2] = {
        {"ln1.gamma", "ln_1.weight"},
        {"ln1.beta", "ln_1.bias"},
        {NULL, "attn.c_attn.weight"},
        {NULL, "attn.c_attn.bias"},
        {"attn.proj.weight", "attn.c_proj.weight"},
        {"attn.proj.bias", "attn.c_proj.bias"},
        {"ln2.gamma", "ln_2.weight"},
        {"ln2.beta", "ln_2.bias"},
        {"mlp.fc.weight", "mlp.c_fc.weight"},
        {"mlp.fc.bias", "mlp.c_fc.bias"},
        {"mlp.proj.weight", "mlp.c_proj.weight"},
        {"mlp.proj.bias", "mlp.c_proj.bias"}};
    const bool biased = g->cfg.bias != TG_GPT_BIAS_NONE;
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        const char *gpt2 = pairs[i][1];
        bool is_bias = strstr(gpt2, ".bias") != NULL;
        if (is_bias && !biased)
            continue;
        if (pairs[i][0]) {
            if (!same(out, ps, l, pairs[i][0], gpt2))
                return false;
            continue;
        }
        char name[TG_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "h.%d.%s", l, gpt2);
        if (!put(out, name, c_attn(g, l, is_bias)))
            return false;
    }
    return true;
}

/* Every tensor of g under GPT-2's names into out (after what it holds). */
static bool gpt2_names(tg_params *out, const tg_params *ps, const tg_gpt *g)
{
    bool ok = same(out, ps, -1, "tok.weight", "wte.weight") &&
              same(out, ps, -1, "pos.weight", "wpe.weight");
    for (int l = 0; ok && l < g->cfg.n_layer; l++)
        ok = block(out, ps, g, l);
    ok = ok && same(out, ps, -1, "ln_f.gamma", "ln_f.weight");
    if (ok && g->cfg.bias != TG_GPT_BIAS_NONE)
        ok = same(out, ps, -1, "ln_f.beta", "ln_f.bias");
    if (ok && !g->cfg.tie_weights) { /* ours (C,V), GPT-2's (V,C) */
        tg_tensor *t = tg_transpose(g->lm_head.weight, 0, 1);
        ok = put(out, "lm_head.weight", tg_keep(tg_contiguous(t)));
        tg_release(t); /* the view: outside a scope it would stay */
    }
    return ok;
}

int tg_gpt_state_dict(tg_gpt *g, tg_params *out)
{
    if (!g || !out || !g->blocks) {
        tg__error("gpt_state_dict: %s", !out ? "the list is NULL"
                                        : !g ? "the model is NULL"
                                             : "the model is not initialised");
        return -1;
    }
    const char *need = not_gpt2(g);
    if (*need) {
        tg__error("gpt_state_dict: GPT-2's names mean %s; this model has not",
                  need);
        return -1;
    }
    tg_params ps;
    tg_params_init(&ps);
    const int n0 = out->n;
    bool was = tg_set_grad_enabled(false); /* c_attn is not on the tape */
    bool ok = tg_gpt_params(g, &ps, NULL) == 0 && gpt2_names(out, &ps, g);
    tg_set_grad_enabled(was);
    tg_params_free(&ps);
    for (int i = n0; !ok && i < out->n; i++)
        tg_release(out->items[i].t);
    if (!ok)
        tg__params_truncate(out, n0); /* the list as it was */
    return ok ? 0 : -1;
}

int tg_gpt_save_pretrained(tg_gpt *g, const char *path)
{
    if (!path) {
        tg__error("gpt_save_pretrained: the path is NULL");
        return -1;
    }
    tg_params sd;
    tg_params_init(&sd);
    int rc =
        tg_gpt_state_dict(g, &sd) == 0 ? tg_save_safetensors(&sd, path) : -1;
    tg_params_release(&sd);
    return rc < 0 ? tg__error_wrap("gpt_save_pretrained") : 0;
}
