/* kernels.cl - the device kernels of the OpenCL and CUDA backends, written once: OpenCL C
 * 1.2 in the small dialect of dialect.h, which also compiles as CUDA C++ under NVRTC. CMake
 * embeds dialect.h, src/core/scalar.h (what the CPU kernels compute per element alike:
 * 16-bit conversions, the hash, exp, activations) and this file, in that order, into the
 * library as one C string, rci_gpu_source (gpu.h); a backend builds it once per device and
 * storage of float values (below).
 *
 * Each kernel runs one work-item per output element (i in [0, n)) and returns for the
 * work-items past its count (CUDA launches whole blocks), or, the element-wise ones, a
 * batch of EW_SPAN elements a work-item (their section); the row kernels (norms,
 * cross-entropy, row reductions, the gradient norm's chunks, the attention's rows) instead
 * run one work-group of ROW_GROUP work-items per row (the norms' section). Memory is named
 * as a buffer plus an element offset (a plan's arena holds many tensors). Broadcast and
 * strided ops take up to 8 axes as long8 vectors (shape and element strides per input, axis
 * 0 outermost); the host drops size-1 axes and merges contiguous ones first.
 *
 * The arithmetic is the CPU kernels' (src/backend/cpu/kernels_real.c, update.c): the same
 * expressions in the same order, contraction into fused multiply-adds off, division and
 * square root correctly rounded when the device supports it (the host asks for it). */
#ifdef RC_FP64
typedef double acc_t;     /* accumulator of sums */
#else
typedef float acc_t;
#endif

/* ---- storage of float values -------------------------------------------------------------
 * The program is built once for f32 values and, on first use, once each for bf16
 * (-DRC_STORE_BF16) and f16 (-DRC_STORE_F16). store_t is how a float value is stored (16-bit
 * values as ushort words: no cl_khr_fp16 needed), word_t the element the movement kernel
 * copies. ld widens an element to float, st rounds a float into one (scalar.h's
 * conversions, as the CPU's); arithmetic is float in every program, so a 16-bit node
 * computes as the f32 kernel and rounds once. */
#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
typedef ushort store_t;
typedef ushort word_t;
#else
typedef float store_t;
typedef uint word_t;
#endif

#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
/* a 16-bit stored value's bits widened to float, and a float rounded to them */
static float half_ld(uint h)
{
#if defined(RC_STORE_BF16)
    return rci_bf16_to_f32((ushort)h);
#else
    return rci_f16_to_f32((ushort)h);
#endif
}

static ushort half_st(float v)
{
#if defined(RC_STORE_BF16)
    return rci_f32_to_bf16(v);
#else
    return rci_f32_to_f16(v);
#endif
}
#endif

static float ld(__global const store_t *p, long i)
{
#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
    return half_ld(p[i]);
#else
    return p[i];
#endif
}

static void st(__global store_t *p, long i, float v)
{
#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
    p[i] = half_st(v);
#else
    p[i] = v;
#endif
}

/* a / b of an index a >= 0 and a size b > 0: 32-bit division while both fit (64-bit
 * division is a long software routine on GPUs) */
static long idx_div(long a, long b)
{
    return a <= 0xffffffffL && b <= 0xffffffffL ? (long)((uint)a / (uint)b) : a / b;
}

/* 1 when address p is a multiple of `bytes` (a power of two): where a vector load may go */
static int is_aligned(__global const void *p, ulong bytes)
{
    return ((ulong)p & (bytes - 1)) == 0;
}

/* Flat index i of a box `shape` (nd axes, i below its element count) to the element offsets
 * of two readings of it with strides sa and sb (*ob only when ob is not NULL). The axes run
 * a fixed count so a GPU compiler unrolls them into registers; the outermost axis takes the
 * quotient left (no division), and the others idx_div. */
static long box_offsets(long i, int nd, long8 shape, long8 sa, long8 sb, long *ob)
{
    long sh[8], s[8], t[8];
    long8_get(shape, sh);
    long8_get(sa, s);
    long8_get(sb, t);
    long oa = 0, o2 = 0;
    UNROLL
    for (int d = 7; d >= 1; d--)
        if (d < nd) {
            long q = idx_div(i, sh[d]), c = i - q * sh[d];
            i = q;
            oa += c * s[d];
            o2 += c * t[d];
        }
    if (ob)
        *ob = o2 + i * t[0];
    return oa + i * s[0];
}

/* the element offset of flat index i of a box `shape` (nd axes) read with strides st */
static long box_offset(long i, int nd, long8 shape, long8 st)
{
    return box_offsets(i, nd, shape, st, st, (long *)0);
}

/* ---- fill, unary, activations, broadcast binary ops ------------------------------------
 * Fill, the general binary op (k_binary) and the casts take EW_SPAN elements a work-item:
 * work-item i of N (the launch's) takes i, i + N, i + 2N, i + 3N, then i + 4N and on while
 * below n (any launch covers n; the hosts launch rci_gpu_ew_items(n), a quarter). The
 * unary maps, the activations and the binary ops of contiguous inputs or rows
 * (k_binary_runs) take runs of EW_RUN neighbouring elements (rci_gpu_ew_runs(n) work-items,
 * then on by the launch's size), in 16-byte loads and stores where aligned. Either way a
 * work-item loads all its elements before it stores any (one 16-bit element a work-item
 * left a GPU's memory waiting: the adds of run 10 at about a third of the H100's rate).
 * The element itself is computed as before, so an output aliasing its input (the plan's
 * in-place nodes) reads each element before writing it. */
enum { EW_SPAN = 4 }; /* gpu.h's RCI_GPU_EW_SPAN */

__kernel void k_fill(__global store_t *o, long oo, long n, float v)
{
    long N = get_global_size(0);
    for (long i = get_global_id(0); i < n; i += N)
        st(o, oo + i, v);
}

/* Runs of EW_RUN elements (16 bytes of 16-bit values): ld_run loads the run of x from
 * element i, of which n are there (past them zeros), as floats, in one 16-byte load (two
 * of f32) where it is whole and aligned; st_run stores one so. */
enum { EW_RUN = 8 }; /* gpu.h's RCI_GPU_EW_RUN */

#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
/* the word of two values stored (lo in the low half) */
static uint st_pair(float lo, float hi)
{
    return (uint)half_st(lo) | ((uint)half_st(hi) << 16);
}
#endif

static void ld_run(float *v, __global const store_t *x, long i, long n)
{
#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
    if (n >= EW_RUN && is_aligned(x + i, 16)) {
        uint4 w = *(__global const uint4 *)(x + i);
        v[0] = half_ld(w.x & 0xffff), v[1] = half_ld(w.x >> 16), v[2] = half_ld(w.y & 0xffff);
        v[3] = half_ld(w.y >> 16), v[4] = half_ld(w.z & 0xffff), v[5] = half_ld(w.z >> 16);
        v[6] = half_ld(w.w & 0xffff), v[7] = half_ld(w.w >> 16);
        return;
    }
#else
    if (n >= EW_RUN && is_aligned(x + i, 16)) {
        float4 u = *(__global const float4 *)(x + i), w = *(__global const float4 *)(x + i + 4);
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w, v[4] = w.x, v[5] = w.y, v[6] = w.z, v[7] = w.w;
        return;
    }
#endif
    UNROLL
    for (int u = 0; u < EW_RUN; u++)
        v[u] = u < n ? ld(x, i + u) : 0;
}

static void st_run(__global store_t *o, long i, long n, const float *v)
{
#if defined(RC_STORE_BF16) || defined(RC_STORE_F16)
    if (n >= EW_RUN && is_aligned(o + i, 16)) {
        uint4 w;
        w.x = st_pair(v[0], v[1]), w.y = st_pair(v[2], v[3]), w.z = st_pair(v[4], v[5]), w.w = st_pair(v[6], v[7]);
        *(__global uint4 *)(o + i) = w;
        return;
    }
#else
    if (n >= EW_RUN && is_aligned(o + i, 16)) {
        float4 u, w;
        u.x = v[0], u.y = v[1], u.z = v[2], u.w = v[3], w.x = v[4], w.y = v[5], w.z = v[6], w.w = v[7];
        *(__global float4 *)(o + i) = u;
        *(__global float4 *)(o + i + 4) = w;
        return;
    }
#endif
    UNROLL
    for (int u = 0; u < EW_RUN; u++)
        if (u < n)
            st(o, i + u, v[u]);
}

/* op: 0 affine (x * s + c), 1 exp, 2 log, 3 sqrt, 4 rsqrt, 5 tanh */
static float ew_unary(int op, float v, float s, float c)
{
    switch (op) {
    case 0: return v * s + c;
    case 1: return rci_fexp(v);
    case 2: return log(v);
    case 3: return sqrt(v);
    case 4: return 1 / sqrt(v);
    default: return tanh(v);
    }
}

__kernel void k_unary(__global store_t *o, long oo, __global const store_t *x, long xo, long n, int op,
                      float s, float c)
{
    long N = get_global_size(0) * EW_RUN;
    for (long i = get_global_id(0) * EW_RUN; i < n; i += N) {
        float v[EW_RUN];
        ld_run(v, x, xo + i, n - i);
        UNROLL
        for (int u = 0; u < EW_RUN; u++)
            v[u] = ew_unary(op, v[u], s, c);
        st_run(o, oo + i, n - i, v);
    }
}

/* activation `kind` (rc_act_kind: relu, gelu tanh, gelu erf, silu, sigmoid), its derivative
 * of order `order` (0, 1, 2) */
static float ew_act(int kind, int order, float v)
{
    switch (kind) {
    case 0: return order == 0 ? (v > 0 ? v : 0) : order == 1 ? (v > 0 ? 1 : 0) : 0;
    case 1: return rci_act_gelu_tanh(v, order);
    case 2: return rci_act_gelu_erf(v, order);
    case 3: return rci_act_silu(v, order);
    default: return rci_act_sigmoid(v, order);
    }
}

/* ew_act of x, times m when has_m (a gradient's G f'(x)) */
__kernel void k_act(__global store_t *o, long oo, __global const store_t *x, long xo, long n, int kind,
                    int order, __global const store_t *m, long mo, int has_m)
{
    long N = get_global_size(0) * EW_RUN;
    for (long i = get_global_id(0) * EW_RUN; i < n; i += N) {
        float v[EW_RUN], w[EW_RUN];
        ld_run(v, x, xo + i, n - i);
        if (has_m)
            ld_run(w, m, mo + i, n - i);
        UNROLL
        for (int u = 0; u < EW_RUN; u++) {
            float r = ew_act(kind, order, v[u]);
            v[u] = has_m ? r * w[u] : r;
        }
        st_run(o, oo + i, n - i, v);
    }
}

/* op: 0 add, 1 sub, 2 mul, 3 div */
static float ew_binary(int op, float x, float y)
{
    switch (op) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    default: return x / y;
    }
}

/* out [n] over the box shape, inputs with strides sa, sb */
__kernel void k_binary(__global store_t *o, long oo, __global const store_t *a, long ao,
                       __global const store_t *b, long bo, long n, int op, int nd, long8 shape,
                       long8 sa, long8 sb)
{
    long N = get_global_size(0);
    for (long i0 = get_global_id(0); i0 < n; i0 += EW_SPAN * N) {
        float x[EW_SPAN], y[EW_SPAN];
        UNROLL
        for (int u = 0; u < EW_SPAN; u++) {
            long i = i0 + u * N, ib = 0, ia = i < n ? box_offsets(i, nd, shape, sa, sb, &ib) : 0;
            x[u] = i < n ? ld(a, ao + ia) : 0;
            y[u] = i < n ? ld(b, bo + ib) : 0;
        }
        UNROLL
        for (int u = 0; u < EW_SPAN; u++)
            if (i0 + u * N < n)
                st(o, oo + i0 + u * N, ew_binary(op, x[u], y[u]));
    }
}

/* k_binary where each input is either contiguous over the n elements (a_row, b_row 0) or
 * one row of c values read again for each of the n / c rows (1: a bias), c a multiple of
 * EW_RUN (the host's rci_gpu_run_binary): a run of EW_RUN elements a work-item, in one
 * row, its loads all made before its store */
__kernel void k_binary_runs(__global store_t *o, long oo, __global const store_t *a, long ao, int a_row,
                            __global const store_t *b, long bo, int b_row, long n, long c, int op)
{
    long N = get_global_size(0) * EW_RUN;
    for (long i = get_global_id(0) * EW_RUN; i < n; i += N) {
        long col = a_row || b_row ? i - idx_div(i, c) * c : 0, left = n - i;
        float x[EW_RUN], y[EW_RUN];
        ld_run(x, a, ao + (a_row ? col : i), left);
        ld_run(y, b, bo + (b_row ? col : i), left);
        UNROLL
        for (int u = 0; u < EW_RUN; u++)
            x[u] = ew_binary(op, x[u], y[u]);
        st_run(o, oo + i, left, x);
    }
}

/* cond != 0 ? a : b; cond holds the values' dtype, or i32 (element offset co in ints) when
 * cond_i32; the chosen value is copied as it is stored */
__kernel void k_where(__global store_t *o, long oo, __global const store_t *cond, long co,
                      __global const store_t *a, long ao, __global const store_t *b, long bo, long n,
                      int cond_i32, int nd, long8 shape, long8 sc, long8 sa, long8 sb)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long ci = co + box_offset(i, nd, shape, sc);
    int yes = cond_i32 ? ((__global const int *)cond)[ci] != 0 : ld(cond, ci) != 0;
    o[oo + i] = yes ? a[ao + box_offset(i, nd, shape, sa)] : b[bo + box_offset(i, nd, shape, sb)];
}

/* 1 where a == b else 0: both of the values' dtype, or both i32 when is_i32 */
__kernel void k_equal(__global store_t *o, long oo, __global const store_t *a, long ao,
                      __global const store_t *b, long bo, long n, int is_i32, int nd, long8 shape,
                      long8 sa, long8 sb)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long ib, ia = box_offsets(i, nd, shape, sa, sb, &ib);
    ia += ao;
    ib += bo;
    int eq = is_i32 ? ((__global const int *)a)[ia] == ((__global const int *)b)[ib]
                    : ld(a, ia) == ld(b, ib);
    st(o, oo + i, eq ? 1 : 0);
}

/* ---- data movement and casts --------------------------------------------------------------- */

/* the box shape (n elements) read with strides ss from s + so, written with strides ds at
 * d + dofs: every movement op of elements of word_t's size. Of a run, 8 16-bit elements
 * (16 bytes) aligned on both sides move as one 16-byte load and store (a warp's 512 bytes
 * at once); otherwise up to 8 elements are loaded before any is stored. */
