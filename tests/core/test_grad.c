/* test_grad.c - finite-difference gradient checks, in double precision, for every op. */
#include "check.h"
#include "gradcheck.h"

#include <stdio.h>
#include <string.h>

#define F64(...) {.dtype = RC_F64, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define POS(...) {.dtype = RC_F64, .positive = 1, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define IDS(max, ...) {.dtype = RC_I32, .nograd = 1, .id_max = (max), .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define MASK(...) {.dtype = RC_F64, .nograd = 1, .binary = 1, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}

static rc_tensor *b_add(rc_graph *g, rc_tensor **x) { return rc_add(g, x[0], x[1]); }
static rc_tensor *b_sub(rc_graph *g, rc_tensor **x) { return rc_sub(g, x[0], x[1]); }
static rc_tensor *b_mul(rc_graph *g, rc_tensor **x) { return rc_mul(g, x[0], x[1]); }
static rc_tensor *b_div(rc_graph *g, rc_tensor **x) { return rc_div(g, x[0], x[1]); }
static rc_tensor *b_affine(rc_graph *g, rc_tensor **x) { return rc_affine(g, x[0], -1.7, 0.3); }
static rc_tensor *b_neg(rc_graph *g, rc_tensor **x) { return rc_neg(g, x[0]); }
static rc_tensor *b_exp(rc_graph *g, rc_tensor **x) { return rc_exp(g, x[0]); }
static rc_tensor *b_log(rc_graph *g, rc_tensor **x) { return rc_log(g, x[0]); }
static rc_tensor *b_sqrt(rc_graph *g, rc_tensor **x) { return rc_sqrt(g, x[0]); }
static rc_tensor *b_rsqrt(rc_graph *g, rc_tensor **x) { return rc_rsqrt(g, x[0]); }
static rc_tensor *b_tanh(rc_graph *g, rc_tensor **x) { return rc_tanh(g, x[0]); }
static rc_tensor *b_relu(rc_graph *g, rc_tensor **x) { return rc_relu(g, x[0]); }
static rc_tensor *b_gelu(rc_graph *g, rc_tensor **x) { return rc_gelu(g, x[0]); }
static rc_tensor *b_gelu_erf(rc_graph *g, rc_tensor **x) { return rc_gelu_erf(g, x[0]); }
static rc_tensor *b_silu(rc_graph *g, rc_tensor **x) { return rc_silu(g, x[0]); }
static rc_tensor *b_sigmoid(rc_graph *g, rc_tensor **x) { return rc_sigmoid(g, x[0]); }
static rc_tensor *b_gelu_d1(rc_graph *g, rc_tensor **x) { return rc_act(g, x[0], RC_ACT_GELU_TANH, 1); }
static rc_tensor *b_gelu_erf_d1(rc_graph *g, rc_tensor **x) { return rc_act(g, x[0], RC_ACT_GELU_ERF, 1); }
static rc_tensor *b_silu_d1(rc_graph *g, rc_tensor **x) { return rc_act(g, x[0], RC_ACT_SILU, 1); }
static rc_tensor *b_sigmoid_d1(rc_graph *g, rc_tensor **x) { return rc_act(g, x[0], RC_ACT_SIGMOID, 1); }
static rc_tensor *b_mm00(rc_graph *g, rc_tensor **x) { return rc_matmul(g, x[0], x[1], 0, 0); }
static rc_tensor *b_mm01(rc_graph *g, rc_tensor **x) { return rc_matmul(g, x[0], x[1], 0, 1); }
static rc_tensor *b_mm10(rc_graph *g, rc_tensor **x) { return rc_matmul(g, x[0], x[1], 1, 0); }
static rc_tensor *b_mm11(rc_graph *g, rc_tensor **x) { return rc_matmul(g, x[0], x[1], 1, 1); }
static rc_tensor *b_softmax(rc_graph *g, rc_tensor **x) { return rc_softmax(g, x[0]); }
static rc_tensor *b_softmax_mask(rc_graph *g, rc_tensor **x) { return rc_softmax_ext(g, x[0], x[1], 0.7, 0); }
static rc_tensor *b_softmax_causal(rc_graph *g, rc_tensor **x) { return rc_softmax_ext(g, x[0], NULL, 0.5, 1); }
static rc_tensor *b_layer_norm(rc_graph *g, rc_tensor **x) { return rc_layer_norm(g, x[0], x[1], x[2], 1e-5); }
static rc_tensor *b_layer_norm_plain(rc_graph *g, rc_tensor **x) { return rc_layer_norm(g, x[0], NULL, NULL, 1e-5); }
static rc_tensor *b_rms_norm(rc_graph *g, rc_tensor **x) { return rc_rms_norm(g, x[0], x[1], 1e-6, 0.0); }
static rc_tensor *b_rms_norm_offset(rc_graph *g, rc_tensor **x) { return rc_rms_norm(g, x[0], x[1], 1e-6, 1.0); }
static rc_tensor *b_rms_norm_plain(rc_graph *g, rc_tensor **x) { return rc_rms_norm(g, x[0], NULL, 1e-6, 0.0); }
/* a residual stream x + norm(x): x's gradient one NORM_GRAD node adding the stream's */
static rc_tensor *b_layer_norm_residual(rc_graph *g, rc_tensor **x)
{
    return rc_add(g, rc_layer_norm(g, x[0], x[1], x[2], 1e-5), x[0]);
}
static rc_tensor *b_rms_norm_residual(rc_graph *g, rc_tensor **x)
{
    return rc_add(g, rc_rms_norm(g, x[0], x[1], 1e-6, 1.0), x[0]);
}
static rc_tensor *b_embedding(rc_graph *g, rc_tensor **x) { return rc_embedding(g, x[0], x[1]); }
static rc_tensor *b_embedding_grad(rc_graph *g, rc_tensor **x) { return rc_embedding_grad(g, x[1], x[0], 7, -1); }
static rc_tensor *b_embedding_grad_pad(rc_graph *g, rc_tensor **x) { return rc_embedding_grad(g, x[1], x[0], 7, 3); }
static rc_tensor *b_rope_gptj(rc_graph *g, rc_tensor **x) { return rc_rope(g, x[0], x[1], 4, RC_ROPE_INTERLEAVED, 10000.0); }
static rc_tensor *b_rope_llama(rc_graph *g, rc_tensor **x) { return rc_rope(g, x[0], x[1], 6, RC_ROPE_HALF, 500.0); }
static rc_tensor *b_rope_inverse(rc_graph *g, rc_tensor **x) { return rc_rope_inverse(g, x[0], x[1], 4, RC_ROPE_HALF, 100.0); }
static rc_tensor *b_reshape(rc_graph *g, rc_tensor **x) { return rc_tanh(g, rc_reshape(g, x[0], 2, (int64_t[]){4, -1})); }
static rc_tensor *b_permute(rc_graph *g, rc_tensor **x) { return rc_permute(g, x[0], (int[]){2, 0, 1}); }
static rc_tensor *b_transpose(rc_graph *g, rc_tensor **x) { return rc_transpose(g, x[0], 0, -1); }
static rc_tensor *b_slice(rc_graph *g, rc_tensor **x) { return rc_slice(g, x[0], 1, 1, 3); }
static rc_tensor *b_slice_view(rc_graph *g, rc_tensor **x) { return rc_exp(g, rc_slice(g, x[0], 0, 1, 3)); }
static rc_tensor *b_pad(rc_graph *g, rc_tensor **x) { return rc_pad(g, x[0], 1, 2, 6); }
static rc_tensor *b_concat(rc_graph *g, rc_tensor **x) { return rc_concat(g, (rc_tensor *[]){x[0], x[1], x[0]}, 3, 1); }
static rc_tensor *b_split(rc_graph *g, rc_tensor **x)
{
    rc_tensor *p[3];
    if (rc_split(g, x[0], -1, 3, p))
        return NULL;
    return rc_concat(g, (rc_tensor *[]){rc_tanh(g, p[2]), p[0], rc_exp(g, p[1])}, 3, -1);
}
static rc_tensor *b_sum(rc_graph *g, rc_tensor **x) { return rc_sum(g, x[0], 1, 0); }
static rc_tensor *b_sum_keep(rc_graph *g, rc_tensor **x) { return rc_sum(g, x[0], -1, 1); }
static rc_tensor *b_mean(rc_graph *g, rc_tensor **x) { return rc_mean(g, x[0], 0, 0); }
static rc_tensor *b_max(rc_graph *g, rc_tensor **x) { return rc_max(g, x[0], 1, 0); }
static rc_tensor *b_max_last(rc_graph *g, rc_tensor **x) { return rc_max(g, x[0], -1, 1); }
static rc_tensor *b_sum_all(rc_graph *g, rc_tensor **x) { return rc_sum_all(g, rc_mul(g, x[0], x[0])); }
static rc_tensor *b_mean_all(rc_graph *g, rc_tensor **x) { return rc_mean_all(g, rc_exp(g, x[0])); }
static rc_tensor *b_expand(rc_graph *g, rc_tensor **x) { return rc_expand(g, x[0], 3, (int64_t[]){2, 3, 4}); }
static rc_tensor *b_sum_to(rc_graph *g, rc_tensor **x) { return rc_sum_to(g, x[0], 2, (int64_t[]){3, 1}); }
static rc_tensor *b_cross_entropy(rc_graph *g, rc_tensor **x) { return rc_cross_entropy(g, x[0], x[1], -100); }
static rc_tensor *b_cross_entropy_3d(rc_graph *g, rc_tensor **x) { return rc_cross_entropy(g, x[0], x[1], -100); }
static rc_tensor *b_dropout(rc_graph *g, rc_tensor **x) { return rc_dropout(g, x[0], 0.3, rc_rng_new(7)); }
/* draws times x: the draws are constants (the same at every run of a plan), no gradient of their own */
static rc_tensor *b_normal(rc_graph *g, rc_tensor **x)
{
    return rc_mul(g, x[0], rc_normal(g, RC_F64, x[0]->ndim, x[0]->shape, rc_rng_new(7), RC_RNG_RUN));
}
static rc_tensor *b_where(rc_graph *g, rc_tensor **x) { return rc_where(g, x[0], x[1], x[2]); }
static rc_tensor *b_cast(rc_graph *g, rc_tensor **x) { return rc_cast(g, rc_mul(g, rc_cast(g, x[0], RC_F32), rc_cast(g, x[1], RC_F32)), RC_F64); }
static rc_tensor *b_equal_mask(rc_graph *g, rc_tensor **x)
{
    /* equal has no gradient; multiplying by it must pass the gradient through the other factor */
    return rc_mul(g, x[0], rc_equal(g, x[1], rc_scalar(g, RC_F64, 1.0)));
}
static rc_tensor *b_mp(rc_graph *g, rc_tensor **x)
{
    /* one shard: enter and reduce are identities, and their gradients each other */
    return rc_tanh(g, rc_mp_reduce(g, rc_mul(g, rc_mp_enter(g, x[0]), x[1])));
}
static rc_tensor *b_full(rc_graph *g, rc_tensor **x) { return rc_add(g, x[0], rc_full(g, RC_F64, 1, (int64_t[]){3}, 2.5)); }

