/* buffer.c - the public face of backends and buffers: range checks, memory accounting,
 * then the backend's own function. */
#include "internal.h"
#include "backend.h"

#include <stdlib.h>

const char *rc_backend_name(const rc_backend *be)
{
    return be ? be->name : "none";
}

void rc_backend_memory(const rc_backend *be, size_t *total, size_t *used, size_t *peak)
{
    if (total)
        *total = be ? be->total_bytes : 0;
    if (used)
        *used = be ? be->used_bytes : 0;
    if (peak)
        *peak = be ? be->peak_bytes : 0;
}

int rc_backend_supports(const rc_backend *be, rc_op op, rc_dtype t)
{
    return be && be->supports(be, op, t);
}

int rc_backend_wait(rc_backend *be, rc_error *err)
{
    if (!be)
        return rc_error_set(err, RC_ERR_ARG, "backend: NULL");
    return be->wait(be, err);
}

static rc_buffer *buffer_new(rc_backend *be, size_t bytes, int zero, rc_error *err)
{
    if (!be) {
        rc_error_set(err, RC_ERR_ARG, "buffer: no backend");
        return NULL;
    }
    rc_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of host memory for a buffer", be->name);
        return NULL;
    }
    b->be = be;
    b->size = bytes;
    if (be->buffer_alloc(be, b, bytes, zero, err)) {
        free(b);
        return NULL;
    }
    be->used_bytes += bytes;
    be->buffers++;
    if (be->used_bytes > be->peak_bytes)
        be->peak_bytes = be->used_bytes;
    return b;
}

rc_buffer *rc_buffer_new(rc_backend *be, size_t bytes, rc_error *err)
{
    return buffer_new(be, bytes, 1, err);
}

rc_buffer *rci_buffer_new_uninit(rc_backend *be, size_t bytes, rc_error *err)
{
    return buffer_new(be, bytes, 0, err);
}

void rci_backend_release_idle(rc_backend *be)
{
    if (be->closing && be->opens == 0 && be->buffers == 0 && be->release)
        be->release(be);
}

void rc_buffer_free(rc_buffer *b)
{
    if (!b)
        return;
    rc_backend *be = b->be;
    be->buffer_free(be, b);
    be->used_bytes -= b->size;
    be->buffers--;
    free(b);
    rci_backend_release_idle(be); /* the last buffer of a closed device */
}

size_t rc_buffer_size(const rc_buffer *b)
{
    return b ? b->size : 0;
}

rc_backend *rc_buffer_backend(const rc_buffer *b)
{
    return b ? b->be : NULL;
}

static int out_of_range(const rc_buffer *b, size_t offset, size_t bytes, const char *what,
                        rc_error *err)
{
    if (!b)
        return rc_error_set(err, RC_ERR_ARG, "%s: NULL buffer", what);
    if (offset > b->size || bytes > b->size - offset)
        return rc_error_set(err, RC_ERR_ARG, "%s: bytes [%zu, %zu) outside a %zu-byte %s buffer",
                            what, offset, offset + bytes, b->size, b->be->name);
    return 0;
}

int rc_buffer_upload(rc_buffer *b, size_t offset, const void *host, size_t bytes, rc_error *err)
{
    if (out_of_range(b, offset, bytes, "upload", err))
        return -1;
    return bytes ? b->be->upload(b->be, b, offset, host, bytes, err) : 0;
}

int rc_buffer_download(const rc_buffer *b, size_t offset, void *host, size_t bytes, rc_error *err)
{
    if (out_of_range(b, offset, bytes, "download", err))
        return -1;
    return bytes ? b->be->download(b->be, b, offset, host, bytes, err) : 0;
}

int rc_buffer_copy(rc_buffer *dst, size_t dst_offset, const rc_buffer *src, size_t src_offset,
                   size_t bytes, rc_error *err)
{
    if (out_of_range(dst, dst_offset, bytes, "copy", err) ||
        out_of_range(src, src_offset, bytes, "copy", err))
        return -1;
    if (dst->be != src->be)
        return rc_error_set(err, RC_ERR_ARG, "copy: from a %s buffer to a %s buffer",
                            src->be->name, dst->be->name);
    return bytes ? dst->be->copy(dst->be, dst, dst_offset, src, src_offset, bytes, err) : 0;
}

void *rci_buffer_host(const rc_buffer *b, size_t off)
{
    return b && b->be->host_address ? b->be->host_address(b->be, b, off) : NULL;
}

size_t rci_backend_scratch_peak(const rc_backend *be, size_t held, const rc_tensor *const *nodes, int n)
{
    for (int i = 0; be && be->scratch_bytes && i < n; i++) {
        const rc_tensor *t = nodes[i];
        if (t->op == RC_OP_LEAF || t->op == RC_OP_RESHAPE || t->view_src || t->op == RC_OP_MP_REDUCE ||
            t->op == RC_OP_MP_MAX)
            continue;
        held = be->scratch_bytes(be, t, held);
    }
    return held;
}
