/* test_cuda.c - the CUDA backend. Without a CUDA device (no driver, no GPU, or a build
 * without CUDA) it checks that asking for one fails with one line saying what is missing
 * and what to use instead, through every way of naming it; then the test passes saying
 * "not run: no CUDA device", unless REDCO_REQUIRE_CUDA=1 (a GPU machine's check): then it
 * fails. With a device it runs what the op table (test_ops, which covers every op on
 * cuda) does not: f32 products (batched, shared operands, transposes) with TF32 off and
 * allowed, bf16 products on tensor cores, against the CPU; buffers; the device's
 * description; and the error for a full device. */
#include "check.h"
#include "internal.h"
#include "backend.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rc_backend *gpu;

static uint64_t rng_state = 99;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* ---- without a device --------------------------------------------------------------------- */

/* every way of asking for a CUDA device fails with the one line of rc_cuda_device_count */
static void test_absent(const char *why)
{
    rc_error err = {0};
    CHECKF(!strncmp(why, "cuda: ", 6) && !strchr(why, '\n'), "one line starting 'cuda: ': %s", why);
    CHECKF(check_has(why, "use --device opencl or cpu"), "what to use instead: %s", why);
    CHECKF(check_has(why, "libcuda.so.1") || check_has(why, "no CUDA device") ||
               check_has(why, "built without CUDA"),
           "names what is missing: %s", why);
    rc_device_info info;
    CHECK(rc_cuda_device_info(0, &info, &err) == -1 && !strcmp(err.msg, why));
    const char *names[] = {"cuda", "cuda:0", "cuda:1,0"};
    for (int i = 0; i < 3; i++) {
        memset(&err, 0, sizeof err);
        CHECKF(!rc_device_open(names[i], 0, &err) && !strcmp(err.msg, why), "%s: %s", names[i], err.msg);
    }
    setenv("REDCO_DEVICE", "cuda", 1);
    memset(&err, 0, sizeof err);
    CHECKF(!rc_device_open(NULL, 0, &err) && !strcmp(err.msg, why), "REDCO_DEVICE=cuda: %s", err.msg);
    unsetenv("REDCO_DEVICE");
    CHECK(!rc_device_open("cuda:x", 0, &err) && check_has(err.msg, "cuda:N"));
    /* the CPU is unaffected */
    rc_backend *cpu = rc_device_open("cpu", 0, &err);
    CHECK(cpu != NULL);
    rc_device_close(cpu);
}

/* ---- with a device ------------------------------------------------------------------------ */

/* ||a - b|| / ||b|| over n floats (L2 norms) */
static double norm_error(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* out of g on the GPU against the CPU, the same random parameters on both: the largest
 * element's relative error (check_rel_error_f32, floor 1e-3 of the largest), or with
 * normwise the norm-wise one (TF32 rounds each operand to 10 bits on the device alone: an
 * output near zero after cancellation keeps no correct digit, the product as a whole does) */
static double run_both(rc_graph *g, rc_tensor *out, int normwise)
{
    rc_error err = {0};
    rc_plan *pc = rc_plan_new(g, &out, 1, &err), *pg = pc ? rc_plan_new_on(gpu, g, &out, 1, &err) : NULL;
    CHECKF(pg, "plans: %s", err.msg);
    double worst = INFINITY;
    for (int i = 0; pg && i < rc_graph_size(g); i++) {
        rc_tensor *t = rc_graph_node(g, i);
        if (t->op != RC_OP_LEAF || !(t->flags & RC_FLAG_PARAM))
            continue;
        int64_t n = rc_tensor_numel(t);
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t k = 0; k < n; k++)
            x[k] = (float)(uniform() * 2 - 1);
        CHECKF(!rc_plan_set_input(pc, t, x, &err) && !rc_plan_set_input(pg, t, x, &err), "%s: %s", t->name,
               err.msg);
        free(x);
    }
    if (pg && !rc_plan_run(pc, &err) && !rc_plan_run(pg, &err)) {
        int64_t n = rc_tensor_numel(out);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        if (!rc_plan_read(pg, out, a, &err) && !rc_plan_read(pc, out, b, &err))
            worst = normwise ? norm_error(a, b, n) : check_rel_error_f32(a, b, n, 1e-3);
        free(a), free(b);
    }
    CHECKF(isfinite(worst), "run: %s", err.msg);
    rc_plan_free(pc);
    rc_plan_free(pg);
    return worst;
}

