/* Bad input to the nn and plot floor: parameter lists, modules (init,
 * forward, params), optimizers, checkpoints and plots; the same with NULL
 * tensors; and the NULL-safe functions. What each row checks is in
 * errors_table.h. */
#include "errors_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A path in /tmp of this process's own, removed after the row. */
static void remove_file(void *path)
{
    unlink(path);
    free(path);
}

static const char *tmp_path(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/tapegrad-errors-%ld-%s", (long)getpid(),
             name);
    char *copy = strdup(path);
    after_row(remove_file, copy);
    return copy;
}

static char long_name[200];

static const char *make_long_name(void)
{
    memset(long_name, 'w', sizeof long_name - 1);
    return long_name;
}

/* ---- parameter lists ---------------------------------------------------- */

static void free_list(void *ps) { tg_params_free(ps); }

/* A list of (name, tensor) pairs: n of them, NULL tensors allowed. */
static void params_of(tg_params *ps, int n, const char *const *names,
                      tg_tensor *const *ts)
{
    tg_params_init(ps);
    ps->items = calloc((size_t)n, sizeof *ps->items);
    for (int i = 0; i < n; i++) {
        snprintf(ps->items[i].name, TG_PARAM_NAME_MAX, "%s", names[i]);
        ps->items[i].t = ts[i];
    }
    ps->n = ps->cap = n;
}

/* An empty list, freed after the row. */
static tg_params *empty_list(void)
{
    static tg_params ps;
    tg_params_init(&ps);
    after_row(free_list, &ps);
    return &ps;
}

/* ps after tg_params_add(ps, prefix, name, t), which must go through. */
static tg_params *added(tg_params *ps, const char *prefix, const char *name,
                        tg_tensor *t)
{
    if (tg_params_add(ps, prefix, name, t) < 0)
        note("params_add '%s': %s", name, tg_last_error());
    return ps;
}

/* The list ("x": e->x, name: t), freed after the row. */
static tg_params *x_and(env *e, const char *name, tg_tensor *t)
{
    static tg_params ps;
    params_of(&ps, 2, (const char *[]){"x", name}, (tg_tensor *[]){e->x, t});
    after_row(free_list, &ps);
    return &ps;
}

/* ---- modules ------------------------------------------------------------ */

/* Each module sized for env's x (4,8,32) float64: C = 32, 4 heads of 16,
 * a vocabulary of 16 and a block of 8 tokens. */
#define GPT_CFG                                                                \
    ((tg_gpt_config){.vocab_size = 16,                                         \
                     .block_size = 8,                                          \
                     .n_embd = 32,                                             \
                     .n_head = 4,                                              \
                     .n_layer = 1,                                             \
                     .gelu = true,                                             \
                     .dtype = TG_FLOAT64})

/* GPT_CFG with one field changed: vocab_size, block_size, n_embd, n_head,
 * n_layer (which 0 to 4) or the dtype (5). */
static tg_gpt_config gpt_cfg_with(int which, int value)
{
    tg_gpt_config c = GPT_CFG;
    int *field[] = {&c.vocab_size, &c.block_size, &c.n_embd, &c.n_head,
                    &c.n_layer};
    if (which < 5)
        *field[which] = value;
    else
        c.dtype = (tg_dtype)value;
    return c;
}

/* made_<kind>(e): a tg_<kind> made by `init` (into `mod`, with e->rng),
 * freed after the row. */
#define MADE(kind, init)                                                       \
    static void free_##kind(void *mod) { tg_##kind##_free(mod); }              \
    static tg_##kind *made_##kind(env *e)                                      \
    {                                                                          \
        (void)e; /* not every init takes the rng */                            \
        static tg_##kind mod;                                                  \
        if ((init) < 0)                                                        \
            note("making a " #kind ": %s", tg_last_error());                   \
        after_row(free_##kind, &mod);                                          \
        return &mod;                                                           \
    }
MADE(head, tg_head_init(&mod, TG_FLOAT64, 32, 16, &e->rng))
/* A (1,) float64 zero, freed after the row. */
static tg_tensor *one_element(void)
{
    return temp(tg_zeros(TG_FLOAT64, TG_SHAPE(1)));
}

/* h with its path set to p (any value, valid or not). */
static tg_head *with_path(tg_head *h, tg_head_path p)
{
    h->path = p;
    return h;
}
MADE(linear, tg_linear_init(&mod, TG_FLOAT64, 32, 16, true, &e->rng))
MADE(embed, tg_embed_init(&mod, TG_FLOAT64, 16, 32, &e->rng))
MADE(layernorm, tg_layernorm_init(&mod, TG_FLOAT64, 32))
MADE(mha, tg_mha_init(&mod, TG_FLOAT64, 32, 4, &e->rng))
MADE(mlp, tg_mlp_init(&mod, TG_FLOAT64, 32, true, &e->rng))
MADE(block, tg_block_init(&mod, TG_FLOAT64, 32, 4, true, &e->rng))
MADE(gpt, tg_gpt_init(&mod, GPT_CFG, &e->rng))

/* A row whose call is an init into `mod`, a zeroed module of this type: it
 * must fail and leave the module zeroed, holding nothing. */
#define INIT_ROW(label, type, call, ...)                                       \
    do {                                                                       \
        if (ROW_HERE(label, __VA_ARGS__)) {                                    \
            type mod, zero;                                                    \
            memset(&mod, 0, sizeof mod);                                       \
            memset(&zero, 0, sizeof zero);                                     \
            w->failed = (call) < 0;                                            \
            if (memcmp(&mod, &zero, sizeof mod))                               \
                note("%s: a failed init left the module not zeroed", label);   \
        }                                                                      \
    } while (0)

/* ---- optimizers --------------------------------------------------------- */

/* True when tg_optim_new failed; an optimizer made anyway is freed. */
static bool optim_failed(tg_optim *o)
{
    tg_optim_free(o);
    return o == NULL;
}

/* A row on tg_optim_new over ("x": x, "second": m) with `config` whose
 * `field` is set to `value`. */
#define OPTIM_ROW(label, config, field, value, ...)                            \
    do {                                                                       \
        if (ROW_HERE(label, __VA_ARGS__)) {                                    \
            tg_optim_config cfg = (config);                                    \
            cfg.field = (value);                                               \
            w->failed =                                                        \
                optim_failed(tg_optim_new(x_and(e, "second", e->m), cfg));     \
        }                                                                      \
    } while (0)

/* ---- checkpoints -------------------------------------------------------- */

/* Saves ("x": zeros (4,8,32), saved_name: (3,) of `saved_dt`), then loads
 * that into ("x": e->x, "v": into): the mismatch at "v" must fail the whole
 * load and leave e->x as it was (the runner's snapshot checks it). */
static bool load_npz_mismatch(env *e, tg_tensor *into, tg_dtype saved_dt,
                              const char *saved_name)
{
    tg_tensor *zeros = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 8, 32));
    tg_tensor *v = tg_zeros(saved_dt, TG_SHAPE(3));
    tg_params saved, loaded;
    params_of(&saved, 2, (const char *[]){"x", saved_name},
              (tg_tensor *[]){zeros, v});
    params_of(&loaded, 2, (const char *[]){"x", "v"},
              (tg_tensor *[]){e->x, into});
    const char *path = tmp_path("mismatch.npz");
    bool f = false;
    if (tg_save_npz(&saved, path) < 0)
        note("load_npz mismatch: saving failed: %s", tg_last_error());
    else
        f = tg_load_npz(&loaded, path) < 0;
    tg_params_free(&saved);
    tg_params_free(&loaded);
    tg_release(zeros);
    tg_release(v);
    return f;
}

/* ---- checkpoint formats: .safetensors, whole-file reads ---------------- */

/* A .safetensors file: the header text (its true length), then data_len
 * bytes of data. Removed after the row. */
static const char *st_file(const char *name, const char *text, size_t data_len)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        note("st_file: cannot write %s", path);
        return path;
    }
    uint64_t n = strlen(text);
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i)) & 0xff, f);
    fputs(text, f);
    for (size_t i = 0; i < data_len; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

/* Saves ("x": zeros (4,8,32), "v": (3,) float64) as .safetensors, then
 * loads that into ("x": e->x, "v": into): the mismatch at "v" must fail the
 * whole load and leave e->x as it was. */
static bool load_safetensors_mismatch(env *e, tg_tensor *into)
{
    tg_tensor *zeros = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 8, 32));
    tg_tensor *v = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    tg_params saved;
    params_of(&saved, 2, (const char *[]){"x", "v"}, (tg_tensor *[]){zeros, v});
    const char *path = tmp_path("mismatch.safetensors");
    bool f = false;
    if (tg_save_safetensors(&saved, path) < 0)
        note("load_safetensors mismatch: saving failed: %s", tg_last_error());
    else
        f = tg_load_safetensors(x_and(e, "v", into), path) < 0;
    tg_params_free(&saved);
    tg_release(zeros);
    tg_release(v);
    return f;
}

/* ---- learning rate, groups, state, checkpoints with the optimizer -------- */

static void free_optim(void *o) { tg_optim_free(o); }

/* Adam (or AdamW when adamw) over ("x": x, "m": m), freed after the row. */
static tg_optim *made_optim(env *e, bool adamw)
{
    static tg_params ps;
    params_of(&ps, 2, (const char *[]){"x", "m"}, (tg_tensor *[]){e->x, e->m});
    tg_optim *o = tg_optim_new(&ps, adamw ? tg_adamw_config(1e-3, 0.1)
                                          : tg_adam_config(1e-3));
    tg_params_free(&ps);
    if (!o)
        note("making an optimizer: %s", tg_last_error());
    after_row(free_optim, o);
    return o;
}

/* The list ("x": x, "m": m) of a model, freed after the row (one a row:
 * the list is static). */
static tg_params *model_list(env *e)
{
    static tg_params ps;
    params_of(&ps, 2, (const char *[]){"x", "m"}, (tg_tensor *[]){e->x, e->m});
    after_row(free_list, &ps);
    return &ps;
}

/* True when tg_params_split_decay(all, ...) into two empty lists failed. */
static bool split_failed(const tg_params *all)
{
    tg_params d, nd;
    tg_params_init(&d);
    tg_params_init(&nd);
    int rc = tg_params_split_decay(all, &d, &nd);
    tg_params_free(&d);
    tg_params_free(&nd);
    return rc < 0;
}

