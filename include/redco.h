/* redco.h - the public interface of libredco.
 *
 * A quick tour.
 *
 * Everything starts with a graph. Ops record nodes into it; nothing runs until
 * an executor plan built from the graph is run:
 *
 *     rc_graph *g = rc_graph_new();
 *     int64_t xs[2] = {4, 8}, ws[2] = {8, 3};
 *     rc_tensor *x = rc_input(g, "x", RC_F32, 2, xs);
 *     rc_tensor *w = rc_param(g, "w", RC_F32, 2, ws);
 *     rc_tensor *loss = rc_mean_all(g, rc_tanh(g, rc_matmul(g, x, w, 0, 0)));
 *     rc_tensor *dw;
 *     rc_backward(g, loss, &w, 1, &dw);          // adds the backward graph
 *     if (rc_graph_error(g)) { fprintf(stderr, "%s\n", rc_graph_error(g)); ... }
 *     rc_tensor *outs[2] = {loss, dw};
 *     rc_plan *p = rc_plan_new(g, outs, 2, &err);  // memory planned here (CPU backend)
 *     rc_plan_set_input(p, x, x_values, &err);     // copied into the plan's memory
 *     rc_plan_set_input(p, w, w_values, &err);
 *     rc_plan_run(p, &err);                        // no allocation in here
 *     float l;
 *     rc_plan_read(p, loss, &l, &err);             // copied out to host memory
 *
 * Values live in backend buffers (rc_buffer), never in the graph: a plan owns the table
 * from its nodes to memory, so several plans over one graph never collide. A leaf can
 * also be bound to a buffer held elsewhere (rc_plan_bind, or rc_graph_bind for every
 * plan of a graph): parameters are bound that way, without copies.
 *
 * Errors never abort. A graph-building call that fails records the first error
 * in the graph and returns NULL; every later call given a NULL input returns
 * NULL too, so a whole model can be built and checked once at the end with
 * rc_graph_error(). Plans and runs report errors through an rc_error.
 *
 * Shapes are given outermost first (row-major, C order). Axis arguments may be
 * negative (counted from the end).
 */
#ifndef REDCO_H
#define REDCO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REDCO_VERSION "0.1.0"

enum { RC_MAX_DIMS = 6, RC_MAX_SRC = 8, RC_MAX_IPARAM = 8, RC_MAX_FPARAM = 4 };
enum { RC_IGNORE_INDEX = -100 };  /* the target id losses skip (as torch's ignore_index) */

/* Element types. f32 is the default; f64 serves reference checks. bf16 (the upper half of
 * an f32) and f16 (IEEE binary16) are 16-bit storage types that every float op accepts:
 *   - an op's output takes its inputs' dtype, as for f32 (inputs of one op share a dtype;
 *     ids and targets stay i32); rc_full, rc_scalar, rc_const, rc_one_hot work in 16 bits;
 *   - kernels compute in f32 and round the output to 16 bits (nearest, ties to even):
 *     matrix products accumulate in f32, norms, softmax, reductions and losses in f32 or
 *     wider; data movement (reshape, permute, slice, pad, concat, expand) copies the 16-bit
 *     words unchanged;
 *   - the losses return f32 for 16-bit inputs (rc_cross_entropy), f64 for f64;
 *   - rc_cast converts between f32, f64, bf16, f16 and i32 (its gradient casts back);
 *   - the gradient of a 16-bit node has the node's dtype; the rules of softmax and the
 *     norms compute in f32 and round their results.
 * On the CPU a 16-bit node's f32 copies live in a scratch block (large nodes run in pieces
 * of about 16 MB) that grows on the first runs and is then reused (counted in
 * rc_backend_memory's used bytes). rc_convert and rc_f32_to_bf16 ... below convert host arrays. */
typedef enum {
    RC_F32 = 0,
    RC_F64,
    RC_I32,
    RC_BF16,
    RC_F16,
    RC_DTYPE_COUNT
} rc_dtype;

