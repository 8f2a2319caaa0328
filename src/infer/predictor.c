/* predictor.c - the Predictor: the user's predict function compiled per batch signature,
 * run over the data-parallel replicas in rounds of one global batch, the valid rows
 * gathered to rank 0 and handed to the output function in input order. See
 * redco/predict.h for the contract. */
#include "infer.h"
#include "run.h"
#include "step.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PRED_CACHE = 2 };          /* compiled graphs kept: the full and the tail batch */

/* A compiled predict function for one batch signature. */
typedef struct {
    rci_step st;                  /* record, run graph, plan; st.outs[0] is the output */
    rc_batch sig;                 /* the arrays' names, dtypes and shapes (no data) */
    uint64_t used;                /* last use, for eviction */
    rci_gather gather;            /* zero 3: its parameters' units and slots, */
    rc_buffer *gathered;          /* gathered into this buffer */
} pred_step;

struct rc_predictor {
    rc_deployer *d;
    rc_collate_fn collate;
    rc_predict_fn predict;
    rc_output_fn output;
    void *user;
    rc_params *params;
    pred_step steps[PRED_CACHE];
    uint64_t clock;
    float *rows;                  /* this replica's valid rows of the current round */
    size_t rows_cap;              /* floats */
    int mp;                       /* model shards */
    rci_sharded shards;            /* mp > 1: the plan and this rank's shards */
    int gathers;                  /* the trainer's zero 3: the weights are gathered from */
    rci_gather_run share;         /* the data axis' shares, as the train step does */
};

static void step_free(pred_step *s)
{
    rci_gather_free(&s->gather);
    rc_buffer_free(s->gathered);
    rci_step_free(&s->st);
    memset(s, 0, sizeof *s);
}

static int same_signature(const rc_batch *a, const rc_batch *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const rc_array *x = &a->a[i], *y = &b->a[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim)
            return 0;
        for (int k = 0; k < x->ndim; k++)
            if (x->shape[k] != y->shape[k])
                return 0;
    }
    return 1;
}

/* The predict function's record for batches shaped like b, checked; NULL with err set. */
static rc_graph *record_predict(rc_predictor *p, const rc_batch *b, rc_tensor **out, rc_tensor **leaves,
                                rc_error *err)
{
    rc_graph *g = rc_graph_new();
    if (!g) {
        rc_error_set(err, RC_ERR_MEMORY, "predict: out of memory");
        return NULL;
    }
    rc_rng key = rc_rng_fold(rc_rng_new(rci_deployer_seed(p->d)), 0x9ED1C7);
    rc_error why = {0};
    *out = p->predict(g, p->params, b, key, p->user, &why);
    if (!rc_graph_error(g) && !*out) {
        rc_graph_free(g);
        rci_user_failed(err, &why, "predict: the predict function returned no tensor");
        return NULL;
    }
    int64_t rows = b->n ? b->a[0].shape[0] : 0;
    if (!rc_graph_error(g) && ((*out)->ndim < 1 || (*out)->shape[0] != rows)) {
        char sh[96];
        rci_fail(g, RC_ERR_SHAPE, "predict output %s: its leading dimension must be the batch's %lld rows",
                rc_shape_str(*out, sh, sizeof sh), (long long)rows);
    }
    if (!rc_graph_error(g) && ((*out)->dtype == RC_BF16 || (*out)->dtype == RC_F16))
        *out = rc_cast(g, *out, RC_F32); /* 16-bit models' outputs: the rows are f32 */
    if (!rc_graph_error(g) && (*out)->dtype != RC_F32 && (*out)->dtype != RC_I32 && (*out)->dtype != RC_F64)
        rci_fail(g, RC_ERR_DTYPE, "predict output is %s (f32, f64, bf16, f16 or i32)", rc_dtype_name((*out)->dtype));
    for (int i = 0; (p->mp > 1 || p->gathers) && i < rc_params_count(p->params) && !rc_graph_error(g); i++)
        leaves[i] = rc_params_get(g, p->params, rc_params_name(p->params, i)); /* a new one is unused */
    if (p->gathers && p->share.frozen && !rc_graph_error(g)) /* zero 3 with LoRA: the base's too */
        rci_params_frozen_leaves(g, p->params, leaves + rc_params_count(p->params));
    if (rc_graph_error(g)) {
        rc_error_set(err, rc_graph_error_code(g), "predict: %s", rc_graph_error(g));
        rc_graph_free(g);
        return NULL;
    }
    return g;
}

