/* kernels_half.c - the CPU kernels of nodes with 16-bit (bf16, f16) values.
 *
 * 16-bit values are storage; arithmetic is f32. A node that reads or writes 16-bit values
 * has its 16-bit inputs widened into f32 scratch, runs the f32 kernel (kernels_real.c) on
 * a copy of the node whose 16-bit dtypes read f32, and has its f32 result rounded to the
 * node's dtype (nearest, ties to even): the reductions, norms, softmax and losses inside
 * accumulate exactly as in f32. Two ops skip the round trip: an embedding lookup copies
 * the table's 16-bit rows, and a matrix product of a few rows by a shared 2-D 16-bit
 * matrix (a decoding step) reads the matrix's 16-bit words directly, accumulating in f32,
 * so that it reads half the bytes of f32 weights. Other matrix products use OpenBLAS's
 * bf16 GEMM (cblas_sbgemm) when the library exports it (REDCO_HAVE_SBGEMM, found by
 * CMake), else the widened copies and sgemm.
 *
 * The scratch is one block per thread, grown to the largest node seen and kept (counted
 * in the backend's used bytes), so runs after the first allocate nothing. */
#include "cpu.h"
#include "half.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum {
    PAR_MIN = 32768,  /* elements below which a loop runs on one thread */
    BLOCK = 256,      /* columns (or inner elements) a decoding product handles at a time */
    FEW_ROWS = 4      /* matrix products of at most this many rows read 16-bit weights directly */
};

/* ---- conversions over arrays ------------------------------------------------------------ */

