/* test_errors.c - bad shapes, dtypes, indices and arguments give an error code and a
 * message naming the op and the shapes; nothing aborts. */
#include "check.h"
#include "redco.h"

#include <stdio.h>
#include <string.h>

/* Builds one failing op on a fresh graph; checks the code and that the message has every part. */
#define EXPECT_GRAPH_ERROR(g, code, ...)                                                        \
    do {                                                                                        \
        const char *parts_[] = {__VA_ARGS__};                                                   \
        CHECKF(rc_graph_error_code(g) == (code), "code %d, message: %s", rc_graph_error_code(g), \
               rc_graph_error(g));                                                              \
        for (size_t i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; i_++)                        \
            CHECKF(check_has(rc_graph_error(g), parts_[i_]), "'%s' not in: %s", parts_[i_],           \
                   rc_graph_error(g));                                                          \
    } while (0)

static rc_tensor *f32(rc_graph *g, int ndim, const int64_t *shape)
{
    return rc_input(g, "x", RC_F32, ndim, shape);
}

static void test_shape_errors(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *y = rc_add(g, f32(g, 2, (int64_t[]){2, 3}), f32(g, 1, (int64_t[]){4}));
    CHECK(y == NULL);
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "add", "[2, 3]", "[4]");
    /* the first error sticks: later calls return NULL and keep the message */
    CHECK(rc_tanh(g, f32(g, 1, (int64_t[]){3})) == NULL);
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "add");
    rc_graph_free(g);

    /* a shape past what can be addressed: refused when recorded, not overflowed */
    g = rc_graph_new();
    rc_tensor *huge = f32(g, 3, (int64_t[]){1 << 20, 1 << 20, 1 << 20});
    CHECK(huge == NULL);
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "leaf", "dimension 2", "2^48");
    rc_graph_free(g);
    g = rc_graph_new(); /* the product of two ops' shapes: an outer product past 2^48 */
    rc_tensor *col = f32(g, 2, (int64_t[]){(int64_t)1 << 25, 1}), *row = f32(g, 2, (int64_t[]){1, (int64_t)1 << 25});
    CHECK(col && row && !rc_mul(g, col, row));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "mul", "2^48");
    rc_graph_free(g);

    /* slice and pad keep their offsets in 32-bit parameters: past 2^31 refused, not cut */
    g = rc_graph_new();
    rc_tensor *flat = f32(g, 1, (int64_t[]){(int64_t)1 << 32});
    CHECK(flat && !rc_slice(g, flat, 0, 0, ((int64_t)1 << 31) + 5));
    EXPECT_GRAPH_ERROR(g, RC_ERR_UNSUPPORTED, "slice", "2147483653", "2^31");
    rc_graph_free(g);
    g = rc_graph_new();
    CHECK(!rc_pad(g, f32(g, 1, (int64_t[]){4}), 0, (int64_t)1 << 31, ((int64_t)1 << 31) + 4));
    EXPECT_GRAPH_ERROR(g, RC_ERR_UNSUPPORTED, "pad", "2147483648", "2^31");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_matmul(g, f32(g, 2, (int64_t[]){3, 4}), f32(g, 2, (int64_t[]){5, 6}), 0, 0));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "matmul", "[3, 4]", "[5, 6]", "4 vs 5");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_matmul(g, f32(g, 3, (int64_t[]){2, 3, 4}), f32(g, 3, (int64_t[]){3, 4, 5}), 0, 0));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "matmul", "batch", "[2, 3, 4]", "[3, 4, 5]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_reshape(g, f32(g, 2, (int64_t[]){2, 3}), 2, (int64_t[]){4, 2}));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "reshape", "[2, 3]", "[4, 2]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_slice(g, f32(g, 2, (int64_t[]){2, 3}), 1, 1, 4));
    EXPECT_GRAPH_ERROR(g, RC_ERR_INDEX, "slice", "[1, 4)", "[2, 3]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_sum(g, f32(g, 2, (int64_t[]){2, 3}), 2, 0));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "sum", "axis 2", "[2, 3]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_permute(g, f32(g, 3, (int64_t[]){2, 3, 4}), (int[]){0, 0, 1}));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "permute", "[2, 3, 4]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_layer_norm(g, f32(g, 2, (int64_t[]){2, 8}), f32(g, 1, (int64_t[]){6}), NULL, 1e-5));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "layer_norm", "weight", "[6]", "[2, 8]");
    rc_graph_free(g);

    g = rc_graph_new();
    rc_tensor *pos = rc_input(g, "pos", RC_I32, 1, (int64_t[]){4});
    CHECK(!rc_rope(g, f32(g, 4, (int64_t[]){1, 4, 2, 6}), pos, 7, RC_ROPE_HALF, 1e4));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "rope", "7", "[1, 4, 2, 6]");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_cross_entropy(g, f32(g, 2, (int64_t[]){4, 10}), rc_input(g, "t", RC_I32, 1, (int64_t[]){5}), -100));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "cross_entropy", "[5]", "[4, 10]");
    rc_graph_free(g);

    g = rc_graph_new();
    rc_tensor *parts[2] = {f32(g, 2, (int64_t[]){2, 3}), f32(g, 2, (int64_t[]){3, 3})};
    CHECK(!rc_concat(g, parts, 2, 1));
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "concat", "part 1", "[3, 3]", "[2, 3]");
    rc_graph_free(g);
}

