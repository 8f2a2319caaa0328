// test_cxx_headers.cpp - every public header compiles as C++ and its functions link from
// C++ (the extern "C" guards): a C++ program records a graph, runs it, and calls into the
// model, checkpoint, tokenizer and event-file parts of the library.
#include "redco.h"
#include "redco/data.h"
#include "redco/device.h"
#include "redco/dist.h"
#include "redco/memory.h"
#include "redco/model.h"
#include "redco/pipeline.h"
#include "redco/predict.h"
#include "redco/safetensors.h"
#include "redco/shard.h"
#include "redco/tboard.h"
#include "redco/tokenizer.h"

#include <cmath>
#include <cstdio>

static int failed = 0, passed = 0;

static void check(bool ok, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        std::fprintf(stderr, "FAIL %s\n", what);
    }
}

int main()
{
    // y = 2x on four points: loss and gradient of one weight, recorded and run from C++
    float x[4] = {1, 2, 3, 4}, y[4] = {2, 4, 6, 8}, w[1] = {1};
    int64_t xs[2] = {4, 1}, ws[2] = {1, 1};
    rc_graph *g = rc_graph_new();
    rc_tensor *xi = rc_input(g, "x", RC_F32, 2, xs);
    rc_tensor *yi = rc_input(g, "y", RC_F32, 2, xs);
    rc_tensor *wp = rc_param(g, "w", RC_F32, 2, ws);
    rc_tensor *d = rc_sub(g, rc_matmul(g, xi, wp, 0, 0), yi);
    rc_tensor *loss = rc_mean_all(g, rc_mul(g, d, d));
    rc_tensor *dw = NULL;
    rc_backward(g, loss, &wp, 1, &dw);
    check(rc_graph_error(g) == NULL, "graph records without error");
    rc_tensor *outs[2] = {loss, dw};
    rc_error err = {};
    rc_plan *plan = rc_plan_new(g, outs, 2, &err);
    check(plan && rc_plan_set_input(plan, xi, x, &err) == 0 && rc_plan_set_input(plan, yi, y, &err) == 0 &&
              rc_plan_set_input(plan, wp, w, &err) == 0 && rc_plan_run(plan, &err) == 0,
          "plan runs");
    // loss = mean((x - 2x)^2) = mean(x^2) = 7.5; dloss/dw = mean(2 (w - 2) x^2) = -15
    float l = 0, g_w = 0;
    if (plan) {
        check(rc_plan_read(plan, loss, &l, &err) == 0 && std::fabs(l - 7.5f) < 1e-5f, "loss is 7.5");
        check(rc_plan_read(plan, dw, &g_w, &err) == 0 && std::fabs(g_w + 15.0f) < 1e-4f, "gradient is -15");
    }
    rc_plan_free(plan);
    rc_graph_free(g);

    rc_model *m = rc_model_create("tiny-gpt2", 1, &err);
    check(m != NULL, "a preset model is created from C++");
    rc_model_free(m);
    m = rc_model_create("no-such-preset", 1, &err);
    check(m == NULL && err.msg[0] != 0, "an unknown preset is an error with a message");

    // CRC-32C of "123456789" is 0xE3069283; masked as TFRecord does
    uint32_t crc = 0xE3069283u, masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
    check(rc_crc32c_masked("123456789", 9) == masked, "masked CRC-32C of the check string");

    rc_tokenizer *tok = rc_tokenizer_load("/nonexistent-dir", &err);
    check(tok == NULL && err.msg[0] != 0, "a missing tokenizer is an error with a message");

    std::printf("test_cxx_headers: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
