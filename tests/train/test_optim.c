/* test_optim.c - learning-rate schedules and the optimizers.
 *   test_optim --adamw   prints 5 AdamW steps on a fixed problem (for tests/ref) */
#include "check.h"
#include "redco.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b));
}

static void test_schedules(void)
{
    rc_schedule c = {RC_SCHEDULE_CONSTANT, 0.1, 0.0, 4, 100};
    CHECK(near(rc_schedule_lr(&c, 0), 0.025) && near(rc_schedule_lr(&c, 3), 0.1));
    CHECK(near(rc_schedule_lr(&c, 4), 0.1) && near(rc_schedule_lr(&c, 99), 0.1));
    rc_schedule l = {RC_SCHEDULE_LINEAR, 1.0, 0.0, 10, 110};
    CHECK(near(rc_schedule_lr(&l, 9), 1.0));
    CHECK(near(rc_schedule_lr(&l, 10), 1.0) && near(rc_schedule_lr(&l, 60), 0.5));
    CHECK(near(rc_schedule_lr(&l, 110), 0.0) && near(rc_schedule_lr(&l, 500), 0.0));
    rc_schedule k = {RC_SCHEDULE_COSINE, 1.0, 0.1, 0, 100};
    CHECK(near(rc_schedule_lr(&k, 0), 1.0) && near(rc_schedule_lr(&k, 50), 0.55));
    CHECK(near(rc_schedule_lr(&k, 100), 0.1));
}

/* A CPU buffer holding n floats (copied from host when not NULL). */
static rc_buffer *floats_new(const float *host, int64_t n)
{
    rc_error err = {0};
    rc_buffer *b = rc_buffer_new(rc_device_open("cpu", 0, NULL), (size_t)n * sizeof(float), &err);
    if (b && host && rc_buffer_upload(b, 0, host, (size_t)n * sizeof(float), &err)) {
        rc_buffer_free(b);
        b = NULL;
    }
    CHECKF(b, "%s", err.msg);
    return b;
}

/* AdamW steps on w[4] (in buffers, as a trainer keeps them); w is updated in place. */
static void adamw_trajectory(float *w, int steps, int print)
{
    float g[4];
    rc_buffer *wb = floats_new(w, 4), *gb = floats_new(NULL, 4);
    rc_buffer *mb = floats_new(NULL, 4), *vb = floats_new(NULL, 4);
    rc_adam opt = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    rc_error err = {0};
    int rc = wb && gb && mb && vb ? 0 : -1;
    for (int s = 1; s <= steps && rc == 0; s++) {
        for (int i = 0; i < 4; i++) /* gradient of sum((w - i)^2 (i + 1)) */
            g[i] = 2.0f * (w[i] - (float)i) * (float)(i + 1);
        opt.step = s;
        rc = rc_buffer_upload(gb, 0, g, sizeof g, &err) ||
             rc_adamw_update(wb, gb, mb, vb, 0, 4, &opt, &err) ||
             rc_buffer_download(wb, 0, w, 4 * sizeof(float), &err);
        if (print && rc == 0)
            printf("%.9g %.9g %.9g %.9g\n", w[0], w[1], w[2], w[3]);
    }
    CHECKF(rc == 0, "adamw: %s", err.msg);
    rc_buffer_free(wb);
    rc_buffer_free(gb);
    rc_buffer_free(mb);
    rc_buffer_free(vb);
}

static void test_optimizers(void)
{
    float w[4] = {1, -1, 0.5f, 3}, g[4] = {1, 2, 3, 4};
    rc_buffer *wb = floats_new(w, 4), *gb = floats_new(g, 4);
    rc_error err = {0};
    CHECKF(wb && gb && rc_sgd_update(wb, gb, 0, 4, 0.5, &err) == 0 &&
           rc_buffer_download(wb, 0, w, sizeof w, &err) == 0, "sgd: %s", err.msg);
    CHECK(w[0] == 0.5f && w[1] == -2.0f && w[2] == -1.0f && w[3] == 1.0f);
    /* a range of the buffers: elements [1, 3) only */
    CHECKF(wb && gb && rc_sgd_update(wb, gb, 1, 2, 1.0, &err) == 0 &&
           rc_buffer_download(wb, 0, w, sizeof w, &err) == 0, "sgd: %s", err.msg);
    CHECK(w[0] == 0.5f && w[1] == -4.0f && w[2] == -4.0f && w[3] == 1.0f);
    /* a range outside the buffers is refused, by name */
    err = (rc_error){0};
    CHECKF(rc_sgd_update(wb, gb, 2, 3, 1.0, &err) == -1 && check_has(err.msg, "sgd"), "%s", err.msg);
    rc_buffer_free(wb);
    rc_buffer_free(gb);
    /* the first AdamW step moves every weight by about lr against its gradient's sign */
    float a[4] = {1, -1, 0.5f, 3};
    adamw_trajectory(a, 1, 0);
    CHECK(fabsf(a[0] - (1 * (1 - 0.001f) - 0.1f)) < 1e-5f);
    CHECK(fabsf(a[1] - (-1 * (1 - 0.001f) + 0.1f)) < 1e-5f);
    /* and it converges */
    float b[4] = {1, -1, 0.5f, 3};
    adamw_trajectory(b, 2000, 0);
    for (int i = 0; i < 4; i++)
        CHECKF(fabsf(b[i] - (float)i) < 0.05f, "w[%d] = %g", i, b[i]);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--adamw")) {
        float w[4] = {1, -1, 0.5f, 3};
        adamw_trajectory(w, 5, 1);
        return 0;
    }
    test_schedules();
    test_optimizers();
    return check_summary("test_optim");
}
