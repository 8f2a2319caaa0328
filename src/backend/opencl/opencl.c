/* opencl.c - the OpenCL backend: finding devices, opening one (context, in-order queue,
 * the kernel program built once), buffers in device memory, and launching kernels. */
#include "opencl.h"
#include "redco/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_PLATFORMS = 16,
    MAX_DEVICES = 64,   /* over all platforms */
    BUILD_LOG_MAX = 400 /* characters of the compiler's log kept in an error */
};

#define NO_DEVICE_HINT                                                                      \
    "install a GPU driver's OpenCL ICD, or pocl-opencl-icd to run OpenCL on the CPU"

const char *rci_ocl_status(cl_int s)
{
    switch (s) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an OpenCL error";
    }
}

/* ---- discovery ----------------------------------------------------------------------- */

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
} device_ref;

/* Every device of every platform, in order; -1 with err set when there is none. */
static int list_devices(device_ref *out, int cap, rc_error *err)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int s = clGetPlatformIDs(MAX_PLATFORMS, plats, &np);
    if (s != CL_SUCCESS || np == 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "opencl: no OpenCL platform found (%s): " NO_DEVICE_HINT,
                            s == CL_SUCCESS ? "none registered" : rci_ocl_status(s));
    int n = 0;
    for (cl_uint p = 0; p < np && p < MAX_PLATFORMS; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < MAX_DEVICES && n < cap; d++) {
            out[n].platform = plats[p];
            out[n].device = devs[d];
            n++;
        }
    }
    if (n == 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "opencl: %u OpenCL platform(s) but no device: " NO_DEVICE_HINT,
                            (unsigned)np);
    return n;
}

int rc_opencl_device_count(rc_error *err)
{
    device_ref refs[MAX_DEVICES];
    return list_devices(refs, MAX_DEVICES, err);
}

/* device `index` of the list; -1 with err set when out of range */
static int find_device(int index, device_ref *ref, rc_error *err)
{
    device_ref refs[MAX_DEVICES];
    int n = list_devices(refs, MAX_DEVICES, err);
    if (n < 0)
        return -1;
    if (index < 0 || index >= n)
        return rc_error_set(err, RC_ERR_ARG, "opencl: no device %d (there %s %d: 0 .. %d)", index,
                            n == 1 ? "is" : "are", n, n - 1);
    *ref = refs[index];
    return 0;
}

/* a device's string property, cut to size - 1 characters ("?" when it cannot be read) */
static void info_string(cl_device_id d, cl_device_info what, char *out, size_t size)
{
    size_t len = 0;
    char *all = NULL;
    snprintf(out, size, "?");
    if (clGetDeviceInfo(d, what, 0, NULL, &len) != CL_SUCCESS || !(all = calloc(1, len + 1)))
        return;
    if (clGetDeviceInfo(d, what, len, all, NULL) == CL_SUCCESS)
        snprintf(out, size, "%s", all);
    free(all);
}

static int has_fp64(cl_device_id d)
{
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(d, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp, &fp, NULL);
    return fp != 0;
}

