/* backend.h - the seam between redco and the devices that run it.
 *
 * A backend owns device memory (buffers) and runs work on it: the graph's nodes, and the
 * optimizer's updates. Everything above this header (the executor, the trainer, the
 * predictor, generation, checkpoints, collectives) names memory as (buffer, offset) and
 * moves values between host and device only through upload / download here. Only the
 * files of a backend (src/backend/NAME/) see what a buffer is made of.
 *
 * A backend is a table of functions. The CPU backend (src/backend/cpu/) keeps buffers in
 * host memory and runs the kernels in place: no copy is added on the CPU. Work may be
 * queued: wait() returns when everything queued so far is done; download() waits for
 * the work that writes what it reads. */
#ifndef REDCO_BACKEND_H
#define REDCO_BACKEND_H

#include "internal.h"

/* A place in device memory: byte `off` of buffer `buf`. */
typedef struct {
    rc_buffer *buf;
    size_t off;
} rci_mem;

/* One node to run: the node (op, shape, parameters, dtypes) and where its values are. */
typedef struct {
    const rc_tensor *node;
    rci_mem out;                  /* rc_tensor_nbytes(node) bytes, uninitialised, never
                                     overlapping an input */
    rci_mem in[RC_MAX_SRC];       /* src[k]'s values (buf NULL where src[k] is NULL) */
    uint64_t run_key;             /* the plan's key for this node's draws: its per-run key
                                     (dropout, RC_RNG_RUN normals) or its step key
                                     (RC_RNG_STEP normals) */
    rci_mem kept;                 /* the block of rci_kept_bytes an ATTENTION writes for its
                                     backward, or its ATTENTION_STATS reads (src0's; buf
                                     NULL for other nodes) */
} rci_node_run;

/* One parameter's share of an optimizer update: n f32 at element `at` of the flat
 * parameter, gradient and moment buffers, with its own decoupled weight decay. */
typedef struct {
    int64_t at, n;
    double weight_decay;          /* w *= 1 - lr * wd (0 for tensors excluded from decay) */
} rci_update_part;

/* One optimizer step over all parts (AdamW reads and writes m and v; SGD ignores them).
 * The gradient is first multiplied by grad_scale in place (clipping; 1: untouched).
 * Parts index the layout of grad. m and v may hold only a share of it (optimizer state
 * sharded over the data axis): their element 0 is element state_at of grad, so a part's
 * element k pairs with m[k - state_at] (0: the same layout); likewise w (an f32 master
 * share) with w[k - w_at]. */
typedef struct {
    rc_buffer *w, *grad, *m, *v;
    const rci_update_part *parts;
    int nparts;
    double lr, beta1, beta2, eps;
    int64_t step;                 /* AdamW: updates done including this one (from 1) */
    double grad_scale;
    int adamw;                    /* 1: AdamW, 0: SGD */
    int64_t state_at;             /* where m[0] and v[0] sit in the layout of grad */
    int64_t w_at;                 /* where w[0] sits in the layout of grad */
} rci_update;

/* AdamW's per-step constants, as torch.optim.AdamW computes them, so trajectories agree to
 * float rounding: the bias corrections are hoisted, but divided by (as torch does), not
 * multiplied by an inverse (that would round differently). (shared.c) */
typedef struct {
    float b1, b2, c1, c2, eps, step_size, bc2_sqrt;
} rci_adam_consts;
rci_adam_consts rci_adam_setup(const rci_update *u);

/* A product of at most this many rows (batches times m) by a shared operand B (a decoding
 * step) reads B once as it is stored, without a GEMM: both backends' rule (shared.c). */
enum { RCI_MATMUL_FEW_ROWS = 4 };
int rci_matmul_few_rows(const rci_matmul_dims *d);

/* A product's row strides and batch strides of A, B and C as stored (ld[3], st[3]): d's
 * layout fields where set, else contiguous matrices (a stride of 0 for an operand shared by
 * every batch); returns 1 when d sets any (the product is then one strided batch, never its
 * batches stacked into rows). (shared.c) */
int rci_matmul_layout(const rci_matmul_dims *d, int64_t *ld, int64_t *st);

/* The axes of shape[nd] simplified for k stride sets st[j]: size-1 axes dropped, axes that
 * continue each other in every set merged, into mshape and mst (zero beyond the merged
 * axes); returns the merged axes, >= 1 (no axis left: one of size 1, strides 0). */
int rci_merge_axes(int nd, const int64_t *shape, int k, int64_t st[][RC_MAX_DIMS], int64_t *mshape,
                   int64_t mst[][RC_MAX_DIMS]);

