/* test_api.c - public functions of redco.h, shard.h and safetensors.h that no other test
 * calls: dtype helpers, rc_shape_str, rc_add_scalar, one-hot and the vocabulary-shard ops,
 * the fused cross-entropy gradient, rc_mp_max in a world of one, plan estimates, per-run
 * dropout keys and kernel timing, shard take/put with rc_shard_fix, and streamed
 * safetensors writing. */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "redco.h"
#include "redco/safetensors.h"
#include "redco/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An input leaf and its host values. */
typedef struct {
    rc_tensor *leaf;
    const void *host;
} feed;

/* runs out[n] of g with the inputs in[nin] set; the plan (it holds the outputs) or NULL */
static rc_plan *run(rc_graph *g, rc_tensor **out, int n, const feed *in, int nin)
{
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, out, n, &err);
    int rc = p ? 0 : -1;
    for (int i = 0; i < nin && rc == 0; i++)
        rc = rc_plan_set_input(p, in[i].leaf, in[i].host, &err);
    if (rc == 0)
        rc = rc_plan_run(p, &err);
    CHECKF(rc == 0, "%s", err.msg[0] ? err.msg : rc_graph_error(g));
    if (rc)
        rc_plan_free(p);
    return rc ? NULL : p;
}

/* t's values after p's last run, copied into host (one CHECK) */
static void read_values(const rc_plan *p, const rc_tensor *t, void *host)
{
    rc_error err = {0};
    CHECKF(rc_plan_read(p, t, host, &err) == 0, "%s", err.msg);
}

static void test_dtypes_and_shapes(void)
{
    CHECK(rc_dtype_size(RC_F32) == 4 && rc_dtype_size(RC_F64) == 8 && rc_dtype_size(RC_I32) == 4);
    CHECK(rc_dtype_is_float(RC_F32) && rc_dtype_is_float(RC_F64) && !rc_dtype_is_float(RC_I32));
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "a", RC_F32, 2, (int64_t[]){4, 8});
    char buf[64];
    CHECKF(!strcmp(rc_shape_str(a, buf, sizeof buf), "[4, 8]"), "%s", buf);
    rc_tensor *s = rc_sum_all(g, a);
    CHECKF(!strcmp(rc_shape_str(s, buf, sizeof buf), "[]"), "scalar: %s", buf);
    rc_graph_free(g);
}

static void test_scalar_and_one_hot(void)
{
    rc_graph *g = rc_graph_new();
    float x[3] = {1, -2, 0.5f};
    int32_t ids[4] = {2, 0, -100, 3};
    rc_tensor *a = rc_input(g, "x", RC_F32, 1, (int64_t[]){3});
    rc_tensor *i = rc_input(g, "ids", RC_I32, 1, (int64_t[]){4});
    rc_tensor *y = rc_add_scalar(g, a, 2.5);
    rc_tensor *oh = rc_one_hot(g, i, 4, -100, RC_F32);
    /* a shard of the vocabulary: ids [1, 3) of 4 */
    rc_tensor *ohs = rc_one_hot_shard(g, i, 2, -100, RC_F32, 1, 4);
    float table[2][3] = {{1, 2, 3}, {4, 5, 6}};
    rc_tensor *tb = rc_input(g, "table", RC_F32, 2, (int64_t[]){2, 3});
    rc_tensor *i2 = rc_input(g, "ids2", RC_I32, 1, (int64_t[]){3});
    rc_tensor *emb = rc_embedding_shard(g, tb, i2, 1, 4);
    int32_t ids2[3] = {2, 0, 1};
    rc_tensor *outs[4] = {y, oh, ohs, emb};
    feed in[4] = {{a, x}, {i, ids}, {tb, table}, {i2, ids2}};
    rc_plan *p = run(g, outs, 4, in, 4);
    if (p) {
        float v[3], o[4][4], os[4][2], e[3][3];
        read_values(p, y, v);
        read_values(p, oh, o);
        read_values(p, ohs, os);
        read_values(p, emb, e);
        CHECKF(v[0] == 3.5f && v[1] == 0.5f && v[2] == 3.0f, "x + 2.5 = %g %g %g", v[0], v[1], v[2]);
        float want[4][4] = {{0, 0, 1, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}};
        CHECK(oh->ndim == 2 && oh->shape[1] == 4 && !memcmp(o, want, sizeof want));
        float want_s[4][2] = {{0, 1}, {0, 0}, {0, 0}, {0, 0}};
        CHECK(ohs->shape[1] == 2 && !memcmp(os, want_s, sizeof want_s));
        float want_e[3][3] = {{4, 5, 6}, {0, 0, 0}, {1, 2, 3}};
        CHECK(emb->ndim == 2 && !memcmp(e, want_e, sizeof want_e));
    }
    rc_plan_free(p);
    rc_graph_free(g);
}

