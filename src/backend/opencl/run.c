/* run.c - the OpenCL backend's nodes: which ops it runs (supports), and one node's run: a
 * kernel of kernels.cl (or CLBlast's GEMM) queued on the device's in-order queue. The
 * node's structure was checked with its plan (rci_node_check); a run checks only where
 * its memory is and the values that must be in range (ids).
 *
 * Memory is (cl_mem, element offset): elements of 4 bytes (f32, i32) or 2 (bf16, f16), so
 * a byte offset is the element size times an element offset. Boxes (shapes with per-input
 * strides) are simplified as the CPU does: size-1 axes dropped, axes that continue each
 * other merged.
 *
 * 16-bit values (bf16, f16) run the kernels of the program built for their storage
 * (kernels.cl): loads widen to f32, stores round once, so a 16-bit node computes as the
 * f32 kernel on widened inputs, the CPU's rule (src/backend/cpu/kernels_half.c). Kernels
 * that keep temporaries in their output (softmax, the cross-entropy gradient, the
 * embedding gradient's sums) keep them in f32 scratch instead; matrix products widen their
 * operands into scratch for CLBlast's SGEMM and round the result. A few rows times a shared
 * matrix (a decoding step), in any dtype, is one kernel that reads the weights once, as
 * stored (16-bit words directly), summing in the CPU's order. */
#include "opencl.h"

#include <clblast_c.h>
#include <math.h>
#include <string.h>

enum { BOX_MAX = 8 };   /* axes a kernel's long8 can carry (RC_MAX_DIMS <= 8) */

/* A box of nd axes and the element strides of up to 3 inputs (or output and input) on it. */
typedef struct {
    int nd;
    int64_t shape[BOX_MAX];
    int64_t st[3][BOX_MAX];
} box;

static const char *op_name(const rc_tensor *node)
{
    return rc_op_name(node->op);
}

static cl_long8 long8_of(const int64_t *v)
{
    cl_long8 r;
    for (int i = 0; i < BOX_MAX; i++)
        r.s[i] = (cl_long)v[i];
    return r;
}

/* Drops size-1 axes of shape[nd] and merges axes that continue each other in all k stride
 * sets; a box of no axes becomes one axis of size 1. */
static void box_make(box *b, int nd, const int64_t *shape, int k, int64_t st[][RC_MAX_DIMS])
{
    int64_t mshape[RC_MAX_DIMS], mst[3][RC_MAX_DIMS];
    memset(b, 0, sizeof *b);
    b->nd = rci_merge_axes(nd, shape, k, st, mshape, mst);
    memcpy(b->shape, mshape, sizeof mshape);
    for (int j = 0; j < k; j++)
        memcpy(b->st[j], mst[j], sizeof mst[j]);
}

/* the node's inputs 0 .. nin-1 broadcast over its shape */
static void bcast_box(const rc_tensor *node, int nin, box *b)
{
    int64_t st[3][RC_MAX_DIMS];
    for (int k = 0; k < nin; k++)
        rci_bcast_strides(node->src[k], node->ndim, node->shape, st[k]);
    box_make(b, node->ndim, node->shape, nin, st);
}

/* ---- arguments ------------------------------------------------------------------------- */

/* A node's memory as kernel arguments: the buffer and the element offset. */
typedef struct {
    cl_mem mem;
    cl_long off;
} place;

/* the place of memory m holding elements of dtype t */
static int place_of(const rci_mem *m, const rc_tensor *node, rc_dtype t, place *p, rc_error *err)
{
    size_t es = rc_dtype_size(t);
    if (!m->buf)
        return rc_error_set(err, RC_ERR_ARG, "%s: an input has no memory", op_name(node));
    if (m->off % es)
        return rc_error_set(err, RC_ERR_ARG, "%s: %s memory at byte %zu is not %zu-byte aligned",
                            op_name(node), rc_dtype_name(t), m->off, es);
    p->mem = rci_ocl_mem(m->buf);
    p->off = (cl_long)(m->off / es);
    return 0;
}

/* How the node's float values are stored: bf16 or f16 when it reads or writes them (a
 * loss of 16-bit logits is f32), else f32. Its kernels come from that storage's program. */
static rc_dtype storage(const rc_tensor *node)
{
    if (node->dtype == RC_BF16 || node->dtype == RC_F16)
        return node->dtype;
    for (int k = 0; k < node->nsrc; k++)
        if (node->src[k] && (node->src[k]->dtype == RC_BF16 || node->src[k]->dtype == RC_F16))
            return node->src[k]->dtype;
    return RC_F32;
}

/* kernel k of the node's storage over n work-items */
static int launch(rci_ocl *o, const rc_tensor *node, rci_ocl_kernel k, const rci_ocl_arg *args,
                  int nargs, size_t n, const char *what, rc_error *err)
{
    return rci_ocl_launch_as(o, storage(node), k, args, nargs, n, what, err);
}

#define ARG(v) {sizeof(v), &(v)}

/* The places of the output and the first nin inputs. */
static int places(const rci_node_run *r, int nin, place *out, place *in, rc_error *err)
{
    if (place_of(&r->out, r->node, r->node->dtype, out, err))
        return -1;
    for (int k = 0; k < nin; k++)
        if (place_of(&r->in[k], r->node, r->node->src[k]->dtype, &in[k], err))
            return -1;
    return 0;
}

/* ---- element-wise ------------------------------------------------------------------------ */

static int run_full(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    place out = {0};
    if (place_of(&r->out, r->node, r->node->dtype, &out, err))
        return -1;
    cl_long n = rc_tensor_numel(r->node);
    cl_float v = (cl_float)r->node->fparam[0];
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(n), ARG(v)};
    return launch(o, r->node, OCL_FILL, a, 4, (size_t)n, "full", err);
}

static int run_unary(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    cl_long n = rc_tensor_numel(node);
    cl_int op = node->op == RC_OP_AFFINE ? 0 : node->op == RC_OP_EXP ? 1 : node->op == RC_OP_LOG ? 2
              : node->op == RC_OP_SQRT ? 3 : node->op == RC_OP_RSQRT ? 4 : 5;
    cl_float s = (cl_float)node->fparam[0], c = (cl_float)node->fparam[1];
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n), ARG(op),
                       ARG(s), ARG(c)};
    return launch(o, node, OCL_UNARY, a, 8, (size_t)n, op_name(node), err);
}

static int run_act(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    cl_int kind = node->iparam[0], order = node->iparam[1];
    cl_long n = rc_tensor_numel(node);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n), ARG(kind),
                       ARG(order)};
    return launch(o, node, OCL_ACT, a, 7, (size_t)n, "act", err);
}

