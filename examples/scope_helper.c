/* scope_helper: helpers that open a scope of their own and return their
 * result through it (tg_scope_return), called inside the caller's scope:
 * every temporary goes at the helper's tg_scope_end, the results (and the
 * graph backward needs) at the caller's, and nothing leaks. Run with the
 * leak audit to see it: TG_DEBUG_LEAKS=1 ./examples/scope_helper prints the
 * tensors alive after each step (none) and exits 1 if any is left.
 *
 * It also shows what a mistake looks like now: a tensor used after its
 * scope ended is an error naming this file's line, not a silent NaN. */
#include <tapegrad.h>

#include <math.h>
#include <stdio.h>

/* One linear layer and a ReLU, y = relu(x @ w + b): four temporaries in
 * the helper's scope, y handed to the caller's. */
static tg_tensor *dense_relu(tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    tg_scope_begin();
    tg_tensor *y = tg_relu(tg_add(tg_matmul(x, w), b));
    tg_scope_return(y);
    tg_scope_end();
    return y;
}

/* Two of them, nested: the inner helper's result comes back to this
 * helper's scope, this helper's to its caller's. */
static tg_tensor *mlp(tg_tensor *x, tg_tensor *const *p)
{
    tg_scope_begin();
    tg_tensor *h = dense_relu(x, p[0], p[1]);
    tg_tensor *y = tg_scope_return(tg_matmul(h, p[2]));
    tg_scope_end();
    return y;
}

int main(void)
{
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_tensor *p[3] = {tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 16)),
                       tg_zeros(TG_FLOAT64, TG_SHAPE(16)),
                       tg_randn(&rng, TG_FLOAT64, TG_SHAPE(16, 1))};
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(8, 4));
    for (int i = 0; i < 3; i++)
        tg_set_requires_grad(p[i], true);
    int64_t before = tg_live_tensors(); /* -1 when the audit is off */
    double loss_value = NAN;
    for (int step = 0; step < 3; step++) {
        tg_scope_begin();
        tg_tensor *y = mlp(x, p);
        tg_tensor *loss = tg_mean_all(tg_mul(y, y));
        if (!loss || tg_backward(loss) != 0) {
            fprintf(stderr, "scope_helper: %s\n", tg_last_error());
            return 1;
        }
        loss_value = tg_item(loss);
        for (int i = 0; i < 3; i++) {
            tg_add_(p[i], tg_grad(p[i]), -0.01);
            tg_zero_grad(p[i]);
        }
        tg_scope_end();
        printf("step %d: loss %.6f, tensors alive beyond the parameters: "
               "%lld\n",
               step, loss_value,
               before < 0 ? -1LL : (long long)(tg_live_tensors() - before));
    }

    /* The mistake the old API made silent: y's scope has ended, so y is
     * released; reading it fails, naming this line. */
    tg_scope_begin();
    tg_tensor *y = mlp(x, p);
    tg_scope_end();
    double v = tg_item(y);
    printf("reading y after its scope: %s (%s)\n",
           isnan(v) ? "refused" : "read", tg_last_error());

    int64_t left = tg_live_tensors() - before;
    for (int i = 0; i < 3; i++)
        tg_release(p[i]);
    tg_release(x);
    return before >= 0 && left != 0 ? 1 : 0;
}
