/* node.h - what the shared layer's node files share (inside src/backend/gpu/ only): node.c
 * at the bottom (kernel names, storage, scratch, places, boxes), the nodes' runs above it
 * (ops_elementwise.c: element-wise ops, movement, casts, random draws; ops_rows.c:
 * reductions, softmax, norms, ids, cross-entropy, rope, matrix products, convolution and
 * pooling; ops_attention.c: fused attention), and run.c on top (supports, the dispatch,
 * scratch sizes, the table, which holds update.c's optimizer work too).
 *
 * Memory is (rci_gpu_mem, element offset): elements of 4 bytes (f32, i32) or 2 (bf16,
 * f16), so a byte offset is the element size times an element offset. Boxes (shapes with
 * per-input strides) are simplified as the CPU does: size-1 axes dropped, axes that
 * continue each other merged. */
#ifndef REDCO_GPU_NODE_H
#define REDCO_GPU_NODE_H

#include "gpu.h"

/* a kernel argument of a variable's value */
#define ARG(v) {sizeof(v), &(v)}

enum { RCI_GPU_BOX_MAX = 8 };   /* axes a kernel's long8 can carry (RC_MAX_DIMS <= 8) */

/* A box of nd axes and the element strides of up to 3 inputs (or output and input) on it. */
typedef struct {
    int nd;
    int64_t shape[RCI_GPU_BOX_MAX];
    int64_t st[3][RCI_GPU_BOX_MAX];
} rci_gpu_box;

static inline rci_gpu_long8 rci_gpu_long8_of(const int64_t *v)
{
    rci_gpu_long8 r;
    for (int i = 0; i < RCI_GPU_BOX_MAX; i++)
        r.s[i] = v[i];
    return r;
}

static inline const char *rci_gpu_op_name(const rc_tensor *node)
{
    return rc_op_name(node->op);
}

static inline int64_t rci_gpu_last_dim(const rc_tensor *t)
{
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* the product of all axes but the last */
static inline int64_t rci_gpu_lead_rows(const rc_tensor *t)
{
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++)
        r *= t->shape[i];
    return r;
}

static inline int rci_gpu_is_move(rc_op op)
{
    return op == RC_OP_PERMUTE || op == RC_OP_SLICE || op == RC_OP_PAD || op == RC_OP_CONCAT ||
           op == RC_OP_EXPAND;
}

/* kernel k of the node's storage over n work-items */
static inline int rci_gpu_launch_node(rci_gpu *g, const rc_tensor *node, rci_gpu_kernel k,
                                      const rci_gpu_arg *args, int nargs, size_t n, const char *what,
                                      rc_error *err)
{
    return g->ops->launch(g, rci_gpu_storage(node), k, args, nargs, n, 0, what, err);
}

/* work-items per row of the row kernels (layer and RMS norms, the attention's rows):
 * kernels.cl's ROW_GROUP */
enum { RCI_GPU_ROW_GROUP = 128 };

/* the most rows a work-group of a norm's weight gradient takes (kernels.cl's WGRAD_ROWS) */
enum { RCI_GPU_WGRAD_ROWS = 32 };

/* kernel k of the node's storage over `groups` work-groups of `group` work-items each */
static inline int rci_gpu_launch_groups(rci_gpu *g, const rc_tensor *node, rci_gpu_kernel k,
                                        const rci_gpu_arg *args, int nargs, size_t groups, size_t group,
                                        const char *what, rc_error *err)
{
    return g->ops->launch(g, rci_gpu_storage(node), k, args, nargs, groups * group, group, what, err);
}

/* kernel k of the f32 program (i32 and conversions) over n work-items */
static inline int rci_gpu_launch_f32(rci_gpu *g, rci_gpu_kernel k, const rci_gpu_arg *args, int nargs,
                                     size_t n, const char *what, rc_error *err)
{
    return g->ops->launch(g, RC_F32, k, args, nargs, n, 0, what, err);
}

/* ---- node.c ---- */

/* Drops size-1 axes of shape[nd] and merges axes that continue each other in all k stride
 * sets; a box of no axes becomes one axis of size 1. */
void rci_gpu_box_make(rci_gpu_box *b, int nd, const int64_t *shape, int k, int64_t st[][RC_MAX_DIMS]);
/* the node's inputs 0 .. nin-1 broadcast over its shape */
void rci_gpu_bcast_box(const rc_tensor *node, int nin, rci_gpu_box *b);

/* the place of memory m holding elements of dtype t */
int rci_gpu_place_of(const rci_mem *m, const rc_tensor *node, rc_dtype t, rci_gpu_place *p, rc_error *err);
/* The places of the output and the first nin inputs. */
int rci_gpu_places(const rci_node_run *r, int nin, rci_gpu_place *out, rci_gpu_place *in, rc_error *err);
/* an optional input's place; the output's (never read) when absent */
int rci_gpu_optional_place(const rci_node_run *r, int k, const rci_gpu_place *out, rci_gpu_place *p,
                           int32_t *has, rc_error *err);