/* rc_cross_entropy_grad equals g_out times the gradient autodiff finds for rc_cross_entropy */
static void test_cross_entropy_grad(void)
{
    enum { N = 5, V = 7 };
    float logits[N * V], gout = 0.75f;
    int32_t tg[N] = {3, -100, 0, 6, 2};
    rc_rng r = rc_rng_new(3);
    for (int k = 0; k < N * V; k++)
        logits[k] = (float)rc_rng_normal(&r);
    rc_graph *g = rc_graph_new();
    rc_tensor *l = rc_param(g, "logits", RC_F32, 2, (int64_t[]){N, V});
    rc_tensor *t = rc_input(g, "targets", RC_I32, 1, (int64_t[]){N});
    rc_tensor *go = rc_input(g, "gout", RC_F32, 0, NULL);
    rc_tensor *loss = rc_scale(g, rc_cross_entropy(g, l, t, -100), gout);
    rc_tensor *grad;
    CHECK(rc_backward(g, loss, &l, 1, &grad) == 0);
    rc_tensor *fused = rc_cross_entropy_grad(g, l, t, go, -100);
    rc_tensor *outs[2] = {grad, fused};
    feed in[3] = {{l, logits}, {t, tg}, {go, &gout}};
    rc_plan *p = run(g, outs, 2, in, 3);
    if (p) {
        float a[N * V], b[N * V];
        read_values(p, grad, a);
        read_values(p, fused, b);
        double e = 0;
        for (int k = 0; k < N * V; k++)
            e = fmax(e, fabs((double)a[k] - b[k]));
        CHECKF(e < 1e-6, "fused cross-entropy gradient differs by %g", e);
        CHECK(b[1 * V + 3] == 0.0f); /* the ignored row */
    }
    rc_plan_free(p);
    rc_graph_free(g);
}

/* A plan's dropout masks follow rc_plan_set_rng; rc_mp_max is the identity in a world of
 * one; timing fills op_s only when on; rc_plan_estimate gives the plan's own figures. */
static void test_plan_options(void)
{
    enum { N = 256 };
    float x[N];
    for (int k = 0; k < N; k++)
        x[k] = 1.0f + (float)k;
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "x", RC_F32, 1, (int64_t[]){N});
    rc_tensor *d = rc_dropout(g, rc_mp_max(g, a), 0.5, rc_rng_new(1));
    rc_tensor *m = rc_mp_max(g, a);
    rc_tensor *outs[2] = {d, m};
    rc_error err = {0};
    rc_plan_stats est;
    CHECKF(rc_plan_estimate(g, outs, 2, &est, &err) == 0, "%s", err.msg);
    rc_plan *p = rc_plan_new(g, outs, 2, &err);
    CHECKF(p && rc_plan_set_input(p, a, x, &err) == 0, "%s", err.msg);
    if (!p) {
        rc_graph_free(g);
        return;
    }
    rc_plan_stats st = rc_plan_get_stats(p);
    CHECKF(est.nodes == st.nodes && est.peak_bytes == st.peak_bytes, "estimate %lld nodes %zu bytes, plan %lld %zu",
           (long long)est.nodes, est.peak_bytes, (long long)st.nodes, st.peak_bytes);
    float m1[N], m2[N], m3[N], mx[N];
    rc_plan_set_rng(p, rc_rng_new(10));
    CHECK(rc_plan_run(p, &err) == 0);
    read_values(p, d, m1);
    read_values(p, m, mx);
    CHECK(!memcmp(mx, x, sizeof x));
    st = rc_plan_get_stats(p);
    double op_sum = 0;
    for (int k = 0; k < RC_OP_COUNT; k++)
        op_sum += st.op_s[k];
    CHECK(op_sum == 0 && st.last_kernel_s == 0); /* timing is off by default */
    rc_plan_set_rng(p, rc_rng_new(11));
    rc_plan_set_timing(p, 1);
    CHECK(rc_plan_run(p, &err) == 0);
    read_values(p, d, m2);
    st = rc_plan_get_stats(p);
    for (int k = 0; k < RC_OP_COUNT; k++)
        op_sum += st.op_s[k];
    CHECKF(fabs(op_sum - st.last_kernel_s) <= 1e-9 * fmax(1, st.last_kernel_s) && st.last_kernel_s <= st.last_run_s,
           "timing: ops sum to %g s, kernels %g s, run %g s", op_sum, st.last_kernel_s, st.last_run_s);
    rc_plan_set_rng(p, rc_rng_new(10));
    CHECK(rc_plan_run(p, &err) == 0);
    read_values(p, d, m3);
    int zeros = 0;
    for (int k = 0; k < N; k++)
        zeros += m1[k] == 0.0f;
    CHECKF(zeros > N / 4 && zeros < 3 * N / 4, "%d of %d dropped at p = 0.5", zeros, N);
    CHECK(memcmp(m1, m2, sizeof m1) != 0); /* another key, another mask */
    CHECK(memcmp(m1, m3, sizeof m1) == 0); /* the same key, the same mask */
    rc_plan_free(p);
    rc_graph_free(g);
}

