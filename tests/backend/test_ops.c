/* test_ops.c - one table of op cases, run on every backend present against the CPU's f64
 * kernels.
 *
 * A case names an op family's builder, its leaves (shapes with odd and broadcast sizes,
 * value ranges), the dtypes it runs in (f32, bf16, f16; i32 where the op takes it) and
 * its tolerances. The one builder makes every graph of a case: the f64 reference, the f32,
 * the 16-bit and the i32 ones (no builder exists twice). For each dtype the leaves' values
 * are drawn once and rounded to that dtype, so every graph reads the same numbers; the
 * reference is the same graph in f64 on the CPU (one thread), and each backend's outputs
 * (the op's value and, for cases with gradients, the gradients of sum(y * r)) are compared
 * with it. Besides, a device's 16-bit outputs are compared with the CPU's in the same dtype
 * in ulps (0: bitwise, where both compute the same f32 expression and round once), and
 * f32 outputs bit for bit where the case says so (dropout masks). The gradient graphs
 * themselves are checked by finite differences in f64 (tests/kit/gradcheck.h) on the
 * cases small enough.
 *
 * Backends: "cpu" (three threads; it also runs the f64 graphs, against the one-thread
 * reference), "cpu/1" (one thread, 16-bit nodes cut into small pieces), "cpu/slots" (bf16
 * and f16 on three threads, row pieces in slots, several at once), every OpenCL
 * device and every CUDA device. Without OpenCL devices the OpenCL part prints why and
 * passes, unless REDCO_REQUIRE_OPENCL=1 (CI sets it); likewise CUDA with
 * REDCO_REQUIRE_CUDA=1. Arguments "cpu", "opencl", "cuda" run only those backends.
 *
 * After the table: every backend has a 16-bit kernel for each op it runs in f32; the CPU's
 * casts of every 16-bit pattern (and 2^20 f32 ones) are bit for bit the scalar conversions
 * of half.h; each device runs the optimizer's work (AdamW, SGD, accumulate, sums of
 * squares, rounding of f32 masters into 16-bit weights) and those casts (i32 too) bit for
 * bit as the CPU backend. The last line lists the cases each backend ran. */
#include "check.h"
#include "gradcheck.h"
#include "internal.h"
#include "backend.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the CPU backend's size of a 16-bit node's pieces (src/backend/cpu/cpu.h; 0: default) */
void rci_cpu_half_chunk(int64_t floats);

enum { MAX_IN = 9, MAX_OUT = 1 + MAX_IN };

/* ---- the table's types ------------------------------------------------------------------ */

enum {
    FLOAT,   /* a leaf of the graph's dtype */
    IDS,     /* i32 ids, integers in [lo, hi) */
    LOSS     /* f32 in 16-bit graphs (a loss's gradient), else the graph's dtype */
};

typedef struct {
    int kind;
    int ndim;
    int64_t shape[4];
    double lo, hi;          /* values uniform in [lo, hi) */
    int ints;               /* whole numbers in [lo, hi) (conditions, equal's operands) */
    int nsp;                /* the first nsp values are sp[] (large, infinite, NaN) */
    const double *sp;
} leaf_spec;

typedef struct op_case op_case;
/* the case's output in graph g from leaves x, in dtype t (RC_F64 for the reference) */
typedef rc_tensor *(*build_fn)(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c);

enum { D_F32 = 1, D_BF16 = 2, D_F16 = 4, D_I32 = 8, D_FLOAT = 7, D_ALL = 15 };
enum { NO_GRAD = 0, GRAD = 1, GRAD_FD = 2 };

struct op_case {
    const char *name;
    build_fn build;
    int n;
    leaf_spec in[MAX_IN];
    unsigned dtypes;        /* D_...; f32 brings the f64 pass of "cpu" */
    int ip[4];              /* the family's integer parameters */
    double fp[2];           /* and real ones */
    int grad;               /* GRAD: gradients of sum(y * r) on every backend; GRAD_FD: and
                             * finite differences of the f64 graph (small cases) */
    double tol;             /* factor on the default tolerances (0: 1) */
    int ulps, gulps;        /* a device's 16-bit forward / gradients against the CPU's in the
                             * same dtype, in 16-bit ulps (-1: not compared) */
    int bitwise;            /* a device's f32 forward equals the CPU's bit for bit */
    int cpu_only;           /* an op the devices do not run (f64 casts) */
    int devices_only;       /* a device's path alone (the CPU runs only the reference) */
    int loss;               /* a loss: a 16-bit graph's output is f32 */
    int f32_of_ids;         /* the output of i32 leaves alone is f32 (equal) */
};

/* the dtype the graph being built serves: t itself, or the dtype whose reference it is */
static rc_dtype run_dtype;

/* With --attention-tiled, bf16 attention in tiles rounds its float operands (P, dS, z p) to
 * bf16 as FlashAttention does, so a value near zero after cancellation keeps few of the
 * CPU's ulps. Its outputs and gradients are held to FlashAttention's own criterion instead:
 * the largest error against the f64 reference at most TILES_ERROR times that of the CPU's
 * bf16 kernel (f32 inside, rounded once) on the same values, or of half a bf16 ulp of the
 * reference's largest value where the CPU's is smaller (an exact zero gradient). FlashAttention's tests allow
 * twice the error of PyTorch's bf16 attention, whose intermediates are rounded to bf16 too;
 * the CPU's kernel rounds once, so its error is the smaller: the table's cases reach 1.91
 * times it on PoCL, hence 3. (Cases with fewer than 16 query rows a pair take the products
 * there, ops_attention.c; their ulps are held in the run without --attention-tiled.) */
enum { TILES_ERROR = 3 };
static int tiles_precision;
static double tiles_worst;          /* the largest ratio seen, and where */
static char tiles_worst_at[1200];

/* ---- builders, one per family --------------------------------------------------------------- */

static rc_tensor *b_full(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    return rc_add(g, x[0], rc_full(g, t, x[0]->ndim, x[0]->shape, c->fp[0]));
}

/* ip[0]: 0 add, 1 sub, 2 mul, 3 div */
static rc_tensor *b_binary(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    switch (c->ip[0]) {
    case 0: return rc_add(g, x[0], x[1]);
    case 1: return rc_sub(g, x[0], x[1]);
    case 2: return rc_mul(g, x[0], x[1]);
    default: return rc_div(g, x[0], x[1]);
    }
}

/* ip[0]: 0 affine (fp[0] x + fp[1]), 1 exp, 2 log, 3 sqrt, 4 rsqrt, 5 tanh */
static rc_tensor *b_unary(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    switch (c->ip[0]) {
    case 0: return rc_affine(g, x[0], c->fp[0], c->fp[1]);
    case 1: return rc_exp(g, x[0]);
    case 2: return rc_log(g, x[0]);
    case 3: return rc_sqrt(g, x[0]);
    case 4: return rc_rsqrt(g, x[0]);
    default: return rc_tanh(g, x[0]);
    }
}

/* activation ip[0], derivative orders ip[1] .. ip[2] side by side */
static rc_tensor *b_act(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    rc_tensor *parts[3];
    int n = 0;
    for (int o = c->ip[1]; o <= c->ip[2]; o++)
        parts[n++] = rc_act(g, x[0], (rc_act_kind)c->ip[0], o);
    return n == 1 ? parts[0] : rc_concat(g, parts, n, 0);
}

/* ip[0] 0: where(x0, x1, x2) (x0 i32 or 0/1 values); 1: conditions made in the graph
 * (the dtype's own 0/1 from equal, an i32 one from a cast) */
static rc_tensor *b_where(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    if (c->ip[0] == 0)
        return rc_where(g, x[0], x[1], x[2]);
    rc_tensor *cond = rc_equal(g, rc_max(g, x[0], -1, 1), x[0]);
    rc_tensor *ci = rc_cast(g, rc_affine(g, x[1], 1.0, 0.0), RC_I32);
    return rc_add(g, rc_where(g, cond, x[0], x[1]), rc_where(g, ci, x[1], x[0]));
}

static rc_tensor *b_equal(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t, (void)c;
    return rc_equal(g, x[0], x[1]);
}

/* ip[0]: 0 permute (the permutation as the decimal digits of ip[1]: 2031 is {2, 0, 3, 1});
 * 1 slice (axis ip[1], from ip[2] to ip[3]); 2 pad (axis ip[1], ip[2] before, to size
 * ip[3]); 3 concat of x0, x1, x0 along ip[1]; 4 expand to [2, 3, 5, 4]; 5 all of them
 * chained (through a reshape); 6 a slice from an odd element, then exp */
static rc_tensor *b_move(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    switch (c->ip[0]) {
    case 0: {
        int perm[4], nd = x[0]->ndim;
        for (int i = nd - 1, code = c->ip[1]; i >= 0; i--, code /= 10)
            perm[i] = code % 10;
        return rc_permute(g, x[0], perm);
    }
    case 1: return rc_slice(g, x[0], c->ip[1], c->ip[2], c->ip[3]);
    case 2: return rc_pad(g, x[0], c->ip[1], c->ip[2], c->ip[3]);
    case 3: {
        rc_tensor *parts[3] = {x[0], x[1], x[0]};
        return rc_concat(g, parts, 3, c->ip[1]);
    }
    case 4: {
        int64_t big[4] = {2, 3, 5, 4};
        return rc_expand(g, x[0], 4, big);
    }
    case 5: {
        rc_tensor *p = rc_permute(g, x[0], (int[]){2, 0, 1});                             /* [5, 3, 4] */
        rc_tensor *s = rc_slice(g, p, 1, 1, 3);                                           /* [5, 2, 4] */
        rc_tensor *d = rc_pad(g, s, 2, 1, 7);                                             /* [5, 2, 7] */
        rc_tensor *e = rc_expand(g, rc_slice(g, x[0], 0, 0, 1), 3, (int64_t[]){2, 4, 5}); /* [2, 4, 5] */
        rc_tensor *r = rc_reshape(g, e, 3, (int64_t[]){5, 2, 4});
        rc_tensor *parts[3] = {rc_slice(g, d, 2, 0, 4), r, s};
        return rc_concat(g, parts, 3, 1);                                                 /* [5, 6, 4] */
    }
    default: return rc_exp(g, rc_slice(g, x[0], 0, 1, 6));
    }
}

/* ip[0]: 0 to i32; 1 through the other 16-bit dtype (f32 and f64 graphs: bf16) and back;
 * 2 through f32 (exp there) and back; 3 an f32 leaf rounded to the dtype; 4 through f64
 * and back; 5 i32 ids to the dtype */
static rc_tensor *b_cast(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    switch (c->ip[0]) {
    case 0: return rc_cast(g, x[0], RC_I32);
    case 1: return rc_cast(g, rc_cast(g, x[0], run_dtype == RC_BF16 ? RC_F16 : RC_BF16), t);
    case 2: return rc_cast(g, rc_exp(g, rc_cast(g, x[0], RC_F32)), t);
    case 3: return rc_cast(g, rc_affine(g, x[0], 1, 0), t);
    case 4: return rc_cast(g, rc_cast(g, x[0], RC_F64), t);
    default: return rc_cast(g, x[0], t);
    }
}

/* ip[0], ip[1]: transposes */
static rc_tensor *b_matmul(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    return rc_matmul(g, x[0], x[1], c->ip[0], c->ip[1]);
}

/* ip[0]: 0 sum, 1 max, 2 mean over axis ip[1] (keepdim ip[2]); 3 sum_to (see below);
 * 4 mean_all */
static rc_tensor *b_reduce(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    switch (c->ip[0]) {
    case 0: return rc_sum(g, x[0], c->ip[1], c->ip[2]);
    case 1: return rc_max(g, x[0], c->ip[1], c->ip[2]);
    case 2: return rc_mean(g, x[0], c->ip[1], c->ip[2]);
    case 3: {
        /* the target: the last ip[1] dims of x, those flagged in the bits of ip[2] kept
         * and the rest made 1 */
        int nd = c->ip[1];
        int64_t to[4];
        for (int i = 0; i < nd; i++)
            to[i] = (c->ip[2] >> i) & 1 ? x[0]->shape[x[0]->ndim - nd + i] : 1;
        return rc_sum_to(g, x[0], nd, to);
    }
    default: return rc_mean_all(g, x[0]);
    }
}

/* ip[0]: 0 plain; 1 mask x1, scale fp[0], causal ip[1]; 2 no mask, scale fp[0], causal ip[1] */
static rc_tensor *b_softmax(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    if (c->ip[0] == 0)
        return rc_softmax(g, x[0]);
    return rc_softmax_ext(g, x[0], c->ip[0] == 1 ? x[1] : NULL, c->fp[0], c->ip[1]);
}

/* fused attention: q x0 [B, H, Tq, D], k x1, v x2 [B, KV, Tk, .], bias x3 when ip[0], causal
 * ip[1], scale fp[0], dropout fp[1] (b_random's key) */
static rc_tensor *b_attention(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    return rc_attention(g, x[0], x[1], x[2], c->ip[0] ? x[3] : NULL, c->fp[0], c->ip[1], c->fp[1], rc_rng_new(5));
}

