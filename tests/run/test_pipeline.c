/* test_pipeline.c - what include/redco/pipeline.h promises about parameters, model
 * directories, the deployer in one process, its log.jsonl and the replacement of
 * checkpoint directories (best/, final/) in a workdir whose path has spaces and quotes. */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "user_models.h"
#include "redco/data.h"
#include "redco/pipeline.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_root[256];

static int exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* ---- parameters: how each starts ------------------------------------------------------ */

typedef struct {
    int calls;
    uint64_t first_draw;
} fill_log;

/* x[j] = 3 + j, and records the first draw of its key */
static int fill_ramp(float *x, int64_t numel, int ndim, const int64_t *shape, rc_rng rng, void *user)
{
    fill_log *l = user;
    l->calls++;
    l->first_draw = rc_rng_next_u64(&rng);
    CHECK(ndim == 2 && shape[0] * shape[1] == numel);
    for (int64_t j = 0; j < numel; j++)
        x[j] = 3.0f + (float)j;
    return 0;
}

static int fill_fails(float *x, int64_t numel, int ndim, const int64_t *shape, rc_rng rng, void *user)
{
    (void)x, (void)numel, (void)ndim, (void)shape, (void)rng, (void)user;
    return -1;
}

/* mean and standard deviation of n floats */
static void moments(const float *x, int64_t n, double *mean, double *sd)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i], s2 += (double)x[i] * x[i];
    *mean = s / (double)n;
    *sd = sqrt(fmax(s2 / (double)n - *mean * *mean, 0));
}

/* copies handed out by param, freed by params_release */
static float *copies[16];
static int ncopies;

static void params_release(void)
{
    while (ncopies > 0)
        free(copies[--ncopies]);
}

/* parameter `name` copied out (valid until params_release) */
static float *param(rc_params *p, const char *name, int64_t *numel)
{
    int i = rc_params_find(p, name);
    *numel = rc_params_tensor_numel(p, i);
    float *x = ncopies < 16 ? malloc((size_t)(*numel > 0 ? *numel : 1) * sizeof *x) : NULL;
    if (x && rc_params_read(p, i, x, NULL)) {
        free(x);
        return NULL;
    }
    if (x)
        copies[ncopies++] = x;
    return x;
}

