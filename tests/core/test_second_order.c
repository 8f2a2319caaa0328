/* test_second_order.c - gradients of gradients, checked by finite differences of the
 * first gradient (double precision), and the MAML pattern: the gradient of a loss taken
 * after one inner SGD step, through that step. */
#include "check.h"
#include "gradcheck.h"

#include <stdio.h>

static rc_tensor *b_matmul(rc_graph *g, rc_tensor **x)
{
    /* matmul alone is bilinear: its second derivative pairs the two operands */
    return rc_matmul(g, x[0], x[1], 0, 1);
}
static rc_tensor *b_tanh(rc_graph *g, rc_tensor **x) { return rc_tanh(g, x[0]); }
static rc_tensor *b_softmax(rc_graph *g, rc_tensor **x) { return rc_softmax(g, x[0]); }
static rc_tensor *b_softmax_causal(rc_graph *g, rc_tensor **x) { return rc_softmax_ext(g, x[0], x[1], 0.5, 1); }
static rc_tensor *b_layer_norm(rc_graph *g, rc_tensor **x) { return rc_layer_norm(g, x[0], x[1], x[2], 1e-5); }
static rc_tensor *b_rms_norm(rc_graph *g, rc_tensor **x) { return rc_rms_norm(g, x[0], x[1], 1e-6, 0.0); }
/* a norm's square: its upstream gradient then depends on x too (the fused NORM_GRAD's own
 * gradient must take x's direct part alone; the path through G is the walk's) */
static rc_tensor *b_layer_norm_sq(rc_graph *g, rc_tensor **x)
{
    rc_tensor *y = rc_layer_norm(g, x[0], x[1], x[2], 1e-5);
    return rc_mul(g, y, y);
}
static rc_tensor *b_rms_norm_sq(rc_graph *g, rc_tensor **x)
{
    rc_tensor *y = rc_rms_norm(g, x[0], x[1], 1e-6, 0.5);
    return rc_mul(g, y, rc_tanh(g, y));
}
static rc_tensor *b_gelu(rc_graph *g, rc_tensor **x) { return rc_gelu(g, rc_matmul(g, x[0], x[1], 0, 0)); }
static rc_tensor *b_cross_entropy(rc_graph *g, rc_tensor **x) { return rc_cross_entropy(g, x[0], x[1], -100); }

/* tanh MLP: x [N, 2] -> [N, 1] */
static rc_tensor *mlp(rc_graph *g, rc_tensor *const *w, rc_tensor *x)
{
    rc_tensor *h = rc_tanh(g, rc_add(g, rc_matmul(g, x, w[0], 0, 0), w[1]));
    return rc_add(g, rc_matmul(g, h, w[2], 0, 0), w[3]);
}

static rc_tensor *mse(rc_graph *g, rc_tensor *pred, rc_tensor *y)
{
    rc_tensor *d = rc_sub(g, pred, y);
    return rc_mean_all(g, rc_mul(g, d, d));
}

/* MAML: w' = w - 0.4 dL_support/dw; returns L_query(w'). Inputs: w1 b1 w2 b2 xs ys xq yq. */
static rc_tensor *b_maml(rc_graph *g, rc_tensor **x)
{
    rc_tensor *grads[4], *adapted[4];
    rc_tensor *inner = mse(g, mlp(g, x, x[4]), x[5]);
    if (rc_backward(g, inner, x, 4, grads))
        return NULL;
    for (int i = 0; i < 4; i++)
        adapted[i] = rc_sub(g, x[i], rc_scale(g, grads[i], 0.4));
    return mse(g, mlp(g, adapted, x[6]), x[7]);
}

#define F64(...) {.dtype = RC_F64, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define CONST(...) {.dtype = RC_F64, .nograd = 1, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}

static const gc_case second[] = {
    {"matmul", 2, {F64(3, 4), F64(5, 4)}, b_matmul, 2, 0, 0},
    {"tanh", 1, {F64(3, 4)}, b_tanh, 2, 0, 0},
    {"softmax", 1, {F64(3, 5)}, b_softmax, 2, 0, 0},
    {"softmax causal masked", 2, {F64(2, 3, 4), F64(3, 4)}, b_softmax_causal, 2, 0, 0},
    {"layer norm", 3, {F64(3, 6), F64(6), F64(6)}, b_layer_norm, 2, 0, 0},
    {"rms norm", 2, {F64(3, 6), F64(6)}, b_rms_norm, 2, 0, 0},
    {"layer norm squared", 3, {F64(3, 6), F64(6), F64(6)}, b_layer_norm_sq, 2, 0, 0},
    {"rms norm times tanh", 2, {F64(3, 6), F64(6)}, b_rms_norm_sq, 2, 0, 0},
    {"gelu of matmul", 2, {F64(3, 4), F64(4, 2)}, b_gelu, 2, 0, 0},
    {"cross entropy", 2, {F64(4, 5), {.dtype = RC_I32, .nograd = 1, .id_max = 5, .ndim = 1, .shape = {4}}},
     b_cross_entropy, 2, 0, 0},
};

int main(void)
{
    int n = (int)(sizeof second / sizeof second[0]);
    for (int i = 0; i < n; i++) {
        double e = gc_run(&second[i], 1);
        CHECKF(e >= 0 && e <= 1e-6, "second order %s: relative error %.3g", second[i].name, e);
        printf("grad of grad %-24s max rel err %.2e\n", second[i].name, e);
    }
    /* MAML: first-order in form, second-order in content (the inner gradient is differentiated) */
    gc_case maml = {"maml one inner sgd step", 8,
                    {F64(2, 8), F64(8), F64(8, 1), F64(1), CONST(5, 2), CONST(5, 1), CONST(6, 2), CONST(6, 1)},
                    b_maml, 1, 0, 0};
    double e = gc_run(&maml, 1);
    CHECKF(e >= 0 && e <= 1e-6, "maml: relative error %.3g", e);
    printf("grad through inner step %-13s max rel err %.2e\n", maml.name, e);
    return check_summary("test_second_order");
}
