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

enum {
    ATT_CHUNK_BYTES = 128 << 20,    /* scratch a chunk of pairs aims at (one pair at least) */
    ATT_SPLITS = 3,                 /* 16-bit parts of a split product's float operand (kernels.cl's) */
    ATT_ALIGN = 64                  /* floats: where each part of the scratch starts */
};

/* How a node's products run: f32 values in f32 (ATT_F32); 16-bit values widened into f32
 * scratch (ATT_WIDEN); bf16 values as stored into f32 results, float operands in parts
 * (ATT_SPLIT; ATT_SPLIT_WIDENED: the same on a backend without matmul_wide, its products'
 * operands widened into scratch first, which tests use to run the split on OpenCL) */
enum { ATT_F32, ATT_WIDEN, ATT_SPLIT, ATT_SPLIT_WIDENED };

/* A node's attention sizes: q [B, H, Tq, D], k [B, KV, Tk, D], v [B, KV, Tk, Dv]; R = G Tq
 * rows of q per (batch, kv head) pair; mode: how the products run */
typedef struct {
    int64_t B, H, KV, Tq, Tk, D, Dv, R, pairs;
    int mode, which;
} att_shape;

static int att_split_force = -1;

void rci_gpu_attention_split(int on)
{
    att_split_force = on;
}

/* the node's mode on g: ATT_SPLIT for bf16 where g has matmul_wide (or where tests force
 * it: rci_gpu_attention_split) */
static int att_mode(const rci_gpu *g, const rc_tensor *node)
{
    rc_dtype store = rci_gpu_storage(node);
    if (store == RC_F32)
        return ATT_F32;
    int split = store == RC_BF16 && (att_split_force >= 0 ? att_split_force : g->ops->matmul_wide != NULL);
    if (!split)
        return ATT_WIDEN;
    return g->ops->matmul_wide ? ATT_SPLIT : ATT_SPLIT_WIDENED;
}

static att_shape att_shape_of(const rci_gpu *g, const rc_tensor *node)
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
    s.mode = att_mode(g, node);
    s.which = node->op == RC_OP_ATTENTION_GRAD ? node->iparam[1] : 0;
    return s;
}

/* One pair's scratch, in floats, by part: scores, dP; the split parts of P or dS and of
 * z p (16-bit [R, ATT_SPLITS Tk]); the output's f32 rows; the f32 copies of q, k, v, dO
 * (ATT_WIDEN); k and v stacked ATT_SPLITS times (16-bit); the f32 gradients dq and dk, dv
 * ([ATT_SPLITS Tk, .] when split); the widened operands of a split product on a backend
 * without matmul_wide (0 for a part the op has not) */
enum {
    PART_S, PART_DP, PART_P2, PART_Z2, PART_O, PART_Q, PART_K, PART_V, PART_DO, PART_K2, PART_V2, PART_DQ,
    PART_DK, PART_DV, PART_WA, PART_WB, PARTS
};

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* floats holding n 16-bit values */
static int64_t att_halves(int64_t n)
{
    return (n + 1) / 2;
}

