/* kernels_real.c - the arithmetic CPU kernels, written once over `real`.
 *
 * CMake compiles this file twice: with RC_REAL=float, RC_KERNEL_FN=rci_cpu_kernel_f32, and
 * (through kernels_real_f64.c) with RC_REAL=double, RC_KERNEL_FN=rci_cpu_kernel_f64. Only
 * RC_KERNEL_FN is exported; everything else is static.
 *
 * The contract is in cpu.h: tensors are contiguous row-major, the output io->out is
 * uninitialised and never overlaps an input, and errors are reported, never aborted on.
 * The node's structure (inputs, dtypes, shapes, parameters) was checked when its plan was
 * made (rci_node_check); a kernel checks only what depends on the values (ids in range).
 *
 * Each kernel hands a "range" function (rows or elements
 * [i0, i1)) to par_range, which calls it once on this thread when the work is small and
 * otherwise once per thread inside an OpenMP parallel loop: small ops never enter the
 * OpenMP runtime. The inner loops are plain `for` loops over contiguous `real *restrict`
 * so the compiler vectorises them. <tgmath.h> makes exp, tanh, ... pick the float
 * functions for float arguments. The per-element functions the device kernels compute
 * alike (exp as rci_fexp, the activations) are src/core/scalar.h's, over RC_REAL.
 */
#include "cpu.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#ifndef RC_REAL
#error "compile kernels_real.c with -DRC_REAL=float or -DRC_REAL=double"
#endif
#ifndef RC_KERNEL_FN
#error "compile kernels_real.c with -DRC_KERNEL_FN=<name of the entry point>"
#endif

typedef RC_REAL real;

enum {
    PAR_MIN = 32768,   /* elements of work below which a kernel runs on one thread */
    MAX_PARTS = 256,   /* most threads a kernel splits its work over */
    CHUNK_MIN = 4096,  /* the shortest piece a long row is split into for threads */
    COL_BLOCK = 256,   /* columns reduced together by sum / max / sum_to */
    ROPE_BLOCK = 64    /* rotary pairs whose cos / sin are computed together */
};

/* ---- helpers ------------------------------------------------------------------------ */

static rc_dtype real_dtype(void)
{
    return sizeof(real) == sizeof(double) ? RC_F64 : RC_F32;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static const char *op_name(const rc_tensor *node)
{
    return rc_op_name(node->op);
}

/* Work on [i0, i1) of something; `part` numbers the call (0 .. parts-1) for kernels that
 * keep one partial result per part. */
typedef void (*range_fn)(void *ctx, int64_t i0, int64_t i1, int part);

/* Runs fn over [0, n): in one call on this thread when work <= PAR_MIN elements (or there
 * is one thread), else in one contiguous part per thread. Returns the number of parts. */
static int par_range(range_fn fn, void *ctx, int64_t n, int64_t work)
{
    int64_t parts = omp_get_max_threads();
    parts = parts < MAX_PARTS ? parts : MAX_PARTS;
    parts = parts < n ? parts : n;
    if (work <= PAR_MIN || parts < 2 || omp_in_parallel()) {
        fn(ctx, 0, n, 0);
        return 1;
    }
    #pragma omp parallel for schedule(static) num_threads((int)parts)
    for (int64_t p = 0; p < parts; p++)
        fn(ctx, n * p / parts, n * (p + 1) / parts, (int)p);
    return (int)parts;
}

static const real *src_data(const rci_cpu_args *io, int k)
{
    return k < io->node->nsrc ? (const real *)io->in[k] : NULL;
}

/* The size of the last axis (1 for a scalar) and the number of rows before it. */
static int64_t last_dim(const rc_tensor *t)
{
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

static int64_t lead_rows(const rc_tensor *t)
{
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++)
        r *= t->shape[i];
    return r;
}

/* The sum of x[0, n) in double, kept in 8 interleaved partial sums so that the loop
 * vectorises (a single double accumulator would serialise on its add latency). */
static double dsum(const real *restrict x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += x[i + k];
    double s = 0;
    for (; i < n; i++)
        s += x[i];
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* The sum of (x[i] - mean)^2 over [0, n), the same way. */
static double dsum_sq(const real *restrict x, int64_t n, double mean)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double d = x[i + k] - mean;
            acc[k] += d * d;
        }
    double s = 0;
    for (; i < n; i++)
        s += (x[i] - mean) * (x[i] - mean);
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* ---- broadcasting ------------------------------------------------------------------------
 * The inputs of an element-wise op are described by their element strides along the
 * node's axes (0 on a broadcast axis). Size-1 axes are dropped and neighbouring axes that
 * continue each other in every input are merged, so identical shapes become one axis of
 * stride 1, a bias [C] on [N, C] becomes [N, C] with strides (0, 1), a scalar stride 0.
 * The work is then rows of the last merged axis, long rows cut into pieces for threads. */

typedef struct {
    const rci_cpu_args *io;
    const rc_tensor *node;
    int nd;                          /* merged axes, >= 1 */
    int64_t shape[RC_MAX_DIMS];
    int64_t st[3][RC_MAX_DIMS];      /* element strides of input k along each merged axis */
    int64_t n, len, pieces;          /* row length, piece length, pieces per row */
} bcast;

static void bcast_init(bcast *b, const rci_cpu_args *io, int nin)
{
    const rc_tensor *node = io->node;
    int64_t st[3][RC_MAX_DIMS];
    for (int k = 0; k < nin; k++)
        rci_bcast_strides(node->src[k], node->ndim, node->shape, st[k]);
    b->io = io;
    b->node = node;
    b->nd = rci_merge_axes(node->ndim, node->shape, nin, st, b->shape, b->st);
    /* a few long rows (one row when shapes are identical) still spread over every thread */
    int64_t n = b->shape[b->nd - 1], rows = rc_tensor_numel(node) / n;
    int64_t want = 4 * (int64_t)omp_get_max_threads();
    b->n = n;
    b->len = n;
    if (rows * n > PAR_MIN && rows < want) {
        int64_t per_row = (want + rows - 1) / rows;
        int64_t len = (n + per_row - 1) / per_row;
        len = len < CHUNK_MIN ? CHUNK_MIN : len;
        b->len = len < n ? len : n;
    }
    b->pieces = (n + b->len - 1) / b->len;
}

/* Element offsets of the inputs at the start of row r (rows: all merged axes but the last). */
static void bcast_row(const bcast *b, int nin, int64_t r, int64_t *off)
{
    for (int k = 0; k < nin; k++)
        off[k] = 0;
    for (int i = b->nd - 2; i >= 0; i--) {
        int64_t idx = r % b->shape[i];
        r /= b->shape[i];
        for (int k = 0; k < nin; k++)
            off[k] += idx * b->st[k][i];
    }
}

/* ---- fill, unary ----------------------------------------------------------------------------- */

static void full_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    real *restrict o = io->out;
    real v = (real)node->fparam[0];
    (void)part;
    for (int64_t i = i0; i < i1; i++)
        o[i] = v;
}

