/* memory_plan.c - the memory of one rank of a training step, before running: the model's
 * loss is recorded as the Trainer records it (rc_task_loss in the weights' dtype, remat set
 * on the graph, f16's loss scale), cut to model shard 0 with mp > 1, differentiated and
 * planned without an arena (rc_plan_estimate); the Trainer's buffers follow from the rank's
 * parameter count: the weights in their dtype, the f32 gradient sum, and of the optimizer's
 * share the f32 moments and (16-bit weights) the f32 master; the backend's scratch is its
 * own rule (rci_backend_scratch_peak) over the step's nodes in the order they run. ZeRO
 * stage 3 plans the step as the trainer's step builder does (step.c): the parameters' units
 * and the plan that releases each unit's gradients, then the units' schedule over the
 * plan's order, whose slots are the gathered buffer. */
#include "internal.h"
#include "backend.h"
#include "exec.h"
#include "gather.h"
#include "redco/memory.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the graph of one step on one rank, and what it was built from */
typedef struct {
    rc_model_graph model;         /* the parameter leaves (never allocated) and the logits */
    rc_graph *g;
    rc_tensor **p, **grads, **outs;
    rc_tensor *loss;              /* what the gradients are of: with f16, the loss x its scale */
    rc_tensor *unscaled;          /* f16: the loss, an output too (else NULL) */
    rc_shard_spec *specs;
    rc_shard_graph local;         /* mp > 1: rank 0's share */
} step_graph;

static void step_graph_free(step_graph *s)
{
    rc_shard_graph_free(&s->local);
    rc_graph_free(s->g);
    free(s->grads);
    free(s->outs);
    free(s->specs);
    rc_model_graph_free(&s->model);
}

static int check_options(const rc_memory_options *o, rc_error *err)
{
    if (o->batch < 1 || o->seq_len < 1)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: batch %lld x sequence %lld (each at least 1)",
                            (long long)o->batch, (long long)o->seq_len);
    if (o->dp < 0 || o->mp < 0 || o->remat < 0)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: dp %d, mp %d, remat %d (none negative)", o->dp, o->mp,
                            o->remat);
    if (o->dtype != RC_F32 && o->dtype != RC_BF16 && o->dtype != RC_F16)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: dtype %s (f32, bf16 or f16)", rc_dtype_name(o->dtype));
    if (o->zero < 0 || o->zero > 3)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: zero %d: the ZeRO stage is 0, 1, 2 or 3", o->zero);
    if (o->zero == 3 && o->mp > 1) /* as the trainer refuses it */
        return rc_error_set(err, RC_ERR_ARG, "memory plan: zero 3 runs with one model shard (mp 1), not mp %d",
                            o->mp);
    return 0;
}

/* the loss of one replica's batch over unbound parameters, as rc_task_loss records it: the
 * leaves, hence the whole graph, in the weights' dtype */
static int record(step_graph *s, const rc_model_config *c, const rc_memory_options *o, rc_error *err)
{
    if (!(s->g = rc_graph_new()))
        return rc_error_set(err, RC_ERR_MEMORY, "memory plan: out of memory");
    rc_graph_set_remat(s->g, o->remat);
    rc_graph_set_training(s->g, !o->no_dropout);
    int64_t shape[2] = {o->batch, o->seq_len};
    rc_tensor *ids = rc_input(s->g, "ids", RC_I32, 2, shape), *enc_ids = NULL, *mask = NULL;
    if (c->type == RC_MODEL_T5) {
        enc_ids = rc_input(s->g, "enc_ids", RC_I32, 2, shape);
        mask = rc_input(s->g, "enc_mask", RC_F32, 2, shape);
    }
    rc_tensor *tg = rc_input(s->g, "targets", RC_I32, 2, shape);
    if (rc_model_record(s->g, c, o->dtype, ids, enc_ids, mask, &s->model, err))
        return rci_error_prefix(err, "memory plan");
    s->p = s->model.params;
    s->loss = rc_cross_entropy(s->g, s->model.logits, tg, RC_IGNORE_INDEX);
    if (o->dtype == RC_F16 && s->loss) { /* the trainer's loss scale, an input of the step */
        rc_tensor *scale = rc_input(s->g, "redco.loss_scale", RC_F32, 1, (int64_t[]){1});
        s->unscaled = s->loss;
        s->loss = rc_mul(s->g, s->loss, rc_reshape(s->g, scale, s->loss->ndim, s->loss->shape));
    }
    if (rc_graph_error(s->g))
        return rc_error_set(err, rc_graph_error_code(s->g), "memory plan: %s", rc_graph_error(s->g));
    return 0;
}

