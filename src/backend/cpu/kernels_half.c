/* kernels_half.c - the CPU kernels of nodes with 16-bit (bf16, f16) values.
 *
 * 16-bit values are storage; arithmetic is f32. A node that reads or writes 16-bit values
 * has its 16-bit inputs widened into f32 workspace, runs the f32 kernel (kernels_real.c) on
 * a copy of the node whose 16-bit dtypes read f32, and has its f32 result rounded to the
 * node's dtype (nearest, ties to even): the reductions, norms, softmax and losses inside
 * accumulate exactly as in f32. Two ops skip the round trip: an embedding lookup copies
 * the table's 16-bit rows, and a matrix product of a few rows by a shared 2-D 16-bit
 * matrix (a decoding step) reads the matrix's 16-bit words directly, accumulating in f32,
 * so that it reads half the bytes of f32 weights. Other matrix products run on the CPU's
 * bf16 units through oneDNN where it has them (gemm_dnnl.c: 16-bit operands as stored, f32
 * sums, no workspace), else on OpenBLAS's bf16 GEMM (cblas_sbgemm) when the library
 * exports it (REDCO_HAVE_SBGEMM, found by CMake), else on the widened copies and sgemm.
 *
 * Large nodes run in pieces so that the workspace stays near 4M floats (16 MB): row-wise ops
 * (arithmetic, where and equal on inputs of the node's shape, a [C] bias or a scalar;
 * unary maths, activations, norms, softmax, the losses) by rows, up to 16 pieces at once,
 * each widened, computed and rounded by one thread in pieces of at most 32K floats an
 * array, which stay in its cache (a loss and a norm's weight gradient, whose pieces' results
 * are summed in order, one piece after another over every thread), products by batches, by
 * rows of A (the shared B widened once), or by slices of the inner dimension (A^T B,
 * summed in f32). Other large nodes (other broadcasts, a broadcast softmax mask, dropout,
 * reductions, the embedding gradient) widen whole. The f32 copies live in the workspace the
 * backend hands each node (cpu.c owns it: one block per thread, grown and counted there).
 * Each path sizes what it takes through one function (whole_need, rows_need, matmul_need),
 * and rci_cpu_half_work reports the same sizes to the backend: the workspace, the memory
 * plan and the kernels follow one rule. */
#include "cpu.h"
#include "half.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <string.h>

enum {
    PAR_MIN = 32768,  /* elements below which a loop runs on one thread */
    SLOTS = 16,       /* row pieces in flight at once, each on one thread in its own part
                         of the workspace */
    PIECE_FLOATS = 32768, /* floats of a piece's row of each array, at most: a piece's arrays
                             stay in the thread's cache, and a node has pieces enough to
                             share evenly among the threads */
    BLOCK = 256,      /* inner elements a decoding product (B stored [n, k]) widens at a time */
    KN_BLOCK = 2048   /* columns a decoding product (B stored [k, n]) sums at a time: long
                         runs of each row of B, read in order */
};

/* the number of pieces a loop over n elements is cut into for threads (1: this thread) */
static int64_t pieces_for(int64_t n)
{
    int64_t p = omp_get_max_threads();
    return n <= PAR_MIN || p < 2 || omp_in_parallel() ? 1 : p;
}

/* n 16-bit values of dtype t widened to f32 / f32 rounded to them, over threads when n is
 * long (rc_convert, the library's one array converter) */
static void widen(float *dst, const uint16_t *src, rc_dtype t, int64_t n)
{
    rc_convert(dst, RC_F32, src, t, n);
}

static void narrow(uint16_t *dst, const float *src, rc_dtype t, int64_t n)
{
    rc_convert(dst, t, src, RC_F32, n);
}

/* ---- workspace -------------------------------------------------------------------------- */

/* n floats of the workspace the backend hands the node (io->work: as many floats as
 * rci_cpu_half_work says the node takes, which is what each path asks for here) */
static int work_get(const rci_cpu_args *io, size_t n, float **p, rc_error *err)
{
    *p = io->work;
    if (n <= io->work_floats)
        return 0;
    return rc_error_set(err, RC_ERR_MEMORY, "%s: %zu floats of 16-bit workspace given, %zu needed",
                        rc_op_name(io->node->op), io->work_floats, n);
}

/* Large nodes go through the f32 kernel in pieces (rows, batches, or slices of the inner
 * dimension of a product) so that the workspace stays near this many floats. */
static int64_t chunk_floats = (int64_t)1 << 22;

void rci_cpu_half_chunk(int64_t floats)
{
    chunk_floats = floats > 0 ? floats : (int64_t)1 << 22;
}

