/* sharded.c - a graph run over the model shards outside the training step (the Predictor,
 * generation): the global record partitioned for this rank under one plan, fixed at the
 * first graph so that every later graph (another batch shape, the next decoding step)
 * splits the weights the same way, with the shards taken once from the full weights or
 * lent by a trainer. */
#include "sharded.h"

#include <stdlib.h>
#include <string.h>

void rci_sharded_init(rci_sharded *s, const rc_mesh *mesh, rc_params *params, int allow_replicate)
{
    memset(s, 0, sizeof *s);
    s->mesh = mesh;
    s->params = params;
    s->allow_replicate = allow_replicate;
}

void rci_sharded_use(rci_sharded *s, const rc_shard_spec *specs, rc_buffer *local, const int64_t *off,
                     rc_buffer *frozen_local, const int64_t *frozen_off)
{
    if (s->owned) {
        free(s->specs);
        rc_buffer_free(s->local);
        free(s->off);
        rc_buffer_free(s->frozen_local);
        free(s->frozen_off);
    }
    s->frozen_local = frozen_local;
    s->frozen_off = (int64_t *)frozen_off;
    s->specs = (rc_shard_spec *)specs;
    s->local = local;
    s->off = (int64_t *)off;
    s->owned = 0;
}

void rci_sharded_free(rci_sharded *s)
{
    if (s && s->owned) {
        free(s->specs);
        rc_buffer_free(s->local);
        free(s->off);
        rc_buffer_free(s->frozen_local);
        free(s->frozen_off);
    }
    if (s)
        memset(s, 0, sizeof *s);
}

int rci_sharded_refresh(rci_sharded *s, rc_error *err)
{
    if (!s->owned || !s->local || s->version == rci_params_version(s->params))
        return 0;
    /* (from the buffer, or from the file the values wait in: rci_params_read_range) */
    if (rci_sharded_take(s->specs, s->params, s->mesh->mp, s->mesh->mp_rank, s->local, s->off, err))
        return -1;
    s->version = rci_params_version(s->params);
    return 0;
}

/* parameter i of w as a tensor header (shape only), for the shard helpers */
static rc_tensor weight_header(const rci_nn_weights *w, int i)
{
    rc_tensor t = {.ndim = w->p[i].ndim, .dtype = RC_F32};
    memcpy(t.shape, w->p[i].shape, sizeof(int64_t) * (size_t)t.ndim);
    return t;
}

int64_t rci_sharded_layout(const rc_shard_spec *specs, const rci_nn_weights *w, int mp, int64_t *off, int64_t *num)
{
    int64_t total = 0;
    for (int i = 0; i < w->n; i++) {
        int64_t shape[RC_MAX_DIMS], k = 1;
        rc_tensor whole = weight_header(w, i);
        rc_shard_local_shape(&specs[i], &whole, mp, shape);
        for (int a = 0; a < whole.ndim; a++)
            k *= shape[a];
        off[i] = total;
        if (num)
            num[i] = k;
        total += k;
    }
    return total;
}

int rci_sharded_take(const rc_shard_spec *specs, rc_params *p, int mp, int rank, rc_buffer *local,
                     const int64_t *off, rc_error *err)
{
    const rci_nn_weights *w = rci_params_table(p);
    int64_t most = 1;
    for (int i = 0; i < w->n; i++)
        most = w->p[i].numel > most ? w->p[i].numel : most;
    float *whole = malloc((size_t)most * sizeof *whole), *part = malloc((size_t)most * sizeof *part);
    int rc = whole && part ? 0 : rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    for (int i = 0; !rc && i < w->n; i++) {
        rc_tensor header = weight_header(w, i);
        int64_t shape[RC_MAX_DIMS], k = 1;
        rc_shard_local_shape(&specs[i], &header, mp, shape);
        for (int a = 0; a < header.ndim; a++)
            k *= shape[a];
        /* the stored words (from the buffer, or from the file the values wait in), widened */
        rc = rci_params_read_range(p, i, 0, w->p[i].numel, whole, err);
        if (!rc && w->dtype != RC_F32)
            rc_convert(whole, RC_F32, whole, w->dtype, w->p[i].numel); /* in place */
        if (!rc) {
            size_t elem = rc_dtype_size(w->dtype); /* the shards keep the weights' dtype */
            rc_shard_take(&specs[i], &header, mp, rank, whole, part);
            if (w->dtype != RC_F32)
                rc_convert(part, w->dtype, part, RC_F32, k); /* in place: 16-bit words fill the front */
            rc = rc_buffer_upload(local, (size_t)off[i] * elem, part, (size_t)k * elem, err);
        }
    }
    free(whole);
    free(part);
    return rc;
}

