/* my_softmax.h: what examples/my_softmax.c finds, kept for its page
 * (my_softmax_page.c). */
#ifndef MY_SOFTMAX_H
#define MY_SOFTMAX_H

#include <tapegrad.h>

#include <stdbool.h>

/* The lesson's head, its first sequence: T tokens of C features, one head
 * of HS (np.random.seed(1337), as the lesson draws them). */
enum { B = 4, T = 8, C = 32, HS = 16 };

/* The mistake planted in the op's backward (--bug). */
typedef enum bug { BUG_NONE, BUG_NO_PPT, BUG_NO_MASK, BUG_SCALE } bug;

typedef struct options {
    const char *bug;  /* --bug NAME: "no-ppT", "no-mask", "scale", or NULL */
    const char *out;  /* --out DIR: the page's directory, or NULL */
    const char *html; /* --html FILE: the page itself, or NULL */
} options;

typedef struct run {
    bug bug;
    const char *bug_name; /* "no-ppT"..., "" for none */
    /* the head's leaves (float64; x is the lesson's first sequence) */
    tg_tensor *x, *w_q, *w_k, *w_v;
    tg_tensor *u;      /* (T, HS): the loss L = sum(out * u) */
    tg_tensor *future; /* (T, T) bool: j > i, the causal mask */
    /* tg_gradcheck's result, and tg_last_error() after it failed */
    int check_rc;
    tg_gradcheck_report rep;
    char error[1024];
    /* dL/dscores for L = sum(out * u): the op's backward, (T, T) */
    tg_tensor *dscores;
    int masked_zero, n_masked; /* of its masked cells, exactly 0 */
    tg_precision_report prec;
} run;

/* The first wrong entry of a failed check (r->rep.entry) as fields and
 * their values, for the printout and the page: its op, call site, shapes,
 * element, both values, whether the causal mask hides that element and
 * whether the forward depends on it. Returns how many (ENTRY_FIELDS). */
enum { ENTRY_FIELDS = 8, ENTRY_CELL = 160 };
int entry_fields(const run *r, const char **fields, char (*values)[ENTRY_CELL]);

/* The page: what was printed, the check, the wrong entry, dL/dscores as a
 * heatmap, the precision table. Prints "page: PATH". 0 or -1. */
int write_page(const run *r, const char *path);

#endif /* MY_SOFTMAX_H */
