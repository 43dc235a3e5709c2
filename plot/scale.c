/* The colour convention of every heatmap (see plot/scale.h): a figure says
 * which scale its numbers need, and the range follows from the scale, not
 * from a guess at the data. A gradient on a one-sided scale paints its
 * exact zeros as a middling colour that reads as some small value; on the
 * diverging scale the range [-m, m] is symmetric, so gnuplot's linear map
 * of cbrange onto the palette's [-1, 1] sends 0 to the middle stop,
 * (0 - (-m)) / (m - (-m)) = 1/2, the neutral colour, whatever m is. */
#include "plot/scale.h"

#include <math.h>

bool tg__scale_check(const char *op, const tg_heatmap_opts *o)
{
    if (o && (o->scale < TG_SCALE_AUTO || o->scale > TG_SCALE_UNIT)) {
        tg__error("%s: scale %d is not a tg_heatmap_scale (TG_SCALE_AUTO, "
                  "TG_SCALE_DIVERGING or TG_SCALE_UNIT)",
                  op, (int)o->scale);
        return false;
    }
    return true;
}

static void titles(const tg_heatmap_opts *o, tg__cscale *s)
{
    static const char *const cb[] = {"value", "value (0 at the centre)",
                                     "weight"};
    s->xlabel = o && o->xlabel ? o->xlabel : "column";
    s->ylabel = o && o->ylabel ? o->ylabel : "row";
    s->cblabel = o && o->cblabel ? o->cblabel : cb[s->kind];
}

/* AUTO's range from the finite values' [lo, hi]; lo > hi: none. */
static void auto_range(tg__cscale *s, double lo, double hi)
{
    if (lo > hi) {
        s->lo = 0;
        s->hi = 1;
    } else if (lo == hi) {
        double pad = lo != 0 ? fabs(lo) / 2 : 0.5;
        s->lo = lo - pad;
        s->hi = hi + pad;
    } else {
        s->lo = lo;
        s->hi = hi;
    }
}

bool tg__scale_resolve(const char *op, const tg_heatmap_opts *o,
                       const double *v, const unsigned char *mask, int64_t n,
                       int64_t cols, tg__cscale *s)
{
    if (!tg__scale_check(op, o))
        return false;
    *s = (tg__cscale){.kind = o ? o->scale : TG_SCALE_AUTO};
    titles(o, s);
    double lo = INFINITY, hi = -INFINITY, top = 0;
    for (int64_t k = 0; k < n; k++) {
        if (mask && mask[k]) {
            s->masked++;
            continue;
        }
        if (!isfinite(v[k]))
            continue;
        if (s->kind == TG_SCALE_UNIT && !(v[k] >= 0 && v[k] <= 1)) {
            tg__error("%s: TG_SCALE_UNIT is for weights in [0, 1], got %g "
                      "at [%lld, %lld]",
                      op, v[k], (long long)(k / cols), (long long)(k % cols));
            return false;
        }
        s->zeros += v[k] == 0;
        lo = fmin(lo, v[k]);
        hi = fmax(hi, v[k]);
        top = fmax(top, fabs(v[k]));
    }
    if (s->kind == TG_SCALE_DIVERGING) {
        s->lo = top > 0 ? -top : -1;
        s->hi = top > 0 ? top : 1;
    } else if (s->kind == TG_SCALE_UNIT) {
        s->lo = 0;
        s->hi = 1;
    } else
        auto_range(s, lo, hi);
    return true;
}

const char *tg__scale_palette(tg_heatmap_scale kind)
{
    /* RdBu: blue below 0, red above, the neutral at 0 */
    if (kind == TG_SCALE_DIVERGING)
        return "set palette defined (-1 '#2166ac', -0.5 '#92c5de', "
               "0 '" TG__NEUTRAL "', 0.5 '#f4a582', 1 '#b2182b')\n";
    /* viridis: dark purple (low) to yellow (high), the stops of the page's
     * own figures (plot/report.js, VIR) */
    return "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 "
           "'#21908d', 0.75 '#5dc963', 1 '#fde725')\n";
}

const char *tg__scale_name(tg_heatmap_scale kind)
{
    return kind == TG_SCALE_DIVERGING ? "diverging"
           : kind == TG_SCALE_UNIT    ? "unit"
                                      : "sequential";
}

bool tg__mask_fits(const char *op, const tg_tensor *m, const tg_tensor *mask)
{
    if (!mask || (tg_ndim(mask) == 2 && tg_size(mask, 0) == tg_size(m, 0) &&
                  tg_size(mask, 1) == tg_size(m, 1)))
        return true;
    tg__error("%s: mask of shape %s does not match the matrix %s", op,
              TG_SHP(mask), TG_SHP(m));
    return false;
}
