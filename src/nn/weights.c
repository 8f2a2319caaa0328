/* weights.c - the flat parameter buffer and its table; values cross to the host only by
 * copies. */
#include "internal.h"
#include "nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rci_nn_weights_add(nn_weights *w, const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > 4 || w->buf)
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

int rci_nn_weights_alloc(nn_weights *w, rc_backend *be, rc_error *err)
{
    w->buf = rc_buffer_new(be, (size_t)w->numel * sizeof(float), err);
    return w->buf ? 0 : rci_error_prefix(err, "the parameters (%lld floats)", (long long)w->numel);
}

void rci_nn_weights_free(nn_weights *w)
{
    free(w->p);
    rc_buffer_free(w->buf);
    memset(w, 0, sizeof *w);
}

size_t rci_nn_weights_offset(const nn_weights *w, int i)
{
    return (size_t)w->p[i].offset * sizeof(float);
}

int rci_nn_weights_read(const nn_weights *w, int i, float *host, rc_error *err)
{
    if (!w->buf)
        return rc_error_set(err, RC_ERR_ARG, "weights: '%s' has no memory", w->p[i].name);
    return rc_buffer_download(w->buf, rci_nn_weights_offset(w, i), host,
                              (size_t)w->p[i].numel * sizeof(float), err);
}

int rci_nn_weights_write(nn_weights *w, int i, const float *host, rc_error *err)
{
    if (!w->buf)
        return rc_error_set(err, RC_ERR_ARG, "weights: '%s' has no memory", w->p[i].name);
    return rc_buffer_upload(w->buf, rci_nn_weights_offset(w, i), host,
                            (size_t)w->p[i].numel * sizeof(float), err);
}

int rci_nn_weights_find(const nn_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->p[i].name, name))
            return i;
    return -1;
}
