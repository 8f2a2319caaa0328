/* profile.h - where a trainer's steps spend their time (rc_train_options.profile): each
 * step's phases, timed with the device waited for at the end of each, and the train step's
 * kernels by op (its plan's per-kernel timing, every kernel waited for). The first step
 * (the step's compilation, first allocations) is left out. Slower steps than without it:
 * for finding where the time goes, not for measuring a throughput. */
#ifndef RC_TRAIN_PROFILE_H
#define RC_TRAIN_PROFILE_H

#include "redco.h"
#include "run.h"

typedef enum {
    RCI_PROF_DATA,     /* collate and the batch's arrays */
    RCI_PROF_RUN,      /* the train step's plan: forward, backward, the loss read back */
    RCI_PROF_GRADS,    /* the gradients into the f32 accumulation, the data axis's reduction */
    RCI_PROF_NORM,     /* the global gradient norm */
    RCI_PROF_UPDATE,   /* the optimizer, the master weights rounded, zero's gathers */
    RCI_PROF_PHASES
} rci_prof_phase;

typedef struct {
    int on;
    rc_backend *be;
    double at;                     /* when the phase in progress began */
    double s[RCI_PROF_PHASES];     /* seconds by phase over the steps counted */
    double op_s[RC_OP_COUNT];      /* the train step's kernel seconds by op, the same steps */
    int64_t op_count[RC_OP_COUNT]; /* its kernels by op in a step (the plan's) */
    double op_bytes[RC_OP_COUNT];  /* their inputs' and outputs' bytes in a step */
    int64_t steps;                 /* steps counted */
    int skip;                      /* the step in progress is not counted (the first) */
} rci_profile;

/* on or off for a fit on backend be; the first step is then left out */
void rci_profile_init(rci_profile *p, rc_backend *be, int on);
/* A step begins (p off: nothing). */
void rci_profile_step(rci_profile *p);
/* The phase in progress ends: the device waited for, its seconds added to ph. */
int rci_profile_mark(rci_profile *p, rci_prof_phase ph, rc_error *err);
/* the kernels of plan's last run added by op */
void rci_profile_kernels(rci_profile *p, const rc_plan *plan);
/* A step is done: counted unless it was the first. */
void rci_profile_done(rci_profile *p);
/* The mean milliseconds a step of each phase and op, into the log at step (keys
 * profile/PHASE_ms, profile/op/OP_ms) and one note line, which also gives each op's kernels
 * a step and the gigabytes they read and write (the rate they reach: bytes / time); nothing
 * when off or no step counted. */
int rci_profile_report(const rci_profile *p, rc_deployer *d, int64_t step, rc_error *err);

#endif
