/* mpi_predict.c - the Predictor over 1, 2 and 4 processes (and mp = 2 where it divides).
 *
 * A toy predict function computes, for example i, the row (i + 0.5, i^2 - 1) through a
 * matmul with a parameter, over example counts that do not divide batch x replicas: rank 0
 * must receive every example exactly once, in input order, with its values; collate never
 * sees an index outside [0, n) (padding repeats n - 1); one graph is compiled per batch
 * shape and reused by the next run. A tiny-gpt2 predictor (last-position logits) gives the
 * same rows on P > 1 processes as one local process, also with the model split over every
 * process (mp = P; its vocabulary-split logits gathered whole, and a softmax over
 * the vocabulary inside the predict graph gathered where it needs them); with --dump PATH
 * rank 0 writes those rows so that runs without a launcher and under mpiexec -n 1, 2, 4
 * are compared with each other (CTest mpi_predict_launcher). Failures of collate on one rank, of the
 * output function on rank 0, and a predict output of the wrong shape stop every rank with
 * the same error, so none hangs. An f64 output arrives as float rows. */
#include "check.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t n;                    /* examples of the current run */
    int compiles;                 /* predict function calls (one per compiled graph) */
    int64_t fail_collate_at;      /* collate fails for a batch holding this example (-1: never) */
    int64_t fail_output_at;       /* output fails at this example (-1: never) */
    int bad_shape;                /* predict returns a tensor without the batch dimension */
    int as_f64;                   /* predict returns f64 (converted to float rows) */
    int64_t next;                 /* rank 0: the next example expected */
    int64_t seen, wrong;          /* rank 0: outputs received; out of order or wrong values */
    rc_model *model;              /* the model predictor */
    int softmax;                  /* the model predictor returns probabilities */
    float *rows;                  /* the model predictor's rows (rank 0), [n, row_len] */
    int64_t row_len;
} toy;

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    toy *t = user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, 3});
    if (!x)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for x");
    for (int i = 0; i < n; i++) {
        if (ex[i] < 0 || ex[i] >= t->n || ex[i] == t->fail_collate_at)
            return rc_error_set(err, RC_ERR_ARG, "example %lld is marked to fail", (long long)ex[i]);
        double v = (double)ex[i];
        x[3 * i] = (float)v;
        x[3 * i + 1] = (float)(v * v);
        x[3 * i + 2] = 1.0f;
    }
    return 0;
}

/* x [n, 3] @ W [3, 2], W = ((1, 0), (0, 1), (0.5, -1)): (i + 0.5, i^2 - 1) */
static rc_tensor *predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    toy *t = user;
    (void)rng, (void)err;
    t->compiles++;
    rc_tensor *y = rc_matmul(g, rc_batch_input(g, b, "x"), rc_params_get(g, p, "W"), 0, 0);
    if (t->as_f64)
        return rc_cast(g, y, RC_F64);
    return t->bad_shape ? rc_sum_all(g, y) : y;
}

static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    toy *t = user;
    if (example == t->fail_output_at)
        return -1;
    double v = (double)example;
    int ok = example == t->next && row_len == 2 && row[0] == (float)(v + 0.5) && row[1] == (float)(v * v - 1);
    if (!ok && t->wrong < 5)
        fprintf(stderr, "example %lld (expected %lld): row_len %lld values %g %g\n", (long long)example,
                (long long)t->next, (long long)row_len, row_len > 0 ? row[0] : NAN, row_len > 1 ? row[1] : NAN);
    t->wrong += !ok;
    t->next = example + 1;
    t->seen++;
    return 0;
}

static rc_params *toy_params(void)
{
    rc_params *p = rc_params_new();
    rc_params_add(p, "W", 2, (int64_t[]){3, 2});
    const float v[6] = {1, 0, 0, 1, 0.5f, -1};
    rc_params_write(p, 0, v, NULL);
    return p;
}

