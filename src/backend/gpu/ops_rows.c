/* ops_rows.c - the shared layer's nodes over rows and windows: reductions (sum, max,
 * sum_to), softmax and the norms, the id ops (embedding and its gradient, one-hot, the
 * cross-entropy loss and its gradient, with their id checks), rope, matrix products, and
 * convolution and pooling; and the scratch each takes (rci_gpu_node_scratch).
 *
 * Kernels that keep temporaries in their output (softmax, the cross-entropy gradient, the
 * embedding gradient's sums) keep them in f32 scratch instead for 16-bit values. A matrix
 * product is the device's GEMM (g->ops->matmul) but for an empty inner axis (zeros) and,
 * where that GEMM does not take them (gpu.h's gemm_decodes: OpenCL's), a few rows times a
 * shared matrix (a decoding step), in any dtype: one kernel that reads the weights once, as
 * stored (16-bit words directly), summing in the CPU's order. */
#include "node.h"

#include <string.h>

/* ---- reductions ------------------------------------------------------------------------------ */

enum {
    REDUCE_CHUNK_MIN = 32,     /* summed elements per work-item in the two-pass reduction, at least */
    REDUCE_ITEMS = 1 << 18,    /* work-items the first pass aims at: enough loads in flight to
                                * hide a GPU's memory latency (each work-item's are serial) */
    REDUCE_CHUNKS_MAX = 1024   /* partial sums an output's second pass adds, at most */
};

/* How a reduction of n outputs, each a sum of m elements, splits: 0 for one pass (one
 * work-item per output: enough of them, or short sums), else the number of chunks of *chunk
 * elements each output's sum is cut into, summed in parallel, then combined in order */
static int64_t reduce_split(int64_t n, int64_t m, int64_t *chunk)
{
    if (n <= 0 || n >= REDUCE_ITEMS || m < 2 * REDUCE_CHUNK_MIN)
        return 0;
    int64_t chunks = (m + REDUCE_CHUNK_MIN - 1) / REDUCE_CHUNK_MIN, want = (REDUCE_ITEMS + n - 1) / n;
    want = want < 2 ? 2 : want;
    chunks = chunks < want ? chunks : want;
    chunks = chunks < REDUCE_CHUNKS_MAX ? chunks : REDUCE_CHUNKS_MAX;
    *chunk = (m + chunks - 1) / chunks;
    return (m + *chunk - 1) / *chunk;
}

/* the outputs (n) and summed elements each (m) of a reduction's boxes; 1 when its summed
 * elements are contiguous rows a work-group sums (k_reduce_rows) */
static int reduce_sizes(const rci_gpu_box *kept, const rci_gpu_box *summed, int64_t *n, int64_t *m)
{
    *n = *m = 1;
    for (int i = 0; i < kept->nd; i++)
        *n *= kept->shape[i];
    for (int i = 0; i < summed->nd; i++)
        *m *= summed->shape[i];
    return summed->nd == 1 && summed->st[0][0] == 1 && *m >= RCI_GPU_ROW_GROUP;
}

/* Bytes of scratch a reduction over these boxes takes: its chunks' partial sums when it
 * runs in two passes, else none */
static size_t reduce_scratch(const rci_gpu *g, const rci_gpu_box *kept, const rci_gpu_box *summed)
{
    int64_t n, m, chunk;
    if (reduce_sizes(kept, summed, &n, &m))
        return 0;
    int64_t chunks = reduce_split(n, m, &chunk);
    return (size_t)(n * chunks) * (g->fp64 ? sizeof(double) : sizeof(float));
}

/* 1 when a reduction's n outputs are contiguous columns, a multiple of RCI_GPU_EW_RUN, of
 * rows n apart (k_reduce_cols' first pass) */
static int reduce_cols(const rci_gpu_box *kept, const rci_gpu_box *summed, int64_t n)
{
    return kept->nd == 1 && kept->st[0][0] == 1 && summed->nd == 1 && summed->st[0][0] == n &&
           n % RCI_GPU_EW_RUN == 0;
}

/* out [kept box] = the sum (or max) over the summed box of the input at `in`: a work-group
 * per output when the summed elements are a contiguous row of at least RCI_GPU_ROW_GROUP
 * (k_reduce_rows), else one work-item per output, or, for fewer outputs than a GPU needs
 * busy, chunks (reduce_split, fixed by the sizes) summed in parallel (scratch; by
 * k_reduce_cols, runs of columns a work-item, where the outputs are contiguous columns) and
 * then combined by a work-group an output (k_reduce_finish): the same order on every run */