static void att_parts(const att_shape *s, rc_op op, int64_t *n)
{
    int grad = op == RC_OP_ATTENTION_GRAD, widen = s->mode == ATT_WIDEN;
    int split = s->mode == ATT_SPLIT || s->mode == ATT_SPLIT_WIDENED, half = s->mode != ATT_F32;
    int64_t R = s->R, Tk = s->Tk, D = s->D, Dv = s->Dv, S3 = ATT_SPLITS * Tk;
    memset(n, 0, PARTS * sizeof *n);
    n[PART_S] = R * Tk;
    n[PART_DP] = grad ? R * Tk : 0;
    n[PART_P2] = split ? att_halves(R * S3) : 0;
    n[PART_Z2] = split && grad ? att_halves(R * S3) : 0;
    n[PART_O] = !grad && (op == RC_OP_ATTENTION_STATS || half) ? R * Dv : 0;
    n[PART_Q] = widen ? R * D : 0;
    n[PART_K] = widen ? Tk * D : 0;
    n[PART_V] = widen ? Tk * Dv : 0;
    n[PART_DO] = widen && grad ? R * Dv : 0;
    n[PART_K2] = split && grad ? att_halves(S3 * D) : 0;
    n[PART_V2] = split && !grad ? att_halves(S3 * Dv) : 0;
    n[PART_DQ] = half && grad ? R * D : 0;
    n[PART_DK] = half && grad ? (split ? S3 : Tk) * D : 0;
    n[PART_DV] = half && grad ? (split ? S3 : Tk) * Dv : 0;
    if (s->mode == ATT_SPLIT_WIDENED) {
        n[PART_WA] = R * max3(S3, D, Dv);
        n[PART_WB] = (S3 > R ? S3 : R) * (D > Dv ? D : Dv);
    }
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

/* The scratch of chunks of np pairs: its parts' float offsets into part[PARTS] (when not
 * NULL), one after the other, each from a multiple of ATT_ALIGN floats (what tensor cores'
 * products want of their operands); its floats in all */
static int64_t att_layout(const att_shape *s, rc_op op, int64_t np, int64_t *part)
{
    int64_t n[PARTS], at = 0;
    att_parts(s, op, n);
    for (int i = 0; i < PARTS; i++) {
        if (part)
            part[i] = at;
        at += (np * n[i] + ATT_ALIGN - 1) / ATT_ALIGN * ATT_ALIGN;
    }
    return at;
}

size_t rci_gpu_attention_scratch(const rci_gpu *g, const rc_tensor *node)
{
    att_shape s = att_shape_of(g, node);
    if (node->op == RC_OP_ATTENTION_GRAD && s.which == 3)
        return 0;
    return (size_t)att_layout(&s, node->op, att_chunk_pairs(&s, node->op), NULL) * sizeof(float);
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

static int att_is_split(const att_run *a)
{
    return a->s.mode == ATT_SPLIT || a->s.mode == ATT_SPLIT_WIDENED;
}

/* n values of dtype `from` at src into dtype `to` at dst (k_cast) */
static int att_cast(rci_gpu *g, rci_gpu_place dst, rc_dtype to, rci_gpu_place src, rc_dtype from, int64_t n,
                    rc_error *err)
{
    int32_t t = to, f = from;
    rci_gpu_arg a[] = {ARG(dst.mem), ARG(dst.off), ARG(t), ARG(src.mem), ARG(src.off), ARG(f), ARG(n)};
    return rci_gpu_launch_f32(g, RCI_K_CAST, a, 7, (size_t)n, "attention", err);
}

/* a part of scratch as floats, and as 16-bit values (twice the offset) */
static rci_gpu_place att_part(const att_run *a, int part)
{
    rci_gpu_place p = {a->scratch, a->part[part]};
    return p;
}

static rci_gpu_place att_part16(const att_run *a, int part)
{
    rci_gpu_place p = {a->scratch, 2 * a->part[part]};
    return p;
}

/* An operand of the chunk's products from input x (per elements a pair, from pair p0, np
 * pairs): in place for f32 and split, else widened into its part of scratch */
static int att_operand(att_run *a, rci_gpu_place x, int part, int64_t per, int64_t p0, int64_t np,
                       rci_gpu_place *op, rc_error *err)
{
    rci_gpu_place at = {x.mem, x.off + p0 * per};
    if (a->s.mode != ATT_WIDEN) {
        *op = at;
        return 0;
    }
    *op = att_part(a, part);
    return att_cast(a->g, *op, RC_F32, at, a->store, np * per, err);
}

/* A result of the chunk's products into output y (per elements a pair, from pair p0): the
 * output itself for f32, else its f32 part of scratch, rounded into y by att_store */
static rci_gpu_place att_result(const att_run *a, rci_gpu_place y, int part, int64_t per, int64_t p0)
{
    rci_gpu_place at = {y.mem, y.off + p0 * per};
    return a->s.mode == ATT_F32 ? at : att_part(a, part);
}

static int att_store(att_run *a, rci_gpu_place y, int part, int64_t per, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place at = {y.mem, y.off + p0 * per};
    return a->s.mode == ATT_F32 ? 0 : att_cast(a->g, at, a->store, att_part(a, part), RC_F32, np * per, err);
}

/* c [np, m, n] = op(a) [m, k] op(b) [k, n] per pair (a stored [k, m] when ta, b [n, k]
 * when tb), summed in f32: f32 operands, or split's 16-bit ones (matmul_wide, or widened
 * into PART_WA and PART_WB for the f32 product); zeros when k is 0 */
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
    if (a->s.mode == ATT_SPLIT)
        return a->g->ops->matmul_wide(a->g, &d, a->store, &c, in, err);
    if (a->s.mode == ATT_SPLIT_WIDENED) {
        in[0] = att_part(a, PART_WA);
        in[1] = att_part(a, PART_WB);
        if (att_cast(a->g, in[0], RC_F32, x, a->store, np * m * k, err) ||
            att_cast(a->g, in[1], RC_F32, y, a->store, np * k * n, err))
            return -1;
    }
    return a->g->ops->matmul(a->g, a->node, &d, RC_F32, &c, in, err);
}

/* each of np pairs' m 16-bit values from x ATT_SPLITS times into part (the movement ops'
 * box copy, the parts' axis read with stride 0) */
static int att_stack(att_run *a, rci_gpu_place x, int part, int64_t m, int64_t np, rci_gpu_place *y, rc_error *err)
{
    int64_t shape[3] = {np, ATT_SPLITS, m}, ds[3] = {ATT_SPLITS * m, m, 1}, ss[3] = {m, 0, 1};
    *y = att_part16(a, part);
    return rci_gpu_copy_box(a->g, a->store, y->mem, y->off, ds, x.mem, x.off, ss, 3, shape,
                            "attention (stacked operand)", err);
}

/* the parts of np pairs' f32 [ATT_SPLITS m] results in part summed into output y from pair
 * p0 (k_attention_fold) */
static int att_fold(att_run *a, rci_gpu_place y, int part, int64_t m, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place x = att_part(a, part);
    int64_t yo = y.off + p0 * m;
    rci_gpu_arg args[] = {ARG(y.mem), ARG(yo), ARG(x.mem), ARG(x.off), ARG(m), ARG(np)};
    return rci_gpu_launch_node(a->g, a->node, RCI_K_ATTENTION_FOLD, args, 6, (size_t)(m * np),
                               "attention_grad (folded parts)", err);
}

/* k_attention_rows over the chunk's np R rows from pair p0 (stats: the node's output) */
static int att_rows(att_run *a, int64_t p0, int64_t np, int want_stats, rc_error *err)
{
    rci_gpu_place s = att_part(a, PART_S), p2 = att_part16(a, PART_P2);
    int32_t ws = want_stats, split = att_is_split(a);
    rci_gpu_arg args[] = {ARG(s.mem),      ARG(s.off),       ARG(a->out.mem),    ARG(a->out.off), ARG(ws),
                          ARG(a->bias.mem), ARG(a->bias.off), ARG(a->dims),      ARG(a->bst),     ARG(a->scale),
                          ARG(a->drop.key), ARG(a->drop.thresh), ARG(a->drop.keep), ARG(p0),       ARG(p2.mem),
                          ARG(p2.off),     ARG(split)};
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS, args, 17, (size_t)(np * a->s.R), RCI_GPU_ROW_GROUP,
                                 "attention (softmax rows)", err);
}