static int run_binary(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    box b;
    if (places(r, 2, &out, in, err))
        return -1;
    bcast_box(node, 2, &b);
    cl_long n = rc_tensor_numel(node);
    cl_int op = node->op - RC_OP_ADD, nd = b.nd;   /* ADD, SUB, MUL, DIV in order */
    cl_long8 shape = long8_of(b.shape), sa = long8_of(b.st[0]), sb = long8_of(b.st[1]);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(n), ARG(op), ARG(nd), ARG(shape), ARG(sa), ARG(sb)};
    return launch(o, node, OCL_BINARY, a, 12, (size_t)n, op_name(node), err);
}

/* src0 cond (f32 or i32, nonzero = true), src1 a, src2 b */
static int run_where(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    cl_int cond_i32 = node->src[0]->dtype == RC_I32;
    place out = {0}, in[3] = {{0}};
    box b;
    if (places(r, 3, &out, in, err))
        return -1;
    bcast_box(node, 3, &b);
    cl_long n = rc_tensor_numel(node);
    cl_int nd = b.nd;
    cl_long8 shape = long8_of(b.shape), sc = long8_of(b.st[0]), sa = long8_of(b.st[1]),
             sb = long8_of(b.st[2]);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(in[2].mem), ARG(in[2].off), ARG(n), ARG(cond_i32),
                       ARG(nd), ARG(shape), ARG(sc), ARG(sa), ARG(sb)};
    return launch(o, node, OCL_WHERE, a, 15, (size_t)n, "where", err);
}

/* src0 and src1 both f32 or both i32 */
static int run_equal(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    cl_int is_i32 = node->src[0]->dtype == RC_I32;
    place out = {0}, in[2] = {{0}};
    box b;
    if (places(r, 2, &out, in, err))
        return -1;
    bcast_box(node, 2, &b);
    cl_long n = rc_tensor_numel(node);
    cl_int nd = b.nd;
    cl_long8 shape = long8_of(b.shape), sa = long8_of(b.st[0]), sb = long8_of(b.st[1]);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(n), ARG(is_i32), ARG(nd), ARG(shape), ARG(sa), ARG(sb)};
    return launch(o, node, OCL_EQUAL, a, 12, (size_t)n, "equal", err);
}

/* ---- data movement --------------------------------------------------------------------------- */

/* The box shape[nd] from src (element strides ss, from element soff) to dst (strides ds,
 * from element doff), elements of dtype t (4 bytes: the f32 program's copy; 2: t's). */
static int copy_box(rci_ocl *o, rc_dtype t, cl_mem dst, int64_t doff, const int64_t *ds, cl_mem src,
                    int64_t soff, const int64_t *ss, int nd, const int64_t *shape, const char *what,
                    rc_error *err)
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
    box b;
    box_make(&b, nd, shape, 2, st);
    cl_long n = total, dof = doff, sof = soff;
    cl_int bnd = b.nd;
    cl_long8 sh = long8_of(b.shape), d8 = long8_of(b.st[0]), s8 = long8_of(b.st[1]);
    rci_ocl_arg a[] = {ARG(dst), ARG(dof), ARG(src), ARG(sof), ARG(n), ARG(bnd), ARG(sh), ARG(d8),
                       ARG(s8)};
    return rci_ocl_launch_as(o, rc_dtype_size(t) == 2 ? t : RC_F32, OCL_COPY, a, 9, (size_t)n, what, err);
}

static int run_permute(rci_ocl *o, const rci_node_run *r, const place *out, const place *in,
                       rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int nd = node->ndim;
    int64_t sst[RC_MAX_DIMS], ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(nd, s->shape, sst);
    rci_contiguous_strides(nd, node->shape, ds);
    for (int i = 0; i < nd; i++)
        ss[i] = sst[node->iparam[i]];
    return copy_box(o, node->dtype, out->mem, out->off, ds, in->mem, in->off, ss, nd, node->shape,
                    "permute", err);
}

static int run_slice(rci_ocl *o, const rci_node_run *r, const place *out, const place *in,
                     rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int ax = node->iparam[0];
    int64_t start = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    return copy_box(o, node->dtype, out->mem, out->off, ds, in->mem, in->off + start * ss[ax], ss,
                    node->ndim, node->shape, "slice", err);
}

static int run_pad(rci_ocl *o, const rci_node_run *r, const place *out, const place *in,
                   rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int ax = node->iparam[0];
    int64_t before = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    if (o->be.fill_zero(&o->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err))
        return -1;
    return copy_box(o, node->dtype, out->mem, out->off + before * ds[ax], ds, in->mem, in->off, ss,
                    node->ndim, s->shape, "pad", err);
}

static int run_concat(rci_ocl *o, const rci_node_run *r, const place *out, rc_error *err)
{
    const rc_tensor *node = r->node;
    int ax = node->iparam[0];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS], at = 0;
    rci_contiguous_strides(node->ndim, node->shape, ds);
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        place in = {0};
        if (place_of(&r->in[k], node, s->dtype, &in, err))
            return -1;
        rci_contiguous_strides(s->ndim, s->shape, ss);
        if (copy_box(o, node->dtype, out->mem, out->off + at * ds[ax], ds, in.mem, in.off, ss, node->ndim,
                     s->shape, "concat", err))
            return -1;
        at += s->shape[ax];
    }
    return 0;
}

static int run_expand(rci_ocl *o, const rci_node_run *r, const place *out, const place *in,
                      rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    int nd = node->ndim;
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_bcast_strides(s, nd, node->shape, ss);
    rci_contiguous_strides(nd, node->shape, ds);
    return copy_box(o, node->dtype, out->mem, out->off, ds, in->mem, in->off, ss, nd, node->shape,
                    "expand", err);
}

/* the dtypes casts run between on the device (no f64 tensors here) */
static int cast_dtype(rc_dtype t)
{
    return t == RC_F32 || t == RC_I32 || t == RC_BF16 || t == RC_F16;
}

static int run_cast(rci_ocl *o, const rci_node_run *r, const place *out, const place *in,
                    rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    cl_long n = rc_tensor_numel(node);
    if (s->dtype == node->dtype)
        return o->be.copy(&o->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    rci_ocl_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in->mem), ARG(in->off), ARG(n)};
    if (s->dtype == RC_F32 && node->dtype == RC_I32)
        return rci_ocl_launch(o, OCL_CAST_F32_I32, a, 5, (size_t)n, "cast", err);
    if (s->dtype == RC_I32 && node->dtype == RC_F32)
        return rci_ocl_launch(o, OCL_CAST_I32_F32, a, 5, (size_t)n, "cast", err);
    if (cast_dtype(s->dtype) && cast_dtype(node->dtype)) {
        cl_int from = (cl_int)s->dtype, to = (cl_int)node->dtype;
        rci_ocl_arg c[] = {ARG(out->mem), ARG(out->off), ARG(to), ARG(in->mem), ARG(in->off), ARG(from),
                           ARG(n)};
        return rci_ocl_launch(o, OCL_CAST, c, 7, (size_t)n, "cast", err);
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "cast: %s to %s is not supported on %s",
                        rc_dtype_name(s->dtype), rc_dtype_name(node->dtype), o->be.name);
}

