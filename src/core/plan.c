/* plan.c - the executor: orders the nodes the outputs need, plans one arena for all
 * intermediates by liveness (first fit), and runs the kernels with no allocation. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ARENA_ALIGN = 64 };

struct rc_plan {
    rc_graph *g;
    int n;                        /* nodes in execution order */
    rc_tensor **order;
    size_t *offset;               /* arena offset of node order[i] (owners only) */
    char *owns;                   /* 1 when order[i] has its own arena buffer */
    char *arena;
    rc_plan_stats stats;
    int timing;
    int dry;                      /* planned for the figures only: no arena */
    uint64_t run_key;             /* mixed into dropout masks (rc_plan_set_rng) */
    rc_collective_fn collective;  /* model-axis all-reduces; NULL: one shard */
    void *collective_ctx;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rc_tensor *storage_of(rc_tensor *t)
{
    return t->view_src ? t->view_src : t;
}

/* needed[i] = 1 for every node an output depends on. */
static char *needed_nodes(rc_graph *g, rc_tensor *const *outputs, int n)
{
    char *needed = calloc((size_t)g->n + 1, 1);
    if (!needed)
        return NULL;
    for (int i = 0; i < n; i++)
        needed[outputs[i]->id] = 1;
    for (int i = g->n - 1; i >= 0; i--) {
        rc_tensor *t = g->nodes[i];
        if (!needed[i])
            continue;
        for (int s = 0; s < t->nsrc; s++)
            if (t->src[s])
                needed[t->src[s]->id] = 1;
        if (t->view_src)
            needed[t->view_src->id] = 1;
    }
    return needed;
}

/* A block in use in the arena, kept sorted by offset. */
typedef struct {
    size_t off, size;
    int id;
} block;

static size_t align_up(size_t x)
{
    return (x + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

/* First fit: the lowest gap between live blocks that holds `size`. */
static size_t first_fit(block *live, int *nlive, size_t size, int id, size_t *peak)
{
    size_t at = 0;
    int pos = 0;
    for (; pos < *nlive; pos++) {
        if (live[pos].off >= at + size)
            break;
        at = align_up(live[pos].off + live[pos].size);
    }
    memmove(live + pos + 1, live + pos, (size_t)(*nlive - pos) * sizeof *live);
    live[pos] = (block){at, size, id};
    (*nlive)++;
    if (at + size > *peak)
        *peak = at + size;
    return at;
}

static void release(block *live, int *nlive, int id)
{
    for (int i = 0; i < *nlive; i++)
        if (live[i].id == id) {
            memmove(live + i, live + i + 1, (size_t)(*nlive - i - 1) * sizeof *live);
            (*nlive)--;
            return;
        }
}

/* Liveness: last[id] = the last position in `order` that reads node id's storage. */
static void last_uses(rc_plan *p, int *last, rc_tensor *const *outputs, int nout)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        last[storage_of(t)->id] = i;
        for (int s = 0; s < t->nsrc; s++)
            if (t->src[s])
                last[storage_of(t->src[s])->id] = i;
    }
    for (int i = 0; i < nout; i++)
        last[storage_of(outputs[i])->id] = p->n;
}

static int plan_memory(rc_plan *p, rc_tensor *const *outputs, int nout, rc_error *err)
{
    rc_graph *g = p->g;
    int *last = calloc((size_t)g->n, sizeof *last);
    int *pos_of = malloc((size_t)g->n * sizeof *pos_of);
    block *live = malloc(((size_t)p->n + 1) * sizeof *live);
    if (!last || !pos_of || !live) {
        free(last);
        free(pos_of);
        free(live);
        return rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory for %d nodes", p->n);
    }
    last_uses(p, last, outputs, nout);
    for (int i = 0; i < p->n; i++)
        pos_of[p->order[i]->id] = i;
    int nlive = 0;
    size_t peak = 0;
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        p->owns[i] = t->op != RC_OP_LEAF && !t->view_src;
        if (p->owns[i]) {
            p->stats.op_count[t->op]++;
            size_t size = align_up(rc_tensor_nbytes(t) ? rc_tensor_nbytes(t) : 1);
            p->offset[i] = first_fit(live, &nlive, size, t->id, &peak);
            p->stats.naive_bytes += size;
        }
        /* free what this node was the last to read (after its own output was placed) */
        for (int s = 0; s < t->nsrc; s++) {
            rc_tensor *r = t->src[s] ? storage_of(t->src[s]) : NULL;
            if (r && last[r->id] == i && p->owns[pos_of[r->id]])
                release(live, &nlive, r->id);
        }
        if (p->owns[i] && last[t->id] == i)
            release(live, &nlive, t->id);
    }
    free(last);
    free(pos_of);
    free(live);
    p->stats.peak_bytes = peak;
    if (p->dry)
        return 0;
    p->arena = peak ? aligned_alloc(ARENA_ALIGN, align_up(peak)) : NULL;
    if (peak && !p->arena)
        return rc_error_set(err, RC_ERR_MEMORY, "plan: cannot allocate the %zu-byte arena", peak);
    return 0;
}

static rc_plan *plan_new(rc_graph *g, rc_tensor *const *outputs, int n, int dry, rc_error *err);

rc_plan *rc_plan_new(rc_graph *g, rc_tensor *const *outputs, int n, rc_error *err)
{
    return plan_new(g, outputs, n, 0, err);
}

int rc_plan_estimate(rc_graph *g, rc_tensor *const *outputs, int n, rc_plan_stats *stats, rc_error *err)
{
    rc_plan *p = plan_new(g, outputs, n, 1, err);
    if (!p)
        return -1;
    *stats = p->stats;
    rc_plan_free(p);
    return 0;
}

