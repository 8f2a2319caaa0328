/* optim.c - parameter updates on host buffers: SGD and AdamW (decoupled decay).
 *
 * Each update is one pass over its arrays, split over the OpenMP threads and vectorised
 * (this file is built with -fno-math-errno so sqrtf becomes the vector instruction; the
 * results are the same correctly rounded floats). Everything that depends only on the
 * step is computed once per call, outside the loop. */
#include "redco.h"

#include <math.h>

enum { PARALLEL_MIN = 1 << 16 }; /* below this many floats one thread is faster */

void rc_sgd_update(float *w, const float *grad, int64_t n, double lr)
{
    float a = (float)lr;
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        w[i] -= a * grad[i];
}

void rc_adamw_update(float *w, const float *grad, float *m, float *v, int64_t n, const rc_adam *opt)
{
    double t = (double)opt->step;
    float b1 = (float)opt->beta1, b2 = (float)opt->beta2, eps = (float)opt->eps;
    float c1 = (float)(1.0 - opt->beta1), c2 = (float)(1.0 - opt->beta2); /* not 1 - (float)beta */
    /* the arithmetic of torch.optim.AdamW, so trajectories agree to float rounding: the
     * bias corrections are hoisted, but divided by, as torch does, not multiplied by an
     * inverse (that would round differently) */
    float step_size = (float)(opt->lr / (1.0 - pow(opt->beta1, t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(opt->beta2, t));
    float decay = (float)(1.0 - opt->lr * opt->weight_decay);
    /* one pass: reads w, grad, m, v and writes w, m, v (28 bytes per parameter) */
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = grad[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}