/* mp > 1: rank 0's share of the graph, as the Trainer's step builds it */
static int partition(step_graph *s, const rc_memory_options *o, int mp, rc_error *err)
{
    int n = s->model.n_params;
    s->specs = calloc((size_t)n + 1, sizeof *s->specs);
    if (!s->specs)
        return rc_error_set(err, RC_ERR_MEMORY, "memory plan: out of memory");
    if (rc_shard_apply(s->specs, s->p, n, o->overrides, o->n_overrides, mp, err))
        return -1;
    rc_tensor *outs[2] = {s->loss, s->unscaled};
    return rc_shard_partition_outputs(s->g, outs, s->unscaled ? 2 : 1, NULL, s->p, n, mp, 0, o->allow_replicate,
                                      s->specs, &s->local, err);
}

/* bytes of the leaves that are not parameters: the batch's inputs and the constants, which
 * the plan holds beside its arena */
static int64_t leaf_bytes(const rc_graph *g, rc_tensor *const *params, int n)
{
    char *is_param = calloc((size_t)rc_graph_size(g) + 1, 1);
    int64_t bytes = 0;
    for (int i = 0; is_param && i < n; i++)
        if (params[i] && params[i]->id < rc_graph_size(g))
            is_param[params[i]->id] = 1;
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        if (t->op == RC_OP_LEAF && !t->view_src && !(is_param && is_param[i]))
            bytes += (int64_t)rc_tensor_nbytes(t);
    }
    free(is_param);
    return bytes;
}

/* The scratch the backend keeps after a step: its rule over the plan's nodes in the order
 * they run, from none held. Bytes, or -1 out of memory. */
static int64_t step_scratch(const rc_backend *be, const rc_plan *p)
{
    int k = rci_plan_size(p);
    const rc_tensor **order = malloc(((size_t)k + 1) * sizeof *order);
    for (int i = 0; order && i < k; i++)
        order[i] = rci_plan_node(p, i);
    int64_t bytes = order ? (int64_t)rci_backend_scratch_peak(be, 0, order, k) : -1;
    free(order);
    return bytes;
}

/* The plan of the step's outputs (outs[nl + i]: parameter i's gradient), estimated: with
 * zero 3 what the trainer's step builder plans (rci_gather_plan: the units of the parameters,
 * laid out one after another in their order as the trainer's local layout with one model
 * shard, each gradient released once its unit's are complete, the schedule into z). */
static rc_plan *step_estimate(rc_graph *run, rc_tensor *const *params, rc_tensor *const *grads, int n, rc_tensor **outs,
                              int nl, int zero, rci_gather *z, rc_error *err)
{
    if (zero != 3)
        return rci_plan_new_estimate(run, outs, n + nl, NULL, err);
    int64_t *loff = malloc(((size_t)n + 1) * sizeof *loff), *lnum = malloc(((size_t)n + 1) * sizeof *lnum);
    int64_t at = 0;
    for (int i = 0; loff && lnum && i < n; i++) {
        loff[i] = at;
        lnum[i] = params[i] ? rc_tensor_numel(params[i]) : 0;
        at += lnum[i];
    }
    rci_gather_params gp = {params, grads, n, n, loff, lnum, INT64_MAX};
    rc_plan *p = loff && lnum ? rci_gather_plan(z, NULL, run, outs, n + nl, nl, &gp, err) : NULL;
    if (!loff || !lnum)
        rc_error_set(err, RC_ERR_MEMORY, "out of memory");
    free(loff);
    free(lnum);
    return p;
}

