/* Plots: each function writes <stem>.dat with the right numbers (read back
 * here) and <stem>.gp, and <stem>.png when gnuplot can draw it; with
 * TG_NO_GNUPLOT=1 it writes the data and script, says so in one line on
 * stderr, and succeeds; bad input and unwritable paths fail with a message
 * naming the function. Checks that need gnuplot run only when
 * tg_plot_available() says it is there. */
#include "tests.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- scratch files ------------------------------------------------------ */

/* stem + ext, e.g. with_ext(stem, ".dat"). */
static const char *with_ext(const char *stem, const char *ext)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s%s", stem, ext);
    return path;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* The whole text file, malloc'd and NUL-terminated. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    char *text = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

static void assert_contains(const char *text, const char *needle)
{
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' not found in:\n%s",
                  needle, text);
}

/* The data and script are there; the picture is a PNG when gnuplot is. */
static void assert_plot_files(const char *stem)
{
    ck_assert_msg(exists(with_ext(stem, ".dat")), "no %s.dat", stem);
    ck_assert_msg(exists(with_ext(stem, ".gp")), "no %s.gp", stem);
    const char *png = with_ext(stem, ".png");
    if (!tg_plot_available()) {
        ck_assert_msg(!exists(png), "%s written without gnuplot", png);
        return;
    }
    FILE *f = fopen(png, "rb");
    ck_assert_msg(f != NULL, "gnuplot is available but %s is missing", png);
    unsigned char head[8] = {0};
    size_t got = fread(head, 1, sizeof head, f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    fclose(f);
    ck_assert_uint_eq(got, 8);
    ck_assert_mem_eq(head, "\x89PNG\r\n\x1a\n", 8);
    ck_assert_int_gt(size, 1000); /* a drawn picture, not just a header */
}

/* Each data line (not blank, not a # comment) of a .dat file, in order. */
typedef struct dat_lines {
    char *text;
    char *line[256];
    int n;
    int blocks; /* gnuplot's: runs of lines apart by two blank lines */
} dat_lines;

static dat_lines read_dat(const char *stem)
{
    dat_lines d = {.text = read_text(with_ext(stem, ".dat")), .blocks = 1};
    ck_assert_msg(d.text[0] == '#', "%s.dat lacks a comment header", stem);
    for (const char *p = d.text; (p = strstr(p, "\n\n\n")); p += 3)
        d.blocks++;
    for (char *save, *s = strtok_r(d.text, "\n", &save); s;
         s = strtok_r(NULL, "\n", &save)) {
        if (*s == '#')
            continue;
        ck_assert_int_lt(d.n, 256);
        d.line[d.n++] = s;
    }
    return d;
}

/* Parses the numbers of one line; returns how many. */
static int parse_numbers(const char *line, double *out, int cap)
{
    int n = 0;
    for (char *end; n < cap; line = end) {
        double v = strtod(line, &end);
        if (end == line)
            break;
        out[n++] = v;
    }
    return n;
}

static void assert_same(double got, double want)
{
    if (isnan(want))
        ck_assert_msg(isnan(got), "got %.17g, want NaN", got);
    else
        ck_assert_msg(got == want, "got %.17g, want %.17g", got, want);
}

/* ---- heatmap ------------------------------------------------------------ */

START_TEST(heatmap_writes_matrix)
{
    const double m[3][4] = {{1, 0.1, -2.5, NAN},
                            {INFINITY, 0, 1e-7, 123456.789},
                            {1.0 / 3, -0.0, -INFINITY, 42}};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 4), m);
    const char *stem = scratch_path("heat");
    ck_assert_int_eq(
        tg_plot_heatmap(stem, t, "attention", "key", "query", true), 0);
    assert_plot_files(stem);

    dat_lines d = read_dat(stem);
    ck_assert_int_eq(d.n, 3); /* one line per row, row 0 first */
    for (int r = 0; r < 3; r++) {
        double got[8];
        ck_assert_int_eq(parse_numbers(d.line[r], got, 8), 4);
        for (int c = 0; c < 4; c++) /* non-finite cells are blank: NaN */
            assert_same(got[c], isfinite(m[r][c]) ? m[r][c] : NAN);
    }
    free(d.text);
    tg_release(t);
}
END_TEST