/* ip[0]: 0 layer_norm (weight x1 when ip[1], bias the next leaf when ip[2]); 1 rms_norm
 * (weight x1 when ip[1], offset fp[0]); ip[3] 1: x0 added to the norm (a residual stream:
 * x0's gradient the norm's dx with the stream's added in its pass) */
static rc_tensor *b_norm(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    rc_tensor *y = c->ip[0] == 0
                       ? rc_layer_norm(g, x[0], c->ip[1] ? x[1] : NULL, c->ip[2] ? x[c->ip[1] ? 2 : 1] : NULL, 1e-5)
                       : rc_rms_norm(g, x[0], c->ip[1] ? x[1] : NULL, 1e-6, c->fp[0]);
    return c->ip[3] ? rc_add(g, y, x[0]) : y;
}

/* ip[0]: 0 embedding; 1 with padding id ip[1]; 2 a shard from ip[1] of ip[2] rows;
 * 3 embedding_grad (ids x0, grad x1) of vocab ip[1], padding ip[2] */
static rc_tensor *b_embedding(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    switch (c->ip[0]) {
    case 0: return rc_embedding(g, x[0], x[1]);
    case 1: return rc_embedding_pad(g, x[0], x[1], c->ip[1]);
    case 2: return rc_embedding_shard(g, x[0], x[1], c->ip[1], c->ip[2]);
    default: return rc_embedding_grad(g, x[0], x[1], c->ip[1], c->ip[2]);
    }
}

/* one_hot of ids x0, depth ip[0], ignore ip[1] (a shard from ip[2] of ip[3] when ip[3]),
 * plus x1 when n > 1 (a gradient to take) */
static rc_tensor *b_one_hot(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    rc_tensor *y = c->ip[3] ? rc_one_hot_shard(g, x[0], c->ip[0], c->ip[1], t, c->ip[2], c->ip[3])
                            : rc_one_hot(g, x[0], c->ip[0], c->ip[1], t);
    return c->n > 1 ? rc_add(g, x[1], y) : y;
}

/* ip[0]: 0 the loss, 1 its gradient op (dloss x2); ignore id ip[1] */
static rc_tensor *b_cross_entropy(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    if (c->ip[0] == 0)
        return rc_cross_entropy(g, x[0], x[1], c->ip[1]);
    return rc_cross_entropy_grad(g, x[0], x[1], x[2], c->ip[1]);
}

/* rope of x0 at positions x1 (ip[3]: the constant positions 0, 3, 7, 100, 2047 instead),
 * rot dims ip[0], mode ip[1], inverse ip[2], theta fp[0] */
static rc_tensor *b_rope(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    static const int32_t pos[5] = {0, 3, 7, 100, 2047};
    rc_tensor *p = c->ip[3] ? rc_const(g, "pos", RC_I32, 1, (int64_t[]){5}, pos) : x[1];
    if (c->ip[2])
        return rc_rope_inverse(g, x[0], p, c->ip[0], (rc_rope_mode)c->ip[1], c->fp[0]);
    return rc_rope(g, x[0], p, c->ip[0], (rc_rope_mode)c->ip[1], c->fp[0]);
}

/* ip[0]: 0 dropout p fp[0]; 1 x times normal draws of the run key, 2 of the step key */
static rc_tensor *b_random(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    if (c->ip[0] == 0)
        return rc_dropout(g, x[0], c->fp[0], rc_rng_new(5));
    return rc_mul(g, x[0], rc_normal(g, t, x[0]->ndim, x[0]->shape, rc_rng_new(5),
                                     c->ip[0] == 1 ? RC_RNG_RUN : RC_RNG_STEP));
}

/* ip[0]: 0 conv2d of x0 with weight x1 and bias x2 (stride ip[1], padding ip[2], groups
 * ip[3]); 1 max pool, 2 average pool (window ip[1], stride ip[2], padding ip[3]) */
static rc_tensor *b_conv(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t;
    if (c->ip[0] == 0) {
        rc_conv2d_params p = {{c->ip[1], c->ip[1]}, {c->ip[2], c->ip[2]}, {1, 1}, c->ip[3]};
        return rc_conv2d(g, x[0], x[1], x[2], &p);
    }
    rc_pool2d_params p = {{c->ip[1], c->ip[1]}, {c->ip[2], c->ip[2]}, {c->ip[3], c->ip[3]}};
    return c->ip[0] == 1 ? rc_max_pool2d(g, x[0], &p) : rc_avg_pool2d(g, x[0], &p);
}

/* the collectives of one process (identities) and stop_gradient */
static rc_tensor *b_collectives(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t, (void)c;
    rc_tensor *a = rc_mp_enter(g, x[0]);
    rc_tensor *parts[3] = {rc_mp_reduce(g, a), rc_mp_max(g, a), rc_stop_gradient(g, a)};
    return rc_concat(g, parts, 3, 0);
}

/* a small MLP with a softmax cross-entropy: x0 [B, D], w1 x1, b1 x2, w2 x3, targets x4 */
static rc_tensor *b_mlp(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t, (void)c;
    rc_tensor *hid = rc_gelu(g, rc_add(g, rc_matmul(g, x[0], x[1], 0, 0), x[2]));
    return rc_cross_entropy(g, rc_matmul(g, hid, x[3], 0, 0), x[4], RC_IGNORE_INDEX);
}

/* A causal attention block with a tied-embedding head and a cross-entropy: ids x0 [B, T],
 * targets x1, positions x2 [T], then wte [V, C], ln_w, ln_b, qkv [C, 3C], proj [C, C],
 * rms_w: views, permutes, batched products, rope, the norms and softmax in one plan. */
static rc_tensor *b_block(rc_graph *g, rc_tensor **x, rc_dtype t, const op_case *c)
{
    (void)t, (void)c;
    enum { NH = 2 };
    int64_t b = x[0]->shape[0], tt = x[0]->shape[1], cc = x[3]->shape[1], hd = cc / NH;
    rc_tensor *h = rc_embedding(g, x[3], x[0]);                                    /* [B, T, C] */
    rc_tensor *qkv = rc_matmul(g, rc_layer_norm(g, h, x[4], x[5], 1e-5), x[6], 0, 0);
    rc_tensor *hs[3];
    for (int k = 0; k < 3; k++) {
        rc_tensor *s = rc_reshape(g, rc_slice(g, qkv, 2, k * cc, (k + 1) * cc), 4, (int64_t[]){b, tt, NH, hd});
        if (k < 2)
            s = rc_rope(g, s, x[2], (int)hd, RC_ROPE_HALF, 10000.0);
        hs[k] = rc_permute(g, s, (int[]){0, 2, 1, 3});                             /* [B, NH, T, HD] */
    }
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, hs[0], hs[1], 0, 1), NULL, 1 / sqrt((double)hd), 1);
    rc_tensor *o = rc_reshape(g, rc_permute(g, rc_matmul(g, att, hs[2], 0, 0), (int[]){0, 2, 1, 3}), 3,
                              (int64_t[]){b, tt, cc});
    h = rc_add(g, h, rc_matmul(g, rc_silu(g, o), x[7], 0, 0));
    rc_tensor *logits = rc_matmul(g, rc_rms_norm(g, h, x[8], 1e-6, 0.0), x[3], 0, 1);
    return rc_cross_entropy(g, logits, x[1], RC_IGNORE_INDEX);
}

/* ---- the table ------------------------------------------------------------------------------ */

#define F(nd, lo, hi, ...) {FLOAT, nd, {__VA_ARGS__}, lo, hi, 0, 0, NULL}
#define N(nd, lo, hi, ...) {FLOAT, nd, {__VA_ARGS__}, lo, hi, 1, 0, NULL}
#define I(nd, lo, hi, ...) {IDS, nd, {__VA_ARGS__}, lo, hi, 0, 0, NULL}
#define L(nd, lo, hi, ...) {LOSS, nd, {__VA_ARGS__}, lo, hi, 0, 0, NULL}

/* large values for the activations (finite results), casts' edges, softmax's -inf */
static const double act_edges[] = {0, 20, -20, 100, -100, 1000, -1000, 1e-3};
static const double cast_edges[] = {1e10, -1e10, 2.75, -2.75, -0.5, 0.5, NAN, 1234567};
static const double mask_edges[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                                    -INFINITY, 0, -INFINITY};

/* Tolerances: forward against f64 at most 1e-5 (f32), 8e-3 (bf16), 2e-3 (f16) relative,
 * gradients 1e-4, 3e-2, 1e-2, times the case's factor; an element's error is relative to
 * itself or, near zero, to 1e-3 (f32) or 1e-2 (16 bits) of the output's largest value.
 * Device against the CPU, 16 bits: ulps 0 where both compute the same f32 expression and
 * round once; 1 where sums run in another order (CLBlast's GEMM against OpenBLAS, a
 * reduction's chunks) or a math library function (log, tanh, erf) may be an f32 ulp off
 * the CPU's; gradients add the roundings of a graph's 16-bit intermediate nodes. */