void rci_sharded_fix(rc_shard_spec *specs, const rc_shard_spec *plan, int n)
{
    for (int i = 0; i < n; i++) {
        specs[i] = plan[i];
        specs[i].fixed = 1;
    }
}

/* LoRA: the frozen base weights' shards (their specs), taken once like the adapters' */
static int take_frozen(rci_sharded *s, const rci_frozen *fz, const rc_shard_spec *specs, rc_error *err)
{
    rci_nn_weights *w = rci_params_table(fz->base);
    s->frozen_off = calloc((size_t)w->n + 1, sizeof *s->frozen_off);
    int64_t total = s->frozen_off ? rci_sharded_layout(specs, w, s->mesh->mp, s->frozen_off, NULL) : 0;
    size_t elem = rc_dtype_size(w->dtype);
    s->frozen_local = s->frozen_off ? rc_buffer_new(rci_params_backend(fz->base), (size_t)(total ? total : 1) * elem, err)
                                    : NULL;
    if (!s->frozen_local)
        return s->frozen_off ? rci_error_prefix(err, "model shards: %lld frozen floats", (long long)total)
                             : rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    return rci_sharded_take(specs, fz->base, s->mesh->mp, s->mesh->mp_rank, s->frozen_local, s->frozen_off, err);
}

/* spec of an adapter matrix split along `axis` as its base weight's `base` is (same view) */
static rc_shard_spec adapter_spec(const rc_shard_spec *base, int axis)
{
    rc_shard_spec a = {.axis = axis, .fixed = 1};
    if (axis >= 0) {
        a.outer = base->outer;
        a.groups = base->groups;
        a.inner = base->inner;
    }
    return a;
}

/* LoRA's first plan: the base weights planned with every adapter held whole, then each
 * adapter fixed to follow its base weight: a split of the base's output features splits B
 * [out, r] on axis 0, of its input features A [r, in] on axis 1 (the other stays whole), so
 * the adapters' update lands split exactly as the base projection's output. specs[0 .. n)
 * are the adapters, specs[n ..) the base weights; the user's overrides are already in. */
static int plan_adapters(rci_sharded *s, rc_graph *g, rc_tensor *out, rc_tensor *const *leaves, int n, int nf,
                         rc_shard_spec *specs, rc_error *err)
{
    const rci_frozen *fz = rci_params_frozen(s->params);
    rc_shard_spec *first = malloc((size_t)(n + nf) * sizeof *first);
    if (!first)
        return rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    memcpy(first, specs, (size_t)(n + nf) * sizeof *first);
    for (int i = 0; i < n; i++)
        if (!first[i].fixed)
            first[i] = adapter_spec(NULL, -1);
    int rc = rc_shard_plan(g, out, leaves, n + nf, s->mesh->mp, 1, first, NULL, err);
    int out_axis = fz->conv1d ? 1 : 0, in_axis = 1 - out_axis;
    for (int k = 0; !rc && k < fz->n; k++) {
        const rc_shard_spec *b = &first[n + fz->base_of[k]];
        if (!specs[2 * k].fixed)
            specs[2 * k] = adapter_spec(b, b->axis == in_axis ? 1 : -1);
        if (!specs[2 * k + 1].fixed)
            specs[2 * k + 1] = adapter_spec(b, b->axis == out_axis ? 0 : -1);
    }
    free(first);
    return rc;
}

