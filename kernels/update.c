/* The optimizers' updates, in place: one pass over each parameter with its
 * gradient and state (nn/optim.c steps them, one call per parameter). They
 * live in kernels/ because they are loops over the tensors' layout, which
 * nn/ does not see, and record nothing. torch.optim (1.13, single-tensor path) computes
 * each in-place op as one expression per element, in this order:
 *   a.add_(b, alpha=s)       a + s * b
 *   a.addcmul_(b, c, value=s) a + s * b * c      ((s * b) * c)
 *   a.addcdiv_(b, c, value=s) a + s * b / c      ((s * b) / c)
 * and the kernels below write them so, in the parameter's dtype; the
 * Python-side scalars (1 - beta1, lr / bias_correction1, ...) are computed
 * in double and then rounded to that dtype, as torch does. */
#include "core/internal.h"
#include "kernels/update.h"

#include <math.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if TG_HAVE_TARGETS
#include <immintrin.h>
#endif

/* One parameter's update: operands {p, g, m, v} (m, v NULL when unused) in
 * a loop over p's shape, run in pieces (on several threads for a large
 * parameter: every element is updated on its own, so the bits are the
 * same). */
typedef void (*roots_float_fn)(float *root, const float *v, int64_t n);
typedef void (*roots_double_fn)(double *root, const double *v, int64_t n);

typedef struct update_job {
    const tg_update_config *c;
    tg_tensor *p, *m, *v;
    const tg_tensor *g;
    bool first; /* SGD: the momentum buffer's first step */
    int64_t t;  /* Adam: the step, from 1 */
    /* Adam: sqrt over a block, the level's (TG_BY_LEVEL(roots_float)) */
    roots_float_fn roots_f;
    roots_double_fn roots_d;
} update_job;

static void run_update(update_job *job, tg_run_fn fn)
{
    tg_tensor *p = job->p;
    TG_ASSERT(job->g->dtype == p->dtype && job->g->ndim == p->ndim &&
              memcmp(job->g->shape, p->shape,
                     sizeof(int64_t) * (size_t)p->ndim) == 0);
    const tg_tensor *ops[] = {p, job->g, job->m ? job->m : p,
                              job->v ? job->v : p};
    tg_loop L;
    tg__loop_init(&L, p->ndim, p->shape, 4, ops);
    tg__loop_run(&L, 1, fn, job);
}

/* torch.optim.SGD (dampening 0, no nesterov), per element:
 *   d   = g + wd * p                                   (when wd != 0)
 *   buf = d              at the first step             (when momentum != 0)
 *   buf = momentum * buf + d   afterwards;   d = buf
 *   p   = p + (-lr) * d
 * buf is NULL without momentum. A contiguous run takes SGD_LOOP: over pp,
 * gg, bb (len elements) with DECAY, MOMENTUM and FIRST constant, one loop
 * per case has no branch, so the compiler vectorises it. */
#define SGD_LOOP(DECAY, MOMENTUM, FIRST)                                       \
    do {                                                                       \
        TG_SIMD                                                                \
        for (int64_t i = 0; i < len; i++) {                                    \
            T d = DECAY ? gg[i] + wd * pp[i] : gg[i];                          \
            if (MOMENTUM) {                                                    \
                d = FIRST ? d : bb[i] * momentum + d;                          \
                bb[i] = d;                                                     \
            }                                                                  \
            pp[i] = pp[i] + neg_lr * d;                                        \
        }                                                                      \
    } while (0)

TG_INLINE void sgd_body(void *job, const int64_t *off, const int64_t *step,
                        int64_t len)
{
    const update_job *j = job;
    const tg_update_config *c = j->c;
    const bool first = j->first, decay = c->weight_decay != 0;
    TG_DISPATCH_FLOAT(j->p->dtype, T, {
        const T wd = (T)c->weight_decay, momentum = (T)c->momentum;
        const T neg_lr = (T)-c->lr;
        T *pp = TG_DATA(T, j->p) + off[0];
        const T *gg = TG_DATA(T, j->g) + off[1];
        T *bb = j->m ? TG_DATA(T, j->m) + off[2] : NULL;
        if (step[0] == 1 && step[1] == 1 && (!bb || step[2] == 1)) {
            /* one loop per case, branch-free (SGD_LOOP) */
            if (!bb && decay)
                SGD_LOOP(true, false, false);
            else if (!bb)
                SGD_LOOP(false, false, false);
            else if (decay && first)
                SGD_LOOP(true, true, true);
            else if (decay)
                SGD_LOOP(true, true, false);
            else if (first)
                SGD_LOOP(false, true, true);
            else
                SGD_LOOP(false, true, false);
            return;
        }
        for (int64_t i = 0; i < len; i++) {
            T *pi = &pp[i * step[0]];
            T d = gg[i * step[1]];
            if (decay)
                d = d + wd * *pi;
            if (bb) {
                T *b = &bb[i * step[2]];
                *b = first ? d : *b * momentum + d;
                d = *b;
            }
            *pi = *pi + neg_lr * d;
        }
    });
}