/* rc_normal: a RC_RNG_RUN normal follows rc_plan_set_rng, a RC_RNG_STEP one follows
 * rc_plan_set_step_rng only (the trainer's noise shared by data-parallel replicas); bad
 * arguments are refused by name. */
static void test_normal_keys(void)
{
    enum { N = 512 };
    rc_graph *g = rc_graph_new();
    int64_t shape[2] = {16, N / 16};
    rc_tensor *run = rc_normal(g, RC_F32, 2, shape, rc_rng_new(3), RC_RNG_RUN);
    rc_tensor *step = rc_normal(g, RC_F32, 2, shape, rc_rng_new(3), RC_RNG_STEP);
    rc_tensor *outs[2] = {run, step};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, outs, 2, &err);
    CHECKF(p != NULL, "%s", err.msg);
    float r[3][N], s[3][N];
    rc_rng keys[3][2] = {{rc_rng_new(1), rc_rng_new(2)}, {rc_rng_new(9), rc_rng_new(2)}, {rc_rng_new(9), rc_rng_new(8)}};
    for (int k = 0; p && k < 3; k++) {
        rc_plan_set_rng(p, keys[k][0]);
        rc_plan_set_step_rng(p, keys[k][1]);
        CHECKF(rc_plan_run(p, &err) == 0, "%s", err.msg);
        read_values(p, run, r[k]);
        read_values(p, step, s[k]);
    }
    CHECK(memcmp(r[0], r[1], sizeof r[0]) != 0 && memcmp(r[1], r[2], sizeof r[0]) == 0);
    CHECK(memcmp(s[0], s[1], sizeof s[0]) == 0 && memcmp(s[1], s[2], sizeof s[0]) != 0);
    CHECK(memcmp(r[0], s[0], sizeof r[0]) != 0); /* one node key, but the plan's keys differ */
    rc_plan_free(p);
    CHECK(rc_normal(g, RC_I32, 2, shape, rc_rng_new(1), RC_RNG_RUN) == NULL);
    CHECKF(rc_graph_error(g) && strstr(rc_graph_error(g), "normal"), "%s", rc_graph_error(g));
    rc_graph_free(g);
    g = rc_graph_new();
    CHECK(rc_normal(g, RC_F32, 2, shape, rc_rng_new(1), (rc_rng_scope)7) == NULL);
    CHECKF(rc_graph_error(g) && strstr(rc_graph_error(g), "scope"), "%s", rc_graph_error(g));
    rc_graph_free(g);
}

/* rc_shard_fix splits a [6, 4] parameter's rows over 2 shards; take then put gives the
 * whole tensor back; a split the shard count does not divide is refused by name. */
static void test_shard_fix_put(void)
{
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *w = rc_param(g, "w", RC_F32, 2, (int64_t[]){6, 4});
    float full[24], back[24] = {0}, part[12];
    for (int k = 0; k < 24; k++)
        full[k] = (float)k;
    rc_shard_spec s = {0};
    CHECKF(rc_shard_fix(&s, w, 0, 0, 2, &err) == 0, "%s", err.msg);
    CHECK(s.fixed && s.axis == 0);
    for (int r = 0; r < 2; r++) {
        rc_shard_take(&s, w, 2, r, full, part);
        CHECK(part[0] == (float)(12 * r)); /* rows 3r .. 3r + 2 */
        rc_shard_put(&s, w, 2, r, part, back);
    }
    CHECK(!memcmp(full, back, sizeof full));
    CHECKF(rc_shard_fix(&s, w, 1, 0, 3, &err) == -1 && check_has(err.msg, "w"), "%s", err.msg);
    rc_graph_free(g);
}

/* rc_shard_partition_outputs: y = x W with W [4, 6] split on its output features over 2
 * shards; a kept output is the rank's columns of y (its local graph runs alone), an output
 * not kept is whole. */
