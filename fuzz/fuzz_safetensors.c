/* libFuzzer target for the .safetensors reader. Each input is a whole
 * file, read from memory by tg__safetensors_read_mem (nn/formats.h): the
 * code tg_read_safetensors runs on a file, and tg_load_safetensors' header
 * checks.
 *
 * What must hold for every input:
 * - a malformed file gives -1, a "read_safetensors: fuzz.safetensors: ..."
 *   message and the list as it was (empty), and never a crash, a read past
 *   the input, a leak, or an allocation the input's size does not justify
 *   (make fuzz-run passes -malloc_limit_mb for that);
 * - a file that reads gives contiguous tensors of float32, float64, int64
 *   or bool whose bytes fit in the input (a 2-byte half becomes a 4-byte
 *   float, a 1-byte U8 an 8-byte int64: at most 8 times), each with a
 *   distinct name other than
 *   "__metadata__"; tg_save_safetensors writes them (to a file in
 *   $TMPDIR, /tmp by default), and that file reads back to the same names,
 *   dtypes, shapes and bytes.
 *
 * Build: configure --enable-fuzz && make fuzz; run: make fuzz-run. */
#include "core/internal.h"
#include "nn/formats.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken property is a finding: report it and abort, which libFuzzer
 * saves as a crash input. */
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr,                                                    \
                    "fuzz_safetensors: %s:%d: %s (last error: '%s')\n",        \
                    __FILE__, __LINE__, #cond, tg_last_error());               \
            abort();                                                           \
        }                                                                      \
    } while (0)

static const char NAME[] = "fuzz.safetensors";

/* The bytes of t's elements, straight from its storage. */
static const uint8_t *elements(const tg_tensor *t, size_t *nbytes)
{
    size_t es = tg_dtype_size(t->dtype);
    *nbytes = (size_t)tg_numel(t) * es;
    return (const uint8_t *)t->storage->data + (size_t)t->offset * es;
}

/* ps, saved and read again, is ps. */
static void check_round_trip(const tg_params *ps)
{
    static char path[4096];
    if (!path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/fuzz_safetensors.%ld.safetensors",
                 dir && *dir ? dir : "/tmp", (long)getpid());
    }
    REQUIRE(tg_save_safetensors(ps, path) == 0);
    tg_params back;
    tg_params_init(&back);
    REQUIRE(tg_read_safetensors(path, &back) == 0);
    remove(path);
    REQUIRE(back.n == ps->n);
    for (int i = 0; i < ps->n; i++) {
        const tg_tensor *a = ps->items[i].t, *b = back.items[i].t;
        REQUIRE(strcmp(ps->items[i].name, back.items[i].name) == 0);
        REQUIRE(a->dtype == b->dtype && a->ndim == b->ndim);
        REQUIRE(memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) ==
                0);
        size_t na, nb;
        const uint8_t *ba = elements(a, &na), *bb = elements(b, &nb);
        REQUIRE(na == nb && memcmp(ba, bb, na) == 0);
    }
    tg_params_release(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_clear_error();
    if (tg__safetensors_read_mem(NAME, data, size, &ps) != 0) {
        static const char prefix[] = "read_safetensors: fuzz.safetensors: ";
        REQUIRE(strncmp(tg_last_error(), prefix, sizeof prefix - 1) == 0);
        REQUIRE(ps.n == 0 && ps.items == NULL);
        return 0;
    }
    uint64_t bytes = 0;
    for (int i = 0; i < ps.n; i++) {
        const tg_tensor *t = ps.items[i].t;
        REQUIRE(t->dtype == TG_FLOAT32 || t->dtype == TG_FLOAT64 ||
                t->dtype == TG_INT64 || t->dtype == TG_BOOL);
        REQUIRE(t->ndim >= 0 && t->ndim <= TG_MAX_DIMS);
        REQUIRE(tg_numel(t) == 0 || tg_is_contiguous(t));
        REQUIRE(strcmp(ps.items[i].name, "__metadata__") != 0);
        bytes += (uint64_t)tg_numel(t) * tg_dtype_size(t->dtype);
    }
    REQUIRE(bytes <= 8 * (uint64_t)size);
    check_round_trip(&ps);
    tg_params_release(&ps);
    return 0;
}
