/* cuda.h - what the CUDA backend's files share: the driver's and cuBLAS's functions (opened
 * with dlopen when a CUDA device is first asked for, never linked), one opened device's
 * state behind the rci_gpu table, and the device work the shared gpu/ code calls through
 * rci_gpu_ops. The files stack as load.c (the libraries) under context.c (devices, memory,
 * programs, launching) under blas.c (cuBLAS's products) under cuda.c (the backend's table).
 *
 * One device, its primary context, one stream: kernels, copies, fills and cuBLAS's GEMMs run
 * in the order they are queued, so nothing waits on the host but download, wait, and what
 * the shared code reads back. A buffer is one allocation; its impl is the CUdeviceptr's
 * value, and a tensor is (CUdeviceptr, element offset) as two kernel arguments, as on
 * OpenCL. The kernels are kernels.cl compiled as CUDA C++ by NVRTC (nvrtc.c) into a CUBIN
 * for the device's compute capability, one module per storage (f32, bf16, f16), built on
 * its first launch; the CUBINs are kept for the process, so a device opened again loads
 * them without compiling. */
#ifndef REDCO_CUDA_H
#define REDCO_CUDA_H

#include <cudaTypedefs.h>
#include <cublas_api.h>

#include "gpu/gpu.h"
#include "cuda/nvrtc.h"

/* ---- the libraries (load.c) ---- */

/* The driver API functions the backend uses, from libcuda.so.1 (typed by cudaTypedefs.h:
 * each PFN_ names the version of the symbol dlsym finds, e.g. cuMemAlloc_v2). */
typedef struct {
    PFN_cuInit_v2000 init;
    PFN_cuDriverGetVersion_v2020 driver_get_version;
    PFN_cuGetErrorName_v6000 get_error_name;
    PFN_cuDeviceGetCount_v2000 device_get_count;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetName_v2000 device_get_name;
    PFN_cuDeviceTotalMem_v3020 device_total_mem;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute;
    PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
    PFN_cuDevicePrimaryCtxRelease_v11000 primary_ctx_release;
    PFN_cuCtxSetCurrent_v4000 ctx_set_current;
    PFN_cuStreamCreate_v2000 stream_create;
    PFN_cuStreamDestroy_v4000 stream_destroy;
    PFN_cuStreamSynchronize_v2000 stream_synchronize;
    PFN_cuMemAlloc_v3020 mem_alloc;
    PFN_cuMemFree_v3020 mem_free;
    PFN_cuMemAllocAsync_v11020 mem_alloc_async;    /* NULL before CUDA 11.2 */
    PFN_cuMemFreeAsync_v11020 mem_free_async;
    PFN_cuMemcpyHtoDAsync_v3020 memcpy_htod_async;
    PFN_cuMemcpyDtoHAsync_v3020 memcpy_dtoh_async;
    PFN_cuMemcpyDtoDAsync_v3020 memcpy_dtod_async;
    PFN_cuMemsetD8Async_v3020 memset_d8_async;
    PFN_cuMemsetD16Async_v3020 memset_d16_async;
    PFN_cuMemsetD32Async_v3020 memset_d32_async;
    PFN_cuPointerGetAttribute_v4000 pointer_get_attribute;
    PFN_cuModuleLoadData_v2000 module_load_data;
    PFN_cuModuleUnload_v2000 module_unload;
    PFN_cuModuleGetFunction_v2000 module_get_function;
    PFN_cuLaunchKernel_v4000 launch_kernel;
} rci_cu_driver;

/* The cuBLAS functions the backend uses (libcublas.so.13 or .12). */
typedef struct {
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*gemm_strided_batched_ex)(
        cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
        const void *alpha, const void *a, cudaDataType atype, int lda, long long stride_a, const void *b,
        cudaDataType btype, int ldb, long long stride_b, const void *beta, void *c, cudaDataType ctype,
        int ldc, long long stride_c, int batch_count, cublasComputeType_t compute, cublasGemmAlgo_t algo);
} rci_cu_blas;

