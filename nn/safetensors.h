/* Private to nn/: what the .safetensors rooms share: the header's reader
 * (nn/safetensors_header.c), the tensors' (nn/safetensors.c), the stream
 * into a model (nn/safetensors_stream.c) and the writer
 * (nn/safetensors_save.c). The format:
 *
 *   8 bytes   N, the header's length, unsigned little-endian
 *   N bytes   a JSON object, UTF-8, padded with spaces:
 *             {"__metadata__": {"format": "pt"},
 *              "<name>": {"dtype": "F32", "shape": [2, 3],
 *                         "data_offsets": [begin, end]}, ...}
 *   the rest  the data buffer: each tensor's elements, little-endian, C
 *             order, at [begin, end) of the buffer */
#ifndef TAPEGRAD_SAFETENSORS_H
#define TAPEGRAD_SAFETENSORS_H

#include "core/error.h"
#include "nn/names.h"
#include "tapegrad.h"
#include "tapegrad_nn.h"

#include <stdint.h>
#include <stdio.h>

/* Elements go between the file and a tensor's memory as bytes. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .safetensors rooms copy little-endian bytes as they are"
#endif

#define LEN_BYTES  8
#define HEADER_MAX UINT64_C(100000000) /* the reference library's limit */
#define METADATA   "__metadata__"
#define NUMEL_MAX  (INT64_C(1) << 59) /* tapegrad's bound on a tensor */

/* The dtypes of the format that we read, and how each becomes ours: the
 * halves widened to float32 and the narrower integers to int64, exactly, as
 * numpy's astype would (tapegrad has no other types; older GPT-2 exports
 * keep their causal-mask buffers as U8 or BOOL). */
typedef enum {
    ST_F32,
    ST_F64,
    ST_I64,
    ST_BF16,
    ST_F16,
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_U16,
    ST_I16,
    ST_U32,
    ST_I32,
    ST_N_DTYPES
} st_dtype;
typedef struct st_dtype_info {
    const char *name;
    size_t size;   /* bytes per element in the file */
    tg_dtype into; /* what it is read as */
} st_dtype_info;
TG_HIDDEN extern const st_dtype_info tg__st_dtypes[ST_N_DTYPES];
#define DTYPES tg__st_dtypes

/* One tensor of the header, checked. */
typedef struct st_entry {
    const char *name; /* the header's key, in st_file.names */
    st_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    uint64_t begin, end; /* into the data buffer */
} st_entry;

typedef struct st_file {
    const char *op, *path; /* for messages */
    FILE *f;               /* the file, or NULL for bytes in memory */
    const unsigned char *mem;
    uint64_t size;    /* bytes in all */
    uint64_t data_at; /* where the data buffer starts: 8 + N */
    uint64_t at; /* where the stream stands: read_at seeks only elsewhere */
    char *names; /* every entry's name, NUL after each */
    st_entry *entries;
    size_t n;
    tg__names by_name;    /* the entries by name, sorted (tg__names_find) */
    unsigned char *chunk; /* a stream's buffer (nn/safetensors_stream.c) */
} st_file;

/* Sets the error "<op>: <path>: <problem>" and returns false. */
#define fail(r, ...) tg__file_error((r)->op, (r)->path, __VA_ARGS__)

/* Reads len bytes at off, which the caller has checked lie in the file. */
TG_HIDDEN bool tg__st_read_at(st_file *r, uint64_t off, size_t len, void *buf);

/* Reads and checks the header of r (r->size set, r->f or r->mem) into
 * r->entries (every tensor but "__metadata__", in the header's order),
 * r->names and r->by_name. false with the error set. */
TG_HIDDEN bool tg__st_parse_header(st_file *r);

/* What the whole-file reader (nn/safetensors.c) and the stream
 * (nn/safetensors_stream.c) read with, so that both refuse the same files
 * with the same errors. Each false or NULL with the error set. */

/* Opens r->path (r->op, r->path set) and reads its header. */
TG_HIDDEN bool tg__st_open_file(st_file *r);
/* Frees what the header's reader made and closes the file, if any. */
TG_HIDDEN void tg__st_close_file(st_file *r);
/* Elements [first, first + count) of entry e into buf, as e is read: F32,
 * F64, I64 and BOOL as they are, BF16 and F16 widened to float32, the
 * narrower integers to int64 (buf holds count of what e is read as). */
TG_HIDDEN bool tg__st_read_elements(st_file *r, const st_entry *e, size_t first,
                                    size_t count, unsigned char *buf);
/* Errors unless each of the n bytes at b, elements [first, first + n) of
 * the BOOL entry e, is 0 or 1. */
TG_HIDDEN bool tg__st_check_bools(const st_file *r, const st_entry *e,
                                  size_t first, const unsigned char *b,
                                  size_t n);
/* Entry e as a new tensor, its values read whole. */
TG_HIDDEN tg_tensor *tg__st_read_tensor(st_file *r, const st_entry *e);

/* Makes entry e's tensor of a list: tg__st_read_tensor, or the stream's
 * placeholder (its shape and dtype, no values). */
typedef tg_tensor *st_make_fn(st_file *r, const st_entry *e);
/* Appends every entry of r to out, in the header's order, each made by
 * make: 0, or -1 with out as it was. */
TG_HIDDEN int tg__st_read_all(st_file *r, tg_params *out, st_make_fn *make);

#endif /* TAPEGRAD_SAFETENSORS_H */
