/* context.c - one CUDA device over the driver API of load.c: the public listing, opening a
 * device (its primary context, one stream, a cuBLAS handle), errors named after the
 * driver's statuses, device memory, fills and reads, and the kernel modules (kernels.cl as
 * CUDA C++ compiled by NVRTC per storage, on first launch) and their launches. These are the
 * rci_gpu_ops the shared gpu/ code calls; blas.c and cuda.c sit above this file. */
#include "cuda.h"
#include "redco/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 256 };   /* threads per block of a launch that names no group size */

/* ---- errors ------------------------------------------------------------------------------- */

int rci_cu_fail(const rc_backend *be, const char *what, CUresult r, rc_error *err)
{
    return rc_error_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                        "%s: %s failed: %s", be->name, what, rci_cu_status(r));
}

/* ---- discovery ---------------------------------------------------------------------------- */

int rc_cuda_device_count(rc_error *err)
{
    const rci_cu_driver *cu = rci_cu_driver_get(err);
    if (!cu)
        return -1;
    int n = 0;
    CUresult r = cu->device_get_count(&n);
    if (r != CUDA_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: no CUDA device (cuDeviceGetCount: %s): use "
                            "--device opencl or cpu", rci_cu_status(r));
    if (n <= 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: no CUDA device (the driver finds none): use "
                            "--device opencl or cpu");
    return n < RCI_CU_MAX_DEVICES ? n : RCI_CU_MAX_DEVICES;
}

