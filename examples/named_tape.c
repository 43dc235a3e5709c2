/* named_tape: the tape of the lesson's attention head, for teaching. The
 * tensors are named (x, W_q, q, k, v, tau, scores, attn, out...), backward
 * keeps a record of the entries it consumed (tg_tape_keep_record), and the
 * tape is printed after the step's scope has ended, every entry with its
 * output's name and shape, the |grad| that flowed through it and the line
 * of this file that made it. Entries and leaves are numbered in creation
 * order, so the text (and the DOT file) is the same every run.
 *
 *     ./examples/named_tape             # the tape, as text
 *     ./examples/named_tape head.dot    # and the picture's source:
 *     dot -Tsvg head.dot -o head.svg    # (Graphviz)
 *     ./examples/named_tape --help      # the usage */
#include <tapegrad.h>

#include "options.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

typedef struct options {
    const char *dot; /* where the DOT graph goes; NULL: nowhere */
} options;

static void usage(FILE *f);

static const opt option_table[] = {
    {NULL, OPT_ARG, offsetof(options, dot), .help = NULL}, /* DOT_FILE */
};

static const opt_parser parser = {
    .prog = "named_tape",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a value (see --help)",
    .unknown = "unknown option '%s' (see --help)",
    .usage_on_unknown = true,
};

static void usage(FILE *f)
{
    fputs("Usage: named_tape [DOT_FILE] [--help]\n"
          "\n"
          "Runs the lesson's attention head once on a named tape (x, W_q,\n"
          "q, k, v, tau, scores, masked, attn, out, loss), backward with a\n"
          "record of the consumed entries, and prints the tape: each entry\n"
          "with its output's name and shape, the |grad| through it and the\n"
          "line that made it. With DOT_FILE it also writes the tape there as\n"
          "a Graphviz graph (dot -Tsvg DOT_FILE -o head.svg draws it).\n"
          "\n"
          "Exits 0 on success, 1 on a library or file error, 2 on a bad\n"
          "command line.\n",
          f);
}

enum { B = 1, T = 4, C = 8, HS = 4 };

/* A new leaf that requires grad, named. */
static tg_tensor *param(tg_rng *rng, const char *name, int ndim,
                        const int64_t *shape)
{
    tg_tensor *p = tg_randn(rng, TG_FLOAT64, ndim, shape);
    tg_set_requires_grad(p, true);
    tg_set_name(p, name);
    return p;
}

/* t, named: for the lines of the forward. */
static tg_tensor *named(tg_tensor *t, const char *name)
{
    tg_set_name(t, name);
    return t;
}

int main(int argc, char **argv)
{
    options o = {0};
    int parsed = opt_parse(&parser, argc, argv, &o, NULL);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_tensor *W_q = param(&rng, "W_q", TG_SHAPE(C, HS));
    tg_tensor *W_k = param(&rng, "W_k", TG_SHAPE(C, HS));
    tg_tensor *W_v = param(&rng, "W_v", TG_SHAPE(C, HS));
    /* a learnable temperature: scores = q k^T / tau */
    tg_tensor *tau = tg_scalar(TG_FLOAT64, sqrt((double)HS));
    tg_set_requires_grad(tau, true);
    tg_set_name(tau, "tau");
    tg_tape_keep_record(true);

    tg_scope_begin();
    tg_tensor *x = named(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(B, T, C)), "x");
    tg_tensor *mask =
        named(tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0),
              "mask");
    tg_tensor *q = named(tg_matmul(x, W_q), "q");
    tg_tensor *k = named(tg_matmul(x, W_k), "k");
    tg_tensor *v = named(tg_matmul(x, W_v), "v");
    tg_tensor *kT = named(tg_transpose(k, -2, -1), "k^T");
    tg_tensor *scores = named(tg_div(tg_matmul(q, kT), tau), "scores");
    tg_tensor *masked =
        named(tg_masked_fill(scores, mask, -INFINITY), "masked");
    tg_tensor *attn = named(tg_softmax(masked, -1), "attn");
    tg_tensor *out = named(tg_matmul(attn, v), "out");
    tg_tensor *loss = named(tg_mean_all(tg_mul(out, out)), "loss");
    int rc = loss ? tg_backward(loss) : -1;
    tg_scope_end(); /* every output dies: their entries stay as records */
    if (rc != 0) {
        fprintf(stderr, "named_tape: %s\n", tg_last_error());
        return 1;
    }
    printf("The tape after backward (entries kept as a record):\n");
    tg_tape_print(stdout);
    printf("tau: value %.6g, gradient %.6g\n", tg_item(tau),
           tg_item(tg_grad(tau)));
    if (o.dot) {
        FILE *f = fopen(o.dot, "w");
        if (!f) {
            perror(o.dot);
            rc = 1;
        } else {
            tg_tape_dot(f);
            rc = fclose(f) == 0 ? 0 : 1;
        }
    }
    tg_tape_keep_record(false); /* drops the record */
    tg_release(W_q);
    tg_release(W_k);
    tg_release(W_v);
    tg_release(tau);
    return rc;
}