static void test_params_init(void)
{
    fill_log log = {0};
    rc_params *p = rc_params_new();
    const int64_t mat[2] = {64, 64}, vec[1] = {256};
    CHECK(rc_params_add_init(p, "normal", 2, mat, &(rc_init){.kind = RC_INIT_NORMAL, .std = 0.5}) == 0);
    CHECK(rc_params_add_init(p, "zeros", 2, mat, &(rc_init){.kind = RC_INIT_ZEROS}) == 0);
    CHECK(rc_params_add_init(p, "gain", 1, vec, &(rc_init){.kind = RC_INIT_ONES}) == 0);
    CHECK(rc_params_add_init(p, "fill", 2, mat, &(rc_init){.kind = RC_INIT_FILL, .fill = fill_ramp, .user = &log}) == 0);
    CHECK(rc_params_add(p, "auto_matrix", 2, mat) == 0);
    CHECK(rc_params_add(p, "auto_bias", 1, vec) == 0);
    CHECK(rc_params_add_init(p, "normal_bias", 1, vec, &(rc_init){.kind = RC_INIT_NORMAL, .std = 2.0}) == 0);
    /* refused declarations */
    CHECK(rc_params_add_init(p, "gain", 1, vec, NULL) == -1);                      /* taken */
    CHECK(rc_params_add_init(p, "f", 1, vec, &(rc_init){.kind = RC_INIT_FILL}) == -1); /* no fill */
    CHECK(rc_params_add_init(p, "s", 1, vec, &(rc_init){.kind = RC_INIT_NORMAL, .std = -1}) == -1);
    CHECK(rc_params_add_init(p, "s", 1, vec, &(rc_init){.kind = RC_INIT_NORMAL, .std = NAN}) == -1);
    CHECK(rc_params_add_init(p, "k", 1, vec, &(rc_init){.kind = (rc_init_kind)42}) == -1);
    CHECK(rc_params_add(p, "empty", 1, (int64_t[]){0}) == -1);
    CHECK(rc_params_add(p, "five", 5, (int64_t[]){1, 1, 1, 1, 1}) == -1);
    CHECK(rc_params_count(p) == 7 && rc_params_find(p, "fill") == 3 && rc_params_find(p, "nope") == -1);

    CHECK(rc_params_init_normal(p, 0.02, 7) == 0);
    int64_t n;
    double mean, sd;
    float *x = param(p, "normal", &n);
    moments(x, n, &mean, &sd);
    CHECKF(fabs(mean) < 0.05 && fabs(sd - 0.5) < 0.05, "RC_INIT_NORMAL std 0.5: mean %g, sd %g", mean, sd);
    x = param(p, "zeros", &n);
    int all = 1;
    for (int64_t j = 0; j < n; j++)
        all &= x[j] == 0.0f;
    CHECK(all);
    x = param(p, "gain", &n);
    all = n == 256;
    for (int64_t j = 0; j < n; j++)
        all &= x[j] == 1.0f;
    CHECKF(all, "RC_INIT_ONES: gain[0] = %g", x[0]);
    x = param(p, "fill", &n);
    all = log.calls == 1;
    for (int64_t j = 0; j < n; j++)
        all &= x[j] == 3.0f + (float)j;
    CHECKF(all, "user fill: %d calls, x[5] = %g", log.calls, x[5]);
    rc_rng key = rc_rng_fold(rc_rng_new(7), 3);
    CHECKF(log.first_draw == rc_rng_next_u64(&key), "the fill's key is rc_rng_fold(rc_rng_new(seed), i)");
    x = param(p, "auto_matrix", &n);
    moments(x, n, &mean, &sd);
    CHECKF(fabs(sd - 0.02) < 0.002, "RC_INIT_AUTO matrix: sd %g, want 0.02", sd);
    x = param(p, "auto_bias", &n);
    all = 1;
    for (int64_t j = 0; j < n; j++)
        all &= x[j] == 0.0f;
    CHECK(all);
    x = param(p, "normal_bias", &n);
    moments(x, n, &mean, &sd);
    CHECKF(fabs(sd - 2.0) < 0.3, "RC_INIT_NORMAL on a 1-D parameter: sd %g, want 2", sd);
    /* the buffer exists: no more declarations */
    CHECK(rc_params_add(p, "late", 1, vec) == -1);
    rc_params_free(p);
    params_release();

    /* a fill that fails makes the initialisation fail */
    p = rc_params_new();
    CHECK(rc_params_add_init(p, "w", 2, mat, &(rc_init){.kind = RC_INIT_FILL, .fill = fill_fails}) == 0);
    CHECK(rc_params_init_normal(p, 0.02, 7) == -1);
    rc_params_free(p);

    /* the same seed gives the same values */
    rc_params *a = um_params_new(UM_MLP_N, um_mlp_names, um_mlp_shapes, NULL, 0.2, 17);
    rc_params *b = um_params_new(UM_MLP_N, um_mlp_names, um_mlp_shapes, NULL, 0.2, 17);
    float *va = a ? check_params_flat(a) : NULL, *vb = b ? check_params_flat(b) : NULL;
    CHECK(va && vb && rc_params_numel(a) == rc_params_numel(b) &&
          !memcmp(va, vb, (size_t)rc_params_numel(a) * sizeof(float)));
    free(va);
    free(vb);
    rc_params_free(a);
    rc_params_free(b);
}

/* The image-to-text user model of user_models.h: its LayerNorm gains start at 1 (at 0 the
 * blocks' outputs and the head's input would be 0 and the model could not learn). */