/* bytes one rank sends in a ring collective over dp ranks: an all-reduce (times 2) or a
 * reduce-scatter or all-gather (times 1) of `bytes` */
static int64_t ring_sent(int64_t bytes, int dp, int times)
{
    return bytes / dp * (dp - 1) * times + bytes % dp * (dp - 1) * times / dp;
}

/* the per-part figures of one rank from the plan's: the trainer's buffers by stage
 * (memory.h's table) and the data axis' bytes of a step */
static void rank_figures(rc_rank_memory *m, const rc_memory_options *o, int64_t grad_out, int64_t inputs)
{
    int dp = o->dp > 0 ? o->dp : 1, half = o->dtype != RC_F32;
    int64_t wb = (int64_t)rc_dtype_size(o->dtype);
    m->share = o->zero ? (m->local + dp - 1) / dp : m->local;
    /* with zero 2 and 3 the f32 sum is the share plus the window the step's gradients are
     * reduce-scattered through, min(2^20, the share) floats (trainer.c's ZERO2_WINDOW) */
    m->window = o->zero >= 2 && dp > 1 ? (m->share < (1 << 20) ? m->share : 1 << 20) : 0;
    m->optimizer = 8 * m->share;
    m->master = half || o->zero == 3 ? 4 * m->share : 0;
    if (o->zero == 3) { /* the share (16-bit: its own words; f32: the master) and the slots */
        m->weights = (half ? wb * m->share : 0) + m->gathered;
        m->gradients = 4 * (m->share + m->window);
        m->activations = m->arena + inputs;
        m->sent = ring_sent(wb * m->gathered_elems, dp, 1) + ring_sent(4 * m->local, dp, 1);
    } else { /* the whole local weights; the step's own gradients (dtype) + the f32 sum */
        m->weights = wb * m->local;
        m->gradients = 4 * (o->zero >= 2 ? m->share + m->window : m->local) + grad_out;
        m->activations = m->arena - grad_out + inputs;
        m->sent = o->zero ? ring_sent(4 * m->local, dp, 1) + ring_sent(wb * m->local, dp, 1)
                          : ring_sent(4 * m->local, dp, 2);
    }
}

