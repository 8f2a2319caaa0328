/* ops_elementwise.c - builders of element-wise ops: arithmetic with broadcasting,
 * unary maths, activations, where/equal, cast and dropout. */
#include "internal.h"

#include <math.h>

static rc_tensor *binary(rc_graph *g, rc_op op, rc_tensor *a, rc_tensor *b)
{
    rc_tensor *src[2] = {a, b};
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, rc_op_name(op), a))
        return NULL;
    int ndim;
    int64_t shape[RC_MAX_DIMS];
    if (rci_broadcast_shapes(g, rc_op_name(op), a, b, &ndim, shape))
        return NULL;
    return rci_node_checked(g, rci_node_new(g, op, a->dtype, ndim, shape, 2, src));
}

rc_tensor *rc_add(rc_graph *g, rc_tensor *a, rc_tensor *b) { return binary(g, RC_OP_ADD, a, b); }
rc_tensor *rc_sub(rc_graph *g, rc_tensor *a, rc_tensor *b) { return binary(g, RC_OP_SUB, a, b); }
rc_tensor *rc_mul(rc_graph *g, rc_tensor *a, rc_tensor *b) { return binary(g, RC_OP_MUL, a, b); }
rc_tensor *rc_div(rc_graph *g, rc_tensor *a, rc_tensor *b) { return binary(g, RC_OP_DIV, a, b); }

static rc_tensor *unary(rc_graph *g, rc_op op, rc_tensor *a)
{
    if (rci_inputs_bad(g, 1, &a) || rci_float_input(g, rc_op_name(op), a))
        return NULL;
    return rci_node_new(g, op, a->dtype, a->ndim, a->shape, 1, &a);
}

rc_tensor *rc_affine(rc_graph *g, rc_tensor *a, double scale, double shift)
{
    rc_tensor *y = unary(g, RC_OP_AFFINE, a);
    if (y) {
        y->fparam[0] = scale;
        y->fparam[1] = shift;
    }
    return y;
}

rc_tensor *rc_scale(rc_graph *g, rc_tensor *a, double s) { return rc_affine(g, a, s, 0.0); }
rc_tensor *rc_add_scalar(rc_graph *g, rc_tensor *a, double c) { return rc_affine(g, a, 1.0, c); }
rc_tensor *rc_neg(rc_graph *g, rc_tensor *a) { return rc_affine(g, a, -1.0, 0.0); }
rc_tensor *rc_exp(rc_graph *g, rc_tensor *a) { return unary(g, RC_OP_EXP, a); }
rc_tensor *rc_log(rc_graph *g, rc_tensor *a) { return unary(g, RC_OP_LOG, a); }
rc_tensor *rc_sqrt(rc_graph *g, rc_tensor *a) { return unary(g, RC_OP_SQRT, a); }
rc_tensor *rc_rsqrt(rc_graph *g, rc_tensor *a) { return unary(g, RC_OP_RSQRT, a); }
rc_tensor *rc_tanh(rc_graph *g, rc_tensor *a) { return unary(g, RC_OP_TANH, a); }

/* an ACT node: activation `act`'s derivative of order `order` of a, times m when m is not
 * NULL (redco.h) */
static rc_tensor *act_node(rc_graph *g, rc_tensor *a, rc_act_kind act, int order, rc_tensor *m)
{
    if ((unsigned)act >= RC_ACT_COUNT)
        return rci_fail(g, RC_ERR_ARG, "act: unknown activation %d", (int)act);
    if (order < 0 || order > 2)
        return rci_fail(g, RC_ERR_UNSUPPORTED,
                       "act: derivative order %d of activation %d (orders 0 to 2 exist)", order,
                       (int)act);
    rc_tensor *src[2] = {a, m};
    int n = m ? 2 : 1;
    if (rci_inputs_bad(g, n, src) || rci_float_input(g, "act", a))
        return NULL;
    rc_tensor *y = rci_node_new(g, RC_OP_ACT, a->dtype, a->ndim, a->shape, n, src);
    if (y) {
        y->iparam[0] = (int32_t)act;
        y->iparam[1] = order;
    }
    return m ? rci_node_checked(g, y) : y;
}

