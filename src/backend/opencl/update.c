/* update.c - the OpenCL backend's optimizer work: SGD and AdamW with clipping and
 * per-part weight decay (the CPU's float arithmetic, src/backend/cpu/update.c), gradient
 * accumulation (from f32, bf16 or f16 gradients), the rounding of f32 master weights into
 * 16-bit ones, and the sum of squares behind the gradient norm (fixed chunks summed on the
 * device in index order, the chunks' sums added in order on the host: the only value read
 * back). */
#include "opencl.h"

#include <math.h>
#include <stdlib.h>

#define ARG(v) {sizeof(v), &(v)}

enum { SQUARES_CHUNK = 4096 };   /* elements per partial sum of sum_squares */

static rci_ocl *ocl(rc_backend *be)
{
    return (rci_ocl *)(void *)be;
}

static int update_part(rci_ocl *o, const rci_update *u, const rci_update_part *p,
                       const rci_adam_consts *c, rc_error *err)
{
    cl_mem w = rci_ocl_mem(u->w), g = rci_ocl_mem(u->grad);
    cl_long at = p->at, n = p->n, wat = u->w_at;
    cl_float clip = (cl_float)u->grad_scale, decay = (cl_float)(1.0 - u->lr * p->weight_decay);
    cl_int do_clip = clip != 1.0f;
    if (n <= 0)
        return 0;
    if (u->adamw) {
        cl_mem m = rci_ocl_mem(u->m), v = rci_ocl_mem(u->v);
        cl_long sat = u->state_at;
        rci_ocl_arg a[] = {ARG(w), ARG(g), ARG(m), ARG(v), ARG(at), ARG(n), ARG(sat), ARG(wat), ARG(clip),
                           ARG(do_clip), ARG(c->b1), ARG(c->b2), ARG(c->c1), ARG(c->c2), ARG(c->eps),
                           ARG(c->step_size), ARG(c->bc2_sqrt), ARG(decay)};
        return rci_ocl_launch(o, OCL_ADAMW, a, 18, (size_t)n, "adamw update", err);
    }
    cl_int do_decay = p->weight_decay > 0;
    cl_float lr = (cl_float)u->lr;
    rci_ocl_arg a[] = {ARG(w), ARG(g), ARG(at), ARG(n), ARG(wat), ARG(clip), ARG(do_clip), ARG(decay),
                       ARG(do_decay), ARG(lr)};
    return rci_ocl_launch(o, OCL_SGD, a, 10, (size_t)n, "sgd update", err);
}

int rci_ocl_update(rc_backend *be, const rci_update *u, rc_error *err)
{
    rci_adam_consts c = rci_adam_setup(u);
    for (int i = 0; i < u->nparts; i++)
        if (update_part(ocl(be), u, &u->parts[i], &c, err))
            return -1;
    return 0;
}

/* k_accumulate of the program for st's storage: the 16-bit programs read the words
 * themselves (widened exactly, as rc_convert), so nothing passes through the host */
int rci_ocl_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                       size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err)
{
    if (st != RC_F32 && st != RC_BF16 && st != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: accumulate from %s gradients (f32, bf16 or f16)", be->name,
                            rc_dtype_name(st));
    size_t es = rc_dtype_size(st);
    if (soff % es)
        return rc_error_set(err, RC_ERR_ARG, "%s: accumulate from byte %zu of %s gradients (not %zu-byte aligned)",
                            be->name, soff, rc_dtype_name(st), es);
    if (n <= 0)
        return 0;
    cl_mem d = rci_ocl_mem(dst), s = rci_ocl_mem(src);
    cl_long dofs = dat, so = (cl_long)(soff / es), count = n;
    cl_float sc = scale;
    cl_int a_add = add != 0;
    rci_ocl_arg a[] = {ARG(d), ARG(dofs), ARG(s), ARG(so), ARG(count), ARG(sc), ARG(a_add)};
    return rci_ocl_launch_as(ocl(be), st, OCL_ACCUMULATE, a, 7, (size_t)n, "accumulate", err);
}

/* The master weights rounded into 16-bit words on the device: k_cast from f32 (its
 * conversions are src/core/half.h's, bit for bit). */
int rci_ocl_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err)
{
    if (dt != RC_BF16 && dt != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: round f32 into %s (bf16 or f16)", be->name, rc_dtype_name(dt));
    if (n <= 0)
        return 0;
    cl_mem d = rci_ocl_mem(dst), s = rci_ocl_mem(src);
    cl_long dofs = dat, so = sat, count = n;
    cl_int to = (cl_int)dt, from = RC_F32;
    rci_ocl_arg a[] = {ARG(d), ARG(dofs), ARG(to), ARG(s), ARG(so), ARG(from), ARG(count)};
    return rci_ocl_launch(ocl(be), OCL_CAST, a, 7, (size_t)n, "round f32", err);
}

/* Every part's chunks write their partial sums into one buffer (part k's from its base),
 * read back once; each part's partials are then added in chunk order on the host. */
int rci_ocl_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts,
                        double *out, rc_error *err)
{
    rci_ocl *o = ocl(be);
    cl_long total = 0;
    for (int k = 0; k < nparts; k++) {
        out[k] = 0;
        total += parts[k].n > 0 ? (parts[k].n + SQUARES_CHUNK - 1) / SQUARES_CHUNK : 0;
    }
    if (total == 0)
        return 0;
    size_t es = o->fp64 ? sizeof(double) : sizeof(float);
    cl_int s;
    cl_mem part = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, (size_t)total * es, NULL, &s);
    if (s != CL_SUCCESS)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: sum of squares: %zu bytes of partial sums: %s",
                            be->name, (size_t)total * es, rci_ocl_status(s));
    void *host = malloc((size_t)total * es);
    cl_mem x = rci_ocl_mem(b);
    cl_long chunk = SQUARES_CHUNK, base = 0;
    int rc = host ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: sum of squares: out of host memory", be->name);
    for (int k = 0; !rc && k < nparts; k++) {
        cl_long cat = parts[k].at, cn = parts[k].n, chunks = (cn + chunk - 1) / chunk;
        if (cn <= 0)
            continue;
        rci_ocl_arg a[] = {ARG(part), ARG(x), ARG(cat), ARG(cn), ARG(chunk), ARG(chunks), ARG(base)};
        rc = rci_ocl_launch(o, OCL_SUM_SQUARES, a, 7, (size_t)chunks, "sum of squares", err);
        base += chunks;
    }
    if (rc == 0) {
        s = clEnqueueReadBuffer(o->queue, part, CL_TRUE, 0, (size_t)total * es, host, 0, NULL, NULL);
        if (s != CL_SUCCESS)
            rc = rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: sum of squares: reading: %s", be->name,
                              rci_ocl_status(s));
    }
    base = 0;
    for (int k = 0; rc == 0 && k < nparts; k++) {
        cl_long chunks = parts[k].n > 0 ? (parts[k].n + chunk - 1) / chunk : 0;
        for (cl_long j = base; j < base + chunks; j++)
            out[k] += o->fp64 ? ((const double *)host)[j] : (double)((const float *)host)[j];
        base += chunks;
    }
    free(host);
    clReleaseMemObject(part);
    return rc;
}
