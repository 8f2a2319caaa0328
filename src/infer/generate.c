/* generate.c - text generation with the built-in models: a decoding state that records and
 * runs one graph per step (decoder-only models keep their key/value cache in backend
 * buffers between steps; T5 re-runs the whole prefix), greedy and sampled token choice, and beam
 * search as transformers 4.36 does it. See redco/predict.h for the exact semantics. */
#include "step.h"
#include "infer.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the decoding state ------------------------------------------------------------------ */

typedef struct {
    const rc_model_config *c;
    rci_nn_weights *w;
    rc_tensor **leaves;           /* parameter leaves of the current graph (w->n) */
    int t5;
    int rows, max_rows;
    int64_t len;                  /* decoder positions so far: cached (decoder-only) or fed (T5) */
    int64_t cap;                  /* positions the buffers have room for */
    int nkv;                      /* decoder-only: 2 n_layer cache tensors (k, v per layer) */
    int64_t kv_heads, head_dim;   /* the model's key/value heads (the global graph's shapes) */
    int64_t kv_local;             /* the heads this rank caches (kv_heads / model shards when
                                     they divide; 0 until the first step) */
    rc_backend *be;               /* where the weights, the cache and the steps live */
    rc_buffer **kv;               /* each [rows, kv_local, len, D] packed, room for max_rows x cap */
    size_t elem;                  /* bytes of a cache element: the weights' dtype */
    rc_buffer *kv_scratch;        /* reordering rows: one cache tensor */
    rc_tensor **past, **fresh;    /* per graph: cache inputs and new_kv outputs */
    int32_t *scratch;             /* reordering rows: the T5 history */
    int32_t *hist;                /* T5: decoder tokens [rows, len] packed, room for max_rows x cap */
    int32_t *enc;                 /* T5: encoder tokens [max_rows, n_enc], every row the prompt */
    int64_t n_enc;
    float *logits;                /* [rows, vocab] at the last position */
    rci_sharded *shards;           /* model shards (NULL: the whole model here) */
    rc_generate_stats *timed;     /* where the decode steps' phase times are summed (NULL:
                                     not yet, the prompt's step, or no stats asked for) */
    int time_kernels;             /* with timed: each kernel timed as well */
} decoder;

/* ---- where a decode step's time goes -------------------------------------------------------- */

/* the phases of decoder_step, in order (rc_generate_stats names them) */
enum { PH_GRAPH, PH_PLAN, PH_BIND, PH_RUN, PH_READ, PH_KEEP, PH_FREE, PH_COUNT };

/* the seconds since *t, which becomes now: one phase's time */
static double lap(double *t)
{
    double t0 = *t;
    *t = rci_clock_s();
    return *t - t0;
}

/* From here on the steps are decode steps: their times go to o's stats (when asked for). */
static void decoder_time(decoder *d, const rc_generate_options *o)
{
    d->timed = o->stats;
    d->time_kernels = o->stats && o->time_kernels;
}

/* one decode step's phase times (seconds, by PH_*) added to the stats */
static void phases_note(const decoder *d, const double *ph)
{
    rc_generate_stats *s = d->timed;
    if (!s)
        return;
    s->decode_steps++;
    s->graph_s += ph[PH_GRAPH];
    s->plan_s += ph[PH_PLAN];
    s->bind_s += ph[PH_BIND];
    s->run_s += ph[PH_RUN];
    s->read_s += ph[PH_READ];
    s->keep_s += ph[PH_KEEP];
    s->free_s += ph[PH_FREE];
}

/* the kernel times of a decode step's run added to the stats */
static void kernels_note(const decoder *d, const rc_plan *plan)
{
    if (!d->time_kernels)
        return;
    rc_plan_stats ps = rc_plan_get_stats(plan);
    d->timed->kernel_s += ps.last_kernel_s;
    for (int op = 0; op < RC_OP_COUNT; op++)
        d->timed->op_s[op] += ps.op_s[op];
}

/* the decoder's cache memory, noted in the caller's stats before it goes */
static void decoder_note(const decoder *d, rc_generate_stats *st)
{
    int64_t bytes = (int64_t)d->nkv * d->max_rows * d->kv_local * d->cap * d->head_dim * (int64_t)d->elem;
    if (st && bytes >= st->cache_bytes) {
        st->cache_bytes = bytes;
        st->kv_heads = d->kv_local;
    }
}

static void decoder_free(decoder *d)
{
    for (int i = 0; d->kv && i < d->nkv; i++)
        rc_buffer_free(d->kv[i]);
    free(d->kv);
    rc_buffer_free(d->kv_scratch);
    free(d->past);
    free(d->fresh);
    free(d->leaves);
    free(d->scratch);
    free(d->hist);
    free(d->enc);
    free(d->logits);
    memset(d, 0, sizeof *d);
}

