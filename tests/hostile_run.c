/* The programs of tests/hostile.test: saves to kill, and a zip bomb.
 *
 *   hostile_run save PATH MIB [named] [loop]
 *       saves an .npz of one float32 parameter "w" of MIB MiB, element i
 *       holding i mod 1000; "named": every temporary named from the start,
 *       as on a file system without O_TMPFILE; "loop": again and again,
 *       until killed.
 *   hostile_run check PATH MIB
 *       reads PATH (tg_read_npz): exit 0 when it is that checkpoint, whole.
 *   hostile_run bomb PATH [lie]
 *       writes a zip bomb: one deflated entry "w.npy" of 3.75 GiB of zeros
 *       (a float32 vector of 1006632960, 4026531840 bytes) in 3.9 MB, its
 *       sizes and CRC honest; with "lie", its header says shape (6,).
 *   hostile_run load PATH
 *       loads PATH into a float32 parameter "w" of shape (2,3)
 *       (tg_load_npz); prints the error and exits 0 when it is refused.
 *   hostile_run read PATH
 *       as load, with tg_read_npz.
 *
 * Linked with the library's objects, for tg__file_named_only. */
#include "core/shared.h"
#include "tapegrad_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int saves(const char *path, long mib, bool loop)
{
    int64_t n = mib * 1024 * 1024 / 4;
    float *v = malloc((size_t)n * sizeof *v + 1);
    if (!v)
        return 99;
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(i % 1000);
    tg_tensor *w = tg_from_data(TG_FLOAT32, 1, &n, v);
    free(v);
    tg_params ps;
    tg_params_init(&ps);
    if (tg_params_add(&ps, NULL, "w", w) != 0)
        return 99;
    int rc = 0;
    do
        rc = tg_save_npz(&ps, path);
    while (rc == 0 && loop);
    if (rc)
        fprintf(stderr, "hostile_run: %s\n", tg_last_error());
    tg_params_free(&ps);
    tg_release(w);
    return rc ? 1 : 0;
}

static int check(const char *path, long mib)
{
    tg_params ps;
    tg_params_init(&ps);
    if (tg_read_npz(path, &ps) != 0 || ps.n != 1 ||
        tg_numel(ps.items[0].t) != mib * 1024 * 1024 / 4) {
        fprintf(stderr, "hostile_run: %s: not whole: %s\n", path,
                tg_last_error());
        tg_params_release(&ps);
        return 1;
    }
    int64_t n = tg_numel(ps.items[0].t);
    float *v = malloc((size_t)n * sizeof *v + 1);
    int bad = !v || tg_copy_out(ps.items[0].t, TG_FLOAT32, v) != 0;
    for (int64_t i = 0; !bad && i < n; i++)
        bad = v[i] != (float)(i % 1000);
    free(v);
    tg_params_release(&ps);
    if (bad)
        fprintf(stderr, "hostile_run: %s: wrong values\n", path);
    return bad;
}

static void put(unsigned char *b, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> 8 * i);
}

/* One 128-byte .npy header (format 1.0) for a float32 vector of n. */
static void npy_header(unsigned char h[128], uint32_t n)
{
    memset(h, ' ', 128);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    put(h + 8, 118, 2);
    int len = snprintf((char *)h + 10, 118,
                       "{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (%u,), }",
                       n);
    h[10 + len] = ' ';
    h[127] = '\n';
}

/* A raw deflate of in (n bytes) ended by flush (Z_FULL_FLUSH: a block on
 * its own, byte-aligned, no reference to what came before) into out. */
static size_t deflate_part(z_stream *z, const void *in, size_t n, int flush,
                           unsigned char *out, size_t cap)
{
    z->next_in = (unsigned char *)in;
    z->avail_in = (uInt)n;
    z->next_out = out;
    z->avail_out = (uInt)cap;
    deflate(z, flush);
    return cap - z->avail_out;
}

/* The bomb: the header, then 3840 MiB of zeros as 3840 copies of one
 * fully flushed deflate block of 1 MiB (the same bytes each time: nothing
 * before a full flush is referred to after it), then the final block. */
