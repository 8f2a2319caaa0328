/* mpi_shard.c - the partitioner: with the model split over every process (mp = world
 * size), each rank's local graph gives the same loss and, for its shards, the same
 * parameter gradients as the whole model on one process, for every family. */
#include "check.h"
#include "nn.h"
#include "redco/dist.h"
#include "redco/shard.h"

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

static rc_tensor *find_input(rc_graph *g, const char *name)
{
    for (int i = 0; i < rc_graph_size(g); i++) {
        rc_tensor *t = rc_graph_node(g, i);
        if (t->op == RC_OP_LEAF && (t->flags & RC_FLAG_INPUT) && !strcmp(t->name, name))
            return t;
    }
    return NULL;
}

static void check_family(const char *preset, rc_mesh *m)
{
    rc_model_config c;
    nn_weights w = {0};
    rc_error err = {0};
    int mp = m->size, rank = m->rank;
    CHECK(rc_config_preset(preset, &c, &err) == 0 && nn_model_weights(&c, &w, &err) == 0 &&
          nn_weights_alloc(&w) == 0);
    nn_model_init(&c, &w, 5);
    rc_rng r = rc_rng_new(9);
    for (int64_t i = 0; i < w.numel; i++) /* away from the initialisation: every term counts */
        w.data[i] += (float)(0.05 * rc_rng_normal(&r));
    int32_t ids[B * T], tg[B * T], enc[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
        tg[i] = i == 3 ? -100 : (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
        enc[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)c.vocab_size);
    }
    /* the whole model on this process */
    rc_graph *g = rc_graph_new();
    rc_tensor **p = calloc((size_t)w.n, sizeof *p), **grads = calloc((size_t)w.n + 1, sizeof *grads);
    nn_model_leaves(g, &w, p);
    nn_inputs in = {.ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T})};
    if (c.type == RC_MODEL_T5)
        in.enc_ids = rc_input(g, "enc_ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *targets = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *loss = rc_cross_entropy(g, nn_model_logits(g, &c, &w, p, &in), targets, -100);
    rc_tensor_bind(in.ids, ids);
    rc_tensor_bind(targets, tg);
    if (in.enc_ids)
        rc_tensor_bind(in.enc_ids, enc);
    /* its shards, before the whole model's backward is added to the graph */
    rc_shard_spec *specs = calloc((size_t)w.n, sizeof *specs);
    rc_shard_graph sg;
    int prc = rc_shard_partition(g, loss, p, w.n, mp, rank, 1, specs, &sg, &err);
    CHECKF(prc == 0, "%s: partition: %s", preset, err.msg);
    rc_backward(g, loss, p, w.n, grads + 1);
    grads[0] = loss;
    rc_plan *pg = rc_plan_new(g, grads, w.n + 1, &err);
    CHECKF(pg && rc_plan_run(pg, &err) == 0, "%s: whole model: %s", preset, err.msg);
    if (prc) {
        rc_plan_free(pg);
        rc_graph_free(g);
        free(p), free(grads), free(specs);
        nn_weights_free(&w);
        return;
    }
    /* the local graph: shards bound, inputs bound by name, collectives over the world */
    float **shards = calloc((size_t)w.n, sizeof *shards);
    for (int i = 0; i < w.n; i++) {
        shards[i] = malloc(rc_tensor_nbytes(sg.params[i]));
        rc_shard_take(&specs[i], p[i], mp, rank, nn_weights_get(&w, i), shards[i]);
        rc_tensor_bind(sg.params[i], shards[i]);
    }
    rc_tensor_bind(find_input(sg.g, "ids"), ids);
    rc_tensor_bind(find_input(sg.g, "targets"), tg);
    if (in.enc_ids)
        rc_tensor_bind(find_input(sg.g, "enc_ids"), enc);
    rc_tensor **lgrads = calloc((size_t)w.n + 1, sizeof *lgrads);
    rc_backward(sg.g, sg.out, sg.params, w.n, lgrads + 1);
    lgrads[0] = sg.out;
    CHECKF(!rc_graph_error(sg.g), "%s: %s", preset, rc_graph_error(sg.g));
    rc_plan *pl = rc_graph_error(sg.g) ? NULL : rc_plan_new(sg.g, lgrads, w.n + 1, &err);
    if (pl)
        rc_plan_set_collective(pl, rc_comm_collective, m->world);
    CHECKF(pl && rc_plan_run(pl, &err) == 0, "%s: shards: %s", preset, err.msg);
    if (pl) {
        float want = *(float *)rc_tensor_data(loss), got = *(float *)rc_tensor_data(sg.out);
        CHECKF(fabsf(got - want) <= 1e-5f * fabsf(want), "%s: loss %.7f on %d shards, %.7f whole", preset, got, mp,
               want);
        double worst = 0, scale = 0;
        for (int i = 0; i < w.n; i++)
            scale = fmax(scale, rel_err(rc_tensor_data(grads[1 + i]), rc_tensor_data(grads[1 + i]), 0, 0) +
                                    (double)fabsf(((float *)rc_tensor_data(grads[1 + i]))[0]));
        const char *worst_name = "";
        for (int i = 0; i < w.n; i++) {
            int64_t n = rc_tensor_numel(sg.params[i]);
            float *want_g = malloc((size_t)n * sizeof *want_g);
            rc_shard_take(&specs[i], p[i], mp, rank, rc_tensor_data(grads[1 + i]), want_g);
            double e = rel_err(rc_tensor_data(lgrads[1 + i]), want_g, n, 1e-4);
            if (e > worst)
                worst = e, worst_name = w.p[i].name;
            free(want_g);
        }
        (void)scale;
        CHECKF(worst < 1e-4, "%s: gradient of %s differs by %.3g", preset, worst_name, worst);
        if (rank == 0)
            printf("%-10s mp %d: loss %.6f, worst gradient rel err %.2e (%s)\n", preset, mp, got, worst, worst_name);
    }
    rc_plan_free(pl);
    rc_plan_free(pg);
    for (int i = 0; i < w.n; i++)
        free(shards[i]);
    free(shards), free(lgrads);
    rc_shard_graph_free(&sg);
    rc_graph_free(g);
    free(p), free(grads), free(specs);
    nn_weights_free(&w);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh m;
    CHECK(rc_mesh_init(&m, 1, &err) == 0);
    const char *presets[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int i = 0; i < 5; i++)
        check_family(presets[i], &m);
    char name[64];
    snprintf(name, sizeof name, "mpi_shard rank %d/%d", m.rank, m.size);
    int status = check_summary(name);
    rc_mesh_free(&m);
    rc_dist_finalize();
    return status;
}
