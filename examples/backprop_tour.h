/* backprop_tour.h: what the two files of examples/backprop_tour share: the
 * lesson's sizes, the tour's tensors, and the graph and the page written
 * from them (backprop_tour_page.c). */
#ifndef TAPEGRAD_EXAMPLES_BACKPROP_TOUR_H
#define TAPEGRAD_EXAMPLES_BACKPROP_TOUR_H

#include <tapegrad.h>
#include <tapegrad_report.h>

/* The lesson's sizes: B sequences, T tokens, C channels, heads of HS. */
enum { B = 4, T = 8, C = 32, HS = 16 };

/* Every tensor of the forward pass. They all stay alive to the end: a tape
 * entry belongs to the tensor it produced, and tg_tape_print / tg_tape_dot
 * only list entries whose outputs are still alive. */
typedef struct tour {
    tg_tensor *x, *W_q, *W_k, *W_v; /* leaves that require grad */
    tg_tensor *u;                   /* (B,T,hs) fixed weights of the loss */
    tg_tensor *future;              /* (T,T) true above the diagonal */
    tg_tensor *q, *k, *v, *k_t, *scores, *scaled, *masked, *attn, *out;
    tg_tensor *weighted, *loss;
    int n_failed; /* checks above TOL */
} tour;

/* backprop_tour.c: a title line, printed and kept for the page. */
void section(const char *title);

/* backprop_tour_page.c */
int write_graph(const char *dot_path);
int page_forward(tg_report *rep, tour *S);
int page_stepper(tg_report *rep, tg_tensor *loss);
int page_tape(tg_report *rep);
int write_page(tour *S, tg_report *rep, const char *path);

#endif /* TAPEGRAD_EXAMPLES_BACKPROP_TOUR_H */
