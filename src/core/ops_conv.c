/* ops_conv.c - builders of 2-D convolution and pooling (NCHW) and of their gradients.
 * The node's iparam holds the geometry (see RC_OP_CONV2D and RC_OP_POOL2D in redco.h). */
#include "internal.h"

/* The geometry with defaults filled in: zero stride, dilation, groups mean 1. */
static rc_conv2d_params conv_params(const rc_conv2d_params *p)
{
    rc_conv2d_params q = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (!p)
        return q;
    for (int i = 0; i < 2; i++) {
        q.stride[i] = p->stride[i] ? p->stride[i] : 1;
        q.padding[i] = p->padding[i];
        q.dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
    }
    q.groups = p->groups ? p->groups : 1;
    return q;
}

static int conv_params_check(rc_graph *g, const char *op, const rc_conv2d_params *q)
{
    for (int i = 0; i < 2; i++)
        if (q->stride[i] < 1 || q->padding[i] < 0 || q->dilation[i] < 1) {
            rci_fail(g, RC_ERR_ARG, "%s: stride %d, padding %d, dilation %d on axis %s (need >= 1, >= 0, >= 1)",
                     op, q->stride[i], q->padding[i], q->dilation[i], i ? "w" : "h");
            return -1;
        }
    if (q->groups < 1) {
        rci_fail(g, RC_ERR_ARG, "%s: groups %d (need >= 1)", op, q->groups);
        return -1;
    }
    return 0;
}

static void conv_store(rc_tensor *y, const rc_conv2d_params *q)
{
    y->iparam[0] = q->stride[0], y->iparam[1] = q->stride[1];
    y->iparam[2] = q->padding[0], y->iparam[3] = q->padding[1];
    y->iparam[4] = q->dilation[0], y->iparam[5] = q->dilation[1];
    y->iparam[6] = q->groups;
}

static int four_d(rc_graph *g, const char *op, const char *what, const rc_tensor *t)
{
    if (t->ndim == 4)
        return 0;
    char s[96];
    rci_fail(g, RC_ERR_SHAPE, "%s: %s %s must have 4 dimensions (NCHW)", op, what,
             rc_shape_str(t, s, sizeof s));
    return -1;
}

static int same_dtype(rc_graph *g, const char *op, const rc_tensor *a, const rc_tensor *b)
{
    if (a->dtype == b->dtype)
        return 0;
    rci_fail(g, RC_ERR_DTYPE, "%s: dtypes %s and %s differ", op, rc_dtype_name(a->dtype),
             rc_dtype_name(b->dtype));
    return -1;
}

/* x [N, C, H, W] against weight [O, C/groups, KH, KW]: channels and groups agree */
static int conv_channels(rc_graph *g, const char *op, int64_t c, const rc_tensor *w, int groups,
                         const char *xs)
{
    char sw[96];
    if (c % groups || w->shape[0] % groups || w->shape[1] * groups != c) {
        rci_fail(g, RC_ERR_SHAPE, "%s: input %s and weight %s do not fit groups %d (need C and O "
                 "divisible by groups, weight [O, C/groups, KH, KW])", op, xs,
                 rc_shape_str(w, sw, sizeof sw), groups);
        return -1;
    }
    return 0;
}

rc_tensor *rc_conv2d(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *bias,
                     const rc_conv2d_params *p)
{
    const char *op = "conv2d";
    rc_tensor *src[3] = {x, w, bias};
    rc_conv2d_params q = conv_params(p);
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, op, x) || same_dtype(g, op, x, w) ||
        four_d(g, op, "input", x) || four_d(g, op, "weight", w) || conv_params_check(g, op, &q))
        return NULL;
    char sx[96], sb[96];
    rc_shape_str(x, sx, sizeof sx);
    if (conv_channels(g, op, x->shape[1], w, q.groups, sx))
        return NULL;
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0] || bias->dtype != x->dtype))
        return rci_fail(g, RC_ERR_SHAPE, "conv2d: bias %s %s does not fit %lld output channels (need [%lld] %s)",
                        rc_shape_str(bias, sb, sizeof sb), rc_dtype_name(bias->dtype),
                        (long long)w->shape[0], (long long)w->shape[0], rc_dtype_name(x->dtype));
    int64_t oh = rci_conv_out_size(x->shape[2], w->shape[2], q.stride[0], q.padding[0], q.dilation[0]);
    int64_t ow = rci_conv_out_size(x->shape[3], w->shape[3], q.stride[1], q.padding[1], q.dilation[1]);
    if (oh < 1 || ow < 1 || w->shape[2] < 1 || w->shape[3] < 1) {
        char sw[96];
        return rci_fail(g, RC_ERR_SHAPE, "conv2d: kernel of weight %s (dilation %d, %d) does not fit "
                        "input %s padded by %d, %d", rc_shape_str(w, sw, sizeof sw), q.dilation[0],
                        q.dilation[1], sx, q.padding[0], q.padding[1]);
    }
    int64_t shape[4] = {x->shape[0], w->shape[0], oh, ow};
    rc_tensor *y = rci_node_new(g, RC_OP_CONV2D, x->dtype, 4, shape, bias ? 3 : 2, src);
    if (y)
        conv_store(y, &q);
    return y;
}

