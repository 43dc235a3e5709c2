/* libFuzzer target for the .npy loader. Each input is a whole .npy file,
 * parsed from memory by tg__npy_parse: the code tg_load_npy runs on a file
 * and the .npz checkpoint loader runs on each entry.
 *
 * What must hold for every input:
 * - a malformed file gives NULL and a "load_npy: fuzz.npy: ..." message, and
 *   never a crash, a read past the input, or an allocation the input's size
 *   does not justify (make fuzz-run passes -malloc_limit_mb for that);
 * - a file that loads gives a tensor whose data is exactly the file's bytes
 *   after the header, and which, written back behind the header tg_save_npy
 *   writes, loads again to the same dtype, shape and bytes.
 *
 * Build: configure --enable-fuzz && make fuzz; run: make fuzz-run. */
#include "core/internal.h"
#include "core/npy.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken property is a finding: report it and abort, which libFuzzer
 * saves as a crash input. */
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_npy: %s:%d: %s (last error: '%s')\n",        \
                    __FILE__, __LINE__, #cond, tg_last_error());               \
            abort();                                                           \
        }                                                                      \
    } while (0)

static const char NAME[] = "fuzz.npy";

/* The bytes of t's elements, straight from its storage: tg_copy_out goes
 * through double, which rounds an int64 beyond 2^53, and would hide what the
 * loader stored. */
static const uint8_t *elements(const tg_tensor *t, size_t *nbytes)
{
    size_t es = tg_dtype_size(t->dtype);
    *nbytes = (size_t)tg_numel(t) * es;
    REQUIRE(t->storage->nbytes >= *nbytes + (size_t)t->offset * es);
    return (const uint8_t *)t->storage->data + (size_t)t->offset * es;
}

/* t, loaded from size bytes: its data is the input's last bytes, and it
 * round-trips through the .npy format 1.0 header tg_save_npy writes. */
static void check_loaded(const tg_tensor *t, const uint8_t *data, size_t size)
{
    REQUIRE(t->ndim >= 0 && t->ndim <= TG_MAX_DIMS);
    /* tg_is_contiguous says false for some 0-element shapes such as (2,0,3)
     * (core/tensor.c), which hold no elements to be out of order. */
    REQUIRE(tg_numel(t) == 0 || tg_is_contiguous(t));
    size_t nbytes;
    const uint8_t *bytes = elements(t, &nbytes);
    REQUIRE(nbytes < size);
    REQUIRE(memcmp(bytes, data + size - nbytes, nbytes) == 0);
    if (t->dtype == TG_BOOL)
        for (size_t i = 0; i < nbytes; i++)
            REQUIRE(bytes[i] <= 1);

    char header[TG_NPY_HEADER_MAX];
    size_t hlen = tg__npy_header(t, header);
    uint8_t *file = malloc(hlen + nbytes);
    REQUIRE(file != NULL);
    memcpy(file, header, hlen);
    memcpy(file + hlen, bytes, nbytes);
    tg_tensor *back = tg__npy_parse(NAME, file, hlen + nbytes);
    REQUIRE(back != NULL);
    REQUIRE(back->dtype == t->dtype && back->ndim == t->ndim);
    REQUIRE(memcmp(back->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) ==
            0);
    size_t back_nbytes;
    const uint8_t *back_bytes = elements(back, &back_nbytes);
    REQUIRE(back_nbytes == nbytes && memcmp(back_bytes, bytes, nbytes) == 0);
    tg_release(back);
    free(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_clear_error();
    tg_tensor *t = tg__npy_parse(NAME, data, size);
    if (t) {
        check_loaded(t, data, size);
        tg_release(t);
    } else {
        REQUIRE(strncmp(tg_last_error(), "load_npy: fuzz.npy: ", 20) == 0);
    }
    return 0;
}
