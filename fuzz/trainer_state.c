/* trainer_state.c - fuzzes the reader of trainer_state.json on --resume (through the public
 * API: rc_trainer_fit with resume = 1). Once per process a tiny GPT-2 is trained one step
 * with a workdir, which holds checkpoint-1/ (kept aside as the pristine copy); for each
 * input the workdir is made again from that copy, checkpoint-1/trainer_state.json replaced
 * by the input, and the fit resumed (for at most 2 steps). */
#define _XOPEN_SOURCE 700
#include "fuzz_util.h"
#include "redco/pipeline.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { T = 8, N = 64 };

typedef struct {
    int32_t tokens[N];
    rc_model *model;
} lm;

static lm data;
static rc_deployer *dep;
static rc_trainer *trainer;
static char work[512], pristine[512];

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return (N - 1) / T;
}

static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    lm *d = user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            ids[i * T + t] = d->tokens[examples[i] * T + t];
            targets[i * T + t] = d->tokens[examples[i] * T + t + 1];
        }
    return 0;
}

static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)params, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), -100);
}

static int fit(int resume, rc_error *err)
{
    rc_train_options o = {.steps = 2, .batch_size = 2, .optimizer = "adamw", .lr = 1e-3,
                          .save_every = 1, .resume = resume};
    rc_train_result r = {0};
    return rc_trainer_fit(trainer, &o, (rc_examples){count, &data}, NULL, &r, err);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[1 << 14];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out))
        rc = -1;
    return rc;
}

/* the workdir as the first fit left it: last_checkpoint and checkpoint-1/ */
static int workdir_restore(void)
{
    char from[1024], to[1024];
    nftw(work, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    snprintf(to, sizeof to, "%s/checkpoint-1", work);
    if (mkdir(work, 0755) || mkdir(to, 0755))
        return -1;
    snprintf(from, sizeof from, "%s/last_checkpoint", pristine);
    snprintf(to, sizeof to, "%s/last_checkpoint", work);
    if (copy_file(from, to))
        return -1;
    snprintf(from, sizeof from, "%s/checkpoint-1", pristine);
    DIR *d = opendir(from);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "trainer_state.json"))
            continue;
        snprintf(from, sizeof from, "%s/checkpoint-1/%s", pristine, e->d_name);
        snprintf(to, sizeof to, "%s/checkpoint-1/%s", work, e->d_name);
        rc = copy_file(from, to);
    }
    closedir(d);
    return rc;
}

static void teardown(void)
{
    rc_trainer_free(trainer);
    rc_model_free(data.model);
    rc_deployer_free(dep);
    nftw(work, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    nftw(pristine, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    rc_error err = {0};
    for (int i = 0; i < N; i++)
        data.tokens[i] = (int32_t)((i * 7 + i / 5) % 200);
    snprintf(work, sizeof work, "%s/run", fuzz_dir());
    snprintf(pristine, sizeof pristine, "%s/pristine", fuzz_dir());
    int argc = 1;
    char *args[] = {"fuzz_trainer_state", NULL}, **argv = args;
    rc_deployer_options dopt = {.seed = 1, .mp = 1, .workdir = work, .local = 1, .device = "cpu"};
    dep = rc_deployer_new(&argc, &argv, &dopt, &err);
    data.model = dep ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    trainer = data.model ? rc_trainer_new(dep, collate, loss, &data, data.model->params, data.model, &err) : NULL;
    rc_train_options o = {.steps = 1, .batch_size = 2, .optimizer = "adamw", .lr = 1e-3, .save_every = 1};
    rc_train_result r = {0};
    if (!trainer || rc_trainer_fit(trainer, &o, (rc_examples){count, &data}, NULL, &r, &err) ||
        rename(work, pristine)) {
        fprintf(stderr, "fuzz trainer_state: setup: %s\n", err.msg);
        abort();
    }
    atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data_in, size_t size)
{
    if (!trainer)
        setup();
    char name[64];
    if (workdir_restore())
        return 0;
    snprintf(name, sizeof name, "run/checkpoint-1/trainer_state.json");
    if (!fuzz_write(name, data_in, size))
        return 0;
    rc_error err = {0};
    int rc = fit(1, &err);
    if (getenv("FUZZ_VERBOSE")) /* what became of the input */
        fprintf(stderr, "fuzz trainer_state: %s\n", rc ? err.msg : "resumed");
    return 0;
}