rc_tensor *rc_act(rc_graph *g, rc_tensor *a, rc_act_kind act, int order)
{
    return act_node(g, a, act, order, NULL);
}

rc_tensor *rci_act_times(rc_graph *g, rc_tensor *a, rc_act_kind act, int order, rc_tensor *m)
{
    return act_node(g, a, act, order, m);
}

rc_tensor *rc_relu(rc_graph *g, rc_tensor *a) { return rc_act(g, a, RC_ACT_RELU, 0); }
rc_tensor *rc_gelu(rc_graph *g, rc_tensor *a) { return rc_act(g, a, RC_ACT_GELU_TANH, 0); }
rc_tensor *rc_gelu_erf(rc_graph *g, rc_tensor *a) { return rc_act(g, a, RC_ACT_GELU_ERF, 0); }
rc_tensor *rc_silu(rc_graph *g, rc_tensor *a) { return rc_act(g, a, RC_ACT_SILU, 0); }
rc_tensor *rc_sigmoid(rc_graph *g, rc_tensor *a) { return rc_act(g, a, RC_ACT_SIGMOID, 0); }

rc_tensor *rc_where(rc_graph *g, rc_tensor *cond, rc_tensor *a, rc_tensor *b)
{
    rc_tensor *src[3] = {cond, a, b};
    if (rci_inputs_bad(g, 3, src) || rci_float_input(g, "where", a))
        return NULL;
    int n1, n2;
    int64_t s1[RC_MAX_DIMS], s2[RC_MAX_DIMS];
    if (rci_broadcast_shapes(g, "where", a, b, &n1, s1))
        return NULL;
    rc_tensor ab = {.ndim = n1};
    for (int i = 0; i < n1; i++)
        ab.shape[i] = s1[i];
    if (rci_broadcast_shapes(g, "where", cond, &ab, &n2, s2))
        return NULL;
    return rci_node_checked(g, rci_node_new(g, RC_OP_WHERE, a->dtype, n2, s2, 3, src));
}

rc_tensor *rc_equal(rc_graph *g, rc_tensor *a, rc_tensor *b)
{
    rc_tensor *src[2] = {a, b};
    if (rci_inputs_bad(g, 2, src))
        return NULL;
    if (a->dtype != RC_I32 && rci_float_input(g, "equal", a))
        return NULL;
    int ndim;
    int64_t shape[RC_MAX_DIMS];
    if (rci_broadcast_shapes(g, "equal", a, b, &ndim, shape))
        return NULL;
    rc_dtype t = a->dtype == RC_I32 ? RC_F32 : a->dtype;
    return rci_node_checked(g, rci_node_new(g, RC_OP_EQUAL, t, ndim, shape, 2, src));
}

rc_tensor *rc_cast(rc_graph *g, rc_tensor *a, rc_dtype t)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    int ok_from = (unsigned)a->dtype < RC_DTYPE_COUNT, ok_to = (unsigned)t < RC_DTYPE_COUNT;
    if (!ok_from || !ok_to)
        return rci_fail(g, RC_ERR_DTYPE, "cast: %s to %s is not supported (f32, f64, bf16, f16, i32)",
                       rc_dtype_name(a->dtype), rc_dtype_name(t));
    if (a->dtype == t)
        return a;
    return rci_node_new(g, RC_OP_CAST, t, a->ndim, a->shape, 1, &a);
}

rc_tensor *rc_dropout(rc_graph *g, rc_tensor *a, double p, rc_rng key)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    if (!(p >= 0.0 && p < 1.0))
        return rci_fail(g, RC_ERR_ARG, "dropout: probability %g outside [0, 1)", p);
    if (p == 0.0)
        return a;
    rc_tensor *y = unary(g, RC_OP_DROPOUT, a);
    if (y) {
        uint64_t k = rci_hash64(key.key ^ rci_hash64(key.counter));
        rci_node_set_key(y, 0, k);
        y->fparam[0] = p;
    }
    return y;
}
