/* test_optim.c - learning-rate schedules and the optimizers.
 *   test_optim --adamw   prints 5 AdamW steps on a fixed problem (for tests/ref) */
#include "check.h"
#include "redco.h"

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

static void adamw_trajectory(float *w, int steps, int print)
{
    float g[4], m[4] = {0}, v[4] = {0};
    rc_adam opt = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    for (int s = 1; s <= steps; s++) {
        for (int i = 0; i < 4; i++) /* gradient of sum((w - i)^2 (i + 1)) */
            g[i] = 2.0f * (w[i] - (float)i) * (float)(i + 1);
        opt.step = s;
        rc_adamw_update(w, g, m, v, 4, &opt);
        if (print)
            printf("%.9g %.9g %.9g %.9g\n", w[0], w[1], w[2], w[3]);
    }
}

static void test_optimizers(void)
{
    float w[4] = {1, -1, 0.5f, 3};
    rc_sgd_update(w, (float[]){1, 2, 3, 4}, 4, 0.5);
    CHECK(w[0] == 0.5f && w[1] == -2.0f && w[2] == -1.0f && w[3] == 1.0f);
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
