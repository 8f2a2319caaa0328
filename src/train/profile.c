/* profile.c - the trainer's profile (profile.h). */
#include "profile.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const char *const phase_names[RCI_PROF_PHASES] = {"data", "run", "grads", "norm", "update"};

void rci_profile_init(rci_profile *p, rc_backend *be, int on)
{
    memset(p, 0, sizeof *p);
    p->on = on;
    p->be = be;
    p->skip = 1;
}

void rci_profile_step(rci_profile *p)
{
    if (p->on)
        p->at = rci_clock_s();
}

int rci_profile_mark(rci_profile *p, rci_prof_phase ph, rc_error *err)
{
    if (!p->on)
        return 0;
    if (rc_backend_wait(p->be, err))
        return -1;
    double now = rci_clock_s();
    if (!p->skip)
        p->s[ph] += now - p->at;
    p->at = now;
    return 0;
}

void rci_profile_kernels(rci_profile *p, const rc_plan *plan)
{
    if (!p->on || p->skip)
        return;
    rc_plan_stats st = rc_plan_get_stats(plan);
    for (int op = 0; op < RC_OP_COUNT; op++) {
        p->op_s[op] += st.op_s[op];
        p->op_count[op] = st.op_count[op];
        p->op_bytes[op] = st.op_bytes[op];
    }
}

void rci_profile_done(rci_profile *p)
{
    if (!p->on)
        return;
    p->steps += !p->skip;
    p->skip = 0;
}

/* the ops by kernel time, most first, into order[]; their count */
static int ops_by_time(const rci_profile *p, int *order)
{
    int n = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (p->op_s[op] > 0)
            order[n++] = op;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && p->op_s[order[j]] > p->op_s[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    return n;
}

int rci_profile_report(const rci_profile *p, rc_deployer *d, int64_t step, rc_error *err)
{
    if (!p->on || p->steps == 0)
        return 0;
    enum { MAX_KEYS = RCI_PROF_PHASES + 1 + RC_OP_COUNT };
    char names[MAX_KEYS][48], line[1024];
    const char *keys[MAX_KEYS];
    double vals[MAX_KEYS], ms = 1e3 / (double)p->steps, kernels = 0;
    int order[RC_OP_COUNT], nops = ops_by_time(p, order), n = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        kernels += p->op_s[op];
    for (int ph = 0; ph < RCI_PROF_PHASES; ph++) {
        snprintf(names[n], sizeof names[n], "profile/%s_ms", phase_names[ph]);
        vals[n++] = p->s[ph] * ms;
    }
    snprintf(names[n], sizeof names[n], "profile/kernels_ms");
    vals[n++] = kernels * ms;
    for (int i = 0; i < nops; i++) {
        snprintf(names[n], sizeof names[n], "profile/op/%s_ms", rc_op_name((rc_op)order[i]));
        vals[n++] = p->op_s[order[i]] * ms;
    }
    for (int i = 0; i < n; i++)
        keys[i] = names[i];
    int at = snprintf(line, sizeof line, "profile, ms a step over %lld steps (each phase and kernel waited for):",
                      (long long)p->steps);
    for (int ph = 0; ph < RCI_PROF_PHASES; ph++)
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %.2f,", phase_names[ph], p->s[ph] * ms);
    at += snprintf(line + at, sizeof line - (size_t)at, " of the run in kernels %.2f:", kernels * ms);
    for (int i = 0; i < nops && i < 10 && at < (int)sizeof line - 80; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s %s %.2f (%lld, %.2f GB)", i ? "," : "",
                       rc_op_name((rc_op)order[i]), p->op_s[order[i]] * ms, (long long)p->op_count[order[i]],
                       p->op_bytes[order[i]] / 1e9);
    rci_deployer_note(d, "%s", line);
    return rci_deployer_log(d, step, keys, vals, n, err);
}