/* dst: src read as an f32 tensor of shape shape[nd] (src's dtype kept where it is not 16-bit) */
static void shadow_of(rc_tensor *dst, const rc_tensor *src, int nd, const int64_t *shape)
{
    *dst = *src;
    if (rci_dtype_is_half(src->dtype))
        dst->dtype = RC_F32;
    dst->ndim = nd;
    for (int i = 0; i < nd; i++)
        dst->shape[i] = shape[i];
    dst->view_src = NULL;
}

/* runs the f32 kernel on node with shape shape[nd] and inputs srcs / in, into out */
static int run_piece(const rci_cpu_args *io, int nd, const int64_t *shape, rc_tensor *srcs,
                     const void *const *in, void *out, rc_error *err)
{
    const rc_tensor *node = io->node;
    rc_tensor piece;
    shadow_of(&piece, node, nd, shape);
    rci_cpu_args a = {&piece, out, {0}, io->run_key, NULL, 0, NULL};
    for (int k = 0; k < node->nsrc; k++) {
        piece.src[k] = node->src[k] ? &srcs[k] : NULL;
        a.in[k] = in[k];
    }
    return rci_cpu_kernel_f32(&a, err);
}

/* ---- the general case: through the f32 kernel ------------------------------------------------ */

/* 1 where the f32 values of a 16-bit node's output (k < 0) or input k are in a kept block,
 * not in workspace: a 16-bit ATTENTION keeps its output in f32 (rci_kept_bytes), which the
 * f32 kernel writes there and its ATTENTION_STATS (src0) reads from there. The block is the
 * f32 node's values, then the f32 node's own kept block. */
static int f32_in_kept(const rc_tensor *node, int k)
{
    return k < 0 ? node->op == RC_OP_ATTENTION : node->op == RC_OP_ATTENTION_STATS && k == 0;
}

/* The node widened whole: its 16-bit inputs and (16-bit) output in f32. Floats. */
static size_t whole_need(const rc_tensor *node)
{
    int out_work = rci_dtype_is_half(node->dtype) && !f32_in_kept(node, -1);
    size_t need = out_work ? (size_t)rc_tensor_numel(node) : 0;
    for (int k = 0; k < node->nsrc; k++)
        if (node->src[k] && rci_dtype_is_half(node->src[k]->dtype) && !f32_in_kept(node, k))
            need += (size_t)rc_tensor_numel(node->src[k]);
    return need;
}

/* How a node runs by rows (rows_plan_of) */
typedef struct {
    int loss, causal;
    int wsum;                     /* NORM_GRAD's weight gradient: the pieces' sums added */
    int cut[RC_MAX_SRC];          /* 1: src[k] is cut with the rows; 0: taken whole */
    int ncut;                     /* the cut 16-bit inputs and the output, when 16-bit */
    int slots;                    /* pieces in flight at once (1: one after another) */
    int64_t len, rows, tq, per;   /* row length, rows, rows of a query block, rows a piece */
    size_t whole;                 /* floats of the 16-bit inputs taken whole */
} rows_plan;

static int rows_plan_of(const rc_tensor *node, rows_plan *rp);

static size_t rows_need(const rows_plan *rp)
{
    return (size_t)(rp->slots * rp->ncut * rp->per * rp->len) + rp->whole + (size_t)(rp->wsum ? rp->len : 0);
}

/* Floats of workspace a node that is not a product or a 16-bit embedding needs: by rows
 * when it runs by rows, else whole. */
static size_t through_need(const rc_tensor *node)
{
    rows_plan rp;
    return rows_plan_of(node, &rp) ? rows_need(&rp) : whole_need(node);
}

static int by_rows(const rci_cpu_args *io, const rows_plan *rp, rc_error *err);

static int through_f32(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    rows_plan rp;
    if (rows_plan_of(node, &rp))
        return by_rows(io, &rp, err) < 0 ? -1 : 0;
    rc_tensor shadow = *node, srcs[RC_MAX_SRC];
    int out_half = rci_dtype_is_half(node->dtype);
    float *at;
    if (work_get(io, whole_need(node), &at, err))
        return -1;
    rci_cpu_args a = {&shadow, io->out, {0}, io->run_key, NULL, 0, io->kept};
    shadow.view_src = NULL;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        a.in[k] = io->in[k];
        if (!s || !rci_dtype_is_half(s->dtype))
            continue;
        srcs[k] = *s;
        srcs[k].dtype = RC_F32;
        shadow.src[k] = &srcs[k];
        if (f32_in_kept(node, k)) {
            a.in[k] = io->kept;
            a.kept = (char *)io->kept + rci_attention_lse_at(s);
            continue;
        }
        widen(at, io->in[k], s->dtype, rc_tensor_numel(s));
        a.in[k] = at;
        at += rc_tensor_numel(s);
    }
    if (out_half) {
        shadow.dtype = RC_F32;
        a.out = at;
    }
    if (out_half && f32_in_kept(node, -1)) { /* the f32 output is what the node keeps */
        a.out = io->kept;
        a.kept = (char *)io->kept + rci_attention_lse_at(node);
    }
    if (rci_cpu_kernel_f32(&a, err))
        return -1;
    if (out_half)
        narrow(io->out, a.out, node->dtype, rc_tensor_numel(node));
    return 0;
}

