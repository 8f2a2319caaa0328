/* ops_elementwise.c - the shared layer's element-wise nodes (fill, unary maps, activations,
 * broadcast binary ops, where, equal), data movement and casts (permute, slice, pad,
 * concat, expand as strided box copies), and the random draws (dropout, normal), each one
 * kernel of kernels.cl (or a copy / fill of the backend's table) launched through g->ops.
 *
 * 16-bit values (bf16, f16) run the kernels of the program built for their storage: loads
 * widen to f32, stores round once, so a 16-bit node computes as the f32 kernel on widened
 * inputs, the CPU's rule (src/backend/cpu/kernels_half.c). */
#include "node.h"


/* ---- element-wise ------------------------------------------------------------------------ */

int rci_gpu_run_full(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    rci_gpu_place out = {0};
    if (rci_gpu_place_of(&r->out, r->node, r->node->dtype, &out, err))
        return -1;
    int64_t n = rc_tensor_numel(r->node);
    float v = (float)r->node->fparam[0];
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(n), ARG(v)};
    return rci_gpu_launch_node(g, r->node, RCI_K_FILL, a, 4, rci_gpu_ew_items(n), "full", err);
}

int rci_gpu_run_unary(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}};
    if (rci_gpu_places(r, 1, &out, in, err))
        return -1;
    int64_t n = rc_tensor_numel(node);
    int32_t op = node->op == RC_OP_AFFINE ? 0 : node->op == RC_OP_EXP ? 1 : node->op == RC_OP_LOG ? 2
              : node->op == RC_OP_SQRT ? 3 : node->op == RC_OP_RSQRT ? 4 : 5;
    float s = (float)node->fparam[0], c = (float)node->fparam[1];
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n), ARG(op),
                       ARG(s), ARG(c)};
    return rci_gpu_launch_node(g, node, RCI_K_UNARY, a, 8, rci_gpu_ew_runs(n), rci_gpu_op_name(node), err);
}

int rci_gpu_run_act(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int32_t has_m = node->nsrc > 1 && node->src[1];   /* times a multiplier (redco.h) */
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, has_m ? 2 : 1, &out, in, err))
        return -1;
    if (!has_m)
        in[1] = in[0];
    int32_t kind = node->iparam[0], order = node->iparam[1];
    int64_t n = rc_tensor_numel(node);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n),     ARG(kind),
                       ARG(order),   ARG(in[1].mem), ARG(in[1].off), ARG(has_m)};
    return rci_gpu_launch_node(g, node, RCI_K_ACT, a, 10, rci_gpu_ew_runs(n), "act", err);
}

/* How input k of a binary op's box b reads for k_binary_runs: 0 contiguous, 1 one row of
 * the box's innermost axis read again for every row, -1 neither */
static int binary_run_kind(const rci_gpu_box *b, int k)
{
    if (b->nd == 1)
        return b->st[k][0] == 1 ? 0 : -1;
    if (b->nd != 2 || b->st[k][1] != 1)
        return -1;
    return b->st[k][0] == b->shape[1] ? 0 : b->st[k][0] == 0 ? 1 : -1;
}

/* a binary op whose inputs are each contiguous or a row of a multiple of RCI_GPU_EW_RUN
 * values (a bias) in runs of 16 bytes (k_binary_runs); 1 when b is not such a box */
static int binary_runs(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                       const rci_gpu_box *b, int32_t op, rc_error *err)
{
    int32_t ka = binary_run_kind(b, 0), kb = binary_run_kind(b, 1);
    int64_t n = rc_tensor_numel(r->node), c = b->nd == 2 ? b->shape[1] : 0;
    if (ka < 0 || kb < 0 || ((ka || kb) && c % RCI_GPU_EW_RUN))
        return 1;
    rci_gpu_arg a[] = {ARG(out->mem),  ARG(out->off),  ARG(in[0].mem), ARG(in[0].off), ARG(ka), ARG(in[1].mem),
                       ARG(in[1].off), ARG(kb), ARG(n), ARG(c), ARG(op)};
    return rci_gpu_launch_node(g, r->node, RCI_K_BINARY_RUNS, a, 11, rci_gpu_ew_runs(n), rci_gpu_op_name(r->node),
                               err);
}

int rci_gpu_run_binary(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    rci_gpu_box b;
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    rci_gpu_bcast_box(node, 2, &b);
    int runs = binary_runs(g, r, &out, in, &b, node->op - RC_OP_ADD, err);
    if (runs <= 0)
        return runs;
    int64_t n = rc_tensor_numel(node);
    int32_t op = node->op - RC_OP_ADD, nd = b.nd;   /* ADD, SUB, MUL, DIV in order */
    rci_gpu_long8 shape = rci_gpu_long8_of(b.shape), sa = rci_gpu_long8_of(b.st[0]),
                  sb = rci_gpu_long8_of(b.st[1]);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(n), ARG(op), ARG(nd), ARG(shape), ARG(sa), ARG(sb)};
    return rci_gpu_launch_node(g, node, RCI_K_BINARY, a, 12, rci_gpu_ew_items(n), rci_gpu_op_name(node), err);
}

