/* plan.c - the executor: orders the nodes the outputs need, plans one arena for all
 * intermediates by liveness (first fit), keeps the table from each node to its memory
 * (buffer, offset), and runs the nodes on its backend with no allocation.
 *
 * The table belongs to the plan, not to the graph: several plans over one graph (a
 * training step and an evaluation step) each have their own memory.
 *
 * For ZeRO stage 3 (exec.h) a run calls events at chosen positions (parameters gathered
 * just before the nodes that read them, gradients reduce-scattered right after they are
 * computed), and an output may be released early: its memory reused once a given node has
 * run, readable until then only by events. */
#include "internal.h"
#include "backend.h"
#include "exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ARENA_ALIGN = 64 };

struct rc_plan {
    rc_graph *g;
    rc_backend *be;
    int n;                        /* nodes in execution order */
    rc_tensor **order;
    size_t *offset;               /* arena offset of node order[i] (owners only) */
    size_t *kept_offset;          /* arena offset of order[i]'s kept block (rci_kept_bytes) */
    char *owns;                   /* 1 when order[i] has its own arena buffer */
    rc_buffer *arena;
    int gn;                       /* nodes of the graph when the plan was made */
    int *pos;                     /* by node id: position in order, -1 when not in the plan */
    char *is_output;              /* by node id */
    rci_mem *mem;                 /* by node id: where the node's values are */
    rci_mem *kept;                /* by node id: where what it keeps for its backward is */
    char *bound;                  /* by node id: a leaf bound with rc_plan_bind */
    rc_buffer **leaf_own;         /* by node id: a leaf's memory held by the plan (constants,
                                     inputs set by rc_plan_set_input) */
    rc_plan_stats stats;
    int timing;
    int dry;                      /* planned for the figures only: no arena */
    uint64_t run_key;             /* mixed into dropout masks (rc_plan_set_rng) */
    uint64_t step_key;            /* mixed into RC_RNG_STEP normals (rc_plan_set_step_rng) */
    rc_collective_fn collective;  /* model-axis all-reduces; NULL: one shard */
    void *collective_ctx;
    int *rel;                     /* by node id: for the storage of an output released early,
                                     the position after which its memory is reused; else -1 */
    int *rel_ids;                 /* the storages released early (nrel of them) */
    int nrel;
    int *ev_at;                   /* the events' positions, ascending (rci_plan_set_events) */
    int nev;
    rci_plan_event_fn ev_fn;
    void *ev_ctx;
    int ev_pos;                   /* the position of the event running now; -1: none */
};

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

/* block id of `size` bytes at offset `at` into live at index pos (keeping the order),
 * raising *peak to its end; returns at */
static size_t block_insert(block *live, int *nlive, int pos, size_t at, size_t size, int id, size_t *peak)
{
    memmove(live + pos + 1, live + pos, (size_t)(*nlive - pos) * sizeof *live);
    live[pos] = (block){at, size, id};
    (*nlive)++;
    if (at + size > *peak)
        *peak = at + size;
    return at;
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
    return block_insert(live, nlive, pos, at, size, id, peak);
}

/* Best fit: the smallest gap between live blocks that holds `size` (the lowest of equal
 * ones), else past the last block */
static size_t best_fit(block *live, int *nlive, size_t size, int id, size_t *peak)
{
    size_t at = 0, best_at = 0, best_gap = SIZE_MAX;
    int best_pos = -1;
    for (int pos = 0; pos < *nlive; pos++) {
        if (live[pos].off >= at + size && live[pos].off - at < best_gap) {
            best_gap = live[pos].off - at;
            best_at = at;
            best_pos = pos;
        }
        at = align_up(live[pos].off + live[pos].size);
    }
    if (best_pos < 0)
        return block_insert(live, nlive, *nlive, at, size, id, peak);
    return block_insert(live, nlive, best_pos, best_at, size, id, peak);
}

static void release_block(block *live, int *nlive, int id)
{
    for (int i = 0; i < *nlive; i++)
        if (live[i].id == id) {
            memmove(live + i, live + i + 1, (size_t)(*nlive - i - 1) * sizeof *live);
            (*nlive)--;
            return;
        }
}

/* the block id of node id's kept block (rci_kept_bytes): past every node's id */
static int kept_block_id(const rc_plan *p, int id)
{
    return p->gn + id;
}

