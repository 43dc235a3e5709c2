/* The kernels of kernels/vmath_isa.h for one dtype, written once: vmath_isa.h
 * includes this file twice, for float32 and float64, after defining
 *
 *   R(name)      name with the dtype's and the ISA's suffixes
 *                (R(tg__vmap) is tg__vmap_f32_avx2)
 *   RT, RV, RN   the element and vector types, the lanes
 *   RLD RST RSET RSUB RMUL RDIV RMAX RHMAX   the vector operations
 *   RNEGINF_ALL(v), RZERO_AT_NEGINF(e, x)   as NEGINF_ALL_F... (isa.h)
 *   REXP RLOG RTANH RERFC                   the vector maps (kernels/vmath_isa.h)
 * and the sums, always in double lanes (VD): float32 lanes are widened in
 * two halves, float64 lanes are added as they are:
 *   RSUM_ADD(lo, hi, v)       lo, hi += v's lanes (a softmax row's sum)
 *   RSUM_TOTAL(lo, hi)        the sum of lo's and hi's lanes
 *   RDOT_ADD(acc, a, b)       acc += a * b, lane by lane, in double
 *   RLSM_DX(dy, e, vsum)      dy - e * vsum in double, back in RV
 *   RSUB_D RMUL_D(v, c)       v - c, v * c for a VD c, back in RV
 *   RGELU_ARG RGELU_OUT RGELU_EXPO RGELU_DX   GELU's arithmetic
 *                             (kernels/vmath_isa.h)
 * It undefines them all at its end. No include guard. */

/* ---- maps --------------------------------------------------------------- */

void R(tg__vmap)(tg_vfn f, int64_t n, const RT *x, RT *y)
{
    int64_t i = 0;
    for (; i + RN <= n; i += RN) {
        RV v = RLD(x + i);
        switch (f) {
        case TG_VEXP: v = REXP(v); break;
        case TG_VLOG: v = RLOG(v); break;
        case TG_VTANH: v = RTANH(v); break;
        case TG_VERFC: v = RERFC(v); break;
        }
        RST(y + i, v);
    }
    if (i < n) { /* the tail through one padded vector */
        RT buf[RN] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(RT));
        R(tg__vmap)(f, RN, buf, buf);
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(RT));
    }
}

/* ---- softmax forward ---------------------------------------------------- */

/* e = exp(x - m), 0 where x = -inf; a vector entirely -inf (the masked
 * half of a causal row) is 0 without calling exp() at all. */
static inline RV R(shifted_exp)(RV x, RV m)
{
    if (RNEGINF_ALL(x))
        return RSET(0);
    return RZERO_AT_NEGINF(REXP(RSUB(x, m)), x);
}

/* The max of a row, NaN ignored (max(x, m) keeps m, its second operand,
 * when x is NaN): a NaN still reaches every output through the sum. */
static RT R(row_max)(int64_t n, const RT *x)
{
    RV vm = RSET(-INFINITY);
    int64_t k = 0;
    for (; k + RN <= n; k += RN)
        vm = RMAX(RLD(x + k), vm);
    RT m = RHMAX(vm);
    for (; k < n; k++)
        m = x[k] > m ? x[k] : m;
    return m;
}

/* y_k = exp(x_k - m) for k < n, 0 where x_k = -inf (y NULL: not
 * stored; y may be x); returns sum_k exp(x_k - m), in double lanes. The
 * tail goes through a vector padded with -inf, which adds 0. */
static double R(shifted_exp_sum)(int64_t n, const RT *x, RT *y, RT m)
{
    const RV vm = RSET(m);
    VD s_lo = SETD(0), s_hi = SETD(0);
    int64_t k = 0;
    for (; k + RN <= n; k += RN) {
        const RV e = R(shifted_exp)(RLD(x + k), vm);
        if (y)
            RST(y + k, e);
        RSUM_ADD(s_lo, s_hi, e);
    }
    if (k < n) {
        RT buf[RN];
        for (int i = 0; i < RN; i++)
            buf[i] = k + i < n ? x[k + i] : -INFINITY;
        const RV e = R(shifted_exp)(RLD(buf), vm);
        RST(buf, e);
        if (y)
            memcpy(y + k, buf, (size_t)(n - k) * sizeof(RT));
        RSUM_ADD(s_lo, s_hi, e);
    }
    return RSUM_TOTAL(s_lo, s_hi);
}