/* src0 cond (f32 or i32, nonzero = true), src1 a, src2 b */
int rci_gpu_run_where(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int32_t cond_i32 = node->src[0]->dtype == RC_I32;
    rci_gpu_place out = {0}, in[3] = {{0}};
    rci_gpu_box b;
    if (rci_gpu_places(r, 3, &out, in, err))
        return -1;
    rci_gpu_bcast_box(node, 3, &b);
    int64_t n = rc_tensor_numel(node);
    int32_t nd = b.nd;
    rci_gpu_long8 shape = rci_gpu_long8_of(b.shape), sc = rci_gpu_long8_of(b.st[0]),
                  sa = rci_gpu_long8_of(b.st[1]), sb = rci_gpu_long8_of(b.st[2]);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(in[2].mem), ARG(in[2].off), ARG(n), ARG(cond_i32),
                       ARG(nd), ARG(shape), ARG(sc), ARG(sa), ARG(sb)};
    return rci_gpu_launch_node(g, node, RCI_K_WHERE, a, 15, (size_t)n, "where", err);
}

/* src0 and src1 both f32 or both i32 */
int rci_gpu_run_equal(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int32_t is_i32 = node->src[0]->dtype == RC_I32;
    rci_gpu_place out = {0}, in[2] = {{0}};
    rci_gpu_box b;
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    rci_gpu_bcast_box(node, 2, &b);
    int64_t n = rc_tensor_numel(node);
    int32_t nd = b.nd;
    rci_gpu_long8 shape = rci_gpu_long8_of(b.shape), sa = rci_gpu_long8_of(b.st[0]),
                  sb = rci_gpu_long8_of(b.st[1]);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(n), ARG(is_i32), ARG(nd), ARG(shape), ARG(sa), ARG(sb)};
    return rci_gpu_launch_node(g, node, RCI_K_EQUAL, a, 12, (size_t)n, "equal", err);
}

/* ---- data movement --------------------------------------------------------------------------- */

enum { COPY_RUN = 8 };   /* 16-bit elements a work-item of k_copy moves along a contiguous innermost axis */

int rci_gpu_copy_box(rci_gpu *g, rc_dtype t, rci_gpu_mem dst, int64_t doff, const int64_t *ds, rci_gpu_mem src,
                     int64_t soff, const int64_t *ss, int nd, const int64_t *shape, const char *what, rc_error *err)
{
    int64_t st[2][RC_MAX_DIMS];
    int64_t total = 1;
    for (int i = 0; i < nd; i++) {
        st[0][i] = ds[i];
        st[1][i] = ss[i];
        total *= shape[i];
    }
    if (total == 0)
        return 0;
    rci_gpu_box b;
    rci_gpu_box_make(&b, nd, shape, 2, st);
    int64_t n = total, dof = doff, sof = soff, len = b.shape[b.nd - 1];
    /* 16-bit elements: a run of COPY_RUN a work-item where the innermost axis is contiguous
     * on both sides (its index arithmetic once a run; one 16-byte load where aligned). The
     * H100's bf16 permutes gained, its f32 ones lost (a warp's 32-byte runs then sit 32 bytes
     * apart at each access; docs/gpu.md, run 9), so 4-byte elements keep one a work-item */
    int64_t run = rc_dtype_size(t) == 2 && b.st[0][b.nd - 1] == 1 && b.st[1][b.nd - 1] == 1 && len >= 2 * COPY_RUN
                      ? COPY_RUN
                      : 1;
    int64_t items = run > 1 ? total / len * ((len + run - 1) / run) : total;
    int32_t bnd = b.nd;
    rci_gpu_long8 sh = rci_gpu_long8_of(b.shape), d8 = rci_gpu_long8_of(b.st[0]),
                  s8 = rci_gpu_long8_of(b.st[1]);
    rci_gpu_arg a[] = {ARG(dst), ARG(dof), ARG(src), ARG(sof), ARG(n), ARG(bnd), ARG(sh), ARG(d8),
                       ARG(s8), ARG(run)};
    return g->ops->launch(g, rc_dtype_size(t) == 2 ? t : RC_F32, RCI_K_COPY, a, 10, (size_t)items, 0, what, err);
}

static int run_permute(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                       rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int nd = node->ndim;
    int64_t sst[RC_MAX_DIMS], ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(nd, s->shape, sst);
    rci_contiguous_strides(nd, node->shape, ds);
    for (int i = 0; i < nd; i++)
        ss[i] = sst[node->iparam[i]];
    return rci_gpu_copy_box(g, node->dtype, out->mem, out->off, ds, in->mem, in->off, ss, nd, node->shape,
                    "permute", err);
}

static int run_slice(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                     rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int ax = node->iparam[0];
    int64_t start = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    return rci_gpu_copy_box(g, node->dtype, out->mem, out->off, ds, in->mem, in->off + start * ss[ax], ss,
                    node->ndim, node->shape, "slice", err);
}

static int run_pad(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                   rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int ax = node->iparam[0];
    int64_t before = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    if (g->be.fill_zero(&g->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err))
        return -1;
    return rci_gpu_copy_box(g, node->dtype, out->mem, out->off + before * ds[ax], ds, in->mem, in->off, ss,
                    node->ndim, s->shape, "pad", err);
}

