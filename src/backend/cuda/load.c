/* load.c - the CUDA libraries at the bottom of the CUDA backend: the driver (libcuda.so.1)
 * and cuBLAS, opened with dlopen when a CUDA device is first asked for, never linked, so
 * redco starts and runs on machines without them. A library or symbol that is missing is
 * one error line naming it and what to use instead. Both stay open for the process. */
#include "cuda.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#define USE_INSTEAD "use --device opencl or cpu"

/* one symbol of lib into *slot; -1 with err naming it when missing (optional: 0) */
static int take(void *lib, const char *libname, const char *symbol, void *slot, int optional, rc_error *err)
{
    void *f = dlsym(lib, symbol);
    /* a data pointer holding a function's address (POSIX dlsym's contract) */
    memcpy(slot, &f, sizeof f);
    if (f || optional)
        return 0;
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: %s has no %s (too old?): update it, or " USE_INSTEAD,
                        libname, symbol);
}

typedef struct {
    const char *symbol;
    size_t at;        /* offset of the slot in the table */
    int optional;
} symbol_slot;

static const symbol_slot driver_symbols[] = {
    {"cuInit", offsetof(rci_cu_driver, init), 0},
    {"cuDriverGetVersion", offsetof(rci_cu_driver, driver_get_version), 0},
    {"cuGetErrorName", offsetof(rci_cu_driver, get_error_name), 0},
    {"cuDeviceGetCount", offsetof(rci_cu_driver, device_get_count), 0},
    {"cuDeviceGet", offsetof(rci_cu_driver, device_get), 0},
    {"cuDeviceGetName", offsetof(rci_cu_driver, device_get_name), 0},
    {"cuDeviceTotalMem_v2", offsetof(rci_cu_driver, device_total_mem), 0},
    {"cuDeviceGetAttribute", offsetof(rci_cu_driver, device_get_attribute), 0},
    {"cuDevicePrimaryCtxRetain", offsetof(rci_cu_driver, primary_ctx_retain), 0},
    {"cuDevicePrimaryCtxRelease_v2", offsetof(rci_cu_driver, primary_ctx_release), 0},
    {"cuCtxSetCurrent", offsetof(rci_cu_driver, ctx_set_current), 0},
    {"cuStreamCreate", offsetof(rci_cu_driver, stream_create), 0},
    {"cuStreamDestroy_v2", offsetof(rci_cu_driver, stream_destroy), 0},
    {"cuStreamSynchronize", offsetof(rci_cu_driver, stream_synchronize), 0},
    {"cuMemAlloc_v2", offsetof(rci_cu_driver, mem_alloc), 0},
    {"cuMemFree_v2", offsetof(rci_cu_driver, mem_free), 0},
    {"cuMemAllocAsync", offsetof(rci_cu_driver, mem_alloc_async), 1},
    {"cuMemFreeAsync", offsetof(rci_cu_driver, mem_free_async), 1},
    {"cuMemcpyHtoDAsync_v2", offsetof(rci_cu_driver, memcpy_htod_async), 0},
    {"cuMemcpyDtoHAsync_v2", offsetof(rci_cu_driver, memcpy_dtoh_async), 0},
    {"cuMemcpyDtoDAsync_v2", offsetof(rci_cu_driver, memcpy_dtod_async), 0},
    {"cuMemsetD8Async", offsetof(rci_cu_driver, memset_d8_async), 0},
    {"cuMemsetD16Async", offsetof(rci_cu_driver, memset_d16_async), 0},
    {"cuMemsetD32Async", offsetof(rci_cu_driver, memset_d32_async), 0},
    {"cuPointerGetAttribute", offsetof(rci_cu_driver, pointer_get_attribute), 0},
    {"cuModuleLoadData", offsetof(rci_cu_driver, module_load_data), 0},
    {"cuModuleUnload", offsetof(rci_cu_driver, module_unload), 0},
    {"cuModuleGetFunction", offsetof(rci_cu_driver, module_get_function), 0},
    {"cuLaunchKernel", offsetof(rci_cu_driver, launch_kernel), 0},
};

static const symbol_slot blas_symbols[] = {
    {"cublasCreate_v2", offsetof(rci_cu_blas, create), 0},
    {"cublasDestroy_v2", offsetof(rci_cu_blas, destroy), 0},
    {"cublasSetStream_v2", offsetof(rci_cu_blas, set_stream), 0},
    {"cublasSetMathMode", offsetof(rci_cu_blas, set_math_mode), 0},
    {"cublasGemmStridedBatchedEx", offsetof(rci_cu_blas, gemm_strided_batched_ex), 0},
};

static int take_all(void *lib, const char *libname, const symbol_slot *s, size_t n, void *table, rc_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (take(lib, libname, s[i].symbol, (char *)table + s[i].at, s[i].optional, err))
            return -1;
    return 0;
}

/* the first of names[] that dlopen finds, its name in *found; NULL when none */
static void *open_first(const char *const *names, const char **found)
{
    for (int i = 0; names[i]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            *found = names[i];
            return lib;
        }
    }
    return NULL;
}

static rci_cu_driver driver;
static int driver_state;          /* 0: not tried, 1: ready, -1: failed (driver_error) */
static rc_error driver_error;

/* dlopen, dlsym and cuInit once; the outcome (or its error) kept */
static int driver_load(rc_error *err)
{
    static const char *const names[] = {"libcuda.so.1", NULL};
    const char *found = NULL;
    void *lib = open_first(names, &found);
    if (!lib)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "cuda: the NVIDIA driver's libcuda.so.1 was not found: install the driver, or " USE_INSTEAD);
    if (take_all(lib, "libcuda.so.1", driver_symbols, sizeof driver_symbols / sizeof *driver_symbols, &driver,
                 err))
        return -1;
    CUresult r = driver.init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: no CUDA device (the driver finds none): " USE_INSTEAD);
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        driver.get_error_name(r, &s);
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: no CUDA device (cuInit failed: %s): " USE_INSTEAD,
                            s ? s : "a CUDA error");
    }
    return 0;
}

const char *rci_cu_status(CUresult r)
{
    const char *s = NULL;
    if (driver_state > 0 && driver.get_error_name(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "a CUDA error";
}

const char *rci_cublas_status(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "a cuBLAS error";
    }
}

const rci_cu_driver *rci_cu_driver_get(rc_error *err)
{
    if (driver_state == 0)
        driver_state = driver_load(&driver_error) ? -1 : 1;
    if (driver_state > 0)
        return &driver;
    if (err)
        *err = driver_error;
    return NULL;
}

static rci_cu_blas blas;
static int blas_state;
static rc_error blas_error;

static int blas_load(rc_error *err)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12",
                                        "/usr/local/cuda/lib64/libcublas.so.13",
                                        "/usr/local/cuda/lib64/libcublas.so.12", NULL};
    const char *found = NULL;
    void *lib = open_first(names, &found);
    if (!lib)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "cuda: cuBLAS (libcublas.so.13 or libcublas.so.12) was not found: install the "
                            "CUDA toolkit's cuBLAS (or add its lib64 to LD_LIBRARY_PATH), or " USE_INSTEAD);
    return take_all(lib, found, blas_symbols, sizeof blas_symbols / sizeof *blas_symbols, &blas, err);
}

const rci_cu_blas *rci_cu_blas_get(rc_error *err)
{
    if (blas_state == 0)
        blas_state = blas_load(&blas_error) ? -1 : 1;
    if (blas_state > 0)
        return &blas;
    if (err)
        *err = blas_error;
    return NULL;
}
