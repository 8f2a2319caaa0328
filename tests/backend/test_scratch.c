/* test_scratch.c - a backend's scratch (the memory its kernels keep between nodes, counted
 * in its used bytes) is what its own rule says: after running a training step's plan of a
 * tiny model (tiny-gpt2: loss and every gradient), the backend's used bytes grew by exactly
 * rci_backend_scratch_peak over the plan's nodes less what it held before, and a second run
 * takes nothing more. In f32, bf16 and f16, on the CPU (also with its 16-bit nodes cut in
 * small pieces: rows, batches, inner slices) and on OpenCL; without an OpenCL device that
 * part prints why and passes, unless REDCO_REQUIRE_OPENCL=1.
 *
 * The CPU's scratch is per thread: each CPU case runs on a thread of its own, from none
 * held. OpenCL's is the device's: its cases grow the batch so that every one needs more
 * than the one before. Either way a 16-bit step is checked to take some scratch, so the
 * comparison is never of nothing with nothing. */
#include "check.h"
#include "backend.h"
#include "redco/device.h"
#include "redco/pipeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the CPU's 16-bit piece size (src/backend/cpu/cpu.h; <= 0: the default) */
void rci_cpu_half_chunk(int64_t floats);

/* the nodes outs[0..n) need, in the order a plan runs them (the graph's); malloc'ed */
static const rc_tensor **run_order(const rc_graph *g, rc_tensor *const *outs, int n, int *count)
{
    int size = rc_graph_size(g);
    char *needed = calloc((size_t)size + 1, 1);
    const rc_tensor **order = malloc(((size_t)size + 1) * sizeof *order);
    *count = 0;
    for (int i = 0; needed && order && i < n; i++)
        needed[outs[i]->id] = 1;
    for (int i = size - 1; needed && order && i >= 0; i--) {
        const rc_tensor *t = rc_graph_node(g, i);
        for (int k = 0; needed[i] && k < t->nsrc; k++)
            if (t->src[k])
                needed[t->src[k]->id] = 1;
        if (needed[i] && t->view_src)
            needed[t->view_src->id] = 1;
    }
    for (int i = 0; needed && order && i < size; i++)
        if (needed[i])
            order[(*count)++] = rc_graph_node(g, i);
    free(needed);
    return order;
}

/* one step's plan of tiny-gpt2 in dtype dt on be, batch B x T: the scratch it adds to
 * *held (the backend's before), checked against the rule; returns 0 when it ran */
static int step_scratch(rc_backend *be, rc_dtype dt, int B, int T, size_t *held, const char *what)
{
    rc_error err = {0};
    rc_model *m = rc_model_create("tiny-gpt2", 5, &err);
    CHECKF(m && rc_model_to_dtype(m, dt, &err) == 0 && rc_params_to(m->params, be, &err) == 0, "%s: model: %s",
           what, err.msg);
    if (!m)
        return -1;
    int np = rc_params_count(m->params), V = m->config.vocab_size;
    int32_t *ids = malloc((size_t)(B * T) * sizeof *ids), *tg = malloc((size_t)(B * T) * sizeof *tg);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)((i * 37 + 11) % V);
        tg[i] = (int32_t)((i * 53 + 5) % V);
    }
    rc_graph *g = rc_graph_new();
    int64_t shape[2] = {B, T};
    rc_tensor *x = rc_const(g, "ids", RC_I32, 2, shape, ids);
    rc_tensor *y = rc_const(g, "targets", RC_I32, 2, shape, tg);
    rc_tensor *loss = rc_cross_entropy(g, rc_model_logits(g, m, x, NULL, NULL), y, -100);
    rc_tensor **wrt = calloc((size_t)np, sizeof *wrt), **outs = calloc((size_t)np + 1, sizeof *outs);
    for (int i = 0; i < np; i++)
        wrt[i] = rc_params_get(g, m->params, rc_params_name(m->params, i));
    int rc = !loss || rc_graph_error(g) || rc_backward(g, loss, wrt, np, outs + 1) ? -1 : 0;
    CHECKF(rc == 0, "%s: graph: %s", what, rc_graph_error(g) ? rc_graph_error(g) : "no loss");
    outs[0] = loss;
    int nout = 1;
    for (int i = 0; !rc && i < np; i++)
        if (outs[i + 1])
            outs[nout++] = outs[i + 1];
    rc_plan *p = rc ? NULL : rc_plan_new_on(be, g, outs, nout, &err);
    CHECKF(rc || p, "%s: plan: %s", what, err.msg);
    if (p) {
        int n = 0;
        const rc_tensor **order = run_order(g, outs, nout, &n);
        size_t want = rci_backend_scratch_peak(be, *held, order, n);
        size_t used0 = 0, used1 = 0, used2 = 0;
        rc_backend_memory(be, NULL, &used0, NULL);
        rc = rc_plan_run(p, &err) || rc_backend_wait(be, &err);
        rc_backend_memory(be, NULL, &used1, NULL);
        rc = rc || rc_plan_run(p, &err) || rc_backend_wait(be, &err);
        rc_backend_memory(be, NULL, &used2, NULL);
        CHECKF(rc == 0, "%s: run: %s", what, err.msg);
        size_t got = *held + (used1 - used0);
        CHECKF(got == want, "%s: the backend holds %zu bytes of scratch after the step, its rule says %zu "
               "(%zu before)", what, got, want, *held);
        CHECKF(used2 == used1, "%s: a second run took %zu bytes more", what, used2 - used1);
        printf("  %-26s %s: scratch %10zu bytes (rule %10zu, %zu before)\n", what, rc_backend_name(be), got,
               want, *held);
        *held = got;
        free(order);
    }
    rc_plan_free(p);
    free(wrt);
    free(outs);
    rc_graph_free(g);
    free(ids);
    free(tg);
    rc_model_free(m);
    return rc;
}

