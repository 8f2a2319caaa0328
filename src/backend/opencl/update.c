/* update.c - the OpenCL backend's optimizer work: SGD and AdamW with clipping and
 * per-part weight decay (the CPU's float arithmetic, src/backend/cpu/update.c), gradient
 * accumulation, and the sum of squares behind the gradient norm (fixed chunks summed on
 * the device in index order, the chunks' sums added in order on the host). */
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
    cl_long at = p->at, n = p->n;
    cl_float clip = (cl_float)u->grad_scale, decay = (cl_float)(1.0 - u->lr * p->weight_decay);
    cl_int do_clip = clip != 1.0f;
    if (n <= 0)
        return 0;
    if (u->adamw) {
        cl_mem m = rci_ocl_mem(u->m), v = rci_ocl_mem(u->v);
        cl_long sat = u->state_at;
        rci_ocl_arg a[] = {ARG(w), ARG(g), ARG(m), ARG(v), ARG(at), ARG(n), ARG(sat), ARG(clip),
                           ARG(do_clip), ARG(c->b1), ARG(c->b2), ARG(c->c1), ARG(c->c2), ARG(c->eps),
                           ARG(c->step_size), ARG(c->bc2_sqrt), ARG(decay)};
        return rci_ocl_launch(o, OCL_ADAMW, a, 17, (size_t)n, "adamw update", err);
    }
    cl_int do_decay = p->weight_decay > 0;
    cl_float lr = (cl_float)u->lr;
    rci_ocl_arg a[] = {ARG(w), ARG(g), ARG(at), ARG(n), ARG(clip), ARG(do_clip), ARG(decay),
                       ARG(do_decay), ARG(lr)};
    return rci_ocl_launch(o, OCL_SGD, a, 9, (size_t)n, "sgd update", err);
}

int rci_ocl_update(rc_backend *be, const rci_update *u, rc_error *err)
{
    rci_adam_consts c = rci_adam_setup(u);
    for (int i = 0; i < u->nparts; i++)
        if (update_part(ocl(be), u, &u->parts[i], &c, err))
            return -1;
    return 0;
}

/* n 16-bit words of dtype st at byte soff of src widened to f32 into device scratch, through
 * host memory (the staging path of 16-bit training until a kernel reads the words) */
static cl_mem widen_staged(rci_ocl *o, const rc_buffer *src, size_t soff, int64_t n, rc_dtype st, rc_error *err)
{
    uint16_t *words = malloc((size_t)n * sizeof *words);
    float *wide = malloc((size_t)n * sizeof *wide);
    cl_mem s = NULL;
    int rc = words && wide ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: accumulate: out of host memory", o->be.name);
    if (!rc)
        rc = rc_buffer_download(src, soff, words, (size_t)n * sizeof *words, err);
    if (!rc && rc_convert(wide, RC_F32, words, st, n))
        rc = rc_error_set(err, RC_ERR_DTYPE, "%s: accumulate from %s", o->be.name, rc_dtype_name(st));
    if (!rc && (s = rci_ocl_scratch(o, (size_t)n * sizeof *wide, err))) {
        cl_int status = clEnqueueWriteBuffer(o->queue, s, CL_TRUE, 0, (size_t)n * sizeof *wide, wide, 0, NULL, NULL);
        if (status != CL_SUCCESS) {
            rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: accumulate: writing: %s", o->be.name, rci_ocl_status(status));
            s = NULL;
        }
    }
    free(words);
    free(wide);
    return s;
}

int rci_ocl_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                       size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err)
{
    if (st != RC_F32 && st != RC_BF16 && st != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: accumulate from %s gradients (f32, bf16 or f16)", be->name,
                            rc_dtype_name(st));
    if (st == RC_F32 && soff % 4)
        return rc_error_set(err, RC_ERR_ARG, "%s: accumulate from byte %zu (not 4-byte aligned)",
                            be->name, soff);
    if (n <= 0)
        return 0;
    cl_mem d = rci_ocl_mem(dst), s = st == RC_F32 ? rci_ocl_mem(src) : widen_staged(ocl(be), src, soff, n, st, err);
    if (!s)
        return -1;
    cl_long dofs = dat, so = st == RC_F32 ? (cl_long)(soff / 4) : 0, count = n;
    cl_float sc = scale;
    cl_int a_add = add != 0;
    rci_ocl_arg a[] = {ARG(d), ARG(dofs), ARG(s), ARG(so), ARG(count), ARG(sc), ARG(a_add)};
    return rci_ocl_launch(ocl(be), OCL_ACCUMULATE, a, 7, (size_t)n, "accumulate", err);
}

/* The master weights rounded into 16-bit words, through host memory (as above). */
int rci_ocl_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err)
{
    if (dt != RC_BF16 && dt != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: round f32 into %s (bf16 or f16)", be->name, rc_dtype_name(dt));
    if (n <= 0)
        return 0;
    float *wide = malloc((size_t)n * sizeof *wide);
    int rc = wide ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: round f32: out of host memory", be->name);
    if (!rc)
        rc = rc_buffer_download(src, (size_t)sat * sizeof *wide, wide, (size_t)n * sizeof *wide, err);
    if (!rc)
        rc_convert(wide, dt, wide, RC_F32, n); /* in place: the words fill the front */
    if (!rc)
        rc = rc_buffer_upload(dst, (size_t)dat * 2, wide, (size_t)n * 2, err);
    free(wide);
    return rc;
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