struct rc_backend {
    const char *name;             /* "cpu", "opencl:0" ... */
    /* buffers: alloc sets b->impl to bytes of memory, zero-filled when asked (a plan's arena
     * is not: its kernels write every element before any read); free releases it */
    int (*buffer_alloc)(rc_backend *be, rc_buffer *b, size_t bytes, int zero, rc_error *err);
    void (*buffer_free)(rc_backend *be, rc_buffer *b);
    int (*upload)(rc_backend *be, rc_buffer *b, size_t off, const void *host, size_t bytes,
                  rc_error *err);
    int (*download)(rc_backend *be, const rc_buffer *b, size_t off, void *host, size_t bytes,
                    rc_error *err);
    int (*copy)(rc_backend *be, rc_buffer *dst, size_t doff, const rc_buffer *src, size_t soff,
                size_t bytes, rc_error *err);
    int (*fill_zero)(rc_backend *be, rc_buffer *b, size_t off, size_t bytes, rc_error *err);
    /* 1 when the backend has a kernel for op with output dtype t */
    int (*supports)(const rc_backend *be, rc_op op, rc_dtype t);
    int (*run_node)(rc_backend *be, const rci_node_run *r, rc_error *err);
    /* the bytes of scratch (device memory the kernels keep between nodes, counted in
     * used_bytes) the backend holds after running node when it held `held` before: the
     * node's need as its kernels size it, under the backend's growth policy */
    size_t (*scratch_bytes)(const rc_backend *be, const rc_tensor *node, size_t held);
    int (*wait)(rc_backend *be, rc_error *err);
    /* optimizer work: one step over every part; out[k] = the sum of squares of part k's
     * f32 in b (its at, n), in double, in an order that does not depend on the thread count:
     * all parts in one call, so a step reads its norm back from a device once */
    int (*update)(rc_backend *be, const rci_update *u, rc_error *err);
    int (*sum_squares)(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts,
                       double *out, rc_error *err);
    /* gradient accumulation over n elements into f32 (element dat of dst): dst = scale * src,
     * or dst += scale * src (add); src at byte soff holds n elements of dtype st (f32, bf16 or
     * f16: the 16-bit gradients of a 16-bit step), each converted to f32 exactly first */
    int (*accumulate)(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                      size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err);
    /* n f32 of src from element sat rounded (nearest, ties to even, as rc_convert) into
     * elements [dat, dat + n) of dst, of dtype dt (bf16 or f16): the f32 master weights made
     * into the 16-bit weights the steps read */
    int (*round_f32)(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                     int64_t sat, int64_t n, rc_error *err);
    /* the host address of byte `off` of b when b is host memory (the CPU), else NULL: the
     * collectives hand it to MPI directly instead of staging through host memory */
    void *(*host_address)(const rc_backend *be, const rc_buffer *b, size_t off);
    /* frees the device's own resources (context, queue, programs, scratch) and the table
     * itself; NULL for a backend that holds none (the CPU's). Called once, by
     * rci_backend_release_idle, when the last open is closed and no buffer is left. */
    void (*release)(rc_backend *be);
    int tf32;                     /* f32 products may round their operands to TF32 on tensor
                                     cores (rc_device_allow_tf32; only CUDA's cuBLAS does) */
    size_t total_bytes;           /* the device's memory (0: unknown) */
    size_t used_bytes;            /* held by this backend's buffers now */
    size_t peak_bytes;            /* the most ever held */
    int opens;                    /* rc_device_open calls not yet closed (device.c) */
    int closing;                  /* the last open was closed: released with the last buffer */
    int64_t buffers;              /* buffers alive (buffer.c) */
};

struct rc_buffer {
    rc_backend *be;
    size_t size;
    void *impl;                   /* the backend's handle (host memory on the CPU) */
};

/* The backends (users open them by name: rc_device_open, device.c): the CPU's
 * (src/backend/cpu/), OpenCL device `index`'s (src/backend/opencl/) and CUDA device
 * `index`'s (src/backend/cuda/, only in a build with CUDA's headers: REDCO_HAVE_CUDA),
 * opened on the first call and kept until the last open is closed and the last buffer
 * freed; NULL with err set when it cannot be. */
rc_backend *rci_backend_cpu(void);
rc_backend *rci_backend_opencl(int index, rc_error *err);
rc_backend *rci_backend_cuda(int index, rc_error *err);

/* The scratch bytes be holds after running nodes[0..n) in that order from `held`: leaves,
 * views and the model-axis collectives (the plan's own work) take none. (buffer.c) */
size_t rci_backend_scratch_peak(const rc_backend *be, size_t held, const rc_tensor *const *nodes, int n);

/* Releases be (its release entry) when it is closing, no open remains and no buffer is
 * left; after that be must not be used. (buffer.c) */
void rci_backend_release_idle(rc_backend *be);

/* A buffer whose bytes are not zero-filled (a plan's arena). */
rc_buffer *rci_buffer_new_uninit(rc_backend *be, size_t bytes, rc_error *err);

/* For the collectives: b's memory as a host address, or NULL when it is device memory. */
void *rci_buffer_host(const rc_buffer *b, size_t off);

#endif