/* True when a checkpoint saved with Adam fails to load into AdamW over the
 * same parameters (the same names: the kind tells them apart). */
static bool load_checkpoint_other_kind(env *e)
{
    const char *path = tmp_path("adam.npz");
    tg_params *model = model_list(e);
    if (tg_save_checkpoint(model, made_optim(e, false), path) < 0) {
        note("saving a checkpoint: %s", tg_last_error());
        return false;
    }
    return tg_load_checkpoint(model, made_optim(e, true), path) < 0;
}

/* ---- plots -------------------------------------------------------------- */

static const double ys[3] = {1, 2, 3};
static const char *const bar_labels[3] = {"a", "b", "c"};

/* One series "y" of n values y (x: 0, 1, ...). */
#define SERIES(y_, n_)                                                         \
    (&(tg_series){.label = "y", .x = NULL, .y = (y_), .n = (n_)})

/* ---- report pages ------------------------------------------------------- */

static void free_report(void *r) { tg_report_free(r); }

/* An empty report, freed after the row. */
static tg_report *report(void)
{
    tg_report *r = tg_report_new("t");
    after_row(free_report, r);
    return r;
}

/* ---- the table ---------------------------------------------------------- */

static void nn_table(table_walk *w, env *e)
{
    /* parameter lists */
    ROW_RC("params_add NULL list", tg_params_add(NULL, NULL, "w", e->x),
           "params_add:", "NULL");
    ROW_RC("params_add NULL name", tg_params_add(empty_list(), "p", NULL, e->x),
           "params_add:", "NULL");
    ROW_RC("params_add long name",
           tg_params_add(empty_list(), "p", make_long_name(), e->x),
           "params_add:", "127");
    ROW_RC("params_add duplicate",
           tg_params_add(added(empty_list(), "p", "w", e->x), "p", "w", e->m),
           "params_add:", "duplicate", "'p.w'");

    /* head */
    INIT_ROW("head_init NULL", tg_head,
             tg_head_init(NULL, TG_FLOAT64, 32, 16, &e->rng),
             "head_init:", "NULL");
    INIT_ROW("head_init NULL rng", tg_head,
             tg_head_init(&mod, TG_FLOAT64, 32, 16, NULL), "head_init:", "rng");
    INIT_ROW("head_init bool", tg_head,
             tg_head_init(&mod, TG_BOOL, 32, 16, &e->rng),
             "head_init:", "bool");
    INIT_ROW("head_init n_embd 0", tg_head,
             tg_head_init(&mod, TG_FLOAT64, 0, 16, &e->rng),
             "head_init:", "n_embd 0");
    INIT_ROW("head_init head_size -16", tg_head,
             tg_head_init(&mod, TG_FLOAT64, 32, -16, &e->rng),
             "head_init:", "head_size -16");
    ROW("head_forward NULL head", tg_head_forward(NULL, e->x), "head:", "NULL");
    ROW("head_forward zeroed head", tg_head_forward(&(tg_head){0}, e->x),
        "head:", "not initialised");
    ROW("head_forward 2-d x", tg_head_forward(made_head(e), e->m),
        "head:", "(16,32)");
    ROW("head_forward float32 x", tg_head_forward(made_head(e), e->x32),
        "head:", "float32");
    ROW("head_forward bad path",
        tg_head_forward(with_path(made_head(e), (tg_head_path)3), e->x),
        "head:", "path 3 is not a tg_head_path");
    ROW_RC("head_params NULL head", tg_head_params(NULL, NULL, "h"),
           "head_params:", "NULL");
    ROW_RC("head_params zeroed head", tg_head_params(&(tg_head){0}, NULL, "h"),
           "head_params:", "not initialised");

    /* linear */
    INIT_ROW("linear_init NULL", tg_linear,
             tg_linear_init(NULL, TG_FLOAT64, 32, 16, true, &e->rng),
             "linear_init:", "NULL");
    INIT_ROW("linear_init NULL rng", tg_linear,
             tg_linear_init(&mod, TG_FLOAT64, 32, 16, true, NULL),
             "linear_init:", "rng");
    INIT_ROW("linear_init int64", tg_linear,
             tg_linear_init(&mod, TG_INT64, 32, 16, true, &e->rng),
             "linear_init:", "int64");
    INIT_ROW("linear_init out 0", tg_linear,
             tg_linear_init(&mod, TG_FLOAT64, 32, 0, false, &e->rng),
             "linear_init:", "out 0");
    ROW("linear_forward NULL layer", tg_linear_forward(NULL, e->x),
        "linear:", "NULL");
    ROW("linear_forward zeroed layer", tg_linear_forward(&(tg_linear){0}, e->x),
        "linear:", "not initialised");
    ROW("linear_forward in 3", tg_linear_forward(made_linear(e), e->v3),
        "linear:", "(3,)");
    ROW("linear_forward 0-d x", tg_linear_forward(made_linear(e), e->s),
        "linear:", "()");
    ROW("linear_forward float32 x", tg_linear_forward(made_linear(e), e->x32),
        "linear:", "float32");
    ROW_RC("linear_params NULL layer", tg_linear_params(NULL, NULL, "l"),
           "linear_params:", "NULL");
    ROW_RC("linear_params zeroed layer",
           tg_linear_params(&(tg_linear){0}, NULL, "l"),
           "linear_params:", "not initialised");

    /* embed */
    INIT_ROW("embed_init NULL", tg_embed,
             tg_embed_init(NULL, TG_FLOAT64, 16, 32, &e->rng),
             "embed_init:", "NULL");
    INIT_ROW("embed_init NULL rng", tg_embed,
             tg_embed_init(&mod, TG_FLOAT64, 16, 32, NULL),
             "embed_init:", "rng");
    INIT_ROW("embed_init bool", tg_embed,
             tg_embed_init(&mod, TG_BOOL, 16, 32, &e->rng),
             "embed_init:", "bool");
    INIT_ROW("embed_init num -16", tg_embed,
             tg_embed_init(&mod, TG_FLOAT64, -16, 32, &e->rng),
             "embed_init:", "num -16");
    ROW("embed_forward NULL table", tg_embed_forward(NULL, e->ids),
        "embed:", "NULL");
    ROW("embed_forward zeroed table", tg_embed_forward(&(tg_embed){0}, e->ids),
        "embed:", "not initialised");
    ROW("embed_forward float ids", tg_embed_forward(made_embed(e), e->x),
        "embed:", "int64", "float64");
    ROW("embed_forward id 16",
        tg_embed_forward(made_embed(e), int64_full(TG_SHAPE(2), 16)),
        "embedding:", "id 16", "[0, 16)");
    ROW("embed_positions NULL table", tg_embed_positions(NULL, 4),
        "embed_positions:", "NULL");
    ROW("embed_positions zeroed table", tg_embed_positions(&(tg_embed){0}, 4),
        "embed_positions:", "not initialised");
    ROW("embed_positions -1", tg_embed_positions(made_embed(e), -1),
        "embed_positions:", "-1");
    ROW("embed_positions 17 of 16", tg_embed_positions(made_embed(e), 17),
        "embed_positions:", "17", "16");
    ROW_RC("embed_params NULL table", tg_embed_params(NULL, NULL, "e"),
           "embed_params:", "NULL");
    ROW_RC("embed_params zeroed table",
           tg_embed_params(&(tg_embed){0}, NULL, "e"),
           "embed_params:", "not initialised");

    /* layernorm */
    INIT_ROW("layernorm_init NULL", tg_layernorm,
             tg_layernorm_init(NULL, TG_FLOAT64, 32),
             "layernorm_init:", "NULL");
    INIT_ROW("layernorm_init bool", tg_layernorm,
             tg_layernorm_init(&mod, TG_BOOL, 32), "layernorm_init:", "bool");
    INIT_ROW("layernorm_init dim 0", tg_layernorm,
             tg_layernorm_init(&mod, TG_FLOAT64, 0), "layernorm_init:", "dim");
    ROW("layernorm_forward NULL", tg_layernorm_forward(NULL, e->x),
        "layernorm:", "NULL");
    ROW("layernorm_forward zeroed",
        tg_layernorm_forward(&(tg_layernorm){0}, e->x),
        "layernorm:", "not initialised");
    ROW("layernorm_forward dim 3",
        tg_layernorm_forward(made_layernorm(e), e->v3), "layernorm:", "(3,)");
    ROW("layernorm_forward float32 x",
        tg_layernorm_forward(made_layernorm(e), e->x32),
        "layernorm:", "float32");
    ROW_RC("layernorm_params NULL", tg_layernorm_params(NULL, NULL, "n"),
           "layernorm_params:", "NULL");
    ROW_RC("layernorm_params zeroed",
           tg_layernorm_params(&(tg_layernorm){0}, NULL, "n"),
           "layernorm_params:", "not initialised");

    /* mha */
    INIT_ROW("mha_init NULL", tg_mha,
             tg_mha_init(NULL, TG_FLOAT64, 32, 4, &e->rng),
             "mha_init:", "NULL");
    INIT_ROW("mha_init 5 heads of 32", tg_mha,
             tg_mha_init(&mod, TG_FLOAT64, 32, 5, &e->rng), "mha_init:", "5",
             "32");
    INIT_ROW("mha_init 0 heads", tg_mha,
             tg_mha_init(&mod, TG_FLOAT64, 32, 0, &e->rng), "mha_init:", "0");
    ROW("mha_forward NULL", tg_mha_forward(NULL, e->x), "mha:", "NULL");
    ROW("mha_forward zeroed", tg_mha_forward(&(tg_mha){0}, e->x),
        "mha:", "not initialised");
    ROW("mha_forward 2-d x", tg_mha_forward(made_mha(e), e->m),
        "mha:", "(16,32)");
    ROW("mha_forward float32 x", tg_mha_forward(made_mha(e), e->x32),
        "mha:", "float32");
    ROW_RC("mha_params NULL", tg_mha_params(NULL, NULL, "a"),
           "mha_params:", "NULL");
    ROW_RC("mha_params zeroed", tg_mha_params(&(tg_mha){0}, NULL, "a"),
           "mha_params:", "not initialised");
    ROW_RC("mha_params long prefix",
           tg_mha_params(made_mha(e), empty_list(), make_long_name()),
           "mha_params", "too long");

    /* mlp */
    INIT_ROW("mlp_init NULL", tg_mlp,
             tg_mlp_init(NULL, TG_FLOAT64, 32, true, &e->rng),
             "mlp_init:", "NULL");
    INIT_ROW("mlp_init n_embd 0", tg_mlp,
             tg_mlp_init(&mod, TG_FLOAT64, 0, true, &e->rng), "mlp_init:", "0");
    ROW("mlp_forward NULL", tg_mlp_forward(NULL, e->x), "mlp:", "NULL");
    ROW("mlp_forward zeroed", tg_mlp_forward(&(tg_mlp){0}, e->x),
        "mlp:", "not initialised");
    ROW_RC("mlp_params NULL", tg_mlp_params(NULL, NULL, "f"),
           "mlp_params:", "NULL");
    ROW_RC("mlp_params zeroed", tg_mlp_params(&(tg_mlp){0}, NULL, "f"),
           "mlp_params:", "not initialised");

    /* block */
    INIT_ROW("block_init NULL", tg_block,
             tg_block_init(NULL, TG_FLOAT64, 32, 4, true, &e->rng),
             "block_init:", "NULL");
    ROW("block_forward NULL", tg_block_forward(NULL, e->x), "block:", "NULL");
    ROW("block_forward zeroed", tg_block_forward(&(tg_block){0}, e->x),
        "block:", "not initialised");
    ROW("block_forward 2-d x", tg_block_forward(made_block(e), e->m),
        "block:", "(16,32)");
    ROW("block_forward float32 x", tg_block_forward(made_block(e), e->x32),
        "block:", "float32");
    ROW_RC("block_params NULL", tg_block_params(NULL, NULL, "b"),
           "block_params:", "NULL");
    ROW_RC("block_params zeroed", tg_block_params(&(tg_block){0}, NULL, "b"),
           "block_params:", "not initialised");

    /* gpt */
    INIT_ROW("gpt_init NULL", tg_gpt, tg_gpt_init(NULL, GPT_CFG, &e->rng),
             "gpt_init:", "NULL");
    INIT_ROW("gpt_init vocab_size 0", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_with(0, 0), &e->rng),
             "gpt_init:", "vocab_size 0");
    INIT_ROW("gpt_init n_layer -1", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_with(4, -1), &e->rng),
             "gpt_init:", "n_layer -1");
    INIT_ROW("gpt_init int64", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_with(5, TG_INT64), &e->rng),
             "gpt_init:", "int64");
    INIT_ROW("gpt_init attn_path 3", tg_gpt,
             tg_gpt_init(&mod,
                         (tg_gpt_config){.vocab_size = 16,
                                         .block_size = 8,
                                         .n_embd = 32,
                                         .n_head = 4,
                                         .n_layer = 1,
                                         .dtype = TG_FLOAT64,
                                         .attn_path = (tg_head_path)3},
                         &e->rng),
             "gpt_init:", "attn_path 3 is not a tg_head_path (0..2)");
    ROW("gpt_forward NULL", tg_gpt_forward(NULL, e->ids), "gpt:", "NULL");
    ROW("gpt_forward zeroed", tg_gpt_forward(&(tg_gpt){0}, e->ids),
        "gpt:", "not initialised");
    ROW("gpt_forward float ids", tg_gpt_forward(made_gpt(e), e->m),
        "gpt:", "int64", "float64 (16,32)");
    ROW("gpt_forward 1-d ids", tg_gpt_forward(made_gpt(e), e->v3),
        "gpt:", "(3,)");
    ROW("gpt_forward T 9 > 8",
        tg_gpt_forward(made_gpt(e), int64_full(TG_SHAPE(2, 9), 0)),
        "gpt:", "(2,9)", "block_size 8");
    ROW("gpt_forward id 16",
        tg_gpt_forward(made_gpt(e), int64_full(TG_SHAPE(2, 4), 16)),
        "embedding:", "id 16", "[0, 16)");
    ROW("gpt_loss NULL", tg_gpt_loss(NULL, e->ids, e->ids),
        "gpt_loss:", "NULL");
    ROW("gpt_loss targets shape",
        tg_gpt_loss(made_gpt(e), e->ids, int64_full(TG_SHAPE(4, 7), 0)),
        "gpt_loss:", "(4,7)", "(4,8)");
    ROW("gpt_loss float targets", tg_gpt_loss(made_gpt(e), e->ids, e->m),
        "gpt_loss:", "int64", "float64");
    ROW("gpt_loss target 16",
        tg_gpt_loss(made_gpt(e), e->ids, int64_full(TG_SHAPE(4, 8), 16)),
        "cross_entropy:", "target 16", "[0, 16)");
    ROW("gpt_generate NULL", tg_gpt_generate(NULL, e->ids, 2, 1, &e->rng),
        "gpt_generate:", "NULL");
    ROW("gpt_generate zeroed",
        tg_gpt_generate(&(tg_gpt){0}, e->ids, 2, 1, &e->rng),
        "gpt_generate:", "not initialised");
    ROW("gpt_generate n_new -1",
        tg_gpt_generate(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), -1, 1,
                        &e->rng),
        "gpt_generate:", "-1");
    ROW("gpt_generate temperature 0",
        tg_gpt_generate(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2, 0,
                        &e->rng),
        "gpt_generate:", "temperature");
    ROW("gpt_generate NULL rng",
        tg_gpt_generate(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2, 1, NULL),
        "gpt_generate:", "NULL");
    ROW("gpt_generate batch of 4",
        tg_gpt_generate(made_gpt(e), e->ids, 2, 1, &e->rng),
        "gpt_generate:", "(1,T)", "(4,8)");
    ROW("gpt_generate id 16",
        tg_gpt_generate(made_gpt(e), int64_full(TG_SHAPE(1, 3), 16), 2, 1,
                        &e->rng),
        "embedding:", "id 16", "[0, 16)");
    ROW_RC("gpt_params NULL", tg_gpt_params(NULL, NULL, "g"),
           "gpt_params:", "NULL");
    ROW_RC("gpt_params zeroed", tg_gpt_params(&(tg_gpt){0}, NULL, "g"),
           "gpt_params:", "not initialised");

    /* pretrained GPT checkpoints (tests/check_gpt2.c has the rows that need
     * a real state dict: missing, unknown and misshapen tensors) */
    INIT_ROW("gpt_from_state_dict NULL model", tg_gpt,
             tg_gpt_from_state_dict(NULL, x_and(e, "v", e->v3), 4, TG_FLOAT64),
             "gpt_from_state_dict:", "model is NULL");
    INIT_ROW("gpt_from_state_dict NULL state dict", tg_gpt,
             tg_gpt_from_state_dict(&mod, NULL, 4, TG_FLOAT64),
             "gpt_from_state_dict:", "state dict is NULL");
    INIT_ROW("gpt_from_state_dict int64", tg_gpt,
             tg_gpt_from_state_dict(&mod, x_and(e, "v", e->v3), 4, TG_INT64),
             "gpt_from_state_dict:", "int64");
    INIT_ROW("gpt_from_state_dict no wte", tg_gpt,
             tg_gpt_from_state_dict(&mod, x_and(e, "v", e->v3), 4, TG_FLOAT64),
             "gpt_from_state_dict:", "'transformer.wpe.weight'",
             "not a nanoGPT or GPT-2");
    INIT_ROW("gpt_from_state_dict_with NULL opts", tg_gpt,
             tg_gpt_from_state_dict_with(&mod, x_and(e, "v", e->v3), NULL),
             "gpt_from_state_dict_with:", "opts is NULL");
    INIT_ROW(
        "gpt_from_state_dict_with gelu 3", tg_gpt,
        tg_gpt_from_state_dict_with(
            &mod, x_and(e, "v", e->v3),
            &(tg_gpt_load_opts){.n_head = 4, .gelu = (tg_gelu_form)3}),
        "gpt_from_state_dict_with:", "gelu 3 is not a tg_gelu_form (0..2)");
    INIT_ROW(
        "gpt_from_state_dict_with attn_path -1", tg_gpt,
        tg_gpt_from_state_dict_with(
            &mod, x_and(e, "v", e->v3),
            &(tg_gpt_load_opts){.n_head = 4, .attn_path = (tg_head_path)-1}),
        "gpt_from_state_dict_with:",
        "attn_path -1 is not a tg_head_path (0..2)");
    INIT_ROW("gpt_from_state_dict_with int64", tg_gpt,
             tg_gpt_from_state_dict_with(
                 &mod, x_and(e, "v", e->v3),
                 &(tg_gpt_load_opts){.n_head = 4, .dtype = TG_INT64}),
             "gpt_from_state_dict:", "int64");
    INIT_ROW("gpt_load_pretrained_with NULL opts", tg_gpt,
             tg_gpt_load_pretrained_with(
                 &mod, "/nonexistent/tapegrad/a.safetensors", NULL),
             "gpt_load_pretrained_with:", "opts is NULL");
    INIT_ROW("gpt_load_pretrained_with gelu 7", tg_gpt,
             tg_gpt_load_pretrained_with(
                 &mod, "/nonexistent/tapegrad/a.safetensors",
                 &(tg_gpt_load_opts){.n_head = 4, .gelu = (tg_gelu_form)7}),
             "gpt_load_pretrained_with:", "gelu 7");
    INIT_ROW("gpt_load_pretrained_with NULL path", tg_gpt,
             tg_gpt_load_pretrained_with(&mod, NULL,
                                         &(tg_gpt_load_opts){.n_head = 4}),
             "gpt_load_pretrained:", "path is NULL");
    INIT_ROW("gpt_load_pretrained NULL path", tg_gpt,
             tg_gpt_load_pretrained(&mod, NULL, 4, TG_FLOAT64),
             "gpt_load_pretrained:", "path is NULL");
    INIT_ROW("gpt_load_pretrained missing file", tg_gpt,
             tg_gpt_load_pretrained(&mod, "/nonexistent/tapegrad/a.safetensors",
                                    4, TG_FLOAT64),
             "gpt_load_pretrained:", "/nonexistent/tapegrad/a.safetensors");
    ROW_RC("gpt_state_dict NULL list", tg_gpt_state_dict(made_gpt(e), NULL),
           "gpt_state_dict:", "the list is NULL");
    ROW_RC("gpt_save_pretrained NULL path",
           tg_gpt_save_pretrained(made_gpt(e), NULL),
           "gpt_save_pretrained:", "path is NULL");
    ROW_RC("gpt_save_pretrained of a model GPT-2's names cannot hold",
           tg_gpt_save_pretrained(made_gpt(e), "/nonexistent/tapegrad/g.st"),
           "gpt_save_pretrained:", "gpt_state_dict:", "tanh GELU");
    /* llm.c's files (tests/check_llmc.c: bad headers and sizes, one by one) */
    INIT_ROW("gpt_load_llmc NULL path", tg_gpt,
             tg_gpt_load_llmc(&mod, NULL, TG_FLOAT32),
             "gpt_load_llmc:", "path is NULL");
    INIT_ROW("gpt_load_llmc missing file", tg_gpt,
             tg_gpt_load_llmc(&mod, "/nonexistent/tapegrad/m.bin", TG_FLOAT32),
             "gpt_load_llmc:", "/nonexistent/tapegrad/m.bin", "cannot open");
    INIT_ROW("gpt_load_llmc_with NULL opts", tg_gpt,
             tg_gpt_load_llmc_with(&mod, "/nonexistent/tapegrad/m.bin", NULL),
             "gpt_load_llmc_with:", "opts is NULL");
    INIT_ROW("gpt_load_llmc_with attn_path 5", tg_gpt,
             tg_gpt_load_llmc_with(
                 &mod, "/nonexistent/tapegrad/m.bin",
                 &(tg_gpt_load_opts){.attn_path = (tg_head_path)5}),
             "gpt_load_llmc_with:", "attn_path 5");
    INIT_ROW("gpt_load_llmc_with missing file", tg_gpt,
             tg_gpt_load_llmc_with(&mod, "/nonexistent/tapegrad/m.bin",
                                   &(tg_gpt_load_opts){0}),
             "gpt_load_llmc:", "/nonexistent/tapegrad/m.bin", "cannot open");
    ROW_RC("gpt_save_llmc of a model llm.c cannot run",
           tg_gpt_save_llmc(made_gpt(e), "/nonexistent/tapegrad/m.bin"),
           "gpt_save_llmc:", "/nonexistent/tapegrad/m.bin",
           "llm.c's GPT-2 has");
    ROW("load_tokens_llmc NULL path", tg_load_tokens_llmc(NULL),
        "load_tokens_llmc:", "path is NULL");
    ROW("load_tokens_llmc missing file",
        tg_load_tokens_llmc("/nonexistent/tapegrad/t.bin"),
        "load_tokens_llmc:", "/nonexistent/tapegrad/t.bin", "cannot open");
    ROW_RC("save_tokens_llmc float tokens",
           tg_save_tokens_llmc(e->v3, "/nonexistent/tapegrad/t.bin"),
           "save_tokens_llmc:", "/nonexistent/tapegrad/t.bin", "float64");

    /* optimizers */
    OPTIM_ROW("optim_new lr -0.1", tg_adam_config(1e-3), lr, -0.1,
              "optim_new:", "lr -0.1");
    OPTIM_ROW("optim_new lr NaN", tg_sgd_config(0.1, 0, 0), lr, NAN,
              "optim_new:", "lr nan");
    OPTIM_ROW("optim_new weight_decay -0.5", tg_adamw_config(1e-3, 0.01),
              weight_decay, -0.5, "optim_new:", "weight_decay -0.5");
    OPTIM_ROW("optim_new momentum -0.9", tg_sgd_config(0.1, 0.9, 0), momentum,
              -0.9, "optim_new:", "momentum -0.9");
    OPTIM_ROW("optim_new beta1 1", tg_adam_config(1e-3), beta1, 1.0,
              "optim_new:", "beta1 1");
    OPTIM_ROW("optim_new beta2 -0.5", tg_adamw_config(1e-3, 0.01), beta2, -0.5,
              "optim_new:", "beta2 -0.5");
    OPTIM_ROW("optim_new eps -1e-8", tg_adam_config(1e-3), eps, -1e-8,
              "optim_new:", "eps -1e-08");
    OPTIM_ROW("optim_new kind 7", tg_adam_config(1e-3), kind, (tg_optim_kind)7,
              "optim_new:", "kind 7");
    ROW_IF("optim_new NULL list",
           optim_failed(tg_optim_new(NULL, tg_adam_config(1e-3))),
           "optim_new:", "NULL");
    ROW_IF("optim_new NULL parameter",
           optim_failed(
               tg_optim_new(x_and(e, "second", NULL), tg_adam_config(1e-3))),
           "optim_new:", "'second'", "NULL");
    ROW_IF("optim_new bool parameter",
           optim_failed(
               tg_optim_new(x_and(e, "second", e->mask), tg_adam_config(1e-3))),
           "optim_new:", "'second'", "bool (4,8,32)");
    ROW_IF("optim_new same tensor twice",
           optim_failed(
               tg_optim_new(x_and(e, "second", e->x), tg_adam_config(1e-3))),
           "optim_new:", "'x'", "'second'");
    ROW_RC("optim_step NULL", tg_optim_step(NULL), "optim_step:", "NULL");
    ROW_RC("optim_set_lr NULL", tg_optim_set_lr(NULL, 0.1),
           "optim_set_lr:", "NULL");
    ROW_RC("optim_set_lr -1", tg_optim_set_lr(made_optim(e, false), -1),
           "optim_set_lr:", "lr -1");
    ROW_RC("optim_set_lr NaN", tg_optim_set_lr(made_optim(e, false), NAN),
           "optim_set_lr:", "lr nan");
    ROW_IF("optim_get_lr NULL", isnan(tg_optim_get_lr(NULL)),
           "optim_get_lr:", "NULL");
    ROW_IF("optim_new_groups NULL array",
           optim_failed(tg_optim_new_groups(NULL, 2, tg_adam_config(1e-3))),
           "optim_new:", "NULL");
    ROW_IF("optim_new_groups a parameter in two groups",
           optim_failed(tg_optim_new_groups(
               (tg_param_group[]){
                   {x_and(e, "second", e->m), 0.1, 1},
                   {added(empty_list(), NULL, "again", e->x), 0, 1}},
               2, tg_adamw_config(1e-3, 0))),
           "optim_new:", "'again' of group 1", "'x' of group 0");
    ROW_IF("optim_new_groups weight_decay -1",
           optim_failed(tg_optim_new_groups(
               (tg_param_group[]){{x_and(e, "second", e->m), -1, 1}}, 1,
               tg_adamw_config(1e-3, 0))),
           "optim_new:", "group 0", "weight_decay -1");
    ROW_IF("optim_new_groups lr_scale inf",
           optim_failed(tg_optim_new_groups(
               (tg_param_group[]){{x_and(e, "second", e->m), 0, INFINITY}}, 1,
               tg_adamw_config(1e-3, 0))),
           "optim_new:", "group 0", "lr_scale inf");
    ROW_IF("params_split_decay NULL list", split_failed(NULL),
           "params_split_decay:", "NULL");
    ROW_IF("params_split_decay NULL parameter",
           split_failed(x_and(e, "second", NULL)),
           "params_split_decay:", "'second'", "NULL");
    ROW_IF("lr_constant it -1", isnan(tg_lr_constant(-1, 0.1)),
           "lr_constant:", "it -1");
    ROW_IF("lr_step step_size 0", isnan(tg_lr_step(3, 0.1, 0, 0.5)),
           "lr_step:", "step_size 0");
    ROW_IF("lr_warmup_cosine decay at warmup",
           isnan(tg_lr_warmup_cosine(3, 1e-3, 1e-4, 10, 10)),
           "lr_warmup_cosine:", "lr_decay_iters");
    ROW_RC("optim_state NULL optimizer",
           tg_optim_state(NULL, empty_list(), "o"), "optim_state:", "NULL");
    ROW_RC("optim_state NULL list",
           tg_optim_state(made_optim(e, false), NULL, "o"),
           "optim_state:", "NULL");
    ROW_RC("optim_state long prefix",
           tg_optim_state(made_optim(e, false), empty_list(), make_long_name()),
           "optim_state:", "longer than 127");
    ROW_RC("save_checkpoint NULL optimizer",
           tg_save_checkpoint(model_list(e), NULL, tmp_path("c.npz")),
           "save_checkpoint:", "NULL");
    ROW_RC("save_checkpoint missing dir",
           tg_save_checkpoint(model_list(e), made_optim(e, false),
                              "/nonexistent/tapegrad/c.npz"),
           "save_checkpoint:", "/nonexistent/tapegrad/c.npz");
    ROW_RC("load_checkpoint NULL path",
           tg_load_checkpoint(model_list(e), made_optim(e, false), NULL),
           "load_checkpoint:", "NULL");
    ROW_RC("load_checkpoint missing file",
           tg_load_checkpoint(model_list(e), made_optim(e, false),
                              "/nonexistent/tapegrad/c.npz"),
           "load_checkpoint:", "/nonexistent/tapegrad/c.npz");
    ROW_IF("load_checkpoint another optimizer's state",
           load_checkpoint_other_kind(e), "load_checkpoint:", "'optim.kind'",
           "another optimizer's");

    /* checkpoints */
    ROW_RC("save_npz NULL list", tg_save_npz(NULL, tmp_path("a.npz")),
           "save_npz:", "NULL");
    ROW_RC("save_npz NULL path", tg_save_npz(x_and(e, "v", e->v3), NULL),
           "save_npz:", "NULL");
    ROW_RC("save_npz missing dir",
           tg_save_npz(x_and(e, "v", e->v3), "/nonexistent/tapegrad/a.npz"),
           "save_npz:", "/nonexistent/tapegrad/a.npz");
    ROW_RC("save_npz directory", tg_save_npz(x_and(e, "v", e->v3), "/"),
           "save_npz:", "/");
    /* 2^29 float64 elements (4 GiB) from one expanded element */
    ROW_RC("save_npz over 4 GiB",
           tg_save_npz(x_and(e, "big",
                             temp(tg_expand(one_element(), TG_SHAPE(1 << 29)))),
                       tmp_path("big.npz")),
           "save_npz:", "big.npz", "4 GiB");
    ROW_RC("save_npz NULL parameter",
           tg_save_npz(x_and(e, "v", NULL), tmp_path("a.npz")),
           "save_npz:", "'v'", "NULL");
    ROW_RC("load_npz NULL list", tg_load_npz(NULL, tmp_path("a.npz")),
           "load_npz:", "NULL");
    ROW_RC("load_npz NULL path", tg_load_npz(x_and(e, "v", e->v3), NULL),
           "load_npz:", "NULL");
    ROW_RC("load_npz missing file",
           tg_load_npz(x_and(e, "v", e->v3), "/nonexistent/tapegrad/a.npz"),
           "load_npz:", "/nonexistent/tapegrad/a.npz");
    ROW_RC("load_npz NULL parameter",
           tg_load_npz(x_and(e, "v", NULL), tmp_path("a.npz")),
           "load_npz:", "'v'", "NULL");
    ROW_RC("load_npz device", tg_load_npz(x_and(e, "v", e->v3), "/dev/zero"),
           "load_npz:", "/dev/zero", "not a regular file");
    ROW_RC("load_npz empty file",
           tg_load_npz(x_and(e, "v", e->v3), "/dev/null"),
           "load_npz:", "/dev/null");
    ROW_RC("load_npz directory", tg_load_npz(x_and(e, "v", e->v3), "/"),
           "load_npz:", "/");
    ROW_IF("load_npz shape", load_npz_mismatch(e, e->m, TG_FLOAT64, "v"),
           "load_npz:", "'v'", "(16,32)");
    ROW_IF("load_npz int64 into float64",
           load_npz_mismatch(e, e->v3, TG_INT64, "v"), "load_npz:", "'v'",
           "int64");
    ROW_IF("load_npz missing entry",
           load_npz_mismatch(e, e->v3, TG_FLOAT64, "w"), "load_npz:", "'v'");

    /* .safetensors and whole-file reads */
    ROW_RC("save_safetensors NULL list",
           tg_save_safetensors(NULL, tmp_path("a.safetensors")),
           "save_safetensors:", "NULL");
    ROW_RC("save_safetensors NULL path",
           tg_save_safetensors(x_and(e, "v", e->v3), NULL),
           "save_safetensors:", "NULL");
    ROW_RC("save_safetensors missing dir",
           tg_save_safetensors(x_and(e, "v", e->v3),
                               "/nonexistent/tapegrad/a.safetensors"),
           "save_safetensors:", "/nonexistent/tapegrad/a.safetensors");
    ROW_RC("save_safetensors NULL parameter",
           tg_save_safetensors(x_and(e, "v", NULL), tmp_path("a.safetensors")),
           "save_safetensors:", "'v'", "NULL");
    ROW_RC("save_safetensors parameter named __metadata__",
           tg_save_safetensors(x_and(e, "__metadata__", e->v3),
                               tmp_path("a.safetensors")),
           "save_safetensors:", "may not be named '__metadata__'");
    ROW_RC("load_safetensors NULL list",
           tg_load_safetensors(NULL, tmp_path("a.safetensors")),
           "load_safetensors:", "NULL");
    ROW_RC("load_safetensors NULL path",
           tg_load_safetensors(x_and(e, "v", e->v3), NULL),
           "load_safetensors:", "NULL");
    ROW_RC("load_safetensors missing file",
           tg_load_safetensors(x_and(e, "v", e->v3),
                               "/nonexistent/tapegrad/a.safetensors"),
           "load_safetensors:", "/nonexistent/tapegrad/a.safetensors");
    ROW_RC("load_safetensors device",
           tg_load_safetensors(x_and(e, "v", e->v3), "/dev/zero"),
           "load_safetensors:", "/dev/zero", "not a regular file");
    ROW_RC("load_safetensors NULL parameter",
           tg_load_safetensors(x_and(e, "v", NULL), tmp_path("a.safetensors")),
           "load_safetensors:", "'v'", "NULL");
    ROW_RC("load_safetensors bad JSON",
           tg_load_safetensors(x_and(e, "v", e->v3),
                               st_file("json.safetensors", "{\"v\":", 0)),
           "load_safetensors:", "json.safetensors", "bad JSON header");
    ROW_IF("load_safetensors shape", load_safetensors_mismatch(e, e->m),
           "load_safetensors:", "'v' has shape (16,32)", "(3,)");
    ROW_RC("read_safetensors NULL path",
           tg_read_safetensors(NULL, empty_list()),
           "read_safetensors:", "NULL");
    ROW_RC("read_safetensors NULL list",
           tg_read_safetensors(tmp_path("a.safetensors"), NULL),
           "read_safetensors:", "NULL");
    ROW_RC("read_safetensors missing file",
           tg_read_safetensors("/nonexistent/tapegrad/a.safetensors",
                               empty_list()),
           "read_safetensors:", "/nonexistent/tapegrad/a.safetensors");
    ROW_RC(
        "read_safetensors offsets out of range",
        tg_read_safetensors(st_file("range.safetensors",
                                    "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],"
                                    "\"data_offsets\":[0,16]}}",
                                    8),
                            empty_list()),
        "read_safetensors:", "range.safetensors",
        "'w': data_offsets [0, 16] out of range");
    ROW_RC(
        "read_safetensors unknown dtype",
        tg_read_safetensors(st_file("dtype.safetensors",
                                    "{\"w\":{\"dtype\":\"F12\",\"shape\":[1],"
                                    "\"data_offsets\":[0,8]}}",
                                    8),
                            empty_list()),
        "read_safetensors:", "'w'", "unknown dtype 'F12'");
    ROW_RC("read_npz NULL path", tg_read_npz(NULL, empty_list()),
           "read_npz:", "NULL");
    ROW_RC("read_npz NULL list", tg_read_npz(tmp_path("a.npz"), NULL),
           "read_npz:", "NULL");
    ROW_RC("read_npz missing file",
           tg_read_npz("/nonexistent/tapegrad/a.npz", empty_list()),
           "read_npz:", "/nonexistent/tapegrad/a.npz");
    ROW_RC("read_npz not a zip",
           tg_read_npz(st_file("text.npz", "{}", 30), empty_list()),
           "read_npz:", "text.npz", "not a zip file");

    /* plots */
    ROW_RC("plot_heatmap under a file",
           tg_plot_heatmap("/etc/passwd/p", e->m, "t", "x", "y", false),
           "plot_heatmap: cannot write", "/etc/passwd/p");
    ROW_RC("plot_heatmap NULL stem",
           tg_plot_heatmap(NULL, e->m, "t", "x", "y", false),
           "plot_heatmap:", "stem is NULL");
    ROW_RC("plot_heatmap empty stem",
           tg_plot_heatmap("", e->m, "t", "x", "y", false),
           "plot_heatmap:", "stem is empty");
    ROW_RC("plot_heatmap stem /tmp/",
           tg_plot_heatmap("/tmp/", e->m, "t", "x", "y", false),
           "plot_heatmap:", "'/tmp/'");
    ROW_RC("plot_heatmap missing dir",
           tg_plot_heatmap("/nonexistent/tapegrad/h", e->m, NULL, NULL, NULL,
                           true),
           "plot_heatmap:", "/nonexistent/tapegrad/h");
    ROW_RC("plot_heatmap 3-d",
           tg_plot_heatmap(tmp_path("h"), e->x, "t", "x", "y", false),
           "plot_heatmap:", "(4,8,32)");
    ROW_RC("plot_heatmap empty",
           tg_plot_heatmap(tmp_path("h"),
                           temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3))), "t", "x",
                           "y", false),
           "plot_heatmap:", "(0,3)");
    ROW_RC("plot_heatmap_with scale 7",
           tg_plot_heatmap_with(tmp_path("h"), e->m, NULL, "t",
                                &(tg_heatmap_opts){.scale = 7}),
           "plot_heatmap_with:", "scale 7", "not a tg_heatmap_scale");
    ROW_RC("plot_heatmap_with scale -1",
           tg_plot_heatmap_with(tmp_path("h"), e->m, NULL, "t",
                                &(tg_heatmap_opts){.scale = -1}),
           "plot_heatmap_with:", "scale -1", "not a tg_heatmap_scale");
    ROW_RC("plot_heatmap_with unit scale, a weight of 1.5",
           tg_plot_heatmap_with(
               tmp_path("h"), temp(tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 1.5)),
               NULL, "t", &(tg_heatmap_opts){.scale = TG_SCALE_UNIT}),
           "plot_heatmap_with:", "TG_SCALE_UNIT", "[0, 1], got 1.5 at [0, 0]");
    ROW_RC(
        "plot_heatmap_with unit scale, a weight of -0.25",
        tg_plot_heatmap_with(
            tmp_path("h"),
            temp(tg_from_f64(TG_SHAPE(2, 2), (const double[]){0, 1, -0.25, 0})),
            NULL, "t", &(tg_heatmap_opts){.scale = TG_SCALE_UNIT}),
        "plot_heatmap_with:", "-0.25 at [1, 0]");
    ROW_RC("plot_heatmap_with mask shape",
           tg_plot_heatmap_with(tmp_path("h"), e->m, e->mask, "t", NULL),
           "plot_heatmap_with:", "mask of shape (4,8,32)", "(16,32)");
    ROW_RC("plot_heatmap_with NULL stem",
           tg_plot_heatmap_with(NULL, e->m, NULL, "t", NULL),
           "plot_heatmap_with:", "stem is NULL");
    ROW_RC("plot_lines NULL series",
           tg_plot_lines(tmp_path("l"), NULL, 1, "t", "x", "y", false, false),
           "plot_lines:", "NULL");
    ROW_RC("plot_lines 0 series",
           tg_plot_lines(tmp_path("l"), SERIES(ys, 3), 0, "t", "x", "y", false,
                         false),
           "plot_lines:", "n_series 0");
    ROW_RC("plot_lines y NULL",
           tg_plot_lines(tmp_path("l"), SERIES(NULL, 3), 1, "t", "x", "y",
                         false, false),
           "plot_lines:", "series 0", "NULL");
    ROW_RC("plot_lines n 0",
           tg_plot_lines(tmp_path("l"), SERIES(ys, 0), 1, "t", "x", "y", false,
                         false),
           "plot_lines:", "series 0", "0");
    ROW_RC("plot_lines n -3",
           tg_plot_lines(tmp_path("l"), SERIES(ys, -3), 1, "t", "x", "y", false,
                         false),
           "plot_lines:", "series 0", "-3");
    ROW_RC("plot_lines NULL stem",
           tg_plot_lines(NULL, SERIES(ys, 3), 1, "t", "x", "y", false, false),
           "plot_lines:", "stem is NULL");
    ROW_RC("plot_lines missing dir",
           tg_plot_lines("/nonexistent/tapegrad/l", SERIES(ys, 3), 1, "t", "x",
                         "y", false, false),
           "plot_lines:", "/nonexistent/tapegrad/l");
    ROW_RC("plot_bars 0 bars",
           tg_plot_bars(tmp_path("b"), bar_labels, ys, 0, "t", "y"),
           "plot_bars:", "n 0");
    ROW_RC("plot_bars NULL labels",
           tg_plot_bars(tmp_path("b"), NULL, ys, 3, "t", "y"),
           "plot_bars:", "NULL");
    ROW_RC("plot_bars NULL values",
           tg_plot_bars(tmp_path("b"), bar_labels, NULL, 3, "t", "y"),
           "plot_bars:", "NULL");
    ROW_RC("plot_bars NULL label",
           tg_plot_bars(tmp_path("b"), (const char *[]){"a", NULL, "c"}, ys, 3,
                        "t", "y"),
           "plot_bars:", "label 1", "NULL");

    /* report pages */
    ROW_RC("report_text NULL report", tg_report_text(NULL, "h", "t"),
           "report_text:", "report is NULL");
    ROW_RC("report_text NULL text", tg_report_text(report(), "h", NULL),
           "report_text:", "text is NULL");
    ROW_RC("report_pre NULL text", tg_report_pre(report(), "h", NULL),
           "report_pre:", "text is NULL");
    ROW_RC("report_table 0 rows",
           tg_report_table(report(), "c", 0, 2, bar_labels),
           "report_table:", "0 x 2");
    ROW_RC("report_table NULL cells",
           tg_report_table(report(), "c", 1, 2, NULL),
           "report_table:", "NULL cells");
    ROW_RC("report_heatmap 3-d",
           tg_report_heatmap(report(), "t", e->x, NULL, NULL, NULL),
           "report_heatmap:", "2-D", "(4,8,32)");
    ROW_RC("report_heatmap empty",
           tg_report_heatmap(report(), "t",
                             temp(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3))), NULL,
                             NULL, NULL),
           "report_heatmap:", "(0,3)");
    ROW_RC("report_heatmap mask shape",
           tg_report_heatmap(report(), "t", e->m, e->mask, NULL, NULL),
           "report_heatmap:", "mask of shape (4,8,32)", "(16,32)");
    ROW_RC("report_heatmap_with scale 3",
           tg_report_heatmap_with(report(), "t", e->m, NULL, NULL, NULL,
                                  &(tg_heatmap_opts){.scale = 3}),
           "report_heatmap_with:", "scale 3", "not a tg_heatmap_scale");
    ROW_RC("report_heatmap_with unit scale, a weight of 1.5",
           tg_report_heatmap_with(
               report(), "t", temp(tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 1.5)),
               NULL, NULL, NULL, &(tg_heatmap_opts){.scale = TG_SCALE_UNIT}),
           "report_heatmap_with:", "TG_SCALE_UNIT", "1.5 at [0, 0]");
    ROW_RC("report_heatmap_with 3-d",
           tg_report_heatmap_with(report(), "t", e->x, NULL, NULL, NULL,
                                  &(tg_heatmap_opts){0}),
           "report_heatmap_with:", "2-D", "(4,8,32)");
    ROW_RC("report_heatmap_with NULL report",
           tg_report_heatmap_with(NULL, "t", e->m, NULL, NULL, NULL, NULL),
           "report_heatmap_with:", "report is NULL");
    ROW_RC("report_heatmap NULL report",
           tg_report_heatmap(NULL, "t", e->m, NULL, NULL, NULL),
           "report_heatmap:", "report is NULL");
    ROW_RC("report_lines NULL series",
           tg_report_lines(report(), "t", NULL, 1, "x", "y", false),
           "report_lines:", "NULL");
    ROW_RC("report_lines 0 series",
           tg_report_lines(report(), "t", SERIES(ys, 3), 0, "x", "y", false),
           "report_lines:", "got 0");
    ROW_RC("report_lines y NULL",
           tg_report_lines(report(), "t", SERIES(NULL, 3), 1, "x", "y", false),
           "report_lines:", "series 0", "NULL y");
    ROW_RC("report_lines log of 0",
           tg_report_lines(report(), "t",
                           SERIES(((const double[]){1, 0, 2}), 3), 1, "x", "y",
                           true),
           "report_lines:", "y[1] = 0", "log");
    ROW_RC("report_tape NULL report", tg_report_tape(NULL, "t"),
           "report_tape:", "report is NULL");
    ROW_RC("report_averaging not square",
           tg_report_averaging(report(), "t", e->m, NULL),
           "report_averaging:", "square", "(16,32)");
    ROW_RC("report_attention not square",
           tg_report_attention(report(), "t", e->m, NULL, NULL, 1),
           "report_attention:", "square", "(16,32)");
    ROW_RC("report_attention mask shape",
           tg_report_attention(report(), "t",
                               temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 3))),
                               e->mask, NULL, 1),
           "report_attention:", "mask of shape (4,8,32)", "(3,3)");
    ROW_RC("report_attention temperature 0",
           tg_report_attention(report(), "t",
                               temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 3))), NULL,
                               NULL, 0),
           "report_attention:", "temperature", "(3,3)");
    ROW_RC("report_attention temperature nan",
           tg_report_attention(report(), "t",
                               temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 3))), NULL,
                               NULL, NAN),
           "report_attention:", "temperature", "nan");
    ROW_RC("report_forward_strip NULL report",
           tg_report_forward_strip(NULL, "t", e->m, e->m, e->m, NULL, 0),
           "report_forward_strip:", "report is NULL");
    ROW_RC("report_forward_strip 3-d q",
           tg_report_forward_strip(report(), "t", e->x, e->x, e->x, NULL, 0),
           "report_forward_strip:", "q must be", "(4,8,32)");
    ROW_RC("report_forward_strip empty v",
           tg_report_forward_strip(report(), "t", e->m, e->m,
                                   temp(tg_zeros(TG_FLOAT64, TG_SHAPE(16, 0))),
                                   NULL, 0),
           "report_forward_strip:", "v must be", "(16,0)");
    ROW_RC("report_forward_strip k shape",
           tg_report_forward_strip(report(), "t", e->m,
                                   temp(tg_zeros(TG_FLOAT64, TG_SHAPE(16, 8))),
                                   e->m, NULL, 0),
           "report_forward_strip:", "k of shape (16,8)", "q (16,32)");
    ROW_RC("report_forward_strip v rows",
           tg_report_forward_strip(report(), "t", e->m, e->m,
                                   temp(tg_zeros(TG_FLOAT64, TG_SHAPE(8, 4))),
                                   NULL, 0),
           "report_forward_strip:", "v of shape (8,4)", "16 rows");
    ROW_RC("report_forward_strip too many tokens",
           tg_report_forward_strip(
               report(), "t", temp(tg_zeros(TG_FLOAT64, TG_SHAPE(300, 2))),
               temp(tg_zeros(TG_FLOAT64, TG_SHAPE(300, 2))),
               temp(tg_zeros(TG_FLOAT64, TG_SHAPE(300, 2))), NULL, 0),
           "report_forward_strip:", "(300,2)", "T <= 256");
    ROW_RC("report_forward_strip row 16 of 16",
           tg_report_forward_strip(report(), "t", e->m, e->m, e->m, NULL, 16),
           "report_forward_strip:", "row 16", "[0, 16)");
    ROW_RC("report_forward_strip row -1",
           tg_report_forward_strip(report(), "t", e->m, e->m, e->m, NULL, -1),
           "report_forward_strip:", "row -1", "(16,32)");
    ROW_RC("report_backward NULL report",
           tg_report_backward(NULL, "t", temp(tg_sum_all(e->x))),
           "report_backward:", "report is NULL");
    ROW_RC("report_backward loss not one element",
           tg_report_backward(report(), "t", temp(tg_exp(e->x))),
           "report_backward:", "one element", "1024");
    ROW_RC("report_backward loss with no graph",
           tg_report_backward(report(), "t", e->s),
           "report_backward:", "graph_entries:", "no tape entry");
    ROW_RC("report_attention_gain dattn shape",
           tg_report_attention_gain(
               report(), "t", temp(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 3))), NULL,
               NULL, 1, temp(tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3)))),
           "report_attention_gain:", "dattn of shape (2,3)", "(3,3)");
    ROW_RC("report_write NULL path", tg_report_write(report(), NULL),
           "report_write:", "path is NULL");
    ROW_RC("report_write empty path", tg_report_write(report(), ""),
           "report_write:", "path is empty");
    ROW_RC("report_write under a file",
           tg_report_write(report(), "/etc/passwd/p.html"),
           "report_write:", "cannot write", "/etc/passwd/p.html");
    ROW_RC("report_write missing dir",
           tg_report_write(report(), "/nonexistent/tapegrad/p.html"),
           "report_write:", "/nonexistent/tapegrad/p.html");
    ROW_RC("report_write NULL report", tg_report_write(NULL, tmp_path("p")),
           "report_write:", "report is NULL");
    ROW_RC("plot_bars NULL stem",
           tg_plot_bars(NULL, bar_labels, ys, 3, "t", "y"),
           "plot_bars:", "stem is NULL");
    ROW_RC(
        "plot_bars missing dir",
        tg_plot_bars("/nonexistent/tapegrad/b", bar_labels, ys, 3, NULL, NULL),
        "plot_bars:", "/nonexistent/tapegrad/b");

    /* Errors raised inside a module carry the function called first
     * ("block_init: mha_init: ..."). A module's _params with a NULL list:
     * the error names params_add. */
    ROW_RC("head_params NULL list", tg_head_params(made_head(e), NULL, "h"),
           "head_params", "NULL");
    ROW_RC("linear_params NULL list",
           tg_linear_params(made_linear(e), NULL, "l"), "linear_params",
           "NULL");
    ROW_RC("embed_params NULL list", tg_embed_params(made_embed(e), NULL, "e"),
           "embed_params", "NULL");
    ROW_RC("layernorm_params NULL list",
           tg_layernorm_params(made_layernorm(e), NULL, "n"),
           "layernorm_params", "NULL");
    ROW_RC("mha_params NULL list", tg_mha_params(made_mha(e), NULL, "a"),
           "mha_params", "NULL");
    ROW_RC("mlp_params NULL list", tg_mlp_params(made_mlp(e), NULL, "f"),
           "mlp_params", "NULL");
    ROW_RC("block_params NULL list", tg_block_params(made_block(e), NULL, "b"),
           "block_params", "NULL");
    ROW_RC("gpt_params NULL list", tg_gpt_params(made_gpt(e), NULL, "g"),
           "gpt_params", "NULL");

    /* a composite module's init: the error names the inner module's init */
    INIT_ROW("mha_init NULL rng", tg_mha,
             tg_mha_init(&mod, TG_FLOAT64, 32, 4, NULL), "mha_init", "rng");
    INIT_ROW("mha_init bool", tg_mha,
             tg_mha_init(&mod, TG_BOOL, 32, 4, &e->rng), "mha_init", "bool");
    INIT_ROW("mlp_init NULL rng", tg_mlp,
             tg_mlp_init(&mod, TG_FLOAT64, 32, true, NULL), "mlp_init", "rng");
    INIT_ROW("mlp_init bool", tg_mlp,
             tg_mlp_init(&mod, TG_BOOL, 32, true, &e->rng), "mlp_init", "bool");
    INIT_ROW("block_init NULL rng", tg_block,
             tg_block_init(&mod, TG_FLOAT64, 32, 4, true, NULL), "block_init",
             "rng");
    INIT_ROW("block_init bool", tg_block,
             tg_block_init(&mod, TG_BOOL, 32, 4, true, &e->rng), "block_init",
             "bool");
    INIT_ROW("block_init n_embd 0", tg_block,
             tg_block_init(&mod, TG_FLOAT64, 0, 4, true, &e->rng), "block_init",
             "0");
    INIT_ROW("block_init 3 heads of 32", tg_block,
             tg_block_init(&mod, TG_FLOAT64, 32, 3, true, &e->rng),
             "block_init", "3", "32");
    INIT_ROW("gpt_init NULL rng", tg_gpt, tg_gpt_init(&mod, GPT_CFG, NULL),
             "gpt_init", "rng");
    INIT_ROW("gpt_init 5 heads of 32", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_with(3, 5), &e->rng), "gpt_init", "5",
             "32");

    /* mlp_forward's x is checked by its first linear: the error names linear */
    ROW("mlp_forward in 3", tg_mlp_forward(made_mlp(e), e->v3), "mlp", "(3,)");
    ROW("mlp_forward float32 x", tg_mlp_forward(made_mlp(e), e->x32), "mlp",
        "float32");
}

