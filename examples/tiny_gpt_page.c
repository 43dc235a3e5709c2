/* tiny_gpt_page.c: the page --html writes at the end (rank 0): the loss
 * curves and what one head of the trained model attends to.
 *
 * The attention view is the first block's first head on the first
 * characters of the validation text: its raw scores, recomputed from the
 * model's own modules as the block computes them,
 *     x = tok[ids] + pos[0:T],  n = ln1(x)                        (1,T,C)
 *     q = n @ W_q (+ b_q),  k = n @ W_k (+ b_k)                    (1,T,hs)
 *     scores = q @ k^T * scale, the future masked                  (T,T)
 * drawn by tg_report_attention, whose page softmaxes them at its
 * temperature slider (1: the head's own weights). The program checks that
 * they are the head's: softmax(scores) against the weights the model's
 * forward kept (head.attn), and prints the largest difference. */
#include "tiny_gpt.h"

#include <tapegrad_report.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { VIEW_T = 24 }; /* the characters viewed, at most */

/* x @ w (+ b) */
static tg_tensor *project(tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    tg_tensor *y = tg_matmul(x, w);
    return b ? tg_add(y, b) : y;
}

/* Block 0, head 0's masked scores (T,T) on ids (1,T), in the caller's
 * scope; NULL on error. */
static tg_tensor *head_scores(tg_gpt *g, tg_tensor *ids, int64_t T)
{
    tg_head *h = &g->blocks[0].attn.heads[0];
    tg_tensor *x =
        tg_add(tg_embed_forward(&g->tok, ids), tg_embed_positions(&g->pos, T));
    tg_tensor *n = tg_layernorm_forward(&g->blocks[0].ln1, x);
    tg_tensor *q = project(n, h->w_q, h->b_q), *k = project(n, h->w_k, h->b_k);
    tg_tensor *s = tg_matmul(q, tg_transpose(k, 1, 2));
    return tg_select(h->scaled ? tg_scale(s, h->scale) : s, 0, 0);
}

/* Character c as a label: printable as itself, else its escape. */
static void char_label(char *buf, size_t cap, unsigned char c)
{
    if (c == '\n')
        snprintf(buf, cap, "\\n");
    else if (c == ' ')
        snprintf(buf, cap, "' '");
    else if (c > 32 && c < 127)
        snprintf(buf, cap, "%c", c);
    else
        snprintf(buf, cap, "\\x%02x", c);
}

/* The largest |softmax(scores) - head.attn| (the masked entries are 0 in
 * both); NAN on error. */
static double view_error(tg_tensor *scores, tg_tensor *future, const tg_head *h,
                         int64_t T)
{
    double w[VIEW_T * VIEW_T], a[VIEW_T * VIEW_T], worst = 0;
    tg_tensor *p = tg_softmax(tg_masked_fill(scores, future, -INFINITY), -1);
    if (!p || tg_copy_out(p, TG_FLOAT64, w) < 0 ||
        tg_copy_out(tg_select(h->attn, 0, 0), TG_FLOAT64, a) < 0)
        return NAN;
    for (int64_t i = 0; i < T * T; i++)
        worst = fmax(worst, fabs(w[i] - a[i]));
    return worst;
}

/* The attention view, its labels the window's characters. */
static int add_attention(tg_report *rep, tg_gpt *g, const corpus *cp, int64_t T)
{
    int64_t *win = cp->ids + cp->n_train;
    char text[VIEW_T][8], title[200];
    const char *labels[VIEW_T];
    for (int64_t t = 0; t < T; t++) {
        char_label(text[t], sizeof text[t], cp->byte_of[win[t]]);
        labels[t] = text[t];
    }
    tg_tensor *ids = tg_from_data(TG_INT64, TG_SHAPE(1, T), win);
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0);
    if (!forward_keeping_weights(g, ids)) /* head.attn: the weights used */
        return -1;
    tg_tensor *scores = head_scores(g, ids, T);
    const tg_head *head = &g->blocks[0].attn.heads[0];
    if (!head->attn) { /* the tiled path keeps no weights */
        fprintf(stderr, "tiny_gpt: --html: head 0 kept no attention weights "
                        "(its path keeps none)\n");
        return -1;
    }
    double err = scores ? view_error(scores, future, head, T) : NAN;
    if (!(err <= 1e-5)) {
        fprintf(stderr,
                "tiny_gpt: --html: the attention view is not the "
                "head's own weights (max |diff| %g)\n",
                err);
        return -1;
    }
    printf("attention view: block 0, head 0 on the first %lld validation "
           "characters\n(softmax of its scores against the model's own "
           "weights: max |diff| %.1e)\n",
           (long long)T, err);
    snprintf(title, sizeof title,
             "Block 0, head 0 of the trained model on the first %lld "
             "validation characters: row t is what character t attends to "
             "(temperature 1: the head's own weights)",
             (long long)T);
    return tg_report_attention(rep, title, scores, future, labels, 1.0) > 0
               ? 0
               : -1;
}

int write_page(const options *o, tg_gpt *g, const corpus *cp, const curves *cv,
               double unigram)
{
    int64_t T = VIEW_T < g->cfg.block_size ? VIEW_T : g->cfg.block_size;
    if (cp->n - cp->n_train < T)
        T = cp->n - cp->n_train;
    tg_report *rep = tg_report_new("tiny_gpt: a character-level GPT");
    if (!rep || make_parent_dir(o->html) < 0)
        return tg_report_free(rep), -1;
    tg_gpt_train(g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    double ux[2] = {cv->n ? cv->step[0] : 0, cv->n ? cv->step[cv->n - 1] : 0};
    double uy[2] = {unigram, unigram};
    tg_series s[3] = {{"train", cv->step, cv->train, cv->n},
                      {"validation", cv->step, cv->val, cv->n},
                      {"unigram baseline (validation)", ux, uy, 2}};
    int rc = (cv->n == 0 ||
              tg_report_lines(rep, "Loss per character", s, 3, "step",
                              "cross-entropy (nats/char)", false) > 0) &&
                     (T < 1 || add_attention(rep, g, cp, T) == 0)
                 ? 0
                 : -1;
    tg_scope_end();
    tg_set_grad_enabled(was);
    if (rc == 0)
        rc = tg_report_write(rep, o->html);
    tg_report_free(rep);
    if (rc == 0)
        printf("page: %s\n", o->html);
    return rc;
}
