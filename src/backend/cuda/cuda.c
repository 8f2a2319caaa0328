/* cuda.c - the CUDA backend's table: buffers in device memory (allocate, free, copies,
 * fills), waiting, and opening device "cuda:N" as a backend whose node and optimizer work
 * is the shared gpu/ code's (rci_gpu_table_fill) over the device work of context.c and the
 * products of blas.c. */
#include "cuda.h"

#include <stdlib.h>

static rci_cuda *cuda_of(const rc_backend *be)
{
    return (rci_cuda *)(void *)be;
}

static CUdeviceptr ptr_of(const rc_buffer *b, size_t off)
{
    return rci_cu_ptr(rci_gpu_mem_of(b)) + off;
}

/* ---- buffers --------------------------------------------------------------------------- */

static int cu_alloc(rc_backend *be, rc_buffer *b, size_t bytes, int zero, rc_error *err)
{
    rci_cuda *c = cuda_of(be);
    size_t size = bytes ? (bytes + 3) / 4 * 4 : 4;
    if (be->total_bytes && be->used_bytes + bytes > be->total_bytes)
        return rci_gpu_out_of_memory(be, bytes, "the device's memory is full", err);
    rci_gpu_mem m;
    if (rci_cu_mem_alloc(&c->gpu, size, &m, "the device's memory is full", err))
        return -1;
    b->impl = m;
    if (zero) {
        CUresult r = c->cu->memset_d8_async(rci_cu_ptr(m), 0, size, c->stream);
        if (r != CUDA_SUCCESS) {
            rci_cu_mem_free(&c->gpu, m);
            b->impl = NULL;
            return rci_cu_fail(be, "zero-filling a new buffer", r, err);
        }
    }
    return 0;
}

/* Host memory is copied on the stream: pageable memory is staged before the call returns,
 * so the caller may reuse it at once; page-locked memory (which the driver copies from
 * directly, later) is waited for. */
static int cu_upload(rc_backend *be, rc_buffer *b, size_t off, const void *host, size_t bytes, rc_error *err)
{
    rci_cuda *c = cuda_of(be);
    if (!bytes)
        return 0;
    if (rci_cu_use(c, err))
        return -1;
    CUresult r = c->cu->memcpy_htod_async(ptr_of(b, off), host, bytes, c->stream);
    unsigned int type = 0;
    if (r == CUDA_SUCCESS && c->cu->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                          (CUdeviceptr)(uintptr_t)host) == CUDA_SUCCESS)
        r = c->cu->stream_synchronize(c->stream);
    return r == CUDA_SUCCESS ? 0 : rci_cu_fail(be, "upload", r, err);
}

/* Overlapping ranges of one buffer go through a temporary (a device-to-device copy of
 * overlapping ranges is undefined). */
static int cu_copy(rc_backend *be, rc_buffer *dst, size_t doff, const rc_buffer *src, size_t soff, size_t bytes,
                   rc_error *err)
{
    rci_cuda *c = cuda_of(be);
    CUdeviceptr d = ptr_of(dst, doff), s = ptr_of(src, soff);
    if (d == s || !bytes)
        return 0;
    if (rci_cu_use(c, err))
        return -1;
    CUresult r;
    if (dst->impl == src->impl && doff < soff + bytes && soff < doff + bytes) {
        rci_gpu_mem t;
        if (rci_cu_mem_alloc(&c->gpu, bytes, &t, "a temporary for an overlapping copy", err))
            return -1;
        r = c->cu->memcpy_dtod_async(rci_cu_ptr(t), s, bytes, c->stream);
        if (r == CUDA_SUCCESS)
            r = c->cu->memcpy_dtod_async(d, rci_cu_ptr(t), bytes, c->stream);
        rci_cu_mem_free(&c->gpu, t);
    } else {
        r = c->cu->memcpy_dtod_async(d, s, bytes, c->stream);
    }
    return r == CUDA_SUCCESS ? 0 : rci_cu_fail(be, "copy", r, err);
}

static int cu_wait(rc_backend *be, rc_error *err)
{
    rci_cuda *c = cuda_of(be);
    if (rci_cu_use(c, err))
        return -1;
    CUresult r = c->cu->stream_synchronize(c->stream);
    return r == CUDA_SUCCESS ? 0 : rci_cu_fail(be, "cuStreamSynchronize", r, err);
}

/* ---- the backend ------------------------------------------------------------------------ */

static const rci_gpu_ops ops = {
    .mem_alloc = rci_cu_mem_alloc,
    .mem_free = rci_cu_mem_free,
    .fill = rci_cu_fill,
    .read = rci_cu_read,
    .launch = rci_cu_launch,
    .matmul = rci_cu_matmul,
    .matmul_scratch = rci_cu_matmul_scratch,
    .matmul_wide = rci_cu_matmul_wide,
};

static void cu_release(rc_backend *be);

/* the table of opened device c: the shared node and optimizer entries (host_address among
 * them: device memory, which the collectives stage through the host), then its own */
static void table_fill(rci_cuda *c)
{
    rc_backend *be = &c->gpu.be;
    c->gpu.ops = &ops;
    rci_gpu_table_fill(&c->gpu);
    be->buffer_alloc = cu_alloc;
    be->upload = cu_upload;
    be->copy = cu_copy;
    be->wait = cu_wait;
    be->release = cu_release;
}

/* the devices open now (until every open is closed and their buffers are freed) */
static rci_cuda *opened[RCI_CU_MAX_DEVICES];

/* The device's last open was closed and its last buffer freed: its work finishes and
 * everything is released; the next open of the device starts afresh. */
static void cu_release(rc_backend *be)
{
    rci_cuda *c = cuda_of(be);
    opened[c->index] = NULL;
    rci_cu_close(c);
}

/* At exit, the work still queued finishes first, as on OpenCL. */
static void finish_all(void)
{
    for (int i = 0; i < RCI_CU_MAX_DEVICES; i++)
        if (opened[i] && !rci_cu_use(opened[i], NULL))
            opened[i]->cu->stream_synchronize(opened[i]->stream);
}

rc_backend *rci_backend_cuda(int index, rc_error *err)
{
    static int registered;
    if (!registered)
        registered = atexit(finish_all) == 0;
    if (index < 0 || index >= RCI_CU_MAX_DEVICES) {
        rc_error_set(err, RC_ERR_ARG, "cuda: no device %d", index);
        return NULL;
    }
    if (!opened[index] && (opened[index] = rci_cu_open(index, err)))
        table_fill(opened[index]);
    if (opened[index] && rci_cu_use(opened[index], err))
        return NULL;
    return opened[index] ? &opened[index]->gpu.be : NULL;
}