static int is_move(rc_op op)
{
    return op == RC_OP_PERMUTE || op == RC_OP_SLICE || op == RC_OP_PAD || op == RC_OP_CONCAT ||
           op == RC_OP_EXPAND;
}

/* movement ops and casts, of the dtypes the device holds (no f64) */
static int run_move(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (!cast_dtype(s->dtype))
            return rc_error_set(err, RC_ERR_DTYPE, "%s: dtype %s is not supported on %s",
                                op_name(node), rc_dtype_name(s->dtype), o->be.name);
    }
    place out = {0}, in = {0};
    if (place_of(&r->out, node, node->dtype, &out, err))
        return -1;
    if (node->op == RC_OP_CONCAT)
        return run_concat(o, r, &out, err);
    if (place_of(&r->in[0], node, node->src[0]->dtype, &in, err))
        return -1;
    switch (node->op) {
    case RC_OP_PERMUTE: return run_permute(o, r, &out, &in, err);
    case RC_OP_SLICE: return run_slice(o, r, &out, &in, err);
    case RC_OP_PAD: return run_pad(o, r, &out, &in, err);
    case RC_OP_EXPAND: return run_expand(o, r, &out, &in, err);
    default: return run_cast(o, r, &out, &in, err);
    }
}

/* ---- reductions ------------------------------------------------------------------------------ */

enum {
    REDUCE_CHUNK = 1024,   /* summed elements per work-item in the two-pass reduction */
    REDUCE_FEW = 4096      /* outputs below which long sums take two passes */
};

/* Bytes of scratch a reduction of n outputs, each a sum of m elements, takes: its chunks'
 * partial sums when it runs in two passes (few outputs of long sums), else none */
static size_t reduce_scratch(const rci_ocl *o, int64_t n, int64_t m)
{
    if (m < 2 * REDUCE_CHUNK || n >= REDUCE_FEW)
        return 0;
    int64_t chunks = (m + REDUCE_CHUNK - 1) / REDUCE_CHUNK;
    return (size_t)(n * chunks) * (o->fp64 ? sizeof(cl_double) : sizeof(cl_float));
}

/* out [kept box] = the sum (or max) over the summed box of the input at `in`: one
 * work-item per output, or, for few outputs of long sums, fixed chunks summed in parallel
 * (scratch) and then combined in chunk order: the same order on every run */
static int reduce_boxes(rci_ocl *o, rc_dtype store, const place *out, const place *in, const box *kept,
                        const box *summed, int is_max, const char *what, rc_error *err)
{
    cl_long n = 1, m = 1;
    for (int i = 0; i < kept->nd; i++)
        n *= kept->shape[i];
    for (int i = 0; i < summed->nd; i++)
        m *= summed->shape[i];
    cl_int mx = is_max, knd = kept->nd, snd = summed->nd;
    cl_long8 ksh = long8_of(kept->shape), kst = long8_of(kept->st[0]);
    cl_long8 ssh = long8_of(summed->shape), sst = long8_of(summed->st[0]);
    size_t part_bytes = reduce_scratch(o, n, m);
    if (!part_bytes) {
        rci_ocl_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in->mem), ARG(in->off), ARG(n), ARG(m),
                           ARG(mx), ARG(knd), ARG(ksh), ARG(kst), ARG(snd), ARG(ssh), ARG(sst)};
        return rci_ocl_launch_as(o, store, OCL_REDUCE, a, 13, (size_t)n, what, err);
    }
    cl_long chunk = REDUCE_CHUNK, chunks = (m + chunk - 1) / chunk;
    cl_mem part = rci_ocl_scratch(o, part_bytes, err);
    if (!part)
        return -1;
    rci_ocl_arg a[] = {ARG(part), ARG(in->mem), ARG(in->off), ARG(n), ARG(m), ARG(chunk), ARG(chunks),
                       ARG(mx), ARG(knd), ARG(ksh), ARG(kst), ARG(snd), ARG(ssh), ARG(sst)};
    rci_ocl_arg f[] = {ARG(out->mem), ARG(out->off), ARG(part), ARG(n), ARG(chunks), ARG(mx)};
    if (rci_ocl_launch_as(o, store, OCL_REDUCE_PART, a, 14, (size_t)(n * chunks), what, err))
        return -1;
    return rci_ocl_launch_as(o, store, OCL_REDUCE_FINISH, f, 6, (size_t)n, what, err);
}

/* sum / max over axis iparam[0]: kept (outer, inner), summed n */
static int run_reduce(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    const rc_tensor *s = node->src[0];
    int axis = node->iparam[0];
    int64_t outer = 1, inner = 1, n = s->shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= s->shape[i];
    for (int i = axis + 1; i < s->ndim; i++)
        inner *= s->shape[i];
    box kept = {2, {outer, inner}, {{n * inner, 1}}}, summed = {1, {n}, {{inner}}};
    return reduce_boxes(o, storage(node), &out, &in[0], &kept, &summed, node->op == RC_OP_MAX,
                        op_name(node), err);
}