static void run_toy(rc_deployer *d, const char *what)
{
    const rc_mesh *m = rc_deployer_mesh(d);
    rc_error err = {0};
    rc_params *params = toy_params();
    toy t = {.fail_collate_at = -1, .fail_output_at = -1};
    rc_predictor *p = rc_predictor_new(d, collate, predict, output, &t, params, &err);
    CHECKF(p, "%s: %s", what, err.msg);
    const int64_t counts[] = {0, 1, 7, 23, 37};
    const int batches[] = {1, 3, 4};
    for (size_t bi = 0; p && bi < sizeof batches / sizeof batches[0]; bi++)
        for (size_t ni = 0; ni < sizeof counts / sizeof counts[0]; ni++) {
            t.n = counts[ni];
            t.next = t.seen = t.wrong = 0;
            t.compiles = 0;
            int rc = rc_predictor_run(p, t.n, batches[bi], &err);
            CHECKF(rc == 0, "%s: n %lld batch %d: %s", what, (long long)t.n, batches[bi], err.msg);
            if (m->rank == 0)
                CHECKF(t.seen == t.n && t.wrong == 0, "%s: n %lld batch %d: %lld of %lld outputs, %lld wrong", what,
                       (long long)t.n, batches[bi], (long long)t.seen, (long long)t.n, (long long)t.wrong);
            else
                CHECKF(t.seen == 0, "%s: rank %d received outputs", what, m->rank);
            CHECKF(t.compiles <= 2, "%s: n %lld batch %d: %d graphs compiled (full and tail at most)", what,
                   (long long)t.n, batches[bi], t.compiles);
            /* the same run again: both shapes are cached */
            t.next = t.seen = t.wrong = 0;
            t.compiles = 0;
            rc = rc_predictor_run(p, t.n, batches[bi], &err);
            CHECKF(rc == 0 && t.compiles == 0, "%s: n %lld batch %d again: rc %d, %d new graphs", what,
                   (long long)t.n, batches[bi], rc, t.compiles);
            if (m->rank == 0)
                CHECK(t.seen == t.n && t.wrong == 0);
        }
    /* failures agree on every rank: collate (on whichever rank holds example 9), the output
     * function on rank 0, a predict output without the batch dimension */
    if (p) {
        t.n = 23;
        t.next = 0;
        t.fail_collate_at = 9;
        err = (rc_error){0};
        /* the collate function's own reason, after the examples of the batch */
        CHECKF(rc_predictor_run(p, t.n, 2, &err) == -1 && strstr(err.msg, "collate failed") &&
               strstr(err.msg, "starting at example 8: example 9 is marked to fail") && err.code == RC_ERR_ARG,
               "%s: collate failure: %s", what, err.msg);
        t.fail_collate_at = -1;
        t.fail_output_at = 13;
        t.next = 0;
        err = (rc_error){0};
        /* an output function that fails without a reason: said so */
        CHECKF(rc_predictor_run(p, t.n, 2, &err) == -1 &&
               strstr(err.msg, "output function failed for example 13 (it gave no reason)"),
               "%s: output failure: %s", what, err.msg);
        t.fail_output_at = -1;
        err = (rc_error){0};
        CHECKF(rc_predictor_run(p, t.n, 0, &err) == -1 && strstr(err.msg, "batch size"), "%s: batch 0: %s", what, err.msg);
    }
    rc_predictor_free(p);
    /* an f64 output reaches the output function as float rows */
    t = (toy){.fail_collate_at = -1, .fail_output_at = -1, .as_f64 = 1, .n = 13};
    p = rc_predictor_new(d, collate, predict, output, &t, params, &err);
    CHECKF(p && rc_predictor_run(p, t.n, 3, &err) == 0, "%s: f64 output: %s", what, err.msg);
    if (m->rank == 0)
        CHECKF(t.seen == t.n && t.wrong == 0, "%s: f64 output: %lld of %lld, %lld wrong", what, (long long)t.seen,
               (long long)t.n, (long long)t.wrong);
    rc_predictor_free(p);
    t = (toy){.fail_collate_at = -1, .fail_output_at = -1, .bad_shape = 1, .n = 10};
    p = rc_predictor_new(d, collate, predict, output, &t, params, &err);
    err = (rc_error){0};
    CHECKF(p && rc_predictor_run(p, t.n, 2, &err) == -1 && strstr(err.msg, "leading dimension"),
           "%s: bad output shape: %s", what, err.msg);
    rc_predictor_free(p);
    rc_params_free(params);
}