static void test_user_model_gains(void)
{
    rc_params *p = um_params_new(UM_I2T_N, um_i2t_names, um_i2t_shapes, um_i2t_init, 0.2, 17);
    CHECK(p != NULL);
    const char *gains[3] = {"norm1", "norm2", "normf"};
    for (int k = 0; p && k < 3; k++) {
        int64_t n;
        float *x = param(p, gains[k], &n);
        int ones = x && n == UM_C;
        for (int64_t j = 0; ones && j < n; j++)
            ones &= x[j] == 1.0f;
        CHECKF(ones, "%s starts at %g, want 1", gains[k], x ? x[0] : NAN);
    }
    int64_t n;
    float *bias = p ? param(p, "patch_bias", &n) : NULL;
    CHECK(bias && bias[0] == 0.0f && bias[n - 1] == 0.0f);
    float *head = p ? param(p, "head", &n) : NULL;
    double mean, sd;
    if (head)
        moments(head, n, &mean, &sd);
    CHECKF(head && fabs(sd - 0.2) < 0.03, "head: sd %g, want 0.2", head ? sd : NAN);
    rc_params_free(p);
    params_release();
}

/* ---- rc_model_save ----------------------------------------------------------------- */

static void test_model_save(void)
{
    rc_error err = {0};
    char dir[512], tok[512], path[600];
    snprintf(dir, sizeof dir, "%s/saved model", tmp_root);
    snprintf(tok, sizeof tok, "%s/tok", tmp_root);
    CHECK(mkdir(tok, 0777) == 0);
    snprintf(path, sizeof path, "%s/vocab.json", tok);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("{\"a\": 0}\n", f) >= 0 && fclose(f) == 0);
    rc_model *m = rc_model_create("tiny-gpt2", 3, &err);
    CHECKF(m, "%s", err.msg);
    CHECKF(m && rc_model_save(m, dir, tok, &err) == 0, "%s", err.msg);
    CHECK(exists(dir, "config.json") && exists(dir, "model.safetensors") && exists(dir, "vocab.json"));
    CHECK(!exists(dir, "merges.txt")); /* absent in tok: not copied */
    rc_model *back = m ? rc_model_create(dir, 0, &err) : NULL;
    CHECKF(back, "loading the saved model: %s", err.msg);
    float *vb = back ? check_params_flat(back->params) : NULL, *vm = m ? check_params_flat(m->params) : NULL;
    CHECK(back && vb && vm && back->config.vocab_size == m->config.vocab_size &&
          rc_params_numel(back->params) == rc_params_numel(m->params) &&
          !memcmp(vb, vm, (size_t)rc_params_numel(m->params) * sizeof(float)));
    free(vb);
    free(vm);
    CHECK(rc_model_save(NULL, dir, NULL, &err) == -1 && err.code == RC_ERR_ARG);
    rc_model_free(back);
    rc_model_free(m);
}

/* ---- the built-in language-modelling task and evaluation ------------------------------ */

/* A preset with a 64-id vocabulary (rc_model_from_config) on a .npy token stream of the
 * pattern i -> (5 i + 3) mod 64: its windows, batches and loss, and rc_trainer_eval's mean
 * loss near ln 64 (weights N(0, 0.02): nearly uniform predictions), every token counted. */
enum { RAMP_N = 257 };

/* a dataset of the RAMP_N ids (mul i + add) mod v, written to tmp_root/name (ids[] gets them) */
static rc_dataset *ramp_dataset(const char *name, int mul, int add, int v, int32_t *ids)
{
    rc_error err = {0};
    for (int i = 0; i < RAMP_N; i++)
        ids[i] = (int32_t)((mul * i + add) % v);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", tmp_root, name);
    CHECKF(rc_npy_write(path, RC_NPY_I32, ids, RAMP_N, &err) == 0, "%s", err.msg);
    rc_dataset *ds = rc_dataset_open(path, NULL, &err);
    CHECKF(ds, "%s", err.msg);
    return ds;
}

