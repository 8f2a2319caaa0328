/* cpu.h - what the CPU backend's files share: the kernels' calling convention. */
#ifndef REDCO_CPU_H
#define REDCO_CPU_H

#include "internal.h"
#include "backend.h"

/* One node's run with host addresses.
 * Contract: the backend calls a kernel once per non-view, non-leaf node, after every src
 * has its values; the node fits its op (rci_node_check passed when its plan was made), so
 * a kernel checks no structure. out points at rc_tensor_nbytes(node) bytes of uninitialised
 * memory (the kernel writes every element), never overlapping any input; kept at an
 * ATTENTION's rci_kept_bytes (what it keeps for its backward, which it writes and its
 * ATTENTION_STATS reads). All tensors are contiguous
 * row-major. Element-wise and where/equal inputs broadcast numpy-style against the
 * node's shape (shapes right-aligned, size-1 axes repeat). A kernel returns 0, or -1 with
 * err set naming the op and the offending value (e.g. an id out of range). Kernels use
 * OpenMP for threads and never allocate on the heap in their loops. */
typedef struct {
    const rc_tensor *node;
    void *out;
    const void *in[RC_MAX_SRC];   /* NULL where src[k] is NULL */
    uint64_t run_key;             /* mixed into dropout masks and normals (rci_node_run's) */
    float *work;                  /* the node's workspace, handed by the backend (cpu.c), as */
    size_t work_floats;           /* many floats as rci_cpu_half_work asks (0 for the others) */
    void *kept;                   /* rci_node_run's kept block (NULL for most nodes) */
} rci_cpu_args;

int rci_cpu_kernel_f32(const rci_cpu_args *a, rc_error *err);  /* node dtype f32 (src may be i32) */
int rci_cpu_kernel_f64(const rci_cpu_args *a, rc_error *err);  /* node dtype f64 */
/* A node reading or writing bf16 / f16 values (kernels_half.c): computed in f32. */
int rci_cpu_kernel_half(const rci_cpu_args *a, rc_error *err);
/* The f32 floats of workspace node (one rci_cpu_kernel_half runs) takes: its kernel's own
 * sizing, which the backend both hands it and reports as scratch (one rule). */
size_t rci_cpu_half_work(const rc_tensor *node);
/* The f32 floats a 16-bit node's piece aims at (large nodes run in pieces; <= 0: the
 * default, 4M); tests make it small to run the pieces on small tensors. */
void rci_cpu_half_chunk(int64_t floats);
/* 16-bit matrix products on the CPU's bf16 (or f16) units through oneDNN (gemm_dnnl.c).
 * takes: 1 when a product of dtype t and dims d (k > 0) runs there: the CPU has the
 * instructions and oneDNN a kernel for it that is not its reference code (the answer is
 * cached with the kernel). matmul: runs node (of dims d, takes 1) from io's host
 * addresses, into its 16-bit output directly (no workspace); 0, or -1 with err naming the
 * shapes. kernel: oneDNN's name for the kernel that runs it (e.g. "brg:avx512_core_bf16"),
 * NULL when takes is 0. use: turns the path on (1) or off (0; < 0 only asks) and returns
 * whether it was on: tests compare it with the widening path. */
int rci_cpu_dnnl_takes(rc_dtype t, const rci_matmul_dims *d);
int rci_cpu_dnnl_matmul(const rci_cpu_args *io, const rci_matmul_dims *d, rc_error *err);
const char *rci_cpu_dnnl_kernel(rc_dtype t, const rci_matmul_dims *d);
int rci_cpu_dnnl_use(int on);
/* C[m, n] = alpha op(A) op(B) + beta C, row-major (cblas_sgemm's and cblas_dgemm's
 * arguments; ta, tb: A, B stored transposed), the kernels' one way to BLAS (gemm_f32.c), on
 * OpenBLAS. Single-threaded when called inside a parallel region. describe: which kernels
 * OpenBLAS runs the f32 products with, in words, and what to set where they leave out the
 * CPU's AVX2. */
void rci_cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void rci_cpu_dgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                   const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
void rci_cpu_sgemm_describe(char *buf, size_t size);
/* Dtype-agnostic data movement: PERMUTE, SLICE (copying form), PAD, CONCAT, EXPAND, CAST.
 * Returns 1 when it handled the op, 0 when the op is not one of its (it cannot fail). */
int rci_cpu_kernel_move(const rci_cpu_args *a);
/* 1 for the ops kernel_move handles */
int rci_cpu_is_move(rc_op op);

/* The optimizer updates (update.c). */
int rci_cpu_update(rc_backend *be, const rci_update *u, rc_error *err);
int rci_cpu_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                       size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err);
int rci_cpu_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err);
int rci_cpu_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts, double *out,
                        rc_error *err);

#endif
