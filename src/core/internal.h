/* internal.h - what the library's modules share and users never see. */
#ifndef REDCO_INTERNAL_H
#define REDCO_INTERNAL_H

#include "redco.h"
#include "scalar.h"   /* rci_hash64 and the per-element functions the device kernels share */

#include <stdarg.h>
#include <time.h>

/* Seconds on the monotonic clock, for durations: kernel and step times, deadlines,
 * progress estimates. */
static inline double rci_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The most elements one tensor may have (2^48: a petabyte of f32), so that element and
 * byte counts never overflow 64 bits; a shape past it is a graph error naming the op. */
#define RC_MAX_NUMEL ((int64_t)1 << 48)

/* Where a leaf's values come from for every plan of its graph: a constant's host copy
 * (uploaded by each plan), or a buffer bound with rc_graph_bind. */
typedef struct {
    const void *host;             /* constants: owned by the graph */
    rc_buffer *buf;               /* bound leaves: the caller's buffer ... */
    size_t off;                   /* ... at this byte offset */
} rci_leaf_source;

struct rc_graph {
    rc_tensor **nodes;            /* in creation order, which is a topological order */
    int n, cap;
    int err_code;
    char err[512];
    rci_leaf_source *sources;     /* by node id, [sources_cap] (zero: none) */
    int sources_cap;
    int segment, segments;        /* the open recomputation segment (0: none); segments made */
    int remat_every;              /* rc_graph_set_remat */
    int training;                 /* rc_graph_set_training */
    uint64_t serial;              /* unique per graph ever made: caches keyed on a graph use it,
                                     since a new graph may reuse a freed one's address */
};

/* The source of leaf `id` (NULL when it has none). */
const rci_leaf_source *rci_graph_source(const rc_graph *g, int id);
/* Leaf `id`'s source entry to fill in, grown as needed (NULL when memory runs out); the
 * executor binds buffers through it (rc_graph_bind). */
rci_leaf_source *rci_graph_source_slot(rc_graph *g, int id);


/* Puts "what: " before err's message (when err is not NULL); returns -1. Names the tensor
 * or state a failure concerns, e.g. the buffer a device could not allocate. */
int rci_error_prefix(rc_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the first error of a graph; returns NULL so builders can `return rci_fail(...)`. */
rc_tensor *rci_fail(rc_graph *g, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));


/* A new node with the given inputs; NULL (error set) when allocation fails. */
rc_tensor *rci_node_new(rc_graph *g, rc_op op, rc_dtype t, int ndim, const int64_t *shape,
                       int nsrc, rc_tensor *const *src);
/* A random node's 64-bit key (DROPOUT, NORMAL: at 0; ATTENTION's dropout: at 2), kept as
 * iparam[at] (low 32 bits) and iparam[at + 1] (high). */
static inline uint64_t rci_node_key(const rc_tensor *t, int at)
{
    return (uint64_t)(uint32_t)t->iparam[at] | (uint64_t)(uint32_t)t->iparam[at + 1] << 32;
}

static inline void rci_node_set_key(rc_tensor *t, int at, uint64_t k)
{
    t->iparam[at] = (int32_t)(uint32_t)(k & 0xffffffffu);
    t->iparam[at + 1] = (int32_t)(uint32_t)(k >> 32);
}

/* 1 when g already failed or any of the n inputs is NULL: builders return NULL then. */
int rci_inputs_bad(rc_graph *g, int n, rc_tensor *const *src);
/* Checks a node against an op name, returns an axis in [0, ndim) or -1 with the error set. */
int rci_axis_check(rc_graph *g, const char *op, const rc_tensor *t, int axis);
/* numpy broadcast of a and b into out; -1 (error set) when incompatible. */
int rci_broadcast_shapes(rc_graph *g, const char *op, const rc_tensor *a, const rc_tensor *b,
                        int *ndim, int64_t *shape);
int rci_same_shape(const rc_tensor *a, const rc_tensor *b);
/* 0 when t is a float dtype (f32, f64, bf16, f16); else -1 with the graph's error set. */
int rci_float_input(rc_graph *g, const char *op, const rc_tensor *t);
/* 1 for bf16 and f16, the 16-bit storage types (kernels compute them in f32). */
int rci_dtype_is_half(rc_dtype t);
/* The dtype 16-bit values compute in: f32 for bf16 and f16, t itself otherwise; the loss
 * ops' output dtype. */
rc_dtype rci_compute_dtype(rc_dtype t);
int64_t rci_shape_numel(int ndim, const int64_t *shape);

/* ---- a node's structure (node_check.c) ---- */

/* 0 when node's inputs (present, of the dtypes its op takes), their shapes and its integer
 * parameters fit its op; else -1 with err naming the op, what does not fit and the node
 * (id, shape, dtype). The plan checks every node with it before anything runs, so kernels
 * take their nodes as valid. */
int rci_node_check(const rc_tensor *node, rc_error *err);
/* node checked by rci_node_check, for a builder: node, or NULL with the graph's error set */
rc_tensor *rci_node_checked(rc_graph *g, rc_tensor *node);