START_TEST(heatmap_float32_values_read_back_exactly)
{
    const float m[2][3] = {{0.1f, 1.0f / 3, -7.25f}, {1e-8f, 3e20f, 0.7f}};
    tg_tensor *t = tg_from_data(TG_FLOAT32, TG_SHAPE(2, 3), m);
    const char *stem = scratch_path("heat32");
    ck_assert_int_eq(tg_plot_heatmap(stem, t, NULL, NULL, NULL, false), 0);
    assert_plot_files(stem);
    dat_lines d = read_dat(stem);
    ck_assert_int_eq(d.n, 2);
    for (int r = 0; r < 2; r++) {
        double got[4];
        ck_assert_int_eq(parse_numbers(d.line[r], got, 4), 3);
        for (int c = 0; c < 3; c++)
            ck_assert_msg((float)got[c] == m[r][c], "cell %d,%d: %.9g", r, c,
                          got[c]);
    }
    /* Shortest text: 0.1f is written "0.1", not 0.100000001490116. */
    ck_assert_int_eq(strncmp(d.line[0], "0.1 ", 4), 0);
    free(d.text);
    tg_release(t);
}
END_TEST

START_TEST(heatmap_script_puts_row_0_on_top_and_annotates)
{
    tg_tensor *t = tg_arange(TG_FLOAT64, 0, 12, 1);
    tg_tensor *m = tg_reshape(t, TG_SHAPE(3, 4));
    const char *stem = scratch_path("heat_script");
    ck_assert_int_eq(tg_plot_heatmap(stem, m, "t", NULL, NULL, true), 0);
    char *gp = read_text(with_ext(stem, ".gp"));
    assert_contains(gp, "set yrange [2.5:-0.5]");
    assert_contains(gp, "matrix with image");
    assert_contains(gp, "with labels");
    assert_contains(gp, "sprintf('%.2f', v)");
    assert_contains(gp, "v == 0 ? '0'"); /* an exact 0 is not "0.00" */
    assert_contains(gp, "set cbrange [0:11]");
    free(gp);

    ck_assert_int_eq(tg_plot_heatmap(stem, m, "t", NULL, NULL, false), 0);
    gp = read_text(with_ext(stem, ".gp"));
    ck_assert_ptr_null(strstr(gp, "with labels"));
    free(gp);
    tg_release(m);
    tg_release(t);
}
END_TEST

/* The number after "set cbrange [" and after its ':' in a script. */
static void script_cbrange(const char *gp, double *lo, double *hi)
{
    const char *p = strstr(gp, "set cbrange [");
    ck_assert_msg(p != NULL, "no cbrange in:\n%s", gp);
    char *end;
    *lo = strtod(p + strlen("set cbrange ["), &end);
    ck_assert_int_eq(*end, ':');
    *hi = strtod(end + 1, &end);
    ck_assert_int_eq(*end, ']');
}

/* The colour gnuplot gives v: the palette's stops "(g 'rrggbb', ...)" span
 * [g first, g last], onto which cbrange maps linearly; between two stops
 * the colour is interpolated. Returns the stop's colour when v lands on a
 * stop exactly ("" otherwise), into hex. */