__kernel void k_copy(__global word_t *d, long dofs, __global const word_t *s, long so, long n, int nd,
                     long8 shape, long8 ds, long8 ss, long run)
{
    long i = get_global_id(0), e = i, cnt = 1;
    if (run > 1) { /* work-item i: a run of the innermost axis, contiguous on both sides */
        long len = long8_at(shape, nd - 1), runs = idx_div(len + run - 1, run), row = idx_div(i, runs);
        long k = i - row * runs;
        e = row * len + k * run;
        cnt = len - k * run < run ? len - k * run : run;
    }
    if (e >= n)
        return;
    long is, id = box_offsets(e, nd, shape, ds, ss, &is);
    for (long j0 = 0; j0 < cnt; j0 += 8) {
        __global word_t *to = d + dofs + id + j0;
        __global const word_t *from = s + so + is + j0;
        long left = cnt - j0;
        if (sizeof(word_t) == 2 && left >= 8 && is_aligned(to, 16) && is_aligned(from, 16)) {
            *(__global uint4 *)to = *(__global const uint4 *)from;
            continue;
        }
        word_t v[8];
        UNROLL
        for (int j = 0; j < 8; j++)
            v[j] = j < left ? from[j] : 0;
        UNROLL
        for (int j = 0; j < 8; j++)
            if (j < left)
                to[j] = v[j];
    }
}

/* the CPU's float -> i32: truncation toward zero, NaN 0, saturation */
static int to_i32(float v)
{
    if (v != v)
        return 0;
    if (v >= 2147483647.0f)
        return INT_MAX;
    if (v <= -2147483648.0f)
        return INT_MIN;
    return (int)v;
}

__kernel void k_cast_f32_i32(__global int *o, long oo, __global const float *x, long xo, long n)
{
    long i = get_global_id(0);
    if (i < n)
        o[oo + i] = to_i32(x[xo + i]);
}

__kernel void k_cast_i32_f32(__global float *o, long oo, __global const int *x, long xo, long n)
{
    long i = get_global_id(0);
    if (i < n)
        o[oo + i] = (float)x[xo + i];
}

/* dtypes of k_cast: rc_dtype's values */
enum { DT_F32 = 0, DT_I32 = 2, DT_BF16 = 3, DT_F16 = 4 };

/* casts from or to 16 bits (the CPU's: through f32, i32 values rounded to f32 first);
 * element offsets in each side's dtype; EW_SPAN elements a work-item (the element-wise
 * kernels' batches) */
static float cast_ld(__global const uchar *x, long i, int from)
{
    switch (from) {
    case DT_F32: return ((__global const float *)x)[i];
    case DT_I32: return (float)((__global const int *)x)[i];
    case DT_BF16: return rci_bf16_to_f32(((__global const ushort *)x)[i]);
    default: return rci_f16_to_f32(((__global const ushort *)x)[i]);
    }
}

static void cast_st(__global uchar *o, long i, int to, float v)
{
    switch (to) {
    case DT_F32: ((__global float *)o)[i] = v; break;
    case DT_I32: ((__global int *)o)[i] = to_i32(v); break;
    case DT_BF16: ((__global ushort *)o)[i] = rci_f32_to_bf16(v); break;
    default: ((__global ushort *)o)[i] = rci_f32_to_f16(v); break;
    }
}

__kernel void k_cast(__global uchar *o, long oo, int to, __global const uchar *x, long xo, int from,
                     long n)
{
    long N = get_global_size(0);
    for (long i0 = get_global_id(0); i0 < n; i0 += EW_SPAN * N) {
        float v[EW_SPAN];
        UNROLL
        for (int u = 0; u < EW_SPAN; u++)
            v[u] = i0 + u * N < n ? cast_ld(x, xo + i0 + u * N, from) : 0;
        UNROLL
        for (int u = 0; u < EW_SPAN; u++)
            if (i0 + u * N < n)
                cast_st(o, oo + i0 + u * N, to, v[u]);
    }
}

/* ---- reductions ------------------------------------------------------------------------------- */

/* out [n] over the kept box kshape (input strides ks); each sums (or takes the max of) the
 * m elements of the summed box sshape (strides ss), in index order, in acc_t */
__kernel void k_reduce(__global store_t *o, long oo, __global const store_t *x, long xo, long n,
                       long m, int is_max, int knd, long8 kshape, long8 ks, int snd, long8 sshape,
                       long8 ss)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long base = xo + box_offset(i, knd, kshape, ks);
    if (is_max) {
        float r = -INFINITY;
        for (long j = 0; j < m; j++) {
            float v = ld(x, base + box_offset(j, snd, sshape, ss));
            r = v > r ? v : r;
        }
        st(o, oo + i, r);
        return;
    }
    acc_t s = 0;
    for (long j = 0; j < m; j++)
        s += ld(x, base + box_offset(j, snd, sshape, ss));
    st(o, oo + i, (float)s);
}

/* k_reduce in two passes for few outputs of long sums: part[i * chunks + c] = the sum (or
 * max) of the summed elements [c * chunk, (c + 1) * chunk) of output i, in index order;
 * neighbouring work-items take neighbouring outputs (a bias's gradient reads rows whole) */
__kernel void k_reduce_part(__global acc_t *part, __global const store_t *x, long xo, long n,
                            long m, long chunk, long chunks, int is_max, int knd, long8 kshape,
                            long8 ks, int snd, long8 sshape, long8 ss)
{
    long id = get_global_id(0);
    if (id >= n * chunks)
        return;
    long c = id / n, i = id % n, lo = c * chunk, hi = lo + chunk < m ? lo + chunk : m;
    long base = xo + box_offset(i, knd, kshape, ks);
    acc_t r = is_max ? -INFINITY : 0;
    for (long j = lo; j < hi; j++) {
        float v = ld(x, base + box_offset(j, snd, sshape, ss));
        if (is_max)
            r = v > r ? v : r;
        else
            r += v;
    }
    part[i * chunks + c] = r;
}

/* k_reduce_part where the n outputs are contiguous columns (n a multiple of EW_RUN) of m
 * rows n apart: a work-item takes EW_RUN neighbouring columns of one chunk of rows, a run
 * from each row (ld_run), each column summed in row order as k_reduce_part sums it. The
 * runs of COLS_ROWS rows are loaded before any is added: that many loads in flight. */
enum { COLS_ROWS = 4 };

__kernel void k_reduce_cols(__global acc_t *part, __global const store_t *x, long xo, long n, long m, long chunk,
                            long chunks, int is_max)
{
    long id = get_global_id(0), runs = idx_div(n, EW_RUN);
    if (id >= runs * chunks)
        return;
    long c = idx_div(id, runs), i = (id - c * runs) * EW_RUN, lo = c * chunk, hi = lo + chunk < m ? lo + chunk : m;
    acc_t r[EW_RUN];
    UNROLL
    for (int u = 0; u < EW_RUN; u++)
        r[u] = is_max ? -INFINITY : 0;
    for (long j = lo; j < hi; j += COLS_ROWS) {
        float v[COLS_ROWS][EW_RUN];
        UNROLL
        for (int q = 0; q < COLS_ROWS; q++)
            if (j + q < hi)
                ld_run(v[q], x, xo + (j + q) * n + i, EW_RUN);
        UNROLL
        for (int q = 0; q < COLS_ROWS; q++)
            UNROLL
            for (int u = 0; u < EW_RUN; u++)
                if (j + q < hi)
                    r[u] = is_max ? (v[q][u] > r[u] ? v[q][u] : r[u]) : r[u] + v[q][u];
    }
    UNROLL
    for (int u = 0; u < EW_RUN; u++)
        part[(i + u) * chunks + c] = r[u];
}

/* ---- softmax: one work-item per row ------------------------------------------------------ */

/* the CPU's dsum over float temporaries: x[0, n) in 8 interleaved partial sums, the tail
 * first, then the partials */
static acc_t dsum_f(__global const float *x, long n)
{
    acc_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s = 0;
    long i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += x[i + k];
    for (; i < n; i++)
        s += x[i];
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* rows [rows] of c: softmax of x * scale + mask (mask strides mst over the node's nd axes
 * `shape`, when has_mask), causal: row r sees keys j <= r % tq + (c - tq). The row is
 * computed in float at tmp (the output itself for f32 values) and stored at the end. */
__kernel void k_softmax(__global store_t *out, long oo, __global float *tmp, long to,
                        __global const store_t *x, long xo, __global const store_t *mask, long mo,
                        int has_mask, long rows, long c, long tq, int causal, float scale, int nd,
                        long8 shape, long8 mst)
{
    long r = get_global_id(0);
    if (r >= rows)
        return;
    __global const store_t *xr = x + xo + r * c;
    __global store_t *o = out + oo + r * c;
    __global float *t = tmp + to + r * c;
    long cnt = c;
    if (causal) {
        long lim = r % tq + (c - tq) + 1;
        cnt = lim < 0 ? 0 : lim > c ? c : lim;
    }
    for (long j = 0; j < cnt; j++)
        t[j] = ld(xr, j) * scale;
    if (has_mask) {
        long moff = 0, rr = r;
        for (int i = nd - 2; i >= 0; i--) {
            moff += (rr % long8_at(shape, i)) * long8_at(mst, i);
            rr /= long8_at(shape, i);
        }
        long step = nd ? long8_at(mst, nd - 1) : 0;
        for (long j = 0; j < cnt; j++)
            t[j] += ld(mask, mo + moff + j * step);
    }
    float mx = -INFINITY;
    for (long j = 0; j < cnt; j++)
        mx = t[j] > mx ? t[j] : mx;
    if (mx == -INFINITY) {
        for (long j = 0; j < c; j++)
            st(o, j, 0);
        return;
    }
    for (long j = 0; j < cnt; j++)
        t[j] = rci_fexp(t[j] - mx);
    float inv = (float)(1 / dsum_f(t, cnt));
    for (long j = 0; j < cnt; j++)
        st(o, j, t[j] * inv);
    for (long j = cnt; j < c; j++)
        st(o, j, 0);
}

/* ---- rows of a work-group: reductions of contiguous rows, layer and RMS norms --------------
 * One work-group of ROW_GROUP work-items per row (the host's RCI_GPU_ROW_GROUP, node.h), as
 * the attention's row kernels (below): work-item li takes the row's columns li,
 * li + ROW_GROUP, ... (neighbouring work-items read neighbouring values), sums its own in
 * acc_t, and group_reduce combines the partials. The kernels never return early: every
 * work-item reaches each barrier. */
enum { ROW_GROUP = 128, ROW_PARTS = ROW_GROUP / 8 };   /* a multiple of 8; the host's */

/* a + b (sum 1) or the larger of a and b (sum 0; b only when it compares greater) */
static acc_t acc_combine(acc_t a, acc_t b, int sum)
{
    return sum ? a + b : (b > a ? b : a);
}

/* The work-group's sum (sum 1) or largest (sum 0) of x, in every work-item, always in the
 * same order: each item's x into red[li]; items 0 .. ROW_PARTS - 1 each combine 8 of them,
 * red[8 li .. 8 li + 7], into red[ROW_GROUP + li]; every item combines those ROW_PARTS in
 * order. red holds ROW_GROUP + ROW_PARTS values. Three barriers, none in a loop: not the
 * usual halving tree (a barrier in each of its log2(size) steps), which PoCL's
 * multi-threaded CPU work-groups ran wrongly now and then (cross-entropy's loop of barriers
 * over column blocks runs right). Every work-item of the group (ROW_GROUP) calls it. */
static acc_t group_reduce(LOCAL_MEM acc_t *red, acc_t x, int sum)
{
    long li = (long)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);   /* every work-item has read red of a call before */
    red[li] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (li < ROW_PARTS) {
        acc_t p = red[8 * li];
        for (int k = 1; k < 8; k++)
            p = acc_combine(p, red[8 * li + k], sum);
        red[ROW_GROUP + li] = p;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    acc_t r = red[ROW_GROUP];
    for (int i = 1; i < ROW_PARTS; i++)
        r = acc_combine(r, red[ROW_GROUP + i], sum);
    return r;
}

/* k_reduce of contiguous rows (the summed box one axis of stride 1, m elements from each
 * output's kept offset): output i is work-group i's row, summed (or its max taken) in acc_t
 * by group_reduce. A row's elements are read side by side (k_reduce reads a row a work-item,
 * the work-items' rows apart) */
__kernel void k_reduce_rows(__global store_t *o, long oo, __global const store_t *x, long xo, long m,
                            int is_max, int knd, long8 kshape, long8 ks)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long i = (long)get_group_id(0), li = (long)get_local_id(0);
    long base = xo + box_offset(i, knd, kshape, ks);
    acc_t r = is_max ? -INFINITY : 0;
    for (long j = li; j < m; j += ROW_GROUP)
        r = acc_combine(r, ld(x, base + j), !is_max);
    r = group_reduce(red, r, !is_max);
    if (li == 0)
        st(o, oo + i, (float)r);
}

/* k_reduce_part's second pass: out[i] = the chunks' parts of output i combined, a work-group
 * an output (work-item li the parts li, li + ROW_GROUP, ..., then group_reduce: a fixed
 * order), stored as the values are (o) or, with to_f32, in f32 (of: a norm's weight
 * gradient from 16-bit x) */
__kernel void k_reduce_finish(__global store_t *o, __global float *of, long oo, int to_f32,
                              __global const acc_t *part, long n, long chunks, int is_max)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long i = (long)get_group_id(0), li = (long)get_local_id(0);
    acc_t r = is_max ? -INFINITY : 0;
    for (long c = li; c < chunks; c += ROW_GROUP)
        r = acc_combine(r, part[i * chunks + c], !is_max);
    r = group_reduce(red, r, !is_max);
    if (li == 0 && i < n && to_f32)
        of[oo + i] = (float)r;
    else if (li == 0 && i < n)
        st(o, oo + i, (float)r);
}

/* the CPU's dsum_sq of the group's row xr[0, c): the sum of (x[j] - mean)^2 in acc_t, in
 * every work-item (the CPU's terms, added in another order) */
static acc_t group_sum_sq(LOCAL_MEM acc_t *red, __global const store_t *xr, long c, acc_t mean)
{
    acc_t s = 0;
    for (long j = (long)get_local_id(0); j < c; j += ROW_GROUP) {
        acc_t d = ld(xr, j) - mean;
        s += d * d;
    }
    return group_reduce(red, s, 1);
}

/* A norm's row statistics over the work-group, as k_layer_norm, k_rms_norm and k_norm_grad
 * take them: the mean into mu when not null (0 without center: the RMS norm) and 1/sigma = 1 / sqrt(mean((x -
 * mean)^2) + eps), the mean first and then the variance about it (two passes over the
 * row, as the CPU's dsum and dsum_sq) */
static void group_norm_stats(LOCAL_MEM acc_t *red, __global const store_t *xr, long c, int center, acc_t eps,
                             float *mu, float *rstd)
{
    acc_t s = 0, mean = 0;
    for (long j = (long)get_local_id(0); center && j < c; j += ROW_GROUP)
        s += ld(xr, j);
    if (center) /* the whole work-group's, as its row's */
        mean = group_reduce(red, s, 1) / (acc_t)c;
    if (mu)
        *mu = (float)mean;
    *rstd = (float)(1 / sqrt(group_sum_sq(red, xr, c, mean) / (acc_t)c + eps));
}

/* Rows of c: (x - mean) / sqrt(var + eps) * w + b, w and b when has_w, has_b; row r is
 * work-group r. The statistics (group_norm_stats), then each work-item writes its
 * columns. */
