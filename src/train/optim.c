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
    float b1 = (float)opt->beta1, b2 = (float)opt->beta2;
    /* bias corrections folded into the step size and epsilon */
    float lr_t = (float)(opt->lr * sqrt(1.0 - pow(opt->beta2, t)) / (1.0 - pow(opt->beta1, t)));
    float eps_t = (float)(opt->eps * sqrt(1.0 - pow(opt->beta2, t)));
    float decay = (float)(1.0 - opt->lr * opt->weight_decay);
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float gi = grad[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] = w[i] * decay - lr_t * m[i] / (sqrtf(v[i]) + eps_t);
    }
}
