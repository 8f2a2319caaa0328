/* test_check.c - the tests' own comparison of weights can fail: a run whose weights differ
 * in one element of one small tensor is caught, tensor by tensor (relative L2 norm), where
 * the former whole-model measure (max |a - b| over max |b|) let it pass; the worst tensor
 * is named; different names, sizes and NaN never pass; a zero tensor matches only
 * rounding residue; a dump survives a save and load
 * bitwise, a missing or cut dump is an error, and weights_cmp (the launcher comparisons'
 * checker, named by $REDCO_WEIGHTS_CMP) exits non-zero on a perturbed dump. */
#include "check.h"
#include "redco/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* the measure the tests used before: max |a - b| over max |b| across the whole model */
static double whole_model_diff(const check_weights *a, const check_weights *b)
{
    double num = 0, den = 0;
    for (int i = 0; i < b->n; i++)
        for (int64_t k = 0; k < b->numel[i]; k++) {
            num = fmax(num, fabs((double)a->data[i][k] - b->data[i][k]));
            den = fmax(den, fabs((double)b->data[i][k]));
        }
    return num / (den > 0 ? den : 1);
}

static int smallest_tensor(const check_weights *w)
{
    int best = 0;
    for (int i = 1; i < w->n; i++)
        best = w->numel[i] < w->numel[best] ? i : best;
    return best;
}

