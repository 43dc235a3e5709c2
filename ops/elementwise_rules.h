/* Private to ops/: the recorded backward (tg_op.vjp) and forward-mode
 * (tg_op.jvp) rules of the ops of ops/elementwise.c, defined in
 * ops/elementwise_rules.c, for the op tables there. */
#ifndef TAPEGRAD_ELEMENTWISE_RULES_H
#define TAPEGRAD_ELEMENTWISE_RULES_H

#include "core/tape.h"

/* gelu_tanh's constants: u = GELU_TANH_K (x + GELU_TANH_C x^3) */
#define GELU_TANH_K 0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_TANH_C 0.044715

#define TG_ELEMENTWISE_RULES(op)                                               \
    TG_HIDDEN int tg__##op##_vjp(const tg_node *n, tg_tensor *dy,              \
                                 tg_tensor **dx);                              \
    TG_HIDDEN int tg__##op##_jvp(const tg_node *n, tg_tensor *const *t,        \
                                 tg_tensor **ty);

TG_ELEMENTWISE_RULES(add)
TG_ELEMENTWISE_RULES(sub)
TG_ELEMENTWISE_RULES(mul)
TG_ELEMENTWISE_RULES(div)
TG_ELEMENTWISE_RULES(neg)
TG_ELEMENTWISE_RULES(scale)
TG_ELEMENTWISE_RULES(add_scalar)
TG_ELEMENTWISE_RULES(exp)
TG_ELEMENTWISE_RULES(log)
TG_ELEMENTWISE_RULES(sqrt)
TG_ELEMENTWISE_RULES(pow)
TG_ELEMENTWISE_RULES(relu)
TG_ELEMENTWISE_RULES(gelu)
TG_ELEMENTWISE_RULES(gelu_tanh)

#undef TG_ELEMENTWISE_RULES

#endif /* TAPEGRAD_ELEMENTWISE_RULES_H */