/* ---- row pieces: ops whose output rows depend on the same rows of their inputs only -------- */

static int row_op(const rc_tensor *node)
{
    switch (node->op) {
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV:
    case RC_OP_WHERE:
    case RC_OP_EQUAL:
    case RC_OP_AFFINE:
    case RC_OP_EXP:
    case RC_OP_LOG:
    case RC_OP_SQRT:
    case RC_OP_RSQRT:
    case RC_OP_TANH:
    case RC_OP_ACT:
    case RC_OP_SOFTMAX:
    case RC_OP_LAYER_NORM:
    case RC_OP_RMS_NORM:
    case RC_OP_NORM_GRAD:
    case RC_OP_CROSS_ENTROPY:
    case RC_OP_CROSS_ENTROPY_GRAD:
        return 1;
    default:
        return 0;
    }
}

/* 1 when node runs in pieces of rows (its plan in *rp), 0 when it fits in one piece, its
 * inputs do not cut by rows or its op is not a row op. Each input is cut with the rows (it
 * has the node's shape; the losses' logits and targets; x and G of a norm's weight
 * gradient, a [C] sum over the rows) or taken whole (a scalar or a [C] vector along the
 * last axis: biases, norm weights). A causal softmax is cut at whole queries. */
static int rows_plan_of(const rc_tensor *node, rows_plan *rp)
{
    memset(rp, 0, sizeof *rp);
    if (!row_op(node))
        return 0;
    int loss = node->op == RC_OP_CROSS_ENTROPY || node->op == RC_OP_CROSS_ENTROPY_GRAD;
    int wsum = node->op == RC_OP_NORM_GRAD && node->iparam[1];
    const rc_tensor *lead = loss || wsum ? node->src[0] : node; /* the tensor whose rows are cut */
    if (lead->ndim < 1)
        return 0;
    rp->loss = loss;
    rp->wsum = wsum;
    rp->causal = node->op == RC_OP_SOFTMAX && node->iparam[0] && node->ndim >= 2;
    rp->len = lead->shape[lead->ndim - 1];
    rp->rows = rp->len ? rc_tensor_numel(lead) / rp->len : 0;
    rp->tq = rp->causal ? node->shape[node->ndim - 2] : 1;
    rp->ncut = rci_dtype_is_half(node->dtype);
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (!s)
            continue;
        if (loss)
            rp->cut[k] = k < 2;
        else if (rci_same_shape(s, lead))
            rp->cut[k] = 1;
        else if (!(rc_tensor_numel(s) == 1 || (rc_tensor_numel(s) == rp->len && s->shape[s->ndim - 1] == rp->len)))
            return 0;
        if (rci_dtype_is_half(s->dtype) && rp->cut[k])
            rp->ncut++;
        else if (rci_dtype_is_half(s->dtype))
            rp->whole += (size_t)rc_tensor_numel(s);
    }
    /* pieces whose results are summed (a loss, a weight gradient) go one after another, each
     * over the threads; the others up to SLOTS at a time, each widened, computed and rounded
     * by one thread in its own part of the workspace, in pieces of at most PIECE_FLOATS an
     * array, which its cache holds (the pieces do not depend on the thread count) */
    int summed = node->op == RC_OP_CROSS_ENTROPY || wsum;
    int64_t len = rp->len ? rp->len : 1, unit = (rp->ncut ? rp->ncut : 1) * len; /* floats a row takes */
    int64_t per = summed ? chunk_floats / unit : chunk_floats / SLOTS / unit;
    if (!summed && per > PIECE_FLOATS / len)
        per = PIECE_FLOATS / len;
    per = per / rp->tq * rp->tq;
    rp->per = per < rp->tq ? rp->tq : per;
    int64_t slots = summed ? 1 : chunk_floats / (unit * rp->per);
    rp->slots = slots < 1 ? 1 : slots > SLOTS ? SLOTS : (int)slots;
    return rp->per < rp->rows;
}

