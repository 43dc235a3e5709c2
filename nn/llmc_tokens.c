/* llm.c's token shards (dev/data/data_common.py's write_datafile, read by
 * llmc/dataloader.h): after the 256-int header ([0] the magic, [1] the
 * version, [2] the number of tokens), the tokens, little-endian:
 *     GPT-2:   magic 20240520, version 1, uint16 tokens
 *     LLaMA 3: magic 20240801, version 7, uint32 tokens
 * read as one int64 tensor (n); written in GPT-2's form. And the header's
 * helpers both llm.c formats share (nn/llmc.h). */
#include "nn/llmc.h"
#include "nn/nn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { GPT2_MAGIC = 20240520, LLAMA3_MAGIC = 20240801 };

bool tg__llmc_header(const char *op, const char *path, FILE *f, int64_t size,
                     int32_t h[LLMC_HEADER_INTS])
{
    unsigned char b[LLMC_HEADER_BYTES];
    if (size < LLMC_HEADER_BYTES)
        return tg__file_error(op, path,
                              "%lld bytes is shorter than llm.c's 1024-byte "
                              "header",
                              (long long)size);
    if (fread(b, 1, sizeof b, f) != sizeof b)
        return tg__file_error(op, path, "cannot read the header: %s",
                              ferror(f) ? strerror(errno) : "unexpected end");
    for (int i = 0; i < LLMC_HEADER_INTS; i++)
        h[i] = (int32_t)tg__llmc_u32(b + 4 * i);
    return true;
}

bool tg__llmc_put_header(tg__file *out, const int32_t h[LLMC_HEADER_INTS])
{
    unsigned char b[LLMC_HEADER_BYTES];
    for (int i = 0; i < LLMC_HEADER_BYTES; i++)
        b[i] = (unsigned char)((uint32_t)h[i / 4] >> (8 * (i % 4)));
    return tg__file_write(out, b, sizeof b);
}

/* The token width the header's magic and version say: 2 or 4 bytes, or 0
 * with the error set. */
static int token_bytes(const char *path, const int32_t *h)
{
    static const char op[] = "load_tokens_llmc";
    if (h[0] == GPT2_MAGIC && h[1] == 1)
        return 2;
    if (h[0] == LLAMA3_MAGIC && h[1] == 7)
        return 4;
    if (h[0] != GPT2_MAGIC && h[0] != LLAMA3_MAGIC)
        tg__file_error(op, path,
                       "not an llm.c token file: magic %d, expected %d "
                       "(GPT-2) or %d (LLaMA 3)",
                       h[0], GPT2_MAGIC, LLAMA3_MAGIC);
    else
        tg__file_error(op, path, "magic %d with version %d, expected %d", h[0],
                       h[1], h[0] == GPT2_MAGIC ? 1 : 7);
    return 0;
}

tg_tensor *tg_load_tokens_llmc(const char *path)
{
    static const char op[] = "load_tokens_llmc";
    if (!path) {
        tg__error("%s: the path is NULL", op);
        return NULL;
    }
    int64_t size;
    FILE *f = tg__file_open_regular(op, path, &size);
    if (!f)
        return NULL;
    int32_t h[LLMC_HEADER_INTS];
    int es = tg__llmc_header(op, path, f, size, h) ? token_bytes(path, h) : 0;
    int64_t n = es ? h[2] : 0;
    if (es && (n < 0 || LLMC_HEADER_BYTES + n * es != size)) {
        tg__file_error(op, path,
                       "the header says %lld tokens of %d bytes (%lld bytes "
                       "after the header); the file has %lld",
                       (long long)n, es, (long long)(n * es),
                       (long long)(size - LLMC_HEADER_BYTES));
        es = 0;
    }
    unsigned char *raw = es ? tg__malloc((size_t)(n * es) + 1) : NULL;
    int64_t *ids = raw ? tg__malloc(sizeof *ids * (size_t)n + 1) : NULL;
    if (es && !ids)
        tg__file_error(op, path, "out of memory for %lld tokens", (long long)n);
    else if (ids && fread(raw, (size_t)es, (size_t)n, f) != (size_t)n) {
        tg__file_error(op, path, "cannot read the tokens: %s",
                       ferror(f) ? strerror(errno) : "unexpected end");
        free(ids);
        ids = NULL;
    }
    fclose(f);
    for (int64_t i = 0; ids && i < n; i++)
        ids[i] = es == 2 ? (int64_t)(raw[2 * i] | raw[2 * i + 1] << 8)
                         : (int64_t)tg__llmc_u32(raw + 4 * i);
    tg_tensor *t = ids ? tg_from_data(TG_INT64, TG_SHAPE(n), ids) : NULL;
    if (ids && !t)
        tg__error_wrap(op);
    free(raw);
    free(ids);
    return t;
}

/* The tokens as uint16 little-endian bytes, checked: false with the error
 * set at the first that is out of range. */
static bool as_uint16(const char *path, const int64_t *ids, int64_t n,
                      unsigned char *out)
{
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > UINT16_MAX) {
            tg__error("save_tokens_llmc: %s: token %lld is %lld; GPT-2's "
                      "shards hold 0 to 65535",
                      path, (long long)i, (long long)ids[i]);
            return false;
        }
        out[2 * i] = (unsigned char)(ids[i] & 0xff);
        out[2 * i + 1] = (unsigned char)(ids[i] >> 8);
    }
    return true;
}

int tg_save_tokens_llmc(const tg_tensor *tokens, const char *path)
{
    static const char op[] = "save_tokens_llmc";
    if (!tokens) /* keeps the error that made it NULL */
        return -1;
    if (!path) {
        tg__error("%s: the path is NULL", op);
        return -1;
    }
    int64_t n = tg_numel(tokens);
    if (tg_dtype_of(tokens) != TG_INT64 || n > INT32_MAX) {
        tg__error("%s: %s: the tokens are %s %s; int64, fewer than 2^31, "
                  "are written",
                  op, path, tg_dtype_name(tg_dtype_of(tokens)), TG_SHP(tokens));
        return -1;
    }
    int64_t *ids = tg__malloc(sizeof *ids * (size_t)n + 1);
    unsigned char *bytes = ids ? tg__malloc(2 * (size_t)n + 1) : NULL;
    bool ok = bytes && tg_copy_out(tokens, TG_INT64, ids) == 0;
    if (!bytes)
        tg__error("%s: %s: out of memory for %lld tokens", op, path,
                  (long long)n);
    ok = ok && as_uint16(path, ids, n, bytes);
    int32_t h[LLMC_HEADER_INTS] = {GPT2_MAGIC, 1, (int32_t)n};
    tg__file *out = ok ? tg__file_begin(op, path) : NULL;
    ok = out && tg__llmc_put_header(out, h) &&
         tg__file_write(out, bytes, 2 * (size_t)n);
    free(ids);
    free(bytes);
    return tg__file_end(out, ok);
}
