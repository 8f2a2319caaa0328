/* test_reference.c - the CPU's f64 kernels, which test_ops takes as the reference of every
 * backend, against naive loops from the ops' definitions; and what a kernel refuses.
 *
 * Nodes are built by hand (no graph): a zeroed rc_tensor with op, dtype, shape, src and
 * params set, its values in host memory kept beside it here. A run checks the node as a
 * plan does (rci_node_check: a node that does not fit its op is refused there, never given
 * to a kernel), copies the inputs into CPU backend buffers, runs the node through the
 * backend's run_node, and copies the output back (poisoned before the run: kernels must
 * write every element). References are computed in double from the same input values.
 * Every test runs in f64 (the data movement in i32 too; casts between f32, f64 and i32),
 * and the whole suite runs once on one thread and once on three, so both the serial and
 * the threaded paths are covered. The other dtypes and the devices are test_ops' table. */
#include "check.h"
#include "redco/device.h"
#include "internal.h"
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- hand-built tensors ------------------------------------------------------------------ */

/* Hand-built node live[i] (its id is i) and its host values live_data[i]. */
enum { MAX_LIVE = 1024 };
static rc_tensor *live[MAX_LIVE];
static void *live_data[MAX_LIVE];
static int nlive;
static rc_error err;

static void free_all(void)
{
    for (int i = 0; i < nlive; i++) {
        free(live_data[i]);
        free(live[i]);
    }
    nlive = 0;
}

/* The host values of hand-built tensor t. */
static void *data_of(const rc_tensor *t)
{
    return live_data[t->id];
}

static rc_tensor *mk(rc_dtype t, int ndim, const int64_t *shape)
{
    if (nlive == MAX_LIVE) {
        fprintf(stderr, "test_reference: more than %d live tensors\n", MAX_LIVE);
        exit(1);
    }
    rc_tensor *x = calloc(1, sizeof *x);
    x->id = nlive;
    x->dtype = t;
    x->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        x->shape[i] = shape[i];
    size_t nb = rc_tensor_nbytes(x);
    live[nlive] = x;
    live_data[nlive++] = malloc(nb ? nb : 1);
    return x;
}

/* An output node of op with inputs a, b, c (NULL ends the list unless nsrc says more). */
static rc_tensor *node(rc_op op, rc_dtype t, int ndim, const int64_t *shape, int nsrc,
                       rc_tensor *a, rc_tensor *b, rc_tensor *c)
{
    rc_tensor *y = mk(t, ndim, shape);
    y->op = op;
    y->nsrc = nsrc;
    y->src[0] = a;
    y->src[1] = b;
    y->src[2] = c;
    /* poison the output: kernels must write every element */
    memset(data_of(y), 0x7f, rc_tensor_nbytes(y));
    return y;
}

static double get(const rc_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case RC_F32: return ((const float *)data_of(t))[i];
    case RC_F64: return ((const double *)data_of(t))[i];
    default: return ((const int32_t *)data_of(t))[i];
    }
}

static void set(rc_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case RC_F32: ((float *)data_of(t))[i] = (float)v; break;
    case RC_F64: ((double *)data_of(t))[i] = v; break;
    default: ((int32_t *)data_of(t))[i] = (int32_t)v; break;
    }
}

static uint64_t rng_state = 88172645463325252ull;

/* uniform in [lo, hi) */
static double urand(double lo, double hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1.0p-53;
}

static rc_tensor *rnd(rc_dtype t, int ndim, const int64_t *shape, double lo, double hi)
{
    rc_tensor *x = mk(t, ndim, shape);
    for (int64_t i = 0; i < rc_tensor_numel(x); i++)
        set(x, i, urand(lo, hi));
    return x;
}

/* A CPU buffer holding a copy of t's host values (NULL with e set on failure). */
static rc_buffer *buffer_of(const rc_tensor *t, rc_error *e)
{
    size_t nb = rc_tensor_nbytes(t);
    rc_buffer *b = rc_buffer_new(rc_device_open("cpu", 0, NULL), nb ? nb : 1, e);
    if (b && rc_buffer_upload(b, 0, data_of(t), nb, e)) {
        rc_buffer_free(b);
        return NULL;
    }
    return b;
}

/* Runs node y on the CPU backend with the per-run key run_key (dropout's): checked as a
 * plan checks it, its inputs' and its own (poisoned) values copied into buffers, its output
 * copied back. */
static int run_node(rc_tensor *y, uint64_t run_key, rc_error *e)
{
    rc_backend *be = rc_device_open("cpu", 0, NULL);
    rc_buffer *bufs[1 + RC_MAX_SRC] = {0};
    rci_node_run r = {.node = y, .run_key = run_key};
    int rc = -1;
    if (rci_node_check(y, e) || !(bufs[0] = buffer_of(y, e)))
        goto done;
    r.out = (rci_mem){bufs[0], 0};
    for (int k = 0; k < y->nsrc; k++) {
        if (!y->src[k])
            continue;
        if (!(bufs[1 + k] = buffer_of(y->src[k], e)))
            goto done;
        r.in[k] = (rci_mem){bufs[1 + k], 0};
    }
    rc = be->run_node(be, &r, e);
    if (rc == 0)
        rc = rc_buffer_download(bufs[0], 0, data_of(y), rc_tensor_nbytes(y), e);
done:
    for (int k = 0; k < 1 + RC_MAX_SRC; k++)
        rc_buffer_free(bufs[k]);
    return rc;
}

/* dropout's draw for element i of key `key` as scalar.h documents it, written out here:
 * lowbias32 of the low halves, then of that with the high halves */
static uint32_t lowbias32(uint32_t x)
{
    x = (x ^ (x >> 16)) * 0x7feb352du;
    x = (x ^ (x >> 15)) * 0x846ca68bu;
    return x ^ (x >> 16);
}

static double drop_draw(uint64_t key, uint64_t i)
{
    uint32_t lo = lowbias32((uint32_t)(i & 0xffffffffu) ^ (uint32_t)(key & 0xffffffffu));
    return lowbias32(lo ^ (uint32_t)(i >> 32) ^ (uint32_t)(key >> 32));
}

static int run_keyed(rc_tensor *y, uint64_t run_key)
{
    memset(&err, 0, sizeof err);
    int rc = run_node(y, run_key, &err);
    CHECKF(rc == 0, "%s %s failed: %s", rc_op_name(y->op), rc_dtype_name(y->dtype), err.msg);
    return rc;
}

static int run(rc_tensor *y)
{
    return run_keyed(y, 0);
}

/* run y expecting failure with `code` and a message naming the op and `needle` */
static void run_fails(rc_tensor *y, int code, const char *needle)
{
    memset(&err, 0, sizeof err);
    int rc = run_node(y, 0, &err);
    CHECKF(rc == -1 && err.code == code, "%s: rc %d code %d (%s)", rc_op_name(y->op), rc, err.code,
           err.msg);
    CHECKF(strstr(err.msg, rc_op_name(y->op)) != NULL, "message '%s' should name %s", err.msg,
           rc_op_name(y->op));
    CHECKF(strstr(err.msg, needle) != NULL, "message '%s' should contain '%s'", err.msg, needle);
}

static double tol_of(rc_dtype t)
{
    return t == RC_F32 ? 2e-5 : 1e-11;
}

/* y against ref[numel]: |y - ref| <= tol (1 + |ref|); one CHECK per call */
static void expect(const rc_tensor *y, const double *ref, double tol, const char *what)
{
    int64_t n = rc_tensor_numel(y), bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        double g = get(y, i), r = ref[i];
        if (!(fabs(g - r) <= tol * (1 + fabs(r))) && !(g == r))
            bad = i;
    }
    CHECKF(bad < 0, "%s (%s): element %lld is %.9g, expected %.9g", what, rc_dtype_name(y->dtype),
           (long long)bad, bad < 0 ? 0 : get(y, bad), bad < 0 ? 0 : ref[bad]);
}

