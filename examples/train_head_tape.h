/* train_head's tape: one step of the untrained head on the show sequence,
 * drawn after backward, and the exact zeros of its attention gradients
 * counted by cause (examples/train_head_tape.c). */
#ifndef TAPEGRAD_EXAMPLES_TRAIN_HEAD_TAPE_H
#define TAPEGRAD_EXAMPLES_TRAIN_HEAD_TAPE_H

#include "recall_task.h"

#include <tapegrad_report.h>

#include <stdint.h>

/* The head of step 0 (drawn from seed, as the run draws it first) on show:
 * forward, backward, the tape kept. With rep NULL it prints the zeros by
 * cause; with a report it adds the caption that says them and the tape's
 * figure. Returns 0, or -1 on a library error; 1 when a zero of the tape
 * has no cause the count knows (the caption would not be true). */
int step0_tape(uint32_t seed, int head_size, const recall_batch *show,
               tg_report *rep);

#endif
