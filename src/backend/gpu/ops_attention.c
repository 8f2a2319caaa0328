/* ops_attention.c - the fused attention nodes on a device: ATTENTION, ATTENTION_STATS and
 * ATTENTION_GRAD (layouts in redco.h), built from the device's matrix products (cuBLAS,
 * CLBlast: g->ops->matmul in f32) and kernels.cl's row kernels, a chunk of (batch, kv head)
 * pairs at a time, so the [Tq, Tk] scores live only in scratch for one chunk and never for
 * the backward:
 *
 *   forward   S = Q K^T; P = k_attention_rows(S) (scale, bias, causal mask, softmax,
 *             dropout; each row's log-sum-exp into the node's kept block); O = P V (a
 *             16-bit node's f32 O kept there too, then rounded into the output)
 *   stats     k_attention_stats: each row's log-sum-exp as kept and delta = dO . O of the
 *             unrounded output (no products: FlashAttention-2's, from the forward)
 *   gradient  S = Q K^T, dP = dO V^T; k_attention_rows_grad: dS = p (z dP - delta) scale and
 *             z p; dQ = dS K, dK = dS^T Q, dV = (z p)^T dO
 *
 * A pair's G query heads sharing a kv head are G Tq consecutive rows of q (and of dO, O,
 * dQ), so each product is one strided batch over the chunk's pairs, and dK, dV sum the G
 * heads inside their product: no key/value head is copied. The products run in f32: 16-bit
 * q, k, v and dO are widened into scratch first and results rounded once at the end, as the
 * CPU's kernels compute 16-bit attention in f32. The bias's gradient is k_attention_dbias,
 * one work-item per bias element, recomputing its scores. Attention dropout: DROPOUT's
 * mask (rci_gpu_mask_of), redrawn by every kernel.
 *
 * With rc_set_tiled_attention on a device with mma (CUDA, sm_80 and later), bf16 nodes of at
 * least ATT_TILE_MIN_ROWS query rows a pair take no products and no scratch: kernels.cl's
 * k_attention_tile (forward, keeping the same as the products' forward), k_attention_tile_dq
 * and k_attention_tile_dkv keep each tile's scores on chip (FlashAttention-2's loops) and
 * multiply on tensor cores, the probabilities and their gradients rounded to bf16 for their
 * products as FlashAttention does (ATT_TILED, below). */
#include "node.h"
#include "redco/device.h"

#include <string.h>

enum {
    ATT_CHUNK_BYTES = 128 << 20,    /* scratch a chunk of pairs aims at at least (one pair at least) */
    ATT_CHUNK_SHARE = 128,          /* or this share of the device's memory, where that is more */
    ATT_BLOCK = 256,                /* query rows a block of a causal node's products */
    ATT_SPLITS = 3,                 /* 16-bit parts of a split product's float operand (kernels.cl's) */
    ATT_ALIGN = 64,                 /* floats: where each part of the scratch starts */
    ATT_TILE_MIN_ROWS = 16          /* query rows a pair needs for tiles (a warp's of 64) */
};

/* How a node's products run: f32 values in f32 (ATT_F32); 16-bit values widened into f32
 * scratch (ATT_WIDEN); bf16 values as stored into f32 results, float operands in parts
 * (ATT_SPLIT; ATT_SPLIT_WIDENED: the same on a backend without matmul_wide, its products'
 * operands widened into scratch first, which tests use to run the split on OpenCL); or no
 * products: bf16 in tiles on tensor cores, kernels.cl's k_attention_tile* (ATT_TILED, where
 * rci_gpu_attention_tiled asks for it; no scratch) */
enum { ATT_F32, ATT_WIDEN, ATT_SPLIT, ATT_SPLIT_WIDENED, ATT_TILED };

/* A node's attention sizes: q [B, H, Tq, D], k [B, KV, Tk, D], v [B, KV, Tk, Dv]; R = G Tq
 * rows of q per (batch, kv head) pair; mode: how the products run; qblk: the query rows of
 * a block of its products (0: none, one block of all rows and keys) */
