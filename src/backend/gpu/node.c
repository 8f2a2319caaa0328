/* node.c - the bottom of the shared layer's node work: the kernels' names, how a node's
 * values are stored, the scratch device memory the kernels keep their temporaries in, a
 * node's memory as kernel arguments (places) and its shapes as boxes (node.h). It calls
 * the device only through g->ops. */
#include "node.h"

#include <math.h>

#include <string.h>

const char *const rci_gpu_kernel_names[RCI_K_COUNT] = {
    "k_fill", "k_unary", "k_act", "k_binary", "k_where", "k_equal", "k_copy", "k_cast_f32_i32",
    "k_cast_i32_f32", "k_reduce", "k_dropout", "k_adamw", "k_sgd", "k_accumulate", "k_sum_squares",
    "k_softmax", "k_layer_norm", "k_rms_norm", "k_check_ids", "k_embedding", "k_embedding_grad",
    "k_one_hot", "k_ce_rows", "k_ce_mean", "k_ce_scale", "k_ce_grad", "k_rope", "k_reduce_part",
    "k_reduce_finish", "k_cast", "k_matmul_rows", "k_conv2d", "k_conv2d_grad_input",
    "k_conv2d_grad_weight", "k_pool2d", "k_pool2d_grad", "k_normal", "k_attention_rows",
    "k_attention_rows_grad", "k_attention_dbias", "k_attention_fold", "k_attention_stats",
    "k_reduce_rows", "k_norm_grad", "k_attention_tile", "k_attention_tile_dq",
    "k_attention_tile_dkv", "k_binary_runs", "k_reduce_cols", "k_norm_wgrad",
};

int rci_gpu_is_tile_kernel(rci_gpu_kernel k)
{
    return k == RCI_K_ATTENTION_TILE || k == RCI_K_ATTENTION_TILE_DQ || k == RCI_K_ATTENTION_TILE_DKV;
}

int rci_gpu_kernel_absent(const rc_backend *be, rci_gpu_kernel k, rc_error *err)
{
    if (rci_gpu_is_tile_kernel(k))
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "%s: %s: the attention tile kernels are not built for this device (they "
                            "need a CUDA device of compute capability 8.0 or later, or an OpenCL "
                            "device with %d KB of local memory); use --attention products",
                            be->name, rci_gpu_kernel_names[k], RCI_GPU_TILE_LOCAL_BYTES / 1024);
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel %s is not built for this device", be->name,
                        rci_gpu_kernel_names[k]);
}

int rci_gpu_out_of_memory(const rc_backend *be, size_t bytes, const char *why, rc_error *err)
{
    return rc_error_set(err, RC_ERR_MEMORY,
                        "%s: cannot allocate %zu bytes (%zu in use of %zu): %s; try a smaller "
                        "batch or more model shards (--mp)",
                        be->name, bytes, be->used_bytes, be->total_bytes, why);
}

rc_dtype rci_gpu_storage(const rc_tensor *node)
{
    if (node->dtype == RC_BF16 || node->dtype == RC_F16)
        return node->dtype;
    for (int k = 0; k < node->nsrc; k++)
        if (node->src[k] && (node->src[k]->dtype == RC_BF16 || node->src[k]->dtype == RC_F16))
            return node->src[k]->dtype;
    return RC_F32;
}

/* ---- scratch ---------------------------------------------------------------------------- */

size_t rci_gpu_scratch_grown(size_t held, size_t need)
{
    return need > held ? need : held;
}

/* The scratch counts in the backend's used and peak bytes (the 16-bit products' f32
 * copies are device memory like any other), as the CPU's 16-bit scratch does. A larger
 * need frees the old memory and allocates exactly as much again. */
rci_gpu_mem rci_gpu_scratch(rci_gpu *g, size_t bytes, rc_error *err)
{
    if (rci_gpu_scratch_grown(g->scratch_bytes, bytes) == g->scratch_bytes) {
        if (!g->scratch) /* 0 bytes, none held: no memory to give */
            rc_error_set(err, RC_ERR_ARG, "%s: a kernel asked for 0 bytes of scratch before any was held "
                         "(a kernel with no temporaries takes none)", g->be.name);
        return g->scratch;
    }
    rci_gpu_scratch_free(g);
    rci_gpu_mem m = NULL;
    if (g->ops->mem_alloc(g, bytes, &m, "scratch memory for a kernel", err))
        return NULL;
    g->scratch = m;
    g->scratch_bytes = bytes;
    g->be.used_bytes += bytes;
    g->be.peak_bytes = g->be.used_bytes > g->be.peak_bytes ? g->be.used_bytes : g->be.peak_bytes;
    return g->scratch;
}