/* node id's memory freed: its values' block and its kept block, where it has one */
static void release(const rc_plan *p, block *live, int *nlive, int id)
{
    release_block(live, nlive, id);
    if (rci_kept_bytes(p->g->nodes[id]))
        release_block(live, nlive, kept_block_id(p, id));
}

static void block_rename(block *live, int nlive, int from, int to)
{
    for (int i = 0; i < nlive; i++)
        if (live[i].id == from)
            live[i].id = to;
}

/* The input (its index) whose memory node t's output may take, or -1: where the kernels, on
 * every backend, read its element i (or each row) before writing element i (that row) of
 * the output and nothing else of it after. The elementwise binary ops' first (the gradient
 * sums of a tied weight or the residual stream), the cross-entropy gradient's logits (often
 * a language model's largest activation), a norm's dx's addend (the residual stream's
 * gradient). */
static int input_may_be_taken(const rc_tensor *t)
{
    switch (t->op) {
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV:
    case RC_OP_CROSS_ENTROPY_GRAD:
        return 0;
    case RC_OP_NORM_GRAD:
        return t->iparam[1] == 0 && t->nsrc > 3 && t->src[3] ? 3 : -1;
    default:
        return -1;
    }
}

/* The bytes of a node's output (and kept block) and of each of its inputs */
static double node_bytes(const rc_tensor *t)
{
    double b = (double)rc_tensor_nbytes(t) + (double)rci_kept_bytes(t);
    for (int s = 0; s < t->nsrc; s++)
        if (t->src[s])
            b += (double)rc_tensor_nbytes(t->src[s]);
    return b;
}

/* The position in order of the owner whose memory node order[i] takes, or -1. It is the
 * storage of the node's input that input_may_be_taken names when: there is one; that input
 * is the whole storage element for element (not a part of it: no offset, the same bytes and
 * dtype as the output); nothing reads the storage after this node (so it is no output); it
 * is no output released early (an event right after this node may still read it); it is an
 * intermediate of this plan (not a leaf); and no other input shares it. */
static int input_taken(const rc_plan *p, int i, const int *last, const int *pos_of)
{
    rc_tensor *t = p->order[i];
    int k = input_may_be_taken(t);
    rc_tensor *a = k >= 0 ? t->src[k] : NULL;
    if (!a)
        return -1;
    rc_tensor *r = storage_of(a);
    if (a->view_offset != 0 || a->dtype != t->dtype || rc_tensor_nbytes(a) != rc_tensor_nbytes(t) ||
        rc_tensor_nbytes(r) != rc_tensor_nbytes(t) || rci_kept_bytes(r) || rci_kept_bytes(t))
        return -1;
    if (last[r->id] != i || p->rel[r->id] >= 0 || !p->owns[pos_of[r->id]])
        return -1;
    for (int s = 0; s < t->nsrc; s++)
        if (s != k && t->src[s] && storage_of(t->src[s]) == r)
            return -1;
    return pos_of[r->id];
}

/* Liveness: last[id] = the last position in `order` that reads node id's storage. An
 * output's storage lives to the end (p->n), or with a release node (release_after[i]) to
 * that node's position when it is later than the storage's last reader. A leaf's memory is
 * not the arena's: a leaf output is always kept. */
static void last_uses(rc_plan *p, int *last, rc_tensor *const *outputs, int nout,
                      rc_tensor *const *release_after)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        last[storage_of(t)->id] = i;
        for (int s = 0; s < t->nsrc; s++)
            if (t->src[s])
                last[storage_of(t->src[s])->id] = i;
    }
    for (int i = 0; i < nout; i++) {
        rc_tensor *s = storage_of(outputs[i]), *r = release_after ? release_after[i] : NULL;
        int until = r && s->op != RC_OP_LEAF ? p->pos[r->id] : p->n;
        if (until > last[s->id])
            last[s->id] = until;
    }
}

/* The outputs' storages released before the end (no kept output shares them): p->rel
 * holds the position after which each one's memory is reused, p->rel_ids lists them. */
static void mark_released(rc_plan *p, const int *last, rc_tensor *const *outputs, int nout,
                          rc_tensor *const *release_after)
{
    for (int i = 0; release_after && i < nout; i++) {
        rc_tensor *s = storage_of(outputs[i]);
        if (release_after[i] && s->op != RC_OP_LEAF && last[s->id] < p->n && p->rel[s->id] < 0) {
            p->rel[s->id] = last[s->id];
            p->rel_ids[p->nrel++] = s->id;
        }
    }
}