static int k_full(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t n = rc_tensor_numel(node);
    par_range(full_range, (void *)io, n, n);
    return 0;
}

static void unary_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *restrict x = src_data(io, 0);
    real *restrict o = io->out;
    real s = (real)node->fparam[0], c = (real)node->fparam[1];
    (void)part;
    switch (node->op) {
    case RC_OP_AFFINE:
        for (int64_t i = i0; i < i1; i++)
            o[i] = x[i] * s + c;
        break;
    case RC_OP_EXP:
        for (int64_t i = i0; i < i1; i++)
            o[i] = rci_fexp(x[i]);
        break;
    case RC_OP_LOG:
        for (int64_t i = i0; i < i1; i++)
            o[i] = log(x[i]);
        break;
    case RC_OP_SQRT:
        for (int64_t i = i0; i < i1; i++)
            o[i] = sqrt(x[i]);
        break;
    case RC_OP_RSQRT:
        for (int64_t i = i0; i < i1; i++)
            o[i] = 1 / sqrt(x[i]);
        break;
    default: /* RC_OP_TANH */
        for (int64_t i = i0; i < i1; i++)
            o[i] = tanh(x[i]);
        break;
    }
}

static int k_unary(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t n = rc_tensor_numel(node);
    /* the transcendental ones are worth threads sooner */
    par_range(unary_range, (void *)io, n, node->op == RC_OP_AFFINE ? n : 8 * n);
    return 0;
}

/* ---- activations ------------------------------------------------------------------------------ */

static void act_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *restrict x = src_data(io, 0);
    real *restrict o = io->out;
    int order = node->iparam[1];
    (void)part;
    switch (node->iparam[0]) {
    case RC_ACT_RELU:
        if (order == 0)
            for (int64_t i = i0; i < i1; i++)
                o[i] = x[i] > 0 ? x[i] : 0;
        else if (order == 1)
            for (int64_t i = i0; i < i1; i++)
                o[i] = x[i] > 0 ? 1 : 0;
        else
            for (int64_t i = i0; i < i1; i++)
                o[i] = 0;
        break;
    case RC_ACT_GELU_TANH:
        for (int64_t i = i0; i < i1; i++)
            o[i] = rci_act_gelu_tanh(x[i], order);
        break;
    case RC_ACT_GELU_ERF:
        for (int64_t i = i0; i < i1; i++)
            o[i] = rci_act_gelu_erf(x[i], order);
        break;
    case RC_ACT_SILU:
        for (int64_t i = i0; i < i1; i++)
            o[i] = rci_act_silu(x[i], order);
        break;
    default: /* RC_ACT_SIGMOID */
        for (int64_t i = i0; i < i1; i++)
            o[i] = rci_act_sigmoid(x[i], order);
        break;
    }
    if (node->nsrc > 1 && node->src[1]) { /* times the multiplier: a gradient's G f'(x) */
        const real *restrict m = src_data(io, 1);
        for (int64_t i = i0; i < i1; i++)
            o[i] *= m[i];
    }
}

static int k_act(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int kind = node->iparam[0];
    int64_t n = rc_tensor_numel(node);
    par_range(act_range, (void *)io, n, kind == RC_ACT_RELU ? n : 8 * n);
    return 0;
}

/* ---- broadcast binary ops, where, equal ------------------------------------------------------ */

/* o[i] = a[i * sa] op b[i * sb]: strides 1 and 0 get their own loops so they vectorise. o may
 * be a's own memory (plan.c, input_may_be_taken). */
static void binary_row(rc_op op, real *o, const real *a, int64_t sa,
                       const real *restrict b, int64_t sb, int64_t n)
{
    if (sa == 1 && sb == 1) {
        switch (op) {
        case RC_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; break;
        case RC_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; break;
        case RC_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
        default:        for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        }
    } else if (sa == 1 && sb == 0) {
        real y = b[0];
        switch (op) {
        case RC_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + y; break;
        case RC_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - y; break;
        case RC_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * y; break;
        default:        for (int64_t i = 0; i < n; i++) o[i] = a[i] / y; break;
        }
    } else if (sa == 0 && sb == 1) {
        real x = a[0];
        switch (op) {
        case RC_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = x + b[i]; break;
        case RC_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = x - b[i]; break;
        case RC_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = x * b[i]; break;
        default:        for (int64_t i = 0; i < n; i++) o[i] = x / b[i]; break;
        }
    } else {
        switch (op) {
        case RC_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; break;
        case RC_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; break;
        case RC_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; break;
        default:        for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; break;
        }
    }
}

/* pieces [t0, t1) of the rows of a broadcast binary op */
static void binary_range(void *ctx, int64_t t0, int64_t t1, int part)
{
    const bcast *b = ctx;
    const rci_cpu_args *io = b->io;
    const rc_tensor *node = b->node;
    const real *x = src_data(io, 0), *y = src_data(io, 1);
    real *o = io->out;
    int64_t n = b->n, len = b->len, sx = b->st[0][b->nd - 1], sy = b->st[1][b->nd - 1];
    (void)part;
    for (int64_t t = t0; t < t1; t++) {
        int64_t r = t / b->pieces, j0 = (t % b->pieces) * len, off[2];
        bcast_row(b, 2, r, off);
        binary_row(node->op, o + r * n + j0, x + off[0] + j0 * sx, sx, y + off[1] + j0 * sy, sy,
                   min64(len, n - j0));
    }
}

static int k_binary(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    bcast b;
    bcast_init(&b, io, 2);
    int64_t total = rc_tensor_numel(node);
    par_range(binary_range, &b, total / b.n * b.pieces, total);
    return 0;
}

/* where: src0 cond (node's dtype or i32, nonzero = true), src1 a, src2 b; rows [r0, r1) */
static void where_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const bcast *b = ctx;
    const rci_cpu_args *io = b->io;
    const rc_tensor *node = b->node;
    int cond_i32 = node->src[0]->dtype == RC_I32;
    const int32_t *ci = io->in[0];
    const real *cr = src_data(io, 0), *x = src_data(io, 1), *y = src_data(io, 2);
    real *o = io->out;
    int64_t n = b->n, sc = b->st[0][b->nd - 1], sx = b->st[1][b->nd - 1], sy = b->st[2][b->nd - 1];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        int64_t off[3];
        bcast_row(b, 3, r, off);
        real *restrict orow = o + r * n;
        const real *xr = x + off[1], *yr = y + off[2];
        if (cond_i32) {
            const int32_t *c = ci + off[0];
            for (int64_t i = 0; i < n; i++)
                orow[i] = c[i * sc] != 0 ? xr[i * sx] : yr[i * sy];
        } else {
            const real *c = cr + off[0];
            for (int64_t i = 0; i < n; i++)
                orow[i] = c[i * sc] != 0 ? xr[i * sx] : yr[i * sy];
        }
    }
}

