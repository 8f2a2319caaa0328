/* context.c - one OpenCL device at the bottom of the OpenCL backend: finding devices
 * (the public listing), opening one (context, in-order queue, the kernel programs built
 * once per storage), errors named after OpenCL's status codes, and the device's
 * rci_gpu_ops but the GEMM: memory, fills, reads and launching a kernel. The files above
 * it (blas.c, and opencl.c, the backend's table) call it; it calls none of them (of the
 * shared layer, only its kernel names and out-of-memory error). */

#include "opencl.h"
#include "redco/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_PLATFORMS = 16,
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
        cl_device_id devs[RCI_OCL_MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, RCI_OCL_MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < RCI_OCL_MAX_DEVICES && n < cap; d++) {
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
    device_ref refs[RCI_OCL_MAX_DEVICES];
    return list_devices(refs, RCI_OCL_MAX_DEVICES, err);
}

/* device `index` of the list; -1 with err set when out of range */
static int find_device(int index, device_ref *ref, rc_error *err)
{
    device_ref refs[RCI_OCL_MAX_DEVICES];
    int n = list_devices(refs, RCI_OCL_MAX_DEVICES, err);
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

/* ---- errors ---------------------------------------------------------------------------- */

int rci_ocl_fail(const rc_backend *be, const char *what, cl_int s, rc_error *err)
{
    return rc_error_set(err, s == CL_MEM_OBJECT_ALLOCATION_FAILURE || s == CL_OUT_OF_RESOURCES
                                 ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                        "%s: %s failed: %s", be->name, what, rci_ocl_status(s));
}

/* ---- the program ------------------------------------------------------------------------ */

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
        return rci_ocl_fail(&o->gpu.be, "clCreateProgramWithSource", s, err);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(o->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    char opts[192];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2%s%s%s%s",
             fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? " -cl-fp32-correctly-rounded-divide-sqrt" : "",
             o->gpu.fp64 ? " -DRC_FP64" : "", o->gpu.tiles ? " -DRC_TILES" : "", extra);
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

/* the kernels of program prog (rope only with fp64, the tile kernels only with tiles) */
static int create_kernels(rci_ocl *o, cl_program prog, cl_kernel *kernels, rc_error *err)
{
    for (int k = 0; k < RCI_K_COUNT; k++) {
        if ((k == RCI_K_ROPE && !o->gpu.fp64) || (rci_gpu_is_tile_kernel((rci_gpu_kernel)k) && !o->gpu.tiles))
            continue;
        cl_int s;
        kernels[k] = clCreateKernel(prog, rci_gpu_kernel_names[k], &s);
        if (s != CL_SUCCESS)
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: kernel %s: %s", o->name,
                                rci_gpu_kernel_names[k], rci_ocl_status(s));
    }
    return 0;
}

static int build(rci_ocl *o, rc_error *err)
{
    if (rci_ocl_build_program(o, rci_gpu_source, &o->program, err))
        return -1;
    return create_kernels(o, o->program, o->kernels, err);
}

/* kernel k of the program for values stored as `store`, building a 16-bit one first */
static cl_kernel kernel_for(rci_ocl *o, rc_dtype store, rci_gpu_kernel k, rc_error *err)
{
    if (store != RC_BF16 && store != RC_F16) {
        if (!o->kernels[k])
            rci_gpu_kernel_absent(&o->gpu.be, k, err);
        return o->kernels[k];
    }
    int h = store == RC_F16;
    if (!o->half_program[h]) {
        const char *opt = h ? " -DRC_STORE_F16" : " -DRC_STORE_BF16";
        if (build_with(o, rci_gpu_source, opt, &o->half_program[h], err))
            return NULL;
        if (create_kernels(o, o->half_program[h], o->half_kernels[h], err))
            return NULL;
    }
    if (!o->half_kernels[h][k])
        rci_gpu_kernel_absent(&o->gpu.be, k, err);
    return o->half_kernels[h][k];
}

/* ---- memory, fills, reads and launching (the ops) ------------------------------------------ */

int rci_ocl_mem_alloc(rci_gpu *g, size_t bytes, rci_gpu_mem *out, const char *why, rc_error *err)
{
    cl_int s;
    cl_mem m = clCreateBuffer(rci_ocl_of(g)->ctx, CL_MEM_READ_WRITE, bytes, NULL, &s);
    *out = NULL;
    if (s != CL_SUCCESS)
        return rci_gpu_out_of_memory(&g->be, bytes, why, err);
    *out = m;
    return 0;
}

void rci_ocl_mem_free(rci_gpu *g, rci_gpu_mem m)
{
    (void)g;
    clReleaseMemObject((cl_mem)m);
}

