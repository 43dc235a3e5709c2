/* xor_sgd: the first autograd lesson in C, an MLP learning XOR with a
 * hand-written SGD step. Each step runs the forward in a scope, calls
 * backward, and updates every weight in place, w -= lr * w.grad, with
 * tg_add_ (which records no gradient, and refuses a weight a pending
 * backward still needs). Prints the loss now and then, and the four
 * predictions at the end; exits 1 unless all four are right.
 *
 *     ./examples/xor_sgd
 *
 * PyTorch's twin, for comparison:
 *     h = torch.relu(x @ w1 + b1); pred = h @ w2 + b2
 *     loss = F.mse_loss(pred, y); loss.backward()
 *     with torch.no_grad():
 *         for p in params: p -= lr * p.grad; p.grad = None */
#include <tapegrad.h>

#include <stdio.h>

enum { HIDDEN = 8, STEPS = 2000 };

int main(void)
{
    const double xs[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    const double ys[4][1] = {{0}, {1}, {1}, {0}};
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(4, 2), xs);
    tg_tensor *y = tg_from_data(TG_FLOAT64, TG_SHAPE(4, 1), ys);
    tg_tensor *params[4] = {
        tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, HIDDEN)),
        tg_zeros(TG_FLOAT64, TG_SHAPE(HIDDEN)),
        tg_randn(&rng, TG_FLOAT64, TG_SHAPE(HIDDEN, 1)),
        tg_zeros(TG_FLOAT64, TG_SHAPE(1)),
    };
    for (int i = 0; i < 4; i++) {
        if (!params[i]) {
            fprintf(stderr, "xor_sgd: %s\n", tg_last_error());
            return 1;
        }
        tg_set_requires_grad(params[i], true);
    }
    const double lr = 0.1;
    int rc = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        tg_scope_begin();
        tg_tensor *h = tg_relu(tg_add(tg_matmul(x, params[0]), params[1]));
        tg_tensor *pred = tg_add(tg_matmul(h, params[2]), params[3]);
        tg_tensor *loss = tg_mse_loss(pred, y);
        if (!loss || tg_backward(loss) != 0)
            rc = -1;
        /* the manual SGD step: w -= lr * w.grad, then forget the grad */
        for (int i = 0; i < 4 && rc == 0; i++) {
            rc = tg_add_(params[i], tg_grad(params[i]), -lr);
            tg_zero_grad(params[i]);
        }
        if (rc == 0 && (step % 500 == 0 || step == STEPS - 1))
            printf("step %4d  loss %.6f\n", step, tg_item(loss));
        tg_scope_end();
    }
    int right = 0;
    if (rc == 0) {
        bool was = tg_set_grad_enabled(false); /* no graph for evaluation */
        tg_scope_begin();
        tg_tensor *h = tg_relu(tg_add(tg_matmul(x, params[0]), params[1]));
        tg_tensor *pred = tg_add(tg_matmul(h, params[2]), params[3]);
        for (int64_t i = 0; pred && i < 4; i++) {
            double p = tg_get(pred, (const int64_t[]){i, 0});
            printf("%g xor %g -> %.3f\n", xs[i][0], xs[i][1], p);
            right += (p > 0.5) == (ys[i][0] > 0.5);
        }
        tg_scope_end();
        tg_set_grad_enabled(was);
    } else
        fprintf(stderr, "xor_sgd: %s\n", tg_last_error());
    for (int i = 0; i < 4; i++)
        tg_release(params[i]);
    tg_release(x);
    tg_release(y);
    printf("%d of 4 right\n", right);
    return right == 4 ? 0 : 1;
}