static void test_dtype_and_arity_errors(void)
{
    rc_graph *g = rc_graph_new();
    CHECK(!rc_add(g, f32(g, 1, (int64_t[]){3}), rc_input(g, "d", RC_F64, 1, (int64_t[]){3})));
    EXPECT_GRAPH_ERROR(g, RC_ERR_DTYPE, "add", "f32", "f64");
    rc_graph_free(g);

    g = rc_graph_new();
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 1, (int64_t[]){3});
    CHECK(!rc_exp(g, ids));
    EXPECT_GRAPH_ERROR(g, RC_ERR_DTYPE, "exp", "i32");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_embedding(g, f32(g, 2, (int64_t[]){5, 4}), f32(g, 1, (int64_t[]){3})));
    EXPECT_GRAPH_ERROR(g, RC_ERR_DTYPE, "embedding", "ids", "f32");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_param(g, "w", RC_I32, 1, (int64_t[]){3}));
    EXPECT_GRAPH_ERROR(g, RC_ERR_DTYPE, "param", "'w'", "i32");
    rc_graph_free(g);

    /* wrong number of inputs: a missing (NULL) input, and concat with none or too many */
    g = rc_graph_new();
    CHECK(!rc_mul(g, f32(g, 1, (int64_t[]){3}), NULL));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "NULL input");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_concat(g, NULL, 0, 0));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "concat", "0 parts");
    rc_graph_free(g);

    g = rc_graph_new();
    rc_tensor *many[RC_MAX_SRC + 1];
    for (int i = 0; i <= RC_MAX_SRC; i++)
        many[i] = f32(g, 1, (int64_t[]){2});
    CHECK(!rc_concat(g, many, RC_MAX_SRC + 1, 0));
    EXPECT_GRAPH_ERROR(g, RC_ERR_ARG, "concat", "9 parts");
    rc_graph_free(g);

    g = rc_graph_new();
    CHECK(!rc_act(g, f32(g, 1, (int64_t[]){2}), RC_ACT_GELU_TANH, 3));
    EXPECT_GRAPH_ERROR(g, RC_ERR_UNSUPPORTED, "act", "order 3");
    rc_graph_free(g);

    /* a node of another graph */
    rc_graph *g1 = rc_graph_new(), *g2 = rc_graph_new();
    rc_tensor *a = f32(g1, 1, (int64_t[]){2});
    for (int i = 0; i < 3; i++)
        f32(g1, 1, (int64_t[]){2});
    CHECK(!rc_tanh(g2, a));
    EXPECT_GRAPH_ERROR(g2, RC_ERR_ARG, "another graph");
    rc_graph_free(g1);
    rc_graph_free(g2);
}