static double *ref_buf(const rc_tensor *y)
{
    int64_t n = rc_tensor_numel(y);
    return calloc((size_t)(n ? n : 1), sizeof(double));
}

/* Flat index into `in` of the element that broadcasts to flat index i of shape out. */
static int64_t bidx(const rc_tensor *in, int ond, const int64_t *oshape, int64_t i)
{
    int64_t idx = 0, stride = 1;
    for (int d = ond - 1; d >= 0; d--) {
        int64_t k = i % oshape[d];
        i /= oshape[d];
        int j = d - (ond - in->ndim);
        if (j < 0)
            continue;
        if (in->shape[j] != 1)
            idx += k * stride;
        stride *= in->shape[j];
    }
    return idx;
}

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* ---- fill, element-wise ------------------------------------------------------------------ */

static void test_full(rc_dtype t)
{
    rc_tensor *y = node(RC_OP_FULL, t, 2, S(3, 4), 0, NULL, NULL, NULL);
    y->fparam[0] = 2.5;
    if (run(y) == 0) {
        double ref[12];
        for (int i = 0; i < 12; i++)
            ref[i] = 2.5;
        expect(y, ref, 0, "full");
    }
    rc_tensor *s = node(RC_OP_FULL, t, 0, NULL, 0, NULL, NULL, NULL);
    s->fparam[0] = -1;
    if (run(s) == 0)
        CHECK(get(s, 0) == -1);
}

typedef struct {
    int na, nb, no;
    int64_t a[4], b[4], o[4];
} bin_case;

static void test_binary(rc_dtype t)
{
    static const bin_case cases[] = {
        {2, 2, 2, {3, 5}, {3, 5}, {3, 5}},
        {2, 1, 2, {4, 5}, {5}, {4, 5}},
        {1, 2, 2, {5}, {4, 5}, {4, 5}},
        {2, 0, 2, {4, 5}, {0}, {4, 5}},
        {0, 2, 2, {0}, {4, 5}, {4, 5}},
        {2, 2, 2, {4, 1}, {1, 5}, {4, 5}},
        {3, 2, 3, {2, 1, 3}, {4, 1}, {2, 4, 3}},
        {3, 2, 3, {2, 3, 4}, {3, 1}, {2, 3, 4}},
        {3, 3, 3, {2, 3, 4}, {2, 1, 4}, {2, 3, 4}},
        {0, 0, 0, {0}, {0}, {0}},
        {2, 2, 2, {70, 1000}, {70, 1000}, {70, 1000}},
        {2, 1, 2, {70, 1000}, {1000}, {70, 1000}},
        {1, 0, 1, {70000}, {0}, {70000}},
        {2, 2, 2, {300, 256}, {300, 1}, {300, 256}},
        {3, 3, 3, {2, 1, 20000}, {1, 3, 1}, {2, 3, 20000}},
    };
    static const rc_op ops[] = {RC_OP_ADD, RC_OP_SUB, RC_OP_MUL, RC_OP_DIV};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bin_case *bc = &cases[c];
        rc_tensor *a = rnd(t, bc->na, bc->a, -2, 2);
        rc_tensor *b = rnd(t, bc->nb, bc->b, 0.5, 1.5);
        for (int64_t i = 0; i < rc_tensor_numel(b); i += 2)
            set(b, i, -get(b, i));
        /* the broadcast operands, expanded once */
        int64_t n = rci_shape_numel(bc->no, bc->o);
        double *xa = calloc((size_t)n, sizeof(double)), *xb = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            xa[i] = get(a, bidx(a, bc->no, bc->o, i));
            xb[i] = get(b, bidx(b, bc->no, bc->o, i));
        }
        for (int k = 0; k < 4; k++) {
            rc_tensor *y = node(ops[k], t, bc->no, bc->o, 2, a, b, NULL);
            if (run(y))
                continue;
            double *ref = ref_buf(y);
            for (int64_t i = 0; i < n; i++)
                ref[i] = k == 0 ? xa[i] + xb[i] : k == 1 ? xa[i] - xb[i] : k == 2 ? xa[i] * xb[i]
                                                                              : xa[i] / xb[i];
            char what[64];
            snprintf(what, sizeof what, "%s case %zu", rc_op_name(ops[k]), c);
            expect(y, ref, tol_of(t), what);
            free(ref);
        }
        free(xa);
        free(xb);
        free_all();
    }
}

static void test_unary(rc_dtype t)
{
    static const rc_op ops[] = {RC_OP_AFFINE, RC_OP_EXP, RC_OP_LOG, RC_OP_SQRT, RC_OP_RSQRT,
                                RC_OP_TANH};
    static const int64_t sizes[] = {1000, 40000};
    for (int s = 0; s < 2; s++) {
        rc_tensor *x = rnd(t, 1, &sizes[s], 0.1, 4);
        for (int k = 0; k < 6; k++) {
            rc_tensor *y = node(ops[k], t, 1, &sizes[s], 1, x, NULL, NULL);
            y->fparam[0] = 2.5;
            y->fparam[1] = -1;
            if (run(y))
                continue;
            double *ref = ref_buf(y);
            for (int64_t i = 0; i < sizes[s]; i++) {
                double v = get(x, i);
                switch (ops[k]) {
                case RC_OP_AFFINE: ref[i] = v * 2.5 - 1; break;
                case RC_OP_EXP: ref[i] = exp(v); break;
                case RC_OP_LOG: ref[i] = log(v); break;
                case RC_OP_SQRT: ref[i] = sqrt(v); break;
                case RC_OP_RSQRT: ref[i] = 1 / sqrt(v); break;
                default: ref[i] = tanh(v); break;
                }
            }
            expect(y, ref, tol_of(t), rc_op_name(ops[k]));
            free(ref);
        }
    }
    free_all();
}

/* ---- activations --------------------------------------------------------------------------- */

static double ref_sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static double ref_act(int kind, int order, double x)
{
    const double k = sqrt(2 / 3.14159265358979323846), a = 0.044715;
    double sg = ref_sigmoid(x);
    switch (kind) {
    case RC_ACT_RELU:
        return order == 0 ? (x > 0 ? x : 0) : order == 1 ? (x > 0) : 0;
    case RC_ACT_GELU_TANH: {
        double u = k * (x + a * x * x * x), th = tanh(u), s = 1 - th * th;
        double u1 = k * (1 + 3 * a * x * x), u2 = 6 * a * k * x;
        if (order == 0)
            return 0.5 * x * (1 + th);
        if (order == 1)
            return 0.5 * (1 + th) + 0.5 * x * s * u1;
        return s * u1 + 0.5 * x * s * (u2 - 2 * th * u1 * u1);
    }
    case RC_ACT_GELU_ERF: {
        double cdf = 0.5 * (1 + erf(x / sqrt(2))), pdf = exp(-x * x / 2) / sqrt(2 * 3.14159265358979323846);
        return order == 0 ? x * cdf : order == 1 ? cdf + x * pdf : pdf * (2 - x * x);
    }
    case RC_ACT_SILU:
        return order == 0 ? x * sg : order == 1 ? sg * (1 + x * (1 - sg))
                                                : sg * (1 - sg) * (2 + x * (1 - 2 * sg));
    default:
        return order == 0 ? sg : order == 1 ? sg * (1 - sg) : sg * (1 - sg) * (1 - 2 * sg);
    }
}

