/* kernels_conv.h - the CPU kernels of 2-D convolution and pooling (NCHW), written over
 * `real`. Not a header of declarations: kernels_real.c includes it, so that it is compiled
 * with kernels_real.c for float and for double and uses that file's helpers (par_range,
 * op_name). Everything here is static. The geometry was checked with the node
 * (rci_node_check).
 *
 * Convolution is im2col + GEMM, one image and group at a time: the columns of one image
 * and group, col [C/groups * KH * KW, OH * OW], are built by threads, and the GEMM runs on
 * OpenBLAS's threads:
 *   forward       y[n, g] [O/g, OH*OW]  = W_g [O/g, K] @ col
 *   input grad    col = W_g^T @ gy[n, g], scattered back into gx[n, g] (col2im)
 *   weight grad   gW_g [O/g, K] += gy[n, g] @ col^T
 * A 1x1 kernel with stride 1 and no padding uses the image itself as its columns. */

#include <stdlib.h>

typedef struct {
    int64_t n, c, h, w;       /* input */
    int64_t o, kh, kw;        /* weight [o, c / groups, kh, kw] */
    int64_t oh, ow;           /* output */
    int sh, sw, ph, pw, dh, dw, groups;
} conv_geom;

static conv_geom conv_geom_of(const rc_tensor *node, const int64_t *x, const int64_t *wt,
                              const int64_t *y)
{
    const int32_t *ip = node->iparam;
    conv_geom q = {x[0], x[1], x[2], x[3], wt[0], wt[2], wt[3], y[2], y[3],
                   ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6]};
    return q;
}

/* rows of col per group: C/groups * KH * KW */
static int64_t conv_k(const conv_geom *q)
{
    return q->c / q->groups * q->kh * q->kw;
}

static int conv_is_pointwise(const conv_geom *q)
{
    return q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->ph == 0 && q->pw == 0;
}

/* the output columns [lo, hi) whose input column x0 + ox * sw lies in [0, W) */
static void valid_cols(const conv_geom *q, int64_t x0, int64_t *lo, int64_t *hi)
{
    int64_t l = x0 < 0 ? (-x0 + q->sw - 1) / q->sw : 0;
    int64_t h = x0 >= q->w ? 0 : (q->w - 1 - x0) / q->sw + 1;
    l = l < q->ow ? l : q->ow;
    h = h < q->ow ? h : q->ow;
    *lo = l;
    *hi = h > l ? h : l;
}

typedef struct {
    const conv_geom *q;
    const real *x;            /* one image's group of channels [C/groups, H, W] */
    real *col;                /* [K, (oy1 - oy0) * OW] */
    int64_t oy0, oy1;         /* the tile of output rows */
} im2col_args;

/* rows [r0, r1) of col: row r = (c * KH + i) * KW + j holds x[c, oy*sh - ph + i*dh, ox*sw - pw + j*dw]
 * for the tile's output rows oy */
static void im2col_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    (void)part;
    const im2col_args *a = ctx;
    const conv_geom *q = a->q;
    for (int64_t r = r0; r < r1; r++) {
        int64_t j = r % q->kw, i = r / q->kw % q->kh, c = r / (q->kw * q->kh);
        const real *xc = a->x + c * q->h * q->w;
        real *restrict row = a->col + r * (a->oy1 - a->oy0) * q->ow;
        for (int64_t oy = a->oy0; oy < a->oy1; oy++) {
            int64_t iy = oy * q->sh - q->ph + i * q->dh;
            real *restrict out = row + (oy - a->oy0) * q->ow;
            if (iy < 0 || iy >= q->h) {
                for (int64_t ox = 0; ox < q->ow; ox++)
                    out[ox] = 0;
                continue;
            }
            const real *xr = xc + iy * q->w;
            int64_t x0 = j * q->dw - q->pw, lo, hi;
            valid_cols(q, x0, &lo, &hi);
            for (int64_t ox = 0; ox < lo; ox++)
                out[ox] = 0;
            if (q->sw == 1)
                memcpy(out + lo, xr + x0 + lo, (size_t)(hi - lo) * sizeof(real));
            else
                for (int64_t ox = lo; ox < hi; ox++)
                    out[ox] = xr[x0 + ox * q->sw];
            for (int64_t ox = hi; ox < q->ow; ox++)
                out[ox] = 0;
        }
    }
}