/* O = P V for the chunk into o: f32 P in S against v, or P's parts against v stacked */
static int att_pv(att_run *a, int64_t np, rci_gpu_place v, rci_gpu_place o, rc_error *err)
{
    const att_shape *s = &a->s;
    if (!att_is_split(a))
        return att_gemm(a, np, 0, 0, s->R, s->Dv, s->Tk, att_part(a, PART_S), v, o, err);
    rci_gpu_place v2;
    return att_stack(a, v, PART_V2, s->Tk * s->Dv, np, &v2, err) ||
           att_gemm(a, np, 0, 0, s->R, s->Dv, ATT_SPLITS * s->Tk, att_part16(a, PART_P2), v2, o, err);
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
    if (att_pv(a, np, v, o, err))
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

/* k_attention_rows_grad over the chunk: dS and z p in S and DP, or their parts in P2, Z2 */
static int att_rows_grad(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place ds = att_part(a, PART_S), zp = att_part(a, PART_DP);
    rci_gpu_place s2 = att_part16(a, PART_P2), z2 = att_part16(a, PART_Z2);
    int32_t split = att_is_split(a);
    rci_gpu_arg args[] = {ARG(ds.mem), ARG(ds.off), ARG(zp.mem), ARG(zp.off), ARG(a->stats.mem), ARG(a->stats.off),
                          ARG(a->bias.mem), ARG(a->bias.off), ARG(a->dims), ARG(a->bst), ARG(a->scale),
                          ARG(a->drop.key), ARG(a->drop.thresh), ARG(a->drop.keep), ARG(p0), ARG(s2.mem),
                          ARG(s2.off), ARG(z2.mem), ARG(z2.off), ARG(split)};
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS_GRAD, args, 20, (size_t)(np * a->s.R),
                                 RCI_GPU_ROW_GROUP, "attention_grad (rows)", err);
}

