/* gather.h - ZeRO stage 3 (--zero 3): every rank of the data axis holds only its share of
 * the weights (rc_comm_share of the local layout), and a step's plan gathers each layer's
 * parameters just before the nodes that read them, then reduce-scatters that layer's
 * gradients as soon as they are all computed, after which their memory is reused.
 *
 * A layer (a "unit") is found from the graph, never from parameter names: parameters are
 * taken in the order the step first reads them; a recomputation segment's parameters make
 * one unit; outside segments, consecutive parameters join one unit until it would exceed
 * the largest parameter's size. A unit may be read in several visits (a tied embedding, at
 * the start and at the head; each layer again in the backward pass): a visit is a run of
 * reads of one unit with no read of another in between. Units are given slots in one
 * gathered buffer so that no two units whose visits overlap share one, counting for each
 * visit the time from the start of the visit before it, when its gather is started: the
 * gather of visit k+1 moves while visit k computes.
 *
 * LoRA's frozen base weights are gathered the same way, from a second share-split vector:
 * their places in the layout start at `split` (the trainable layout's size), and they have
 * no gradients to scatter. */
#ifndef REDCO_GATHER_H
#define REDCO_GATHER_H

#include "comm_async.h"
#include "redco.h"

/* What a plan's gathers and scatters need at run time (the trainer's state). */
typedef struct {
    rc_comm *dp;                  /* the data axis */
    rc_buffer *share;             /* this rank's share of the weights in the steps' dtype:
                                     element 0 is local element rc_comm_share's lo */
    int64_t numel;                /* the local layout's elements (what the shares split) */
    const int64_t *loff, *lnum;   /* per parameter: element offset and count in the local layout */
    rc_dtype dtype;               /* the weights' */
    rc_buffer *gathered;          /* rci_gather.numel elements of dtype: the slots */
    /* training: a unit's gradients are all computed; scatter the local-layout ranges
     * [lo[r], hi[r]) of them (rc_plan_memory reads them in here) */
    int (*scatter)(void *ctx, const int64_t *lo, const int64_t *hi, int nrange, rc_error *err);
    void *ctx;
    rc_buffer *frozen;            /* LoRA: this rank's share of the frozen base weights (dtype),
                                     whose layout (frozen_numel) the layout continues with at
                                     element numel; else NULL */
    int64_t frozen_numel;
} rci_gather_run;

typedef struct {
    int np, nunit;
    int64_t split;                /* layout elements from here on are the frozen weights' */
    int *unit;                    /* [np] parameter i's unit (parameters no node reads make
                                     units of their own, last: their gradients still scatter) */
    int64_t *at;                  /* [np] its element offset in the gathered buffer */
    rc_tensor **release;          /* [np] with gradients: the node after which the unit's
                                     gradients are complete (their memory goes after it) */
    int *nrange;                  /* [nunit] local-layout ranges of its parameters: */
    int64_t **lo, **hi;           /* merged where contiguous (never across split), ascending */
    int *ntrained;                /* [nunit] its first ranges below split (what it scatters) */
    /* from the plan */
    int nvisit;
    int *visit_unit, *visit_start, *visit_end, *visit_gathers;
    int nslot;
    int64_t *slot_at, *slot_numel; /* [nunit] start and size of each slot (first nslot) */
    int *slot;                    /* [nunit] */
    int64_t numel;                /* the gathered buffer's elements */
    int nevent;
    int *event_at, *event_what;   /* what >= 0: visit what starts; < 0: unit -1 - what scatters */
    rci_comm_pending ***pending;  /* [nvisit] its gathers in flight, one per range */
    rci_gather_run run;
    rc_tensor **leaves;           /* [np] the plan's parameter leaves (the schedule's copy) */
} rci_gather;

/* The parameters a stage 3 plan gathers. */
typedef struct {
    rc_tensor *const *leaves;     /* [np] their leaves in the run graph (NULL: not in it) */
    rc_tensor *const *grads;      /* [n] the trained ones' gradients (NULL: a step without) */
    int n, np;                    /* trained parameters; with the frozen ones after them */
    const int64_t *loff, *lnum;   /* [np] each one's place in the layout */
    int64_t split;                /* where the frozen ones' layout begins (INT64_MAX: none) */
} rci_gather_params;

/* Stage 3's plan of graph run over outs[0..nplan) (gradient i of the parameters is
 * outs[nout + i], i < gp->n, when gp->grads): the units of the parameters, the plan on be
 * where each gradient's memory goes once its unit's are all computed (be NULL: an
 * estimate, rci_plan_new_estimate, nothing allocated), and the units' schedule over that
 * plan's order, into z. The step builder and the memory plan both make it here. NULL with
 * err set. */
rc_plan *rci_gather_plan(rci_gather *z, rc_backend *be, rc_graph *run, rc_tensor *const *outs, int nplan, int nout,
                         const rci_gather_params *gp, rc_error *err);
/* Units of the parameters leaves[0..np) of graph g (NULL entries: not in the graph), and with
 * grads (the gradient of each, or NULL: a step without) the node each unit's gradients are
 * complete after. loff/lnum: each parameter's place in the layout, the frozen weights' from
 * split on (INT64_MAX: none). */
int rci_gather_units(rci_gather *z, const rc_graph *g, rc_tensor *const *leaves, rc_tensor *const *grads, int np,
                     const int64_t *loff, const int64_t *lnum, int64_t split, rc_error *err);
/* The visits in the order the nodes of g run (order[0..n_order): a plan's, rci_plan_node),
 * the slots and the events (leaves: as given to the units). */
int rci_gather_schedule(rci_gather *z, const rc_graph *g, rc_tensor *const *order, int n_order,
                        rc_tensor *const *leaves, rc_error *err);
/* Binds the parameters' leaves into run->gathered and sets the plan's events to gather and
 * scatter with run's state (copied); again whenever the gathered buffer changes. */
int rci_gather_attach(rci_gather *z, rc_plan *p, const rci_gather_run *run, rc_error *err);
/* Waits for gathers still in flight (a run that stopped half-way); returns the first error. */
int rci_gather_drain(rci_gather *z, rc_error *err);
/* Elements the units' gathers move per run: each visit that gathers, its unit's elements. */
int64_t rci_gather_elements(const rci_gather *z);
void rci_gather_free(rci_gather *z);

#endif