/* How arena_layout places: bits of LAYOUT_IN_PLACE (a node whose op may take its input's
 * memory, input_taken, does) and LAYOUT_BEST_FIT (best fit, not first fit) */
enum { LAYOUT_IN_PLACE = 1, LAYOUT_BEST_FIT = 2, LAYOUTS = 4 };

/* One layout of the arena in execution order, as `how` says: each owner's offset in
 * p->offset; returns the peak. */
static size_t arena_layout(rc_plan *p, const int *last, const int *pos_of, block *live, int how)
{
    int in_place = how & LAYOUT_IN_PLACE;
    size_t (*fit)(block *, int *, size_t, int, size_t *) = how & LAYOUT_BEST_FIT ? best_fit : first_fit;
    int nlive = 0;
    size_t peak = 0;
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (p->owns[i]) {
            size_t size = align_up(rc_tensor_nbytes(t) ? rc_tensor_nbytes(t) : 1), kept = rci_kept_bytes(t);
            int taken = in_place ? input_taken(p, i, last, pos_of) : -1;
            if (taken >= 0) {
                p->offset[i] = p->offset[taken];
                block_rename(live, nlive, p->order[taken]->id, t->id);
            } else {
                p->offset[i] = fit(live, &nlive, size, t->id, &peak);
            }
            if (kept)
                p->kept_offset[i] = fit(live, &nlive, align_up(kept), kept_block_id(p, t->id), &peak);
        }
        /* free what this node was the last to read (after its own output was placed) */
        for (int s = 0; s < t->nsrc; s++) {
            rc_tensor *r = t->src[s] ? storage_of(t->src[s]) : NULL;
            if (r && last[r->id] == i && p->owns[pos_of[r->id]])
                release(p, live, &nlive, r->id);
        }
        if (p->owns[i] && last[t->id] == i)
            release(p, live, &nlive, t->id);
        /* and the outputs released after this node without it reading them */
        for (int k = 0; k < p->nrel; k++)
            if (last[p->rel_ids[k]] == i)
                release(p, live, &nlive, p->rel_ids[k]);
    }
    return peak;
}

/* The arena: laid out with outputs taking their inputs' memory where they may and without,
 * by first fit and by best fit, keeping the lowest peak (the first of equal ones). Either
 * fit is greedy: a reuse that saves memory where it happens can leave gaps that cost more
 * later (long-lived gradients placed differently), and which does better depends on the
 * graph. */
static int plan_memory(rc_plan *p, rc_tensor *const *outputs, int nout,
                       rc_tensor *const *release_after, rc_error *err)
{
    rc_graph *g = p->g;
    int *last = calloc((size_t)g->n, sizeof *last);
    int *pos_of = malloc((size_t)g->n * sizeof *pos_of);
    block *live = malloc((2 * (size_t)p->n + 1) * sizeof *live); /* values and kept blocks */
    if (!last || !pos_of || !live) {
        free(last);
        free(pos_of);
        free(live);
        return rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory for %d nodes", p->n);
    }
    last_uses(p, last, outputs, nout, release_after);
    mark_released(p, last, outputs, nout, release_after);
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        pos_of[t->id] = i;
        p->owns[i] = t->op != RC_OP_LEAF && !t->view_src;
        if (p->owns[i]) {
            p->stats.op_count[t->op]++;
            p->stats.op_bytes[t->op] += node_bytes(t);
            p->stats.naive_bytes += align_up(rc_tensor_nbytes(t) ? rc_tensor_nbytes(t) : 1) +
                                    align_up(rci_kept_bytes(t));
        }
    }
    size_t peak = SIZE_MAX;
    int pick = 0;
    for (int how = 0; how < LAYOUTS; how++) {
        size_t got = arena_layout(p, last, pos_of, live, how);
        if (got < peak)
            peak = got, pick = how;
    }
    if (pick != LAYOUTS - 1)
        arena_layout(p, last, pos_of, live, pick);
    free(last);
    free(pos_of);
    free(live);
    p->stats.peak_bytes = peak;
    if (p->dry)
        return 0;
    p->arena = rci_buffer_new_uninit(p->be, peak ? align_up(peak) : ARENA_ALIGN, err);
    if (!p->arena)
        return rci_error_prefix(err, "plan: the activations' arena (%zu bytes)", peak);
    for (int i = 0; i < p->n; i++) {
        if (p->owns[i])
            p->mem[p->order[i]->id] = (rci_mem){p->arena, p->offset[i]};
        if (p->owns[i] && rci_kept_bytes(p->order[i]))
            p->kept[p->order[i]->id] = (rci_mem){p->arena, p->kept_offset[i]};
    }
    return 0;
}