/* The driver, opened and cuInit'ed on the first call and kept for the process; NULL with
 * err set (libcuda.so.1 missing, a symbol missing, cuInit failed) saying what to use
 * instead. */
const rci_cu_driver *rci_cu_driver_get(rc_error *err);
/* cuBLAS, opened on the first call; NULL with err set. */
const rci_cu_blas *rci_cu_blas_get(rc_error *err);
/* A driver status's name ("CUDA_ERROR_OUT_OF_MEMORY", ...); a cuBLAS status's. */
const char *rci_cu_status(CUresult r);
const char *rci_cublas_status(cublasStatus_t s);

/* ---- one opened device (context.c) ---- */

enum { RCI_CU_MAX_DEVICES = 64 };

/* The state of "cuda:N": the rci_gpu (and so the rc_backend) first. */
typedef struct {
    rci_gpu gpu;
    int index;                    /* N */
    char name[32];                /* "cuda:N" */
    CUdevice device;
    CUcontext ctx;                /* the device's primary context (retained) */
    CUstream stream;              /* the one in-order stream everything runs on */
    int major, minor;             /* compute capability */
    int pools;                    /* stream-ordered allocation (cuMemAllocAsync) */
    CUmodule modules[3];          /* f32, bf16, f16 values: built on first launch */
    CUfunction functions[3][RCI_K_COUNT];
    cublasHandle_t blas;
    const rci_cu_driver *cu;
    const rci_cu_blas *cb;
} rci_cuda;

static inline rci_cuda *rci_cuda_of(const rci_gpu *g)
{
    return (rci_cuda *)(void *)g;
}

static inline CUdeviceptr rci_cu_ptr(rci_gpu_mem m)
{
    return (CUdeviceptr)(uintptr_t)m;
}

/* Device `index` opened: its primary context made current, a stream, a cuBLAS handle on it,
 * the fault word; name and memory figures set, the table's functions not (cuda.c's). NULL
 * with err set. */
rci_cuda *rci_cu_open(int index, rc_error *err);
/* Finishes the device's work and releases everything of c (modules, memory of the gpu
 * struct, cuBLAS, stream, context); frees c. */
void rci_cu_close(rci_cuda *c);
/* Makes c's context the calling thread's current one (a no-op when it is already). */
int rci_cu_use(rci_cuda *c, rc_error *err);

/* The error of driver call `what` that returned r (RC_ERR_MEMORY when the device ran out of
 * memory); -1. */
int rci_cu_fail(const rc_backend *be, const char *what, CUresult r, rc_error *err);

/* rci_gpu_ops (gpu.h) of the device */
int rci_cu_mem_alloc(rci_gpu *g, size_t bytes, rci_gpu_mem *out, const char *why, rc_error *err);
void rci_cu_mem_free(rci_gpu *g, rci_gpu_mem m);
int rci_cu_fill(rci_gpu *g, rci_gpu_mem m, size_t off, const void *pattern, size_t psize, size_t bytes,
                rc_error *err);
int rci_cu_read(rci_gpu *g, rci_gpu_mem m, size_t off, void *host, size_t bytes, rc_error *err);
int rci_cu_launch(rci_gpu *g, rc_dtype store, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs,
                  size_t n, size_t group, const char *what, rc_error *err);

/* ---- cuBLAS's products (blas.c) ---- */

int rci_cu_matmul(rci_gpu *g, const rc_tensor *node, const rci_matmul_dims *d, rc_dtype store,
                  const rci_gpu_place *out, const rci_gpu_place *in, rc_error *err);
/* 16-bit operands stored as `store` into an f32 result (the ops' matmul_wide) */
int rci_cu_matmul_wide(rci_gpu *g, const rci_matmul_dims *d, rc_dtype store, const rci_gpu_place *out,
                       const rci_gpu_place *in, rc_error *err);
size_t rci_cu_matmul_scratch(const rci_gpu *g, const rci_matmul_dims *d, rc_dtype store);

#endif