typedef struct {
    int64_t B, H, KV, Tq, Tk, D, Dv, R, pairs, qblk;
    int mode, which;
} att_shape;

static int att_split_force = -1;
static int att_tiled = 1; /* 1 (the default): bf16 in tiles where the device has mma; 2: on every device */
static int64_t att_block_rows = ATT_BLOCK;

void rc_set_tiled_attention(int on)
{
    att_tiled = on != 0;
}

int rc_get_tiled_attention(void)
{
    return att_tiled != 0;
}

void rci_gpu_attention_tiled(int on)
{
    att_tiled = on ? 2 : 0;
}

void rci_gpu_attention_block(int64_t rows)
{
    att_block_rows = rows > 0 ? rows : ATT_BLOCK;
}

void rci_gpu_attention_split(int on)
{
    att_split_force = on;
}

/* the node's mode on g: ATT_TILED for bf16 where asked for and a pair's R query rows are at
 * least a warp's ATT_TILE_MIN_ROWS (decoding's few rows would leave a work-group's 64
 * mostly empty: they take the products); ATT_SPLIT for bf16 where g has matmul_wide (or
 * where tests force it: rci_gpu_attention_split) */
static int att_mode(const rci_gpu *g, const rc_tensor *node, int64_t R)
{
    rc_dtype store = rci_gpu_storage(node);
    if (store == RC_F32)
        return ATT_F32;
    if (store == RC_BF16 && (att_tiled == 2 || (att_tiled == 1 && g->mma)) && R >= ATT_TILE_MIN_ROWS)
        return ATT_TILED;
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
    s.mode = att_mode(g, node, s.R);
    s.which = node->op == RC_OP_ATTENTION_GRAD ? node->iparam[1] : 0;
    /* causal blocks: block b's rows see keys before its end alone, so its products take
     * those (about half the work at many blocks); one query head a pair (dK and dV then
     * sum no heads across blocks) and Tq = Tk (training) */
    int blocks = node->iparam[0] != 0 && s.Tq == s.Tk && s.H == s.KV && s.D > 0 && s.Dv > 0 &&
                 s.Tq >= 2 * att_block_rows;
    s.qblk = blocks ? att_block_rows : 0;
    return s;
}

/* query block b of a node's products: its rows [*i0, *i0 + *ni) of the pair's R, whose
 * scores the products take for keys [0, *ni + *i0) (all Tk without blocks); and the count */
static int64_t att_blocks(const att_shape *s)
{
    return s->qblk ? (s->Tq + s->qblk - 1) / s->qblk : 1;
}

static void att_block(const att_shape *s, int64_t b, int64_t *i0, int64_t *ni, int64_t *kend)
{
    if (!s->qblk) {
        *i0 = 0, *ni = s->R, *kend = s->Tk;
        return;
    }
    *i0 = b * s->qblk;
    *ni = s->Tq - *i0 < s->qblk ? s->Tq - *i0 : s->qblk;
    *kend = *i0 + *ni;
}

/* One pair's scratch, in floats, by part: scores, dP; the split parts of P or dS and of
 * z p (16-bit [R, Tk, ATT_SPLITS]); the f32 copies of q, k, v, dO
 * (ATT_WIDEN); k and v stacked ATT_SPLITS times (16-bit); the f32 gradients dq and dk, dv
 * ([ATT_SPLITS Tk, .] when split); the widened operands of a split product on a backend
 * without matmul_wide (0 for a part the op has not) */
