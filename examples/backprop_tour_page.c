/* backprop_tour_page.c: the tour written out: the tape as a Graphviz
 * graph (FILE.dot, and FILE.png when `dot` is installed), each file
 * replaced whole, never left half written; and the HTML page. */
#define _POSIX_C_SOURCE 200809L /* posix_spawnp, waitpid, mkstemp, fchmod */

#include <tapegrad.h>
#include "backprop_tour.h"
#include "make_dir.h"
#include "page_echo.h" /* and <tapegrad_report.h> */

#include <errno.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- the picture -------------------------------------------------------- */

/* Runs `dot -Tpng dot_path -o png_path` (no shell). Returns 1 when it drew
 * the picture, 0 when dot is not installed, -1 when dot failed. */
static int render_png(const char *dot_path, const char *png_path)
{
    char *argv[] = {"dot", "-Tpng",          (char *)dot_path,
                    "-o",  (char *)png_path, NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, "dot", NULL, NULL, argv, environ);
    if (err == ENOENT)
        return 0;
    if (err) {
        fprintf(stderr, "backprop_tour: cannot run dot: %s\n", strerror(err));
        return -1;
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) {
        fprintf(stderr, "backprop_tour: waitpid: %s\n", strerror(errno));
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return 0; /* a libc that reports a failed exec this way */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "backprop_tour: dot failed on %s\n", dot_path);
        return -1;
    }
    return 1;
}

/* A temporary file beside path (path.XXXXXX, as mkstemp makes it, with
 * the mode a new file gets): its name in tmp (path's length + 8), its
 * descriptor returned, or -1 with a message. */
static int temp_beside(const char *path, char *tmp)
{
    sprintf(tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr,
                "backprop_tour: cannot create a temporary file for "
                "%s: %s\n",
                path, strerror(errno));
        return -1;
    }
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    return fd;
}

/* Renames the finished temporary tmp over path (the old file stays whole
 * until then); on failure removes tmp. 0 or -1 with a message. */
static int replace_with(const char *tmp, const char *path)
{
    if (rename(tmp, path) == 0)
        return 0;
    fprintf(stderr, "backprop_tour: cannot rename %s over %s: %s\n", tmp, path,
            strerror(errno));
    unlink(tmp);
    return -1;
}

/* mkdir the directory part of path unless it is there. 0 or -1 with a
 * message. */
static int make_parent(const char *path)
{
    char dir[4096];
    if (example_make_parent(path, dir, sizeof dir) == 0)
        return 0;
    fprintf(stderr, "backprop_tour: cannot make the directory %s: %s\n", dir,
            strerror(errno));
    return -1;
}

/* Writes the tape to dot_path and, if Graphviz is there, a PNG beside it
 * (the same name with .dot replaced by, or else followed by, .png). Each
 * goes through a temporary renamed over the target, so an old graph is
 * never left half written. */
int write_graph(const char *dot_path)
{
    section("the tape as a graph");
    size_t len = strlen(dot_path);
    char *tmp = malloc(len + 16), *png_path = malloc(len + 5),
         *png_tmp = malloc(len + 16);
    if (!tmp || !png_path || !png_tmp) {
        free(tmp);
        free(png_path);
        free(png_tmp);
        fputs("backprop_tour: out of memory\n", stderr);
        return -1;
    }
    int rc = make_parent(dot_path);
    int fd = rc == 0 ? temp_beside(dot_path, tmp) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !f) {
        fprintf(stderr, "backprop_tour: %s: %s\n", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
    }
    if (f) {
        tg_tape_dot(f);
        bool failed = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
        if (fclose(f) != 0 || failed) {
            fprintf(stderr, "backprop_tour: error writing %s\n", dot_path);
            unlink(tmp);
            rc = -1;
        } else
            rc = replace_with(tmp, dot_path);
    } else
        rc = -1;
    int drawn = -1;
    if (rc == 0) {
        strcpy(png_path, dot_path);
        if (len > 4 && !strcmp(png_path + len - 4, ".dot"))
            png_path[len - 4] = '\0';
        strcat(png_path, ".png");
        say("wrote %s\n", dot_path);
        fd = temp_beside(png_path, png_tmp);
        if (fd >= 0) {
            close(fd);
            drawn = render_png(dot_path, png_tmp);
            if (drawn > 0 && replace_with(png_tmp, png_path) != 0)
                drawn = -1;
            else if (drawn <= 0)
                unlink(png_tmp);
        }
        if (drawn > 0)
            say("drew  %s  (Graphviz dot)\n", png_path);
        else if (drawn == 0)
            say("Graphviz dot is not on the PATH; with it:\n"
                "  dot -Tpng %s -o %s\n",
                dot_path, png_path);
    }
    free(tmp);
    free(png_path);
    free(png_tmp);
    return drawn < 0 ? -1 : 0;
}