__kernel void k_layer_norm(__global store_t *out, long oo, __global const store_t *x, long xo,
                           __global const store_t *w, long wo, int has_w, __global const store_t *b,
                           long bo, int has_b, long c, acc_t eps)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long r = (long)get_group_id(0), li = (long)get_local_id(0);
    __global const store_t *xr = x + xo + r * c;
    __global store_t *o = out + oo + r * c;
    float mu, rstd;
    group_norm_stats(red, xr, c, 1, eps, &mu, &rstd);
    for (long j = li; j < c; j += ROW_GROUP) {
        float v = (ld(xr, j) - mu) * rstd;
        if (has_w)
            v *= ld(w, wo + j);
        if (has_b)
            v += ld(b, bo + j);
        st(o, j, v);
    }
}

/* Rows of c: x / sqrt(mean(x^2) + eps) * (w + offset), without w (has_w 0): times 1; row r
 * is work-group r */
__kernel void k_rms_norm(__global store_t *out, long oo, __global const store_t *x, long xo,
                         __global const store_t *w, long wo, int has_w, long c, acc_t eps, float offset)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long r = (long)get_group_id(0);
    __global const store_t *xr = x + xo + r * c;
    __global store_t *o = out + oo + r * c;
    float rs;
    group_norm_stats(red, xr, c, 0, eps, (float *)0, &rs);
    for (long j = (long)get_local_id(0); j < c; j += ROW_GROUP)
        st(o, j, has_w ? ld(xr, j) * rs * (ld(w, wo + j) + offset) : ld(xr, j) * rs);
}

/* NORM_GRAD's dx (redco.h) over rows of c, row r work-group r: the row's statistics as the
 * forward takes them (group_norm_stats), then g = G (w + offset) (G without w) summed with
 * and without xhat and dx = rstd (g - xhat mean(g xhat) - mean(g)) (mean(g) for layer norm
 * alone), plus the addend ad when has_ad (which o may be: each element read, then written
 * by the same work-item) */
__kernel void k_norm_grad(__global store_t *o, long oo, __global const store_t *x, long xo,
                          __global const store_t *w, long wo, int has_w, __global const store_t *gd, long go,
                          __global const store_t *ad, long ao, int has_ad, long c, acc_t eps, float offset,
                          int layer)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long r = (long)get_group_id(0), li = (long)get_local_id(0);
    __global const store_t *xr = x + xo + r * c, *gr = gd + go + r * c;
    float mu, rstd;
    group_norm_stats(red, xr, c, layer, eps, &mu, &rstd);
    acc_t sg = 0, sgx = 0;
    for (long j = li; j < c; j += ROW_GROUP) {
        float gj = has_w ? ld(gr, j) * (ld(w, wo + j) + offset) : ld(gr, j);
        sg += gj;
        sgx += gj * ((ld(xr, j) - mu) * rstd);
    }
    sgx = group_reduce(red, sgx, 1) / (acc_t)c; /* the whole work-group's, as its row's */
    sg = layer ? group_reduce(red, sg, 1) / (acc_t)c : 0;
    for (long j = li; j < c; j += ROW_GROUP) {
        float gj = has_w ? ld(gr, j) * (ld(w, wo + j) + offset) : ld(gr, j);
        float v = rstd * (gj - (ld(xr, j) - mu) * rstd * (float)sgx - (float)sg);
        st(o, oo + r * c + j, has_ad ? v + ld(ad, ao + r * c + j) : v);
    }
}

/* NORM_GRAD's weight gradient, the rows' sum of G xhat, its first pass: work-group k takes
 * the rows [k span, (k + 1) span) of c (span at most WGRAD_ROWS, node.h's
 * RCI_GPU_WGRAD_ROWS): their statistics as the forward takes them (group_norm_stats) into
 * local memory, then each work-item its columns' sums over those rows, into
 * part[j chunks + k] for k_reduce_finish to combine in order */
enum { WGRAD_ROWS = 32 };

__kernel void k_norm_wgrad(__global acc_t *part, __global const store_t *x, long xo, __global const store_t *gd,
                           long go, long rows, long c, long span, long chunks, acc_t eps, int layer)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    __local float mus[WGRAD_ROWS], rss[WGRAD_ROWS];
    long k = (long)get_group_id(0), li = (long)get_local_id(0), r0 = k * span;
    long n = rows - r0 < span ? rows - r0 : span;
    for (long q = 0; q < n; q++) {
        float mu, rstd;
        group_norm_stats(red, x + xo + (r0 + q) * c, c, layer, eps, &mu, &rstd);
        if (li == 0)
            mus[q] = mu, rss[q] = rstd;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long j = li; j < c; j += ROW_GROUP) {
        acc_t s = 0;
        for (long q = 0; q < n; q++) {
            long e = (r0 + q) * c + j;
            s += ld(gd, go + e) * ((ld(x, xo + e) - mus[q]) * rss[q]);
        }
        part[j * chunks + k] = s;
    }
}

/* ---- ids: embedding, one-hot, cross-entropy ------------------------------------------------ */

/* fault[0] = the least position i whose id is outside [0, n) and not `ignore` (when
 * has_ignore); the host fills it with INT_MAX first */
__kernel void k_check_ids(__global const int *ids, long io, long count, long n, int ignore,
                          int has_ignore, __global int *fault)
{
    long i = get_global_id(0);
    if (i >= count)
        return;
    int id = ids[io + i];
    if ((!has_ignore || id != ignore) && (id < 0 || id >= n))
        atomic_min(fault, (int)i);
}

/* out [count, c]: row i = table row ids[i] - first as stored (zeros outside the table's
 * rows) */
__kernel void k_embedding(__global store_t *o, long oo, __global const store_t *t, long to,
                          __global const int *ids, long io, long count, long c, long rows, long first)
{
    long e = get_global_id(0);
    if (e >= count * c)
        return;
    long i = e / c, j = e % c, r = (long)ids[io + i] - first;
    o[oo + e] = r >= 0 && r < rows ? t[to + r * c + j] : 0;
}

/* acc [rows, c] (float, zeroed first: the output itself for f32 values) += grad row i at
 * row ids[i] - first, skipping `skip`: work-item e = k c + j takes column j of the rows
 * [k span, (k + 1) span), adding in i order (the CPU's order: deterministic); every
 * work-item reads all the ids, only its rows' gradients */
__kernel void k_embedding_grad(__global float *acc, long ao, __global const int *ids, long io,
                               __global const store_t *g, long go, long count, long c, long rows,
                               long first, int skip, long span, long items)
{
    long e = get_global_id(0);
    if (e >= items)
        return;
    long k = idx_div(e, c), j = e - k * c, lo = k * span, hi = lo + span < rows ? lo + span : rows;
    for (long i = 0; i < count; i++) {
        int id = ids[io + i];
        long r = (long)id - first;
        if (id == skip || r < lo || r >= hi)
            continue;
        acc[ao + r * c + j] += ld(g, go + i * c + j);
    }
}

/* out [count, depth]: 1 at column ids[i] - first unless ids[i] == ignore */
__kernel void k_one_hot(__global store_t *o, long oo, __global const int *ids, long io, long count,
                        long depth, long first, int ignore)
{
    long e = get_global_id(0);
    if (e >= count * depth)
        return;
    long i = e / depth, j = e % depth;
    int id = ids[io + i];
    st(o, oo + e, id != ignore && (long)id - first == j ? 1 : 0);
}

/* Cross-entropy's row kernels run one work-group of ROW_GROUP a row, as the norms do, and
 * read a row (a vocabulary's logits, 100 KB of bf16 for GPT-2's) in runs of EW_RUN from its
 * first 16-byte boundary (ce_lead: a row of an odd length starts anywhere), 16 bytes a
 * load: work-item li takes the runs li, li + ROW_GROUP, ... (side by side with its group's)
 * and, before them, element li of the row's lead. group_reduce combines the row's largest
 * value and its exponentials' sum, in acc_t: the CPU's terms (exp(x[j] - max) in float),
 * added in another order. A row whose target is ignored reads nothing. The kernels never
 * return early (every work-item reaches each barrier); the host runs one work-group a row. */

/* the elements of row xr (v of them) before its first 16-byte boundary, at most v */
static long ce_lead(__global const store_t *xr, long v)
{
    long lead = (long)(((16 - ((ulong)xr & 15)) & 15) / sizeof(store_t));
    return lead < v ? lead : v;
}

/* the largest of a work-item's elements of row xr[0, v) (NaNs never win a comparison;
 * -INFINITY for none, sum 0), or the sum of their exp(x - mx) (sum 1) */
static acc_t ce_row_part(__global const store_t *xr, long v, float mx, int sum)
{
    long li = (long)get_local_id(0), lead = ce_lead(xr, v);
    acc_t a = sum ? 0 : -INFINITY;
    float r[EW_RUN];
    if (li < lead)
        a = sum ? a + rci_fexp(ld(xr, li) - mx) : acc_combine(a, ld(xr, li), 0);
    for (long j = lead + li * EW_RUN; j < v; j += ROW_GROUP * EW_RUN) {
        ld_run(r, xr, j, v - j);
        UNROLL
        for (int u = 0; u < EW_RUN; u++)
            if (j + u < v)
                a = sum ? a + rci_fexp(r[u] - mx) : acc_combine(a, r[u], 0);
    }
    return a;
}

/* the largest value of xr[0, v) (-INFINITY for none) and, in *sum, the sum of exp(x[j] -
 * max); in every work-item of the group */
static float ce_row_stats(LOCAL_MEM acc_t *red, __global const store_t *xr, long v, acc_t *sum)
{
    float mx = (float)group_reduce(red, ce_row_part(xr, v, 0, 0), 0);
    *sum = group_reduce(red, ce_row_part(xr, v, mx, 1), 1);
    return mx;
}

/* loss[r] = logsumexp(row r) - row[target] (0 for an ignored target); work-group r */
__kernel void k_ce_rows(__global acc_t *loss, __global const store_t *x, long xo,
                        __global const int *tg, long to, long v, int ignore)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long r = (long)get_group_id(0), li = (long)get_local_id(0);
    int t = tg[to + r], live = t != ignore;
    __global const store_t *xr = x + xo + r * v;
    acc_t s;
    float mx = ce_row_stats(red, xr, live ? v : 0, &s);
    if (li == 0)
        loss[r] = live ? (acc_t)mx + log(s) - (acc_t)ld(xr, t) : 0;
}

/* one work-item: out = the mean of loss over targets not ignored (0 when none); the loss
 * is f32 in every program (that of 16-bit logits too) */
__kernel void k_ce_mean(__global float *o, long oo, __global const acc_t *loss,
                        __global const int *tg, long to, long rows, int ignore)
{
    if (get_global_id(0) != 0)
        return;
    acc_t s = 0;
    long count = 0;
    for (long r = 0; r < rows; r++) {
        s += loss[r];
        count += tg[to + r] != ignore;
    }
    o[oo] = count ? (float)(s / (acc_t)count) : 0;
}

/* one work-item: scale[0] = g / (targets not ignored), 0 when none; g is the loss's f32 */
__kernel void k_ce_scale(__global float *scale, __global const int *tg, long to, long rows,
                         int ignore, __global const float *g, long go)
{
    if (get_global_id(0) != 0)
        return;
    long count = 0;
    for (long r = 0; r < rows; r++)
        count += tg[to + r] != ignore;
    scale[0] = count ? (float)((acc_t)g[go] / (acc_t)count) : 0;
}

/* the gradient of element j of a row from its logit xj: (softmax - onehot(t)) * scale */
static float ce_grad_at(float xj, long j, int t, int live, float mx, float k, float sc)
{
    float e = live ? rci_fexp(xj - mx) : 0;
    return live && j == t ? e * k - sc : e * k;
}

/* row r of the gradient: (softmax(row) - onehot(target)) * scale; zeros when ignored;
 * work-group r. Each work-item computes its exponentials again for its outputs (the same
 * floats: no temporaries), reading each run of its (ce_row_part's) before it writes it, so
 * out may be x. */
__kernel void k_ce_grad(__global store_t *out, long oo, __global const store_t *x, long xo,
                        __global const int *tg, long to, __global const float *scale, long v, int ignore)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long r = (long)get_group_id(0), li = (long)get_local_id(0);
    int t = tg[to + r], live = t != ignore;
    __global store_t *o = out + oo + r * v;
    __global const store_t *xr = x + xo + r * v;
    acc_t s;
    float mx = ce_row_stats(red, xr, live ? v : 0, &s);
    float sc = scale[0], k = live ? (float)(1 / s) * sc : 0, y[EW_RUN];
    long lead = ce_lead(xr, v);
    if (li < lead)
        st(o, li, ce_grad_at(live ? ld(xr, li) : 0, li, t, live, mx, k, sc));
    for (long j = lead + li * EW_RUN; j < v; j += ROW_GROUP * EW_RUN) {
        if (live)
            ld_run(y, xr, j, v - j);
        UNROLL
        for (int u = 0; u < EW_RUN; u++)
            y[u] = ce_grad_at(live ? y[u] : 0, j + u, t, live, mx, k, sc);
        st_run(o, j, v - j, y);
    }
}

#ifdef RC_FP64
/* x [rows, h, d]: element (r, hh, j) of a rotary pair q < rot / 2 rotated by
 * pos[r % np] * theta^(-2q/rot) (angle, cos and sin in double as the CPU), the rest copied */
__kernel void k_rope(__global store_t *o, long oo, __global const store_t *x, long xo,
                     __global const int *pos, long po, long np, long n, long h, long d, long rot,
                     int interleaved, int inverse, double theta)
{
    long e = get_global_id(0);
    if (e >= n)
        return;
    long j = e % d, row = e / d, r = row / h, pairs = rot / 2;
    __global const store_t *xr = x + xo + row * d;
    if (j >= rot) {
        o[oo + e] = xr[j];
        return;
    }
    long q = interleaved ? j / 2 : j < pairs ? j : j - pairs;
    int is_a = interleaved ? j % 2 == 0 : j < pairs;
    long ia = interleaved ? 2 * q : q, ib = interleaved ? ia + 1 : ia + pairs;
    double ang = (double)pos[po + r % np] * pow(theta, -2.0 * (double)q / (double)rot);
    if (inverse)
        ang = -ang;
    float cs = (float)cos(ang), sn = (float)sin(ang), xa = ld(xr, ia), xb = ld(xr, ib);
    st(o, oo + e, is_a ? xa * cs - xb * sn : xb * cs + xa * sn);
}
#endif

/* ---- matrix products of a few rows (decoding) over 16-bit weights ------------------------- */

/* out [rows, n] = a [rows, k] (stored [k, rows] when ta) times b stored [k, n] (or [n, k]
 * when tb), rows <= 4: one work-item per column j, reading b's stored words directly,
 * summing in f32 in the CPU's order (src/backend/cpu/kernels_half.c): in p order, or for
 * b stored [n, k] in 16 partial sums (p mod 16) added in order at the end */
__kernel void k_matmul_rows(__global store_t *o, long oo, __global const store_t *a, long ao,
                            __global const store_t *b, long bo, long rows, long n, long k, int ta,
                            int tb)
{
    long j = get_global_id(0);
    if (j >= n)
        return;
    float acc[4] = {0, 0, 0, 0};
    if (!tb) {
        for (long p = 0; p < k; p++) {
            float w = ld(b, bo + p * n + j);
            for (long r = 0; r < rows; r++)
                acc[r] += ld(a, ao + (ta ? p * rows + r : r * k + p)) * w;
        }
    } else {
        __global const store_t *bj = b + bo + j * k;
        for (long r = 0; r < rows; r++) {
            float part[16] = {0};
            long p = 0;
            for (; p + 16 <= k; p += 16)
                for (int l = 0; l < 16; l++)
                    part[l] += ld(a, ao + (ta ? (p + l) * rows + r : r * k + p + l)) * ld(bj, p + l);
            for (; p < k; p++)
                part[p % 16] += ld(a, ao + (ta ? p * rows + r : r * k + p)) * ld(bj, p);
            for (int l = 0; l < 16; l++)
                acc[r] += part[l];
        }
    }
    for (long r = 0; r < rows; r++)
        st(o, oo + r * n + j, acc[r]);
}