/* the derivative formulas themselves, against central differences of the order below */
static void test_act_formulas(void)
{
    const double h = 1e-5;
    for (int kind = 0; kind < RC_ACT_COUNT; kind++)
        for (int order = 1; order <= 2; order++) {
            double worst = 0;
            for (double x = -4.05; x < 4; x += 0.1) {
                double fd = (ref_act(kind, order - 1, x + h) - ref_act(kind, order - 1, x - h)) / (2 * h);
                double d = fabs(fd - ref_act(kind, order, x));
                worst = d > worst ? d : worst;
            }
            CHECKF(worst < 1e-6, "act %d order %d: finite differences off by %g", kind, order, worst);
        }
}

static void test_act(rc_dtype t)
{
    int64_t n = 2000;
    rc_tensor *x = rnd(t, 1, &n, -6, 6);
    static const double special[] = {0, 20, -20, 100, -100, 1000, -1000, 1e-3};
    for (int i = 0; i < 8; i++)
        set(x, i, special[i]);
    for (int kind = 0; kind < RC_ACT_COUNT; kind++)
        for (int order = 0; order <= 2; order++) {
            rc_tensor *y = node(RC_OP_ACT, t, 1, &n, 1, x, NULL, NULL);
            y->iparam[0] = kind;
            y->iparam[1] = order;
            if (run(y))
                continue;
            double ref[2000];
            int finite = 1;
            for (int64_t i = 0; i < n; i++) {
                ref[i] = ref_act(kind, order, get(x, i));
                if (!isfinite(ref[i]))
                    ref[i] = 0;   /* gelu_tanh at x = +-1000: x * 0 * inf in the reference */
                finite &= isfinite(get(y, i)) != 0;
            }
            char what[64];
            snprintf(what, sizeof what, "act %d order %d", kind, order);
            expect(y, ref, t == RC_F32 ? 1e-4 : 1e-11, what);
            CHECKF(finite, "%s gives a non-finite value", what);
        }
    rc_tensor *bad = node(RC_OP_ACT, t, 1, &n, 1, x, NULL, NULL);
    bad->iparam[1] = 3;
    run_fails(bad, RC_ERR_ARG, "order 3");
    free_all();
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* logical a[bi][i][k] for a stored [.., M, K] or [.., K, M] */
static double mat_at(const rc_tensor *a, int64_t off, int trans, int64_t rows, int64_t cols,
                     int64_t i, int64_t j)
{
    return trans ? get(a, off + j * rows + i) : get(a, off + i * cols + j);
}

/* a batch dims ba[nba], b batch dims (nbb of them, 0: 2-D shared) */
static void check_matmul(rc_dtype t, int nba, const int64_t *bat_a, int nbb, const int64_t *bat_b,
                         int64_t m, int64_t k, int64_t n, int ta, int tb)
{
    int64_t sa[6], sb[6], so[6];
    int nbo = nba > nbb ? nba : nbb;
    const int64_t *bat_o = nba >= nbb ? bat_a : bat_b;
    int64_t ba = 1, bb = 1, bo = 1;
    for (int i = 0; i < nba; i++)
        ba *= sa[i] = bat_a[i];
    for (int i = 0; i < nbb; i++)
        bb *= sb[i] = bat_b[i];
    for (int i = 0; i < nbo; i++)
        bo *= so[i] = bat_o[i];
    sa[nba] = ta ? k : m;
    sa[nba + 1] = ta ? m : k;
    sb[nbb] = tb ? n : k;
    sb[nbb + 1] = tb ? k : n;
    so[nbo] = m;
    so[nbo + 1] = n;
    rc_tensor *a = rnd(t, nba + 2, sa, -1, 1), *b = rnd(t, nbb + 2, sb, -1, 1);
    rc_tensor *y = node(RC_OP_MATMUL, t, nbo + 2, so, 2, a, b, NULL);
    y->iparam[0] = ta;
    y->iparam[1] = tb;
    if (run(y) == 0) {
        double *ref = ref_buf(y);
        for (int64_t z = 0; z < bo; z++) {
            int64_t oa = ba == 1 ? 0 : z * m * k, ob = bb == 1 ? 0 : z * k * n;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t q = 0; q < k; q++)
                        s += mat_at(a, oa, ta, m, k, i, q) * mat_at(b, ob, tb, k, n, q, j);
                    ref[(z * m + i) * n + j] = s;
                }
        }
        char what[96];
        snprintf(what, sizeof what, "matmul batch %lld/%lld %lldx%lldx%lld ta %d tb %d",
                 (long long)ba, (long long)bb, (long long)m, (long long)k, (long long)n, ta, tb);
        expect(y, ref, t == RC_F32 ? 1e-4 : 1e-11, what);
        free(ref);
    }
    free_all();
}

static void test_matmul(rc_dtype t)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(t, 0, NULL, 0, NULL, 5, 7, 3, ta, tb);
            check_matmul(t, 2, S(2, 3), 2, S(2, 3), 4, 6, 5, ta, tb);    /* same batch dims */
            check_matmul(t, 1, S(4), 0, NULL, 3, 5, 6, ta, tb);           /* shared 2-D b */
            check_matmul(t, 2, S(2, 3), 0, NULL, 3, 5, 6, ta, tb);
            check_matmul(t, 1, S(9), 1, S(9), 6, 4, 7, ta, tb);           /* batch >= threads */
            check_matmul(t, 0, NULL, 1, S(3), 4, 5, 6, ta, tb);           /* shared 2-D a */
            check_matmul(t, 0, NULL, 0, NULL, 64, 80, 48, ta, tb);
        }
    check_matmul(t, 1, S(16), 0, NULL, 16, 32, 24, 0, 1);
    check_matmul(t, 1, S(16), 0, NULL, 16, 32, 24, 1, 0);
    /* K = 0: zeros */
    rc_tensor *a = mk(t, 2, S(3, 0)), *b = mk(t, 2, S(0, 4));
    rc_tensor *y = node(RC_OP_MATMUL, t, 2, S(3, 4), 2, a, b, NULL);
    if (run(y) == 0) {
        double ref[12] = {0};
        expect(y, ref, 0, "matmul K=0");
    }
    free_all();
}

/* ---- softmax ----------------------------------------------------------------------------- */

static void check_softmax(rc_dtype t, int nd, const int64_t *shape, int mnd, const int64_t *mshape,
                          double scale, int causal, double xlo, double xhi, int inf_mask)
{
    rc_tensor *x = rnd(t, nd, shape, xlo, xhi), *mask = NULL;
    if (mnd >= 0) {
        mask = rnd(t, mnd, mshape, -1, 1);
        if (inf_mask) {
            /* every third mask entry -inf, and the first mask row entirely -inf */
            int64_t mc = mnd ? mshape[mnd - 1] : 1;
            for (int64_t i = 0; i < rc_tensor_numel(mask); i++)
                if (i % 3 == 1 || i < mc)
                    set(mask, i, -INFINITY);
        }
    }
    rc_tensor *y = node(RC_OP_SOFTMAX, t, nd, shape, 2, x, mask, NULL);
    y->fparam[0] = scale;
    y->iparam[0] = causal;
    if (run(y))
        return;
    int64_t c = shape[nd - 1], rows = rc_tensor_numel(y) / c, tq = nd >= 2 ? shape[nd - 2] : 1;
    double *ref = ref_buf(y), *z = calloc((size_t)c, sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c; j++) {
            int64_t i = r * c + j;
            z[j] = get(x, i) * scale + (mask ? get(mask, bidx(mask, nd, shape, i)) : 0);
            if (causal && j > r % tq + (c - tq))
                z[j] = -INFINITY;
            mx = z[j] > mx ? z[j] : mx;
        }
        for (int64_t j = 0; j < c; j++) {
            ref[r * c + j] = mx == -INFINITY ? 0 : exp(z[j] - mx);
            sum += ref[r * c + j];
        }
        for (int64_t j = 0; j < c && sum > 0; j++)
            ref[r * c + j] /= sum;
    }
    expect(y, ref, tol_of(t), causal ? "causal softmax" : "softmax");
    free(ref);
    free(z);
}