static int bomb(const char *path, bool lie)
{
    enum { MIB = 1 << 20, CHUNKS = 3840 };
    const uint32_t numel = (uint32_t)CHUNKS * MIB / 4;
    unsigned char h[128], *zeros = calloc(MIB, 1), *a = malloc(2 * MIB),
                          *b = malloc(2 * MIB), end[64];
    z_stream z = {0};
    if (!zeros || !a || !b ||
        deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        return 99;
    npy_header(h, lie ? 6 : numel);
    size_t na = deflate_part(&z, h, sizeof h, Z_FULL_FLUSH, a, 2 * MIB);
    size_t nb = deflate_part(&z, zeros, MIB, Z_FULL_FLUSH, b, 2 * MIB);
    size_t ne = deflate_part(&z, NULL, 0, Z_FINISH, end, sizeof end);
    deflateEnd(&z);
    uLong crc_zeros = crc32(0, zeros, MIB), crc = crc32(0, h, sizeof h);
    for (int i = 0; i < CHUNKS; i++)
        crc = crc32_combine(crc, crc_zeros, MIB);
    uint32_t size = (uint32_t)(sizeof h + (uint64_t)CHUNKS * MIB);
    uint32_t comp = (uint32_t)(na + nb * CHUNKS + ne);
    unsigned char local[30 + 5] = {0}, central[46 + 5] = {0}, eocd[22] = {0};
    put(local, 0x04034b50, 4), put(local + 4, 20, 2), put(local + 8, 8, 2);
    put(local + 14, (uint32_t)crc, 4), put(local + 18, comp, 4);
    put(local + 22, size, 4), put(local + 26, 5, 2);
    memcpy(local + 30, "w.npy", 5);
    put(central, 0x02014b50, 4), put(central + 4, 20, 2);
    memcpy(central + 6, local + 4, 26); /* version needed .. name length */
    memcpy(central + 46, "w.npy", 5);
    put(eocd, 0x06054b50, 4), put(eocd + 8, 1, 2), put(eocd + 10, 1, 2);
    put(eocd + 12, sizeof central, 4);
    put(eocd + 16, (uint32_t)(sizeof local + comp), 4);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(local, sizeof local, 1, f) != 1 ||
              fwrite(a, na, 1, f) != 1;
    for (int i = 0; !bad && i < CHUNKS; i++)
        bad = fwrite(b, nb, 1, f) != 1;
    bad = bad || fwrite(end, ne, 1, f) != 1 ||
          fwrite(central, sizeof central, 1, f) != 1 ||
          fwrite(eocd, sizeof eocd, 1, f) != 1;
    bad = (f && fclose(f) != 0) || bad;
    free(zeros), free(a), free(b);
    return bad ? 99 : 0;
}

/* Refused, and saying why: 0; accepted: 1. */
static int refused(const char *path, bool load)
{
    tg_tensor *w = tg_zeros(TG_FLOAT32, 2, (int64_t[]){2, 3});
    tg_params ps, out;
    tg_params_init(&ps);
    tg_params_init(&out);
    tg_params_add(&ps, NULL, "w", w);
    int rc = load ? tg_load_npz(&ps, path) : tg_read_npz(path, &out);
    printf("%s\n", rc ? tg_last_error() : "accepted");
    tg_params_release(&out);
    tg_params_free(&ps);
    tg_release(w);
    return rc ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[1] : "", *path = argv[argc > 2 ? 2 : 0];
    bool named = false, loop = false, lie = false;
    for (int i = 3; i < argc; i++) {
        named |= strcmp(argv[i], "named") == 0;
        loop |= strcmp(argv[i], "loop") == 0;
        lie |= strcmp(argv[i], "lie") == 0;
    }
    tg__file_named_only = named;
    if (strcmp(mode, "save") == 0 && argc > 3)
        return saves(path, atol(argv[3]), loop);
    if (strcmp(mode, "check") == 0 && argc > 3)
        return check(path, atol(argv[3]));
    if (strcmp(mode, "bomb") == 0)
        return bomb(path, lie);
    if (strcmp(mode, "load") == 0 || strcmp(mode, "read") == 0)
        return refused(path, strcmp(mode, "load") == 0);
    fprintf(stderr, "usage: hostile_run save|check|bomb|load|read PATH ...\n");
    return 99;
}