static const gc_case cases[] = {
    {"add", 2, {F64(3, 4), F64(4)}, b_add, 1, 0, 0},
    {"add broadcast both", 2, {F64(2, 1, 4), F64(3, 1)}, b_add, 1, 0, 0},
    {"sub", 2, {F64(3, 1), F64(2, 3, 4)}, b_sub, 1, 0, 0},
    {"mul", 2, {F64(2, 3, 4), F64(1, 3, 1)}, b_mul, 1, 0, 0},
    {"div", 2, {F64(3, 4), POS(3, 4)}, b_div, 1, 0, 0},
    {"div broadcast", 2, {F64(2, 3), POS(1)}, b_div, 1, 0, 0},
    {"affine", 1, {F64(5)}, b_affine, 1, 0, 0},
    {"neg", 1, {F64(5)}, b_neg, 1, 0, 0},
    {"exp", 1, {F64(2, 3)}, b_exp, 1, 0, 0},
    {"log", 1, {POS(2, 3)}, b_log, 1, 0, 0},
    {"sqrt", 1, {POS(2, 3)}, b_sqrt, 1, 0, 0},
    {"rsqrt", 1, {POS(2, 3)}, b_rsqrt, 1, 0, 0},
    {"tanh", 1, {F64(2, 3)}, b_tanh, 1, 0, 0},
    {"relu", 1, {F64(2, 5)}, b_relu, 1, 0, 0},
    {"gelu tanh", 1, {F64(2, 5)}, b_gelu, 1, 0, 0},
    {"gelu erf", 1, {F64(2, 5)}, b_gelu_erf, 1, 0, 0},
    {"silu", 1, {F64(2, 5)}, b_silu, 1, 0, 0},
    {"sigmoid", 1, {F64(2, 5)}, b_sigmoid, 1, 0, 0},
    {"gelu tanh derivative", 1, {F64(2, 5)}, b_gelu_d1, 1, 0, 0},
    {"gelu erf derivative", 1, {F64(2, 5)}, b_gelu_erf_d1, 1, 0, 0},
    {"silu derivative", 1, {F64(2, 5)}, b_silu_d1, 1, 0, 0},
    {"sigmoid derivative", 1, {F64(2, 5)}, b_sigmoid_d1, 1, 0, 0},
    {"matmul", 2, {F64(3, 4), F64(4, 5)}, b_mm00, 1, 0, 0},
    {"matmul b^T", 2, {F64(3, 4), F64(5, 4)}, b_mm01, 1, 0, 0},
    {"matmul a^T", 2, {F64(4, 3), F64(4, 5)}, b_mm10, 1, 0, 0},
    {"matmul a^T b^T", 2, {F64(4, 3), F64(5, 4)}, b_mm11, 1, 0, 0},
    {"batched matmul", 2, {F64(2, 3, 4), F64(2, 4, 5)}, b_mm00, 1, 0, 0},
    {"batched matmul b^T", 2, {F64(2, 2, 3, 4), F64(2, 2, 5, 4)}, b_mm01, 1, 0, 0},
    {"batched matmul a^T b^T", 2, {F64(2, 4, 3), F64(2, 5, 4)}, b_mm11, 1, 0, 0},
    {"matmul shared weight", 2, {F64(2, 3, 4), F64(4, 5)}, b_mm00, 1, 0, 0},
    {"matmul shared weight^T", 2, {F64(2, 3, 4), F64(5, 4)}, b_mm01, 1, 0, 0},
    {"matmul a^T shared weight", 2, {F64(2, 4, 3), F64(4, 5)}, b_mm10, 1, 0, 0},
    {"matmul a^T shared weight^T", 2, {F64(2, 4, 3), F64(5, 4)}, b_mm11, 1, 0, 0},
    {"softmax", 1, {F64(3, 5)}, b_softmax, 1, 0, 0},
    {"softmax scale+mask", 2, {F64(2, 3, 4), F64(1, 4)}, b_softmax_mask, 1, 0, 0},
    {"softmax causal", 1, {F64(2, 3, 5)}, b_softmax_causal, 1, 0, 0},
    {"layer norm", 3, {F64(3, 6), F64(6), F64(6)}, b_layer_norm, 1, 0, 0},
    {"layer norm plain", 1, {F64(2, 2, 5)}, b_layer_norm_plain, 1, 0, 0},
    {"rms norm", 2, {F64(3, 6), F64(6)}, b_rms_norm, 1, 0, 0},
    {"rms norm offset", 2, {F64(3, 6), F64(6)}, b_rms_norm_offset, 1, 0, 0},
    {"rms norm plain", 1, {F64(4, 5)}, b_rms_norm_plain, 1, 0, 0},
    {"layer norm residual", 3, {F64(3, 6), F64(6), F64(6)}, b_layer_norm_residual, 1, 0, 0},
    {"rms norm residual", 2, {F64(2, 2, 5), F64(5)}, b_rms_norm_residual, 1, 0, 0},
    {"embedding", 2, {F64(7, 3), IDS(7, 2, 4)}, b_embedding, 1, 0, 0},
    {"embedding grad", 2, {F64(2, 4, 3), IDS(7, 2, 4)}, b_embedding_grad, 1, 0, 0},
    {"embedding grad skipping padding", 2, {F64(2, 4, 3), IDS(7, 2, 4)}, b_embedding_grad_pad, 1, 0, 0},
    {"rope interleaved partial", 2, {F64(2, 3, 2, 6), IDS(50, 3)}, b_rope_gptj, 1, 0, 0},
    {"rope half", 2, {F64(1, 4, 2, 6), IDS(50, 4)}, b_rope_llama, 1, 0, 0},
    {"rope inverse", 2, {F64(2, 3, 1, 4), IDS(50, 2, 3)}, b_rope_inverse, 1, 0, 0},
    {"reshape", 1, {F64(2, 3, 4)}, b_reshape, 1, 0, 0},
    {"permute", 1, {F64(2, 3, 4)}, b_permute, 1, 0, 0},
    {"transpose", 1, {F64(2, 3, 4)}, b_transpose, 1, 0, 0},
    {"slice", 1, {F64(2, 4, 3)}, b_slice, 1, 0, 0},
    {"slice view", 1, {F64(4, 3)}, b_slice_view, 1, 0, 0},
    {"pad", 1, {F64(2, 3, 2)}, b_pad, 1, 0, 0},
    {"concat", 2, {F64(2, 2, 3), F64(2, 1, 3)}, b_concat, 1, 0, 0},
    {"split", 1, {F64(2, 6)}, b_split, 1, 0, 0},
    {"sum", 1, {F64(2, 3, 4)}, b_sum, 1, 0, 0},
    {"sum keepdim", 1, {F64(2, 3, 4)}, b_sum_keep, 1, 0, 0},
    {"mean", 1, {F64(3, 4)}, b_mean, 1, 0, 0},
    {"max", 1, {F64(2, 5, 3)}, b_max, 1, 0, 0},
    {"max last keepdim", 1, {F64(3, 6)}, b_max_last, 1, 0, 0},
    {"sum all", 1, {F64(2, 3)}, b_sum_all, 1, 0, 0},
    {"mean all", 1, {F64(2, 3)}, b_mean_all, 1, 0, 0},
    {"expand", 1, {F64(3, 1)}, b_expand, 1, 0, 0},
    {"sum_to", 1, {F64(2, 3, 4)}, b_sum_to, 1, 0, 0},
    {"cross entropy", 2, {F64(6, 5), IDS(-5, 6)}, b_cross_entropy, 1, 0, 0},
    {"cross entropy 3-d", 2, {F64(2, 3, 7), IDS(7, 2, 3)}, b_cross_entropy_3d, 1, 0, 0},
    {"dropout", 1, {F64(4, 6)}, b_dropout, 1, 0, 0},
    {"normal", 1, {F64(4, 6)}, b_normal, 1, 0, 0},
    {"where", 3, {MASK(3, 1), F64(3, 4), F64(4)}, b_where, 1, 0, 0},
    {"cast f32 round trip", 2, {F64(3, 4), F64(4)}, b_cast, 1, 1e-2, 1e-4},
    {"equal (no gradient)", 2, {F64(3, 4), MASK(3, 4)}, b_equal_mask, 1, 0, 0},
    {"model-parallel enter/reduce", 2, {F64(3, 4), F64(4)}, b_mp, 1, 0, 0},
    {"full", 1, {F64(2, 3)}, b_full, 1, 0, 0},
};