/* forward, per row (ops/softmax.c derives it):
 *   m = max_k x_k                               pass 1
 *   e_k = exp(x_k - m), s = sum_k e_k           pass 2 (e_k kept in y)
 *   softmax:      y_k = e_k / s                 pass 3
 *   log_softmax:  y_k = x_k - m - log s
 * e_k in the dtype (SLEEF, 1 ulp), s summed in double lanes; the division
 * in the dtype (s rounded once). A row whose max (NaN ignored) is -inf is
 * NaN throughout if it holds a NaN, else masked (0, or -inf for
 * log_softmax). Each pass reads entry k before it writes entry k, so y may
 * be x. */
void R(tg__softmax_row)(int64_t n, const RT *x, RT *y, bool as_log)
{
    const RT m = R(row_max)(n, x);
    if (m == -INFINITY) {
        bool has_nan = false;
        for (int64_t k = 0; k < n; k++)
            has_nan |= isnan(x[k]);
        const RT fill = has_nan ? (RT)NAN : as_log ? (RT)-INFINITY : (RT)0;
        for (int64_t k = 0; k < n; k++)
            y[k] = fill;
        return;
    }
    const double s = R(shifted_exp_sum)(n, x, as_log ? NULL : y, m);
    if (as_log) {
        /* y_k = x_k - m - log s, in double, rounded once */
        const double lse = log(s);
        for (int64_t k = 0; k < n; k++)
            y[k] = (RT)((double)x[k] - m - lse);
        return;
    }
    const RT st = (RT)s;
    const RV vs = RSET(st);
    int64_t k = 0;
    for (; k + RN <= n; k += RN)
        RST(y + k, RDIV(RLD(y + k), vs));
    for (; k < n; k++)
        y[k] = y[k] / st;
}

/* A row's unnormalised softmax, in place (ops/attention.c's forward):
 *   m = max_k x_k                  NaN ignored, as row_max
 *   x_k = exp(x_k - m)             0 where x_k = -inf, without an exp()
 *   *sum = sum_k x_k               the new x_k, in double lanes
 * and *max = m. A row with no entry above -inf (n = 0, or every key
 * masked) has m = -inf and becomes 0, or NaN where x_k is NaN. */
void R(tg__softmax_exp_row)(int64_t n, RT *x, double *max, double *sum)
{
    const RT m = R(row_max)(n, x);
    *max = m;
    *sum = R(shifted_exp_sum)(n, x, x, m);
}

/* ---- cross-entropy ------------------------------------------------------ */

/* *lse = m + log(sum_k exp(x_k - m)), m = max_k x_k (kernels/vmath.h): NaN
 * for a row with nothing above -inf, as exp(-inf - -inf) makes it in the
 * scalar loop of ops/loss.c. */
void R(tg__logsumexp_row)(int64_t n, const RT *x, double *lse)
{
    const RT m = R(row_max)(n, x);
    *lse = m == -INFINITY ? NAN
                          : (double)m + log(R(shifted_exp_sum)(n, x, NULL, m));
}

/* dx_k = (T)((e_k - [k == t]) * s),  e_k = exp((T)(x_k - lse))  (kernels/vmath.h):
 * e_k in the dtype's lanes, the rest in double lanes rounded once, the
 * target's e_k taken from its vector and finished alone. */
