/* three_functions.c - the README's example: language modelling with the three functions.
 * The examples are the windows of a token array; collate turns indices into a batch, loss
 * records the model's cross-entropy, and the Trainer does the rest (data parallelism when
 * started under mpirun, checkpoints in the workdir, resume).
 *
 *   build/three_functions [WORKDIR]          or   mpirun -np 2 build/three_functions
 */
#include "redco/pipeline.h"

#include <stdio.h>

enum { T = 32, N = 4096 };

typedef struct {
    int32_t tokens[N];            /* the user's data: here a synthetic token stream */
    rc_model *model;
} lm;

/* examples 0 .. (N - 1) / T - 1 are windows of T + 1 tokens */
static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return (N - 1) / T;
}

/* collate: n example indices -> ids [n, T] and targets [n, T] */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    lm *d = user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            ids[i * T + t] = d->tokens[examples[i] * T + t];
            targets[i * T + t] = d->tokens[examples[i] * T + t + 1];
        }
    return 0;
}

/* loss: the scalar to minimise, recorded in global shapes as if on one device */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)params, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), -100);
}

int main(int argc, char **argv)
{
    static lm data;
    for (int i = 0; i < N; i++) /* each token follows from the previous: learnable */
        data.tokens[i] = (int32_t)((i * 7 + i / 5) % 200);
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 1, .mp = 1, .workdir = argc > 1 ? argv[1] : NULL, .verbose = 1};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &dopt, &err);
    data.model = d ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    rc_trainer *t = data.model ? rc_trainer_new(d, collate, loss, &data, data.model->params, data.model, &err) : NULL;
    rc_train_options o = {.steps = 60, .batch_size = 8, .optimizer = "adamw", .lr = 3e-3,
                          .weight_decay = 0.01, .grad_clip = 1.0, .shuffle = 1, .log_every = 20};
    rc_train_result r = {0};
    if (!t || rc_trainer_fit(t, &o, (rc_examples){count, &data}, NULL, &r, &err)) {
        fprintf(stderr, "three_functions: %s\n", err.msg);
        return 1;
    }
    if (rc_deployer_is_main(d))
        printf("trained %lld steps, final loss %.3f\n", (long long)r.step, r.loss);
    rc_trainer_free(t);
    rc_model_free(data.model);
    rc_deployer_free(d);          /* finalizes MPI if the Deployer started it */
    return 0;
}