static int reduce_boxes(rci_gpu *g, rc_dtype store, const rci_gpu_place *out, const rci_gpu_place *in,
                        const rci_gpu_box *kept, const rci_gpu_box *summed, int is_max, const char *what,
                        rc_error *err)
{
    int64_t n, m;
    int rows = reduce_sizes(kept, summed, &n, &m);
    int32_t mx = is_max, knd = kept->nd, snd = summed->nd;
    rci_gpu_long8 ksh = rci_gpu_long8_of(kept->shape), kst = rci_gpu_long8_of(kept->st[0]);
    rci_gpu_long8 ssh = rci_gpu_long8_of(summed->shape), sst = rci_gpu_long8_of(summed->st[0]);
    if (rows) {
        rci_gpu_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in->mem), ARG(in->off), ARG(m), ARG(mx),
                           ARG(knd), ARG(ksh), ARG(kst)};
        return g->ops->launch(g, store, RCI_K_REDUCE_ROWS, a, 9, (size_t)n * RCI_GPU_ROW_GROUP, RCI_GPU_ROW_GROUP,
                              what, err);
    }
    size_t part_bytes = reduce_scratch(g, kept, summed);
    if (!part_bytes) {
        rci_gpu_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in->mem), ARG(in->off), ARG(n), ARG(m),
                           ARG(mx), ARG(knd), ARG(ksh), ARG(kst), ARG(snd), ARG(ssh), ARG(sst)};
        return g->ops->launch(g, store, RCI_K_REDUCE, a, 13, (size_t)n, 0, what, err);
    }
    int64_t chunk, chunks = reduce_split(n, m, &chunk);
    rci_gpu_mem part = rci_gpu_scratch(g, part_bytes, err);
    if (!part)
        return -1;
    rci_gpu_arg a[] = {ARG(part), ARG(in->mem), ARG(in->off), ARG(n), ARG(m), ARG(chunk), ARG(chunks),
                       ARG(mx), ARG(knd), ARG(ksh), ARG(kst), ARG(snd), ARG(ssh), ARG(sst)};
    int32_t to_f32 = 0;
    rci_gpu_arg f[] = {ARG(out->mem), ARG(out->mem), ARG(out->off), ARG(to_f32),
                       ARG(part),     ARG(n),        ARG(chunks),   ARG(mx)};
    if (reduce_cols(kept, summed, n)) { /* a bias's gradient: runs of columns */
        rci_gpu_arg c[] = {ARG(part), ARG(in->mem), ARG(in->off), ARG(n), ARG(m), ARG(chunk), ARG(chunks), ARG(mx)};
        if (g->ops->launch(g, store, RCI_K_REDUCE_COLS, c, 8, (size_t)(n / RCI_GPU_EW_RUN * chunks), 0, what, err))
            return -1;
    } else if (g->ops->launch(g, store, RCI_K_REDUCE_PART, a, 14, (size_t)(n * chunks), 0, what, err)) {
        return -1;
    }
    return g->ops->launch(g, store, RCI_K_REDUCE_FINISH, f, 8, (size_t)n * RCI_GPU_ROW_GROUP, RCI_GPU_ROW_GROUP,
                          what, err);
}

/* a SUM or MAX node's boxes: over axis iparam[0], kept (outer, inner), summed n */
static void reduce_node_boxes(const rc_tensor *node, rci_gpu_box *kept, rci_gpu_box *summed)
{
    const rc_tensor *s = node->src[0];
    int axis = node->iparam[0];
    int64_t outer = 1, inner = 1, n = s->shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= s->shape[i];
    for (int i = axis + 1; i < s->ndim; i++)
        inner *= s->shape[i];
    *kept = (rci_gpu_box){2, {outer, inner}, {{n * inner, 1}}};
    *summed = (rci_gpu_box){1, {n}, {{inner}}};
}

/* sum / max over axis iparam[0] */
int rci_gpu_run_reduce(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}};
    if (rci_gpu_places(r, 1, &out, in, err))
        return -1;
    rci_gpu_box kept, summed;
    reduce_node_boxes(node, &kept, &summed);
    return reduce_boxes(g, rci_gpu_storage(node), &out, &in[0], &kept, &summed, node->op == RC_OP_MAX,
                        rci_gpu_op_name(node), err);
}

/* a SUM_TO node's boxes: the input's axes split into kept and summed ones */
static void sum_to_boxes(const rc_tensor *node, rci_gpu_box *kept, rci_gpu_box *summed)
{
    const rc_tensor *s = node->src[0];
    int sd = s->ndim;
    int64_t os[RC_MAX_DIMS], st[RC_MAX_DIMS];
    rci_bcast_strides(node, sd, s->shape, os);
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
    rci_gpu_box_make(kept, kn, ksh, 1, kst);
    rci_gpu_box_make(summed, sn, ssh, 1, sst);
}