static rc_plan *plan_new(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                         rc_tensor *const *release_after, int dry, rc_error *err);

rc_plan *rc_plan_new(rc_graph *g, rc_tensor *const *outputs, int n, rc_error *err)
{
    return plan_new(rci_backend_cpu(), g, outputs, n, NULL, 0, err);
}

rc_plan *rc_plan_new_on(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                        rc_error *err)
{
    return rci_plan_new_released(be, g, outputs, n, NULL, err);
}

rc_plan *rci_plan_new_released(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                               rc_tensor *const *release_after, rc_error *err)
{
    if (!be) {
        rc_error_set(err, RC_ERR_ARG, "plan: no backend");
        return NULL;
    }
    return plan_new(be, g, outputs, n, release_after, 0, err);
}

const rc_graph *rci_plan_graph(const rc_plan *p)
{
    return p ? p->g : NULL;
}

int rci_plan_has(const rc_plan *p, const rc_tensor *t)
{
    return p && t && t->id < p->gn && p->g->nodes[t->id] == t && p->pos[t->id] >= 0;
}

int rci_plan_size(const rc_plan *p)
{
    return p ? p->n : 0;
}

rc_tensor *rci_plan_node(const rc_plan *p, int pos)
{
    return p && pos >= 0 && pos < p->n ? p->order[pos] : NULL;
}

int rci_plan_pos(const rc_plan *p, const rc_tensor *t)
{
    return rci_plan_has(p, t) ? p->pos[t->id] : -1;
}

rc_backend *rc_plan_backend(const rc_plan *p)
{
    return p ? p->be : NULL;
}

int rc_plan_estimate(rc_graph *g, rc_tensor *const *outputs, int n, rc_plan_stats *stats, rc_error *err)
{
    rc_plan *p = rci_plan_new_estimate(g, outputs, n, NULL, err);
    if (!p)
        return -1;
    *stats = p->stats;
    rc_plan_free(p);
    return 0;
}

rc_plan *rci_plan_new_estimate(rc_graph *g, rc_tensor *const *outputs, int n, rc_tensor *const *release_after,
                               rc_error *err)
{
    return plan_new(rci_backend_cpu(), g, outputs, n, release_after, 1, err);
}

/* The dtype of a 16-bit input of t that differs from t's own (a loss of bf16 logits is
 * f32, a cast from f16 reads f16): the backend needs t's op for it too; else t's dtype. */
static rc_dtype half_input(const rc_tensor *t)
{
    for (int k = 0; k < t->nsrc; k++)
        if (t->src[k] && rci_dtype_is_half(t->src[k]->dtype) && t->src[k]->dtype != t->dtype)
            return t->src[k]->dtype;
    return t->dtype;
}

/* Every node's op and dtype has a kernel on the plan's backend (the model-axis
 * collectives are the plan's own work). */
static int check_supported(rc_plan *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        int own = t->op == RC_OP_MP_REDUCE || t->op == RC_OP_MP_MAX;
        rc_dtype out = t->dtype, in = half_input(t);
        if (!p->owns[i] || own)
            continue;
        rc_dtype bad = !p->be->supports(p->be, t->op, out) ? out
                       : !p->be->supports(p->be, t->op, in) ? in : RC_DTYPE_COUNT;
        if (bad != RC_DTYPE_COUNT) {
            char s[96];
            return rc_error_set(err, RC_ERR_UNSUPPORTED,
                                "plan: the %s backend has no %s kernel for dtype %s (node %d %s %s%s%s%s)",
                                p->be->name, rc_op_name(t->op), rc_dtype_name(bad), t->id,
                                rc_shape_str(t, s, sizeof s), rc_dtype_name(t->dtype),
                                t->name[0] ? " '" : "", t->name, t->name[0] ? "'" : "");
        }
    }
    return 0;
}

/* Every node the plan holds fits its op (rci_node_check): an invalid node is refused here,
 * naming it, and the kernels never see one. */
static int check_nodes(const rc_plan *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++)
        if (rci_node_check(p->order[i], err))
            return -1;
    return 0;
}

