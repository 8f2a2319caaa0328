/* gemm_f32.c - the CPU's f32 and f64 matrix products (BLAS's gemm) on OpenBLAS, one home for
 * the kernels' calls: the products of MATMUL nodes, the attention's tiles, the convolutions
 * and the widening path of 16-bit products.
 *
 * Debian's OpenBLAS picks its kernels when it loads (before any of redco's code), from the
 * CPU's model number; on a CPU it does not know (a newer Xeon, or a virtual machine's model)
 * it falls back to its Prescott kernels (SSE3): 35-65 GFLOP/s on 2 cores of a Xeon with
 * AVX-512 and AMX, where its SkylakeX kernels (OPENBLAS_CORETYPE=SkylakeX, OpenBLAS's own
 * variable, read when it loads) give 165-294. rci_cpu_sgemm_describe says which kernels run
 * and, where they leave out the CPU's AVX2, what to set (`redco devices`). oneDNN's sgemm
 * (280-330 GFLOP/s there) is not used: with two OpenMP threads it corrupts the heap when a
 * signal arrives during a product (Debian's oneDNN 2.7; a loop of products with SIGTERM
 * every 0.5 ms aborts in "corrupted size vs. prev_size"), and redco's runs stop on signals. */
#include "cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <strings.h>
#include <threads.h>

static struct {
    int narrow;                   /* 1: OpenBLAS's kernels leave out the CPU's AVX2 */
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
    g.narrow = cpu_has_avx2() && !core_vectorized(g.core);
}

void rci_cpu_sgemm_describe(char *buf, size_t size)
{
    call_once(&g_once, choose);
    if (g.narrow)
        snprintf(buf, size,
                 "OpenBLAS (%s kernels, which leave out this CPU's AVX2: several times slower; "
                 "OPENBLAS_CORETYPE=Haswell or SkylakeX gives it ones that use them)",
                 g.core);
    else
        snprintf(buf, size, "OpenBLAS (%s kernels)", g.core);
}

void rci_cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

void rci_cpu_dgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                   const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}