int rc_opencl_device_info(int index, rc_device_info *info, rc_error *err)
{
    device_ref ref;
    if (!info)
        return rc_error_set(err, RC_ERR_ARG, "opencl: NULL device info");
    if (find_device(index, &ref, err))
        return -1;
    memset(info, 0, sizeof *info);
    info->index = index;
    if (clGetPlatformInfo(ref.platform, CL_PLATFORM_NAME, sizeof info->platform, info->platform,
                          NULL) != CL_SUCCESS)
        snprintf(info->platform, sizeof info->platform, "?");
    info->platform[sizeof info->platform - 1] = 0;
    info_string(ref.device, CL_DEVICE_NAME, info->name, sizeof info->name);
    info_string(ref.device, CL_DEVICE_VERSION, info->version, sizeof info->version);
    cl_device_type type = 0;
    cl_ulong global = 0, max_alloc = 0;
    cl_uint units = 0;
    clGetDeviceInfo(ref.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(ref.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    clGetDeviceInfo(ref.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(ref.device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    snprintf(info->type, sizeof info->type, "%s",
             type & CL_DEVICE_TYPE_GPU ? "gpu" : type & CL_DEVICE_TYPE_CPU ? "cpu"
             : type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator" : "other");
    info->global_bytes = (size_t)global;
    info->max_alloc_bytes = (size_t)max_alloc;
    info->compute_units = (int)units;
    info->fp64 = has_fp64(ref.device);
    return 0;
}

/* ---- buffers --------------------------------------------------------------------------- */

static rci_ocl *ocl(const rc_backend *be)
{
    return (rci_ocl *)(void *)be;
}

static int fail(const rc_backend *be, const char *what, cl_int s, rc_error *err)
{
    return rc_error_set(err, s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES
                                 ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                        "%s: %s failed: %s", be->name, what, rci_ocl_status(s));
}

static int out_of_memory(const rc_backend *be, size_t bytes, const char *why, rc_error *err)
{
    return rc_error_set(err, RC_ERR_MEMORY,
                        "%s: cannot allocate %zu bytes (%zu in use of %zu): %s; try a smaller "
                        "batch or more model shards (--mp)",
                        be->name, bytes, be->used_bytes, be->total_bytes, why);
}

static int ocl_alloc(rc_backend *be, rc_buffer *b, size_t bytes, int zero, rc_error *err)
{
    rci_ocl *o = ocl(be);
    size_t size = bytes ? (bytes + 3) / 4 * 4 : 4;
    if (be->total_bytes && be->used_bytes + bytes > be->total_bytes)
        return out_of_memory(be, bytes, "the device's memory is full", err);
    if (size > o->max_alloc)
        return out_of_memory(be, bytes, "larger than the device's largest buffer", err);
    cl_int s;
    cl_mem m = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, size, NULL, &s);
    if (s != CL_SUCCESS)
        return s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES ||
                       s == CL_OUT_OF_HOST_MEMORY
                   ? out_of_memory(be, bytes, rci_ocl_status(s), err)
                   : fail(be, "clCreateBuffer", s, err);
    b->impl = m;
    if (zero) {
        cl_uchar z = 0;
        s = clEnqueueFillBuffer(o->queue, m, &z, 1, 0, size, 0, NULL, NULL);
        if (s != CL_SUCCESS) {
            clReleaseMemObject(m);
            b->impl = NULL;
            return s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES
                       ? out_of_memory(be, bytes, rci_ocl_status(s), err)
                       : fail(be, "clEnqueueFillBuffer", s, err);
        }
    }
    return 0;
}

static void ocl_free(rc_backend *be, rc_buffer *b)
{
    (void)be;
    if (b->impl)
        clReleaseMemObject(rci_ocl_mem(b));
}

static int ocl_upload(rc_backend *be, rc_buffer *b, size_t off, const void *host, size_t bytes,
                      rc_error *err)
{
    cl_int s = clEnqueueWriteBuffer(ocl(be)->queue, rci_ocl_mem(b), CL_TRUE, off, bytes, host, 0,
                                    NULL, NULL);
    return s == CL_SUCCESS ? 0 : fail(be, "upload", s, err);
}

static int ocl_download(rc_backend *be, const rc_buffer *b, size_t off, void *host, size_t bytes,
                        rc_error *err)
{
    cl_int s = clEnqueueReadBuffer(ocl(be)->queue, rci_ocl_mem(b), CL_TRUE, off, bytes, host, 0,
                                   NULL, NULL);
    return s == CL_SUCCESS ? 0 : fail(be, "download", s, err);
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
        cl_int s;
        cl_mem t = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, bytes, NULL, &s);
        if (s != CL_SUCCESS)
            return out_of_memory(be, bytes, "a temporary for an overlapping copy", err);
        s = clEnqueueCopyBuffer(o->queue, sm, t, soff, 0, bytes, 0, NULL, NULL);
        if (s == CL_SUCCESS)
            s = clEnqueueCopyBuffer(o->queue, t, d, 0, doff, bytes, 0, NULL, NULL);
        if (s == CL_SUCCESS)
            s = clFinish(o->queue);
        clReleaseMemObject(t);
        return s == CL_SUCCESS ? 0 : fail(be, "copy", s, err);
    }
    cl_int s = clEnqueueCopyBuffer(o->queue, sm, d, soff, doff, bytes, 0, NULL, NULL);
    return s == CL_SUCCESS ? 0 : fail(be, "copy", s, err);
}

static int ocl_fill_zero(rc_backend *be, rc_buffer *b, size_t off, size_t bytes, rc_error *err)
{
    cl_uchar z = 0;
    if (!bytes)
        return 0;
    cl_int s = clEnqueueFillBuffer(ocl(be)->queue, rci_ocl_mem(b), &z, 1, off, bytes, 0, NULL, NULL);
    return s == CL_SUCCESS ? 0 : fail(be, "fill", s, err);
}

static int ocl_wait(rc_backend *be, rc_error *err)
{
    cl_int s = clFinish(ocl(be)->queue);
    return s == CL_SUCCESS ? 0 : fail(be, "clFinish", s, err);
}

/* device memory: the collectives stage through host memory */
static void *ocl_host_address(const rc_backend *be, const rc_buffer *b, size_t off)
{
    (void)be, (void)b, (void)off;
    return NULL;
}

/* ---- the program ------------------------------------------------------------------------ */

static const char *kernel_names[OCL_KERNEL_COUNT] = {
    "k_fill", "k_unary", "k_act", "k_binary", "k_where", "k_equal", "k_copy", "k_cast_f32_i32",
    "k_cast_i32_f32", "k_reduce", "k_dropout", "k_adamw", "k_sgd", "k_accumulate", "k_sum_squares",
    "k_softmax", "k_layer_norm", "k_rms_norm", "k_check_ids", "k_embedding", "k_embedding_grad",
    "k_one_hot", "k_ce_rows", "k_ce_mean", "k_ce_scale", "k_ce_grad", "k_rope", "k_reduce_part",
    "k_reduce_finish", "k_cast", "k_matmul_rows", "k_conv2d", "k_conv2d_grad_input",
    "k_conv2d_grad_weight", "k_pool2d", "k_pool2d_grad", "k_normal",
};

/* the start of the compiler's log (its first errors), in err */
static int build_failed(rci_ocl *o, cl_program prog, cl_int s, rc_error *err)
{
    size_t len = 0;
    clGetProgramBuildInfo(prog, o->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
    char *log = calloc(1, len + 1);
    if (!log)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: kernel build failed (%s)", o->name,
                            rci_ocl_status(s));
    clGetProgramBuildInfo(prog, o->device, CL_PROGRAM_BUILD_LOG, len, log, NULL);
    log[len] = 0;
    for (char *c = log; *c; c++)
        *c = *c == '\n' ? ' ' : *c;   /* one line */
    rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel build failed (%s): %.*s", o->name,
                 rci_ocl_status(s), BUILD_LOG_MAX, log);
    free(log);
    return -1;
}

/* the program of src built with the backend's options and `extra` ones */
static int build_with(rci_ocl *o, const char *src, const char *extra, cl_program *out, rc_error *err)
{
    cl_int s;
    cl_program prog = clCreateProgramWithSource(o->ctx, 1, &src, NULL, &s);
    *out = NULL;
    if (s != CL_SUCCESS)
        return fail(&o->be, "clCreateProgramWithSource", s, err);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(o->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    char opts[192];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2%s%s%s",
             fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? " -cl-fp32-correctly-rounded-divide-sqrt" : "",
             o->fp64 ? " -DRC_FP64" : "", extra);
    s = clBuildProgram(prog, 1, &o->device, opts, NULL, NULL);
    if (s != CL_SUCCESS) {
        build_failed(o, prog, s, err);
        clReleaseProgram(prog);
        return -1;
    }
    *out = prog;
    return 0;
}

int rci_ocl_build_program(rci_ocl *o, const char *src, cl_program *out, rc_error *err)
{
    return build_with(o, src, "", out, err);
}

/* the kernels of program prog (rope only with fp64) */
static int create_kernels(rci_ocl *o, cl_program prog, cl_kernel *kernels, rc_error *err)
{
    for (int k = 0; k < OCL_KERNEL_COUNT; k++) {
        if (k == OCL_ROPE && !o->fp64)
            continue;
        cl_int s;
        kernels[k] = clCreateKernel(prog, kernel_names[k], &s);
        if (s != CL_SUCCESS)
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel %s: %s", o->name,
                                kernel_names[k], rci_ocl_status(s));
    }
    return 0;
}

