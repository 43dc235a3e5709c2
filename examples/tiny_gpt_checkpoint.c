/* tiny_gpt_checkpoint.c: --out-dir's checkpoints and --resume: what a
 * checkpoint holds besides the model and the optimizer, how it is written,
 * and how a run goes on from it exactly; with several ranks, rank 0 reads
 * it and sends it to the others. */
#include "tiny_gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void run_state_free(run_state *r)
{
    tg_release(r->config);
    tg_release(r->state);
    tg_release(r->real);
    *r = (run_state){0};
}

/* Zeroed entries of the right shapes. 0 or -1. */
int run_state_init(run_state *r)
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
int save_checkpoint(const options *o, const tg_gpt *g, const tg_params *ps,
                    tg_optim *opt, const tg_rng *rng, int it, run_state *r,
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
int resume_config_all(options *o, const corpus *cp, tg_gpt_config *cfg,
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
int resume_from_all(const options *o, const tg_params *ps, tg_optim *opt,
                    tg_rng *rng, int *start, run_state *r, const curves *cv)
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