static const op_case cases[] = {
    /* fill, element-wise */
    {"full", b_full, 1, {F(2, -1, 1, 3, 5)}, D_FLOAT, .fp = {0.375}, .grad = GRAD_FD},
    {"add_bcast", b_binary, 2, {F(3, -2, 2, 4, 1, 6), F(2, -2, 2, 5, 1)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"add_scalar", b_binary, 2, {F(2, -2, 2, 2, 3), F(0, -2, 2, 0)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"add_rank", b_binary, 2, {F(1, -2, 2, 1), F(3, -2, 2, 9, 1, 3)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"add_big", b_binary, 2, {F(2, -2, 2, 70, 1000), F(1, -2, 2, 1000)}, D_FLOAT, {0}, .grad = GRAD},
    {"sub_outer", b_binary, 2, {F(2, -2, 2, 3, 1), F(2, -2, 2, 1, 5)}, D_FLOAT, {1}, .grad = GRAD_FD},
    {"sub_4d", b_binary, 2, {F(4, -2, 2, 2, 1, 3, 1), F(4, -2, 2, 1, 5, 1, 7)}, D_FLOAT, {1}, .grad = GRAD_FD},
    {"mul", b_binary, 2, {F(2, -2, 2, 300, 257), F(2, -2, 2, 300, 257)}, D_FLOAT, {2}, .grad = GRAD},
    {"mul_bcast", b_binary, 2, {F(4, -2, 2, 3, 4, 5, 6), F(1, -2, 2, 6)}, D_FLOAT, {2}, .grad = GRAD},
    {"mul_mid", b_binary, 2, {F(3, -2, 2, 2, 1, 20000), F(3, -2, 2, 1, 3, 1)}, D_FLOAT, {2}, .grad = GRAD},
    {"div_scalar", b_binary, 2, {F(2, -2, 2, 4, 6), F(0, 0.5, 2, 0)}, D_FLOAT, {3}, .grad = GRAD_FD},
    {"div_bcast", b_binary, 2, {F(3, -2, 2, 2, 3, 5), F(2, 0.5, 2, 3, 1)}, D_FLOAT, {3}, .grad = GRAD_FD},
    {"affine", b_unary, 1, {F(1, -3, 3, 50000)}, D_FLOAT, {0}, {1.7, -0.25}, .grad = GRAD},
    {"affine_small", b_unary, 1, {F(3, -3, 3, 3, 2, 7)}, D_FLOAT, {0}, {1.3, -0.4}, .grad = GRAD_FD},
    {"exp", b_unary, 1, {F(2, -4, 4, 7, 9)}, D_FLOAT, {1}, .grad = GRAD_FD},
    {"exp_big", b_unary, 1, {F(2, -4, 4, 70, 90)}, D_FLOAT, {1}, .grad = GRAD},
    {"log", b_unary, 1, {F(2, 0.1, 4, 7, 9)}, D_FLOAT, {2}, .grad = GRAD_FD, .ulps = 1, .gulps = 1},
    {"log_big", b_unary, 1, {F(2, 0.1, 4, 70, 90)}, D_FLOAT, {2}, .grad = GRAD, .ulps = 1, .gulps = 1},
    {"sqrt", b_unary, 1, {F(2, 0.1, 4, 7, 9)}, D_FLOAT, {3}, .grad = GRAD_FD},
    {"rsqrt", b_unary, 1, {F(2, 0.1, 4, 7, 9)}, D_FLOAT, {4}, .grad = GRAD_FD},
    {"rsqrt_big", b_unary, 1, {F(2, 0.1, 4, 70, 90)}, D_FLOAT, {4}, .grad = GRAD},
    {"tanh", b_unary, 1, {F(2, -3, 3, 7, 9)}, D_FLOAT, {5}, .grad = GRAD_FD, .ulps = 1, .gulps = 1},
    {"tanh_big", b_unary, 1, {F(2, -3, 3, 70, 90)}, D_FLOAT, {5}, .grad = GRAD, .ulps = 1, .gulps = 1},
    /* activations: values and first derivatives (with their gradients), second derivatives */
    {"relu", b_act, 1, {F(2, -6, 6, 5, 37)}, D_FLOAT, {RC_ACT_RELU, 0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .tol = 30},
    {"gelu_tanh", b_act, 1, {F(2, -6, 6, 5, 37)}, D_FLOAT, {RC_ACT_GELU_TANH, 0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .tol = 30},
    {"gelu_erf", b_act, 1, {F(2, -6, 6, 5, 37)}, D_FLOAT, {RC_ACT_GELU_ERF, 0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .tol = 30},
    {"silu", b_act, 1, {F(2, -6, 6, 5, 37)}, D_FLOAT, {RC_ACT_SILU, 0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .tol = 30},
    {"sigmoid", b_act, 1, {F(2, -6, 6, 5, 37)}, D_FLOAT, {RC_ACT_SIGMOID, 0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .tol = 30},
    {"act_order2", b_act, 1, {{FLOAT, 1, {2000}, -6, 6, 0, 8, act_edges}}, D_FLOAT, {RC_ACT_RELU, 0, 2}, .ulps = 1, .tol = 30},
    {"gelu_tanh_order2", b_act, 1, {{FLOAT, 1, {2000}, -6, 6, 0, 8, act_edges}}, D_FLOAT, {RC_ACT_GELU_TANH, 0, 2}, .ulps = 1, .tol = 30},
    {"gelu_erf_order2", b_act, 1, {{FLOAT, 1, {2000}, -6, 6, 0, 8, act_edges}}, D_FLOAT, {RC_ACT_GELU_ERF, 0, 2}, .ulps = 1, .tol = 30},
    {"silu_order2", b_act, 1, {{FLOAT, 1, {2000}, -6, 6, 0, 8, act_edges}}, D_FLOAT, {RC_ACT_SILU, 0, 2}, .ulps = 1, .tol = 30},
    {"sigmoid_order2", b_act, 1, {{FLOAT, 1, {2000}, -6, 6, 0, 8, act_edges}}, D_FLOAT, {RC_ACT_SIGMOID, 0, 2}, .ulps = 1, .tol = 30},
    /* where, equal */
    {"where_i32", b_where, 3, {I(2, 0, 2, 4, 1), F(2, -2, 2, 4, 6), F(1, -2, 2, 6)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"where_scalar", b_where, 3, {N(2, 0, 2, 4, 1), F(0, -2, 2, 0), F(3, -2, 2, 2, 4, 5)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"where_big", b_where, 3, {N(2, 0, 2, 200, 300), F(2, -2, 2, 200, 300), F(2, -2, 2, 200, 1)}, D_FLOAT, {0}, .grad = GRAD},
    {"where_made", b_where, 2, {F(2, -1, 1, 4, 9), F(2, -1, 1, 4, 9)}, D_FLOAT, {1}, .grad = GRAD},
    {"equal", b_equal, 2, {N(2, 0, 3, 5, 7), N(1, 0, 3, 7)}, D_ALL, {0}, .grad = NO_GRAD, .f32_of_ids = 1},
    {"equal_ids", b_equal, 2, {I(3, 0, 3, 2, 3, 4), I(1, 0, 3, 4)}, D_F32, {0}, .grad = NO_GRAD, .f32_of_ids = 1},
    /* data movement (i32 too) */
    {"permute", b_move, 1, {F(4, -2, 2, 2, 3, 5, 4)}, D_ALL, {0, 2031}, .grad = GRAD_FD},
    {"permute_3d", b_move, 1, {F(3, -2, 2, 2, 3, 4)}, D_ALL, {0, 120}, .grad = GRAD_FD},
    {"permute_tiles", b_move, 1, {F(3, -2, 2, 3, 70, 45)}, D_ALL, {0, 21}, .grad = GRAD},
    {"permute_reverse", b_move, 1, {F(3, -2, 2, 33, 5, 97)}, D_ALL, {0, 210}, .grad = GRAD},
    {"permute_4d", b_move, 1, {F(4, -2, 2, 2, 40, 3, 50)}, D_ALL, {0, 3021}, .grad = NO_GRAD},
    {"slice", b_move, 1, {F(4, -2, 2, 2, 3, 5, 4)}, D_ALL, {1, 2, 1, 4}, .grad = GRAD_FD},
    {"slice_big", b_move, 1, {F(2, -2, 2, 400, 300)}, D_ALL, {1, 1, 50, 250}, .grad = GRAD},
    {"pad", b_move, 1, {F(4, -2, 2, 2, 3, 5, 4)}, D_ALL, {2, 1, 2, 6}, .grad = GRAD_FD},
    {"concat", b_move, 2, {F(4, -2, 2, 2, 3, 5, 4), F(4, -2, 2, 2, 3, 5, 2)}, D_ALL, {3, 3}, .grad = GRAD_FD},
    {"concat_0", b_move, 2, {F(3, -2, 2, 1, 5, 6), F(3, -2, 2, 3, 5, 6)}, D_ALL, {3, 0}, .grad = GRAD},
    {"expand", b_move, 1, {F(3, -2, 2, 3, 1, 4)}, D_ALL, {4}, .grad = GRAD_FD},
    {"moves", b_move, 1, {F(3, -1, 1, 3, 4, 5)}, D_ALL, {5}, .grad = GRAD_FD},
    {"odd_slice", b_move, 1, {F(2, -1, 1, 7, 3)}, D_FLOAT, {6}, .grad = GRAD_FD},
    /* casts */
    {"cast_to_i32", b_cast, 1, {{FLOAT, 2, {9, 11}, -50, 50, 0, 8, cast_edges}}, D_FLOAT, {0}, .grad = NO_GRAD},
    {"cast_16_16", b_cast, 1, {F(2, -10, 10, 40, 9)}, D_FLOAT, {1}, .grad = GRAD},
    {"cast_via_f32", b_cast, 1, {F(2, -10, 10, 40, 9)}, D_FLOAT, {2}, .grad = GRAD, .tol = 2},
    {"cast_round", b_cast, 1, {L(2, -100, 100, 400, 90)}, D_FLOAT, {3}, .grad = GRAD},
    {"cast_f64", b_cast, 1, {F(2, -100, 100, 40, 9)}, D_FLOAT, {4}, .grad = GRAD, .cpu_only = 1},
    {"cast_from_i32", b_cast, 1, {I(1, -3000, 3000, 99)}, D_FLOAT, {5}, .grad = NO_GRAD},
    /* matmul: transposes, batches, a shared operand */
    {"matmul", b_matmul, 2, {F(2, -1, 1, 5, 7), F(2, -1, 1, 7, 3)}, D_FLOAT, {0, 0}, .grad = GRAD_FD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_ta", b_matmul, 2, {F(2, -1, 1, 7, 5), F(2, -1, 1, 7, 3)}, D_FLOAT, {1, 0}, .grad = GRAD_FD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_tb", b_matmul, 2, {F(2, -1, 1, 5, 7), F(2, -1, 1, 3, 7)}, D_FLOAT, {0, 1}, .grad = GRAD_FD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_tt", b_matmul, 2, {F(2, -1, 1, 7, 5), F(2, -1, 1, 3, 7)}, D_FLOAT, {1, 1}, .grad = GRAD_FD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_shared_b", b_matmul, 2, {F(4, -1, 1, 2, 3, 5, 7), F(2, -1, 1, 7, 4)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_batched", b_matmul, 2, {F(3, -1, 1, 4, 5, 7), F(3, -1, 1, 4, 7, 3)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_batched_tt", b_matmul, 2, {F(3, -1, 1, 4, 7, 5), F(3, -1, 1, 4, 3, 7)}, D_FLOAT, {1, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_batched_tb", b_matmul, 2, {F(3, -1, 1, 3, 9, 12), F(3, -1, 1, 3, 7, 12)}, D_FLOAT, {0, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_batch_ta", b_matmul, 2, {F(3, -1, 1, 3, 7, 5), F(2, -1, 1, 7, 6)}, D_FLOAT, {1, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_wide", b_matmul, 2, {F(2, -1, 1, 1, 65), F(2, -1, 1, 65, 33)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_batch9", b_matmul, 2, {F(3, -1, 1, 9, 6, 4), F(3, -1, 1, 9, 4, 7)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_64", b_matmul, 2, {F(2, -1, 1, 64, 80), F(2, -1, 1, 48, 80)}, D_FLOAT, {0, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_k0", b_matmul, 2, {F(2, -1, 1, 3, 0), F(2, -1, 1, 0, 4)}, D_FLOAT, {0, 0}, .grad = NO_GRAD},
    /* a few rows by a shared matrix: the decoding kernel (16 bits: the words read directly) */
    {"matmul_rows", b_matmul, 2, {F(2, -1, 1, 4, 40), F(2, -1, 1, 40, 517)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_row", b_matmul, 2, {F(2, -1, 1, 1, 300), F(2, -1, 1, 300, 700)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_row_1", b_matmul, 2, {F(2, -1, 1, 1, 67), F(2, -1, 1, 67, 5003)}, D_FLOAT, {0, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_rows_tb", b_matmul, 2, {F(3, -1, 1, 1, 3, 301), F(2, -1, 1, 517, 301)}, D_FLOAT, {0, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_row_tb", b_matmul, 2, {F(2, -1, 1, 3, 41), F(2, -1, 1, 517, 41)}, D_FLOAT, {0, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_rows_ta", b_matmul, 2, {F(2, -1, 1, 37, 2), F(2, -1, 1, 37, 19)}, D_FLOAT, {1, 0}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    {"matmul_rows_tt", b_matmul, 2, {F(2, -1, 1, 37, 4), F(2, -1, 1, 300, 37)}, D_FLOAT, {1, 1}, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 1},
    /* results larger than a chunk of a device's 16-bit product's f32 scratch (2^23 floats):
     * rows, columns of a, batches (one 16-bit dtype each: they take a while) */
    {"matmul_chunks", b_matmul, 2, {F(2, -1, 1, 300, 8), F(2, -1, 1, 8, 30000)}, D_BF16, {0, 0}, .tol = 30, .ulps = -1, .devices_only = 1},
    {"matmul_chunks_ta", b_matmul, 2, {F(2, -1, 1, 8, 300), F(2, -1, 1, 8, 30000)}, D_F16, {1, 0}, .tol = 30, .ulps = -1, .devices_only = 1},
    {"matmul_chunks_batch", b_matmul, 2, {F(3, -1, 1, 3, 1700, 4), F(3, -1, 1, 3, 4, 1700)}, D_BF16, {0, 0}, .tol = 30, .ulps = -1, .devices_only = 1},
    /* reductions */
    {"sum_0", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {0, 0, 0}, .grad = GRAD},
    {"sum_1_keep", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {0, 1, 1}, .grad = GRAD},
    {"sum_2", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {0, 2, 0}, .grad = GRAD},
    {"sum_small", b_reduce, 1, {F(3, -2, 2, 3, 4, 5)}, D_FLOAT, {0, 1, 0}, .grad = GRAD_FD},
    {"sum_mid", b_reduce, 1, {F(3, -1, 1, 4, 300, 5)}, D_FLOAT, {0, 1, 0}, .grad = GRAD},
    {"sum_two_pass", b_reduce, 1, {F(3, -2, 2, 3001, 3, 2)}, D_FLOAT, {0, 0, 0}, .grad = GRAD},
    {"sum_long_row", b_reduce, 1, {F(2, -2, 2, 1, 50000)}, D_FLOAT, {0, 1, 1}, .grad = NO_GRAD},
    {"sum_wide_cols", b_reduce, 1, {F(2, -2, 2, 2, 40000)}, D_FLOAT, {0, 0, 0}, .grad = NO_GRAD},
    {"max_0", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {1, 0, 0}, .grad = GRAD},
    {"max_1_keep", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {1, 1, 1}, .grad = GRAD},
    {"max_2", b_reduce, 1, {F(3, -2, 2, 4, 33, 7)}, D_FLOAT, {1, 2, 0}, .grad = GRAD},
    {"max_small", b_reduce, 1, {F(2, -1, 1, 30, 7)}, D_FLOAT, {1, 0, 1}, .grad = GRAD_FD},
    {"max_two_pass", b_reduce, 1, {F(3, -2, 2, 3001, 3, 2)}, D_FLOAT, {1, 0, 0}, .grad = GRAD},
    {"mean_last", b_reduce, 1, {F(2, -1, 1, 3, 70000)}, D_FLOAT, {2, -1, 1}, .grad = GRAD, .tol = 2},
    {"mean_all", b_reduce, 1, {F(2, -2, 2, 300, 41)}, D_FLOAT, {4}, .grad = GRAD, .tol = 10},
    {"sum_to_rows", b_reduce, 1, {F(4, -2, 2, 2, 5, 3, 7)}, D_FLOAT, {3, 3, 1}, .grad = GRAD},
    {"sum_to_mid", b_reduce, 1, {F(4, -2, 2, 2, 5, 3, 7)}, D_FLOAT, {3, 3, 2}, .grad = GRAD},
    {"sum_to_last", b_reduce, 1, {F(4, -2, 2, 2, 5, 3, 7)}, D_FLOAT, {3, 1, 1}, .grad = GRAD},
    {"sum_to_small", b_reduce, 1, {F(3, -1, 1, 4, 3, 5)}, D_FLOAT, {3, 2, 2}, .grad = GRAD_FD},
    {"sum_to_two_pass", b_reduce, 1, {F(3, -2, 2, 7, 2100, 3)}, D_FLOAT, {3, 3, 4}, .grad = GRAD},
    /* softmax: plain; scaled with a broadcast mask; causal, more keys than queries and fewer */
    {"softmax", b_softmax, 1, {F(4, -2, 2, 2, 3, 5, 9)}, D_FLOAT, {0}, .grad = GRAD},
    {"softmax_small", b_softmax, 1, {F(2, -6, 6, 5, 8)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"softmax_mask", b_softmax, 2, {F(4, -2, 2, 2, 3, 5, 9), F(3, -2, 2, 1, 5, 9)}, D_FLOAT, {1, 0}, {0.7}, .grad = GRAD},
    {"softmax_mask_small", b_softmax, 2, {F(3, -2, 2, 2, 3, 7), F(1, -1, 1, 7)}, D_FLOAT, {1, 0}, {0.5}, .grad = GRAD_FD},
    {"softmax_causal", b_softmax, 1, {F(4, -2, 2, 2, 3, 5, 9)}, D_FLOAT, {2, 1}, {1.3}, .grad = GRAD},
    {"softmax_mask_causal", b_softmax, 2, {F(4, -6, 6, 2, 3, 4, 6), F(2, -1, 0, 4, 6)}, D_FLOAT, {1, 1}, {0.125}, .grad = GRAD},
    {"softmax_causal_tq", b_softmax, 1, {F(2, -3, 3, 4, 2)}, D_FLOAT, {2, 1}, {1}, .grad = GRAD_FD},
    {"softmax_inf_mask", b_softmax, 2, {F(3, -3, 3, 2, 3, 7), {FLOAT, 2, {3, 7}, -1, 1, 0, 9, mask_edges}}, D_FLOAT, {1, 0}, {0.5}, .grad = NO_GRAD},
    {"softmax_large", b_softmax, 1, {F(2, 990, 1010, 3, 9)}, D_FLOAT, {0}, .tol = 10},
    {"softmax_rows", b_softmax, 2, {F(2, -5, 5, 64, 1024), F(1, -1, 1, 1024)}, D_FLOAT, {1, 0}, {0.125}, .grad = NO_GRAD},
    {"softmax_causal_big", b_softmax, 1, {F(3, -5, 5, 4, 96, 128)}, D_FLOAT, {2, 1}, {0.125}, .grad = NO_GRAD},
    /* norms */
    {"layer_norm", b_norm, 1, {F(3, -2, 2, 2, 7, 37)}, D_FLOAT, {0, 0, 0}, .grad = GRAD},
    {"layer_norm_w", b_norm, 2, {F(3, -2, 2, 2, 7, 37), F(1, -2, 2, 37)}, D_FLOAT, {0, 1, 0}, .grad = GRAD},
    {"layer_norm_b", b_norm, 2, {F(3, -2, 2, 2, 7, 37), F(1, -2, 2, 37)}, D_FLOAT, {0, 0, 1}, .grad = GRAD, .tol = 3},
    {"layer_norm_wb", b_norm, 3, {F(3, -3, 5, 2, 3, 48), F(1, 0.5, 1.5, 48), F(1, -1, 1, 48)}, D_FLOAT, {0, 1, 1}, .grad = GRAD},
    {"layer_norm_small", b_norm, 3, {F(2, -3, 5, 3, 9), F(1, 0.5, 1.5, 9), F(1, -1, 1, 9)}, D_FLOAT, {0, 1, 1}, .grad = GRAD_FD},
    {"layer_norm_big", b_norm, 3, {F(2, -3, 5, 100, 512), F(1, 0.5, 1.5, 512), F(1, -1, 1, 512)}, D_FLOAT, {0, 1, 1}, .tol = 10, .grad = NO_GRAD},
    {"layer_norm_wide", b_norm, 3, {F(3, -3, 5, 2, 7, 300), F(1, 0.5, 1.5, 300), F(1, -1, 1, 300)}, D_FLOAT, {0, 1, 1}, .tol = 10, .grad = NO_GRAD},
    {"rms_norm", b_norm, 1, {F(3, -2, 2, 3, 5, 67)}, D_FLOAT, {1, 0}, .grad = GRAD},
    {"rms_norm_w", b_norm, 2, {F(3, -2, 2, 3, 5, 67), F(1, -2, 2, 67)}, D_FLOAT, {1, 1}, .grad = GRAD},
    {"rms_norm_offset", b_norm, 2, {F(2, -3, 3, 6, 48), F(1, -0.5, 0.5, 48)}, D_FLOAT, {1, 1}, {1.0}, .grad = GRAD},
    {"rms_norm_small", b_norm, 2, {F(2, -3, 3, 3, 9), F(1, -0.5, 0.5, 9)}, D_FLOAT, {1, 1}, {1.0}, .grad = GRAD_FD},
    {"rms_norm_big", b_norm, 2, {F(2, -3, 5, 100, 512), F(1, -0.5, 0.5, 512)}, D_FLOAT, {1, 1}, .grad = NO_GRAD},
    {"rms_norm_wide", b_norm, 2, {F(2, -3, 5, 14, 300), F(1, -0.5, 0.5, 300)}, D_FLOAT, {1, 1}, .grad = NO_GRAD},
    /* ids */
    {"embedding", b_embedding, 2, {F(2, -2, 2, 11, 6), I(2, 0, 11, 3, 40)}, D_FLOAT, {0}, .grad = GRAD},
    {"embedding_small", b_embedding, 2, {F(2, -1, 1, 8, 6), I(2, 0, 8, 3, 4)}, D_FLOAT, {0}, .grad = GRAD_FD},
    {"embedding_pad", b_embedding, 2, {F(2, -2, 2, 11, 6), I(2, 0, 11, 3, 40)}, D_FLOAT, {1, 2}, .grad = GRAD},
    {"embedding_shard", b_embedding, 2, {F(2, -2, 2, 5, 6), I(2, 0, 11, 3, 40)}, D_FLOAT, {2, 3, 11}, .grad = GRAD},
    {"embedding_big", b_embedding, 2, {F(2, -1, 1, 50, 128), I(1, 0, 50, 500)}, D_FLOAT, {0}, .grad = NO_GRAD},
    {"embedding_grad", b_embedding, 2, {I(2, 0, 8, 3, 4), F(3, -1, 1, 3, 4, 5)}, D_FLOAT, {3, 8, 3}, .grad = GRAD_FD},
    {"embedding_grad_big", b_embedding, 2, {I(1, 0, 40, 200), F(2, -1, 1, 200, 300)}, D_FLOAT, {3, 40, -1}, .grad = GRAD, .tol = 10},
    {"one_hot", b_one_hot, 1, {I(2, 0, 11, 3, 5)}, D_FLOAT, {11, 2}, .grad = NO_GRAD},
    {"one_hot_add", b_one_hot, 2, {I(2, 0, 6, 2, 5), F(1, -1, 1, 6)}, D_FLOAT, {6, 2}, .grad = GRAD_FD},
    {"one_hot_shard", b_one_hot, 1, {I(1, 0, 11, 17)}, D_FLOAT, {4, 2, 5, 11}, .grad = NO_GRAD},
    {"one_hot_big", b_one_hot, 1, {I(1, 0, 40, 5000)}, D_FLOAT, {40, -100}, .grad = NO_GRAD},
    {"cross_entropy", b_cross_entropy, 2, {F(3, -8, 8, 3, 40, 13), I(2, 0, 13, 3, 40)}, D_FLOAT, {0, RC_IGNORE_INDEX}, .grad = GRAD, .ulps = 1, .gulps = 1, .loss = 1},
    {"cross_entropy_ignore", b_cross_entropy, 2, {F(3, -8, 8, 3, 40, 13), I(2, 0, 13, 3, 40)}, D_FLOAT, {0, 5}, .grad = GRAD, .ulps = 1, .gulps = 1, .loss = 1},
    {"cross_entropy_small", b_cross_entropy, 2, {F(3, -5, 5, 2, 3, 7), I(2, 0, 7, 2, 3)}, D_FLOAT, {0, 1}, .grad = GRAD_FD, .ulps = 1, .gulps = 1, .loss = 1},
    {"cross_entropy_wide", b_cross_entropy, 2, {F(2, -5, 5, 60, 1031), I(1, 0, 1031, 60)}, D_FLOAT, {0, 7}, .grad = GRAD, .tol = 2, .ulps = 1, .gulps = 1, .loss = 1},
    {"cross_entropy_grad", b_cross_entropy, 3, {F(2, -5, 5, 6, 20), I(1, 0, 20, 6), L(0, 0.5, 2, 0)}, D_FLOAT, {1, 1}, .grad = GRAD_FD},
    {"rope_interleaved", b_rope, 1, {F(4, -2, 2, 2, 5, 3, 8)}, D_FLOAT, {6, RC_ROPE_INTERLEAVED, 0, 1}, {10000}, .grad = GRAD},
    {"rope_half", b_rope, 1, {F(4, -2, 2, 2, 5, 3, 8)}, D_FLOAT, {6, RC_ROPE_HALF, 0, 1}, {10000}, .grad = GRAD},
    {"rope_inverse", b_rope, 1, {F(4, -2, 2, 2, 5, 3, 8)}, D_FLOAT, {8, RC_ROPE_HALF, 1, 1}, {500000}, .grad = GRAD},
    {"rope_small", b_rope, 2, {F(3, -1, 1, 5, 2, 8), I(1, 0, 50, 5)}, D_FLOAT, {8, RC_ROPE_INTERLEAVED, 1, 0}, {500}, .grad = GRAD_FD},
    {"rope_positions_2d", b_rope, 2, {F(4, -1, 1, 2, 4, 3, 10), I(2, 0, 100, 2, 4)}, D_FLOAT, {10, RC_ROPE_HALF, 0, 0}, {10000}, .grad = GRAD},
    {"rope_many_pairs", b_rope, 2, {F(3, -1, 1, 3, 1, 300), I(1, 0, 100, 3)}, D_FLOAT, {260, RC_ROPE_INTERLEAVED, 0, 0}, {10000}, .grad = NO_GRAD},
    /* random: the CPU's stream on every backend (dropout's masks bit for bit) */
    {"dropout", b_random, 1, {F(2, -2, 2, 64, 33)}, D_FLOAT, {0}, {0.3}, .grad = GRAD, .bitwise = 1},
    {"dropout_big", b_random, 1, {F(2, -1, 1, 300, 200)}, D_FLOAT, {0}, {0.3}, .grad = GRAD, .bitwise = 1},
    {"normal_run", b_random, 1, {F(2, -1, 1, 300, 200)}, D_FLOAT, {1}, .grad = GRAD, .ulps = 1, .gulps = 1, .tol = 20},
    {"normal_step", b_random, 1, {F(3, -1, 1, 3, 170, 99)}, D_FLOAT, {2}, .grad = GRAD, .ulps = 2, .gulps = 2, .tol = 20},
    /* convolution and pooling, with their gradient ops */
    {"conv2d", b_conv, 3, {F(4, -1, 1, 2, 3, 7, 6), F(4, -1, 1, 4, 3, 3, 2), F(1, -1, 1, 4)}, D_FLOAT, {0, 1, 1, 1}, .grad = GRAD, .tol = 10},
    {"conv2d_small", b_conv, 3, {F(4, -1, 1, 1, 2, 5, 4), F(4, -1, 1, 2, 2, 3, 3), F(1, -1, 1, 2)}, D_FLOAT, {0, 2, 1, 1}, .grad = GRAD_FD, .tol = 10},
    {"conv2d_groups", b_conv, 3, {F(4, -1, 1, 2, 4, 8, 9), F(4, -1, 1, 6, 2, 3, 3), F(1, -1, 1, 6)}, D_FLOAT, {0, 2, 1, 2}, .grad = GRAD, .tol = 10},
    {"max_pool2d", b_conv, 1, {F(4, -1, 1, 2, 3, 8, 7)}, D_FLOAT, {1, 3, 2, 1}, .grad = GRAD},
    {"max_pool2d_small", b_conv, 1, {F(4, -1, 1, 1, 2, 4, 5)}, D_FLOAT, {1, 2, 2, 0}, .grad = GRAD_FD},
    {"avg_pool2d", b_conv, 1, {F(4, -1, 1, 2, 3, 8, 7)}, D_FLOAT, {2, 3, 2, 1}, .grad = GRAD, .tol = 3},
    {"avg_pool2d_small", b_conv, 1, {F(4, -1, 1, 1, 2, 5, 4)}, D_FLOAT, {2, 2, 1, 0}, .grad = GRAD_FD},
    /* composites */
    {"collectives", b_collectives, 1, {F(2, -1, 1, 3, 4)}, D_FLOAT, .grad = GRAD},
    {"mlp", b_mlp, 5, {F(2, -1, 1, 16, 32), F(2, -0.2, 0.2, 32, 64), F(1, -0.1, 0.1, 64), F(2, -0.15, 0.15, 64, 24),
                      I(1, 0, 24, 16)}, D_FLOAT, .grad = GRAD, .tol = 30, .ulps = 1, .gulps = 2, .loss = 1},
    {"attention_block", b_block, 9, {I(2, 0, 20, 2, 6), I(2, 0, 20, 2, 6), I(1, 3, 9, 6), F(2, -0.5, 0.5, 20, 16),
                                     F(1, 0.8, 1.2, 16), F(1, -0.5, 0.5, 16), F(2, -0.5, 0.5, 16, 48),
                                     F(2, -0.5, 0.5, 16, 16), F(1, 0.8, 1.2, 16)}, D_FLOAT, .grad = GRAD, .tol = 10,
     .ulps = 1, .gulps = 2, .loss = 1},
    /* fused attention (every mask kind, GQA, decoding against a cache; T not a multiple of a
     * tile); the unfused graph's equality is tests/core/test_attention.c's. Last in the
     * table: a case's values are drawn from its index */
    {"attention_causal_gqa", b_attention, 3, {F(4, -2, 2, 2, 6, 37, 24), F(4, -2, 2, 2, 2, 37, 24), F(4, -2, 2, 2, 2, 37, 24)},
     D_FLOAT, {0, 1}, {0.2}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    {"attention_t5_bias", b_attention, 4, {F(4, -2, 2, 2, 4, 37, 16), F(4, -2, 2, 2, 4, 37, 16), F(4, -2, 2, 2, 4, 37, 8),
     F(4, -2, 2, 1, 4, 37, 37)}, D_FLOAT, {1, 0}, {0.25}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    {"attention_padding_mqa", b_attention, 4, {F(4, -2, 2, 2, 4, 33, 16), F(4, -2, 2, 2, 1, 33, 16), F(4, -2, 2, 2, 1, 33, 16),
     F(4, -3, 0, 2, 1, 1, 33)}, D_FLOAT, {1, 1}, {0.25}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    {"attention_decode", b_attention, 3, {F(4, -2, 2, 2, 6, 3, 24), F(4, -2, 2, 2, 2, 40, 24), F(4, -2, 2, 2, 2, 40, 24)},
     D_FLOAT, {0, 1}, {0.2}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    {"attention_small", b_attention, 4, {F(4, -2, 2, 1, 2, 4, 3), F(4, -2, 2, 1, 1, 6, 3), F(4, -2, 2, 1, 1, 6, 2),
     F(4, -1, 1, 1, 2, 4, 6)}, D_FLOAT, {1, 1}, {0.6}, .grad = GRAD_FD, .tol = 30, .ulps = 3, .gulps = 2},
    /* head sizes past the device kernels' 64-column chunks, a bias broadcast over the query
     * rows (one along the keys has a zero gradient: softmax ignores a row's shift) */
    {"attention_wide", b_attention, 4, {F(4, -2, 2, 1, 2, 5, 80), F(4, -2, 2, 1, 1, 7, 80), F(4, -2, 2, 1, 1, 7, 72),
     F(3, -1, 1, 2, 1, 7)}, D_FLOAT, {1, 1}, {0.1}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    /* with attention dropout (p 0.3: rc_dropout's mask over the [B, H, Tq, Tk] probabilities) */
    {"attention_dropout_causal_gqa", b_attention, 3, {F(4, -2, 2, 2, 6, 37, 24), F(4, -2, 2, 2, 2, 37, 24),
     F(4, -2, 2, 2, 2, 37, 24)}, D_FLOAT, {0, 1}, {0.2, 0.3}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    {"attention_dropout_t5_bias", b_attention, 4, {F(4, -2, 2, 2, 4, 37, 16), F(4, -2, 2, 2, 4, 37, 16),
     F(4, -2, 2, 2, 4, 37, 8), F(4, -2, 2, 1, 4, 37, 37)}, D_FLOAT, {1, 0}, {0.25, 0.3}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    {"attention_dropout_decode", b_attention, 4, {F(4, -2, 2, 2, 6, 3, 24), F(4, -2, 2, 2, 2, 40, 24),
     F(4, -2, 2, 2, 2, 40, 24), F(4, -3, 0, 2, 1, 1, 40)}, D_FLOAT, {1, 1}, {0.2, 0.3}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    {"attention_dropout_small", b_attention, 4, {F(4, -2, 2, 1, 2, 4, 3), F(4, -2, 2, 1, 1, 6, 3),
     F(4, -2, 2, 1, 1, 6, 2), F(4, -1, 1, 1, 2, 4, 6)}, D_FLOAT, {1, 1}, {0.6, 0.3}, .grad = GRAD_FD, .tol = 30,
     .ulps = 3, .gulps = 2},
    {"attention_dropout_wide", b_attention, 4, {F(4, -2, 2, 1, 2, 5, 80), F(4, -2, 2, 1, 1, 7, 80),
     F(4, -2, 2, 1, 1, 7, 72), F(3, -1, 1, 2, 1, 7)}, D_FLOAT, {1, 1}, {0.1, 0.3}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    /* past the device kernels' tiles (work-groups of 64 rows, 16 keys per tile): query groups
     * spanning two heads of a kv group, several key-row groups for dk and dv, partial tiles;
     * one decoding row per head against a long cache with a padding mask and dropout */
    {"attention_tiles_causal_gqa", b_attention, 4, {F(4, -2, 2, 1, 4, 70, 20), F(4, -2, 2, 1, 2, 70, 20),
     F(4, -2, 2, 1, 2, 70, 12), F(4, -1, 1, 1, 4, 70, 70)}, D_FLOAT, {1, 1}, {0.2}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    {"attention_tiles_decode_dropout", b_attention, 4, {F(4, -2, 2, 2, 6, 1, 24), F(4, -2, 2, 2, 2, 150, 24),
     F(4, -2, 2, 2, 2, 150, 24), F(4, -3, 0, 2, 1, 1, 150)}, D_FLOAT, {1, 1}, {0.2, 0.3}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    /* rows longer than the device's softmax block (128 work-items of 8 keys: k_attention_rows
     * goes block by block), with a padding mask and dropout */
    {"attention_long_rows", b_attention, 4, {F(4, -2, 2, 1, 2, 3, 8), F(4, -2, 2, 1, 1, 1100, 8),
     F(4, -2, 2, 1, 1, 1100, 8), F(4, -3, 0, 1, 1, 1, 1100)}, D_FLOAT, {1, 1}, {0.3, 0.3}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    /* sums and maxima of contiguous rows of 128 and more: a device's work-group a row */
    {"sum_rows_grouped", b_reduce, 1, {F(2, -2, 2, 40, 300)}, D_FLOAT, {0, 1, 0}, .grad = GRAD},
    {"max_rows_grouped", b_reduce, 1, {F(2, -2, 2, 3, 500)}, D_FLOAT, {1, 1, 1}, .grad = GRAD},
    /* a permute keeping the innermost axis, 21 long: a device copies 16-bit values in runs of
     * 8, 8, 5 */
    {"permute_runs", b_move, 1, {F(4, -2, 2, 2, 5, 3, 21)}, D_ALL, {0, 213}, .grad = GRAD},
    /* causal attention with one query head a key/value head and Tq = Tk: a device's products
     * by blocks of query rows (16 here, main's rci_gpu_attention_block), each against the keys
     * its rows see; a last block of 5 rows, and of 6 with dropout */
    {"attention_causal_blocks", b_attention, 4, {F(4, -2, 2, 2, 3, 37, 24), F(4, -2, 2, 2, 3, 37, 24),
     F(4, -2, 2, 2, 3, 37, 16), F(4, -3, 0, 2, 1, 1, 37)}, D_FLOAT, {1, 1}, {0.2}, .grad = GRAD, .tol = 30,
     .ulps = 3, .gulps = 2},
    {"attention_dropout_causal_blocks", b_attention, 3, {F(4, -2, 2, 1, 2, 70, 20), F(4, -2, 2, 1, 2, 70, 20),
     F(4, -2, 2, 1, 2, 70, 12)}, D_FLOAT, {0, 1}, {0.2, 0.3}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    /* LLaMA's head size 128 past the tiled kernels' 64 columns (two chunks of the scores'
     * sums, two passes of the output's), GQA rows in tiles of 64 spanning two heads, keys
     * in two tiles of 64 */
    {"attention_tiles_wide_gqa", b_attention, 3, {F(4, -2, 2, 1, 4, 100, 128), F(4, -2, 2, 1, 2, 100, 128),
     F(4, -2, 2, 1, 2, 100, 128)}, D_FLOAT, {0, 1}, {0.088}, .grad = GRAD, .tol = 30, .ulps = 3, .gulps = 2},
    /* a row of 24 (a device's three runs of 8, k_binary_runs) broadcast as the first input;
     * a bias's gradient, 300 rows of 40 summed down to 40 (k_reduce_cols' runs of 8) */
    {"sub_row_runs", b_binary, 2, {F(1, -2, 2, 24), F(3, -2, 2, 5, 3, 24)}, D_FLOAT, {1}, .grad = GRAD_FD},
    {"sum_to_cols", b_reduce, 1, {F(3, -2, 2, 3, 100, 40)}, D_FLOAT, {3, 1, 1}, .grad = GRAD},
    /* a norm's weight gradient (NORM_GRAD's rows' sum) over many of the CPU's blocks of 64
     * rows and a device's work-groups of up to 32 (about 1024 work-groups at most, then more
     * rows a work-group), the last block and work-group short */
    {"layer_norm_w_rows", b_norm, 2, {F(2, -3, 5, 2101, 24), F(1, 0.5, 1.5, 24)}, D_FLOAT, {0, 1, 0}, .tol = 10,
     .grad = GRAD},
    {"rms_norm_w_rows", b_norm, 2, {F(3, -3, 3, 3, 700, 19), F(1, -0.5, 0.5, 19)}, D_FLOAT, {1, 1}, {1.0}, .tol = 10,
     .grad = GRAD},
    /* a residual stream through a norm: x's gradient one NORM_GRAD adding the stream's (the
     * output, x + norm(x) of x up to 5, rounded twice in 16 bits) */
    {"layer_norm_residual", b_norm, 3, {F(3, -3, 5, 2, 3, 48), F(1, 0.5, 1.5, 48), F(1, -1, 1, 48)}, D_FLOAT,
     {0, 1, 1, 1}, .tol = 4, .grad = GRAD_FD},
    {"rms_norm_residual", b_norm, 2, {F(2, -3, 3, 6, 48), F(1, -0.5, 0.5, 48)}, D_FLOAT, {1, 1, 0, 1}, {1.0},
     .grad = GRAD},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- backends ------------------------------------------------------------------------------- */

typedef struct {
    char name[32];
    rc_backend *be;
    int serial;             /* cpu/1: one thread, 16-bit nodes in small pieces; 2 (cpu/slots):
                               three threads, the pieces of rows in slots, one per thread */
    int hidden;             /* the CPU run only for the devices' comparisons (not asked for) */
    unsigned dtypes;
    int cases;              /* cases run (in one dtype or more) */
    int runs;               /* (case, dtype) pairs run */
} target;

enum { MAX_TARGETS = 16 };
static target targets[MAX_TARGETS];
static int ntargets;
static char not_run[2][600];   /* opencl, cuda: why not */
static rc_backend *cpu;

static int is_half(rc_dtype t)
{
    return t == RC_BF16 || t == RC_F16;
}

static void add_target(const char *name, rc_backend *be, int serial, unsigned dtypes)
{
    target *t = &targets[ntargets++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->be = be;
    t->serial = serial;
    t->dtypes = dtypes;
}

/* msg without a leading "kind: " */
static const char *without_prefix(const char *msg, const char *kind)
{
    size_t n = strlen(kind);
    return !strncmp(msg, kind, n) && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

/* every device of a kind ("opencl", k 0, or "cuda", k 1): a target each, or why none (a
 * failure when the environment's require_var is 1) */
static void add_devices(const char *kind, int k, const char *require_var)
{
    rc_error err = {0};
    int n = k == 0 ? rc_opencl_device_count(&err) : rc_cuda_device_count(&err);
    const char *req = getenv(require_var);
    int required = req && !strcmp(req, "1");
    if (n < 1) {
        snprintf(not_run[k], sizeof not_run[k], "%s: not run: %s", kind, without_prefix(err.msg, kind));
        CHECKF(!required, "%s: no %s device and %s=1: %s", kind, kind, require_var, err.msg);
        if (!required)
            printf("test_ops: %s: not run (no device; set %s=1 to fail): %s\n", kind, require_var, err.msg);
        return;
    }
    for (int i = 0; i < n && ntargets < MAX_TARGETS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s:%d", kind, i);
        rc_backend *be = rc_device_open(name, 0, &err);
        CHECKF(be != NULL, "%s: %s", name, err.msg);
        if (be)
            add_target(name, be, 0, D_ALL);
    }
}

/* ---- one graph of a case on one backend ------------------------------------------------------- */

typedef struct {
    int nout;
    rc_dtype dt[MAX_OUT];
    rc_dtype leaf_dt[MAX_OUT];    /* outs 1..: the dtype of the leaf differentiated */
    int64_t numel[MAX_OUT];
    void *raw[MAX_OUT];           /* as read */
    double *val[MAX_OUT];         /* as doubles */
} result;

static void result_free(result *r)
{
    for (int k = 0; k < r->nout; k++) {
        free(r->raw[k]);
        free(r->val[k]);
    }
    memset(r, 0, sizeof *r);
}

static rc_dtype leaf_dtype(const leaf_spec *s, rc_dtype t)
{
    if (s->kind == IDS)
        return RC_I32;
    if (s->kind == LOSS && is_half(t))
        return RC_F32;
    return t;
}

static int64_t spec_numel(const leaf_spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

/* n doubles as dtype t into host memory (i32: the values are whole numbers) */
static void *host_values(const double *v, int64_t n, rc_dtype t)
{
    void *h = malloc((size_t)n * 8 + 8);
    if (t == RC_I32)
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)h)[i] = (int32_t)v[i];
    else
        rc_convert(h, t, v, RC_F64, n);
    return h;
}

/* the weights r of sum(y * r): in [-0.5, 0.5), exact in bf16 and f16 */
static double r_at(int64_t i)
{
    uint64_t h = rci_hash64((uint64_t)i * 2654435761u + 17);
    return rc_bf16_to_f32(rc_f32_to_bf16((float)((double)(h >> 11) * 0x1.0p-53 - 0.5)));
}

/* Builds case c in dtype t (serving run dtype rt) on be, sets the leaves to vals (ids too),
 * runs it and reads y and, with c->grad, the gradients of sum(y * r). 0, or -1 with msg. */
static int run_graph(const op_case *c, rc_backend *be, rc_dtype t, rc_dtype rt, double *const *vals,
                     result *res, char *msg, size_t size)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *leaves[MAX_IN], *wrt[MAX_IN], *outs[MAX_OUT];
    int nwrt = 0, rc = -1;
    rc_plan *p = NULL;
    rc_error err = {0};
    memset(res, 0, sizeof *res);
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        leaves[i] = rc_input(g, name, leaf_dtype(&c->in[i], t), c->in[i].ndim, c->in[i].shape);
    }
    run_dtype = rt;
    rc_tensor *y = outs[0] = c->build(g, leaves, t, c);
    int nout = 1;
    if (y && c->grad && y->dtype != RC_I32 && rt != RC_I32) {
        int64_t n = rc_tensor_numel(y);
        double *r = malloc((size_t)n * 8 + 8);
        for (int64_t i = 0; i < n; i++)
            r[i] = r_at(i);
        void *h = host_values(r, n, y->dtype);
        rc_tensor *rw = rc_const(g, "r", y->dtype, y->ndim, y->shape, h);
        free(r);
        free(h);
        for (int i = 0; i < c->n; i++)
            if (c->in[i].kind != IDS && !c->in[i].ints)
                wrt[nwrt++] = leaves[i];
        rc_backward(g, rc_sum_all(g, rc_mul(g, y, rw)), wrt, nwrt, outs + 1);
        nout += nwrt;
    }
    if (rc_graph_error(g)) {
        snprintf(msg, size, "graph: %s", rc_graph_error(g));
        goto done;
    }
    if (!(p = rc_plan_new_on(be, g, outs, nout, &err))) {
        snprintf(msg, size, "plan: %s", err.msg);
        goto done;
    }
    for (int i = 0; i < c->n; i++) {
        void *h = host_values(vals[i], spec_numel(&c->in[i]), leaves[i]->dtype);
        int bad = rc_plan_set_input(p, leaves[i], h, &err);
        free(h);
        if (bad) {
            snprintf(msg, size, "set x%d: %s", i, err.msg);
            goto done;
        }
    }
    rc_plan_set_rng(p, rc_rng_new(77));
    rc_plan_set_step_rng(p, rc_rng_new(78));
    if (rc_plan_run(p, &err)) {
        snprintf(msg, size, "run: %s", err.msg);
        goto done;
    }
    res->nout = nout;
    for (int k = 0; k < nout; k++) {
        int64_t n = rc_tensor_numel(outs[k]);
        res->dt[k] = outs[k]->dtype;
        res->leaf_dt[k] = k ? wrt[k - 1]->dtype : outs[k]->dtype;
        res->numel[k] = n;
        res->raw[k] = malloc(rc_tensor_nbytes(outs[k]) + 8);
        res->val[k] = malloc((size_t)n * 8 + 8);
        if (rc_plan_read(p, outs[k], res->raw[k], &err)) {
            snprintf(msg, size, "read: %s", err.msg);
            goto done;
        }
        if (outs[k]->dtype == RC_I32)
            for (int64_t i = 0; i < n; i++)
                res->val[k][i] = ((int32_t *)res->raw[k])[i];
        else
            rc_convert(res->val[k], RC_F64, res->raw[k], outs[k]->dtype, n);
    }
    rc = 0;
done:
    if (rc)
        result_free(res);
    rc_plan_free(p);
    rc_graph_free(g);
    return rc;
}

/* ---- comparisons -------------------------------------------------------------------------- */

/* The largest |a - r| / max(|r|, floor * max|r|) over elements: NaNs agree with NaNs,
 * infinities must be equal. */
/* ||a - r|| / ||r|| (L2 norms; NaN: infinite) */
static double norm_err(const double *a, const double *r, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += (a[i] - r[i]) * (a[i] - r[i]);
        s += r[i] * r[i];
    }
    return isnan(d) ? INFINITY : s > 0 ? sqrt(d / s) : sqrt(d);
}

/* the error allowed a run in dtype t: its output (grad 0) or gradients */
static double tolerance(const op_case *c, rc_dtype t, int grad)
{
    double f = c->tol > 0 ? c->tol : 1;
    switch (t) {
    case RC_F64: return 1e-10 * f;
    case RC_BF16: return (grad ? 2e-2 : 8e-3) * f;
    case RC_F16: return (grad ? 1e-2 : 2e-3) * f;
    default: return (grad ? 1e-4 : 1e-5) * f;
    }
}

static float widen(rc_dtype t, uint16_t h)
{
    return t == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
}

/* 16-bit ulps between two patterns (ordered), 0 for two NaNs, 1 << 16 for NaN and a number */
static long ulp_diff(rc_dtype t, uint16_t a, uint16_t b)
{
    int na = isnan(widen(t, a)), nb = isnan(widen(t, b));
    if (na || nb)
        return na && nb ? 0 : 1 << 16;
    int ia = a & 0x8000 ? -(a & 0x7fff) : a, ib = b & 0x8000 ? -(b & 0x7fff) : b;
    return labs((long)ia - ib);
}

/* The largest difference between a device's 16-bit values and the CPU's in ulps. With
 * reordered (sums in another order), values closer than 2^-20 of the largest magnitude
 * count as equal: f32 sums of terms that cancel differ by that much, which near zero is
 * many ulps of f16's subnormals. */
static long ulps_apart(rc_dtype t, const uint16_t *a, const uint16_t *b, int64_t n, int reordered)
{
    double big = 0;
    long worst = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(widen(t, b[i])));
    for (int64_t i = 0; i < n; i++) {
        long d = ulp_diff(t, a[i], b[i]);
        if (reordered && fabs((double)widen(t, a[i]) - widen(t, b[i])) <= 0x1p-20 * big)
            d = 0;
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* the largest |a - ref| of n values (ref NULL: the largest |a|) */
static double max_abs_error(const double *a, const double *ref, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++)
        e = fmax(e, fabs(a[i] - (ref ? ref[i] : 0)));
    return e;
}

/* the n f32 of a and b agree bit for bit (NaNs only as NaNs: a NaN that arithmetic makes
 * has a device-defined payload) */
static int same_floats(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) && !(isnan(a[i]) && isnan(b[i])))
            return 0;
    return 1;
}

/* ---- running the table --------------------------------------------------------------------- */

/* leaf values of case ci for dtype t, drawn from the case's own stream (the same numbers
 * for every dtype) and rounded to the leaf's dtype */
static void draw_values(int ci, const op_case *c, rc_dtype t, double **vals)
{
    rc_rng rng = rc_rng_new(1000 + (uint64_t)ci);
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        int64_t n = spec_numel(s);
        rc_dtype lt = leaf_dtype(s, t);
        vals[i] = malloc((size_t)n * 8 + 8);
        for (int64_t k = 0; k < n; k++) {
            double u = rc_rng_uniform(&rng);
            double v = s->lo + u * (s->hi - s->lo);
            if (lt == RC_I32 && s->kind == FLOAT && !s->ints)
                v *= 1000;   /* i32 variants of float leaves: many distinct values */
            if (s->kind == IDS || s->ints || lt == RC_I32)
                v = floor(v);
            vals[i][k] = k < s->nsp ? s->sp[k] : v;
        }
        if (lt != RC_I32 && lt != RC_F64) {
            void *h = host_values(vals[i], n, lt);
            rc_convert(vals[i], RC_F64, h, lt, n);
            free(h);
        }
        if (lt == RC_I32)   /* i32 variants of float leaves: whole numbers, no NaN */
            for (int64_t k = 0; k < n; k++)
                vals[i][k] = isfinite(vals[i][k]) ? floor(vals[i][k]) : 0;
    }
}

typedef struct {
    double fwd, grad;       /* worst over the targets */
    int ran;
} dtype_worst;

/* case c in dtype t on target tg against the reference ref (and the CPU's run cpu_res) */
static void check_target(const op_case *c, rc_dtype t, target *tg, double *const *vals, const result *ref,
                         result *cpu_res, dtype_worst *w)
{
    char msg[1024] = "";
    result res;
    if (tg->serial) { /* cpu/slots: pieces of a few rows, several in flight at once */
        rc_set_threads(tg->serial == 1 ? 1 : 3);
        rci_cpu_half_chunk(tg->serial == 1 ? 40 : 1200);
    }
    int rc = run_graph(c, tg->be, t, t, vals, &res, msg, sizeof msg);
    if (tg->serial) {
        rc_set_threads(3);
        rci_cpu_half_chunk(0);
    }
    tg->runs++;
    w->ran = 1;
    CHECKF(rc == 0, "%s %s on %s: %s", c->name, rc_dtype_name(t), tg->name, msg);
    if (rc)
        return;
    CHECKF(res.nout == ref->nout, "%s %s on %s: %d outputs, the reference %d", c->name, rc_dtype_name(t), tg->name,
           res.nout, ref->nout);
    int ids_only = 1;
    for (int i = 0; i < c->n; i++)
        ids_only &= leaf_dtype(&c->in[i], t) == RC_I32;
    rc_dtype want = c->f32_of_ids && ids_only ? RC_F32 : ref->dt[0] == RC_I32 ? RC_I32 : c->loss && is_half(t) ? RC_F32 : t;
    CHECKF(res.dt[0] == want, "%s %s on %s: the output is %s, not %s", c->name, rc_dtype_name(t), tg->name,
           rc_dtype_name(res.dt[0]), rc_dtype_name(want));
    for (int k = 0; k < res.nout && k < ref->nout; k++) {
        /* 16-bit gradients pass through the graph's 16-bit intermediate nodes: measured as
         * a whole (1 - y^2 of a rounded tanh near 1 has no correct digit left) */
        int half = is_half(t);
        double e = half && k > 0 ? norm_err(res.val[k], ref->val[k], res.numel[k])
                                 : check_rel_error(res.val[k], ref->val[k], res.numel[k], half ? 1e-2 : 1e-3);
        double tol = res.dt[k] == RC_I32 ? 0 : tolerance(c, t, k > 0);
        if (k == 0)
            w->fwd = fmax(w->fwd, e);
        else
            w->grad = fmax(w->grad, e);
        CHECKF(e <= tol, "%s %s on %s: %s %d against f64: error %.3g > %.3g", c->name, rc_dtype_name(t), tg->name,
               k ? "gradient" : "output", k ? k - 1 : 0, e, tol);
        if (k > 0)
            CHECKF(res.dt[k] == res.leaf_dt[k], "%s %s on %s: gradient %d is %s, its leaf %s", c->name,
                   rc_dtype_name(t), tg->name, k - 1, rc_dtype_name(res.dt[k]), rc_dtype_name(res.leaf_dt[k]));
    }
    if (tg->be == cpu && !tg->serial) {
        *cpu_res = res;   /* the CPU's own outputs, for the devices */
        return;
    }
    /* a device against the CPU in the same dtype */
    for (int k = 0; tg->be != cpu && cpu_res->nout == res.nout && k < res.nout; k++) {
        int allowed = k ? c->gulps : c->ulps;
        if (tiles_precision && res.dt[k] == RC_BF16 && !strncmp(c->name, "attention", 9)) {
            double ed = max_abs_error(res.val[k], ref->val[k], res.numel[k]);
            double ec = fmax(max_abs_error(cpu_res->val[k], ref->val[k], res.numel[k]),
                             0x1p-9 * max_abs_error(ref->val[k], NULL, res.numel[k]));
            if (ed > tiles_worst * ec) {
                tiles_worst = ed / ec;
                snprintf(tiles_worst_at, sizeof tiles_worst_at, "%s %s %d on %s", c->name, k ? "gradient" : "output",
                         k ? k - 1 : 0, tg->name);
            }
            CHECKF(ed <= TILES_ERROR * ec, "%s bf16 on %s: %s %d's largest error against f64 %.3g, more than %g "
                   "times the CPU's %.3g", c->name, tg->name, k ? "gradient" : "output", k ? k - 1 : 0, ed,
                   (double)TILES_ERROR, ec);
            continue;
        }
        if (is_half(res.dt[k]) && allowed >= 0) {
            long d = ulps_apart(res.dt[k], res.raw[k], cpu_res->raw[k], res.numel[k], allowed > 0);
            CHECKF(d <= allowed, "%s %s on %s: %s %d differs from the CPU's by %ld ulps (allowed %d)", c->name,
                   rc_dtype_name(t), tg->name, k ? "gradient" : "output", k ? k - 1 : 0, d, allowed);
        }
        if (k == 0 && res.dt[k] == RC_F32 && c->bitwise)
            CHECKF(same_floats(res.raw[k], cpu_res->raw[k], res.numel[k]), "%s %s on %s: not the CPU's bit for bit",
                   c->name, rc_dtype_name(t), tg->name);
    }
    result_free(&res);
}

/* the f64 gradient graph of case c against central differences */
static const op_case *gc_current;
static rc_tensor *gc_build(rc_graph *g, rc_tensor **in)
{
    run_dtype = RC_F64;
    return gc_current->build(g, in, RC_F64, gc_current);
}

static int finite_differences(const op_case *c)
{
    gc_case gc = {.name = c->name, .nin = c->n, .build = gc_build, .order = 1};
    if (c->n > GC_MAX_IN)
        return 0;
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        gc_input *in = &gc.in[i];
        in->dtype = s->kind == IDS ? RC_I32 : RC_F64;
        in->ndim = s->ndim;
        memcpy(in->shape, s->shape, sizeof in->shape);
        in->nograd = s->kind == IDS || s->ints;
        in->positive = s->lo > 0;
        in->id_max = (int)s->hi;
        in->binary = s->ints;
    }
    gc_current = c;
    double e = gc_run(&gc, 1);
    CHECKF(e >= 0 && e <= 1e-6, "%s: finite differences: relative error %.3g (tolerance 1e-6)", c->name, e);
    return e >= 0 && e <= 1e-6;
}

/* whether target tg runs case c in dtype t (bit: t's D_ bit) */
static int applies(const target *tg, const op_case *c, rc_dtype t, unsigned bit)
{
    int on_device = tg->be != cpu;
    if (!(tg->dtypes & bit) || (on_device && c->cpu_only) || (!on_device && c->devices_only))
        return 0;
    return t != RC_F64 || (tg->be == cpu && !tg->serial && !tg->hidden);
}

static void run_case(int ci, const op_case *c)
{
    static const rc_dtype dts[] = {RC_F64, RC_F32, RC_BF16, RC_F16, RC_I32};
    static const unsigned bits[] = {D_F32, D_F32, D_BF16, D_F16, D_I32};
    dtype_worst w[5] = {{0}};
    int any = 0, runs[MAX_TARGETS];
    for (int k = 0; k < ntargets; k++)
        runs[k] = targets[k].runs;
    for (int d = 0; d < 5; d++) {
        rc_dtype t = dts[d];
        int n = 0;
        for (int k = 0; (c->dtypes & bits[d]) && k < ntargets; k++)
            n += applies(&targets[k], c, t, bits[d]) && !targets[k].hidden;
        if (n == 0)
            continue;
        any = 1;
        double *vals[MAX_IN] = {0};
        draw_values(ci, c, t, vals);
        char msg[1024] = "";
        result ref, cpu_res = {0};
        rc_set_threads(1);
        int rc = run_graph(c, cpu, RC_F64, t, vals, &ref, msg, sizeof msg);
        rc_set_threads(3);
        CHECKF(rc == 0, "%s: the f64 reference for %s: %s", c->name, rc_dtype_name(t), msg);
        for (int k = 0; rc == 0 && k < ntargets; k++)
            if (applies(&targets[k], c, t, bits[d]))
                check_target(c, t, &targets[k], vals, &ref, &cpu_res, &w[d]);
        if (rc == 0)
            result_free(&ref);
        result_free(&cpu_res);
        for (int i = 0; i < c->n; i++)
            free(vals[i]);
    }
    if (!any)
        return;
    for (int k = 0; k < ntargets; k++)
        targets[k].cases += targets[k].runs > runs[k];
    /* the gradient graph itself, once (with the CPU asked for) */
    int fd = c->grad == GRAD_FD && !targets[0].hidden && finite_differences(c);
    printf("  %-22s", c->name);
    for (int d = 1; d < 5; d++)
        if (w[d].ran) {
            printf(" %s %.1e", rc_dtype_name(dts[d]), w[d].fwd);
            if (c->grad)
                printf("/%.1e", w[d].grad);
        }
    printf("%s\n", fd ? " (finite differences)" : "");
}

/* ---- the optimizer's work on a device against the CPU --------------------------------------- */

static uint64_t rng_state = 12345;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* AdamW (3 steps, 3 parts, clipping), SGD, accumulate, sums of squares */
static void test_optimizer(rc_backend *dev, const char *name)
{
    enum { N = 10007 };
    rc_error err = {0};
    float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g), *m = calloc(N, sizeof *m);
    for (int i = 0; i < N; i++) {
        w[i] = (float)(uniform() * 2 - 1);
        g[i] = (float)(uniform() * 0.2 - 0.1);
    }
    rc_backend *be[2] = {cpu, dev};
    rc_buffer *bw[2], *bg[2], *bm[2], *bv[2];
    for (int k = 0; k < 2; k++) {
        bw[k] = check_buffer_of(be[k], w, N);
        bg[k] = check_buffer_of(be[k], g, N);
        bm[k] = check_buffer_of(be[k], m, N);
        bv[k] = check_buffer_of(be[k], m, N);
    }
    rci_update_part parts[3] = {{0, 5000, 0.1}, {5000, 3, 0}, {5003, N - 5003, 0.01}};
    for (int step = 1; step <= 3; step++)
        for (int k = 0; k < 2; k++) {
            rci_update u = {bw[k], bg[k], bm[k], bv[k], parts, 3, 1e-2, 0.9, 0.999, 1e-8, step,
                            step == 2 ? 0.5 : 1.0, 1, 0, 0};
            CHECKF(!be[k]->update(be[k], &u, &err), "adamw on %s: %s", be[k]->name, err.msg);
        }
    double e_adam = fmax(fmax(check_buffer_diff(bw[1], bw[0], N), check_buffer_diff(bm[1], bm[0], N)),
                         fmax(check_buffer_diff(bv[1], bv[0], N), check_buffer_diff(bg[1], bg[0], N)));
    CHECKF(e_adam <= 1e-6, "%s: adamw: relative error %.3g", name, e_adam);
    for (int k = 0; k < 2; k++) {
        rci_update u = {bw[k], bg[k], NULL, NULL, parts, 3, 0.1, 0, 0, 0, 1, 0.25, 0, 0, 0};
        CHECKF(!be[k]->update(be[k], &u, &err), "sgd on %s: %s", be[k]->name, err.msg);
        CHECK(!rc_sgd_update(bw[k], bg[k], 7, 100, 0.05, &err));
        CHECK(!be[k]->accumulate(be[k], bm[k], 3, bg[k], 40, 9000, RC_F32, 0.5f, 1, &err));
        CHECK(!be[k]->accumulate(be[k], bv[k], 0, bg[k], 0, N, RC_F32, 2.0f, 0, &err));
    }
    double e_sgd = fmax(fmax(check_buffer_diff(bw[1], bw[0], N), check_buffer_diff(bg[1], bg[0], N)),
                        fmax(check_buffer_diff(bm[1], bm[0], N), check_buffer_diff(bv[1], bv[0], N)));
    CHECKF(e_sgd <= 1e-6, "%s: sgd and accumulate: relative error %.3g", name, e_sgd);
    /* three parts in one call (one read back): each part's sum as the CPU's */
    const rci_update_part sqp[3] = {{17, N - 17, 0}, {0, 5, 0}, {100, 9000, 0}};
    double sq[2][3];
    for (int k = 0; k < 2; k++)
        CHECK(!be[k]->sum_squares(be[k], bw[k], sqp, 3, sq[k], &err));
    double e_sq = 0;
    for (int j = 0; j < 3; j++)
        e_sq = fmax(e_sq, fabs(sq[1][j] - sq[0][j]) / sq[0][j]);
    CHECKF(e_sq <= 1e-12, "%s: sum of squares: %.17g against %.17g", name, sq[1][0], sq[0][0]);
    double again[3] = {0};
    CHECK(!dev->sum_squares(dev, bw[1], sqp, 3, again, &err) && !memcmp(again, sq[1], sizeof again));
    printf("  %s: adamw (3 steps, 3 parts, clipping) %.2e, sgd + accumulate %.2e, sum of squares %.2e\n", name,
           e_adam, e_sgd, e_sq);
    for (int k = 0; k < 2; k++) {
        rc_buffer_free(bw[k]);
        rc_buffer_free(bg[k]);
        rc_buffer_free(bm[k]);
        rc_buffer_free(bv[k]);
    }
    free(w), free(g), free(m);
}

/* random 32-bit patterns (every class: NaN payloads, infinities, subnormals) */
static uint32_t random_bits(void)
{
    return (uint32_t)(uniform() * 4294967296.0);
}

/* x[n]: half random f32 bit patterns, half values in f16's range (|x| < 2^17 scaled down
 * by up to 2^-30, across its subnormals), then rounding ties and boundaries */
static void fill_roundable(float *x, int64_t n)
{
    static const uint32_t edge[] = {0x3f808000u, 0x3f818000u, 0x477fefffu, 0x477ff000u, 0x33000000u,
                                    0x33000001u, 0x387fc000u, 0x38800000u, 0x7f800001u, 0xff800000u,
                                    0x7fffffffu, 0x80000000u};
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = random_bits();
        if (i % 2)
            x[i] = (float)ldexp((uniform() * 2 - 1) * 131072.0, -(int)(uniform() * 31));
        else
            memcpy(&x[i], &u, sizeof u);
    }
    for (int i = 0; i < (int)(sizeof edge / sizeof *edge) && 3 * i + 1 < n; i++)
        memcpy(&x[3 * i + 1], &edge[i], sizeof edge[i]);
}

/* accumulate from bf16 / f16 gradients and round_f32 into bf16 / f16 weights, bit for bit
 * the CPU's (src/backend/cpu/update.c), at odd offsets and lengths, the buffers compared
 * whole (what lies outside a range stays) */
static void test_half_optimizer(rc_backend *dev, const char *name)
{
    enum { NW = 6011, NF = 6007 };
    rc_error err = {0};
    rc_backend *be[2] = {cpu, dev};
    rc_dtype dts[2] = {RC_BF16, RC_F16};
    uint16_t *words = malloc(NW * sizeof *words), *wout[2] = {malloc(NW * 2), malloc(NW * 2)};
    float *f = malloc(NF * sizeof *f), *fout[2] = {malloc(NF * 4), malloc(NF * 4)};
    /* (dat, source element, n, scale, add): written, added over it, a single element */
    const struct { int64_t dat, sel, n; float scale; int add; } acc[] = {
        {7, 3, 4097, 0.5f, 0}, {1, 0, 5001, -3.0f, 1}, {0, 5, 1, 0.3f, 1}, {6000, 6000, 7, 1.0f, 0}};
    for (int d = 0; d < 2; d++) {
        rc_dtype dt = dts[d];
        for (int i = 0; i < NW; i++)
            words[i] = (uint16_t)random_bits();
        for (int i = 0; i < NF; i++)
            f[i] = (float)(uniform() * 4 - 2);
        rc_buffer *bw[2], *bf[2];
        for (int k = 0; k < 2; k++) {
            bw[k] = rc_buffer_new(be[k], NW * 2, &err);
            bf[k] = check_buffer_of(be[k], f, NF);
            CHECK(bw[k] && bf[k] && !rc_buffer_upload(bw[k], 0, words, NW * 2, &err));
        }
        for (size_t c = 0; c < sizeof acc / sizeof *acc; c++) {
            for (int k = 0; k < 2; k++)
                CHECKF(!be[k]->accumulate(be[k], bf[k], acc[c].dat, bw[k], (size_t)acc[c].sel * 2, acc[c].n, dt,
                                          acc[c].scale, acc[c].add, &err),
                       "accumulate from %s on %s: %s", rc_dtype_name(dt), be[k]->name, err.msg);
            for (int k = 0; k < 2; k++)
                CHECK(!rc_buffer_download(bf[k], 0, fout[k], NF * 4, &err));
            CHECKF(same_floats(fout[1], fout[0], NF), "%s: accumulate from %s (case %zu) differs from the CPU's",
                   name, rc_dtype_name(dt), c);
        }
        CHECKF(dev->accumulate(dev, bf[1], 0, bw[1], 3, 5, dt, 1.0f, 0, &err) && strstr(err.msg, "aligned"),
               "%s: accumulate from an odd byte of %s words: refused, said %s", name, rc_dtype_name(dt), err.msg);
        /* the master rounded at an odd offset from an odd offset, then one element at 0 */
        fill_roundable(f, NF);
        for (int k = 0; k < 2; k++) {
            CHECK(!rc_buffer_upload(bf[k], 0, f, NF * 4, &err));
            CHECKF(!be[k]->round_f32(be[k], bw[k], 3, dt, bf[k], 5, 4099, &err) &&
                   !be[k]->round_f32(be[k], bw[k], 0, dt, bf[k], 6001, 1, &err) &&
                   !rc_buffer_download(bw[k], 0, wout[k], NW * 2, &err),
                   "round f32 into %s on %s: %s", rc_dtype_name(dt), be[k]->name, err.msg);
        }
        int64_t bad = -1;
        for (int i = 0; i < NW && bad < 0; i++)
            bad = wout[1][i] != wout[0][i] ? i : -1;
        CHECKF(bad < 0, "%s: round f32 into %s: word %lld is 0x%04x, the CPU's 0x%04x", name, rc_dtype_name(dt),
               (long long)bad, bad < 0 ? 0 : wout[1][bad], bad < 0 ? 0 : wout[0][bad]);
        for (int k = 0; k < 2; k++) {
            rc_buffer_free(bw[k]);
            rc_buffer_free(bf[k]);
        }
    }
    printf("  %s: accumulate from and round_f32 into bf16 and f16 bit for bit the CPU's\n", name);
    free(words), free(wout[0]), free(wout[1]), free(f), free(fout[0]), free(fout[1]);
}

/* ---- casts of every 16-bit pattern on a device, bit for bit the CPU's ------------------------- */

/* x (n elements of dtype from) cast to `to` on the CPU and on dev: the elements whose bits
 * differ (-1: a run failed) */
static int64_t cast_both(rc_backend *dev, rc_dtype from, rc_dtype to, const void *x, int64_t n)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *in = rc_input(g, "x", from, 1, (int64_t[]){n});
    rc_tensor *y = rc_cast(g, in, to);
    rc_error err = {0};
    rc_plan *pc = rc_plan_new_on(cpu, g, &y, 1, &err), *pg = pc ? rc_plan_new_on(dev, g, &y, 1, &err) : NULL;
    size_t bytes = rc_tensor_nbytes(y), es = rc_dtype_size(to);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    int64_t bad = -1;
    if (pg && !rc_plan_set_input(pc, in, x, &err) && !rc_plan_set_input(pg, in, x, &err) && !rc_plan_run(pc, &err) &&
        !rc_plan_run(pg, &err) && !rc_plan_read(pc, y, a, &err) && !rc_plan_read(pg, y, b, &err)) {
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += memcmp(a + i * es, b + i * es, es) != 0;
    }
    CHECKF(bad == 0, "%s: cast %s -> %s: %lld elements differ (%s)", rc_backend_name(dev), rc_dtype_name(from),
           rc_dtype_name(to), (long long)bad, err.msg);
    free(a), free(b);
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
    return bad;
}

static void test_casts(rc_backend *dev, const char *name)
{
    enum { NF = 300000 };
    static uint16_t every[65536];
    static uint32_t f32s[NF];
    static int32_t ints[NF];
    for (int i = 0; i < 65536; i++)
        every[i] = (uint16_t)i;
    rc_rng r = rc_rng_new(9);
    for (int i = 0; i < NF; i++) {
        uint32_t u = (uint32_t)rc_rng_next_u64(&r);
        switch (i % 5) {
        case 1: u = (u & 0xffff0000u) | 0x8000u; break;                  /* bf16 ties */
        case 2: u = (u & 0xffffe000u) | 0x1000u; break;                  /* f16 ties */
        case 3: u = (u & 0x80000000u) | (0x33000000u + (u & 0x7fffffffu) % (0x47800000u - 0x33000000u)); break;
        default: break;                                                  /* any pattern: NaN, inf too */
        }
        f32s[i] = u;
        ints[i] = (int32_t)(rc_rng_next_u64(&r) >> (32 + i % 31));
    }
    f32s[0] = 0x7f800001u; /* a signalling NaN */
    f32s[5] = 0x477ff000u; /* f16's overflow edge */
    f32s[10] = 0x7f7fffffu;
    rc_dtype halfs[2] = {RC_BF16, RC_F16};
    int64_t bad = 0;
    for (int k = 0; k < 2; k++) {
        rc_dtype h = halfs[k], other = halfs[1 - k];
        bad += cast_both(dev, h, RC_F32, every, 65536) != 0;
        bad += cast_both(dev, h, other, every, 65536) != 0;
        bad += cast_both(dev, h, RC_I32, every, 65536) != 0;
        bad += cast_both(dev, RC_F32, h, f32s, NF) != 0;
        bad += cast_both(dev, RC_I32, h, ints, NF) != 0;
    }
    printf("  %s: casts f32, i32, bf16, f16 (every 16-bit pattern, %d f32 and i32 patterns): %s\n", name, NF,
           bad ? "differ" : "bitwise the CPU's");
}

/* ---- casts of every pattern on the CPU, bit for bit the scalar conversions ------------------- */

static uint16_t narrow(rc_dtype t, float f)
{
    return t == RC_BF16 ? rc_f32_to_bf16(f) : rc_f32_to_f16(f);
}

/* The CPU's casts on every 16-bit pattern (from bf16 or f16) or 2^20 f32 patterns (random
 * bits: NaN payloads, subnormals, ties), bit for bit as the scalar conversions (as through
 * f32 between bf16 and f16): the vectorised and F16C paths included. */
static void test_cast_all(rc_dtype from, rc_dtype to)
{
    enum { N = 1 << 20 };
    int64_t n = from == RC_F32 ? N : 65536;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", from, 1, (int64_t[]){n});
    rc_tensor *y = rc_cast(g, x, to);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(cpu, g, &y, 1, &err);
    uint32_t *in = malloc(N * 4), *out = malloc(N * 4);
    uint16_t *in16 = (uint16_t *)in, *out16 = (uint16_t *)out;
    rc_rng r = rc_rng_new(9);
    for (int64_t i = 0; i < n; i++) {
        if (from == RC_F32)
            in[i] = (uint32_t)rc_rng_next_u64(&r) >> (i % 3 == 0 ? 4 : 0); /* some small values */
        else
            in16[i] = (uint16_t)i;
    }
    int bad = -1;
    if (p && !rc_plan_set_input(p, x, in, &err) && !rc_plan_run(p, &err) && !rc_plan_read(p, y, out, &err)) {
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float v = from == RC_F32 ? rci_bits_f32(in[i]) : widen(from, in16[i]);
            int ok = to == RC_F32 ? out[i] == rci_f32_bits(v) : out16[i] == narrow(to, v);
            if (!ok && bad++ < 3)
                fprintf(stderr, "cast %s -> %s: 0x%x gives 0x%x\n", rc_dtype_name(from), rc_dtype_name(to),
                        from == RC_F32 ? in[i] : in16[i], to == RC_F32 ? out[i] : out16[i]);
        }
    }
    CHECKF(bad == 0, "cast %s -> %s: %d patterns differ (%s)", rc_dtype_name(from), rc_dtype_name(to), bad, err.msg);
    free(in);
    free(out);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* every op a backend runs in f32 it runs in bf16 and f16: nothing falls back; a device
 * runs no f64 */
static void test_supported(const target *tg)
{
    int missing = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (rc_backend_supports(tg->be, (rc_op)op, RC_F32)) {
            int ok = rc_backend_supports(tg->be, (rc_op)op, RC_BF16) && rc_backend_supports(tg->be, (rc_op)op, RC_F16);
            CHECKF(ok, "%s: no 16-bit kernel for %s", tg->name, rc_op_name((rc_op)op));
            missing += !ok;
        }
    CHECK(missing == 0 && rc_backend_supports(tg->be, RC_OP_CAST, RC_BF16) && rc_backend_supports(tg->be, RC_OP_PAD, RC_F16));
    if (tg->be != cpu)
        CHECKF(!rc_backend_supports(tg->be, RC_OP_EXP, RC_F64), "%s: an f64 kernel", tg->name);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* 1 when backend kind `kind` is asked for (no arguments: every kind) */
static int wanted(int argc, char **argv, const char *kind)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], kind))
            return 1;
    return argc < 2;
}

/* the split products of bf16 attention (ops_attention.c), forced on a device without
 * matmul_wide; the scratch its chunks of pairs aim at */
void rci_gpu_attention_split(int on);
void rci_gpu_attention_chunk(size_t bytes);
void rci_gpu_attention_block(int64_t rows);
void rci_gpu_attention_tiled(int on);

/* 1 when the switch is in argv, which it is taken out of */
static int take_switch(int *argc, char **argv, const char *flag)
{
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], flag)) {
            memmove(argv + i, argv + i + 1, (size_t)(*argc - i - 1) * sizeof *argv);
            *argc -= 1;
            return 1;
        }
    return 0;
}

/* test_ops [cpu] [opencl] [cuda] [--attention-split | --attention-tiled]: the op table on
 * the backends named (none: all); --attention-split: only the attention cases, with bf16
 * attention's split products forced on every device (ops_attention.c's ATT_SPLIT; on
 * OpenCL its products' operands widened), at the same tolerances, in whole chunks and
 * again one pair a chunk; --attention-tiled: only the attention cases, bf16 attention in
 * tiles on tensor cores (ATT_TILED; on OpenCL its fragments through local memory) */
int main(int argc, char **argv)
{
    int split = take_switch(&argc, argv, "--attention-split");
    int tiled = take_switch(&argc, argv, "--attention-tiled");
    if (split)
        rci_gpu_attention_split(1);
    if (tiled)
        rci_gpu_attention_tiled(1);
    else
        rc_set_tiled_attention(0);   /* the products, held to the CPU's ulps (CUDA's default is tiles) */
    tiles_precision = tiled;
    rci_gpu_attention_block(16);   /* causal cases of 32 rows and more in blocks (ops_attention.c) */
    int threads = rc_get_threads();
    rc_set_threads(3);
    cpu = rc_device_open("cpu", 0, NULL);
    add_target("cpu", cpu, 0, D_ALL);
    targets[0].hidden = !wanted(argc, argv, "cpu");
    if (!targets[0].hidden) {
        add_target("cpu/1", cpu, 1, D_FLOAT);
        add_target("cpu/slots", cpu, 2, D_BF16 | D_F16);
    }
    if (wanted(argc, argv, "opencl"))
        add_devices("opencl", 0, "REDCO_REQUIRE_OPENCL");
    if (wanted(argc, argv, "cuda"))
        add_devices("cuda", 1, "REDCO_REQUIRE_CUDA");
    if (ntargets > 1) {
        printf("case                   worst error against f64 per dtype (forward/gradients)\n");
        for (int i = 0; i < NCASES; i++)
            if ((!split && !tiled) || !strncmp(cases[i].name, "attention", 9))
                run_case(i, &cases[i]);
        for (int i = 0; split && i < NCASES; i++)
            if (!strncmp(cases[i].name, "attention", 9)) {
                rci_gpu_attention_chunk(1);   /* one (batch, kv head) pair a chunk */
                run_case(i, &cases[i]);
                rci_gpu_attention_chunk(0);
            }
    }
    if (!targets[0].hidden) {
        test_supported(&targets[0]);
        static const rc_dtype from[6] = {RC_BF16, RC_F16, RC_F16, RC_BF16, RC_F32, RC_F32};
        static const rc_dtype to[6] = {RC_F16, RC_BF16, RC_F32, RC_F32, RC_F16, RC_BF16};
        for (int i = 0; i < 6; i++)
            test_cast_all(from[i], to[i]);
        printf("  cpu: casts between f32, bf16 and f16 (every 16-bit pattern, 2^20 f32 patterns) bitwise the "
               "scalar conversions\n");
    }
    for (int k = 0; k < ntargets; k++)
        if (targets[k].be != cpu) {
            test_supported(&targets[k]);
            test_optimizer(targets[k].be, targets[k].name);
            test_half_optimizer(targets[k].be, targets[k].name);
            test_casts(targets[k].be, targets[k].name);
        }
    if (tiles_worst > 0)
        printf("test_ops: bf16 attention in tiles: largest error against f64 %.2f times the CPU's (%s; allowed %d)\n",
               tiles_worst, tiles_worst_at, TILES_ERROR);
    /* the cases each backend ran, and why a kind did not run */
    printf("test_ops:");
    for (int k = 0; k < ntargets; k++)
        if (!targets[k].hidden)
            printf(" %s: %d cases (%d runs over dtypes);", targets[k].name, targets[k].cases, targets[k].runs);
    for (int k = 0; k < 2; k++)
        if (not_run[k][0])
            printf(" %s;", not_run[k]);
    printf("\n");
    for (int k = 0; k < ntargets; k++)
        if (targets[k].be != cpu)
            rc_device_close(targets[k].be);
    rc_set_threads(threads);
    return check_summary("test_ops");
}