/* Room for max_rows rows of cap decoder positions; T5 also keeps the encoder prompts enc
 * [n_given, n_enc], repeated to fill the rows (beam search: one prompt for every beam). */
static int decoder_init(decoder *d, rc_model *m, int max_rows, int64_t cap, const int32_t *enc,
                        int n_given, int64_t n_enc, rci_sharded *shards, rc_error *err)
{
    memset(d, 0, sizeof *d);
    d->shards = shards;
    d->c = &m->config;
    d->w = rci_params_weights(m->params);
    d->be = rci_params_backend(m->params); /* model shards live there too */
    d->elem = d->w ? rc_dtype_size(d->w->dtype) : sizeof(float);
    d->t5 = m->config.type == RC_MODEL_T5;
    d->max_rows = d->rows = max_rows;
    d->cap = cap;
    int64_t V = d->c->vocab_size;
    int ok = d->w && (d->leaves = calloc((size_t)d->w->n + 1, sizeof *d->leaves)) &&
             (d->logits = malloc((size_t)max_rows * (size_t)V * sizeof *d->logits));
    if (ok && d->t5) {
        d->n_enc = n_enc;
        size_t hist = (size_t)max_rows * (size_t)cap * sizeof *d->hist;
        ok = (d->hist = malloc(hist)) && (d->scratch = malloc(hist)) &&
             (d->enc = malloc((size_t)max_rows * (size_t)n_enc * sizeof *d->enc));
        for (int r = 0; ok && r < max_rows; r++)
            memcpy(d->enc + r * n_enc, enc + (r % n_given) * n_enc, (size_t)n_enc * sizeof *enc);
    } else if (ok) {
        d->nkv = 2 * d->c->n_layer;
        d->kv_heads = d->c->n_kv_head > 0 ? d->c->n_kv_head : d->c->n_head;
        d->head_dim = d->c->head_dim;
        ok = (d->kv = calloc((size_t)d->nkv + 1, sizeof *d->kv)) &&
             (d->past = calloc((size_t)d->nkv + 1, sizeof *d->past)) &&
             (d->fresh = calloc((size_t)d->nkv + 1, sizeof *d->fresh));
    }
    if (!ok) {
        decoder_free(d);
        return rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory for %d rows of %lld positions",
                            max_rows, (long long)cap);
    }
    return 0;
}

/* T5: appends ids [rows, T] to the packed history [rows, len], in place (last row first) */
static void history_append(decoder *d, const int32_t *ids, int64_t T)
{
    int64_t L = d->len;
    for (int r = d->rows - 1; r >= 0; r--) {
        memmove(d->hist + r * (L + T), d->hist + r * L, (size_t)L * sizeof *d->hist);
        memcpy(d->hist + r * (L + T) + L, ids + r * T, (size_t)T * sizeof *ids);
    }
}

/* Records the forward of ids [rows, T] after the current state into g; returns the logits
 * of the last position [rows, 1, vocab]. */
static rc_tensor *decoder_graph(decoder *d, rc_graph *g, int64_t T)
{
    int64_t R = d->rows;
    if (rci_nn_model_leaves(g, d->w, d->leaves))
        return NULL;
    rci_nn_inputs in = {0};
    if (d->t5) {
        in.ids = rc_input(g, "decoder_ids", RC_I32, 2, (int64_t[]){R, d->len + T});
        in.enc_ids = rc_input(g, "encoder_ids", RC_I32, 2, (int64_t[]){R, d->n_enc});
    } else {
        in.ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){R, T});
        for (int i = 0; d->len > 0 && i < d->nkv; i++) {
            char name[32];
            snprintf(name, sizeof name, "past.%d.%s", i / 2, i % 2 ? "v" : "k");
            d->past[i] = rc_input(g, name, d->w->dtype, 4, (int64_t[]){R, d->kv_heads, d->len, d->head_dim});
            if (d->past[i])
                d->past[i]->flags |= RC_FLAG_SPLITTABLE; /* model shards keep their heads of it */
        }
        in.past = (int)d->len;
        in.past_kv = d->len > 0 ? d->past : NULL;
        in.new_kv = d->fresh;
    }
    rc_tensor *logits = rci_nn_model_logits(g, d->c, d->w, d->leaves, &in);
    if (!logits)
        return NULL;
    int64_t Tl = logits->shape[1];
    rc_tensor *last = rc_slice(g, logits, 1, Tl - 1, Tl);
    return last && last->dtype != RC_F32 ? rc_cast(g, last, RC_F32) : last; /* picked from in f32 */
}