static void widen_run(float *restrict dst, const uint16_t *restrict src, rc_dtype t, int64_t n)
{
    if (t == RC_BF16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = rci_bf16_to_f32(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = rci_f16_to_f32(src[i]);
}

static void narrow_run(uint16_t *restrict dst, const float *restrict src, rc_dtype t, int64_t n)
{
    if (t == RC_BF16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = rci_f32_to_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = rci_f32_to_f16(src[i]);
}

/* the number of pieces a loop over n elements is cut into for threads (1: this thread) */
static int64_t pieces_for(int64_t n)
{
    int64_t p = omp_get_max_threads();
    return n <= PAR_MIN || p < 2 || omp_in_parallel() ? 1 : p;
}

void rci_cpu_widen(float *dst, const uint16_t *src, rc_dtype t, int64_t n)
{
    int64_t parts = pieces_for(n);
    #pragma omp parallel for schedule(static) num_threads((int)parts) if (parts > 1)
    for (int64_t p = 0; p < parts; p++)
        widen_run(dst + n * p / parts, src + n * p / parts, t, n * (p + 1) / parts - n * p / parts);
}

void rci_cpu_narrow(uint16_t *dst, const float *src, rc_dtype t, int64_t n)
{
    int64_t parts = pieces_for(n);
    #pragma omp parallel for schedule(static) num_threads((int)parts) if (parts > 1)
    for (int64_t p = 0; p < parts; p++)
        narrow_run(dst + n * p / parts, src + n * p / parts, t, n * (p + 1) / parts - n * p / parts);
}

/* ---- scratch ------------------------------------------------------------------------------ */

static _Thread_local float *scratch;
static _Thread_local size_t scratch_cap;   /* floats */

/* n floats of this thread's scratch, grown when needed (its bytes counted by the backend) */
static float *scratch_get(size_t n, rc_error *err)
{
    if (n <= scratch_cap)
        return scratch;
    size_t cap = n + n / 4;
    float *p = aligned_alloc(64, (cap * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        rc_error_set(err, RC_ERR_MEMORY, "cpu: cannot allocate %zu bytes of 16-bit scratch",
                     cap * sizeof(float));
        return NULL;
    }
    rc_backend *be = rci_backend_cpu(); /* nodes run from one thread at a time, as buffers are made */
    be->used_bytes += (cap - scratch_cap) * sizeof(float);
    be->peak_bytes = be->used_bytes > be->peak_bytes ? be->used_bytes : be->peak_bytes;
    free(scratch);
    scratch = p;
    scratch_cap = cap;
    return scratch;
}

/* ---- the general case: through the f32 kernel ------------------------------------------------ */

static int through_f32(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    rc_tensor shadow = *node, srcs[RC_MAX_SRC];
    int out_half = rci_dtype_is_half(node->dtype);
    size_t need = out_half ? (size_t)rc_tensor_numel(node) : 0;
    for (int k = 0; k < node->nsrc; k++)
        if (node->src[k] && rci_dtype_is_half(node->src[k]->dtype))
            need += (size_t)rc_tensor_numel(node->src[k]);
    float *at = scratch_get(need, err);
    if (!at)
        return -1;
    rci_cpu_args a = {&shadow, io->out, {0}, io->run_key};
    shadow.view_src = NULL;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        a.in[k] = io->in[k];
        if (!s || !rci_dtype_is_half(s->dtype))
            continue;
        srcs[k] = *s;
        srcs[k].dtype = RC_F32;
        shadow.src[k] = &srcs[k];
        rci_cpu_widen(at, io->in[k], s->dtype, rc_tensor_numel(s));
        a.in[k] = at;
        at += rc_tensor_numel(s);
    }
    if (out_half) {
        shadow.dtype = RC_F32;
        a.out = at;
    }
    if (rci_cpu_kernel_f32(&a, err))
        return -1;
    if (out_half)
        rci_cpu_narrow(io->out, a.out, node->dtype, rc_tensor_numel(node));
    return 0;
}

/* ---- embedding: the table's rows as they are ----------------------------------------------- */

static int embedding_half(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *tab = node->src[0], *ids_t = node->src[1];
    if (!tab || !ids_t || tab->dtype != node->dtype || ids_t->dtype != RC_I32)
        return rc_error_set(err, RC_ERR_DTYPE, "embedding: a %s table and i32 ids give %s",
                            rc_dtype_name(node->dtype), rc_dtype_name(node->dtype));
    int64_t c = node->ndim ? node->shape[node->ndim - 1] : 1, count = rc_tensor_numel(ids_t);
    if (tab->ndim != 2 || tab->shape[1] != c || count * c != rc_tensor_numel(node))
        return rc_error_set(err, RC_ERR_SHAPE, "embedding: table, ids and output do not fit");
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
    float acc[FEW_ROWS][BLOCK], w[BLOCK];
    for (int64_t jb = j0; jb < j1; jb += BLOCK) {
        int64_t len = j1 - jb < BLOCK ? j1 - jb : BLOCK;
        for (int64_t r = 0; r < f->rows; r++)
            for (int64_t j = 0; j < len; j++)
                acc[r][j] = 0;
        for (int64_t p = 0; p < f->k; p++) {
            widen_run(w, f->b + p * f->n + jb, f->t, len);
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
        float acc[FEW_ROWS][16] = {{0}};
        const uint16_t *bj = f->b + j * f->k;
        for (int64_t p0 = 0; p0 < f->k; p0 += BLOCK) {
            int64_t len = f->k - p0 < BLOCK ? f->k - p0 : BLOCK, p = 0;
            widen_run(w, bj + p0, f->t, len);
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

static void few_rows_run(const few_rows *f)
{
    int64_t parts = pieces_for(f->n * f->k), blocks = (f->n + BLOCK - 1) / BLOCK;
    parts = parts < blocks ? parts : blocks;
    #pragma omp parallel for schedule(static) num_threads((int)parts) if (parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        int64_t j0 = blocks * p / parts * BLOCK, j1 = blocks * (p + 1) / parts * BLOCK;
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
        widen_run(a, src, t, rows * k);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < k; p++)
            a[r * k + p] = t == RC_BF16 ? rci_bf16_to_f32(src[p * rows + r]) : rci_f16_to_f32(src[p * rows + r]);
}

#ifdef REDCO_HAVE_SBGEMM
/* every batch through OpenBLAS's bf16 GEMM into f32 c, then rounded */
static int matmul_sbgemm(const rci_cpu_args *io, int64_t batch, int64_t m, int64_t n, int64_t k,
                         int64_t sa, int64_t sb, rc_error *err)
{
    const rc_tensor *node = io->node;
    int ta = node->iparam[0] != 0, tb = node->iparam[1] != 0;
    float *c = scratch_get((size_t)(batch * m * n), err);
    if (!c)
        return -1;
    const uint16_t *a = io->in[0], *b = io->in[1];
    for (int64_t z = 0; z < batch; z++)
        cblas_sbgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                     (blasint)m, (blasint)n, (blasint)k, 1.0f, a + z * sa, (blasint)(ta ? m : k),
                     b + z * sb, (blasint)(tb ? k : n), 0.0f, c + z * m * n, (blasint)n);
    rci_cpu_narrow(io->out, c, node->dtype, batch * m * n);
    return 0;
}
#endif

static int matmul_half(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node, *A = node->src[0], *B = node->src[1];
    if (!A || !B || A->dtype != node->dtype || B->dtype != node->dtype || A->ndim < 2 ||
        B->ndim < 2 || node->ndim < 2)
        return through_f32(io, err); /* the f32 kernel names what is wrong */
    int ta = node->iparam[0] != 0, tb = node->iparam[1] != 0;
    int64_t m = A->shape[A->ndim - (ta ? 1 : 2)], k = A->shape[A->ndim - (ta ? 2 : 1)];
    int64_t kb = B->shape[B->ndim - (tb ? 1 : 2)], n = B->shape[B->ndim - (tb ? 2 : 1)];
    if (k != kb || k == 0 || node->shape[node->ndim - 2] != m || node->shape[node->ndim - 1] != n)
        return through_f32(io, err);
    int64_t batch = rc_tensor_numel(node) / (m * n);
    int64_t ba = rc_tensor_numel(A) / (m * k), bb = rc_tensor_numel(B) / (k * n);
    if ((ba != batch && ba != 1) || (bb != batch && bb != 1))
        return through_f32(io, err);
    int64_t rows = batch * m;
    if (bb == 1 && (batch == 1 || !ta) && rows <= FEW_ROWS) {
        /* a decoding step: the 16-bit matrix read as it is */
        float *s = scratch_get((size_t)(rows * k + rows * n), err);
        if (!s)
            return -1;
        rows_widen(s, io->in[0], A->dtype, ta, rows, k);
        few_rows f = {s, io->in[1], s + rows * k, B->dtype, tb, rows, n, k};
        few_rows_run(&f);
        narrow_run(io->out, f.c, node->dtype, rows * n);
        return 0;
    }
#ifdef REDCO_HAVE_SBGEMM
    if (node->dtype == RC_BF16)
        return matmul_sbgemm(io, batch, m, n, k, ba == 1 ? 0 : m * k, bb == 1 ? 0 : k * n, err);
#endif
    return through_f32(io, err);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

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
