/* ops_attention.c - the fused attention nodes on a device: ATTENTION, ATTENTION_STATS and
 * ATTENTION_GRAD (layouts in redco.h), built from the device's matrix products (cuBLAS,
 * CLBlast: g->ops->matmul in f32) and kernels.cl's row kernels, a chunk of (batch, kv head)
 * pairs at a time, so the [Tq, Tk] scores live only in scratch for one chunk and never for
 * the backward:
 *
 *   forward   S = Q K^T; P = k_attention_rows(S) (scale, bias, causal mask, softmax,
 *             dropout); O = P V
 *   stats     the forward with each row's log-sum-exp, O into scratch, delta = dO . O
 *   gradient  S = Q K^T, dP = dO V^T; k_attention_rows_grad: dS = p (z dP - delta) scale and
 *             z p; dQ = dS K, dK = dS^T Q, dV = (z p)^T dO
 *
 * A pair's G query heads sharing a kv head are G Tq consecutive rows of q (and of dO, O,
 * dQ), so each product is one strided batch over the chunk's pairs, and dK, dV sum the G
 * heads inside their product: no key/value head is copied. The products run in f32: 16-bit
 * q, k, v and dO are widened into scratch first and results rounded once at the end, as the
 * CPU's kernels compute 16-bit attention in f32. The bias's gradient is k_attention_dbias,
 * one work-item per bias element, recomputing its scores. Attention dropout: DROPOUT's
 * mask (rci_gpu_mask_of), redrawn by every kernel. */
#include "node.h"

#include <string.h>

enum { ATT_CHUNK_BYTES = 128 << 20 };   /* scratch a chunk of pairs aims at (one pair at least) */

/* A node's attention sizes: q [B, H, Tq, D], k [B, KV, Tk, D], v [B, KV, Tk, Dv]; R = G Tq
 * rows of q per (batch, kv head) pair; half: 16-bit values (f32 copies in scratch) */
typedef struct {
    int64_t B, H, KV, Tq, Tk, D, Dv, R, pairs;
    int half, which;
} att_shape;

static att_shape att_shape_of(const rc_tensor *node)
{
    const rc_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    att_shape s;
    s.B = q->shape[0];
    s.H = q->shape[1];
    s.KV = k->shape[1];
    s.Tq = q->shape[2];
    s.Tk = k->shape[2];
    s.D = q->shape[3];
    s.Dv = v->shape[3];
    s.R = s.H / s.KV * s.Tq;
    s.pairs = s.B * s.KV;
    s.half = rci_gpu_storage(node) != RC_F32;
    s.which = node->op == RC_OP_ATTENTION_GRAD ? node->iparam[1] : 0;
    return s;
}

/* One pair's f32 scratch, in floats, by part: scores, dP, the output's f32 rows, the f32
 * copies of q, k, v, dO and of the gradients dq, dk, dv (0 for a part the op has not) */
enum { PART_S, PART_DP, PART_O, PART_Q, PART_K, PART_V, PART_DO, PART_DQ, PART_DK, PART_DV, PARTS };

static void att_parts(const att_shape *s, rc_op op, int64_t *n)
{
    int grad = op == RC_OP_ATTENTION_GRAD, half = s->half;
    n[PART_S] = s->R * s->Tk;
    n[PART_DP] = grad ? s->R * s->Tk : 0;
    n[PART_O] = op == RC_OP_ATTENTION_STATS || (op == RC_OP_ATTENTION && half) ? s->R * s->Dv : 0;
    n[PART_Q] = half ? s->R * s->D : 0;
    n[PART_K] = half ? s->Tk * s->D : 0;
    n[PART_V] = half ? s->Tk * s->Dv : 0;
    n[PART_DO] = half && grad ? s->R * s->Dv : 0;
    n[PART_DQ] = half && grad ? s->R * s->D : 0;
    n[PART_DK] = half && grad ? s->Tk * s->D : 0;
    n[PART_DV] = half && grad ? s->Tk * s->Dv : 0;
}

static size_t att_chunk_bytes = ATT_CHUNK_BYTES;

void rci_gpu_attention_chunk(size_t bytes)
{
    att_chunk_bytes = bytes ? bytes : ATT_CHUNK_BYTES;
}

/* the floats of scratch one pair takes, all parts */
static int64_t att_pair_floats(const att_shape *s, rc_op op)
{
    int64_t n[PARTS], per = 0;
    att_parts(s, op, n);
    for (int i = 0; i < PARTS; i++)
        per += n[i];
    return per;
}

