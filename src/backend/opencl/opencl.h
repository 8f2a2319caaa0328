/* opencl.h - what the OpenCL backend's files share: the device's state behind the
 * rc_backend table and the shared layer's rci_gpu (src/backend/gpu/gpu.h), and the
 * rci_gpu_ops the OpenCL device supplies to that layer. The files stack as context.c (the
 * device: memory, fills, reads, the programs, launching a kernel) under blas.c (CLBlast's
 * GEMM) under opencl.c (the backend's table and the ops); the node and optimizer work is
 * the shared layer's (gpu/run.c, gpu/update.c), which calls the device only through the ops.
 *
 * One device, one context, one in-order queue: kernels, copies and fills run in the
 * order they are queued, so a node's inputs are written before it reads them and
 * nothing waits on the host. The host waits only where it needs a value: download (a
 * blocking read), wait (clFinish), sum_squares (its partial sums), an overlapping copy,
 * and the id checks of embedding, one-hot and cross-entropy (one int read back). A
 * buffer is one cl_mem; tensors are (cl_mem, element offset) pairs passed to kernels as
 * arguments (sub-buffers would need the device's base-address alignment). */
#ifndef REDCO_OPENCL_H
#define REDCO_OPENCL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "gpu/gpu.h"

/* One opened device: the shared layer's state first (whose rc_backend table comes first),
 * so a backend pointer is an rci_gpu and this too. */
typedef struct {
    rci_gpu gpu;
    int index;                    /* N */
    char name[32];                /* "opencl:N" */
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    cl_program program;           /* f32 values (and i32) */
    cl_kernel kernels[RCI_K_COUNT];
    cl_program half_program[2];   /* bf16, f16 values: built on first use */
    cl_kernel half_kernels[2][RCI_K_COUNT];
    size_t max_alloc;             /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
} rci_ocl;

static inline rci_ocl *rci_ocl_of(rci_gpu *g)
{
    return (rci_ocl *)(void *)g;
}

/* The device's buffer object of a redco buffer. */
static inline cl_mem rci_ocl_mem(const rc_buffer *b)
{
    return (cl_mem)b->impl;
}

/* ---- the device (context.c, the bottom of the backend) ---- */

enum { RCI_OCL_MAX_DEVICES = 64 };   /* over all platforms */

/* Device `index` opened: context, in-order queue, and the program of kernels.cl for f32
 * values with its kernels (on a build failure the error holds the compiler's log; the
 * programs for bf16 and f16 values, kernels.cl with RC_STORE_BF16 and RC_STORE_F16, are
 * built when a node first needs them). The table's name and memory figures are set, its
 * functions and the ops are not (opencl.c's). NULL with err set. */
rci_ocl *rci_ocl_open(int index, rc_error *err);
/* Releases everything of an opened device (its work finished first; its scratch freed
 * before, rci_gpu_scratch_free) and frees o. */
void rci_ocl_close(rci_ocl *o);

/* A short name of an OpenCL status code ("CL_OUT_OF_RESOURCES", ...). */
const char *rci_ocl_status(cl_int status);
/* The error of an OpenCL call `what` that returned s (memory or unsupported); -1. */
int rci_ocl_fail(const rc_backend *be, const char *what, cl_int s, rc_error *err);

/* Builds one program from OpenCL C source with the backend's options (*out NULL on a
 * failure, whose error ends with the compiler's log). */
int rci_ocl_build_program(rci_ocl *o, const char *src, cl_program *out, rc_error *err);

/* The device's rci_gpu_ops entries but the GEMM's (gpu.h says what each does). */
int rci_ocl_mem_alloc(rci_gpu *g, size_t bytes, rci_gpu_mem *out, const char *why, rc_error *err);
void rci_ocl_mem_free(rci_gpu *g, rci_gpu_mem m);
int rci_ocl_fill(rci_gpu *g, rci_gpu_mem m, size_t off, const void *pattern, size_t psize, size_t bytes,
                 rc_error *err);
int rci_ocl_read(rci_gpu *g, rci_gpu_mem m, size_t off, void *host, size_t bytes, rc_error *err);
int rci_ocl_launch(rci_gpu *g, rc_dtype store, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs, size_t n,
                   size_t group, const char *what, rc_error *err);

/* ---- CLBlast's GEMM (blas.c): the ops' matmul and matmul_scratch ---- */
int rci_ocl_matmul(rci_gpu *g, const rc_tensor *node, const rci_matmul_dims *d, rc_dtype store,
                   const rci_gpu_place *out, const rci_gpu_place *in, rc_error *err);
size_t rci_ocl_matmul_scratch(const rci_gpu *g, const rci_matmul_dims *d, rc_dtype store);

#endif