static void colour_at(const char *gp, double v, char hex[8])
{
    double lo, hi;
    script_cbrange(gp, &lo, &hi);
    const char *p = strstr(gp, "set palette defined (");
    ck_assert_ptr_nonnull(p);
    p += strlen("set palette defined (");
    double g[8];
    char c[8][8];
    int n = 0;
    for (int used = 0;
         n < 8 && sscanf(p, " %lf '%7[^']'%n", &g[n], c[n], &used) == 2; n++)
        p += used + (p[used] == ',');
    ck_assert_int_ge(n, 2);
    double at = g[0] + (v - lo) / (hi - lo) * (g[n - 1] - g[0]);
    hex[0] = '\0';
    for (int i = 0; i < n; i++)
        if (at == g[i])
            snprintf(hex, 8, "%s", c[i]);
}

/* A gradient is signed: the diverging scale's range is [-m, m] with m the
 * largest |v|, so 0 lands on the palette's middle stop, the neutral light
 * grey; exact zeros (not masked ones) are listed for the hatching and
 * counted in the bottom line, masked cells listed for the grey and
 * written as NaN. */
START_TEST(heatmap_diverging_is_symmetric_and_0_is_neutral)
{
    const double m[2][3] = {{-0.2, 0.5, 0}, {3e-9, 0, -0.125}};
    const bool mk[2][3] = {{false, false, false}, {false, true, false}};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), m);
    tg_tensor *mask = tg_from_data(TG_BOOL, TG_SHAPE(2, 3), mk);
    const char *stem = scratch_path("heat_div");
    const tg_heatmap_opts o = {
        .scale = TG_SCALE_DIVERGING, .xlabel = "key", .cblabel = "dL/ds"};
    ck_assert_int_eq(tg_plot_heatmap_with(stem, t, mask, "grad", &o), 0);
    assert_plot_files(stem);
    char *gp = read_text(with_ext(stem, ".gp"));
    double lo, hi;
    script_cbrange(gp, &lo, &hi);
    ck_assert_msg(lo == -0.5 && hi == 0.5, "cbrange [%g:%g]", lo, hi);
    char hex[8];
    colour_at(gp, 0, hex);
    ck_assert_str_eq(hex, "#f7f7f7");
    colour_at(gp, -0.5, hex);
    ck_assert_str_eq(hex, "#2166ac"); /* blue below 0 */
    colour_at(gp, 0.5, hex);
    ck_assert_str_eq(hex, "#b2182b"); /* red above */
    /* the zero at (row 0, col 2) hatched; (1, 1) is masked, not a zero */
    assert_contains(gp, "$zeros << EOD\n2 0\nEOD\n");
    assert_contains(gp, "$masked << EOD\n1 1\nEOD\n");
    assert_contains(gp, "with vectors nohead");
    assert_contains(gp, "'hatched: exactly 0 (1 cell); grey: masked (1 "
                        "cell)'");
    assert_contains(gp, "set xlabel 'key'");
    assert_contains(gp, "set ylabel 'row'"); /* the default title */
    assert_contains(gp, "set cblabel 'dL/ds'");
    free(gp);
    dat_lines d = read_dat(stem);
    double got[4];
    ck_assert_int_eq(parse_numbers(d.line[1], got, 4), 3);
    ck_assert_msg(isnan(got[1]) && got[2] == -0.125, "row 1: %s", d.line[1]);
    free(d.text);

    /* all zeros: still symmetric, [-1, 1], every cell hatched */
    tg_tensor *z = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 2));
    ck_assert_int_eq(tg_plot_heatmap_with(stem, z, NULL, NULL, &o), 0);
    gp = read_text(with_ext(stem, ".gp"));
    script_cbrange(gp, &lo, &hi);
    ck_assert_msg(lo == -1 && hi == 1, "cbrange [%g:%g]", lo, hi);
    assert_contains(gp, "'hatched: exactly 0 (4 cells)'");
    free(gp);
    tg_release(z);
    tg_release(mask);
    tg_release(t);
}
END_TEST

/* Weights are drawn on [0, 1] whatever the data, so two pictures compare;
 * the default scale follows the data instead. */