/* What every piece of a node's rows shares: the inputs taken whole (widened once), the
 * count of targets a loss averages over */
typedef struct {
    const rci_cpu_args *io;
    const rows_plan *rp;
    rc_tensor srcs[RC_MAX_SRC];
    const void *in[RC_MAX_SRC];
    int64_t count;
} rows_run;

/* Rows [r0, r0 + n) of the node through the f32 kernel, its cut 16-bit inputs widened into
 * p (and its 16-bit result there before it is rounded into the output). A piece of a
 * CROSS_ENTROPY adds its mean times its count of targets to *total; of a weight gradient,
 * its [len] sum to the output (pieces in order). 0, or -1 with err set. */
static int rows_piece(const rows_run *w, int64_t r0, int64_t n, float *p, double *total, rc_error *err)
{
    const rci_cpu_args *io = w->io;
    const rows_plan *rp = w->rp;
    const rc_tensor *node = io->node;
    int64_t len = rp->len, tq = rp->tq, c = 0;
    int64_t cube[3] = {n / tq, tq, len}, flat[2] = {n, len};
    int nd = rp->causal ? 3 : 2;
    const int64_t *shape = rp->causal ? cube : flat;
    rc_tensor srcs[RC_MAX_SRC];
    const void *in[RC_MAX_SRC];
    memcpy(srcs, w->srcs, sizeof srcs);
    memcpy(in, w->in, sizeof in);
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (!s || !rp->cut[k])
            continue;
        int targets = rp->loss && k == 1;
        shadow_of(&srcs[k], s, targets ? 1 : nd, targets ? &n : shape);
        int64_t off = r0 * (targets ? 1 : len);
        if (rci_dtype_is_half(s->dtype)) {
            widen(p, (const uint16_t *)io->in[k] + off, s->dtype, n * len);
            in[k] = p;
            p += n * len;
        } else {
            in[k] = (const char *)io->in[k] + off * (int64_t)rc_dtype_size(s->dtype);
        }
    }
    const int32_t *tg = rp->loss ? io->in[1] : NULL;
    for (int64_t r = r0; tg && r < r0 + n; r++)
        c += tg[r] != node->iparam[0];
    float g_piece = 0, loss_piece = 0;
    if (node->op == RC_OP_CROSS_ENTROPY_GRAD) {
        double g = *(const float *)io->in[2];
        g_piece = w->count ? (float)(g * (double)c / (double)w->count) : 0.0f;
        in[2] = &g_piece;
    }
    if (node->op == RC_OP_CROSS_ENTROPY) {
        if (run_piece(io, 0, NULL, srcs, in, &loss_piece, err))
            return -1;
        *total += (double)loss_piece * (double)c;
        return 0;
    }
    if (rp->wsum) { /* the piece's [len] sum, added */
        if (run_piece(io, 1, &len, srcs, in, p, err))
            return -1;
        for (int64_t j = 0; j < len; j++)
            ((float *)io->out)[j] = r0 ? ((float *)io->out)[j] + p[j] : p[j];
        return 0;
    }
    if (!rci_dtype_is_half(node->dtype)) /* an f32 result: in place */
        return run_piece(io, nd, shape, srcs, in, (float *)io->out + r0 * len, err);
    if (run_piece(io, nd, shape, srcs, in, p, err))
        return -1;
    narrow((uint16_t *)io->out + r0 * len, p, node->dtype, n * len);
    return 0;
}

/* The pieces SLOTS at a time: thread t takes pieces t, t + T, ... in slot t of the
 * workspace. A failing piece's error is the one of the lowest piece that failed. */
static int pieces_in_slots(const rows_run *w, float *slots, rc_error *err)
{
    const rows_plan *rp = w->rp;
    int64_t npieces = (rp->rows + rp->per - 1) / rp->per, slot_floats = rp->ncut * rp->per * rp->len;
    int64_t threads = omp_get_max_threads();
    threads = threads < rp->slots ? threads : rp->slots;
    threads = threads < npieces ? threads : npieces;
    int64_t failed[SLOTS];        /* by thread: the piece that failed (npieces: none) */
    rc_error why[SLOTS];
    for (int t = 0; t < SLOTS; t++)
        failed[t] = npieces;
    #pragma omp parallel num_threads((int)threads) if (threads > 1 && !omp_in_parallel())
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        why[t] = (rc_error){0};
        for (int64_t i = t; i < npieces; i += nt) {
            int64_t r0 = i * rp->per, n = rp->rows - r0 < rp->per ? rp->rows - r0 : rp->per;
            if (rows_piece(w, r0, n, slots + t * slot_floats, NULL, &why[t])) {
                failed[t] = i;
                break;
            }
        }
    }
    int first = 0;
    for (int t = 1; t < SLOTS; t++)
        first = failed[t] < failed[first] ? t : first;
    if (failed[first] == npieces)
        return 0;
    if (err)
        *err = why[first];
    return -1;
}

