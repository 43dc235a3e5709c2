/* What an example prints, kept for its HTML page as well (train_head,
 * unscaled, backprop_tour): say() prints as printf does and keeps a copy;
 * page_echo_text() is the copy so far, for tg_report_pre; page_echo_file()
 * the stream itself, for functions that print to a FILE (tg_tape_print);
 * page_write() the page's last step.
 * One copy per program, in page_echo.c, whichever of its files say() is
 * called from. It includes <tapegrad_report.h>, for the page. */
#ifndef PAGE_ECHO_H
#define PAGE_ECHO_H

#include <tapegrad_report.h>

#include <stdio.h>

/* The copy's stream (opened on first use), or NULL when out of memory:
 * then the page simply lacks the printed text. */
FILE *page_echo_file(void);

__attribute__((format(printf, 1, 2))) void say(const char *fmt, ...);

const char *page_echo_text(void);

void page_echo_free(void);

/* The end of an example's page: when rc is 0 (its sections went in),
 * writes rep to path and prints "page: PATH"; frees rep either way.
 * Returns 0, or -1 (rc's, or the write's, with the library's error). */
int page_write(tg_report *rep, int rc, const char *path);

#endif /* PAGE_ECHO_H */