/* The op of a node. Each op's inputs (src) and parameters are listed beside it. */
typedef enum {
    RC_OP_LEAF = 0,      /* input or parameter: data bound by the user */
    RC_OP_FULL,          /* constant: every element = fparam[0] */
    RC_OP_ADD,           /* src0 + src1, numpy broadcasting */
    RC_OP_SUB,           /* src0 - src1 */
    RC_OP_MUL,           /* src0 * src1 */
    RC_OP_DIV,           /* src0 / src1 */
    RC_OP_AFFINE,        /* src0 * fparam[0] + fparam[1] (scale, neg, add scalar) */
    RC_OP_EXP,
    RC_OP_LOG,
    RC_OP_SQRT,
    RC_OP_RSQRT,
    RC_OP_TANH,
    RC_OP_ACT,           /* activation iparam[0] = rc_act_kind, derivative order iparam[1] (0, 1, 2)
                            of src0; times src1 when there is one (of src0's shape and dtype,
                            one rounding: a gradient's G f'(x), autodiff's own) */
    RC_OP_MATMUL,        /* src0 [..., M, K] @ src1 [..., K, N]; iparam[0] transposes src0
                            (stored [..., K, M]), iparam[1] src1 (stored [..., N, K]).
                            src1 may be 2-D and shared by every batch of src0. */
    RC_OP_SOFTMAX,       /* softmax over the last axis of src0 * fparam[0] + src1 (optional
                            additive mask, broadcast); iparam[0] = 1: causal (query i sees keys
                            j <= i + (keys - queries)) */
    RC_OP_LAYER_NORM,    /* over the last axis: (x - mean) / sqrt(var + fparam[0]) * src1 + src2;
                            src1 (weight) and src2 (bias) optional */
    RC_OP_RMS_NORM,      /* x / sqrt(mean(x^2) + fparam[0]) * (src1 + fparam[1]); without src1 (NULL)
                            the normalised x itself (the offset is ignored) */
    RC_OP_EMBEDDING,     /* rows of src0 [V, C] picked by ids src1 (i32 [...]) -> [..., C];
                            iparam[0] = padding id whose row gets no gradient (-1: none);
                            shard mode (iparam[2] = 1): src0 holds rows [iparam[3], iparam[3] + V)
                            of an iparam[4]-row vocabulary, other ids give zero rows */
    RC_OP_EMBEDDING_GRAD,/* scatter-add of src1 [..., C] into zeros [iparam[0], C] at ids src0,
                            skipping ids equal to iparam[1] (-1: none); shard mode as EMBEDDING */
    RC_OP_ROPE,          /* src0 [..., T, H, D] rotated by positions src1 (i32 [T]);
                            iparam[0] = rotary dims (even, <= D), iparam[1] = rc_rope_mode,
                            iparam[2] = 1 for the inverse rotation; fparam[0] = theta */
    RC_OP_RESHAPE,       /* view */
    RC_OP_PERMUTE,       /* out axis i = src axis iparam[i] */
    RC_OP_SLICE,         /* src0 along axis iparam[0], [iparam[1], iparam[2]) */
    RC_OP_PAD,           /* src0 placed at offset iparam[1] along axis iparam[0] in zeros of
                            this node's shape (the gradient of SLICE) */
    RC_OP_CONCAT,        /* src0..src{n-1} joined along axis iparam[0] */
    RC_OP_SUM,           /* sum over axis iparam[0]; iparam[1] = keepdim */
    RC_OP_MAX,           /* max over axis iparam[0]; iparam[1] = keepdim */
    RC_OP_EXPAND,        /* src0 broadcast to this node's shape */
    RC_OP_SUM_TO,        /* src0 summed down to this node's (broadcast-compatible) shape */
    RC_OP_CROSS_ENTROPY, /* mean over targets != iparam[0] of -log softmax(src0)[target];
                            src0 [..., V] logits, src1 i32 [...] targets; scalar out, f32
                            for f32 and 16-bit logits (computed in f32), f64 for f64 */
    RC_OP_ONE_HOT,       /* src0 i32 [...] -> [..., iparam[0]]; ids equal to iparam[1] give zero rows;
                            shard mode as EMBEDDING (columns [iparam[3], ...) of iparam[4]) */
    RC_OP_DROPOUT,       /* src0 * keep / (1 - fparam[0]); keep drawn from the 64-bit key in iparam[0..1]
                            mixed with the plan's per-run key (rc_plan_set_rng) */
    RC_OP_WHERE,         /* src0 != 0 ? src1 : src2, broadcast */
    RC_OP_CAST,          /* src0 converted to this node's dtype */
    RC_OP_EQUAL,         /* 1 where src0 == src1 else 0, broadcast; no gradient */
    RC_OP_CROSS_ENTROPY_GRAD, /* the gradient of CROSS_ENTROPY in one pass: src0 logits, src1
                            targets, src2 the scalar upstream gradient (the loss's dtype: f32
                            for 16-bit logits); ignore id iparam[0]; out: the logits' dtype */
    RC_OP_STOP_GRADIENT, /* src0 itself (a view); no gradient flows through it */
    RC_OP_MP_ENTER,      /* src0 itself (a view) entering model-parallel work; its gradient is
                            all-reduced over the model axis (Megatron's f) */
    RC_OP_MP_REDUCE,     /* src0 summed over the model axis (Megatron's g); gradient: MP_ENTER */
    RC_OP_MP_MAX,        /* src0's elementwise maximum over the model axis; no gradient */
    RC_OP_CONV2D,        /* 2-D convolution (cross-correlation), NCHW: src0 x [N, C, H, W], src1
                            weight [O, C/groups, KH, KW], src2 bias [O] or NULL -> [N, O, OH, OW],
                            OH = (H + 2 pad_h - dil_h (KH - 1) - 1) / stride_h + 1 (OW alike);
                            iparam: stride h, w; padding h, w; dilation h, w; groups */
    RC_OP_CONV2D_GRAD_INPUT, /* d(conv2d)/d(x): src0 upstream [N, O, OH, OW], src1 weight
                            -> [N, C, H, W] (this node's shape); iparam as CONV2D */
    RC_OP_CONV2D_GRAD_WEIGHT, /* d(conv2d)/d(weight): src0 upstream [N, O, OH, OW], src1 x
                            -> [O, C/groups, KH, KW] (this node's shape); iparam as CONV2D */
    RC_OP_POOL2D,        /* pooling of src0 x [N, C, H, W] -> [N, C, OH, OW]; iparam: kind
                            (rc_pool_kind), kernel h, w; stride h, w; padding h, w. Padding
                            never wins a max; an average divides by KH * KW (padding counts) */
    RC_OP_POOL2D_GRAD,   /* d(pool2d)/d(x): src0 upstream [N, C, OH, OW], src1 x -> x's shape;
                            a max's gradient goes to the first maximum of its window, an
                            average's is spread over the window; iparam as POOL2D */
    RC_OP_NORMAL,        /* standard normal draws of this node's shape, no inputs: element i from
                            the 64-bit key in iparam[0..1] mixed with a key of the plan chosen by
                            iparam[2] (rc_rng_scope); no gradient (see rc_normal) */
    RC_OP_ATTENTION,     /* fused attention (rc_attention): src0 q [B, H, Tq, D], src1 k [B, KV, Tk, D],
                            src2 v [B, KV, Tk, Dv], src3 additive bias broadcast to [B, H, Tq, Tk] or
                            NULL -> [B, H, Tq, Dv] = softmax(q k^T * fparam[0] + bias) v, computed
                            in tiles with an online softmax (no [Tq, Tk] tensor); KV divides H,
                            query head h reads key/value head h / (H / KV); iparam[0] = 1: causal
                            with the query offset Tk - Tq (query i sees keys j <= i + Tk - Tq,
                            as SOFTMAX's); a row that sees no key gives zeros. Dropout on the
                            probabilities when fparam[1] = p > 0: DROPOUT's mask (key in
                            iparam[2..3] mixed with the plan's run key) over the virtual
                            [B, H, Tq, Tk] probabilities, element ((b H + h) Tq + i) Tk + j.
                            Beside its values it keeps what its stats read, each row's
                            log-sum-exp and (16-bit) its output unrounded in f32, in a second
                            block the plan places and frees with them */
    RC_OP_ATTENTION_STATS, /* per query row of an ATTENTION, for its backward: src0 the ATTENTION
                            node itself (not a view: it reads what the forward kept), src1 the
                            upstream gradient dO [B, H, Tq, Dv] -> [B, H, Tq, 2] in the compute
                            dtype (f32 for 16-bit, f64 for f64): [..., 0] = the row's
                            log-sum-exp of the scaled, biased, masked scores (-inf when it sees
                            no key), [..., 1] = delta = dO . o of the unrounded o (a 16-bit o's
                            rounding would enter every dS; with dropout, o the dropped one's),
                            both kept by the forward: no pass over the keys */
    RC_OP_ATTENTION_GRAD, /* one gradient of an ATTENTION, probabilities recomputed tile by tile:
                            src0..3 as ATTENTION, src4 dO, src5 its ATTENTION_STATS; iparam[0],
                            iparam[2..3], fparam[0..1] as ATTENTION (the same dropout mask);
                            iparam[1] = the input it differentiates
                            (0: q, 1: k, 2: v, 3: bias) -> that input's shape, q's dtype; dk and dv
                            sum over the query heads sharing a key/value head, dbias over the
                            axes the bias broadcasts over; 4: q, k and v at once (one pass over
                            the tiles) -> 1-D [nq + nk + nv], dq, dk, dv flat one after the other,
                            read through views (leading slice, reshape) */
    RC_OP_NORM_GRAD,     /* a gradient of a LAYER_NORM (iparam[0] = 1) or RMS_NORM (0) over the
                            last axis, each row's statistics recomputed: src0 x [..., C], src1
                            its weight [C] or NULL, src2 the upstream gradient G of x's shape, all
                            of x's dtype; fparam[0] = eps, fparam[1] = the RMS norm's offset.
                            iparam[1] = 0: dx = rstd (g - xhat mean(g xhat) - mean(g)) in x's
                            dtype, g = G (weight + offset) (G without a weight), the mean(g) term
                            for layer norm alone, plus src3 when given (a gradient of x's
                            shape and dtype added in the same pass); 1: the weight's gradient,
                            the rows' sum of G xhat -> [C] in the compute dtype (f32 for
                            16-bit) */
    RC_OP_COUNT
} rc_op;