enum {
    PART_S, PART_DP, PART_P2, PART_Z2, PART_Q, PART_K, PART_V, PART_DO, PART_K2, PART_V2, PART_DQ,
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
    int grad = op == RC_OP_ATTENTION_GRAD, fwd = op == RC_OP_ATTENTION;
    int widen = s->mode == ATT_WIDEN;
    int split = s->mode == ATT_SPLIT || s->mode == ATT_SPLIT_WIDENED, half = s->mode != ATT_F32;
    int64_t R = s->R, Tk = s->Tk, D = s->D, Dv = s->Dv, S3 = ATT_SPLITS * Tk;
    memset(n, 0, PARTS * sizeof *n); /* the forward: S (and q, k, v widened) */
    n[PART_S] = R * Tk;
    n[PART_DP] = grad ? R * Tk : 0;
    n[PART_P2] = split ? att_halves(R * S3) : 0;
    n[PART_Z2] = split && grad ? att_halves(R * S3) : 0;
    n[PART_Q] = widen ? R * D : 0;
    n[PART_K] = widen ? Tk * D : 0;
    n[PART_V] = widen ? Tk * Dv : 0;
    n[PART_DO] = widen && grad ? R * Dv : 0;
    n[PART_K2] = split && grad ? att_halves(S3 * D) : 0;
    n[PART_V2] = split && fwd ? att_halves(S3 * Dv) : 0;
    n[PART_DQ] = half && grad ? R * D : 0;
    n[PART_DK] = half && grad ? (split ? S3 : Tk) * D : 0;
    n[PART_DV] = half && grad ? (split ? S3 : Tk) * Dv : 0;
    if (s->mode == ATT_SPLIT_WIDENED) {
        n[PART_WA] = R * max3(S3, D, Dv);
        n[PART_WB] = (S3 > R ? S3 : R) * (D > Dv ? D : Dv);
    }
}

static size_t att_chunk_bytes = 0; /* 0: att_chunk_target's rule */