static void nn_null_table(table_walk *w, env *e)
{
    /* parameter lists, modules, plots */
    NULL_ROW_RC("params_add", tg_params_add(&(tg_params){0}, NULL, "w", NUL));
    NULL_ROW_RC("save_tokens_llmc", tg_save_tokens_llmc(NUL, "/tmp/x.bin"));
    NULL_ROW("head_forward", tg_head_forward(made_head(e), NUL));
    NULL_ROW("linear_forward", tg_linear_forward(made_linear(e), NUL));
    NULL_ROW("embed_forward", tg_embed_forward(made_embed(e), NUL));
    NULL_ROW("layernorm_forward", tg_layernorm_forward(made_layernorm(e), NUL));
    NULL_ROW("mha_forward", tg_mha_forward(made_mha(e), NUL));
    NULL_ROW("mlp_forward", tg_mlp_forward(made_mlp(e), NUL));
    NULL_ROW("block_forward", tg_block_forward(made_block(e), NUL));
    NULL_ROW("gpt_forward", tg_gpt_forward(made_gpt(e), NUL));
    NULL_ROW("gpt_loss (ids)", tg_gpt_loss(made_gpt(e), NUL, e->ids));
    NULL_ROW("gpt_loss (targets)", tg_gpt_loss(made_gpt(e), e->ids, NUL));
    NULL_ROW("gpt_generate", tg_gpt_generate(made_gpt(e), NUL, 2, 1, &e->rng));
    NULL_ROW_RC("plot_heatmap",
                tg_plot_heatmap(tmp_path("h"), NUL, "t", "x", "y", false));
    NULL_ROW_RC("report_heatmap",
                tg_report_heatmap(report(), "t", NUL, NULL, NULL, NULL));
    NULL_ROW_RC("report_averaging",
                tg_report_averaging(report(), "t", NUL, NULL));
    NULL_ROW_RC("report_attention",
                tg_report_attention(report(), "t", NUL, NULL, NULL, 1));
    NULL_ROW_RC(
        "report_forward_strip (q)",
        tg_report_forward_strip(report(), "t", NUL, e->m, e->m, NULL, 0));
    NULL_ROW_RC(
        "report_forward_strip (k)",
        tg_report_forward_strip(report(), "t", e->m, NUL, e->m, NULL, 0));
    NULL_ROW_RC(
        "report_forward_strip (v)",
        tg_report_forward_strip(report(), "t", e->m, e->m, NUL, NULL, 0));
    NULL_ROW_RC("report_backward", tg_report_backward(report(), "t", NUL));
}