/* zero 3: the step's slots */
static int step_gathers(rc_predictor *p, pred_step *s, rc_error *err)
{
    size_t bytes = (size_t)s->gather.numel * rc_dtype_size(p->share.dtype);
    if (!(s->gathered = rc_buffer_new(rci_params_backend(p->params), bytes ? bytes : 1, err)))
        return rci_error_prefix(err, "predict: the gathered parameters (%zu bytes)", bytes);
    return 0;
}

/* zero 3: the step's gathers from the trainer's shares, bound where the step now lives (its
 * plan's events point at its schedule) */
static int step_attach(rc_predictor *p, pred_step *s, rc_error *err)
{
    rci_gather_run run = p->share;
    run.gathered = s->gathered;
    return p->gathers ? rci_gather_attach(&s->gather, s->st.plan, &run, err) : 0;
}

/* Records the user's predict function for batches shaped like b and builds its step. */
static int step_compile(rc_predictor *p, pred_step *s, const rc_batch *b, rc_error *err)
{
    memset(s, 0, sizeof *s);
    int n = rc_params_count(p->params);
    const rci_frozen *fz = rci_params_frozen(p->params); /* zero 3 with LoRA: the base gathered too */
    int nf = p->gathers && p->share.frozen ? rc_params_count(fz->base) : 0;
    rc_tensor *out = NULL, **leaves = calloc((size_t)(n + nf) + 1, sizeof *leaves);
    rc_graph *g = leaves ? record_predict(p, b, &out, leaves, err) : NULL;
    if (!leaves)
        rc_error_set(err, RC_ERR_MEMORY, "predict: out of memory");
    rci_step_spec spec = {&out, 1, NULL, leaves, n, 0, p->gathers ? &s->gather : NULL, p->share.loff,
                          p->share.lnum, nf, p->share.numel};
    int rc = g ? rci_step_build(&s->st, g, &spec, p->mp > 1 ? &p->shards : NULL,
                                rci_params_backend(p->params), err) : -1;
    free(leaves);
    if (!rc && p->gathers)
        rc = step_gathers(p, s, err);
    if (rc && g && p->mp > 1) {
        rc_error why = *err;
        return rc_error_set(err, why.code, "predict on %d model shards: %s", p->mp, why.msg);
    }
    if (rc)
        return -1;
    s->sig = *b;
    for (int i = 0; i < s->sig.n; i++)
        s->sig.a[i].data = NULL;
    return 0;
}

/* The compiled step for b's signature: a cached one, or a new one in the least recently
 * used slot. */
static pred_step *step_for(rc_predictor *p, const rc_batch *b, rc_error *err)
{
    pred_step *lru = &p->steps[0];
    for (int i = 0; i < PRED_CACHE; i++) {
        pred_step *s = &p->steps[i];
        if (s->st.plan && same_signature(&s->sig, b)) {
            s->used = ++p->clock;
            return s;
        }
        if (!s->st.plan || (lru->st.plan && s->used < lru->used))
            lru = s;
    }
    /* compiled before the evicted graph is freed, so the new graph cannot take its address
     * (rc_params caches parameter leaves by graph) */
    pred_step fresh;
    if (step_compile(p, &fresh, b, err))
        return NULL;
    step_free(lru);
    *lru = fresh;
    lru->used = ++p->clock;
    if (step_attach(p, lru, err)) {
        step_free(lru);
        return NULL;
    }
    return lru;
}

rc_predictor *rc_predictor_new(rc_deployer *d, rc_collate_fn collate, rc_predict_fn predict,
                               rc_output_fn output, void *user, rc_params *params, rc_error *err)
{
    if (!d || !collate || !predict || !params) {
        rc_error_set(err, RC_ERR_ARG, "predictor: deployer, collate, predict and params are required");
        return NULL;
    }
    if (rc_params_to(params, rc_deployer_backend(d), err) || rci_deployer_init_params(d, params, "predictor", err))
        return NULL;
    rc_predictor *p = calloc(1, sizeof *p);
    if (!p) {
        rc_error_set(err, RC_ERR_MEMORY, "predictor: out of memory");
        return NULL;
    }
    p->d = d;
    p->collate = collate;
    p->predict = predict;
    p->output = output;
    p->user = user;
    p->params = params;
    p->mp = rc_deployer_mesh(d)->mp;
    if (p->mp > 1)
        rci_sharded_init(&p->shards, rc_deployer_mesh(d), params, 0);
    return p;
}

