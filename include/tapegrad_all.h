/** @file
 * tapegrad, all of it: `<tapegrad.h>` (tensors, ops, autograd, gradcheck,
 * I/O), `<tapegrad_nn.h>` (modules, optimizers, checkpoints),
 * `<tapegrad_plot.h>` (pictures) and `<tapegrad_report.h>` (HTML pages).
 * Each of those stands alone too; include just the ones you use, or this
 * one. */
#ifndef TAPEGRAD_ALL_H
#define TAPEGRAD_ALL_H

#include "tapegrad.h"
#include "tapegrad_nn.h"
#include "tapegrad_plot.h"
#include "tapegrad_report.h"

#endif /* TAPEGRAD_ALL_H */
