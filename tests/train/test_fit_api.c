/* test_fit_api.c - what pipeline.h says about a fit, held to it:
 *   - parameters given no values start as RC_INIT_AUTO says: rc_trainer_new and
 *     rc_predictor_new give each of them what rc_params_init_normal(p, RC_INIT_STD, seed)
 *     would (bitwise), whichever others were given (written, drawn, buffer handed out),
 *     and an MLP classifier declared with rc_params_add alone trains to a good accuracy
 *     (from zeros it stays at chance: its ReLU layer gets no gradient);
 *   - AdamW's defaults (beta1, beta2, eps left 0: 0.9, 0.999, 1e-8) and adam_as_given
 *     (beta1 = 0 really is no momentum) against AdamW computed by hand over two steps (one
 *     step cannot tell: its bias correction makes any beta1 move by lr x sign); betas
 *     outside [0, 1) and a negative eps are refused, naming the field;
 *   - eval_begin is called on every evaluation with a metric, before its rows: two
 *     evaluations count their own rows, not the earlier one's too. */
#include "check.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters given no values --------------------------------------------------------- */

static int fill_ramp(float *x, int64_t numel, int ndim, const int64_t *shape, rc_rng rng, void *user)
{
    (void)ndim, (void)shape, (void)rng;
    ++*(int *)user;
    for (int64_t i = 0; i < numel; i++)
        x[i] = (float)i;
    return 0;
}

/* five parameters, one of each rule; fills counts the fill's calls */
static rc_params *declare(int *fills)
{
    rc_params *p = rc_params_new();
    const int64_t mat[2] = {4, 3}, vec[1] = {3};
    int rc = !p || rc_params_add(p, "w1", 2, mat) || rc_params_add(p, "b1", 1, vec) ||
             rc_params_add_init(p, "gain", 1, vec, &(rc_init){.kind = RC_INIT_ONES}) ||
             rc_params_add_init(p, "w2", 2, mat, &(rc_init){.kind = RC_INIT_NORMAL, .std = 0.5}) ||
             rc_params_add_init(p, "ramp", 1, vec, &(rc_init){.kind = RC_INIT_FILL, .fill = fill_ramp, .user = fills}) ||
             rc_params_add(p, "w3", 2, mat);
    CHECK(rc == 0);
    return p;
}

static int none_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    (void)out, (void)ex, (void)n, (void)user, (void)err;
    return 0;
}

static rc_tensor *none_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)b, (void)rng, (void)user, (void)err;
    return rc_sum_all(g, rc_params_get(g, p, "w1"));
}

