/* exec.h - what the executor (plan.c) offers the rooms above beyond the public API. */
#ifndef REDCO_EXEC_H
#define REDCO_EXEC_H

#include "redco.h"

/* The graph a plan runs, and whether node t is one of the plan's nodes. */
const rc_graph *rci_plan_graph(const rc_plan *p);
int rci_plan_has(const rc_plan *p, const rc_tensor *t);

#endif