void R(tg__ce_grad_row)(int64_t n, const RT *x, double lse, double s, int64_t t,
                        RT *dx)
{
    const VD vl = SETD(lse), vs = SETD(s);
    RT eb[RN];
    int64_t k = 0;
    for (; k < n; k += RN) {
        const bool tail = k + RN > n;
        RV xv;
        if (tail) { /* padded with -inf: e = 0 */
            for (int i = 0; i < RN; i++)
                eb[i] = k + i < n ? x[k + i] : -INFINITY;
            xv = RLD(eb);
        } else {
            xv = RLD(x + k);
        }
        const RV e = REXP(RSUB_D(xv, vl));
        const RV d = RMUL_D(e, vs);
        if (tail) {
            RST(eb, d);
            memcpy(dx + k, eb, (size_t)(n - k) * sizeof(RT));
        } else {
            RST(dx + k, d);
        }
        if (t >= k && t < k + RN) {
            RST(eb, e);
            dx[t] = (RT)(((double)eb[t - k] - 1) * s);
        }
    }
}

/* ---- softmax backward --------------------------------------------------- */

/* dx = y * (dy - dot),  dot = sum_k y_k dy_k   (ops/softmax.c derives it).
 * The dot in double lanes; dx in the dtype's lanes with dot rounded to it
 * once (as torch computes it): the error is at most an ulp of y * dot. */
void R(tg__softmax_bwd_row)(int64_t n, const RT *y, const RT *dy, RT *dx)
{
    VD acc = SETD(0);
    int64_t k = 0;
    for (; k + RN <= n; k += RN)
        RDOT_ADD(acc, RLD(y + k), RLD(dy + k));
    double dot = HSUMD(acc);
    for (; k < n; k++)
        dot += (double)y[k] * dy[k];
    const RT dott = (RT)dot;
    const RV vdot = RSET(dott);
    for (k = 0; k + RN <= n; k += RN)
        RST(dx + k, RMUL(RLD(y + k), RSUB(RLD(dy + k), vdot)));
    for (; k < n; k++)
        dx[k] = y[k] * (dy[k] - dott);
}

/* dx = dy - exp(y) * sum_{k: y_k > -inf} dy_k, and dx = 0 where y = -inf
 * (ops/softmax.c derives it). The masked entries drop out of the sum by
 * the same blend that zeroes their dx. */
void R(tg__log_softmax_bwd_row)(int64_t n, const RT *y, const RT *dy, RT *dx)
{
    double sum = 0;
    for (int64_t k = 0; k < n; k++)
        sum += y[k] != -INFINITY ? (double)dy[k] : 0;
    const VD vsum = SETD(sum);
    int64_t k = 0;
    for (; k + RN <= n; k += RN) {
        const RV yv = RLD(y + k);
        const RV e = RZERO_AT_NEGINF(REXP(yv), yv);
        RST(dx + k, RZERO_AT_NEGINF(RLSM_DX(RLD(dy + k), e, vsum), yv));
    }
    if (k < n) {
        RT yb[RN], dyb[RN], dxb[RN];
        for (int i = 0; i < RN; i++) {
            yb[i] = k + i < n ? y[k + i] : -INFINITY;
            dyb[i] = k + i < n ? dy[k + i] : 0;
        }
        const RV yv = RLD(yb);
        const RV e = RZERO_AT_NEGINF(REXP(yv), yv);
        RST(dxb, RZERO_AT_NEGINF(RLSM_DX(RLD(dyb), e, vsum), yv));
        memcpy(dx + k, dxb, (size_t)(n - k) * sizeof(RT));
    }
}

/* ---- gelu --------------------------------------------------------------- */

/* y = x Phi(x) for one vector, and *c = erfc(|x| / sqrt 2) (kernels/vmath.h;
 * float32's corrected for its rounded argument, kernels/vmath_isa.h). */
static inline RV R(gelu_vec)(RV x, RV *c)
{
    *c = RERFC(RGELU_ARG(x));
    return RGELU_OUT(x, c);
}

