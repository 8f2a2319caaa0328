/* autodiff.c - reverse-mode differentiation: walks the graph from the loss back to the
 * requested tensors, adding gradient nodes built from ordinary ops. A recomputation
 * segment (rc_remat_begin) is recorded again, from its inputs, when the walk reaches it,
 * and its gradient rules read the recomputed nodes: the forward's own are then dead once
 * the forward pass has used them. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* needs[i] = 1 when node i depends on any of the wrt tensors. */
static char *dependents(const rc_graph *g, int last, rc_tensor *const *wrt, int n)
{
    char *needs = calloc((size_t)last + 1, 1);
    if (!needs)
        return NULL;
    for (int i = 0; i < n; i++)
        if (wrt[i]->id <= last)
            needs[wrt[i]->id] = 1;
    for (int i = 0; i <= last; i++) {
        const rc_tensor *t = g->nodes[i];
        for (int s = 0; s < t->nsrc && !needs[i]; s++)
            if (t->src[s] && needs[t->src[s]->id])
                needs[i] = 1;
    }
    return needs;
}

/* node y again, its inputs taken from the recomputed ones (clone) where there are */
static rc_tensor *node_again(rc_graph *g, const rc_tensor *y, rc_tensor **clone)
{
    rc_tensor *src[RC_MAX_SRC];
    for (int s = 0; s < y->nsrc; s++)
        src[s] = y->src[s] && clone[y->src[s]->id] ? clone[y->src[s]->id] : y->src[s];
    rc_tensor *c = rci_node_new(g, y->op, y->dtype, y->ndim, y->shape, y->nsrc, src);
    if (!c)
        return NULL;
    memcpy(c->iparam, y->iparam, sizeof c->iparam);
    memcpy(c->fparam, y->fparam, sizeof c->fparam);
    c->flags = y->flags;
    memcpy(c->name, y->name, sizeof c->name);
    if (y->view_src) {
        c->view_src = clone[y->view_src->id] ? clone[y->view_src->id] : y->view_src;
        c->view_offset = y->view_offset;
    }
    return c;
}

/* Records segment `seg` (its nodes up to id last) again, in order, into clone[]. */
static int recompute(rc_graph *g, int seg, int last, rc_tensor **clone)
{
    for (int j = 0; j <= last; j++) {
        const rc_tensor *y = g->nodes[j];
        if (y->segment == seg && y->op != RC_OP_LEAF && !(clone[j] = node_again(g, y, clone)))
            return -1;
    }
    return 0;
}

/* x's parts along axis ax into parts[n ..]: a concat's on that axis, else x itself; the
 * new count, -1 past RC_MAX_SRC */
static int concat_parts(rc_tensor *x, int ax, rc_tensor **parts, int n)
{
    int k = x->op == RC_OP_CONCAT && x->iparam[0] == ax ? x->nsrc : 1;
    if (n + k > RC_MAX_SRC)
        return -1;
    for (int i = 0; i < k; i++)
        parts[n + i] = k == 1 ? x : x->src[i];
    return n + k;
}

/* The concat of n parts along ax as a view when they are views of one tensor's storage,
 * each right after the one before, and ax is their outermost axis of extent above 1 (the
 * concat is then those bytes: the packed gradient of a fused attention, whose dq, dk and
 * dv lie one after the other); else the concat */
static rc_tensor *concat_of(rc_graph *g, rc_tensor **parts, int n, int ax)
{
    rc_tensor *base = parts[0]->view_src;
    int64_t size = (int64_t)rc_dtype_size(parts[0]->dtype), at = parts[0]->view_offset, total = 0;
    int view = base != NULL && parts[0]->dtype == base->dtype;
    for (int i = 0; view && i < ax; i++)
        view = parts[0]->shape[i] == 1;
    for (int p = 0; view && p < n; p++) {
        view = parts[p]->view_src == base && parts[p]->view_offset == at;
        at += (int64_t)rc_tensor_nbytes(parts[p]);
        total += rc_tensor_numel(parts[p]);
    }
    rc_tensor *c = rc_concat(g, parts, n, ax);
    if (!view || !c)
        return c;
    int64_t flat = rc_tensor_numel(base), from = parts[0]->view_offset / size;
    rc_tensor *bytes = rc_slice(g, rc_reshape(g, base, 1, &flat), 0, from, from + total);
    return rc_reshape(g, bytes, c->ndim, c->shape);
}

/* The sum of two gradients that pad adjacent ranges of one axis (the slices of one tensor,
 * as GPT-2's q, k and v of its one projection) as one pad of their values' concat, or the
 * concat alone once the ranges cover the axis: the same values (the pads' zeros added
 * nowhere), without writing the zeros and adding them. NULL when a and b are not so. */
static rc_tensor *pads_joined(rc_graph *g, rc_tensor *a, rc_tensor *b)
{
    if (a->op != RC_OP_PAD || b->op != RC_OP_PAD || a->iparam[0] != b->iparam[0] || a->dtype != b->dtype)
        return NULL;
    int ax = a->iparam[0];
    rc_tensor *lo = a->iparam[1] < b->iparam[1] ? a : b, *hi = lo == a ? b : a, *parts[RC_MAX_SRC];
    if (lo->iparam[1] + lo->src[0]->shape[ax] != hi->iparam[1] || a->ndim != b->ndim)
        return NULL;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return NULL;
    int n = concat_parts(lo->src[0], ax, parts, 0);
    n = n < 0 ? n : concat_parts(hi->src[0], ax, parts, n);
    if (n < 0)
        return NULL;
    rc_tensor *c = concat_of(g, parts, n, ax);
    if (!c || (lo->iparam[1] == 0 && c->shape[ax] == a->shape[ax]))
        return c;
    return rc_pad(g, c, ax, lo->iparam[1], a->shape[ax]);
}

