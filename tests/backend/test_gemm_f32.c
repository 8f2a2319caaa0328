/* test_gemm_f32.c - the CPU's f32 products through their one way to BLAS
 * (src/backend/cpu/gemm_f32.c) against an f64 reference computed here: MATMUL nodes of odd
 * sizes (each transpose, batches, a shared operand, long inner sizes, one row, on one and
 * two threads), and alpha, beta and leading dimensions called from the threads of a
 * parallel region at once (the attention's per-head tiles, the convolutions' accumulating
 * calls). The description names OpenBLAS and its kernels. */
#include "check.h"
#include "cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int nda, ndb;
    int64_t a[3], b[3];
    int ta, tb;
    int threads;
} mm_case;

static const mm_case cases[] = {
    {2, 2, {7, 19}, {19, 33}, 0, 0, 2},
    {2, 2, {19, 7}, {19, 33}, 1, 0, 2},
    {2, 2, {7, 19}, {33, 19}, 0, 1, 2},
    {2, 2, {19, 7}, {33, 19}, 1, 1, 1},
    {3, 3, {5, 9, 17}, {5, 17, 13}, 0, 0, 2},
    {3, 2, {3, 6, 17}, {21, 17}, 0, 1, 2},     /* shared B */
    {2, 2, {130, 301}, {515, 301}, 0, 1, 2},
    {2, 2, {1030, 70}, {1030, 90}, 1, 0, 2},   /* A^T B, long inner dimension */
    {2, 2, {67, 2049}, {2049, 45}, 0, 0, 1},
    {2, 2, {1, 300}, {300, 77}, 0, 0, 2},      /* one row: the matrix-vector product */
};

static float value(uint64_t i, int which)
{
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)which << 40;
    h ^= h >> 29;
    return (float)((double)(h % 2001) / 1000.0 - 1.0);
}

static float *values(int64_t n, int which)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; x && i < n; i++)
        x[i] = value((uint64_t)i, which);
    return x;
}

static int64_t numel(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= s[i];
    return n;
}

/* the node's product in f64 from the same values, and the bound of f32 rounding: sums of
 * |a||b| times a few units of f32's epsilon */
static void reference(const mm_case *c, const float *a, const float *b, double *ref, double *bound)
{
    int64_t ra = c->a[c->nda - 2], ca = c->a[c->nda - 1], rb = c->b[c->ndb - 2], cb = c->b[c->ndb - 1];
    int64_t m = c->ta ? ca : ra, k = c->ta ? ra : ca, n = c->tb ? rb : cb;
    int64_t batch = c->nda == 3 ? c->a[0] : 1, sb = c->ndb == 3 ? rb * cb : 0;
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, abs_s = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = a[q * ra * ca + (c->ta ? p * ca + i : i * ca + p)];
                    double y = b[q * sb + (c->tb ? j * cb + p : p * cb + j)];
                    s += x * y, abs_s += fabs(x * y);
                }
                ref[(q * m + i) * n + j] = s;
                bound[(q * m + i) * n + j] = 8 * 1.2e-7 * (abs_s + 1e-30);
            }
}

static void check_case(const mm_case *c)
{
    char what[128];
    snprintf(what, sizeof what, "[%lld,%lld%s] x [%lld,%lld%s] ta %d tb %d, %d threads", (long long)c->a[0], (long long)c->a[1], c->nda == 3 ? ",..." : "",
             (long long)c->b[0], (long long)c->b[1], c->ndb == 3 ? ",..." : "", c->ta, c->tb, c->threads);
    rc_set_threads(c->threads);
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *ta = rc_input(g, "a", RC_F32, c->nda, c->a), *tb = rc_input(g, "b", RC_F32, c->ndb, c->b);
    rc_tensor *y = rc_matmul(g, ta, tb, c->ta, c->tb);
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    int64_t na = numel(c->nda, c->a), nb = numel(c->ndb, c->b), ny = y ? rc_tensor_numel(y) : 0;
    float *a = values(na, 1), *b = values(nb, 2), *out = malloc((size_t)ny * sizeof *out);
    double *ref = malloc((size_t)ny * sizeof *ref), *bound = malloc((size_t)ny * sizeof *bound);
    int ran = p && a && b && out && ref && bound && !rc_plan_set_input(p, ta, a, &err) &&
              !rc_plan_set_input(p, tb, b, &err) && !rc_plan_run(p, &err) && !rc_plan_read(p, y, out, &err);
    CHECKF(ran, "%s: %s", what, err.msg);
    if (ran) {
        reference(c, a, b, ref, bound);
        int64_t bad = 0;
        for (int64_t i = 0; i < ny; i++)
            bad += !(fabs(out[i] - ref[i]) <= bound[i]);
        CHECKF(bad == 0, "%s: %lld of %lld values past f32 rounding of the f64 product", what, (long long)bad,
               (long long)ny);
    }
    free(a), free(b), free(out), free(ref), free(bound);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* alpha, beta and the leading dimensions of a sub-matrix, called directly, on this thread
 * and from the threads of a parallel region at once (each its own C) */
static void check_direct(void)
{
    enum { M = 13, N = 29, K = 37, LDA = 41, LDB = 33, LDC = 31, PARTS = 4 };
    rc_set_threads(2);
    float *a = values(M * LDA, 3), *b = values(K * LDB, 4), *c0 = values(PARTS * M * LDC, 5);
    float *c = malloc(PARTS * M * LDC * sizeof *c);
    memcpy(c, c0, PARTS * M * LDC * sizeof *c);
    #pragma omp parallel for num_threads(2)
    for (int q = 0; q < PARTS; q++)
        rci_cpu_sgemm(0, 0, M, N, K, 0.5f, a, LDA, b, LDB, q ? 2.0f : 0.0f, c + q * M * LDC, LDC);
    int64_t bad = 0;
    for (int q = 0; q < PARTS; q++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < LDC; j++) {
                double s = 0, abs_s = 0;
                for (int p = 0; p < K; p++)
                    s += (double)a[i * LDA + p] * b[p * LDB + j], abs_s += fabs((double)a[i * LDA + p] * b[p * LDB + j]);
                double old = c0[(q * M + i) * LDC + j];
                double want = j >= N ? old : 0.5 * s + (q ? 2.0 * old : 0.0);
                bad += !(fabs(c[(q * M + i) * LDC + j] - want) <= 8 * 1.2e-7 * (0.5 * abs_s + 2 * fabs(old)) + 1e-30);
            }
    CHECKF(bad == 0, "alpha, beta and leading dimensions inside a parallel region: %lld values wrong",
           (long long)bad);
    free(a), free(b), free(c0), free(c);
}

int main(void)
{
    char how[256];
    rci_cpu_sgemm_describe(how, sizeof how);
    printf("test_gemm_f32: f32 products on %s\n", how);
    CHECKF(strstr(how, "OpenBLAS (") == how, "the description names OpenBLAS and its kernels: %s", how);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
    check_direct();
    return check_summary("test_gemm_f32");
}