#undef SGD_LOOP

/* torch.optim.Adam / AdamW at step t (counted from 1), per element:
 *   p  = p * (1 - lr * wd)                          (AdamW: decoupled decay)
 *   g  = g + wd * p                                 (Adam, when wd != 0)
 *   m  = m * b1 + (1 - b1) * g
 *   v  = v * b2 + (1 - b2) * g * g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p  = p + (-lr / (1 - b1^t)) * m / denom
 * The square root is taken in double and rounded, which for a float is
 * the float square root itself (a double has more than twice the bits), so
 * float32 takes sqrtf.
 * When p, g, m and v are adjacent (the usual case), a run goes in blocks
 * of three loops: the updates of p (decay), g, m, v, then the square roots,
 * then p's step. The compiler vectorises the first and the last; not sqrt,
 * which may set errno, so the roots are taken a vector at a time with the
 * instruction (SSE2, AVX or AVX-512: each rounds correctly, as sqrtf and
 * sqrt do, so every level gives the same bits). */
enum { ADAM_BLOCK = 256 };

/* sqrt(x) in T: the float square root for a float */
#define ROOT(x)                                                                \
    (sizeof(T) == sizeof(float) ? (T)sqrtf((float)(x)) : (T)sqrt((double)(x)))

/* root[i] = sqrt(v[i]), i < n, correctly rounded as sqrtf and sqrt are. */
static void roots_float(float *root, const float *v, int64_t n)
{
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(root + i, _mm_sqrt_ps(_mm_loadu_ps(v + i)));
#endif
    for (; i < n; i++)
        root[i] = sqrtf(v[i]);
}

static void roots_double(double *root, const double *v, int64_t n)
{
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 2 <= n; i += 2)
        _mm_storeu_pd(root + i, _mm_sqrt_pd(_mm_loadu_pd(v + i)));
#endif
    for (; i < n; i++)
        root[i] = sqrt(v[i]);
}

#if TG_HAVE_TARGETS
TG_TARGET_AVX2 static void roots_float_avx2(float *root, const float *v,
                                            int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(root + i, _mm256_sqrt_ps(_mm256_loadu_ps(v + i)));
    for (; i < n; i++)
        root[i] = sqrtf(v[i]);
}

TG_TARGET_AVX2 static void roots_double_avx2(double *root, const double *v,
                                             int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(root + i, _mm256_sqrt_pd(_mm256_loadu_pd(v + i)));
    for (; i < n; i++)
        root[i] = sqrt(v[i]);
}

TG_TARGET_AVX512 static void roots_float_avx512(float *root, const float *v,
                                                int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(root + i, _mm512_sqrt_ps(_mm512_loadu_ps(v + i)));
    for (; i < n; i++)
        root[i] = sqrtf(v[i]);
}

TG_TARGET_AVX512 static void roots_double_avx512(double *root, const double *v,
                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(root + i, _mm512_sqrt_pd(_mm512_loadu_pd(v + i)));
    for (; i < n; i++)
        root[i] = sqrt(v[i]);
}
#endif

/* root = sqrt(v) elementwise with rf or rd, for either float type. */
#define roots(root, v, n)                                                      \
    _Generic((root), float * : rf, double * : rd)(root, v, n)