/* a CPU case on a thread of its own: its scratch starts empty */
typedef struct {
    rc_dtype dt;
    int B, T;
    int64_t chunk;                /* the 16-bit piece size (0: the default) */
    const char *what;
    size_t held;
} cpu_case;

static void *cpu_case_run(void *arg)
{
    cpu_case *c = arg;
    rci_cpu_half_chunk(c->chunk);
    step_scratch(rc_device_open("cpu", 0, NULL), c->dt, c->B, c->T, &c->held, c->what);
    return NULL;
}

static void test_cpu(void)
{
    cpu_case cases[] = {
        {RC_F32, 2, 8, 0, "f32 2x8", 0},
        {RC_BF16, 2, 8, 0, "bf16 2x8", 0},
        {RC_F16, 4, 16, 0, "f16 4x16", 0},
        {RC_BF16, 8, 32, 0, "bf16 8x32", 0},
        /* every large-node path in pieces: rows, batches, inner slices */
        {RC_F16, 4, 16, 96, "f16 4x16, pieces of 96", 0},
        {RC_BF16, 4, 16, 96, "bf16 4x16, pieces of 96", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cpu_case *c = &cases[i];
        pthread_t th;
        CHECKF(pthread_create(&th, NULL, cpu_case_run, c) == 0, "%s: no thread", c->what);
        pthread_join(th, NULL);
        if (c->dt == RC_F32)
            CHECKF(c->held == 0, "%s: the CPU keeps %zu bytes of scratch after an f32 step (none)", c->what, c->held);
        else
            CHECKF(c->held > 0, "%s: no scratch taken", c->what);
    }
    rci_cpu_half_chunk(0);
}

/* f32, then 16-bit steps of growing batches (each needing more scratch than the last) */
static void test_opencl(rc_backend *be)
{
    size_t held = 0, before;
    step_scratch(be, RC_F32, 2, 8, &held, "f32 2x8");
    const struct {
        rc_dtype dt;
        int B, T;
        const char *what;
    } steps[] = {{RC_BF16, 2, 8, "bf16 2x8"}, {RC_F16, 4, 16, "f16 4x16"}, {RC_BF16, 8, 32, "bf16 8x32"}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        before = held;
        step_scratch(be, steps[i].dt, steps[i].B, steps[i].T, &held, steps[i].what);
        CHECKF(held > before, "%s: no scratch grown (%zu)", steps[i].what, held);
    }
}

int main(void)
{
    rc_set_threads(2);
    test_cpu();
    rc_backend *ocl = check_opencl("test_scratch's OpenCL part");
    if (ocl)
        test_opencl(ocl);
    return check_summary("test_scratch");
}
