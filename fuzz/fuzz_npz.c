/* libFuzzer target for the .npz reader (libzip underneath). Each input is
 * a whole archive, read from memory by tg__npz_read_mem (nn/formats.h,
 * through libzip's zip_source_buffer): the code tg_read_npz and
 * tg_load_npz run on a file.
 *
 * What must hold for every input:
 * - a malformed archive gives -1, a message starting "read_npz: fuzz.npz"
 *   and the list as it was (empty), and never a crash, a read past the
 *   input, a leak, or an allocation the input's size does not justify (an
 *   entry's claimed size is bounded by deflate's ratio before it is
 *   allocated; make fuzz-run passes -malloc_limit_mb);
 * - an archive that reads gives contiguous tensors, one per entry.
 *
 * Build: configure --enable-fuzz && make fuzz; run: make fuzz-run. */
#include "core/internal.h"
#include "nn/formats.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_npz: %s:%d: %s (last error: '%s')\n",        \
                    __FILE__, __LINE__, #cond, tg_last_error());               \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_params ps;
    tg_params_init(&ps);
    tg_clear_error();
    if (tg__npz_read_mem("fuzz.npz", data, size, &ps) != 0) {
        REQUIRE(strncmp(tg_last_error(), "read_npz: fuzz.npz", 18) == 0);
        REQUIRE(ps.n == 0 && ps.items == NULL);
        return 0;
    }
    for (int i = 0; i < ps.n; i++) {
        const tg_tensor *t = ps.items[i].t;
        REQUIRE(t->ndim >= 0 && t->ndim <= TG_MAX_DIMS);
        REQUIRE(tg_numel(t) == 0 || tg_is_contiguous(t));
    }
    tg_params_release(&ps);
    return 0;
}
