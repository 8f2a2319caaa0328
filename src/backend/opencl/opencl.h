/* opencl.h - what the OpenCL backend's files share: the device's state behind the
 * rc_backend table, the kernels of its program, and how a kernel is launched. The files
 * stack as context.c (the device) under run.c and update.c (nodes, optimizer work) under
 * opencl.c (the backend's table).
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

#include "internal.h"
#include "backend.h"

/* The kernels of kernels.cl, by index. */
typedef enum {
    OCL_FILL = 0,
    OCL_UNARY,
    OCL_ACT,
    OCL_BINARY,
    OCL_WHERE,
    OCL_EQUAL,
    OCL_COPY,
    OCL_CAST_F32_I32,
    OCL_CAST_I32_F32,
    OCL_REDUCE,
    OCL_DROPOUT,
    OCL_ADAMW,
    OCL_SGD,
    OCL_ACCUMULATE,
    OCL_SUM_SQUARES,
    OCL_SOFTMAX,
    OCL_LAYER_NORM,
    OCL_RMS_NORM,
    OCL_CHECK_IDS,
    OCL_EMBEDDING,
    OCL_EMBEDDING_GRAD,
    OCL_ONE_HOT,
    OCL_CE_ROWS,
    OCL_CE_MEAN,
    OCL_CE_SCALE,
    OCL_CE_GRAD,
    OCL_ROPE,              /* built only with fp64 (its angles are in double, as the CPU's) */
    OCL_REDUCE_PART,
    OCL_REDUCE_FINISH,
    OCL_CAST,              /* casts from or to 16 bits */
    OCL_MATMUL_ROWS,       /* a few rows times 16-bit weights read directly */
    OCL_CONV2D,
    OCL_CONV2D_GRAD_INPUT,
    OCL_CONV2D_GRAD_WEIGHT,
    OCL_POOL2D,
    OCL_POOL2D_GRAD,
    OCL_NORMAL,
    OCL_KERNEL_COUNT
} rci_ocl_kernel;

/* One opened device: the rc_backend table first, so a backend pointer is this too. */
typedef struct {
    rc_backend be;
    int index;                    /* N */
    char name[32];                /* "opencl:N" */
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    cl_program program;           /* f32 values (and i32) */
    cl_kernel kernels[OCL_KERNEL_COUNT];
    cl_program half_program[2];   /* bf16, f16 values: built on first use */
    cl_kernel half_kernels[2][OCL_KERNEL_COUNT];
    int fp64;                     /* the device has cl_khr_fp64: sums accumulate in double */
    size_t max_alloc;             /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    cl_mem scratch;               /* the kernels' temporaries (grown on demand) */
    size_t scratch_bytes;
    cl_mem fault;                 /* one int: the first bad id a check found */
} rci_ocl;

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
 * functions are not (opencl.c's). NULL with err set. */
rci_ocl *rci_ocl_open(int index, rc_error *err);
/* Releases everything of an opened device (its work finished first) and frees o. */
void rci_ocl_close(rci_ocl *o);

/* A short name of an OpenCL status code ("CL_OUT_OF_RESOURCES", ...). */
const char *rci_ocl_status(cl_int status);
/* The error of an OpenCL call `what` that returned s (memory or unsupported); -1. */
int rci_ocl_fail(const rc_backend *be, const char *what, cl_int s, rc_error *err);
/* The error of an allocation of `bytes` the device cannot hold, and why; -1. */
int rci_ocl_out_of_memory(const rc_backend *be, size_t bytes, const char *why, rc_error *err);

/* Builds one program from OpenCL C source with the backend's options (*out NULL on a
 * failure, whose error ends with the compiler's log). */
int rci_ocl_build_program(rci_ocl *o, const char *src, cl_program *out, rc_error *err);

/* Sets the args of kernel k (nargs of them: sizes and addresses) and runs it over n
 * work-items (n > 0); the error names `what`. */
typedef struct {
    size_t size;
    const void *value;
} rci_ocl_arg;
int rci_ocl_launch(rci_ocl *o, rci_ocl_kernel k, const rci_ocl_arg *args, int nargs, size_t n,
                   const char *what, rc_error *err);
/* The same with kernel k of the program for float values stored as `store` (RC_F32,
 * RC_BF16 or RC_F16; a 16-bit program is built on its first launch). */
int rci_ocl_launch_as(rci_ocl *o, rc_dtype store, rci_ocl_kernel k, const rci_ocl_arg *args,
                      int nargs, size_t n, const char *what, rc_error *err);

/* At least `bytes` of scratch device memory, valid until the next call (work queued
 * before a regrowth keeps the old buffer alive); NULL with err set. */
cl_mem rci_ocl_scratch(rci_ocl *o, size_t bytes, rc_error *err);
/* The growth policy of that scratch: the bytes held after a need of `need` with `held`
 * held (released and made again exactly as large, when larger) */
size_t rci_ocl_scratch_grown(size_t held, size_t need);

/* ---- the backend's node and optimizer work (run.c, update.c), above the device ---- */
int rci_ocl_supports(const rc_backend *be, rc_op op, rc_dtype t);
int rci_ocl_run_node(rc_backend *be, const rci_node_run *r, rc_error *err);
/* the scratch held after running node (backend.h's scratch_bytes) */
size_t rci_ocl_scratch_bytes(const rc_backend *be, const rc_tensor *node, size_t held);
int rci_ocl_update(rc_backend *be, const rci_update *u, rc_error *err);
int rci_ocl_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                       size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err);
int rci_ocl_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err);
int rci_ocl_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts, double *out,
                        rc_error *err);

/* the device source (dialect.h, scalar.h and kernels.cl: gpu.h's rci_gpu_source, written
 * into the build directory by CMake) */
extern const char rci_gpu_source[];

#endif