/* ---- dropout --------------------------------------------------------------------------------- */

/* kept iff their draw reaches p's threshold (scalar.h's rci_drop_kept); kept values scaled */
__kernel void k_dropout(__global store_t *o, long oo, __global const store_t *x, long xo, long n,
                        ulong key, ulong thresh, float scale)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    st(o, oo + i, rci_drop_kept(key, (ulong)i, thresh) ? ld(x, xo + i) * scale : 0);
}

/* standard normal draws (the CPU's normal_range): Box-Muller of two 24-bit uniforms from
 * one hash of (key, i) */
__kernel void k_normal(__global store_t *o, long oo, long n, ulong key)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    ulong h = rci_hash64(key ^ rci_hash64((ulong)i));
    float u1 = (float)((h >> 40) + 1) * 0x1p-24f, u2 = (float)(h & 0xffffffUL) * 0x1p-24f;
    st(o, oo + i, sqrt(-2.0f * log(u1)) * cos(6.283185307179586f * u2));
}

/* ---- optimizer --------------------------------------------------------------------------------- */

/* AdamW over g [n] at element `at`, m, v [n] at element at - sat and w [n] at at - wat
 * (m[0], v[0] and w[0] sit at elements sat and wat of g: shares of the state) (update.c's
 * adamw_block, after clipping) */
__kernel void k_adamw(__global float *w, __global float *g, __global float *m, __global float *v,
                      long at, long n, long sat, long wat, float clip, int do_clip, float b1, float b2,
                      float c1, float c2, float eps, float step_size, float bc2_sqrt, float decay)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long s = i + at - sat, wi = i + at - wat;
    i += at;
    float gi = g[i];
    if (do_clip) {
        gi *= clip;
        g[i] = gi;
    }
    float mi = b1 * m[s] + c1 * gi;
    float vi = b2 * v[s] + c2 * gi * gi;
    m[s] = mi;
    v[s] = vi;
    w[wi] = w[wi] * decay - step_size * (mi / (sqrt(vi) / bc2_sqrt + eps));
}

/* SGD: clipping, decay when do_decay, then w -= lr g (w [n] at element at - wat) */
__kernel void k_sgd(__global float *w, __global float *g, long at, long n, long wat, float clip, int do_clip,
                    float decay, int do_decay, float lr)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long k = i + at - wat;
    i += at;
    float gi = g[i];
    if (do_clip) {
        gi *= clip;
        g[i] = gi;
    }
    float wi = w[k];
    if (do_decay)
        wi *= decay;
    w[k] = wi - lr * gi;
}

/* dst = scale src (add 0) or dst += scale src (add 1): dst f32, src as stored (the 16-bit
 * programs read bf16 / f16 words, widened exactly: the 16-bit gradients of a 16-bit step) */
__kernel void k_accumulate(__global float *d, long dofs, __global const store_t *s, long so, long n,
                           float scale, int add)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    float v = scale * ld(s, so + i);
    d[dofs + i] = add ? d[dofs + i] + v : v;
}

/* part[base + b] = the sum of squares of x[at + b chunk, ...) (chunk elements, fewer in the
 * last), in acc_t: one work-group of ROW_GROUP a chunk, work-item li summing elements li,
 * li + ROW_GROUP, ... (the group's loads side by side), the items' sums then combined by
 * group_reduce (a fixed order: the same sum every run). The host adds the parts in order. */
__kernel void k_sum_squares(__global acc_t *part, __global const float *x, long at, long n, long chunk,
                            long parts, long base)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    long b = (long)get_group_id(0), li = (long)get_local_id(0);
    long lo = b * chunk, hi = lo + chunk < n ? lo + chunk : n;
    acc_t s = 0;
    for (long j = lo + li; j < hi; j += ROW_GROUP) {
        acc_t v = x[at + j];
        s += v * v;
    }
    s = group_reduce(red, s, 1);
    if (li == 0 && b < parts)
        part[base + b] = s;
}

/* ---- 2-D convolution and pooling (NCHW), direct: one work-item per output element ----------
 * The convolution's geometry g: n, c, h, w (input), o, kh, kw (weight [o, c/groups, kh, kw]),
 * oh, ow (output), stride h, w, padding h, w, dilation h, w, groups. */

/* y [n, o, oh, ow] = sum over the group's channels and the kernel of x * w (+ bias[o]) */
__kernel void k_conv2d(__global store_t *y, long yo, __global const store_t *x, long xo,
                       __global const store_t *w, long wo, __global const store_t *b, long bo,
                       int has_bias, long16 g)
{
    long e = get_global_id(0);
    if (e >= g.s0 * g.s4 * g.s7 * g.s8)
        return;
    long ox = e % g.s8, oy = e / g.s8 % g.s7, o = e / (g.s8 * g.s7) % g.s4, n = e / (g.s8 * g.s7 * g.s4);
    long cg = g.s1 / g.sf, og = g.s4 / g.sf, c0 = o / og * cg;
    float acc = 0;
    for (long c = 0; c < cg; c++)
        for (long i = 0; i < g.s5; i++) {
            long iy = oy * g.s9 - g.sb + i * g.sd;
            if (iy < 0 || iy >= g.s2)
                continue;
            for (long j = 0; j < g.s6; j++) {
                long ix = ox * g.sa - g.sc + j * g.se;
                if (ix < 0 || ix >= g.s3)
                    continue;
                acc += ld(x, xo + ((n * g.s1 + c0 + c) * g.s2 + iy) * g.s3 + ix) *
                       ld(w, wo + ((o * cg + c) * g.s5 + i) * g.s6 + j);
            }
        }
    if (has_bias)
        acc += ld(b, bo + o);
    st(y, yo + e, acc);
}

/* gx [n, c, h, w] = sum over the outputs that read x[n, c, iy, ix] of gy * w */
__kernel void k_conv2d_grad_input(__global store_t *gx, long xo, __global const store_t *gy, long yo,
                                  __global const store_t *w, long wo, long16 g)
{
    long e = get_global_id(0);
    if (e >= g.s0 * g.s1 * g.s2 * g.s3)
        return;
    long ix = e % g.s3, iy = e / g.s3 % g.s2, c = e / (g.s3 * g.s2) % g.s1, n = e / (g.s3 * g.s2 * g.s1);
    long cg = g.s1 / g.sf, og = g.s4 / g.sf, grp = c / cg, cl = c - grp * cg;
    float acc = 0;
    for (long i = 0; i < g.s5; i++) {
        long ty = iy + g.sb - i * g.sd;
        if (ty < 0 || ty % g.s9 || ty / g.s9 >= g.s7)
            continue;
        for (long j = 0; j < g.s6; j++) {
            long tx = ix + g.sc - j * g.se;
            if (tx < 0 || tx % g.sa || tx / g.sa >= g.s8)
                continue;
            for (long o = grp * og; o < (grp + 1) * og; o++)
                acc += ld(gy, yo + ((n * g.s4 + o) * g.s7 + ty / g.s9) * g.s8 + tx / g.sa) *
                       ld(w, wo + ((o * cg + cl) * g.s5 + i) * g.s6 + j);
        }
    }
    st(gx, xo + e, acc);
}

/* gw [o, c/groups, kh, kw] = sum over images and outputs of gy * the x it read */
__kernel void k_conv2d_grad_weight(__global store_t *gw, long wo, __global const store_t *gy, long yo,
                                   __global const store_t *x, long xo, long16 g)
{
    long cg = g.s1 / g.sf, og = g.s4 / g.sf;
    long e = get_global_id(0);
    if (e >= g.s4 * cg * g.s5 * g.s6)
        return;
    long j = e % g.s6, i = e / g.s6 % g.s5, c = e / (g.s6 * g.s5) % cg, o = e / (g.s6 * g.s5 * cg);
    long c0 = o / og * cg;
    float acc = 0;
    for (long n = 0; n < g.s0; n++)
        for (long oy = 0; oy < g.s7; oy++) {
            long iy = oy * g.s9 - g.sb + i * g.sd;
            if (iy < 0 || iy >= g.s2)
                continue;
            for (long ox = 0; ox < g.s8; ox++) {
                long ix = ox * g.sa - g.sc + j * g.se;
                if (ix < 0 || ix >= g.s3)
                    continue;
                acc += ld(gy, yo + ((n * g.s4 + o) * g.s7 + oy) * g.s8 + ox) *
                       ld(x, xo + ((n * g.s1 + c0 + c) * g.s2 + iy) * g.s3 + ix);
            }
        }
    st(gw, wo + e, acc);
}

/* Pooling's geometry p: planes (n * c), h, w, oh, ow, kernel h, w, stride h, w, padding h, w.
 * The index in plane x of window (oy, ox)'s first maximum (a NaN wins), as the CPU's. */
static long pool_argmax(__global const store_t *x, long xo, long oy, long ox, long16 p)
{
    long y0 = oy * p.s7 - p.s9, x0 = ox * p.s8 - p.sa, best = -1;
    float m = -INFINITY;
    for (long i = max(y0, 0L); i < y0 + p.s5 && i < p.s1; i++)
        for (long j = max(x0, 0L); j < x0 + p.s6 && j < p.s2; j++) {
            float v = ld(x, xo + i * p.s2 + j);
            if (best < 0 || v > m || (v != v && m == m)) {
                m = v;
                best = i * p.s2 + j;
            }
        }
    return best;
}

/* y [planes, oh, ow]: the window's maximum, or its sum / (kh kw) */
__kernel void k_pool2d(__global store_t *y, long yo, __global const store_t *x, long xo, int avg, long16 p)
{
    long e = get_global_id(0);
    if (e >= p.s0 * p.s3 * p.s4)
        return;
    long ox = e % p.s4, oy = e / p.s4 % p.s3, pl = e / (p.s4 * p.s3);
    long px = xo + pl * p.s1 * p.s2;
    if (!avg) {
        st(y, yo + e, ld(x, px + pool_argmax(x, px, oy, ox, p)));
        return;
    }
    long y0 = oy * p.s7 - p.s9, x0 = ox * p.s8 - p.sa;
    float acc = 0;
    for (long i = max(y0, 0L); i < y0 + p.s5 && i < p.s1; i++)
        for (long j = max(x0, 0L); j < x0 + p.s6 && j < p.s2; j++)
            acc += ld(x, px + i * p.s2 + j);
    st(y, yo + e, acc * (1.0f / (float)(p.s5 * p.s6)));
}

/* gx [planes, h, w]: the upstream gradients of the windows that took x[iy, ix] */
__kernel void k_pool2d_grad(__global store_t *gx, long xo, __global const store_t *gy, long yo,
                            __global const store_t *x, long xxo, int avg, long16 p)
{
    long e = get_global_id(0);
    if (e >= p.s0 * p.s1 * p.s2)
        return;
    long ix = e % p.s2, iy = e / p.s2 % p.s1, pl = e / (p.s2 * p.s1);
    long px = xxo + pl * p.s1 * p.s2, py = yo + pl * p.s3 * p.s4;
    float inv = 1.0f / (float)(p.s5 * p.s6), acc = 0;
    /* windows oy with oy*sh - ph <= iy < oy*sh - ph + kh */
    long oy0 = max((iy + p.s9 - p.s5 + p.s7) / p.s7, 0L), ox0 = max((ix + p.sa - p.s6 + p.s8) / p.s8, 0L);
    for (long oy = oy0; oy < p.s3 && oy * p.s7 - p.s9 <= iy; oy++)
        for (long ox = ox0; ox < p.s4 && ox * p.s8 - p.sa <= ix; ox++) {
            if (iy >= oy * p.s7 - p.s9 + p.s5 || ix >= ox * p.s8 - p.sa + p.s6)
                continue;
            if (avg)
                acc += ld(gy, py + oy * p.s4 + ox) * inv;
            else if (pool_argmax(x, px, oy, ox, p) == iy * p.s2 + ix)
                acc += ld(gy, py + oy * p.s4 + ox);
        }
    st(gx, xo + e, acc);
}

/* ---- attention from matrix products (ops_attention.c) -------------------------------------
 * The device's attention is the GPU's matrix products over chunks of (batch, kv head) pairs,
 * scores in f32 scratch a chunk at a time (ops_attention.c): S = Q K^T, k_attention_rows
 * (which keeps each row's log-sum-exp), O = P V; the stats read each row's log-sum-exp and
 * take delta = dO . o of the unrounded output the forward kept (k_attention_stats); the
 * gradients recompute S and dP = dO V^T, and k_attention_rows_grad turns both into dS and
 * z P for dQ = dS K, dK = dS^T Q, dV = (z P)^T dO.
 * A pair's G = H / KV query heads' rows are consecutive in q (R = G Tq of them), so row c of
 * a chunk that starts at pair pair0 is q's row pair0 R + c. The row kernels run one
 * work-group of ROW_GROUP per row, its work-items across the row's keys, their maxima and
 * sums combined by group_reduce (the norms' section).
 *
 * dims: s0 B, s1 H, s2 KV, s3 Tq, s4 Tk, s5 D, s6 Dv, s7 causal; bst: the bias's element
 * strides along [B, H, Tq, Tk] (0 where it broadcasts) and s4 = 1 when there is a bias.
 * stats [B, H, Tq, 2] (lse, delta) as float. Query head h reads kv head h / (H / KV); query
 * i sees keys j < att_visible(i). A score is s_ij * scale + bias in float (the CPU's f32
 * kernel). Attention dropout (thresh > 0): probability (row, j) is multiplied by k_dropout's
 * factor of the flat element row Tk + j of the [B, H, Tq, Tk] probabilities (att_keep, with
 * the key and threshold k_dropout gets): the softmax's sum is the undropped one, V and dO
 * take z p, dP = z (dO . v_j). */

typedef float att_acc;

typedef struct {
    long B, H, KV, Tq, Tk, D, Dv;
    long bst[4];
    int causal, has_bias;
    float scale;
    ulong key, thresh;            /* dropout's key and threshold (0: no dropout) */
    float keep;                   /* a kept probability's factor 1 / (1 - p) */
} att_dims;

static att_dims att_dims_of(long8 dims, long8 bst, float scale, ulong key, ulong thresh, float keep)
{
    long d[8], s[8];
    long8_get(dims, d);
    long8_get(bst, s);
    att_dims a;
    a.B = d[0];
    a.H = d[1];
    a.KV = d[2];
    a.Tq = d[3];
    a.Tk = d[4];
    a.D = d[5];
    a.Dv = d[6];
    a.causal = d[7] != 0;
    for (int i = 0; i < 4; i++)
        a.bst[i] = s[i];
    a.has_bias = s[4] != 0;
    a.scale = scale;
    a.key = key;
    a.thresh = thresh;
    a.keep = keep;
    return a;
}