void rci_predictor_use_shards(rc_predictor *p, const rc_shard_spec *specs, rc_buffer *local,
                              const int64_t *off, rc_buffer *frozen_local, const int64_t *frozen_off)
{
    if (p && p->mp > 1)
        rci_sharded_use(&p->shards, specs, local, off, frozen_local, frozen_off);
}

void rci_predictor_use_gather(rc_predictor *p, const rci_gather_run *share)
{
    if (!p || (p->gathers && p->share.share == share->share && p->share.dp == share->dp &&
               p->share.numel == share->numel && p->share.dtype == share->dtype && p->share.frozen == share->frozen))
        return;
    for (int i = 0; i < PRED_CACHE; i++) /* compiled for other weights */
        step_free(&p->steps[i]);
    p->share = *share;
    p->share.gathered = NULL;
    p->share.scatter = NULL;
    p->gathers = 1;
}

void rc_predictor_free(rc_predictor *p)
{
    if (!p)
        return;
    for (int i = 0; i < PRED_CACHE; i++)
        step_free(&p->steps[i]);
    rci_sharded_free(&p->shards);
    free(p->rows);
    free(p);
}

/* valid (non-padding) rows of replica q in the round starting at `start` with b rows each */
static int64_t replica_valid(int64_t n, int64_t start, int64_t b, int q)
{
    int64_t first = start + (int64_t)q * b, v = n - first;
    return v < 0 ? 0 : v > b ? b : v;
}

/* Runs this replica's batch of the round: examples first .. first + b - 1 (padded with
 * n - 1); leaves its valid rows in p->rows and their length in *row_len. */
static int run_local(rc_predictor *p, int64_t n, int64_t first, int b, int64_t valid, int64_t *row_len,
                     rc_error *err)
{
    int64_t *idx = malloc((size_t)b * sizeof *idx);
    if (!idx)
        return rc_error_set(err, RC_ERR_MEMORY, "predict: out of memory");
    for (int i = 0; i < b; i++)
        idx[i] = first + i < n ? first + i : n - 1;
    rc_batch batch;
    memset(&batch, 0, sizeof batch);
    int rc = 0;
    rc_error why = {0};
    if (p->collate(&batch, idx, b, p->user, &why))
        rc = rci_user_failed(err, &why, "predict: collate failed for %d examples starting at example %lld", b,
                             (long long)first);
    if (!rc && (batch.n < 1 || batch.a[0].shape[0] != b))
        rc = rc_error_set(err, RC_ERR_SHAPE, "predict: collate of %d examples made %s", b,
                          batch.n < 1 ? "no arrays" : "arrays whose leading dimension is not the example count");
    pred_step *s = rc ? NULL : step_for(p, &batch, err);
    if (!rc && (!s || rc_batch_feed(&batch, s->st.plan, err)))
        rc = -1;
    if (p->gathers) /* the step gathers over the data axis: every rank must get there */
        rc = rc_deployer_agree(p->d, rc, err);
    if (!rc) {
        rc_plan_set_rng(s->st.plan, rc_rng_fold(rc_rng_fold(rc_rng_new(rci_deployer_seed(p->d)), 0x9ED1C7), (uint64_t)first));
        rc = rc_plan_run(s->st.plan, err);
        if (rc && p->gathers)
            rci_gather_drain(&s->gather, NULL);
    }
    if (!rc) {
        const rc_tensor *o = s->st.outs[0];
        *row_len = rc_tensor_numel(o) / b;
        size_t need = (size_t)(valid * *row_len);
        if (need > p->rows_cap) {
            float *r = realloc(p->rows, need * sizeof *r);
            if (!r)
                rc = rc_error_set(err, RC_ERR_MEMORY, "predict: out of memory for %zu floats", need);
            else
                p->rows = r, p->rows_cap = need;
        }
        void *src = rc ? NULL : malloc(rc_tensor_nbytes(o) ? rc_tensor_nbytes(o) : 1);
        if (!rc && !src)
            rc = rc_error_set(err, RC_ERR_MEMORY, "predict: out of memory for the output");
        if (!rc)
            rc = rc_plan_read(s->st.plan, o, src, err);
        for (size_t i = 0; !rc && i < need; i++)
            p->rows[i] = o->dtype == RC_F32 ? ((const float *)src)[i]
                         : o->dtype == RC_I32 ? (float)((const int32_t *)src)[i]
                                              : (float)((const double *)src)[i];
        free(src);
    }
    rc_batch_free(&batch);
    free(idx);
    return rc;
}