/* src0 summed down to the node's shape */
int rci_gpu_run_sum_to(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node, *s = node->src[0];
    rci_gpu_place out = {0}, in[1] = {{0}};
    if (rci_gpu_places(r, 1, &out, in, err))
        return -1;
    if (rc_tensor_numel(s) == rc_tensor_numel(node))
        return g->be.copy(&g->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                          rc_tensor_nbytes(node), err);
    if (rc_tensor_numel(s) == 0)
        return g->be.fill_zero(&g->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err);
    rci_gpu_box kept, summed;
    sum_to_boxes(node, &kept, &summed);
    return reduce_boxes(g, rci_gpu_storage(node), &out, &in[0], &kept, &summed, 0, "sum_to", err);
}

/* ---- softmax (one work-item per row of the last axis) and norms (one work-group per row) ---- */

/* eps as the kernels' accumulator type: double with fp64, else float */
typedef struct {
    double d;
    float f;
} acc_arg;

static rci_gpu_arg acc_value(const rci_gpu *g, const acc_arg *a)
{
    rci_gpu_arg r = g->fp64 ? (rci_gpu_arg){sizeof a->d, &a->d} : (rci_gpu_arg){sizeof a->f, &a->f};
    return r;
}

/* softmax over the last axis of src0 * fparam[0] + src1 (optional mask, broadcast) */
int rci_gpu_run_softmax(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}}, mask = {0};
    int32_t has_mask;
    int64_t mst[RCI_GPU_BOX_MAX] = {0}, shape[RCI_GPU_BOX_MAX] = {0};
    if (rci_gpu_places(r, 1, &out, in, err) || rci_gpu_optional_place(r, 1, &out, &mask, &has_mask, err))
        return -1;
    if (has_mask)
        rci_bcast_strides(node->src[1], node->ndim, node->shape, mst);
    memcpy(shape, node->shape, (size_t)node->ndim * sizeof *shape);
    int nd = node->ndim;
    int64_t c = rci_gpu_last_dim(node), rows = rc_tensor_numel(node) / c;
    int64_t tq = nd >= 2 ? node->shape[nd - 2] : 1;
    int32_t causal = node->iparam[0] != 0, cnd = nd;
    float scale = (float)node->fparam[0];
    rci_gpu_long8 sh = rci_gpu_long8_of(shape), ms = rci_gpu_long8_of(mst);
    rci_gpu_place tmp;
    if (rci_gpu_f32_temps(g, node, &out, 0, rows * c, &tmp, err))
        return -1;
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(tmp.mem), ARG(tmp.off), ARG(in[0].mem),
                       ARG(in[0].off), ARG(mask.mem), ARG(mask.off), ARG(has_mask), ARG(rows), ARG(c),
                       ARG(tq), ARG(causal), ARG(scale), ARG(cnd), ARG(sh), ARG(ms)};
    return rci_gpu_launch_node(g, node, RCI_K_SOFTMAX, a, 17, (size_t)rows, "softmax", err);
}

int rci_gpu_run_layer_norm(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}}, w = {0}, b = {0};
    int32_t has_w, has_b;
    int64_t c = rci_gpu_last_dim(node), rows = rc_tensor_numel(node) / c;
    if (rci_gpu_places(r, 1, &out, in, err) || rci_gpu_optional_place(r, 1, &out, &w, &has_w, err) ||
        rci_gpu_optional_place(r, 2, &out, &b, &has_b, err))
        return -1;
    acc_arg eps = {node->fparam[0], (float)node->fparam[0]};
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(w.mem),
                       ARG(w.off), ARG(has_w), ARG(b.mem), ARG(b.off), ARG(has_b), ARG(c),
                       acc_value(g, &eps)};
    return rci_gpu_launch_groups(g, node, RCI_K_LAYER_NORM, a, 12, (size_t)rows, RCI_GPU_ROW_GROUP,
                                 "layer_norm", err);
}

int rci_gpu_run_rms_norm(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}}, w = {0};
    int32_t has_w;
    int64_t c = rci_gpu_last_dim(node), rows = rc_tensor_numel(node) / c;
    if (rci_gpu_places(r, 1, &out, in, err) || rci_gpu_optional_place(r, 1, &out, &w, &has_w, err))
        return -1;
    acc_arg eps = {node->fparam[0], (float)node->fparam[0]};
    float offset = (float)node->fparam[1];
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(w.mem),
                       ARG(w.off), ARG(has_w), ARG(c), acc_value(g, &eps), ARG(offset)};
    return rci_gpu_launch_groups(g, node, RCI_K_RMS_NORM, a, 10, (size_t)rows, RCI_GPU_ROW_GROUP, "rms_norm",
                                 err);
}