/* src0 summed down to the node's shape: the input's axes split into kept and summed ones */
static int run_sum_to(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    const rc_tensor *s = node->src[0];
    int sd = s->ndim;
    int64_t os[RC_MAX_DIMS], st[RC_MAX_DIMS];
    rci_bcast_strides(node, sd, s->shape, os);
    if (rc_tensor_numel(s) == rc_tensor_numel(node))
        return o->be.copy(&o->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    if (rc_tensor_numel(s) == 0)
        return o->be.fill_zero(&o->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err);
    rci_contiguous_strides(sd, s->shape, st);
    int64_t ksh[RC_MAX_DIMS], kst[1][RC_MAX_DIMS], ssh[RC_MAX_DIMS], sst[1][RC_MAX_DIMS];
    int kn = 0, sn = 0;
    for (int i = 0; i < sd; i++) {
        if (s->shape[i] == 1)
            continue;
        if (os[i]) {
            ksh[kn] = s->shape[i];
            kst[0][kn++] = st[i];
        } else {
            ssh[sn] = s->shape[i];
            sst[0][sn++] = st[i];
        }
    }
    box kept, summed;
    box_make(&kept, kn, ksh, 1, kst);
    box_make(&summed, sn, ssh, 1, sst);
    return reduce_boxes(o, storage(node), &out, &in[0], &kept, &summed, 0, "sum_to", err);
}

/* ---- softmax and norms: one work-item per row of the last axis ------------------------------ */

static int64_t last_dim(const rc_tensor *t)
{
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* an optional input's place; the output's (never read) when absent */
static int optional_place(const rci_node_run *r, int k, const place *out, place *p, cl_int *has,
                          rc_error *err)
{
    *has = k < r->node->nsrc && r->node->src[k];
    if (!*has) {
        *p = *out;
        return 0;
    }
    return place_of(&r->in[k], r->node, r->node->src[k]->dtype, p, err);
}

/* eps as the kernels' accumulator type: double with fp64, else float */
typedef struct {
    cl_double d;
    cl_float f;
} acc_arg;

static rci_ocl_arg acc_value(const rci_ocl *o, const acc_arg *a)
{
    rci_ocl_arg r = o->fp64 ? (rci_ocl_arg){sizeof a->d, &a->d} : (rci_ocl_arg){sizeof a->f, &a->f};
    return r;
}

/* Bytes of scratch f32_temps takes: none for f32 values, else skip + n floats */
static size_t f32_temps_scratch(const rc_tensor *node, int64_t skip, int64_t n)
{
    return storage(node) == RC_F32 ? 0 : (size_t)(skip + n) * sizeof(cl_float);
}

/* n f32 temporaries for a kernel that would keep them in its output: the output itself
 * for f32 values, else scratch from float `skip` on */
static int f32_temps(rci_ocl *o, const rc_tensor *node, const place *out, int64_t skip, int64_t n,
                     place *tmp, rc_error *err)
{
    if (!f32_temps_scratch(node, skip, n)) {
        *tmp = *out;
        return 0;
    }
    cl_mem m = rci_ocl_scratch(o, f32_temps_scratch(node, skip, n), err);
    if (!m)
        return -1;
    tmp->mem = m;
    tmp->off = (cl_long)skip;
    return 0;
}

/* softmax over the last axis of src0 * fparam[0] + src1 (optional mask, broadcast) */
static int run_softmax(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}}, mask = {0};
    cl_int has_mask;
    int64_t mst[BOX_MAX] = {0}, shape[BOX_MAX] = {0};
    if (places(r, 1, &out, in, err) || optional_place(r, 1, &out, &mask, &has_mask, err))
        return -1;
    if (has_mask)
        rci_bcast_strides(node->src[1], node->ndim, node->shape, mst);
    memcpy(shape, node->shape, (size_t)node->ndim * sizeof *shape);
    int nd = node->ndim;
    cl_long c = last_dim(node), rows = rc_tensor_numel(node) / c;
    cl_long tq = nd >= 2 ? node->shape[nd - 2] : 1;
    cl_int causal = node->iparam[0] != 0, cnd = nd;
    cl_float scale = (cl_float)node->fparam[0];
    cl_long8 sh = long8_of(shape), ms = long8_of(mst);
    place tmp;
    if (f32_temps(o, node, &out, 0, rows * c, &tmp, err))
        return -1;
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(tmp.mem), ARG(tmp.off), ARG(in[0].mem),
                       ARG(in[0].off), ARG(mask.mem), ARG(mask.off), ARG(has_mask), ARG(rows), ARG(c),
                       ARG(tq), ARG(causal), ARG(scale), ARG(cnd), ARG(sh), ARG(ms)};
    return launch(o, node, OCL_SOFTMAX, a, 17, (size_t)rows, "softmax", err);
}

static int run_layer_norm(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}}, w = {0}, b = {0};
    cl_int has_w, has_b;
    cl_long c = last_dim(node), rows = rc_tensor_numel(node) / c;
    if (places(r, 1, &out, in, err) || optional_place(r, 1, &out, &w, &has_w, err) ||
        optional_place(r, 2, &out, &b, &has_b, err))
        return -1;
    acc_arg eps = {node->fparam[0], (cl_float)node->fparam[0]};
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(w.mem),
                       ARG(w.off), ARG(has_w), ARG(b.mem), ARG(b.off), ARG(has_b), ARG(rows), ARG(c),
                       acc_value(o, &eps)};
    return launch(o, node, OCL_LAYER_NORM, a, 13, (size_t)rows, "layer_norm", err);
}

static int run_rms_norm(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}}, w = {0};
    cl_int has_w;
    cl_long c = last_dim(node), rows = rc_tensor_numel(node) / c;
    if (places(r, 1, &out, in, err) || optional_place(r, 1, &out, &w, &has_w, err))
        return -1;
    acc_arg eps = {node->fparam[0], (cl_float)node->fparam[0]};
    cl_float offset = (cl_float)node->fparam[1];
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(w.mem),
                       ARG(w.off), ARG(has_w), ARG(rows), ARG(c), acc_value(o, &eps), ARG(offset)};
    return launch(o, node, OCL_RMS_NORM, a, 11, (size_t)rows, "rms_norm", err);
}

/* ---- ids: embedding, one-hot, cross-entropy, rope ------------------------------------------- */

static int64_t lead_rows(const rc_tensor *t)
{
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++)
        r *= t->shape[i];
    return r;
}

/* Every one of the count ids at `ids` is in [0, n) or equal to ignore (when has_ignore);
 * otherwise the CPU's error naming the first bad one. Reads one int back (a sync). */
static int check_ids(rci_ocl *o, const place *ids, int64_t count, int64_t n, int32_t ignore,
                     int has_ignore, const char *op, const char *noun, rc_error *err)
{
    if (count <= 0)
        return 0;
    if (count > INT32_MAX)
        return rc_error_set(err, RC_ERR_SHAPE, "%s: %lld ids (at most %d on %s)", op,
                            (long long)count, INT32_MAX, o->be.name);
    cl_int none = INT32_MAX, first = INT32_MAX, ig = ignore, hi = has_ignore;
    cl_long cnt = count, lim = n;
    cl_int s = clEnqueueFillBuffer(o->queue, o->fault, &none, sizeof none, 0, sizeof none, 0, NULL, NULL);
    if (s != CL_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s: checking ids: %s", o->be.name, op,
                            rci_ocl_status(s));
    rci_ocl_arg a[] = {ARG(ids->mem), ARG(ids->off), ARG(cnt), ARG(lim), ARG(ig), ARG(hi),
                       ARG(o->fault)};
    if (rci_ocl_launch(o, OCL_CHECK_IDS, a, 7, (size_t)count, op, err))
        return -1;
    s = clEnqueueReadBuffer(o->queue, o->fault, CL_TRUE, 0, sizeof first, &first, 0, NULL, NULL);
    if (s == CL_SUCCESS && first != INT32_MAX) {
        cl_int id = 0;
        s = clEnqueueReadBuffer(o->queue, ids->mem, CL_TRUE, (size_t)(ids->off + first) * 4,
                                sizeof id, &id, 0, NULL, NULL);
        if (s == CL_SUCCESS)
            return rc_error_set(err, RC_ERR_INDEX, "%s: %s %d at position %lld is outside [0, %lld)",
                                op, noun, id, (long long)first, (long long)n);
    }
    return s == CL_SUCCESS ? 0 : rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s: reading the id check: %s",
                                              o->be.name, op, rci_ocl_status(s));
}

