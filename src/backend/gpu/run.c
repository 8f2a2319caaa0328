/* run.c - the top of the shared layer's node work: which ops a device runs (supports), one
 * node's run (the dispatch to ops_elementwise.c and ops_rows.c), the scratch a node takes,
 * and the rc_backend entries of both device backends (rci_gpu_table_fill), with
 * update.c's optimizer work. The node's structure was checked with its plan
 * (rci_node_check); a run checks only where its memory is and the values that must be in
 * range (ids). */
#include "node.h"

/* Every op that computes runs on f32, bf16 and f16 values (16-bit ones through the
 * programs built for their storage); movement ops and casts on i32 too. */
static int gpu_supports(const rc_backend *be, rc_op op, rc_dtype t)
{
    int real = t == RC_F32 || t == RC_BF16 || t == RC_F16;
    switch (op) {
    case RC_OP_ROPE:   /* angles in double */
        return real && ((const rci_gpu *)(const void *)be)->fp64;
    case RC_OP_LEAF:
    case RC_OP_RESHAPE:
    case RC_OP_STOP_GRADIENT:
    case RC_OP_MP_ENTER:
        return 1;
    case RC_OP_PERMUTE:
    case RC_OP_SLICE:
    case RC_OP_PAD:
    case RC_OP_CONCAT:
    case RC_OP_EXPAND:
    case RC_OP_CAST:
        return real || t == RC_I32;
    case RC_OP_FULL:
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV:
    case RC_OP_AFFINE:
    case RC_OP_EXP:
    case RC_OP_LOG:
    case RC_OP_SQRT:
    case RC_OP_RSQRT:
    case RC_OP_TANH:
    case RC_OP_ACT:
    case RC_OP_MATMUL:
    case RC_OP_SUM:
    case RC_OP_MAX:
    case RC_OP_SUM_TO:
    case RC_OP_SOFTMAX:
    case RC_OP_LAYER_NORM:
    case RC_OP_RMS_NORM:
    case RC_OP_NORM_GRAD:
    case RC_OP_EMBEDDING:
    case RC_OP_EMBEDDING_GRAD:
    case RC_OP_ONE_HOT:
    case RC_OP_CROSS_ENTROPY:
    case RC_OP_CROSS_ENTROPY_GRAD:
    case RC_OP_DROPOUT:
    case RC_OP_NORMAL:
    case RC_OP_WHERE:
    case RC_OP_EQUAL:
    case RC_OP_CONV2D:
    case RC_OP_CONV2D_GRAD_INPUT:
    case RC_OP_CONV2D_GRAD_WEIGHT:
    case RC_OP_POOL2D:
    case RC_OP_POOL2D_GRAD:
    case RC_OP_ATTENTION:
    case RC_OP_ATTENTION_STATS:
    case RC_OP_ATTENTION_GRAD:
        return real;
    default:
        return 0;
    }
}

/* the scratch held after running node (backend.h's scratch_bytes) */
static size_t gpu_scratch_bytes(const rc_backend *be, const rc_tensor *node, size_t held)
{
    return rci_gpu_scratch_grown(held, rci_gpu_node_scratch((const rci_gpu *)(const void *)be, node));
}

