/* internal.h - what the library's modules share and users never see. */
#ifndef REDCO_INTERNAL_H
#define REDCO_INTERNAL_H

#include "redco.h"

#include <stdarg.h>

struct rc_graph {
    rc_tensor **nodes;            /* in creation order, which is a topological order */
    int n, cap;
    int err_code;
    char err[512];
    void **owned;                 /* buffers of constants, freed with the graph */
    int nowned, owned_cap;
    uint64_t serial;              /* unique per graph ever made: caches keyed on a graph use it,
                                     since a new graph may reuse a freed one's address */
};

/* Records the first error of a graph; returns NULL so builders can `return rci_fail(...)`. */
rc_tensor *rci_fail(rc_graph *g, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));


/* A new node with the given inputs; NULL (error set) when allocation fails. */
rc_tensor *rci_node_new(rc_graph *g, rc_op op, rc_dtype t, int ndim, const int64_t *shape,
                       int nsrc, rc_tensor *const *src);
/* 1 when g already failed or any of the n inputs is NULL: builders return NULL then. */
int rci_inputs_bad(rc_graph *g, int n, rc_tensor *const *src);
/* Checks a node against an op name, returns an axis in [0, ndim) or -1 with the error set. */
int rci_axis_check(rc_graph *g, const char *op, const rc_tensor *t, int axis);
/* numpy broadcast of a and b into out; -1 (error set) when incompatible. */
int rci_broadcast_shapes(rc_graph *g, const char *op, const rc_tensor *a, const rc_tensor *b,
                        int *ndim, int64_t *shape);
int rci_same_shape(const rc_tensor *a, const rc_tensor *b);
/* 0 when t is f32 or f64 (what kernels compute in); else -1 with the graph's error set. */
int rci_float_input(rc_graph *g, const char *op, const rc_tensor *t);
int64_t rci_shape_numel(int ndim, const int64_t *shape);

/* Gradient rule of one node: given the gradient of its output, add the nodes for the
 * gradients of its inputs into gsrc[i] (NULL where an input gets none). In grad.c. */
int rci_grad_node(rc_graph *g, rc_tensor *node, rc_tensor *gout, rc_tensor **gsrc);

/* ---- CPU kernels --------------------------------------------------------------------
 * Contract: the executor calls a kernel once per non-view, non-leaf node, after every
 * src has its data. node->data points at rc_tensor_nbytes(node) bytes of uninitialised
 * memory (the kernel writes every element), never overlapping any src. All tensors are
 * contiguous row-major. Element-wise and where/equal inputs broadcast numpy-style
 * against the node's shape (shapes right-aligned, size-1 axes repeat). A kernel returns
 * 0, or -1 with err set naming the op and the offending value (e.g. an id out of range).
 * Kernels use OpenMP for threads and never allocate on the heap in their loops. */
int rci_cpu_kernel_f32(rc_tensor *node, rc_error *err);  /* node dtype f32 (src may be i32) */
int rci_cpu_kernel_f64(rc_tensor *node, rc_error *err);  /* node dtype f64 */
/* Dtype-agnostic data movement: PERMUTE, SLICE (copying form), PAD, CONCAT, EXPAND, CAST.
 * Returns 1 when it handled the op, 0 when the op is not one of its, -1 on error. */
int rci_cpu_kernel_move(rc_tensor *node, rc_error *err);
/* Dispatch by op and dtype. */
int rci_cpu_run(rc_tensor *node, rc_error *err);

/* The element-wise random stream of dropout (also in rng.c, used by kernels). */
uint64_t rci_hash64(uint64_t x);

#endif
