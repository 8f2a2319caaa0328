/* opencl.c - the OpenCL backend's table: buffers in device memory (allocate, free, copies,
 * fills), waiting, and opening a device as a backend, whose table holds these and the
 * shared layer's node and optimizer work (gpu/run.c, gpu/update.c) over the ops of
 * context.c and blas.c. */
#include "opencl.h"

#include <clblast_c.h>
#include <stdlib.h>

static rci_ocl *ocl(const rc_backend *be)
{
    return (rci_ocl *)(void *)be;
}

/* ---- buffers --------------------------------------------------------------------------- */

static int ocl_alloc(rc_backend *be, rc_buffer *b, size_t bytes, int zero, rc_error *err)
{
    rci_ocl *o = ocl(be);
    size_t size = bytes ? (bytes + 3) / 4 * 4 : 4;
    if (be->total_bytes && be->used_bytes + bytes > be->total_bytes)
        return rci_gpu_out_of_memory(be, bytes, "the device's memory is full", err);
    if (size > o->max_alloc)
        return rci_gpu_out_of_memory(be, bytes, "larger than the device's largest buffer", err);
    cl_int s;
    cl_mem m = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, size, NULL, &s);
    if (s != CL_SUCCESS)
        return s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES ||
                       s == CL_OUT_OF_HOST_MEMORY
                   ? rci_gpu_out_of_memory(be, bytes, rci_ocl_status(s), err)
                   : rci_ocl_fail(be, "clCreateBuffer", s, err);
    b->impl = m;
    if (zero) {
        cl_uchar z = 0;
        s = clEnqueueFillBuffer(o->queue, m, &z, 1, 0, size, 0, NULL, NULL);
        if (s != CL_SUCCESS) {
            clReleaseMemObject(m);
            b->impl = NULL;
            return s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES
                       ? rci_gpu_out_of_memory(be, bytes, rci_ocl_status(s), err)
                       : rci_ocl_fail(be, "clEnqueueFillBuffer", s, err);
        }
    }
    return 0;
}

static int ocl_upload(rc_backend *be, rc_buffer *b, size_t off, const void *host, size_t bytes,
                      rc_error *err)
{
    cl_int s = clEnqueueWriteBuffer(ocl(be)->queue, rci_ocl_mem(b), CL_TRUE, off, bytes, host, 0,
                                    NULL, NULL);
    return s == CL_SUCCESS ? 0 : rci_ocl_fail(be, "upload", s, err);
}

/* Overlapping ranges of one buffer (clEnqueueCopyBuffer refuses them) go through a
 * temporary buffer. */
static int ocl_copy(rc_backend *be, rc_buffer *dst, size_t doff, const rc_buffer *src, size_t soff,
                    size_t bytes, rc_error *err)
{
    rci_ocl *o = ocl(be);
    cl_mem d = rci_ocl_mem(dst), sm = rci_ocl_mem(src);
    if (d == sm && doff == soff)
        return 0;
    if (d == sm && doff < soff + bytes && soff < doff + bytes) {
        rci_gpu_mem tm;
        if (rci_ocl_mem_alloc(&o->gpu, bytes, &tm, "a temporary for an overlapping copy", err))
            return -1;
        cl_mem t = tm;
        cl_int s = clEnqueueCopyBuffer(o->queue, sm, t, soff, 0, bytes, 0, NULL, NULL);
        if (s == CL_SUCCESS)
            s = clEnqueueCopyBuffer(o->queue, t, d, 0, doff, bytes, 0, NULL, NULL);
        if (s == CL_SUCCESS)
            s = clFinish(o->queue);
        clReleaseMemObject(t);
        return s == CL_SUCCESS ? 0 : rci_ocl_fail(be, "copy", s, err);
    }
    cl_int s = clEnqueueCopyBuffer(o->queue, sm, d, soff, doff, bytes, 0, NULL, NULL);
    return s == CL_SUCCESS ? 0 : rci_ocl_fail(be, "copy", s, err);
}

static int ocl_wait(rc_backend *be, rc_error *err)
{
    cl_int s = clFinish(ocl(be)->queue);
    return s == CL_SUCCESS ? 0 : rci_ocl_fail(be, "clFinish", s, err);
}

/* ---- the backend ------------------------------------------------------------------------ */

static void ocl_release(rc_backend *be);

/* what the OpenCL device supplies to the shared layer */
static const rci_gpu_ops ocl_ops = {
    .mem_alloc = rci_ocl_mem_alloc,
    .mem_free = rci_ocl_mem_free,
    .fill = rci_ocl_fill,
    .read = rci_ocl_read,
    .launch = rci_ocl_launch,
    .matmul = rci_ocl_matmul,
    .matmul_scratch = rci_ocl_matmul_scratch,
};

/* the table and ops of opened device o (its name and memory figures are the device's,
 * context.c) */
static void table_fill(rci_ocl *o)
{
    rc_backend *be = &o->gpu.be;
    o->gpu.ops = &ocl_ops;
    rci_gpu_table_fill(&o->gpu);
    be->buffer_alloc = ocl_alloc;
    be->upload = ocl_upload;
    be->copy = ocl_copy;
    be->wait = ocl_wait;
    be->release = ocl_release;
}

/* the devices open now (until every open is closed and their buffers are freed) */
static rci_ocl *opened[RCI_OCL_MAX_DEVICES];

/* The device's last open was closed and its last buffer freed: its work finishes, CLBlast
 * forgets the programs it compiled for the context, and everything is released; the next
 * open of the device builds it afresh. */
static void ocl_release(rc_backend *be)
{
    rci_ocl *o = ocl(be);
    opened[o->index] = NULL;
    clFinish(o->queue);
    CLBlastClearCache();
    rci_gpu_scratch_free(&o->gpu);
    rci_ocl_close(o);
}

/* At exit, the work still queued finishes first: a process that returns from main with
 * kernels queued would otherwise tear down the runtime (PoCL compiles queued kernels in
 * its own threads) under the work. */
static void finish_all(void)
{
    for (int i = 0; i < RCI_OCL_MAX_DEVICES; i++)
        if (opened[i])
            clFinish(opened[i]->queue);
}

rc_backend *rci_backend_opencl(int index, rc_error *err)
{
    static int registered;
    if (!registered)
        registered = atexit(finish_all) == 0;
    if (index < 0 || index >= RCI_OCL_MAX_DEVICES) {
        rc_error_set(err, RC_ERR_ARG, "opencl: no device %d", index);
        return NULL;
    }
    if (!opened[index] && (opened[index] = rci_ocl_open(index, err)))
        table_fill(opened[index]);
    return opened[index] ? &opened[index]->gpu.be : NULL;
}