int rci_ocl_build(rci_ocl *o, rc_error *err)
{
    if (rci_ocl_build_program(o, rci_ocl_source, &o->program, err))
        return -1;
    return create_kernels(o, o->program, o->kernels, err);
}

/* kernel k of the program for values stored as `store`, building a 16-bit one first */
static cl_kernel kernel_for(rci_ocl *o, rc_dtype store, rci_ocl_kernel k, rc_error *err)
{
    if (store != RC_BF16 && store != RC_F16)
        return o->kernels[k];
    int h = store == RC_F16;
    if (!o->half_program[h]) {
        const char *opt = h ? " -DRC_STORE_F16" : " -DRC_STORE_BF16";
        if (build_with(o, rci_ocl_source, opt, &o->half_program[h], err))
            return NULL;
        if (create_kernels(o, o->half_program[h], o->half_kernels[h], err))
            return NULL;
    }
    if (!o->half_kernels[h][k])
        rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel %s for %s values was not built", o->name,
                     kernel_names[k], rc_dtype_name(store));
    return o->half_kernels[h][k];
}

size_t rci_ocl_scratch_grown(size_t held, size_t need)
{
    return need > held ? need : held;
}

/* The scratch counts in the backend's used and peak bytes (the 16-bit products' f32
 * copies are device memory like any other), as the CPU's 16-bit scratch does. */