static void test_task_eval(void)
{
    enum { V = 64, N = RAMP_N, T = 16 };
    rc_error err = {0};
    int32_t ids[N];
    rc_dataset *ds = ramp_dataset("tokens.npy", 5, 3, V, ids);
    rc_model_config c;
    CHECK(rc_config_preset("tiny-gpt2", &c, &err) == 0);
    c.vocab_size = V;
    rc_model *m = rc_model_from_config(&c, 9, &err);
    CHECKF(m && m->config.vocab_size == V, "%s", err.msg);
    c.vocab_size = 0;
    CHECK(rc_model_from_config(&c, 9, &err) == NULL && err.code);
    CHECK(m && ds && rc_task_new(m, ds, 1000, &err) == NULL && check_has(err.msg, "1000"));
    rc_task *task = m && ds ? rc_task_new(m, ds, T, &err) : NULL;
    CHECKF(task && rc_task_count(0, task) == (N - 1) / T, "%s", err.msg);
    if (!task) {
        rc_model_free(m);
        rc_dataset_close(ds);
        return;
    }
    rc_batch b = {0};
    CHECK(rc_task_collate(&b, (int64_t[]){2, 0}, 2, task, &err) == 0);
    /* an example past the data: the task's collate says which, through the trainer's message */
    rc_batch bad = {0};
    rc_error why = {0};
    CHECK(rc_task_collate(&bad, (int64_t[]){(N - 1) / T + 5}, 1, task, &why) == -1 && why.code && why.msg[0]);
    rc_batch_free(&bad);
    const rc_array *in = rc_batch_get(&b, "ids"), *tg = rc_batch_get(&b, "targets");
    CHECK(in && tg && in->ndim == 2 && in->shape[0] == 2 && in->shape[1] == T && rc_batch_get(&b, "x") == NULL);
    CHECK(in && tg && ((int32_t *)in->data)[0] == ids[2 * T] && ((int32_t *)tg->data)[0] == ids[2 * T + 1] &&
          ((int32_t *)in->data)[T] == ids[0]);
    rc_graph *g = rc_graph_new();
    rc_tensor *loss = rc_task_loss(g, m->params, &b, rc_rng_new(1), task, &err);
    CHECKF(loss && loss->ndim == 0 && !rc_graph_error(g), "%s", rc_graph_error(g));
    rc_graph_free(g);
    rc_batch_free(&b);

    rc_deployer_options o = {.seed = 1, .mp = 1};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    rc_trainer *t = d ? rc_trainer_new(d, rc_task_collate, rc_task_loss, task, m->params, m, &err) : NULL;
    CHECKF(t, "%s", err.msg);
    double mean = NAN;
    int64_t tokens = 0;
    rc_examples ex = {rc_task_count, task};
    CHECKF(t && rc_trainer_eval(t, ex, 3, &mean, &tokens, &err) == 0, "%s", err.msg);
    CHECKF(fabs(mean - log((double)V)) < 0.2 && tokens == (N - 1) / T * T,
           "eval loss %g (ln %d = %g) over %lld tokens", mean, V, log((double)V), (long long)tokens);
    rc_trainer_free(t);
    rc_deployer_free(d);
    rc_task_free(task);
    rc_model_free(m);
    rc_dataset_close(ds);
}

/* ---- dropout in the training steps ---------------------------------------------------- */

/* the dropout sites of the built-in task's loss graph: DROPOUT nodes and fused attention
 * nodes that drop (fparam[1] > 0) */
static void count_dropout(rc_model *m, rc_task *task, const rc_batch *b, int training, int *drops, int *attn)
{
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_graph_set_training(g, training);
    CHECK(rc_graph_training(g) == training);
    rc_tensor *loss = rc_task_loss(g, m->params, b, rc_rng_new(1), task, &err);
    CHECKF(loss && !rc_graph_error(g), "%s", rc_graph_error(g));
    *drops = *attn = 0;
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        *drops += t->op == RC_OP_DROPOUT;
        *attn += t->op == RC_OP_ATTENTION && t->fparam[1] > 0;
    }
    rc_graph_free(g);
}

/* 3 SGD steps (run seed 1) of task's model m: the weights after them (malloc'ed), and the
 * eval loss of the trainer that fit them (eval_loss[0]) and of a new trainer that never
 * trained (eval_loss[1]) */