static int run_concat(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, rc_error *err)
{
    const rc_tensor *node = r->node;
    int ax = node->iparam[0];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS], at = 0;
    rci_contiguous_strides(node->ndim, node->shape, ds);
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        rci_gpu_place in = {0};
        if (rci_gpu_place_of(&r->in[k], node, s->dtype, &in, err))
            return -1;
        rci_contiguous_strides(s->ndim, s->shape, ss);
        if (rci_gpu_copy_box(g, node->dtype, out->mem, out->off + at * ds[ax], ds, in.mem, in.off, ss, node->ndim,
                     s->shape, "concat", err))
            return -1;
        at += s->shape[ax];
    }
    return 0;
}

static int run_expand(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                      rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int nd = node->ndim;
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_bcast_strides(s, nd, node->shape, ss);
    rci_contiguous_strides(nd, node->shape, ds);
    return rci_gpu_copy_box(g, node->dtype, out->mem, out->off, ds, in->mem, in->off, ss, nd, node->shape,
                    "expand", err);
}

/* the dtypes casts run between on the device (no f64 tensors here) */
static int cast_dtype(rc_dtype t)
{
    return t == RC_F32 || t == RC_I32 || t == RC_BF16 || t == RC_F16;
}

static int run_cast(rci_gpu *g, const rci_node_run *r, const rci_gpu_place *out, const rci_gpu_place *in,
                    rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int64_t n = rc_tensor_numel(node);
    if (s->dtype == node->dtype)
        return g->be.copy(&g->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    rci_gpu_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in->mem), ARG(in->off), ARG(n)};
    if (s->dtype == RC_F32 && node->dtype == RC_I32)
        return rci_gpu_launch_f32(g, RCI_K_CAST_F32_I32, a, 5, (size_t)n, "cast", err);
    if (s->dtype == RC_I32 && node->dtype == RC_F32)
        return rci_gpu_launch_f32(g, RCI_K_CAST_I32_F32, a, 5, (size_t)n, "cast", err);
    if (cast_dtype(s->dtype) && cast_dtype(node->dtype)) {
        int32_t from = (int32_t)s->dtype, to = (int32_t)node->dtype;
        rci_gpu_arg c[] = {ARG(out->mem), ARG(out->off), ARG(to), ARG(in->mem), ARG(in->off), ARG(from),
                           ARG(n)};
        return rci_gpu_launch_f32(g, RCI_K_CAST, c, 7, rci_gpu_ew_items(n), "cast", err);
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "cast: %s to %s is not supported on %s",
                        rc_dtype_name(s->dtype), rc_dtype_name(node->dtype), g->be.name);
}

/* movement ops and casts, of the dtypes the device holds (no f64) */
int rci_gpu_run_move(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (!cast_dtype(s->dtype))
            return rc_error_set(err, RC_ERR_DTYPE, "%s: dtype %s is not supported on %s",
                                rci_gpu_op_name(node), rc_dtype_name(s->dtype), g->be.name);
    }
    rci_gpu_place out = {0}, in = {0};
    if (rci_gpu_place_of(&r->out, node, node->dtype, &out, err))
        return -1;
    if (node->op == RC_OP_CONCAT)
        return run_concat(g, r, &out, err);
    if (rci_gpu_place_of(&r->in[0], node, node->src[0]->dtype, &in, err))
        return -1;
    switch (node->op) {
    case RC_OP_PERMUTE: return run_permute(g, r, &out, &in, err);
    case RC_OP_SLICE: return run_slice(g, r, &out, &in, err);
    case RC_OP_PAD: return run_pad(g, r, &out, &in, err);
    case RC_OP_EXPAND: return run_expand(g, r, &out, &in, err);
    default: return run_cast(g, r, &out, &in, err);
    }
}

/* ---- random draws ---------------------------------------------------------------------------- */

/* kept iff uniform_at(key, i) >= p (the CPU's k_dropout), with the same key */
int rci_gpu_run_dropout(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}};
    if (rci_gpu_places(r, 1, &out, in, err))
        return -1;
    double p = node->fparam[0];
    if (p == 0)
        return g->be.copy(&g->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    rci_gpu_mask m = rci_gpu_mask_of(r, 0, p);
    int64_t n = rc_tensor_numel(node);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n), ARG(m.key),
                       ARG(m.thresh), ARG(m.keep)};
    return rci_gpu_launch_node(g, node, RCI_K_DROPOUT, a, 8, (size_t)n, "dropout", err);
}

/* the CPU's normal draws (k_normal), with the same key */
int rci_gpu_run_normal(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0};
    if (rci_gpu_place_of(&r->out, node, node->dtype, &out, err))
        return -1;
    uint64_t key = rci_node_key(node, 0);
    uint64_t k = key ^ rci_hash64(r->run_key);
    int64_t n = rc_tensor_numel(node);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(n), ARG(k)};
    return rci_gpu_launch_node(g, node, RCI_K_NORMAL, a, 4, (size_t)n, "normal", err);
}

