/* The vector kernels of ops/vmath.h, written once for any vector width and
 * included by ops/vmath_avx2.c and ops/vmath_avx512.c after they select
 * their instruction set (#pragma GCC target) and define:
 *
 *   VM(name)        name with the ISA's suffix (tg__vmap_f32_avx2)
 *   VF, VD, NF, ND  the float and double vector types and their lane counts
 *   LDF STF SETF ADDF SUBF MULF DIVF MAXF HMAXF    float lanes
 *   LDD STD SETD ADDD SUBD MULD MAXD HMAXD HSUMD   double lanes
 *   LO_D(v), HI_D(v)   the low and high halves of a VF widened to VD
 *   PACKF(lo, hi)      two VD narrowed (rounded) into one VF
 *   NEGINF_ALL_F(v)    every lane of v is -inf (same for _D)
 *   ZERO_AT_NEGINF_F(e, x)   e with the lanes where x = -inf set to 0
 *   EXPF LOGF TANHF ERFF, EXPD LOGD TANHD ERFD   SLEEF's u10 functions
 *
 * Tails (n not a multiple of the lanes) go through a padded buffer of one
 * vector, so every element of a row takes the same exp() whatever its
 * position. Not a header for the op files: ops/vmath.h is. */

/* ---- maps --------------------------------------------------------------- */

#define VMAP_BODY(V, N, LD, ST, EXP, LOG, TANH, ERF, T, SELF)                  \
    int64_t i = 0;                                                             \
    for (; i + (N) <= n; i += (N)) {                                           \
        V v = LD(x + i);                                                       \
        switch (f) {                                                           \
        case TG_VEXP: v = EXP(v); break;                                       \
        case TG_VLOG: v = LOG(v); break;                                       \
        case TG_VTANH: v = TANH(v); break;                                     \
        case TG_VERF: v = ERF(v); break;                                       \
        }                                                                      \
        ST(y + i, v);                                                          \
    }                                                                          \
    if (i < n) {                                                               \
        T buf[N] = {0};                                                        \
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(T));                       \
        SELF(f, N, buf, buf);                                                  \
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(T));                       \
    }

void VM(tg__vmap_f32)(tg_vfn f, int64_t n, const float *x, float *y)
{
    VMAP_BODY(VF, NF, LDF, STF, EXPF, LOGF, TANHF, ERFF, float,
              VM(tg__vmap_f32))
}

void VM(tg__vmap_f64)(tg_vfn f, int64_t n, const double *x, double *y)
{
    VMAP_BODY(VD, ND, LDD, STD, EXPD, LOGD, TANHD, ERFD, double,
              VM(tg__vmap_f64))
}

#undef VMAP_BODY

/* ---- softmax forward ---------------------------------------------------- */

/* e = exp(x - m), 0 where x = -inf; a vector entirely -inf (the masked
 * half of a causal row) is 0 without calling exp() at all. */
static inline VF VM(shifted_exp_f32)(VF x, VF m)
{
    if (NEGINF_ALL_F(x))
        return SETF(0);
    return ZERO_AT_NEGINF_F(EXPF(SUBF(x, m)), x);
}

static inline VD VM(shifted_exp_f64)(VD x, VD m)
{
    if (NEGINF_ALL_D(x))
        return SETD(0);
    return ZERO_AT_NEGINF_D(EXPD(SUBD(x, m)), x);
}

/* The max of a row, NaN ignored (max(x, m) keeps m, its second operand,
 * when x is NaN): a NaN still reaches every output through the sum. */
static float VM(row_max_f32)(int64_t n, const float *x)
{
    VF vm = SETF(-INFINITY);
    int64_t k = 0;
    for (; k + NF <= n; k += NF)
        vm = MAXF(LDF(x + k), vm);
    float m = HMAXF(vm);
    for (; k < n; k++)
        m = x[k] > m ? x[k] : m;
    return m;
}

static double VM(row_max_f64)(int64_t n, const double *x)
{
    VD vm = SETD(-INFINITY);
    int64_t k = 0;
    for (; k + ND <= n; k += ND)
        vm = MAXD(LDD(x + k), vm);
    double m = HMAXD(vm);
    for (; k < n; k++)
        m = x[k] > m ? x[k] : m;
    return m;
}

/* A row whose max (NaN ignored) is -inf: NaN throughout if it holds a
 * NaN, else masked (0, or -inf for log_softmax). */