/* parameter i of p equals parameter i of q, bitwise */
static int same_param(rc_params *p, rc_params *q, int i)
{
    float a[12], b[12];
    int64_t n = rc_params_tensor_numel(p, i);
    return n <= 12 && rc_params_read(p, i, a, NULL) == 0 && rc_params_read(q, i, b, NULL) == 0 &&
           memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static void test_auto_init_values(void)
{
    rc_error err = {0};
    int fills = 0, ref_fills = 0;
    rc_deployer_options dopt = {.seed = 7};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    CHECKF(d, "%s", err.msg);
    rc_params *ref = declare(&ref_fills);
    CHECK(rc_params_init_normal(ref, RC_INIT_STD, 7) == 0 && ref_fills == 1);

    /* nothing given: every parameter as rc_params_init_normal(p, RC_INIT_STD, seed) */
    rc_params *p = declare(&fills);
    float x[12];
    CHECK(rc_params_read(p, 0, x, NULL) == 0 && x[0] == 0 && x[11] == 0); /* zeros until then */
    rc_trainer *t = d ? rc_trainer_new(d, none_collate, none_loss, NULL, p, NULL, &err) : NULL;
    CHECKF(t, "%s", err.msg);
    for (int i = 0; t && i < rc_params_count(p); i++)
        CHECKF(same_param(p, ref, i), "trainer: parameter '%s' is not rc_params_init_normal's", rc_params_name(p, i));
    CHECK(fills == 1);
    rc_trainer_free(t);
    rc_params_free(p);

    /* w2 written, w3's buffer handed out: those keep their values, the rest are drawn as if
     * all were (the same draws), and a predictor draws as a trainer does */
    fills = 0;
    p = declare(&fills);
    const float w2[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    size_t off = 0;
    rc_buffer *buf = rc_params_buffer(p, 5, &off);
    CHECK(buf && rc_buffer_upload(buf, off, w2, sizeof w2, NULL) == 0);
    CHECK(rc_params_write(p, 3, w2, &err) == 0);
    rc_predictor *pr = d ? rc_predictor_new(d, none_collate, none_loss, NULL, NULL, p, &err) : NULL;
    CHECKF(pr, "%s", err.msg);
    float got[12];
    CHECK(rc_params_read(p, 3, got, NULL) == 0 && memcmp(got, w2, sizeof w2) == 0);
    CHECK(rc_params_read(p, 5, got, NULL) == 0 && memcmp(got, w2, sizeof w2) == 0);
    for (int i = 0; pr && i < 3; i++)
        CHECKF(same_param(p, ref, i), "predictor: parameter '%s' is not rc_params_init_normal's", rc_params_name(p, i));
    CHECK(same_param(p, ref, 4) && fills == 1);
    rc_predictor_free(pr);
    rc_params_free(p);

    /* rc_params_init_normal by the user: a trainer draws nothing more */
    fills = 0;
    p = declare(&fills);
    CHECK(rc_params_init_normal(p, 0.3, 11) == 0);
    rc_params *q = declare(&ref_fills);
    CHECK(rc_params_init_normal(q, 0.3, 11) == 0);
    t = d ? rc_trainer_new(d, none_collate, none_loss, NULL, p, NULL, &err) : NULL;
    for (int i = 0; t && i < rc_params_count(p); i++)
        CHECKF(same_param(p, q, i), "parameter '%s' drawn again", rc_params_name(p, i));
    CHECK(fills == 1);
    rc_trainer_free(t);
    rc_params_free(p);
    rc_params_free(q);
    rc_params_free(ref);
    rc_deployer_free(d);
}

/* ---- an MLP classifier of one's own, and its evaluations -------------------------------------- */

enum { IN = 8, HID = 32, CLASSES = 4, N_TRAIN = 256, N_TEST = 256 };

typedef struct {
    float x[N_TRAIN + N_TEST][IN];
    int32_t y[N_TRAIN + N_TEST];
    int test;                     /* 1: the examples are the test set's */
    int64_t correct, seen;        /* the metric's counters */
    int begins, metrics;          /* calls of eval_begin and eval_metric */
    int64_t seen_at[8];           /* seen at each metric call */
} blobs;

static int64_t train_count(int epoch, void *user)
{
    (void)epoch;
    ((blobs *)user)->test = 0;
    return N_TRAIN;
}

static int64_t test_count(int epoch, void *user)
{
    (void)epoch;
    ((blobs *)user)->test = 1;
    return N_TEST;
}

static int mlp_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    blobs *d = user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, IN});
    int32_t *y = rc_batch_add(out, "y", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        int64_t e = ex[i] + (d->test ? N_TRAIN : 0);
        memcpy(x + i * IN, d->x[e], sizeof d->x[0]);
        y[i] = d->y[e];
    }
    return 0;
}

/* x [B, IN] -> relu(x w1 + b1) w2 + b2 [B, CLASSES] */
static rc_tensor *logits(rc_graph *g, rc_params *p, const rc_batch *b)
{
    rc_tensor *h = rc_relu(g, rc_add(g, rc_matmul(g, rc_batch_input(g, b, "x"), rc_params_get(g, p, "w1"), 0, 0),
                                     rc_params_get(g, p, "b1")));
    return rc_add(g, rc_matmul(g, h, rc_params_get(g, p, "w2"), 0, 0), rc_params_get(g, p, "b2"));
}

static rc_tensor *mlp_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return rc_cross_entropy(g, logits(g, p, b), rc_batch_input(g, b, "y"), RC_IGNORE_INDEX);
}

static rc_tensor *mlp_predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return logits(g, p, b);
}

static int count_right(int64_t example, const float *row, int64_t len, void *user, rc_error *err)
{
    (void)err;
    blobs *d = user;
    int best = 0;
    for (int k = 1; k < len; k++)
        best = row[k] > row[best] ? k : best;
    d->correct += best == d->y[N_TRAIN + example];
    d->seen++;
    return 0;
}

static void begin(void *user)
{
    blobs *d = user;
    d->correct = d->seen = 0;
    d->begins++;
}

/* the accuracy of the rows since eval_begin; the counters are not reset here */
static double accuracy(void *user)
{
    blobs *d = user;
    if (d->metrics < 8)
        d->seen_at[d->metrics] = d->seen;
    d->metrics++;
    return d->seen ? (double)d->correct / (double)d->seen : 0.0;
}

/* the class is the quadrant of (x0, x1); the other inputs are noise */
static void make_blobs(blobs *d)
{
    rc_rng r = rc_rng_new(3);
    for (int i = 0; i < N_TRAIN + N_TEST; i++) {
        for (int k = 0; k < IN; k++)
            d->x[i][k] = (float)rc_rng_normal(&r);
        d->y[i] = (d->x[i][0] > 0) * 2 + (d->x[i][1] > 0);
    }
}