/* the cache buffers, once the first step says how many heads this rank keeps */
static int cache_alloc(decoder *d, int64_t heads, rc_error *err)
{
    size_t bytes = (size_t)d->max_rows * (size_t)(heads * d->cap * d->head_dim) * d->elem;
    int ok = (d->kv_scratch = rc_buffer_new(d->be, bytes, err)) != NULL;
    for (int i = 0; ok && i < d->nkv; i++)
        ok = (d->kv[i] = rc_buffer_new(d->be, bytes, err)) != NULL;
    if (!ok)
        return rci_error_prefix(err, "generate: the key/value cache of %d rows, %lld heads, %lld positions",
                                d->max_rows, (long long)heads, (long long)d->cap);
    d->kv_local = heads;
    return 0;
}

/* keeps the new cache [rows, kv_local, len + T, D] of the run that just finished (fresh:
 * this rank's heads of it) */
static int keep_cache(decoder *d, const rc_plan *plan, rc_tensor *const *fresh, int64_t T,
                      rc_error *err)
{
    if (d->nkv && !d->kv_local && cache_alloc(d, fresh[0] ? fresh[0]->shape[1] : 0, err))
        return -1;
    for (int i = 0; i < d->nkv; i++) {
        const rc_tensor *k = fresh[i];
        int64_t want[4] = {d->rows, d->kv_local, d->len + T, d->head_dim};
        int same = k && k->ndim == 4 && k->dtype == d->w->dtype;
        for (int a = 0; same && a < 4; a++)
            same = k->shape[a] == want[a];
        if (!same) {
            char s[96];
            return rc_error_set(err, RC_ERR_SHAPE, "generate: %s cache of layer %d is %s, expected [%lld, %lld, %lld, %lld]",
                                i % 2 ? "value" : "key", i / 2, k ? rc_shape_str(k, s, sizeof s) : "missing",
                                (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3]);
        }
        rc_buffer *from;
        size_t at;
        if (rc_plan_memory(plan, k, &from, &at) ||
            rc_buffer_copy(d->kv[i], 0, from, at, rc_tensor_nbytes(k), err))
            return rc_error_set(err, RC_ERR_ARG, "generate: cannot keep the cache of layer %d", i / 2);
    }
    return 0;
}

/* The run graph's inputs fed by name: token ids copied in, the cache (this rank's part of
 * it with model shards) bound where it lives. */
static int feed_inputs(decoder *d, rc_graph *g, rc_plan *plan, const int32_t *ids, rc_error *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < rc_graph_size(g); i++) {
        rc_tensor *t = rc_graph_node(g, i);
        int layer;
        char kind;
        if (t->op != RC_OP_LEAF || !(t->flags & RC_FLAG_INPUT))
            continue;
        if (!strcmp(t->name, "ids"))
            rc = rc_plan_set_input(plan, t, ids, err);
        else if (!strcmp(t->name, "decoder_ids"))
            rc = rc_plan_set_input(plan, t, d->hist, err);
        else if (!strcmp(t->name, "encoder_ids"))
            rc = rc_plan_set_input(plan, t, d->enc, err);
        else if (sscanf(t->name, "past.%d.%c", &layer, &kind) == 2 && layer >= 0 && layer < d->c->n_layer)
            rc = rc_plan_bind(plan, t, d->kv[2 * layer + (kind == 'v')], 0, err);
    }
    return rc;
}

/* Runs the built step st for ids [rows, T]: inputs fed, the plan run, the last logits read
 * into d->logits, the new cache kept; each phase's time into ph (t: the clock at the start). */
static int step_run(decoder *d, rci_step *st, const int32_t *ids, int64_t T, double *ph, double *t,
                    rc_error *err)
{
    if (d->time_kernels)
        rc_plan_set_timing(st->plan, 1);
    if (feed_inputs(d, st->run, st->plan, ids, err))
        return -1;
    ph[PH_BIND] = lap(t);
    if (rc_plan_run(st->plan, err))
        return -1;
    ph[PH_RUN] = lap(t);
    if (rc_plan_read(st->plan, st->outs[0], d->logits, err))
        return -1;
    ph[PH_READ] = lap(t);
    if (keep_cache(d, st->plan, st->outs + 1, T, err))
        return -1;
    ph[PH_KEEP] = lap(t);
    kernels_note(d, st->plan);
    return 0;
}

/* Feeds ids [rows, T] (decoder-only: after the cache; T5: after the decoder tokens so far)
 * and leaves the logits of the last position in d->logits. One record and step per call:
 * its outputs are the last logits, then the new cache (with model shards, this rank's
 * heads of it). A decode step's phases are timed into d->timed. */
