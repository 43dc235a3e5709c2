/* Private to nn/: what the module files share. nn/ sees tensors only
 * through the public API, plus the error helpers (core/error.h), core's
 * offer to the floors above (core/shared.h, core/npy.h) and the
 * optimizers' update kernels (kernels/update.h). */
#ifndef TAPEGRAD_NN_PRIVATE_H
#define TAPEGRAD_NN_PRIVATE_H

#include "core/error.h"
#include "tapegrad_nn.h"

/* The prefix of a nested module's parameters (nn/params.c): "prefix.name",
 * or "prefix.name.index" when index >= 0 (just "name..." without a
 * prefix), written into buf (TG_PARAM_NAME_MAX bytes). NULL with an error
 * naming op when it does not fit in a parameter name. */
TG_HIDDEN const char *tg__param_prefix(const char *op, char *buf,
                                       const char *prefix, const char *name,
                                       int index);

/* Gives a list back as it was before a failed call appended to it: its
 * first n items (the names' hash let go, to be made anew; nn/params.c). */
TG_HIDDEN void tg__params_truncate(tg_params *ps, int n);

/* What a module's init takes besides the module and its dtype, for
 * tg__init_begin to check: */
enum {
    TG__INIT_RNG = 1u << 0,    /* an rng it draws from, never NULL */
    TG__INIT_CONFIG = 1u << 1, /* a config by pointer, never NULL */
    /* it makes tensors of dt itself, so dt must be float32 or float64 (a
     * module built of others leaves the dtype to its parts' inits) */
    TG__INIT_FLOAT = 1u << 2,
};

/* The preamble of every module's init (nn/module.c), so that an init goes
 * on with the module's own code: zeroes the size bytes of m (a failed init
 * leaves the module zeroed), then errors, naming op, for the first of m
 * ("<op>: <what> is NULL"), the rng ("rng is NULL") and the config ("the
 * config is NULL") that takes asks for and is NULL, then for a dt that is
 * not float when takes has TG__INIT_FLOAT. */
TG_HIDDEN bool tg__init_begin(const char *op, const char *what, void *m,
                              size_t size, unsigned takes, tg_dtype dt,
                              const void *cfg, const tg_rng *rng);

/* The rng a model is built with when a loader is to overwrite every
 * parameter (tg__gpt_build): a module's init given it draws nothing and
 * makes its weights of dt directly, unset (tg__blank_weight), which costs
 * neither the draws, nor their float64 temporaries, nor a pass zeroing
 * memory that the loader writes anyway (nn/module.c). Never read or
 * advanced. */
TG_HIDDEN extern tg_rng tg__no_draw;

/* tg_gpt_init(g, cfg, &tg__no_draw): the model of cfg with nothing drawn;
 * its weights are unset until the caller writes every one of them (its
 * layer norms and q/k/v biases are made as always, ones and zeros). Errors
 * as tg_gpt_init's (nn/gpt.c). */
TG_HIDDEN int tg__gpt_build(tg_gpt *g, tg_gpt_config cfg);

/* A leaf of dt and shape whose elements are unset (tg__empty), requiring
 * grad, owned by the module (out of any scope): a weight of a module built
 * with tg__no_draw. */
TG_HIDDEN tg_tensor *tg__blank_weight(tg_dtype dt, int ndim,
                                      const int64_t *shape);

/* Errors, naming op and the module as what ("the layer"), unless m is
 * initialised: "<op>: <what> is NULL" for a NULL m, "<op>: <what> is not
 * initialised" when initialised is false (the caller's test of a part
 * every initialised module has, e.g. m && m->weight) (nn/module.c). */
TG_HIDDEN bool tg__module_ready(const char *op, const char *what, const void *m,
                                bool initialised);

/* Errors (naming op) unless dt is float32 or float64, the dtypes a
 * module's parameters can have (nn/module.c). */
TG_HIDDEN bool tg__check_float_dtype(const char *op, tg_dtype dt);

/* One dropout step of a module's forward: x itself when not training or p
 * is 0 (so a model without dropout records exactly the ops it always did),
 * else tg_dropout(x, p) drawing from rng; x is given up either way (as
 * tg__then does). NULL, with an error naming op and the switch to call,
 * when it must draw and has no rng. */
static inline tg_tensor *tg__module_dropout(const char *op,
                                            const char *train_fn, tg_tensor *x,
                                            double p, bool training,
                                            tg_rng *rng)
{
    if (!x || !training || p == 0)
        return x;
    if (!rng) {
        tg__error("%s: dropout %g in training needs an rng: call %s(m, "
                  "true, rng) first (or false for eval)",
                  op, p, train_fn);
        tg_release(x);
        return NULL;
    }
    tg_tensor *y = tg_dropout(x, p, true, rng);
    tg_release(x);
    return y;
}

/* Errors (naming op and what) unless p is a dropout probability, in
 * [0, 1). */
static inline bool tg__check_dropout(const char *op, const char *what, double p)
{
    if (p >= 0 && p < 1)
        return true;
    tg__error("%s: %s must be in [0, 1), got %g", op, what, p);
    return false;
}

/* Writes into opts->loading_info (when given) the line of what a loader
 * chose for the model of c (nn/gpt_load.c): the GELU form and where it
 * came from (naming, e.g. "llm.c checkpoint"; NULL: the state dict's
 * naming, GPT-2's Conv1D when implied_tanh, else nanoGPT's Linear), which
 * form that source implies (tanh when implied_tanh) when an option chose
 * the other, the attention path, the sizes, the head, the biases, the
 * dtype. */
TG_HIDDEN void tg__gpt_describe(const tg_gpt_load_opts *opts,
                                const tg_gpt_config *c, bool implied_tanh,
                                const char *naming);
/* Errors (naming op) unless opts is there with a known GELU form and
 * attention path (nn/gpt_load.c); the dtype and n_head are the loaders'
 * own checks. */
TG_HIDDEN bool tg__gpt_check_load_opts(const char *op,
                                       const tg_gpt_load_opts *opts);
#endif /* TAPEGRAD_NN_PRIVATE_H */