/* The node in pieces of rows, as rp plans (0, or -1 on error). The losses' means are over
 * all rows: each piece's count of targets weighs its mean (CROSS_ENTROPY) or its upstream
 * gradient (CROSS_ENTROPY_GRAD). */
static int by_rows(const rci_cpu_args *io, const rows_plan *rp, rc_error *err)
{
    const rc_tensor *node = io->node;
    rows_run w = {.io = io, .rp = rp};
    const int32_t *tg = rp->loss ? io->in[1] : NULL;
    for (int64_t r = 0; tg && r < rp->rows; r++)
        w.count += tg[r] != node->iparam[0];
    float *buf;
    if (work_get(io, rows_need(rp), &buf, err))
        return -1;
    float *at = buf;
    for (int k = 0; k < node->nsrc; k++) { /* the whole inputs, widened once */
        const rc_tensor *s = node->src[k];
        if (!s || rp->cut[k])
            continue;
        int64_t one[1] = {rc_tensor_numel(s)};
        shadow_of(&w.srcs[k], s, rc_tensor_numel(s) == 1 && !rp->loss ? 0 : rp->loss ? s->ndim : 1,
                  rp->loss ? s->shape : one);
        w.in[k] = io->in[k];
        if (rci_dtype_is_half(s->dtype)) {
            rci_half_widen_run(at, io->in[k], s->dtype, rc_tensor_numel(s));
            w.in[k] = at;
            at += rc_tensor_numel(s);
        }
    }
    if (rp->slots > 1)
        return pieces_in_slots(&w, at, err);
    double total = 0;
    for (int64_t r0 = 0; r0 < rp->rows; r0 += rp->per) /* at: per * len floats for each cut 16-bit
                                                          input and the output (len: a sum's) */
        if (rows_piece(&w, r0, rp->rows - r0 < rp->per ? rp->rows - r0 : rp->per, at, &total, err))
            return -1;
    if (node->op == RC_OP_CROSS_ENTROPY)
        *(float *)io->out = w.count ? (float)(total / (double)w.count) : 0.0f;
    return 0;
}

/* ---- embedding: the table's rows as they are ----------------------------------------------- */

static int embedding_half(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *tab = node->src[0];
    int64_t c = node->shape[node->ndim - 1], count = rc_tensor_numel(node->src[1]);
    int64_t rows = tab->shape[0], offset = node->iparam[2] ? node->iparam[3] : 0;
    int64_t v = node->iparam[2] ? node->iparam[4] : rows;
    const int32_t *ids = io->in[1];
    const uint16_t *t = io->in[0];
    uint16_t *o = io->out;
    for (int64_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= v)
            return rc_error_set(err, RC_ERR_INDEX, "embedding: id %d at position %lld is outside [0, %lld)",
                                ids[i], (long long)i, (long long)v);
    for (int64_t i = 0; i < count; i++) {
        int64_t r = (int64_t)ids[i] - offset;
        if (r >= 0 && r < rows)
            memcpy(o + i * c, t + r * c, (size_t)c * sizeof *o);
        else /* another shard's id */
            memset(o + i * c, 0, (size_t)c * sizeof *o);
    }
    return 0;
}

/* ---- matrix products ---------------------------------------------------------------------- */

typedef struct {
    const float *a;          /* rows x k, f32 */
    const uint16_t *b;       /* [k, n] (tb 0) or [n, k] (tb 1), 16-bit */
    float *c;                /* rows x n, f32 */
    rc_dtype t;
    int tb;
    int64_t rows, n, k;
} few_rows;