/* A norm's weight gradient over `rows` rows: the rows a work-group of k_norm_wgrad takes
 * (*span, at most RCI_GPU_WGRAD_ROWS: about REDUCE_CHUNKS_MAX work-groups), and their count */
static int64_t wgrad_split(int64_t rows, int64_t *span)
{
    int64_t s = (rows + REDUCE_CHUNKS_MAX - 1) / REDUCE_CHUNKS_MAX;
    *span = s < 1 ? 1 : s > RCI_GPU_WGRAD_ROWS ? RCI_GPU_WGRAD_ROWS : s;
    return (rows + *span - 1) / *span;
}

/* bytes of the work-groups' column sums a norm's weight gradient takes */
static size_t wgrad_scratch(const rci_gpu *g, const rc_tensor *node)
{
    const rc_tensor *x = node->src[0];
    int64_t c = rci_gpu_last_dim(x), span, chunks = wgrad_split(c ? rc_tensor_numel(x) / c : 0, &span);
    return (size_t)(chunks * c) * (g->fp64 ? sizeof(double) : sizeof(float));
}

/* out [C] (the compute dtype) = the rows' sum of G xhat: k_norm_wgrad's column sums by
 * work-group, then k_reduce_finish */
static int run_norm_wgrad(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node, *x = node->src[0];
    rci_gpu_place out = {0}, in[1] = {{0}}, gd = {0};
    int32_t layer = node->iparam[0], to_f32 = rci_gpu_storage(node) != RC_F32, no_max = 0;
    int64_t c = rci_gpu_last_dim(x), rows = c ? rc_tensor_numel(x) / c : 0, span, chunks = wgrad_split(rows, &span);
    if (rows == 0) /* no rows: zeros */
        return g->be.fill_zero(&g->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err);
    if (rci_gpu_places(r, 1, &out, in, err) || rci_gpu_place_of(&r->in[2], node, node->src[2]->dtype, &gd, err))
        return -1;
    rci_gpu_mem part = rci_gpu_scratch(g, wgrad_scratch(g, node), err);
    if (!part)
        return -1;
    acc_arg eps = {node->fparam[0], (float)node->fparam[0]};
    rci_gpu_arg a[] = {ARG(part), ARG(in[0].mem), ARG(in[0].off), ARG(gd.mem), ARG(gd.off), ARG(rows), ARG(c),
                       ARG(span), ARG(chunks), acc_value(g, &eps), ARG(layer)};
    rci_gpu_arg f[] = {ARG(out.mem), ARG(out.mem), ARG(out.off), ARG(to_f32), ARG(part), ARG(c), ARG(chunks),
                       ARG(no_max)};
    if (rci_gpu_launch_groups(g, node, RCI_K_NORM_WGRAD, a, 11, (size_t)chunks, RCI_GPU_ROW_GROUP, "norm_grad",
                              err))
        return -1;
    return rci_gpu_launch_groups(g, node, RCI_K_REDUCE_FINISH, f, 8, (size_t)c, RCI_GPU_ROW_GROUP, "norm_grad", err);
}

int rci_gpu_run_norm_grad(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    if (node->iparam[1])
        return run_norm_wgrad(g, r, err);
    rci_gpu_place out = {0}, in[1] = {{0}}, w = {0}, gd = {0}, ad = {0};
    int32_t has_w, has_ad, layer = node->iparam[0];
    int64_t c = rci_gpu_last_dim(node), rows = rc_tensor_numel(node) / c;
    if (rci_gpu_places(r, 1, &out, in, err) || rci_gpu_optional_place(r, 1, &out, &w, &has_w, err) ||
        rci_gpu_place_of(&r->in[2], node, node->src[2]->dtype, &gd, err) ||
        rci_gpu_optional_place(r, 3, &out, &ad, &has_ad, err))
        return -1;
    acc_arg eps = {node->fparam[0], (float)node->fparam[0]};
    float offset = (float)node->fparam[1];
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(w.mem),  ARG(w.off),
                       ARG(has_w),   ARG(gd.mem),  ARG(gd.off),    ARG(ad.mem),    ARG(ad.off), ARG(has_ad),
                       ARG(c),       acc_value(g, &eps), ARG(offset), ARG(layer)};
    return rci_gpu_launch_groups(g, node, RCI_K_NORM_GRAD, a, 16, (size_t)rows, RCI_GPU_ROW_GROUP, "norm_grad",
                                 err);
}

