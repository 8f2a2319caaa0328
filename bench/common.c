/* common.c - the benchmarks' shared helpers (see common.h). */
#include "common.h"
#include "redco.h"
#include "redco/model.h"
#include "redco/pipeline.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_fail(const char *name, const char *what, const char *msg)
{
    fflush(stdout);
    fprintf(stderr, "%s: %s failed: %s\n", name, what, msg && msg[0] ? msg : "(no message)");
    exit(1);
}

json_t *bench_line(const char *name)
{
    json_t *o = json_object();
    bench_set_str(o, "bench", name);
    return o;
}

void bench_set_num(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, isfinite(v) ? json_real(v) : json_null());
}

void bench_set_int(json_t *o, const char *key, long long v)
{
    json_object_set_new(o, key, json_integer(v));
}

void bench_set_str(json_t *o, const char *key, const char *v)
{
    json_object_set_new(o, key, v ? json_string(v) : json_null());
}

int bench_print(json_t *o)
{
    char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!text)
        return -1;
    int rc = printf("%s\n", text) < 0 ? -1 : 0;
    free(text);
    fflush(stdout);
    return rc;
}

int bench_copy_init(bench_copy *c, int64_t n)
{
    c->n = n;
    c->a = malloc((size_t)n * sizeof *c->a);
    c->b = malloc((size_t)n * sizeof *c->b);
    if (!c->a || !c->b) {
        bench_copy_free(c);
        return -1;
    }
    /* the pages are touched by the threads that copy them */
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t i = n * id / nt; i < n * (id + 1) / nt; i++) {
            c->a[i] = (float)(i & 1023);
            c->b[i] = 0.0f;
        }
    }
    return 0;
}

double bench_copy_run(bench_copy *c, int passes)
{
    double t0 = bench_now();
#pragma omp parallel
    {
        /* each thread copies the part it touched, with the C library's copy, a to b then
         * b to a and so on */
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t lo = c->n * id / nt, hi = c->n * (id + 1) / nt;
        for (int p = 0; p < passes; p++) {
            float *to = p % 2 ? c->a : c->b, *from = p % 2 ? c->b : c->a;
            memcpy(to + lo, from + lo, (size_t)(hi - lo) * sizeof *to);
        }
    }
    return bench_now() - t0;
}

double bench_copy_gbs(const bench_copy *c, int passes, double seconds)
{
    return 2.0 * (double)passes * (double)c->n * sizeof(float) / seconds * 1e-9;
}

void bench_copy_free(bench_copy *c)
{
    free(c->a);
    free(c->b);
    c->a = c->b = NULL;
}

double bench_plan_best(const char *name, rc_plan *p, int reps)
{
    rc_error err = {0};
    if (rc_plan_run(p, &err))
        bench_fail(name, "rc_plan_run", err.msg);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        if (rc_plan_run(p, &err))
            bench_fail(name, "rc_plan_run", err.msg);
        double dt = bench_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

rc_dtype bench_float_dtype(const char *name)
{
    if (!name || !strcmp(name, "f32"))
        return RC_F32;
    return !strcmp(name, "bf16") ? RC_BF16 : !strcmp(name, "f16") ? RC_F16 : RC_DTYPE_COUNT;
}

const char *bench_take_flag(int *argc, char **argv, const char *flag)
{
    for (int i = 1; i + 1 < *argc; i++)
        if (!strcmp(argv[i], flag)) {
            const char *d = argv[i + 1];
            memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 2) * sizeof *argv);
            *argc -= 2;
            return d;
        }
    return NULL;
}

int bench_take_switch(int *argc, char **argv, const char *flag)
{
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], flag)) {
            memmove(argv + i, argv + i + 1, (size_t)(*argc - i - 1) * sizeof *argv);
            *argc -= 1;
            return 1;
        }
    return 0;
}

void bench_top_ops(const double *op_s, double ms_per_s, int k, char *out, size_t n)
{
    int used[RC_OP_COUNT] = {0};
    out[0] = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int op = 0; op < RC_OP_COUNT; op++)
            if (!used[op] && op_s[op] > 0 && (best < 0 || op_s[op] > op_s[best]))
                best = op;
        if (best < 0)
            break;
        used[best] = 1;
        size_t at = strlen(out);
        snprintf(out + at, n - at, "%s%s %.3f", j ? ", " : "", rc_op_name((rc_op)best), op_s[best] * ms_per_s);
    }
}

int bench_lm_batch(rc_batch *out, const int32_t *tok, int T, const int64_t *ex, int n, rc_error *err)
{
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !tg)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            ids[i * T + t] = tok[ex[i] * T + t];
            tg[i * T + t] = tok[ex[i] * T + t + 1];
        }
    return 0;
}

rc_tensor *bench_lm_loss(rc_graph *g, rc_model *m, const rc_batch *b)
{
    return rc_cross_entropy(g, rc_model_logits(g, m, rc_batch_input(g, b, "ids"), NULL, NULL),
                            rc_batch_input(g, b, "targets"), -100);
}

int bench_fit_preset(rc_deployer *d, const char *preset, rc_model **model, int64_t *numel,
                     rc_collate_fn collate, rc_loss_fn loss, rc_examples ex, const rc_train_options *o,
                     const char **what, rc_error *err)
{
    *what = "rc_model_create";
    *model = rc_model_create(preset, 1, err);
    if (!*model)
        return -1;
    if (numel)
        *numel = rc_params_numel((*model)->params);
    *what = "rc_trainer_new";
    rc_trainer *t = rc_trainer_new(d, collate, loss, ex.user, (*model)->params, *model, err);
    int rc = -1;
    if (t) {
        *what = "rc_trainer_fit";
        rc = rc_trainer_fit(t, o, ex, NULL, NULL, err);
    }
    rc_trainer_free(t);
    rc_model_free(*model);
    *model = NULL;
    return rc;
}