static int k_where(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    bcast b;
    bcast_init(&b, io, 3);
    int64_t total = rc_tensor_numel(node);
    par_range(where_range, &b, total / b.n, total);
    return 0;
}

/* equal: src0 and src1 of the node's dtype, or both i32; rows [r0, r1) */
static void equal_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const bcast *b = ctx;
    const rci_cpu_args *io = b->io;
    const rc_tensor *node = b->node;
    int is_i32 = node->src[0]->dtype == RC_I32;
    const int32_t *xi = io->in[0], *yi = io->in[1];
    const real *xr = src_data(io, 0), *yr = src_data(io, 1);
    real *o = io->out;
    int64_t n = b->n, sx = b->st[0][b->nd - 1], sy = b->st[1][b->nd - 1];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        int64_t off[2];
        bcast_row(b, 2, r, off);
        real *restrict orow = o + r * n;
        if (is_i32) {
            const int32_t *a = xi + off[0], *c = yi + off[1];
            for (int64_t i = 0; i < n; i++)
                orow[i] = a[i * sx] == c[i * sy] ? 1 : 0;
        } else {
            const real *a = xr + off[0], *c = yr + off[1];
            for (int64_t i = 0; i < n; i++)
                orow[i] = a[i * sx] == c[i * sy] ? 1 : 0;
        }
    }
}

static int k_equal(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    bcast b;
    bcast_init(&b, io, 2);
    int64_t total = rc_tensor_numel(node);
    par_range(equal_range, &b, total / b.n, total);
    return 0;
}

/* ---- matmul ---------------------------------------------------------------------------------- */

/* c[n] = a[k] op(B) for one row of A (read with stride inc): a matrix-vector product.
 * (BLAS's gemm would pack all of B for one row: a decoding step's cost, twice over.) */
static void gemv(int tb, int64_t n, int64_t k, const real *a, int64_t inc, const real *b, int64_t ldb,
                 real *c)
{
    /* B stored [k, n]: c = B^T a; stored [n, k]: c = B a */
    enum CBLAS_TRANSPOSE op = tb ? CblasNoTrans : CblasTrans;
    blasint rows = (blasint)(tb ? n : k), cols = (blasint)(tb ? k : n);
    if (sizeof(real) == sizeof(double))
        cblas_dgemv(CblasRowMajor, op, rows, cols, 1.0, (const double *)(const void *)b, (blasint)ldb,
                    (const double *)(const void *)a, (blasint)inc, 0.0, (double *)(void *)c, 1);
    else
        cblas_sgemv(CblasRowMajor, op, rows, cols, 1.0f, (const float *)(const void *)b, (blasint)ldb,
                    (const float *)(const void *)a, (blasint)inc, 0.0f, (float *)(void *)c, 1);
}

/* C[m, n] = alpha op(A) op(B) + beta C, row-major (gemm_f32.c); the sizeof test is
 * folded by the compiler */
static void blas_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, real alpha, const real *a, int64_t lda,
                      const real *b, int64_t ldb, real beta, real *c, int64_t ldc)
{
    if (sizeof(real) == sizeof(double))
        rci_cpu_dgemm(ta, tb, m, n, k, (double)alpha, (const double *)(const void *)a, lda,
                      (const double *)(const void *)b, ldb, (double)beta, (double *)(void *)c, ldc);
    else
        rci_cpu_sgemm(ta, tb, m, n, k, (float)alpha, (const float *)(const void *)a, lda,
                      (const float *)(const void *)b, ldb, (float)beta, (float *)(void *)c, ldc);
}

/* C[m, n] = op(A) op(B), row-major */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const real *a, int64_t lda,
                 const real *b, int64_t ldb, real *c, int64_t ldc)
{
    if (m == 1) {
        gemv(tb, n, k, a, ta ? lda : 1, b, ldb, c);
        return;
    }
    blas_gemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc);
}

typedef struct {
    const real *a, *b;
    real *c;
    int ta, tb;
    int64_t m, n, k, lda, ldb, sa, sb;   /* sa, sb: batch strides, 0 for a shared operand */
} matmul_args;

/* batches [z0, z1), one gemm each (single-threaded BLAS inside a parallel region) */
static void matmul_range(void *ctx, int64_t z0, int64_t z1, int part)
{
    const matmul_args *g = ctx;
    (void)part;
    for (int64_t z = z0; z < z1; z++)
        gemm(g->ta, g->tb, g->m, g->n, g->k, g->a + z * g->sa, g->lda, g->b + z * g->sb, g->ldb,
             g->c + z * g->m * g->n, g->n);
}

/* src0 a [..., M, K] (stored [..., K, M] when iparam[0]), src1 b [..., K, N] (stored
 * [..., N, K] when iparam[1]) -> [..., M, N]. Either operand may be shared by every batch
 * (one batch only, e.g. a 2-D weight). */
