/* A parameter list's names hashed (see nn/name_hash.h): open addressing
 * with linear probing over a power-of-two table at most half full, each
 * slot holding an item's position + 1 (0: empty). FNV-1a spreads names
 * that differ in one digit ("h.11.attn.bias", "h.12.attn.bias"). */
#include "nn/name_hash.h"
#include "nn/names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct tg__name_hash {
    int32_t *slot;
    uint32_t mask; /* slots - 1 */
    int n;         /* items[0 .. n) are in the table */
};

static uint32_t hash_of(const char *s)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a, 64-bit */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (uint32_t)(h ^ h >> 32);
}

static void put(struct tg__name_hash *h, const tg_params *ps, int pos)
{
    uint32_t i = hash_of(ps->items[pos].name) & h->mask;
    while (h->slot[i])
        i = (i + 1) & h->mask;
    h->slot[i] = pos + 1;
}

/* A table for at least `need` names, at most half full. */
static struct tg__name_hash *table_for(uint64_t need)
{
    uint64_t slots = 16;
    while (slots < 2 * need)
        slots *= 2;
    if (slots > (uint64_t)1 << 31) /* positions are int: never reached */
        return NULL;
    struct tg__name_hash *h = tg__calloc(1, sizeof *h);
    int32_t *slot = h ? tg__calloc(slots, sizeof *slot) : NULL;
    if (!slot) {
        free(h);
        return NULL;
    }
    *h = (struct tg__name_hash){.slot = slot, .mask = (uint32_t)(slots - 1)};
    return h;
}

bool tg__name_hash_sync(tg_params *ps, int room)
{
    struct tg__name_hash *h = ps->index;
    uint64_t need = (uint64_t)ps->n + (uint64_t)room;
    bool anew = !h || h->n > ps->n || 2 * need > (uint64_t)h->mask + 1;
    if (anew) { /* shrunk behind our back, or full: hash every item again */
        tg__name_hash_free(ps);
        h = table_for(need < 8 ? 8 : 2 * need);
        if (!h)
            return false;
        ps->index = h;
    }
    for (; h->n < ps->n; h->n++)
        put(h, ps, h->n);
    return true;
}

int tg__name_hash_find(const tg_params *ps, const char *name)
{
    const struct tg__name_hash *h = ps->index;
    if (!h || h->n != ps->n)
        return -2;
    uint64_t compared = 0;
    int found = -1;
    for (uint32_t i = hash_of(name) & h->mask; h->slot[i];
         i = (i + 1) & h->mask) {
        compared++;
        if (strcmp(ps->items[h->slot[i] - 1].name, name) == 0) {
            found = h->slot[i] - 1;
            break;
        }
    }
    tg__name_compared(compared);
    return found;
}

void tg__name_hash_free(tg_params *ps)
{
    struct tg__name_hash *h = ps->index;
    if (h)
        free(h->slot);
    free(h);
    ps->index = NULL;
}