/* products of f32 operands with TF32 off and allowed, and of bf16 ones (cast in the graph) */
static void test_nodes(void)
{
    static const struct {
        int na, nb;
        int64_t a[3], b[3];
        int ta, tb;
    } cases[] = {
        {2, 2, {67, 129}, {129, 33}, 0, 0}, {2, 2, {129, 67}, {33, 129}, 1, 1},
        {3, 2, {3, 17, 40}, {40, 24}, 0, 0}, {3, 3, {4, 40, 17}, {4, 24, 40}, 1, 1},
        {3, 2, {5, 17, 40}, {24, 40}, 0, 1}, {3, 2, {5, 40, 17}, {24, 40}, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int v = 0; v < 3; v++) { /* f32, f32 with TF32 allowed, bf16 */
            rc_graph *g = rc_graph_new();
            rc_tensor *a = rc_param(g, "a", RC_F32, cases[c].na, cases[c].a);
            rc_tensor *b = rc_param(g, "b", RC_F32, cases[c].nb, cases[c].b);
            if (v == 2) {
                a = rc_cast(g, a, RC_BF16);
                b = rc_cast(g, b, RC_BF16);
            }
            rc_tensor *y = rc_matmul(g, a, b, cases[c].ta, cases[c].tb);
            y = v == 2 ? rc_cast(g, y, RC_F32) : y;
            rc_device_allow_tf32(gpu, v == 1);
            double e = run_both(g, y, v == 1), tol = v == 0 ? 1e-4 : 2e-2;
            CHECKF(e <= tol, "matmul case %zu (%s): relative error %.3g > %.3g", c,
                   v == 0 ? "f32" : v == 1 ? "tf32" : "bf16", e, tol);
            rc_graph_free(g);
        }
    rc_device_allow_tf32(gpu, 0);
}

/* uploads, downloads, copies (overlapping ones too), and the error of a full device */
static void test_buffers(void)
{
    enum { N = 1000 };
    rc_error err = {0};
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)i;
    rc_buffer *b = check_buffer_of(gpu, x, N);
    CHECK(!rc_buffer_copy(b, 10 * sizeof(float), b, 0, 500 * sizeof(float), &err));   /* overlapping */
    CHECK(!rc_buffer_download(b, 0, y, sizeof y, &err));
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= y[i] == (i >= 10 && i < 510 ? (float)(i - 10) : (float)i);
    CHECKF(ok, "an overlapping copy: %s", err.msg);
    rc_buffer_free(b);
    size_t total = 0;
    rc_device_info info;
    CHECK(!rc_cuda_device_info(0, &info, &err) && info.compute_major >= 5 && info.global_bytes > 0 &&
          info.name[0] && !strcmp(info.type, "gpu") && info.fp64 == 1);
    total = gpu->total_bytes;
    CHECK(total > 0);
    CHECK(!rc_buffer_new(gpu, total + 1, &err) && check_has(err.msg, "cannot allocate") &&
          err.code == RC_ERR_MEMORY);
}

int main(void)
{
    rc_error err = {0};
    const char *require = getenv("REDCO_REQUIRE_CUDA");
    int n = rc_cuda_device_count(&err);
    if (n < 0) {
        char why[sizeof err.msg];
        snprintf(why, sizeof why, "%s", err.msg);
        test_absent(why);
        if (require && !strcmp(require, "1"))
            CHECKF(0, "no CUDA device, and REDCO_REQUIRE_CUDA=1: %s", why);
        else
            printf("test_cuda: not run: no CUDA device (%s)\n", why);
        return check_summary("cuda");
    }
    gpu = rc_device_open("cuda", 0, &err);
    CHECKF(gpu, "opening cuda: %s", err.msg);
    if (gpu) {
        printf("  %s: %d device(s)\n", gpu->name, n);
        test_nodes();
        test_buffers();
        rc_device_close(gpu);
    }
    return check_summary("cuda");
}
