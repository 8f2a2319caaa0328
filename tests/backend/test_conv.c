/* test_conv.c - 2-D convolution and pooling on the CPU: forward against direct loops (f32
 * and f64, many geometries), gradients by finite differences (f64), shape errors, and
 * bf16 / f16 (the f32 kernels on widened values) against f32. Then the OpenCL backend's
 * kernels (f32, bf16, f16) against the CPU's f32 ones: without an OpenCL device
 * that part prints why and passes, unless REDCO_REQUIRE_OPENCL=1 (CI sets it). */
#include "check.h"
#include "gradcheck.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 99;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

typedef struct {
    int64_t n, c, h, w, o, kh, kw;
    rc_conv2d_params p;
    int bias;
} conv_case;

/* y [N, O, OH, OW] by the definition */
static void conv_naive(const conv_case *k, const double *x, const double *w, const double *b,
                       double *y, int64_t oh, int64_t ow)
{
    int sh = k->p.stride[0] ? k->p.stride[0] : 1, sw = k->p.stride[1] ? k->p.stride[1] : 1;
    int dh = k->p.dilation[0] ? k->p.dilation[0] : 1, dw = k->p.dilation[1] ? k->p.dilation[1] : 1;
    int groups = k->p.groups ? k->p.groups : 1;
    int64_t cg = k->c / groups, og = k->o / groups;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double acc = b ? b[o] : 0;
                    int64_t g = o / og;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < k->kh; i++)
                            for (int64_t j = 0; j < k->kw; j++) {
                                int64_t iy = oy * sh - k->p.padding[0] + i * dh;
                                int64_t ix = ox * sw - k->p.padding[1] + j * dw;
                                if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w)
                                    continue;
                                acc += x[((n * k->c + g * cg + c) * k->h + iy) * k->w + ix] *
                                       w[((o * cg + c) * k->kh + i) * k->kw + j];
                            }
                    y[((n * k->o + o) * oh + oy) * ow + ox] = acc;
                }
}

static void *random_values(int64_t n, rc_dtype t, double *copy)
{
    void *v = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        double d = 2 * uniform() - 1;
        if (t == RC_F32)
            ((float *)v)[i] = (float)d, copy[i] = (float)d;
        else
            ((double *)v)[i] = d, copy[i] = d;
    }
    return v;
}

static double value(const void *v, rc_dtype t, int64_t i)
{
    return t == RC_F32 ? ((const float *)v)[i] : ((const double *)v)[i];
}

static void check_conv_forward(const conv_case *k, rc_dtype t)
{
    int groups = k->p.groups ? k->p.groups : 1;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", t, 4, (int64_t[]){k->n, k->c, k->h, k->w});
    rc_tensor *w = rc_input(g, "w", t, 4, (int64_t[]){k->o, k->c / groups, k->kh, k->kw});
    rc_tensor *b = k->bias ? rc_input(g, "b", t, 1, (int64_t[]){k->o}) : NULL;
    rc_tensor *y = rc_conv2d(g, x, w, b, &k->p);
    CHECKF(y != NULL, "conv2d build: %s", rc_graph_error(g));
    if (!y) {
        rc_graph_free(g);
        return;
    }
    int64_t nx = rc_tensor_numel(x), nw = rc_tensor_numel(w), ny = rc_tensor_numel(y);
    double *xd = malloc((size_t)nx * 8), *wd = malloc((size_t)nw * 8), bd[64];
    double *ref = malloc((size_t)ny * 8);
    void *xv = random_values(nx, t, xd), *wv = random_values(nw, t, wd);
    void *bv = k->bias ? random_values(k->o, t, bd) : NULL, *yv = malloc((size_t)ny * 8);
    conv_naive(k, xd, wd, k->bias ? bd : NULL, ref, y->shape[2], y->shape[3]);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    int ok = p && rc_plan_set_input(p, x, xv, &err) == 0 && rc_plan_set_input(p, w, wv, &err) == 0 &&
             (!b || rc_plan_set_input(p, b, bv, &err) == 0) && rc_plan_run(p, &err) == 0 &&
             rc_plan_read(p, y, yv, &err) == 0;
    CHECKF(ok, "conv2d run: %s", err.msg);
    double worst = 0, tol = t == RC_F32 ? 1e-5 : 1e-12;
    for (int64_t i = 0; ok && i < ny; i++) {
        double e = fabs(value(yv, t, i) - ref[i]) / fmax(1, fabs(ref[i]));
        worst = e > worst ? e : worst;
    }
    CHECKF(worst <= tol, "conv2d %s x [%lld %lld %lld %lld] w [%lld, %lld, %lld] stride %d,%d pad %d,%d dil %d,%d "
           "groups %d: error %.3g", rc_dtype_name(t), (long long)k->n, (long long)k->c, (long long)k->h,
           (long long)k->w, (long long)k->o, (long long)k->kh, (long long)k->kw, k->p.stride[0], k->p.stride[1],
           k->p.padding[0], k->p.padding[1], k->p.dilation[0], k->p.dilation[1], groups, worst);
    rc_plan_free(p);
    rc_graph_free(g);
    free(xd), free(wd), free(ref), free(xv), free(wv), free(bv), free(yv);
}