/* ---- ids: embedding, one-hot, cross-entropy, rope ------------------------------------------- */

/* Every one of the count ids at `ids` is in [0, n) or equal to ignore (when has_ignore);
 * otherwise the CPU's error naming the first bad one. Reads one int back (a sync). */
static int check_ids(rci_gpu *g, const rci_gpu_place *ids, int64_t count, int64_t n, int32_t ignore,
                     int has_ignore, const char *op, const char *noun, rc_error *err)
{
    if (count <= 0)
        return 0;
    if (count > INT32_MAX)
        return rc_error_set(err, RC_ERR_SHAPE, "%s: %lld ids (at most %d on %s)", op,
                            (long long)count, INT32_MAX, g->be.name);
    int32_t none = INT32_MAX, first = INT32_MAX, ig = ignore, hi = has_ignore;
    int64_t cnt = count, lim = n;
    if (g->ops->fill(g, g->fault, 0, &none, sizeof none, sizeof none, err))
        return -1;
    rci_gpu_arg a[] = {ARG(ids->mem), ARG(ids->off), ARG(cnt), ARG(lim), ARG(ig), ARG(hi),
                       ARG(g->fault)};
    if (rci_gpu_launch_f32(g, RCI_K_CHECK_IDS, a, 7, (size_t)count, op, err) ||
        g->ops->read(g, g->fault, 0, &first, sizeof first, err))
        return -1;
    if (first == INT32_MAX)
        return 0;
    int32_t id = 0;
    if (g->ops->read(g, ids->mem, (size_t)(ids->off + first) * sizeof id, &id, sizeof id, err))
        return -1;
    return rc_error_set(err, RC_ERR_INDEX, "%s: %s %d at position %lld is outside [0, %lld)", op, noun, id,
                        (long long)first, (long long)n);
}

/* table src0 [V, C], ids src1 i32 [...] -> [..., C]; shard mode (iparam[2]): the table
 * holds rows [iparam[3], iparam[3] + V) of iparam[4] */
int rci_gpu_run_embedding(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    const rc_tensor *tab = node->src[0];
    int64_t c = rci_gpu_last_dim(node), count = rc_tensor_numel(node->src[1]);
    int64_t v = node->iparam[2] ? node->iparam[4] : tab->shape[0];
    if (check_ids(g, &in[1], count, v, 0, 0, "embedding", "id", err))
        return -1;
    int64_t rows = tab->shape[0], first = node->iparam[2] ? node->iparam[3] : 0;
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(count), ARG(c), ARG(rows), ARG(first)};
    return rci_gpu_launch_node(g, node, RCI_K_EMBEDDING, a, 10, (size_t)(count * c), "embedding", err);
}

enum { EMBED_GRAD_ITEMS = 1 << 16 };   /* work-items the embedding's gradient aims at */

/* ids src0 i32 [...], grad src1 [..., C] -> [V, C]: zeros, then out[ids[i]] += grad[i] */
int rci_gpu_run_embedding_grad(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    int64_t v = node->iparam[2] ? node->iparam[4] : node->shape[0];
    int64_t c = node->shape[1], count = rc_tensor_numel(node->src[0]), rows = node->shape[0];
    rci_gpu_place acc;   /* the sums in f32: the output, or scratch rounded into it at the end */
    if (check_ids(g, &in[0], count, v, 0, 0, "embedding_grad", "id", err) ||
        rci_gpu_f32_temps(g, node, &out, 0, rows * c, &acc, err))
        return -1;
    float zero = 0;
    if (g->ops->fill(g, acc.mem, (size_t)acc.off * sizeof zero, &zero, sizeof zero,
                     (size_t)(rows * c) * sizeof zero, err))
        return -1;
    int64_t first = node->iparam[2] ? node->iparam[3] : 0;
    int32_t skip = node->iparam[1];
    /* the rows cut into spans, a work-item a column of a span: about EMBED_GRAD_ITEMS of them
     * (one a column left a GPU mostly idle, each reading every id and gradient row) */
    int64_t spans = c > 0 ? EMBED_GRAD_ITEMS / c : 1;
    spans = spans < 1 ? 1 : spans > rows ? (rows > 0 ? rows : 1) : spans;
    int64_t span = (rows + spans - 1) / spans, items = ((rows + span - 1) / span) * c;
    rci_gpu_arg a[] = {ARG(acc.mem), ARG(acc.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(count), ARG(c), ARG(rows), ARG(first), ARG(skip), ARG(span),
                       ARG(items)};
    if (rci_gpu_launch_node(g, node, RCI_K_EMBEDDING_GRAD, a, 13, (size_t)items, "embedding_grad", err))
        return -1;
    if (rci_gpu_storage(node) == RC_F32)
        return 0;
    int64_t n = rows * c;
    int32_t from = RC_F32, to = node->dtype;
    rci_gpu_arg k[] = {ARG(out.mem), ARG(out.off), ARG(to), ARG(acc.mem), ARG(acc.off), ARG(from), ARG(n)};
    return rci_gpu_launch_f32(g, RCI_K_CAST, k, 7, rci_gpu_ew_items(n), "embedding_grad", err);
}

/* ids src0 i32 [...] -> [..., depth]; ids equal to iparam[1] give zero rows */
int rci_gpu_run_one_hot(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[1] = {{0}};
    if (rci_gpu_places(r, 1, &out, in, err))
        return -1;
    int64_t depth = rci_gpu_last_dim(node), count = rc_tensor_numel(node->src[0]);
    int64_t v = node->iparam[2] ? node->iparam[4] : depth;
    int32_t ignore = node->iparam[1];
    if (check_ids(g, &in[0], count, v, ignore, 1, "one_hot", "id", err))
        return -1;
    int64_t first = node->iparam[2] ? node->iparam[3] : 0;
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(count),
                       ARG(depth), ARG(first), ARG(ignore)};
    return rci_gpu_launch_node(g, node, RCI_K_ONE_HOT, a, 8, (size_t)(count * depth), "one_hot", err);
}