cl_mem rci_ocl_scratch(rci_ocl *o, size_t bytes, rc_error *err)
{
    if (rci_ocl_scratch_grown(o->scratch_bytes, bytes) == o->scratch_bytes)
        return o->scratch;
    if (o->scratch)
        clReleaseMemObject(o->scratch);
    o->be.used_bytes -= o->scratch_bytes;
    o->scratch_bytes = 0;
    cl_int s;
    o->scratch = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, bytes, NULL, &s);
    if (s != CL_SUCCESS) {
        o->scratch = NULL;
        out_of_memory(&o->be, bytes, "scratch memory for a kernel", err);
        return NULL;
    }
    o->scratch_bytes = bytes;
    o->be.used_bytes += bytes;
    o->be.peak_bytes = o->be.used_bytes > o->be.peak_bytes ? o->be.used_bytes : o->be.peak_bytes;
    return o->scratch;
}

int rci_ocl_launch(rci_ocl *o, rci_ocl_kernel k, const rci_ocl_arg *args, int nargs, size_t n,
                   const char *what, rc_error *err)
{
    return rci_ocl_launch_as(o, RC_F32, k, args, nargs, n, what, err);
}

int rci_ocl_launch_as(rci_ocl *o, rc_dtype store, rci_ocl_kernel k, const rci_ocl_arg *args,
                      int nargs, size_t n, const char *what, rc_error *err)
{
    if (n == 0)
        return 0;   /* OpenCL refuses an empty range */
    cl_kernel kern = kernel_for(o, store, k, err);
    if (!kern)
        return -1;
    for (int i = 0; i < nargs; i++) {
        cl_int s = clSetKernelArg(kern, (cl_uint)i, args[i].size, args[i].value);
        if (s != CL_SUCCESS)
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s: argument %d of %s: %s", o->name,
                                what, i, kernel_names[k], rci_ocl_status(s));
    }
    cl_int s = clEnqueueNDRangeKernel(o->queue, kern, 1, NULL, &n, NULL, 0, NULL, NULL);
    if (s != CL_SUCCESS)
        return rc_error_set(err, s == CL_OUT_OF_RESOURCES || s == CL_MEM_OBJECT_ALLOCATION_FAILURE
                                     ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                            "%s: %s: running %s over %zu items: %s", o->name, what,
                            kernel_names[k], n, rci_ocl_status(s));
    return 0;
}