/* gy [N, O, OH, OW] must be the output of a convolution of an input [N, C, h, w] by a
 * weight [O, C/groups, kh, kw] */
static int conv_grad_check(rc_graph *g, const char *op, const rc_tensor *gy, int64_t n, int64_t c,
                           int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                           const rc_conv2d_params *q)
{
    int64_t oh = rci_conv_out_size(h, kh, q->stride[0], q->padding[0], q->dilation[0]);
    int64_t ow = rci_conv_out_size(w, kw, q->stride[1], q->padding[1], q->dilation[1]);
    if (gy->shape[0] == n && gy->shape[1] == o && gy->shape[2] == oh && gy->shape[3] == ow &&
        oh >= 1 && ow >= 1 && c % q->groups == 0 && o % q->groups == 0)
        return 0;
    char s[96];
    rci_fail(g, RC_ERR_SHAPE, "%s: upstream gradient %s is not the output of input [%lld, %lld, %lld, %lld] "
             "and weight [%lld, %lld, %lld, %lld] (groups %d; expected [%lld, %lld, %lld, %lld])", op,
             rc_shape_str(gy, s, sizeof s), (long long)n, (long long)c, (long long)h, (long long)w,
             (long long)o, (long long)(q->groups ? c / q->groups : c), (long long)kh, (long long)kw,
             q->groups, (long long)n, (long long)o, (long long)oh, (long long)ow);
    return -1;
}

rc_tensor *rc_conv2d_grad_input(rc_graph *g, rc_tensor *gy, rc_tensor *w, int64_t h, int64_t wd,
                                const rc_conv2d_params *p)
{
    const char *op = "conv2d_grad_input";
    rc_tensor *src[2] = {gy, w};
    rc_conv2d_params q = conv_params(p);
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, op, gy) || same_dtype(g, op, gy, w) ||
        four_d(g, op, "upstream gradient", gy) || four_d(g, op, "weight", w) ||
        conv_params_check(g, op, &q))
        return NULL;
    int64_t c = w->shape[1] * q.groups;
    if (conv_grad_check(g, op, gy, gy->shape[0], c, h, wd, w->shape[0], w->shape[2], w->shape[3], &q))
        return NULL;
    int64_t shape[4] = {gy->shape[0], c, h, wd};
    rc_tensor *y = rci_node_new(g, RC_OP_CONV2D_GRAD_INPUT, gy->dtype, 4, shape, 2, src);
    if (y)
        conv_store(y, &q);
    return y;
}

rc_tensor *rc_conv2d_grad_weight(rc_graph *g, rc_tensor *gy, rc_tensor *x, int64_t kh, int64_t kw,
                                 const rc_conv2d_params *p)
{
    const char *op = "conv2d_grad_weight";
    rc_tensor *src[2] = {gy, x};
    rc_conv2d_params q = conv_params(p);
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, op, gy) || same_dtype(g, op, gy, x) ||
        four_d(g, op, "upstream gradient", gy) || four_d(g, op, "input", x) ||
        conv_params_check(g, op, &q))
        return NULL;
    if (kh < 1 || kw < 1)
        return rci_fail(g, RC_ERR_SHAPE, "%s: kernel %lld x %lld", op, (long long)kh, (long long)kw);
    if (conv_grad_check(g, op, gy, x->shape[0], x->shape[1], x->shape[2], x->shape[3], gy->shape[1],
                        kh, kw, &q))
        return NULL;
    int64_t shape[4] = {gy->shape[1], x->shape[1] / q.groups, kh, kw};
    rc_tensor *y = rci_node_new(g, RC_OP_CONV2D_GRAD_WEIGHT, gy->dtype, 4, shape, 2, src);
    if (y)
        conv_store(y, &q);
    return y;
}