static void test_softmax(rc_dtype t)
{
    check_softmax(t, 3, S(2, 3, 7), -1, NULL, 1, 0, -3, 3, 0);
    check_softmax(t, 3, S(2, 3, 7), 1, S(7), 0.5, 0, -3, 3, 0);
    check_softmax(t, 3, S(2, 3, 7), 2, S(3, 7), 0.5, 0, -3, 3, 1);     /* -inf entries, dead row */
    check_softmax(t, 4, S(2, 2, 3, 5), 2, S(3, 5), 0.7, 1, -3, 3, 0);  /* causal, Tk > Tq */
    check_softmax(t, 4, S(2, 2, 3, 5), -1, NULL, 1, 1, -3, 3, 0);
    check_softmax(t, 2, S(4, 2), -1, NULL, 1, 1, -3, 3, 0);            /* Tq > Tk: empty rows */
    check_softmax(t, 2, S(5, 5), -1, NULL, 1, 1, -3, 3, 0);
    check_softmax(t, 1, S(5), -1, NULL, 1, 1, -3, 3, 0);               /* 1-D causal: all visible */
    check_softmax(t, 2, S(3, 9), -1, NULL, 1, 0, 990, 1010, 0);        /* large logits */
    check_softmax(t, 2, S(64, 1024), 1, S(1024), 0.125, 0, -5, 5, 0);  /* threaded */
    check_softmax(t, 3, S(4, 96, 128), -1, NULL, 0.125, 1, -5, 5, 0);
    free_all();
}

/* ---- norms ----------------------------------------------------------------------------------- */

static void check_layer_norm(rc_dtype t, int nd, const int64_t *shape, int with_w, int with_b)
{
    int64_t c = shape[nd - 1];
    rc_tensor *x = rnd(t, nd, shape, -3, 5);
    rc_tensor *w = with_w ? rnd(t, 1, &c, 0.5, 1.5) : NULL, *b = with_b ? rnd(t, 1, &c, -1, 1) : NULL;
    rc_tensor *y = node(RC_OP_LAYER_NORM, t, nd, shape, 3, x, w, b);
    y->fparam[0] = 1e-5;
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t r = 0; r < rc_tensor_numel(y) / c; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < c; j++)
            mean += get(x, r * c + j) / (double)c;
        for (int64_t j = 0; j < c; j++)
            var += pow(get(x, r * c + j) - mean, 2) / (double)c;
        for (int64_t j = 0; j < c; j++)
            ref[r * c + j] = (get(x, r * c + j) - mean) / sqrt(var + 1e-5) * (w ? get(w, j) : 1) +
                             (b ? get(b, j) : 0);
    }
    expect(y, ref, t == RC_F32 ? 1e-4 : 1e-10, "layer_norm");
    free(ref);
}

static void check_rms_norm(rc_dtype t, int nd, const int64_t *shape, int with_w, double offset)
{
    int64_t c = shape[nd - 1];
    rc_tensor *x = rnd(t, nd, shape, -3, 5);
    rc_tensor *w = with_w ? rnd(t, 1, &c, -0.5, 0.5) : NULL;
    rc_tensor *y = node(RC_OP_RMS_NORM, t, nd, shape, 2, x, w, NULL);
    y->fparam[0] = 1e-6;
    y->fparam[1] = offset;
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t r = 0; r < rc_tensor_numel(y) / c; r++) {
        double ms = 0;
        for (int64_t j = 0; j < c; j++)
            ms += pow(get(x, r * c + j), 2) / (double)c;
        for (int64_t j = 0; j < c; j++)
            ref[r * c + j] = get(x, r * c + j) / sqrt(ms + 1e-6) * (w ? get(w, j) + offset : 1);
    }
    expect(y, ref, t == RC_F32 ? 1e-4 : 1e-10, "rms_norm");
    free(ref);
}

static void test_norms(rc_dtype t)
{
    check_layer_norm(t, 3, S(3, 4, 16), 1, 1);
    check_layer_norm(t, 2, S(5, 7), 0, 0);
    check_layer_norm(t, 2, S(5, 7), 1, 0);
    check_layer_norm(t, 1, S(9), 0, 1);
    check_layer_norm(t, 2, S(100, 512), 1, 1);
    check_rms_norm(t, 3, S(3, 4, 16), 1, 0);
    check_rms_norm(t, 2, S(5, 7), 1, 1.0);
    check_rms_norm(t, 2, S(5, 7), 0, 0);
    check_rms_norm(t, 2, S(100, 512), 1, 0);
    free_all();
}

/* ---- embedding, one-hot, cross-entropy ------------------------------------------------------ */

static rc_tensor *ids_tensor(int nd, const int64_t *shape, const int32_t *v)
{
    rc_tensor *x = mk(RC_I32, nd, shape);
    memcpy(data_of(x), v, rc_tensor_nbytes(x));
    return x;
}

static rc_tensor *rnd_ids(int nd, const int64_t *shape, int64_t n)
{
    rc_tensor *x = mk(RC_I32, nd, shape);
    for (int64_t i = 0; i < rc_tensor_numel(x); i++)
        ((int32_t *)data_of(x))[i] = (int32_t)urand(0, (double)n);
    return x;
}

static void check_embedding(rc_dtype t, int64_t v, int64_t c, int nd, const int64_t *ishape)
{
    rc_tensor *tab = rnd(t, 2, S(v, c), -1, 1), *ids = rnd_ids(nd, ishape, v);
    int64_t oshape[RC_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        oshape[i] = ishape[i];
    oshape[nd] = c;
    rc_tensor *y = node(RC_OP_EMBEDDING, t, nd + 1, oshape, 2, tab, ids, NULL);
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(ids); i++)
        for (int64_t j = 0; j < c; j++)
            ref[i * c + j] = get(tab, get(ids, i) * c + j);
    expect(y, ref, 0, "embedding");
    free(ref);
}

static void check_embedding_grad(rc_dtype t, int64_t v, int64_t c, int nd, const int64_t *ishape)
{
    rc_tensor *ids = rnd_ids(nd, ishape, v);
    int64_t gshape[RC_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        gshape[i] = ishape[i];
    gshape[nd] = c;
    rc_tensor *g = rnd(t, nd + 1, gshape, -1, 1);
    rc_tensor *y = node(RC_OP_EMBEDDING_GRAD, t, 2, S(v, c), 2, ids, g, NULL);
    y->iparam[0] = (int32_t)v;
    y->iparam[1] = -1; /* no padding id */
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(ids); i++)
        for (int64_t j = 0; j < c; j++)
            ref[(int64_t)get(ids, i) * c + j] += get(g, i * c + j);
    expect(y, ref, tol_of(t), "embedding_grad");
    free(ref);
}

static void test_embedding(rc_dtype t)
{
    check_embedding(t, 10, 6, 2, S(2, 3));
    check_embedding(t, 50, 128, 1, S(500));
    check_embedding(t, 7, 3, 0, NULL);
    check_embedding_grad(t, 6, 8, 2, S(2, 5));      /* repeated ids */
    check_embedding_grad(t, 40, 300, 1, S(200));    /* threaded column blocks */
    check_embedding_grad(t, 3, 5, 1, S(1));         /* rows never hit stay zero */
    free_all();

    rc_tensor *tab = rnd(t, 2, S(10, 4), -1, 1);
    rc_tensor *ids = ids_tensor(1, S(6), (const int32_t[]){0, 9, 3, 3, 50300, 1});
    rc_tensor *y = node(RC_OP_EMBEDDING, t, 2, S(6, 4), 2, tab, ids, NULL);
    run_fails(y, RC_ERR_INDEX, "id 50300 at position 4");
    rc_tensor *neg = ids_tensor(1, S(2), (const int32_t[]){-1, 0});
    y = node(RC_OP_EMBEDDING, t, 2, S(2, 4), 2, tab, neg, NULL);
    run_fails(y, RC_ERR_INDEX, "id -1 at position 0");
    rc_tensor *g = rnd(t, 2, S(6, 4), -1, 1);
    y = node(RC_OP_EMBEDDING_GRAD, t, 2, S(10, 4), 2, ids, g, NULL);
    y->iparam[0] = 10;
    y->iparam[1] = -1;
    run_fails(y, RC_ERR_INDEX, "id 50300 at position 4");
    free_all();
}