START_TEST(heatmap_unit_is_0_to_1_whatever_the_data)
{
    const double m[2][2] = {{0.2, 0.25}, {0.3, 0.2}};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), m);
    const char *stem = scratch_path("heat_unit");
    ck_assert_int_eq(
        tg_plot_heatmap_with(stem, t, NULL, "w",
                             &(tg_heatmap_opts){.scale = TG_SCALE_UNIT}),
        0);
    char *gp = read_text(with_ext(stem, ".gp"));
    double lo, hi;
    script_cbrange(gp, &lo, &hi);
    ck_assert_msg(lo == 0 && hi == 1, "unit: cbrange [%g:%g]", lo, hi);
    assert_contains(gp, "set cblabel 'weight'");
    ck_assert_ptr_null(strstr(gp, "$zeros")); /* hatching is diverging's */
    free(gp);
    ck_assert_int_eq(tg_plot_heatmap(stem, t, NULL, NULL, NULL, false), 0);
    gp = read_text(with_ext(stem, ".gp"));
    script_cbrange(gp, &lo, &hi);
    ck_assert_msg(lo == 0.2 && hi == 0.3, "auto: cbrange [%g:%g]", lo, hi);
    assert_contains(gp, "set xlabel 'column'");
    free(gp);
    tg_release(t);
}
END_TEST

START_TEST(heatmap_single_row_and_other_dtypes)
{
    const int64_t ids[5] = {3, -1, 0, 7, 2};
    tg_tensor *t = tg_from_data(TG_INT64, TG_SHAPE(1, 5), ids);
    const char *stem = scratch_path("heat_row");
    ck_assert_int_eq(tg_plot_heatmap(stem, t, NULL, NULL, NULL, true), 0);
    assert_plot_files(stem);
    dat_lines d = read_dat(stem);
    ck_assert_int_eq(d.n, 1);
    double got[8];
    ck_assert_int_eq(parse_numbers(d.line[0], got, 8), 5);
    for (int c = 0; c < 5; c++)
        assert_same(got[c], (double)ids[c]);
    free(d.text);
    tg_release(t);
}
END_TEST

/* Titles and file names go into gnuplot strings quoted, never as code. */
START_TEST(stems_and_titles_with_quotes_and_spaces)
{
    tg_tensor *t = tg_ones(TG_FLOAT32, TG_SHAPE(2, 2));
    const char *stem = scratch_path("it's a \"plot\" $(x)");
    ck_assert_int_eq(
        tg_plot_heatmap(stem, t, "it's \\ a_b^{c} \"q\"\n", "x'", "y''", true),
        0);
    assert_plot_files(stem);
    char *gp = read_text(with_ext(stem, ".gp"));
    /* A ' is the script's variable q; a newline becomes a space. */
    assert_contains(gp, "set title ('it' . q . 's \\ a_b^{c} \"q\" ')");
    assert_contains(gp, "set xlabel ('x' . q)");
    assert_contains(gp, "set ylabel ('y' . q . q)");
    assert_contains(gp, "('it' . q . 's a \"plot\" $(x).dat')");
    free(gp);
    tg_release(t);
}
END_TEST

/* ---- lines -------------------------------------------------------------- */

START_TEST(lines_write_one_block_per_series)
{
    const double x0[4] = {1, 10, 100, 1000}, y0[4] = {2.5, 1.25, NAN, 0.01};
    const double y1[3] = {3, 2, 1.5};
    const tg_series s[2] = {{"train", x0, y0, 4}, {"val loss", NULL, y1, 3}};
    const char *stem = scratch_path("loss");
    ck_assert_int_eq(
        tg_plot_lines(stem, s, 2, "loss", "step", "loss", true, true), 0);
    assert_plot_files(stem);

    dat_lines d = read_dat(stem);
    ck_assert_int_eq(d.n, 7);
    ck_assert_int_eq(d.blocks, 2);
    for (int i = 0; i < 7; i++) {
        double got[2];
        ck_assert_int_eq(parse_numbers(d.line[i], got, 3), 2);
        if (i < 4) {
            assert_same(got[0], x0[i]);
            assert_same(got[1], y0[i]);
        } else { /* x NULL: 0..n-1 */
            assert_same(got[0], i - 4);
            assert_same(got[1], y1[i - 4]);
        }
    }
    free(d.text);

    char *gp = read_text(with_ext(stem, ".gp"));
    assert_contains(gp, "set logscale x");
    assert_contains(gp, "set logscale y");
    assert_contains(gp, "index 0");
    assert_contains(gp, "title 'train'");
    assert_contains(gp, "index 1");
    assert_contains(gp, "title 'val loss'");
    free(gp);
}
END_TEST

