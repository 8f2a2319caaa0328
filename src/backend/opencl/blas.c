/* blas.c - the OpenCL backend's matrix products: CLBlast's SGEMM for a MATMUL node that
 * is a GEMM (the ops' matmul; the shared layer runs the rest, gpu/ops_rows.c), and the
 * scratch that takes (the ops' matmul_scratch). f32 operands go to SGEMM in place; 16-bit
 * ones are widened into f32 scratch (k_cast), multiplied, and the result rounded back into
 * the output a chunk at a time. Above context.c (launching k_cast) and the shared layer's
 * scratch. */
#include "opencl.h"

#include <clblast_c.h>

static int blast_failed(rci_ocl *o, CLBlastStatusCode s, rc_error *err)
{
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: matmul: CLBlast status %d", o->name, (int)s);
}

/* n values of dtype `from` at (src, soff) converted into dtype `to` at (dst, doff) */
static int cast_into(rci_ocl *o, cl_mem dst, int64_t doff, rc_dtype to, cl_mem src, int64_t soff, rc_dtype from,
                     int64_t n, rc_error *err)
{
    int32_t t = to, f = from;
    rci_gpu_arg a[] = {{sizeof dst, &dst}, {sizeof doff, &doff}, {sizeof t, &t}, {sizeof src, &src},
                       {sizeof soff, &soff}, {sizeof f, &f}, {sizeof n, &n}};
    return rci_ocl_launch(&o->gpu, RC_F32, RCI_K_CAST, a, 7, rci_gpu_ew_items(n), 0, "matmul", err);
}

enum { MATMUL_CHUNK = 1 << 23 };   /* f32 elements of the 16-bit product's result per SGEMM */

/* How a 16-bit product runs through SGEMM: c by rows of op(a) (stacked) or by batches,
 * `per` units of `unit` f32 elements at a time */
typedef struct {
    int stacked;
    int64_t unit, units, per;
} matmul_chunks;

static matmul_chunks matmul_chunks_of(const rci_matmul_dims *d)
{
    matmul_chunks c;
    c.stacked = d->batch == 1 || (d->bb == 1 && d->ba == d->batch && !d->ta);
    c.unit = c.stacked ? d->n : d->m * d->n;
    c.units = c.stacked ? d->batch * d->m : d->batch;
    c.per = MATMUL_CHUNK / c.unit < 1 ? 1 : MATMUL_CHUNK / c.unit;
    c.per = c.per < c.units ? c.per : c.units;
    return c;
}

/* Bytes of scratch matmul_half takes: [a | b | chunk of c] in f32 */
static size_t matmul_half_scratch(const rci_matmul_dims *d)
{
    matmul_chunks c = matmul_chunks_of(d);
    return (size_t)(d->ba * d->m * d->k + d->bb * d->k * d->n + c.per * c.unit) * sizeof(cl_float);
}

size_t rci_ocl_matmul_scratch(const rci_gpu *g, const rci_matmul_dims *d, rc_dtype store)
{
    (void)g;
    return store == RC_F32 ? 0 : matmul_half_scratch(d);
}

/* A product of 16-bit operands (dtype st) through SGEMM: both widened into scratch
 * [a | b | chunk of c], c computed a chunk of rows (or of batches) at a time and rounded
 * into the output, so the scratch never holds the whole f32 result (logits). */
