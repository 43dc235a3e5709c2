/* page_echo.c: the copy of what an example prints (page_echo.h), one per
 * program, so that what any of its files say() reaches the page. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */

#include "page_echo.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *page_echo;
static char *page_echo_buf;
static size_t page_echo_len;

FILE *page_echo_file(void)
{
    if (!page_echo)
        page_echo = open_memstream(&page_echo_buf, &page_echo_len);
    return page_echo;
}

void say(const char *fmt, ...)
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

const char *page_echo_text(void)
{
    if (page_echo)
        fflush(page_echo);
    return page_echo_buf ? page_echo_buf : "";
}

void page_echo_free(void)
{
    if (page_echo)
        fclose(page_echo);
    free(page_echo_buf);
    page_echo = NULL;
    page_echo_buf = NULL;
}

int page_write(tg_report *rep, int rc, const char *path)
{
    if (rc == 0)
        rc = tg_report_write(rep, path);
    tg_report_free(rep);
    if (rc == 0)
        printf("page: %s\n", path);
    return rc;
}