START_TEST(lines_linear_axes_and_unlabelled_series)
{
    const double y[2] = {-1, 1};
    const tg_series s = {NULL, NULL, y, 2};
    const char *stem = scratch_path("lin");
    ck_assert_int_eq(tg_plot_lines(stem, &s, 1, NULL, NULL, NULL, false, false),
                     0);
    assert_plot_files(stem);
    char *gp = read_text(with_ext(stem, ".gp"));
    ck_assert_ptr_null(strstr(gp, "logscale"));
    assert_contains(gp, "notitle");
    /* axis titles always; the key outside the data */
    assert_contains(gp, "set xlabel 'x'");
    assert_contains(gp, "set ylabel 'y'");
    assert_contains(gp, "set key above");
    free(gp);
}
END_TEST

/* gnuplot refusing the script is an error, unlike gnuplot being absent. */
START_TEST(lines_gnuplot_failure_is_an_error)
{
    if (!tg_plot_available())
        return;
    const double y[2] = {-1, 0}; /* nothing to draw on a log axis */
    const tg_series s = {"neg", NULL, y, 2};
    const char *stem = scratch_path("bad_log");
    tg_clear_error();
    ck_assert_int_eq(tg_plot_lines(stem, &s, 1, NULL, NULL, NULL, false, true),
                     -1);
    assert_contains(tg_last_error(), "plot_lines: gnuplot failed on");
    assert_contains(tg_last_error(), "undefined");
    ck_assert(exists(with_ext(stem, ".dat")));
    ck_assert(!exists(with_ext(stem, ".png")));
}
END_TEST

/* ---- bars --------------------------------------------------------------- */

START_TEST(bars_write_index_value_label)
{
    const char *labels[4] = {"embed", "block 0", "say \"hi\"", "it's"};
    const double values[4] = {0.5, -1.25, 3e-5, INFINITY};
    const char *stem = scratch_path("grads");
    ck_assert_int_eq(
        tg_plot_bars(stem, labels, values, 4, "grad norms", "norm"), 0);
    assert_plot_files(stem);

    dat_lines d = read_dat(stem);
    ck_assert_int_eq(d.n, 4);
    const char *quoted[4] = {"\"embed\"", "\"block 0\"", "\"say 'hi'\"",
                             "\"it's\""};
    for (int i = 0; i < 4; i++) {
        char *end;
        ck_assert_int_eq(strtol(d.line[i], &end, 10), i);
        double v = strtod(end, &end);
        assert_same(v, isfinite(values[i]) ? values[i] : NAN);
        ck_assert_str_eq(end + 1, quoted[i]);
    }
    free(d.text);
    char *gp = read_text(with_ext(stem, ".gp"));
    assert_contains(gp, "xtic(3)");
    assert_contains(gp, "with boxes");
    assert_contains(gp, "set ylabel 'norm'");
    free(gp);
}
END_TEST

/* ---- without gnuplot ---------------------------------------------------- */

static void unset_no_gnuplot(void) { unsetenv("TG_NO_GNUPLOT"); }