static void test_one_hot(rc_dtype t)
{
    rc_tensor *ids = ids_tensor(2, S(2, 3), (const int32_t[]){0, 4, -1, 2, 2, 1});
    rc_tensor *y = node(RC_OP_ONE_HOT, t, 3, S(2, 3, 5), 1, ids, NULL, NULL);
    y->iparam[0] = 5;
    y->iparam[1] = -1;
    if (run(y) == 0) {
        double ref[30] = {0};
        for (int i = 0; i < 6; i++)
            if (get(ids, i) != -1)
                ref[i * 5 + (int)get(ids, i)] = 1;
        expect(y, ref, 0, "one_hot");
    }
    rc_tensor *big = rnd_ids(1, S(5000), 40);
    y = node(RC_OP_ONE_HOT, t, 2, S(5000, 40), 1, big, NULL, NULL);
    y->iparam[0] = 40;
    y->iparam[1] = -100;
    if (run(y) == 0) {
        double *ref = ref_buf(y);
        for (int i = 0; i < 5000; i++)
            ref[i * 40 + (int)get(big, i)] = 1;
        expect(y, ref, 0, "one_hot big");
        free(ref);
    }
    rc_tensor *bad = ids_tensor(1, S(3), (const int32_t[]){1, -1, 9});
    y = node(RC_OP_ONE_HOT, t, 2, S(3, 5), 1, bad, NULL, NULL);
    y->iparam[0] = 5;
    y->iparam[1] = -1;
    run_fails(y, RC_ERR_INDEX, "id 9 at position 2");
    free_all();
}

static void check_cross_entropy(rc_dtype t, int64_t rows, int64_t v, int ignore, int every_ignored)
{
    rc_tensor *x = rnd(t, 2, S(rows, v), -4, 4), *tg = rnd_ids(1, &rows, v);
    for (int64_t r = 0; r < rows; r++)
        if (every_ignored || r % 4 == 1)
            set(tg, r, ignore);
    rc_tensor *y = node(RC_OP_CROSS_ENTROPY, t, 0, NULL, 2, x, tg, NULL);
    y->iparam[0] = ignore;
    if (run(y))
        return;
    double loss = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (get(tg, r) == ignore)
            continue;
        double s = 0;
        for (int64_t j = 0; j < v; j++)
            s += exp(get(x, r * v + j));
        loss += log(s) - get(x, r * v + (int64_t)get(tg, r));
        count++;
    }
    double ref = count ? loss / (double)count : 0;
    expect(y, &ref, tol_of(t), "cross_entropy");
}

static void test_cross_entropy(rc_dtype t)
{
    check_cross_entropy(t, 6, 7, -100, 0);
    check_cross_entropy(t, 6, 7, 3, 0);
    check_cross_entropy(t, 5, 4, -1, 1);
    check_cross_entropy(t, 256, 500, -100, 0);
    /* logits [2, 3, 5], targets [2, 3] */
    rc_tensor *x = rnd(t, 3, S(2, 3, 5), -1, 1);
    rc_tensor *tg = ids_tensor(2, S(2, 3), (const int32_t[]){0, 4, -100, 42, 1, 2});
    rc_tensor *y = node(RC_OP_CROSS_ENTROPY, t, 0, NULL, 2, x, tg, NULL);
    y->iparam[0] = -100;
    run_fails(y, RC_ERR_INDEX, "target 42 at position 3");
    free_all();
}

/* ---- rope ------------------------------------------------------------------------------------ */

static void check_rope(rc_dtype t, int nd, const int64_t *shape, int pnd, const int64_t *pshape,
                       int rot, int mode, int inverse)
{
    double theta = 10000;
    rc_tensor *x = rnd(t, nd, shape, -1, 1), *pos = rnd_ids(pnd, pshape, 100);
    rc_tensor *y = node(RC_OP_ROPE, t, nd, shape, 2, x, pos, NULL);
    y->iparam[0] = rot;
    y->iparam[1] = mode;
    y->iparam[2] = inverse;
    y->fparam[0] = theta;
    if (run(y))
        return;
    int64_t d = shape[nd - 1], h = shape[nd - 2], np = rc_tensor_numel(pos);
    int64_t rows = rc_tensor_numel(x) / (h * d);
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(x); i++)
        ref[i] = get(x, i);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t base = (r * h + hh) * d;
            for (int p = 0; p < rot / 2; p++) {
                double ang = get(pos, r % np) * pow(theta, -2.0 * p / rot) * (inverse ? -1 : 1);
                int64_t ia = mode == RC_ROPE_INTERLEAVED ? 2 * p : p;
                int64_t ib = mode == RC_ROPE_INTERLEAVED ? 2 * p + 1 : p + rot / 2;
                double xa = get(x, base + ia), xb = get(x, base + ib);
                ref[base + ia] = xa * cos(ang) - xb * sin(ang);
                ref[base + ib] = xb * cos(ang) + xa * sin(ang);
            }
        }
    char what[64];
    snprintf(what, sizeof what, "rope rot %d mode %d inverse %d", rot, mode, inverse);
    expect(y, ref, t == RC_F32 ? 1e-5 : 1e-11, what);
    free(ref);

    /* the inverse undoes the rotation */
    rc_tensor *back = node(RC_OP_ROPE, t, nd, shape, 2, y, pos, NULL);
    memcpy(back->iparam, y->iparam, sizeof y->iparam);
    back->iparam[2] = !inverse;
    back->fparam[0] = theta;
    if (run(back) == 0) {
        double *xs = ref_buf(x);
        for (int64_t i = 0; i < rc_tensor_numel(x); i++)
            xs[i] = get(x, i);
        expect(back, xs, t == RC_F32 ? 1e-5 : 1e-11, "rope round trip");
        free(xs);
    }
}

static void test_rope(rc_dtype t)
{
    for (int mode = 0; mode < 2; mode++)
        for (int inv = 0; inv < 2; inv++) {
            check_rope(t, 4, S(2, 4, 3, 10), 1, S(4), 6, mode, inv);      /* partial rotary dims */
            check_rope(t, 4, S(2, 4, 3, 10), 2, S(2, 4), 10, mode, inv);  /* positions [B, T] */
            check_rope(t, 3, S(5, 2, 8), 1, S(5), 8, mode, inv);
            check_rope(t, 3, S(3, 1, 300), 1, S(3), 260, mode, inv);      /* more pairs than a block */
        }
    check_rope(t, 4, S(4, 64, 4, 64), 1, S(64), 64, RC_ROPE_HALF, 0);   /* threaded */
    free_all();
}

/* ---- reductions -------------------------------------------------------------------------------- */