static const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, {{1, 1}, {0, 0}, {1, 1}, 1}, 1},
    {2, 3, 7, 6, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, 0},
    {1, 4, 9, 8, 6, 3, 2, {{2, 2}, {1, 0}, {1, 1}, 2}, 1},
    {2, 4, 9, 9, 4, 3, 3, {{1, 2}, {2, 2}, {2, 1}, 4}, 1},   /* depthwise */
    {1, 2, 11, 10, 3, 2, 3, {{2, 1}, {2, 1}, {2, 2}, 1}, 0},
    {3, 6, 5, 5, 4, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 2}, 1},   /* pointwise */
    {2, 5, 6, 7, 5, 1, 1, {{2, 2}, {0, 1}, {1, 1}, 1}, 1},
    {1, 3, 4, 4, 2, 4, 4, {{1, 1}, {0, 0}, {1, 1}, 1}, 1},   /* kernel = input */
    {2, 8, 12, 12, 8, 5, 3, {{2, 1}, {2, 1}, {1, 2}, 2}, 0},
    {2, 16, 14, 14, 32, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, 1},
};

/* ---- pooling ---------------------------------------------------------------------------- */

static void pool_naive(int max, const int64_t *s, const rc_pool2d_params *p, const double *x,
                       double *y, int64_t oh, int64_t ow)
{
    int sh = p->stride[0] ? p->stride[0] : p->kernel[0], sw = p->stride[1] ? p->stride[1] : p->kernel[1];
    for (int64_t pl = 0; pl < s[0] * s[1]; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double acc = max ? -INFINITY : 0;
                for (int i = 0; i < p->kernel[0]; i++)
                    for (int j = 0; j < p->kernel[1]; j++) {
                        int64_t iy = oy * sh - p->padding[0] + i, ix = ox * sw - p->padding[1] + j;
                        if (iy < 0 || iy >= s[2] || ix < 0 || ix >= s[3])
                            continue;
                        double v = x[(pl * s[2] + iy) * s[3] + ix];
                        acc = max ? fmax(acc, v) : acc + v;
                    }
                y[(pl * oh + oy) * ow + ox] = max ? acc : acc / (p->kernel[0] * p->kernel[1]);
            }
}