/* pairs per chunk: as many as fit att_chunk_bytes, at least one */
static int64_t att_chunk_pairs(const att_shape *s, rc_op op)
{
    int64_t per = att_pair_floats(s, op);
    int64_t fit = per ? (int64_t)(att_chunk_bytes / sizeof(float)) / per : s->pairs;
    fit = fit < 1 ? 1 : fit;
    return fit < s->pairs ? fit : s->pairs;
}

size_t rci_gpu_attention_scratch(const rc_tensor *node)
{
    att_shape s = att_shape_of(node);
    if (node->op == RC_OP_ATTENTION_GRAD && s.which == 3)
        return 0;
    return (size_t)(att_chunk_pairs(&s, node->op) * att_pair_floats(&s, node->op)) * sizeof(float);
}

/* the kernels' dims (B, H, KV, Tq, Tk, D, Dv, causal) and the bias's strides along
 * [B, H, Tq, Tk] with s[4] = 1 when there is a bias */
static void att_geometry(const rc_tensor *node, const att_shape *a, rci_gpu_long8 *dims, rci_gpu_long8 *bst)
{
    int64_t d[8] = {a->B, a->H, a->KV, a->Tq, a->Tk, a->D, a->Dv, node->iparam[0] != 0};
    int64_t s[8] = {0};
    if (node->src[3]) {
        int64_t full[4] = {a->B, a->H, a->Tq, a->Tk};
        rci_bcast_strides(node->src[3], 4, full, s);
        s[4] = 1;
    }
    *dims = rci_gpu_long8_of(d);
    *bst = rci_gpu_long8_of(s);
}

/* What every kernel of a node's run takes: the node, its sizes, places and the row
 * kernels' arguments */
typedef struct {
    rci_gpu *g;
    const rc_tensor *node;
    att_shape s;
    rc_dtype store;
    rci_gpu_place out, in[3], bias, dout, stats;
    rci_gpu_long8 dims, bst;
    float scale;
    rci_gpu_mask drop;            /* attention dropout's mask (thresh 0: none) */
    rci_gpu_mem scratch;
    int64_t part[PARTS];   /* the chunk's parts' float offsets in scratch */
} att_run;

/* n values of dtype `from` at src into dtype `to` at dst (k_cast) */
static int att_cast(rci_gpu *g, rci_gpu_place dst, rc_dtype to, rci_gpu_place src, rc_dtype from, int64_t n,
                    rc_error *err)
{
    int32_t t = to, f = from;
    rci_gpu_arg a[] = {ARG(dst.mem), ARG(dst.off), ARG(t), ARG(src.mem), ARG(src.off), ARG(f), ARG(n)};
    return rci_gpu_launch_f32(g, RCI_K_CAST, a, 7, (size_t)n, "attention", err);
}

static rci_gpu_place att_part(const att_run *a, int part)
{
    rci_gpu_place p = {a->scratch, a->part[part]};
    return p;
}

/* An operand of the chunk's products from input x (per elements a pair, from pair p0, np
 * pairs): in place for f32, else widened into its part of scratch */
static int att_operand(att_run *a, rci_gpu_place x, int part, int64_t per, int64_t p0, int64_t np,
                       rci_gpu_place *op, rc_error *err)
{
    rci_gpu_place at = {x.mem, x.off + p0 * per};
    if (!a->s.half) {
        *op = at;
        return 0;
    }
    *op = att_part(a, part);
    return att_cast(a->g, *op, RC_F32, at, a->store, np * per, err);
}

/* A result of the chunk's products into output y (per elements a pair, from pair p0): the
 * output itself for f32, else its part of scratch, rounded into y by att_store */
static rci_gpu_place att_result(const att_run *a, rci_gpu_place y, int part, int64_t per, int64_t p0)
{
    rci_gpu_place at = {y.mem, y.off + p0 * per};
    return a->s.half ? att_part(a, part) : at;
}

static int att_store(att_run *a, rci_gpu_place y, int part, int64_t per, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place at = {y.mem, y.off + p0 * per};
    return a->s.half ? att_cast(a->g, at, a->store, att_part(a, part), RC_F32, np * per, err) : 0;
}

/* c [np, m, n] = op(a) [m, k] op(b) [k, n] per pair in f32 (a stored [k, m] when ta, b
 * [n, k] when tb); zeros when k is 0 */
static int att_gemm(att_run *a, int64_t np, int ta, int tb, int64_t m, int64_t n, int64_t k, rci_gpu_place x,
                    rci_gpu_place y, rci_gpu_place c, rc_error *err)
{
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) {
        float zero = 0;
        return a->g->ops->fill(a->g, c.mem, (size_t)c.off * sizeof(float), &zero, sizeof zero,
                               (size_t)(np * m * n) * sizeof(float), err);
    }
    rci_matmul_dims d = {ta, tb, m, n, k, k, np, np, np};
    rci_gpu_place in[2] = {x, y};
    return a->g->ops->matmul(a->g, a->node, &d, RC_F32, &c, in, err);
}

