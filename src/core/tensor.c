/* tensor.c - dtypes, sizes, shape helpers and error recording. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtype_info[RC_DTYPE_COUNT] = {
    [RC_F32] = {"f32", 4, 1},
    [RC_F64] = {"f64", 8, 1},
    [RC_I32] = {"i32", 4, 0},
    [RC_BF16] = {"bf16", 2, 1},
    [RC_F16] = {"f16", 2, 1},
};

size_t rc_dtype_size(rc_dtype t)
{
    return (unsigned)t < RC_DTYPE_COUNT ? dtype_info[t].size : 0;
}

const char *rc_dtype_name(rc_dtype t)
{
    return (unsigned)t < RC_DTYPE_COUNT ? dtype_info[t].name : "?";
}

int rc_dtype_is_float(rc_dtype t)
{
    return (unsigned)t < RC_DTYPE_COUNT && dtype_info[t].is_float;
}

int rci_dtype_is_half(rc_dtype t)
{
    return t == RC_BF16 || t == RC_F16;
}

rc_dtype rci_compute_dtype(rc_dtype t)
{
    return rci_dtype_is_half(t) ? RC_F32 : t;
}

int64_t rci_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int64_t rc_tensor_numel(const rc_tensor *t)
{
    return rci_shape_numel(t->ndim, t->shape);
}

size_t rc_tensor_nbytes(const rc_tensor *t)
{
    return (size_t)rc_tensor_numel(t) * rc_dtype_size(t->dtype);
}

/* ---- what a node keeps beside its values: an ATTENTION's, for its backward ---------------- */

enum { KEPT_ALIGN = 64 }; /* bytes: where the log-sum-exps start, as the arena places blocks (plan.c) */

size_t rci_attention_lse_at(const rc_tensor *att)
{
    if (!rci_dtype_is_half(att->dtype))
        return 0;
    size_t n = (size_t)rc_tensor_numel(att) * sizeof(float);
    return (n + KEPT_ALIGN - 1) / KEPT_ALIGN * KEPT_ALIGN;
}

const rc_tensor *rci_kept_of(const rc_tensor *t)
{
    return t->op == RC_OP_ATTENTION_STATS && t->nsrc > 0 && t->src[0] ? t->src[0] : t;
}

size_t rci_kept_bytes(const rc_tensor *t)
{
    if (t->op != RC_OP_ATTENTION || t->ndim != 4)
        return 0;
    size_t rows = (size_t)(t->shape[0] * t->shape[1] * t->shape[2]);
    return rci_attention_lse_at(t) + rows * rc_dtype_size(rci_compute_dtype(t->dtype));
}

int rci_same_shape(const rc_tensor *a, const rc_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

char *rc_shape_str(const rc_tensor *t, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                                 (long long)t->shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

static const char *op_names[RC_OP_COUNT] = {
    [RC_OP_LEAF] = "leaf", [RC_OP_FULL] = "full", [RC_OP_ADD] = "add", [RC_OP_SUB] = "sub",
    [RC_OP_MUL] = "mul", [RC_OP_DIV] = "div", [RC_OP_AFFINE] = "affine", [RC_OP_EXP] = "exp",
    [RC_OP_LOG] = "log", [RC_OP_SQRT] = "sqrt", [RC_OP_RSQRT] = "rsqrt", [RC_OP_TANH] = "tanh",
    [RC_OP_ACT] = "act", [RC_OP_MATMUL] = "matmul", [RC_OP_SOFTMAX] = "softmax",
    [RC_OP_LAYER_NORM] = "layer_norm", [RC_OP_RMS_NORM] = "rms_norm",
    [RC_OP_EMBEDDING] = "embedding", [RC_OP_EMBEDDING_GRAD] = "embedding_grad",
    [RC_OP_ROPE] = "rope", [RC_OP_RESHAPE] = "reshape", [RC_OP_PERMUTE] = "permute",
    [RC_OP_SLICE] = "slice", [RC_OP_PAD] = "pad", [RC_OP_CONCAT] = "concat", [RC_OP_SUM] = "sum",
    [RC_OP_MAX] = "max", [RC_OP_EXPAND] = "expand", [RC_OP_SUM_TO] = "sum_to",
    [RC_OP_CROSS_ENTROPY] = "cross_entropy", [RC_OP_ONE_HOT] = "one_hot",
    [RC_OP_DROPOUT] = "dropout", [RC_OP_WHERE] = "where", [RC_OP_CAST] = "cast",
    [RC_OP_EQUAL] = "equal", [RC_OP_CROSS_ENTROPY_GRAD] = "cross_entropy_grad",
    [RC_OP_STOP_GRADIENT] = "stop_gradient", [RC_OP_MP_ENTER] = "mp_enter",
    [RC_OP_MP_REDUCE] = "mp_reduce", [RC_OP_MP_MAX] = "mp_max", [RC_OP_CONV2D] = "conv2d",
    [RC_OP_CONV2D_GRAD_INPUT] = "conv2d_grad_input", [RC_OP_CONV2D_GRAD_WEIGHT] = "conv2d_grad_weight",
    [RC_OP_POOL2D] = "pool2d", [RC_OP_POOL2D_GRAD] = "pool2d_grad", [RC_OP_NORMAL] = "normal",
    [RC_OP_ATTENTION] = "attention", [RC_OP_ATTENTION_STATS] = "attention_stats",
    [RC_OP_ATTENTION_GRAD] = "attention_grad", [RC_OP_NORM_GRAD] = "norm_grad",
};

const char *rc_op_name(rc_op op)
{
    return (unsigned)op < RC_OP_COUNT && op_names[op] ? op_names[op] : "unknown-op";
}

int rci_error_prefix(rc_error *err, const char *fmt, ...)
{
    if (err) {
        char msg[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        size_t at = n < 0 ? 0 : (size_t)n < sizeof msg - 3 ? (size_t)n : sizeof msg - 3;
        memcpy(msg + at, ": ", 3);
        size_t room = sizeof msg - at - 3;
        memcpy(msg + at + 2, err->msg, strnlen(err->msg, room));
        msg[at + 2 + strnlen(err->msg, room)] = 0;
        memcpy(err->msg, msg, sizeof msg);
    }
    return -1;
}

int rc_error_set(rc_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