static void check_pool_forward(int max, const int64_t *s, const rc_pool2d_params *pp, rc_dtype t)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", t, 4, s);
    rc_tensor *y = max ? rc_max_pool2d(g, x, pp) : rc_avg_pool2d(g, x, pp);
    CHECKF(y != NULL, "pool build: %s", rc_graph_error(g));
    if (!y) {
        rc_graph_free(g);
        return;
    }
    int64_t nx = rc_tensor_numel(x), ny = rc_tensor_numel(y);
    double *xd = malloc((size_t)nx * 8), *ref = malloc((size_t)ny * 8);
    void *xv = random_values(nx, t, xd), *yv = malloc((size_t)ny * 8);
    pool_naive(max, s, pp, xd, ref, y->shape[2], y->shape[3]);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    int ok = p && rc_plan_set_input(p, x, xv, &err) == 0 && rc_plan_run(p, &err) == 0 &&
             rc_plan_read(p, y, yv, &err) == 0;
    CHECKF(ok, "pool run: %s", err.msg);
    double worst = 0;
    for (int64_t i = 0; ok && i < ny; i++)
        worst = fmax(worst, fabs(value(yv, t, i) - ref[i]));
    CHECKF(worst <= (t == RC_F32 ? 1e-6 : 1e-14), "%s_pool2d %s [%lld %lld %lld %lld] kernel %d,%d stride %d,%d "
           "pad %d,%d: error %.3g", max ? "max" : "avg", rc_dtype_name(t), (long long)s[0], (long long)s[1],
           (long long)s[2], (long long)s[3], pp->kernel[0], pp->kernel[1], pp->stride[0], pp->stride[1],
           pp->padding[0], pp->padding[1], worst);
    rc_plan_free(p);
    rc_graph_free(g);
    free(xd), free(ref), free(xv), free(yv);
}

static const struct {
    int64_t shape[4];
    rc_pool2d_params p;
} pool_cases[] = {
    {{2, 3, 8, 8}, {{2, 2}, {0, 0}, {0, 0}}},
    {{1, 2, 7, 9}, {{3, 3}, {2, 2}, {1, 1}}},
    {{2, 2, 6, 5}, {{3, 2}, {1, 2}, {1, 0}}},
    {{1, 3, 5, 5}, {{5, 5}, {1, 1}, {2, 2}}},
    {{3, 1, 10, 4}, {{4, 1}, {3, 1}, {2, 0}}},
};

/* ---- gradients by finite differences ----------------------------------------------------------- */

#define F64(...) {.dtype = RC_F64, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}

static rc_tensor *b_conv(rc_graph *g, rc_tensor **x)
{
    return rc_conv2d(g, x[0], x[1], x[2], &(rc_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 1});
}
static rc_tensor *b_conv_stride(rc_graph *g, rc_tensor **x)
{
    return rc_conv2d(g, x[0], x[1], x[2], &(rc_conv2d_params){{2, 1}, {2, 0}, {1, 2}, 2});
}
static rc_tensor *b_conv_depthwise(rc_graph *g, rc_tensor **x)
{
    return rc_conv2d(g, x[0], x[1], NULL, &(rc_conv2d_params){{2, 2}, {1, 1}, {2, 2}, 4});
}
static rc_tensor *b_conv_pointwise(rc_graph *g, rc_tensor **x)
{
    return rc_conv2d(g, x[0], x[1], x[2], NULL);
}
/* the tanh makes the upstream gradient of the conv vary */
static rc_tensor *b_conv_chain(rc_graph *g, rc_tensor **x)
{
    rc_tensor *y = rc_conv2d(g, x[0], x[1], NULL, &(rc_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 1});
    return rc_tanh(g, rc_conv2d(g, rc_tanh(g, y), x[2], NULL, &(rc_conv2d_params){{1, 2}, {1, 1}, {1, 1}, 1}));
}
static rc_tensor *b_max_pool(rc_graph *g, rc_tensor **x)
{
    return rc_max_pool2d(g, x[0], &(rc_pool2d_params){{2, 2}, {0, 0}, {0, 0}});
}
static rc_tensor *b_max_pool_overlap(rc_graph *g, rc_tensor **x)
{
    return rc_max_pool2d(g, x[0], &(rc_pool2d_params){{3, 2}, {2, 1}, {1, 1}});
}
static rc_tensor *b_avg_pool(rc_graph *g, rc_tensor **x)
{
    return rc_avg_pool2d(g, x[0], &(rc_pool2d_params){{3, 3}, {2, 2}, {1, 1}});
}
static rc_tensor *b_avg_pool_plain(rc_graph *g, rc_tensor **x)
{
    return rc_avg_pool2d(g, x[0], &(rc_pool2d_params){{2, 3}, {0, 0}, {0, 0}});
}

