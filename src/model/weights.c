/* weights.c - the flat parameter buffer and its table; values cross to the host only by
 * copies. */
#include "internal.h"
#include "nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rci_nn_weights_add(rci_nn_weights *w, const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > 4 || w->buf)
        return -1;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        rci_nn_param *p = realloc(w->p, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        w->p = p;
        w->cap = cap;
    }
    rci_nn_param *p = &w->p[w->n++];
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

/* the storage dtypes of a weight buffer */
static int storage_ok(rc_dtype t)
{
    return t == RC_F32 || t == RC_BF16 || t == RC_F16;
}

size_t rci_nn_weights_bytes(const rci_nn_weights *w)
{
    return (size_t)w->numel * rc_dtype_size(w->dtype);
}

int rci_nn_weights_alloc(rci_nn_weights *w, rc_backend *be, rc_error *err)
{
    if (!storage_ok(w->dtype))
        return rc_error_set(err, RC_ERR_DTYPE, "the parameters: dtype %s is not f32, bf16 or f16",
                            rc_dtype_name(w->dtype));
    w->buf = rc_buffer_new(be, rci_nn_weights_bytes(w), err);
    if (w->buf)
        return 0;
    return w->dtype == RC_F32 ? rci_error_prefix(err, "the parameters (%lld floats)", (long long)w->numel)
                              : rci_error_prefix(err, "the parameters (%lld %s values)", (long long)w->numel,
                                                 rc_dtype_name(w->dtype));
}

void rci_nn_weights_free(rci_nn_weights *w)
{
    free(w->p);
    rc_buffer_free(w->buf);
    memset(w, 0, sizeof *w);
}

size_t rci_nn_weights_offset(const rci_nn_weights *w, int i)
{
    return (size_t)w->p[i].offset * rc_dtype_size(w->dtype);
}

int rci_nn_weights_read_raw(const rci_nn_weights *w, int i, void *host, rc_error *err)
{
    if (!w->buf)
        return rc_error_set(err, RC_ERR_ARG, "weights: '%s' has no memory", w->p[i].name);
    return rc_buffer_download(w->buf, rci_nn_weights_offset(w, i), host,
                              (size_t)w->p[i].numel * rc_dtype_size(w->dtype), err);
}

int rci_nn_weights_write_raw(rci_nn_weights *w, int i, const void *host, rc_error *err)
{
    if (!w->buf)
        return rc_error_set(err, RC_ERR_ARG, "weights: '%s' has no memory", w->p[i].name);
    return rc_buffer_upload(w->buf, rci_nn_weights_offset(w, i), host,
                            (size_t)w->p[i].numel * rc_dtype_size(w->dtype), err);
}

/* 16-bit storage: the stored words of parameter i pass through a scratch array */
static uint16_t *half_scratch(const rci_nn_weights *w, int i, rc_error *err)
{
    uint16_t *h = malloc((size_t)(w->p[i].numel ? w->p[i].numel : 1) * sizeof *h);
    if (!h)
        rc_error_set(err, RC_ERR_MEMORY, "weights: out of memory for '%s'", w->p[i].name);
    return h;
}

int rci_nn_weights_read(const rci_nn_weights *w, int i, float *host, rc_error *err)
{
    if (w->dtype == RC_F32)
        return rci_nn_weights_read_raw(w, i, host, err);
    uint16_t *h = half_scratch(w, i, err);
    int rc = h ? rci_nn_weights_read_raw(w, i, h, err) : -1;
    if (!rc)
        rc_convert(host, RC_F32, h, w->dtype, w->p[i].numel);
    free(h);
    return rc;
}

int rci_nn_weights_write(rci_nn_weights *w, int i, const float *host, rc_error *err)
{
    if (w->dtype == RC_F32)
        return rci_nn_weights_write_raw(w, i, host, err);
    uint16_t *h = half_scratch(w, i, err);
    if (!h)
        return -1;
    rc_convert(h, w->dtype, host, RC_F32, w->p[i].numel);
    int rc = rci_nn_weights_write_raw(w, i, h, err);
    free(h);
    return rc;
}

int rci_nn_weights_convert(rci_nn_weights *w, rc_dtype dt, rc_error *err)
{
    if (!storage_ok(dt))
        return rc_error_set(err, RC_ERR_DTYPE, "weights: dtype %s is not f32, bf16 or f16", rc_dtype_name(dt));
    if (dt == w->dtype)
        return 0;
    if (!w->buf) {
        w->dtype = dt;
        return 0;
    }
    rci_nn_weights to = *w;
    to.dtype = dt;
    to.buf = NULL;
    int64_t most = 1;
    for (int i = 0; i < w->n; i++)
        most = w->p[i].numel > most ? w->p[i].numel : most;
    float *x = malloc((size_t)most * sizeof *x);
    int rc = x ? rci_nn_weights_alloc(&to, rc_buffer_backend(w->buf), err)
               : rc_error_set(err, RC_ERR_MEMORY, "weights: out of memory converting to %s", rc_dtype_name(dt));
    for (int i = 0; !rc && i < w->n; i++)
        rc = rci_nn_weights_read(w, i, x, err) || rci_nn_weights_write(&to, i, x, err) ? -1 : 0;
    free(x);
    if (rc) {
        rc_buffer_free(to.buf);
        return -1;
    }
    rc_buffer_free(w->buf);
    w->buf = to.buf;
    w->dtype = dt;
    return 0;
}

int rci_nn_weights_find(const rci_nn_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->p[i].name, name))
            return i;
    return -1;
}