/* ---- module configs, train/eval, sampling (issue 11) -------------------- */

/* h made as made_head, then set to drop its attention weights (p 0.5) in
 * training along `path`, drawing from rng (NULL: none). */
static tg_head *dropping_head(env *e, tg_head_path path, tg_rng *rng)
{
    tg_head *h = made_head(e);
    h->attn_dropout = 0.5;
    h->path = path;
    tg_head_train(h, true, rng);
    return h;
}

/* GPT_CFG with dropout 0.1 everywhere, made and freed after the row, in
 * training without an rng. */
static void free_gpt_drop(void *g) { tg_gpt_free(g); }
static tg_gpt *dropping_gpt(env *e)
{
    static tg_gpt g;
    tg_gpt_config c = GPT_CFG;
    c.embd_dropout = c.attn_dropout = c.resid_dropout = 0.1;
    if (tg_gpt_init(&g, c, &e->rng) < 0)
        note("making a dropping gpt: %s", tg_last_error());
    after_row(free_gpt_drop, &g);
    return &g;
}

/* GPT_CFG with one of the new options set to a bad value: bias (0), ln_eps
 * (1), attn_scale (2, with has_attn_scale), embd_dropout (3), attn_dropout
 * (4), resid_dropout (5). */
static tg_gpt_config gpt_cfg_option(int which, double value)
{
    tg_gpt_config c = GPT_CFG;
    switch (which) {
    case 0: c.bias = (tg_gpt_bias)value; break;
    case 1: c.ln_eps = value; break;
    case 2:
        c.has_attn_scale = true;
        c.attn_scale = value;
        break;
    case 3: c.embd_dropout = value; break;
    case 4: c.attn_dropout = value; break;
    default: c.resid_dropout = value; break;
    }
    return c;
}