int rci_ocl_fill(rci_gpu *g, rci_gpu_mem m, size_t off, const void *pattern, size_t psize, size_t bytes,
                 rc_error *err)
{
    cl_int s = clEnqueueFillBuffer(rci_ocl_of(g)->queue, (cl_mem)m, pattern, psize, off, bytes, 0, NULL, NULL);
    return s == CL_SUCCESS ? 0 : rci_ocl_fail(&g->be, "fill", s, err);
}

int rci_ocl_read(rci_gpu *g, rci_gpu_mem m, size_t off, void *host, size_t bytes, rc_error *err)
{
    cl_int s = clEnqueueReadBuffer(rci_ocl_of(g)->queue, (cl_mem)m, CL_TRUE, off, bytes, host, 0, NULL, NULL);
    return s == CL_SUCCESS ? 0 : rci_ocl_fail(&g->be, "download", s, err);
}

int rci_ocl_launch(rci_gpu *g, rc_dtype store, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs, size_t n,
                   size_t group, const char *what, rc_error *err)
{
    rci_ocl *o = rci_ocl_of(g);
    if (n == 0)
        return 0;   /* OpenCL refuses an empty range */
    cl_kernel kern = kernel_for(o, store, k, err);
    if (!kern)
        return -1;
    for (int i = 0; i < nargs; i++) {
        cl_int s = clSetKernelArg(kern, (cl_uint)i, args[i].size, args[i].value);
        if (s != CL_SUCCESS)
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s: argument %d of %s: %s", o->name,
                                what, i, rci_gpu_kernel_names[k], rci_ocl_status(s));
    }
    cl_int s = clEnqueueNDRangeKernel(o->queue, kern, 1, NULL, &n, group ? &group : NULL, 0, NULL, NULL);
    if (s != CL_SUCCESS)
        return rc_error_set(err, s == CL_OUT_OF_RESOURCES || s == CL_MEM_OBJECT_ALLOCATION_FAILURE
                                     ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                            "%s: %s: running %s over %zu items in groups of %zu: %s", o->name, what,
                            rci_gpu_kernel_names[k], n, group, rci_ocl_status(s));
    return 0;
}

/* ---- opening a device --------------------------------------------------------------------- */

void rci_ocl_close(rci_ocl *o)
{
    if (o->queue)
        clFinish(o->queue);
    for (int k = 0; k < RCI_K_COUNT; k++) {
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
    if (o->gpu.fault)
        clReleaseMemObject((cl_mem)o->gpu.fault);
    if (o->queue)
        clReleaseCommandQueue(o->queue);
    if (o->ctx)
        clReleaseContext(o->ctx);
    free(o);
}

rci_ocl *rci_ocl_open(int index, rc_error *err)
{
    device_ref ref;
    if (find_device(index, &ref, err))
        return NULL;
    rci_ocl *o = calloc(1, sizeof *o);
    if (!o) {
        rc_error_set(err, RC_ERR_MEMORY, "opencl: out of host memory");
        return NULL;
    }
    o->index = index;
    snprintf(o->name, sizeof o->name, "opencl:%d", index);
    o->gpu.be.name = o->name;   /* for errors; opencl.c fills in the table's functions and the ops */
    o->device = ref.device;
    cl_ulong global = 0, max_alloc = 0;
    clGetDeviceInfo(ref.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    clGetDeviceInfo(ref.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    o->gpu.be.total_bytes = (size_t)global;
    o->max_alloc = max_alloc ? (size_t)max_alloc : (size_t)global;
    o->gpu.fp64 = has_fp64(ref.device);
    cl_ulong local = 0;   /* the tile kernels where their local memory fits (gpu.h) */
    clGetDeviceInfo(ref.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    o->gpu.tiles = local >= RCI_GPU_TILE_LOCAL_BYTES;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ref.platform, 0};
    cl_int s;
    o->ctx = clCreateContext(props, 1, &ref.device, NULL, NULL, &s);
    if (s == CL_SUCCESS)
        o->queue = clCreateCommandQueue(o->ctx, ref.device, 0, &s);
    if (s == CL_SUCCESS)
        o->gpu.fault = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, sizeof(cl_int), NULL, &s);
    if (s != CL_SUCCESS) {
        rci_ocl_fail(&o->gpu.be, !o->ctx ? "clCreateContext" : !o->queue ? "clCreateCommandQueue" : "clCreateBuffer",
                     s, err);
        rci_ocl_close(o);
        return NULL;
    }
    if (build(o, err)) {
        rci_ocl_close(o);
        return NULL;
    }
    return o;
}