/* Activations for RC_OP_ACT. */
typedef enum {
    RC_ACT_RELU = 0,
    RC_ACT_GELU_TANH,    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's "gelu_new" */
    RC_ACT_GELU_ERF,     /* 0.5 x (1 + erf(x / sqrt(2))) */
    RC_ACT_SILU,         /* x * sigmoid(x) */
    RC_ACT_SIGMOID,
    RC_ACT_COUNT
} rc_act_kind;

/* Pooling kinds for RC_OP_POOL2D. */
typedef enum {
    RC_POOL_MAX = 0,
    RC_POOL_AVG = 1
} rc_pool_kind;

/* Rotary position embedding conventions. */
typedef enum {
    RC_ROPE_INTERLEAVED = 0, /* pairs (0,1), (2,3), ... as GPT-J */
    RC_ROPE_HALF = 1         /* pairs (i, i + rot/2) as LLaMA / GPT-NeoX */
} rc_rope_mode;

enum {
    RC_FLAG_INPUT = 1,   /* a leaf the user feeds each step */
    RC_FLAG_PARAM = 2,   /* a trainable leaf */
    RC_FLAG_SPLITTABLE = 8 /* an input the tensor-parallel partitioner may hand each model
                            shard as its part (a key/value cache split by heads; see shard.h) */
};

/* An RNG key: a counter-based generator, deterministic across runs and ranks. */
typedef struct {
    uint64_t key;
    uint64_t counter;
} rc_rng;

typedef struct rc_graph rc_graph;
typedef struct rc_tensor rc_tensor;