static void im2col(const conv_geom *q, const real *x, real *col, int64_t oy0, int64_t oy1)
{
    im2col_args a = {q, x, col, oy0, oy1};
    int64_t k = conv_k(q);
    par_range(im2col_range, &a, k, k * (oy1 - oy0) * q->ow);
}

typedef struct {
    const conv_geom *q;
    const real *col;          /* [K, (oy1 - oy0) * OW] */
    real *x;                  /* one image's group of channels [C/groups, H, W] */
    int64_t oy0, oy1;
} col2im_args;

/* channels [c0, c1): x[c] += the tile's col entries that im2col reads from it */
static void col2im_range(void *ctx, int64_t c0, int64_t c1, int part)
{
    (void)part;
    const col2im_args *a = ctx;
    const conv_geom *q = a->q;
    for (int64_t c = c0; c < c1; c++) {
        real *restrict xc = a->x + c * q->h * q->w;
        for (int64_t i = 0; i < q->kh; i++)
            for (int64_t j = 0; j < q->kw; j++) {
                const real *row = a->col + ((c * q->kh + i) * q->kw + j) * (a->oy1 - a->oy0) * q->ow;
                int64_t x0 = j * q->dw - q->pw, lo, hi;
                valid_cols(q, x0, &lo, &hi);
                for (int64_t oy = a->oy0; oy < a->oy1; oy++) {
                    int64_t iy = oy * q->sh - q->ph + i * q->dh;
                    if (iy < 0 || iy >= q->h)
                        continue;
                    real *restrict xr = xc + iy * q->w + x0;
                    const real *restrict in = row + (oy - a->oy0) * q->ow;
                    if (q->sw == 1)
                        for (int64_t ox = lo; ox < hi; ox++)
                            xr[ox] += in[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            xr[ox * q->sw] += in[ox];
                }
            }
    }
}

static void col2im(const conv_geom *q, const real *col, real *x, int64_t oy0, int64_t oy1)
{
    col2im_args a = {q, col, x, oy0, oy1};
    int64_t cg = q->c / q->groups;
    par_range(col2im_range, &a, cg, cg * q->kh * q->kw * (oy1 - oy0) * q->ow);
}

/* Output rows per tile: the tile's columns take about CONV_TILE_BYTES, so that the GEMM
 * reads them from cache right after im2col wrote them; all rows when pointwise. */
enum { CONV_TILE_BYTES = 1 << 20 };
static int64_t conv_tile_rows(const conv_geom *q)
{
    if (conv_is_pointwise(q))
        return q->oh;
    int64_t rows = CONV_TILE_BYTES / (conv_k(q) * q->ow * (int64_t)sizeof(real));
    return rows < 1 ? 1 : rows > q->oh ? q->oh : rows;
}

/* the columns' scratch for one tile, NULL for a pointwise convolution (which needs none) */
static int conv_scratch(const rc_tensor *node, const conv_geom *q, real **col, rc_error *err)
{
    *col = NULL;
    if (conv_is_pointwise(q))
        return 0;
    size_t bytes = (size_t)conv_k(q) * (size_t)(conv_tile_rows(q) * q->ow) * sizeof(real);
    *col = malloc(bytes);
    if (!*col)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: cannot allocate %zu bytes of columns",
                            op_name(node), bytes);
    return 0;
}