/* Sampling options with one field changed: temperature (0), top_k (1),
 * top_p (2). */
static const tg_gpt_sampling *sampling_with(int which, double value)
{
    static tg_gpt_sampling s;
    s = tg_gpt_sampling_default();
    if (which == 0)
        s.temperature = value;
    else if (which == 1)
        s.top_k = (int)value;
    else
        s.top_p = value;
    return &s;
}

/* Module configs with one field made bad. */
static const tg_linear_config *linear_cfg_out(int out)
{
    static tg_linear_config c;
    c = tg_linear_config_default(32, out);
    return &c;
}
static const tg_layernorm_config *layernorm_cfg_eps(double eps)
{
    static tg_layernorm_config c;
    c = tg_layernorm_config_default(32);
    c.eps = eps;
    return &c;
}
/* head: scale (0), attn_dropout (1), path (2) */
static const tg_head_config *head_cfg_with(int which, double value)
{
    static tg_head_config c;
    c = tg_head_config_default(32, 16);
    if (which == 0)
        c.scale = value;
    else if (which == 1)
        c.attn_dropout = value;
    else
        c.path = (tg_head_path)value;
    return &c;
}
/* mha: resid_dropout (0), attn_dropout (1) */
static const tg_mha_config *mha_cfg_with(int which, double value)
{
    static tg_mha_config c;
    c = tg_mha_config_default(32, 4);
    if (which == 0)
        c.resid_dropout = value;
    else
        c.attn_dropout = value;
    return &c;
}
static const tg_mlp_config *mlp_cfg_dropout(double p)
{
    static tg_mlp_config c;
    c = tg_mlp_config_default(32);
    c.dropout = p;
    return &c;
}
static const tg_block_config *block_cfg_with(int n_heads, double ln_eps)
{
    static tg_block_config c;
    c = tg_block_config_default(32, n_heads);
    c.ln_eps = ln_eps;
    return &c;
}

