/* mpi_tp_train.c - training on dp x mp meshes equals one process: for T5 (a built-in
 * encoder-decoder through rc_model_logits) and for two models written with graph ops
 * alone (user_models.h: an MLP and an image-to-text model), 5 SGD steps with the same
 * global batch of 4 on every mesh (dp, mp) in {(1,1), (2,1), (1,2), (2,2), (1,4)} whose
 * size is this world's give the same last loss and the same weights as one local process,
 * to float rounding (relative 1e-5). The decoder families are covered the same way through
 * the command line (tests/ref/test_cli_train.py). */
#include "check.h"
#include "redco/pipeline.h"
#include "user_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_T5, KIND_MLP, KIND_I2T, N_EXAMPLES = 40, S = 8 };

typedef struct {
    int kind;
    rc_model *t5;                 /* KIND_T5: the model whose parameters train */
} job;

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return N_EXAMPLES;
}

/* a value in [0, n) fixed by (example, position, salt) */
static int32_t pick(int64_t ex, int k, int salt, int n)
{
    return (int32_t)((ex * 7919 + k * 104729 + salt * 15485863 + (ex * k) % 13) % n);
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user)
{
    job *j = user;
    if (j->kind == KIND_MLP) {
        float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, UM_MLP_IN});
        int32_t *y = rc_batch_add(out, "y", RC_I32, 1, (int64_t[]){n});
        if (!x || !y)
            return -1;
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < UM_MLP_IN; k++)
                x[i * UM_MLP_IN + k] = (float)(pick(ex[i], k, 1, 200) - 100) / 50.0f;
            y[i] = pick(ex[i], 0, 2, UM_MLP_CLASSES);
        }
        return 0;
    }
    if (j->kind == KIND_I2T) {
        float *im = rc_batch_add(out, "image", RC_F32, 4, (int64_t[]){n, 3, 8, 8});
        int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, UM_TT});
        int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, UM_TT});
        if (!im || !ids || !tg)
            return -1;
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < 3 * 64; k++)
                im[i * 3 * 64 + k] = (float)(pick(ex[i], k, 3, 100) - 50) / 25.0f;
            for (int k = 0; k < UM_TT; k++) {
                ids[i * UM_TT + k] = pick(ex[i], k, 4, UM_V);
                tg[i * UM_TT + k] = pick(ex[i], k, 5, UM_V);
            }
        }
        return 0;
    }
    int V = j->t5->config.vocab_size;
    int32_t *enc = rc_batch_add(out, "enc_ids", RC_I32, 2, (int64_t[]){n, S});
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, S});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, S});
    if (!enc || !ids || !tg)
        return -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < S; k++) {
            enc[i * S + k] = pick(ex[i], k, 6, V);
            tg[i * S + k] = enc[i * S + (S - 1 - k)]; /* reverse the source */
            ids[i * S + k] = k ? tg[i * S + k - 1] : 0;
        }
    return 0;
}

static rc_tensor *input(rc_graph *g, const rc_batch *b, const char *name)
{
    return rc_batch_input(g, b, name);
}

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user)
{
    job *j = user;
    (void)rng;
    if (j->kind == KIND_T5)
        return rc_cross_entropy(g, rc_model_logits(g, j->t5, input(g, b, "ids"), input(g, b, "enc_ids"), NULL),
                                input(g, b, "targets"), -100);
    int n = j->kind == KIND_MLP ? UM_MLP_N : UM_I2T_N;
    const char *const *names = j->kind == KIND_MLP ? um_mlp_names : um_i2t_names;
    rc_tensor *leaves[UM_I2T_N];
    for (int i = 0; i < n; i++)
        leaves[i] = rc_params_get(g, p, names[i]);
    if (j->kind == KIND_MLP)
        return um_mlp_loss(g, leaves, input(g, b, "x"), input(g, b, "y"));
    return um_i2t_loss(g, leaves, input(g, b, "image"), input(g, b, "ids"), input(g, b, "targets"));
}

/* the user's parameters: N(0, 0.2), norm weights 1 (user_models.h) */
static rc_params *user_params(int kind)
{
    if (kind == KIND_MLP)
        return um_params_new(UM_MLP_N, um_mlp_names, um_mlp_shapes, NULL, 0.2, 17);
    return um_params_new(UM_I2T_N, um_i2t_names, um_i2t_shapes, um_i2t_init, 0.2, 17);
}

/* 5 SGD steps on a dp x mp mesh (local: one process alone) with a global batch of 4;
 * returns the weights (malloc'ed) and the last step's loss */
static float *train(int kind, int mp, int local, int64_t *numel, double *last_loss)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 2, .mp = mp, .local = local};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    job j = {.kind = kind};
    rc_params *own = NULL;
    if (d && kind == KIND_T5)
        j.t5 = rc_model_create("tiny-t5", 2, &err);
    else if (d)
        own = user_params(kind);
    rc_params *params = j.t5 ? j.t5->params : own;
    int dp = d ? rc_deployer_mesh(d)->dp : 1;
    rc_trainer *t = params ? rc_trainer_new(d, collate, loss, &j, params, j.t5, &err) : NULL;
    rc_train_options o = {.steps = 5, .batch_size = 4 / dp, .optimizer = "sgd", .lr = 0.1};
    rc_train_result r = {0};
    float *w = NULL;
    if (t && rc_trainer_fit(t, &o, (rc_examples){count, &j}, NULL, &r, &err) == 0) {
        *numel = rc_params_numel(params);
        *last_loss = r.loss;
        w = malloc((size_t)*numel * sizeof *w);
        memcpy(w, rc_params_data(params), (size_t)*numel * sizeof *w);
    }
    CHECKF(w != NULL, "train kind %d mp %d: %s", kind, mp, err.msg);
    rc_trainer_free(t);
    rc_model_free(j.t5);
    rc_params_free(own);
    rc_deployer_free(d);
    return w;
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    int P = world.size, rank = world.rank;
    rc_mesh_free(&world);
    const char *names[3] = {"tiny-t5", "user MLP", "image-to-text"};
    static const int meshes[5][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 4}};
    for (int kind = 0; kind < 3; kind++) {
        int64_t n_ref = 0;
        double loss_ref = 0;
        float *ref = train(kind, 1, 1, &n_ref, &loss_ref);
        for (int m = 0; m < 5; m++) {
            int dp = meshes[m][0], mp = meshes[m][1];
            if (dp * mp != P)
                continue;
            int64_t n = 0;
            double l = 0;
            float *w = train(kind, mp, 0, &n, &l);
            double e = ref && w && n == n_ref ? check_rel_diff(w, ref, n) : INFINITY;
            double el = fabs(l - loss_ref) / fabs(loss_ref);
            CHECKF(e < 1e-5 && el < 1e-5, "%s on dp %d x mp %d: weights differ by %.3g, loss %.7f vs %.7f",
                   names[kind], dp, mp, e, l, loss_ref);
            if (rank == 0)
                printf("%-13s dp %d x mp %d: loss after 5 steps %.6f (one process %.6f), weights max rel diff %.2e\n",
                       names[kind], dp, mp, l, loss_ref, e);
            free(w);
        }
        free(ref);
    }
    char name[64];
    snprintf(name, sizeof name, "mpi_tp_train rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_dist_finalize();
    return status;
}
