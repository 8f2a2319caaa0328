/* test_device.c - an OpenCL device's life and what it refuses, apart from the ops' values
 * (test_ops' table): the device list and names; buffers (zero-filled, copies, overlapping
 * copies, fills, bounds, used bytes, more than the device holds); an op it lacks; a kernel
 * that does not compile; the program of a device without room for the attention tile
 * kernels; an id outside a table; dropout masks over two steps and the
 * normal draws of both keys as the CPU's; the f32 copies of a 16-bit product counted as
 * device memory; fused attention a (batch, kv head) pair per chunk as in whole chunks;
 * closing and reopening the device; and a
 * printed figure for a one-row product over 16-bit weights (a decoding step) against f32.
 *
 * Without an OpenCL device the test prints why and passes, unless REDCO_REQUIRE_OPENCL=1
 * (CI sets it): then it fails. */
#include "check.h"
#include "internal.h"
#include "backend.h"
#include "redco/device.h"
#include "opencl/opencl.h"

/* the scratch a device attention's chunk aims at (src/backend/gpu/node.h; 0: the default) */
void rci_gpu_attention_chunk(size_t bytes);

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static rc_backend *gpu;

static uint64_t rng_state = 12345;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* ---- buffers, errors, devices ------------------------------------------------------------ */

static void test_buffers(void)
{
    rc_error err = {0};
    size_t used0 = 0, used1 = 0, total = 0;
    rc_backend_memory(gpu, &total, &used0, NULL);
    rc_buffer *a = rc_buffer_new(gpu, 1003, &err), *b = rc_buffer_new(gpu, 1003, &err);
    CHECKF(a && b, "buffers: %s", err.msg);
    if (!a || !b)
        return;
    rc_backend_memory(gpu, NULL, &used1, NULL);
    CHECK(used1 == used0 + 2006);
    unsigned char host[1003], back[1003];
    CHECK(!rc_buffer_download(a, 0, back, 1003, &err));
    int zero = 1;
    for (int i = 0; i < 1003; i++)
        zero &= back[i] == 0;
    CHECKF(zero, "a new buffer is zero-filled");
    for (int i = 0; i < 1003; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    CHECK(!rc_buffer_upload(a, 0, host, 1003, &err));
    CHECK(!rc_buffer_download(a, 0, back, 1003, &err) && !memcmp(host, back, 1003));
    CHECK(!rc_buffer_copy(b, 11, a, 100, 500, &err));
    CHECK(!rc_buffer_download(b, 11, back, 500, &err) && !memcmp(host + 100, back, 500));
    CHECK(!rc_buffer_download(b, 0, back, 11, &err) && back[0] == 0 && back[10] == 0);
    /* overlapping copy inside one buffer: memmove's result */
    unsigned char expect[1003];
    memcpy(expect, host, 1003);
    memmove(expect + 10, expect, 600);
    CHECK(!rc_buffer_copy(a, 10, a, 0, 600, &err));
    CHECKF(!rc_buffer_download(a, 0, back, 1003, &err) && !memcmp(expect, back, 1003),
           "overlapping copy");
    CHECK(!gpu->fill_zero(gpu, a, 5, 20, &err) && !rc_buffer_download(a, 0, back, 30, &err));
    CHECK(back[4] == expect[4] && back[5] == 0 && back[24] == 0 && back[25] == expect[25]);
    CHECK(gpu->host_address(gpu, a, 0) == NULL);   /* device memory: collectives stage */
    CHECK(rc_buffer_upload(a, 1000, host, 10, &err) && check_has(err.msg, "outside"));
    rc_buffer_free(a);
    rc_buffer_free(b);
    rc_backend_memory(gpu, NULL, &used1, NULL);
    CHECK(used1 == used0);
    /* more than the device has: one error naming the bytes asked and in use */
    rc_buffer *huge = rc_buffer_new(gpu, total + 4096, &err);
    CHECKF(!huge && err.code == RC_ERR_MEMORY && check_has(err.msg, "cannot allocate") &&
           check_has(err.msg, "in use"), "out of memory: %s", err.msg);
    printf("  out of memory: %s\n", err.msg);
    rc_buffer_free(huge);
}

static void test_unsupported(void)
{
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    int64_t s[2] = {3, 4};
    rc_tensor *x = rc_param(g, "x", RC_F64, 2, s), *y = rc_exp(g, x);
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    CHECKF(!p && check_has(err.msg, "exp") && check_has(err.msg, "f64") &&
           check_has(err.msg, "opencl:0"), "unsupported op: %s", err.msg);
    printf("  unsupported: %s\n", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* a kernel that does not compile: the error carries the compiler's log */
static void test_build_error(void)
{
    rc_error err = {0};
    cl_program prog = NULL;
    const char *bad = "__kernel void broken(__global float *x) { x[0] = undeclared_name; }\n";
    int rc = rci_ocl_build_program((rci_ocl *)(void *)gpu, bad, &prog, &err);
    CHECKF(rc == -1 && !prog && check_has(err.msg, "kernel build failed") &&
           check_has(err.msg, "undeclared_name"), "build error: %s", err.msg);
    printf("  build error: %.160s\n", err.msg);
}

/* A device whose local memory cannot hold the attention tile kernels (gpu.h's
 * RCI_GPU_TILE_LOCAL_BYTES; NVIDIA's OpenCL has 48 KB): its program builds without them
 * (kernels.cl's RC_TILES), every other kernel is in it, and a launch of one of them is an
 * error that says why and what to use instead */
static void test_without_tiles(void)
{
    rci_ocl *o = (rci_ocl *)(void *)gpu;
    int tiles = o->gpu.tiles;
    CHECKF(tiles, "PoCL's local memory holds the tile kernels");
    o->gpu.tiles = 0;
    rc_error err = {0};
    cl_program prog = NULL;
    CHECKF(rci_ocl_build_program(o, rci_gpu_source, &prog, &err) == 0, "built without tiles: %s", err.msg);
    int absent = 0, present = 0;
    for (int k = 0; prog && k < RCI_K_COUNT; k++) {
        cl_int s;
        cl_kernel kern = clCreateKernel(prog, rci_gpu_kernel_names[k], &s);
        int tile = rci_gpu_is_tile_kernel((rci_gpu_kernel)k), has = s == CL_SUCCESS;
        CHECKF(has == !tile, "%s %s in the program without tiles", rci_gpu_kernel_names[k], has ? "is" : "is not");
        absent += !has;
        present += has;
        if (has)
            clReleaseKernel(kern);
    }
    if (prog)
        clReleaseProgram(prog);
    o->gpu.tiles = tiles;
    CHECK(absent == 3 && present == RCI_K_COUNT - 3); /* forward, dq, dkv */
    CHECK(rci_gpu_kernel_absent(gpu, RCI_K_ATTENTION_TILE_DKV, &err) == -1);
    CHECKF(check_has(err.msg, "opencl:0") && check_has(err.msg, "k_attention_tile_dkv") &&
           check_has(err.msg, "--attention products"), "%s", err.msg);
    printf("  without the tile kernels: %d kernels built, %d absent; a launch of one: %s\n", present, absent,
           err.msg);
}

static void test_devices(void)
{
    rc_error err = {0};
    int n = rc_opencl_device_count(&err);
    CHECKF(n >= 1, "devices: %s", err.msg);
    rc_device_info d;
    CHECK(!rc_opencl_device_info(0, &d, &err) && d.name[0] && d.global_bytes > 0);
    size_t total = 0;
    rc_backend_memory(gpu, &total, NULL, NULL);
    CHECK(total == d.global_bytes);
    CHECK(!strcmp(rc_backend_name(gpu), "opencl:0"));
    CHECK(rc_device_open("opencl:0", 0, &err) == gpu);
    char past[32];
    snprintf(past, sizeof past, "opencl:%d", n);
    CHECK(!rc_device_open(past, 0, &err) && check_has(err.msg, "no device"));
    CHECK(rc_opencl_device_info(-1, &d, &err) == -1);
    printf("  device 0: %s (%s, %s), %zu bytes\n", d.name, d.platform, d.type, d.global_bytes);
}

/* an id outside the table: the CPU's error, naming the id and its position */
static void test_bad_id(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *tab = rc_param(g, "table", RC_F32, 2, (int64_t[]){4, 3});
    rc_tensor *x = rc_input(g, "ids", RC_I32, 1, (int64_t[]){6});
    rc_tensor *y = rc_embedding(g, tab, x);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    int32_t bad[6] = {0, 1, 3, 9, 2, -1};
    float t[12] = {0};
    CHECK(p && !rc_plan_set_input(p, x, bad, &err) && !rc_plan_set_input(p, tab, t, &err));
    CHECKF(p && rc_plan_run(p, &err) && err.code == RC_ERR_INDEX &&
           check_has(err.msg, "id 9 at position 3 is outside [0, 4)"), "bad id: %s", err.msg);
    printf("  bad id: %s\n", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* ---- random streams over several runs ------------------------------------------------------ */

/* dropout: the CPU's masks and values on the device, with another run key each step */
static void test_dropout_steps(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_param(g, "x", RC_F32, 3, (int64_t[]){3, 17, 29});
    rc_tensor *y = rc_dropout(g, x, 0.5, rc_rng_new(9));
    rc_error err = {0};
    rc_plan *pc = rc_plan_new(g, &y, 1, &err), *pg = rc_plan_new_on(gpu, g, &y, 1, &err);
    CHECKF(pc && pg, "dropout plans: %s", err.msg);
    int64_t n = rc_tensor_numel(y), same = 0, kept = 0;
    float *in = malloc(n * sizeof *in), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (int64_t i = 0; i < n; i++)   /* nonzero inputs: zeros are dropped elements */
        in[i] = (float)(1 + uniform());
    for (int step = 0; pc && pg && step < 2; step++) {
        rc_plan_set_rng(pc, rc_rng_new(100 + step));
        rc_plan_set_rng(pg, rc_rng_new(100 + step));
        CHECK(!rc_plan_set_input(pc, x, in, &err) && !rc_plan_set_input(pg, x, in, &err));
        CHECK(!rc_plan_run(pc, &err) && !rc_plan_run(pg, &err));
        CHECK(!rc_plan_read(pc, y, b, &err) && !rc_plan_read(pg, y, a, &err));
        for (int64_t i = 0; i < n; i++) {
            same += (a[i] == 0) == (b[i] == 0);
            kept += b[i] != 0;
        }
        CHECKF(!memcmp(a, b, n * sizeof *a), "dropout step %d: device values differ from the CPU's", step);
    }
    CHECKF(same == 2 * n, "dropout masks: %lld of %lld agree", (long long)same, (long long)(2 * n));
    CHECKF(kept > n * 0.8 && kept < n * 1.2, "dropout kept %lld of %lld", (long long)kept, (long long)(2 * n));
    printf("  dropout masks: %lld of %lld elements agree over 2 steps (%lld kept)\n", (long long)same,
           (long long)(2 * n), (long long)kept);
    free(in);
    free(a);
    free(b);
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
}

/* The device's attention in chunks of one (batch, kv head) pair each, against its default
 * chunks (here all pairs at once): GQA, a bias, causal, dropout; the output and the
 * gradients of q, k, v and the bias agree to f32 rounding (the products' batches differ) */
static void run_attention(rc_graph *g, rc_tensor **outs, int nout, rc_tensor *const *leaves, float *const *vals, float **res)
{
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, outs, nout, &err);
    CHECKF(p, "attention plan: %s", err.msg);
    for (int i = 0; p && i < 4; i++)
        CHECKF(!rc_plan_set_input(p, leaves[i], vals[i], &err), "attention input %d: %s", i, err.msg);
    CHECKF(p && !rc_plan_run(p, &err), "attention run: %s", err.msg);
    for (int i = 0; p && i < nout; i++)
        CHECKF(!rc_plan_read(p, outs[i], res[i], &err), "attention read %d: %s", i, err.msg);
    rc_plan_free(p);
}

static void test_attention_chunks(void)
{
    rc_graph *g = rc_graph_new();
    int64_t qs[] = {2, 6, 19, 8}, ks[] = {2, 2, 23, 8}, bs[] = {1, 6, 19, 23};
    rc_tensor *l[4] = {rc_param(g, "q", RC_F32, 4, qs), rc_param(g, "k", RC_F32, 4, ks),
                       rc_param(g, "v", RC_F32, 4, ks), rc_param(g, "bias", RC_F32, 4, bs)};
    rc_tensor *outs[5] = {rc_attention(g, l[0], l[1], l[2], l[3], 0.3, 1, 0.2, rc_rng_new(4))};
    CHECKF(!rc_backward(g, rc_sum_all(g, rc_mul(g, outs[0], outs[0])), l, 4, outs + 1), "attention backward: %s",
           rc_graph_error(g));
    float *vals[4], *whole[5], *single[5];
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        int64_t n = rc_tensor_numel(l[i]);
        vals[i] = malloc(n * sizeof(float));
        for (int64_t e = 0; e < n; e++)
            vals[i][e] = (float)(2 * uniform() - 1);
    }
    for (int i = 0; i < 5; i++) {
        whole[i] = calloc(rc_tensor_numel(outs[i]), sizeof(float));
        single[i] = calloc(rc_tensor_numel(outs[i]), sizeof(float));
    }
    run_attention(g, outs, 5, l, vals, whole);
    rci_gpu_attention_chunk(1);   /* one pair per chunk */
    run_attention(g, outs, 5, l, vals, single);
    rci_gpu_attention_chunk(0);
    for (int i = 0; i < 5; i++)
        for (int64_t e = 0; e < rc_tensor_numel(outs[i]); e++) {
            double d = fabs((double)whole[i][e] - single[i][e]) / (1e-3 + fabs((double)whole[i][e]));
            worst = d > worst || d != d ? d : worst;
        }
    CHECKF(worst <= 1e-5, "attention in one-pair chunks differs from whole chunks by %.3g (relative)", worst);
    printf("  attention in one-pair chunks against whole chunks: largest relative difference %.2g\n", worst);
    for (int i = 0; i < 5; i++) {
        free(whole[i]);
        free(single[i]);
        if (i < 4)
            free(vals[i]);
    }
    rc_graph_free(g);
}

/* An attention with no query rows on the device: its forward, stats and gradients run (no
 * scratch part at all, nothing kept) and k's and v's gradients are zeros. Run before
 * anything grows the scratch, which a node of no parts once asked for as 0 bytes and got
 * none, failing with no message. */
static void test_attention_no_rows(void)
{
    rc_graph *g = rc_graph_new();
    int64_t qs[] = {2, 2, 0, 8}, ks[] = {2, 2, 5, 8};
    rc_tensor *l[3] = {rc_param(g, "q", RC_F32, 4, qs), rc_param(g, "k", RC_F32, 4, ks),
                       rc_param(g, "v", RC_F32, 4, ks)};
    rc_tensor *outs[4] = {rc_attention(g, l[0], l[1], l[2], NULL, 0.3, 0, 0, rc_rng_new(4))};
    CHECKF(!rc_backward(g, rc_sum_all(g, rc_mul(g, outs[0], outs[0])), l, 3, outs + 1), "attention backward: %s",
           rc_graph_error(g));
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, outs, 4, &err);
    static float vals[2 * 2 * 5 * 8], dk[2 * 2 * 5 * 8], dv[2 * 2 * 5 * 8];
    for (int i = 0; p && i < 3; i++)
        CHECKF(!rc_plan_set_input(p, l[i], vals, &err), "input %d: %s", i, err.msg);
    for (int i = 0; i < 2 * 2 * 5 * 8; i++)
        dk[i] = dv[i] = 1;
    CHECKF(p && !rc_plan_run(p, &err), "attention of no query rows: %s", err.msg);
    CHECKF(p && !rc_plan_read(p, outs[2], dk, &err) && !rc_plan_read(p, outs[3], dv, &err), "read: %s", err.msg);
    int zeros = 1;
    for (int i = 0; i < 2 * 2 * 5 * 8; i++)
        zeros &= dk[i] == 0 && dv[i] == 0;
    CHECKF(zeros, "attention of no query rows: dk and dv are not zeros");
    rc_plan_free(p);
    rc_graph_free(g);
}

/* normal draws: the CPU's values on the device (up to the rounding of log and cos), for
 * either key of the plan; a step key reused gives the same draws */
static void test_normal(void)
{
    rc_graph *g = rc_graph_new();
    int64_t shape[3] = {3, 170, 99};
    rc_tensor *y[2] = {rc_normal(g, RC_F32, 3, shape, rc_rng_new(4), RC_RNG_RUN),
                       rc_normal(g, RC_F32, 3, shape, rc_rng_new(4), RC_RNG_STEP)};
    rc_error err = {0};
    rc_plan *pc = rc_plan_new(g, y, 2, &err), *pg = pc ? rc_plan_new_on(gpu, g, y, 2, &err) : NULL;
    CHECKF(pc && pg, "normal plans: %s", err.msg);
    int64_t n = rc_tensor_numel(y[0]);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *first = malloc(n * sizeof *first);
    double worst = 0;
    for (int step = 0; pg && step < 3; step++) {
        rc_plan *both[2] = {pc, pg};
        for (int k = 0; k < 2; k++) {
            rc_plan_set_rng(both[k], rc_rng_new(200 + step));
            rc_plan_set_step_rng(both[k], rc_rng_new(300 + step % 2)); /* steps 0 and 2 share it */
        }
        CHECK(!rc_plan_run(pc, &err) && !rc_plan_run(pg, &err));
        for (int j = 0; j < 2; j++) {
            CHECK(!rc_plan_read(pc, y[j], b, &err) && !rc_plan_read(pg, y[j], a, &err));
            double e = check_rel_error_f32(a, b, n, 1e-3);
            worst = e > worst ? e : worst;
            if (j == 1 && step == 0)
                memcpy(first, a, n * sizeof *a);
            if (j == 1 && step > 0) {
                int same = !memcmp(first, a, n * sizeof *a);
                CHECKF(same == (step == 2), "normal step %d: step-key draws %s step 0's", step,
                       same ? "repeat" : "differ from");
            }
        }
    }
    CHECKF(worst < 1e-5, "normal: device vs CPU relative error %.3g", worst);
    printf("  normal: %lld draws x 2 keys x 3 runs, device vs CPU relative error %.2e\n", (long long)n, worst);
    free(a);
    free(b);
    free(first);
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
}

/* ---- 16-bit products and kernels ------------------------------------------------------------ */

/* The f32 copies a 16-bit product works in are device memory counted in the backend's
 * used and peak bytes (run first: the scratch has not grown yet). */
static void test_scratch_counted(void)
{
    enum { M = 64, K = 256, N = 512 };
    size_t used0 = 0, used1 = 0, peak = 0;
    rc_backend_memory(gpu, NULL, &used0, NULL);
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "a", RC_BF16, 2, (int64_t[]){M, K});
    rc_tensor *b = rc_input(g, "b", RC_BF16, 2, (int64_t[]){K, N});
    rc_tensor *y = rc_matmul(g, a, b, 0, 0);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    static uint16_t zeros[K * N];
    int ok = p && !rc_plan_set_input(p, a, zeros, &err) && !rc_plan_set_input(p, b, zeros, &err) &&
             !rc_plan_run(p, &err);
    CHECKF(ok, "scratch: %s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
    rc_backend_memory(gpu, NULL, &used1, &peak);
    size_t f32_copies = (size_t)(M * K + K * N + M * N) * 4;
    CHECKF(used1 >= used0 + f32_copies && peak >= used1, "scratch: %zu bytes in use after, %zu before",
           used1, used0);
}

/* ---- a decoding step: one row times 16-bit weights, against f32 (a figure, no assert) ----- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* seconds per run of x [1, K] @ W [K, N] in dtype t (best of a few), or -1 */
static double decode_time(rc_dtype t, int tb)
{
    enum { K = 768, N = 3072, RUNS = 20 };
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", t, 2, (int64_t[]){1, K});
    rc_tensor *w = rc_param(g, "w", t, 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
    rc_tensor *y = rc_matmul(g, x, w, 0, tb);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    float *v = malloc((size_t)K * N * 4);
    for (int64_t i = 0; i < (int64_t)K * N; i++)
        v[i] = (float)((i * 7919 % 1000) * 1e-3 - 0.5);
    uint16_t *h = malloc((size_t)K * N * 2);
    rc_convert(h, t == RC_F32 ? RC_BF16 : t, v, RC_F32, (int64_t)K * N);
    double best = -1;
    const void *data = t == RC_F32 ? (const void *)v : (const void *)h;
    if (p && !rc_plan_set_input(p, x, data, &err) && !rc_plan_set_input(p, w, data, &err) &&
        !rc_plan_run(p, &err) && !rc_backend_wait(gpu, &err)) {
        for (int r = 0; r < RUNS; r++) {
            double t0 = now();
            if (rc_plan_run(p, &err) || rc_backend_wait(gpu, &err))
                break;
            double dt = now() - t0;
            best = best < 0 || dt < best ? dt : best;
        }
    }
    CHECKF(best > 0, "decode %s: %s", rc_dtype_name(t), err.msg);
    free(v);
    free(h);
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

static void bench_decode(void)
{
    for (int tb = 0; tb < 2; tb++) {
        double f = decode_time(RC_F32, tb), b = decode_time(RC_BF16, tb);
        printf("  decode [1, 768] @ %s (opencl): f32 %.3f ms, bf16 %.3f ms (%.2fx)\n",
               tb ? "[3072, 768]^T" : "[768, 3072]", f * 1e3, b * 1e3, f / b);
    }
}

/* rc_device_close: with every open of the device closed, a buffer still alive keeps it
 * working; freeing that buffer releases it (context, programs, CLBlast's cache), and the
 * next open builds it afresh and runs a plan. Last: the test's device is gone after it. */
static void test_close(void)
{
    rc_error err = {0};
    rc_backend *be = gpu;
    gpu = NULL;
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    rc_buffer *b = rc_buffer_new(be, sizeof x, &err);
    CHECKF(b && be->buffers == 1, "close: %lld buffers alive before the close", (long long)be->buffers);
    while (be->opens > 0)
        rc_device_close(be);
    CHECK(b && be->closing && !rc_buffer_upload(b, 0, x, sizeof x, &err) && !rc_buffer_download(b, 0, y, sizeof y, &err) &&
          y[3] == 4);
    rc_buffer_free(b); /* the last buffer of a closed device: released here */
    rc_backend *again = rc_device_open("opencl:0", 0, &err);
    CHECKF(again && again->opens == 1 && !again->closing && again->buffers == 0, "reopen: %s", err.msg);
    rc_graph *g = rc_graph_new();
    rc_tensor *in = rc_input(g, "x", RC_F32, 1, (int64_t[]){4}), *out = rc_add(g, in, in);
    rc_plan *p = again ? rc_plan_new_on(again, g, &out, 1, &err) : NULL;
    CHECKF(p && !rc_plan_set_input(p, in, x, &err) && !rc_plan_run(p, &err) && !rc_plan_read(p, out, y, &err) &&
           y[0] == 2 && y[3] == 8, "a plan on the reopened device: %s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
    rc_device_close(again);
}


int main(void)
{
    rc_set_threads(2);
    if (!(gpu = check_opencl("test_device")))
        return check_summary("device");
    test_attention_no_rows(); /* first: the scratch has not grown yet (and it grows none) */
    test_scratch_counted();   /* before the others: the scratch has not grown yet */
    test_devices();
    test_buffers();
    test_unsupported();
    test_build_error();
    test_without_tiles();
    test_bad_id();
    test_dropout_steps();
    test_normal();
    test_attention_chunks();
    bench_decode();
    test_close();
    return check_summary("device");
}
