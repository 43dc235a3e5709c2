#include "internal.h"
void tg__node_free(tg_node *n) { (void)n; }