void rci_gpu_attention_chunk(size_t bytes)
{
    att_chunk_bytes = bytes;
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

/* the scratch a chunk aims at on g: ATT_CHUNK_BYTES, or 1/ATT_CHUNK_SHARE of g's memory
 * where that is more (an H100's 80 GB: 625 MB, so that a chunk's products are large enough
 * to fill the device and few enough to launch), or what a test set */
static size_t att_chunk_target(const rci_gpu *g)
{
    size_t share = (size_t)(g->be.total_bytes / ATT_CHUNK_SHARE);
    if (att_chunk_bytes)
        return att_chunk_bytes;
    return share > ATT_CHUNK_BYTES ? share : ATT_CHUNK_BYTES;
}

/* pairs per chunk: as many as fit att_chunk_target, at least one */
static int64_t att_chunk_pairs(const rci_gpu *g, const att_shape *s, rc_op op)
{
    int64_t per = att_pair_floats(s, op);
    int64_t fit = per ? (int64_t)(att_chunk_target(g) / sizeof(float)) / per : s->pairs;
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
    if (node->op == RC_OP_ATTENTION_STATS)
        return 0;
    att_shape s = att_shape_of(g, node);
    if ((node->op == RC_OP_ATTENTION_GRAD && s.which == 3) || s.mode == ATT_TILED)
        return 0;
    return (size_t)att_layout(&s, node->op, att_chunk_pairs(g, &s, node->op), NULL) * sizeof(float);
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
    rci_gpu_place kept_o, kept_lse; /* the forward's: its f32 output and log-sum-exps (att_kept) */
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
    return rci_gpu_launch_f32(g, RCI_K_CAST, a, 7, rci_gpu_ew_items(n), "attention", err);
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

/* A matrix of the chunk's products: where pair p0's starts, its row stride and the stride
 * from pair to pair, in elements */
typedef struct {
    rci_gpu_place at;
    int64_t ld, stride;
} att_mat;

static att_mat att_mat_of(rci_gpu_place at, int64_t off, int64_t ld, int64_t stride)
{
    att_mat x = {{at.mem, at.off + off}, ld, stride};
    return x;
}

/* the elements np matrices of rows x cols take, from the first's start */
static int64_t att_span(const att_mat *x, int64_t np, int64_t rows, int64_t cols)
{
    return (np - 1) * x->stride + (rows - 1) * x->ld + cols;
}

/* c [np, m, n] = op(a) [m, k] op(b) [k, n] per pair (a stored [k, m] when ta, b [n, k]
 * when tb), summed in f32: f32 operands, or split's 16-bit ones (matmul_wide, or widened
 * into PART_WA and PART_WB, their layout kept, for the f32 product); zeros when k is 0
 * (c then contiguous: no blocks) */
static int att_gemm(att_run *a, int64_t np, int ta, int tb, int64_t m, int64_t n, int64_t k, att_mat x, att_mat y,
                    att_mat c, rc_error *err)
{
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) {
        float zero = 0;
        return a->g->ops->fill(a->g, c.at.mem, (size_t)c.at.off * sizeof(float), &zero, sizeof zero,
                               (size_t)(np * m * n) * sizeof(float), err);
    }
    rci_matmul_dims d = {ta, tb, m, n, k, k, np, np, np, x.ld, y.ld, c.ld, x.stride, y.stride, c.stride};
    rci_gpu_place in[2] = {x.at, y.at};
    if (a->s.mode == ATT_SPLIT)
        return a->g->ops->matmul_wide(a->g, &d, a->store, &c.at, in, err);
    if (a->s.mode == ATT_SPLIT_WIDENED) {
        in[0] = att_part(a, PART_WA);
        in[1] = att_part(a, PART_WB);
        if (att_cast(a->g, in[0], RC_F32, x.at, a->store, att_span(&x, np, ta ? k : m, ta ? m : k), err) ||
            att_cast(a->g, in[1], RC_F32, y.at, a->store, att_span(&y, np, tb ? n : k, tb ? k : n), err))
            return -1;
    }
    return a->g->ops->matmul(a->g, a->node, &d, RC_F32, &c.at, in, err);
}

/* each of np pairs' n rows of w 16-bit values from x ATT_SPLITS times into part, a row's
 * copies side by side ([np, n, ATT_SPLITS, w]: the movement ops' box copy, the copies' axis
 * read with stride 0) */
static int att_stack(att_run *a, rci_gpu_place x, int part, int64_t n, int64_t w, int64_t np, rci_gpu_place *y,
                     rc_error *err)
{
    int64_t shape[4] = {np, n, ATT_SPLITS, w}, ds[4] = {n * ATT_SPLITS * w, ATT_SPLITS * w, w, 1};
    int64_t ss[4] = {n * w, w, 0, 1};
    *y = att_part16(a, part);
    return rci_gpu_copy_box(a->g, a->store, y->mem, y->off, ds, x.mem, x.off, ss, 4, shape,
                            "attention (stacked operand)", err);
}

/* the parts of np pairs' f32 [Tk, ATT_SPLITS, w] results in part summed into output y
 * [np, Tk, w] from pair p0 (k_attention_fold) */
static int att_fold(att_run *a, rci_gpu_place y, int part, int64_t w, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place x = att_part(a, part);
    int64_t yo = y.off + p0 * a->s.Tk * w, keys = np * a->s.Tk;
    rci_gpu_arg args[] = {ARG(y.mem), ARG(yo), ARG(x.mem), ARG(x.off), ARG(w), ARG(keys)};
    return rci_gpu_launch_node(a->g, a->node, RCI_K_ATTENTION_FOLD, args, 6, (size_t)(w * keys),
                               "attention_grad (folded parts)", err);
}

/* k_attention_rows over the chunk's np R rows from pair p0: P (in S, or split into P2) and
 * each row's log-sum-exp into the node's kept block */
static int att_rows(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    rci_gpu_place s = att_part(a, PART_S), p2 = att_part16(a, PART_P2);
    int32_t split = att_is_split(a);
    rci_gpu_arg args[] = {ARG(s.mem),          ARG(s.off),          ARG(a->kept_lse.mem), ARG(a->kept_lse.off),
                          ARG(a->bias.mem),    ARG(a->bias.off),    ARG(a->dims),         ARG(a->bst),
                          ARG(a->scale),       ARG(a->drop.key),    ARG(a->drop.thresh),  ARG(a->drop.keep),
                          ARG(p0),             ARG(p2.mem),         ARG(p2.off),          ARG(split),
                          ARG(a->s.qblk)};
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS, args, 17, (size_t)(np * a->s.R),
                                 RCI_GPU_ROW_GROUP, "attention (softmax rows)", err);
}