static void check_reduce(rc_dtype t, rc_op op, int nd, const int64_t *shape, int axis, int keepdim)
{
    rc_tensor *x = rnd(t, nd, shape, -3, 2);
    int64_t oshape[RC_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < nd; i++)
        if (i != axis)
            oshape[ond++] = shape[i];
        else if (keepdim)
            oshape[ond++] = 1;
    rc_tensor *y = node(op, t, ond, oshape, 1, x, NULL, NULL);
    y->iparam[0] = axis;
    y->iparam[1] = keepdim;
    if (run(y))
        return;
    int64_t outer = 1, inner = 1, n = shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= shape[i];
    for (int i = axis + 1; i < nd; i++)
        inner *= shape[i];
    double *ref = ref_buf(y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = op == RC_OP_MAX ? -INFINITY : 0;
            for (int64_t k = 0; k < n; k++) {
                double v = get(x, (o * n + k) * inner + j);
                acc = op == RC_OP_MAX ? (v > acc ? v : acc) : acc + v;
            }
            ref[o * inner + j] = acc;
        }
    char what[64];
    snprintf(what, sizeof what, "%s axis %d of %d-D", rc_op_name(op), axis, nd);
    expect(y, ref, t == RC_F32 ? 1e-5 : 1e-11, what);
    free(ref);
}

static void test_reduce(rc_dtype t)
{
    for (int k = 0; k < 2; k++) {
        rc_op op = k ? RC_OP_MAX : RC_OP_SUM;
        for (int axis = 0; axis < 3; axis++) {
            check_reduce(t, op, 3, S(3, 4, 5), axis, 0);
            check_reduce(t, op, 3, S(3, 4, 5), axis, 1);
        }
        check_reduce(t, op, 1, S(1000), 0, 0);
        check_reduce(t, op, 2, S(300, 200), 1, 0);   /* inner 1, many rows */
        check_reduce(t, op, 2, S(1, 50000), 1, 1);   /* one long row */
        check_reduce(t, op, 2, S(50000, 3), 0, 0);   /* narrow columns */
        check_reduce(t, op, 2, S(2, 40000), 0, 0);   /* wide columns */
        check_reduce(t, op, 3, S(4, 300, 70), 1, 1);
        free_all();
    }
}

static void check_sum_to(rc_dtype t, int nd, const int64_t *shape, int ond, const int64_t *oshape)
{
    rc_tensor *x = rnd(t, nd, shape, -1, 1);
    rc_tensor *y = node(RC_OP_SUM_TO, t, ond, oshape, 1, x, NULL, NULL);
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(x); i++)
        ref[bidx(y, nd, shape, i)] += get(x, i);
    char what[64];
    snprintf(what, sizeof what, "sum_to %d-D -> %d-D", nd, ond);
    expect(y, ref, t == RC_F32 ? 1e-5 : 1e-11, what);
    free(ref);
}

static void test_sum_to(rc_dtype t)
{
    check_sum_to(t, 2, S(4, 5), 1, S(5));
    check_sum_to(t, 2, S(4, 5), 2, S(4, 1));
    check_sum_to(t, 2, S(4, 5), 2, S(1, 5));
    check_sum_to(t, 3, S(2, 3, 4), 2, S(3, 1));
    check_sum_to(t, 3, S(2, 3, 4), 3, S(2, 1, 4));
    check_sum_to(t, 3, S(2, 3, 4), 0, NULL);
    check_sum_to(t, 3, S(2, 3, 4), 3, S(2, 3, 4));
    check_sum_to(t, 4, S(2, 3, 4, 5), 3, S(3, 1, 1));     /* general path */
    check_sum_to(t, 4, S(2, 3, 4, 5), 4, S(2, 1, 4, 1));
    check_sum_to(t, 3, S(3, 1, 4), 3, S(3, 1, 1));
    check_sum_to(t, 3, S(2, 1, 3), 2, S(1, 3));
    check_sum_to(t, 2, S(300, 256), 1, S(256));
    check_sum_to(t, 2, S(256, 300), 2, S(256, 1));
    free_all();
}

/* ---- dropout, where, equal --------------------------------------------------------------------- */

static void test_dropout(rc_dtype t)
{
    static const int64_t sizes[] = {1000, 50000};
    for (int s = 0; s < 2; s++) {
        rc_tensor *x = rnd(t, 1, &sizes[s], -1, 1);
        rc_tensor *y = node(RC_OP_DROPOUT, t, 1, &sizes[s], 1, x, NULL, NULL);
        uint64_t key = 0x9abcdef012345678ull;
        y->iparam[0] = (int32_t)(uint32_t)(key & 0xffffffffu);
        y->iparam[1] = (int32_t)(uint32_t)(key >> 32);
        y->fparam[0] = 0.3;
        uint64_t run_key = 0x1122334455667788ull; /* the plan's per-run key, mixed in */
        if (run_keyed(y, run_key))
            continue;
        double *ref = ref_buf(y);
        int64_t kept = 0;
        for (int64_t i = 0; i < sizes[s]; i++) {
            int keep = drop_draw(key ^ rci_hash64(run_key), (uint64_t)i) >= ceil(0.3 * 4294967296.0);
            ref[i] = keep ? get(x, i) / 0.7 : 0;
            kept += keep;
        }
        expect(y, ref, tol_of(t), "dropout");
        CHECKF(fabs((double)kept / (double)sizes[s] - 0.7) < 0.05, "kept %lld of %lld",
               (long long)kept, (long long)sizes[s]);
        free(ref);
        rc_tensor *z = node(RC_OP_DROPOUT, t, 1, &sizes[s], 1, x, NULL, NULL);
        if (run(z) == 0) {
            double *xs = ref_buf(x);
            for (int64_t i = 0; i < sizes[s]; i++)
                xs[i] = get(x, i);
            expect(z, xs, 0, "dropout p = 0");
            free(xs);
        }
    }
    free_all();
}

/* normal: the documented formula element by element, the moments of many draws, and the
 * key: the same key gives the same values, another key (its own or the plan's) others */
static void test_normal(rc_dtype t)
{
    static const int64_t sizes[] = {1000, 200000};
    uint64_t key = 0x0123456789abcdefull, run_key = 0x5555aaaa3333cccc;
    for (int s = 0; s < 2; s++) {
        int64_t n = sizes[s];
        rc_tensor *y = node(RC_OP_NORMAL, t, 1, &sizes[s], 0, NULL, NULL, NULL);
        y->iparam[0] = (int32_t)(uint32_t)(key & 0xffffffffu);
        y->iparam[1] = (int32_t)(uint32_t)(key >> 32);
        if (run_keyed(y, run_key))
            continue;
        double *ref = ref_buf(y), sum = 0, sq = 0, most = 0;
        uint64_t k = key ^ rci_hash64(run_key);
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = rci_hash64(k ^ rci_hash64((uint64_t)i));
            double u1 = (double)((h >> 40) + 1) * 0x1p-24, u2 = (double)(h & 0xffffff) * 0x1p-24;
            ref[i] = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
            double z = get(y, i);
            sum += z, sq += z * z;
            most = fabs(z) > most ? fabs(z) : most;
        }
        expect(y, ref, t == RC_F32 ? 1e-5 : 1e-12, "normal");
        double mean = sum / (double)n, var = sq / (double)n - mean * mean;
        /* 6 standard errors: sd(mean) = 1 / sqrt(n), sd(var) ~ sqrt(2 / n) */
        CHECKF(fabs(mean) < 6 / sqrt((double)n), "normal: mean %.4f of %lld draws", mean, (long long)n);
        CHECKF(fabs(var - 1) < 6 * sqrt(2 / (double)n), "normal: variance %.4f of %lld draws", var, (long long)n);
        CHECKF(most < 5.8, "normal: |z| up to %.3f", most);
        free(ref);
        /* the same keys: the same values; another node key or plan key: others */
        rc_tensor *same = node(RC_OP_NORMAL, t, 1, &sizes[s], 0, NULL, NULL, NULL);
        rc_tensor *other = node(RC_OP_NORMAL, t, 1, &sizes[s], 0, NULL, NULL, NULL);
        rc_tensor *moved = node(RC_OP_NORMAL, t, 1, &sizes[s], 0, NULL, NULL, NULL);
        memcpy(same->iparam, y->iparam, sizeof y->iparam);
        memcpy(moved->iparam, y->iparam, sizeof y->iparam);
        other->iparam[0] = y->iparam[0] ^ 1;
        other->iparam[1] = y->iparam[1];
        if (run_keyed(same, run_key) || run_keyed(other, run_key) || run_keyed(moved, run_key + 1))
            continue;
        CHECKF(!memcmp(data_of(same), data_of(y), rc_tensor_nbytes(y)), "normal: the same key, other values");
        int64_t eq_other = 0, eq_moved = 0;
        for (int64_t i = 0; i < n; i++) {
            eq_other += get(other, i) == get(y, i);
            eq_moved += get(moved, i) == get(y, i);
        }
        CHECKF(eq_other < n / 100 && eq_moved < n / 100, "normal: another key repeats %lld and %lld of %lld values",
               (long long)eq_other, (long long)eq_moved, (long long)n);
    }
    free_all();
}