static float *fit_weights(rc_model *m, rc_task *task, int no_dropout, double eval_loss[2])
{
    rc_error err = {0};
    rc_deployer_options o = {.seed = 1, .mp = 1};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    rc_trainer *t = d ? rc_trainer_new(d, rc_task_collate, rc_task_loss, task, m->params, m, &err) : NULL;
    rc_train_options to = {.steps = 3, .batch_size = 2, .optimizer = "sgd", .lr = 0.1, .no_dropout = no_dropout};
    rc_examples ex = {rc_task_count, task};
    int64_t tokens = 0;
    CHECKF(t && rc_trainer_fit(t, &to, ex, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECKF(t && rc_trainer_eval(t, ex, 4, &eval_loss[0], &tokens, &err) == 0, "%s", err.msg);
    rc_trainer *u = d ? rc_trainer_new(d, rc_task_collate, rc_task_loss, task, m->params, m, &err) : NULL;
    CHECKF(u && rc_trainer_eval(u, ex, 4, &eval_loss[1], &tokens, &err) == 0, "%s", err.msg);
    float *w = malloc((size_t)rc_params_numel(m->params) * sizeof *w);
    CHECK(w && rc_params_read_all(m->params, w, &err) == 0);
    rc_trainer_free(u);
    rc_trainer_free(t);
    rc_deployer_free(d);
    return w;
}

/* The trainer applies the model's dropout (GPT-2's 0.1s) in its training steps and nowhere
 * else: the task's loss graph has GPT-2's 5 dropout sites of 2 layers (embeddings, two
 * residual branches a layer; the probabilities in the fused attention op) only when the
 * graph is a training one; the same seed gives the same weights; no_dropout gives other
 * weights, the same as a config of zero dropout; evaluation never drops. */
static void test_dropout_training(void)
{
    enum { V = 64, T = 16 };
    rc_error err = {0};
    int32_t ids[RAMP_N];
    rc_dataset *ds = ramp_dataset("drop_tokens.npy", 7, 1, V, ids);
    rc_model_config c;
    CHECK(rc_config_preset("tiny-gpt2", &c, &err) == 0 && c.resid_dropout == 0.1 && c.attn_dropout == 0.1);
    c.vocab_size = V;
    rc_model_config none = c;
    none.resid_dropout = none.embd_dropout = none.attn_dropout = 0;
    float *w[4] = {NULL};
    double ev[4][2] = {{0}};
    int64_t n = 0;
    for (int run = 0; run < 4; run++) { /* dropout, dropout again, no_dropout, zero-dropout config */
        rc_model *m = rc_model_from_config(run == 3 ? &none : &c, 9, &err);
        rc_task *task = m && ds ? rc_task_new(m, ds, T, &err) : NULL;
        CHECKF(task, "%s", err.msg);
        if (task && run == 0) {
            rc_batch b = {0};
            int drops = -1, attn = -1;
            CHECK(rc_task_collate(&b, (int64_t[]){0, 1}, 2, task, &err) == 0);
            count_dropout(m, task, &b, 1, &drops, &attn);
            CHECKF(drops == 5 && attn == 2, "training graph: %d DROPOUT nodes, %d dropping attention nodes", drops, attn);
            count_dropout(m, task, &b, 0, &drops, &attn);
            CHECKF(drops == 0 && attn == 0, "eval graph: %d DROPOUT nodes, %d dropping attention nodes", drops, attn);
            rc_batch_free(&b);
        }
        if (task)
            w[run] = fit_weights(m, task, run == 2, ev[run]);
        if (m && run == 0)
            n = rc_params_numel(m->params);
        rc_task_free(task);
        rc_model_free(m);
    }
    double same = 0, off = 0, zero = 0;
    for (int64_t i = 0; w[0] && w[1] && w[2] && w[3] && i < n; i++) {
        same = fmax(same, fabs((double)w[0][i] - w[1][i]));
        off = fmax(off, fabs((double)w[0][i] - w[2][i]));
        zero = fmax(zero, fabs((double)w[2][i] - w[3][i]));
    }
    CHECKF(n > 0 && same == 0, "the same seed with dropout: weights differ by %g", same);
    CHECKF(off > 1e-4, "dropout on and off: weights differ by only %g", off);
    CHECKF(zero == 0, "no_dropout and a zero-dropout config: weights differ by %g", zero);
    for (int run = 0; run < 4; run++)
        CHECKF(ev[run][0] == ev[run][1] && isfinite(ev[run][0]),
               "run %d: eval loss %.9g after fit, %.9g from a trainer without dropout", run, ev[run][0], ev[run][1]);
    printf("dropout: weights of two runs differ by %g, with and without dropout by %.3g; eval losses %.6f "
           "(trained with dropout) and %.6f (without)\n", same, off, ev[0][0], ev[2][0]);
    for (int run = 0; run < 4; run++)
        free(w[run]);
    rc_dataset_close(ds);
}

/* ---- the deployer in one process --------------------------------------------------- */

static void test_mp_without_launcher(void)
{
    rc_error err = {0};
    CHECK(!rc_dist_launched());
    rc_deployer_options o = {.seed = 1, .mp = 2};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    CHECK(d == NULL);
    CHECKF(check_has(err.msg, "this is 1 process") && check_has(err.msg, "--nproc 2") &&
           check_has(err.msg, "mpirun -np 2") && !check_has(err.msg, "0 processes"), "%s", err.msg);
    rc_deployer_free(d);
    rc_mesh m;
    CHECK(rc_mesh_init(&m, 3, &err) == -1 && check_has(err.msg, "3 model shards need 3 processes"));
    CHECK(rc_mesh_init(&m, 0, &err) == -1 && check_has(err.msg, "need at least 1"));
    o.mp = 1;
    d = rc_deployer_new(NULL, NULL, &o, &err);
    CHECKF(d, "%s", err.msg);
    CHECK(d && rc_deployer_mesh(d)->size == 1 && rc_deployer_is_main(d));
    /* per-step keys: one per step, the same for the same step */
    rc_rng a = rc_deployer_step_rng(d, 5), b = rc_deployer_step_rng(d, 5), c = rc_deployer_step_rng(d, 6);
    CHECK(rc_rng_next_u64(&a) == rc_rng_next_u64(&b));
    a = rc_deployer_step_rng(d, 5);
    CHECK(rc_rng_next_u64(&a) != rc_rng_next_u64(&c));
    CHECK(rc_deployer_agree(d, 0, &err) == 0 && rc_deployer_agree(d, -1, &err) == -1);
    rc_deployer_free(d);
    rc_dist_finalize(); /* nothing to do without a launcher */
    CHECK(rc_mesh_init_local(&m, &err) == 0 && m.size == 1 && m.dp == 1 && m.mp == 1 && m.rank == 0);
    float x[2] = {1.5f, -2.0f};
    CHECK(rc_comm_allreduce_sum_f32(m.world, x, 2, &err) == 0 && x[0] == 1.5f && x[1] == -2.0f);
    CHECK(rc_comm_allreduce_max_f32(m.dp_comm, x, 2, &err) == 0 && x[0] == 1.5f && x[1] == -2.0f);
    rc_mesh_free(&m);
}

/* every line of log.jsonl parses as JSON; returns the lines' objects (n of them) */
static json_t *read_log(const char *workdir, int *n)
{
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/log.jsonl", workdir);
    json_t *all = json_array();
    FILE *f = fopen(path, "r");
    CHECKF(f, "%s: cannot open", path);
    while (f && fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        CHECKF(o && json_is_object(o), "log.jsonl line '%s' is not a JSON object: %s", line, je.text);
        if (o)
            json_array_append_new(all, o);
    }
    if (f)
        fclose(f);
    *n = (int)json_array_size(all);
    return all;
}

static void test_log_non_finite(void)
{
    rc_error err = {0};
    char wd[512];
    snprintf(wd, sizeof wd, "%s/log run", tmp_root);
    rc_deployer_options o = {.seed = 1, .mp = 1, .workdir = wd};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    CHECKF(d, "%s", err.msg);
    const char *keys[4] = {"train/loss", "train/lr", "eval/\"quoted\"", "inf"};
    double vals[4] = {NAN, 1.5e-4, 2.0, -INFINITY};
    CHECKF(d && rc_deployer_log(d, 3, keys, vals, 4, &err) == 0, "%s", err.msg);
    rc_deployer_free(d);
    int n = 0;
    json_t *lines = read_log(wd, &n);
    json_t *l = json_array_get(lines, 0);
    CHECK(n == 1);
    CHECK(json_integer_value(json_object_get(l, "step")) == 3);
    CHECK(json_is_null(json_object_get(l, "train/loss")) && json_is_null(json_object_get(l, "inf")));
    CHECK(fabs(json_number_value(json_object_get(l, "train/lr")) - 1.5e-4) < 1e-12);
    CHECK(json_number_value(json_object_get(l, "eval/\"quoted\"")) == 2.0);
    json_decref(lines);
}

/* ---- checkpoint directories replaced without a shell ---------------------------------- */

enum { EX = 16 };

typedef struct {
    float x[EX][UM_MLP_IN];
    int32_t y[EX];
} mlp_data;

static int64_t mlp_count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return EX;
}

static int mlp_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    mlp_data *d = user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, UM_MLP_IN});
    int32_t *y = rc_batch_add(out, "y", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        memcpy(x + i * UM_MLP_IN, d->x[ex[i]], sizeof d->x[0]);
        y[i] = d->y[ex[i]];
    }
    return 0;
}