/* Constants: each plan holds and uploads its own copy. */
static int upload_constants(rc_plan *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        const rci_leaf_source *src = t->op == RC_OP_LEAF ? rci_graph_source(p->g, t->id) : NULL;
        if (!src || !src->host)
            continue;
        size_t bytes = rc_tensor_nbytes(t);
        p->leaf_own[t->id] = rc_buffer_new(p->be, bytes, err);
        if (!p->leaf_own[t->id] || rc_buffer_upload(p->leaf_own[t->id], 0, src->host, bytes, err))
            return rci_error_prefix(err, "constant '%s'", t->name);
    }
    return 0;
}

/* The per-node tables, sized to the graph. */
static int tables_new(rc_plan *p)
{
    size_t gn = (size_t)p->gn + 1;
    p->pos = malloc(gn * sizeof *p->pos);
    p->is_output = calloc(gn, 1);
    p->mem = calloc(gn, sizeof *p->mem);
    p->kept = calloc(gn, sizeof *p->kept);
    p->bound = calloc(gn, 1);
    p->leaf_own = calloc(gn, sizeof *p->leaf_own);
    p->rel = malloc(gn * sizeof *p->rel);
    if (!p->pos || !p->is_output || !p->mem || !p->kept || !p->bound || !p->leaf_own || !p->rel)
        return -1;
    for (int i = 0; i < p->gn; i++)
        p->pos[i] = p->rel[i] = -1;
    for (int i = 0; i < p->n; i++)
        p->pos[p->order[i]->id] = i;
    return 0;
}

/* Every release node is a node the outputs need (a node of the graph in the plan). */
static int check_release(const rc_plan *p, rc_tensor *const *outputs, int n,
                         rc_tensor *const *release_after, rc_error *err)
{
    for (int i = 0; release_after && i < n; i++) {
        const rc_tensor *r = release_after[i];
        if (r && !rci_plan_has(p, r))
            return rc_error_set(err, RC_ERR_ARG, "plan: output %d ('%s')'s release node %d (%s '%s') is not "
                                "a node the outputs need", i, outputs[i]->name, r->id, rc_op_name(r->op), r->name);
    }
    return 0;
}