/* 1 when gradient gt, just made by its rule, is a norm's dx that can add had in its own
 * pass (rci_norm_grad_plus): a residual stream's gradient and its norm's, in one node where
 * an add would read both again */
static int adds_in_norm_grad(const rc_tensor *gt, const rc_tensor *had)
{
    return gt->op == RC_OP_NORM_GRAD && gt->iparam[1] == 0 && gt->nsrc == 3 && had->dtype == gt->dtype &&
           rci_same_shape(had, gt);
}

static void accumulate(rc_graph *g, rc_tensor **grad, rc_tensor *t, rc_tensor *gt)
{
    rc_tensor *had = grad[t->id], *joined = had ? pads_joined(g, had, gt) : NULL;
    if (joined)
        grad[t->id] = joined;
    else if (had && adds_in_norm_grad(gt, had))
        grad[t->id] = rci_norm_grad_plus(g, gt, had);
    else
        grad[t->id] = had ? rc_add(g, had, gt) : gt;
}

/* The gradients of node y's inputs through its value written with ops (rci_value_as_ops)
 * from stand-ins of its float inputs (stop_gradient nodes, so that the nested walk takes
 * y's direct dependence alone: a path from an input to another through the graph, such as
 * x to the upstream G, is the outer walk's): rc_backward of sum(value G) over the
 * stand-ins, each gradient in its input's dtype */
static int grad_through(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *in[RC_MAX_SRC], *wrt[RC_MAX_SRC], *d[RC_MAX_SRC];
    int at[RC_MAX_SRC], n = 0;
    for (int k = 0; k < y->nsrc; k++) {
        gs[k] = NULL;
        in[k] = y->src[k];
        if (in[k] && rc_dtype_is_float(in[k]->dtype)) {
            in[k] = rc_stop_gradient(g, in[k]);
            at[n] = k;
            wrt[n++] = in[k];
        }
    }
    rc_tensor *v = g->err_code ? NULL : rci_value_as_ops(g, y, in);
    rc_tensor *loss = v ? rc_sum_all(g, rc_mul(g, v, rc_cast(g, G, v->dtype))) : NULL;
    if (!loss || rc_backward(g, loss, wrt, n, d))
        return -1;
    for (int i = 0; i < n; i++)
        gs[at[i]] = rc_cast(g, d[i], y->src[at[i]]->dtype);
    return 0;
}

int rc_backward(rc_graph *g, rc_tensor *loss, rc_tensor *const *wrt, int n, rc_tensor **grads)
{
    if (rci_inputs_bad(g, 1, &loss) || (n > 0 && (!wrt || !grads)))
        return -1;
    if (rci_inputs_bad(g, n, wrt))
        return -1;
    if (rc_tensor_numel(loss) != 1 || !rc_dtype_is_float(loss->dtype)) {
        char s[96];
        rci_fail(g, RC_ERR_SHAPE, "backward: the loss must be a float scalar, not %s %s",
                rc_shape_str(loss, s, sizeof s), rc_dtype_name(loss->dtype));
        return -1;
    }
    int last = loss->id;
    char *needs = dependents(g, last, wrt, n);
    rc_tensor **grad = calloc((size_t)last + 1, sizeof *grad);
    rc_tensor **clone = calloc((size_t)last + 1, sizeof *clone); /* recomputed nodes */
    int segments = 0; /* the highest segment id: a partitioned graph keeps its source's ids */
    for (int i = 0; i <= last; i++)
        segments = g->nodes[i]->segment > segments ? g->nodes[i]->segment : segments;
    char *done = calloc((size_t)segments + 1, 1);                 /* segments recomputed */
    if (!needs || !grad || !clone || !done) {
        free(needs);
        free(grad);
        free(clone);
        free(done);
        rci_fail(g, RC_ERR_MEMORY, "backward: out of memory for %d nodes", last + 1);
        return -1;
    }
    grad[last] = rc_full(g, loss->dtype, loss->ndim, loss->shape, 1.0);
    for (int i = last; i >= 0 && !g->err_code; i--) {
        rc_tensor *y = g->nodes[i];
        if (!grad[i] || !needs[i] || y->op == RC_OP_LEAF)
            continue;
        if (y->segment && !done[y->segment]) {
            done[y->segment] = 1;
            if (recompute(g, y->segment, i, clone))
                break;
        }
        rc_tensor *gs[RC_MAX_SRC], *node = clone[i] ? clone[i] : y;
        if (rci_grad_by_value(node) ? grad_through(g, node, grad[i], gs) : rci_grad_node(g, node, grad[i], gs))
            break;
        for (int s = 0; s < y->nsrc; s++)
            if (gs[s] && y->src[s] && needs[y->src[s]->id])
                accumulate(g, grad, y->src[s], gs[s]);
    }
    for (int i = 0; i < n && !g->err_code; i++) {
        rc_tensor *w = wrt[i];
        grads[i] = w->id <= last ? grad[w->id] : NULL;
        if (!grads[i])
            grads[i] = rc_full(g, rc_dtype_is_float(w->dtype) ? w->dtype : loss->dtype, w->ndim,
                               w->shape, 0.0);
    }
    free(needs);
    free(grad);
    free(clone);
    free(done);
    return g->err_code ? -1 : 0;
}
