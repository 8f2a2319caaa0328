/* params.c - named parameters in one flat buffer (rci_nn_weights) on a backend, and their graph
 * leaves; what the rooms above see of them beyond the public API is params.h. */
#include "internal.h"
#include "backend.h"
#include "params.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rc_params {
    rci_nn_weights w;
    rc_backend *be;               /* where the buffer lives */
    uint64_t graph;               /* serial of the graph the cached leaves belong to */
    int released;                 /* the full buffer was given up (model shards hold the values) */
    rc_checkpoint *source;        /* where the values wait until the buffer is first needed (a
                                     model directory opened by rc_model_load); NULL: none */
    rc_tensor **leaves;           /* [w.n], created on first use in g */
    rc_init *inits;               /* [w.n] how each parameter starts */
    unsigned char *given;         /* [w.n] 1 once parameter i has values (drawn, written, or its
                                     buffer handed out); NULL (a built-in model's): all have */
    int init_cap;
    uint64_t version;             /* bumped whenever the values may have changed */
    rci_frozen frozen;            /* LoRA: the weights these adapters sit on (base NULL: none) */
};

rc_params *rc_params_new(void)
{
    rc_params *p = calloc(1, sizeof(rc_params));
    if (p)
        p->be = rci_backend_cpu();
    return p;
}

void rc_params_free(rc_params *p)
{
    if (!p)
        return;
    rci_nn_weights_free(&p->w);
    rc_checkpoint_close(p->source);
    free(p->leaves);
    free(p->inits);
    free(p->given);
    free(p);
}

static int init_valid(const rc_init *in)
{
    switch (in->kind) {
    case RC_INIT_AUTO: case RC_INIT_ZEROS: case RC_INIT_ONES:
        return 1;
    case RC_INIT_NORMAL:
        return isfinite(in->std) && in->std >= 0;
    case RC_INIT_FILL:
        return in->fill != NULL;
    }
    return 0;
}

int rc_params_add_init(rc_params *p, const char *name, int ndim, const int64_t *shape,
                       const rc_init *init)
{
    rc_init in = init ? *init : (rc_init){RC_INIT_AUTO, 0, NULL, NULL};
    if (!p || !name || strlen(name) >= sizeof p->w.p[0].name || p->w.buf || p->released ||
        rci_nn_weights_find(&p->w, name) >= 0 || ndim < 1 || ndim > 4 || !shape || !init_valid(&in))
        return -1;
    for (int k = 0; k < ndim; k++)
        if (shape[k] < 1)
            return -1;
    if (p->w.n == p->init_cap) {
        int cap = p->init_cap ? 2 * p->init_cap : 64;
        rc_init *grown = realloc(p->inits, (size_t)cap * sizeof *grown);
        if (grown)
            p->inits = grown;
        unsigned char *marks = grown ? realloc(p->given, (size_t)cap) : NULL;
        if (!marks)
            return -1;
        p->given = marks;
        p->init_cap = cap;
    }
    if (rci_nn_weights_add(&p->w, name, ndim, shape))
        return -1;
    p->inits[p->w.n - 1] = in;
    p->given[p->w.n - 1] = 0;
    return 0;
}

int rc_params_add(rc_params *p, const char *name, int ndim, const int64_t *shape)
{
    return rc_params_add_init(p, name, ndim, shape, NULL);
}

/* Elements [first, first + n) of parameter i from the source, in the weights' dtype. */
static int source_read(const rc_params *p, int i, int64_t first, int64_t n, void *host, rc_error *err)
{
    rc_safetensors *f;
    int idx;
    if (rc_checkpoint_find(p->source, p->w.p[i].name, &f, &idx) < 0) /* checked when opened */
        return rc_error_set(err, RC_ERR_FORMAT, "%s: parameter '%s' is missing", rc_checkpoint_path(p->source),
                            p->w.p[i].name);
    return rc_safetensors_read_range(f, idx, p->w.dtype, first, n, host, err);
}

/* The values waiting in the source read into the new buffer; the source is closed then. */
static int load_source(rc_params *p, rc_error *err)
{
    if (rci_nn_weights_load(&p->w, p->source, err))
        return -1;
    rc_checkpoint_close(p->source);
    p->source = NULL;
    return 0;
}

/* the buffer, allocated on first use, with the source's values (err, when given, says why
 * it cannot be) */
static int ready(rc_params *p, rc_error *err)
{
    if (p->released || p->w.buf)
        return 0; /* no buffer while shards hold the values: leaves stay unbound */
    if (rci_nn_weights_alloc(&p->w, p->be, err))
        return -1;
    if (p->source && load_source(p, err)) {
        rc_buffer_free(p->w.buf);
        p->w.buf = NULL;
        return -1;
    }
    return 0;
}