void R(tg__gelu)(int64_t n, const RT *x, RT *y, RT *c)
{
    RT buf[GELU_BLOCK];
    int64_t i = 0;
    for (; i + RN <= n; i += GELU_BLOCK) {
        const int64_t nb = (n - i < GELU_BLOCK ? n - i : GELU_BLOCK) / RN * RN;
        /* erfc's values, kept or not; buf is written (pass 1) before it
         * is read, which cppcheck does not follow */
        // cppcheck-suppress legacyUninitvar
        RT *cb = c ? c + i : buf;
        for (int64_t j = 0; j < nb; j += RN)
            RST(cb + j, RGELU_ARG(RLD(x + i + j)));
        for (int64_t j = 0; j < nb; j += RN)
            RST(cb + j, RERFC(RLD(cb + j)));
        for (int64_t j = 0; j < nb; j += RN) { /* y may be x: read, write */
            RV cv = RLD(cb + j);
            const RV yv = RGELU_OUT(RLD(x + i + j), &cv);
            RST(cb + j, cv);
            RST(y + i + j, yv);
        }
        if (nb < GELU_BLOCK) {
            i += nb;
            break;
        }
    }
    if (i < n) { /* the tail through one padded vector */
        RT xb[RN] = {0}, cb[RN];
        memcpy(xb, x + i, (size_t)(n - i) * sizeof(RT));
        RV cv;
        RST(xb, R(gelu_vec)(RLD(xb), &cv));
        RST(cb, cv);
        memcpy(y + i, xb, (size_t)(n - i) * sizeof(RT));
        if (c)
            memcpy(c + i, cb, (size_t)(n - i) * sizeof(RT));
    }
}

/* dx = dy (Phi(x) + x phi(x)) for one vector, from c = erfc(|x| / sqrt 2):
 * one exp, no erfc (kernels/vmath.h). */
static inline RV R(gelu_grad_vec)(RV x, RV c, RV dy)
{
    const RV q = REXP(RGELU_EXPO(x));
    return RGELU_DX(dy, c, x, q);
}

void R(tg__gelu_grad)(int64_t n, const RT *x, const RT *c, const RT *dy, RT *dx)
{
    RT q[GELU_BLOCK];
    int64_t i = 0;
    for (; i + RN <= n; i += GELU_BLOCK) {
        const int64_t nb = (n - i < GELU_BLOCK ? n - i : GELU_BLOCK) / RN * RN;
        for (int64_t j = 0; j < nb; j += RN)
            RST(q + j, RGELU_EXPO(RLD(x + i + j)));
        for (int64_t j = 0; j < nb; j += RN)
            RST(q + j, REXP(RLD(q + j)));
        for (int64_t j = 0; j < nb; j += RN) /* dx may be dy */
            RST(dx + i + j, RGELU_DX(RLD(dy + i + j), RLD(c + i + j),
                                     RLD(x + i + j), RLD(q + j)));
        if (nb < GELU_BLOCK) {
            i += nb;
            break;
        }
    }
    if (i < n) {
        RT xb[RN] = {0}, cb[RN] = {0}, gb[RN] = {0};
        const size_t tail = (size_t)(n - i) * sizeof(RT);
        memcpy(xb, x + i, tail);
        memcpy(cb, c + i, tail);
        memcpy(gb, dy + i, tail);
        RST(gb, R(gelu_grad_vec)(RLD(xb), RLD(cb), RLD(gb)));
        memcpy(dx + i, gb, tail);
    }
}

#undef R
#undef RT
#undef RV
#undef RN
#undef RLD
#undef RST
#undef RSET
#undef RSUB
#undef RMUL
#undef RDIV
#undef RMAX
#undef RHMAX
#undef RNEGINF_ALL
#undef RZERO_AT_NEGINF
#undef REXP
#undef RLOG
#undef RTANH
#undef RERFC
#undef RSUM_ADD
#undef RSUM_TOTAL
#undef RDOT_ADD
#undef RLSM_DX
#undef RSUB_D
#undef RMUL_D
#undef RGELU_ARG
#undef RGELU_OUT
#undef RGELU_EXPO
#undef RGELU_DX