/* k_attention_rows over the chunk's np R rows from pair p0 (stats: the node's output) */
static int att_rows(att_run *a, int64_t p0, int64_t np, int want_stats, rc_error *err)
{
    rci_gpu_place s = att_part(a, PART_S);
    int32_t ws = want_stats;
    rci_gpu_arg args[] = {ARG(s.mem), ARG(s.off), ARG(a->out.mem), ARG(a->out.off), ARG(ws), ARG(a->bias.mem),
                          ARG(a->bias.off), ARG(a->dims), ARG(a->bst), ARG(a->scale), ARG(a->drop.key),
                          ARG(a->drop.thresh), ARG(a->drop.keep), ARG(p0)};
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS, args, 14, (size_t)(np * a->s.R),
                                 RCI_GPU_ROW_GROUP, "attention (softmax rows)", err);
}


/* Forward and stats, a chunk: S = Q K^T, the rows, O = P V (into the output, or for the
 * stats into scratch, then delta = dO . O) */
static int att_forward_chunk(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    const att_shape *s = &a->s;
    int stats = a->node->op == RC_OP_ATTENTION_STATS;
    rci_gpu_place q, k, v;
    if (att_operand(a, a->in[0], PART_Q, s->R * s->D, p0, np, &q, err) ||
        att_operand(a, a->in[1], PART_K, s->Tk * s->D, p0, np, &k, err) ||
        att_operand(a, a->in[2], PART_V, s->Tk * s->Dv, p0, np, &v, err) ||
        att_gemm(a, np, 0, 1, s->R, s->Tk, s->D, q, k, att_part(a, PART_S), err) ||
        att_rows(a, p0, np, stats, err))
        return -1;
    rci_gpu_place o = stats ? att_part(a, PART_O) : att_result(a, a->out, PART_O, s->R * s->Dv, p0);
    if (att_gemm(a, np, 0, 0, s->R, s->Dv, s->Tk, att_part(a, PART_S), v, o, err))
        return -1;
    if (!stats)
        return att_store(a, a->out, PART_O, s->R * s->Dv, p0, np, err);
    int64_t rows = np * s->R, row0 = p0 * s->R, dv = s->Dv;
    rci_gpu_arg args[] = {ARG(a->out.mem), ARG(a->out.off), ARG(o.mem), ARG(o.off), ARG(a->dout.mem),
                          ARG(a->dout.off), ARG(dv), ARG(rows), ARG(row0)};
    return rci_gpu_launch_node(a->g, a->node, RCI_K_ATTENTION_DELTA, args, 9, (size_t)rows, "attention_stats (delta)",
                               err);
}

/* The gradients' places in the output: dq, dk, dv (packed: one after the other) */
static void att_grad_places(const att_run *a, rci_gpu_place *dq, rci_gpu_place *dk, rci_gpu_place *dv)
{
    const att_shape *s = &a->s;
    *dq = *dk = *dv = a->out;
    if (s->which == 4) {
        dk->off += s->B * s->H * s->Tq * s->D;
        dv->off = dk->off + s->pairs * s->Tk * s->D;
    }
}

/* Gradients, a chunk: S = Q K^T, dP = dO V^T, the rows into dS and z p, then the products
 * of the gradients asked for */