static int k_matmul(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    rci_matmul_dims d = rci_matmul_dims_of(node);
    int ta = d.ta, tb = d.tb;
    int64_t m = d.m, n = d.n, k = d.k, batch = d.batch, ba = d.ba, bb = d.bb;
    if (k == 0) {
        memset(io->out, 0, rc_tensor_nbytes(node));
        return 0;
    }
    if (batch * m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return rc_error_set(err, RC_ERR_SHAPE, "matmul: extents %lld x %lld x %lld exceed the BLAS",
                            (long long)(batch * m), (long long)k, (long long)n);
    matmul_args g = {io->in[0], io->in[1], io->out, ta, tb, m, n, k, ta ? m : k, tb ? k : n,
                     ba == 1 ? 0 : m * k, bb == 1 ? 0 : k * n};
    if (batch == 1 || (bb == 1 && ba == batch && !ta)) {
        /* one gemm: the batches of a stacked into its rows */
        g.m = batch * m;
        matmul_range(&g, 0, 1, 0);
        return 0;
    }
    /* many gemms: one thread each when there are enough of them, else a threaded BLAS */
    int threads = omp_get_max_threads();
    par_range(matmul_range, &g, batch, threads > 1 && batch >= threads ? INT64_MAX : 0);
    return 0;
}

/* ---- softmax and norms ------------------------------------------------------------------------ */

typedef struct {
    const rci_cpu_args *io;
    const rc_tensor *node;
    int64_t mst[RC_MAX_DIMS];   /* mask strides along the node's axes */
} softmax_args;

/* softmax over the last axis of z = x * scale + mask, causal when iparam[0]; rows [r0, r1) */
static void softmax_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const softmax_args *s = ctx;
    const rci_cpu_args *io = s->io;
    const rc_tensor *node = s->node;
    const real *x = src_data(io, 0), *mask = src_data(io, 1);
    real *out = io->out;
    int nd = node->ndim;
    int64_t c = last_dim(node), tq = nd >= 2 ? node->shape[nd - 2] : 1;
    int64_t ms = nd ? s->mst[nd - 1] : 0;
    int causal = node->iparam[0] != 0;
    real scale = (real)node->fparam[0];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        const real *restrict xr = x + r * c;
        real *restrict o = out + r * c;
        int64_t cnt = c;   /* the visible keys: [0, cnt) */
        if (causal) {
            int64_t lim = r % tq + (c - tq) + 1;
            cnt = lim < 0 ? 0 : lim > c ? c : lim;
        }
        for (int64_t j = 0; j < cnt; j++)
            o[j] = xr[j] * scale;
        if (mask) {
            int64_t moff = 0, rr = r;
            for (int i = nd - 2; i >= 0; i--) {
                moff += (rr % node->shape[i]) * s->mst[i];
                rr /= node->shape[i];
            }
            const real *mr = mask + moff;
            if (ms == 1)
                for (int64_t j = 0; j < cnt; j++)
                    o[j] += mr[j];
            else
                for (int64_t j = 0; j < cnt; j++)
                    o[j] += mr[j * ms];
        }
        real mx = -INFINITY;
        for (int64_t j = 0; j < cnt; j++)
            mx = o[j] > mx ? o[j] : mx;
        if (mx == -INFINITY) {
            /* nothing visible: zeros rather than 0/0 */
            for (int64_t j = 0; j < c; j++)
                o[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < cnt; j++)
            o[j] = rci_fexp(o[j] - mx);
        real inv = (real)(1 / dsum(o, cnt));
        for (int64_t j = 0; j < cnt; j++)
            o[j] *= inv;
        for (int64_t j = cnt; j < c; j++)
            o[j] = 0;
    }
}

static int k_softmax(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    softmax_args s = {io, node, {0}};
    const rc_tensor *mask = node->nsrc > 1 ? node->src[1] : NULL;
    if (mask)
        rci_bcast_strides(mask, node->ndim, node->shape, s.mst);
    int64_t total = rc_tensor_numel(node);
    par_range(softmax_range, &s, total / last_dim(node), 8 * total);
    return 0;
}

/* A norm's row statistics, as the forward kernels and NORM_GRAD take them: its mean into
 * mu when not NULL (0 without center: the RMS norm) and 1/sigma = 1 / sqrt(mean((x -
 * mean)^2) + eps) */
static void norm_row_stats(const real *xr, int64_t c, int center, double eps, real *mu, real *rstd)
{
    double mean = center ? dsum(xr, c) / (double)c : 0;
    if (mu)
        *mu = (real)mean;
    *rstd = (real)(1 / sqrt(dsum_sq(xr, c, mean) / (double)c + eps));
}

/* (x - mean) / sqrt(var + eps) * w + b over the last axis, w and b optional; rows [r0, r1) */
static void layer_norm_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *x = src_data(io, 0), *w = src_data(io, 1), *b = src_data(io, 2);
    real *out = io->out;
    int64_t c = last_dim(node);
    double eps = node->fparam[0];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        const real *restrict xr = x + r * c;
        real *restrict o = out + r * c;
        real mu, rstd;
        norm_row_stats(xr, c, 1, eps, &mu, &rstd);
        for (int64_t j = 0; j < c; j++)
            o[j] = (xr[j] - mu) * rstd;
        if (w)
            for (int64_t j = 0; j < c; j++)
                o[j] *= w[j];
        if (b)
            for (int64_t j = 0; j < c; j++)
                o[j] += b[j];
    }
}

static int k_layer_norm(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t c = last_dim(node), total = rc_tensor_numel(node);
    par_range(layer_norm_range, (void *)io, total / c, 2 * total);
    return 0;
}

/* x / sqrt(mean(x^2) + eps) * (w + offset) over the last axis, no w: times 1; rows [r0, r1) */
static void rms_norm_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *x = src_data(io, 0), *w = src_data(io, 1);
    real *out = io->out;
    int64_t c = last_dim(node);
    double eps = node->fparam[0];
    real offset = (real)node->fparam[1];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        const real *restrict xr = x + r * c;
        real *restrict o = out + r * c;
        real rs;
        norm_row_stats(xr, c, 0, eps, NULL, &rs);
        if (w)
            for (int64_t j = 0; j < c; j++)
                o[j] = xr[j] * rs * (w[j] + offset);
        else
            for (int64_t j = 0; j < c; j++)
                o[j] = xr[j] * rs;
    }
}

static int k_rms_norm(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t c = last_dim(node), total = rc_tensor_numel(node);
    par_range(rms_norm_range, (void *)io, total / c, 2 * total);
    return 0;
}

/* NORM_GRAD's dx (redco.h), rows [r0, r1): the row's mean (layer norm; 0 for RMS) and
 * 1/sigma as the forward takes them, then g = G (w + offset) summed with and without xhat
 * for dx = rstd (g - xhat mean(g xhat) - mean(g)) (mean(g) for layer norm alone), plus the
 * addend R when there is one (which the output may be: each element read, then written) */
static void norm_grad_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *x = src_data(io, 0), *w = src_data(io, 1), *G = src_data(io, 2), *R = src_data(io, 3);
    real *out = io->out;
    int64_t c = last_dim(node);
    int layer = node->iparam[0];
    double eps = node->fparam[0];
    real offset = (real)node->fparam[1];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        const real *restrict xr = x + r * c, *restrict gr = G + r * c, *rr = R ? R + r * c : NULL;
        real *o = out + r * c;
        real mu, rstd;
        norm_row_stats(xr, c, layer, eps, &mu, &rstd);
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < c; j++) {
            real gj = w ? gr[j] * (w[j] + offset) : gr[j];
            sg += gj;
            sgx += gj * ((xr[j] - mu) * rstd);
        }
        real a = (real)(sgx / (double)c), b = layer ? (real)(sg / (double)c) : 0;
        for (int64_t j = 0; j < c; j++) {
            real gj = w ? gr[j] * (w[j] + offset) : gr[j], v = rstd * (gj - (xr[j] - mu) * rstd * a - b);
            o[j] = rr ? v + rr[j] : v;
        }
    }
}

/* NORM_GRAD's weight gradient: the rows of x in blocks of WGRAD_ROWS, the blocks in
 * parallel, each its rows' statistics and then its columns' sums of G xhat (in double, into
 * its own part), the parts then added in block order: the same sums for any thread count */
enum { WGRAD_ROWS = 64 };