static void modules_table(table_walk *w, env *e)
{
    /* configs: a NULL config, and each option out of its range */
    INIT_ROW("linear_init_with NULL config", tg_linear,
             tg_linear_init_with(&mod, TG_FLOAT64, NULL, &e->rng),
             "linear_init:", "config is NULL");
    INIT_ROW("linear_init_with out 0", tg_linear,
             tg_linear_init_with(&mod, TG_FLOAT64, linear_cfg_out(0), &e->rng),
             "linear_init:", "out 0");
    INIT_ROW("layernorm_init_with NULL config", tg_layernorm,
             tg_layernorm_init_with(&mod, TG_FLOAT64, NULL),
             "layernorm_init:", "config is NULL");
    INIT_ROW("layernorm_init_with eps -1", tg_layernorm,
             tg_layernorm_init_with(&mod, TG_FLOAT64, layernorm_cfg_eps(-1)),
             "layernorm_init:", "eps", "-1");
    INIT_ROW("layernorm_init_with eps NaN", tg_layernorm,
             tg_layernorm_init_with(&mod, TG_FLOAT64, layernorm_cfg_eps(NAN)),
             "layernorm_init:", "eps", "nan");
    INIT_ROW("head_init_with NULL config", tg_head,
             tg_head_init_with(&mod, TG_FLOAT64, NULL, &e->rng),
             "head_init:", "config is NULL");
    INIT_ROW("head_init_with scale inf", tg_head,
             tg_head_init_with(&mod, TG_FLOAT64, head_cfg_with(0, INFINITY),
                               &e->rng),
             "head_init:", "scale", "inf");
    INIT_ROW("head_init_with attn_dropout 1", tg_head,
             tg_head_init_with(&mod, TG_FLOAT64, head_cfg_with(1, 1), &e->rng),
             "head_init:", "attn_dropout", "[0, 1)");
    INIT_ROW("head_init_with path 7", tg_head,
             tg_head_init_with(&mod, TG_FLOAT64, head_cfg_with(2, 7), &e->rng),
             "head_init:", "path 7");
    INIT_ROW("mha_init_with NULL config", tg_mha,
             tg_mha_init_with(&mod, TG_FLOAT64, NULL, &e->rng),
             "mha_init:", "config is NULL");
    INIT_ROW("mha_init_with resid_dropout -0.5", tg_mha,
             tg_mha_init_with(&mod, TG_FLOAT64, mha_cfg_with(0, -0.5), &e->rng),
             "mha_init:", "resid_dropout", "-0.5");
    INIT_ROW("mha_init_with attn_dropout 2", tg_mha,
             tg_mha_init_with(&mod, TG_FLOAT64, mha_cfg_with(1, 2), &e->rng),
             "mha_init: head_init:", "attn_dropout", "2");
    INIT_ROW("mlp_init_with NULL config", tg_mlp,
             tg_mlp_init_with(&mod, TG_FLOAT64, NULL, &e->rng),
             "mlp_init:", "config is NULL");
    INIT_ROW("mlp_init_with dropout 1.5", tg_mlp,
             tg_mlp_init_with(&mod, TG_FLOAT64, mlp_cfg_dropout(1.5), &e->rng),
             "mlp_init:", "dropout", "1.5");
    INIT_ROW("block_init_with NULL config", tg_block,
             tg_block_init_with(&mod, TG_FLOAT64, NULL, &e->rng),
             "block_init:", "config is NULL");
    INIT_ROW(
        "block_init_with ln_eps -1", tg_block,
        tg_block_init_with(&mod, TG_FLOAT64, block_cfg_with(4, -1), &e->rng),
        "block_init: layernorm_init:", "eps", "-1");
    INIT_ROW(
        "block_init_with 3 heads of 32", tg_block,
        tg_block_init_with(&mod, TG_FLOAT64, block_cfg_with(3, 1e-5), &e->rng),
        "block_init: mha_init:", "3", "32");
    INIT_ROW("gpt_init bias 7", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(0, 7), &e->rng),
             "gpt_init:", "bias 7", "tg_gpt_bias");
    INIT_ROW("gpt_init ln_eps -1", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(1, -1), &e->rng),
             "gpt_init:", "ln_eps", "-1");
    INIT_ROW("gpt_init attn_scale inf", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(2, INFINITY), &e->rng),
             "gpt_init:", "attn_scale", "inf");
    INIT_ROW("gpt_init embd_dropout 1", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(3, 1), &e->rng),
             "gpt_init:", "embd_dropout", "[0, 1)");
    INIT_ROW("gpt_init attn_dropout -1", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(4, -1), &e->rng),
             "gpt_init:", "attn_dropout", "-1");
    INIT_ROW("gpt_init resid_dropout NaN", tg_gpt,
             tg_gpt_init(&mod, gpt_cfg_option(5, NAN), &e->rng),
             "gpt_init:", "resid_dropout", "nan");

    /* train/eval: a NULL or zeroed module; a training forward that must drop
     * without an rng, or along a path that never forms the weights */
    ROW_RC("head_train NULL", tg_head_train(NULL, true, &e->rng),
           "head_train:", "NULL");
    ROW_RC("head_train zeroed", tg_head_train(&(tg_head){0}, false, NULL),
           "head_train:", "not initialised");
    ROW_RC("mha_train NULL", tg_mha_train(NULL, true, &e->rng),
           "mha_train:", "NULL");
    ROW_RC("mha_train zeroed", tg_mha_train(&(tg_mha){0}, false, NULL),
           "mha_train:", "not initialised");
    ROW_RC("mlp_train NULL", tg_mlp_train(NULL, true, &e->rng),
           "mlp_train:", "NULL");
    ROW_RC("mlp_train zeroed", tg_mlp_train(&(tg_mlp){0}, false, NULL),
           "mlp_train:", "not initialised");
    ROW_RC("block_train NULL", tg_block_train(NULL, true, &e->rng),
           "block_train:", "NULL");
    ROW_RC("block_train zeroed", tg_block_train(&(tg_block){0}, false, NULL),
           "block_train:", "not initialised");
    ROW_RC("gpt_train NULL", tg_gpt_train(NULL, true, &e->rng),
           "gpt_train:", "NULL");
    ROW_RC("gpt_train zeroed", tg_gpt_train(&(tg_gpt){0}, false, NULL),
           "gpt_train:", "not initialised");
    ROW("head_forward dropout without rng",
        tg_head_forward(dropping_head(e, TG_HEAD_COMPOSED, NULL), e->x),
        "head:", "dropout 0.5", "tg_head_train");
    ROW("head_forward dropout tiled",
        tg_head_forward(dropping_head(e, TG_HEAD_TILED, &e->rng), e->x),
        "head:", "dropout 0.5", "TG_HEAD_TILED");
    ROW("gpt_forward dropout without rng",
        tg_gpt_forward(dropping_gpt(e), e->ids), "gpt:", "dropout 0.1",
        "tg_gpt_train");

    /* sampling */
    ROW("gpt_generate_with NULL model",
        tg_gpt_generate_with(NULL, e->ids, 2, sampling_with(0, 1), &e->rng),
        "gpt_generate:", "NULL");
    ROW("gpt_generate_with NULL options",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             NULL, &e->rng),
        "gpt_generate:", "sampling options are NULL");
    ROW("gpt_generate_with temperature -1",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(0, -1), &e->rng),
        "gpt_generate:", "temperature > 0", "-1");
    ROW("gpt_generate_with top_k 0",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(1, 0), &e->rng),
        "gpt_generate:", "top_k", "1..16");
    ROW("gpt_generate_with top_k 17",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(1, 17), &e->rng),
        "gpt_generate:", "top_k", "got 17");
    ROW("gpt_generate_with top_p 0",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(2, 0), &e->rng),
        "gpt_generate:", "top_p", "(0, 1]");
    ROW("gpt_generate_with top_p 1.5",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(2, 1.5), &e->rng),
        "gpt_generate:", "top_p", "1.5");
    ROW("gpt_generate_with NULL rng",
        tg_gpt_generate_with(made_gpt(e), int64_full(TG_SHAPE(1, 3), 0), 2,
                             sampling_with(0, 1), NULL),
        "gpt_generate:", "NULL");
}