/* Runs the three plots with stderr going to a file; returns its text. */
static char *plot_all_capturing_stderr(const char *tag)
{
    const double eye[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), eye);
    const double y[3] = {1, 2, 3};
    const tg_series s = {"y", NULL, y, 3};
    const char *labels[3] = {"a", "b", "c"};
    char stem[3][64];
    snprintf(stem[0], sizeof stem[0], "%s_heat", tag);
    snprintf(stem[1], sizeof stem[1], "%s_lines", tag);
    snprintf(stem[2], sizeof stem[2], "%s_bars", tag);
    char heat[512], lines[512], bars[512], err[512];
    snprintf(heat, sizeof heat, "%s", scratch_path(stem[0]));
    snprintf(lines, sizeof lines, "%s", scratch_path(stem[1]));
    snprintf(bars, sizeof bars, "%s", scratch_path(stem[2]));
    snprintf(err, sizeof err, "%s", scratch_path("stderr.txt"));

    fflush(stderr);
    int saved = dup(2);
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
    int rc[3] = {tg_plot_heatmap(heat, t, "eye", NULL, NULL, true),
                 tg_plot_lines(lines, &s, 1, NULL, NULL, NULL, false, true),
                 tg_plot_bars(bars, labels, y, 3, NULL, NULL)};
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    tg_release(t);

    for (int i = 0; i < 3; i++)
        ck_assert_msg(rc[i] == 0, "plot %d: %s", i, tg_last_error());
    const char *stems[3] = {heat, lines, bars};
    for (int i = 0; i < 3; i++) {
        ck_assert(exists(with_ext(stems[i], ".dat")));
        ck_assert(exists(with_ext(stems[i], ".gp")));
    }
    return read_text(err);
}

START_TEST(no_gnuplot_writes_data_and_script_and_one_line_each)
{
    ck_assert_int_eq(setenv("TG_NO_GNUPLOT", "1", 1), 0);
    ck_assert(!tg_plot_available());
    char *err = plot_all_capturing_stderr("off");
    const char *png[3] = {"off_heat.png", "off_lines.png", "off_bars.png"};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(!exists(scratch_path(png[i])), "%s written", png[i]);

    /* One line per call, naming the call and how to draw the picture. */
    const char *fn[3] = {"plot_heatmap", "plot_lines", "plot_bars"};
    const char *gp[3] = {"off_heat.gp", "off_lines.gp", "off_bars.gp"};
    char *line = err;
    for (int i = 0; i < 3; i++) {
        char *end = strchr(line, '\n');
        ck_assert_msg(end != NULL, "stderr has %d lines:\n%s", i, err);
        *end = '\0';
        assert_contains(line, fn[i]);
        assert_contains(line, "TG_NO_GNUPLOT");
        assert_contains(line, "gnuplot ");
        assert_contains(line, gp[i]);
        line = end + 1;
    }
    ck_assert_str_eq(line, "");
    free(err);
    unsetenv("TG_NO_GNUPLOT");
}
END_TEST

