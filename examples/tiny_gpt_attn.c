/* tiny_gpt_attn.c: what the trained model attends to, as pictures: each
 * head of the last block over the first window of the validation text (at
 * most 32 characters), one PNG a head beside the loss curves
 * (tiny_gpt_attn_headN.png). The weights are drawn on the fixed range
 * [0, 1] (TG_SCALE_UNIT), so the heads compare colour for colour, and the
 * causal future is drawn masked, not as weights of 0. */
#include <tapegrad_plot.h>

#include "tiny_gpt.h"

#include <stdio.h>
#include <string.h>

enum { WINDOW = 32 };

/* The window's characters for a title: printable ASCII as is, the rest as
 * '.' (a newline too), in quotes. */
static void window_text(const corpus *cp, const int64_t *ids, int T, char *text,
                        size_t cap)
{
    size_t n = 0;
    text[n++] = '"';
    for (int t = 0; t < T && n + 2 < cap; t++) {
        unsigned char c = cp->byte_of[ids[t]];
        text[n++] = c >= 0x20 && c < 0x7f ? (char)c : '.';
    }
    text[n++] = '"';
    text[n] = '\0';
}

/* Head h of the last block (its weights kept by the forward just run, as
 * (1,T,T)) into stem; 0 or -1 (said). */
static int plot_head(const tg_head *head, int h, const char *stem,
                     const char *text, tg_tensor *future)
{
    char title[160];
    snprintf(title, sizeof title, "last block, head %d, on %s", h, text);
    const tg_heatmap_opts o = {.scale = TG_SCALE_UNIT,
                               .xlabel = "key position s (the character "
                                         "attended to)",
                               .ylabel = "query position t",
                               .cblabel = "attention weight"};
    if (!head->attn) {
        report("head %d kept no attention weights (its path never forms "
               "them)",
               h);
        return -1;
    }
    if (tg_plot_heatmap_with(stem, tg_select(head->attn, 0, 0), future, title,
                             &o) < 0) {
        report("%s", tg_last_error());
        return -1;
    }
    return 0;
}

/* Every head of g computes its attention by path. */
static void set_paths(tg_gpt *g, tg_head_path path)
{
    for (int l = 0; l < g->cfg.n_layer; l++)
        for (int h = 0; h < g->blocks[l].attn.n_heads; h++)
            g->blocks[l].attn.heads[h].path = path;
}

/* The tiled path (--attn tiled) never forms the weights a picture shows, so
 * for this one forward its heads run composed (the same model, within
 * rounding), then get their path back. */
tg_tensor *forward_keeping_weights(tg_gpt *g, tg_tensor *ids)
{
    bool tiled = g->cfg.attn_path == TG_HEAD_TILED;
    if (tiled)
        set_paths(g, TG_HEAD_COMPOSED);
    tg_tensor *logits = tg_gpt_forward(g, ids);
    if (tiled)
        set_paths(g, TG_HEAD_TILED);
    return logits;
}

/* The pictures, when --plot is on (in the directory of its stem), from an
 * evaluation-mode forward of the window; the model's mode is given back.
 * 0 or -1. */
int plot_attention(tg_gpt *g, const corpus *cp, const options *o)
{
    if (!o->plot)
        return 0;
    int T = g->cfg.block_size < WINDOW ? g->cfg.block_size : WINDOW;
    if (cp->n - cp->n_train < T)
        T = (int)(cp->n - cp->n_train);
    if (T < 2)
        return 0; /* no window to show */
    const int64_t *ids = cp->ids + cp->n_train;
    char dir[4096] = ".", stem[4200], text[WINDOW + 3];
    const char *slash = strrchr(o->plot, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - o->plot), o->plot);
    window_text(cp, ids, T, text, sizeof text);
    bool training = g->training, was = tg_set_grad_enabled(false);
    tg_rng *rng = g->rng;
    tg_gpt_train(g, false, NULL);
    tg_scope_begin();
    tg_tensor *x = tg_from_data(TG_INT64, TG_SHAPE(1, T), ids);
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT32, TG_SHAPE(T, T)), 0), 0);
    int rc = forward_keeping_weights(g, x) ? 0 : -1;
    if (rc < 0)
        report("%s", tg_last_error());
    const tg_mha *mha = &g->blocks[g->cfg.n_layer - 1].attn;
    for (int h = 0; rc == 0 && h < mha->n_heads; h++) {
        snprintf(stem, sizeof stem, "%s/tiny_gpt_attn_head%d", dir, h);
        rc = plot_head(&mha->heads[h], h, stem, text, future);
    }
    tg_scope_end();
    tg_gpt_train(g, training, rng);
    tg_set_grad_enabled(was);
    if (rc == 0 && tg_plot_available())
        printf("attention of the last block's %d heads: "
               "%s/tiny_gpt_attn_head0.png ... head%d.png\n",
               mha->n_heads, dir, mha->n_heads - 1);
    return rc;
}