/* dK = dS^T Q or dV = (z p)^T dO (x: dS or z p, y: Q or dO, width w) into out from pair p0:
 * one product, or for split, the product of all parts' rows and their fold */
static int att_grad_kv(att_run *a, int64_t p0, int64_t np, int part, int xpart, rci_gpu_place y, int64_t w,
                       rci_gpu_place out, rc_error *err)
{
    const att_shape *s = &a->s;
    int64_t n = s->Tk * w;
    if (!att_is_split(a))
        return att_gemm(a, np, 1, 0, s->Tk, w, s->R, att_part(a, xpart), y, att_result(a, out, part, n, p0), err) ||
               att_store(a, out, part, n, p0, np, err);
    return att_gemm(a, np, 1, 0, ATT_SPLITS * s->Tk, w, s->R, att_part16(a, xpart), y, att_part(a, part), err) ||
           att_fold(a, out, part, n, p0, np, err);
}

/* dQ = dS K into dq from pair p0: f32 dS against k, or dS's parts against k stacked */
static int att_grad_q(att_run *a, int64_t p0, int64_t np, rci_gpu_place k, rci_gpu_place dq, rc_error *err)
{
    const att_shape *s = &a->s;
    int64_t nq = s->R * s->D;
    rci_gpu_place k2, out = att_result(a, dq, PART_DQ, nq, p0);
    if (!att_is_split(a))
        return att_gemm(a, np, 0, 0, s->R, s->D, s->Tk, att_part(a, PART_S), k, out, err) ||
               att_store(a, dq, PART_DQ, nq, p0, np, err);
    return att_stack(a, k, PART_K2, s->Tk * s->D, np, &k2, err) ||
           att_gemm(a, np, 0, 0, s->R, s->D, ATT_SPLITS * s->Tk, att_part16(a, PART_P2), k2, out, err) ||
           att_store(a, dq, PART_DQ, nq, p0, np, err);
}

/* Gradients, a chunk: S = Q K^T, dP = dO V^T, the rows into dS and z p, then the products
 * of the gradients asked for */
static int att_grad_chunk(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    const att_shape *s = &a->s;
    int w = s->which, want_q = w == 0 || w == 4, want_k = w == 1 || w == 4, want_v = w == 2 || w == 4;
    int split = att_is_split(a);
    rci_gpu_place q, k, v, dout, dq, dk, dv;
    att_grad_places(a, &dq, &dk, &dv);
    if (att_operand(a, a->in[0], PART_Q, s->R * s->D, p0, np, &q, err) ||
        att_operand(a, a->in[1], PART_K, s->Tk * s->D, p0, np, &k, err) ||
        att_operand(a, a->in[2], PART_V, s->Tk * s->Dv, p0, np, &v, err) ||
        att_operand(a, a->dout, PART_DO, s->R * s->Dv, p0, np, &dout, err) ||
        att_gemm(a, np, 0, 1, s->R, s->Tk, s->D, q, k, att_part(a, PART_S), err) ||
        att_gemm(a, np, 0, 1, s->R, s->Tk, s->Dv, dout, v, att_part(a, PART_DP), err) ||
        att_rows_grad(a, p0, np, err))
        return -1;
    if (want_q && att_grad_q(a, p0, np, k, dq, err))
        return -1;
    if (want_k && att_grad_kv(a, p0, np, PART_DK, split ? PART_P2 : PART_S, q, s->D, dk, err))
        return -1;
    if (want_v && att_grad_kv(a, p0, np, PART_DV, split ? PART_Z2 : PART_DP, dout, s->Dv, dv, err))
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
    a->s = att_shape_of(g, node);
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

/* the scratch for chunks of np pairs (att_layout) */
static int att_scratch(att_run *a, int64_t np, rc_error *err)
{
    int64_t floats = att_layout(&a->s, a->node->op, np, a->part);
    a->scratch = rci_gpu_scratch(a->g, (size_t)floats * sizeof(float), err);
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
