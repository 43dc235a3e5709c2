/* A list of parameters written as .safetensors (nn/safetensors.h has the
 * format), as the reference library writes one: the header written with
 * jansson, "__metadata__" with "format": "pt", its JSON padded with spaces
 * so that the data starts at a multiple of 8, and the data laid out widest
 * elements first, each at a multiple of its size. */
#include "nn/safetensors.h"
#include "core/npy.h"
#include "core/shared.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The parameters in the data buffer's order: 8-byte dtypes, then 4-byte,
 * then 1-byte (bool), each in the list's order, so every offset is a
 * multiple of its element size, as the reference library lays them out. */
static void data_order(const tg_params *ps, int *order)
{
    static const size_t sizes[] = {8, 4, 1};
    int k = 0;
    for (size_t pass = 0; pass < sizeof sizes / sizeof *sizes; pass++)
        for (int i = 0; i < ps->n; i++)
            if (tg_dtype_size(tg_dtype_of(ps->items[i].t)) == sizes[pass])
                order[k++] = i;
}

static const char *save_dtype(tg_dtype dt)
{
    return dt == TG_FLOAT32   ? "F32"
           : dt == TG_FLOAT64 ? "F64"
           : dt == TG_INT64   ? "I64"
           : dt == TG_BOOL    ? "BOOL"
                              : NULL;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}, or NULL. */
static json_t *entry_json(const tg_tensor *t, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (int d = 0; shape && d < tg_ndim(t); d++)
        if (json_array_append_new(shape, json_integer(tg_shape(t)[d])) != 0) {
            json_decref(shape);
            shape = NULL;
        }
    if (!shape)
        return NULL;
    return json_pack("{s:s, s:o, s:[I,I]}", "dtype", save_dtype(tg_dtype_of(t)),
                     "shape", shape, "data_offsets", (json_int_t)begin,
                     (json_int_t)end);
}

/* The header's JSON, padded with spaces so that 8 + its length is a
 * multiple of 8 (the data then starts aligned): a new string of *len bytes,
 * or NULL. Entries in the list's order, as torch's save_file keeps its
 * dict's; their data in the order of `order`. */
static char *header_text(const tg_params *ps, const int *order, size_t *len)
{
    uint64_t *begin = tg__calloc((size_t)ps->n + 1, sizeof *begin);
    json_t *root =
        begin ? json_pack("{s:{s:s}}", METADATA, "format", "pt") : NULL;
    uint64_t at = 0;
    for (int k = 0; root && k < ps->n; k++) {
        const tg_tensor *t = ps->items[order[k]].t;
        begin[order[k]] = at;
        at += (uint64_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
    }
    for (int i = 0; root && i < ps->n; i++) {
        const tg_param *p = &ps->items[i];
        uint64_t nbytes =
            (uint64_t)tg_numel(p->t) * tg_dtype_size(tg_dtype_of(p->t));
        json_t *e = entry_json(p->t, begin[i], begin[i] + nbytes);
        if (!e || json_object_set_new(root, p->name, e) != 0) {
            json_decref(root);
            root = NULL;
        }
    }
    free(begin);
    char *text =
        root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return NULL;
    size_t n = strlen(text), padded = n + (8 - (LEN_BYTES + n) % 8) % 8;
    char *out = tg__malloc(padded + 1);
    if (out) {
        memcpy(out, text, n);
        memset(out + n, ' ', padded - n);
        out[padded] = '\0';
        *len = padded;
    }
    free(text);
    return out;
}

/* No name twice in ps: the header's keys must differ. */
static bool names_once(const char *op, const char *path, const tg_params *ps)
{
    tg__names ix;
    if (!tg__names_init(&ix, (size_t)ps->n)) {
        tg__error("%s: %s: out of memory for %d names", op, path, ps->n);
        return false;
    }
    for (int i = 0; i < ps->n; i++)
        tg__names_add(&ix, ps->items[i].name, (size_t)i);
    const char *twice = tg__names_sort(&ix);
    if (twice)
        tg__error("%s: %s: two parameters are named '%s'", op, path, twice);
    tg__names_free(&ix);
    return !twice;
}

static bool check_save_args(const tg_params *ps, const char *path)
{
    static const char op[] = "save_safetensors";
    if (!ps || !path) {
        tg__error("%s: %s is NULL", op, ps ? "path" : "the parameter list");
        return false;
    }
    for (int i = 0; i < ps->n; i++) {
        const tg_param *p = &ps->items[i];
        if (!p->t) {
            tg__error("%s: %s: parameter '%s' is NULL", op, path, p->name);
            return false;
        }
        if (!save_dtype(tg_dtype_of(p->t))) {
            tg__error("%s: %s: parameter '%s' is %s; safetensors are "
                      "written from float32, float64, int64 and bool",
                      op, path, p->name, tg_dtype_name(tg_dtype_of(p->t)));
            return false;
        }
        json_t *key = json_string(p->name); /* NULL: not valid UTF-8 */
        json_decref(key);
        if (!key) {
            tg__error("%s: %s: parameter name '%s' is not valid UTF-8, "
                      "which the JSON header needs",
                      op, path, p->name);
            return false;
        }
        if (strcmp(p->name, METADATA) == 0) {
            tg__error("%s: %s: a parameter may not be named '" METADATA "'", op,
                      path);
            return false;
        }
    }
    return names_once(op, path, ps);
}

/* Writes each tensor's bytes in the data buffer's order. */
static bool write_data(tg__file *out, const char *path, const tg_params *ps,
                       const int *order)
{
    for (int k = 0; k < ps->n; k++) {
        const tg_tensor *t = ps->items[order[k]].t;
        size_t nbytes = (size_t)tg_numel(t) * tg_dtype_size(tg_dtype_of(t));
        unsigned char *buf = tg__malloc(nbytes ? nbytes : 1);
        if (!buf) {
            tg__error("save_safetensors: %s: out of memory for '%s' %s", path,
                      ps->items[order[k]].name, TG_SHP(t));
            return false;
        }
        bool ok = tg__npy_elements("save_safetensors", t, buf) == 0 &&
                  tg__file_write(out, buf, nbytes);
        free(buf);
        if (!ok)
            return false;
    }
    return true;
}

int tg_save_safetensors(const tg_params *ps, const char *path)
{
    if (!check_save_args(ps, path))
        return -1;
    int *order = tg__calloc((size_t)ps->n + 1, sizeof *order);
    size_t hlen = 0;
    char *header = NULL;
    if (order) {
        data_order(ps, order);
        header = header_text(ps, order, &hlen);
    }
    if (!header) {
        tg__error("save_safetensors: %s: out of memory for the header", path);
        free(order);
        return -1;
    }
    unsigned char len_bytes[LEN_BYTES];
    for (int i = 0; i < LEN_BYTES; i++)
        len_bytes[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    tg__file *out = tg__file_begin("save_safetensors", path);
    bool ok = out && tg__file_write(out, len_bytes, LEN_BYTES) &&
              tg__file_write(out, header, hlen) &&
              write_data(out, path, ps, order);
    free(header);
    free(order);
    return tg__file_end(out, ok);
}