static void test_where_equal(rc_dtype t)
{
    for (int ci = 0; ci < 2; ci++) {
        rc_tensor *cond = mk(ci ? RC_I32 : t, 2, S(4, 1));
        for (int i = 0; i < 4; i++)
            set(cond, i, i % 2 ? (ci ? 7 : 0.5) : 0);
        rc_tensor *a = rnd(t, 2, S(4, 5), -1, 1), *b = rnd(t, 1, S(5), -1, 1);
        rc_tensor *y = node(RC_OP_WHERE, t, 2, S(4, 5), 3, cond, a, b);
        if (run(y) == 0) {
            double ref[20];
            for (int i = 0; i < 20; i++)
                ref[i] = get(cond, i / 5) != 0 ? get(a, i) : get(b, i % 5);
            expect(y, ref, 0, "where");
        }
        rc_tensor *sc = mk(t, 0, NULL);
        set(sc, 0, 3);
        y = node(RC_OP_WHERE, t, 3, S(2, 4, 5), 3, cond, sc, a);
        if (run(y) == 0) {
            double ref[40];
            for (int i = 0; i < 40; i++)
                ref[i] = get(cond, (i / 5) % 4) != 0 ? 3 : get(a, i % 20);
            expect(y, ref, 0, "where scalar");
        }
    }
    /* big: threaded rows */
    rc_tensor *cond = rnd(t, 2, S(200, 300), -1, 1), *a = rnd(t, 2, S(200, 300), -1, 1);
    rc_tensor *b = rnd(t, 2, S(200, 1), -1, 1);
    for (int64_t i = 0; i < 60000; i++)
        set(cond, i, get(cond, i) > 0);
    rc_tensor *y = node(RC_OP_WHERE, t, 2, S(200, 300), 3, cond, a, b);
    if (run(y) == 0) {
        double *ref = ref_buf(y);
        for (int64_t i = 0; i < 60000; i++)
            ref[i] = get(cond, i) != 0 ? get(a, i) : get(b, i / 300);
        expect(y, ref, 0, "where big");
        free(ref);
    }
    free_all();

    for (int ci = 0; ci < 2; ci++) {
        rc_dtype st = ci ? RC_I32 : t;
        rc_tensor *p = mk(st, 2, S(4, 5)), *q = mk(st, 1, S(5));
        for (int i = 0; i < 20; i++)
            set(p, i, i % 3);
        for (int i = 0; i < 5; i++)
            set(q, i, i % 2 ? 1 : 2);
        rc_tensor *e = node(RC_OP_EQUAL, t, 2, S(4, 5), 2, p, q, NULL);
        if (run(e) == 0) {
            double ref[20];
            for (int i = 0; i < 20; i++)
                ref[i] = get(p, i) == get(q, i % 5);
            expect(e, ref, 0, ci ? "equal i32" : "equal");
        }
    }
    free_all();
}

/* ---- data movement ------------------------------------------------------------------------------ */

static rc_tensor *seq(rc_dtype t, int nd, const int64_t *shape)
{
    rc_tensor *x = mk(t, nd, shape);
    for (int64_t i = 0; i < rc_tensor_numel(x); i++)
        set(x, i, (double)(i % 100003) - 7);
    return x;
}

static void unravel(int64_t i, int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t ravel(const int64_t *idx, int nd, const int64_t *shape)
{
    int64_t i = 0;
    for (int d = 0; d < nd; d++)
        i = i * shape[d] + idx[d];
    return i;
}

static void check_permute(rc_dtype t, int nd, const int64_t *shape, const int *perm)
{
    rc_tensor *x = seq(t, nd, shape);
    int64_t oshape[RC_MAX_DIMS], idx[RC_MAX_DIMS], sidx[RC_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        oshape[i] = shape[perm[i]];
    rc_tensor *y = node(RC_OP_PERMUTE, t, nd, oshape, 1, x, NULL, NULL);
    for (int i = 0; i < nd; i++)
        y->iparam[i] = perm[i];
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(y); i++) {
        unravel(i, nd, oshape, idx);
        for (int d = 0; d < nd; d++)
            sidx[perm[d]] = idx[d];
        ref[i] = get(x, ravel(sidx, nd, shape));
    }
    expect(y, ref, 0, "permute");
    free(ref);
}

static void test_permute(rc_dtype t)
{
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++)
        check_permute(t, 3, S(2, 3, 4), perms[p]);
    check_permute(t, 4, S(2, 3, 4, 5), (const int[]){0, 2, 1, 3});
    check_permute(t, 4, S(2, 1, 4, 5), (const int[]){3, 1, 0, 2});
    check_permute(t, 2, S(300, 200), (const int[]){1, 0});
    check_permute(t, 3, S(64, 8, 64), (const int[]){1, 0, 2});
    check_permute(t, 3, S(3, 70, 45), (const int[]){0, 2, 1});    /* tiled, ragged tiles */
    check_permute(t, 3, S(33, 5, 97), (const int[]){2, 1, 0});
    check_permute(t, 4, S(2, 40, 3, 50), (const int[]){3, 0, 2, 1});
    free_all();
}