static int k_conv2d(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *b = node->nsrc > 2 ? node->src[2] : NULL;
    conv_geom q = conv_geom_of(node, node->src[0]->shape, node->src[1]->shape, node->shape);
    const real *x = io->in[0], *w = io->in[1], *bias = b ? io->in[2] : NULL;
    real *y = io->out, *col;
    if (conv_scratch(node, &q, &col, err))
        return -1;
    int64_t cg = q.c / q.groups, og = q.o / q.groups, k = conv_k(&q), hw = q.oh * q.ow;
    int64_t rows = conv_tile_rows(&q);
    for (int64_t n = 0; n < q.n; n++)
        for (int64_t g = 0; g < q.groups; g++)
            for (int64_t oy0 = 0; oy0 < q.oh; oy0 += rows) {
                int64_t oy1 = oy0 + rows < q.oh ? oy0 + rows : q.oh, nb = (oy1 - oy0) * q.ow;
                const real *xg = x + (n * q.c + g * cg) * q.h * q.w;
                real *yg = y + (n * q.o + g * og) * hw + oy0 * q.ow;
                if (col)
                    im2col(&q, xg, col, oy0, oy1);
                blas_gemm(0, 0, og, nb, k, 1, w + g * og * k, k, col ? col : xg, nb, 0, yg, hw);
            }
    free(col);
    if (bias)
        for (int64_t n = 0; n < q.n; n++)
            for (int64_t o = 0; o < q.o; o++) {
                real *restrict yo = y + (n * q.o + o) * hw, v = bias[o];
                for (int64_t e = 0; e < hw; e++)
                    yo[e] += v;
            }
    return 0;
}

/* src0 gy [N, O, OH, OW], src1 weight; out [N, C, H, W] */
static int k_conv2d_grad_input(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    conv_geom q = conv_geom_of(node, node->shape, node->src[1]->shape, node->src[0]->shape);
    const real *gy = io->in[0], *w = io->in[1];
    real *gx = io->out, *col;
    if (conv_scratch(node, &q, &col, err))
        return -1;
    int64_t cg = q.c / q.groups, og = q.o / q.groups, k = conv_k(&q), hw = q.oh * q.ow;
    int64_t rows = conv_tile_rows(&q);
    if (col)
        memset(gx, 0, rc_tensor_nbytes(node));
    for (int64_t n = 0; n < q.n; n++)
        for (int64_t g = 0; g < q.groups; g++)
            for (int64_t oy0 = 0; oy0 < q.oh; oy0 += rows) {
                int64_t oy1 = oy0 + rows < q.oh ? oy0 + rows : q.oh, nb = (oy1 - oy0) * q.ow;
                const real *gyg = gy + (n * q.o + g * og) * hw + oy0 * q.ow;
                real *gxg = gx + (n * q.c + g * cg) * q.h * q.w;
                blas_gemm(1, 0, k, nb, og, 1, w + g * og * k, k, gyg, hw, 0, col ? col : gxg, nb);
                if (col)
                    col2im(&q, col, gxg, oy0, oy1);
            }
    free(col);
    return 0;
}

/* src0 gy [N, O, OH, OW], src1 x [N, C, H, W]; out [O, C/groups, KH, KW] */
static int k_conv2d_grad_weight(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    conv_geom q = conv_geom_of(node, node->src[1]->shape, node->shape, node->src[0]->shape);
    const real *gy = io->in[0], *x = io->in[1];
    real *gw = io->out, *col;
    if (conv_scratch(node, &q, &col, err))
        return -1;
    int64_t cg = q.c / q.groups, og = q.o / q.groups, k = conv_k(&q), hw = q.oh * q.ow;
    int64_t rows = conv_tile_rows(&q);
    for (int64_t n = 0; n < q.n; n++)
        for (int64_t g = 0; g < q.groups; g++)
            for (int64_t oy0 = 0; oy0 < q.oh; oy0 += rows) {
                int64_t oy1 = oy0 + rows < q.oh ? oy0 + rows : q.oh, nb = (oy1 - oy0) * q.ow;
                const real *xg = x + (n * q.c + g * cg) * q.h * q.w;
                if (col)
                    im2col(&q, xg, col, oy0, oy1);
                blas_gemm(0, 1, og, k, nb, 1, gy + (n * q.o + g * og) * hw + oy0 * q.ow, hw,
                          col ? col : xg, nb, n || oy0 ? 1 : 0, gw + g * og * k, k);
            }
    free(col);
    return 0;
}

/* ---- pooling ------------------------------------------------------------------------------ */

