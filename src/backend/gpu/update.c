/* update.c - the device backends' optimizer work, through g->ops (OpenCL's and CUDA's):
 * SGD and AdamW with clipping and per-part weight decay (the CPU's float arithmetic,
 * src/backend/cpu/update.c), gradient accumulation (from f32, bf16 or f16 gradients), the
 * rounding of f32 master weights into 16-bit ones, and the sum of squares behind the
 * gradient norm (fixed chunks, each summed by a work-group in a fixed order, the chunks' sums
 * added in order on the host: the only value read back). */
#include "node.h"

#include <stdlib.h>

enum { SQUARES_CHUNK = 4096 };   /* elements per partial sum of sum_squares, a work-group's */

static rci_gpu *gpu(rc_backend *be)
{
    return (rci_gpu *)(void *)be;
}

static int update_part(rci_gpu *g, const rci_update *u, const rci_update_part *p,
                       const rci_adam_consts *c, rc_error *err)
{
    rci_gpu_mem w = rci_gpu_mem_of(u->w), gr = rci_gpu_mem_of(u->grad);
    int64_t at = p->at, n = p->n, wat = u->w_at;
    float clip = (float)u->grad_scale, decay = (float)(1.0 - u->lr * p->weight_decay);
    int32_t do_clip = clip != 1.0f;
    if (n <= 0)
        return 0;
    if (u->adamw) {
        rci_gpu_mem m = rci_gpu_mem_of(u->m), v = rci_gpu_mem_of(u->v);
        int64_t sat = u->state_at;
        rci_gpu_arg a[] = {ARG(w), ARG(gr), ARG(m), ARG(v), ARG(at), ARG(n), ARG(sat), ARG(wat), ARG(clip),
                           ARG(do_clip), ARG(c->b1), ARG(c->b2), ARG(c->c1), ARG(c->c2), ARG(c->eps),
                           ARG(c->step_size), ARG(c->bc2_sqrt), ARG(decay)};
        return rci_gpu_launch_f32(g, RCI_K_ADAMW, a, 18, (size_t)n, "adamw update", err);
    }
    int32_t do_decay = p->weight_decay > 0;
    float lr = (float)u->lr;
    rci_gpu_arg a[] = {ARG(w), ARG(gr), ARG(at), ARG(n), ARG(wat), ARG(clip), ARG(do_clip), ARG(decay),
                       ARG(do_decay), ARG(lr)};
    return rci_gpu_launch_f32(g, RCI_K_SGD, a, 10, (size_t)n, "sgd update", err);
}

int rci_gpu_update(rc_backend *be, const rci_update *u, rc_error *err)
{
    rci_adam_consts c = rci_adam_setup(u);
    for (int i = 0; i < u->nparts; i++)
        if (update_part(gpu(be), u, &u->parts[i], &c, err))
            return -1;
    return 0;
}

/* k_accumulate of the program for st's storage: the 16-bit programs read the words
 * themselves (widened exactly, as rc_convert), so nothing passes through the host */
int rci_gpu_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
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
    rci_gpu_mem d = rci_gpu_mem_of(dst), s = rci_gpu_mem_of(src);
    int64_t dofs = dat, so = (int64_t)(soff / es), count = n;
    float sc = scale;
    int32_t a_add = add != 0;
    rci_gpu_arg a[] = {ARG(d), ARG(dofs), ARG(s), ARG(so), ARG(count), ARG(sc), ARG(a_add)};
    return gpu(be)->ops->launch(gpu(be), st, RCI_K_ACCUMULATE, a, 7, (size_t)n, 0, "accumulate", err);
}

/* The master weights rounded into 16-bit words on the device: k_cast from f32 (its
 * conversions are src/core/half.h's, bit for bit). */
int rci_gpu_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err)
{
    if (dt != RC_BF16 && dt != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: round f32 into %s (bf16 or f16)", be->name, rc_dtype_name(dt));
    if (n <= 0)
        return 0;
    rci_gpu_mem d = rci_gpu_mem_of(dst), s = rci_gpu_mem_of(src);
    int64_t dofs = dat, so = sat, count = n;
    int32_t to = (int32_t)dt, from = RC_F32;
    rci_gpu_arg a[] = {ARG(d), ARG(dofs), ARG(to), ARG(s), ARG(so), ARG(from), ARG(count)};
    return rci_gpu_launch_f32(gpu(be), RCI_K_CAST, a, 7, rci_gpu_ew_items(n), "round f32", err);
}

/* Every part's chunks write their partial sums into one buffer (part k's from its base),
 * read back once; each part's partials are then added in chunk order on the host. */
int rci_gpu_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts,
                        double *out, rc_error *err)
{
    rci_gpu *g = gpu(be);
    int64_t total = 0;
    for (int k = 0; k < nparts; k++) {
        out[k] = 0;
        total += parts[k].n > 0 ? (parts[k].n + SQUARES_CHUNK - 1) / SQUARES_CHUNK : 0;
    }
    if (total == 0)
        return 0;
    size_t es = g->fp64 ? sizeof(double) : sizeof(float);
    rci_gpu_mem part = NULL;
    if (g->ops->mem_alloc(g, (size_t)total * es, &part, "the partial sums of a sum of squares", err))
        return -1;
    void *host = malloc((size_t)total * es);
    rci_gpu_mem x = rci_gpu_mem_of(b);
    int64_t chunk = SQUARES_CHUNK, base = 0;
    int rc = host ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: sum of squares: out of host memory", be->name);
    for (int k = 0; !rc && k < nparts; k++) {
        int64_t cat = parts[k].at, cn = parts[k].n, chunks = (cn + chunk - 1) / chunk;
        if (cn <= 0)
            continue;
        rci_gpu_arg a[] = {ARG(part), ARG(x), ARG(cat), ARG(cn), ARG(chunk), ARG(chunks), ARG(base)};
        rc = g->ops->launch(g, RC_F32, RCI_K_SUM_SQUARES, a, 7, (size_t)chunks * RCI_GPU_ROW_GROUP, RCI_GPU_ROW_GROUP,
                            "sum of squares", err);
        base += chunks;
    }
    if (rc == 0)
        rc = g->ops->read(g, part, 0, host, (size_t)total * es, err);
    base = 0;
    for (int k = 0; rc == 0 && k < nparts; k++) {
        int64_t chunks = parts[k].n > 0 ? (parts[k].n + chunk - 1) / chunk : 0;
        for (int64_t j = base; j < base + chunks; j++)
            out[k] += g->fp64 ? ((const double *)host)[j] : (double)((const float *)host)[j];
        base += chunks;
    }
    free(host);
    g->ops->mem_free(g, part);
    return rc;
}