/* The MLP trained 4 epochs with an evaluation every epoch; returns the last accuracy. zeros:
 * every parameter declared RC_INIT_ZEROS, else rc_params_add alone (no values given). */
static double train_mlp(blobs *d, int zeros, int with_begin)
{
    rc_error err = {0};
    rc_params *p = rc_params_new();
    const rc_init *z = zeros ? &(rc_init){.kind = RC_INIT_ZEROS} : NULL;
    CHECK(rc_params_add_init(p, "w1", 2, (int64_t[]){IN, HID}, z) == 0 &&
          rc_params_add_init(p, "b1", 1, (int64_t[]){HID}, z) == 0 &&
          rc_params_add_init(p, "w2", 2, (int64_t[]){HID, CLASSES}, z) == 0 &&
          rc_params_add_init(p, "b2", 1, (int64_t[]){CLASSES}, z) == 0);
    if (zeros)
        CHECK(rc_params_init_normal(p, 0, 1) == 0);
    rc_deployer_options dopt = {.seed = 5};
    rc_deployer *dep = rc_deployer_new(NULL, NULL, &dopt, &err);
    rc_trainer *t = dep ? rc_trainer_new(dep, mlp_collate, mlp_loss, d, p, NULL, &err) : NULL;
    rc_train_options o = {.epochs = 4, .batch_size = 32, .lr = 3e-2, .shuffle = 1, .eval_every = N_TRAIN / 32,
                          .eval_predict = mlp_predict, .eval_output = count_right, .eval_metric = accuracy,
                          .eval_begin = with_begin ? begin : NULL, .metric_name = "accuracy",
                          .metric_higher_is_better = 1};
    d->begins = d->metrics = 0;
    rc_train_result res = {0};
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){train_count, d}, &(rc_examples){test_count, d}, &res, &err) == 0;
    CHECKF(ok, "fit: %s", err.msg);
    double acc = d->seen ? (double)d->correct / (double)d->seen : 0.0;
    rc_trainer_free(t);
    rc_deployer_free(dep);
    rc_params_free(p);
    return ok ? acc : NAN;
}

static void test_mlp_and_evaluations(void)
{
    static blobs d;
    make_blobs(&d);
    double acc = train_mlp(&d, 0, 1);
    printf("MLP from rc_params_add alone: test accuracy %.3f after 4 epochs\n", acc);
    CHECKF(acc >= 0.9, "test accuracy %.3f (at least 0.9 expected)", acc);
    /* 4 evaluations (every epoch; the last at the end), each of its own N_TEST rows */
    CHECKF(d.begins == 4 && d.metrics == 4, "eval_begin %d, eval_metric %d calls (4 each)", d.begins, d.metrics);
    for (int k = 0; k < 4 && k < d.metrics; k++)
        CHECKF(d.seen_at[k] == N_TEST, "evaluation %d counted %lld rows, not %d", k, (long long)d.seen_at[k], N_TEST);
    /* without eval_begin the counters are the user's: they run on */
    d.correct = d.seen = 0;
    train_mlp(&d, 0, 0);
    CHECKF(d.metrics == 4 && d.seen_at[1] == 2 * N_TEST, "without eval_begin: %lld rows at the second evaluation",
           (long long)d.seen_at[1]);
    /* the same network from zeros: the ReLU layer never gets a gradient */
    d.correct = d.seen = 0;
    double zero_acc = train_mlp(&d, 1, 1);
    printf("the same MLP from zeros: test accuracy %.3f\n", zero_acc);
    CHECKF(zero_acc < 0.5, "from zeros: accuracy %.3f (chance expected: that is what auto init fixes)", zero_acc);
}

/* ---- AdamW's constants ---------------------------------------------------------------- */

enum { W = 4 };
static const float xs[2][W] = {{1, -2, 0.5f, 3}, {-1, 1, 2, -0.5f}};
static const float w0[W] = {0.5f, -0.2f, 0.1f, 1.0f};

static int64_t two(int epoch, void *user)
{
    (void)epoch, (void)user;
    return 2;
}

static int lin_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    (void)user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, W});
    if (!x)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        memcpy(x + i * W, xs[ex[i]], sizeof xs[0]);
    return 0;
}

/* sum(w * x): its gradient is the example's x */
static rc_tensor *lin_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return rc_sum_all(g, rc_mul(g, rc_batch_input(g, b, "x"), rc_params_get(g, p, "w")));
}