/* columns [j0, j1) of c = a op(B) with B stored [k, n]: rows of B scaled and added */
static void few_rows_kn(const few_rows *f, int64_t j0, int64_t j1)
{
    float acc[RCI_MATMUL_FEW_ROWS][KN_BLOCK], w[KN_BLOCK];
    for (int64_t jb = j0; jb < j1; jb += KN_BLOCK) {
        int64_t len = j1 - jb < KN_BLOCK ? j1 - jb : KN_BLOCK;
        for (int64_t r = 0; r < f->rows; r++)
            for (int64_t j = 0; j < len; j++)
                acc[r][j] = 0;
        int64_t p = 0;
        if (f->t == RC_BF16 && f->rows == 1) /* widening is a shift: fused, four rows of B a pass */
            for (; p + 4 <= f->k; p += 4) {
                const uint16_t *restrict b0 = f->b + p * f->n + jb, *restrict b1 = b0 + f->n;
                const uint16_t *restrict b2 = b1 + f->n, *restrict b3 = b2 + f->n;
                float x0 = f->a[p], x1 = f->a[p + 1], x2 = f->a[p + 2], x3 = f->a[p + 3];
                float *restrict ar = acc[0];
                for (int64_t j = 0; j < len; j++)
                    ar[j] += x0 * rci_bf16_to_f32(b0[j]) + x1 * rci_bf16_to_f32(b1[j]) +
                             x2 * rci_bf16_to_f32(b2[j]) + x3 * rci_bf16_to_f32(b3[j]);
            }
        for (; p < f->k; p++) {
            const uint16_t *restrict bp = f->b + p * f->n + jb;
            rci_half_widen_run(w, bp, f->t, len);
            for (int64_t r = 0; r < f->rows; r++) {
                float x = f->a[r * f->k + p];
                float *restrict ar = acc[r];
                for (int64_t j = 0; j < len; j++)
                    ar[j] += x * w[j];
            }
        }
        for (int64_t r = 0; r < f->rows; r++)
            memcpy(f->c + r * f->n + jb, acc[r], (size_t)len * sizeof(float));
    }
}

/* columns [j0, j1) of c = a B^T with B stored [n, k]: dot products, 16 partial sums each */
static void few_rows_nk(const few_rows *f, int64_t j0, int64_t j1)
{
    float w[BLOCK];
    for (int64_t j = j0; j < j1; j++) {
        float acc[RCI_MATMUL_FEW_ROWS][16] = {{0}};
        const uint16_t *bj = f->b + j * f->k;
        if (f->t == RC_BF16 && f->rows == 1) { /* widening is a shift: fused into the sums */
            const float *restrict ar = f->a;
            float *restrict s = acc[0];
            int64_t p = 0;
            for (; p + 16 <= f->k; p += 16)
                for (int l = 0; l < 16; l++)
                    s[l] += ar[p + l] * rci_bf16_to_f32(bj[p + l]);
            for (; p < f->k; p++)
                s[p % 16] += ar[p] * rci_bf16_to_f32(bj[p]);
        }
        for (int64_t p0 = 0; p0 < f->k && !(f->t == RC_BF16 && f->rows == 1); p0 += BLOCK) {
            int64_t len = f->k - p0 < BLOCK ? f->k - p0 : BLOCK, p = 0;
            rci_half_widen_run(w, bj + p0, f->t, len);
            for (int64_t r = 0; r < f->rows; r++) {
                const float *restrict ar = f->a + r * f->k + p0;
                float *restrict s = acc[r];
                for (p = 0; p + 16 <= len; p += 16)
                    for (int l = 0; l < 16; l++)
                        s[l] += ar[p + l] * w[p + l];
                for (; p < len; p++)
                    s[p % 16] += ar[p] * w[p];
            }
        }
        for (int64_t r = 0; r < f->rows; r++) {
            float s = 0;
            for (int l = 0; l < 16; l++)
                s += acc[r][l];
            f->c[r * f->n + j] = s;
        }
    }
}

/* the columns split evenly over the threads, in multiples of 16 */
static void few_rows_run(const few_rows *f)
{
    int64_t parts = pieces_for(f->n * f->k), groups = (f->n + 15) / 16;
    parts = parts < groups ? parts : groups;
    #pragma omp parallel for schedule(static) num_threads((int)parts) if (parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        int64_t j0 = groups * p / parts * 16, j1 = groups * (p + 1) / parts * 16;
        j1 = j1 < f->n ? j1 : f->n;
        if (f->tb)
            few_rows_nk(f, j0, j1);
        else
            few_rows_kn(f, j0, j1);
    }
}

/* rows x k of op(A) (A 16-bit, stored [k, rows] when ta) widened into a */
static void rows_widen(float *a, const uint16_t *src, rc_dtype t, int ta, int64_t rows, int64_t k)
{
    if (!ta) {
        rci_half_widen_run(a, src, t, rows * k);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < k; p++)
            a[r * k + p] = t == RC_BF16 ? rci_bf16_to_f32(src[p * rows + r]) : rci_f16_to_f32(src[p * rows + r]);
}

/* The product's dims (rci_matmul_dims_of, of a node checked with the plan); 0 when its
 * inner dimension is empty: the f32 kernel writes the zeros */
