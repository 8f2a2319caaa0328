/* sharded.c - a graph run over the model shards outside the training step (the Predictor,
 * generation): the global record partitioned for this rank under one plan, fixed at the
 * first graph so that every later graph (another batch shape, the next decoding step)
 * splits the weights the same way, with the shards taken once from the full weights or
 * lent by a trainer. */
#include "sharded.h"

#include <stdlib.h>
#include <string.h>

void rci_sharded_init(rc_sharded *s, const rc_mesh *mesh, rc_params *params, int allow_replicate)
{
    memset(s, 0, sizeof *s);
    s->mesh = mesh;
    s->params = params;
    s->allow_replicate = allow_replicate;
}

void rci_sharded_use(rc_sharded *s, const rc_shard_spec *specs, rc_buffer *local, const int64_t *off)
{
    if (s->owned) {
        free(s->specs);
        rc_buffer_free(s->local);
        free(s->off);
    }
    s->specs = (rc_shard_spec *)specs;
    s->local = local;
    s->off = (int64_t *)off;
    s->owned = 0;
}

void rci_sharded_free(rc_sharded *s)
{
    if (s && s->owned) {
        free(s->specs);
        rc_buffer_free(s->local);
        free(s->off);
    }
    if (s)
        memset(s, 0, sizeof *s);
}

int rci_sharded_refresh(rc_sharded *s, rc_error *err)
{
    if (!s->owned || !s->local || s->version == rci_params_version(s->params))
        return 0;
    nn_weights *w = rci_params_weights(s->params);
    if (!w || !w->buf)
        return rc_error_set(err, RC_ERR_ARG, "model shards: the full weights are not in memory to take shards from");
    if (rci_sharded_take(s->specs, w, s->mesh->mp, s->mesh->mp_rank, s->local, s->off, err))
        return -1;
    s->version = rci_params_version(s->params);
    return 0;
}

/* parameter i of w as a tensor header (shape only), for the shard helpers */
static rc_tensor weight_header(const nn_weights *w, int i)
{
    rc_tensor t = {.ndim = w->p[i].ndim, .dtype = RC_F32};
    memcpy(t.shape, w->p[i].shape, sizeof(int64_t) * (size_t)t.ndim);
    return t;
}

int64_t rci_sharded_layout(const rc_shard_spec *specs, const nn_weights *w, int mp, int64_t *off, int64_t *num)
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

int rci_sharded_take(const rc_shard_spec *specs, const nn_weights *w, int mp, int rank, rc_buffer *local,
                     const int64_t *off, rc_error *err)
{
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
        rc = rci_nn_weights_read(w, i, whole, err);
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

/* the first graph's plan kept: shard buffers filled from the full weights */
static int take_shards(rc_sharded *s, rc_shard_spec *specs, rc_error *err)
{
    nn_weights *w = rci_params_weights(s->params);
    if (!w || !w->buf)
        return rc_error_set(err, RC_ERR_ARG, "model shards: the full weights are not in memory to take shards from");
    s->off = calloc((size_t)w->n + 1, sizeof *s->off);
    int64_t total = s->off ? rci_sharded_layout(specs, w, s->mesh->mp, s->off, NULL) : 0;
    size_t elem = rc_dtype_size(w->dtype);
    s->local = s->off ? rc_buffer_new(rc_buffer_backend(w->buf), (size_t)total * elem, err) : NULL;
    s->specs = specs;
    s->owned = 1;
    s->bytes = total * (int64_t)elem;
    s->version = rci_params_version(s->params);
    if (!s->local)
        return s->off ? rci_error_prefix(err, "model shards: %lld floats", (long long)total)
                      : rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    return rci_sharded_take(specs, w, s->mesh->mp, s->mesh->mp_rank, s->local, s->off, err);
}

int rci_sharded_partition(rc_sharded *s, rc_graph *g, rc_tensor *const *outs, int nout, const int *keep_split,
                          rc_tensor *const *leaves, rc_shard_graph *sg, rc_error *err)
{
    int n = rc_params_count(s->params);
    rc_shard_spec *specs = calloc((size_t)n + 1, sizeof *specs);
    if (!specs)
        return rc_error_set(err, RC_ERR_MEMORY, "model shards: out of memory");
    int rc = 0;
    if (s->specs) /* the plan of the first graph (or the trainer's) holds */
        rci_sharded_fix(specs, s->specs, n);
    else if (s->n_overrides)
        rc = rc_shard_apply(specs, leaves, n, s->overrides, s->n_overrides, s->mesh->mp, err);
    if (!rc)
        rc = rc_shard_partition_outputs(g, outs, nout, keep_split, leaves, n, s->mesh->mp, s->mesh->mp_rank,
                                        s->allow_replicate, specs, sg, err);
    if (!rc && !s->specs) {
        rc = take_shards(s, specs, err);
        specs = NULL; /* kept */
    }
    free(specs);
    if (rc)
        return -1;
    size_t elem = rc_dtype_size(rc_params_dtype(s->params));
    for (int i = 0; i < n; i++)
        if (sg->params[i])
            rc_graph_bind(sg->g, sg->params[i], s->local, (size_t)s->off[i] * elem);
    return 0;
}
