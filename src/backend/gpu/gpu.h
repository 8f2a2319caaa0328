/* gpu.h - what the two device backends share: OpenCL's (src/backend/opencl/) and CUDA's
 * (src/backend/cuda/). Both run the kernels of one source, kernels.cl, written once in the
 * small dialect of dialect.h so that it compiles as OpenCL C and as CUDA C++; and both run
 * a graph's nodes and the optimizer's work with the same host code (run.c, update.c here),
 * which launches those kernels. What differs between the two is only what a device backend
 * supplies in rci_gpu_ops: raw device memory, fills and reads, launching kernel k of the
 * program built for a storage type, and the matrix product (CLBlast or cuBLAS).
 *
 * A device backend's state starts with an rci_gpu (whose rc_backend comes first), so one
 * pointer is the rc_backend, the rci_gpu and the backend's own struct. Its buffers' impl is
 * the device memory as an rci_gpu_mem (a cl_mem; a CUdeviceptr's value). Memory handed to
 * a kernel is (rci_gpu_mem, element offset) as two arguments.
 *
 * The files stack: gpu/ at the bottom (it calls the device only through g->ops), opencl/
 * and cuda/ above it. */
#ifndef REDCO_GPU_H
#define REDCO_GPU_H

#include "internal.h"
#include "backend.h"

/* The kernels of kernels.cl, by index (names in rci_gpu_kernel_names). */
typedef enum {
    RCI_K_FILL = 0,
    RCI_K_UNARY,
    RCI_K_ACT,
    RCI_K_BINARY,
    RCI_K_WHERE,
    RCI_K_EQUAL,
    RCI_K_COPY,
    RCI_K_CAST_F32_I32,
    RCI_K_CAST_I32_F32,
    RCI_K_REDUCE,
    RCI_K_DROPOUT,
    RCI_K_ADAMW,
    RCI_K_SGD,
    RCI_K_ACCUMULATE,
    RCI_K_SUM_SQUARES,
    RCI_K_SOFTMAX,
    RCI_K_LAYER_NORM,
    RCI_K_RMS_NORM,
    RCI_K_CHECK_IDS,
    RCI_K_EMBEDDING,
    RCI_K_EMBEDDING_GRAD,
    RCI_K_ONE_HOT,
    RCI_K_CE_ROWS,
    RCI_K_CE_MEAN,
    RCI_K_CE_SCALE,
    RCI_K_CE_GRAD,
    RCI_K_ROPE,              /* built only with fp64 (its angles are in double, as the CPU's) */
    RCI_K_REDUCE_PART,
    RCI_K_REDUCE_FINISH,
    RCI_K_CAST,              /* casts from or to 16 bits */
    RCI_K_MATMUL_ROWS,       /* a few rows times 16-bit weights read directly */
    RCI_K_CONV2D,
    RCI_K_CONV2D_GRAD_INPUT,
    RCI_K_CONV2D_GRAD_WEIGHT,
    RCI_K_POOL2D,
    RCI_K_POOL2D_GRAD,
    RCI_K_NORMAL,
    RCI_K_ATTENTION_ROWS,    /* attention between its matrix products: softmax rows, */
    RCI_K_ATTENTION_ROWS_GRAD, /* dS and z p, */
    RCI_K_ATTENTION_DBIAS,   /* the bias's gradient, */
    RCI_K_ATTENTION_FOLD,    /* the parts of the split products' dK, dV summed */
    RCI_K_ATTENTION_STATS,   /* the stats from what the forward kept */
    RCI_K_REDUCE_ROWS,       /* a reduction of contiguous rows, a work-group a row */
    RCI_K_NORM_GRAD,         /* the norms' gradients, a work-group a row */
    RCI_K_ATTENTION_TILE,    /* bf16 attention in tiles on tensor cores: forward, */
    RCI_K_ATTENTION_TILE_DQ, /* dQ, */
    RCI_K_ATTENTION_TILE_DKV, /* dK and dV */
    RCI_K_BINARY_RUNS,       /* a binary op of contiguous inputs or rows, in runs of 16 bytes */
    RCI_K_REDUCE_COLS,       /* a reduction's first pass over contiguous columns, in runs */
    RCI_K_NORM_WGRAD,        /* a norm's weight gradient: column sums of a block of rows */
    RCI_K_COUNT
} rci_gpu_kernel;