static int mm_dims_of(const rc_tensor *node, rci_matmul_dims *d)
{
    *d = rci_matmul_dims_of(node);
    return d->k != 0;
}

/* How a product too large for one piece runs (mm_pieces_of) */
typedef struct {
    int form;                     /* 0: whole (it fits, or none of the forms), 1: by batches,
                                     2: by rows of op(A), 3: by slices of the inner dimension */
    int64_t per;                  /* batches, rows or inner elements a piece */
    size_t need;                  /* floats of workspace */
} mm_pieces;

static mm_pieces mm_pieces_of(const rci_matmul_dims *d)
{
    int64_t m = d->m, n = d->n, k = d->k, batch = d->batch;
    mm_pieces p = {0, 0, 0};
    if (batch > 1 && d->ba == batch && d->bb == batch) {
        int64_t each = m * k + k * n + m * n, per = chunk_floats / each;
        per = per < 1 ? 1 : per;
        if (per < batch)
            p = (mm_pieces){1, per, (size_t)(per * each)};
        return p;
    }
    if (d->bb == 1 && !d->ta) {
        int64_t per = (chunk_floats - k * n) / (k + n);
        per = per < 1 ? 1 : per;
        if (per < batch * m)
            p = (mm_pieces){2, per, (size_t)(k * n + per * (k + n))};
        return p;
    }
    if (batch == 1 && d->ta && !d->tb && m * n < chunk_floats) {
        int64_t per = (chunk_floats - m * n) / (m + n);
        per = per < 1 ? 1 : per;
        if (per < k && m <= INT_MAX && n <= INT_MAX)
            p = (mm_pieces){3, per, (size_t)(m * n + per * (m + n))};
    }
    return p;
}

/* 1 when a bf16 product goes through OpenBLAS's bf16 GEMM */
static int mm_sbgemm(const rc_tensor *node)
{
#ifdef REDCO_HAVE_SBGEMM
    return node->dtype == RC_BF16;
#else
    (void)node;
    return 0;
#endif
}

/* Floats of workspace a 16-bit product needs, on the path matmul_half takes */
static size_t matmul_need(const rc_tensor *node)
{
    rci_matmul_dims d;
    if (!mm_dims_of(node, &d))
        return through_need(node);
    if (rci_matmul_few_rows(&d))
        return (size_t)(d.batch * d.m * (d.k + d.n));
    if (rci_cpu_dnnl_takes(node->dtype, &d))
        return 0;
    if (mm_sbgemm(node))
        return (size_t)(d.batch * d.m * d.n);
    mm_pieces p = mm_pieces_of(&d);
    return p.form ? p.need : through_need(node);
}

/* A product too large for one piece of workspace, as p plans: by batches when both operands
 * are batched, by rows of op(A) when B is shared and A is not read transposed, by slices of
 * the inner dimension (summed in f32) for A^T B of two matrices; 0, or -1 on error. */
static int matmul_pieces(const rci_cpu_args *io, const rci_matmul_dims *d, const mm_pieces *p, rc_error *err)
{
    const rc_tensor *node = io->node, *A = node->src[0], *B = node->src[1];
    int ta = d->ta, tb = d->tb;
    int64_t batch = d->batch, m = d->m, n = d->n, k = d->k, per = p->per;
    rc_dtype t = node->dtype;
    const uint16_t *a = io->in[0], *b = io->in[1];
    uint16_t *out = io->out;
    rc_tensor srcs[2];
    const void *in[2];
    float *buf;
    if (work_get(io, p->need, &buf, err))
        return -1;
    if (p->form == 1) {
        for (int64_t z = 0; z < batch; z += per) {
            int64_t nb = batch - z < per ? batch - z : per;
            int64_t sa[3] = {nb, ta ? k : m, ta ? m : k}, sb[3] = {nb, tb ? n : k, tb ? k : n}, so[3] = {nb, m, n};
            float *fa = buf, *fb = buf + nb * m * k, *fo = fb + nb * k * n;
            shadow_of(&srcs[0], A, 3, sa);
            shadow_of(&srcs[1], B, 3, sb);
            widen(fa, a + z * m * k, t, nb * m * k);
            widen(fb, b + z * k * n, t, nb * k * n);
            in[0] = fa;
            in[1] = fb;
            if (run_piece(io, 3, so, srcs, in, fo, err))
                return -1;
            narrow(out + z * m * n, fo, t, nb * m * n);
        }
        return 0;
    }
    if (p->form == 2) {
        int64_t rows = batch * m;
        float *fb = buf, *fa = buf + k * n, *fo = fa + per * k;
        int64_t sb[2] = {B->shape[B->ndim - 2], B->shape[B->ndim - 1]};
        shadow_of(&srcs[1], B, 2, sb);
        widen(fb, b, t, k * n);
        in[1] = fb;
        for (int64_t r0 = 0; r0 < rows; r0 += per) {
            int64_t nr = rows - r0 < per ? rows - r0 : per, sa[2] = {nr, k}, so[2] = {nr, n};
            shadow_of(&srcs[0], A, 2, sa);
            widen(fa, a + r0 * k, t, nr * k);
            in[0] = fa;
            if (run_piece(io, 2, so, srcs, in, fo, err))
                return -1;
            narrow(out + r0 * n, fo, t, nr * n);
        }
        return 0;
    }
    /* form 3: C = A^T B, A stored [k, m], B [k, n]: slices of k rows summed into C in f32 */
    float *fo = buf, *fa = buf + m * n, *fb = fa + per * m;
    for (int64_t p0 = 0; p0 < k; p0 += per) {
        int64_t nk = k - p0 < per ? k - p0 : per;
        widen(fa, a + p0 * m, t, nk * m);
        widen(fb, b + p0 * n, t, nk * n);
        rci_cpu_sgemm(1, 0, m, n, nk, 1.0f, fa, m, fb, n, p0 ? 1.0f : 0.0f, fo, n);
    }
    narrow(out, fo, t, m * n);
    return 0;
}