/* A query block's scores [ni, kend] per pair into PART_S (or with dO and v, dP into
 * PART_DP): x [np, R, w] from row i0, y [np, Tk, w] */
static int att_scores(att_run *a, int64_t np, int64_t i0, int64_t ni, int64_t kend, rci_gpu_place x,
                      rci_gpu_place y, int64_t w, int part, rc_error *err)
{
    const att_shape *s = &a->s;
    return att_gemm(a, np, 0, 1, ni, kend, w, att_mat_of(x, i0 * w, w, s->R * w), att_mat_of(y, 0, w, s->Tk * w),
                    att_mat_of(att_part(a, part), i0 * s->Tk, s->Tk, s->R * s->Tk), err);
}

/* P (f32 in S, or its parts in P2, against y with each row stacked into ypart) times
 * y [np, Tk, w] into c [np, R, w], block by block, each block's rows against the keys
 * [0, kend) they see: O = P V, or dQ = dS K */
static int att_rows_times(att_run *a, int64_t np, rci_gpu_place y, int ypart, int64_t w, rci_gpu_place c,
                          rc_error *err)
{
    const att_shape *s = &a->s;
    int split = att_is_split(a), parts = split ? ATT_SPLITS : 1;
    int64_t ld = parts * s->Tk;
    rci_gpu_place x = split ? att_part16(a, PART_P2) : att_part(a, PART_S);
    if (split && att_stack(a, y, ypart, s->Tk, w, np, &y, err))
        return -1;
    for (int64_t b = 0, i0, ni, kend; b < att_blocks(s); b++) {
        att_block(s, b, &i0, &ni, &kend);
        if (att_gemm(a, np, 0, 0, ni, w, parts * kend, att_mat_of(x, i0 * ld, ld, s->R * ld),
                     att_mat_of(y, 0, w, parts * s->Tk * w), att_mat_of(c, i0 * w, w, s->R * w), err))
            return -1;
    }
    return 0;
}

/* The forward, a chunk: S = Q K^T, the rows, then O = P V into the output (a 16-bit node's
 * into the f32 output it keeps, then rounded into the output) */
static int att_forward_chunk(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    const att_shape *s = &a->s;
    rci_gpu_place q, k, v;
    if (att_operand(a, a->in[0], PART_Q, s->R * s->D, p0, np, &q, err) ||
        att_operand(a, a->in[1], PART_K, s->Tk * s->D, p0, np, &k, err) ||
        att_operand(a, a->in[2], PART_V, s->Tk * s->Dv, p0, np, &v, err))
        return -1;
    for (int64_t b = 0, i0, ni, kend; b < att_blocks(s); b++) {
        att_block(s, b, &i0, &ni, &kend);
        if (att_scores(a, np, i0, ni, kend, q, k, s->D, PART_S, err))
            return -1;
    }
    if (att_rows(a, p0, np, err))
        return -1;
    int64_t per = s->R * s->Dv;
    rci_gpu_place o = {a->kept_o.mem, a->kept_o.off + p0 * per}, y = {a->out.mem, a->out.off + p0 * per};
    if (att_rows_times(a, np, v, PART_V2, s->Dv, o, err))
        return -1;
    return s->mode == ATT_F32 ? 0 : att_cast(a->g, y, a->store, o, RC_F32, np * per, err);
}

/* 1 when a gradient node computes input i's gradient (0 q, 1 k, 2 v): it is that input's,
 * or the packed one (which 4) */
static int att_wants(const att_shape *s, int i)
{
    return s->which == i || s->which == 4;
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
                          ARG(s2.off), ARG(z2.mem), ARG(z2.off), ARG(split), ARG(a->s.qblk)};
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_ROWS_GRAD, args, 21, (size_t)(np * a->s.R),
                                 RCI_GPU_ROW_GROUP, "attention_grad (rows)", err);
}