static void test_backward_errors(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_param(g, "x", RC_F32, 1, (int64_t[]){3}), *gx;
    CHECK(rc_backward(g, rc_tanh(g, x), &x, 1, &gx) == -1);
    EXPECT_GRAPH_ERROR(g, RC_ERR_SHAPE, "backward", "scalar", "[3]");
    rc_graph_free(g);

    /* third order of an activation does not exist: an error, not a wrong answer */
    g = rc_graph_new();
    x = rc_param(g, "x", RC_F32, 1, (int64_t[]){3});
    rc_tensor *y = rc_sum_all(g, rc_act(g, x, RC_ACT_SILU, 2));
    CHECK(rc_backward(g, y, &x, 1, &gx) == -1);
    EXPECT_GRAPH_ERROR(g, RC_ERR_UNSUPPORTED, "act", "third order");
    rc_graph_free(g);
}

static void test_run_errors(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *table = f32(g, 2, (int64_t[]){5, 2});
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 1, (int64_t[]){3});
    rc_tensor *y = rc_embedding(g, table, ids);
    float tdata[10] = {0};
    int32_t idata[3] = {1, 10, 2};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    CHECK(p != NULL);
    /* a leaf whose values were never set is named */
    CHECK(rc_plan_run(p, &err) == -1);
    CHECKF(check_has(err.msg, "'x'") && check_has(err.msg, "no data"), "%s", err.msg);
    /* ... also when the other one was set */
    err = (rc_error){0};
    CHECKF(p && rc_plan_set_input(p, ids, idata, &err) == 0, "%s", err.msg);
    CHECK(rc_plan_run(p, &err) == -1);
    CHECKF(check_has(err.msg, "'x'") && check_has(err.msg, "no data"), "%s", err.msg);
    err = (rc_error){0};
    CHECKF(p && rc_plan_set_input(p, table, tdata, &err) == 0, "%s", err.msg);
    CHECK(rc_plan_run(p, &err) == -1);
    CHECKF(err.code == RC_ERR_INDEX && check_has(err.msg, "embedding") && check_has(err.msg, "10"), "%s", err.msg);
    idata[1] = 4;
    err = (rc_error){0};
    CHECKF(p && rc_plan_set_input(p, ids, idata, &err) == 0 && rc_plan_run(p, &err) == 0, "%s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);

    g = rc_graph_new();
    rc_tensor *logits = f32(g, 2, (int64_t[]){2, 3});
    rc_tensor *t = rc_input(g, "t", RC_I32, 1, (int64_t[]){2});
    rc_tensor *l = rc_cross_entropy(g, logits, t, -100);
    float ldata[6] = {0};
    int32_t tdat[2] = {0, 3};
    p = rc_plan_new(g, &l, 1, &err);
    err = (rc_error){0};
    CHECKF(p && rc_plan_set_input(p, logits, ldata, &err) == 0 && rc_plan_set_input(p, t, tdat, &err) == 0,
           "%s", err.msg);
    CHECK(p && rc_plan_run(p, &err) == -1);
    CHECKF(err.code == RC_ERR_INDEX && check_has(err.msg, "cross_entropy") && check_has(err.msg, "3"), "%s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);

    /* a plan of a failed graph reports the graph's error */
    g = rc_graph_new();
    y = rc_add(g, f32(g, 1, (int64_t[]){2}), f32(g, 1, (int64_t[]){3}));
    rc_tensor *z = f32(g, 1, (int64_t[]){2});
    err = (rc_error){0};
    CHECK(rc_plan_new(g, &z, 1, &err) == NULL);
    CHECKF(check_has(err.msg, "add") && check_has(err.msg, "[3]"), "%s", err.msg);
    rc_graph_free(g);
}

int main(void)
{
    test_shape_errors();
    test_dtype_and_arity_errors();
    test_backward_errors();
    test_run_errors();
    return check_summary("test_errors");
}
