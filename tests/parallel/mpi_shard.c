/* mpi_shard.c - the partitioner: with the model split over every process (mp = world
 * size), each rank's local graph gives the same loss and, for its shards, the same
 * parameter gradients as the whole model on one process, for every family (and with the
 * fused attention op for three of them). */
#include "check.h"
#include "redco/device.h"
#include "nn.h"
#include "redco/dist.h"
#include "redco/shard.h"
#include "user_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8 };

static double rel_err(const float *a, const float *b, int64_t n, double floor)
{
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

/* the collective callback, counting what the runtime actually runs */
static int64_t collectives_run;

static int counting_collective(void *ctx, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op,
                               rc_error *err)
{
    collectives_run++;
    return rc_comm_collective(ctx, buf, offset, n, t, op, err);
}

/* an input's values by name */
typedef struct {
    const char *name;
    const void *data;
} feed;

/* every input leaf of g the plan needs gets the values of the feed of its name */
static int set_inputs(rc_plan *pl, rc_graph *g, const feed *in, int nin, rc_error *err)
{
    for (int i = 0; i < rc_graph_size(g); i++) {
        rc_tensor *t = rc_graph_node(g, i);
        for (int k = 0; t->op == RC_OP_LEAF && (t->flags & RC_FLAG_INPUT) && k < nin; k++)
            if (!strcmp(t->name, in[k].name) && rc_plan_set_input(pl, t, in[k].data, err))
                return -1;
    }
    return 0;
}

/* t's values after a run, copied out (malloc'ed) */
static float *values(rc_plan *pl, const rc_tensor *t)
{
    float *x = malloc(rc_tensor_nbytes(t) ? rc_tensor_nbytes(t) : 1);
    if (x && rc_plan_read(pl, t, x, NULL)) {
        free(x);
        return NULL;
    }
    return x;
}

/* The whole model's loss and gradients on this process, against this rank's share with
 * mp = world size: equal losses, each shard's gradient equal to its cut of the whole's,
 * and the collectives the runtime runs equal to the plan's counts. Global inputs must be
 * bound; the local graph's inputs take their data by name. */
static void compare_sharded(const char *preset, rc_graph *g, rc_tensor *loss, rc_tensor **p, rci_nn_weights *wp,
                            rc_mesh *m, const rc_shard_override *ov, int n_ov, const feed *in, int nin)
{
    rci_nn_weights w = *wp;
    rc_error err = {0};
    int mp = m->size, rank = m->rank;
    rc_tensor **grads = calloc((size_t)w.n + 1, sizeof *grads);
    /* its shards, before the whole model's backward is added to the graph */
    rc_shard_spec *specs = calloc((size_t)w.n, sizeof *specs);
    rc_shard_comm comm = {0};
    CHECKF(rc_shard_apply(specs, p, w.n, ov, n_ov, mp, &err) == 0, "%s: %s", preset, err.msg);
    rc_shard_plan(g, loss, p, w.n, mp, 1, specs, &comm, &err);
    rc_shard_graph sg;
    int prc = rc_shard_partition(g, loss, p, w.n, mp, rank, 1, specs, &sg, &err);
    CHECKF(prc == 0, "%s: partition: %s", preset, err.msg);
    rc_backward(g, loss, p, w.n, grads + 1);
    grads[0] = loss;
    rc_plan *pg = rc_plan_new(g, grads, w.n + 1, &err);
    CHECKF(pg && set_inputs(pg, g, in, nin, &err) == 0 && rc_plan_run(pg, &err) == 0, "%s: whole model: %s",
           preset, err.msg);
    if (prc) {
        rc_plan_free(pg);
        rc_graph_free(g);
        free(grads), free(specs);
        return;
    }
    /* the local graph: shards bound, inputs set by name, collectives over the world */
    rc_buffer **shards = calloc((size_t)w.n, sizeof *shards);
    for (int i = 0; i < w.n; i++) {
        float *whole = malloc((size_t)w.p[i].numel * sizeof *whole), *part = malloc(rc_tensor_nbytes(sg.params[i]));
        shards[i] = rc_buffer_new(rc_device_open("cpu", 0, NULL), rc_tensor_nbytes(sg.params[i]), &err);
        int ok = whole && part && shards[i] && rci_nn_weights_read(&w, i, whole, &err) == 0;
        if (ok)
            rc_shard_take(&specs[i], p[i], mp, rank, whole, part);
        ok = ok && rc_buffer_upload(shards[i], 0, part, rc_tensor_nbytes(sg.params[i]), &err) == 0 &&
             rc_graph_bind(sg.g, sg.params[i], shards[i], 0) == 0;
        CHECKF(ok, "%s: shard of %s: %s", preset, w.p[i].name, err.msg);
        free(whole);
        free(part);
    }
    /* the forward alone: the collectives it runs */
    rc_plan *pf = rc_plan_new(sg.g, &sg.out, 1, &err);
    collectives_run = 0;
    if (pf)
        rc_plan_set_collective(pf, counting_collective, m->world);
    CHECKF(pf && set_inputs(pf, sg.g, in, nin, &err) == 0 && rc_plan_run(pf, &err) == 0,
           "%s: forward on shards: %s", preset, err.msg);
    int64_t run_fwd = collectives_run;
    rc_plan_free(pf);
    rc_tensor **lgrads = calloc((size_t)w.n + 1, sizeof *lgrads);
    rc_backward(sg.g, sg.out, sg.params, w.n, lgrads + 1);
    lgrads[0] = sg.out;
    CHECKF(!rc_graph_error(sg.g), "%s: %s", preset, rc_graph_error(sg.g));
    rc_plan *pl = rc_graph_error(sg.g) ? NULL : rc_plan_new(sg.g, lgrads, w.n + 1, &err);
    if (pl)
        rc_plan_set_collective(pl, counting_collective, m->world);
    collectives_run = 0;
    CHECKF(pl && set_inputs(pl, sg.g, in, nin, &err) == 0 && rc_plan_run(pl, &err) == 0, "%s: shards: %s",
           preset, err.msg);
    /* the plan's counts are what the runtime runs: forward, then backward */
    CHECKF(run_fwd == comm.allreduce_fwd + comm.allgather_fwd && collectives_run - run_fwd == comm.allreduce_bwd,
           "%s: plan %lld + %lld collectives, runtime %lld + %lld", preset, (long long)comm.allreduce_fwd,
           (long long)comm.allreduce_bwd, (long long)run_fwd, (long long)(collectives_run - run_fwd));
    float want = 0, got = 0;
    if (pl && pg && rc_plan_read(pg, loss, &want, &err) == 0 && rc_plan_read(pl, sg.out, &got, &err) == 0) {
        CHECKF(fabsf(got - want) <= 1e-5f * fabsf(want), "%s: loss %.7f on %d shards, %.7f whole", preset, got, mp,
               want);
        double worst = 0;
        const char *worst_name = "";
        for (int i = 0; i < w.n; i++) {
            int64_t n = rc_tensor_numel(sg.params[i]);
            float *want_g = malloc((size_t)n * sizeof *want_g);
            float *whole_g = values(pg, grads[1 + i]), *got_g = values(pl, lgrads[1 + i]);
            double e = INFINITY;
            if (want_g && whole_g && got_g) {
                rc_shard_take(&specs[i], p[i], mp, rank, whole_g, want_g);
                e = rel_err(got_g, want_g, n, 1e-4);
            }
            if (e > worst)
                worst = e, worst_name = w.p[i].name;
            free(want_g);
            free(whole_g);
            free(got_g);
        }
        CHECKF(worst < 1e-4, "%s: gradient of %s differs by %.3g", preset, worst_name, worst);
        if (rank == 0)
            printf("%-10s mp %d: loss %.6f, worst gradient rel err %.2e (%s), all-reduces %lld + %lld, gathers %lld\n",
                   preset, mp, got, worst, worst_name, (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd,
                   (long long)comm.allgather_fwd);
    }
    rc_plan_free(pl);
    rc_plan_free(pg);
    for (int i = 0; i < w.n; i++)
        rc_buffer_free(shards[i]);
    free(shards), free(lgrads);
    rc_shard_graph_free(&sg);
    rc_graph_free(g);
    free(grads), free(specs);
}


/* kv_heads > 0: the preset with that many key/value heads */
static void check_family_kv(const char *preset, rc_mesh *m, int overrides, int kv_heads)
{
    rc_model_config c;
    rci_nn_weights w = {0};
    rc_error err = {0};
    CHECK(rc_config_preset(preset, &c, &err) == 0);
    if (kv_heads > 0)
        c.n_kv_head = kv_heads;
    CHECK(rci_nn_model_weights(&c, &w, &err) == 0 &&
          rci_nn_weights_alloc(&w, rc_device_open("cpu", 0, NULL), &err) == 0 && rci_nn_model_init(&c, &w, 5, &err) == 0);
    rc_rng r = rc_rng_new(9);
    float *all = malloc((size_t)w.numel * sizeof *all);
    CHECK(all && rc_buffer_download(w.buf, 0, all, (size_t)w.numel * sizeof *all, &err) == 0);
    for (int64_t i = 0; all && i < w.numel; i++) /* away from the initialisation: every term counts */
        all[i] += (float)(0.05 * rc_rng_normal(&r));
    CHECK(all && rc_buffer_upload(w.buf, 0, all, (size_t)w.numel * sizeof *all, &err) == 0);
    free(all);
    int32_t ids[B * T], tg[B * T], enc[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
        tg[i] = i == 3 ? -100 : (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
        enc[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
    }
    /* the whole model on this process */
    rc_graph *g = rc_graph_new();
    rc_tensor **p = calloc((size_t)w.n, sizeof *p);
    rci_nn_model_leaves(g, &w, p);
    rci_nn_inputs in = {.ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T})};
    if (c.type == RC_MODEL_T5)
        in.enc_ids = rc_input(g, "enc_ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *targets = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *loss = rc_cross_entropy(g, rci_nn_model_logits(g, &c, &w, p, &in), targets, -100);
    const feed inputs[3] = {{"ids", ids}, {"targets", tg}, {"enc_ids", enc}};
    /* the user's overrides: an MLP input layer kept whole, an output projection split on
     * its outputs instead of its inputs, the tied embedding kept whole */
    static const rc_shard_override ov[] = {{"transformer.h.0.mlp.c_fc.weight", -1, 0},
                                           {"transformer.h.1.mlp.c_proj.weight", 1, 0},
                                           {"transformer.wte.weight", -1, 0}};
    int n_ov = overrides && c.type == RC_MODEL_GPT2 ? 3 : 0;
    compare_sharded(n_ov ? "gpt2+override" : kv_heads == 1 ? "llama-mqa" : preset, g, loss, p, &w, m, ov, n_ov,
                    inputs, 3);
    free(p);
    rci_nn_weights_free(&w);
}

static void check_family(const char *preset, rc_mesh *m, int overrides)
{
    check_family_kv(preset, m, overrides, 0);
}

/* a user's parameter table: random values, norms at 1 */
static void user_weights(rci_nn_weights *w, const char *const *names, const int64_t (*shapes)[3], int n)
{
    for (int i = 0; i < n; i++)
        rci_nn_weights_add(w, names[i], shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1, shapes[i]);
    CHECK(rci_nn_weights_alloc(w, rc_device_open("cpu", 0, NULL), NULL) == 0);
    rc_rng r = rc_rng_new(21);
    for (int i = 0; i < w->n; i++) {
        float *x = malloc((size_t)w->p[i].numel * sizeof *x);
        for (int64_t j = 0; x && j < w->p[i].numel; j++)
            x[j] = strstr(w->p[i].name, "norm") ? 1.0f + 0.1f * (float)rc_rng_normal(&r) : 0.2f * (float)rc_rng_normal(&r);
        CHECK(x && rci_nn_weights_write(w, i, x, NULL) == 0);
        free(x);
    }
}

/* a user-defined MLP written with graph ops: 3 linear layers, a 4-class cross-entropy */
static void check_mlp(rc_mesh *m)
{
    rci_nn_weights w = {0};
    user_weights(&w, um_mlp_names, um_mlp_shapes, UM_MLP_N);
    rc_graph *g = rc_graph_new();
    rc_tensor *p[UM_MLP_N];
    rci_nn_model_leaves(g, &w, p);
    static float x[8 * UM_MLP_IN];
    static int32_t y[8];
    rc_rng r = rc_rng_new(3);
    for (int i = 0; i < 8 * UM_MLP_IN; i++)
        x[i] = (float)rc_rng_normal(&r);
    for (int i = 0; i < 8; i++)
        y[i] = (int32_t)(rc_rng_next_u64(&r) % UM_MLP_CLASSES);
    rc_tensor *xi = rc_input(g, "x", RC_F32, 2, (int64_t[]){8, UM_MLP_IN}), *yi = rc_input(g, "y", RC_I32, 1, (int64_t[]){8});
    const feed inputs[2] = {{"x", x}, {"y", y}};
    compare_sharded("user MLP", g, um_mlp_loss(g, p, xi, yi), p, &w, m, NULL, 0, inputs, 2);
    rci_nn_weights_free(&w);
}

/* image to text (user_models.h): patch embedding, one decoder block, an untied head */
static void check_image_to_text(rc_mesh *m)
{
    rci_nn_weights w = {0};
    user_weights(&w, um_i2t_names, um_i2t_shapes, UM_I2T_N);
    rc_graph *g = rc_graph_new();
    rc_tensor *p[UM_I2T_N];
    rci_nn_model_leaves(g, &w, p);
    static float img[B * 3 * 8 * 8];
    static int32_t ids[B * UM_TT], tg[B * UM_TT];
    rc_rng r = rc_rng_new(4);
    for (int i = 0; i < B * 3 * 64; i++)
        img[i] = (float)rc_rng_normal(&r);
    for (int i = 0; i < B * UM_TT; i++) {
        ids[i] = (int32_t)(rc_rng_next_u64(&r) % UM_V);
        tg[i] = (int32_t)(rc_rng_next_u64(&r) % UM_V);
    }
    rc_tensor *im = rc_input(g, "image", RC_F32, 4, (int64_t[]){B, 3, 8, 8});
    rc_tensor *ti = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, UM_TT});
    rc_tensor *tt = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, UM_TT});
    const feed inputs[3] = {{"image", img}, {"ids", ids}, {"targets", tg}};
    rc_tensor *loss = um_i2t_loss(g, p, im, ti, tt);
    CHECKF(!rc_graph_error(g), "image to text: %s", rc_graph_error(g));
    compare_sharded("image2text", g, loss, p, &w, m, NULL, 0, inputs, 3);
    rci_nn_weights_free(&w);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh m;
    CHECK(rc_mesh_init(&m, 1, &err) == 0);
    const char *presets[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int i = 0; i < 5; i++)
        check_family(presets[i], &m, 0);
    check_family("tiny-gpt2", &m, 1);
    /* the fused attention op split by heads: GPT-2, Llama's grouped kv heads, T5's bias */
    rc_set_fused_attention(1);
    const char *fused[] = {"tiny-gpt2", "tiny-llama", "tiny-t5"};
    for (int i = 0; i < 3; i++)
        check_family(fused[i], &m, 0);
    check_family_kv("tiny-llama", &m, 0, 1); /* one kv head: whole on every shard */
    rc_set_fused_attention(0);
    check_mlp(&m);
    check_image_to_text(&m);
    char name[64];
    snprintf(name, sizeof name, "mpi_shard rank %d/%d", m.rank, m.size);
    int status = check_summary(name);
    rc_mesh_free(&m);
    rc_dist_finalize();
    return status;
}
