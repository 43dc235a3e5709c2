/* softmax_jacobian: the teacher's demo. The Jacobian of s = softmax(x) is
 * ds_i/dx_j = s_i (delta_ij - s_j), the matrix diag(s) - s s^T: tg_jacobian
 * builds it row by row, one backward per output over a retained graph, and
 * the program prints it beside the closed form, with the two facts a
 * student checks: each row sums to 0 (adding a constant to every logit
 * changes nothing) and the matrix is symmetric. Exits 1 if they differ.
 *
 *     ./examples/softmax_jacobian */
#include <tapegrad.h>

#include <math.h>
#include <stdio.h>

enum { N = 4 };

static tg_tensor *softmax_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], 0);
}

int main(void)
{
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
    tg_scope_end();
    return same && symmetric ? 0 : 1;
}