static const gc_case grad_cases[] = {
    {"conv2d pad 1", 3, {F64(2, 3, 5, 4), F64(4, 3, 3, 3), F64(4)}, b_conv, 1, 0, 0},
    {"conv2d stride dil groups", 3, {F64(2, 4, 7, 6), F64(6, 2, 3, 2), F64(6)}, b_conv_stride, 1, 0, 0},
    {"conv2d depthwise", 2, {F64(1, 4, 8, 7), F64(4, 1, 3, 3)}, b_conv_depthwise, 1, 0, 0},
    {"conv2d 1x1", 3, {F64(2, 4, 3, 3), F64(5, 4, 1, 1), F64(5)}, b_conv_pointwise, 1, 0, 0},
    {"conv2d chain", 3, {F64(2, 2, 6, 6), F64(3, 2, 2, 2), F64(2, 3, 3, 3)}, b_conv_chain, 1, 0, 0},
    {"max_pool2d", 1, {F64(2, 2, 4, 6)}, b_max_pool, 1, 0, 0},
    {"max_pool2d overlap pad", 1, {F64(1, 3, 7, 5)}, b_max_pool_overlap, 1, 0, 0},
    {"avg_pool2d pad", 1, {F64(2, 2, 7, 6)}, b_avg_pool, 1, 0, 0},
    {"avg_pool2d", 1, {F64(1, 2, 4, 6)}, b_avg_pool_plain, 1, 0, 0},
};

/* ---- errors --------------------------------------------------------------------------------- */

static void check_error(rc_graph *g, rc_tensor *y, const char *a, const char *b)
{
    const char *msg = rc_graph_error(g);
    CHECKF(!y && msg && strstr(msg, a) && strstr(msg, b), "expected an error naming '%s' and '%s', got %s",
           a, b, msg ? msg : "(none)");
}

