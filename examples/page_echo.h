/* What an example prints, kept for its HTML page as well (train_head,
 * unscaled, backprop_tour): say() prints as printf does and keeps a copy;
 * page_echo_text() is the copy so far, for tg_report_pre; page_echo_file()
 * the stream itself, for functions that print to a FILE (tg_tape_print).
 * Header-only, as recall_task.h; it includes <tapegrad_report.h>, for the
 * page. The including file defines _POSIX_C_SOURCE 200809L
 * (open_memstream). */
#ifndef PAGE_ECHO_H
#define PAGE_ECHO_H

#include <tapegrad_report.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *page_echo;
static char *page_echo_buf;
static size_t page_echo_len;

/* The copy's stream (opened on first use), or NULL when out of memory:
 * then the page simply lacks the printed text. */
static inline FILE *page_echo_file(void)
{
    if (!page_echo)
        page_echo = open_memstream(&page_echo_buf, &page_echo_len);
    return page_echo;
}

static inline __attribute__((format(printf, 1, 2))) void say(const char *fmt,
                                                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    FILE *copy = page_echo_file();
    if (copy) {
        va_start(ap, fmt);
        vfprintf(copy, fmt, ap);
        va_end(ap);
    }
}

static inline const char *page_echo_text(void)
{
    if (page_echo)
        fflush(page_echo);
    return page_echo_buf ? page_echo_buf : "";
}

static inline void page_echo_free(void)
{
    if (page_echo)
        fclose(page_echo);
    free(page_echo_buf);
    page_echo = NULL;
    page_echo_buf = NULL;
}

#endif /* PAGE_ECHO_H */