typedef struct {
    const rci_cpu_args *io;
    int64_t rows, c;
    double *part;   /* [blocks, c] */
} wgrad_args;

static void wgrad_blocks_range(void *ctx, int64_t b0, int64_t b1, int part)
{
    const wgrad_args *a = ctx;
    const rc_tensor *node = a->io->node;
    const real *x = src_data(a->io, 0), *G = src_data(a->io, 2);
    int64_t c = a->c;
    (void)part;
    for (int64_t b = b0; b < b1; b++) {
        double *restrict acc = a->part + b * c;
        memset(acc, 0, (size_t)c * sizeof *acc);
        for (int64_t r = b * WGRAD_ROWS; r < min64((b + 1) * WGRAD_ROWS, a->rows); r++) {
            const real *restrict xr = x + r * c, *restrict gr = G + r * c;
            real mu, rstd;
            norm_row_stats(xr, c, node->iparam[0], node->fparam[0], &mu, &rstd);
            for (int64_t j = 0; j < c; j++)
                acc[j] += gr[j] * ((xr[j] - mu) * rstd);
        }
    }
}

static int k_norm_wgrad(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *x = io->node->src[0];
    wgrad_args a = {io, lead_rows(x), last_dim(x), NULL};
    int64_t blocks = (a.rows + WGRAD_ROWS - 1) / WGRAD_ROWS;
    real *out = io->out;
    if (blocks == 0) {
        memset(out, 0, (size_t)a.c * sizeof *out);
        return 0;
    }
    a.part = malloc((size_t)(blocks * a.c) * sizeof *a.part);
    if (!a.part)
        return rc_error_set(err, RC_ERR_MEMORY, "norm_grad: no memory for %lld blocks of %lld column sums",
                            (long long)blocks, (long long)a.c);
    par_range(wgrad_blocks_range, &a, blocks, 3 * a.rows * a.c);
    for (int64_t b = 1; b < blocks; b++)
        for (int64_t j = 0; j < a.c; j++)
            a.part[j] += a.part[b * a.c + j];
    for (int64_t j = 0; j < a.c; j++)
        out[j] = (real)a.part[j];
    free(a.part);
    return 0;
}

static int k_norm_grad(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    if (node->iparam[1])
        return k_norm_wgrad(io, err);
    int64_t c = last_dim(node), total = rc_tensor_numel(node);
    par_range(norm_grad_range, (void *)io, total / c, 4 * total);
    return 0;
}

/* ---- embedding, one-hot, cross-entropy ------------------------------------------------------- */

/* The first id outside [0, n) that is not `ignore` (pass a value no id has to check all);
 * -1 if none. */
static int64_t bad_id(const int32_t *ids, int64_t count, int64_t n, int64_t ignore)
{
    for (int64_t i = 0; i < count; i++)
        if (ids[i] != ignore && (ids[i] < 0 || ids[i] >= n))
            return i;
    return -1;
}

/* out row i = table row ids[i]; rows [i0, i1) */
static void embedding_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *t = src_data(io, 0);
    const int32_t *ids = io->in[1];
    real *o = io->out;
    int64_t c = last_dim(node), rows = node->src[0]->shape[0];
    int64_t offset = node->iparam[2] ? node->iparam[3] : 0; /* a vocabulary shard's first id */
    (void)part;
    for (int64_t i = i0; i < i1; i++) {
        int64_t r = (int64_t)ids[i] - offset;
        if (r >= 0 && r < rows)
            memcpy(o + i * c, t + r * c, (size_t)c * sizeof(real));
        else /* another shard's id (shard mode only: ids were checked) */
            memset(o + i * c, 0, (size_t)c * sizeof(real));
    }
}

/* table src0 [V, C], ids src1 i32 [...] -> [..., C] */
static int k_embedding(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *tab = node->src[0];
    int64_t c = last_dim(node), count = rc_tensor_numel(node->src[1]);
    int64_t v = node->iparam[2] ? node->iparam[4] : tab->shape[0]; /* shard mode: the whole vocabulary */
    const int32_t *ids = io->in[1];
    int64_t bad = bad_id(ids, count, v, INT64_MIN);
    if (bad >= 0)
        return rc_error_set(err, RC_ERR_INDEX, "embedding: id %d at position %lld is outside [0, %lld)",
                            ids[bad], (long long)bad, (long long)v);
    par_range(embedding_range, (void *)io, count, count * c);
    return 0;
}

/* columns [j0, j1) of out[ids[i]] += grad[i] over every i, so each column has one writer */
static void embedding_grad_range(void *ctx, int64_t j0, int64_t j1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const int32_t *ids = io->in[0];
    const real *g = src_data(io, 1);
    real *out = io->out;
    int64_t c = node->shape[1], count = rc_tensor_numel(node->src[0]), rows = node->shape[0];
    int32_t skip = node->iparam[1]; /* the padding id, -1 for none */
    int64_t offset = node->iparam[2] ? node->iparam[3] : 0;
    (void)part;
    for (int64_t i = 0; i < count; i++) {
        int64_t r = (int64_t)ids[i] - offset;
        if (ids[i] == skip || r < 0 || r >= rows)
            continue;
        real *restrict o = out + r * c;
        const real *restrict gi = g + i * c;
        for (int64_t j = j0; j < j1; j++)
            o[j] += gi[j];
    }
}

/* ids src0 i32 [...], grad src1 [..., C] -> [V, C]: zeros, then out[ids[i]] += grad[i].
 * Threads own blocks of columns, so the sums are deterministic. */
static int k_embedding_grad(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    int64_t v = node->iparam[2] ? node->iparam[4] : node->shape[0], c = node->shape[1];
    int64_t count = rc_tensor_numel(node->src[0]);
    const int32_t *ids = io->in[0];
    int64_t bad = bad_id(ids, count, v, INT64_MIN);
    if (bad >= 0)
        return rc_error_set(err, RC_ERR_INDEX,
                            "embedding_grad: id %d at position %lld is outside [0, %lld)", ids[bad],
                            (long long)bad, (long long)v);
    memset(io->out, 0, rc_tensor_nbytes(node));
    par_range(embedding_grad_range, (void *)io, c, count * c);
    return 0;
}

/* rows [i0, i1) of the one-hot output */
static void one_hot_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const int32_t *ids = io->in[0];
    real *out = io->out;
    int64_t depth = last_dim(node);
    int64_t offset = node->iparam[2] ? node->iparam[3] : 0; /* a vocabulary shard's first id */
    int32_t ignore = node->iparam[1];
    (void)part;
    for (int64_t i = i0; i < i1; i++) {
        real *restrict o = out + i * depth;
        for (int64_t j = 0; j < depth; j++)
            o[j] = 0;
        int64_t r = (int64_t)ids[i] - offset;
        if (ids[i] != ignore && r >= 0 && r < depth)
            o[r] = 1;
    }
}