int rc_memory_plan(const rc_model_config *c, const rc_memory_options *o, rc_rank_memory *m, rc_error *err)
{
    memset(m, 0, sizeof *m);
    if (!c || !o)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: no model or options");
    if (check_options(o, err))
        return -1;
    int mp = o->mp > 0 ? o->mp : 1;
    step_graph s = {0};
    rci_gather z = {0};
    rc_plan *plan = NULL;
    int rc = record(&s, c, o, err);
    if (!rc && mp > 1)
        rc = partition(&s, o, mp, err);
    rc_graph *run = mp > 1 ? s.local.g : s.g;
    int nl = s.unscaled ? 2 : 1; /* the losses planned before the gradients */
    rc_tensor *loss = mp > 1 ? s.local.out : s.loss, **params = mp > 1 ? s.local.params : s.p;
    int n = s.model.n_params;
    if (!rc) {
        s.grads = calloc((size_t)n + 1, sizeof *s.grads);
        s.outs = calloc((size_t)n + 2, sizeof *s.outs);
        if (!s.grads || !s.outs)
            rc = rc_error_set(err, RC_ERR_MEMORY, "memory plan: out of memory");
    }
    if (!rc && rc_backward(run, loss, params, n, s.grads))
        rc = rc_error_set(err, rc_graph_error_code(run), "memory plan: backward: %s", rc_graph_error(run));
    if (!rc) {
        s.outs[0] = loss;
        if (nl == 2)
            s.outs[1] = mp > 1 ? s.local.outs[1] : s.unscaled;
        memcpy(s.outs + nl, s.grads, (size_t)n * sizeof *s.grads);
    }
    if (!rc && !(plan = step_estimate(run, params, s.grads, n, s.outs, nl, o->zero, &z, err)))
        rc = rci_error_prefix(err, "memory plan");
    rc_plan_stats st = plan ? rc_plan_get_stats(plan) : (rc_plan_stats){0};
    if (!rc) {
        int64_t grad_out = 0; /* the gradient outputs: alive in the arena at the end of the step */
        for (int i = 0; i < n; i++) {
            m->local += rc_tensor_numel(params[i]);
            grad_out += (int64_t)rc_tensor_nbytes(s.grads[i]);
        }
        m->params = s.model.numel;
        m->arena = (int64_t)st.peak_bytes;
        if (o->zero == 3) {
            m->gathered_elems = rci_gather_elements(&z);
            m->gathered = z.numel * (int64_t)rc_dtype_size(o->dtype);
            m->units = z.nunit;
            m->slots = z.nslot;
            for (int v = 0; v < z.nvisit; v++)
                m->gathers += z.visit_gathers[v];
        }
        rank_figures(m, o, grad_out, leaf_bytes(run, params, n));
        m->scratch = step_scratch(o->backend ? o->backend : rci_backend_cpu(), plan);
        if (m->scratch < 0)
            rc = rc_error_set(err, RC_ERR_MEMORY, "memory plan: out of memory");
        m->total = m->weights + m->gradients + m->optimizer + m->master + m->activations + m->scratch;
        /* the whole weights beside all of that: with model shards while the first step
         * takes them; with zero 3 as given to the trainer (before the first fit takes the
         * shares) and gathered back when fit ends, beside the shares of the state alone (the
         * steps, slots and gradient share go first): what that adds to the steps' total.
         * None when they are read from a directory in parts and left in final/ at the end. */
        int64_t whole = (int64_t)rc_dtype_size(o->dtype) * m->params;
        int64_t beside = m->optimizer + m->master + m->gradients + (m->weights - m->gathered);
        m->full_copy = o->from_dir ? 0 : mp > 1 ? whole
                     : o->zero == 3 ? (whole + beside > m->total ? whole + beside - m->total : 0) : 0;
    }
    rci_gather_free(&z);
    rc_plan_free(plan);
    step_graph_free(&s);
    return rc ? -1 : 0;
}

/* the presets of c's family, most parameters first; n of them; malloc'ed */
static const char **family_presets(const rc_model_config *c, int *n)
{
    const char *const *names = rc_config_preset_names();
    int total = 0;
    while (names[total])
        total++;
    const char **out = malloc((size_t)(total + 1) * sizeof *out);
    int64_t *size = malloc((size_t)(total + 1) * sizeof *size);
    *n = 0;
    for (int i = 0; out && size && i < total; i++) {
        rc_model_config p;
        if (!strncmp(names[i], "tiny-", 5) || rc_config_preset(names[i], &p, NULL) || p.type != c->type)
            continue; /* the tests' tiny models are not candidates */
        int64_t count = rc_config_param_count(&p);
        int k = (*n)++;
        for (; k > 0 && size[k - 1] < count; k--) { /* insertion: largest first */
            out[k] = out[k - 1];
            size[k] = size[k - 1];
        }
        out[k] = names[i];
        size[k] = count;
    }
    free(size);
    return out;
}