/* logits src0 [..., V] and targets src1 i32 [...]: rows and V set, the targets checked */
static int ce_inputs(rci_gpu *g, const rc_tensor *node, const rci_gpu_place *tg, int64_t *rows, int64_t *v,
                     rc_error *err)
{
    const rc_tensor *lt = node->src[0];
    *v = rci_gpu_last_dim(lt);
    *rows = rci_gpu_lead_rows(lt);
    return check_ids(g, tg, *rows, *v, node->iparam[0], 1, rci_gpu_op_name(node), "target", err);
}

/* Bytes of scratch the losses take over `rows` rows: the per-row losses (cross_entropy), the
 * scale (cross_entropy_grad) */
static size_t ce_scratch(const rci_gpu *g, const rc_tensor *node, int64_t rows)
{
    if (node->op == RC_OP_CROSS_ENTROPY)
        return (size_t)(rows ? rows : 1) * (g->fp64 ? sizeof(double) : sizeof(float));
    return sizeof(float);
}

/* the mean over targets != iparam[0] of logsumexp(row) - row[target]: per-row losses in
 * scratch, then their sum in row order */
int rci_gpu_run_cross_entropy(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    int64_t rows, v;
    if (rci_gpu_places(r, 2, &out, in, err) || ce_inputs(g, node, &in[1], &rows, &v, err))
        return -1;
    rci_gpu_mem loss = rci_gpu_scratch(g, ce_scratch(g, node, rows), err);
    if (!loss)
        return -1;
    int32_t ignore = node->iparam[0];
    rci_gpu_arg a[] = {ARG(loss), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem), ARG(in[1].off), ARG(v),
                       ARG(ignore)};
    if (rows > 0 &&
        rci_gpu_launch_groups(g, node, RCI_K_CE_ROWS, a, 7, (size_t)rows, RCI_GPU_ROW_GROUP, "cross_entropy", err))
        return -1;
    rci_gpu_arg m[] = {ARG(out.mem), ARG(out.off), ARG(loss), ARG(in[1].mem), ARG(in[1].off),
                       ARG(rows), ARG(ignore)};
    return rci_gpu_launch_f32(g, RCI_K_CE_MEAN, m, 7, 1, "cross_entropy", err);
}

/* (softmax - onehot) * g / count over valid rows; src2 the scalar upstream gradient */
int rci_gpu_run_cross_entropy_grad(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[3] = {{0}};
    int64_t rows, v;
    if (rci_gpu_places(r, 3, &out, in, err))
        return -1;
    if (ce_inputs(g, node, &in[1], &rows, &v, err))
        return -1;
    rci_gpu_mem scale = rci_gpu_scratch(g, ce_scratch(g, node, rows), err);
    if (!scale)
        return -1;
    int32_t ignore = node->iparam[0];
    rci_gpu_arg a[] = {ARG(scale), ARG(in[1].mem), ARG(in[1].off), ARG(rows), ARG(ignore),
                       ARG(in[2].mem), ARG(in[2].off)};
    if (rci_gpu_launch_f32(g, RCI_K_CE_SCALE, a, 7, 1, "cross_entropy_grad", err))
        return -1;
    rci_gpu_arg ga[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                        ARG(in[1].off), ARG(scale), ARG(v), ARG(ignore)};
    return rows > 0 ? rci_gpu_launch_groups(g, node, RCI_K_CE_GRAD, ga, 9, (size_t)rows, RCI_GPU_ROW_GROUP,
                                            "cross_entropy_grad", err)
                    : 0;
}