/* ---- the page ------------------------------------------------------------ */

/* The lesson's forward as an animated strip, for sequence 0 (the lesson's
 * q, k, v: the same draws), following token 4 as the lesson does: the
 * page walks the head forward, then (the stepper) backward. Grad mode off:
 * the views of q, k and v stay off the tape. */
int page_forward(tg_report *rep, tour *S)
{
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    int rc = tg_report_forward_strip(
                 rep, "The head's forward, stage by stage (sequence 0)",
                 tg_select(S->q, 0, 0), tg_select(S->k, 0, 0),
                 tg_select(S->v, 0, 0), NULL, 4) > 0
                 ? 0
                 : -1;
    tg_scope_end();
    tg_set_grad_enabled(was);
    return rc;
}

/* The backward stepper, before the backward runs (it walks the graph the
 * loss was made by, and leaves it for tg_backward): every entry from the
 * loss down, its gradients and their checks, as the tour walks it. */
int page_stepper(tg_report *rep, tg_tensor *loss)
{
    return tg_report_backward(rep,
                              "Step through the backward: the head's tape "
                              "from the loss down to the leaves",
                              loss) > 0
               ? 0
               : -1;
}

/* The tape section, while the tour's tensors (and so their entries) live:
 * the |grad| recorded by backward through each entry, the zeros count of
 * masked_fill's and softmax's gradients. */
int page_tape(tg_report *rep)
{
    return tg_report_tape(rep, "The tape after backward: |grad| through each "
                               "entry, exact zeros under the mask") > 0
               ? 0
               : -1;
}

/* The rest of the page: dloss/dscaled of sequence 0, whose upper triangle
 * is exactly 0 (the mask), and all the tour printed; then the file. The
 * gradient is signed: on the diverging scale 0 is the neutral centre and
 * its exact zeros are hatched and counted, never a colour that reads as a
 * small gradient. */
int write_page(tour *S, tg_report *rep, const char *path)
{
    tg_scope_begin();
    tg_tensor *g =
        tg_grad(S->scaled) ? tg_select(tg_grad(S->scaled), 0, 0) : NULL;
    const char *tok[T] = {"0", "1", "2", "3", "4", "5", "6", "7"};
    const tg_heatmap_opts o = {.scale = TG_SCALE_DIVERGING,
                               .xlabel = "key position s",
                               .ylabel = "query position t",
                               .cblabel = "dloss/dscaled"};
    int rc =
        g &&
                tg_report_heatmap_with(rep,
                                       "dloss/dscaled of sequence 0: exactly "
                                       "0 above the diagonal (the mask's "
                                       "future), hatched",
                                       g, NULL, tok, tok, &o) > 0 &&
                tg_report_pre(rep, "The tour, as printed", page_echo_text()) > 0
            ? tg_report_write(rep, path)
            : -1;
    tg_scope_end();
    if (rc == 0)
        say("page: %s\n", path);
    return rc;
}