void rci_params_release(rc_params *p)
{
    rc_buffer_free(p->w.buf);
    p->w.buf = NULL;
    p->released = 1;
}

int rci_params_restore(rc_params *p)
{
    rc_checkpoint_close(p->source); /* the values come from the shards now */
    p->source = NULL;
    p->released = 0;
    p->version++;
    return ready(p, NULL);
}

int rci_params_unrelease(rc_params *p)
{
    if (!p->source)
        return -1;
    p->released = 0;
    return 0;
}

void rci_params_restore_from(rc_params *p, rc_checkpoint *ck)
{
    rci_params_set_source(p, ck);
    p->released = 0;
    p->version++;
}

void rci_params_set_source(rc_params *p, rc_checkpoint *ck)
{
    rc_checkpoint_close(p->source);
    p->source = ck;
}

int rci_params_waiting(const rc_params *p)
{
    return p->source != NULL && !p->w.buf;
}

int rci_params_read_range(rc_params *p, int i, int64_t first, int64_t n, void *host, rc_error *err)
{
    size_t es = rc_dtype_size(p->w.dtype);
    if (i < 0 || i >= p->w.n || first < 0 || n < 0 || first + n > p->w.p[i].numel)
        return rc_error_set(err, RC_ERR_ARG, "params read: no elements [%lld, %lld) of parameter %d",
                            (long long)first, (long long)(first + n), i);
    if (p->w.buf)
        return rc_buffer_download(p->w.buf, rci_nn_weights_offset(&p->w, i) + (size_t)first * es, host,
                                  (size_t)n * es, err);
    if (p->source)
        return source_read(p, i, first, n, host, err);
    if (p->released)
        return rc_error_set(err, RC_ERR_ARG, "params read: '%s' is held as model shards", p->w.p[i].name);
    return ready(p, err) ? -1 : rci_params_read_range(p, i, first, n, host, err);
}

void rci_params_touch(rc_params *p)
{
    p->version++;
}

uint64_t rci_params_version(const rc_params *p)
{
    return p->version;
}

/* Parameter i's values as its rule says into x; normal draws come from the shared stream r. */
static int init_one(rc_params *p, int i, double std, uint64_t seed, rc_rng *r, float *x)
{
    const rci_nn_param *q = &p->w.p[i];
    static const rc_init automatic = {RC_INIT_AUTO, 0, NULL, NULL};
    const rc_init *in = p->inits ? &p->inits[i] : &automatic; /* built-in models: none */
    if (in->kind == RC_INIT_FILL)
        return in->fill(x, q->numel, q->ndim, q->shape, rc_rng_fold(rc_rng_new(seed), (uint64_t)i),
                        in->user) ? -1 : 0;
    int normal = in->kind == RC_INIT_NORMAL || (in->kind == RC_INIT_AUTO && q->ndim >= 2);
    double s = in->kind == RC_INIT_NORMAL ? in->std : std;
    float c = in->kind == RC_INIT_ONES ? 1.0f : 0.0f;
    for (int64_t j = 0; j < q->numel; j++)
        x[j] = normal ? (float)(s * rc_rng_normal(r)) : c;
    return 0;
}

static int has_values(const rc_params *p, int i)
{
    return !p->given || p->given[i];
}

/* Initialises the parameters as declared: all of them, or (missing_only) those with no
 * values yet, whose values are then what initialising all would give them (the others'
 * normal draws are made and dropped; their fills are not called). */
static int init_params(rc_params *p, double std, uint64_t seed, int missing_only, rc_error *err)
{
    if (p->released)
        return rc_error_set(err, RC_ERR_ARG, "params init: the values are held as model shards");
    if (ready(p, err))
        return rci_error_prefix(err, "params init");
    p->version++;
    rc_rng r = rc_rng_new(seed);
    int64_t most = 1;
    for (int i = 0; i < p->w.n; i++)
        most = p->w.p[i].numel > most ? p->w.p[i].numel : most;
    float *x = malloc((size_t)most * sizeof *x);
    int rc = x ? 0 : rc_error_set(err, RC_ERR_MEMORY, "params init: out of memory");
    for (int i = 0; !rc && i < p->w.n; i++) {
        int skip = missing_only && has_values(p, i);
        if (skip && p->inits && p->inits[i].kind == RC_INIT_FILL)
            continue; /* a fill draws from a key of its own: nothing to keep in step */
        if (init_one(p, i, std, seed, &r, x))
            rc = rc_error_set(err, RC_ERR_ARG, "params init: the fill of '%s' failed", p->w.p[i].name);
        else if (!skip && !(rc = rci_nn_weights_write(&p->w, i, x, err)) && p->given)
            p->given[i] = 1;
    }
    free(x);
    return rc;
}