static int matmul_half(rci_ocl *o, rc_dtype st, const rci_matmul_dims *d, const rci_gpu_place *out,
                       const rci_gpu_place *in, rc_error *err)
{
    int64_t m = d->m, n = d->n, k = d->k, lds[3], strides[3];
    if (rci_matmul_layout(d, lds, strides))
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: matmul: 16-bit operands in a strided layout (the "
                            "attention's products widen theirs first)", o->name);
    matmul_chunks c = matmul_chunks_of(d);
    int stacked = c.stacked;
    int64_t unit = c.unit, units = c.units, per = c.per;
    int64_t na = d->ba * m * k, nb = d->bb * k * n;
    cl_mem t = rci_gpu_scratch(&o->gpu, matmul_half_scratch(d), err);
    if (!t || cast_into(o, t, 0, RC_F32, in[0].mem, in[0].off, st, na, err) ||
        cast_into(o, t, na, RC_F32, in[1].mem, in[1].off, st, nb, err))
        return -1;
    CLBlastTranspose opa = d->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose opb = d->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    size_t lda = (size_t)(d->ta ? m : k), ldb = (size_t)(d->tb ? k : n), co = (size_t)(na + nb);
    for (int64_t u0 = 0; u0 < units; u0 += per) {
        int64_t cnt = units - u0 < per ? units - u0 : per;
        CLBlastStatusCode s;
        if (stacked) /* rows u0 .. of op(a): columns of a stored [k, m] when ta (then batch 1) */
            s = CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)cnt, (size_t)n, (size_t)k, 1.0f, t,
                             (size_t)(d->ta ? u0 : u0 * k), lda, t, (size_t)na, ldb, 0.0f, t, co,
                             (size_t)n, &o->queue, NULL);
        else
            s = CLBlastSgemmStridedBatched(
                CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n, (size_t)k, 1.0f, t,
                d->ba == 1 ? 0 : (size_t)(u0 * m * k), lda, d->ba == 1 ? 0 : (size_t)(m * k), t,
                (size_t)(na + (d->bb == 1 ? 0 : u0 * k * n)), ldb, d->bb == 1 ? 0 : (size_t)(k * n), 0.0f,
                t, co, (size_t)n, (size_t)(m * n), (size_t)cnt, &o->queue, NULL);
        if (s != CLBlastSuccess)
            return blast_failed(o, s, err);
        if (cast_into(o, out->mem, out->off + u0 * unit, st, t, (int64_t)co, RC_F32, cnt * unit, err))
            return -1;
    }
    return 0;
}

/* src0 a [..., M, K] (stored [..., K, M] when ta), src1 b [..., K, N] (stored [..., N, K]
 * when tb) -> [..., M, N]; either operand may be shared by all batches; in f32, d's layout
 * (rci_matmul_layout) where it sets one */
int rci_ocl_matmul(rci_gpu *g, const rc_tensor *node, const rci_matmul_dims *d, rc_dtype store,
                   const rci_gpu_place *out, const rci_gpu_place *in, rc_error *err)
{
    rci_ocl *o = rci_ocl_of(g);
    (void)node;
    if (store != RC_F32)
        return matmul_half(o, store, d, out, in, err);
    int ta = d->ta, tb = d->tb;
    int64_t m = d->m, k = d->k, n = d->n, batch = d->batch, ba = d->ba, bb = d->bb, ld[3], st[3];
    int laid = rci_matmul_layout(d, ld, st);
    CLBlastTranspose opa = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose opb = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastStatusCode s;
    if (!laid && (batch == 1 || (bb == 1 && ba == batch && !ta))) {
        /* one gemm: the batches of a stacked into its rows */
        s = CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, (size_t)(batch * m), (size_t)n, (size_t)k,
                         1.0f, in[0].mem, (size_t)in[0].off, (size_t)ld[0], in[1].mem, (size_t)in[1].off,
                         (size_t)ld[1], 0.0f, out->mem, (size_t)out->off, (size_t)n, &o->queue, NULL);
    } else {
        s = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, opa, opb, (size_t)m, (size_t)n, (size_t)k, 1.0f, in[0].mem,
            (size_t)in[0].off, (size_t)ld[0], (size_t)st[0], in[1].mem, (size_t)in[1].off, (size_t)ld[1],
            (size_t)st[1], 0.0f, out->mem, (size_t)out->off, (size_t)ld[2], (size_t)st[2], (size_t)batch,
            &o->queue, NULL);
    }
    return s == CLBlastSuccess ? 0 : blast_failed(o, s, err);
}
