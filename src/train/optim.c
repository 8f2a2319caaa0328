/* optim.c - parameter updates on host buffers: SGD and AdamW (decoupled decay). */
#include "redco.h"

#include <math.h>

void rc_sgd_update(float *w, const float *grad, int64_t n, double lr)
{
    float a = (float)lr;
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        w[i] -= a * grad[i];
}

void rc_adamw_update(float *w, const float *grad, float *m, float *v, int64_t n, const rc_adam *opt)
{
    double t = (double)opt->step;
    float b1 = (float)opt->beta1, b2 = (float)opt->beta2, eps = (float)opt->eps;
    float c1 = (float)(1.0 - opt->beta1), c2 = (float)(1.0 - opt->beta2); /* not 1 - (float)beta */
    /* the arithmetic of torch.optim.AdamW, so trajectories agree to float rounding */
    float step_size = (float)(opt->lr / (1.0 - pow(opt->beta1, t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(opt->beta2, t));
    float decay = (float)(1.0 - opt->lr * opt->weight_decay);
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float gi = grad[i];
        m[i] = b1 * m[i] + c1 * gi;
        v[i] = b2 * v[i] + c2 * gi * gi;
        w[i] = w[i] * decay - step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
    }
}