/* dK = dS^T Q or dV = (z p)^T dO (x: dS or z p, y: Q or dO, width w) into out from pair p0,
 * key block by key block: keys [j0, j0 + nj) take the rows from j0 on (the rows before see
 * none of them), and without blocks all keys all R rows; split: the product of the parts'
 * rows, then their fold */
static int att_grad_kv(att_run *a, int64_t p0, int64_t np, int part, int xpart, rci_gpu_place y, int64_t w,
                       rci_gpu_place out, rc_error *err)
{
    const att_shape *s = &a->s;
    int split = att_is_split(a), parts = split ? ATT_SPLITS : 1;
    int64_t n = s->Tk * w, ldx = parts * s->Tk;
    rci_gpu_place c = split ? att_part(a, part) : att_result(a, out, part, n, p0);
    rci_gpu_place x = split ? att_part16(a, xpart) : att_part(a, xpart);
    for (int64_t b = 0, j0, nj, kend; b < att_blocks(s); b++) {
        att_block(s, b, &j0, &nj, &kend);
        if (!s->qblk)
            nj = s->Tk;
        if (att_gemm(a, np, 1, 0, parts * nj, w, s->R - j0, att_mat_of(x, j0 * ldx + parts * j0, ldx, s->R * ldx),
                     att_mat_of(y, j0 * w, w, s->R * w), att_mat_of(c, parts * j0 * w, w, parts * n), err))
            return -1;
    }
    return split ? att_fold(a, out, part, w, p0, np, err) : att_store(a, out, part, n, p0, np, err);
}

/* dQ = dS K into dq from pair p0 */
static int att_grad_q(att_run *a, int64_t p0, int64_t np, rci_gpu_place k, rci_gpu_place dq, rc_error *err)
{
    int64_t nq = a->s.R * a->s.D;
    return att_rows_times(a, np, k, PART_K2, a->s.D, att_result(a, dq, PART_DQ, nq, p0), err) ||
           att_store(a, dq, PART_DQ, nq, p0, np, err);
}

/* Gradients, a chunk: S = Q K^T, dP = dO V^T, the rows into dS and z p, then the products
 * of the gradients asked for */
static int att_grad_chunk(att_run *a, int64_t p0, int64_t np, rc_error *err)
{
    const att_shape *s = &a->s;
    int split = att_is_split(a);
    rci_gpu_place q, k, v, dout, dq, dk, dv;
    att_grad_places(a, &dq, &dk, &dv);
    if (att_operand(a, a->in[0], PART_Q, s->R * s->D, p0, np, &q, err) ||
        att_operand(a, a->in[1], PART_K, s->Tk * s->D, p0, np, &k, err) ||
        att_operand(a, a->in[2], PART_V, s->Tk * s->Dv, p0, np, &v, err) ||
        att_operand(a, a->dout, PART_DO, s->R * s->Dv, p0, np, &dout, err))
        return -1;
    for (int64_t b = 0, i0, ni, kend; b < att_blocks(s); b++) {
        att_block(s, b, &i0, &ni, &kend);
        if (att_scores(a, np, i0, ni, kend, q, k, s->D, PART_S, err) ||
            att_scores(a, np, i0, ni, kend, dout, v, s->Dv, PART_DP, err))
            return -1;
    }
    if (att_rows_grad(a, p0, np, err))
        return -1;
    if (att_wants(s, 0) && att_grad_q(a, p0, np, k, dq, err))
        return -1;
    if (att_wants(s, 1) && att_grad_kv(a, p0, np, PART_DK, split ? PART_P2 : PART_S, q, s->D, dk, err))
        return -1;
    if (att_wants(s, 2) && att_grad_kv(a, p0, np, PART_DV, split ? PART_Z2 : PART_DP, dout, s->Dv, dv, err))
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

/* ---- ATT_TILED: kernels.cl's k_attention_tile (forward), _dq and _dkv ---- */

enum {
    ATT_TILE_GROUP = 128,   /* work-items of a tile kernel's work-group (kernels.cl's AT_GROUP) */
    ATT_TILE = 64           /* query rows or keys a work-group takes (AT_ROWS, AT_KEYS) */
};

/* the arguments every tile kernel ends with: the bias, geometry, scale and dropout */
enum { ATT_TILE_TAIL = 8 };

static void att_tile_tail(const att_run *a, rci_gpu_arg *t)
{
    rci_gpu_arg tail[ATT_TILE_TAIL] = {ARG(a->bias.mem), ARG(a->bias.off), ARG(a->dims),       ARG(a->bst),
                                       ARG(a->scale),    ARG(a->drop.key), ARG(a->drop.thresh), ARG(a->drop.keep)};
    memcpy(t, tail, sizeof tail);
}

static int64_t att_tiles(int64_t n)
{
    return (n + ATT_TILE - 1) / ATT_TILE;
}

/* the forward into the output and the node's kept block (kernel k_attention_tile) */
static int att_tile_forward(att_run *a, rc_error *err)
{
    rci_gpu_arg args[11 + ATT_TILE_TAIL] = {
        ARG(a->out.mem),   ARG(a->out.off),   ARG(a->kept_o.mem), ARG(a->kept_o.off), ARG(a->kept_lse.off),
        ARG(a->in[0].mem), ARG(a->in[0].off), ARG(a->in[1].mem),  ARG(a->in[1].off),  ARG(a->in[2].mem),
        ARG(a->in[2].off)};
    att_tile_tail(a, args + 11);
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_TILE, args, 11 + ATT_TILE_TAIL,
                                 (size_t)(a->s.pairs * att_tiles(a->s.R)), ATT_TILE_GROUP, "attention (tiles)", err);
}

