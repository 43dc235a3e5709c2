/* What the bench programs share: the clocks, sorting and the median of the
 * samples, and the check of a positive number given as an option's value.
 * Static inline, so that a program links nothing more and one that leaves
 * a function unused gets no warning for it. */
#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Wall time, what the tables compare. */
static inline double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

/* CPU time of the whole process (every thread): on a shared machine this
 * leaves out the time spent waiting for a core, so with one thread it is
 * the steadier measure of the work itself. A system call: read it outside
 * the wall interval. */
static inline double cpu_ms(void) { return clock_ms(CLOCK_PROCESS_CPUTIME_ID); }

static inline int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n sorted values (the mean of the middle two when n is even,
 * as Python's statistics.median). */
static inline double median(const double *sorted, int n)
{
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* A positive number from arg, or 0 (bad). */
static inline double positive(const char *arg)
{
    char *end;
    double v = strtod(arg, &end);
    return *arg && !*end && v > 0 ? v : 0;
}

/* The options every timing program takes, --threads N (a whole number
 * >= 1), --seconds S and --warmup-seconds S (> 0), with num the value
 * read by positive(): sets the one a names and returns true; false when a
 * is none of them or num is out of its range. */
static inline bool timing_option(const char *a, double num, int *threads,
                                 double *seconds, double *warmup_seconds)
{
    if (!strcmp(a, "--threads") && num >= 1 && num == (int)num)
        *threads = (int)num;
    else if (!strcmp(a, "--seconds") && num > 0)
        *seconds = num;
    else if (!strcmp(a, "--warmup-seconds") && num > 0)
        *warmup_seconds = num;
    else
        return false;
    return true;
}

#endif