static rc_plan *plan_new(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                         rc_tensor *const *release_after, int dry, rc_error *err)
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
    p->be = be;
    p->gn = g->n;
    p->dry = dry;
    p->ev_pos = -1;
    for (int i = 0; i < g->n; i++)
        p->n += needed[i];
    p->order = malloc((size_t)p->n * sizeof *p->order);
    p->offset = calloc((size_t)p->n, sizeof *p->offset);
    p->kept_offset = calloc((size_t)p->n, sizeof *p->kept_offset);
    p->owns = calloc((size_t)p->n, 1);
    p->rel_ids = malloc((size_t)n * sizeof *p->rel_ids);
    if (!p->order || !p->offset || !p->kept_offset || !p->owns || !p->rel_ids)
        goto oom;
    for (int i = 0, k = 0; i < g->n; i++)
        if (needed[i])
            p->order[k++] = g->nodes[i];
    free(needed);
    needed = NULL;
    if (tables_new(p))
        goto oom;
    for (int i = 0; i < n; i++)
        p->is_output[outputs[i]->id] = 1;
    p->stats.nodes = p->n;
    if (check_release(p, outputs, n, release_after, err) || check_nodes(p, err) ||
        plan_memory(p, outputs, n, release_after, err) || (!dry && check_supported(p, err)) ||
        (!dry && upload_constants(p, err))) {
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
    if (p->leaf_own)
        for (int i = 0; i < p->gn; i++)
            rc_buffer_free(p->leaf_own[i]);
    free(p->leaf_own);
    free(p->order);
    free(p->offset);
    free(p->kept_offset);
    free(p->owns);
    free(p->pos);
    free(p->is_output);
    free(p->mem);
    free(p->kept);
    free(p->bound);
    free(p->rel);
    free(p->rel_ids);
    free(p->ev_at);
    rc_buffer_free(p->arena);
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

void rc_plan_set_step_rng(rc_plan *p, rc_rng key)
{
    if (p)
        p->step_key = rci_hash64(key.key ^ rci_hash64(key.counter));
}

void rc_plan_set_collective(rc_plan *p, rc_collective_fn fn, void *ctx)
{
    if (p) {
        p->collective = fn;
        p->collective_ctx = ctx;
    }
}

/* MP_REDUCE / MP_MAX: the input copied, then combined across the model shards */
static int run_collective(rc_plan *p, const rci_node_run *r, rc_error *err)
{
    const rc_tensor *t = r->node;
    if (p->be->copy(p->be, r->out.buf, r->out.off, r->in[0].buf, r->in[0].off,
                    rc_tensor_nbytes(t), err))
        return -1;
    if (!p->collective)
        return 0;
    return p->collective(p->collective_ctx, r->out.buf, r->out.off, rc_tensor_numel(t), t->dtype,
                         t->op == RC_OP_MP_MAX, err);
}

void rc_plan_set_timing(rc_plan *p, int on)
{
    if (p)
        p->timing = on;
}

/* Checked first, then copied: a refused set leaves the plan's events as they were. */
int rci_plan_set_events(rc_plan *p, const int *at, int n, rci_plan_event_fn fn, void *ctx, rc_error *err)
{
    if (!p)
        return rc_error_set(err, RC_ERR_ARG, "events: NULL plan");
    if (p->ev_pos >= 0)
        return rc_error_set(err, RC_ERR_ARG, "events: changed by an event while the plan runs");
    if (n < 0 || (n > 0 && (!at || !fn)))
        return rc_error_set(err, RC_ERR_ARG, "events: %d events with %s", n,
                            n < 0 ? "a negative count" : !at ? "no positions" : "no function");
    for (int k = 0; k < n; k++) {
        if (at[k] < 0 || at[k] > p->n)
            return rc_error_set(err, RC_ERR_ARG, "events: event %d at position %d, outside [0, %d]", k,
                                at[k], p->n);
        if (k > 0 && at[k] < at[k - 1])
            return rc_error_set(err, RC_ERR_ARG, "events: event %d at position %d comes before event %d's "
                                "position %d (not ascending)", k, at[k], k - 1, at[k - 1]);
    }
    int *copy = NULL;
    if (n > 0 && !(copy = malloc((size_t)n * sizeof *copy)))
        return rc_error_set(err, RC_ERR_MEMORY, "events: out of memory for %d events", n);
    if (n > 0)
        memcpy(copy, at, (size_t)n * sizeof *copy);
    free(p->ev_at);
    p->ev_at = copy;
    p->nev = n;
    p->ev_fn = n > 0 ? fn : NULL;
    p->ev_ctx = n > 0 ? ctx : NULL;
    return 0;
}

/* Calls the events at position `at` (from event *next on, advancing it): -1 with fn's
 * error when one fails. While one runs, p->ev_pos says where (readable_mem). */
static int fire_events(rc_plan *p, int at, int *next, rc_error *err)
{
    for (; *next < p->nev && p->ev_at[*next] == at; (*next)++) {
        p->ev_pos = at;
        int rc = p->ev_fn(p->ev_ctx, *next, err);
        p->ev_pos = -1;
        if (rc)
            return -1;
    }
    return 0;
}

/* A node of this plan (or NULL with err set). */
static const rc_tensor *plan_node(const rc_plan *p, const rc_tensor *t, const char *what,
                                  rc_error *err)
{
    if (!p || !t || t->id >= p->gn || p->g->nodes[t->id] != t || p->pos[t->id] < 0) {
        rc_error_set(err, RC_ERR_ARG, "%s: %s is not a node of this plan", what,
                     t ? t->name[0] ? t->name : rc_op_name(t->op) : "NULL");
        return NULL;
    }
    return t;
}

/* Where leaf t's values are: a plan binding, the graph's binding, or the plan's own. */
static rci_mem leaf_mem(const rc_plan *p, const rc_tensor *t)
{
    if (p->bound[t->id])
        return p->mem[t->id];
    const rci_leaf_source *src = rci_graph_source(p->g, t->id);
    if (src && src->buf)
        return (rci_mem){src->buf, src->off};
    return (rci_mem){p->leaf_own[t->id], 0};
}

/* Where t's values are: leaves and views resolved now (bindings may change between runs). */
static rci_mem node_mem(const rc_plan *p, const rc_tensor *t)
{
    if (t->view_src) {
        rci_mem m = node_mem(p, t->view_src);
        m.off += (size_t)t->view_offset;
        return m;
    }
    return t->op == RC_OP_LEAF ? leaf_mem(p, t) : p->mem[t->id];
}

/* A buffer for a leaf of every plan of g (the parameters): kept in the graph's table of
 * leaf sources, which the plans read when they run. */
int rc_graph_bind(rc_graph *g, const rc_tensor *leaf, rc_buffer *buf, size_t offset)
{
    if (!g || !leaf || leaf->id >= g->n || g->nodes[leaf->id] != leaf || leaf->op != RC_OP_LEAF)
        return -1;
    rci_leaf_source *src = rci_graph_source_slot(g, leaf->id);
    if (!src || src->host || (buf && offset + rc_tensor_nbytes(leaf) > rc_buffer_size(buf)))
        return -1;
    src->buf = buf;
    src->off = offset;
    return 0;
}

int rc_plan_bind(rc_plan *p, const rc_tensor *leaf, rc_buffer *buf, size_t offset, rc_error *err)
{
    if (!plan_node(p, leaf, "bind", err))
        return -1;
    if (leaf->op != RC_OP_LEAF)
        return rc_error_set(err, RC_ERR_ARG, "bind: '%s' is a %s node, not a leaf", leaf->name,
                            rc_op_name(leaf->op));
    if (buf && buf->be != p->be)
        return rc_error_set(err, RC_ERR_ARG, "bind: leaf '%s' given a %s buffer in a %s plan",
                            leaf->name, buf->be->name, p->be->name);
    if (buf && (offset > buf->size || rc_tensor_nbytes(leaf) > buf->size - offset))
        return rc_error_set(err, RC_ERR_ARG, "bind: leaf '%s' needs %zu bytes at %zu of a %zu-byte buffer",
                            leaf->name, rc_tensor_nbytes(leaf), offset, buf->size);
    p->bound[leaf->id] = buf != NULL;
    p->mem[leaf->id] = (rci_mem){buf, offset};
    return 0;
}

int rc_plan_set_input(rc_plan *p, const rc_tensor *leaf, const void *host, rc_error *err)
{
    if (!plan_node(p, leaf, "set_input", err))
        return -1;
    const rci_leaf_source *src = rci_graph_source(p->g, leaf->id);
    if (leaf->op != RC_OP_LEAF || (src && src->host))
        return rc_error_set(err, RC_ERR_ARG, "set_input: '%s' is not an input leaf (%s)", leaf->name,
                            leaf->op == RC_OP_LEAF ? "a constant" : rc_op_name(leaf->op));
    size_t bytes = rc_tensor_nbytes(leaf);
    rci_mem m = leaf_mem(p, leaf);
    if (!m.buf) {
        p->leaf_own[leaf->id] = rc_buffer_new(p->be, bytes, err);
        if (!p->leaf_own[leaf->id]) {
            char s[96];
            return rci_error_prefix(err, "input '%s' %s", leaf->name, rc_shape_str(leaf, s, sizeof s));
        }
        m = (rci_mem){p->leaf_own[leaf->id], 0};
    }
    return rc_buffer_upload(m.buf, m.off, host, bytes, err);
}

/* t's memory, when t holds values after a run: an output, a leaf, or a view of one. */
static int readable_mem(const rc_plan *p, const rc_tensor *t, rci_mem *m, const char *what,
                        rc_error *err)
{
    if (!plan_node(p, t, what, err))
        return -1;
    const rc_tensor *s = t->view_src ? t->view_src : t;
    if (!p->is_output[t->id] && !p->is_output[s->id] && s->op != RC_OP_LEAF)
        return rc_error_set(err, RC_ERR_ARG, "%s: node %d (%s '%s') is not an output of this plan: "
                            "its memory is reused", what, t->id, rc_op_name(t->op), t->name);
    int rel = p->rel[s->id];
    if (rel >= 0 && (p->ev_pos < 0 || p->ev_pos > rel + 1)) {
        const rc_tensor *r = p->order[rel];
        char now[48];
        if (p->ev_pos < 0)
            snprintf(now, sizeof now, "outside the run's events");
        else
            snprintf(now, sizeof now, "at position %d", p->ev_pos);
        return rc_error_set(err, RC_ERR_ARG, "%s: output node %d (%s '%s') had its memory released after "
                            "node %d (%s '%s', position %d): readable only by events at positions up to "
                            "%d, not %s", what, t->id, rc_op_name(t->op), t->name, r->id,
                            rc_op_name(r->op), r->name, rel, rel + 1, now);
    }
    *m = node_mem(p, t);
    if (!m->buf && rc_tensor_nbytes(t) > 0)
        return rc_error_set(err, RC_ERR_ARG, "%s: leaf '%s' has no values", what, t->name);
    return 0;
}

int rc_plan_read(const rc_plan *p, const rc_tensor *t, void *host, rc_error *err)
{
    rci_mem m = {0};
    if (p && p->dry)
        return rc_error_set(err, RC_ERR_ARG, "read: an estimate-only plan has no memory");
    if (readable_mem(p, t, &m, "read", err))
        return -1;
    return rc_buffer_download(m.buf, m.off, host, rc_tensor_nbytes(t), err);
}

int rc_plan_memory(const rc_plan *p, const rc_tensor *t, rc_buffer **buf, size_t *offset)
{
    rci_mem m = {0};
    if (!p || p->dry || readable_mem(p, t, &m, "memory", NULL))
        return -1;
    *buf = m.buf;
    *offset = m.off;
    return m.buf ? 0 : -1;
}

/* Leaves and views get their memory for this run; a leaf without values is an error. */
static int bind_memory(rc_plan *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (t->op == RC_OP_LEAF || t->view_src)
            p->mem[t->id] = node_mem(p, t);
        if (t->op == RC_OP_LEAF && !p->mem[t->id].buf && rc_tensor_numel(t) > 0) {
            char s[96];
            return rc_error_set(err, RC_ERR_ARG, "run: leaf '%s' %s %s has no data bound", t->name,
                                rc_shape_str(t, s, sizeof s), rc_dtype_name(t->dtype));
        }
        if (t->op == RC_OP_LEAF && p->mem[t->id].buf && p->mem[t->id].buf->be != p->be)
            return rc_error_set(err, RC_ERR_ARG, "run: leaf '%s' is bound to a %s buffer in a %s plan "
                                "(move it: rc_params_to, or plan on its backend: rc_plan_new_on)",
                                t->name, p->mem[t->id].buf->be->name, p->be->name);
    }
    return 0;
}