static int decoder_step(decoder *d, int32_t *ids, int64_t T, rc_error *err)
{
    if (d->len + T > d->cap)
        return rc_error_set(err, RC_ERR_ARG, "generate: %lld positions exceed the %lld planned",
                            (long long)(d->len + T), (long long)d->cap);
    double ph[PH_COUNT] = {0}, t = rci_clock_s();
    rc_graph *g = rc_graph_new();
    if (!g)
        return rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
    if (d->t5)
        history_append(d, ids, T);
    rc_tensor *last = decoder_graph(d, g, T);
    int nout = d->nkv + 1, rc = 0;
    rc_tensor **outs = malloc((size_t)nout * sizeof *outs);
    int *keep = calloc((size_t)nout, sizeof *keep);
    if (rc_graph_error(g))
        rc = rc_error_set(err, rc_graph_error_code(g), "generate: %s", rc_graph_error(g));
    else if (!outs || !keep)
        rc = rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
    for (int i = 0; !rc && i < nout; i++) {
        outs[i] = i ? d->fresh[i - 1] : last;
        keep[i] = i > 0; /* the cache stays split by heads */
    }
    ph[PH_GRAPH] = lap(&t);
    rci_step st = {0};
    rci_step_spec spec = {.outs = outs, .nout = nout, .keep_split = keep, .leaves = d->leaves, .n = d->w->n};
    if (rc)
        rc_graph_free(g);
    else if (rci_step_build(&st, g, &spec, d->shards, d->be, err))
        rc = -1;
    ph[PH_PLAN] = lap(&t);
    if (!rc && step_run(d, &st, ids, T, ph, &t, err))
        rc = -1;
    if (!rc)
        d->len += T;
    else if (d->t5) /* undo the history append: keep the state consistent */
        for (int r = 0; r < d->rows; r++)
            memmove(d->hist + r * d->len, d->hist + r * (d->len + T), (size_t)d->len * sizeof *d->hist);
    free(outs);
    free(keep);
    rci_step_free(&st);
    ph[PH_FREE] = lap(&t);
    if (!rc)
        phases_note(d, ph);
    return rc;
}

/* Rows of one cache tensor: row r becomes row src[r] (src NULL: row 0 for every row). */
static int cache_rows(decoder *d, rc_buffer *kv, const int *src, int rows, rc_error *err)
{
    size_t block = (size_t)(d->kv_local * d->len * d->head_dim) * d->elem;
    for (int r = 0; r < rows; r++)
        if (rc_buffer_copy(d->kv_scratch, r * block, kv, (size_t)(src ? src[r] : 0) * block, block, err))
            return -1;
    return rc_buffer_copy(kv, 0, d->kv_scratch, 0, (size_t)rows * block, err);
}

/* Row r of the state becomes a copy of row src[r] (beam search): cache and history (the
 * logits are about to be replaced by the next step). */
static int decoder_reorder(decoder *d, const int *src, rc_error *err)
{
    if (d->t5) {
        int64_t L = d->len;
        int32_t *tmp = d->scratch;
        for (int r = 0; r < d->rows; r++)
            memcpy(tmp + r * L, d->hist + src[r] * L, (size_t)L * sizeof *tmp);
        memcpy(d->hist, tmp, (size_t)d->rows * (size_t)L * sizeof *tmp);
    }
    for (int i = 0; i < d->nkv; i++)
        if (cache_rows(d, d->kv[i], src, d->rows, err))
            return -1;
    return 0;
}

/* One row (after the prompt) becomes `rows` identical rows. */
static int decoder_expand(decoder *d, int rows, rc_error *err)
{
    int64_t V = d->c->vocab_size;
    for (int r = 1; r < rows; r++) {
        memcpy(d->logits + r * V, d->logits, (size_t)V * sizeof *d->logits);
        if (d->t5)
            memcpy(d->hist + r * d->len, d->hist, (size_t)d->len * sizeof *d->hist);
    }
    for (int i = 0; i < d->nkv; i++)
        if (cache_rows(d, d->kv[i], NULL, rows, err))
            return -1;
    d->rows = rows;
    return 0;
}

/* ---- choosing tokens ---------------------------------------------------------------------- */