/* torch's padding_idx: lookups of the padding id give its row no gradient */
static void test_embedding_padding(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *table = rc_param(g, "table", RC_F64, 2, (int64_t[]){5, 2});
    rc_tensor *ids = rc_const(g, "ids", RC_I32, 1, (int64_t[]){4}, (int32_t[]){0, 3, 3, 1});
    rc_tensor *loss = rc_sum_all(g, rc_embedding_pad(g, table, ids, 3)), *grad;
    rc_backward(g, loss, &table, 1, &grad);
    double d[10] = {0};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &grad, 1, &err); /* the gradient does not read the table */
    CHECKF(p && rc_plan_run(p, &err) == 0 && rc_plan_read(p, grad, d, &err) == 0, "%s", err.msg);
    double want[10] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 10; i++)
        CHECKF(d[i] == want[i], "row %d: %g", i / 2, d[i]);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* d/dx sum(x * stop_gradient(x)) is x, not 2x: nothing flows through the stopped factor */
static void test_stop_gradient(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_param(g, "x", RC_F64, 1, (int64_t[]){3}), *dx;
    rc_tensor *loss = rc_sum_all(g, rc_mul(g, x, rc_stop_gradient(g, x)));
    rc_backward(g, loss, &x, 1, &dx);
    double xd[3] = {1, -2, 3}, d[3] = {0};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &dx, 1, &err);
    CHECKF(p && rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           rc_plan_read(p, dx, d, &err) == 0, "%s", err.msg);
    CHECKF(d[0] == 1 && d[1] == -2 && d[2] == 3, "%g %g %g", d[0], d[1], d[2]);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* The nodes of a norm's backward: x's gradient through x + layer_norm(x) one NORM_GRAD with
 * the stream's gradient as its addend (no add), the weight's a [C] NORM_GRAD of the rows'
 * sums (no sum_to) */
