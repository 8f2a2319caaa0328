/* weights.c - the flat parameter buffer and its table. */
#include "nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rci_nn_weights_add(nn_weights *w, const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > 4 || w->data)
        return -1;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        nn_param *p = realloc(w->p, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        w->p = p;
        w->cap = cap;
    }
    nn_param *p = &w->p[w->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= shape[i];
    }
    p->offset = w->numel;
    w->numel += p->numel;
    return 0;
}

int rci_nn_weights_alloc(nn_weights *w)
{
    w->data = calloc((size_t)(w->numel ? w->numel : 1), sizeof *w->data);
    return w->data ? 0 : -1;
}

void rci_nn_weights_free(nn_weights *w)
{
    free(w->p);
    free(w->data);
    memset(w, 0, sizeof *w);
}

float *rci_nn_weights_get(const nn_weights *w, int i)
{
    return w->data + w->p[i].offset;
}

int rci_nn_weights_find(const nn_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->p[i].name, name))
            return i;
    return -1;
}