int rc_params_init_normal(rc_params *p, double std, uint64_t seed)
{
    return p ? init_params(p, std, seed, 0, NULL) : -1;
}

int rci_params_init_missing(rc_params *p, uint64_t seed, const char **first, rc_error *err)
{
    int missing = 0;
    for (int i = p->w.n - 1; i >= 0; i--)
        if (!has_values(p, i)) {
            missing++;
            if (first)
                *first = p->w.p[i].name;
        }
    if (!missing)
        return 0;
    return init_params(p, RC_INIT_STD, seed, 1, err) ? -1 : missing;
}

int rc_params_count(const rc_params *p)
{
    return p->w.n;
}

const char *rc_params_name(const rc_params *p, int i)
{
    return i >= 0 && i < p->w.n ? p->w.p[i].name : NULL;
}

int64_t rc_params_numel(const rc_params *p)
{
    return p->w.numel;
}

int rc_params_shape(const rc_params *p, int i, int *ndim, const int64_t **shape)
{
    if (!p || i < 0 || i >= p->w.n)
        return -1;
    if (ndim)
        *ndim = p->w.p[i].ndim;
    if (shape)
        *shape = p->w.p[i].shape;
    return 0;
}

int64_t rc_params_tensor_numel(const rc_params *p, int i)
{
    return p && i >= 0 && i < p->w.n ? p->w.p[i].numel : 0;
}

static void mark_given(rc_params *p, int i)
{
    if (p->given)
        p->given[i] = 1;
}

/* parameter i exists and the buffer is there */
static int usable(rc_params *p, int i, const char *what, rc_error *err)
{
    if (!p || i < 0 || i >= p->w.n)
        return rc_error_set(err, RC_ERR_ARG, "params %s: no parameter %d", what, i);
    return ready(p, err) ? rci_error_prefix(err, "params %s", what) : 0;
}

int rc_params_read(rc_params *p, int i, float *host, rc_error *err)
{
    return usable(p, i, "read", err) ? -1 : rci_nn_weights_read(&p->w, i, host, err);
}

int rc_params_write(rc_params *p, int i, const float *host, rc_error *err)
{
    if (usable(p, i, "write", err))
        return -1;
    p->version++;
    mark_given(p, i);
    return rci_nn_weights_write(&p->w, i, host, err);
}

int rc_params_read_all(rc_params *p, float *host, rc_error *err)
{
    if (p && p->w.n == 0)
        return 0;
    if (usable(p, 0, "read", err))
        return -1;
    if (p->w.dtype == RC_F32)
        return rc_buffer_download(p->w.buf, 0, host, (size_t)p->w.numel * sizeof(float), err);
    for (int i = 0; i < p->w.n; i++) /* converted parameter by parameter */
        if (rci_nn_weights_read(&p->w, i, host + p->w.p[i].offset, err))
            return -1;
    return 0;
}

int rc_params_read_raw(rc_params *p, int i, void *host, rc_error *err)
{
    return usable(p, i, "read", err) ? -1 : rci_nn_weights_read_raw(&p->w, i, host, err);
}

int rc_params_write_raw(rc_params *p, int i, const void *host, rc_error *err)
{
    if (usable(p, i, "write", err))
        return -1;
    p->version++;
    mark_given(p, i);
    return rci_nn_weights_write_raw(&p->w, i, host, err);
}

rc_dtype rc_params_dtype(const rc_params *p)
{
    return p->w.dtype;
}

int rc_params_to_dtype(rc_params *p, rc_dtype dt, rc_error *err)
{
    if (!p)
        return rc_error_set(err, RC_ERR_ARG, "params to dtype: no parameters");
    if (p->released)
        return rc_error_set(err, RC_ERR_ARG, "params to %s: the values are held as model shards",
                            rc_dtype_name(dt));
    /* values still in their source are read first: converted as if loaded, then converted */
    if (dt != p->w.dtype && p->source && ready(p, err))
        return rci_error_prefix(err, "params to %s", rc_dtype_name(dt));
    if (rci_nn_weights_convert(&p->w, dt, err))
        return rci_error_prefix(err, "params to %s", rc_dtype_name(dt));
    p->version++;
    p->graph = 0; /* leaves of the old dtype are not reused */
    free(p->leaves);
    p->leaves = NULL;
    return 0;
}