/* the dropout factor of probability (row, j), row = (b H + h) Tq + i: keep or 0 as
 * k_dropout keeps element row Tk + j; 1 without dropout */
static float att_keep(const att_dims *a, long row, long j)
{
    if (a->thresh == 0)
        return 1;
    return rci_drop_kept(a->key, (ulong)(row * a->Tk + j), a->thresh) ? a->keep : 0;
}

/* the keys query row i sees: j <= i + Tk - Tq when causal */
static long att_visible(const att_dims *a, long i)
{
    if (!a->causal)
        return a->Tk;
    long n = i + (a->Tk - a->Tq) + 1;
    return n < 0 ? 0 : n > a->Tk ? a->Tk : n;
}

/* where query row `row` = (b H + h) Tq + i reads: its q row, the first k and v rows of its
 * kv head, its bias row (element offsets, the buffers' offsets included) */
typedef struct {
    long b, h, i, q, k, v, bias;
} att_row;

/* the same from query head h, its kv head kvh and row i of batch b (no division) */
static att_row att_row_at(const att_dims *a, long b, long h, long kvh, long i, long qo, long ko, long vo, long bo)
{
    att_row r;
    r.i = i;
    r.h = h;
    r.b = b;
    long kv = b * a->KV + kvh;
    r.q = qo + ((b * a->H + h) * a->Tq + i) * a->D;
    r.k = ko + kv * a->Tk * a->D;
    r.v = vo + kv * a->Tk * a->Dv;
    r.bias = bo + b * a->bst[0] + h * a->bst[1] + i * a->bst[2];
    return r;
}

static att_row att_row_of(const att_dims *a, long row, long qo, long ko, long vo, long bo)
{
    long h = row / a->Tq % a->H;
    return att_row_at(a, row / (a->Tq * a->H), h, h / (a->H / a->KV), row % a->Tq, qo, ko, vo, bo);
}

/* the score of key j for a row whose bias row starts at boff (att_row's bias) from its dot
 * product q_i . k_j */
static float att_score(const att_dims *a, __global const store_t *bias, long boff, att_acc dot, long j)
{
    float s = (float)dot * a->scale;
    if (a->has_bias)
        s += ld(bias, boff + j * a->bst[3]);
    return s;
}

/* exp of the tiles' probabilities (x <= 0 or -INFINITY): on CUDA the special function
 * unit's 2^x (ex2.approx, relative error about 2^-22 with x's scaling; __expf), which a
 * probability rounded to bf16 for its product (2^-9) never sees; elsewhere rci_fexp. One
 * function for the forward, the statistics and the gradients, so each p = exp(s - lse)
 * matches the sum its lse came from. */
static float at_exp(float x)
{
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return rci_fexp(x);
#endif
}

/* dS = p (z dP - delta) scale and z p of key j of a row (flat index row, bias row boff,
 * its log-sum-exp and delta) from its score's dot product *s and dP's *dp (p = exp(score -
 * lse); both 0 where the row does not see the key: `seen` 0), into *s and *dp; tiles: p
 * from at_exp (the tile kernels' lse), else rci_fexp. (The tiles' branch keeps dK and dV's
 * kernel in its registers: without it, p = exp(-INFINITY), ptxas took 255 and spilled.) */
static void att_grad_at(const att_dims *a, __global const store_t *bias, long boff, long row, long j, int seen,
                        float lse, float delta, int tiles, float *s, float *dp)
{
    float ds = 0, zp = 0;
    if (seen) {
        float x = att_score(a, bias, boff, *s, j) - lse;
        float p = tiles ? at_exp(x) : rci_fexp(x), z = att_keep(a, row, j);
        zp = p * z;
        ds = p * (*dp * z - delta) * a->scale;
    }
    *s = ds;
    *dp = zp;
}

/* Row c of a chunk starting at pair pair0: where it reads its bias (att_row_at's), and in
 * *row its index (b H + h) Tq + i among q's rows, pair0 R + c (R = G Tq rows a pair) */
static att_row att_chunk_row(const att_dims *a, long pair0, long c, long bo, long *row)
{
    long G = idx_div(a->H, a->KV), R = G * a->Tq, q = idx_div(c, R), pair = pair0 + q, rr = c - q * R;
    long b = idx_div(pair, a->KV), kvh = pair - b * a->KV, g = idx_div(rr, a->Tq);
    *row = pair0 * R + c;
    return att_row_at(a, b, kvh * G + g, kvh, rr - g * a->Tq, 0, 0, 0, bo);
}

/* The split products' float operands as ATT_SPLITS 16-bit parts (the host's count): v
 * rounded to the storage into p[i], what that left rounded into p[i + 1], what both left
 * into p[i + 2] (a key's parts side by side, so the first keys' parts are the first
 * columns: a block's product takes them alone). Three bf16 parts hold float's 24 bits
 * (bf16 keeps float's exponents, so no part underflows where v does not), so the products
 * are float's to their sums. */
enum { ATT_SPLITS = 3 };

static void st_split(__global store_t *p, long i, float v)
{
    for (int k = 0; k < ATT_SPLITS; k++) {
        st(p, i + k, v);
        v -= ld(p, i + k);
    }
}

/* The keys a row at query position i has scores for when its chunk's products go by blocks
 * of qblk query rows (ops_attention.c: causal, Tq = Tk): those of its block's last row; all
 * Tk without blocks (qblk 0) */
static long att_extent(const att_dims *a, long i, long qblk)
{
    if (!qblk)
        return a->Tk;
    long e = (idx_div(i, qblk) + 1) * qblk;
    return e < a->Tk ? e : a->Tk;
}

/* The chunk's scores s [rows, Tk] (float, from so; keys up to the row's att_extent) into
 * dropped probabilities z_j p_j, 0 past the row's visible keys and for a row that sees no
 * key: in place, or with split, as 16-bit parts into p2 [rows, Tk, ATT_SPLITS] (from p2o;
 * st_split); and the row's log-sum-exp into lse[row] (from lso; -INFINITY when it sees no
 * key), which the node keeps for its stats. One work-group per row; a work-item
 * holds ATT_ROW_PER of a block's keys in registers (keys li + t ls of the block), the row's
 * max and sum go block by block (a sum so far rescaled to a larger max, as an online
 * softmax does), and a row of one block, the usual one, is read once. */
enum { ATT_ROW_PER = 8 };   /* keys a work-item holds: a block is ROW_GROUP ATT_ROW_PER keys */

__kernel void k_attention_rows(__global float *s, long so, __global float *lse, long lso,
                               __global const store_t *bias, long bo, long8 dims, long8 bst, float scale,
                               ulong key, ulong thresh, float keep, long pair0, __global store_t *p2, long p2o,
                               int split, long qblk)
{
    __local acc_t red[ROW_GROUP + ROW_PARTS];
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    long c = (long)get_group_id(0), li = (long)get_local_id(0), ls = (long)get_local_size(0), row;
    att_row r = att_chunk_row(&a, pair0, c, bo, &row);
    long vis = att_visible(&a, r.i), blk = ls * ATT_ROW_PER, ext = att_extent(&a, r.i, qblk);
    __global float *x = s + so + c * a.Tk;
    float v[ATT_ROW_PER], m = -INFINITY, l = 0;
    for (long j0 = 0; j0 < ext; j0 += blk) {
        float bm = -INFINITY, bl = 0;
        for (int t = 0; t < ATT_ROW_PER; t++) {
            long j = j0 + li + t * ls;
            v[t] = j < vis ? att_score(&a, bias, r.bias, x[j], j) : -INFINITY;
            bm = v[t] > bm ? v[t] : bm;
        }
        bm = (float)group_reduce(red, bm, 0);
        bm = bm > m ? bm : m;
        if (bm != -INFINITY) /* loops of a fixed count: v stays in registers */
            for (int t = 0; t < ATT_ROW_PER; t++)
                bl += rci_fexp(v[t] - bm);
        bl = (float)group_reduce(red, bl, 1);
        l = (m == -INFINITY ? 0 : l * rci_fexp(m - bm)) + bl;
        m = bm;
    }
    for (long j0 = 0; j0 < ext; j0 += blk)
        for (int t = 0; t < ATT_ROW_PER; t++) {
            long j = j0 + li + t * ls;
            float sc = ext <= blk ? v[t] : j < vis ? att_score(&a, bias, r.bias, x[j], j) : -INFINITY;
            float p = l > 0 && sc != -INFINITY ? rci_fexp(sc - m) / l * att_keep(&a, row, j) : 0;
            if (j < ext && split)
                st_split(p2, p2o + (c * a.Tk + j) * ATT_SPLITS, p);
            else if (j < ext)
                x[j] = p;
        }
    if (li == 0)
        lse[lso + row] = l > 0 ? (float)((att_acc)m + log(l)) : -INFINITY;
}

/* ATTENTION_STATS: rows [0, n) of stats [n, 2], each row's log-sum-exp as the forward kept
 * it in lse and delta = dO . o, o the unrounded output the forward kept (an f32 node's
 * values, a 16-bit one's f32 copy in its kept block), summed as acc_t. One work-item a row. */
__kernel void k_attention_stats(__global float *stats, long sto, __global const float *o, long oo,
                                __global const float *lse, long lso, __global const store_t *dout, long doo,
                                long dv, long n)
{
    long row = (long)get_global_id(0);
    if (row >= n)
        return;
    acc_t delta = 0;
    for (long d = 0; d < dv; d++)
        delta += (acc_t)ld(dout, doo + row * dv + d) * o[oo + row * dv + d];
    stats[sto + row * 2] = lse[lso + row];
    stats[sto + row * 2 + 1] = (float)delta;
}

/* The chunk's scores s and dP = dO . v_j (float [rows, Tk], from so and dpo; keys up to the
 * row's att_extent) into dS = p (z dP - delta) scale (in s) and z p (in dp),
 * p = exp(score - lse) by the row's stats; 0 past the visible keys and for a row that sees
 * no key. With split, dS and z p go as 16-bit parts into s2 and z2 [rows, Tk, ATT_SPLITS]
 * instead (st_split). One work-group per row. */
__kernel void k_attention_rows_grad(__global float *s, long so, __global float *dp, long dpo,
                                    __global const float *stats, long sto, __global const store_t *bias, long bo,
                                    long8 dims, long8 bst, float scale, ulong key, ulong thresh, float keep,
                                    long pair0, __global store_t *s2, long s2o, __global store_t *z2, long z2o,
                                    int split, long qblk)
{
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    long c = (long)get_group_id(0), li = (long)get_local_id(0), ls = (long)get_local_size(0), row;
    att_row r = att_chunk_row(&a, pair0, c, bo, &row);
    float lse = stats[sto + row * 2], delta = stats[sto + row * 2 + 1];
    long vis = lse == -INFINITY ? 0 : att_visible(&a, r.i), ext = att_extent(&a, r.i, qblk);
    __global float *x = s + so + c * a.Tk, *y = dp + dpo + c * a.Tk;
    for (long j = li; j < ext; j += ls) {
        float ds = x[j], zp = y[j];
        att_grad_at(&a, bias, r.bias, row, j, j < vis, lse, delta, 0, &ds, &zp);
        if (split) {
            st_split(s2, s2o + (c * a.Tk + j) * ATT_SPLITS, ds);
            st_split(z2, z2o + (c * a.Tk + j) * ATT_SPLITS, zp);
        } else {
            x[j] = ds;
            y[j] = zp;
        }
    }
}

/* dK or dV [n, Tk, w] (o from oo) from the split product's f32 result x [n, Tk, ATT_SPLITS, w]
 * (from xo): each key's parts summed in order */
__kernel void k_attention_fold(__global store_t *o, long oo, __global const float *x, long xo, long w, long n)
{
    long i = get_global_id(0);
    if (i >= w * n)
        return;
    long kj = idx_div(i, w), e = i - kj * w; /* kj: the pair's and key's index */
    float v = 0;
    for (int k = 0; k < ATT_SPLITS; k++)
        v += x[xo + (kj * ATT_SPLITS + k) * w + e];
    st(o, oo + i, v);
}

/* x_xi . y_yi over n elements (dbias reads its rows directly) */
static att_acc att_dot(__global const store_t *x, long xi, __global const store_t *y, long yi, long n)
{
    att_acc s = 0;
    for (long d = 0; d < n; d++)
        s += (att_acc)ld(x, xi + d) * ld(y, yi + d);
    return s;
}

/* dbias, the bias's shape: each element the sum of p (dP - delta), dP = z (dO . v_j), over
 * the axes of [B, H, Tq, Tk] it broadcasts along (rows that see no key, keys not seen:
 * nothing) */
__kernel void k_attention_dbias(__global store_t *o, long oo, __global const store_t *q, long qo,
                                __global const store_t *k, long ko, __global const store_t *v, long vo,
                                __global const store_t *bias, long bo, __global const store_t *dout,
                                long doo, __global const float *stats, long so, long8 dims, long8 bst,
                                float scale, ulong key, ulong thresh, float keep)
{
    long e = get_global_id(0);
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    const long *s = a.bst;
    long eb = s[0] ? a.B : 1, eh = s[1] ? a.H : 1, ei = s[2] ? a.Tq : 1, ej = s[3] ? a.Tk : 1;
    if (e >= eb * eh * ei * ej)
        return;
    long uj = e % ej, ui = e / ej % ei, uh = e / (ej * ei) % eh, ub = e / (ej * ei * eh);
    att_acc acc = 0;
    for (long b = s[0] ? ub : 0; b < (s[0] ? ub + 1 : a.B); b++)
        for (long h = s[1] ? uh : 0; h < (s[1] ? uh + 1 : a.H); h++)
            for (long i = s[2] ? ui : 0; i < (s[2] ? ui + 1 : a.Tq); i++) {
                long row = (b * a.H + h) * a.Tq + i, vis = att_visible(&a, i);
                if (stats[so + row * 2] == -INFINITY)
                    continue;
                att_row r = att_row_of(&a, row, qo, ko, vo, bo);
                for (long j = s[3] ? uj : 0; j < (s[3] ? uj + 1 : a.Tk) && j < vis; j++) {
                    float lse = stats[so + row * 2];
                    float p = rci_fexp(att_score(&a, bias, r.bias, att_dot(q, r.q, k, r.k + j * a.D, a.D), j) - lse);
                    float dp = (float)att_dot(dout, doo + row * a.Dv, v, r.v + j * a.Dv, a.Dv) * att_keep(&a, row, j);
                    if (p != 0)
                        acc += p * (dp - stats[so + row * 2 + 1]);
                }
            }
    st(o, oo + ub * s[0] + uh * s[1] + ui * s[2] + uj * s[3], (float)acc);
}