/* ascending id */
static int scored_by_id(const void *a, const void *b)
{
    const rci_scored *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* descending value, then ascending id */
static int scored_desc(const void *a, const void *b)
{
    const rci_scored *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return scored_by_id(a, b);
}

static int32_t pick_greedy(const float *l, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return (int32_t)best;
}

/* temperature, top-k, top-p (Hugging Face's order), then one draw over the kept tokens in
 * id order, as torch.multinomial walks a vocabulary's probabilities: logits that differ in
 * their last bits (another mesh's sums) then move the draw's boundaries by as little,
 * where in order of probability two near-equal tokens could swap places, and the draw
 * with them; work holds V entries */
int32_t rci_pick_sample(const float *l, int64_t V, const rc_generate_options *o, rc_rng key, rci_scored *work)
{
    for (int64_t i = 0; i < V; i++)
        work[i] = (rci_scored){(double)l[i] / o->temperature, (int32_t)i};
    qsort(work, (size_t)V, sizeof *work, scored_desc);
    int64_t keep = V;
    if (o->top_k > 0 && o->top_k < V) {
        double th = work[o->top_k - 1].v; /* ties with the k-th value stay, as HF */
        for (keep = o->top_k; keep < V && work[keep].v >= th; keep++)
            ;
    }
    double mx = work[0].v, sum = 0;
    for (int64_t i = 0; i < keep; i++)
        sum += work[i].v = exp(work[i].v - mx);
    for (int64_t i = 0; i < keep; i++)
        work[i].v /= sum;
    double total = 1.0;
    if (o->top_p > 0 && o->top_p < 1) {
        /* from the least likely up: drop while the mass dropped so far (this one included)
         * is <= 1 - top_p; the most likely token always stays */
        double cum = 0;
        while (keep > 1 && (cum += work[keep - 1].v) <= 1.0 - o->top_p)
            keep--;
        total = 0;
        for (int64_t i = 0; i < keep; i++)
            total += work[i].v;
    }
    qsort(work, (size_t)keep, sizeof *work, scored_by_id);
    double u = rc_rng_uniform(&key) * total, acc = 0;
    for (int64_t i = 0; i < keep; i++) {
        acc += work[i].v;
        if (u < acc)
            return work[i].id;
    }
    return work[keep - 1].id;
}

static int logits_finite(const float *l, int64_t V)
{
    for (int64_t i = 0; i < V; i++)
        if (!isfinite(l[i]))
            return 0;
    return 1;
}

/* ---- options ------------------------------------------------------------------------------ */

rc_generate_options rc_generate_defaults(const rc_model *m)
{
    rc_generate_options o = {.max_new_tokens = 20, .top_p = 1.0, .num_beams = 1};
    o.eos_id = m ? m->config.eos_token_id : -1;
    return o;
}

static int check_request(const rc_model *m, const int32_t *prompts, int n_batch, int64_t n_prompt,
                         const rc_generate_options *o, rc_error *err)
{
    if (!m || !m->params || !o)
        return rc_error_set(err, RC_ERR_ARG, "generate: model and options are required");
    if (m->lora)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "generate: the model has LoRA adapters attached: fold them into "
                            "its weights first (rc_lora_merge)");
    if (n_batch < 1)
        return rc_error_set(err, RC_ERR_ARG, "generate: %d prompts (at least 1)", n_batch);
    if (!prompts || n_prompt < 1)
        return rc_error_set(err, RC_ERR_ARG, "generate: the prompt is empty (at least one token is needed)");
    const rc_model_config *c = &m->config;
    for (int64_t i = 0; i < (int64_t)n_batch * n_prompt; i++)
        if (prompts[i] < 0 || prompts[i] >= c->vocab_size) {
            if (n_batch > 1)
                return rc_error_set(err, RC_ERR_INDEX, "generate: prompt %lld token %lld is id %d, outside the vocabulary [0, %d) of model %s",
                                    (long long)(i / n_prompt), (long long)(i % n_prompt), (int)prompts[i],
                                    c->vocab_size, c->model_type);
            return rc_error_set(err, RC_ERR_INDEX, "generate: prompt token %lld is id %d, outside the vocabulary [0, %d) of model %s",
                                (long long)i, (int)prompts[i], c->vocab_size, c->model_type);
        }
    if (o->max_new_tokens < 1)
        return rc_error_set(err, RC_ERR_ARG, "generate: max_new_tokens %d (at least 1)", o->max_new_tokens);
    if (!(o->temperature >= 0) || isinf(o->temperature))
        return rc_error_set(err, RC_ERR_ARG, "generate: temperature %g (0 for greedy, or > 0)", o->temperature);
    if (o->top_k < 0)
        return rc_error_set(err, RC_ERR_ARG, "generate: top_k %d (0 for off, or > 0)", o->top_k);
    if (!(o->top_p >= 0 && o->top_p <= 1))
        return rc_error_set(err, RC_ERR_ARG, "generate: top_p %g (in (0, 1]; 0 or 1 for off)", o->top_p);
    if (o->num_beams < 0)
        return rc_error_set(err, RC_ERR_ARG, "generate: num_beams %d (1 for none, or > 1)", o->num_beams);
    if (o->num_beams > 1 && o->temperature > 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED,
                            "generate: beam search with sampling (num_beams %d, temperature %g) is not implemented; use temperature 0",
                            o->num_beams, o->temperature);
    if (c->type == RC_MODEL_T5 && c->decoder_start_token_id < 0)
        return rc_error_set(err, RC_ERR_ARG, "generate: t5 config has no decoder_start_token_id");
    if (c->type != RC_MODEL_T5) {
        /* the last token chosen is never fed: the prompt and max_new - 1 tokens take positions */
        int64_t need = n_prompt + o->max_new_tokens - 1;
        if (c->max_positions > 0 && need > c->max_positions)
            return rc_error_set(err, RC_ERR_ARG,
                                "generate: a prompt of %lld tokens and %d new tokens need %lld positions; model %s has %d (max_position_embeddings)",
                                (long long)n_prompt, o->max_new_tokens, (long long)need, c->model_type, c->max_positions);
        if (c->sliding_window > 0 && need > c->sliding_window)
            return rc_error_set(err, RC_ERR_UNSUPPORTED,
                                "generate: %lld positions exceed sliding_window %d, which redco does not implement",
                                (long long)need, c->sliding_window);
    }
    return 0;
}

