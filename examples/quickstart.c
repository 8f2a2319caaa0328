/* quickstart.c - the README's example: fit y = 3x - 1 with one linear layer and SGD. */
#include "redco.h"

#include <stdio.h>

int main(void)
{
    float x[8], y[8], w[1] = {0}, b[1] = {0};
    for (int i = 0; i < 8; i++) {
        x[i] = (float)i / 8;
        y[i] = 3 * x[i] - 1;
    }
    /* 1. record the model and its loss; nothing runs yet */
    rc_graph *g = rc_graph_new();
    rc_tensor *xi = rc_input(g, "x", RC_F32, 2, (int64_t[]){8, 1});
    rc_tensor *yi = rc_input(g, "y", RC_F32, 2, (int64_t[]){8, 1});
    rc_tensor *wp = rc_param(g, "w", RC_F32, 2, (int64_t[]){1, 1});
    rc_tensor *bp = rc_param(g, "b", RC_F32, 1, (int64_t[]){1});
    rc_tensor *err = rc_sub(g, rc_add(g, rc_matmul(g, xi, wp, 0, 0), bp), yi);
    rc_tensor *loss = rc_mean_all(g, rc_mul(g, err, err));
    /* 2. add the backward graph */
    rc_tensor *params[2] = {wp, bp}, *grads[2];
    rc_backward(g, loss, params, 2, grads);
    if (rc_graph_error(g)) {
        fprintf(stderr, "%s\n", rc_graph_error(g));
        return 1;
    }
    /* 3. bind memory, plan once, run many times */
    rc_tensor_bind(xi, x);
    rc_tensor_bind(yi, y);
    rc_tensor_bind(wp, w);
    rc_tensor_bind(bp, b);
    rc_tensor *outs[3] = {loss, grads[0], grads[1]};
    rc_error e = {0};
    rc_plan *plan = rc_plan_new(g, outs, 3, &e);
    for (int step = 0; plan && step < 500; step++) {
        if (rc_plan_run(plan, &e))
            break;
        rc_sgd_update(w, rc_tensor_data(grads[0]), 1, 0.5);
        rc_sgd_update(b, rc_tensor_data(grads[1]), 1, 0.5);
    }
    if (e.code) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("w = %.3f, b = %.3f, loss = %.2e\n", w[0], b[0], *(float *)rc_tensor_data(loss));
    rc_plan_free(plan);
    rc_graph_free(g);
    return 0;
}