/* ---- opening a device --------------------------------------------------------------------- */

static void ocl_close(rci_ocl *o)
{
    for (int k = 0; k < OCL_KERNEL_COUNT; k++) {
        if (o->kernels[k])
            clReleaseKernel(o->kernels[k]);
        for (int h = 0; h < 2; h++)
            if (o->half_kernels[h][k])
                clReleaseKernel(o->half_kernels[h][k]);
    }
    if (o->program)
        clReleaseProgram(o->program);
    for (int h = 0; h < 2; h++)
        if (o->half_program[h])
            clReleaseProgram(o->half_program[h]);
    if (o->scratch)
        clReleaseMemObject(o->scratch);
    if (o->fault)
        clReleaseMemObject(o->fault);
    if (o->queue)
        clReleaseCommandQueue(o->queue);
    if (o->ctx)
        clReleaseContext(o->ctx);
    free(o);
}

static rci_ocl *ocl_open(int index, rc_error *err)
{
    device_ref ref;
    if (find_device(index, &ref, err))
        return NULL;
    rci_ocl *o = calloc(1, sizeof *o);
    if (!o) {
        rc_error_set(err, RC_ERR_MEMORY, "opencl: out of host memory");
        return NULL;
    }
    snprintf(o->name, sizeof o->name, "opencl:%d", index);
    o->be = (rc_backend){
        .name = o->name,
        .buffer_alloc = ocl_alloc,
        .buffer_free = ocl_free,
        .upload = ocl_upload,
        .download = ocl_download,
        .copy = ocl_copy,
        .fill_zero = ocl_fill_zero,
        .supports = rci_ocl_supports,
        .run_node = rci_ocl_run_node,
        .scratch_bytes = rci_ocl_scratch_bytes,
        .wait = ocl_wait,
        .update = rci_ocl_update,
        .sum_squares = rci_ocl_sum_squares,
        .accumulate = rci_ocl_accumulate,
        .round_f32 = rci_ocl_round_f32,
        .host_address = ocl_host_address,
    };
    o->device = ref.device;
    cl_ulong global = 0, max_alloc = 0;
    clGetDeviceInfo(ref.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    clGetDeviceInfo(ref.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    o->be.total_bytes = (size_t)global;
    o->max_alloc = max_alloc ? (size_t)max_alloc : (size_t)global;
    o->fp64 = has_fp64(ref.device);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ref.platform, 0};
    cl_int s;
    o->ctx = clCreateContext(props, 1, &ref.device, NULL, NULL, &s);
    if (s == CL_SUCCESS)
        o->queue = clCreateCommandQueue(o->ctx, ref.device, 0, &s);
    if (s == CL_SUCCESS)
        o->fault = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, sizeof(cl_int), NULL, &s);
    if (s != CL_SUCCESS) {
        fail(&o->be, !o->ctx ? "clCreateContext" : !o->queue ? "clCreateCommandQueue" : "clCreateBuffer",
             s, err);
        ocl_close(o);
        return NULL;
    }
    if (rci_ocl_build(o, err)) {
        ocl_close(o);
        return NULL;
    }
    return o;
}

/* the devices opened so far, kept for the process */
static rci_ocl *opened[MAX_DEVICES];

/* At exit, the work still queued finishes first: a process that returns from main with
 * kernels queued would otherwise tear down the runtime (PoCL compiles queued kernels in
 * its own threads) under the work. */
static void finish_all(void)
{
    for (int i = 0; i < MAX_DEVICES; i++)
        if (opened[i])
            clFinish(opened[i]->queue);
}

rc_backend *rc_backend_opencl(int index, rc_error *err)
{
    static int registered;
    if (!registered)
        registered = atexit(finish_all) == 0;
    if (index < 0 || index >= MAX_DEVICES) {
        rc_error_set(err, RC_ERR_ARG, "opencl: no device %d", index);
        return NULL;
    }
    if (!opened[index])
        opened[index] = ocl_open(index, err);
    return opened[index] ? &opened[index]->be : NULL;
}