/* x src0 [..., T, H, D], positions src1 i32 (row r uses pos[r % P]); iparam: rotary dims,
 * mode, inverse; fparam[0] theta */
int rci_gpu_run_rope(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    int nd = node->ndim, mode = node->iparam[1];
    int64_t rot = node->iparam[0];
    int64_t d = node->shape[nd - 1], h = node->shape[nd - 2], n = rc_tensor_numel(node);
    int64_t np = rc_tensor_numel(node->src[1]);
    int32_t inter = mode == RC_ROPE_INTERLEAVED, inverse = node->iparam[2] != 0;
    double theta = node->fparam[0];
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(np), ARG(n), ARG(h), ARG(d), ARG(rot), ARG(inter),
                       ARG(inverse), ARG(theta)};
    return rci_gpu_launch_node(g, node, RCI_K_ROPE, a, 14, (size_t)n, "rope", err);
}

/* ---- matrix products ---------------------------------------------------------------------- */

/* whether k_matmul_rows runs the product (a decoding step's few rows where the backend's
 * GEMM does not take them) */
static int matmul_by_rows(const rci_gpu *g, const rci_matmul_dims *d)
{
    return rci_matmul_few_rows(d) && !g->gemm_decodes;
}

/* a decoding step: rows (<= RCI_MATMUL_FEW_ROWS) of a times the shared 2-D b, whose 16-bit
 * words are read as they are (half the bytes of f32 weights), summed in f32 */
static int matmul_rows(rci_gpu *g, const rc_tensor *node, const rci_gpu_place *out, const rci_gpu_place *in,
                       int64_t rows, int64_t n, int64_t k, rc_error *err)
{
    int64_t cr = rows, cn = n, ck = k;
    int32_t ta = node->iparam[0] != 0, tb = node->iparam[1] != 0;
    rci_gpu_arg a[] = {ARG(out->mem), ARG(out->off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(cr), ARG(cn), ARG(ck), ARG(ta), ARG(tb)};
    return rci_gpu_launch_node(g, node, RCI_K_MATMUL_ROWS, a, 11, (size_t)n, "matmul", err);
}

/* src0 a [..., M, K] (stored [..., K, M] when iparam[0]), src1 b [..., K, N] (stored
 * [..., N, K] when iparam[1]) -> [..., M, N]; either operand may be shared by all batches */
int rci_gpu_run_matmul(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, 2, &out, in, err))
        return -1;
    rci_matmul_dims d = rci_matmul_dims_of(node);
    if (d.k == 0)
        return g->be.fill_zero(&g->be, r->out.buf, r->out.off, rc_tensor_nbytes(node), err);
    if (matmul_by_rows(g, &d)) /* decoding, f32 too: one pass over the weights, no GEMM set-up */
        return matmul_rows(g, node, &out, in, d.batch * d.m, d.n, d.k, err);
    return g->ops->matmul(g, node, &d, rci_gpu_storage(node), &out, in, err);
}

/* ---- convolution and pooling (NCHW; direct kernels, one work-item per output element) ------------ */

/* n, c, h, w, o, kh, kw, oh, ow, stride h, w, padding h, w, dilation h, w, groups (kernels.cl) */
static rci_gpu_long16 conv_geometry(const rc_tensor *node, const rc_tensor *x, const rc_tensor *w,
                                    const rc_tensor *y)
{
    const int32_t *ip = node->iparam;
    rci_gpu_long16 geo = {{x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], w->shape[2],
                           w->shape[3], y->shape[2], y->shape[3], ip[0], ip[1], ip[2], ip[3], ip[4], ip[5],
                           ip[6]}};
    return geo;
}