/* two AdamW steps (torch.optim.AdamW's arithmetic, in double) on gradients xs[0], xs[1] */
static void adamw_by_hand(double lr, double b1, double b2, double eps, double *w)
{
    double m[W] = {0}, v[W] = {0};
    for (int k = 0; k < W; k++)
        w[k] = w0[k];
    for (int t = 1; t <= 2; t++)
        for (int k = 0; k < W; k++) {
            double g = xs[t - 1][k];
            m[k] = b1 * m[k] + (1 - b1) * g;
            v[k] = b2 * v[k] + (1 - b2) * g * g;
            double mh = m[k] / (1 - pow(b1, t)), vh = v[k] / (1 - pow(b2, t));
            w[k] -= lr * mh / (sqrt(vh) + eps);
        }
}

/* two steps of the trainer with options o (batch 1, in order); 0 or -1 with err */
static int adamw_fit(rc_train_options o, float *w, rc_error *err)
{
    rc_params *p = rc_params_new();
    int rc = rc_params_add(p, "w", 1, (int64_t[]){W}) || rc_params_write(p, 0, w0, err) ? -1 : 0;
    rc_deployer_options dopt = {.seed = 1};
    rc_deployer *d = rc ? NULL : rc_deployer_new(NULL, NULL, &dopt, err);
    rc_trainer *t = d ? rc_trainer_new(d, lin_collate, lin_loss, NULL, p, NULL, err) : NULL;
    o.steps = 2;
    o.batch_size = 1;
    rc = t && rc_trainer_fit(t, &o, (rc_examples){two, NULL}, NULL, NULL, err) == 0 &&
         rc_params_read(p, 0, w, err) == 0 ? 0 : -1;
    rc_trainer_free(t);
    rc_deployer_free(d);
    rc_params_free(p);
    return rc;
}

static double worst(const float *a, const double *b)
{
    double e = 0;
    for (int k = 0; k < W; k++)
        e = fmax(e, fabs(a[k] - b[k]) / fmax(fabs(b[k]), 1e-3));
    return e;
}

static void test_adamw_constants(void)
{
    rc_error err = {0};
    float got[W];
    double want[W], momentum[W];
    /* beta1 = 0 with adam_as_given: no momentum */
    adamw_by_hand(0.1, 0.0, 0.99, 1e-8, want);
    adamw_by_hand(0.1, 0.9, 0.99, 1e-8, momentum);
    rc_train_options o = {.lr = 0.1, .beta1 = 0, .beta2 = 0.99, .eps = 1e-8, .adam_as_given = 1};
    CHECKF(adamw_fit(o, got, &err) == 0, "%s", err.msg);
    CHECKF(worst(got, want) < 1e-5, "beta1 0 (as given): %.3g from AdamW by hand", worst(got, want));
    CHECKF(worst(got, momentum) > 1e-2, "beta1 0 gave beta1 0.9's weights (%.3g apart)", worst(got, momentum));
    /* left 0: the defaults 0.9, 0.999, 1e-8 */
    adamw_by_hand(0.1, 0.9, 0.999, 1e-8, want);
    CHECKF(adamw_fit((rc_train_options){.lr = 0.1}, got, &err) == 0, "%s", err.msg);
    CHECKF(worst(got, want) < 1e-5, "defaults: %.3g from AdamW(0.9, 0.999, 1e-8) by hand", worst(got, want));
    /* eps 0 as given */
    adamw_by_hand(0.1, 0.5, 0.9, 0.0, want);
    o = (rc_train_options){.lr = 0.1, .beta1 = 0.5, .beta2 = 0.9, .adam_as_given = 1};
    CHECKF(adamw_fit(o, got, &err) == 0, "%s", err.msg);
    CHECKF(worst(got, want) < 1e-5, "eps 0 (as given): %.3g from AdamW by hand", worst(got, want));
    /* refused, naming the field */
    o = (rc_train_options){.lr = 0.1, .beta1 = 1.0};
    CHECK(adamw_fit(o, got, &err) == -1 && check_has(err.msg, "beta1 1 is outside [0, 1)"));
    o = (rc_train_options){.lr = 0.1, .beta2 = -0.5};
    CHECK(adamw_fit(o, got, &err) == -1 && check_has(err.msg, "beta2 -0.5 is outside [0, 1)"));
    o = (rc_train_options){.lr = 0.1, .eps = -1e-8, .adam_as_given = 1, .beta1 = 0.9, .beta2 = 0.9};
    CHECK(adamw_fit(o, got, &err) == -1 && check_has(err.msg, "eps -1e-08"));
    /* SGD reads none of them */
    o = (rc_train_options){.lr = 0.1, .optimizer = "sgd", .beta1 = 7};
    CHECKF(adamw_fit(o, got, &err) == 0, "%s", err.msg);
}

int main(void)
{
    test_auto_init_values();
    test_mlp_and_evaluations();
    test_adamw_constants();
    return check_summary("test_fit_api");
}