static void test_slice_pad_concat(rc_dtype t)
{
    int64_t shape[3] = {4, 5, 6}, idx[3];
    for (int ax = 0; ax < 3; ax++) {
        rc_tensor *x = seq(t, 3, shape);
        int64_t start = 1, end = shape[ax] - 1, osh[3] = {4, 5, 6};
        osh[ax] = end - start;
        rc_tensor *y = node(RC_OP_SLICE, t, 3, osh, 1, x, NULL, NULL);
        y->iparam[0] = ax;
        y->iparam[1] = (int32_t)start;
        y->iparam[2] = (int32_t)end;
        if (run(y) == 0) {
            double *ref = ref_buf(y);
            for (int64_t i = 0; i < rc_tensor_numel(y); i++) {
                unravel(i, 3, osh, idx);
                idx[ax] += start;
                ref[i] = get(x, ravel(idx, 3, shape));
            }
            expect(y, ref, 0, "slice");
            free(ref);
        }
        /* pad x to size + 3 along ax at offset 2 */
        int64_t psh[3] = {4, 5, 6};
        psh[ax] += 3;
        rc_tensor *p = node(RC_OP_PAD, t, 3, psh, 1, x, NULL, NULL);
        p->iparam[0] = ax;
        p->iparam[1] = 2;
        if (run(p) == 0) {
            double *ref = ref_buf(p);
            for (int64_t i = 0; i < rc_tensor_numel(p); i++) {
                unravel(i, 3, psh, idx);
                idx[ax] -= 2;
                ref[i] = idx[ax] >= 0 && idx[ax] < shape[ax] ? get(x, ravel(idx, 3, shape)) : 0;
            }
            expect(p, ref, 0, "pad");
            free(ref);
        }
        /* concat three parts of sizes 1, 2, 3 along ax */
        rc_tensor *parts[3];
        int64_t csh[3] = {4, 5, 6}, off[4] = {0, 1, 3, 6};
        csh[ax] = 6;
        for (int k = 0; k < 3; k++) {
            int64_t s[3] = {4, 5, 6};
            s[ax] = k + 1;
            parts[k] = seq(t, 3, s);
            for (int64_t i = 0; i < rc_tensor_numel(parts[k]); i++)
                set(parts[k], i, get(parts[k], i) + 1000 * k);
        }
        rc_tensor *c = node(RC_OP_CONCAT, t, 3, csh, 3, parts[0], parts[1], parts[2]);
        c->iparam[0] = ax;
        if (run(c) == 0) {
            double *ref = ref_buf(c);
            for (int64_t i = 0; i < rc_tensor_numel(c); i++) {
                unravel(i, 3, csh, idx);
                int k = 0;
                while (idx[ax] >= off[k + 1])
                    k++;
                idx[ax] -= off[k];
                ref[i] = get(parts[k], ravel(idx, 3, parts[k]->shape));
            }
            expect(c, ref, 0, "concat");
            free(ref);
        }
        free_all();
    }
    /* big slice: threaded rows */
    rc_tensor *x = seq(t, 2, S(400, 300));
    rc_tensor *y = node(RC_OP_SLICE, t, 2, S(400, 200), 1, x, NULL, NULL);
    y->iparam[0] = 1;
    y->iparam[1] = 50;
    y->iparam[2] = 250;
    if (run(y) == 0) {
        double *ref = ref_buf(y);
        for (int64_t i = 0; i < 80000; i++)
            ref[i] = get(x, (i / 200) * 300 + 50 + i % 200);
        expect(y, ref, 0, "slice big");
        free(ref);
    }
    free_all();
}

static void check_expand(rc_dtype t, int nd, const int64_t *shape, int ond, const int64_t *oshape)
{
    rc_tensor *x = seq(t, nd, shape);
    rc_tensor *y = node(RC_OP_EXPAND, t, ond, oshape, 1, x, NULL, NULL);
    if (run(y))
        return;
    double *ref = ref_buf(y);
    for (int64_t i = 0; i < rc_tensor_numel(y); i++)
        ref[i] = get(x, bidx(x, ond, oshape, i));
    expect(y, ref, 0, "expand");
    free(ref);
}

static void test_expand(rc_dtype t)
{
    check_expand(t, 1, S(5), 2, S(4, 5));
    check_expand(t, 2, S(4, 1), 2, S(4, 5));
    check_expand(t, 0, NULL, 2, S(2, 3));
    check_expand(t, 3, S(2, 1, 3), 3, S(2, 4, 3));
    check_expand(t, 1, S(3), 3, S(2, 2, 3));
    check_expand(t, 2, S(1, 512), 2, S(128, 512));
    check_expand(t, 2, S(256, 1), 2, S(256, 300));
    check_expand(t, 0, NULL, 1, S(70000));
    free_all();
}

static void test_cast(void)
{
    static const rc_dtype types[3] = {RC_F32, RC_F64, RC_I32};
    static const double vals[] = {-2.75, -0.5, 0.5, 2.75, 1e10, -1e10, 1234567, -3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            rc_tensor *x = mk(types[a], 1, S(8));
            for (int i = 0; i < 8; i++)
                set(x, i, types[a] == RC_I32 ? trunc(vals[i] / 1e4) : vals[i]);
            rc_tensor *y = node(RC_OP_CAST, types[b], 1, S(8), 1, x, NULL, NULL);
            if (run(y))
                continue;
            double ref[8];
            for (int i = 0; i < 8; i++) {
                double v = get(x, i);
                if (types[b] == RC_I32)
                    v = v >= 2147483647.0 ? 2147483647.0 : v <= -2147483648.0 ? -2147483648.0 : trunc(v);
                else if (types[b] == RC_F32)
                    v = (float)v;
                ref[i] = v;
            }
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", rc_dtype_name(types[a]), rc_dtype_name(types[b]));
            expect(y, ref, 0, what);
        }
    rc_tensor *x = mk(RC_F64, 1, S(1));
    set(x, 0, NAN);
    rc_tensor *y = node(RC_OP_CAST, RC_I32, 1, S(1), 1, x, NULL, NULL);
    if (run(y) == 0)
        CHECK(get(y, 0) == 0);
    rc_tensor *big = rnd(RC_F32, 1, S(50000), -100, 100);
    y = node(RC_OP_CAST, RC_F64, 1, S(50000), 1, big, NULL, NULL);
    if (run(y) == 0) {
        double *ref = ref_buf(y);
        for (int64_t i = 0; i < 50000; i++)
            ref[i] = get(big, i);
        expect(y, ref, 0, "cast big");
        free(ref);
    }
    free_all();
}

/* ---- errors -------------------------------------------------------------------------------------- */

static void test_errors(void)
{
    rc_tensor *a = rnd(RC_F32, 1, S(4), -1, 1);
    rc_tensor *y = node(RC_OP_LEAF, RC_F32, 1, S(4), 0, NULL, NULL, NULL);
    run_fails(y, RC_ERR_UNSUPPORTED, "leaf");
    y = node(RC_OP_RESHAPE, RC_F32, 2, S(2, 2), 1, a, NULL, NULL);
    run_fails(y, RC_ERR_UNSUPPORTED, "reshape");
    rc_tensor *i = mk(RC_I32, 1, S(4));
    y = node(RC_OP_ADD, RC_I32, 1, S(4), 2, i, i, NULL);
    run_fails(y, RC_ERR_UNSUPPORTED, "i32");
    y = node(RC_OP_EXP, RC_I32, 1, S(4), 1, i, NULL, NULL);
    run_fails(y, RC_ERR_UNSUPPORTED, "i32");
    y = node(RC_OP_ADD, RC_F32, 1, S(4), 2, a, i, NULL);
    run_fails(y, RC_ERR_DTYPE, "i32");
    rc_tensor *b = rnd(RC_F32, 1, S(3), -1, 1);
    y = node(RC_OP_MUL, RC_F32, 1, S(4), 2, a, b, NULL);
    run_fails(y, RC_ERR_SHAPE, "[4]");
    y = node(RC_OP_COUNT, RC_F64, 1, S(4), 0, NULL, NULL, NULL);
    memset(&err, 0, sizeof err);
    CHECK(run_node(y, 0, &err) == -1 && err.code == RC_ERR_UNSUPPORTED);
    free_all();
}

static void run_suite(void)
{
    const rc_dtype t = RC_F64;
    test_full(t);
    test_binary(t);
    test_unary(t);
    test_act(t);
    test_matmul(t);
    test_softmax(t);
    test_norms(t);
    test_embedding(t);
    test_one_hot(t);
    test_cross_entropy(t);
    test_rope(t);
    test_reduce(t);
    test_sum_to(t);
    test_dropout(t);
    test_normal(t);
    test_where_equal(t);
    test_expand(t);
    test_permute(RC_F64);
    test_permute(RC_I32);
    test_slice_pad_concat(RC_F64);
    test_slice_pad_concat(RC_I32);
    test_expand(RC_I32);
    test_cast();
    test_errors();
}

int main(void)
{
    int threads = rc_get_threads();
    test_act_formulas();
    rc_set_threads(1);
    CHECK(rc_get_threads() == 1);
    run_suite();
    rc_set_threads(3);
    CHECK(rc_get_threads() == 3);
    run_suite();
    rc_set_threads(0);
    CHECK(rc_get_threads() >= 1);
    rc_set_threads(threads);
    CHECK(rc_get_threads() == threads);
    return check_summary("reference");
}