/* A node of a graph. Read the fields; change them only through the API. */
struct rc_tensor {
    int id;                       /* index in its graph */
    rc_op op;
    rc_dtype dtype;
    int ndim;
    int64_t shape[RC_MAX_DIMS];
    int nsrc;
    rc_tensor *src[RC_MAX_SRC];
    int32_t iparam[RC_MAX_IPARAM];
    double fparam[RC_MAX_FPARAM];
    int flags;
    char name[64];
    int segment;                  /* recomputation segment (rc_remat_begin), 0: none */
    rc_tensor *view_src;          /* views (reshape, leading slices) alias this node ... */
    int64_t view_offset;          /* ... at this byte offset */
};

/* ---- errors ---------------------------------------------------------------- */

typedef struct {
    int code;                     /* 0: no error */
    char msg[512];
} rc_error;

enum {
    RC_OK = 0,
    RC_ERR_SHAPE,
    RC_ERR_DTYPE,
    RC_ERR_ARG,
    RC_ERR_INDEX,
    RC_ERR_MEMORY,
    RC_ERR_UNSUPPORTED,
    RC_ERR_IO,
    RC_ERR_FORMAT,
    RC_ERR_INTERRUPTED            /* a fit stopped early by a signal (rc_train_options.catch_signals) */
};

/* Fills err (when not NULL) with a code and a printf-style message; returns -1. For user
 * code too: a collate or output function can report why it failed. */