/* table src0 [V, C], ids src1 i32 [...] -> [..., C]; shard mode (iparam[2]): the table
 * holds rows [iparam[3], iparam[3] + V) of iparam[4] */
static int run_embedding(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    if (places(r, 2, &out, in, err))
        return -1;
    const rc_tensor *tab = node->src[0];
    cl_long c = last_dim(node), count = rc_tensor_numel(node->src[1]);
    int64_t v = node->iparam[2] ? node->iparam[4] : tab->shape[0];
    if (check_ids(o, &in[1], count, v, 0, 0, "embedding", "id", err))
        return -1;
    cl_long rows = tab->shape[0], first = node->iparam[2] ? node->iparam[3] : 0;
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(count), ARG(c), ARG(rows), ARG(first)};
    return launch(o, node, OCL_EMBEDDING, a, 10, (size_t)(count * c), "embedding", err);
}

/* ids src0 i32 [...], grad src1 [..., C] -> [V, C]: zeros, then out[ids[i]] += grad[i] */
static int run_embedding_grad(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    if (places(r, 2, &out, in, err))
        return -1;
    int64_t v = node->iparam[2] ? node->iparam[4] : node->shape[0];
    cl_long c = node->shape[1], count = rc_tensor_numel(node->src[0]), rows = node->shape[0];
    place acc;   /* the sums in f32: the output, or scratch rounded into it at the end */
    if (check_ids(o, &in[0], count, v, 0, 0, "embedding_grad", "id", err) ||
        f32_temps(o, node, &out, 0, rows * c, &acc, err))
        return -1;
    cl_float zero = 0;
    cl_int s = clEnqueueFillBuffer(o->queue, acc.mem, &zero, sizeof zero, (size_t)acc.off * sizeof zero,
                                   (size_t)(rows * c) * sizeof zero, 0, NULL, NULL);
    if (s != CL_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: embedding_grad: zeroing the sums: %s",
                            o->be.name, rci_ocl_status(s));
    cl_long first = node->iparam[2] ? node->iparam[3] : 0;
    cl_int skip = node->iparam[1];
    rci_ocl_arg a[] = {ARG(acc.mem), ARG(acc.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(count), ARG(c), ARG(rows), ARG(first), ARG(skip)};
    if (launch(o, node, OCL_EMBEDDING_GRAD, a, 11, (size_t)c, "embedding_grad", err))
        return -1;
    if (storage(node) == RC_F32)
        return 0;
    cl_long n = rows * c;
    cl_int from = RC_F32, to = node->dtype;
    rci_ocl_arg k[] = {ARG(out.mem), ARG(out.off), ARG(to), ARG(acc.mem), ARG(acc.off), ARG(from), ARG(n)};
    return rci_ocl_launch(o, OCL_CAST, k, 7, (size_t)n, "embedding_grad", err);
}

/* ids src0 i32 [...] -> [..., depth]; ids equal to iparam[1] give zero rows */
static int run_one_hot(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    cl_long depth = last_dim(node), count = rc_tensor_numel(node->src[0]);
    int64_t v = node->iparam[2] ? node->iparam[4] : depth;
    cl_int ignore = node->iparam[1];
    if (check_ids(o, &in[0], count, v, ignore, 1, "one_hot", "id", err))
        return -1;
    cl_long first = node->iparam[2] ? node->iparam[3] : 0;
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(count),
                       ARG(depth), ARG(first), ARG(ignore)};
    return launch(o, node, OCL_ONE_HOT, a, 8, (size_t)(count * depth), "one_hot", err);
}

/* logits src0 [..., V] and targets src1 i32 [...]: rows and V set, the targets checked */
static int ce_inputs(rci_ocl *o, const rc_tensor *node, const place *tg, cl_long *rows, cl_long *v,
                     rc_error *err)
{
    const rc_tensor *lt = node->src[0];
    *v = last_dim(lt);
    *rows = lead_rows(lt);
    return check_ids(o, tg, *rows, *v, node->iparam[0], 1, op_name(node), "target", err);
}

enum { CE_SCALE_FLOATS = 16 };   /* cross_entropy_grad: its scale's floats before the exponentials */

/* Bytes of scratch the losses take over `rows` rows of v logits: the per-row losses
 * (cross_entropy); the scale, then from float 16 the exponentials when not f32
 * (cross_entropy_grad) */
static size_t ce_scratch(const rci_ocl *o, const rc_tensor *node, int64_t rows, int64_t v)
{
    if (node->op == RC_OP_CROSS_ENTROPY)
        return (size_t)(rows ? rows : 1) * (o->fp64 ? sizeof(cl_double) : sizeof(cl_float));
    size_t temps = f32_temps_scratch(node, CE_SCALE_FLOATS, rows * v);
    return temps > sizeof(cl_float) ? temps : sizeof(cl_float);
}

/* the mean over targets != iparam[0] of logsumexp(row) - row[target]: per-row losses in
 * scratch, then their sum in row order */
static int run_cross_entropy(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    cl_long rows, v;
    if (places(r, 2, &out, in, err) || ce_inputs(o, node, &in[1], &rows, &v, err))
        return -1;
    cl_mem loss = rci_ocl_scratch(o, ce_scratch(o, node, rows, v), err);
    if (!loss)
        return -1;
    cl_int ignore = node->iparam[0];
    rci_ocl_arg a[] = {ARG(loss), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem), ARG(in[1].off),
                       ARG(rows), ARG(v), ARG(ignore)};
    if (rows > 0 && launch(o, node, OCL_CE_ROWS, a, 8, (size_t)rows, "cross_entropy", err))
        return -1;
    rci_ocl_arg m[] = {ARG(out.mem), ARG(out.off), ARG(loss), ARG(in[1].mem), ARG(in[1].off),
                       ARG(rows), ARG(ignore)};
    return rci_ocl_launch(o, OCL_CE_MEAN, m, 7, 1, "cross_entropy", err);
}