TG_INLINE void adam_body(void *job, const int64_t *off, const int64_t *step,
                         int64_t len, roots_float_fn rf, roots_double_fn rd)
{
    const update_job *j = job;
    const tg_update_config *c = j->c;
    const bool decoupled = c->decoupled;
    const bool l2 = !decoupled && c->weight_decay != 0;
    const double bias_correction1 = 1 - pow(c->beta1, (double)j->t);
    const double bias_correction2 = 1 - pow(c->beta2, (double)j->t);
    /* root is filled by roots() before it is read; cppcheck cannot see it */
    // cppcheck-suppress legacyUninitvar
    TG_DISPATCH_FLOAT(j->p->dtype, T, {
        /* p * 1 is p: the decay of Adam (not AdamW) */
        const T decay = decoupled ? (T)(1 - c->lr * c->weight_decay) : (T)1;
        const T wd = (T)c->weight_decay, eps = (T)c->eps;
        const T b1 = (T)c->beta1, one_minus_b1 = (T)(1 - c->beta1);
        const T b2 = (T)c->beta2, one_minus_b2 = (T)(1 - c->beta2);
        const T bc2_sqrt = (T)sqrt(bias_correction2);
        const T neg_step_size = (T) - (c->lr / bias_correction1);
        T *pp = TG_DATA(T, j->p) + off[0];
        const T *gg = TG_DATA(T, j->g) + off[1];
        T *mm = TG_DATA(T, j->m) + off[2], *vv = TG_DATA(T, j->v) + off[3];
        if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1) {
            for (int64_t b0 = 0; b0 < len; b0 += ADAM_BLOCK) {
                const int64_t n = len - b0 < ADAM_BLOCK ? len - b0 : ADAM_BLOCK;
                T *p = pp + b0, *m = mm + b0, *v = vv + b0, root[ADAM_BLOCK];
                const T *g = gg + b0;
                if (l2) {
                    TG_SIMD
                    for (int64_t i = 0; i < n; i++) {
                        T gi = g[i] + wd * p[i];
                        m[i] = m[i] * b1 + one_minus_b1 * gi;
                        v[i] = v[i] * b2 + one_minus_b2 * gi * gi;
                    }
                } else {
                    TG_SIMD
                    for (int64_t i = 0; i < n; i++) {
                        p[i] = p[i] * decay;
                        m[i] = m[i] * b1 + one_minus_b1 * g[i];
                        v[i] = v[i] * b2 + one_minus_b2 * g[i] * g[i];
                    }
                }
                roots(root, v, n);
                TG_SIMD
                for (int64_t i = 0; i < n; i++)
                    p[i] = p[i] +
                           neg_step_size * m[i] / (root[i] / bc2_sqrt + eps);
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                T *pi = &pp[i * step[0]], *mi = &mm[i * step[2]];
                T *vi = &vv[i * step[3]];
                T gi = gg[i * step[1]];
                *pi = *pi * decay;
                if (l2)
                    gi = gi + wd * *pi;
                *mi = *mi * b1 + one_minus_b1 * gi;
                *vi = *vi * b2 + one_minus_b2 * gi * gi;
                T denom = ROOT(*vi) / bc2_sqrt + eps;
                *pi = *pi + neg_step_size * *mi / denom;
            }
        }
    });
}
#undef ROOT
#undef roots

/* The runs for tg__loop_run, one per level. */
TG_LEVELS(sgd_run,
          (void *job, int64_t start, const int64_t *off, const int64_t *step,
           int64_t len),
          (void)start;
          sgd_body(job, off, step, len);)
TG_LEVELS(adam_run,
          (void *job, int64_t start, const int64_t *off, const int64_t *step,
           int64_t len),
          (void)start;
          const update_job *j = job;
          adam_body(job, off, step, len, j->roots_f, j->roots_d);)

void tg__sgd_update(const tg_update_config *c, tg_tensor *p, const tg_tensor *g,
                    tg_tensor *buf, bool first)
{
    update_job job = {.c = c, .p = p, .g = g, .m = buf, .first = first};
    run_update(&job, TG_BY_LEVEL(sgd_run));
}

void tg__adam_update(const tg_update_config *c, tg_tensor *p,
                     const tg_tensor *g, tg_tensor *m, tg_tensor *v, int64_t t)
{
    update_job job = {.c = c,
                      .p = p,
                      .g = g,
                      .m = m,
                      .v = v,
                      .t = t,
                      .roots_f = TG_BY_LEVEL(roots_float),
                      .roots_d = TG_BY_LEVEL(roots_double)};
    run_update(&job, TG_BY_LEVEL(adam_run));
}

typedef struct scale_job {
    tg_tensor *g;
    double coef;
} scale_job;

/* g *= coef over one run (operand {g}); each element on its own, so the
 * runs may go to several threads. */
static void scale_run(void *job, int64_t start, const int64_t *off,
                      const int64_t *step, int64_t len)
{
    const scale_job *j = job;
    (void)start;
    TG_DISPATCH_FLOAT(j->g->dtype, T, {
        const T c = (T)j->coef;
        T *x = TG_DATA(T, j->g) + off[0];
        if (step[0] == 1) {
            TG_SIMD
            for (int64_t i = 0; i < len; i++)
                x[i] *= c;
        } else {
            for (int64_t i = 0; i < len; i++)
                x[i * step[0]] *= c;
        }
    });
}

/* g *= coef, in place, in g's dtype (as torch's grad.mul_(clip_coef)). */
void tg__scale_in_place(tg_tensor *g, double coef)
{
    tg_loop L;
    tg__loop_init(&L, g->ndim, g->shape, 1, (const tg_tensor *const[]){g});
    tg__loop_run(&L, 1, scale_run, &(scale_job){g, coef});
}
