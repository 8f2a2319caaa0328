/* ops_attention.c - the fused attention nodes on a device: ATTENTION, ATTENTION_STATS and
 * ATTENTION_GRAD (layouts in redco.h), with kernels.cl's k_attention* kernels: one work-item
 * per output row in work-groups of ATT_GROUP rows of one kv head, which share the key and
 * value tiles (the query and dO tiles for dk and dv) in local memory; the bias's gradient
 * one work-item per bias element. No scratch: each kernel recomputes the scores it needs.
 * Attention dropout: the key and threshold of rci_gpu_run_dropout, the mask redrawn by
 * every kernel. */
#include "node.h"

#include <math.h>

/* work-items per work-group of the tiled kernels (rows of one kv head; any size works for
 * the kernels, which read it as get_local_size) */
enum { ATT_GROUP = 64 };

/* the work-groups covering `rows` rows per kv head of B KV kv heads */
static size_t att_groups(int64_t bkv, int64_t rows)
{
    return (size_t)(bkv * ((rows + ATT_GROUP - 1) / ATT_GROUP));
}

/* the kernels' dims (B, H, KV, Tq, Tk, D, Dv, causal) and the bias's strides along
 * [B, H, Tq, Tk] with s[4] = 1 when there is a bias */
static void att_geometry(const rc_tensor *node, rci_gpu_long8 *dims, rci_gpu_long8 *bst)
{
    const rc_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *bias = node->src[3];
    int64_t d[8] = {q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2], q->shape[3],
                    v->shape[3], node->iparam[0] != 0};
    int64_t s[8] = {0};
    if (bias) {
        int64_t full[4] = {d[0], d[1], d[3], d[4]};
        rci_bcast_strides(bias, 4, full, s);
        s[4] = 1;
    }
    *dims = rci_gpu_long8_of(d);
    *bst = rci_gpu_long8_of(s);
}

/* attention dropout's key and threshold as rci_gpu_run_dropout makes them (the node's key
 * mixed with the run key; kept iff (hash >> 11) >= ceil(p 2^53)) and the kept factor;
 * thresh 0 without dropout */
static void att_dropout(const rci_node_run *r, uint64_t *key, uint64_t *thresh, float *keep)
{
    const rc_tensor *node = r->node;
    double p = node->fparam[1];
    *key = *thresh = 0;
    *keep = 1;
    if (!(p > 0))
        return;
    *key = (uint64_t)(uint32_t)node->iparam[2] | ((uint64_t)(uint32_t)node->iparam[3] << 32);
    *key ^= rci_hash64(r->run_key);
    double t = ceil(p * 9007199254740992.0);
    *thresh = (uint64_t)(t > 9007199254740992.0 ? 9007199254740992.0 : t);
    *keep = (float)(1 / (1 - p));
}

int rci_gpu_run_attention(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node, *q = node->src[0], *k = node->src[1];
    rci_gpu_place out = {0}, in[3] = {{0}}, bias = {0}, dout = {0}, stats = {0};
    int32_t has_bias, which = node->op == RC_OP_ATTENTION_GRAD ? node->iparam[1] : 0;
    if (rci_gpu_places(r, 3, &out, in, err) || rci_gpu_optional_place(r, 3, &out, &bias, &has_bias, err))
        return -1;
    if (node->op != RC_OP_ATTENTION && rci_gpu_place_of(&r->in[4], node, node->src[4]->dtype, &dout, err))
        return -1;
    if (node->op == RC_OP_ATTENTION_GRAD && rci_gpu_place_of(&r->in[5], node, node->src[5]->dtype, &stats, err))
        return -1;
    rci_gpu_long8 dims, bst;
    att_geometry(node, &dims, &bst);
    float scale = (float)node->fparam[0], keep;
    uint64_t key, thresh;
    att_dropout(r, &key, &thresh, &keep);
    int64_t bkv = k->shape[0] * k->shape[1];
    size_t qg = att_groups(bkv, q->shape[1] / k->shape[1] * q->shape[2]), kg = att_groups(bkv, k->shape[2]);
    rci_gpu_arg a[] = {ARG(out.mem), ARG(out.off), ARG(in[0].mem), ARG(in[0].off), ARG(in[1].mem),
                       ARG(in[1].off), ARG(in[2].mem), ARG(in[2].off), ARG(bias.mem), ARG(bias.off),
                       ARG(dout.mem), ARG(dout.off), ARG(stats.mem), ARG(stats.off), ARG(dims), ARG(bst),
                       ARG(scale), ARG(key), ARG(thresh), ARG(keep), ARG(which)};
    rci_gpu_arg fwd[] = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[14], a[15], a[16], a[17],
                         a[18], a[19]};
    rci_gpu_arg st[] = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[14], a[15], a[16],
                        a[17], a[18], a[19]};
    if (node->op == RC_OP_ATTENTION)
        return rci_gpu_launch_groups(g, node, RCI_K_ATTENTION, fwd, 16, qg, ATT_GROUP, "attention", err);
    if (node->op == RC_OP_ATTENTION_STATS)
        return rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_STATS, st, 18, qg, ATT_GROUP, "attention_stats",
                                     err);
    switch (which) {
    case 0:
        return rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_DQ, a, 20, qg, ATT_GROUP, "attention_grad (q)", err);
    case 1:
    case 2:
        return rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_DKV, a, 21, kg, ATT_GROUP,
                                     which == 1 ? "attention_grad (k)" : "attention_grad (v)", err);
    case 4: /* packed [dq | dk | dv]: the three kernels into consecutive parts of the output
             * (the arguments hold out.off's and which's addresses: each launch reads them) */
        if (rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_DQ, a, 20, qg, ATT_GROUP, "attention_grad (q)", err))
            return -1;
        out.off += rc_tensor_numel(q);
        which = 1;
        if (rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_DKV, a, 21, kg, ATT_GROUP, "attention_grad (k)", err))
            return -1;
        out.off += rc_tensor_numel(k);
        which = 2;
        return rci_gpu_launch_groups(g, node, RCI_K_ATTENTION_DKV, a, 21, kg, ATT_GROUP, "attention_grad (v)", err);
    default:
        return rci_gpu_launch_node(g, node, RCI_K_ATTENTION_DBIAS, a, 20, (size_t)rc_tensor_numel(node),
                                   "attention_grad (bias)", err);
    }
}