/* (softmax - onehot) * g / count over valid rows; src2 the scalar upstream gradient */
static int run_cross_entropy_grad(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[3] = {{0}};
    cl_long rows, v;
    if (places(r, 3, &out, in, err))
        return -1;
    place tmp;   /* the exponentials in f32: the output, or scratch after the scale */
    if (ce_inputs(o, node, &in[1], &rows, &v, err) ||
        f32_temps(o, node, &out, CE_SCALE_FLOATS, rows * v, &tmp, err))
        return -1;
    cl_mem scale = rci_ocl_scratch(o, ce_scratch(o, node, rows, v), err);
    if (!scale)
        return -1;
    cl_int ignore = node->iparam[0];
    rci_ocl_arg a[] = {ARG(scale), ARG(in[1].mem), ARG(in[1].off), ARG(rows), ARG(ignore),
                       ARG(in[2].mem), ARG(in[2].off)};
    if (rci_ocl_launch(o, OCL_CE_SCALE, a, 7, 1, "cross_entropy_grad", err))
        return -1;
    rci_ocl_arg g[] = {ARG(out.mem), ARG(out.off), ARG(tmp.mem), ARG(tmp.off), ARG(in[0].mem),
                       ARG(in[0].off), ARG(in[1].mem), ARG(in[1].off), ARG(scale), ARG(rows), ARG(v),
                       ARG(ignore)};
    return launch(o, node, OCL_CE_GRAD, g, 12, (size_t)rows, "cross_entropy_grad", err);
}

/* x src0 [..., T, H, D], positions src1 i32 (row r uses pos[r % P]); iparam: rotary dims,
 * mode, inverse; fparam[0] theta */
static int run_rope(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    if (places(r, 2, &out, in, err))
        return -1;
    int nd = node->ndim, mode = node->iparam[1];
    cl_long rot = node->iparam[0];
    cl_long d = node->shape[nd - 1], h = node->shape[nd - 2], n = rc_tensor_numel(node);
    cl_long np = rc_tensor_numel(node->src[1]);
    cl_int inter = mode == RC_ROPE_INTERLEAVED, inverse = node->iparam[2] != 0;
    cl_double theta = node->fparam[0];
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(np), ARG(n), ARG(h), ARG(d), ARG(rot), ARG(inter),
                       ARG(inverse), ARG(theta)};
    return launch(o, node, OCL_ROPE, a, 14, (size_t)n, "rope", err);
}

/* ---- dropout, matmul ------------------------------------------------------------------------- */

/* kept iff uniform_at(key, i) >= p (the CPU's k_dropout), with the same key */
static int run_dropout(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[1] = {{0}};
    if (places(r, 1, &out, in, err))
        return -1;
    double p = node->fparam[0];
    if (p == 0)
        return o->be.copy(&o->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    uint64_t key = (uint64_t)(uint32_t)node->iparam[0] | ((uint64_t)(uint32_t)node->iparam[1] << 32);
    key ^= rci_hash64(r->run_key);
    /* u = m 2^-53 (m < 2^53 an integer) >= p  <=>  m >= ceil(p 2^53), exact in double */
    double t = ceil(p * 9007199254740992.0);
    t = t < 0 ? 0 : t > 9007199254740992.0 ? 9007199254740992.0 : t;
    cl_ulong k = key, thresh = (cl_ulong)t;
    cl_float scale = p < 1 ? (cl_float)(1 / (1 - p)) : 0;
    cl_long n = rc_tensor_numel(node);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(n), ARG(k),
                       ARG(thresh), ARG(scale)};
    return launch(o, node, OCL_DROPOUT, a, 8, (size_t)n, "dropout", err);
}

/* the CPU's normal draws (k_normal), with the same key */
static int run_normal(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0};
    if (place_of(&r->out, node, node->dtype, &out, err))
        return -1;
    uint64_t key = (uint64_t)(uint32_t)node->iparam[0] | ((uint64_t)(uint32_t)node->iparam[1] << 32);
    cl_ulong k = key ^ rci_hash64(r->run_key);
    cl_long n = rc_tensor_numel(node);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(n), ARG(k)};
    return launch(o, node, OCL_NORMAL, a, 4, (size_t)n, "normal", err);
}

static int blast_failed(rci_ocl *o, CLBlastStatusCode s, rc_error *err)
{
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: matmul: CLBlast status %d", o->be.name, (int)s);
}

/* n 16-bit values (dtype t) at src widened into f32 at element `at` of dst */
static int widen_into(rci_ocl *o, cl_mem dst, int64_t at, const place *src, rc_dtype t, int64_t n,
                      rc_error *err)
{
    cl_long dof = at, cnt = n;
    cl_int from = t, to = RC_F32;
    rci_ocl_arg a[] = {ARG(dst), ARG(dof), ARG(to), ARG(src->mem), ARG(src->off), ARG(from), ARG(cnt)};
    return rci_ocl_launch(o, OCL_CAST, a, 7, (size_t)n, "matmul", err);
}

/* a decoding step: rows (<= RCI_MATMUL_FEW_ROWS) of a times the shared 2-D b, whose 16-bit
 * words are read as they are (half the bytes of f32 weights), summed in f32 */
static int matmul_rows(rci_ocl *o, const rc_tensor *node, const place *out, const place *in,
                       int64_t rows, int64_t n, int64_t k, rc_error *err)
{
    cl_long cr = rows, cn = n, ck = k;
    cl_int ta = node->iparam[0] != 0, tb = node->iparam[1] != 0;
    rci_ocl_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(cr), ARG(cn), ARG(ck), ARG(ta), ARG(tb)};
    return launch(o, node, OCL_MATMUL_ROWS, a, 11, (size_t)n, "matmul", err);
}

enum { MATMUL_CHUNK = 1 << 23 };   /* f32 elements of the 16-bit product's result per SGEMM */

/* How a 16-bit product runs through SGEMM: c by rows of op(a) (stacked) or by batches,
 * `per` units of `unit` f32 elements at a time */
typedef struct {
    int stacked;
    int64_t unit, units, per;
} matmul_chunks;

static matmul_chunks matmul_chunks_of(const rci_matmul_dims *d)
{
    matmul_chunks c;
    c.stacked = d->batch == 1 || (d->bb == 1 && d->ba == d->batch && !d->ta);
    c.unit = c.stacked ? d->n : d->m * d->n;
    c.units = c.stacked ? d->batch * d->m : d->batch;
    c.per = MATMUL_CHUNK / c.unit < 1 ? 1 : MATMUL_CHUNK / c.unit;
    c.per = c.per < c.units ? c.per : c.units;
    return c;
}

/* Bytes of scratch matmul_half takes: [a | b | chunk of c] in f32 */
static size_t matmul_half_scratch(const rci_matmul_dims *d)
{
    matmul_chunks c = matmul_chunks_of(d);
    return (size_t)(d->ba * d->m * d->k + d->bb * d->k * d->n + c.per * c.unit) * sizeof(cl_float);
}