#define MASKED_ROW(T)                                                          \
    do {                                                                       \
        bool has_nan = false;                                                  \
        for (int64_t k = 0; k < n; k++)                                        \
            has_nan |= isnan(x[k]);                                            \
        const T fill = has_nan ? (T)NAN : as_log ? (T)-INFINITY : (T)0;        \
        for (int64_t k = 0; k < n; k++)                                        \
            y[k] = fill;                                                       \
    } while (0)

/* forward, per row (ops/softmax.c derives it):
 *   m = max_k x_k                               pass 1
 *   e_k = exp(x_k - m), s = sum_k e_k           pass 2 (e_k kept in y)
 *   softmax:      y_k = e_k / s                 pass 3
 *   log_softmax:  y_k = x_k - m - log s
 * e_k in float32 (SLEEF expf, 1 ulp), s summed in double lanes; the
 * division in float32 (s rounded once). Each pass reads entry k before it
 * writes entry k, so y may be x. */
void VM(tg__softmax_row_f32)(int64_t n, const float *x, float *y, bool as_log)
{
    const float m = VM(row_max_f32)(n, x);
    if (m == -INFINITY) {
        MASKED_ROW(float);
        return;
    }
    const VF vm = SETF(m);
    VD s_lo = SETD(0), s_hi = SETD(0);
    int64_t k = 0;
    for (; k + NF <= n; k += NF) {
        VF e = VM(shifted_exp_f32)(LDF(x + k), vm);
        if (!as_log)
            STF(y + k, e);
        s_lo = ADDD(s_lo, LO_D(e));
        s_hi = ADDD(s_hi, HI_D(e));
    }
    if (k < n) {
        float buf[NF];
        for (int i = 0; i < NF; i++)
            buf[i] = k + i < n ? x[k + i] : -INFINITY;
        VF e = VM(shifted_exp_f32)(LDF(buf), vm);
        STF(buf, e);
        if (!as_log)
            memcpy(y + k, buf, (size_t)(n - k) * sizeof(float));
        s_lo = ADDD(s_lo, LO_D(e));
        s_hi = ADDD(s_hi, HI_D(e));
    }
    const double s = HSUMD(ADDD(s_lo, s_hi));
    if (as_log) {
        /* y_k = x_k - m - log s, in double, rounded once */
        const double lse = log(s);
        for (k = 0; k < n; k++)
            y[k] = (float)((double)x[k] - m - lse);
        return;
    }
    const VF vs = SETF((float)s);
    for (k = 0; k + NF <= n; k += NF)
        STF(y + k, DIVF(LDF(y + k), vs));
    for (; k < n; k++)
        y[k] = y[k] / (float)s;
}

void VM(tg__softmax_row_f64)(int64_t n, const double *x, double *y, bool as_log)
{
    const double m = VM(row_max_f64)(n, x);
    if (m == -INFINITY) {
        MASKED_ROW(double);
        return;
    }
    const VD vm = SETD(m);
    VD vs = SETD(0);
    int64_t k = 0;
    for (; k + ND <= n; k += ND) {
        VD e = VM(shifted_exp_f64)(LDD(x + k), vm);
        if (!as_log)
            STD(y + k, e);
        vs = ADDD(vs, e);
    }
    if (k < n) {
        double buf[ND];
        for (int i = 0; i < ND; i++)
            buf[i] = k + i < n ? x[k + i] : -INFINITY;
        VD e = VM(shifted_exp_f64)(LDD(buf), vm);
        STD(buf, e);
        if (!as_log)
            memcpy(y + k, buf, (size_t)(n - k) * sizeof(double));
        vs = ADDD(vs, e);
    }
    const double s = HSUMD(vs);
    if (as_log) {
        const double lse = log(s);
        for (k = 0; k < n; k++)
            y[k] = x[k] - m - lse;
        return;
    }
    vs = SETD(s);
    for (k = 0; k + ND <= n; k += ND)
        STD(y + k, DIVD(LDD(y + k), vs));
    for (; k < n; k++)
        y[k] = y[k] / s;
}

#undef MASKED_ROW

/* ---- softmax backward --------------------------------------------------- */

/* dx = y * (dy - dot),  dot = sum_k y_k dy_k   (ops/softmax.c derives it).
 * The dot in double lanes; dx in float32 lanes with dot rounded to float
 * once (as torch computes it): the error is at most an ulp of y * dot. */
