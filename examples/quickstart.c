/* quickstart.c - the README's example: fit y = 3x - 1 with one linear layer and SGD. */
#include "redco.h"
#include "redco/device.h"

#include <stdio.h>

int main(void)
{
    float x[8], y[8];
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
    /* 3. the parameters live in a backend buffer (w, then b; zeroed), bound to the graph;
     *    their gradients go to a buffer of the same layout for the optimizer */
    rc_error e = {0};
    rc_backend *cpu = rc_device_open("cpu", 0, &e);
    rc_buffer *wb = rc_buffer_new(cpu, 2 * sizeof(float), &e);
    rc_buffer *gb = rc_buffer_new(cpu, 2 * sizeof(float), &e);
    if (wb && gb) {
        rc_graph_bind(g, wp, wb, 0);
        rc_graph_bind(g, bp, wb, sizeof(float));
    }
    /* 4. plan once, copy the data in, run many times */
    rc_tensor *outs[3] = {loss, grads[0], grads[1]};
    rc_plan *plan = wb && gb ? rc_plan_new(g, outs, 3, &e) : NULL;
    int rc = !plan || rc_plan_set_input(plan, xi, x, &e) || rc_plan_set_input(plan, yi, y, &e);
    for (int step = 0; !rc && step < 500; step++) {
        float grad[2];
        rc = rc_plan_run(plan, &e) || rc_plan_read(plan, grads[0], &grad[0], &e) ||
             rc_plan_read(plan, grads[1], &grad[1], &e) || rc_buffer_upload(gb, 0, grad, sizeof grad, &e) ||
             rc_sgd_update(wb, gb, 0, 2, 0.5, &e);   /* w -= 0.5 grad, run by the backend */
    }
    float w[2], l;
    if (rc || rc_buffer_download(wb, 0, w, sizeof w, &e) || rc_plan_read(plan, loss, &l, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("w = %.3f, b = %.3f, loss = %.2e\n", w[0], w[1], l);
    rc_plan_free(plan);
    rc_buffer_free(wb);
    rc_buffer_free(gb);
    rc_device_close(cpu);
    rc_graph_free(g);
    return 0;
}