void rci_gpu_scratch_free(rci_gpu *g)
{
    if (g->scratch)
        g->ops->mem_free(g, g->scratch);
    g->be.used_bytes -= g->scratch_bytes;
    g->scratch = NULL;
    g->scratch_bytes = 0;
}

/* ---- places and boxes ---------------------------------------------------------------------- */

int rci_gpu_place_of(const rci_mem *m, const rc_tensor *node, rc_dtype t, rci_gpu_place *p, rc_error *err)
{
    size_t es = rc_dtype_size(t);
    if (!m->buf)
        return rc_error_set(err, RC_ERR_ARG, "%s: an input has no memory", rci_gpu_op_name(node));
    if (m->off % es)
        return rc_error_set(err, RC_ERR_ARG, "%s: %s memory at byte %zu is not %zu-byte aligned",
                            rci_gpu_op_name(node), rc_dtype_name(t), m->off, es);
    p->mem = rci_gpu_mem_of(m->buf);
    p->off = (int64_t)(m->off / es);
    return 0;
}

int rci_gpu_places(const rci_node_run *r, int nin, rci_gpu_place *out, rci_gpu_place *in, rc_error *err)
{
    if (rci_gpu_place_of(&r->out, r->node, r->node->dtype, out, err))
        return -1;
    for (int k = 0; k < nin; k++)
        if (rci_gpu_place_of(&r->in[k], r->node, r->node->src[k]->dtype, &in[k], err))
            return -1;
    return 0;
}

int rci_gpu_optional_place(const rci_node_run *r, int k, const rci_gpu_place *out, rci_gpu_place *p,
                           int32_t *has, rc_error *err)
{
    *has = k < r->node->nsrc && r->node->src[k];
    if (!*has) {
        *p = *out;
        return 0;
    }
    return rci_gpu_place_of(&r->in[k], r->node, r->node->src[k]->dtype, p, err);
}

void rci_gpu_box_make(rci_gpu_box *b, int nd, const int64_t *shape, int k, int64_t st[][RC_MAX_DIMS])
{
    int64_t mshape[RC_MAX_DIMS], mst[3][RC_MAX_DIMS];
    memset(b, 0, sizeof *b);
    b->nd = rci_merge_axes(nd, shape, k, st, mshape, mst);
    memcpy(b->shape, mshape, sizeof mshape);
    for (int j = 0; j < k; j++)
        memcpy(b->st[j], mst[j], sizeof mst[j]);
}

void rci_gpu_bcast_box(const rc_tensor *node, int nin, rci_gpu_box *b)
{
    int64_t st[3][RC_MAX_DIMS];
    for (int k = 0; k < nin; k++)
        rci_bcast_strides(node->src[k], node->ndim, node->shape, st[k]);
    rci_gpu_box_make(b, node->ndim, node->shape, nin, st);
}

/* ---- f32 temporaries ------------------------------------------------------------------------ */

size_t rci_gpu_f32_temps_scratch(const rc_tensor *node, int64_t skip, int64_t n)
{
    return rci_gpu_storage(node) == RC_F32 ? 0 : (size_t)(skip + n) * sizeof(float);
}

int rci_gpu_f32_temps(rci_gpu *g, const rc_tensor *node, const rci_gpu_place *out, int64_t skip, int64_t n,
                      rci_gpu_place *tmp, rc_error *err)
{
    if (!rci_gpu_f32_temps_scratch(node, skip, n)) {
        *tmp = *out;
        return 0;
    }
    rci_gpu_mem m = rci_gpu_scratch(g, rci_gpu_f32_temps_scratch(node, skip, n), err);
    if (!m)
        return -1;
    tmp->mem = m;
    tmp->off = skip;
    return 0;
}

/* ---- dropout masks -------------------------------------------------------------------------- */

rci_gpu_mask rci_gpu_mask_of(const rci_node_run *r, int at, double p)
{
    const rc_tensor *node = r->node;
    rci_gpu_mask m;
    m.key = rci_node_key(node, at);
    m.key ^= rci_hash64(r->run_key);
    m.thresh = rci_drop_thresh(p);
    m.keep = p < 1 ? (float)(1 / (1 - p)) : 0;
    return m;
}