/* positions the decoder holds: the prompt and the fed tokens (T5: the start token and the fed ones) */
static int64_t decoder_cap(const rc_model *m, int64_t n_prompt, int max_new)
{
    return m->config.type == RC_MODEL_T5 ? (int64_t)max_new : n_prompt + max_new;
}

/* The first forward: the prompt (decoder-only) or each row's decoder start token (T5). */
static int decoder_begin(decoder *d, const int32_t *prompts, int64_t n_prompt, rc_error *err)
{
    int64_t T = d->t5 ? 1 : n_prompt;
    int32_t *ids = malloc((size_t)d->rows * (size_t)T * sizeof *ids);
    if (!ids)
        return rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
    for (int64_t i = 0; i < d->rows * T; i++)
        ids[i] = d->t5 ? (int32_t)d->c->decoder_start_token_id : prompts[i];
    int rc = decoder_step(d, ids, T, err);
    free(ids);
    return rc;
}

/* ---- greedy and sampling ---------------------------------------------------------------- */

static int run_sampling(decoder *d, const int32_t *prompts, int64_t n_prompt, const rc_generate_options *o,
                        int32_t *out, int64_t *n_out, rc_error *err)
{
    int R = d->rows, M = o->max_new_tokens;
    int64_t V = d->c->vocab_size;
    rci_scored *work = o->temperature > 0 ? malloc((size_t)V * sizeof *work) : NULL;
    int32_t *next = malloc((size_t)R * sizeof *next);
    char *live = malloc((size_t)R);
    if ((o->temperature > 0 && !work) || !next || !live) {
        free(work), free(next), free(live);
        return rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
    }
    int rc = decoder_begin(d, prompts, n_prompt, err), n_live = R;
    for (int r = 0; r < R; r++) {
        n_out[r] = 0;
        live[r] = 1;
        next[r] = d->t5 ? (int32_t)d->c->decoder_start_token_id : prompts[(r + 1) * n_prompt - 1];
    }
    rc_rng base = rc_rng_new(o->seed);
    decoder_time(d, o);
    for (int step = 0; !rc && n_live > 0; step++) {
        double t = rci_clock_s();
        for (int r = 0; r < R && !rc; r++) {
            if (!live[r])
                continue;
            const float *l = d->logits + r * V;
            if (!logits_finite(l, V)) {
                rc = rc_error_set(err, RC_ERR_ARG, "generate: row %d step %d: the model's logits are not finite", r, step);
                break;
            }
            int32_t tok = o->temperature > 0
                              ? rci_pick_sample(l, V, o, rc_rng_fold(rc_rng_fold(base, (uint64_t)step), (uint64_t)r), work)
                              : pick_greedy(l, V);
            out[(int64_t)r * M + n_out[r]++] = tok;
            next[r] = tok;
            int stop = tok == o->eos_id || n_out[r] == M;
            if (o->on_token && o->on_token(r, tok, o->user))
                stop = 1;
            if (stop) {
                live[r] = 0;
                n_live--;
            }
        }
        if (d->timed && step > 0) /* the tokens of a decode step (step 0: the prompt's) */
            d->timed->pick_s += lap(&t);
        if (!rc && n_live > 0)
            rc = decoder_step(d, next, 1, err); /* finished rows ride along, their output unused */
    }
    free(work), free(next), free(live);
    return rc;
}

/* ---- beam search (transformers 4.36 BeamSearchScorer, length_penalty 1, early_stopping
 * False, one sequence returned) --------------------------------------------------------------- */

typedef struct {
    double score;                 /* sum of log-probabilities / generated length */
    int32_t *tok;                 /* new tokens, without the EOS */
    int n;
    int eos;                      /* ended by EOS (which the output then gets) */
} beam_hyp;

typedef struct {
    beam_hyp *h;                  /* in insertion order, as the Python list */
    int n, k;
    double worst;
} beam_hyps;

/* BeamHypotheses.add: keeps the k best by score; the list's order is insertion order */
static int hyps_add(beam_hyps *b, const int32_t *tok, int n, double sum_logprobs, int64_t gen_len, int eos)
{
    double score = sum_logprobs / (double)gen_len;
    if (b->n >= b->k && !(score > b->worst))
        return 0;
    beam_hyp *h = &b->h[b->n];
    h->tok = malloc((size_t)(n > 0 ? n : 1) * sizeof *h->tok);
    if (!h->tok)
        return -1;
    memcpy(h->tok, tok, (size_t)n * sizeof *tok);
    h->n = n;
    h->eos = eos;
    h->score = score;
    b->n++;
    if (b->n > b->k) {
        /* drop the lowest (score, index); the worst is then the next lowest */
        int lo = 0;
        for (int i = 1; i < b->n; i++)
            if (b->h[i].score < b->h[lo].score)
                lo = i;
        free(b->h[lo].tok);
        memmove(b->h + lo, b->h + lo + 1, (size_t)(b->n - lo - 1) * sizeof *b->h);
        b->n--;
        b->worst = b->h[0].score;
        for (int i = 1; i < b->n; i++)
            if (b->h[i].score < b->worst)
                b->worst = b->h[i].score;
    } else if (score < b->worst) {
        b->worst = score;
    }
    return 0;
}