/* "k_fill", ... in the order above (node.c) */
extern const char *const rci_gpu_kernel_names[RCI_K_COUNT];

/* The attention tile kernels (RCI_K_ATTENTION_TILE..._DKV) keep their tiles in local memory
 * as static arrays: up to 47880 bytes under CUDA sm_80 and later (ptxas; 48 KB is CUDA's
 * static limit), and under OpenCL or CUDA before sm_80, where their products are emulated
 * through local memory, up to 54.5 KB (dK and dV's). A program holding them does not build
 * where that is more than the device allows, so the hosts build kernels.cl with RC_TILES only
 * where they fit (CUDA sm_80 and later; OpenCL devices with at least this much local
 * memory), and a program without them has every other kernel. */
enum { RCI_GPU_TILE_LOCAL_BYTES = 56 * 1024 };

/* 1 when k is one of the attention tile kernels */
int rci_gpu_is_tile_kernel(rci_gpu_kernel k);
/* The error of a launch of kernel k where the device's programs lack it (the tile kernels
 * where they do not fit, k_rope without fp64): -1 */
int rci_gpu_kernel_absent(const rc_backend *be, rci_gpu_kernel k, rc_error *err);

/* The kernel source (dialect.h, the shared per-element header and kernels.cl, in that
 * order), written into the build directory by CMake. */
extern const char rci_gpu_source[];

/* elements a work-item of the element-wise kernels (fill, unary, act, binary, cast) takes
 * a batch: kernels.cl's EW_SPAN */
enum { RCI_GPU_EW_SPAN = 4 };

/* elements a work-item of the run kernels (k_unary, k_act, k_binary_runs, k_reduce_cols)
 * takes at once: kernels.cl's EW_RUN */
enum { RCI_GPU_EW_RUN = 8 };

/* the work-items of a run kernel over n elements: one a run */
static inline size_t rci_gpu_ew_runs(int64_t n)
{
    return (size_t)((n + RCI_GPU_EW_RUN - 1) / RCI_GPU_EW_RUN);
}

/* the work-items of an element-wise kernel over n elements: one a batch */
static inline size_t rci_gpu_ew_items(int64_t n)
{
    return (size_t)((n + RCI_GPU_EW_SPAN - 1) / RCI_GPU_EW_SPAN);
}

/* Device memory as a kernel argument: a cl_mem, or the value of a CUdeviceptr. */
typedef void *rci_gpu_mem;

static inline rci_gpu_mem rci_gpu_mem_of(const rc_buffer *b)
{
    return b->impl;
}

/* A node's memory as kernel arguments: the buffer and the element offset. */
typedef struct {
    rci_gpu_mem mem;
    int64_t off;
} rci_gpu_place;

/* One kernel argument: its size and where its value is (a device memory argument is an
 * rci_gpu_mem's address). */
typedef struct {
    size_t size;
    const void *value;
} rci_gpu_arg;

/* The kernels' long8 and long16 arguments (box shapes and strides, conv geometry): 8 or 16
 * int64 by value, laid out as OpenCL's long8 / long16 and the dialect's CUDA structs. */
typedef struct {
    int64_t s[8];
} rci_gpu_long8;
typedef struct {
    int64_t s[16];
} rci_gpu_long16;

typedef struct rci_gpu rci_gpu;

/* What a device backend supplies. Every call may queue work; the device runs queued work
 * in order (one in-order queue or stream), so nothing here waits unless it says so. */
