/* train_head's tape: the head at step 0 (untrained, so its gradients are
 * of the size training starts from, not the 1e-7 of a trained head), one
 * forward and backward on the show sequence, every tensor named (the head
 * names its own: q, k, v, k^T, scores, scaled, mask, masked, attn, out;
 * recall_loss its last, answer, loss; here x, target and the weights).
 *
 * The exact zeros of the (T,T) attention gradients, by cause. The loss
 * reads out[T-1] only, so rows 0..T-2 of every (T,T) gradient get nothing
 * (dattn = dout v^T and dout is 0 there). Below the softmax, with
 * dx_j = p_j (dy_j - sum_k p_k dy_k), a masked position (p_j = 0) is 0
 * whatever dy is, and so is the lone entry of a one-choice row (p = 1:
 * dy_0 - dy_0); masked_fill then passes dy on off the mask and 0 on it.
 * Each zero is counted once, by the first cause that holds: masked, then a
 * one-choice row, then a row the loss does not read (the order the
 * backward stepper on the same page counts them in). The counts are checked
 * against the zeros the tape itself found (tg_tape_print's "zeros Z/N"):
 * a zero no cause explains makes the caption untrue, and the program
 * says so. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */

#include "train_head_tape.h"

#include "page_echo.h"

#include <tapegrad.h>
#include <tapegrad_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (T,T) gradients, softmax's output first; below_mask: whether the
 * mask and a one-choice row cut it (the softmax's input and below). */
enum { N_ATTN = 4 };
static const struct {
    const char *name;
    bool below_mask;
} attn_tensors[N_ATTN] = {
    {"attn", false}, {"masked", true}, {"scaled", true}, {"scores", true}};

typedef struct zero_count {
    long long zeros, numel;               /* what the tape found */
    long long masked, unread, one_choice; /* the causes' cells */
} zero_count;

/* The zeros the tape found in the gradient of the entry whose output is
 * name: its line "... -> name (shape) ... zeros Z/N"; 0 when it has none
 * (N from the counting then); -1 when no entry has that output. */
static long long tape_zeros(const char *text, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "-> %s (", name);
    const char *at = strstr(text, key);
    if (!at)
        return -1;
    const char *eol = strchr(at, '\n'), *z = strstr(at, "   zeros ");
    return z && (!eol || z < eol) ? atoll(z + 9) : 0;
}

/* The causes of tensor i's zeros, over B sequences of T tokens. */
static void count_causes(int i, int B, int T, zero_count *c)
{
    bool below = attn_tensors[i].below_mask;
    c->numel = (long long)B * T * T;
    for (int t = 0; t < T; t++)
        for (int s = 0; s < T; s++) {
            if (below && s > t)
                c->masked += B;
            else if (below && t == 0)
                c->one_choice += B;
            else if (t != T - 1)
                c->unread += B;
        }
}

/* The zeros of the tape now, counted by cause: 0, or 1 when the tape's
 * count is not the causes' (or an entry is missing). */
static int count_zeros(int B, int T, zero_count *counts)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return 1;
    tg_tape_print(f);
    fclose(f);
    int rc = 0;
    for (int i = 0; i < N_ATTN; i++) {
        zero_count *c = &counts[i];
        *c = (zero_count){0};
        count_causes(i, B, T, c);
        c->zeros = tape_zeros(text, attn_tensors[i].name);
        if (c->zeros != c->masked + c->unread + c->one_choice)
            rc = 1;
    }
    free(text);
    return rc;
}

static void print_counts(const zero_count *c, int T)
{
    say("\nthe tape at step 0 (untrained), exact zeros of the (%d,%d) "
        "attention gradients\nby cause (the loss reads token %d's output "
        "only):\n"
        "            zeros  masked  rows not read  one-choice rows\n",
        T, T, T - 1);
    for (int i = 0; i < N_ATTN; i++)
        say("  %-7s %5lld/%-4lld %6lld  %13lld  %15lld%s\n",
            attn_tensors[i].name, c[i].zeros, c[i].numel, c[i].masked,
            c[i].unread, c[i].one_choice,
            c[i].zeros == c[i].masked + c[i].unread + c[i].one_choice
                ? ""
                : "  (not what the causes explain)");
}

/* The caption of the tape's figure, from the counts. */
static void caption(char *buf, size_t cap, const zero_count *c, int T)
{
    snprintf(
        buf, cap,
        "The tape of one training step of the untrained head (step 0) on "
        "the sequence above, after backward. Each box is an op, with its "
        "output's values and the gradient that reached it; each leaf "
        "(x, W_q, W_k, W_v, the mask) shows the gradient it received. The "
        "loss reads only the last token's output (row %d), so rows 0-%d of "
        "every (%d,%d) gradient get nothing: all %lld zeros of attn's "
        "gradient come from that. Under masked_fill (scaled's gradient) "
        "%lld of the %lld zeros are masked positions, %lld the one-choice "
        "row's (row 0 has one unmasked score: p = 1 there, so softmax "
        "passes 0) and %lld rows the loss does not read; the softmax's "
        "input (masked) has the same %lld, %lld and %lld. The zeros of q, v, "
        "out and last are "
        "likewise elements the loss never reads; a weight's gradient "
        "dW = x^T dy is also 0 where x's feature is exactly 0 at every "
        "token the gradient reaches.",
        T - 1, T - 2, T, T, c[0].zeros, c[2].masked, c[2].zeros,
        c[2].one_choice, c[2].unread, c[1].masked, c[1].one_choice,
        c[1].unread);
}

/* The section's caption and figure, while the tape holds the records. */
static int add_sections(tg_report *rep, const zero_count *c, int T)
{
    char text[1600];
    caption(text, sizeof text, c, T);
    return tg_report_text(rep, "The tape at step 0: what its zeros are", text) >
                       0 &&
                   tg_report_tape(rep, "The tape of one step at step 0 "
                                       "(untrained), after backward") > 0
               ? 0
               : -1;
}

/* The head of step 0, its leaves named; 0 or -1. */
static int head_at_step0(tg_head *h, uint32_t seed, int head_size,
                         const recall_batch *show)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed); /* the run's first draw: its weights */
    if (tg_head_init(h, TG_FLOAT64, (int)tg_size(show->x, 2), head_size, &rng) <
        0)
        return -1;
    tg_set_name(h->w_q, "W_q");
    tg_set_name(h->w_k, "W_k");
    tg_set_name(h->w_v, "W_v");
    tg_set_name(show->x, "x");
    tg_set_name(show->target, "target");
    return 0;
}

int step0_tape(uint32_t seed, int head_size, const recall_batch *show,
               tg_report *rep)
{
    tg_head h = {0};
    if (head_at_step0(&h, seed, head_size, show) < 0)
        return -1;
    const int B = show->B, T = (int)tg_size(show->x, 1);
    zero_count counts[N_ATTN];
    tg_scope_begin();
    bool was = tg_tape_keep_record(true);
    tg_tensor *loss = recall_loss(tg_head_forward(&h, show->x), show);
    int rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    if (rc == 0) {
        rc = count_zeros(B, T, counts);
        if (!rep)
            print_counts(counts, T);
        else if (rc == 0)
            rc = add_sections(rep, counts, T);
    }
    tg_tape_keep_record(was);
    tg_scope_end();
    tg_head_free(&h);
    return rc;
}