static void test_errors(void)
{
    struct {
        int64_t x[4], w[4];
        int xdim;
        rc_conv2d_params p;
        const char *a, *b;
    } bad[] = {
        {{2, 3, 8, 8}, {4, 2, 3, 3}, 4, {{1, 1}, {0, 0}, {1, 1}, 1}, "conv2d", "[4, 2, 3, 3]"},
        {{2, 3, 8, 8}, {4, 1, 3, 3}, 4, {{1, 1}, {0, 0}, {1, 1}, 3}, "conv2d", "groups 3"},
        {{2, 4, 8, 8}, {3, 2, 3, 3}, 4, {{1, 1}, {0, 0}, {1, 1}, 2}, "conv2d", "[3, 2, 3, 3]"},
        {{2, 3, 2, 8}, {4, 3, 3, 3}, 4, {{1, 1}, {0, 0}, {1, 1}, 1}, "conv2d", "[2, 3, 2, 8]"},
        {{2, 3, 5, 8}, {4, 3, 3, 3}, 4, {{1, 1}, {0, 0}, {3, 1}, 1}, "conv2d", "dilation 3"},
        {{2, 3, 8, 8}, {4, 3, 3, 3}, 3, {{1, 1}, {0, 0}, {1, 1}, 1}, "conv2d", "4 dimensions"},
        {{2, 3, 8, 8}, {4, 3, 3, 3}, 4, {{-1, 1}, {0, 0}, {1, 1}, 1}, "conv2d", "stride -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc_graph *g = rc_graph_new();
        rc_tensor *x = rc_input(g, "x", RC_F32, bad[i].xdim, bad[i].x);
        rc_tensor *w = rc_input(g, "w", RC_F32, 4, bad[i].w);
        check_error(g, rc_conv2d(g, x, w, NULL, &bad[i].p), bad[i].a, bad[i].b);
        rc_graph_free(g);
    }
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 4, (int64_t[]){2, 3, 8, 8});
    rc_tensor *w = rc_input(g, "w", RC_F32, 4, (int64_t[]){4, 3, 3, 3});
    rc_tensor *b = rc_input(g, "b", RC_F32, 1, (int64_t[]){3});
    check_error(g, rc_conv2d(g, x, w, b, NULL), "bias [3]", "4 output channels");
    rc_graph_free(g);
    g = rc_graph_new();
    x = rc_input(g, "x", RC_F32, 4, (int64_t[]){2, 3, 8, 8});
    w = rc_input(g, "w", RC_F64, 4, (int64_t[]){4, 3, 3, 3});
    check_error(g, rc_conv2d(g, x, w, NULL, NULL), "conv2d", "f64");
    rc_graph_free(g);
    g = rc_graph_new();
    x = rc_input(g, "x", RC_F32, 4, (int64_t[]){2, 3, 8, 8});
    check_error(g, rc_max_pool2d(g, x, &(rc_pool2d_params){{3, 3}, {1, 1}, {2, 2}}), "max_pool2d", "padding 2");
    rc_graph_free(g);
    g = rc_graph_new();
    x = rc_input(g, "x", RC_F32, 4, (int64_t[]){2, 3, 2, 8});
    check_error(g, rc_avg_pool2d(g, x, &(rc_pool2d_params){{3, 3}, {0, 0}, {0, 0}}), "avg_pool2d", "[2, 3, 2, 8]");
    rc_graph_free(g);
    g = rc_graph_new();
    x = rc_input(g, "x", RC_F32, 4, (int64_t[]){2, 3, 8, 8});
    rc_tensor *gy = rc_input(g, "gy", RC_F32, 4, (int64_t[]){2, 3, 3, 4});
    check_error(g, rc_pool2d_grad(g, gy, x, RC_POOL_MAX, &(rc_pool2d_params){{2, 2}, {0, 0}, {0, 0}}),
                "pool2d_grad", "[2, 3, 3, 4]");
    rc_graph_free(g);
    g = rc_graph_new();
    gy = rc_input(g, "gy", RC_F32, 4, (int64_t[]){2, 3, 3, 4});
    w = rc_input(g, "w", RC_F32, 4, (int64_t[]){4, 3, 3, 3});
    check_error(g, rc_conv2d_grad_input(g, gy, w, 8, 8, NULL), "conv2d_grad_input", "[2, 3, 3, 4]");
    rc_graph_free(g);
}

/* ---- OpenCL against the CPU -------------------------------------------------------------------- */

enum { OCL_OUTS = 7 };

/* the conv and pool ops and their gradient ops of one geometry, in dtype t */
static void ocl_graph(rc_graph *g, rc_dtype t, const conv_case *k, const rc_pool2d_params *pp,
                      rc_tensor **in, rc_tensor **out)
{
    int groups = k->p.groups ? k->p.groups : 1;
    in[0] = rc_input(g, "x", t, 4, (int64_t[]){k->n, k->c, k->h, k->w});
    in[1] = rc_input(g, "w", t, 4, (int64_t[]){k->o, k->c / groups, k->kh, k->kw});
    in[2] = rc_input(g, "b", t, 1, (int64_t[]){k->o});
    out[0] = rc_conv2d(g, in[0], in[1], in[2], &k->p);
    in[3] = out[0] ? rc_input(g, "gy", t, 4, out[0]->shape) : NULL;
    out[1] = rc_conv2d_grad_input(g, in[3], in[1], k->h, k->w, &k->p);
    out[2] = rc_conv2d_grad_weight(g, in[3], in[0], k->kh, k->kw, &k->p);
    out[3] = rc_max_pool2d(g, in[0], pp);
    out[4] = rc_avg_pool2d(g, in[0], pp);
    in[4] = out[3] ? rc_input(g, "gp", t, 4, out[3]->shape) : NULL;
    out[5] = rc_pool2d_grad(g, in[4], in[0], RC_POOL_MAX, pp);
    out[6] = rc_pool2d_grad(g, in[4], in[0], RC_POOL_AVG, pp);
}