static rc_plan *plan_new(rc_graph *g, rc_tensor *const *outputs, int n, int dry, rc_error *err)
{
    if (!g || rc_graph_error(g)) {
        rc_error_set(err, g ? g->err_code : RC_ERR_ARG, "plan: the graph has an error: %s",
                     rc_graph_error(g));
        return NULL;
    }
    if (n < 1 || !outputs) {
        rc_error_set(err, RC_ERR_ARG, "plan: no outputs");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!outputs[i] || outputs[i]->id >= g->n || g->nodes[outputs[i]->id] != outputs[i]) {
            rc_error_set(err, RC_ERR_ARG, "plan: output %d is NULL or not a node of this graph", i);
            return NULL;
        }
    rc_plan *p = calloc(1, sizeof *p);
    char *needed = needed_nodes(g, outputs, n);
    if (!p || !needed)
        goto oom;
    p->g = g;
    p->dry = dry;
    for (int i = 0; i < g->n; i++)
        p->n += needed[i];
    p->order = malloc((size_t)p->n * sizeof *p->order);
    p->offset = calloc((size_t)p->n, sizeof *p->offset);
    p->owns = calloc((size_t)p->n, 1);
    if (!p->order || !p->offset || !p->owns)
        goto oom;
    for (int i = 0, k = 0; i < g->n; i++)
        if (needed[i])
            p->order[k++] = g->nodes[i];
    free(needed);
    needed = NULL;
    for (int i = 0; i < n; i++)
        outputs[i]->flags |= RC_FLAG_OUTPUT;
    p->stats.nodes = p->n;
    if (plan_memory(p, outputs, n, err)) {
        rc_plan_free(p);
        return NULL;
    }
    return p;
oom:
    free(needed);
    rc_plan_free(p);
    rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory for %d nodes", g->n);
    return NULL;
}

void rc_plan_free(rc_plan *p)
{
    if (!p)
        return;
    free(p->order);
    free(p->offset);
    free(p->owns);
    free(p->arena);
    free(p);
}

rc_plan_stats rc_plan_get_stats(const rc_plan *p)
{
    rc_plan_stats none = {0};
    return p ? p->stats : none;
}

void rc_plan_set_rng(rc_plan *p, rc_rng key)
{
    if (p)
        p->run_key = rci_hash64(key.key ^ rci_hash64(key.counter));
}

void rc_plan_set_collective(rc_plan *p, rc_collective_fn fn, void *ctx)
{
    if (p) {
        p->collective = fn;
        p->collective_ctx = ctx;
    }
}

/* MP_REDUCE / MP_MAX: the input copied, then combined across the model shards */
static int run_collective(rc_plan *p, rc_tensor *t, rc_error *err)
{
    memcpy(t->data, t->src[0]->data, rc_tensor_nbytes(t));
    if (!p->collective)
        return 0;
    return p->collective(p->collective_ctx, t->data, rc_tensor_numel(t), t->dtype,
                         t->op == RC_OP_MP_MAX, err);
}

void rc_plan_set_timing(rc_plan *p, int on)
{
    if (p)
        p->timing = on;
}

/* Points every node at its memory for this run: leaves are bound by the user,
 * owners live in the arena, views alias their storage. */
static int bind_memory(rc_plan *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (p->owns[i])
            t->data = p->arena + p->offset[i];
        else if (t->op == RC_OP_LEAF && !t->data && rc_tensor_numel(t) > 0) {
            char s[96];
            return rc_error_set(err, RC_ERR_ARG, "run: leaf '%s' %s %s has no data bound", t->name,
                                rc_shape_str(t, s, sizeof s), rc_dtype_name(t->dtype));
        }
    }
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (t->view_src)
            t->data = (char *)t->view_src->data + t->view_offset;
        if (t->op == RC_OP_DROPOUT) {
            t->iparam[2] = (int32_t)(uint32_t)(p->run_key & 0xffffffffu);
            t->iparam[3] = (int32_t)(uint32_t)(p->run_key >> 32);
        }
    }
    return 0;
}

int rc_plan_run(rc_plan *p, rc_error *err)
{
    if (!p || p->dry)
        return rc_error_set(err, RC_ERR_ARG, "run: %s plan", p ? "an estimate-only" : "NULL");
    double t0 = now_s(), kernel_s = 0;
    if (bind_memory(p, err))
        return -1;
    if (p->timing)
        memset(p->stats.op_s, 0, sizeof p->stats.op_s);
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (!p->owns[i])
            continue;
        double k0 = p->timing ? now_s() : 0;
        int is_collective = t->op == RC_OP_MP_REDUCE || t->op == RC_OP_MP_MAX;
        if (is_collective ? run_collective(p, t, err) : rci_cpu_run(t, err)) {
            char s[96], msg[sizeof err->msg + 192];
            if (err) {
                snprintf(msg, sizeof msg, "%s (node %d, %s %s)", err->msg, t->id, rc_op_name(t->op),
                         rc_shape_str(t, s, sizeof s));
                memcpy(err->msg, msg, sizeof err->msg - 1);
                err->msg[sizeof err->msg - 1] = 0;
            }
            return -1;
        }
        if (p->timing) {
            double dt = now_s() - k0;
            kernel_s += dt;
            p->stats.op_s[t->op] += dt;
        }
    }
    p->stats.last_run_s = now_s() - t0;
    p->stats.last_kernel_s = kernel_s;
    return 0;
}
