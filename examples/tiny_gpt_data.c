/* tiny_gpt_data.c: the text tiny_gpt trains on: read whole, its bytes
 * made token ids, split 90/10 into training and validation; the random
 * windows of a batch, each rank's share of them; and the unigram baseline
 * the losses are read against. */
#define _POSIX_C_SOURCE 200809L /* O_NONBLOCK, fstat, fdopen */

#include "tiny_gpt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole of a regular file of at most MAX_TEXT_MIB, malloc'd, its
 * length in *n; or NULL with a message on stderr. Not a device or a pipe:
 * /dev/zero never ends and a FIFO's open waits for a writer (the open does
 * not block, and fstat refuses them). */
static unsigned char *read_text(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        report("%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0)
        report("%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        report("%s is not a regular file (a device, a pipe or a directory): "
               "give a text file",
               path);
    else if (st.st_size > (off_t)MAX_TEXT_MIB << 20)
        report("%s is %lld bytes, larger than the limit of %d MiB for a text",
               path, (long long)st.st_size, MAX_TEXT_MIB);
    else if (!(f = fdopen(fd, "rb")))
        report("%s: %s", path, strerror(errno));
    if (!f) {
        close(fd);
        return NULL;
    }
    /* one byte more than the size, to see a file that grew meanwhile */
    size_t size = (size_t)st.st_size;
    unsigned char *text = malloc(size + 1);
    *n = text ? fread(text, 1, size + 1, f) : 0;
    bool read_error = ferror(f);
    fclose(f);
    if (!text || read_error || *n != size) {
        report("cannot read %s: %s", path,
               !text        ? "out of memory"
               : read_error ? "read error"
                            : "it changed while being read");
        free(text);
        return NULL;
    }
    return text;
}

/* Reads the whole file and turns it into ids: the distinct bytes, sorted,
 * numbered 0..V-1. Returns 0, or -1 with a message on stderr. */
int load_corpus(corpus *cp, const char *path, int block)
{
    size_t n;
    unsigned char *text = read_text(path, &n);
    if (!text)
        return -1;

    int id_of[256];
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++)
        seen[text[i]] = true;
    cp->vocab = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c]) {
            id_of[c] = cp->vocab;
            cp->byte_of[cp->vocab++] = (unsigned char)c;
        }
    cp->n = (int64_t)n;
    cp->n_train = (int64_t)(0.9 * (double)n);
    cp->ids = malloc((n ? n : 1) * sizeof *cp->ids);
    if (cp->ids)
        for (size_t i = 0; i < n; i++)
            cp->ids[i] = id_of[text[i]];
    free(text);
    if (!cp->ids) {
        report("%s: out of memory for %zu token ids", path, n);
        return -1;
    }
    /* both splits must hold at least one window of block + 1 bytes */
    if (cp->n - cp->n_train <= block) {
        report("%s has %lld bytes; its last 10%% must be longer than the "
               "block (%d)",
               path, (long long)n, block);
        return -1;
    }
    return 0;
}

/* B random windows from ids[0, n): x = ids[s, s+T), y = ids[s+1, s+T+1],
 * both (B,T) int64, of which this rank keeps rows [world.lo, world.hi)
 * (all of them in one process). Every rank draws all B starts, so the
 * generator stays in step on every rank. Returns 0 with two new
 * references, or -1 (a message on stderr when the batch itself does not
 * fit in memory). */
int get_batch(const int64_t *ids, int64_t n, int B, int T, tg_rng *rng,
              tg_tensor **x, tg_tensor **y)
{
    int64_t lo = world.lo, hi = world.hi, nb = hi - lo;
    /* B, T <= 10^9 (the options' limit): 2 B T 8 < 2^64, no overflow */
    size_t bytes = 2 * (size_t)nb * (size_t)T * sizeof(int64_t);
    int64_t *buf = malloc(bytes);
    if (!buf) {
        report("cannot allocate a batch of %d windows of %d tokens (%.3g GB "
               "of token ids): lower --batch or --block",
               B, T, (double)bytes / 1e9);
        return -1;
    }
    for (int b = 0; b < B; b++) {
        /* a start in [0, n - T - 1], uniformly */
        int64_t s = (int64_t)(tg_rng_uniform(rng) * (double)(n - T));
        if (b < lo || b >= hi)
            continue;
        size_t row = (size_t)(b - lo);
        memcpy(buf + row * T, ids + s, (size_t)T * sizeof *buf);
        memcpy(buf + ((size_t)nb + row) * T, ids + s + 1,
               (size_t)T * sizeof *buf);
    }
    *x = tg_from_data(TG_INT64, TG_SHAPE(nb, T), buf);
    *y = tg_from_data(TG_INT64, TG_SHAPE(nb, T), buf + (size_t)nb * T);
    free(buf);
    return *x && *y ? 0 : -1;
}

/* The unigram baseline: predict every byte by its frequency in the training
 * split, p(c) = (count(c) + 1) / (n_train + V) (add-one, so a byte seen only
 * in validation costs a finite amount), and score that on validation:
 *     H = -(1/n_val) sum_i log p(c_i)         nats per character */
double unigram_baseline(const corpus *cp)
{
    double count[256] = {0};
    for (int64_t i = 0; i < cp->n_train; i++)
        count[cp->ids[i]] += 1;
    double h = 0;
    for (int64_t i = cp->n_train; i < cp->n; i++)
        h -= log((count[cp->ids[i]] + 1) / (double)(cp->n_train + cp->vocab));
    return h / (double)(cp->n - cp->n_train);
}

/* Collective: the text as the model sees it, the same on every rank: its
 * bytes (each id's byte), hashed with 64-bit FNV-1a (h = (h ^ byte) *
 * 0x100000001b3 from 0xcbf29ce484222325), and its length, compared
 * (tg_dist_check_same). 0, or -1 on every rank naming each rank's. */
int text_agrees(const corpus *cp)
{
    if (world.size == 1)
        return 0;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int64_t i = 0; i < cp->n; i++)
        h = (h ^ cp->byte_of[cp->ids[i]]) * UINT64_C(0x100000001b3);
    char value[64];
    snprintf(value, sizeof value, "%lld bytes, FNV-1a %016llx",
             (long long)cp->n, (unsigned long long)h);
    return tg_dist_check_same(world.d, "the text", value);
}