/* Rank 0: checks the gathered rows of the round and hands them to the output function. */
static int emit_round(rc_predictor *p, const rc_mesh *m, int64_t n, int64_t start, int64_t b,
                      const float *all, const size_t *counts, rc_error *err)
{
    int64_t row_len = -1;
    size_t at = 0; /* bytes into `all` */
    for (int q = 0; q < m->dp; q++) {
        int64_t valid = replica_valid(n, start, b, q);
        size_t bytes = counts[q * m->mp];
        if (valid == 0)
            continue;
        if (bytes % (sizeof(float) * (size_t)valid) ||
            (row_len >= 0 && (int64_t)(bytes / sizeof(float) / (size_t)valid) != row_len))
            return rc_error_set(err, RC_ERR_SHAPE, "predict: replica %d sent %zu bytes for %lld rows; rows of %lld floats expected",
                                q, bytes, (long long)valid, (long long)row_len);
        row_len = (int64_t)(bytes / sizeof(float) / (size_t)valid);
        const float *rows = (const float *)((const char *)all + at);
        for (int64_t i = 0; p->output && i < valid; i++) {
            int64_t ex = start + (int64_t)q * b + i;
            rc_error why = {0};
            if (p->output(ex, rows + i * row_len, row_len, p->user, &why))
                return rci_user_failed(err, &why, "predict: the output function failed for example %lld", (long long)ex);
        }
        at += bytes;
    }
    return 0;
}

int rc_predictor_run(rc_predictor *p, int64_t n_examples, int batch_size, rc_error *err)
{
    if (!p)
        return rc_error_set(err, RC_ERR_ARG, "predict: NULL predictor");
    if (n_examples < 0 || batch_size < 1) /* the same arguments on every rank: all fail here */
        return rc_error_set(err, RC_ERR_ARG, "predict: %lld examples in batches of %d (batch size at least 1)",
                            (long long)n_examples, batch_size);
    if (p->mp > 1 && rci_sharded_refresh(&p->shards, err)) /* the weights changed (a fit): on every rank */
        return rci_error_prefix(err, "predict on %d model shards", p->mp);
    const rc_mesh *m = rc_deployer_mesh(p->d);
    int64_t n = n_examples, global = (int64_t)batch_size * m->dp;
    /* rank 0's failures (memory, the output function) wait for the next agreement */
    int pending = 0;
    rc_error pending_err = {0};
    size_t *counts = m->rank == 0 ? calloc((size_t)m->size, sizeof *counts) : NULL;
    if (m->rank == 0 && !counts) {
        rc_error_set(&pending_err, RC_ERR_MEMORY, "predict: out of memory");
        pending = 1;
    }
    float none = 0;
    for (int64_t start = 0; start < n; start += global) {
        int64_t left = n - start, b = left >= global ? batch_size : (left + m->dp - 1) / m->dp;
        int64_t valid = replica_valid(n, start, b, m->dp_rank), row_len = 0;
        /* (zero 3 gathers inside the step: every replica runs, one without rows on padding) */
        int st = valid > 0 || p->gathers ? run_local(p, n, start + (int64_t)m->dp_rank * b, (int)b, valid, &row_len, err)
                                         : 0;
        if (!st && pending) {
            *err = pending_err;
            st = -1;
        }
        if (rc_deployer_agree(p->d, st, err)) {
            free(counts);
            return -1;
        }
        /* one copy per replica: its model-parallel rank 0 sends */
        size_t bytes = m->mp_rank == 0 ? (size_t)(valid * row_len) * sizeof(float) : 0;
        void *all = NULL;
        if (rc_comm_gather(m->world, p->rows ? (const void *)p->rows : &none, bytes, 0, &all, counts, err)) {
            free(counts);
            return -1; /* a failed collective fails on every rank */
        }
        if (m->rank == 0 && emit_round(p, m, n, start, b, all, counts, &pending_err))
            pending = 1;
        free(all);
    }
    free(counts);
    int st = 0;
    if (pending) {
        *err = pending_err;
        st = -1;
    }
    return rc_deployer_agree(p->d, st, err);
}