START_TEST(no_gnuplot_zero_means_gnuplot_on)
{
    ck_assert_int_eq(setenv("TG_NO_GNUPLOT", "0", 1), 0);
    char *err = plot_all_capturing_stderr("on");
    if (tg_plot_available()) {
        ck_assert_str_eq(err, "");
        ck_assert(exists(scratch_path("on_heat.png")));
    }
    free(err);
    unsetenv("TG_NO_GNUPLOT");
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

#define ASSERT_PLOT_FAILS(call, needle)                                        \
    do {                                                                       \
        tg_clear_error();                                                      \
        ck_assert_int_eq((call), -1);                                          \
        ck_assert_msg(strstr(tg_last_error(), (needle)) != NULL,               \
                      "error '%s' lacks '%s'", tg_last_error(), (needle));     \
    } while (0)

START_TEST(heatmap_rejects_bad_input)
{
    const char *stem = scratch_path("bad_heat");
    tg_tensor *cube = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 3, 4));
    tg_tensor *vec = tg_zeros(TG_FLOAT32, TG_SHAPE(4));
    tg_tensor *empty = tg_zeros(TG_FLOAT32, TG_SHAPE(0, 3));
    tg_tensor *ok = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 2));

    ASSERT_PLOT_FAILS(tg_plot_heatmap(stem, NULL, NULL, NULL, NULL, false),
                      "plot_heatmap: tensor is NULL");
    ASSERT_PLOT_FAILS(tg_plot_heatmap(stem, cube, NULL, NULL, NULL, false),
                      "plot_heatmap: expected a 2-D tensor, got shape (2,3,4)");
    ASSERT_PLOT_FAILS(tg_plot_heatmap(stem, vec, NULL, NULL, NULL, false),
                      "plot_heatmap: expected a 2-D tensor, got shape (4,)");
    ASSERT_PLOT_FAILS(tg_plot_heatmap(stem, empty, NULL, NULL, NULL, false),
                      "plot_heatmap: tensor of shape (0,3) is empty");
    ASSERT_PLOT_FAILS(tg_plot_heatmap(NULL, ok, NULL, NULL, NULL, false),
                      "plot_heatmap: stem is NULL");
    ASSERT_PLOT_FAILS(tg_plot_heatmap("", ok, NULL, NULL, NULL, false),
                      "plot_heatmap: stem is empty");
    ASSERT_PLOT_FAILS(
        tg_plot_heatmap(scratch_path("dir/"), ok, NULL, NULL, NULL, false),
        "plot_heatmap: stem");
    ASSERT_PLOT_FAILS(
        tg_plot_heatmap(scratch_path("a\nb"), ok, NULL, NULL, NULL, false),
        "plot_heatmap: stem contains a control character");
    ck_assert(!exists(with_ext(stem, ".dat")));

    /* A NULL tensor from a failed call keeps that call's message. */
    ck_assert_ptr_null(tg_reshape(ok, TG_SHAPE(3)));
    char first[512];
    snprintf(first, sizeof first, "%s", tg_last_error());
    ck_assert_int_eq(tg_plot_heatmap(stem, NULL, NULL, NULL, NULL, false), -1);
    ck_assert_str_eq(tg_last_error(), first);

    tg_release(cube);
    tg_release(vec);
    tg_release(empty);
    tg_release(ok);
}
END_TEST

START_TEST(lines_reject_bad_input)
{
    const char *stem = scratch_path("bad_lines");
    const double y[2] = {1, 2};
    const tg_series good = {"y", NULL, y, 2};
    const tg_series no_y = {"y", y, NULL, 2};
    const tg_series two[2] = {good, {"empty", NULL, y, 0}};

    ASSERT_PLOT_FAILS(
        tg_plot_lines(stem, NULL, 1, NULL, NULL, NULL, false, false),
        "plot_lines: no series");
    ASSERT_PLOT_FAILS(
        tg_plot_lines(stem, &good, 0, NULL, NULL, NULL, false, false),
        "plot_lines: no series");
    ASSERT_PLOT_FAILS(
        tg_plot_lines(stem, &no_y, 1, NULL, NULL, NULL, false, false),
        "plot_lines: series 0 has y NULL");
    ASSERT_PLOT_FAILS(
        tg_plot_lines(stem, two, 2, NULL, NULL, NULL, false, false),
        "plot_lines: series 1 is empty");
    ASSERT_PLOT_FAILS(
        tg_plot_lines(NULL, &good, 1, NULL, NULL, NULL, false, false),
        "plot_lines: stem is NULL");
    ck_assert(!exists(with_ext(stem, ".dat")));
}
END_TEST