static int hyps_done(const beam_hyps *b, double best_sum, int64_t cur_len_generated)
{
    return b->n >= b->k && b->worst >= best_sum / (double)cur_len_generated;
}

/* the top n (score desc, flat index asc) of k rows of V scores into cand (sorted) */
static void top_candidates(const double *scores, int64_t total, rci_scored *cand, int64_t *flat, int n)
{
    int have = 0;
    for (int64_t i = 0; i < total; i++) {
        double s = scores[i];
        if (have == n && !(s > cand[n - 1].v))
            continue;
        int at = have < n ? have++ : n - 1;
        while (at > 0 && s > cand[at - 1].v) {
            cand[at] = cand[at - 1];
            flat[at] = flat[at - 1];
            at--;
        }
        cand[at].v = s;
        flat[at] = i;
    }
}

static int run_beams(decoder *d, const int32_t *prompt, int64_t n_prompt, const rc_generate_options *o,
                     int32_t *out, int64_t *n_out, rc_error *err)
{
    int k = o->num_beams, M = o->max_new_tokens, nc = 2 * k;
    int64_t V = d->c->vocab_size;
    beam_hyps hyps = {calloc((size_t)k + 1, sizeof(beam_hyp)), 0, k, 1e9};
    double *scores = malloc((size_t)k * (size_t)V * sizeof *scores), *beam = malloc((size_t)k * sizeof *beam);
    double *nscore = malloc((size_t)k * sizeof *nscore);
    rci_scored *cand = malloc((size_t)nc * sizeof *cand);
    int64_t *flat = malloc((size_t)nc * sizeof *flat);
    int32_t *seq = malloc((size_t)k * (size_t)M * sizeof *seq), *nseq = malloc((size_t)k * (size_t)M * sizeof *seq);
    int32_t *ntok = malloc((size_t)k * sizeof *ntok);
    int *src = malloc((size_t)k * sizeof *src);
    int rc = 0;
    if (!hyps.h || !scores || !beam || !nscore || !cand || !flat || !seq || !nseq || !ntok || !src)
        rc = rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory for %d beams", k);
    /* the prompt once, then k copies; only beam 0 starts live (the others at -1e9) */
    d->rows = 1;
    if (!rc)
        rc = decoder_begin(d, prompt, n_prompt, err);
    if (!rc)
        rc = decoder_expand(d, k, err);
    decoder_time(d, o);
    for (int b = 0; !rc && b < k; b++)
        beam[b] = b ? -1e9 : 0.0;
    int n = 0, done = 0; /* n: tokens generated on every beam */
    while (!rc) {
        double clock = rci_clock_s();
        for (int b = 0; b < k && !rc; b++) {
            const float *l = d->logits + b * V;
            if (!logits_finite(l, V)) {
                rc = rc_error_set(err, RC_ERR_ARG, "generate: beam %d step %d: the model's logits are not finite", b, n);
                break;
            }
            double mx = l[0], sum = 0;
            for (int64_t i = 1; i < V; i++)
                mx = l[i] > mx ? l[i] : mx;
            for (int64_t i = 0; i < V; i++)
                sum += exp((double)l[i] - mx);
            double lse = mx + log(sum);
            for (int64_t i = 0; i < V; i++)
                scores[b * V + i] = (double)l[i] - lse + beam[b];
        }
        if (rc)
            break;
        int want = (int64_t)nc < (int64_t)k * V ? nc : (int)((int64_t)k * V);
        top_candidates(scores, (int64_t)k * V, cand, flat, want);
        /* BeamSearchScorer.process: EOS among the top k ends a hypothesis; the first k
         * others continue */
        int nb = 0;
        for (int j = 0; j < want && nb < k && !rc; j++) {
            int32_t tok = (int32_t)(flat[j] % V);
            int from = (int)(flat[j] / V);
            if (tok == o->eos_id) {
                if (j >= k)
                    continue;
                if (hyps_add(&hyps, seq + (int64_t)from * M, n, cand[j].v, n + 1, 1))
                    rc = rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
            } else {
                nscore[nb] = cand[j].v;
                ntok[nb] = tok;
                src[nb] = from;
                nb++;
            }
        }
        if (!rc && nb < k)
            rc = rc_error_set(err, RC_ERR_ARG, "generate: fewer than %d beams can continue (vocabulary %lld)", k, (long long)V);
        if (rc)
            break;
        done = done || hyps_done(&hyps, cand[0].v, n + 1);
        for (int b = 0; b < k; b++) {
            memcpy(nseq + (int64_t)b * M, seq + (int64_t)src[b] * M, (size_t)n * sizeof *seq);
            nseq[(int64_t)b * M + n] = ntok[b];
            beam[b] = nscore[b];
        }
        int32_t *t = seq;
        seq = nseq;
        nseq = t;
        n++;
        if (d->timed && n > 1) /* the tokens of a decode step (n 1: the prompt's) */
            d->timed->pick_s += lap(&clock);
        if (done || n >= M)
            break;
        rc = decoder_reorder(d, src, err);
        if (d->timed)
            d->timed->reorder_s += lap(&clock);
        if (!rc)
            rc = decoder_step(d, ntok, 1, err);
    }
    /* finalize: the open beams join unless the search is done; the best score wins, the
     * latest added among equals (Python's stable sort, then pop) */
    for (int b = 0; !rc && !done && b < k; b++)
        if (hyps_add(&hyps, seq + (int64_t)b * M, n, beam[b], n, 0))
            rc = rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory");
    if (!rc && hyps.n > 0) {
        int best = 0;
        for (int i = 1; i < hyps.n; i++)
            if (hyps.h[i].score >= hyps.h[best].score)
                best = i;
        const beam_hyp *h = &hyps.h[best];
        memcpy(out, h->tok, (size_t)h->n * sizeof *out);
        *n_out = h->n;
        if (h->eos && *n_out < M)
            out[(*n_out)++] = o->eos_id;
        for (int64_t i = 0; o->on_token && i < *n_out; i++)
            if (o->on_token(0, out[i], o->user))
                break;
    }
    for (int i = 0; hyps.h && i < hyps.n; i++)
        free(hyps.h[i].tok);
    free(hyps.h), free(scores), free(beam), free(nscore), free(cand), free(flat);
    free(seq), free(nseq), free(ntok), free(src);
    return rc;
}

