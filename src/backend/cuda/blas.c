/* blas.c - the CUDA backend's matrix products through cuBLAS, on the device's stream.
 *
 * redco's matrices are row-major; cuBLAS's are column-major. A row-major C [m, n] is the
 * column-major C^T [n, m] in the same memory, and C^T = op(B)^T op(A)^T, so each product
 * is one cuBLAS GEMM with the operands swapped (B first), the transposes and leading
 * dimensions as they are. f32 operands multiply in f32 (CUBLAS_COMPUTE_32F: no TF32 unless
 * the backend's tf32 is on, rc_device_allow_tf32); bf16 and f16 operands and results stay
 * 16-bit in memory and multiply on tensor cores with f32 accumulation, without scratch.
 * The fused attention's products (matmul_wide) take 16-bit operands into an f32 result. */
#include "cuda.h"

#include <limits.h>

/* one GEMM's operands in cuBLAS's terms (already swapped) */
typedef struct {
    cublasOperation_t op_first, op_second;
    int64_t rows, cols, depth;        /* cuBLAS's m, n, k */
    CUdeviceptr first, second, out;
    int64_t ld_first, ld_second, ld_out;
    int64_t stride_first, stride_second, stride_out;
    int64_t count;
} gemm;

static int too_large(const rci_cuda *c, const gemm *q, rc_error *err)
{
    int64_t v[] = {q->rows, q->cols, q->depth, q->ld_first, q->ld_second, q->ld_out, q->count};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i] > INT_MAX)
            return rc_error_set(err, RC_ERR_UNSUPPORTED,
                                "%s: matmul: a size of %lld is more than cuBLAS's int takes", c->name,
                                (long long)v[i]);
    return 0;
}

static cudaDataType cuda_type(rc_dtype t)
{
    return t == RC_BF16 ? CUDA_R_16BF : t == RC_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* the GEMM q with operands stored as `in` and the result as `out`, summed in f32 */
static int run_gemm(rci_cuda *c, const gemm *q, const rci_matmul_dims *d, rc_dtype in, rc_dtype out, rc_error *err)
{
    if (too_large(c, q, err))
        return -1;
    cudaDataType ti = cuda_type(in), to = cuda_type(out);
    cublasComputeType_t compute = in == RC_F32 && c->gpu.be.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                  : CUBLAS_COMPUTE_32F;
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = c->cb->gemm_strided_batched_ex(
        c->blas, q->op_first, q->op_second, (int)q->rows, (int)q->cols, (int)q->depth, &one,
        (const void *)(uintptr_t)q->first, ti, (int)q->ld_first, q->stride_first,
        (const void *)(uintptr_t)q->second, ti, (int)q->ld_second, q->stride_second, &zero,
        (void *)(uintptr_t)q->out, to, (int)q->ld_out, q->stride_out, (int)q->count, compute, CUBLAS_GEMM_DEFAULT);
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return rc_error_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                        "%s: matmul of [%lld, %lld] by [%lld, %lld] in %lld batches (%s into %s): %s",
                        c->name, (long long)d->m, (long long)d->k, (long long)d->k, (long long)d->n,
                        (long long)d->batch, rc_dtype_name(in), rc_dtype_name(out), rci_cublas_status(s));
}

/* A [.., m, k] (stored [.., k, m] when ta) times B [.., k, n] (stored [.., n, k] when tb)
 * into C [.., m, n], operands stored as `in`, C as `out` (offsets in elements of each):
 * one GEMM over the stacked rows when the batches of A are rows of one matrix against a
 * shared B, else a strided batch (stride 0 for a shared operand; d's layout where it sets
 * one, rci_matmul_layout). */
static int cu_product(rci_gpu *g, const rci_matmul_dims *d, rc_dtype in_t, rc_dtype out_t, const rci_gpu_place *out,
                      const rci_gpu_place *in, rc_error *err)
{
    rci_cuda *c = rci_cuda_of(g);
    if (rci_cu_use(c, err))
        return -1;
    size_t es = rc_dtype_size(in_t), eo = rc_dtype_size(out_t);
    int64_t m = d->m, n = d->n, k = d->k, ld[3], st[3];
    int laid = rci_matmul_layout(d, ld, st);
    int stacked = !laid && (d->batch == 1 || (d->bb == 1 && d->ba == d->batch && !d->ta));
    gemm q;
    q.op_first = d->tb ? CUBLAS_OP_T : CUBLAS_OP_N;   /* B^T's op */
    q.op_second = d->ta ? CUBLAS_OP_T : CUBLAS_OP_N;  /* A^T's op */
    q.rows = n;
    q.cols = stacked ? d->batch * m : m;
    q.depth = k;
    q.first = rci_cu_ptr(in[1].mem) + (CUdeviceptr)in[1].off * es;
    q.second = rci_cu_ptr(in[0].mem) + (CUdeviceptr)in[0].off * es;
    q.out = rci_cu_ptr(out->mem) + (CUdeviceptr)out->off * eo;
    q.ld_first = ld[1];
    q.ld_second = ld[0];
    q.ld_out = ld[2];
    q.stride_first = stacked ? 0 : st[1];
    q.stride_second = stacked ? 0 : st[0];
    q.stride_out = stacked ? 0 : st[2];
    q.count = stacked ? 1 : d->batch;
    return run_gemm(c, &q, d, in_t, out_t, err);
}

int rci_cu_matmul(rci_gpu *g, const rc_tensor *node, const rci_matmul_dims *d, rc_dtype store,
                  const rci_gpu_place *out, const rci_gpu_place *in, rc_error *err)
{
    (void)node;
    return cu_product(g, d, store, store, out, in, err);
}

int rci_cu_matmul_wide(rci_gpu *g, const rci_matmul_dims *d, rc_dtype store, const rci_gpu_place *out,
                       const rci_gpu_place *in, rc_error *err)
{
    return cu_product(g, d, store, RC_F32, out, in, err);
}

size_t rci_cu_matmul_scratch(const rci_gpu *g, const rci_matmul_dims *d, rc_dtype store)
{
    (void)g, (void)d, (void)store;
    return 0;
}