/* ---- attention in tiles on tensor cores (ops_attention.c's ATT_TILED) ---------------------
 * FlashAttention-2's loops for bf16 values: a work-group of AT_GROUP work-items (four warps
 * of 32 lanes) takes AT_ROWS query rows of a (batch, kv head) pair (the pair's R = G Tq rows,
 * as the products' chunks) or AT_KEYS of its keys, and walks the other side tile by tile.
 * The scores of a tile live in registers alone: nothing [Tq, Tk] is written. Each warp's
 * products are 16 x 8 x 16 tiles of bf16 operands summed in f32 (mma.m16n8k16 on sm_80 and
 * later; at_mma): q, k, v and dO as stored (16-bit tiles in local memory), the float operands
 * P, dS and z p rounded to bf16 from the product's registers (at_frag_c), as FlashAttention
 * does: an operand's relative error 2^-9, where the products' path (ATT_SPLIT) keeps three
 * parts and float's accuracy at three times the products. The tiles' exp is at_exp.
 *
 * A lane's fragments (PTX's layouts for m16n8k16 with 16-bit operands; g = lane / 4,
 * t = lane % 4): of A [16, 16], rows g and g + 8, columns 2t, 2t + 1 and those plus 8, as
 * four words of two values (the lower column in the low half); of B [16, 8], rows (k) 2t,
 * 2t + 1 and those plus 8 of column g, as two words; of C [16, 8] (f32), rows g and g + 8,
 * columns 2t and 2t + 1, as c[0..1] and c[2..3]. A product's C tiles side by side are the
 * next product's A: tiles n and n + 1 (16 columns) are A's words {c_n[0..1], c_n[2..3],
 * c_n+1[0..1], c_n+1[2..3]}. Where the device has no mma (OpenCL: PoCL runs these kernels
 * in tests; CUDA before sm_80) at_mma is the same product through local memory, each lane's
 * words placed where the layout says and its C computed from them: the kernels' fragment
 * handling is then what PoCL checks. A row's statistics combine the 4 lanes holding its
 * columns (at_quad: CUDA's shuffles, else local memory).
 *
 * Local tiles: where one tile holds a head (D, Dv at most AT_COLS) a kernel keeps what does
 * not change along its walk (the forward Q, dQ's kernel Q and dO, dK and dV's K and V) and
 * copies the walk's next tiles while it computes (at_copy: the forward's next K and V, into
 * the other of two K and two V tiles; dQ's next K and V; dK and dV's next Q, into the other
 * of two Q tiles, and dO). Under CUDA that is 45, 36 and 47 KB of shared memory (ptxas, sm_90; 48 KB is the static limit); under OpenCL and
 * CUDA before sm_80 the emulation's 6.5 KB more, up to dK and dV's 54.5 KB, past OpenCL's
 * 32 KB minimum and NVIDIA's 48 KB, where a program holding them would not build at all. So
 * this section is compiled only with RC_TILES, which the hosts define where the kernels fit
 * (gpu.h's RCI_GPU_TILE_LOCAL_BYTES: CUDA sm_80 and later, OpenCL devices with 56 KB of
 * local memory, as PoCL's 1 MB); elsewhere the programs lack the three kernels and a launch
 * of one is an error. Registers (ptxas, sm_90): 164, 234 and 244, so three work-groups of
 * the forward fit an SM's 64 K registers (at most 168 each) and two of the others. (The
 * stats need no tiles: k_attention_stats reads what the forward kept.) */
#ifdef RC_TILES
enum {
    AT_GROUP = 128,       /* work-items of a work-group: four warps */
    AT_ROWS = 64,         /* query rows of a work-group (16 a warp) */
    AT_KEYS = 64,         /* keys of a tile (8 C tiles of 8 in a warp's row of tiles) */
    AT_COLS = 64,         /* columns of a tile loaded into local memory (four k steps of 16) */
    AT_LD = 72,           /* a local tile's row pitch in 16-bit values */
    AT_EMU = 384          /* local floats a warp's emulated product takes: A [16, 16], B [16, 8] */
};

/* a tile kernel's local floats for at_quad and, where at_mma is emulated, its products */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define AT_RED AT_GROUP
#else
#define AT_RED (AT_GROUP + 4 * AT_EMU)
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
/* Where at_mma is emulated and fragments come from 16-bit loads: the two bf16 values of a
 * word (the lower column in the low half), and the word of a tile's values i and j */
static float at_lo(uint w)
{
    return rci_bf16_to_f32((ushort)(w & 0xffff));
}

static float at_hi(uint w)
{
    return rci_bf16_to_f32((ushort)(w >> 16));
}

static uint at_pair(LOCAL_MEM const ushort *t, int i, int j)
{
    return (uint)t[i] | ((uint)t[j] << 16);
}
#endif

/* d [16, 8] += A [16, 16] B [16, 8], the lanes' fragments a[4], b[2] and d[4] (above); every
 * work-item of the group calls it (the emulation's barriers), emu: the group's 4 AT_EMU
 * floats of local memory */
static void at_mma(float *d, const uint *a, const uint *b, LOCAL_MEM float *emu)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    (void)emu;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    int li = (int)get_local_id(0), lane = li & 31, g = lane >> 2, t = lane & 3;
    LOCAL_MEM float *A = emu + (li >> 5) * AT_EMU, *B = A + 256;
    barrier(CLK_LOCAL_MEM_FENCE);
    UNROLL
    for (int h = 0; h < 2; h++) { /* A's rows g and g + 8 (words a[h], a[h + 2]) */
        A[(g + 8 * h) * 16 + 2 * t] = at_lo(a[h]);
        A[(g + 8 * h) * 16 + 2 * t + 1] = at_hi(a[h]);
        A[(g + 8 * h) * 16 + 2 * t + 8] = at_lo(a[h + 2]);
        A[(g + 8 * h) * 16 + 2 * t + 9] = at_hi(a[h + 2]);
        B[(2 * t + 8 * h) * 8 + g] = at_lo(b[h]);
        B[(2 * t + 8 * h + 1) * 8 + g] = at_hi(b[h]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = 0; e < 4; e++) {
        int r = g + 8 * (e >> 1), c = 2 * t + (e & 1);
        float s = 0;
        for (int k = 0; k < 16; k++)
            s += A[r * 16 + k] * B[k * 8 + c];
        d[e] += s;
    }
#endif
}

/* The sum (sum 1) or largest (sum 0) of x over the 4 lanes of a quad (lanes 4g .. 4g + 3: a
 * C row's columns), the same in each: (x0 + x1) + (x2 + x3). Every work-item calls it; red:
 * AT_GROUP floats of local memory (unused on CUDA) */
static float at_quad(LOCAL_MEM float *red, float x, int sum)
{
#ifdef __CUDA_ARCH__
    (void)red;
    float y = __shfl_xor_sync(0xffffffffu, x, 1);
    x = sum ? x + y : (y > x ? y : x);
    y = __shfl_xor_sync(0xffffffffu, x, 2);
    return sum ? x + y : (y > x ? y : x);
#else
    int li = (int)get_local_id(0), q = li & ~3;
    barrier(CLK_LOCAL_MEM_FENCE);
    red[li] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float a = red[q], b = red[q + 1], c = red[q + 2], e = red[q + 3];
    return sum ? (a + b) + (c + e) : fmax(fmax(a, b), fmax(c, e));
#endif
}

/* rows [r0, r0 + AT_ROWS) and columns [c0, c0 + AT_COLS) of x ([n, w] from xo) into the
 * local tile t [AT_ROWS, AT_LD] as bf16, zeros past n rows or w columns; every work-item
 * takes its share (the caller's barriers around it). bf16 values are copied as stored,
 * four a work-item in one 8-byte load where the four are whole and 8-byte aligned (the
 * kernels' tiles are declared 16-byte aligned, AT_LD keeps rows 8-byte aligned); other
 * storages (never tiled: ops_attention.c) round through float. */
static void at_load(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long r0, long n, long c0, long w)
{
    int li = (int)get_local_id(0);
#ifdef RC_STORE_BF16
    for (int u = 0; u < AT_ROWS * AT_COLS / 4 / AT_GROUP; u++) {
        int e = li + u * AT_GROUP, r = e / (AT_COLS / 4), c = e % (AT_COLS / 4) * 4;
        long i = xo + (r0 + r) * w + c0 + c;
        LOCAL_MEM ushort *d = t + r * AT_LD + c;
        if (r0 + r < n && c0 + c + 4 <= w && is_aligned(x + i, 8)) {
            *(LOCAL_MEM uint2 *)d = *(__global const uint2 *)(x + i);
            continue;
        }
        for (int k = 0; k < 4; k++)
            d[k] = r0 + r < n && c0 + c + k < w ? x[i + k] : 0;
    }
#else
    for (int u = 0; u < AT_ROWS * AT_COLS / AT_GROUP; u++) {
        int e = li + u * AT_GROUP, r = e / AT_COLS, c = e % AT_COLS;
        float v = r0 + r < n && c0 + c < w ? ld(x, xo + (r0 + r) * w + c0 + c) : 0;
        t[r * AT_LD + c] = rci_f32_to_bf16(v);
    }
#endif
}

/* Tiles copied while the work-group computes (the kernels' walks where one tile holds a
 * head, at_held): at_copy starts filling the local tile t as at_load would; a barrier after
 * at_copy_wait makes it visible. On CUDA sm_80 and later a whole 16-byte chunk (8 values,
 * aligned) goes by cp.async, copied while the warps go on (a row past n is zeros, cp.async's
 * zero fill), any other chunk by plain loads; at_copy_commit closes a group of copies, and
 * at_copy_wait(n) waits until at most the n newest groups are still in flight (n 0 to 2). Elsewhere
 * at_copy is at_load, done at once, and commit and wait do nothing. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* the shared-memory address of a local tile's element, as cp.async and ldmatrix take it */
static uint at_shared_addr(LOCAL_MEM const void *p)
{
    uint addr;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(p));
    return addr;
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && defined(RC_STORE_BF16)
static void at_copy(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long r0, long n, long c0, long w)
{
    int li = (int)get_local_id(0);
    for (int u = 0; u < AT_ROWS * AT_COLS / 8 / AT_GROUP; u++) {
        int e = li + u * AT_GROUP, r = e / (AT_COLS / 8), c = e % (AT_COLS / 8) * 8;
        long i = xo + (r0 + r) * w + c0 + c;
        LOCAL_MEM ushort *d = t + r * AT_LD + c;
        int row = r0 + r < n;
        if (!row || (c0 + c + 8 <= w && is_aligned(x + i, 16))) {
            __global const store_t *from = row ? x + i : x;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                         :: "r"(at_shared_addr(d)), "l"(from), "r"(row ? 16 : 0) : "memory");
            continue;
        }
        for (int k = 0; k < 8; k++)
            d[k] = c0 + c + k < w ? x[i + k] : 0;
    }
}

static void at_copy_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

static void at_copy_wait(int pending)
{
    if (pending >= 2)
        asm volatile("cp.async.wait_group 2;" ::: "memory");
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;" ::: "memory");
}
#else
static void at_copy(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long r0, long n, long c0, long w)
{
    at_load(t, x, xo, r0, n, c0, w);
}

static void at_copy_commit(void)
{
}

static void at_copy_wait(int pending)
{
    (void)pending;
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* Under CUDA sm_80 and later the fragments come by ldmatrix: each lane gives the address of
 * one 8-value row (16 bytes; AT_LD keeps rows 16-byte aligned) of four 8 x 8 matrices
 * (lanes 8m .. 8m + 7: matrix m's rows) and gets their words in PTX's fragment layout,
 * lane (g, t) row g's values 2t, 2t + 1 (.trans: column g's, rows 2t, 2t + 1), which is
 * the layout at_pair's words have; "memory": never moved across the barriers that fill
 * the tiles. */
static void at_ldmatrix(uint *r, LOCAL_MEM const ushort *t, int row, int col, int trans)
{
    uint addr = at_shared_addr(t + row * AT_LD + col);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
#endif

/* A [16, 16]: the local tile's rows r0 .. r0 + 15, columns k0 .. k0 + 15 */
static void at_frag_a(uint *a, LOCAL_MEM const ushort *t, int r0, int k0, int lane)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    /* matrices: rows r0 and r0 + 8 at column k0 (a[0], a[1]), then at k0 + 8 (a[2], a[3]) */
    at_ldmatrix(a, t, r0 + (lane & 7) + 8 * ((lane >> 3) & 1), k0 + 8 * (lane >> 4), 0);
#else
    int g = lane >> 2, c = k0 + 2 * (lane & 3);
    UNROLL
    for (int h = 0; h < 2; h++) {
        int i = (r0 + g + 8 * h) * AT_LD + c;
        a[h] = at_pair(t, i, i + 1);
        a[h + 2] = at_pair(t, i + 8, i + 9);
    }
#endif
}

/* B [16, 8] twice, b[0..1] and b[2..3]: columns n of the first are the local tile's rows n0 +
 * n, columns k0 .. k0 + 15, of the second rows n0 + 8 + n (B = the tile's rows transposed:
 * Q K^T takes K so) */
static void at_frag_bt2(uint *b, LOCAL_MEM const ushort *t, int n0, int k0, int lane)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    /* matrices: rows n0 at columns k0, k0 + 8 (b[0], b[1]), rows n0 + 8 at the same (b[2], b[3]) */
    at_ldmatrix(b, t, n0 + (lane & 7) + 8 * (lane >> 4), k0 + 8 * ((lane >> 3) & 1), 0);
#else
    UNROLL
    for (int h = 0; h < 2; h++) {
        int i = (n0 + 8 * h + (lane >> 2)) * AT_LD + k0 + 2 * (lane & 3);
        b[2 * h] = at_pair(t, i, i + 1);
        b[2 * h + 1] = at_pair(t, i + 8, i + 9);
    }
#endif
}

/* B [16, 8] twice, b[0..1] and b[2..3]: the local tile's rows k0 .. k0 + 15, columns n0 ..
 * n0 + 7, then n0 + 8 .. n0 + 15 (P V takes V so) */
static void at_frag_b2(uint *b, LOCAL_MEM const ushort *t, int k0, int n0, int lane)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    /* matrices, transposed: rows k0, k0 + 8 at column n0 (b[0], b[1]), then at n0 + 8 (b[2], b[3]) */
    at_ldmatrix(b, t, k0 + (lane & 7) + 8 * ((lane >> 3) & 1), n0 + 8 * (lane >> 4), 1);
#else
    UNROLL
    for (int h = 0; h < 2; h++) {
        int i = (k0 + 2 * (lane & 3)) * AT_LD + n0 + 8 * h + (lane >> 2);
        b[2 * h] = at_pair(t, i, i + AT_LD);
        b[2 * h + 1] = at_pair(t, i + 8 * AT_LD, i + 9 * AT_LD);
    }
#endif
}

/* the word of two floats rounded to bf16 (to nearest even; lo in the low half): on CUDA
 * sm_80 and later one cvt.rn.bf16x2.f32, which puts its first operand in the high half */
static uint at_pack(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
#else
    return (uint)rci_f32_to_bf16(lo) | ((uint)rci_f32_to_bf16(hi) << 16);
#endif
}

/* A [16, 16] from C tiles c0 and c1 side by side, their floats rounded to bf16 */
static void at_frag_c(uint *a, const float *c0, const float *c1)
{
    a[0] = at_pack(c0[0], c0[1]);
    a[1] = at_pack(c0[2], c0[3]);
    a[2] = at_pack(c1[0], c1[1]);
    a[3] = at_pack(c1[2], c1[3]);
}

/* c [8 tiles, 4] += the warp's 16 rows (from wr) of local tile x times the transpose of the
 * AT_KEYS rows of local tile y, over AT_COLS columns: S = Q K^T, dP = dO V^T (a warp's row
 * of C tiles; dK and dV's kernel passes K or V as x, so its C tiles are S^T, dP^T) */