/* Element strides of a contiguous tensor of shape[nd]; and of t's elements along the axes
 * of shape[nd] (right-aligned, 0 on broadcast axes), -1 when t does not broadcast to it. */
void rci_contiguous_strides(int nd, const int64_t *shape, int64_t *st);
int rci_bcast_strides(const rc_tensor *t, int nd, const int64_t *shape, int64_t *st);

/* A matrix product's transposes and sizes: op(A) [m, k], op(B) [kb, n] (kb == k when it is
 * valid), and the batches of the output and of each operand (1: shared by every batch; 0
 * when a size is 0). From a MATMUL node whose operands have at least 2 dimensions. The
 * layout fields, in elements, are 0 (contiguous matrices one after the other) but for the
 * devices' attention, whose products read and write blocks of larger matrices: lda, ldb,
 * ldc the row strides of A, B, C as stored, sa, sb, sc their batch strides
 * (rci_matmul_layout resolves them). */
typedef struct {
    int ta, tb;
    int64_t m, n, k, kb;
    int64_t batch, ba, bb;
    int64_t lda, ldb, ldc, sa, sb, sc;
} rci_matmul_dims;
rci_matmul_dims rci_matmul_dims_of(const rc_tensor *node);

/* A convolution's (or pooling's) output extent along one axis of n with a kernel of k:
 * (n + 2 pad - dil (k - 1) - 1) / stride + 1, 0 when the dilated kernel does not fit. */
int64_t rci_conv_out_size(int64_t n, int64_t k, int stride, int pad, int dil);

/* The backward nodes of an ATTENTION node att given its upstream gradient dout (ops_nn.c;
 * layouts in redco.h): its ATTENTION_STATS (att itself, not a view: it reads att's
 * storage), and the ATTENTION_GRAD of input `which` (0 q, 1 k, 2 v, 3 bias) reading those
 * stats. */
rc_tensor *rci_attention_stats(rc_graph *g, rc_tensor *att, rc_tensor *dout);
rc_tensor *rci_attention_grad(rc_graph *g, rc_tensor *att, rc_tensor *dout, rc_tensor *stats, int which);

/* What a node keeps beside its values for its backward (tensor.c): a second block of
 * rci_kept_bytes (0: none), which the plan places and frees with the node's values and
 * hands the kernels of the node and of its ATTENTION_STATS (rci_node_run.kept). Only an
 * ATTENTION keeps one: for a 16-bit node its output unrounded in f32 [B, H, Tq, Dv], then
 * (from byte rci_attention_lse_at, a 64-byte boundary; 0 for f32 and f64, whose values are
 * their unrounded output) each query row's log-sum-exp [B, H, Tq] in the compute dtype
 * (-inf for a row that sees no key). A 16-bit node's kept block is the same node's in f32:
 * its values, then its own kept block, so the f32 kernel that runs it writes both as its
 * own. A separate block, not more bytes after the values: a block a little larger than
 * the activations around it fits none of their freed gaps (GPT-2's step: 36 MiB of holes). */
size_t rci_kept_bytes(const rc_tensor *t);
size_t rci_attention_lse_at(const rc_tensor *att);
/* the node whose kept block node t's kernel is handed: its src0 for an ATTENTION_STATS,
 * which reads it, else t itself (its own, if it keeps one) */
const rc_tensor *rci_kept_of(const rc_tensor *t);

/* m times activation `act`'s derivative of order `order` of a (ops_elementwise.c): an ACT
 * node with m as its second input (redco.h), G f'(x) in one pass for a gradient rule; m of
 * a's shape and dtype */
rc_tensor *rci_act_times(rc_graph *g, rc_tensor *a, rc_act_kind act, int order, rc_tensor *m);

/* The NORM_GRAD node (ops_nn.c; layout in redco.h) of a LAYER_NORM or RMS_NORM node norm
 * given its upstream gradient dout: x's gradient (which 0) or the weight's, the rows' sum of
 * dout xhat ([C], which 1). */
rc_tensor *rci_norm_grad(rc_graph *g, rc_tensor *norm, rc_tensor *dout, int which);
/* A norm's dx (a NORM_GRAD node of iparam[1] 0 and no addend) with r, of its shape and
 * dtype, added in the same pass: a gradient accumulated into it (autodiff.c) */
rc_tensor *rci_norm_grad_plus(rc_graph *g, rc_tensor *dx, rc_tensor *r);

/* Gradient rule of one node: given the gradient of its output, add the nodes for the
 * gradients of its inputs into gsrc[i] (NULL where an input gets none). In grad.c. */
int rci_grad_node(rc_graph *g, rc_tensor *node, rc_tensor *gout, rc_tensor **gsrc);
/* 1 for a fused backward node whose own gradient is that of its value written with ops
 * (NORM_GRAD: a norm's second derivatives), which rci_value_as_ops records from src, its
 * inputs or stand-ins for them, in node's compute dtype, for rc_backward to differentiate.
 * In grad.c. */
int rci_grad_by_value(const rc_tensor *node);
rc_tensor *rci_value_as_ops(rc_graph *g, const rc_tensor *node, rc_tensor *const *src);

#endif
