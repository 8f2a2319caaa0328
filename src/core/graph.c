/* graph.c - the lazy graph: node creation, leaves, constants and the sticky error. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rc_graph *rc_graph_new(void)
{
    static uint64_t graphs;
    rc_graph *g = calloc(1, sizeof(rc_graph));
    if (g)
        g->serial = ++graphs;
    return g;
}

void rc_graph_free(rc_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->nodes[i]);
    for (int i = 0; i < g->sources_cap; i++)
        free((void *)g->sources[i].host);
    free(g->sources);
    free(g->nodes);
    free(g);
}

const char *rc_graph_error(const rc_graph *g)
{
    if (!g)
        return "graph: NULL graph";
    return g->err_code ? g->err : NULL;
}

int rc_graph_error_code(const rc_graph *g)
{
    return g ? g->err_code : RC_ERR_ARG;
}

int rc_graph_size(const rc_graph *g)
{
    return g ? g->n : 0;
}

rc_tensor *rc_graph_node(const rc_graph *g, int i)
{
    return g && i >= 0 && i < g->n ? g->nodes[i] : NULL;
}

rc_tensor *rci_fail(rc_graph *g, int code, const char *fmt, ...)
{
    if (g && !g->err_code) {
        va_list ap;
        va_start(ap, fmt);
        g->err_code = code;
        vsnprintf(g->err, sizeof g->err, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

int rci_inputs_bad(rc_graph *g, int n, rc_tensor *const *src)
{
    if (!g || g->err_code)
        return 1;
    for (int i = 0; i < n; i++)
        if (!src[i]) {
            rci_fail(g, RC_ERR_ARG, "graph: an op was given a NULL input (input %d)", i);
            return 1;
        }
    return 0;
}

rc_tensor *rci_node_new(rc_graph *g, rc_op op, rc_dtype t, int ndim, const int64_t *shape,
                       int nsrc, rc_tensor *const *src)
{
    if (ndim < 0 || ndim > RC_MAX_DIMS)
        return rci_fail(g, RC_ERR_SHAPE, "%s: %d dimensions (at most %d)", rc_op_name(op), ndim,
                       RC_MAX_DIMS);
    if (nsrc > RC_MAX_SRC)
        return rci_fail(g, RC_ERR_ARG, "%s: %d inputs (at most %d)", rc_op_name(op), nsrc,
                       RC_MAX_SRC);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return rci_fail(g, RC_ERR_SHAPE, "%s: negative extent %lld in dimension %d",
                           rc_op_name(op), (long long)shape[i], i);
        if (shape[i] && numel > RC_MAX_NUMEL / shape[i])
            return rci_fail(g, RC_ERR_SHAPE, "%s: the shape's extents up to dimension %d multiply past 2^48 "
                            "elements, more than any device can address", rc_op_name(op), i);
        numel *= shape[i];
    }
    for (int i = 0; i < nsrc; i++)
        if (src[i] && src[i]->id >= g->n)
            return rci_fail(g, RC_ERR_ARG, "%s: input %d belongs to another graph",
                           rc_op_name(op), i);
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        rc_tensor **nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return rci_fail(g, RC_ERR_MEMORY, "graph: out of memory at %d nodes", g->n);
        g->nodes = nodes;
        g->cap = cap;
    }
    rc_tensor *node = calloc(1, sizeof *node);
    if (!node)
        return rci_fail(g, RC_ERR_MEMORY, "graph: out of memory at %d nodes", g->n);
    node->id = g->n;
    node->op = op;
    node->dtype = t;
    node->ndim = ndim;
    if (ndim)
        memcpy(node->shape, shape, (size_t)ndim * sizeof *shape);
    node->nsrc = nsrc;
    for (int i = 0; i < nsrc; i++)
        node->src[i] = src[i];
    node->segment = g->segment;
    g->nodes[g->n++] = node;
    return node;
}

int rc_remat_begin(rc_graph *g)
{
    if (!g || g->err_code)
        return -1;
    if (g->segment) {
        rci_fail(g, RC_ERR_ARG, "remat: segment %d is still open (segments do not nest)", g->segment);
        return -1;
    }
    g->segment = ++g->segments;
    return 0;
}

int rc_remat_end(rc_graph *g)
{
    if (!g || g->err_code)
        return -1;
    if (!g->segment) {
        rci_fail(g, RC_ERR_ARG, "remat: no segment is open");
        return -1;
    }
    g->segment = 0;
    return 0;
}

void rc_graph_set_remat(rc_graph *g, int every)
{
    if (g)
        g->remat_every = every > 0 ? every : 0;
}

int rc_graph_remat(const rc_graph *g)
{
    return g ? g->remat_every : 0;
}

void rc_graph_set_training(rc_graph *g, int on)
{
    if (g)
        g->training = on != 0;
}

int rc_graph_training(const rc_graph *g)
{
    return g ? g->training : 0;
}

int rci_float_input(rc_graph *g, const char *op, const rc_tensor *t)
{
    if (rc_dtype_is_float(t->dtype))
        return 0;
    char s[96];
    rci_fail(g, RC_ERR_DTYPE, "%s: input %s has dtype %s (f32, f64, bf16 or f16)", op,
            rc_shape_str(t, s, sizeof s), rc_dtype_name(t->dtype));
    return -1;
}

int rci_axis_check(rc_graph *g, const char *op, const rc_tensor *t, int axis)
{
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        char s[96];
        rci_fail(g, RC_ERR_ARG, "%s: axis %d out of range for shape %s", op, axis,
                rc_shape_str(t, s, sizeof s));
        return -1;
    }
    return a;
}

int rci_broadcast_shapes(rc_graph *g, const char *op, const rc_tensor *a, const rc_tensor *b,
                        int *ndim, int64_t *shape)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1;
        int64_t db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            rci_fail(g, RC_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dimension %d: %lld vs %lld)",
                    op, rc_shape_str(a, sa, sizeof sa), rc_shape_str(b, sb, sizeof sb), i,
                    (long long)da, (long long)db);
            return -1;
        }
        shape[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return 0;
}

static rc_tensor *leaf_new(rc_graph *g, const char *name, rc_dtype t, int ndim,
                           const int64_t *shape, int flags)
{
    if (!g || g->err_code)
        return NULL;
    if ((unsigned)t >= RC_DTYPE_COUNT)
        return rci_fail(g, RC_ERR_DTYPE, "leaf '%s': unknown dtype %d", name ? name : "", (int)t);
    if (ndim > 0 && !shape)
        return rci_fail(g, RC_ERR_ARG, "leaf '%s': NULL shape", name ? name : "");
    rc_tensor *x = rci_node_new(g, RC_OP_LEAF, t, ndim, shape, 0, NULL);
    if (!x)
        return NULL;
    x->flags = flags;
    snprintf(x->name, sizeof x->name, "%s", name ? name : "");
    return x;
}

rc_tensor *rc_input(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape)
{
    return leaf_new(g, name, t, ndim, shape, RC_FLAG_INPUT);
}

rc_tensor *rc_param(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape)
{
    if (g && !g->err_code && !rc_dtype_is_float(t))
        return rci_fail(g, RC_ERR_DTYPE, "param '%s': a parameter must be a float type, not %s",
                       name ? name : "", rc_dtype_name(t));
    return leaf_new(g, name, t, ndim, shape, RC_FLAG_PARAM);
}

rc_tensor *rc_full(rc_graph *g, rc_dtype t, int ndim, const int64_t *shape, double value)
{
    if (!g || g->err_code)
        return NULL;
    if (ndim > 0 && !shape)
        return rci_fail(g, RC_ERR_ARG, "full: NULL shape");
    if (!rc_dtype_is_float(t))
        return rci_fail(g, RC_ERR_DTYPE, "full: dtype %s is not a float type (f32, f64, bf16, f16)",
                       rc_dtype_name(t));
    rc_tensor *x = rci_node_new(g, RC_OP_FULL, t, ndim, shape, 0, NULL);
    if (x)
        x->fparam[0] = value;
    return x;
}

rc_tensor *rc_normal(rc_graph *g, rc_dtype t, int ndim, const int64_t *shape, rc_rng key,
                     rc_rng_scope scope)
{
    if (!g || g->err_code)
        return NULL;
    if (ndim > 0 && !shape)
        return rci_fail(g, RC_ERR_ARG, "normal: NULL shape");
    if (!rc_dtype_is_float(t))
        return rci_fail(g, RC_ERR_DTYPE, "normal: dtype %s is not a float type (f32, f64, bf16, f16)",
                       rc_dtype_name(t));
    if (scope != RC_RNG_RUN && scope != RC_RNG_STEP)
        return rci_fail(g, RC_ERR_ARG, "normal: key scope %d (RC_RNG_RUN or RC_RNG_STEP)", (int)scope);
    rc_tensor *x = rci_node_new(g, RC_OP_NORMAL, t, ndim, shape, 0, NULL);
    if (x) {
        uint64_t k = rci_hash64(key.key ^ rci_hash64(key.counter));
        rci_node_set_key(x, 0, k);
        x->iparam[2] = (int32_t)scope;
    }
    return x;
}

rc_tensor *rc_scalar(rc_graph *g, rc_dtype t, double value)
{
    return rc_full(g, t, 0, NULL, value);
}

/* The source entry of node id, the table grown to hold it; NULL when memory runs out. */
rci_leaf_source *rci_graph_source_slot(rc_graph *g, int id)
{
    if (id >= g->sources_cap) {
        int cap = g->cap > id ? g->cap : id + 1;
        rci_leaf_source *grown = realloc(g->sources, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + g->sources_cap, 0, (size_t)(cap - g->sources_cap) * sizeof *grown);
        g->sources = grown;
        g->sources_cap = cap;
    }
    return &g->sources[id];
}

rc_tensor *rc_const(rc_graph *g, const char *name, rc_dtype t, int ndim, const int64_t *shape,
                    const void *values)
{
    rc_tensor *x = leaf_new(g, name, t, ndim, shape, 0);
    if (!x)
        return NULL;
    size_t bytes = rc_tensor_nbytes(x);
    rci_leaf_source *src = rci_graph_source_slot(g, x->id);
    void *data = src ? malloc(bytes ? bytes : 1) : NULL;
    if (!data)
        return rci_fail(g, RC_ERR_MEMORY, "const '%s': out of memory for %zu bytes", x->name, bytes);
    if (values)
        memcpy(data, values, bytes);
    else
        memset(data, 0, bytes);
    src->host = data;
    return x;
}

const rci_leaf_source *rci_graph_source(const rc_graph *g, int id)
{
    if (id < 0 || id >= g->sources_cap)
        return NULL;
    const rci_leaf_source *s = &g->sources[id];
    return s->host || s->buf ? s : NULL;
}
