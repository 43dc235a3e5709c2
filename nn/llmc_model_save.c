/* A tg_gpt written as llm.c's GPT-2 checkpoint (nn/llmc_model.h has the
 * format), through the state dict of GPT-2's names (tg_gpt_state_dict):
 * each slice in the file's order, as float32 (version 3), wte padded to
 * a multiple of 128 rows. */
#include "nn/llmc_model.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>

enum { PAD = 128 };

/* The elements of the largest one-layer slice: the buffers' size. */
static int64_t largest_slice(const llmc_dims *d)
{
    int64_t most = 0;
    for (int k = 0; k < N_KINDS; k++) {
        int64_t rows, cols;
        tg__llmc_slice_shape(d, k, &rows, &cols);
        most = rows * cols > most ? rows * cols : most;
    }
    return most;
}

/* v (rows, cols) as its transpose (cols, rows), in tmp. */
static void transpose(const float *v, int64_t rows, int64_t cols, float *tmp)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            tmp[c * rows + r] = v[r * cols + c];
}

/* What llm.c's model is, for a model to be written as one: "" when g is,
 * else what differs. (Biases a model lacks are written as zeros: the same
 * function.) */
static const char *not_llmc(const tg_gpt *g)
{
    const tg_gpt_config *c = &g->cfg;
    if (!c->gelu || !c->gelu_tanh)
        return "the tanh GELU";
    if (!c->tie_weights)
        return "the head tied to the token table (tie_weights)";
    return ""; /* eps and the score scale: tg_gpt_state_dict's checks */
}

/* Kind k of layer l as the file holds it, into out, from sd (GPT-2's names
 * and Conv1D layout: tg_gpt_state_dict): Linear's (out, in) transposed
 * back, wte padded with zero rows, a bias the model lacks as zeros. */
static bool make_slice(const tg_params *sd, const llmc_dims *d, int k, int l,
                       float *out, float *tmp)
{
    int64_t rows, cols;
    tg__llmc_slice_shape(d, k, &rows, &cols);
    char name[TG_PARAM_NAME_MAX];
    tg__llmc_kind_name(k, l, name);
    tg_tensor *t = tg_params_get(sd, name);
    memset(out, 0, sizeof(float) * (size_t)(rows * cols));
    if (!t) /* a bias of a model without */
        return true;
    if (!KINDS[k].linear) /* wte: its V rows, the rest stays 0 */
        return tg_copy_out(t, TG_FLOAT32, out) == 0;
    if (tg_copy_out(t, TG_FLOAT32, tmp) != 0)
        return false;
    transpose(tmp, cols, rows, out); /* (in, out) -> (out, in) */
    return true;
}

/* n floats as little-endian float32. */
static bool put_floats(tg__file *out, const float *v, size_t n,
                       unsigned char *bytes)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, v + i, 4);
        for (int b = 0; b < 4; b++)
            bytes[4 * i + (size_t)b] = (unsigned char)(w >> (8 * b));
    }
    return tg__file_write(out, bytes, 4 * n);
}

/* Every slice of the file, in its order, after the header. */
static bool write_all(tg__file *out, const tg_params *sd, const llmc_dims *d)
{
    int64_t most = largest_slice(d);
    float *buf = tg__malloc(sizeof(float) * (size_t)most);
    float *tmp = tg__malloc(sizeof(float) * (size_t)most);
    unsigned char *bytes = tg__malloc(4 * (size_t)most);
    bool ok = buf && tmp && bytes;
    if (!ok)
        tg__error("gpt_save_llmc: out of memory for a slice of %lld floats",
                  (long long)most);
    for (int k = 0; ok && k < N_KINDS; k++)
        for (int l = 0; ok && l < (KINDS[k].per_layer ? d->L : 1); l++) {
            int64_t rows, cols;
            tg__llmc_slice_shape(d, k, &rows, &cols);
            ok = make_slice(sd, d, k, l, buf, tmp) &&
                 put_floats(out, buf, (size_t)(rows * cols), bytes);
        }
    free(buf);
    free(tmp);
    free(bytes);
    return ok;
}

int tg_gpt_save_llmc(tg_gpt *g, const char *path)
{
    if (!g || !path || !g->blocks) {
        tg__error("gpt_save_llmc: %s", !path ? "the path is NULL"
                                       : !g  ? "the model is NULL"
                                             : "the model is not initialised");
        return -1;
    }
    const char *need = not_llmc(g);
    if (*need) {
        tg__error("gpt_save_llmc: %s: llm.c's GPT-2 has %s; this model has "
                  "not",
                  path, need);
        return -1;
    }
    const tg_gpt_config *c = &g->cfg;
    llmc_dims d = {.maxT = c->block_size,
                   .V = c->vocab_size,
                   .L = c->n_layer,
                   .NH = c->n_head,
                   .C = c->n_embd,
                   .version = 3};
    d.Vp = (d.V + PAD - 1) / PAD * PAD;
    int32_t h[LLMC_HEADER_INTS];
    tg__llmc_header_of(&d, h);
    tg_params sd;
    tg_params_init(&sd);
    if (tg_gpt_state_dict(g, &sd) < 0) {
        tg_params_release(&sd);
        return tg__error_wrap("gpt_save_llmc");
    }
    tg__file *out = tg__file_begin("gpt_save_llmc", path);
    bool ok = out && tg__llmc_put_header(out, h) && write_all(out, &sd, &d);
    tg_params_release(&sd);
    return tg__file_end(out, ok);
}
