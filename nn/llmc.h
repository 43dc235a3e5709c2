/* Private to nn/: what llm.c's two file formats share, the checkpoint's
 * (nn/llmc_model.h) and the token shards' (nn/llmc_tokens.c). Each file
 * starts with a header of 256 little-endian int32s, header[0] a magic
 * number and header[1] a version; the rest of the header says what
 * follows. */
#ifndef TAPEGRAD_NN_LLMC_H
#define TAPEGRAD_NN_LLMC_H

#include "core/error.h"
#include "core/shared.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { LLMC_HEADER_INTS = 256, LLMC_HEADER_BYTES = 4 * LLMC_HEADER_INTS };

/* The little-endian 32-bit word at b. */
static inline uint32_t tg__llmc_u32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

/* Reads the header of path (opened as f, size bytes) into h; false with
 * "<op>: <path>: ..." when the file is shorter than a header or cannot be
 * read. */
TG_HIDDEN bool tg__llmc_header(const char *op, const char *path, FILE *f,
                               int64_t size, int32_t h[LLMC_HEADER_INTS]);

/* Writes the header h (ints beyond those set are 0) to out. */
TG_HIDDEN bool tg__llmc_put_header(tg__file *out,
                                   const int32_t h[LLMC_HEADER_INTS]);

#endif /* TAPEGRAD_NN_LLMC_H */