/* Bytes of scratch rci_gpu_f32_temps takes: none for f32 values, else skip + n floats */
size_t rci_gpu_f32_temps_scratch(const rc_tensor *node, int64_t skip, int64_t n);
/* n f32 temporaries for a kernel that would keep them in its output: the output itself
 * for f32 values, else scratch from float `skip` on */
int rci_gpu_f32_temps(rci_gpu *g, const rc_tensor *node, const rci_gpu_place *out, int64_t skip, int64_t n,
                      rci_gpu_place *tmp, rc_error *err);

/* A dropout mask's constants as k_dropout and the attention kernels take them: the node's
 * key (iparam[at], iparam[at + 1]) mixed with the run key, the threshold ceil(p 2^32) that
 * a kept element's draw reaches (scalar.h's rci_drop_kept; 0 when p is 0), and a kept
 * element's factor 1 / (1 - p) (0 when p is 1). */
typedef struct {
    uint64_t key, thresh;
    float keep;
} rci_gpu_mask;
rci_gpu_mask rci_gpu_mask_of(const rci_node_run *r, int at, double p);

/* ---- ops_elementwise.c: one node each (its memory placed, its output not empty) ---- */

int rci_gpu_run_full(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_unary(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_act(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_binary(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_where(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_equal(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_move(rci_gpu *g, const rci_node_run *r, rc_error *err);   /* movement ops and casts */
int rci_gpu_run_dropout(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_normal(rci_gpu *g, const rci_node_run *r, rc_error *err);
/* The box shape[nd] from src (element strides ss, from element soff; a stride 0 repeats) to
 * dst (strides ds, from element doff), elements of dtype t (4 bytes: the f32 program's copy;
 * 2: t's): k_copy, the movement ops' kernel. */
int rci_gpu_copy_box(rci_gpu *g, rc_dtype t, rci_gpu_mem dst, int64_t doff, const int64_t *ds, rci_gpu_mem src,
                     int64_t soff, const int64_t *ss, int nd, const int64_t *shape, const char *what, rc_error *err);

/* ---- ops_rows.c ---- */

int rci_gpu_run_reduce(rci_gpu *g, const rci_node_run *r, rc_error *err);   /* SUM, MAX */
int rci_gpu_run_sum_to(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_softmax(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_layer_norm(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_rms_norm(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_norm_grad(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_embedding(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_embedding_grad(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_one_hot(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_cross_entropy(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_cross_entropy_grad(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_rope(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_matmul(rci_gpu *g, const rci_node_run *r, rc_error *err);
int rci_gpu_run_conv2d(rci_gpu *g, const rci_node_run *r, rc_error *err);   /* and its gradients */
int rci_gpu_run_pool2d(rci_gpu *g, const rci_node_run *r, rc_error *err);   /* and its gradient */

/* ---- ops_attention.c ---- */

int rci_gpu_run_attention(rci_gpu *g, const rci_node_run *r, rc_error *err);   /* and its stats, gradients */
/* Bytes of scratch an attention node (ATTENTION, _STATS, _GRAD) takes: one chunk's */
size_t rci_gpu_attention_scratch(const rci_gpu *g, const rc_tensor *node);
/* The scratch a chunk of (batch, kv head) pairs aims at (0: the default, 128 MiB or 1/128
 * of the device's memory where that is more); tests set it small to run one pair per
 * chunk. Process-wide. */
void rci_gpu_attention_chunk(size_t bytes);
/* bf16 attention's products on 16-bit operands, float operands in three bf16 parts
 * (ops_attention.c's ATT_SPLIT): 1 always (widened into f32 products where the backend has
 * no matmul_wide: tests run it on OpenCL so), 0 never, -1 (the default) where the backend
 * has matmul_wide. Process-wide. */
void rci_gpu_attention_split(int on);
/* The query rows of a block of a causal attention's products (0: the default, 256): a
 * node whose Tq = Tk is at least two blocks, with one query head a key/value head, runs its
 * products a block at a time, each against the keys its rows see; tests set it small.
 * Process-wide. */
void rci_gpu_attention_block(int64_t rows);
/* 1: bf16 attention in tiles on every device (kernels.cl's k_attention_tile*; where the
 * device has no mma, their fragments through local memory: tests run it so on OpenCL);
 * 0: as rc_set_tiled_attention says. Process-wide, set before plans are made (their
 * scratch depends on it). */
void rci_gpu_attention_tiled(int on);

/* ---- ops_rows.c: the scratch of every node ---- */

/* Bytes of scratch node (a checked one) takes: the sizes those runs take their scratch by */
size_t rci_gpu_node_scratch(const rci_gpu *g, const rc_tensor *node);

/* ---- update.c: the optimizer's work (backend.h's update, accumulate, round_f32, sum_squares) ---- */

int rci_gpu_update(rc_backend *be, const rci_update *u, rc_error *err);
int rci_gpu_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src, size_t soff, int64_t n,
                       rc_dtype st, float scale, int add, rc_error *err);
int rci_gpu_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src, int64_t sat,
                      int64_t n, rc_error *err);
int rci_gpu_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts, double *out,
                        rc_error *err);

#endif