#ifdef REDCO_HAVE_SBGEMM
/* every batch through OpenBLAS's bf16 GEMM into f32 c, then rounded */
static int matmul_sbgemm(const rci_cpu_args *io, const rci_matmul_dims *d, rc_error *err)
{
    const rc_tensor *node = io->node;
    int ta = d->ta, tb = d->tb;
    int64_t batch = d->batch, m = d->m, n = d->n, k = d->k;
    int64_t sa = d->ba == 1 ? 0 : m * k, sb = d->bb == 1 ? 0 : k * n;
    float *c;
    if (work_get(io, matmul_need(node), &c, err))
        return -1;
    const uint16_t *a = io->in[0], *b = io->in[1];
    for (int64_t z = 0; z < batch; z++)
        cblas_sbgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                     (blasint)m, (blasint)n, (blasint)k, 1.0f, a + z * sa, (blasint)(ta ? m : k),
                     b + z * sb, (blasint)(tb ? k : n), 0.0f, c + z * m * n, (blasint)n);
    narrow(io->out, c, node->dtype, batch * m * n);
    return 0;
}
#endif

/* Every path takes its workspace as matmul_need says (the need rci_cpu_half_work reports). */
static int matmul_half(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *A = node->src[0], *B = node->src[1];
    rci_matmul_dims d;
    if (!mm_dims_of(node, &d))
        return through_f32(io, err);
    int64_t rows = d.batch * d.m, n = d.n, k = d.k;
    if (rci_matmul_few_rows(&d)) {
        /* a decoding step: the 16-bit matrix read as it is */
        float *s;
        if (work_get(io, matmul_need(node), &s, err))
            return -1;
        rows_widen(s, io->in[0], A->dtype, d.ta, rows, k);
        few_rows f = {s, io->in[1], s + rows * k, B->dtype, d.tb, rows, n, k};
        few_rows_run(&f);
        rci_half_narrow_run(io->out, f.c, node->dtype, rows * n);
        return 0;
    }
    if (rci_cpu_dnnl_takes(node->dtype, &d))
        return rci_cpu_dnnl_matmul(io, &d, err);
#ifdef REDCO_HAVE_SBGEMM
    if (mm_sbgemm(node))
        return matmul_sbgemm(io, &d, err);
#endif
    mm_pieces p = mm_pieces_of(&d);
    if (p.form)
        return matmul_pieces(io, &d, &p, err);
    return through_f32(io, err);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* The same dispatch as rci_cpu_kernel_half, through the same functions its paths size
 * their workspace with. */
size_t rci_cpu_half_work(const rc_tensor *node)
{
    if (rc_tensor_numel(node) == 0)
        return through_need(node);
    if (node->op == RC_OP_MATMUL)
        return matmul_need(node);
    if (node->op == RC_OP_EMBEDDING && rci_dtype_is_half(node->dtype))
        return 0;
    return through_need(node);
}

int rci_cpu_kernel_half(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    if (rc_tensor_numel(node) == 0)
        return through_f32(io, err);
    if (node->op == RC_OP_MATMUL)
        return matmul_half(io, err);
    if (node->op == RC_OP_EMBEDDING && rci_dtype_is_half(node->dtype))
        return embedding_half(io, err);
    return through_f32(io, err);
}