/* ids src0 i32 [...] -> [..., depth]; ids equal to iparam[1] give zero rows. */
static int k_one_hot(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    int64_t depth = last_dim(node), count = rc_tensor_numel(node->src[0]);
    const int32_t *ids = io->in[0];
    int64_t bad = bad_id(ids, count, node->iparam[2] ? node->iparam[4] : depth, node->iparam[1]);
    if (bad >= 0)
        return rc_error_set(err, RC_ERR_INDEX, "one_hot: id %d at position %lld is outside [0, %lld)",
                            ids[bad], (long long)bad, (long long)depth);
    par_range(one_hot_range, (void *)io, count, count * depth);
    return 0;
}

typedef struct {
    const rci_cpu_args *io;
    const rc_tensor *node;
    double loss[MAX_PARTS];
    int64_t count[MAX_PARTS];
} ce_args;

enum { EXP_BLOCK = 512 };

/* sum of exp(x[j] - mx) over [0, v), exponentials taken a vectorised block at a time */
static double sum_exp(const real *restrict x, int64_t v, real mx)
{
    real e[EXP_BLOCK];
    double s = 0;
    for (int64_t j0 = 0; j0 < v; j0 += EXP_BLOCK) {
        int64_t n = min64(EXP_BLOCK, v - j0);
        for (int64_t j = 0; j < n; j++)
            e[j] = rci_fexp(x[j0 + j] - mx);
        s += dsum(e, n);
    }
    return s;
}

static real row_max(const real *restrict x, int64_t v)
{
    real mx = -INFINITY;
    for (int64_t j = 0; j < v; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* rows [r0, r1): the sum of logsumexp(row) - row[target] over targets not ignored */
static void cross_entropy_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    ce_args *a = ctx;
    const rc_tensor *lt = a->node->src[0];
    const int32_t *tg = a->io->in[1];
    const real *x = a->io->in[0];
    int64_t v = last_dim(lt), count = 0;
    int32_t ignore = a->node->iparam[0];
    double loss = 0;
    for (int64_t r = r0; r < r1; r++) {
        if (tg[r] == ignore)
            continue;
        const real *restrict xr = x + r * v;
        real mx = row_max(xr, v);
        loss += (double)mx + log(sum_exp(xr, v, mx)) - (double)xr[tg[r]];
        count++;
    }
    a->loss[part] = loss;
    a->count[part] = count;
}

/* logits src0 [..., V], targets src1 i32 [...] -> scalar: the mean over targets != iparam[0]
 * of logsumexp(row) - row[target]; 0 when every target is ignored. */
static int k_cross_entropy(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *lt = node->src[0];
    int64_t v = last_dim(lt), rows = lead_rows(lt);
    const int32_t *tg = io->in[1];
    int64_t bad = bad_id(tg, rows, v, node->iparam[0]);
    if (bad >= 0)
        return rc_error_set(err, RC_ERR_INDEX,
                            "cross_entropy: target %d at position %lld is outside [0, %lld)", tg[bad],
                            (long long)bad, (long long)v);
    ce_args a;
    a.io = io;
    a.node = node;
    int parts = par_range(cross_entropy_range, &a, rows, 8 * rows * v);
    double loss = 0;
    int64_t count = 0;
    for (int p = 0; p < parts; p++) {
        loss += a.loss[p];
        count += a.count[p];
    }
    real *o = io->out;
    o[0] = count ? (real)(loss / (double)count) : 0;
    return 0;
}

typedef struct {
    const rci_cpu_args *io;
    real scale;                   /* upstream gradient / counted targets */
} ce_grad_args;

/* rows [r0, r1) of the gradient: (softmax(row) - onehot(target)) * scale, zero rows for
 * ignored targets */
static void cross_entropy_grad_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const ce_grad_args *g = ctx;
    const rci_cpu_args *io = g->io;
    const rc_tensor *node = io->node;
    const rc_tensor *lt = node->src[0];
    const int32_t *tg = io->in[1];
    const real *x = io->in[0];
    real *out = io->out;
    int64_t v = last_dim(lt);
    real scale = g->scale;
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        real *o = out + r * v; /* may be the logits' own memory (plan.c, input_may_be_taken) */
        const real *xr = x + r * v;
        if (tg[r] == node->iparam[0]) {
            memset(o, 0, (size_t)v * sizeof *o);
            continue;
        }
        real mx = row_max(xr, v);
        for (int64_t j = 0; j < v; j++)
            o[j] = rci_fexp(xr[j] - mx);
        real k = (real)(1 / dsum(o, v)) * scale;
        for (int64_t j = 0; j < v; j++)
            o[j] *= k;
        o[tg[r]] -= scale;
    }
}

/* logits src0 [..., V], targets src1 i32 [...], upstream gradient src2 (scalar) -> the
 * gradient of the mean cross-entropy: (softmax - onehot) * g / count over valid rows. */
static int k_cross_entropy_grad(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *lt = node->src[0];
    int64_t v = last_dim(lt), rows = lead_rows(lt);
    const int32_t *tg = io->in[1];
    int64_t bad = bad_id(tg, rows, v, node->iparam[0]);
    if (bad >= 0)
        return rc_error_set(err, RC_ERR_INDEX,
                            "cross_entropy_grad: target %d at position %lld is outside [0, %lld)",
                            tg[bad], (long long)bad, (long long)v);
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++)
        count += tg[r] != node->iparam[0];
    ce_grad_args g = {io, (real)(count ? (double)src_data(io, 2)[0] / (double)count : 0.0)};
    par_range(cross_entropy_grad_range, &g, rows, 8 * rows * v);
    return 0;
}

/* ---- rope ---------------------------------------------------------------------------------------- */

/* rows [r0, r1) of x [rows, H, D]: pairs p < rot/2 rotated by pos[r % P] * theta^(-2p/rot),
 * the rest copied. Angles and their cos / sin in double. */
