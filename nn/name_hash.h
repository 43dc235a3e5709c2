/* Private to nn/: the hash of a parameter list's names (nn/name_hash.c),
 * kept by tg_params_add so that adding n parameters one at a time, and
 * finding one by name, cost O(n) and O(1) string comparisons rather than
 * n^2 / 2 and n (a million names: 5 * 10^11 comparisons, hours).
 *
 * The list's owner adds through the calls, so the hash covers the list's
 * first `n` items; a list changed behind its back (n lowered, as a failed
 * call does to give a list back as it was) is hashed anew at the next add,
 * and until then tg_params_get scans. Names here come from the program
 * itself; files' names go through nn/names.h's sorted index, which no set
 * of names can slow down. */
#ifndef TAPEGRAD_NN_NAME_HASH_H
#define TAPEGRAD_NN_NAME_HASH_H

#include "core/error.h"
#include "tapegrad_nn.h"

#include <stdbool.h>

/* Makes ps's hash cover items[0 .. ps->n), with room for `room` names
 * more: adds the items past those it covers, or hashes them all anew when
 * the list shrank or the table is too full. false when out of memory (an
 * error for the caller to word: the hash is then gone, and lookups scan);
 * it cannot fail when an earlier call made the room. */
TG_HIDDEN bool tg__name_hash_sync(tg_params *ps, int room);

/* The position of name in ps: -1 when it is not there, -2 when the hash
 * does not cover the list as it is (the caller scans). */
TG_HIDDEN int tg__name_hash_find(const tg_params *ps, const char *name);

TG_HIDDEN void tg__name_hash_free(tg_params *ps);

#endif /* TAPEGRAD_NN_NAME_HASH_H */
