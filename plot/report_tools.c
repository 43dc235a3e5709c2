/* The report's tools, found at run time: gnuplot (its canvas terminal draws
 * heatmaps and line charts as JavaScript) and Graphviz's dot (the tape as
 * SVG); run without a shell, in a private temporary directory. */
#include "plot/report.h"
#include "plot/tools.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool tg__report_run(const char *path, char *const argv[], char *last,
                    size_t cap)
{
    int status = tg__plot_run(path, argv, last, cap);
    if (status < 0) {
        snprintf(last, cap, "cannot run %s: %s", path, strerror(errno));
        return false;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static bool has_file(const char *dir, const char *file)
{
    char p[4096 + 64];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return access(p, R_OK) == 0;
}

/* gnuplot's js directory: the canvas terminal's scripts, which the page
 * inlines. In order: each entry of GNUPLOT_LIB followed by /js (gnuplot's
 * own search path for its support files); then the data directory of a
 * standard install beside the binary, <prefix>/share/gnuplot/gnuplot/
 * <version>/js (Debian's gnuplot-data) with prefix the binary's directory's
 * parent and the version from `gnuplot --version` ("gnuplot 5.4 patchlevel
 * 4"); then the same under /usr and /usr/local. */
static bool find_jsdir(const char *gnuplot, char *jsdir, size_t cap)
{
    const char *lib = getenv("GNUPLOT_LIB");
    for (const char *d = lib; d && *d;) {
        size_t n = strcspn(d, ":");
        snprintf(jsdir, cap, "%.*s/js", (int)n, d);
        if (n && has_file(jsdir, "gnuplot_common.js") &&
            has_file(jsdir, "canvastext.js"))
            return true;
        d += n;
        if (*d)
            d++;
    }
    char line[256];
    char *const argv[] = {"gnuplot", "--version", NULL};
    if (!tg__report_run(gnuplot, argv, line, sizeof line))
        return false;
    char version[32];
    if (sscanf(line, "gnuplot %31s", version) != 1)
        return false;
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s", gnuplot);
    for (int up = 0; up < 2; up++) { /* .../bin/gnuplot -> ... */
        char *slash = strrchr(prefix, '/');
        if (slash)
            *slash = '\0';
    }
    const char *prefixes[] = {prefix, "/usr", "/usr/local"};
    for (int i = 0; i < 3; i++) {
        snprintf(jsdir, cap, "%s/share/gnuplot/gnuplot/%s/js", prefixes[i],
                 version);
        if (has_file(jsdir, "gnuplot_common.js") &&
            has_file(jsdir, "canvastext.js"))
            return true;
    }
    return false;
}

/* The search: gnuplot on PATH, its canvas terminal, its js directory. */
typedef struct gnuplot_found {
    rtool tool;
    char jsdir[4096];
} gnuplot_found;

static void find_gnuplot(gnuplot_found *g)
{
    rtool *t = &g->tool;
    char *jsdir = g->jsdir;
    size_t cap = sizeof g->jsdir;
    *t = (rtool){0};
    jsdir[0] = '\0';
    if (!tg__plot_find("gnuplot", t->path, sizeof t->path)) {
        snprintf(t->why, sizeof t->why,
                 "gnuplot is not installed (apt-get install gnuplot-nox)");
        return;
    }
    char line[256];
    char *const argv[] = {"gnuplot", "-e", "set terminal canvas", NULL};
    if (!tg__report_run(t->path, argv, line, sizeof line)) {
        snprintf(t->why, sizeof t->why,
                 "this gnuplot has no canvas terminal (%.150s)", line);
        return;
    }
    if (!find_jsdir(t->path, jsdir, cap)) {
        snprintf(t->why, sizeof t->why,
                 "gnuplot's canvas scripts (gnuplot_common.js) were not found:"
                 " apt-get install gnuplot-data, or set GNUPLOT_LIB");
        return;
    }
    t->usable = true;
}

/* The search runs once per process (each figure would otherwise start
 * gnuplot three times); the first caller does it into found, a caller that
 * arrives while it runs searches into its own buffer rather than wait, as
 * plot/plot.c's. TG_NO_GNUPLOT is read on every call. */
static _Atomic int search_state; /* 0 not started, 1 running, 2 done */
static gnuplot_found found;

void tg__report_gnuplot(rtool *t, char *jsdir, size_t cap)
{
    if (tg__plot_env_on("TG_NO_GNUPLOT")) {
        *t = (rtool){0};
        jsdir[0] = '\0';
        snprintf(t->why, sizeof t->why,
                 "gnuplot is switched off (TG_NO_GNUPLOT is set): unset it, "
                 "with gnuplot installed (apt-get install gnuplot-nox)");
        return;
    }
    const gnuplot_found *g = &found;
    gnuplot_found *own = NULL;
    if (atomic_load_explicit(&search_state, memory_order_acquire) != 2) {
        int idle = 0;
        if (atomic_compare_exchange_strong(&search_state, &idle, 1)) {
            find_gnuplot(&found);
            atomic_store_explicit(&search_state, 2, memory_order_release);
        } else if ((own = tg__malloc(sizeof *own))) {
            find_gnuplot(own);
            g = own;
        } else {
            *t = (rtool){0};
            snprintf(t->why, sizeof t->why, "out of memory looking for it");
            return;
        }
    }
    *t = g->tool;
    snprintf(jsdir, cap, "%s", g->jsdir);
    free(own);
}

void tg__report_dot(rtool *t)
{
    *t = (rtool){0};
    if (tg__plot_env_on("TG_NO_DOT")) {
        snprintf(t->why, sizeof t->why,
                 "Graphviz is switched off (TG_NO_DOT is set): unset it, "
                 "with Graphviz installed (apt-get install graphviz)");
        return;
    }
    if (!tg__plot_find("dot", t->path, sizeof t->path)) {
        snprintf(t->why, sizeof t->why,
                 "Graphviz is not installed (apt-get install graphviz)");
        return;
    }
    t->usable = true;
}

bool tg__report_tmpdir(char *dir, size_t cap)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(dir, cap, "%s/tapegrad-report.XXXXXX", base);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return false;
    }
    return mkdtemp(dir) != NULL;
}

void tg__report_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[4096 + 256];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

char *tg__report_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = tg__malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *more = tg__realloc(buf, cap * 2);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}