static void rope_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *x = src_data(io, 0);
    const int32_t *pos = io->in[1];
    real *out = io->out;
    int nd = node->ndim;
    int64_t d = node->shape[nd - 1], h = node->shape[nd - 2], np = rc_tensor_numel(node->src[1]);
    int64_t rot = node->iparam[0], half = rot / 2;
    int interleaved = node->iparam[1] == RC_ROPE_INTERLEAVED, inverse = node->iparam[2] != 0;
    double theta = node->fparam[0];
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        double p = pos[r % np];
        real cs[ROPE_BLOCK], sn[ROPE_BLOCK];
        for (int64_t q0 = 0; q0 < half; q0 += ROPE_BLOCK) {
            int64_t nq = min64(ROPE_BLOCK, half - q0);
            for (int64_t q = 0; q < nq; q++) {
                double ang = p * pow(theta, -2.0 * (double)(q0 + q) / (double)rot);
                if (inverse)
                    ang = -ang;
                cs[q] = (real)cos(ang);
                sn[q] = (real)sin(ang);
            }
            for (int64_t hh = 0; hh < h; hh++) {
                const real *restrict xr = x + (r * h + hh) * d;
                real *restrict o = out + (r * h + hh) * d;
                for (int64_t q = 0; q < nq; q++) {
                    int64_t ia = interleaved ? 2 * (q0 + q) : q0 + q;
                    int64_t ib = interleaved ? ia + 1 : ia + half;
                    real xa = xr[ia], xb = xr[ib];
                    o[ia] = xa * cs[q] - xb * sn[q];
                    o[ib] = xb * cs[q] + xa * sn[q];
                }
            }
        }
        if (rot < d)
            for (int64_t hh = 0; hh < h; hh++)
                memcpy(out + (r * h + hh) * d + rot, x + (r * h + hh) * d + rot,
                       (size_t)(d - rot) * sizeof(real));
    }
}

/* x src0 [..., T, H, D], positions src1 i32 (P values, row r uses pos[r % P]);
 * iparam: rot, mode, inverse; fparam[0] theta. */
static int k_rope(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int nd = node->ndim;
    int64_t d = node->shape[nd - 1], h = node->shape[nd - 2], total = rc_tensor_numel(node);
    par_range(rope_range, (void *)io, total / (h * d), 4 * total);
    return 0;
}

/* ---- reductions -------------------------------------------------------------------------------- */

/* x [outer, n, inner] -> out [outer, inner]: the sum (or max) over the middle axis. Work is
 * split into tasks of (outer index, block of COL_BLOCK columns) when inner > 1, of outer
 * rows when inner == 1, and of pieces of the one row when a few long rows remain. */
typedef struct {
    real *out;
    const real *x;
    int64_t outer, n, inner, blocks;
    int is_max;
    double sum[MAX_PARTS];
    real max[MAX_PARTS];
} reduce_args;

/* o[j] = sum over k of x[k * stride + j], j < len; accumulated in double. */
static void col_sum(real *restrict o, const real *restrict x, int64_t n, int64_t stride, int64_t len)
{
    double acc[COL_BLOCK];
    for (int64_t j = 0; j < len; j++)
        acc[j] = 0;
    for (int64_t k = 0; k < n; k++) {
        const real *restrict xk = x + k * stride;
        for (int64_t j = 0; j < len; j++)
            acc[j] += xk[j];
    }
    for (int64_t j = 0; j < len; j++)
        o[j] = (real)acc[j];
}

static void col_max(real *restrict o, const real *restrict x, int64_t n, int64_t stride, int64_t len)
{
    for (int64_t j = 0; j < len; j++)
        o[j] = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
        const real *restrict xk = x + k * stride;
        for (int64_t j = 0; j < len; j++)
            o[j] = xk[j] > o[j] ? xk[j] : o[j];
    }
}

/* tasks [t0, t1): (outer, column block) pairs */
static void reduce_cols_range(void *ctx, int64_t t0, int64_t t1, int part)
{
    const reduce_args *a = ctx;
    (void)part;
    for (int64_t t = t0; t < t1; t++) {
        int64_t o = t / a->blocks, j0 = (t % a->blocks) * COL_BLOCK;
        int64_t len = min64(COL_BLOCK, a->inner - j0);
        real *dst = a->out + o * a->inner + j0;
        const real *src = a->x + o * a->n * a->inner + j0;
        if (a->is_max)
            col_max(dst, src, a->n, a->inner, len);
        else
            col_sum(dst, src, a->n, a->inner, len);
    }
}

/* outer rows [o0, o1), inner == 1 */
static void reduce_rows_range(void *ctx, int64_t o0, int64_t o1, int part)
{
    const reduce_args *a = ctx;
    (void)part;
    for (int64_t o = o0; o < o1; o++)
        a->out[o] = a->is_max ? row_max(a->x + o * a->n, a->n) : (real)dsum(a->x + o * a->n, a->n);
}

/* elements [i0, i1) of the single row a->x: one partial result per part */
static void reduce_piece_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    reduce_args *a = ctx;
    if (a->is_max)
        a->max[part] = row_max(a->x + i0, i1 - i0);
    else
        a->sum[part] = dsum(a->x + i0, i1 - i0);
}

static void reduce3(real *out, const real *x, int64_t outer, int64_t n, int64_t inner, int is_max)
{
    reduce_args a;
    a.out = out;
    a.x = x;
    a.outer = outer;
    a.n = n;
    a.inner = inner;
    a.is_max = is_max;
    a.blocks = (inner + COL_BLOCK - 1) / COL_BLOCK;
    int64_t total = outer * n * inner;
    if (inner > 1) {
        par_range(reduce_cols_range, &a, outer * a.blocks, total);
        return;
    }
    if (outer >= omp_get_max_threads() || total <= PAR_MIN) {
        par_range(reduce_rows_range, &a, outer, total);
        return;
    }
    /* a few long rows: each split over the threads, partials combined in order */
    for (int64_t o = 0; o < outer; o++) {
        a.x = x + o * n;
        int parts = par_range(reduce_piece_range, &a, n, n);
        double s = 0;
        real m = -INFINITY;
        for (int p = 0; p < parts; p++) {
            s += a.sum[p];
            m = a.max[p] > m ? a.max[p] : m;
        }
        out[o] = is_max ? m : (real)s;
    }
}

/* sum / max over axis iparam[0] of src0 (keepdim is already in the node's shape) */
static int k_reduce(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node, *s = node->src[0];
    int axis = node->iparam[0];
    int64_t outer = 1, inner = 1, n = s->shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= s->shape[i];
    for (int i = axis + 1; i < s->ndim; i++)
        inner *= s->shape[i];
    reduce3(io->out, io->in[0], outer, n, inner, node->op == RC_OP_MAX);
    return 0;
}