static void test_norm_nodes(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_param(g, "x", RC_F32, 2, (int64_t[]){4, 6}), *w = rc_param(g, "w", RC_F32, 1, (int64_t[]){6});
    rc_tensor *y = rc_add(g, rc_layer_norm(g, x, w, NULL, 1e-5), x), *wrt[2] = {x, w}, *d[2];
    CHECK(rc_backward(g, rc_sum_all(g, rc_mul(g, y, y)), wrt, 2, d) == 0);
    CHECKF(d[0]->op == RC_OP_NORM_GRAD && d[0]->nsrc == 4 && d[0]->src[3] && d[0]->iparam[1] == 0,
           "dx: %s of %d inputs", rc_op_name(d[0]->op), d[0]->nsrc);
    CHECKF(d[1]->op == RC_OP_NORM_GRAD && d[1]->iparam[1] == 1 && d[1]->ndim == 1 && d[1]->shape[0] == 6,
           "dw: %s", rc_op_name(d[1]->op));
    rc_graph_free(g);
}

int main(void)
{
    test_embedding_padding();
    test_stop_gradient();
    test_norm_nodes();
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const gc_case *c = &cases[i];
        double tol = c->tol > 0 ? c->tol : 1e-6;
        double e = gc_run(c, 1);
        CHECKF(e >= 0 && e <= tol, "%s: relative error %.3g (tolerance %.1g)", c->name, e, tol);
        printf("grad %-28s max rel err %.2e\n", c->name, e);
    }
    return check_summary("test_grad");
}