int rc_error_set(rc_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- tensors ------------------------------------------------------------------ */

size_t rc_dtype_size(rc_dtype t);
const char *rc_dtype_name(rc_dtype t);
int rc_dtype_is_float(rc_dtype t);
int64_t rc_tensor_numel(const rc_tensor *t);
/* 16-bit floats as their bits (uint16_t): to 16 bits rounds to nearest, ties to even; NaN
 * stays NaN (made quiet); f16 keeps subnormals and overflows to infinity. Widening is exact. */
uint16_t rc_f32_to_bf16(float f);
float rc_bf16_to_f32(uint16_t h);
uint16_t rc_f32_to_f16(float f);
float rc_f16_to_f32(uint16_t h);
/* n elements of dtype st at src converted to dtype dt at dst (f32, f64, bf16, f16; the same
 * dtype copies) as the scalar functions above convert them: 16-bit values widen exactly
 * and f64 to 16 bits rounds through f32. dst may be src itself (in place).
 * Long arrays convert over the OpenMP threads. Returns 0, or -1 for another dtype. */
int rc_convert(void *dst, rc_dtype dt, const void *src, rc_dtype st, int64_t n);
size_t rc_tensor_nbytes(const rc_tensor *t);
/* Writes e.g. "[4, 8]" into buf; returns buf. */
char *rc_shape_str(const rc_tensor *t, char *buf, size_t size);
const char *rc_op_name(rc_op op);

/* ---- backends and buffers ---------------------------------------------------------
 * A backend is a device that holds tensor memory and runs kernels; a buffer is a block of
 * its memory. Host code reads and writes buffers only by copying (upload, download). */

typedef struct rc_backend rc_backend;
typedef struct rc_buffer rc_buffer;

/* Backends are opened by name with rc_device_open (redco/device.h): "cpu" is the CPU
 * backend (buffers in host memory, kernels with OpenMP and OpenBLAS), "opencl:N" an OpenCL
 * device. */
const char *rc_backend_name(const rc_backend *be);
/* Bytes the device has (0: unknown), bytes held by redco's buffers now, and their peak. */
void rc_backend_memory(const rc_backend *be, size_t *total, size_t *used, size_t *peak);
/* 1 when the backend has a kernel for op with output dtype t. */
int rc_backend_supports(const rc_backend *be, rc_op op, rc_dtype t);
/* Waits for the work queued on the backend. */
int rc_backend_wait(rc_backend *be, rc_error *err);
/* A zeroed buffer of `bytes` bytes. */
rc_buffer *rc_buffer_new(rc_backend *be, size_t bytes, rc_error *err);
void rc_buffer_free(rc_buffer *b);
size_t rc_buffer_size(const rc_buffer *b);
rc_backend *rc_buffer_backend(const rc_buffer *b);
/* Copies between host memory and bytes [offset, offset + bytes) of the buffer, and
 * between buffers of one backend; a range outside a buffer is an error. */
int rc_buffer_upload(rc_buffer *b, size_t offset, const void *host, size_t bytes, rc_error *err);
int rc_buffer_download(const rc_buffer *b, size_t offset, void *host, size_t bytes, rc_error *err);
int rc_buffer_copy(rc_buffer *dst, size_t dst_offset, const rc_buffer *src, size_t src_offset,
                   size_t bytes, rc_error *err);

/* ---- graphs ------------------------------------------------------------------- */

rc_graph *rc_graph_new(void);
void rc_graph_free(rc_graph *g);
/* NULL while no call has failed; otherwise the first failure's message. */
const char *rc_graph_error(const rc_graph *g);
int rc_graph_error_code(const rc_graph *g);
int rc_graph_size(const rc_graph *g);
rc_tensor *rc_graph_node(const rc_graph *g, int i);
/* Binds a leaf of g to rc_tensor_nbytes(leaf) bytes at `offset` of buf for every plan of g
 * (a plan's own rc_plan_bind takes precedence). buf stays the caller's. */
int rc_graph_bind(rc_graph *g, const rc_tensor *leaf, rc_buffer *buf, size_t offset);

/* ---- leaves and constants ------------------------------------------------------ */

rc_tensor *rc_input(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape);
rc_tensor *rc_param(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape);
rc_tensor *rc_full(rc_graph *g, rc_dtype t, int ndim, const int64_t *shape, double value);
rc_tensor *rc_scalar(rc_graph *g, rc_dtype t, double value);
/* Which key of the plan a random op mixes with its own (rc_normal). */
typedef enum {
    RC_RNG_RUN = 0,      /* the per-run key (rc_plan_set_rng): the trainer sets one per step,
                            micro-batch and data-parallel replica, as for dropout */
    RC_RNG_STEP = 1      /* the step key (rc_plan_set_step_rng): the trainer sets one per
                            optimizer step, the same on every replica and micro-batch */
} rc_rng_scope;
/* Standard normal draws N(0, 1) of dtype t (f32, f64, bf16, f16) and shape[ndim], drawn
 * afresh at every run from key mixed with the plan's key of `scope`. Element i is
 *     h = hash(k ^ hash(i)), u1 = ((h >> 40) + 1) 2^-24 in (0, 1], u2 = (h & 0xffffff) 2^-24,
 *     z = sqrt(-2 log u1) cos(2 pi u2)                      (Box-Muller, one draw per element)
 * with hash splitmix64's finaliser and k the two keys mixed (rc_rng_uniform_at's stream):
 * the same key gives the same draws on every backend (up to the rounding of log and cos),
 * so data-parallel replicas can add the same noise (DP-SGD). |z| < 5.8. No gradient flows. */
rc_tensor *rc_normal(rc_graph *g, rc_dtype t, int ndim, const int64_t *shape, rc_rng key,
                     rc_rng_scope scope);
/* A leaf holding a copy of `values` (numel elements of t), owned by the graph: position
 * ids, relative-position buckets, masks known when the graph is built. */
rc_tensor *rc_const(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape,
                    const void *values);

/* ---- element-wise ------------------------------------------------------------ */

rc_tensor *rc_add(rc_graph *g, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_sub(rc_graph *g, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_mul(rc_graph *g, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_div(rc_graph *g, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_affine(rc_graph *g, rc_tensor *a, double scale, double shift);
rc_tensor *rc_scale(rc_graph *g, rc_tensor *a, double s);
rc_tensor *rc_add_scalar(rc_graph *g, rc_tensor *a, double c);
rc_tensor *rc_neg(rc_graph *g, rc_tensor *a);
rc_tensor *rc_exp(rc_graph *g, rc_tensor *a);
rc_tensor *rc_log(rc_graph *g, rc_tensor *a);
rc_tensor *rc_sqrt(rc_graph *g, rc_tensor *a);
rc_tensor *rc_rsqrt(rc_graph *g, rc_tensor *a);
rc_tensor *rc_tanh(rc_graph *g, rc_tensor *a);
rc_tensor *rc_relu(rc_graph *g, rc_tensor *a);
rc_tensor *rc_gelu(rc_graph *g, rc_tensor *a);      /* tanh form */
rc_tensor *rc_gelu_erf(rc_graph *g, rc_tensor *a);
rc_tensor *rc_silu(rc_graph *g, rc_tensor *a);
rc_tensor *rc_sigmoid(rc_graph *g, rc_tensor *a);
/* Activation `act`, or its first or second derivative (order 1, 2). */
rc_tensor *rc_act(rc_graph *g, rc_tensor *a, rc_act_kind act, int order);
rc_tensor *rc_where(rc_graph *g, rc_tensor *cond, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_equal(rc_graph *g, rc_tensor *a, rc_tensor *b);
rc_tensor *rc_cast(rc_graph *g, rc_tensor *a, rc_dtype t);
/* a as a constant for differentiation (first-order MAML, targets built from outputs) */
rc_tensor *rc_stop_gradient(rc_graph *g, rc_tensor *a);
/* Model-parallel collectives, run by the plan's collective callback (without one, a world
 * of one shard: identities). enter: identity forward, all-reduced gradient; reduce: sum
 * over the model shards, gradient passed as it is; max: the shards' maximum, no gradient
 * (for stabilising constants such as a softmax's row maximum). */
rc_tensor *rc_mp_enter(rc_graph *g, rc_tensor *a);
rc_tensor *rc_mp_reduce(rc_graph *g, rc_tensor *a);
rc_tensor *rc_mp_max(rc_graph *g, rc_tensor *a);
rc_tensor *rc_dropout(rc_graph *g, rc_tensor *a, double p, rc_rng key);

/* ---- linear algebra ----------------------------------------------------------- */

/* a [..., M, K] @ b [..., K, N] -> [..., M, N]; trans_a / trans_b read the operand
 * as stored transposed ([..., K, M] / [..., N, K]) with no copy. b may be 2-D. */
rc_tensor *rc_matmul(rc_graph *g, rc_tensor *a, rc_tensor *b, int trans_a, int trans_b);

/* ---- neural-network ops -------------------------------------------------------- */

/* softmax over the last axis of a * scale + mask; mask may be NULL; causal 0/1. */
rc_tensor *rc_softmax(rc_graph *g, rc_tensor *a);
rc_tensor *rc_softmax_ext(rc_graph *g, rc_tensor *a, rc_tensor *mask, double scale, int causal);
/* Fused attention: dropout(softmax(q k^T * scale + bias)) v without the [Tq, Tk] scores.
 * q [B, H, Tq, D], k [B, KV, Tk, D], v [B, KV, Tk, Dv] -> [B, H, Tq, Dv]. KV divides H: query
 * head h reads key/value head h / (H / KV) (grouped-query attention, nothing copied). bias
 * (NULL: none) is added to the scaled scores and broadcasts to [B, H, Tq, Tk]: a padding
 * mask [B, 1, 1, Tk] of 0 / -1e9, T5's position bias [1, H, Tq, Tk] (it gets a gradient).
 * causal: query i sees keys j <= i + Tk - Tq (Tq < Tk: decoding against a key/value cache),
 * as rc_softmax_ext. All inputs share one float dtype; 16-bit inputs compute in f32.
 * dropout in [0, 1): the probability that attention dropout zeroes a probability (the kept
 * ones scaled by 1 / (1 - dropout)); 0: none, key then ignored. The mask is rc_dropout's
 * with the same key over the [B, H, Tq, Tk] probabilities (drawn afresh per run from the
 * plan's key, rc_plan_set_rng; the backward reuses it), so the op is the same as
 * matmul(dropout(softmax_ext(matmul(q, repeat(k)^T), bias, scale, causal), dropout, key),
 * repeat(v)) up to rounding, mask for mask.
 * Its backward (rc_backward) adds one ATTENTION_STATS node (row log-sum-exp and dO . o),
 * one ATTENTION_GRAD node for q, k and v together (packed; the gradients are views of it)
 * and, with a bias, one for the bias. The CPU and the devices (OpenCL, CUDA) run it. */
rc_tensor *rc_attention(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                        double scale, int causal, double dropout, rc_rng key);
/* layer norm over the last axis; weight and bias [C] may be NULL */
rc_tensor *rc_layer_norm(rc_graph *g, rc_tensor *x, rc_tensor *weight, rc_tensor *bias, double eps);
/* RMS norm over the last axis times (weight + offset): offset 0 for T5 and LLaMA */
rc_tensor *rc_rms_norm(rc_graph *g, rc_tensor *x, rc_tensor *weight, double eps, double offset);
/* table [V, C], ids i32 [...] -> [..., C]; an id outside [0, V) is a run-time error */
rc_tensor *rc_embedding(rc_graph *g, rc_tensor *table, rc_tensor *ids);
/* the same, with torch's padding_idx: lookups of that id give the table row no gradient */
rc_tensor *rc_embedding_pad(rc_graph *g, rc_tensor *table, rc_tensor *ids, int padding_idx);
/* scatter-add of grad [..., C] into [vocab, C] at ids, skipping padding_idx (-1: none) */
rc_tensor *rc_embedding_grad(rc_graph *g, rc_tensor *ids, rc_tensor *grad, int64_t vocab,
                             int padding_idx);
/* x [..., T, H, D], positions i32 [T]: rotates the first rot_dims of each head */
rc_tensor *rc_rope(rc_graph *g, rc_tensor *x, rc_tensor *pos, int rot_dims, rc_rope_mode mode,
                   double theta);
rc_tensor *rc_rope_inverse(rc_graph *g, rc_tensor *x, rc_tensor *pos, int rot_dims,
                           rc_rope_mode mode, double theta);
/* logits [..., V], targets i32 [...] -> scalar mean over targets != ignore_index (an f32
 * scalar for f32 and 16-bit logits, f64 for f64) */
rc_tensor *rc_cross_entropy(rc_graph *g, rc_tensor *logits, rc_tensor *targets, int ignore_index);
rc_tensor *rc_one_hot(rc_graph *g, rc_tensor *ids, int64_t depth, int ignore_index, rc_dtype t);
/* Vocabulary shards: the table (or one-hot columns) covers ids [first, first + rows) of a
 * vocabulary of `vocab` ids; other ids give zero rows and no gradient. */
rc_tensor *rc_embedding_shard(rc_graph *g, rc_tensor *table, rc_tensor *ids, int64_t first, int64_t vocab);
rc_tensor *rc_one_hot_shard(rc_graph *g, rc_tensor *ids, int64_t depth, int ignore_index, rc_dtype t,
                            int64_t first, int64_t vocab);
/* d(cross_entropy)/d(logits) scaled by the scalar upstream gradient g_out (of the loss's
 * dtype), fused; the logits' dtype */
rc_tensor *rc_cross_entropy_grad(rc_graph *g, rc_tensor *logits, rc_tensor *targets,
                                 rc_tensor *g_out, int ignore_index);

/* ---- convolution and pooling (NCHW) ---------------------------------------------- */

/* Per axis (h, w). A zero stride, dilation or groups means 1. */
typedef struct {
    int stride[2], padding[2], dilation[2];
    int groups;
} rc_conv2d_params;

/* Per axis (h, w). A zero stride means the kernel size (torch's default); padding is at
 * most half the kernel. */
typedef struct {
    int kernel[2], stride[2], padding[2];
} rc_pool2d_params;

/* x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] or NULL -> [N, O, OH, OW] */
rc_tensor *rc_conv2d(rc_graph *g, rc_tensor *x, rc_tensor *weight, rc_tensor *bias,
                     const rc_conv2d_params *p);
/* The gradients of rc_conv2d (rc_backward makes them): w.r.t. x of spatial size h x w, and
 * w.r.t. the weight of kernel kh x kw; gy is the upstream gradient [N, O, OH, OW]. */
rc_tensor *rc_conv2d_grad_input(rc_graph *g, rc_tensor *gy, rc_tensor *weight, int64_t h,
                                int64_t w, const rc_conv2d_params *p);
rc_tensor *rc_conv2d_grad_weight(rc_graph *g, rc_tensor *gy, rc_tensor *x, int64_t kh,
                                 int64_t kw, const rc_conv2d_params *p);
/* x [N, C, H, W] -> [N, C, OH, OW] */
rc_tensor *rc_max_pool2d(rc_graph *g, rc_tensor *x, const rc_pool2d_params *p);
rc_tensor *rc_avg_pool2d(rc_graph *g, rc_tensor *x, const rc_pool2d_params *p);
/* The gradient of a pooling of x given the upstream gradient gy [N, C, OH, OW] */
rc_tensor *rc_pool2d_grad(rc_graph *g, rc_tensor *gy, rc_tensor *x, rc_pool_kind kind,
                          const rc_pool2d_params *p);

/* ---- shapes ------------------------------------------------------------------- */

rc_tensor *rc_reshape(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape);
rc_tensor *rc_permute(rc_graph *g, rc_tensor *a, const int *perm);
rc_tensor *rc_transpose(rc_graph *g, rc_tensor *a, int axis0, int axis1);
rc_tensor *rc_slice(rc_graph *g, rc_tensor *a, int axis, int64_t start, int64_t end);
rc_tensor *rc_pad(rc_graph *g, rc_tensor *a, int axis, int64_t before, int64_t size);
rc_tensor *rc_concat(rc_graph *g, rc_tensor *const *parts, int n, int axis);
/* n equal parts along axis, written to out[0..n-1]; returns 0 or -1 */
int rc_split(rc_graph *g, rc_tensor *a, int axis, int n, rc_tensor **out);
rc_tensor *rc_sum(rc_graph *g, rc_tensor *a, int axis, int keepdim);
rc_tensor *rc_mean(rc_graph *g, rc_tensor *a, int axis, int keepdim);
rc_tensor *rc_max(rc_graph *g, rc_tensor *a, int axis, int keepdim);
rc_tensor *rc_sum_all(rc_graph *g, rc_tensor *a);
rc_tensor *rc_mean_all(rc_graph *g, rc_tensor *a);
rc_tensor *rc_expand(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape);
rc_tensor *rc_sum_to(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape);

/* ---- autodiff ------------------------------------------------------------------ */

/* Activation recomputation. The nodes recorded between rc_remat_begin and rc_remat_end
 * form a segment: rc_backward recomputes them from the segment's inputs (what it reads
 * from outside: the previous block's output, parameters, constants) just before it needs
 * them, so a plan keeps only the inputs alive between the forward and the backward pass.
 * Gradients are those without recomputation, bitwise (the same kernels on the same
 * values; dropout draws the same mask). Segments do not nest; each returns 0 or -1 with
 * the graph's error set. */
int rc_remat_begin(rc_graph *g);
int rc_remat_end(rc_graph *g);
/* Asks the built-in model families to make every `every`-th transformer block a segment
 * (0: none; the Trainer sets it from rc_train_options.remat). */
void rc_graph_set_remat(rc_graph *g, int every);
int rc_graph_remat(const rc_graph *g);
/* Marks g as a training step's graph (0 by default): the built-in model families then apply
 * their configuration's dropout (resid, embd and attention probabilities, where Hugging
 * Face's classes apply them in train mode), each site an rc_dropout of its own key mixed with
 * the plan's run key (rc_plan_set_rng). The Trainer sets it on the training step's graph
 * unless rc_train_options.no_dropout; evaluation and prediction graphs stay 0. */
void rc_graph_set_training(rc_graph *g, int on);
int rc_graph_training(const rc_graph *g);

/* Adds to g the nodes computing d(loss)/d(wrt[i]) into grads[i], for a scalar loss.
 * The new nodes are ordinary ops, so they can be differentiated again. A wrt tensor
 * that loss does not depend on gets a zero tensor. Returns 0, or -1 with the
 * graph's error set. */
int rc_backward(rc_graph *g, rc_tensor *loss, rc_tensor *const *wrt, int n, rc_tensor **grads);

/* ---- execution ---------------------------------------------------------------- */

typedef struct rc_plan rc_plan;

typedef struct {
    int64_t nodes;            /* nodes executed per run */
    size_t peak_bytes;        /* size of the planned arena: intermediates at their peak */
    size_t naive_bytes;       /* what giving every intermediate its own buffer would take */
    double last_run_s;        /* wall time of the last run */
    double last_kernel_s;     /* of which inside kernels (BLAS included); with timing on */
    double op_s[RC_OP_COUNT]; /* kernel time of the last run by op; with timing on */
    int64_t op_count[RC_OP_COUNT]; /* kernels run per op in one run */
    double op_bytes[RC_OP_COUNT];  /* their outputs' and inputs' bytes: about what a run's
                                    * kernels of each op read and write at the least */
} rc_plan_stats;

/* Plans the execution of everything `outputs` depend on on the CPU backend: order,
 * liveness, one arena for all intermediates, and the memory of every node. Every leaf
 * must have values (rc_plan_set_input, rc_plan_bind or rc_graph_bind) before rc_plan_run. */
rc_plan *rc_plan_new(rc_graph *g, rc_tensor *const *outputs, int n, rc_error *err);
/* The same on backend be. An op or dtype the backend has no kernel for is an error here,
 * naming the op, the dtype and the backend; nothing falls back to another backend. */
rc_plan *rc_plan_new_on(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                        rc_error *err);
rc_backend *rc_plan_backend(const rc_plan *p);
/* Binds leaf to rc_tensor_nbytes(leaf) bytes at `offset` of buf (of the plan's backend)
 * for this plan's runs. */
int rc_plan_bind(rc_plan *p, const rc_tensor *leaf, rc_buffer *buf, size_t offset, rc_error *err);
/* Copies rc_tensor_nbytes(leaf) bytes of host memory into the leaf's memory: its bound
 * buffer, or memory of the plan's own. */
int rc_plan_set_input(rc_plan *p, const rc_tensor *leaf, const void *host, rc_error *err);
/* Copies the values of t (an output, a leaf, or a view of one) into host memory:
 * rc_tensor_nbytes(t) bytes, as of the last run. */
int rc_plan_read(const rc_plan *p, const rc_tensor *t, void *host, rc_error *err);
/* Where t's values are: its buffer and offset (an output, a leaf, or a view of one);
 * -1 when t has no memory in this plan. */
int rc_plan_memory(const rc_plan *p, const rc_tensor *t, rc_buffer **buf, size_t *offset);
int rc_plan_run(rc_plan *p, rc_error *err);
/* The figures of a plan (peak bytes, nodes) without allocating its arena: what a model
 * would need, for models too large to run here. */
int rc_plan_estimate(rc_graph *g, rc_tensor *const *outputs, int n, rc_plan_stats *stats, rc_error *err);
void rc_plan_free(rc_plan *p);
rc_plan_stats rc_plan_get_stats(const rc_plan *p);
/* The key mixed into every dropout mask and RC_RNG_RUN normal of the next runs (trainers
 * set one per step and data-parallel rank); the forward and backward of one run always
 * share their masks. */
void rc_plan_set_rng(rc_plan *p, rc_rng key);
/* The key mixed into every RC_RNG_STEP normal of the next runs (the trainer sets one per
 * optimizer step from the run's seed, the same on every data-parallel rank). */
void rc_plan_set_step_rng(rc_plan *p, rc_rng key);
/* The collective the plan runs for MP_REDUCE (op 0: sum) and MP_MAX (op 1: max) over the
 * model axis, in place on n elements of dtype t at byte `offset` of buf; returns 0 or -1
 * with err set. */
typedef int (*rc_collective_fn)(void *ctx, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t,
                                int op, rc_error *err);
void rc_plan_set_collective(rc_plan *p, rc_collective_fn fn, void *ctx);
/* Times each kernel when on (for benchmarks); off by default. */
void rc_plan_set_timing(rc_plan *p, int on);

/* Threads for the kernels and BLAS (n <= 0: one per processor). */
void rc_set_threads(int n);
int rc_get_threads(void);

/* ---- random numbers -------------------------------------------------------------- */

rc_rng rc_rng_new(uint64_t seed);
/* a new independent key from (key, data): per step, per rank, per layer */
rc_rng rc_rng_fold(rc_rng r, uint64_t data);
uint64_t rc_rng_next_u64(rc_rng *r);
double rc_rng_uniform(rc_rng *r);          /* [0, 1) */
double rc_rng_normal(rc_rng *r);           /* standard normal */
/* the element-wise stream used by dropout: uniform [0, 1) for element i */
double rc_rng_uniform_at(uint64_t key, uint64_t i);

/* ---- optimizers (run by the buffers' backend) ------------------------------------- */

/* Every field is used as given: no defaults here (beta1 0 is no momentum); the Trainer's
 * defaults are rc_train_options's. */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;             /* updates done so far, this one included (from 1) */
} rc_adam;

/* w -= lr * grad over n f32 at element `at` of both buffers (one backend). */
int rc_sgd_update(rc_buffer *w, rc_buffer *grad, int64_t at, int64_t n, double lr, rc_error *err);
/* AdamW with decoupled weight decay (torch.optim.AdamW's arithmetic) over n f32 at element
 * `at` of w, grad and the moments m and v. */
int rc_adamw_update(rc_buffer *w, rc_buffer *grad, rc_buffer *m, rc_buffer *v, int64_t at, int64_t n,
                    const rc_adam *opt, rc_error *err);

/* ---- learning-rate schedules (counted in optimizer steps) ------------------------------ */

typedef enum {
    RC_SCHEDULE_CONSTANT = 0,
    RC_SCHEDULE_LINEAR,      /* warmup, then linear decay to min_lr at `total` */
    RC_SCHEDULE_COSINE       /* warmup, then half a cosine down to min_lr at `total` */
} rc_schedule_kind;

typedef struct {
    rc_schedule_kind kind;
    double lr, min_lr;
    int64_t warmup;           /* optimizer steps of linear warmup: lr (k+1)/warmup at step k */
    int64_t total;            /* optimizer steps in the run */
} rc_schedule;

/* The learning rate of optimizer step `step` (0-based). */
double rc_schedule_lr(const rc_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif

#endif