/* ---- pooling ---------------------------------------------------------------------------- */

static int pool_check(rc_graph *g, const char *op, const rc_tensor *x, rc_pool_kind kind,
                      const rc_pool2d_params *p, int64_t *oh, int64_t *ow)
{
    if (rci_float_input(g, op, x) || four_d(g, op, "input", x))
        return -1;
    if (!p || (kind != RC_POOL_MAX && kind != RC_POOL_AVG)) {
        rci_fail(g, RC_ERR_ARG, "%s: no parameters or unknown kind %d", op, (int)kind);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        int k = p->kernel[i], s = p->stride[i] ? p->stride[i] : k, pad = p->padding[i];
        if (k < 1 || s < 1 || pad < 0 || 2 * pad > k) {
            rci_fail(g, RC_ERR_ARG, "%s: kernel %d, stride %d, padding %d on axis %s (need kernel >= 1, "
                     "stride >= 1, 0 <= padding <= kernel / 2)", op, k, s, pad, i ? "w" : "h");
            return -1;
        }
    }
    *oh = rci_conv_out_size(x->shape[2], p->kernel[0], p->stride[0] ? p->stride[0] : p->kernel[0], p->padding[0], 1);
    *ow = rci_conv_out_size(x->shape[3], p->kernel[1], p->stride[1] ? p->stride[1] : p->kernel[1], p->padding[1], 1);
    if (*oh < 1 || *ow < 1) {
        char s[96];
        rci_fail(g, RC_ERR_SHAPE, "%s: kernel %d x %d does not fit input %s padded by %d, %d", op,
                 p->kernel[0], p->kernel[1], rc_shape_str(x, s, sizeof s), p->padding[0], p->padding[1]);
        return -1;
    }
    return 0;
}

static void pool_store(rc_tensor *y, rc_pool_kind kind, const rc_pool2d_params *p)
{
    y->iparam[0] = (int32_t)kind;
    for (int i = 0; i < 2; i++) {
        y->iparam[1 + i] = p->kernel[i];
        y->iparam[3 + i] = p->stride[i] ? p->stride[i] : p->kernel[i];
        y->iparam[5 + i] = p->padding[i];
    }
}

static rc_tensor *pool2d(rc_graph *g, rc_tensor *x, rc_pool_kind kind, const rc_pool2d_params *p)
{
    const char *op = kind == RC_POOL_MAX ? "max_pool2d" : "avg_pool2d";
    int64_t oh, ow;
    if (rci_inputs_bad(g, 1, &x) || pool_check(g, op, x, kind, p, &oh, &ow))
        return NULL;
    int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
    rc_tensor *y = rci_node_new(g, RC_OP_POOL2D, x->dtype, 4, shape, 1, &x);
    if (y)
        pool_store(y, kind, p);
    return y;
}

rc_tensor *rc_max_pool2d(rc_graph *g, rc_tensor *x, const rc_pool2d_params *p)
{
    return pool2d(g, x, RC_POOL_MAX, p);
}

rc_tensor *rc_avg_pool2d(rc_graph *g, rc_tensor *x, const rc_pool2d_params *p)
{
    return pool2d(g, x, RC_POOL_AVG, p);
}

rc_tensor *rc_pool2d_grad(rc_graph *g, rc_tensor *gy, rc_tensor *x, rc_pool_kind kind,
                          const rc_pool2d_params *p)
{
    const char *op = "pool2d_grad";
    rc_tensor *src[2] = {gy, x};
    int64_t oh, ow;
    if (rci_inputs_bad(g, 2, src) || pool_check(g, op, x, kind, p, &oh, &ow) || same_dtype(g, op, gy, x) ||
        four_d(g, op, "upstream gradient", gy))
        return NULL;
    if (gy->shape[0] != x->shape[0] || gy->shape[1] != x->shape[1] || gy->shape[2] != oh ||
        gy->shape[3] != ow) {
        char sg[96], sx[96];
        return rci_fail(g, RC_ERR_SHAPE, "%s: upstream gradient %s is not the pooling of input %s "
                        "(expected [%lld, %lld, %lld, %lld])", op, rc_shape_str(gy, sg, sizeof sg),
                        rc_shape_str(x, sx, sizeof sx), (long long)x->shape[0], (long long)x->shape[1],
                        (long long)oh, (long long)ow);
    }
    rc_tensor *y = rci_node_new(g, RC_OP_POOL2D_GRAD, x->dtype, 4, x->shape, 2, src);
    if (y)
        pool_store(y, kind, p);
    return y;
}
