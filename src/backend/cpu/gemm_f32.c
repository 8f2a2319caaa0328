/* gemm_f32.c - the CPU's f32 and f64 matrix products (BLAS's gemm), one home for the
 * kernels' calls: the products of MATMUL nodes, the attention's tiles, the convolutions and
 * the widening path of 16-bit products.
 *
 * f64 runs on OpenBLAS's dgemm. f32 runs on OpenBLAS's sgemm, except where OpenBLAS runs
 * kernels that leave out the CPU's vector units: Debian's OpenBLAS picks its kernels when it
 * loads (before any of redco's code), from the CPU's model number, and on a CPU it does not
 * know (a newer Xeon, or a virtual machine's model) it falls back to its Prescott kernels
 * (SSE3): 35-60 GFLOP/s on 2 cores of a Xeon with AVX-512 where its SkylakeX kernels give
 * 170-290. There f32 runs on oneDNN's sgemm, which picks its kernels from the CPU's
 * features: 130-190 GFLOP/s on the same cores. The test: the CPU has AVX2 and FMA (x86)
 * and OpenBLAS's core (openblas_get_corename) is none of those whose kernels use them.
 * OPENBLAS_CORETYPE (OpenBLAS's own variable, read when it loads) names the right core and
 * so keeps OpenBLAS; rci_cpu_sgemm_describe says which library runs the products and why
 * (`redco devices`). Either library sums in f32 in its own order: the results agree to
 * f32 rounding (tests/backend/test_gemm_dnnl.c runs both against f64). */
#include "cpu.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <threads.h>

static struct {
    int onednn;                   /* 1: f32 products on oneDNN */
    int forced;                   /* 1: rci_cpu_sgemm_onednn chose, not the test */
    char core[32];                /* OpenBLAS's core */
} g;

static once_flag g_once = ONCE_FLAG_INIT;

/* 1 when the CPU has AVX2 and FMA (the vector units OpenBLAS's newer kernels use) */
static int cpu_has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* 1 for the OpenBLAS cores whose sgemm kernels use AVX2 and FMA, or AVX-512 */
static int core_vectorized(const char *core)
{
    static const char *const wide[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        if (!strcasecmp(core, wide[i]))
            return 1;
    return 0;
}

static void choose(void)
{
    const char *core = openblas_get_corename();
    snprintf(g.core, sizeof g.core, "%s", core ? core : "unknown");
    g.onednn = cpu_has_avx2() && !core_vectorized(g.core);
}

static void ready(void)
{
    call_once(&g_once, choose);
}

int rci_cpu_sgemm_onednn(int on)
{
    ready();
    int was = g.onednn;
    if (on >= 0)
        g.onednn = on != 0, g.forced = 1;
    return was;
}

void rci_cpu_sgemm_describe(char *buf, size_t size)
{
    ready();
    if (g.forced)
        snprintf(buf, size, "%s (chosen by the caller)", g.onednn ? "oneDNN" : "OpenBLAS");
    else if (g.onednn)
        snprintf(buf, size,
                 "oneDNN (OpenBLAS chose its %s kernels, which leave out this CPU's AVX2; "
                 "OPENBLAS_CORETYPE=Haswell or SkylakeX would give it ones that use them)",
                 g.core);
    else
        snprintf(buf, size, "OpenBLAS (%s kernels)", g.core);
}

void rci_cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    ready();
    /* oneDNN refuses nothing cblas_sgemm takes: on an error (none is expected) the same
     * product on OpenBLAS, which gives the same result to rounding */
    if (g.onednn && dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
                        dnnl_success)
        return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

void rci_cpu_dgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                   const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}