static void at_times_rows(float *c, LOCAL_MEM const ushort *x, int wr, LOCAL_MEM const ushort *y, int lane,
                          LOCAL_MEM float *emu)
{
    UNROLL
    for (int kk = 0; kk < AT_COLS / 16; kk++) {
        uint a[4], b[4];
        at_frag_a(a, x, wr, 16 * kk, lane);
        UNROLL
        for (int n = 0; n < 8; n += 2) {
            at_frag_bt2(b, y, 8 * n, 16 * kk, lane);
            at_mma(c + 4 * n, a, b, emu);
            at_mma(c + 4 * n + 4, a, b + 2, emu);
        }
    }
}

/* o [8 tiles, 4] += P [16, AT_KEYS] (the warp's C tiles p, rounded to bf16) times the local
 * tile y [AT_KEYS, AT_COLS]: O += P V, dQ += dS K, dV += (z p)^T dO, dK += dS^T Q */
static void at_times_tile(float *o, const float *p, LOCAL_MEM const ushort *y, int lane, LOCAL_MEM float *emu)
{
    UNROLL
    for (int kk = 0; kk < AT_KEYS / 16; kk++) {
        uint a[4], b[4];
        at_frag_c(a, p + 8 * kk, p + 8 * kk + 4);
        UNROLL
        for (int n = 0; n < 8; n += 2) {
            at_frag_b2(b, y, 16 * kk, 8 * n, lane);
            at_mma(o + 4 * n, a, b, emu);
            at_mma(o + 4 * n + 4, a, b + 2, emu);
        }
    }
}

/* c [8 tiles, 4] = rows [r0 .. ) of x [nx, w] (the warp's 16 from r0 + wr) times the
 * transpose of rows [j0 .. ) of y [ny, w], over all w columns, AT_COLS at a time through the
 * local tiles xs, ys (a barrier before each load); x_held: xs holds x's one tile already
 * (w at most AT_COLS, loaded by the call before) */
static void at_scores(float *c, __global const store_t *x, long xo, long r0, long nx, __global const store_t *y,
                      long yo, long j0, long ny, long w, LOCAL_MEM ushort *xs, LOCAL_MEM ushort *ys, int wr,
                      int lane, LOCAL_MEM float *emu, int x_held)
{
    UNROLL
    for (int e = 0; e < 32; e++)
        c[e] = 0;
    for (long c0 = 0; c0 < w; c0 += AT_COLS) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!x_held)
            at_load(xs, x, xo, r0, nx, c0, w);
        at_load(ys, y, yo, j0, ny, c0, w);
        barrier(CLK_LOCAL_MEM_FENCE);
        at_times_rows(c, xs, wr, ys, lane, emu);
    }
}

/* the local tile t as the rows [r0 .. ) of x [n, w], columns [c0, c0 + AT_COLS), for a
 * product's B operand: loaded between barriers unless `held` (at_scores left it there) */
static void at_tile(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long r0, long n, long c0, long w,
                    int held)
{
    if (held)
        return;
    barrier(CLK_LOCAL_MEM_FENCE);
    at_load(t, x, xo, r0, n, c0, w);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* A held walk's copied tile, ready: its copy waited for (the `pending` newest groups may
 * still be in flight) and made visible to the work-group */
static void at_copy_ready(int pending)
{
    at_copy_wait(pending);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The copy of a walk's next tile into the local tile t, rows [j0 ..) of x [n, w] (nothing
 * where `more` is 0), a group either way; at_copy_next after a barrier (the work-group's
 * last read of t done), at_copy_group where the caller's barrier gave that */
static void at_copy_group(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long j0, long n, long w, int more)
{
    if (more)
        at_copy(t, x, xo, j0, n, 0, w);
    at_copy_commit();
}

static void at_copy_next(LOCAL_MEM ushort *t, __global const store_t *x, long xo, long j0, long n, long w, int more)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    at_copy_group(t, x, xo, j0, n, w, more);
}

/* The copies of a key tile's K and V, rows [j0 ..) of k [Tk, D] and v [Tk, Dv], into the
 * local tiles ks and vs (nothing where `more` is 0), one group either way: the forward's
 * walk, which reads both tiles in the same stretch (the caller's barriers) */
static void at_copy_kv(LOCAL_MEM ushort *ks, LOCAL_MEM ushort *vs, const att_dims *a, __global const store_t *k,
                       long kp, __global const store_t *v, long vp, long j0, int more)
{
    if (more) {
        at_copy(ks, k, kp, j0, a->Tk, 0, a->D);
        at_copy(vs, v, vp, j0, a->Tk, 0, a->Dv);
    }
    at_copy_commit();
}

/* the keys the query rows [r0, r0 + AT_ROWS) of a pair see, at most (all Tk unless causal) */
static long at_keys_seen(const att_dims *a, long r0, long R)
{
    if (!a->causal || r0 >= R)
        return r0 >= R ? 0 : a->Tk;
    /* att_visible grows with the row's i: the last row's, or row Tq - 1's where the tile
     * passes from one head's rows to the next */
    long last = (r0 + AT_ROWS < R ? r0 + AT_ROWS : R) - 1;
    long i0 = r0 - idx_div(r0, a->Tq) * a->Tq, i1 = last - idx_div(last, a->Tq) * a->Tq;
    return att_visible(a, i1 < i0 || last - r0 >= a->Tq ? a->Tq - 1 : i1);
}

/* One of a lane's two rows (h 0: g, 1: g + 8 of its warp's 16) of the query tile from r0 of
 * pair `pair`: its index rr among the pair's R rows, where it reads (att_row), its flat row
 * and the keys it sees (0 past R) */
typedef struct {
    long rr, row, vis;
    att_row r;
} at_qrow;

static at_qrow at_qrow_of(const att_dims *a, long pair, long rr, long R, long bo)
{
    at_qrow x;
    x.rr = rr;
    x.r = att_chunk_row(a, pair, rr < R ? rr : 0, bo, &x.row);
    x.vis = rr < R ? att_visible(a, x.r.i) : 0;
    return x;
}

/* A query tile's work-group: its pair, first row r0 of the pair's R, the keys its rows see
 * at most (kend) and the calling lane's two rows (x[0]: g, x[1]: g + 8 of its warp's 16).
 * A pair's tiles go last first: causal, the later rows see more keys, and a GPU starts the
 * work-groups about in order, so the longest start first and the short ones fill in at
 * the end (FlashAttention's order). */
typedef struct {
    long R, pair, r0, kend;
    at_qrow x[2];
} at_qtile;

static at_qtile at_qtile_of(const att_dims *a, long bo)
{
    int li = (int)get_local_id(0), wr = (li >> 5) * 16, g = (li & 31) >> 2;
    at_qtile q;
    q.R = idx_div(a->H, a->KV) * a->Tq;
    long tiles = (q.R + AT_ROWS - 1) / AT_ROWS, gid = (long)get_group_id(0);
    q.pair = idx_div(gid, tiles);
    q.r0 = (tiles - 1 - (gid - q.pair * tiles)) * AT_ROWS;
    q.kend = at_keys_seen(a, q.r0, q.R);
    UNROLL
    for (int h = 0; h < 2; h++)
        q.x[h] = at_qrow_of(a, q.pair, q.r0 + wr + g + 8 * h, q.R, bo);
    return q;
}

/* the keys of the tile from j0 that a row seeing the keys below vis sees: j0 + c for c
 * below this (0 to AT_KEYS); the tiles compare c, an int, where a long j took two */
static int at_seen(long vis, long j0)
{
    long n = vis - j0;
    return n < 0 ? 0 : n > AT_KEYS ? AT_KEYS : (int)n;
}

/* The online softmax's step for a key tile from j0: s's 32 scores (the lane's two rows, h
 * = (e >> 1) & 1) scaled and biased, -INFINITY past the keys a row sees, each row's running
 * max m[h] raised to the tile's, the factor alpha[h] that rescales what was summed against
 * the old max, s[e] = exp(s - m) (exp(-INFINITY) = 0 for a key not seen; a row that has
 * seen none yet subtracts 0) and sum[h] this tile's sum of them */
static void at_softmax_step(const att_dims *a, __global const store_t *bias, const at_qrow *x, long j0, int t,
                            LOCAL_MEM float *red, float *s, float *m, float *alpha, float *sum)
{
    float mx[2] = {-INFINITY, -INFINITY}, mz[2];
    int lim[2] = {at_seen(x[0].vis, j0), at_seen(x[1].vis, j0)};
    UNROLL
    for (int e = 0; e < 32; e++) {
        int c = 8 * (e >> 2) + 2 * t + (e & 1), h = (e >> 1) & 1;
        s[e] = c < lim[h] ? att_score(a, bias, x[h].r.bias, s[e], j0 + c) : -INFINITY;
        mx[h] = fmax(mx[h], s[e]);
    }
    UNROLL
    for (int h = 0; h < 2; h++) {
        float bm = fmax(at_quad(red, mx[h], 0), m[h]);
        alpha[h] = m[h] == -INFINITY ? 0 : at_exp(m[h] - bm);
        m[h] = bm;
        mz[h] = bm == -INFINITY ? 0 : bm;
        sum[h] = 0;
    }
    UNROLL
    for (int e = 0; e < 32; e++) {
        s[e] = at_exp(s[e] - mz[(e >> 1) & 1]);
        sum[(e >> 1) & 1] += s[e];
    }
}

/* the dropout's factors z of the lane's 32 probabilities s of the key tile from j0 (rows x,
 * as at_softmax_step's), where there is dropout */
static void at_keep_tile(const att_dims *a, const at_qrow *x, long j0, int t, float *s)
{
    if (a->thresh == 0)
        return;
    UNROLL
    for (int e = 0; e < 32; e++)
        s[e] *= att_keep(a, x[(e >> 1) & 1].row, j0 + 8 * (e >> 2) + 2 * t + (e & 1));
}

/* The forward of a tile of query rows (ATTENTION): S = Q K^T a key tile at a time, the
 * online softmax (at_softmax_step), O += (z p) V; then O / l into o, and what the node
 * keeps for its stats into its kept block: O / l in f32 from uo, each row's log-sum-exp
 * from lo (float offsets). Work-group: (pair, tile of AT_ROWS rows); the output's columns
 * AT_COLS at a time, the scores recomputed for each. */
__kernel void k_attention_tile(__global store_t *o, long oo, __global float *kept, long uo, long lo,
                               __global const store_t *q, long qo,
                               __global const store_t *k, long ko, __global const store_t *v, long vo,
                               __global const store_t *bias, long bo, long8 dims, long8 bst, float scale,
                               ulong key, ulong thresh, float keep)
{
    __local ushort xs[AT_ROWS * AT_LD] __attribute__((aligned(16)));
    __local ushort ys[2 * AT_KEYS * AT_LD] __attribute__((aligned(16)));
    __local ushort vs[2 * AT_KEYS * AT_LD] __attribute__((aligned(16)));
    __local float red[AT_RED];
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    int li = (int)get_local_id(0), lane = li & 31, wr = (li >> 5) * 16, t = lane & 3;
    at_qtile qt = at_qtile_of(&a, bo);
    const at_qrow *x = qt.x;
    long R = qt.R, pair = qt.pair, r0 = qt.r0, kend = qt.kend;
    long qp = qo + pair * R * a.D, kp = ko + pair * a.Tk * a.D, vp = vo + pair * a.Tk * a.Dv;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, s[32], acc[32]; /* m, l: no key seen (Dv 0) */
    /* held: one tile holds a head, so Q stays in xs, and K and V have two tiles each: a key
     * tile's step starts with one barrier (its K and V copied in, the last step's reads of
     * the other tiles done), then copies the next key tile's K and V into the other tiles
     * (at_copy) while its product, softmax and product run. Otherwise ys's first tile takes
     * K, then V, between barriers. */
    int held = a.D <= AT_COLS && a.Dv <= AT_COLS;
    for (long d0 = 0; d0 < a.Dv; d0 += AT_COLS) {
        UNROLL
        for (int e = 0; e < 32; e++)
            acc[e] = 0;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0;
        if (held && kend > 0) {
            at_load(xs, q, qp, r0, R, 0, a.D);
            at_copy_kv(ys, vs, &a, k, kp, v, vp, 0, 1);
        }
        for (long j0 = 0; j0 < kend; j0 += AT_KEYS) {
            int more = j0 + AT_KEYS < kend, cur = (int)(j0 / AT_KEYS & 1) * AT_KEYS * AT_LD;
            if (held) { /* this step's K and V in; the next step's copied into the other tiles */
                at_copy_ready(0);
                at_copy_kv(ys + AT_KEYS * AT_LD - cur, vs + AT_KEYS * AT_LD - cur, &a, k, kp, v, vp, j0 + AT_KEYS,
                           more);
                UNROLL
                for (int e = 0; e < 32; e++)
                    s[e] = 0;
                at_times_rows(s, xs, wr, ys + cur, lane, red + AT_GROUP);
            } else {
                at_scores(s, q, qp, r0, R, k, kp, j0, a.Tk, a.D, xs, ys, wr, lane, red + AT_GROUP,
                          (j0 > 0 || d0 > 0) && a.D <= AT_COLS); /* V goes to ys: xs keeps Q */
            }
            float alpha[2], sum[2];
            at_softmax_step(&a, bias, x, j0, t, red, s, m, alpha, sum);
            at_keep_tile(&a, x, j0, t, s);
            UNROLL
            for (int e = 0; e < 32; e++)
                acc[e] *= alpha[(e >> 1) & 1];
            UNROLL
            for (int h = 0; h < 2; h++)
                l[h] = l[h] * alpha[h] + at_quad(red, sum[h], 1);
            if (held) {
                at_times_tile(acc, s, vs + cur, lane, red + AT_GROUP);
            } else {
                barrier(CLK_LOCAL_MEM_FENCE);
                at_load(ys, v, vp, j0, a.Tk, d0, a.Dv);
                barrier(CLK_LOCAL_MEM_FENCE);
                at_times_tile(acc, s, ys, lane, red + AT_GROUP);
            }
        }
        at_copy_wait(0);
        UNROLL
        for (int e = 0; e < 32; e++) {
            const at_qrow *xr = &x[(e >> 1) & 1];
            long d = d0 + 8 * (e >> 2) + 2 * t + (e & 1), at = (pair * R + xr->rr) * a.Dv + d;
            float l1 = l[(e >> 1) & 1], y = l1 > 0 ? acc[e] / l1 : 0;
            if (xr->rr < R && d < a.Dv) {
                st(o, oo + at, y);
                kept[uo + at] = y;
            }
        }
    }
    UNROLL
    for (int h = 0; h < 2; h++)
        if (x[h].rr < R && t == 0)
            kept[lo + x[h].row] = l[h] > 0 ? m[h] + log(l[h]) : -INFINITY;
}

/* dQ of a tile of query rows: for each key tile S = Q K^T, dP = dO V^T, dS (att_grad_at),
 * dQ += dS K. Work-group: (pair, tile of AT_ROWS rows), dQ's columns AT_COLS at a time */