/* CUDA device `index` of the driver; -1 with err set when out of range */
static int find_device(int index, CUdevice *dev, rc_error *err)
{
    int n = rc_cuda_device_count(err);
    if (n < 0)
        return -1;
    if (index < 0 || index >= n)
        return rc_error_set(err, RC_ERR_ARG, "cuda: no device %d (there %s %d: 0 .. %d)", index,
                            n == 1 ? "is" : "are", n, n - 1);
    CUresult r = rci_cu_driver_get(err)->device_get(dev, index);
    if (r != CUDA_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: cuDeviceGet(%d) failed: %s", index, rci_cu_status(r));
    return 0;
}

static int attribute(const rci_cu_driver *cu, CUdevice dev, CUdevice_attribute a)
{
    int v = 0;
    return cu->device_get_attribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

int rc_cuda_device_info(int index, rc_device_info *info, rc_error *err)
{
    CUdevice dev;
    if (!info)
        return rc_error_set(err, RC_ERR_ARG, "cuda: NULL device info");
    if (find_device(index, &dev, err))
        return -1;
    const rci_cu_driver *cu = rci_cu_driver_get(err);
    memset(info, 0, sizeof *info);
    info->index = index;
    if (cu->device_get_name(info->name, (int)sizeof info->name, dev) != CUDA_SUCCESS)
        snprintf(info->name, sizeof info->name, "?");
    info->name[sizeof info->name - 1] = 0;
    int version = 0;
    cu->driver_get_version(&version);
    snprintf(info->platform, sizeof info->platform, "CUDA %d.%d", version / 1000, version % 1000 / 10);
    snprintf(info->version, sizeof info->version, "CUDA %d.%d", version / 1000, version % 1000 / 10);
    snprintf(info->type, sizeof info->type, "gpu");
    size_t total = 0;
    cu->device_total_mem(&total, dev);
    info->global_bytes = total;
    info->max_alloc_bytes = total;
    info->compute_units = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info->fp64 = 1;
    info->compute_major = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    info->compute_minor = attribute(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    return 0;
}

/* ---- the context -------------------------------------------------------------------------- */

/* the context each thread made current through rci_cu_use (the driver's is per thread) */
static _Thread_local CUcontext current;

int rci_cu_use(rci_cuda *c, rc_error *err)
{
    if (current == c->ctx)
        return 0;
    CUresult r = c->cu->ctx_set_current(c->ctx);
    if (r != CUDA_SUCCESS)
        return rci_cu_fail(&c->gpu.be, "cuCtxSetCurrent", r, err);
    current = c->ctx;
    return 0;
}

/* ---- memory ------------------------------------------------------------------------------- */

int rci_cu_mem_alloc(rci_gpu *g, size_t bytes, rci_gpu_mem *out, const char *why, rc_error *err)
{
    rci_cuda *c = rci_cuda_of(g);
    CUdeviceptr p = 0;
    *out = NULL;
    if (rci_cu_use(c, err))
        return -1;
    size_t size = bytes ? bytes : 4;
    CUresult r = c->pools ? c->cu->mem_alloc_async(&p, size, c->stream) : c->cu->mem_alloc(&p, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return rci_gpu_out_of_memory(&g->be, bytes, why, err);
    if (r != CUDA_SUCCESS)
        return rci_cu_fail(&g->be, "cuMemAlloc", r, err);
    *out = (rci_gpu_mem)(uintptr_t)p;
    return 0;
}

/* Stream-ordered memory is freed after the work queued before; without memory pools, that
 * work is waited for first. */
void rci_cu_mem_free(rci_gpu *g, rci_gpu_mem m)
{
    rci_cuda *c = rci_cuda_of(g);
    if (!m || rci_cu_use(c, NULL))
        return;
    if (c->pools) {
        c->cu->mem_free_async(rci_cu_ptr(m), c->stream);
        return;
    }
    c->cu->stream_synchronize(c->stream);
    c->cu->mem_free(rci_cu_ptr(m));
}

int rci_cu_fill(rci_gpu *g, rci_gpu_mem m, size_t off, const void *pattern, size_t psize, size_t bytes,
                rc_error *err)
{
    rci_cuda *c = rci_cuda_of(g);
    if (!bytes)
        return 0;
    if (rci_cu_use(c, err))
        return -1;
    CUdeviceptr p = rci_cu_ptr(m) + off;
    CUresult r;
    if (psize == 4) {
        uint32_t v;
        memcpy(&v, pattern, 4);
        r = c->cu->memset_d32_async(p, v, bytes / 4, c->stream);
    } else if (psize == 2) {
        uint16_t v;
        memcpy(&v, pattern, 2);
        r = c->cu->memset_d16_async(p, v, bytes / 2, c->stream);
    } else {
        r = c->cu->memset_d8_async(p, *(const unsigned char *)pattern, bytes, c->stream);
    }
    return r == CUDA_SUCCESS ? 0 : rci_cu_fail(&g->be, "fill", r, err);
}

int rci_cu_read(rci_gpu *g, rci_gpu_mem m, size_t off, void *host, size_t bytes, rc_error *err)
{
    rci_cuda *c = rci_cuda_of(g);
    if (!bytes)
        return 0;
    if (rci_cu_use(c, err))
        return -1;
    CUresult r = c->cu->memcpy_dtoh_async(host, rci_cu_ptr(m) + off, bytes, c->stream);
    if (r == CUDA_SUCCESS)
        r = c->cu->stream_synchronize(c->stream);
    return r == CUDA_SUCCESS ? 0 : rci_cu_fail(&g->be, "download", r, err);
}

/* ---- programs and launching ------------------------------------------------------------------- */

static int storage_slot(rc_dtype store)
{
    return store == RC_BF16 ? 1 : store == RC_F16 ? 2 : 0;
}

/* The CUBINs NVRTC made, per storage, kept for the process: a device opened again (or a
 * second device of the same compute capability) loads them without compiling again. */
static struct {
    int major, minor;
    void *image;
} images[3];

/* the CUBIN of kernels.cl for storage slot h and c's compute capability */
static const void *image_for(rci_cuda *c, int h, rc_error *err)
{
    static const rc_dtype stores[3] = {RC_F32, RC_BF16, RC_F16};
    if (images[h].image && images[h].major == c->major && images[h].minor == c->minor)
        return images[h].image;
    void *image = NULL;
    size_t bytes = 0;
    if (rci_nvrtc_compile(rci_gpu_source, c->major, c->minor, stores[h], c->gpu.fp64, &image, &bytes, NULL, err))
        return NULL;
    free(images[h].image);
    images[h].image = image;
    images[h].major = c->major;
    images[h].minor = c->minor;
    return image;
}

/* the module of kernels.cl for values stored as `store` (compiled by NVRTC for the device's
 * compute capability) loaded, with its functions */
static int build(rci_cuda *c, rc_dtype store, rc_error *err)
{
    int h = storage_slot(store);
    const void *image = image_for(c, h, err);
    if (!image)
        return -1;
    CUresult r = c->cu->module_load_data(&c->modules[h], image);
    if (r != CUDA_SUCCESS) {
        c->modules[h] = NULL;
        return rci_cu_fail(&c->gpu.be, "loading the kernels (cuModuleLoadData)", r, err);
    }
    for (int k = 0; k < RCI_K_COUNT; k++) {
        c->functions[h][k] = NULL;
        if (rci_gpu_is_tile_kernel((rci_gpu_kernel)k) && !c->gpu.tiles)
            continue;   /* not built (rci_nvrtc_tiles) */
        r = c->cu->module_get_function(&c->functions[h][k], c->modules[h], rci_gpu_kernel_names[k]);
        if (r != CUDA_SUCCESS) {
            rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel %s: %s", c->name, rci_gpu_kernel_names[k],
                         rci_cu_status(r));
            c->cu->module_unload(c->modules[h]);
            c->modules[h] = NULL;
            memset(c->functions[h], 0, sizeof c->functions[h]);
            return -1;
        }
    }
    return 0;
}

int rci_cu_launch(rci_gpu *g, rc_dtype store, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs,
                  size_t n, size_t group, const char *what, rc_error *err)
{
    rci_cuda *c = rci_cuda_of(g);
    enum { MAX_ARGS = 32 };
    if (n == 0)
        return 0;
    if (nargs > MAX_ARGS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s: %d arguments for %s (at most %d)", c->name, what,
                            nargs, rci_gpu_kernel_names[k], MAX_ARGS);
    if (rci_cu_use(c, err))
        return -1;
    int h = storage_slot(store);
    if (!c->modules[h] && build(c, store, err))
        return -1;
    if (!c->functions[h][k])
        return rci_gpu_kernel_absent(&c->gpu.be, k, err);
    void *params[MAX_ARGS];
    for (int i = 0; i < nargs; i++)
        params[i] = (void *)(uintptr_t)args[i].value;   /* the driver reads each value */
    size_t block = group ? group : BLOCK, blocks = (n + block - 1) / block;
    if (blocks > 0x7fffffff || block > 1024)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "%s: %s: %zu items of %s in blocks of %zu: too many for one launch", c->name, what, n,
                            rci_gpu_kernel_names[k], block);
    CUresult r = c->cu->launch_kernel(c->functions[h][k], (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0,
                                      c->stream, params, NULL);
    if (r != CUDA_SUCCESS)
        return rc_error_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                            "%s: %s: running %s over %zu items in blocks of %zu: %s", c->name, what,
                            rci_gpu_kernel_names[k], n, block, rci_cu_status(r));
    return 0;
}

/* ---- opening a device ------------------------------------------------------------------------ */

void rci_cu_close(rci_cuda *c)
{
    const rci_cu_driver *cu = c->cu;
    if (c->ctx && !rci_cu_use(c, NULL)) {
        cu->stream_synchronize(c->stream);
        if (c->gpu.ops)   /* the table was filled (cuda.c) */
            rci_gpu_scratch_free(&c->gpu);
        rci_cu_mem_free(&c->gpu, c->gpu.fault);
        c->gpu.fault = NULL;
        if (c->blas)
            c->cb->destroy(c->blas);
        for (int h = 0; h < 3; h++)
            if (c->modules[h])
                cu->module_unload(c->modules[h]);
        if (c->stream) {
            cu->stream_synchronize(c->stream);
            cu->stream_destroy(c->stream);
        }
        cu->primary_ctx_release(c->device);
        current = NULL;   /* a later open makes its context current again */
    }
    free(c);
}

/* the context, stream, cuBLAS handle and fault word of c; -1 with err set */
static int start(rci_cuda *c, rc_error *err)
{
    const rci_cu_driver *cu = c->cu;
    CUresult r = cu->primary_ctx_retain(&c->ctx, c->device);
    if (r != CUDA_SUCCESS) {
        c->ctx = NULL;
        return rci_cu_fail(&c->gpu.be, "cuDevicePrimaryCtxRetain", r, err);
    }
    current = NULL;
    if (rci_cu_use(c, err))
        return -1;
    /* a blocking stream: it waits for the legacy default stream's work (other libraries') */
    if ((r = cu->stream_create(&c->stream, CU_STREAM_DEFAULT)) != CUDA_SUCCESS) {
        c->stream = NULL;
        return rci_cu_fail(&c->gpu.be, "cuStreamCreate", r, err);
    }
    cublasStatus_t s = c->cb->create(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return rc_error_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                            "%s: cublasCreate failed: %s", c->name, rci_cublas_status(s));
    }
    if ((s = c->cb->set_stream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: cublasSetStream failed: %s", c->name,
                            rci_cublas_status(s));
    /* 16-bit products sum in f32 to the end: no split-K reduction in 16 bits, which cuBLAS
     * otherwise may choose (a bf16 GEMM's result rounds once, as on the CPU) */
    if ((s = c->cb->set_math_mode(c->blas, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
        CUBLAS_STATUS_SUCCESS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: cublasSetMathMode failed: %s", c->name,
                            rci_cublas_status(s));
    return rci_cu_mem_alloc(&c->gpu, sizeof(int32_t), &c->gpu.fault, "the id check's fault word", err);
}

rci_cuda *rci_cu_open(int index, rc_error *err)
{
    CUdevice dev;
    if (find_device(index, &dev, err))
        return NULL;
    const rci_cu_blas *cb = rci_cu_blas_get(err);
    if (!cb)
        return NULL;
    rci_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        rc_error_set(err, RC_ERR_MEMORY, "cuda: out of host memory");
        return NULL;
    }
    c->cu = rci_cu_driver_get(err);
    c->cb = cb;
    c->index = index;
    c->device = dev;
    snprintf(c->name, sizeof c->name, "cuda:%d", index);
    c->gpu.be.name = c->name;   /* for errors; cuda.c fills in the table's functions */
    c->gpu.fp64 = 1;
    c->gpu.gemm_decodes = 1;
    size_t total = 0;
    c->cu->device_total_mem(&total, dev);
    c->gpu.be.total_bytes = total;
    c->major = attribute(c->cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    c->minor = attribute(c->cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    c->gpu.mma = c->major >= 8;
    c->gpu.tiles = rci_nvrtc_tiles(c->major);
    c->pools = c->cu->mem_alloc_async && c->cu->mem_free_async &&
               attribute(c->cu, dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
    if (start(c, err)) {
        rci_cu_close(c);
        return NULL;
    }
    return c;
}