/* src0 summed down to the node's shape (right-aligned, size-1 or missing axes summed). */
static int k_sum_to(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node, *s = node->src[0];
    const real *x = io->in[0];
    real *out = io->out;
    int sd = s->ndim;
    int64_t os[RC_MAX_DIMS];   /* output strides along the input's axes, 0 where summed */
    rci_bcast_strides(node, sd, s->shape, os);
    int64_t total = rc_tensor_numel(s);
    if (total == rc_tensor_numel(node)) {
        memcpy(out, x, rc_tensor_nbytes(node));
        return 0;
    }
    if (total == 0) {
        memset(out, 0, rc_tensor_nbytes(node));
        return 0;
    }
    /* merge the input's axes into alternating summed / kept runs */
    int nd = 0;
    int64_t shape[RC_MAX_DIMS], st[RC_MAX_DIMS];
    for (int i = 0; i < sd; i++) {
        if (s->shape[i] == 1)
            continue;
        if (nd > 0 && st[nd - 1] == os[i] * s->shape[i]) {
            shape[nd - 1] *= s->shape[i];
            st[nd - 1] = os[i];
            continue;
        }
        shape[nd] = s->shape[i];
        st[nd] = os[i];
        nd++;
    }
    if (nd == 1) {
        reduce3(out, x, 1, shape[0], 1, 0);                 /* everything */
    } else if (nd == 2 && st[0] == 0) {
        reduce3(out, x, 1, shape[0], shape[1], 0);          /* leading rows (bias gradient) */
    } else if (nd == 2) {
        reduce3(out, x, shape[0], shape[1], 1, 0);          /* trailing columns */
    } else if (nd == 3 && st[1] == 0) {
        reduce3(out, x, shape[0], shape[1], shape[2], 0);   /* a middle run */
    } else {
        /* general: walk the input once, adding into the output */
        memset(out, 0, rc_tensor_nbytes(node));
        int64_t idx[RC_MAX_DIMS] = {0}, off = 0;
        for (int64_t i = 0; i < total; i++) {
            out[off] += x[i];
            for (int k = nd - 1; k >= 0; k--) {
                off += st[k];
                if (++idx[k] < shape[k])
                    break;
                off -= st[k] * shape[k];
                idx[k] = 0;
            }
        }
    }
    return 0;
}

/* ---- dropout --------------------------------------------------------------------------------------- */

/* elements [i0, i1): kept iff their draw reaches p's threshold (rci_drop_kept), kept values
 * scaled by 1 / (1 - p) */
static void dropout_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const real *restrict x = src_data(io, 0);
    real *restrict o = io->out;
    double p = node->fparam[0];
    uint64_t key = rci_node_key(node, 0);
    key ^= rci_hash64(io->run_key); /* the plan's per-run key: a new mask every step */
    uint64_t thresh = rci_drop_thresh(p);
    real scale = p < 1 ? (real)(1 / (1 - p)) : 0;
    (void)part;
    for (int64_t i = i0; i < i1; i++)
        o[i] = rci_drop_kept(key, (uint64_t)i, thresh) ? x[i] * scale : 0;
}

static int k_dropout(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t n = rc_tensor_numel(node);
    if (node->fparam[0] == 0) {
        memcpy(io->out, io->in[0], rc_tensor_nbytes(node));
        return 0;
    }
    par_range(dropout_range, (void *)io, n, 4 * n);
    return 0;
}

/* ---- normal draws ------------------------------------------------------------------------------------ */

/* elements [i0, i1): Box-Muller of two 24-bit uniforms from one hash of (key, i) (rc_normal) */
static void normal_range(void *ctx, int64_t i0, int64_t i1, int part)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    real *restrict o = io->out;
    uint64_t key = rci_node_key(node, 0);
    key ^= rci_hash64(io->run_key); /* the plan's run or step key */
    (void)part;
    for (int64_t i = i0; i < i1; i++) {
        uint64_t h = rci_hash64(key ^ rci_hash64((uint64_t)i));
        real u1 = (real)((h >> 40) + 1) * (real)0x1p-24, u2 = (real)(h & 0xffffff) * (real)0x1p-24;
        o[i] = sqrt((real)-2 * log(u1)) * cos((real)6.283185307179586 * u2);
    }
}

static int k_normal(const rci_cpu_args *io)
{
    int64_t n = rc_tensor_numel(io->node);
    par_range(normal_range, (void *)io, n, 16 * n);
    return 0;
}

/* ---- dispatch --------------------------------------------------------------------------------------- */

#include "kernels_conv.h"
#include "kernels_attention.h"

int RC_KERNEL_FN(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    if (node->dtype != real_dtype())
        return rc_error_set(err, RC_ERR_DTYPE, "%s: output dtype %s given to the %s kernels",
                            op_name(node), rc_dtype_name(node->dtype), rc_dtype_name(real_dtype()));
    if (rc_tensor_numel(node) == 0)
        return 0;
    switch (node->op) {
    case RC_OP_FULL:
        return k_full(io);
    case RC_OP_NORMAL:
        return k_normal(io);
    case RC_OP_CONV2D:
        return k_conv2d(io, err);
    case RC_OP_CONV2D_GRAD_INPUT:
        return k_conv2d_grad_input(io, err);
    case RC_OP_CONV2D_GRAD_WEIGHT:
        return k_conv2d_grad_weight(io, err);
    case RC_OP_POOL2D:
        return k_pool2d(io);
    case RC_OP_POOL2D_GRAD:
        return k_pool2d_grad(io);
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV:
        return k_binary(io);
    case RC_OP_AFFINE:
    case RC_OP_EXP:
    case RC_OP_LOG:
    case RC_OP_SQRT:
    case RC_OP_RSQRT:
    case RC_OP_TANH:
        return k_unary(io);
    case RC_OP_ACT:
        return k_act(io);
    case RC_OP_MATMUL:
        return k_matmul(io, err);
    case RC_OP_SOFTMAX:
        return k_softmax(io);
    case RC_OP_ATTENTION:
    case RC_OP_ATTENTION_GRAD:
        return k_attention(io);
    case RC_OP_ATTENTION_STATS:
        return k_attention_stats(io);
    case RC_OP_LAYER_NORM:
        return k_layer_norm(io);
    case RC_OP_RMS_NORM:
        return k_rms_norm(io);
    case RC_OP_NORM_GRAD:
        return k_norm_grad(io, err);
    case RC_OP_EMBEDDING:
        return k_embedding(io, err);
    case RC_OP_EMBEDDING_GRAD:
        return k_embedding_grad(io, err);
    case RC_OP_ROPE:
        return k_rope(io);
    case RC_OP_SUM:
    case RC_OP_MAX:
        return k_reduce(io);
    case RC_OP_SUM_TO:
        return k_sum_to(io);
    case RC_OP_CROSS_ENTROPY:
        return k_cross_entropy(io, err);
    case RC_OP_CROSS_ENTROPY_GRAD:
        return k_cross_entropy_grad(io, err);
    case RC_OP_ONE_HOT:
        return k_one_hot(io, err);
    case RC_OP_DROPOUT:
        return k_dropout(io);
    case RC_OP_WHERE:
        return k_where(io);
    case RC_OP_EQUAL:
        return k_equal(io);
    case RC_OP_LEAF:
    case RC_OP_RESHAPE:
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: leaves and views have no kernel",
                            op_name(node));
    default:
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: no %s CPU kernel", op_name(node),
                            rc_dtype_name(real_dtype()));
    }
}