static int gpu_run_node(rc_backend *be, const rci_node_run *r, rc_error *err)
{
    rci_gpu *g = (rci_gpu *)(void *)be;
    const rc_tensor *node = r->node;
    if (node->op == RC_OP_LEAF || node->op == RC_OP_RESHAPE || node->view_src)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: leaves and views have no kernel",
                            rci_gpu_op_name(node));
    if (!gpu_supports(be, node->op, node->dtype))
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", rci_gpu_op_name(node),
                            be->name, rc_dtype_name(node->dtype));
    if (rc_tensor_numel(node) == 0)
        return 0;
    if (rci_gpu_is_move(node->op) || node->op == RC_OP_CAST)
        return rci_gpu_run_move(g, r, err);
    switch (node->op) {
    case RC_OP_FULL: return rci_gpu_run_full(g, r, err);
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV: return rci_gpu_run_binary(g, r, err);
    case RC_OP_ACT: return rci_gpu_run_act(g, r, err);
    case RC_OP_MATMUL: return rci_gpu_run_matmul(g, r, err);
    case RC_OP_SUM:
    case RC_OP_MAX: return rci_gpu_run_reduce(g, r, err);
    case RC_OP_SUM_TO: return rci_gpu_run_sum_to(g, r, err);
    case RC_OP_SOFTMAX: return rci_gpu_run_softmax(g, r, err);
    case RC_OP_LAYER_NORM: return rci_gpu_run_layer_norm(g, r, err);
    case RC_OP_RMS_NORM: return rci_gpu_run_rms_norm(g, r, err);
    case RC_OP_NORM_GRAD: return rci_gpu_run_norm_grad(g, r, err);
    case RC_OP_EMBEDDING: return rci_gpu_run_embedding(g, r, err);
    case RC_OP_EMBEDDING_GRAD: return rci_gpu_run_embedding_grad(g, r, err);
    case RC_OP_ONE_HOT: return rci_gpu_run_one_hot(g, r, err);
    case RC_OP_CROSS_ENTROPY: return rci_gpu_run_cross_entropy(g, r, err);
    case RC_OP_CROSS_ENTROPY_GRAD: return rci_gpu_run_cross_entropy_grad(g, r, err);
    case RC_OP_ROPE: return rci_gpu_run_rope(g, r, err);
    case RC_OP_DROPOUT: return rci_gpu_run_dropout(g, r, err);
    case RC_OP_NORMAL: return rci_gpu_run_normal(g, r, err);
    case RC_OP_WHERE: return rci_gpu_run_where(g, r, err);
    case RC_OP_EQUAL: return rci_gpu_run_equal(g, r, err);
    case RC_OP_CONV2D:
    case RC_OP_CONV2D_GRAD_INPUT:
    case RC_OP_CONV2D_GRAD_WEIGHT: return rci_gpu_run_conv2d(g, r, err);
    case RC_OP_POOL2D:
    case RC_OP_POOL2D_GRAD: return rci_gpu_run_pool2d(g, r, err);
    case RC_OP_ATTENTION:
    case RC_OP_ATTENTION_STATS:
    case RC_OP_ATTENTION_GRAD: return rci_gpu_run_attention(g, r, err);
    default: return rci_gpu_run_unary(g, r, err);   /* AFFINE, EXP, LOG, SQRT, RSQRT, TANH */
    }
}

/* device memory: the collectives stage through host memory */
static void *gpu_host_address(const rc_backend *be, const rc_buffer *b, size_t off)
{
    (void)be, (void)b, (void)off;
    return NULL;
}

/* the buffer entries that are the device's ops as they are: freeing, reading back, zeroing */
static void gpu_buffer_free(rc_backend *be, rc_buffer *b)
{
    rci_gpu *g = (rci_gpu *)(void *)be;
    if (b->impl)
        g->ops->mem_free(g, b->impl);
}

static int gpu_download(rc_backend *be, const rc_buffer *b, size_t off, void *host, size_t bytes, rc_error *err)
{
    rci_gpu *g = (rci_gpu *)(void *)be;
    return g->ops->read(g, b->impl, off, host, bytes, err);
}

static int gpu_fill_zero(rc_backend *be, rc_buffer *b, size_t off, size_t bytes, rc_error *err)
{
    rci_gpu *g = (rci_gpu *)(void *)be;
    unsigned char z = 0;
    return bytes ? g->ops->fill(g, b->impl, off, &z, 1, bytes, err) : 0;
}

void rci_gpu_table_fill(rci_gpu *g)
{
    rc_backend *be = &g->be;
    be->buffer_free = gpu_buffer_free;
    be->download = gpu_download;
    be->fill_zero = gpu_fill_zero;
    be->supports = gpu_supports;
    be->run_node = gpu_run_node;
    be->scratch_bytes = gpu_scratch_bytes;
    be->update = rci_gpu_update;
    be->sum_squares = rci_gpu_sum_squares;
    be->accumulate = rci_gpu_accumulate;
    be->round_f32 = rci_gpu_round_f32;
    be->host_address = gpu_host_address;
}