/* A product of 16-bit operands (dtype st) through SGEMM: both widened into scratch
 * [a | b | chunk of c], c computed a chunk of rows (or of batches) at a time and rounded
 * into the output, so the scratch never holds the whole f32 result (logits). */
static int matmul_half(rci_ocl *o, rc_dtype st, const rci_matmul_dims *d, const place *out, const place *in,
                       rc_error *err)
{
    int64_t m = d->m, n = d->n, k = d->k;
    matmul_chunks c = matmul_chunks_of(d);
    int stacked = c.stacked;
    int64_t unit = c.unit, units = c.units, per = c.per;
    int64_t na = d->ba * m * k, nb = d->bb * k * n;
    cl_mem t = rci_ocl_scratch(o, matmul_half_scratch(d), err);
    if (!t || widen_into(o, t, 0, &in[0], st, na, err) || widen_into(o, t, na, &in[1], st, nb, err))
        return -1;
    CLBlastTranspose opa = d->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose opb = d->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    size_t lda = (size_t)(d->ta ? m : k), ldb = (size_t)(d->tb ? k : n), co = (size_t)(na + nb);
    for (int64_t u0 = 0; u0 < units; u0 += per) {
        int64_t cnt = units - u0 < per ? units - u0 : per;
        CLBlastStatusCode s;
        if (stacked) /* rows u0 .. of op(a): columns of a stored [k, m] when ta (then batch 1) */
            s = CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)cnt, (size_t)n, (size_t)k, 1.0f, t,
                             (size_t)(d->ta ? u0 : u0 * k), lda, t, (size_t)na, ldb, 0.0f, t, co,
                             (size_t)n, &o->queue, NULL);
        else
            s = CLBlastSgemmStridedBatched(
                CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n, (size_t)k, 1.0f, t,
                d->ba == 1 ? 0 : (size_t)(u0 * m * k), lda, d->ba == 1 ? 0 : (size_t)(m * k), t,
                (size_t)(na + (d->bb == 1 ? 0 : u0 * k * n)), ldb, d->bb == 1 ? 0 : (size_t)(k * n), 0.0f,
                t, co, (size_t)n, (size_t)(m * n), (size_t)cnt, &o->queue, NULL);
        if (s != CLBlastSuccess)
            return blast_failed(o, s, err);
        cl_long oo = out->off + u0 * unit, cof = (cl_long)co, nc = cnt * unit;
        cl_int from = RC_F32, to = st;
        rci_ocl_arg a[] = {ARG(out->mem), ARG(oo), ARG(to), ARG(t), ARG(cof), ARG(from), ARG(nc)};
        if (rci_ocl_launch(o, OCL_CAST, a, 7, (size_t)nc, "matmul", err))
            return -1;
    }
    return 0;
}

/* src0 a [..., M, K] (stored [..., K, M] when iparam[0]), src1 b [..., K, N] (stored
 * [..., N, K] when iparam[1]) -> [..., M, N]; either operand may be shared by all batches */
static int run_matmul(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    place out = {0}, in[2] = {{0}};
    if (places(r, 2, &out, in, err))
        return -1;
    rci_matmul_dims d = rci_matmul_dims_of(node);
    int ta = d.ta, tb = d.tb;
    int64_t m = d.m, k = d.k, n = d.n, batch = d.batch, ba = d.ba, bb = d.bb;
    if (k == 0)
        return o->be.fill_zero(&o->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err);
    if (rci_matmul_few_rows(&d)) /* decoding, f32 too: one pass over the weights, no GEMM set-up */
        return matmul_rows(o, node, &out, in, batch * m, n, k, err);
    if (storage(node) != RC_F32)
        return matmul_half(o, storage(node), &d, &out, in, err);
    CLBlastTranspose opa = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose opb = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    size_t lda = (size_t)(ta ? m : k), ldb = (size_t)(tb ? k : n);
    CLBlastStatusCode s;
    if (batch == 1 || (bb == 1 && ba == batch && !ta)) {
        /* one gemm: the batches of a stacked into its rows */
        s = CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)(batch * m), (size_t)n, (size_t)k,
                         1.0f, in[0].mem, (size_t)in[0].off, lda, in[1].mem, (size_t)in[1].off, ldb,
                         0.0f, out.mem, (size_t)out.off, (size_t)n, &o->queue, NULL);
    } else {
        s = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n, (size_t)k, 1.0f, in[0].mem,
            (size_t)in[0].off, lda, ba == 1 ? 0 : (size_t)(m * k), in[1].mem, (size_t)in[1].off, ldb,
            bb == 1 ? 0 : (size_t)(k * n), 0.0f, out.mem, (size_t)out.off, (size_t)n,
            (size_t)(m * n), (size_t)batch, &o->queue, NULL);
    }
    return s == CLBlastSuccess ? 0 : blast_failed(o, s, err);
}

/* ---- convolution and pooling (NCHW; direct kernels, one work-item per output element) ------------ */

/* n, c, h, w, o, kh, kw, oh, ow, stride h, w, padding h, w, dilation h, w, groups (kernels.cl) */
static cl_long16 conv_geometry(const rc_tensor *node, const rc_tensor *x, const rc_tensor *w,
                               const rc_tensor *y)
{
    const int32_t *ip = node->iparam;
    cl_long16 g = {{x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], w->shape[2],
                    w->shape[3], y->shape[2], y->shape[3], ip[0], ip[1], ip[2], ip[3], ip[4], ip[5],
                    ip[6]}};
    return g;
}

/* CONV2D: x, weight, bias? -> y; CONV2D_GRAD_INPUT: gy, weight -> gx; CONV2D_GRAD_WEIGHT: gy, x -> gw */
static int run_conv2d(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int nin = node->op == RC_OP_CONV2D && node->nsrc > 2 && node->src[2] ? 3 : 2;
    place out = {0}, in[3] = {{0}};
    if (places(r, nin, &out, in, err))
        return -1;
    const rc_tensor *s0 = node->src[0], *s1 = node->src[1];
    size_t n = (size_t)rc_tensor_numel(node);
    if (node->op == RC_OP_CONV2D) {
        cl_long16 g = conv_geometry(node, s0, s1, node);
        cl_int has_bias = nin == 3;
        place b = has_bias ? in[2] : in[0];
        rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                           ARG(in[1].off), ARG(b.mem), ARG(b.off), ARG(has_bias), ARG(g)};
        return launch(o, node, OCL_CONV2D, a, 10, n, "conv2d", err);
    }
    cl_long16 g = node->op == RC_OP_CONV2D_GRAD_INPUT ? conv_geometry(node, node, s1, s0)
                                                      : conv_geometry(node, s1, node, s0);
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(g)};
    return launch(o, node, node->op == RC_OP_CONV2D_GRAD_INPUT ? OCL_CONV2D_GRAD_INPUT : OCL_CONV2D_GRAD_WEIGHT,
                  a, 7, n, op_name(node), err);
}