/* dQ (kernel _dq, a work-group a tile of query rows) */
static int att_tile_dq(att_run *a, rci_gpu_place dq, rc_error *err)
{
    rci_gpu_arg args[12 + ATT_TILE_TAIL] = {
        ARG(dq.mem),       ARG(dq.off),       ARG(a->stats.mem), ARG(a->stats.off), ARG(a->in[0].mem),
        ARG(a->in[0].off), ARG(a->in[1].mem), ARG(a->in[1].off), ARG(a->in[2].mem), ARG(a->in[2].off),
        ARG(a->dout.mem),  ARG(a->dout.off)};
    att_tile_tail(a, args + 12);
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_TILE_DQ, args, 12 + ATT_TILE_TAIL,
                                 (size_t)(a->s.pairs * att_tiles(a->s.R)), ATT_TILE_GROUP, "attention_grad (dq tiles)",
                                 err);
}

/* dK and dV as `want` says (1 dK, 2 dV, 3 both: kernel _dkv, a work-group a tile of keys) */
static int att_tile_dkv(att_run *a, int32_t want, rci_gpu_place dk, rci_gpu_place dv, rc_error *err)
{
    rci_gpu_arg args[15 + ATT_TILE_TAIL] = {
        ARG(dk.mem),       ARG(dk.off),       ARG(dv.mem),       ARG(dv.off),       ARG(want),
        ARG(a->stats.mem), ARG(a->stats.off), ARG(a->in[0].mem), ARG(a->in[0].off), ARG(a->in[1].mem),
        ARG(a->in[1].off), ARG(a->in[2].mem), ARG(a->in[2].off), ARG(a->dout.mem),  ARG(a->dout.off)};
    att_tile_tail(a, args + 15);
    return rci_gpu_launch_groups(a->g, a->node, RCI_K_ATTENTION_TILE_DKV, args, 15 + ATT_TILE_TAIL,
                                 (size_t)(a->s.pairs * att_tiles(a->s.Tk)), ATT_TILE_GROUP,
                                 "attention_grad (dk, dv tiles)", err);
}

/* a node of ATT_TILED: no scratch, no chunks */
static int att_tile_run(att_run *a, rc_error *err)
{
    const att_shape *s = &a->s;
    if (a->node->op == RC_OP_ATTENTION)
        return att_tile_forward(a, err);
    rci_gpu_place dq, dk, dv;
    att_grad_places(a, &dq, &dk, &dv);
    int32_t want = att_wants(s, 1) | att_wants(s, 2) << 1;
    if (att_wants(s, 0) && s->D > 0 && att_tile_dq(a, dq, err))
        return -1;
    return want && s->Tk > 0 ? att_tile_dkv(a, want, dk, dv, err) : 0;
}