/* ---- entry points --------------------------------------------------------------------------- */

int rc_generate_batch(rc_model *m, const int32_t *prompts, int n_batch, int64_t n_prompt,
                      const rc_generate_options *o, int32_t **out, int64_t *n_out, rc_error *err)
{
    if (!out || !n_out)
        return rc_error_set(err, RC_ERR_ARG, "generate: out and n_out are required");
    *out = NULL;
    if (check_request(m, prompts, n_batch, n_prompt, o, err))
        return -1;
    int M = o->max_new_tokens, beams = o->num_beams > 1;
    int32_t *res = malloc((size_t)n_batch * (size_t)M * sizeof *res);
    if (!res)
        return rc_error_set(err, RC_ERR_MEMORY, "generate: out of memory for %d x %d tokens", n_batch, M);
    int64_t cap = decoder_cap(m, n_prompt, M);
    decoder d;
    int rc = 0;
    rci_sharded shards, *sh = NULL;
    if (o->stats)
        memset(o->stats, 0, sizeof *o->stats);
    if (o->deployer && rc_deployer_mesh(o->deployer)->mp > 1) {
        rci_sharded_init(&shards, rc_deployer_mesh(o->deployer), m->params, o->allow_replicate);
        sh = &shards;
    }
    if (!beams) {
        rc = decoder_init(&d, m, n_batch, cap, prompts, n_batch, n_prompt, sh, err);
        if (!rc)
            rc = run_sampling(&d, prompts, n_prompt, o, res, n_out, err);
        decoder_note(&d, o->stats);
        decoder_free(&d); /* a no-op after a failed init, which leaves it zeroed */
    }
    for (int b = 0; beams && !rc && b < n_batch; b++) {
        const int32_t *p = prompts + (int64_t)b * n_prompt;
        rc = decoder_init(&d, m, o->num_beams, cap, p, 1, n_prompt, sh, err);
        if (!rc) {
            rc = run_beams(&d, p, n_prompt, o, res + (int64_t)b * M, &n_out[b], err);
            decoder_note(&d, o->stats);
            decoder_free(&d);
        }
    }
    if (o->stats && sh)
        o->stats->shard_bytes = sh->bytes;
    rci_sharded_free(sh);
    if (rc) {
        free(res);
        return -1;
    }
    *out = res;
    return 0;
}

int rc_generate(rc_model *m, const int32_t *prompt, int64_t n_prompt, const rc_generate_options *o,
                int32_t **out, int64_t *n_out, rc_error *err)
{
    if (!n_out)
        return rc_error_set(err, RC_ERR_ARG, "generate: n_out is required");
    return rc_generate_batch(m, prompt, 1, n_prompt, o, out, n_out, err);
}