static rc_tensor *mlp_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *w[UM_MLP_N];
    for (int i = 0; i < UM_MLP_N; i++)
        w[i] = rc_params_get(g, p, um_mlp_names[i]);
    return um_mlp_loss(g, w, rc_batch_input(g, b, "x"), rc_batch_input(g, b, "y"));
}

static void test_checkpoint_replace(void)
{
    rc_error err = {0};
    char wd[512];
    snprintf(wd, sizeof wd, "%s/work dir 'it''s\" here", tmp_root);
    static mlp_data data;
    rc_rng r = rc_rng_new(5);
    for (int i = 0; i < EX; i++) {
        for (int k = 0; k < UM_MLP_IN; k++)
            data.x[i][k] = (float)rc_rng_normal(&r);
        data.y[i] = data.x[i][0] > 0 ? (data.x[i][1] > 0 ? 1 : 2) : (data.x[i][2] > 0 ? 3 : 0);
    }
    rc_params *p = um_params_new(UM_MLP_N, um_mlp_names, um_mlp_shapes, NULL, 0.2, 17);
    rc_deployer_options dopt = {.seed = 1, .mp = 1, .workdir = wd};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    CHECKF(d, "%s", err.msg);
    rc_trainer *t = d ? rc_trainer_new(d, mlp_collate, mlp_loss, &data, p, NULL, &err) : NULL;
    CHECKF(t, "%s", err.msg);
    /* the eval set is the training set: its loss falls at every step, so best/ is
     * replaced at every evaluation */
    rc_train_options o = {.steps = 5, .batch_size = EX, .optimizer = "sgd", .lr = 0.1,
                          .log_every = 1, .eval_every = 1, .save_every = 2};
    rc_examples ex = {mlp_count, &data};
    rc_train_result res = {0};
    CHECKF(t && rc_trainer_fit(t, &o, ex, &ex, &res, &err) == 0, "fit in '%s': %s", wd, err.msg);
    /* a second fit replaces final/ too */
    o.steps = 6;
    CHECKF(t && rc_trainer_fit(t, &o, ex, &ex, &res, &err) == 0, "second fit: %s", err.msg);
    rc_trainer_free(t);
    rc_deployer_free(d);
    rc_params_free(p);

    int n = 0, evals = 0, falling = 1;
    double last = INFINITY;
    json_t *lines = read_log(wd, &n);
    for (int i = 0; i < n; i++) {
        json_t *e = json_object_get(json_array_get(lines, i), "eval/loss");
        if (!e)
            continue;
        falling &= json_number_value(e) < last;
        last = json_number_value(e);
        evals++;
    }
    json_decref(lines);
    CHECKF(evals == 6 && falling, "%d evaluations, eval loss falling: %d (best/ replaced each time)", evals, falling);
    CHECK(exists(wd, "best/model.safetensors") && exists(wd, "final/model.safetensors"));
    CHECK(exists(wd, "checkpoint-2/optimizer.safetensors") && exists(wd, "checkpoint-4/trainer_state.json"));
    CHECK(!exists(wd, "best.old") && !exists(wd, "final.old"));
    CHECK(!exists(wd, ".tmp-best") && !exists(wd, ".tmp-final") && !exists(wd, ".tmp-checkpoint-4"));
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/redco_test_pipeline_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_params_init();
    test_user_model_gains();
    test_model_save();
    test_task_eval();
    test_dropout_training();
    test_mp_without_launcher();
    test_log_non_finite();
    test_checkpoint_replace();
    check_rm_tree(tmp_root);
    return check_summary("test_pipeline");
}