/* CONV2D: x, weight, bias? -> y; CONV2D_GRAD_INPUT: gy, weight -> gx; CONV2D_GRAD_WEIGHT: gy, x -> gw */
int rci_gpu_run_conv2d(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int nin = node->op == RC_OP_CONV2D && node->nsrc > 2 && node->src[2] ? 3 : 2;
    rci_gpu_place out = {0}, in[3] = {{0}};
    if (rci_gpu_places(r, nin, &out, in, err))
        return -1;
    const rc_tensor *s0 = node->src[0], *s1 = node->src[1];
    size_t n = (size_t)rc_tensor_numel(node);
    if (node->op == RC_OP_CONV2D) {
        rci_gpu_long16 geo = conv_geometry(node, s0, s1, node);
        int32_t has_bias = nin == 3;
        rci_gpu_place b = has_bias ? in[2] : in[0];
        rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                           ARG(in[1].off), ARG(b.mem), ARG(b.off), ARG(has_bias), ARG(geo)};
        return rci_gpu_launch_node(g, node, RCI_K_CONV2D, a, 10, n, "conv2d", err);
    }
    int gi = node->op == RC_OP_CONV2D_GRAD_INPUT;
    rci_gpu_long16 geo = gi ? conv_geometry(node, node, s1, s0) : conv_geometry(node, s1, node, s0);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(geo)};
    return rci_gpu_launch_node(g, node, gi ? RCI_K_CONV2D_GRAD_INPUT : RCI_K_CONV2D_GRAD_WEIGHT, a, 7, n,
                               rci_gpu_op_name(node), err);
}

/* POOL2D: x -> y; POOL2D_GRAD: gy, x -> gx. Geometry: planes, h, w, oh, ow, kernel h, w,
 * stride h, w, padding h, w (kernels.cl) */
int rci_gpu_run_pool2d(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int grad = node->op == RC_OP_POOL2D_GRAD, nin = grad ? 2 : 1;
    rci_gpu_place out = {0}, in[2] = {{0}};
    if (rci_gpu_places(r, nin, &out, in, err))
        return -1;
    const rc_tensor *x = grad ? node->src[1] : node->src[0], *y = grad ? node->src[0] : node;
    const int32_t *ip = node->iparam;
    rci_gpu_long16 p = {{x->shape[0] * x->shape[1], x->shape[2], x->shape[3], y->shape[2], y->shape[3],
                         ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], 0, 0, 0, 0, 0}};
    int32_t avg = ip[0] == RC_POOL_AVG;
    size_t n = (size_t)rc_tensor_numel(node);
    if (!grad) {
        rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(avg), ARG(p)};
        return rci_gpu_launch_node(g, node, RCI_K_POOL2D, a, 6, n, "pool2d", err);
    }
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(avg), ARG(p)};
    return rci_gpu_launch_node(g, node, RCI_K_POOL2D_GRAD, a, 8, n, "pool2d_grad", err);
}

/* ---- scratch ----------------------------------------------------------------------------------- */

/* the dispatch of run.c's run_node, through the functions its kernels size their scratch
 * with (and the device's for a GEMM) */
size_t rci_gpu_node_scratch(const rci_gpu *g, const rc_tensor *node)
{
    const rc_tensor *s = node->nsrc > 0 ? node->src[0] : NULL;
    rci_gpu_box kept, summed;
    if (rc_tensor_numel(node) == 0 || rci_gpu_is_move(node->op) || node->op == RC_OP_CAST || !s)
        return 0;
    switch (node->op) {
    case RC_OP_MATMUL: {
        rci_matmul_dims d = rci_matmul_dims_of(node);
        return d.k == 0 || matmul_by_rows(g, &d) ? 0 : g->ops->matmul_scratch(g, &d, rci_gpu_storage(node));
    }
    case RC_OP_SUM:
    case RC_OP_MAX:
        reduce_node_boxes(node, &kept, &summed);
        return reduce_scratch(g, &kept, &summed);
    case RC_OP_SUM_TO:
        if (rc_tensor_numel(s) == rc_tensor_numel(node) || rc_tensor_numel(s) == 0)
            return 0;
        sum_to_boxes(node, &kept, &summed);
        return reduce_scratch(g, &kept, &summed);
    case RC_OP_SOFTMAX:
        return rci_gpu_f32_temps_scratch(node, 0, rc_tensor_numel(node));
    case RC_OP_EMBEDDING_GRAD:
        return rci_gpu_f32_temps_scratch(node, 0, rc_tensor_numel(node));
    case RC_OP_CROSS_ENTROPY:
    case RC_OP_CROSS_ENTROPY_GRAD:
        return ce_scratch(g, node, rci_gpu_lead_rows(s));
    case RC_OP_ATTENTION:
    case RC_OP_ATTENTION_STATS:
    case RC_OP_ATTENTION_GRAD:
        return rci_gpu_attention_scratch(g, node);
    case RC_OP_NORM_GRAD:
        return node->iparam[1] ? wgrad_scratch(g, node) : 0;
    default:
        return 0;
    }
}