static int att_grad_chunk(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    const att_shape *s = &a->s;
    int w = s->which, want_q = w == 0 || w == 4, want_k = w == 1 || w == 4, want_v = w == 2 || w == 4;
    rci_gpu_place q, k, v, dout, ds = att_part(a, PART_S), zp = att_part(a, PART_DP), dq, dk, dv;
    att_grad_places(a, &dq, &dk, &dv);
    if (att_operand(a, a->in[0], PART_Q, s->R * s->D, p0, np, &q, err) ||
        att_operand(a, a->in[1], PART_K, s->Tk * s->D, p0, np, &k, err) ||
        att_operand(a, a->in[2], PART_V, s->Tk * s->Dv, p0, np, &v, err) ||
        att_operand(a, a->dout, PART_DO, s->R * s->Dv, p0, np, &dout, err) ||
        att_gemm(a, np, 0, 1, s->R, s->Tk, s->D, q, k, ds, err) ||
        att_gemm(a, np, 0, 1, s->R, s->Tk, s->Dv, dout, v, zp, err))
        return -1;
    rci_gpu_arg args[] = {ARG(ds.mem), ARG(ds.off), ARG(zp.mem), ARG(zp.off), ARG(a->stats.mem), ARG(a->stats.off),
                          ARG(a->bias.mem), ARG(a->bias.off), ARG(a->dims), ARG(a->bst), ARG(a->scale),
                          ARG(a->drop.key), ARG(a->drop.thresh), ARG(a->drop.keep), ARG(p0)};
    if (rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS_GRAD, args, 15, (size_t)(np * s->R),
                              RCI_GPU_ROW_GROUP, "attention_grad (rows)", err))
        return -1;
    int64_t nq = s->R * s->D, nk = s->Tk * s->D, nv = s->Tk * s->Dv;
    if (want_q && (att_gemm(a, np, 0, 0, s->R, s->D, s->Tk, ds, k, att_result(a, dq, PART_DQ, nq, p0), err) ||
                   att_store(a, dq, PART_DQ, nq, p0, np, err)))
        return -1;
    if (want_k && (att_gemm(a, np, 1, 0, s->Tk, s->D, s->R, ds, q, att_result(a, dk, PART_DK, nk, p0), err) ||
                   att_store(a, dk, PART_DK, nk, p0, np, err)))
        return -1;
    if (want_v && (att_gemm(a, np, 1, 0, s->Tk, s->Dv, s->R, zp, dout, att_result(a, dv, PART_DV, nv, p0), err) ||
                   att_store(a, dv, PART_DV, nv, p0, np, err)))
        return -1;
    return 0;
}

/* the bias's gradient: k_attention_dbias, one work-item per bias element */
static int att_dbias(att_run *a, rc_error *err)
{
    rci_gpu_arg args[] = {ARG(a->out.mem),   ARG(a->out.off),  ARG(a->in[0].mem), ARG(a->in[0].off),
                          ARG(a->in[1].mem), ARG(a->in[1].off), ARG(a->in[2].mem), ARG(a->in[2].off),
                          ARG(a->bias.mem),  ARG(a->bias.off), ARG(a->dout.mem),  ARG(a->dout.off),
                          ARG(a->stats.mem), ARG(a->stats.off), ARG(a->dims),     ARG(a->bst),
                          ARG(a->scale),     ARG(a->drop.key), ARG(a->drop.thresh), ARG(a->drop.keep)};
    return rci_gpu_launch_node(a->g, a->node, RCI_K_ATTENTION_DBIAS, args, 20, (size_t)rc_tensor_numel(a->node),
                               "attention_grad (bias)", err);
}

/* the node's places, geometry and dropout into a */
static int att_run_init(att_run *a, rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node;
    int32_t has_bias;
    memset(a, 0, sizeof *a);
    a->g = g;
    a->node = node;
    a->s = att_shape_of(node);
    a->store = rci_gpu_storage(node);
    if (rci_gpu_places(r, 3, &a->out, a->in, err) || rci_gpu_optional_place(r, 3, &a->out, &a->bias, &has_bias, err))
        return -1;
    if (node->op != RC_OP_ATTENTION && rci_gpu_place_of(&r->in[4], node, node->src[4]->dtype, &a->dout, err))
        return -1;
    if (node->op == RC_OP_ATTENTION_GRAD && rci_gpu_place_of(&r->in[5], node, node->src[5]->dtype, &a->stats, err))
        return -1;
    att_geometry(node, &a->s, &a->dims, &a->bst);
    a->scale = (float)node->fparam[0];
    a->drop = rci_gpu_mask_of(r, 2, node->fparam[1]);
    return 0;
}

/* the scratch for chunks of np pairs, its parts laid out one after the other */
static int att_scratch(att_run *a, int64_t np, rc_error *err)
{
    int64_t n[PARTS], at = 0;
    att_parts(&a->s, a->node->op, n);
    for (int i = 0; i < PARTS; i++) {
        a->part[i] = at;
        at += np * n[i];
    }
    a->scratch = rci_gpu_scratch(a->g, (size_t)at * sizeof(float), err);
    return a->scratch ? 0 : -1;
}

int rci_gpu_run_attention(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    att_run a;
    if (att_run_init(&a, g, r, err))
        return -1;
    if (a.s.which == 3)
        return att_dbias(&a, err);
    int64_t per = att_chunk_pairs(&a.s, r->node->op);
    if (att_scratch(&a, per, err))
        return -1;
    for (int64_t p0 = 0; p0 < a.s.pairs; p0 += per) {
        int64_t np = a.s.pairs - p0 < per ? a.s.pairs - p0 : per;
        int bad = r->node->op == RC_OP_ATTENTION_GRAD ? att_grad_chunk(&a, p0, np, err)
                                                      : att_forward_chunk(&a, p0, np, err);
        if (bad)
            return -1;
    }
    return 0;
}