/* What an ATTENTION keeps for its stats, from its kept block and its values (rci_kept_bytes),
 * as float places: its output in f32 (an f32 node's values, a 16-bit one's f32 copy at the
 * block's start) and each row's log-sum-exp. A node of no rows keeps nothing (no block):
 * its places are its values', where nothing is written. */
static int att_kept(const rci_mem *kept, const rci_mem *values, const rc_tensor *att, rci_gpu_place *o,
                    rci_gpu_place *lse, rc_error *err)
{
    if (!kept->buf && rci_kept_bytes(att))
        return rc_error_set(err, RC_ERR_ARG, "%s: the attention's kept block has no memory", rci_gpu_op_name(att));
    const rci_mem *k = kept->buf ? kept : values;
    rci_mem ml = {k->buf, k->off + rci_attention_lse_at(att)};
    return rci_gpu_place_of(rci_gpu_storage(att) == RC_F32 ? values : k, att, RC_F32, o, err) ||
           rci_gpu_place_of(&ml, att, RC_F32, lse, err);
}

/* ATTENTION_STATS (k_attention_stats): src0 the ATTENTION, which keeps its f32 output and
 * log-sum-exps, src1 dO */
static int att_stats(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *node = r->node, *att = node->src[0];
    rci_gpu_place out, o, lse, dout;
    if (rci_gpu_place_of(&r->out, node, RC_F32, &out, err) || att_kept(&r->kept, &r->in[0], att, &o, &lse, err) ||
        rci_gpu_place_of(&r->in[1], node, node->src[1]->dtype, &dout, err))
        return -1;
    int64_t dv = att->shape[3], n = rc_tensor_numel(node) / 2;
    rci_gpu_arg args[] = {ARG(out.mem), ARG(out.off), ARG(o.mem),    ARG(o.off), ARG(lse.mem),
                          ARG(lse.off), ARG(dout.mem), ARG(dout.off), ARG(dv),    ARG(n)};
    return rci_gpu_launch_node(g, node, RCI_K_ATTENTION_STATS, args, 10, (size_t)n, "attention_stats", err);
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
    if (node->op == RC_OP_ATTENTION && att_kept(&r->kept, &r->out, node, &a->kept_o, &a->kept_lse, err))
        return -1;
    if (node->op == RC_OP_ATTENTION_GRAD && (rci_gpu_place_of(&r->in[4], node, node->src[4]->dtype, &a->dout, err) ||
                                             rci_gpu_place_of(&r->in[5], node, node->src[5]->dtype, &a->stats, err)))
        return -1;
    att_geometry(node, &a->s, &a->dims, &a->bst);
    a->scale = (float)node->fparam[0];
    a->drop = rci_gpu_mask_of(r, 2, node->fparam[1]);
    return 0;
}

/* the scratch for chunks of np pairs (att_layout); with no part at all (no query rows) the
 * kernels run over nothing and their scratch arguments are the output's buffer */
static int att_scratch(att_run *a, int64_t np, rc_error *err)
{
    int64_t floats = att_layout(&a->s, a->node->op, np, a->part);
    a->scratch = floats ? rci_gpu_scratch(a->g, (size_t)floats * sizeof(float), err) : a->out.mem;
    return a->scratch ? 0 : -1;
}

int rci_gpu_run_attention(rci_gpu *g, const rci_node_run *r, rc_error *err)
{
    att_run a;
    if (r->node->op == RC_OP_ATTENTION_STATS)
        return att_stats(g, r, err);
    if (att_run_init(&a, g, r, err))
        return -1;
    if (a.s.which == 3)
        return att_dbias(&a, err);
    if (a.s.mode == ATT_TILED)
        return att_tile_run(&a, err);
    int64_t per = att_chunk_pairs(g, &a.s, r->node->op);
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