/* ---- a model predictor: the last position's logits of tiny-gpt2 ---------------------------- */

enum { T = 6 };

static int lm_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    (void)user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    if (!ids)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < T; k++)
            ids[i * T + k] = (int32_t)((ex[i] * 31 + k * 7) % 256);
    return 0;
}

static rc_tensor *lm_predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    toy *t = user;
    (void)p, (void)rng, (void)err;
    rc_tensor *l = rc_model_logits(g, t->model, rc_batch_input(g, b, "ids"), NULL, NULL);
    l = l ? rc_slice(g, l, 1, T - 1, T) : NULL; /* [n, 1, vocab] */
    return t->softmax && l ? rc_softmax(g, l) : l;
}

static int lm_output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    toy *t = user;
    if (example != t->next || example >= t->n)
        return -1;
    t->row_len = row_len;
    memcpy(t->rows + example * row_len, row, (size_t)row_len * sizeof *row);
    t->next++;
    return 0;
}

/* the rows of n examples on deployer d (rank 0; NULL elsewhere or on failure) */
static float *lm_rows(rc_deployer *d, rc_model *model, int64_t n, int batch, int softmax)
{
    rc_error err = {0};
    toy t = {.n = n, .model = model, .softmax = softmax};
    t.rows = calloc((size_t)n * 256, sizeof *t.rows);
    rc_predictor *p = rc_predictor_new(d, lm_collate, lm_predict, lm_output, &t, model->params, &err);
    int rc = p ? rc_predictor_run(p, n, batch, &err) : -1;
    CHECKF(rc == 0, "model predictor: %s", err.msg);
    rc_predictor_free(p);
    if (rc || !rc_deployer_is_main(d) || t.next != n || t.row_len != 256) {
        CHECK(!rc_deployer_is_main(d) || (t.next == n && t.row_len == 256));
        free(t.rows);
        return NULL;
    }
    return t.rows;
}

/* A predictor on model shards made before the weights change predicts with the new ones:
 * its shards are taken again when the weights were written (here rc_params_write; a fit
 * does the same). Before, it kept the shards of its first run. */