/* The run of order[i]: its node, the memory of its output and inputs, its key (the step
 * key for a normal that asks for it, else the run key) and the kept block it writes (an
 * ATTENTION's) or reads (its ATTENTION_STATS', src0's). */
static rci_node_run node_run(const rc_plan *p, const rc_tensor *t)
{
    int step = t->op == RC_OP_NORMAL && t->iparam[2] == RC_RNG_STEP;
    rci_node_run r = {t, p->mem[t->id], {{0}}, step ? p->step_key : p->run_key, p->kept[rci_kept_of(t)->id]};
    for (int s = 0; s < t->nsrc; s++)
        if (t->src[s])
            r.in[s] = p->mem[t->src[s]->id];
    return r;
}

/* The error of a node's run, with the node named. */
static int node_failed(const rc_tensor *t, rc_error *err)
{
    char s[96], msg[sizeof err->msg + 192];
    if (err) {
        snprintf(msg, sizeof msg, "%s (node %d, %s %s)", err->msg, t->id, rc_op_name(t->op),
                 rc_shape_str(t, s, sizeof s));
        memcpy(err->msg, msg, sizeof err->msg - 1);
        err->msg[sizeof err->msg - 1] = 0;
    }
    return -1;
}

int rc_plan_run(rc_plan *p, rc_error *err)
{
    if (!p || p->dry)
        return rc_error_set(err, RC_ERR_ARG, "run: %s plan", p ? "an estimate-only" : "NULL");
    double t0 = rci_clock_s(), kernel_s = 0;
    if (bind_memory(p, err))
        return -1;
    if (p->timing)
        memset(p->stats.op_s, 0, sizeof p->stats.op_s);
    int next = 0; /* the next event to fire */
    for (int i = 0; i < p->n; i++) {
        rc_tensor *t = p->order[i];
        if (fire_events(p, i, &next, err))
            return -1;
        if (!p->owns[i])
            continue;
        double k0 = p->timing ? rci_clock_s() : 0;
        int is_collective = t->op == RC_OP_MP_REDUCE || t->op == RC_OP_MP_MAX;
        rci_node_run r = node_run(p, t);
        if (is_collective ? run_collective(p, &r, err) : p->be->run_node(p->be, &r, err))
            return node_failed(t, err);
        if (p->timing && p->be->wait(p->be, err))
            return -1;
        if (p->timing) {
            double dt = rci_clock_s() - k0;
            kernel_s += dt;
            p->stats.op_s[t->op] += dt;
        }
    }
    if (fire_events(p, p->n, &next, err))
        return -1;
    if (p->be->wait(p->be, err))
        return -1;
    p->stats.last_run_s = rci_clock_s() - t0;
    p->stats.last_kernel_s = kernel_s;
    return 0;
}