static void test_partition_outputs(void)
{
    rc_error err = {0};
    float x[2 * 4], w[4 * 6];
    for (int k = 0; k < 8; k++)
        x[k] = (float)(k - 3);
    for (int k = 0; k < 24; k++)
        w[k] = 0.5f * (float)k;
    rc_graph *g = rc_graph_new();
    rc_tensor *xi = rc_input(g, "x", RC_F32, 2, (int64_t[]){2, 4});
    rc_tensor *wp = rc_param(g, "w", RC_F32, 2, (int64_t[]){4, 6});
    rc_tensor *y = rc_matmul(g, xi, wp, 0, 0);
    for (int rank = 0; rank < 2; rank++) {
        for (int keep = 0; keep < 2; keep++) {
            rc_shard_spec s = {0};
            CHECKF(rc_shard_fix(&s, wp, 1, 0, 2, &err) == 0, "%s", err.msg);
            rc_shard_graph local = {0};
            int keep_split[1] = {keep};
            CHECKF(rc_shard_partition_outputs(g, &y, 1, keep_split, &wp, 1, 2, rank, 0, &s, &local, &err) == 0,
                   "%s", err.msg);
            rc_tensor *out = local.outs ? local.outs[0] : NULL;
            CHECKF(out && local.nout == 1 && out->shape[0] == 2 && out->shape[1] == (keep ? 3 : 6),
                   "rank %d keep %d: output %lld columns", rank, keep, out ? (long long)out->shape[1] : -1LL);
            CHECK(local.params && local.params[0]->shape[0] == 4 && local.params[0]->shape[1] == 3);
            if (keep && out && local.params) {
                float part[12];
                rc_shard_take(&s, wp, 2, rank, w, part);
                feed in[2] = {{local.params[0], part}, {NULL, x}};
                int found = 0;
                for (int i = 0; i < rc_graph_size(local.g); i++) { /* the input keeps its name */
                    rc_tensor *t = rc_graph_node(local.g, i);
                    if (t->op == RC_OP_LEAF && !strcmp(t->name, "x"))
                        in[1].leaf = t, found++;
                }
                CHECK(found == 1);
                rc_plan *p = found == 1 ? run(local.g, &out, 1, in, 2) : NULL;
                float yv[2 * 3];
                const float *v = NULL;
                if (p) {
                    read_values(p, out, yv);
                    v = yv;
                }
                double e = v ? 0 : 1;
                for (int r = 0; v && r < 2; r++)
                    for (int c = 0; c < 3; c++) {
                        double want = 0;
                        for (int k = 0; k < 4; k++)
                            want += (double)x[r * 4 + k] * w[k * 6 + rank * 3 + c];
                        e = fmax(e, fabs(v[r * 3 + c] - want));
                    }
                CHECKF(e < 1e-4, "rank %d: kept columns differ by %g", rank, e);
                rc_plan_free(p);
            }
            rc_shard_graph_free(&local);
        }
    }
    rc_graph_free(g);
}

/* rc_safetensors_write_from: entries with data NULL come from the source, in order */
static int source(void *ctx, int i, const void **data, rc_error *err)
{
    static float t1[3];
    int *calls = ctx;
    (*calls)++;
    if (i != 1)
        return rc_error_set(err, RC_ERR_ARG, "source asked for entry %d", i);
    for (int k = 0; k < 3; k++)
        t1[k] = 10.0f + (float)k;
    *data = t1;
    return 0;
}

static int failing_source(void *ctx, int i, const void **data, rc_error *err)
{
    (void)ctx, (void)data;
    return rc_error_set(err, RC_ERR_IO, "no data for entry %d", i);
}

static void test_safetensors_from(void)
{
    char dir[] = "/tmp/redco_test_api_XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    float t0[2] = {1, 2};
    int64_t s0[1] = {2}, s1[1] = {3};
    rc_st_entry e[2] = {{"a", "F32", 1, s0, t0}, {"b", "F32", 1, s1, NULL}};
    const char *meta[2] = {"format", "pt"};
    rc_error err = {0};
    int calls = 0;
    CHECKF(rc_safetensors_write_from(path, 2, e, 1, meta, source, &calls, &err) == 0, "%s", err.msg);
    CHECK(calls == 1);
    rc_safetensors *f = rc_safetensors_open(path, &err);
    CHECKF(f, "%s", err.msg);
    float b[3] = {0};
    CHECK(f && rc_safetensors_count(f) == 2 && rc_safetensors_read_f32(f, rc_safetensors_find(f, "b"), b, 3, &err) == 0 &&
          b[0] == 10 && b[2] == 12 && !strcmp(rc_safetensors_metadata(f, "format"), "pt"));
    rc_safetensors_close(f);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    CHECK(rc_safetensors_write_from(path, 2, e, 0, NULL, failing_source, NULL, &err) == -1 &&
          check_has(err.msg, "no data for entry 1"));
    check_rm_tree(dir);
}

int main(void)
{
    test_dtypes_and_shapes();
    test_scalar_and_one_hot();
    test_cross_entropy_grad();
    test_plan_options();
    test_normal_keys();
    test_shard_fix_put();
    test_partition_outputs();
    test_safetensors_from();
    return check_summary("test_api");
}