/* runs `tool ref other`; its exit status (-1 when it did not run or exit) */
static int run_cmp(const char *tool, const char *ref, const char *other)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(tool, tool, ref, other, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void test_dumps(const check_weights *ref, const check_weights *bad)
{
    char dir[64] = "/tmp/redco-check-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char a[128], b[128], cut[128], missing[128];
    snprintf(a, sizeof a, "%s/ref.bin", dir);
    snprintf(b, sizeof b, "%s/bad.bin", dir);
    snprintf(cut, sizeof cut, "%s/cut.bin", dir);
    snprintf(missing, sizeof missing, "%s/none.bin", dir);
    CHECK(check_weights_save(ref, a) == 0 && check_weights_save(bad, b) == 0);
    check_weights back = {0};
    CHECK(check_weights_load(&back, a) == 0);
    char worst[128];
    double tol = -1;
    CHECKF(check_weights_diff(&back, ref, worst, sizeof worst, &tol) == 0 && back.n == ref->n && tol == 1e-5,
           "a saved and loaded dump is not the same: %s, tol %g", worst, tol);
    int same = back.n == ref->n;
    for (int i = 0; same && i < ref->n; i++)
        same = !memcmp(back.data[i], ref->data[i], (size_t)ref->numel[i] * sizeof(float));
    CHECK(same);
    check_weights_free(&back);
    CHECK(check_weights_load(&back, missing) == -1 && back.n == 0);
    /* a dump cut short is an error, not fewer tensors */
    FILE *in = fopen(a, "rb"), *out = fopen(cut, "wb");
    char buf[4096];
    size_t got = in ? fread(buf, 1, sizeof buf, in) : 0;
    CHECK(out && got == sizeof buf && fwrite(buf, 1, got, out) == got);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    CHECK(check_weights_load(&back, cut) == -1 && back.n == 0);
    /* the checker the launcher comparisons run: passes equal dumps, fails a perturbed one
     * and a missing one */
    const char *tool = getenv("REDCO_WEIGHTS_CMP");
    CHECKF(tool && access(tool, X_OK) == 0, "REDCO_WEIGHTS_CMP (the weights_cmp program) is not set or not found");
    if (tool) {
        printf("weights_cmp on equal, perturbed and missing dumps (its FAIL lines below are expected):\n");
        fflush(stdout);
        CHECK(run_cmp(tool, a, a) == 0);
        CHECKF(run_cmp(tool, a, b) == 1, "weights_cmp passed a dump with one perturbed element");
        CHECK(run_cmp(tool, a, missing) == 1);
    }
    check_rm_tree(dir);
    CHECK(access(dir, F_OK) != 0);
}

int main(void)
{
    rc_error err = {0};
    rc_model *m = rc_model_create("tiny-gpt2", 1, &err);
    CHECKF(m, "%s", err.msg);
    if (!m)
        return check_summary("test_check");
    check_weights ref = {0}, run = {0};
    CHECK(check_weights_add_params(&ref, "", m->params, 1e-5) == 0);
    CHECK(check_weights_add_params(&run, "", m->params, 1e-5) == 0);
    CHECK(ref.n == rc_params_count(m->params) && ref.n > 2);
    char worst[128];
    CHECKF(check_weights_diff(&run, &ref, worst, sizeof worst, NULL) == 0, "equal weights: %s", worst);

    /* one small tensor of small values (a bias, say), one element of it changed: the
     * whole-model measure sees 2e-7 of the largest weight and passes it at 1e-5 */
    int s = smallest_tensor(&ref);
    for (int64_t k = 0; k < ref.numel[s]; k++)
        ref.data[s][k] = run.data[s][k] = 1e-7f * (float)(k % 7 + 1);
    run.data[s][0] = -run.data[s][0];
    double old = whole_model_diff(&run, &ref), tol = 0;
    double e = check_weights_diff(&run, &ref, worst, sizeof worst, &tol);
    printf("one element of %s (%lld values) negated: whole-model measure %.2e, per tensor %.2e\n", ref.names[s],
           (long long)ref.numel[s], old, e);
    CHECKF(old < 1e-5, "the old measure was expected to miss it (%.3g)", old);
    CHECKF(e > 1e-5 && !strcmp(worst, ref.names[s]) && tol == 1e-5, "per tensor: %.3g, worst %s", e, worst);
    check_weights bad = {0};
    for (int i = 0; i < run.n; i++)
        check_weights_add(&bad, "", run.names[i], run.data[i], run.numel[i], run.tol[i]);
    run.data[s][0] = ref.data[s][0];

    /* a perturbed weight in the largest tensor: one element off by 1e-3 */
    int big = 0;
    for (int i = 1; i < ref.n; i++)
        big = ref.numel[i] > ref.numel[big] ? i : big;
    run.data[big][5] += 1e-3f;
    e = check_weights_diff(&run, &ref, worst, sizeof worst, NULL);
    CHECKF(e > 1e-5 && !strcmp(worst, ref.names[big]), "one element of %s: %.3g, worst %s", ref.names[big], e, worst);
    run.data[big][5] = ref.data[big][5];
    CHECK(check_weights_diff(&run, &ref, NULL, 0, NULL) == 0);

    /* NaN, another name, a missing tensor: never equal */
    float keep = run.data[1][0];
    run.data[1][0] = NAN;
    CHECK(isinf(check_weights_diff(&run, &ref, worst, sizeof worst, NULL)) && !strcmp(worst, ref.names[1]));
    run.data[1][0] = keep;
    run.names[2][0] ^= 1;
    CHECK(isinf(check_weights_diff(&run, &ref, NULL, 0, NULL)));
    run.names[2][0] ^= 1;
    run.n--;
    CHECK(isinf(check_weights_diff(&run, &ref, NULL, 0, NULL)));
    run.n++;
    /* a zero reference tensor: rounding residue (1e-12) matches it, 1e-9 does not */
    check_weights z = {0}, res = {0}, nz = {0};
    float zeros[4] = {0, 0, 0, 0}, residue[4] = {0, 1e-12f, 0, -1e-12f}, off[4] = {0, 0, 1e-9f, 0};
    check_weights_add(&z, "", "b", zeros, 4, 1e-5);
    check_weights_add(&res, "", "b", residue, 4, 1e-5);
    check_weights_add(&nz, "", "b", off, 4, 1e-5);
    CHECK(check_weights_diff(&z, &z, NULL, 0, NULL) == 0);
    CHECK(check_weights_diff(&res, &z, NULL, 0, NULL) < 1e-5 && check_weights_diff(&nz, &z, NULL, 0, NULL) > 1e-5);
    check_weights_free(&z), check_weights_free(&res), check_weights_free(&nz);

    test_dumps(&ref, &bad);
    check_weights_free(&ref), check_weights_free(&run), check_weights_free(&bad);
    rc_model_free(m);
    return check_summary("test_check");
}
