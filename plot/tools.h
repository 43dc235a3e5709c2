/* Private to plot/: finding and running the external programs the floor
 * draws with (gnuplot for plot/plot.c and the report, Graphviz's dot for
 * the report's tape), without a shell, so paths may hold any character. */
#ifndef TAPEGRAD_PLOT_TOOLS_H
#define TAPEGRAD_PLOT_TOOLS_H

#include "core/error.h"

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>

/* True when the environment variable name is set to anything but "" or
 * "0" (TG_NO_GNUPLOT, TG_NO_DOT: act as if the tool were missing). Read on
 * every call, so a program (or a test) can switch it. */
TG_HIDDEN bool tg__plot_env_on(const char *name);

/* The first executable regular file called name along PATH, as a shell
 * finds it (an empty entry is the current directory), into path; false
 * when there is none. */
TG_HIDDEN bool tg__plot_find(const char *name, char *path, size_t cap);

/* Runs the program at path with argv, stdin on /dev/null, its stdout and
 * stderr read to their end, the last non-empty line of them kept in last
 * (where gnuplot and dot put the reason they stopped). Returns the wait
 * status, or -1 with errno set when it could not be started. */
TG_HIDDEN int tg__plot_run(const char *path, char *const argv[], char *last,
                           size_t cap);

/* Numbers written for gnuplot and for the page's JSON are C-locale ("0.5",
 * never "0,5"), whatever locale the program set: between begin and end
 * this thread's numeric locale is "C" (uselocale: other threads keep
 * theirs). Without memory for the locale, nothing changes. */
typedef struct tg__c_numbers {
    locale_t c, prev;
} tg__c_numbers;
TG_HIDDEN tg__c_numbers tg__c_numbers_begin(void);
TG_HIDDEN void tg__c_numbers_end(tg__c_numbers l);

#endif /* TAPEGRAD_PLOT_TOOLS_H */