int rc_memory_largest(const rc_model_config *c, const rc_memory_options *o, int64_t budget, const char **name,
                      rc_rank_memory *m, rc_error *err)
{
    *name = NULL;
    memset(m, 0, sizeof *m);
    if (!c || !o)
        return rc_error_set(err, RC_ERR_ARG, "memory plan: no model or options");
    if (check_options(o, err))
        return -1;
    int n = 0, mp = o->mp > 0 ? o->mp : 1, dp = o->dp > 0 ? o->dp : 1;
    const char **names = family_presets(c, &n);
    if (!names)
        return rc_error_set(err, RC_ERR_MEMORY, "memory plan: out of memory");
    for (int i = 0; i < n && !*name; i++) {
        rc_model_config p;
        rc_rank_memory r;
        if (rc_config_preset(names[i], &p, err))
            break;
        /* the weights and gradients alone, on a perfect split: too large means no need to
         * record the graph */
        int64_t local = rc_config_param_count(&p) / mp, wb = (int64_t)rc_dtype_size(o->dtype);
        /* stages 0-2: weights + the step's gradients in the dtype, the f32 gradient sum (zero
         * 2: its share); stage 3: of the share only, the f32 gradients, moments and master
         * (and the 16-bit words) */
        int64_t least = o->zero == 3 ? (16 + (o->dtype != RC_F32 ? wb : 0)) * (local / dp)
                                     : local * 2 * wb + 4 * (o->zero >= 2 ? local / dp : local);
        if (least > budget || rc_memory_plan(&p, o, &r, NULL)) /* a plan that fails: mp divides nothing */
            continue;
        if (r.total + r.full_copy <= budget) {
            *name = names[i];
            *m = r;
        }
    }
    free(names);
    return 0;
}

static double gib(int64_t bytes)
{
    return (double)bytes / 1073741824.0;
}

int rc_memory_fits(const rc_rank_memory *m, const rc_memory_options *o, int sharers, const char *what,
                   rc_error *err)
{
    const rc_rank_memory r = *m;
    const rc_backend *be = o->backend ? o->backend : rci_backend_cpu();
    size_t total;
    rc_backend_memory(be, &total, NULL, NULL);
    int n = sharers > 1 ? sharers : 1;
    int64_t need = r.total + r.full_copy, share = (int64_t)(total / (size_t)n);
    if (!total || need <= share)
        return 0;
    char parts[256];
    int k = snprintf(parts, sizeof parts, "activations %.2f, weights %.2f, gradients %.2f, optimizer %.2f",
                     gib(r.activations), gib(r.weights), gib(r.gradients), gib(r.optimizer + r.master));
    if (r.full_copy && k > 0 && (size_t)k < sizeof parts)
        snprintf(parts + k, sizeof parts - (size_t)k, ", the full weights %s %.2f",
                 o->zero == 3 ? "gathered back at the end" : "while sharding", gib(r.full_copy));
    return rc_error_set(err, RC_ERR_MEMORY,
                        "%s does not fit: one rank needs %.2f GiB at batch %lld x %lld (%s GiB), and %s has %.2f "
                        "GiB%s: try a smaller batch or sequence, remat (--remat), more model shards (--mp), --zero "
                        "or a 16-bit --dtype",
                        what, gib(need), (long long)o->batch, (long long)o->seq_len, parts, rc_backend_name(be),
                        gib(share), n > 1 ? " for each of the processes on it" : "");
}

/* the multiplier of a unit ("GiB", "gb", "" ...); 0 when unknown */
static double unit_scale(const char *u)
{
    static const struct {
        const char *name;
        double scale;
    } units[] = {{"", 1},       {"b", 1},           {"kb", 1e3},          {"mb", 1e6},
                 {"gb", 1e9},   {"tb", 1e12},       {"kib", 1024.0},      {"mib", 1048576.0},
                 {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
    char low[8];
    size_t len = 0;
    for (; u[len] && len < sizeof low - 1; len++)
        low[len] = (char)tolower((unsigned char)u[len]);
    low[len] = 0;
    if (u[len])
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(low, units[i].name))
            return units[i].scale;
    return 0;
}

int rc_memory_parse(const char *text, int64_t *bytes, rc_error *err)
{
    char *end = NULL;
    double v = text ? strtod(text, &end) : NAN;
    double scale = end && end != text ? unit_scale(end) : 0;
    double b = v * scale;
    if (!scale || !isfinite(b) || b < 1 || b > 9.2e18)
        return rc_error_set(err, RC_ERR_ARG,
                            "memory size '%s': a positive number with a unit: 80GB (10^9 bytes), 24GiB (2^30), "
                            "512MiB, 4096",
                            text ? text : "(null)");
    *bytes = (int64_t)llround(b);
    return 0;
}