static void check_fresh_shards(rc_deployer *d, rc_model *model)
{
    enum { N = 5 };
    rc_error err = {0};
    toy t = {.n = N, .model = model};
    float *before = calloc((size_t)N * 256, sizeof *before);
    t.rows = calloc((size_t)N * 256, sizeof *t.rows);
    int gain = rc_params_find(model->params, "transformer.ln_f.weight");
    int64_t c = gain >= 0 ? rc_params_tensor_numel(model->params, gain) : 0;
    float *g = c ? malloc((size_t)c * sizeof *g) : NULL;
    rc_predictor *p = before && t.rows && g ? rc_predictor_new(d, lm_collate, lm_predict, lm_output, &t, model->params, &err) : NULL;
    int rc = p ? rc_predictor_run(p, N, 2, &err) : -1;
    memcpy(before, t.rows, (size_t)N * 256 * sizeof *before);
    rc = rc || rc_params_read(model->params, gain, g, &err);
    for (int64_t i = 0; !rc && i < c; i++)
        g[i] *= 2.0f;
    t.next = 0;
    rc = rc || rc_params_write(model->params, gain, g, &err) || rc_predictor_run(p, N, 2, &err);
    CHECKF(rc == 0, "predictor after a weight write: %s", err.msg);
    float *fresh = lm_rows(d, model, N, 2, 0);
    if (!rc && rc_deployer_is_main(d)) {
        double same = 0, moved = 0;
        for (int64_t i = 0; fresh && i < N * 256; i++) {
            same = fmax(same, fabs((double)t.rows[i] - fresh[i]));
            moved = fmax(moved, fabs((double)before[i] - fresh[i]));
        }
        CHECKF(fresh && same < 1e-6 && moved > 1e-3, "a predictor kept across a weight write differs from a new "
               "one by %.3g (the write moved the logits by %.3g)", same, moved);
        printf("predictor across a weight write on %d model shards: %.2e from a new predictor (the write moved "
               "the logits by %.2f)\n", rc_deployer_mesh(d)->mp, same, moved);
    }
    for (int64_t i = 0; !rc && i < c; i++) /* the model as it was */
        g[i] *= 0.5f;
    CHECK(rc || rc_params_write(model->params, gain, g, &err) == 0);
    rc_predictor_free(p);
    free(fresh), free(g), free(before), free(t.rows);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    /* MPI started here outlives the deployers made one after another below (a deployer
     * that starts MPI itself finalizes it when freed) */
    if (rc_dist_init(&argc, &argv, &err)) {
        fprintf(stderr, "mpi: %s\n", err.msg);
        return 1;
    }
    rc_deployer_options o = {.seed = 5, .mp = 1};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    if (!d) {
        fprintf(stderr, "deployer: %s\n", err.msg);
        return 1;
    }
    const rc_mesh *m = rc_deployer_mesh(d);
    int rank = m->rank, P = m->size;
    const char *dump = check_dump_path(argc, argv);
    if (dump && rank == 0)
        remove(dump); /* a failed run leaves no dump behind */
    check_weights dumped = {0};
    run_toy(d, "dp");
    /* the model predictor on this mesh equals one local process */
    rc_model *model = rc_model_create("tiny-gpt2", 4, &err);
    CHECKF(model, "%s", err.msg);
    for (int softmax = 0; model && softmax < 2; softmax++) {
        float *dist = lm_rows(d, model, 11, 2, softmax);
        rc_deployer_options so = {.seed = 5, .mp = P};
        rc_deployer *sd = rc_deployer_new(NULL, NULL, &so, &err);
        float *split = sd ? lm_rows(sd, model, 11, 3, softmax) : NULL;
        rc_deployer_options lo = {.seed = 5, .mp = 1, .local = 1};
        rc_deployer *local = rank == 0 && P > 1 ? rc_deployer_new(NULL, NULL, &lo, &err) : NULL;
        float *ref = local && P > 1 ? lm_rows(local, model, 11, 5, softmax) : NULL;
        const char *what = softmax ? "probabilities" : "logits";
        if (rank == 0) {
            CHECK(dist && split);
            if (dist)
                check_weights_add(&dumped, what, " over replicas", dist, 11 * 256, 1e-5);
            if (split)
                check_weights_add(&dumped, what, " over model shards", split, 11 * 256, 1e-5);
        }
        if (rank == 0 && P > 1) { /* on one process, these would be the same run */
            double e = 0, es = 0;
            for (int64_t i = 0; dist && ref && split && i < 11 * 256; i++) {
                e = fmax(e, fabs((double)dist[i] - ref[i]));
                es = fmax(es, fabs((double)split[i] - ref[i]));
            }
            CHECKF(dist && ref && e < 1e-5, "model rows on %d processes differ from one process by %.3g", P, e);
            CHECKF(split && ref && es < 1e-5, "%s on %d model shards differ from one process by %.3g",
                   softmax ? "probabilities" : "logits", P, es);
            printf("tiny-gpt2 %s: %d replicas differ by %.2e, %d model shards by %.2e from one process\n",
                   softmax ? "probabilities" : "logits", P, e, P, es);
        }
        free(dist);
        free(split);
        free(ref);
        rc_deployer_free(sd);
        rc_deployer_free(local);
    }
    if (model && P > 1) {
        rc_deployer_options so = {.seed = 5, .mp = P};
        rc_deployer *sd = rc_deployer_new(NULL, NULL, &so, &err);
        CHECKF(sd, "mp %d: %s", P, err.msg);
        if (sd)
            check_fresh_shards(sd, model);
        rc_deployer_free(sd);
    }
    rc_model_free(model);
    rc_deployer_free(d);
    if (dump && rank == 0)
        CHECK(check_weights_save(&dumped, dump) == 0);
    check_weights_free(&dumped);
    /* two model shards per replica: only each replica's first rank sends its rows */
    if (P % 2 == 0) {
        rc_deployer_options o2 = {.seed = 5, .mp = 2};
        rc_deployer *d2 = rc_deployer_new(NULL, NULL, &o2, &err);
        CHECKF(d2, "mp 2: %s", err.msg);
        if (d2)
            run_toy(d2, "dp x mp 2");
        rc_deployer_free(d2);
    }
    char name[64];
    snprintf(name, sizeof name, "mpi_predict rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_dist_finalize();
    return status;
}
