/* mpi_tp_train.c - training on dp x mp meshes equals one process: for T5 (a built-in
 * encoder-decoder through rc_model_logits) and for two models written with graph ops
 * alone (user_models.h: an MLP and an image-to-text model), and for the MLP declared with
 * rc_params_add alone (its parameters drawn by the trainer: the same on every mesh), 5 SGD steps with the same
 * global batch of 4 on every mesh (dp, mp) in {(1,1), (2,1), (1,2), (2,2), (1,4)} whose
 * size is this world's, other than one process, give the same last loss and the same
 * weights as one local process, to float rounding (relative 1e-5, weights per tensor by
 * L2 norm). With --dump PATH, rank 0 writes the weights of the first such mesh ((1,1) on
 * one process) so that runs without a launcher and under mpiexec -n 1, 2, 4 are compared
 * with each other (CTest mpi_tp_train_launcher). The decoder families are covered the same
 * way through the command line (tests/ref/test_cli_train.py). With --device D the meshes
 * run on device D (e.g. opencl: the processes share it) and every mesh, one process
 * included, is compared with one process on the CPU (CTest mpi_tp_train_opencl_npN). */
#include "check.h"
#include "redco/pipeline.h"
#include "user_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_T5, KIND_MLP, KIND_I2T, KIND_MLP_AUTO, N_KINDS, N_EXAMPLES = 40, S = 8 };

static const char *device;        /* --device: where the meshes run (the reference: the CPU) */

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

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    job *j = user;
    if (j->kind == KIND_MLP || j->kind == KIND_MLP_AUTO) {
        float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, UM_MLP_IN});
        int32_t *y = rc_batch_add(out, "y", RC_I32, 1, (int64_t[]){n});
        if (!x || !y)
            return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
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
            return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
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
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
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

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    job *j = user;
    (void)rng, (void)err;
    if (j->kind == KIND_T5)
        return rc_cross_entropy(g, rc_model_logits(g, j->t5, input(g, b, "ids"), input(g, b, "enc_ids"), NULL),
                                input(g, b, "targets"), -100);
    int mlp = j->kind == KIND_MLP || j->kind == KIND_MLP_AUTO;
    int n = mlp ? UM_MLP_N : UM_I2T_N;
    const char *const *names = mlp ? um_mlp_names : um_i2t_names;
    rc_tensor *leaves[UM_I2T_N];
    for (int i = 0; i < n; i++)
        leaves[i] = rc_params_get(g, p, names[i]);
    if (mlp)
        return um_mlp_loss(g, leaves, input(g, b, "x"), input(g, b, "y"));
    return um_i2t_loss(g, leaves, input(g, b, "image"), input(g, b, "ids"), input(g, b, "targets"));
}

/* the user's parameters: N(0, 0.2), norm weights 1 (user_models.h); KIND_MLP_AUTO's given
 * no values (the trainer draws them from the deployer's seed) */
static rc_params *user_params(int kind)
{
    if (kind == KIND_MLP_AUTO) {
        rc_params *p = rc_params_new();
        for (int i = 0; p && i < UM_MLP_N; i++)
            CHECK(rc_params_add(p, um_mlp_names[i], 2, um_mlp_shapes[i]) == 0);
        return p;
    }
    if (kind == KIND_MLP)
        return um_params_new(UM_MLP_N, um_mlp_names, um_mlp_shapes, NULL, 0.2, 17);
    return um_params_new(UM_I2T_N, um_i2t_names, um_i2t_shapes, um_i2t_init, 0.2, 17);
}

/* 5 SGD steps on a dp x mp mesh (local: one process alone) with a global batch of 4;
 * appends the weights to *w (names prefixed) and returns the last step's loss (NAN on
 * failure) */
static double train(int kind, int mp, int local, check_weights *w, const char *prefix)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 2, .mp = mp, .local = local, .device = local ? "cpu" : device};
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
    /* no dropout: a split tensor's mask is drawn per shard, so the meshes would differ */
    rc_train_options o = {.steps = 5, .batch_size = 4 / dp, .optimizer = "sgd", .lr = 0.1, .no_dropout = 1};
    rc_train_result r = {0};
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){count, &j}, NULL, &r, &err) == 0;
    CHECKF(ok, "train kind %d mp %d: %s", kind, mp, err.msg);
    if (ok)
        CHECK(check_weights_add_params(w, prefix, params, 1e-5) == 0);
    if (ok && kind == KIND_MLP_AUTO) { /* drawn, not zeros (N(0, 0.02): |a| about 0.02 x 23) */
        float a[16 * 32];
        double sq = 0;
        CHECK(rc_params_read(params, 0, a, &err) == 0);
        for (int i = 0; i < 16 * 32; i++)
            sq += (double)a[i] * a[i];
        CHECKF(sqrt(sq) > 0.2, "auto init: |a| %.3g after 5 steps", sqrt(sq));
    }
    rc_trainer_free(t);
    rc_model_free(j.t5);
    rc_params_free(own);
    rc_deployer_free(d);
    return ok ? r.loss : NAN;
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    int P = world.size, rank = world.rank;
    rc_mesh_free(&world);
    const char *dump = check_dump_path(argc, argv);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
    if (dump && rank == 0)
        remove(dump); /* a failed run leaves no dump behind */
    const char *names[N_KINDS] = {"tiny-t5", "user MLP", "image-to-text", "MLP, auto init"};
    static const int meshes[5][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 4}};
    check_weights dumped = {0}; /* the first mesh of this world's size, per kind (--dump) */
    for (int kind = 0; kind < N_KINDS; kind++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s/", names[kind]);
        check_weights ref = {0};
        double loss_ref = P > 1 || device ? train(kind, 1, 1, &ref, prefix) : 0;
        int first = 1;
        for (int m = 0; m < 5; m++) {
            int dp = meshes[m][0], mp = meshes[m][1];
            if (dp * mp != P)
                continue;
            check_weights w = {0};
            double l = train(kind, mp, 0, &w, prefix);
            if (first) {
                float lf = (float)l;
                for (int i = 0; i < w.n; i++)
                    check_weights_add(&dumped, "", w.names[i], w.data[i], w.numel[i], w.tol[i]);
                check_weights_add(&dumped, prefix, "last loss", &lf, 1, 1e-5);
            }
            first = 0;
            if (P == 1 && !device) { /* the reference's own run; compared across launchers by --dump */
                check_weights_free(&w);
                continue;
            }
            char worst[256];
            double e = check_weights_diff(&w, &ref, worst, sizeof worst, NULL);
            double el = fabs(l - loss_ref) / fabs(loss_ref);
            CHECKF(e < 1e-5 && el < 1e-5, "%s on dp %d x mp %d: tensor %s differs by %.3g, loss %.7f vs %.7f",
                   names[kind], dp, mp, worst, e, l, loss_ref);
            if (rank == 0)
                printf("%-13s dp %d x mp %d on %s: loss after 5 steps %.6f (one CPU process %.6f), worst tensor %s, "
                       "rel L2 diff %.2e\n", names[kind], dp, mp, device ? device : "cpu", l, loss_ref, worst, e);
            check_weights_free(&w);
        }
        check_weights_free(&ref);
    }
    if (dump && rank == 0)
        CHECK(check_weights_save(&dumped, dump) == 0);
    check_weights_free(&dumped);
    char name[64];
    snprintf(name, sizeof name, "mpi_tp_train rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_dist_finalize();
    return status;
}