/* POOL2D: x -> y; POOL2D_GRAD: gy, x -> gx. Geometry: planes, h, w, oh, ow, kernel h, w,
 * stride h, w, padding h, w (kernels.cl) */
static int run_pool2d(rci_ocl *o, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int grad = node->op == RC_OP_POOL2D_GRAD, nin = grad ? 2 : 1;
    place out = {0}, in[2] = {{0}};
    if (places(r, nin, &out, in, err))
        return -1;
    const rc_tensor *x = grad ? node->src[1] : node->src[0], *y = grad ? node->src[0] : node;
    const int32_t *ip = node->iparam;
    cl_long16 p = {{x->shape[0] * x->shape[1], x->shape[2], x->shape[3], y->shape[2], y->shape[3], ip[1],
                    ip[2], ip[3], ip[4], ip[5], ip[6], 0, 0, 0, 0, 0}};
    cl_int avg = ip[0] == RC_POOL_AVG;
    size_t n = (size_t)rc_tensor_numel(node);
    if (!grad) {
        rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(avg), ARG(p)};
        return launch(o, node, OCL_POOL2D, a, 6, n, "pool2d", err);
    }
    rci_ocl_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(avg), ARG(p)};
    return launch(o, node, OCL_POOL2D_GRAD, a, 8, n, "pool2d_grad", err);
}

/* ---- dispatch ------------------------------------------------------------------------------------ */

/* Every op that computes runs on f32, bf16 and f16 values (16-bit ones through the
 * programs built for their storage); movement ops and casts on i32 too. */
int rci_ocl_supports(const rc_backend *be, rc_op op, rc_dtype t)
{
    int real = t == RC_F32 || t == RC_BF16 || t == RC_F16;
    switch (op) {
    case RC_OP_ROPE:   /* angles in double */
        return real && ((const rci_ocl *)(const void *)be)->fp64;
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
        return real;
    default:
        return 0;
    }
}

/* Bytes of scratch node (a checked one) takes on this device: the dispatch of
 * rci_ocl_run_node, through the functions its kernels size their scratch with */
static size_t node_scratch(const rci_ocl *o, const rc_tensor *node)
{
    const rc_tensor *s = node->nsrc > 0 ? node->src[0] : NULL;
    if (rc_tensor_numel(node) == 0 || is_move(node->op) || node->op == RC_OP_CAST || !s)
        return 0;
    switch (node->op) {
    case RC_OP_MATMUL: {
        if (storage(node) == RC_F32)
            return 0;
        rci_matmul_dims d = rci_matmul_dims_of(node);
        return d.k == 0 || rci_matmul_few_rows(&d) ? 0 : matmul_half_scratch(&d);
    }
    case RC_OP_SUM:
    case RC_OP_MAX:
        return reduce_scratch(o, rc_tensor_numel(node), s->shape[node->iparam[0]]);
    case RC_OP_SUM_TO:
        if (rc_tensor_numel(s) == rc_tensor_numel(node) || rc_tensor_numel(s) == 0)
            return 0;
        return reduce_scratch(o, rc_tensor_numel(node), rc_tensor_numel(s) / rc_tensor_numel(node));
    case RC_OP_SOFTMAX:
        return f32_temps_scratch(node, 0, rc_tensor_numel(node));
    case RC_OP_EMBEDDING_GRAD:
        return f32_temps_scratch(node, 0, rc_tensor_numel(node));
    case RC_OP_CROSS_ENTROPY:
    case RC_OP_CROSS_ENTROPY_GRAD:
        return ce_scratch(o, node, lead_rows(s), last_dim(s));
    default:
        return 0;
    }
}

size_t rci_ocl_scratch_bytes(const rc_backend *be, const rc_tensor *node, size_t held)
{
    const rci_ocl *o = (const rci_ocl *)(const void *)be;
    return rci_ocl_scratch_grown(held, node_scratch(o, node));
}

int rci_ocl_run_node(rc_backend *be, const rci_node_run *r, rc_error *err)
{
    rci_ocl *o = (rci_ocl *)(void *)be;
    const rc_tensor *node = r->node;
    if (node->op == RC_OP_LEAF || node->op == RC_OP_RESHAPE || node->view_src)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: leaves and views have no kernel",
                            op_name(node));
    if (!rci_ocl_supports(be, node->op, node->dtype))
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: no %s kernel for dtype %s", op_name(node),
                            be->name, rc_dtype_name(node->dtype));
    if (rc_tensor_numel(node) == 0)
        return 0;
    if (is_move(node->op) || node->op == RC_OP_CAST)
        return run_move(o, r, err);
    switch (node->op) {
    case RC_OP_FULL: return run_full(o, r, err);
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV: return run_binary(o, r, err);
    case RC_OP_ACT: return run_act(o, r, err);
    case RC_OP_MATMUL: return run_matmul(o, r, err);
    case RC_OP_SUM:
    case RC_OP_MAX: return run_reduce(o, r, err);
    case RC_OP_SUM_TO: return run_sum_to(o, r, err);
    case RC_OP_SOFTMAX: return run_softmax(o, r, err);
    case RC_OP_LAYER_NORM: return run_layer_norm(o, r, err);
    case RC_OP_RMS_NORM: return run_rms_norm(o, r, err);
    case RC_OP_EMBEDDING: return run_embedding(o, r, err);
    case RC_OP_EMBEDDING_GRAD: return run_embedding_grad(o, r, err);
    case RC_OP_ONE_HOT: return run_one_hot(o, r, err);
    case RC_OP_CROSS_ENTROPY: return run_cross_entropy(o, r, err);
    case RC_OP_CROSS_ENTROPY_GRAD: return run_cross_entropy_grad(o, r, err);
    case RC_OP_ROPE: return run_rope(o, r, err);
    case RC_OP_DROPOUT: return run_dropout(o, r, err);
    case RC_OP_NORMAL: return run_normal(o, r, err);
    case RC_OP_WHERE: return run_where(o, r, err);
    case RC_OP_EQUAL: return run_equal(o, r, err);
    case RC_OP_CONV2D:
    case RC_OP_CONV2D_GRAD_INPUT:
    case RC_OP_CONV2D_GRAD_WEIGHT: return run_conv2d(o, r, err);
    case RC_OP_POOL2D:
    case RC_OP_POOL2D_GRAD: return run_pool2d(o, r, err);
    default: return run_unary(o, r, err);   /* AFFINE, EXP, LOG, SQRT, RSQRT, TANH */
    }
}