/* the first graph's plan kept: shard buffers filled from the full weights */
static int take_shards(rci_sharded *s, rc_shard_spec *specs, rc_error *err)
{
    rci_nn_weights *w = rci_params_table(s->params);
    s->off = calloc((size_t)w->n + 1, sizeof *s->off);
    int64_t total = s->off ? rci_sharded_layout(specs, w, s->mesh->mp, s->off, NULL) : 0;
    size_t elem = rc_dtype_size(w->dtype);
    s->local = s->off ? rc_buffer_new(rci_params_backend(s->params), (size_t)total * elem, err) : NULL;
    s->specs = specs;
    s->owned = 1;
    s->bytes = total * (int64_t)elem;
    s->version = rci_params_version(s->params);
    if (!s->local)
        return s->off ? rci_error_prefix(err, "model shards: %lld floats", (long long)total)
                      : rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    if (rci_sharded_take(specs, s->params, s->mesh->mp, s->mesh->mp_rank, s->local, s->off, err))
        return -1;
    const rci_frozen *fz = rci_params_frozen(s->params);
    return fz ? take_frozen(s, fz, specs + w->n, err) : 0;
}

/* leaves, then (LoRA) the frozen base weights' leaves in g; malloc'ed */
static rc_tensor **all_leaves(rci_sharded *s, rc_graph *g, rc_tensor *const *leaves, int n, int nf)
{
    rc_tensor **all = calloc((size_t)(n + nf) + 1, sizeof *all);
    if (!all)
        return NULL;
    memcpy(all, leaves, (size_t)n * sizeof *all);
    if (nf)
        rci_params_frozen_leaves(g, s->params, all + n);
    return all;
}

int rci_sharded_partition(rci_sharded *s, rc_graph *g, rc_tensor *const *outs, int nout, const int *keep_split,
                          rc_tensor *const *leaves, rc_shard_graph *sg, rc_error *err)
{
    const rci_frozen *fz = rci_params_frozen(s->params);
    int n = rc_params_count(s->params), nf = fz ? rc_params_count(fz->base) : 0;
    rc_shard_spec *specs = calloc((size_t)(n + nf) + 1, sizeof *specs);
    rc_tensor **all = all_leaves(s, g, leaves, n, nf);
    if (!specs || !all) {
        free(specs);
        free(all);
        return rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    }
    int rc = rc_graph_error(g) ? rc_error_set(err, rc_graph_error_code(g), "model shards: %s", rc_graph_error(g)) : 0;
    if (!rc && s->specs) /* the plan of the first graph (or the trainer's) holds */
        rci_sharded_fix(specs, s->specs, n + nf);
    else if (!rc && s->n_overrides)
        rc = rc_shard_apply(specs, all, n + nf, s->overrides, s->n_overrides, s->mesh->mp, err);
    if (!rc && !s->specs && fz)
        rc = plan_adapters(s, g, outs[0], all, n, nf, specs, err);
    if (!rc)
        rc = rc_shard_partition_outputs(g, outs, nout, keep_split, all, n + nf, s->mesh->mp, s->mesh->mp_rank,
                                        s->allow_replicate, specs, sg, err);
    if (!rc && !s->specs) {
        rc = take_shards(s, specs, err);
        specs = NULL; /* kept */
    }
    free(specs);
    free(all);
    if (rc)
        return -1;
    size_t elem = rc_dtype_size(rc_params_dtype(s->params));
    for (int i = 0; i < n; i++)
        if (sg->params[i])
            rc_graph_bind(sg->g, sg->params[i], s->local, (size_t)s->off[i] * elem);
    for (int j = 0; j < nf; j++)
        if (sg->params[n + j])
            rc_graph_bind(sg->g, sg->params[n + j], s->frozen_local,
                          (size_t)s->frozen_off[j] * rc_dtype_size(rc_params_dtype(fz->base)));
    return 0;
}