__kernel void k_attention_tile_dq(__global store_t *dq, long dqo, __global const float *stats, long sto,
                                  __global const store_t *q, long qo, __global const store_t *k, long ko,
                                  __global const store_t *v, long vo, __global const store_t *dout, long doo,
                                  __global const store_t *bias, long bo, long8 dims, long8 bst, float scale,
                                  ulong key, ulong thresh, float keep)
{
    __local ushort qs[AT_ROWS * AT_LD] __attribute__((aligned(16))), ds[AT_ROWS * AT_LD] __attribute__((aligned(16)));
    __local ushort ks[AT_KEYS * AT_LD] __attribute__((aligned(16))), vs[AT_KEYS * AT_LD] __attribute__((aligned(16)));
    __local float red[AT_RED];
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    int li = (int)get_local_id(0), lane = li & 31, wr = (li >> 5) * 16, t = lane & 3;
    at_qtile qt = at_qtile_of(&a, bo);
    at_qrow *x = qt.x;
    long R = qt.R, pair = qt.pair, r0 = qt.r0, kend = qt.kend;
    float lse[2], delta[2], s[32], dp[32], acc[32];
    UNROLL
    for (int h = 0; h < 2; h++) {
        lse[h] = x[h].rr < R ? stats[sto + x[h].row * 2] : -INFINITY;
        delta[h] = x[h].rr < R ? stats[sto + x[h].row * 2 + 1] : 0;
        x[h].vis = lse[h] == -INFINITY ? 0 : x[h].vis;
    }
    long qp = qo + pair * R * a.D, op = doo + pair * R * a.Dv, kp = ko + pair * a.Tk * a.D;
    long vp = vo + pair * a.Tk * a.Dv;
    /* held: one tile holds a head, so Q and dO stay in qs and ds, and the next key tile's V
     * is copied into vs while S, dS and dQ's product run, its K into ks while dP's does. Two
     * barriers a key tile: after dP (this K in, V read by every warp, V's copy next), after
     * dQ's product (the next V in, K read, K's copy next); a step starts with its V in. */
    int held = a.D <= AT_COLS && a.Dv <= AT_COLS;
    for (long d0 = 0; d0 < a.D; d0 += AT_COLS) {
        UNROLL
        for (int e = 0; e < 32; e++)
            acc[e] = 0;
        if (held && kend > 0) {
            at_load(qs, q, qp, r0, R, 0, a.D);
            at_load(ds, dout, op, r0, R, 0, a.Dv);
            at_copy_next(vs, v, vp, 0, a.Tk, a.Dv, 1);
            at_copy_next(ks, k, kp, 0, a.Tk, a.D, 1);
            at_copy_ready(1); /* the first V, Q and dO */
        }
        for (long j0 = 0; j0 < kend; j0 += AT_KEYS) {
            int more = j0 + AT_KEYS < kend;
            if (held) {
                UNROLL
                for (int e = 0; e < 32; e++)
                    s[e] = dp[e] = 0;
                at_times_rows(dp, ds, wr, vs, lane, red + AT_GROUP);
                at_copy_ready(0);
                at_copy_group(vs, v, vp, j0 + AT_KEYS, a.Tk, a.Dv, more);
                at_times_rows(s, qs, wr, ks, lane, red + AT_GROUP);
            } else {
                at_scores(s, q, qp, r0, R, k, kp, j0, a.Tk, a.D, qs, ks, wr, lane, red + AT_GROUP, 0);
                at_scores(dp, dout, op, r0, R, v, vp, j0, a.Tk, a.Dv, ds, vs, wr, lane, red + AT_GROUP, 0);
            }
            int lim[2] = {at_seen(x[0].vis, j0), at_seen(x[1].vis, j0)};
            UNROLL
            for (int e = 0; e < 32; e++) {
                int h = (e >> 1) & 1;
                int c = 8 * (e >> 2) + 2 * t + (e & 1);
                att_grad_at(&a, bias, x[h].r.bias, x[h].row, j0 + c, c < lim[h], lse[h], delta[h], 1, &s[e], &dp[e]);
            }
            at_tile(ks, k, kp, j0, a.Tk, d0, a.D, held); /* K's columns from d0 */
            at_times_tile(acc, s, ks, lane, red + AT_GROUP);
            if (held) {
                at_copy_ready(0);
                at_copy_group(ks, k, kp, j0 + AT_KEYS, a.Tk, a.D, more);
            }
        }
        at_copy_wait(0);
        UNROLL
        for (int e = 0; e < 32; e++) {
            long rr = x[(e >> 1) & 1].rr, d = d0 + 8 * (e >> 2) + 2 * t + (e & 1);
            if (rr < R && d < a.D)
                st(dq, dqo + (pair * R + rr) * a.D + d, acc[e]);
        }
    }
}

/* What dK and dV's kernel knows of a query tile's rows (AT_ROWS of them, each a C tile's
 * column there): each row's flat index, bias row, keys of the key tile seen (at_seen; 0 for
 * a row that sees none), log-sum-exp and delta; filled by the first AT_ROWS work-items */
typedef struct {
    long row[AT_ROWS], bias[AT_ROWS];
    int lim[AT_ROWS];
    float lse[AT_ROWS], delta[AT_ROWS];
    int seen;                   /* the last fill (its step) where a row saw the key tile */
} at_cols;

/* Work-item li's row (li < AT_ROWS) of at_cols for the query tile from r0, read before the
 * fill that stores it so that the statistics' loads are in flight meanwhile; a row past R,
 * or of a work-item past AT_ROWS, sees nothing */
typedef struct {
    long row, bias, vis;
    float lse, delta;
} at_col;

static at_col at_col_of(const att_dims *a, __global const float *stats, long sto, long pair, long r0, long R,
                        long bo)
{
    long li = (long)get_local_id(0), rr = li < AT_ROWS ? r0 + li : R;
    at_qrow x = at_qrow_of(a, pair, rr, R, bo);
    at_col c;
    c.row = x.row;
    c.bias = x.r.bias;
    c.vis = x.vis;
    c.lse = rr < R ? stats[sto + x.row * 2] : -INFINITY;
    c.delta = rr < R ? stats[sto + x.row * 2 + 1] : 0;
    return c;
}

/* the work-items' at_col rows into c at the walk's step-th fill (steps count up from 0,
 * c->seen -1 before the first), once every work-item is done with the last fill's (the
 * caller's barrier); after a barrier, c->seen == step when one of them sees key j0 */
static void at_cols_put(LOCAL_MEM at_cols *c, const at_col *x, long j0, int step)
{
    int li = (int)get_local_id(0);
    if (li < AT_ROWS) {
        int lim = x->lse == -INFINITY ? 0 : at_seen(x->vis, j0);
        c->row[li] = x->row;
        c->bias[li] = x->bias;
        c->lim[li] = lim;
        c->lse[li] = x->lse;
        c->delta[li] = x->delta;
        if (lim > 0)
            c->seen = step;
    }
}

/* at_cols_put between barriers; 1 when a row sees key j0 (every work-item) */
static int at_cols_fill(LOCAL_MEM at_cols *c, const at_col *x, long j0, int step)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    at_cols_put(c, x, j0, step);
    barrier(CLK_LOCAL_MEM_FENCE);
    return c->seen == step;
}

/* the first query tile from r0 whose rows may see key j0 (at_keys_seen), R where none */
static long at_next_rows(const att_dims *a, long r0, long R, long j0)
{
    while (r0 < R && at_keys_seen(a, r0, R) <= j0)
        r0 += AT_ROWS;
    return r0;
}

/* S^T and dP^T of the warp's keys against the query rows in cols (s, dp), turned into dS^T
 * (s) and (z p)^T (dp) by att_grad_at with each row's statistics by column */
static void at_dkv_probs(const att_dims *a, __global const store_t *bias, LOCAL_MEM const at_cols *cols, long j0,
                         int wr, int lane, float *s, float *dp)
{
    int g = lane >> 2, t = lane & 3;
    UNROLL
    for (int e = 0; e < 32; e++) {
        int c = 8 * (e >> 2) + 2 * t + (e & 1);
        int k = wr + g + 8 * ((e >> 1) & 1);
        att_grad_at(a, bias, cols->bias[c], cols->row[c], j0 + k, k < cols->lim[c], cols->lse[c], cols->delta[c], 1,
                    &s[e], &dp[e]);
    }
}

/* the warp's rows of dK (gk) and dV (gv), columns from d0, as want says */
static void at_dkv_store(__global store_t *dk, long dko, __global store_t *dv, long dvo, int want, const att_dims *a,
                         long pair, long j0, long d0, int wr, int lane, const float *gk, const float *gv)
{
    int g = lane >> 2, t = lane & 3;
    UNROLL
    for (int e = 0; e < 32; e++) {
        long j = j0 + wr + g + 8 * ((e >> 1) & 1), d = d0 + 8 * (e >> 2) + 2 * t + (e & 1);
        if (j < a->Tk && d < a->D && (want & 1))
            st(dk, dko + (pair * a->Tk + j) * a->D + d, gk[e]);
        if (j < a->Tk && d < a->Dv && (want & 2))
            st(dv, dvo + (pair * a->Tk + j) * a->Dv + d, gv[e]);
    }
}

/* dK and dV of a tile of keys (want: 1 dK, 2 dV, 3 both): for each query tile that sees one
 * of them S^T = K Q^T, dP^T = V dO^T, dS^T and (z p)^T (at_dkv_probs), dV += (z p)^T dO,
 * dK += dS^T Q; the G query heads sharing the pair's kv head are its R rows, so dK and dV
 * sum over them. Work-group: (pair, tile of AT_KEYS keys, 16 a warp).
 *
 * Where one tile holds a head (D, Dv at most AT_COLS) K and V stay in ks and vs, and the
 * walk over the query tiles at_next_rows finds copies while it computes (at_copy): the next
 * tile's Q at a step's start into the other of qs's two tiles, its dO into ds once dV's
 * product has read this one's, its rows' statistics into registers (at_col). A step has
 * three barriers: at its start (its rows' statistics put in cols, its Q in, the last step's
 * reads of cols and of the other Q tile done: each work-item put its row after the last
 * step's third barrier, which follows its last read of cols), before dP (its dO in) and
 * before dO's next copy. The copies' groups go Q, dO, next Q, next dO, so each wait leaves
 * one group in flight. Elsewhere the gradients' columns go AT_COLS at a time, each query
 * tile's products through at_scores. */
__kernel void k_attention_tile_dkv(__global store_t *dk, long dko, __global store_t *dv, long dvo, int want,
                                   __global const float *stats, long sto, __global const store_t *q, long qo,
                                   __global const store_t *k, long ko, __global const store_t *v, long vo,
                                   __global const store_t *dout, long doo, __global const store_t *bias, long bo,
                                   long8 dims, long8 bst, float scale, ulong key, ulong thresh, float keep)
{
    __local ushort ks[AT_KEYS * AT_LD] __attribute__((aligned(16))), vs[AT_KEYS * AT_LD] __attribute__((aligned(16)));
    __local ushort qs[2 * AT_ROWS * AT_LD] __attribute__((aligned(16))), ds[AT_ROWS * AT_LD] __attribute__((aligned(16)));
    __local float red[AT_RED];
    __local at_cols cols;
    att_dims a = att_dims_of(dims, bst, scale, key, thresh, keep);
    int li = (int)get_local_id(0), lane = li & 31, wr = (li >> 5) * 16;
    long G = idx_div(a.H, a.KV), R = G * a.Tq, tiles = (a.Tk + AT_KEYS - 1) / AT_KEYS, gid = (long)get_group_id(0);
    long pair = idx_div(gid, tiles), j0 = (gid - pair * tiles) * AT_KEYS;
    long qp = qo + pair * R * a.D, op = doo + pair * R * a.Dv, kp = ko + pair * a.Tk * a.D;
    long vp = vo + pair * a.Tk * a.Dv, w = a.D > a.Dv ? a.D : a.Dv;
    LOCAL_MEM float *emu = red + AT_GROUP;
    float s[32], dp[32], gk[32], gv[32];
    int step = 0;
    if (li == 0)
        cols.seen = -1; /* seen by all after at_cols_fill's first barrier */
    if (w <= AT_COLS) {
        UNROLL
        for (int e = 0; e < 32; e++)
            gk[e] = gv[e] = 0;
        long r0 = at_next_rows(&a, 0, R, j0);
        at_load(ks, k, kp, j0, a.Tk, 0, a.D);
        at_load(vs, v, vp, j0, a.Tk, 0, a.Dv);
        at_col x = at_col_of(&a, stats, sto, pair, r0, R, bo);
        at_copy_next(qs, q, qp, r0, R, a.D, r0 < R);
        at_copy_next(ds, dout, op, r0, R, a.Dv, r0 < R);
        for (int b = 0; r0 < R; b ^= 1) {
            long rn = at_next_rows(&a, r0 + AT_ROWS, R, j0);
            LOCAL_MEM ushort *qt = qs + b * AT_ROWS * AT_LD;
            at_cols_put(&cols, &x, j0, step);
            at_copy_ready(1); /* this tile's Q (its dO may still come), cols */
            int any = cols.seen == step++;
            x = at_col_of(&a, stats, sto, pair, rn, R, bo);
            at_copy_group(qs + (b ^ 1) * AT_ROWS * AT_LD, q, qp, rn, R, a.D, rn < R);
            UNROLL
            for (int e = 0; e < 32; e++)
                s[e] = dp[e] = 0;
            if (any)
                at_times_rows(s, ks, wr, qt, lane, emu);
            at_copy_ready(1); /* its dO */
            if (any) {
                at_times_rows(dp, vs, wr, ds, lane, emu);
                at_dkv_probs(&a, bias, &cols, j0, wr, lane, s, dp);
                if (want & 2)
                    at_times_tile(gv, dp, ds, lane, emu);
            }
            at_copy_next(ds, dout, op, rn, R, a.Dv, rn < R);
            if (any && (want & 1))
                at_times_tile(gk, s, qt, lane, emu);
            r0 = rn;
        }
        at_copy_wait(0);
        at_dkv_store(dk, dko, dv, dvo, want, &a, pair, j0, 0, wr, lane, gk, gv);
    } else {
        for (long d0 = 0; d0 < w; d0 += AT_COLS) {
            UNROLL
            for (int e = 0; e < 32; e++)
                gk[e] = gv[e] = 0;
            for (long r0 = 0; r0 < R; r0 += AT_ROWS) {
                at_col x = at_col_of(&a, stats, sto, pair, r0, R, bo);
                if (!at_cols_fill(&cols, &x, j0, step++))
                    continue;
                at_scores(s, k, kp, j0, a.Tk, q, qp, r0, R, a.D, ks, qs, wr, lane, emu, 0);
                at_scores(dp, v, vp, j0, a.Tk, dout, op, r0, R, a.Dv, vs, ds, wr, lane, emu, 0);
                at_dkv_probs(&a, bias, &cols, j0, wr, lane, s, dp);
                if (want & 2) { /* dO's columns from d0 (ds holds them when one tile holds dO) */
                    at_tile(ds, dout, op, r0, R, d0, a.Dv, a.Dv <= AT_COLS);
                    at_times_tile(gv, dp, ds, lane, emu);
                }
                if (want & 1) {
                    at_tile(qs, q, qp, r0, R, d0, a.D, a.D <= AT_COLS);
                    at_times_tile(gk, s, qs, lane, emu);
                }
            }
            at_dkv_store(dk, dko, dv, dvo, want, &a, pair, j0, d0, wr, lane, gk, gv);
        }
    }
}
#endif /* RC_TILES */
