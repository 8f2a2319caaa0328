/* batch.c - batches of named host arrays, and their graph inputs. */
#include "train_internal.h"

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
    rc_tensor *x = rc_input(g, a->name, a->dtype, a->ndim, a->shape);
    rc_tensor_bind(x, a->data);
    return x;
}