int rc_params_to(rc_params *p, rc_backend *be, rc_error *err)
{
    if (!p || !be)
        return rc_error_set(err, RC_ERR_ARG, "params to: %s", p ? "no backend" : "no parameters");
    if (p->be == be)
        return 0;
    if (p->released)
        return rc_error_set(err, RC_ERR_ARG, "params to %s: the values are held as model shards",
                            rc_backend_name(be));
    rci_nn_weights moved = p->w;
    moved.buf = NULL;
    if (!p->w.buf) { /* not allocated yet: it will be there */
        p->be = be;
        return 0;
    }
    int64_t most = 1;
    for (int i = 0; i < p->w.n; i++)
        most = p->w.p[i].numel > most ? p->w.p[i].numel : most;
    float *x = malloc((size_t)most * sizeof *x);
    int rc = x ? rci_nn_weights_alloc(&moved, be, err)
               : rc_error_set(err, RC_ERR_MEMORY, "params to %s: out of memory", rc_backend_name(be));
    for (int i = 0; !rc && i < p->w.n; i++)
        rc = rci_nn_weights_read(&p->w, i, x, err) || rci_nn_weights_write(&moved, i, x, err) ? -1 : 0;
    free(x);
    if (rc) {
        rc_buffer_free(moved.buf);
        return -1;
    }
    rc_buffer_free(p->w.buf);
    p->w.buf = moved.buf;
    p->be = be;
    p->version++;
    return 0;
}

rc_buffer *rc_params_buffer(rc_params *p, int i, size_t *offset)
{
    if (usable(p, i, "buffer", NULL))
        return NULL;
    mark_given(p, i); /* the caller may write it there */
    if (offset)
        *offset = rci_nn_weights_offset(&p->w, i);
    return p->w.buf;
}

int rc_params_find(const rc_params *p, const char *name)
{
    return rci_nn_weights_find(&p->w, name);
}

/* The leaf of parameter i in g, created on first use. */
static rc_tensor *leaf(rc_graph *g, rc_params *p, int i)
{
    if (p->graph != g->serial || !p->leaves) {
        free(p->leaves);
        p->leaves = calloc((size_t)p->w.n + 1, sizeof *p->leaves);
        p->graph = g->serial;
        if (!p->leaves)
            return rci_fail(g, RC_ERR_MEMORY, "params: out of memory");
    }
    if (!p->leaves[i]) {
        const rci_nn_param *q = &p->w.p[i];
        p->leaves[i] = rc_param(g, q->name, p->w.dtype, q->ndim, q->shape);
        if (p->leaves[i] && p->w.buf)
            rc_graph_bind(g, p->leaves[i], p->w.buf, rci_nn_weights_offset(&p->w, i));
    }
    return p->leaves[i];
}

rc_tensor *rc_params_get(rc_graph *g, rc_params *p, const char *name)
{
    if (!g || rc_graph_error(g))
        return NULL;
    int i = rci_nn_weights_find(&p->w, name);
    if (i < 0)
        return rci_fail(g, RC_ERR_ARG, "params: no parameter '%s'", name);
    if (ready(p, NULL))
        return rci_fail(g, RC_ERR_MEMORY, "params: cannot allocate %lld floats", (long long)p->w.numel);
    return leaf(g, p, i);
}

rc_tensor **rci_params_leaves(rc_graph *g, rc_params *p)
{
    for (int i = 0; i < p->w.n; i++)
        if (!rc_params_get(g, p, p->w.p[i].name))
            return NULL;
    return p->leaves;
}

rc_params *rci_params_adopt(rci_nn_weights *w, rc_backend *be)
{
    rc_params *p = calloc(1, sizeof(rc_params));
    if (!p)
        return NULL;
    p->w = *w;
    p->be = be;
    memset(w, 0, sizeof *w);
    return p;
}

void rci_params_set_frozen(rc_params *p, const rci_frozen *f)
{
    p->frozen = f ? *f : (rci_frozen){0};
}

const rci_frozen *rci_params_frozen(const rc_params *p)
{
    return p && p->frozen.base ? &p->frozen : NULL;
}

void rci_params_frozen_leaves(rc_graph *g, const rc_params *p, rc_tensor **out)
{
    rc_params *base = p->frozen.base;
    for (int j = 0; base && j < base->w.n; j++)
        out[j] = rc_params_get(g, base, base->w.p[j].name);
}

/* the nn view of a params object, for the modules that share the flat buffer */
rci_nn_weights *rci_params_weights(rc_params *p)
{
    return ready(p, NULL) ? NULL : &p->w;
}

rci_nn_weights *rci_params_table(rc_params *p)
{
    return &p->w;
}

rc_backend *rci_params_backend(const rc_params *p)
{
    return p->be;
}