START_TEST(bars_reject_bad_input)
{
    const char *stem = scratch_path("bad_bars");
    const char *labels[2] = {"a", NULL};
    const double values[2] = {1, 2};

    ASSERT_PLOT_FAILS(tg_plot_bars(stem, NULL, values, 2, NULL, NULL),
                      "plot_bars: no bars");
    ASSERT_PLOT_FAILS(tg_plot_bars(stem, labels, NULL, 2, NULL, NULL),
                      "plot_bars: no bars");
    ASSERT_PLOT_FAILS(tg_plot_bars(stem, labels, values, 0, NULL, NULL),
                      "plot_bars: no bars");
    ASSERT_PLOT_FAILS(tg_plot_bars(stem, labels, values, 2, NULL, NULL),
                      "plot_bars: label 1 is NULL");
    ASSERT_PLOT_FAILS(tg_plot_bars("", labels, values, 1, NULL, NULL),
                      "plot_bars: stem is empty");
    ck_assert(!exists(with_ext(stem, ".dat")));
}
END_TEST

START_TEST(unwritable_paths_fail)
{
    tg_tensor *t = tg_ones(TG_FLOAT64, TG_SHAPE(2, 2));
    const double y[2] = {1, 2};
    const tg_series s = {"y", NULL, y, 2};
    const char *labels[2] = {"a", "b"};
    const char *stem = scratch_path("no/such/dir/plot");
    char want[600];

    snprintf(want, sizeof want, "plot_heatmap: cannot write %s.dat", stem);
    ASSERT_PLOT_FAILS(tg_plot_heatmap(stem, t, NULL, NULL, NULL, true), want);
    snprintf(want, sizeof want, "plot_lines: cannot write %s.dat", stem);
    ASSERT_PLOT_FAILS(
        tg_plot_lines(stem, &s, 1, NULL, NULL, NULL, false, false), want);
    snprintf(want, sizeof want, "plot_bars: cannot write %s.dat", stem);
    ASSERT_PLOT_FAILS(tg_plot_bars(stem, labels, y, 2, NULL, NULL), want);
    assert_contains(tg_last_error(), "No such file or directory");
    tg_release(t);
}
END_TEST

static TCase *tcase_with_scratch_dir(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, scratch_setup, scratch_teardown);
    tcase_set_timeout(tc, 60); /* gnuplot runs, slower under valgrind */
    return tc;
}

Suite *plot_suite(void)
{
    Suite *s = suite_create("plot");

    TCase *files = tcase_with_scratch_dir("files");
    tcase_add_test(files, heatmap_writes_matrix);
    tcase_add_test(files, heatmap_float32_values_read_back_exactly);
    tcase_add_test(files, heatmap_script_puts_row_0_on_top_and_annotates);
    tcase_add_test(files, heatmap_diverging_is_symmetric_and_0_is_neutral);
    tcase_add_test(files, heatmap_unit_is_0_to_1_whatever_the_data);
    tcase_add_test(files, heatmap_single_row_and_other_dtypes);
    tcase_add_test(files, stems_and_titles_with_quotes_and_spaces);
    tcase_add_test(files, lines_write_one_block_per_series);
    tcase_add_test(files, lines_linear_axes_and_unlabelled_series);
    tcase_add_test(files, lines_gnuplot_failure_is_an_error);
    tcase_add_test(files, bars_write_index_value_label);
    suite_add_tcase(s, files);

    TCase *off = tcase_with_scratch_dir("no_gnuplot");
    tcase_add_checked_fixture(off, NULL, unset_no_gnuplot);
    tcase_add_test(off, no_gnuplot_writes_data_and_script_and_one_line_each);
    tcase_add_test(off, no_gnuplot_zero_means_gnuplot_on);
    suite_add_tcase(s, off);

    TCase *errors = tcase_with_scratch_dir("errors");
    tcase_add_test(errors, heatmap_rejects_bad_input);
    tcase_add_test(errors, lines_reject_bad_input);
    tcase_add_test(errors, bars_reject_bad_input);
    tcase_add_test(errors, unwritable_paths_fail);
    suite_add_tcase(s, errors);

    return s;
}