static void modules_null_table(table_walk *w, env *e)
{
    NULL_ROW("gpt_generate_with",
             tg_gpt_generate_with(made_gpt(e), NUL, 2, sampling_with(0, 1),
                                  &e->rng));
}

START_TEST(bad_module_options) { check_row(modules_table, _i); }
END_TEST

START_TEST(null_module_options) { check_null_row(modules_null_table, _i); }
END_TEST

START_TEST(bad_input) { check_row(nn_table, _i); }
END_TEST

START_TEST(null_input) { check_null_row(nn_null_table, _i); }
END_TEST

/* The functions of nn with no failure value, given NULL and zeroed
 * arguments (check_quiet). */
static void nn_quiet_calls(void)
{
    tg_params_init(NULL);
    tg_params_free(NULL);
    tg_params_zero_grad(NULL);
    if (tg_params_get(NULL, "x") || tg_params_get(&(tg_params){0}, NULL))
        note("params_get found something in nothing");
    if (tg_params_numel(NULL) != 0)
        note("params_numel(NULL) is %lld", (long long)tg_params_numel(NULL));
    if (tg_clip_grad_norm(NULL, 1) != 0)
        note("clip_grad_norm(NULL) is %g", tg_clip_grad_norm(NULL, 1));
    tg_optim_free(NULL);
    tg_optim_zero_grad(NULL);

    tg_head head = {0};
    tg_linear linear = {0};
    tg_embed embed = {0};
    tg_layernorm layernorm = {0};
    tg_mha mha = {0};
    tg_mlp mlp = {0};
    tg_block block = {0};
    tg_gpt gpt = {0};
    tg_head_free(NULL), tg_head_free(&head);
    tg_linear_free(NULL), tg_linear_free(&linear);
    tg_embed_free(NULL), tg_embed_free(&embed);
    tg_layernorm_free(NULL), tg_layernorm_free(&layernorm);
    tg_mha_free(NULL), tg_mha_free(&mha);
    tg_mlp_free(NULL), tg_mlp_free(&mlp);
    tg_block_free(NULL), tg_block_free(&block);
    tg_gpt_free(NULL), tg_gpt_free(&gpt);
}

START_TEST(quiet_on_null) { check_quiet("nn", nn_quiet_calls); }
END_TEST

Suite *errors_nn_suite(void)
{
    Suite *s = suite_create("errors_nn");
    TCase *tc = tcase_create("bad input");
    tcase_add_loop_test(tc, bad_input, 0, table_rows(nn_table));
    suite_add_tcase(s, tc);

    tc = tcase_create("null");
    tcase_add_loop_test(tc, null_input, 0, table_rows(nn_null_table));
    tcase_add_test(tc, quiet_on_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("module options");
    tcase_add_loop_test(tc, bad_module_options, 0, table_rows(modules_table));
    tcase_add_loop_test(tc, null_module_options, 0,
                        table_rows(modules_null_table));
    suite_add_tcase(s, tc);
    return s;
}
