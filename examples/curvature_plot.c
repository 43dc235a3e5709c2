/* curvature_plot.c: examples/curvature's picture, both Hessians of part 1
 * side by side as heatmaps, drawn by gnuplot at run time.
 *
 * A Hessian's sign is its meaning (which way the slope turns), so it is
 * drawn on the library's diverging scale (tg_plot_heatmap_with,
 * TG_SCALE_DIVERGING): blue below 0, the neutral light grey at 0, red
 * above, its range symmetric about 0 so that the neutral is exactly 0
 * whatever the values; and a cell that is exactly 0.0 (the masked scores)
 * hatched by two strokes across its corners, since the neutral alone
 * cannot tell 0 from 1e-9. The library draws one matrix a picture; the two
 * panels side by side come from this script of its own, in that
 * convention. The script and its data stay next
 * to the picture, as the library's do: `gnuplot DIR/curvature_hessian.gp`
 * draws it again; without gnuplot they are written all the same. */
#define _POSIX_C_SOURCE 200809L /* posix_spawnp, waitpid */

#include <tapegrad_plot.h>

#include "curvature.h"

#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>

extern char **environ;

/* One matrix as a block of the data file (gnuplot's "matrix" layout,
 * blocks apart by two blank lines), then its exact zeros as "column row"
 * lines in the next block. Returns how many exact zeros. */
static int put_matrix(FILE *f, const double *m, int n)
{
    int zeros = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            fprintf(f, "%.17g%c", m[i * n + j], j + 1 < n ? ' ' : '\n');
    fputs("\n\n", f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (m[i * n + j] == 0)
                fprintf(f, "%d %d\n", j, i), zeros++;
    if (!zeros) /* an empty block would end the file for gnuplot */
        fputs("# none\n", f);
    fputs("\n\n", f);
    return zeros;
}

static double max_abs(const double *m, int n)
{
    double top = 0;
    for (int i = 0; i < n * n; i++)
        top = fmax(top, fabs(m[i]));
    return top > 0 ? top : 1;
}

/* One panel: the matrix in data block 'block', its exact zeros in the
 * block after (hatched, and counted under the title, when there are
 * any: "\\n" is gnuplot's newline in a double-quoted text). */
static void put_panel(FILE *f, const char *title, const char *axis,
                      const char *cblabel, const double *m, int n, int block,
                      int zeros)
{
    double top = max_abs(m, n);
    char note[64];
    snprintf(note, sizeof note, "\\n(hatched: exactly 0.0, %d cells)", zeros);
    fprintf(f,
            "\nset title \"%s%s\"\nset xlabel \"%s j\"\nset ylabel \"%s i\"\n"
            "set cblabel \"%s\"\n"
            "set cbrange [%.17g:%.17g]  # symmetric: the neutral is exactly "
            "0\n"
            "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]  # row 0 at the "
            "top\nset xtics 0, %d\nset ytics 0, %d\n"
            "plot data index %d matrix with image notitle",
            title, zeros ? note : "", axis, axis, cblabel, -top, top, n - 1,
            n - 1, n > 8 ? 2 : 1, n > 8 ? 2 : 1, block);
    if (zeros)
        fprintf(f,
                ", \\\n     data index %d using ($1-0.5):2:(0.5):(-0.5) with "
                "vectors nohead lc rgb '#606060' notitle, \\\n     data index "
                "%d using 1:($2+0.5):(0.5):(-0.5) with vectors nohead lc rgb "
                "'#606060' notitle",
                block + 1, block + 1);
    fputc('\n', f);
}

/* The script: the terminal, the palette, both panels. Its texts are in
 * double quotes (they hold apostrophes); none holds a double quote or
 * a backslash but the newline put_panel writes. */
static void put_script(FILE *f, const row *r, int zeros_s, int zeros_q)
{
    char title[160];
    fputs("# examples/curvature: draws curvature_hessian.png from the "
          "numbers in\n# curvature_hessian.dat, both beside this script; "
          "redraw with\n# gnuplot curvature_hessian.gp\n"
          "here = ''  # this script's directory, from gnuplot's argument\n"
          "script = exists('ARG0') ? ARG0 : ''\n"
          "while (strstrt(script, '/') > 0) {\n"
          "    here = here . script[1:strstrt(script, '/')]\n"
          "    script = script[strstrt(script, '/') + 1:]\n}\n"
          "data = here . 'curvature_hessian.dat'\n"
          "set terminal pngcairo noenhanced size 1400,640 font 'sans,10'\n"
          "set output here . 'curvature_hessian.png'\n"
          "# diverging: blue below 0, the neutral at 0, red above\n"
          "set palette defined (-1 '#2166ac', -0.5 '#92c5de', 0 '#f7f7f7', "
          "0.5 '#f4a582', 1 '#b2182b')\n"
          "set format cb '%g'\nset size ratio -1\nset tics out nomirror\n"
          "unset key\n",
          f);
    snprintf(title, sizeof title,
             "The head's loss L = u_t . out_t, token t = %d: its Hessians "
             "(tg_hessian)",
             r->t);
    fprintf(f, "set multiplot layout 1,2 title \"%s\"\n", title);
    snprintf(title, sizeof title,
             "d2L/ds2, the scores of row %d: the masked rows and columns",
             r->t);
    put_panel(f, title, "score", "d2L / ds_i ds_j", r->hs, T, 0, zeros_s);
    put_panel(f, "d2L/dq2 = K^T (d2L/ds2) K / d, the query q_t",
              "query element", "d2L / dq_i dq_j", r->hq, HS, 2, zeros_q);
    fputs("unset multiplot\n", f);
}

/* Runs gnuplot on the script; 0 when it drew. */
static int run_gnuplot(const char *gp)
{
    char *argv[] = {"gnuplot", (char *)gp, NULL};
    pid_t pid;
    int status;
    if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0 ||
        waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The data file at path: both matrices, each with its exact zeros, whose
 * counts go to zeros[0] and zeros[1]. 0, or -1 (said). */
static int write_file(const char *path, const row *r, int *zeros)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    zeros[0] = put_matrix(f, r->hs, T);
    zeros[1] = put_matrix(f, r->hq, HS);
    if (fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int draw_hessians(const row *r, const char *dir)
{
    char dat[4096], gp[4096];
    int zeros[2];
    snprintf(dat, sizeof dat, "%s/curvature_hessian.dat", dir);
    snprintf(gp, sizeof gp, "%s/curvature_hessian.gp", dir);
    if (write_file(dat, r, zeros) < 0)
        return -1;
    FILE *f = fopen(gp, "w");
    if (!f) {
        perror(gp);
        return -1;
    }
    put_script(f, r, zeros[0], zeros[1]);
    if (fclose(f) != 0) {
        perror(gp);
        return -1;
    }
    if (!tg_plot_available()) {
        printf("\nno gnuplot: the picture's data and script are %s and %s;\n"
               "draw it with: gnuplot %s\n",
               dat, gp, gp);
        return 0;
    }
    if (run_gnuplot(gp) < 0) {
        fprintf(stderr, "curvature: gnuplot %s failed\n", gp);
        return -1;
    }
    printf("\npicture: %s/curvature_hessian.png\n", dir);
    return 0;
}