typedef struct {
    const rc_tensor *node;
    int kind, kh, kw, sh, sw, ph, pw;
    int64_t h, w, oh, ow;
    const real *x, *gy;
    real *out;
} pool_args;

static pool_args pool_args_of(const rci_cpu_args *io, const int64_t *x, const int64_t *y)
{
    const int32_t *ip = io->node->iparam;
    pool_args a = {io->node, ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6],
                   x[2], x[3], y[2], y[3], NULL, NULL, io->out};
    return a;
}

/* planes [p0, p1) of the pooled output */
static void pool_range(void *ctx, int64_t p0, int64_t p1, int part)
{
    (void)part;
    const pool_args *a = ctx;
    real inv = (real)1 / (real)(a->kh * a->kw);
    for (int64_t p = p0; p < p1; p++) {
        const real *x = a->x + p * a->h * a->w;
        real *y = a->out + p * a->oh * a->ow;
        for (int64_t oy = 0; oy < a->oh; oy++)
            for (int64_t ox = 0; ox < a->ow; ox++) {
                int64_t y0 = oy * a->sh - a->ph, x0 = ox * a->sw - a->pw;
                real acc = a->kind == RC_POOL_MAX ? -INFINITY : 0;
                for (int64_t i = y0 < 0 ? 0 : y0; i < y0 + a->kh && i < a->h; i++)
                    for (int64_t j = x0 < 0 ? 0 : x0; j < x0 + a->kw && j < a->w; j++) {
                        real v = x[i * a->w + j];
                        if (a->kind == RC_POOL_AVG)
                            acc += v;
                        else if (v > acc || v != v)
                            acc = v;
                    }
                y[oy * a->ow + ox] = a->kind == RC_POOL_AVG ? acc * inv : acc;
            }
    }
}

/* planes [p0, p1) of the input's gradient */
static void pool_grad_range(void *ctx, int64_t p0, int64_t p1, int part)
{
    (void)part;
    const pool_args *a = ctx;
    real inv = (real)1 / (real)(a->kh * a->kw);
    for (int64_t p = p0; p < p1; p++) {
        const real *x = a->x + p * a->h * a->w, *gy = a->gy + p * a->oh * a->ow;
        real *gx = a->out + p * a->h * a->w;
        for (int64_t e = 0; e < a->h * a->w; e++)
            gx[e] = 0;
        for (int64_t oy = 0; oy < a->oh; oy++)
            for (int64_t ox = 0; ox < a->ow; ox++) {
                int64_t y0 = oy * a->sh - a->ph, x0 = ox * a->sw - a->pw, best = -1;
                real g = gy[oy * a->ow + ox], m = -INFINITY;
                for (int64_t i = y0 < 0 ? 0 : y0; i < y0 + a->kh && i < a->h; i++)
                    for (int64_t j = x0 < 0 ? 0 : x0; j < x0 + a->kw && j < a->w; j++) {
                        int64_t e = i * a->w + j;
                        if (a->kind == RC_POOL_AVG)
                            gx[e] += g * inv;
                        else if (best < 0 || x[e] > m || (x[e] != x[e] && m == m))
                            m = x[e], best = e;
                    }
                if (best >= 0)
                    gx[best] += g;
            }
    }
}

static int k_pool2d(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    pool_args a = pool_args_of(io, node->src[0]->shape, node->shape);
    a.x = io->in[0];
    int64_t planes = node->shape[0] * node->shape[1];
    par_range(pool_range, &a, planes, rc_tensor_numel(node) * a.kh * a.kw);
    return 0;
}

/* src0 gy [N, C, OH, OW], src1 x [N, C, H, W]; out x's shape */
static int k_pool2d_grad(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    pool_args a = pool_args_of(io, node->shape, node->src[0]->shape);
    a.gy = io->in[0];
    a.x = io->in[1];
    int64_t planes = node->shape[0] * node->shape[1];
    par_range(pool_grad_range, &a, planes, rc_tensor_numel(node->src[0]) * a.kh * a.kw);
    return 0;
}