/* runs the graph on be with the f32 values vals (converted to t); outputs back as f32 in res */
static int ocl_run(rc_backend *be, rc_dtype t, const conv_case *k, const rc_pool2d_params *pp,
                   float **vals, float **res, rc_error *err)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *in[5], *out[OCL_OUTS];
    ocl_graph(g, t, k, pp, in, out);
    if (rc_graph_error(g)) {
        rc_error_set(err, RC_ERR_SHAPE, "%s", rc_graph_error(g));
        rc_graph_free(g);
        return -1;
    }
    rc_plan *p = rc_plan_new_on(be, g, out, OCL_OUTS, err);
    int rc = p ? 0 : -1;
    for (int i = 0; rc == 0 && i < 5; i++) {
        int64_t n = rc_tensor_numel(in[i]);
        void *h = malloc((size_t)n * 4);
        rc = rc_convert(h, t, vals[i], RC_F32, n) || rc_plan_set_input(p, in[i], h, err) ? -1 : 0;
        free(h);
    }
    if (rc == 0)
        rc = rc_plan_run(p, err);
    for (int i = 0; rc == 0 && i < OCL_OUTS; i++) {
        int64_t n = rc_tensor_numel(out[i]);
        void *h = malloc((size_t)n * 4);
        res[i] = malloc((size_t)n * 4);
        rc = rc_plan_read(p, out[i], h, err) || rc_convert(res[i], RC_F32, h, t, n) ? -1 : 0;
        free(h);
    }
    rc_plan_free(p);
    rc_graph_free(g);
    return rc;
}

static void test_backend_case(rc_backend *gpu, const conv_case *k, const rc_pool2d_params *pp)
{
    static const char *names[OCL_OUTS] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d",
                                          "avg_pool2d", "max_pool2d grad", "avg_pool2d grad"};
    rc_graph *g = rc_graph_new();
    rc_tensor *in[5], *out[OCL_OUTS];
    ocl_graph(g, RC_F32, k, pp, in, out);
    CHECKF(!rc_graph_error(g), "opencl case graph: %s", rc_graph_error(g));
    if (rc_graph_error(g)) {
        rc_graph_free(g);
        return;
    }
    int64_t nin[5], nout[OCL_OUTS];
    for (int i = 0; i < 5; i++)
        nin[i] = rc_tensor_numel(in[i]);
    for (int i = 0; i < OCL_OUTS; i++)
        nout[i] = rc_tensor_numel(out[i]);
    rc_graph_free(g);
    static const rc_dtype types[] = {RC_F32, RC_BF16, RC_F16};
    for (int d = 0; d < 3; d++) {
        rc_dtype t = types[d];
        float *vals[5], *ref[OCL_OUTS] = {0}, *got[OCL_OUTS] = {0};
        for (int i = 0; i < 5; i++) { /* values representable in t, so both sides read the same */
            vals[i] = malloc((size_t)nin[i] * 4);
            uint16_t *h = malloc((size_t)nin[i] * 2);
            for (int64_t e = 0; e < nin[i]; e++)
                vals[i][e] = (float)(2 * uniform() - 1);
            if (t != RC_F32) {
                rc_convert(h, t, vals[i], RC_F32, nin[i]);
                rc_convert(vals[i], RC_F32, h, t, nin[i]);
            }
            free(h);
        }
        rc_error err = {0};
        int ok = ocl_run(rc_device_open("cpu", 0, NULL), RC_F32, k, pp, vals, ref, &err) == 0;
        CHECKF(ok, "cpu run: %s", err.msg);
        ok = ok && ocl_run(gpu, t, k, pp, vals, got, &err) == 0;
        CHECKF(ok, "%s %s run: %s", rc_backend_name(gpu), rc_dtype_name(t), err.msg);
        /* f32: summation order differs; 16 bits: the output's rounding */
        double tol = t == RC_F32 ? 1e-5 : t == RC_F16 ? 2e-3 : 1e-2;
        for (int i = 0; ok && i < OCL_OUTS; i++) {
            double worst = 0, scale = 1;
            for (int64_t e = 0; e < nout[i]; e++)
                scale = fmax(scale, fabs(ref[i][e]));
            for (int64_t e = 0; e < nout[i]; e++)
                worst = fmax(worst, fabs((double)got[i][e] - ref[i][e]) / scale);
            CHECKF(worst <= tol, "%s %s %s (x [%lld %lld %lld %lld], groups %d): error %.3g (tolerance %.1g)",
                   rc_backend_name(gpu), rc_dtype_name(t), names[i], (long long)k->n, (long long)k->c, (long long)k->h,
                   (long long)k->w, k->p.groups, worst, tol);
        }
        for (int i = 0; i < 5; i++)
            free(vals[i]);
        for (int i = 0; i < OCL_OUTS; i++)
            free(ref[i]), free(got[i]);
    }
}

