/* softmax_jacobian: the teacher's demo. The Jacobian of s = softmax(x) is
 * ds_i/dx_j = s_i (delta_ij - s_j), the matrix diag(s) - s s^T: tg_jacobian
 * builds it row by row, one backward per output over a retained graph, and
 * the program prints it beside the closed form, with the two facts a
 * student checks: each row sums to 0 (adding a constant to every logit
 * changes nothing) and the matrix is symmetric. Exits 1 if they differ.
 * With --out DIR it draws J as DIR/softmax_jacobian.png (gnuplot; its data
 * and script beside it): a signed matrix, so on the diverging scale, 0 the
 * neutral centre, blue the negative off-diagonal -s_i s_j, red the
 * diagonal s_i (1 - s_i).
 *
 *     ./examples/softmax_jacobian [--out DIR] */
#include <tapegrad.h>
#include <tapegrad_plot.h>

#include "make_dir.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { N = 4 };

static tg_tensor *softmax_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], 0);
}

/* J as a heatmap in dir on the diverging scale; 0 or -1 (said). */
static int draw(const char *dir, const tg_tensor *J)
{
    char stem[4096];
    snprintf(stem, sizeof stem, "%s/softmax_jacobian", dir);
    const tg_heatmap_opts o = {.scale = TG_SCALE_DIVERGING,
                               .xlabel = "j (the input x_j)",
                               .ylabel = "i (the output s_i)",
                               .cblabel = "ds_i / dx_j",
                               .annotate = true};
    if (example_make_dir(dir) < 0) {
        fprintf(stderr, "softmax_jacobian: cannot make %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    if (tg_plot_heatmap_with(
            stem, J, NULL, "J = diag(s) - s s^T: each row sums to 0", &o) < 0) {
        fprintf(stderr, "softmax_jacobian: %s\n", tg_last_error());
        return -1;
    }
    if (tg_plot_available())
        printf("picture: %s.png\n", stem);
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = argc == 3 && !strcmp(argv[1], "--out") ? argv[2] : NULL;
    if (argc != 1 && !out) {
        bool help = argc == 2 && !strcmp(argv[1], "--help");
        fprintf(help ? stdout : stderr,
                "usage: %s [--out DIR]\n  prints softmax's Jacobian by "
                "tg_jacobian beside diag(s) - s s^T;\n  --out DIR also draws "
                "it, DIR/softmax_jacobian.png (DIR made if missing)\n",
                argv[0]);
        return help ? 0 : 2;
    }
    tg_scope_begin();
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(N),
                                (const double[]){1.0, 2.0, 0.5, -1.0});
    tg_set_name(x, "x");
    tg_tensor *J = tg_jacobian(softmax_fn, NULL, x);
    tg_tensor *s = tg_softmax(x, 0);
    /* diag(s) - s s^T: s broadcast along the rows of an identity, minus the
     * outer product as a (N,1) @ (1,N) matmul */
    tg_tensor *eye = tg_zeros(TG_FLOAT64, TG_SHAPE(N, N));
    for (int64_t i = 0; eye && i < N; i++)
        tg_set(eye, (const int64_t[]){i, i}, 1);
    tg_tensor *closed = tg_sub(
        tg_mul(eye, s), tg_matmul(tg_unsqueeze(s, 1), tg_unsqueeze(s, 0)));
    if (!J || !closed) {
        fprintf(stderr, "softmax_jacobian: %s\n", tg_last_error());
        tg_scope_end();
        return 1;
    }
    char shp[32];
    printf("x = ");
    tg_print(x);
    printf("s = softmax(x) = ");
    tg_print(s);
    printf("J = tg_jacobian(softmax, x), shape %s:\n",
           tg_shape_str(J, shp, sizeof shp));
    tg_print(J);
    printf("diag(s) - s s^T:\n");
    tg_print(closed);
    printf("row sums: ");
    tg_print(tg_sum(J, 1, false));
    bool same = tg_allclose(J, closed, 0, 1e-15);
    bool symmetric = tg_allclose(J, tg_transpose(J, 0, 1), 0, 1e-15);
    printf("J == diag(s) - s s^T: %s; symmetric: %s\n", same ? "yes" : "no",
           symmetric ? "yes" : "no");
    int drawn = out ? draw(out, J) : 0;
    tg_scope_end();
    return same && symmetric && drawn == 0 ? 0 : 1;
}