typedef struct {
    /* bytes of device memory (not zeroed) into *out; `why` names the use in an error (the
     * out-of-memory message of rci_gpu_out_of_memory). */
    int (*mem_alloc)(rci_gpu *g, size_t bytes, rci_gpu_mem *out, const char *why, rc_error *err);
    /* frees memory of mem_alloc once the work queued before is done */
    void (*mem_free)(rci_gpu *g, rci_gpu_mem m);
    /* bytes from byte off of m set to the repeated pattern of psize bytes (1, 2 or 4) */
    int (*fill)(rci_gpu *g, rci_gpu_mem m, size_t off, const void *pattern, size_t psize, size_t bytes,
                rc_error *err);
    /* bytes from byte off of m into host memory, once the work queued before is done */
    int (*read)(rci_gpu *g, rci_gpu_mem m, size_t off, void *host, size_t bytes, rc_error *err);
    /* kernel k of the program for float values stored as `store` (RC_F32, RC_BF16 or RC_F16;
     * a program is built on its first launch) over n work-items (0: nothing runs) in
     * work-groups of `group` work-items (n a multiple of it; 0: the backend's choice, for
     * kernels that share no local memory); the error names `what` */
    int (*launch)(rci_gpu *g, rc_dtype store, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs,
                  size_t n, size_t group, const char *what, rc_error *err);
    /* the product of a MATMUL node (dims d, operands and result stored as `store`) when it
     * is a GEMM (k > 0; and not rci_matmul_few_rows unless gemm_decodes: ops_rows.c runs
     * those); also the f32 products of fused attention (ops_attention.c) */
    int (*matmul)(rci_gpu *g, const rc_tensor *node, const rci_matmul_dims *d, rc_dtype store,
                  const rci_gpu_place *out, const rci_gpu_place *in, rc_error *err);
    /* the scratch bytes that product takes (0 when it needs none) */
    size_t (*matmul_scratch)(const rci_gpu *g, const rci_matmul_dims *d, rc_dtype store);
    /* a product of 16-bit operands stored as `store` into an f32 result, summed in f32,
     * without scratch (offsets in elements of each side): the fused attention's products of
     * bf16 values (ops_attention.c). NULL where the backend has none (CLBlast: its attention
     * widens 16-bit operands into f32 scratch for f32 products) */
    int (*matmul_wide)(rci_gpu *g, const rci_matmul_dims *d, rc_dtype store, const rci_gpu_place *out,
                       const rci_gpu_place *in, rc_error *err);
} rci_gpu_ops;

struct rci_gpu {
    rc_backend be;                /* first */
    const rci_gpu_ops *ops;
    int fp64;                     /* sums accumulate in double (the programs built with RC_FP64) */
    int gemm_decodes;             /* 1: the matmul op also takes a decoding step's few rows
                                   * (cuBLAS: quick for one row, 16-bit weights read as
                                   * stored); 0: k_matmul_rows does (CLBlast would widen
                                   * every 16-bit weight into scratch per token) */
    int mma;                      /* 1: kernels.cl's at_mma runs on tensor cores (CUDA, sm_80
                                   * and later), so bf16 attention may go in tiles
                                   * (rc_set_tiled_attention) */
    int tiles;                    /* 1: the programs hold the attention tile kernels (built
                                   * with RC_TILES where they fit: RCI_GPU_TILE_LOCAL_BYTES);
                                   * 0: those kernels are absent, launching one is an error */
    rci_gpu_mem fault;            /* one int of device memory: the first bad id a check found */
    rci_gpu_mem scratch;          /* the kernels' temporaries (rci_gpu_scratch) */
    size_t scratch_bytes;
};

/* ---- run.c: nodes ---- */

/* Fills be's node and optimizer entries (supports, run_node, scratch_bytes, update,
 * sum_squares, accumulate, round_f32, host_address) and the buffer entries that are g's ops
 * as they are (buffer_free, download, fill_zero); the device backend fills buffer_alloc,
 * upload, copy, wait and release. */
void rci_gpu_table_fill(rci_gpu *g);

/* ---- node.c: what the nodes' runs share ---- */

/* At least `bytes` of scratch device memory, valid until the next call (a regrowth frees
 * the old memory after the work queued on it); counted in the backend's used and peak
 * bytes. NULL with err set, also for 0 bytes while none is held (no memory to give). */
rci_gpu_mem rci_gpu_scratch(rci_gpu *g, size_t bytes, rc_error *err);
/* The scratch's growth policy: the bytes held after a need of `need` with `held` held. */
size_t rci_gpu_scratch_grown(size_t held, size_t need);
/* Frees the scratch (a device backend's release, before its context goes). */
void rci_gpu_scratch_free(rci_gpu *g);

/* How a node's float values are stored: bf16 or f16 when it reads or writes them (a loss of
 * 16-bit logits is f32), else f32. Its kernels come from that storage's program. */
rc_dtype rci_gpu_storage(const rc_tensor *node);

/* The error of an allocation of `bytes` the device cannot hold, and why; -1. */
int rci_gpu_out_of_memory(const rc_backend *be, size_t bytes, const char *why, rc_error *err);

#endif