void VM(tg__softmax_bwd_row_f32)(int64_t n, const float *y, const float *dy,
                                 float *dx)
{
    VD acc = SETD(0);
    int64_t k = 0;
    for (; k + NF <= n; k += NF) {
        const VF yv = LDF(y + k), dyv = LDF(dy + k);
        acc = ADDD(acc, MULD(LO_D(yv), LO_D(dyv)));
        acc = ADDD(acc, MULD(HI_D(yv), HI_D(dyv)));
    }
    double dot = HSUMD(acc);
    for (; k < n; k++)
        dot += (double)y[k] * dy[k];
    const float dotf = (float)dot;
    const VF vdot = SETF(dotf);
    for (k = 0; k + NF <= n; k += NF)
        STF(dx + k, MULF(LDF(y + k), SUBF(LDF(dy + k), vdot)));
    for (; k < n; k++)
        dx[k] = y[k] * (dy[k] - dotf);
}

void VM(tg__softmax_bwd_row_f64)(int64_t n, const double *y, const double *dy,
                                 double *dx)
{
    VD acc = SETD(0);
    int64_t k = 0;
    for (; k + ND <= n; k += ND)
        acc = ADDD(acc, MULD(LDD(y + k), LDD(dy + k)));
    double dot = HSUMD(acc);
    for (; k < n; k++)
        dot += y[k] * dy[k];
    const VD vdot = SETD(dot);
    for (k = 0; k + ND <= n; k += ND)
        STD(dx + k, MULD(LDD(y + k), SUBD(LDD(dy + k), vdot)));
    for (; k < n; k++)
        dx[k] = y[k] * (dy[k] - dot);
}

/* dx = dy - exp(y) * sum_{k: y_k > -inf} dy_k, and dx = 0 where y = -inf
 * (ops/softmax.c derives it). The masked entries drop out of the sum by
 * the same blend that zeroes their dx. */
void VM(tg__log_softmax_bwd_row_f32)(int64_t n, const float *y, const float *dy,
                                     float *dx)
{
    double sum = 0;
    for (int64_t k = 0; k < n; k++)
        sum += y[k] != -INFINITY ? (double)dy[k] : 0;
    const VD vsum = SETD(sum);
    int64_t k = 0;
    for (; k + NF <= n; k += NF) {
        const VF yv = LDF(y + k), dyv = LDF(dy + k);
        const VF e = ZERO_AT_NEGINF_F(EXPF(yv), yv);
        const VD lo = SUBD(LO_D(dyv), MULD(LO_D(e), vsum));
        const VD hi = SUBD(HI_D(dyv), MULD(HI_D(e), vsum));
        STF(dx + k, ZERO_AT_NEGINF_F(PACKF(lo, hi), yv));
    }
    if (k < n) {
        float yb[NF], dyb[NF], dxb[NF];
        for (int i = 0; i < NF; i++) {
            yb[i] = k + i < n ? y[k + i] : -INFINITY;
            dyb[i] = k + i < n ? dy[k + i] : 0;
        }
        const VF yv = LDF(yb), dyv = LDF(dyb);
        const VF e = ZERO_AT_NEGINF_F(EXPF(yv), yv);
        const VD lo = SUBD(LO_D(dyv), MULD(LO_D(e), vsum));
        const VD hi = SUBD(HI_D(dyv), MULD(HI_D(e), vsum));
        STF(dxb, ZERO_AT_NEGINF_F(PACKF(lo, hi), yv));
        memcpy(dx + k, dxb, (size_t)(n - k) * sizeof(float));
    }
}

void VM(tg__log_softmax_bwd_row_f64)(int64_t n, const double *y,
                                     const double *dy, double *dx)
{
    double sum = 0;
    for (int64_t k = 0; k < n; k++)
        sum += y[k] != -INFINITY ? dy[k] : 0;
    const VD vsum = SETD(sum);
    int64_t k = 0;
    for (; k + ND <= n; k += ND) {
        const VD yv = LDD(y + k);
        const VD e = ZERO_AT_NEGINF_D(EXPD(yv), yv);
        STD(dx + k, ZERO_AT_NEGINF_D(SUBD(LDD(dy + k), MULD(e, vsum)), yv));
    }
    if (k < n) {
        double yb[ND], dyb[ND];
        for (int i = 0; i < ND; i++) {
            yb[i] = k + i < n ? y[k + i] : -INFINITY;
            dyb[i] = k + i < n ? dy[k + i] : 0;
        }
        const VD yv = LDD(yb);
        const VD e = ZERO_AT_NEGINF_D(EXPD(yv), yv);
        STD(yb, ZERO_AT_NEGINF_D(SUBD(LDD(dyb), MULD(e, vsum)), yv));
        memcpy(dx + k, yb, (size_t)(n - k) * sizeof(double));
    }
}