static void test_all_cases(rc_backend *be)
{
    static const rc_pool2d_params pools[] = {
        {{2, 2}, {0, 0}, {0, 0}}, {{3, 3}, {2, 2}, {1, 1}}, {{3, 2}, {1, 2}, {1, 0}}};
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
        if (conv_cases[i].h >= 4 && conv_cases[i].w >= 4)
            test_backend_case(be, &conv_cases[i], &pools[i % 3]);
}

/* bf16 and f16 on the CPU (inputs widened whole, the f32 kernels, the output rounded)
 * against f32 on the same values */
static void test_half_cpu(void)
{
    for (int op = RC_OP_CONV2D; op <= RC_OP_POOL2D_GRAD; op++)
        CHECK(rc_backend_supports(rc_device_open("cpu", 0, NULL), (rc_op)op, RC_BF16) &&
              rc_backend_supports(rc_device_open("cpu", 0, NULL), (rc_op)op, RC_F16));
    test_all_cases(rc_device_open("cpu", 0, NULL));
}

static void test_opencl(void)
{
    rc_backend *gpu = check_opencl("test_conv's OpenCL part");
    if (!gpu)
        return;
    for (int t = 0; t < 3; t++)
        for (int op = RC_OP_CONV2D; op <= RC_OP_POOL2D_GRAD; op++)
            CHECK(rc_backend_supports(gpu, (rc_op)op, (rc_dtype[]){RC_F32, RC_BF16, RC_F16}[t]));
    CHECK(!rc_backend_supports(gpu, RC_OP_CONV2D, RC_F64));
    test_all_cases(gpu);
}

int main(void)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        check_conv_forward(&conv_cases[i], RC_F32);
        check_conv_forward(&conv_cases[i], RC_F64);
    }
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        for (int max = 0; max < 2; max++) {
            check_pool_forward(max, pool_cases[i].shape, &pool_cases[i].p, RC_F32);
            check_pool_forward(max, pool_cases[i].shape, &pool_cases[i].p, RC_F64);
        }
    for (size_t i = 0; i < sizeof grad_cases / sizeof grad_cases[0]; i++) {
        const gc_case *c = &grad_cases[i];
        double e = gc_run(c, 1);
        CHECKF(e >= 0 && e <= 1e-6, "%s: relative error %.3g (tolerance 1e-6)", c->name, e);
        printf("grad %-28s max rel err %.2e\n", c->name, e);
    }
    test_errors();
    test_half_cpu();
    test_opencl();
    return check_summary("test_conv");
}
