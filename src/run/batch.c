/* batch.c - batches of named host arrays, their graph inputs, and the reasons the user's
 * functions give when they fail. */
#include "exec.h"
#include "run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *rc_batch_add(rc_batch *b, const char *name, rc_dtype t, int ndim, const int64_t *shape)
{
    if (b->n >= RC_BATCH_MAX || rc_batch_get(b, name) || ndim < 1 || ndim > RC_MAX_DIMS ||
        (t != RC_I32 && t != RC_F32))
        return NULL;
    rc_array *a = &b->a[b->n];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->dtype = t;
    a->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= a->shape[i] = shape[i];
    a->data = calloc((size_t)(n ? n : 1), 4);
    if (!a->data)
        return NULL;
    b->n++;
    return a->data;
}

const rc_array *rc_batch_get(const rc_batch *b, const char *name)
{
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->a[i].name, name))
            return &b->a[i];
    return NULL;
}

void rc_batch_free(rc_batch *b)
{
    for (int i = 0; i < b->n; i++)
        free(b->a[i].data);
    memset(b, 0, sizeof *b);
}

rc_tensor *rc_batch_input(rc_graph *g, const rc_batch *b, const char *name)
{
    if (!g || rc_graph_error(g))
        return NULL;
    const rc_array *a = rc_batch_get(b, name);
    if (!a)
        return rci_fail(g, RC_ERR_ARG, "batch: no array '%s' (collate made %d arrays)", name, b->n);
    /* one leaf per array per graph: reuse it when asked again */
    for (int i = 0; i < rc_graph_size(g); i++) {
        rc_tensor *t = rc_graph_node(g, i);
        if (t->op == RC_OP_LEAF && (t->flags & RC_FLAG_INPUT) && !strcmp(t->name, a->name))
            return t;
    }
    return rc_input(g, a->name, a->dtype, a->ndim, a->shape);
}

/* a has x's dtype and shape */
static int array_fits(const rc_array *a, const rc_tensor *x)
{
    int same = a && a->dtype == x->dtype && a->ndim == x->ndim;
    for (int k = 0; same && k < a->ndim; k++)
        same = a->shape[k] == x->shape[k];
    return same;
}

int rc_batch_feed(const rc_batch *b, rc_plan *p, rc_error *err)
{
    const rc_graph *g = rci_plan_graph(p);
    for (int i = 0; g && i < rc_graph_size(g); i++) {
        rc_tensor *x = rc_graph_node(g, i);
        if (x->op != RC_OP_LEAF || !(x->flags & RC_FLAG_INPUT) || !rci_plan_has(p, x))
            continue;
        const rc_array *a = rc_batch_get(b, x->name);
        if (!array_fits(a, x)) {
            char want[96];
            return rc_error_set(err, RC_ERR_SHAPE, "collate: array '%s' %s; the step was built for %s %s",
                                x->name, a ? "changed shape or dtype" : "is missing",
                                rc_shape_str(x, want, sizeof want), rc_dtype_name(x->dtype));
        }
        if (rc_plan_set_input(p, x, a->data, err))
            return -1;
    }
    return 0;
}

int rci_user_failed(rc_error *err, const rc_error *why, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (why->code || why->msg[0])
        return rc_error_set(err, why->code ? why->code : RC_ERR_ARG, "%s: %s", what, why->msg);
    return rc_error_set(err, RC_ERR_ARG, "%s (it gave no reason)", what);
}
