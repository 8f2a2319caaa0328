/* mpi_zero.c - AdamW's moments sharded over the data axis (ZeRO stage 1,
 * rc_train_options.zero) on every mesh of this world's size in (dp, mp) = (1,1), (2,1),
 * (3,1) (shares of uneven size, some splitting a parameter), (2,2) and (4,1):
 * - 5 steps of tiny-gpt2 with 2 micro-batches per step and clipping that clips every step
 *   (the log's gradient norms are above the limit) train the same weights with zero as
 *   without, and write the same whole moments into the checkpoint (per tensor, relative L2
 *   1e-6), for SGD and AdamW;
 * - the state each rank holds is the parameters and gradients of its model shard and its
 *   share of the moments (rc_train_result.state_bytes);
 * - resume across zero: 3 steps with zero then 2 without equal 5 without (1e-6), and the
 *   reverse; 3 + 2 with zero on the same mesh are bitwise the 5 straight; on 4 processes a
 *   checkpoint of dp 2 x mp 2 with zero resumes on dp 4 with zero (1e-4 against the run
 *   without on dp 2 x mp 2: AdamW across meshes, as mpi_train claims).
 * - bf16 weights (rc_train_options.dtype) with zero equal bf16 without on every mesh: the
 *   f32 master weights and the moments of the checkpoint per tensor within 1e-6, the 16-bit
 *   weights the same; each rank holds its share of the master beside its share of the
 *   moments; 3 + 2 steps resumed with zero are bitwise the 5 straight.
 * - ZeRO stage 2 (zero 2: the f32 gradients sharded too) equals the run without as stage 1
 *   does (weights and moments per tensor within 1e-6; SGD and AdamW), with 2 micro-batches
 *   and clipping and with one micro-batch; in bf16 with one micro-batch bitwise, with two
 *   within 1e-2 (another summation order, carried on by bf16 rounding); each rank holds its
 *   share of the f32 gradients and the reduce-scatter's window instead of all of them
 *   (state_bytes smaller than stage 1's by exactly that); in bf16, 3 + 2 steps resumed with
 *   zero 2 are bitwise the 5 straight.
 * - ZeRO stage 3 (zero 3: the weights sharded too, gathered layer by layer inside the step)
 *   equals the run without on every one-model-shard mesh as stages 1 and 2 do (weights and
 *   moments per tensor within 1e-6, SGD and AdamW, 2 micro-batches and clipping), with the
 *   layers cut by size and with --remat's blocks; bf16 with one micro-batch equals the run
 *   without (master and moments bitwise), f16 (loss-scaled) within 1e-6; 3 + 2 steps resumed
 *   with zero 3 are bitwise the 5 straight (f32, bf16, f16); each rank holds less than with zero 2 (dp > 1), and the
 *   parameters come back whole at the end of fit; the same on dp 2 x mp 2, whose AdamW
 *   weights equal one process's (--dump; CTest mpi_zero3_meshes, 1e-4 as mpi_train's); the
 *   eval loss at the end equals the run without (1e-5: every replica evaluates in step).
 *   Read from a model directory (rc_model_load: each rank reads its shards and its share
 *   from the file) zero 3 trains bitwise the weights and moments it trains from the preset
 *   whose values the directory holds, in f32 and bf16.
 * - LoRA with zero 3 (the adapters and the frozen base weights in shares, the base gathered
 *   layer by layer with its adapters) trains the adapters of LoRA without zero (SGD and
 *   AdamW, 2 micro-batches, clipping: per tensor within 1e-6), the base's values come back
 *   unchanged when fit ends, and on one model shard the base holds no buffer while the
 *   steps run (rc_params_buffer NULL in every collate); read from a model directory, on
 *   any mesh (the base given whole stays whole beside its shards with mp > 1, as without
 *   zero 3).
 * With --device D (opencl) every run is on that device (CTest mpi_zero_opencl_np2); with
 * --stage3 only the zero 3 tests run (CTests mpi_zero3_*), and without it all but them. */
#include "check.h"
#include "lm_task.h"
#include "redco/lora.h"
#include "redco/pipeline.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 8, NTOK = 2000, STEPS = 5, HALF = 3, GLOBAL = 24, ACCUM = 2 };
static const double CLIP = 0.05;  /* below every step's gradient norm (checked) */

static const char *device;        /* --device: where the runs are */
static rc_dtype dtype;            /* the weights of the runs (RC_F32 but in test_half) */
static int accum = ACCUM;         /* micro-batches per step (1 in test_one_micro) */
static int remat;                 /* rc_train_options.remat of the runs */
static int with_eval;             /* the runs evaluate (the training examples) at their end */
static char root[64];             /* the runs' workdirs */
static const char *model_dir;     /* the runs read tiny-gpt2 from this directory (else the preset) */

typedef lm_task task;

/* One run of tiny-gpt2 on mp model shards (dp: the rest) in workdir root/name, to `steps`
 * (resume: from its last checkpoint); a global batch of GLOBAL in ACCUM micro-batches.
 * Appends the weights to *w; 0 or -1. */
static int train(task *k, int mp, const char *opt, int zero, int64_t steps, const char *name, int resume,
                 check_weights *w, rc_train_result *res)
{
    rc_error err = {0};
    char wd[160];
    snprintf(wd, sizeof wd, "%s/%s", root, name);
    rc_deployer_options dopt = {.seed = 3, .mp = mp, .workdir = wd, .device = device};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->model = !d ? NULL : model_dir ? rc_model_load(model_dir, 1, dtype, &err) : rc_model_create("tiny-gpt2", 1, &err);
    rc_model *model = k->model;
    rc_trainer *t = model ? rc_trainer_new(d, lm_task_collate, lm_task_loss, k, model->params, model, &err) : NULL;
    int dp = d ? rc_deployer_mesh(d)->dp : 1;
    /* eps 1e-6 (as mpi_train): the attention key bias has no gradient but rounding noise,
     * which eps 1e-8 would turn into full steps that differ with the summation order */
    rc_train_options o = {.steps = steps, .batch_size = GLOBAL / accum / dp, .grad_accum = accum, .shuffle = 1,
                          .optimizer = opt, .lr = !strcmp(opt, "sgd") ? 0.5 : 1e-2, .weight_decay = 0.01,
                          .grad_clip = CLIP, .eps = 1e-6, .schedule = RC_SCHEDULE_CONSTANT, .log_every = 1,
                          .resume = resume, .zero = zero, .dtype = dtype, .remat = remat,
                          .no_dropout = 1 /* its masks differ with the mesh, which must not */};
    rc_train_result r = {0};
    rc_examples ex = {lm_task_count, k};
    int ok = t && rc_trainer_fit(t, &o, ex, with_eval ? &ex : NULL, &r, &err) == 0;
    CHECKF(ok, "%s: %s", name, err.msg);
    if (ok && w)
        CHECK(check_weights_add_params(w, "", k->model->params, 0) == 0);
    if (res)
        *res = r;
    rc_trainer_free(t);
    rc_model_free(k->model);
    rc_deployer_free(d);
    return ok ? 0 : -1;
}

/* rc_train_options.zero 3 (parameters sharded: not built yet) is an error naming stage 3,
 * on every rank alike, before any step */
/* every tensor of root/name/file appended to *w */
static int read_file_tensors(check_weights *w, const char *name, const char *file)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s/%s", root, name, file);
    int rc = check_weights_add_file(w, path, -1);
    CHECKF(rc == 0, "%s: cannot be read", path);
    return rc;
}

/* how far the checkpoint file `what` (optimizer or model) of runs a and b (same step) are
 * apart, the largest over tensors */
static double file_diff(const char *a, const char *b, int64_t step, const char *what)
{
    char file[64], worst[256] = "";
    snprintf(file, sizeof file, "checkpoint-%lld/%s.safetensors", (long long)step, what);
    check_weights x = {0}, y = {0};
    double e = read_file_tensors(&x, a, file) || read_file_tensors(&y, b, file)
                   ? INFINITY : check_weights_diff(&x, &y, worst, sizeof worst, NULL);
    check_weights_free(&x), check_weights_free(&y);
    return e;
}

/* the smallest gradient norm run `name` logged */
static double least_norm(const char *name)
{
    char path[300], line[1024];
    snprintf(path, sizeof path, "%s/%s/log.jsonl", root, name);
    FILE *f = fopen(path, "r");
    double least = INFINITY;
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "\"train/grad_norm\"");
        if (at) {
            least = fmin(least, atof(strchr(at, ':') + 1));
            n++;
        }
    }
    if (f)
        fclose(f);
    return n ? least : -1;
}

/* The f32 gradient floats a rank holds with zero 2 beyond its share: the reduce-scatter's
 * window, min(2^20, the largest share) floats (none on one rank); with zero 1, the rest of
 * n. */
static int64_t zero2_window(int64_t n, int dp)
{
    int64_t most = (n + dp - 1) / dp;
    return dp == 1 ? 0 : most < (1 << 20) ? most : 1 << 20;
}

/* zero 2 against the run without (the same checks as zero 1's) and its state against
 * zero 1's: smaller by the f32 gradients outside this rank's share less the window.
 * n: the model shard's elements; per: the weights' bytes per element and the state's f32
 * words per share element (moments, master) */
static void check_zero2(const char *what, int dp, int mp, int rank, int64_t n, const check_weights *wp,
                        const check_weights *w2, double em, double tol, const rc_train_result *r1,
                        const rc_train_result *r2)
{
    char worst[256] = "";
    double e = check_weights_diff(w2, wp, worst, sizeof worst, NULL);
    int64_t lo, hi;
    rc_comm_share(n, dp, rank / mp, &lo, &hi);
    int64_t saved = (n - (hi - lo) - zero2_window(n, dp)) * (int64_t)sizeof(float);
    CHECKF(tol ? e < tol && em < tol : e == 0 && em == 0, "%s dp %d x mp %d: zero 2 differs from the run without "
           "(accum %d): weights %.3g (%s), moments %.3g (%s %.0e)", what, dp, mp, accum, e, worst, em,
           tol ? "tolerance" : "bitwise", tol);
    CHECKF(r2->state_bytes == r1->state_bytes - saved && (dp < 3 || saved > 0),
           "%s dp %d x mp %d: state %lld bytes with zero 2, %lld with zero 1, expected %lld less", what, dp, mp,
           (long long)r2->state_bytes, (long long)r1->state_bytes, (long long)saved);
    if (rank == 0)
        printf("%-5s dp %d x mp %d on %s: zero 2 vs without (accum %d): worst tensor %s, rel L2 %.2e; moments %.2e; "
               "state per rank %lld with zero 1 -> %lld with zero 2\n", what, dp, mp, device ? device : "cpu", accum,
               worst, e, em, (long long)r1->state_bytes, (long long)r2->state_bytes);
}

/* with and without zero on a dp x mp mesh: the same weights and moments; the state held */
static void test_same(task *k, int dp, int mp, int rank, check_weights *adamw_plain, check_weights *adamw_zero)
{
    const char *opts[2] = {"sgd", "adamw"};
    for (int o = 0; o < 2; o++) {
        char plain[64], zero[64], worst[256] = "";
        snprintf(plain, sizeof plain, "%dx%d-%s-plain", dp, mp, opts[o]);
        snprintf(zero, sizeof zero, "%dx%d-%s-zero", dp, mp, opts[o]);
        check_weights wp = {0}, wz = {0};
        rc_train_result rp = {0}, rz = {0};
        char zero2[64];
        snprintf(zero2, sizeof zero2, "%dx%d-%s-zero2", dp, mp, opts[o]);
        check_weights w2 = {0};
        rc_train_result r2 = {0};
        if (train(k, mp, opts[o], 0, STEPS, plain, 0, &wp, &rp) || train(k, mp, opts[o], 1, STEPS, zero, 0, &wz, &rz)) {
            check_weights_free(&wp), check_weights_free(&wz);
            continue;
        }
        if (!train(k, mp, opts[o], 2, STEPS, zero2, 0, &w2, &r2))
            check_zero2(opts[o], dp, mp, rank, rp.state_bytes / (4 * (int64_t)sizeof(float)), &wp, &w2,
                        file_diff(zero2, plain, STEPS, "optimizer"), 1e-6, &rz, &r2);
        check_weights_free(&w2);
        double e = check_weights_diff(&wz, &wp, worst, sizeof worst, NULL);
        double em = file_diff(zero, plain, STEPS, "optimizer");
        double least = least_norm(plain);
        CHECKF(e < 1e-6 && em < 1e-6, "%s dp %d x mp %d: zero differs from the run without: weights %.3g (%s), moments %.3g",
               opts[o], dp, mp, e, worst, em);
        CHECKF(rank || least > CLIP, "%s dp %d x mp %d: a step's gradient norm %.4g is within the clip %.4g", opts[o],
               dp, mp, least, CLIP);
        /* the parameters and gradients of this rank's model shard, and its share of the moments */
        int64_t n = rp.state_bytes / (4 * (int64_t)sizeof(float)), lo, hi;
        rc_comm_share(n, dp, rank / mp, &lo, &hi);
        int64_t expect = 2 * (n + hi - lo) * (int64_t)sizeof(float);
        CHECKF(rz.state_bytes == expect && (dp == 1 || rz.state_bytes < rp.state_bytes),
               "dp %d x mp %d: state %lld bytes with zero, %lld without, expected %lld", dp, mp,
               (long long)rz.state_bytes, (long long)rp.state_bytes, (long long)expect);
        if (rank == 0)
            printf("%-5s dp %d x mp %d on %s: zero vs without after %d steps: worst tensor %s, rel L2 %.2e; moments %.2e; "
                   "least grad norm %.3f (clip %.2f); state per rank %lld -> %lld bytes (%.2fx)\n",
                   opts[o], dp, mp, device ? device : "cpu", STEPS, worst, e, em, least, CLIP, (long long)rp.state_bytes,
                   (long long)rz.state_bytes, (double)rp.state_bytes / (double)rz.state_bytes);
        if (o == 1) {
            *adamw_plain = wp;
            *adamw_zero = wz;
        } else {
            check_weights_free(&wp), check_weights_free(&wz);
        }
    }
}

/* zero 2 with one micro-batch a step (the gradient outputs reduce-scattered straight into
 * the share): the same as without, SGD and AdamW; zero 1's state for the comparison */
static void test_one_micro(task *k, int dp, int mp, int rank)
{
    const char *opts[2] = {"sgd", "adamw"};
    accum = 1;
    for (int o = 0; o < 2; o++) {
        char plain[64], zero[64], zero2[64];
        snprintf(plain, sizeof plain, "%dx%d-%s-micro-plain", dp, mp, opts[o]);
        snprintf(zero, sizeof zero, "%dx%d-%s-micro-zero", dp, mp, opts[o]);
        snprintf(zero2, sizeof zero2, "%dx%d-%s-micro-zero2", dp, mp, opts[o]);
        check_weights wp = {0}, w2 = {0};
        rc_train_result rp = {0}, r1 = {0}, r2 = {0};
        if (!train(k, mp, opts[o], 0, STEPS, plain, 0, &wp, &rp) && !train(k, mp, opts[o], 1, 1, zero, 0, NULL, &r1) &&
            !train(k, mp, opts[o], 2, STEPS, zero2, 0, &w2, &r2))
            check_zero2(opts[o], dp, mp, rank, rp.state_bytes / (4 * (int64_t)sizeof(float)), &wp, &w2,
                        file_diff(zero2, plain, STEPS, "optimizer"), 1e-6, &r1, &r2);
        check_weights_free(&wp), check_weights_free(&w2);
    }
    accum = ACCUM;
}

/* bf16 weights with and without zero: the same f32 master and moments (the checkpoints'),
 * the same 16-bit weights; the state each rank holds */
static void test_half(task *k, int dp, int mp, int rank)
{
    char plain[64], zero[64], worst[256] = "";
    snprintf(plain, sizeof plain, "%dx%d-bf16-plain", dp, mp);
    snprintf(zero, sizeof zero, "%dx%d-bf16-zero", dp, mp);
    check_weights wp = {0}, wz = {0};
    rc_train_result rp = {0}, rz = {0};
    dtype = RC_BF16;
    if (!train(k, mp, "adamw", 0, STEPS, plain, 0, &wp, &rp) && !train(k, mp, "adamw", 1, STEPS, zero, 0, &wz, &rz)) {
        double ew = file_diff(zero, plain, STEPS, "model"), em = file_diff(zero, plain, STEPS, "optimizer");
        double e16 = check_weights_diff(&wz, &wp, worst, sizeof worst, NULL);
        CHECKF(ew < 1e-6 && em < 1e-6 && e16 < 1e-6, "bf16 dp %d x mp %d: zero differs from the run without: master "
               "%.3g, moments %.3g, bf16 weights %.3g (%s)", dp, mp, ew, em, e16, worst);
        /* bf16 weights (2 B) and f32 gradients of the model shard; f32 moments and master of
         * the share */
        int64_t n = rp.state_bytes / 18, lo, hi;
        rc_comm_share(n, dp, rank / mp, &lo, &hi);
        int64_t expect = 6 * n + 12 * (hi - lo);
        CHECKF(rz.state_bytes == expect && rp.state_bytes == 18 * n, "bf16 dp %d x mp %d: state %lld bytes with zero, "
               "%lld without, expected %lld", dp, mp, (long long)rz.state_bytes, (long long)rp.state_bytes,
               (long long)expect);
        if (rank == 0)
            printf("bf16  dp %d x mp %d on %s: zero vs without after %d steps: master rel L2 %.2e, moments %.2e, bf16 "
                   "weights %.2e; state per rank %lld -> %lld bytes\n", dp, mp, device ? device : "cpu", STEPS, ew, em,
                   e16, (long long)rp.state_bytes, (long long)rz.state_bytes);
        /* resume with zero in bf16: HALF steps, then to STEPS, bitwise the straight run */
        char resumed[64];
        check_weights wr = {0};
        snprintf(resumed, sizeof resumed, "%dx%d-bf16-resume", dp, mp);
        if (!train(k, mp, "adamw", 1, HALF, resumed, 0, NULL, NULL) &&
            !train(k, mp, "adamw", 1, STEPS, resumed, 1, &wr, NULL)) {
            double rw = file_diff(resumed, zero, STEPS, "model"), rm = file_diff(resumed, zero, STEPS, "optimizer");
            double r16 = check_weights_diff(&wr, &wz, worst, sizeof worst, NULL);
            CHECKF(rw == 0 && rm == 0 && r16 == 0, "bf16 dp %d x mp %d with zero: %d + %d steps resumed differ from %d "
                   "straight: master %.3g, moments %.3g, bf16 weights %.3g", dp, mp, HALF, STEPS - HALF, STEPS, rw, rm,
                   r16);
        }
        check_weights_free(&wr);
        /* zero 2 in bf16: with 2 micro-batches the mean gradient is summed in another order
         * (each micro-batch's over the ranks, then the two), and a master weight a rounding
         * apart can round into another bf16 weight, which the next steps' forward passes
         * carry on: the master, moments and 16-bit weights within 1e-2 (4e-3 seen); 3 + 2
         * steps resumed bitwise the 5 straight; with one micro-batch, the run without (below) */
        char zero2[64], resumed2[64];
        snprintf(zero2, sizeof zero2, "%dx%d-bf16-zero2", dp, mp);
        snprintf(resumed2, sizeof resumed2, "%dx%d-bf16-resume2", dp, mp);
        check_weights w2 = {0};
        rc_train_result r2 = {0};
        if (!train(k, mp, "adamw", 2, STEPS, zero2, 0, &w2, &r2)) {
            double mw = file_diff(zero2, plain, STEPS, "model");
            CHECKF(mw < 1e-2, "bf16 dp %d x mp %d: zero 2's master differs from the run without by %.3g", dp, mp, mw);
            check_zero2("bf16", dp, mp, rank, n, &wp, &w2, file_diff(zero2, plain, STEPS, "optimizer"), 1e-2, &rz, &r2);
            if (!train(k, mp, "adamw", 2, HALF, resumed2, 0, NULL, NULL) &&
                !train(k, mp, "adamw", 2, STEPS, resumed2, 1, &wr, NULL)) {
                double rw = file_diff(resumed2, zero2, STEPS, "model");
                double rm = file_diff(resumed2, zero2, STEPS, "optimizer");
                double r16 = check_weights_diff(&wr, &w2, worst, sizeof worst, NULL);
                CHECKF(rw == 0 && rm == 0 && r16 == 0, "bf16 dp %d x mp %d with zero 2: %d + %d steps resumed differ "
                       "from %d straight: master %.3g, moments %.3g, bf16 weights %.3g", dp, mp, HALF, STEPS - HALF,
                       STEPS, rw, rm, r16);
            }
            check_weights_free(&wr);
        }
        check_weights_free(&w2);
        accum = 1;
        snprintf(plain, sizeof plain, "%dx%d-bf16-micro-plain", dp, mp);
        snprintf(zero2, sizeof zero2, "%dx%d-bf16-micro-zero2", dp, mp);
        /* one micro-batch: bitwise on 2 ranks, whose gradients add in either order to the same
         * f32 sum; over more, MPI's all-reduce and the reduce-scatter add them in different
         * orders, which round apart where a few values' exponents lie more than 16 apart
         * (one element of tiny-gpt2's at dp 4 where oneDNN's AMX kernels computed them) */
        double tol = dp > 2 ? 1e-6 : 0;
        if (!train(k, mp, "adamw", 0, STEPS, plain, 0, &wr, NULL) &&
            !train(k, mp, "adamw", 2, STEPS, zero2, 0, &w2, &r2)) {
            double mw = file_diff(zero2, plain, STEPS, "model");
            CHECKF(tol ? mw < tol : mw == 0, "bf16 dp %d x mp %d, one micro-batch: zero 2's master differs from the "
                   "run without by %.3g", dp, mp, mw);
            check_zero2("bf16", dp, mp, rank, n, &wr, &w2, file_diff(zero2, plain, STEPS, "optimizer"), tol, &rz, &r2);
        }
        accum = ACCUM;
        check_weights_free(&wr), check_weights_free(&w2);
    }
    dtype = RC_F32;
    check_weights_free(&wp), check_weights_free(&wz);
}

/* resume across zero on the same mesh (AdamW): HALF steps one way, then to STEPS the other */
static void test_resume(task *k, int dp, int mp, int rank, const check_weights *plain, const check_weights *zero)
{
    for (int first = 0; first < 3; first++) {
        /* first 0: without then with; 1: with then without; 2: with, then with */
        int z1 = first > 0, z2 = first != 1;
        char name[64], worst[256] = "";
        snprintf(name, sizeof name, "%dx%d-resume-%d%d", dp, mp, z1, z2);
        check_weights w = {0};
        if (!train(k, mp, "adamw", z1, HALF, name, 0, NULL, NULL) && !train(k, mp, "adamw", z2, STEPS, name, 1, &w, NULL)) {
            const check_weights *ref = z2 ? zero : plain;
            double e = check_weights_diff(&w, ref, worst, sizeof worst, NULL);
            double tol = first == 2 ? 0 : 1e-6;
            CHECKF(first == 2 ? e == 0 : e < tol, "dp %d x mp %d: %d steps %s zero, then %s zero to %d: tensor %s differs "
                   "from %d straight by %.3g", dp, mp, HALF, z1 ? "with" : "without", z2 ? "with" : "without", STEPS,
                   worst, STEPS, e);
            if (rank == 0)
                printf("dp %d x mp %d: %d steps %s zero + %d %s vs %d straight %s: worst tensor %s, rel L2 %.2e\n", dp, mp,
                       HALF, z1 ? "with" : "without", STEPS - HALF, z2 ? "with" : "without", STEPS,
                       z2 ? "with" : "without", worst, e);
        }
        check_weights_free(&w);
    }
}

/* zero 3 against the run without on a dp x mp mesh: weights (as fit returns them) and
 * moments within tol, and the state each rank holds against zero 2's */
static void check_zero3(const char *what, int dp, int mp, int rank, const char *plain, const char *zero3,
                        const check_weights *wp, const check_weights *w3, double tol, const rc_train_result *r2,
                        const rc_train_result *r3)
{
    char worst[256] = "";
    double e = check_weights_diff(w3, wp, worst, sizeof worst, NULL);
    double em = file_diff(zero3, plain, STEPS, "optimizer"), ew = file_diff(zero3, plain, STEPS, "model");
    CHECKF(tol ? e < tol && em < tol && ew < tol : e == 0 && em == 0 && ew == 0,
           "%s dp %d x mp %d: zero 3 differs from the run without (accum %d, remat %d): weights %.3g (%s), "
           "checkpoint weights %.3g, moments %.3g (%s %.0e)", what, dp, mp, accum, remat, e, worst, ew, em,
           tol ? "tolerance" : "bitwise", tol);
    /* (with remat the layers are tiny-gpt2's two blocks, and the slots hold about as much
     * as the model: zero 3 needs more layers than that to save) */
    if (r2 && !remat)
        CHECKF(dp == 1 || r3->state_bytes < r2->state_bytes, "%s dp %d x mp %d: state %lld bytes with zero 3, %lld "
               "with zero 2", what, dp, mp, (long long)r3->state_bytes, (long long)r2->state_bytes);
    if (rank == 0)
        printf("%-5s dp %d x mp %d on %s: zero 3 vs without (accum %d, remat %d): worst tensor %s, rel L2 %.2e; "
               "moments %.2e; state per rank %lld with zero 2 -> %lld with zero 3\n", what, dp, mp,
               device ? device : "cpu", accum, remat, worst, e, em, r2 ? (long long)r2->state_bytes : -1LL,
               (long long)r3->state_bytes);
}

/* The run `name` again with the model read from a directory holding the preset's weights
 * (written by rank 0): bitwise the weights w (read after fit: from final/, where fit left
 * them) and the moments and master of the run `straight`. */
/* root/tiny-gpt2-DPxMP (into dir) holding the preset's weights, written by rank 0 */
static void save_preset(char *dir, size_t size, int dp, int mp)
{
    rc_error err = {0};
    snprintf(dir, size, "%s/tiny-gpt2-%dx%d", root, dp, mp);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    rc_model *m = world.rank == 0 ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    CHECKF(world.rank || (m && rc_model_save(m, dir, NULL, &err) == 0), "%s: %s", dir, err.msg);
    rc_model_free(m);
    rc_comm_barrier(world.world, &err);
    rc_mesh_free(&world);
}

static void check_from_dir(task *k, int dp, int mp, const char *straight, const check_weights *w)
{
    char dir[128], name[80], worst[256] = "";
    save_preset(dir, sizeof dir, dp, mp);
    snprintf(name, sizeof name, "%s-dir", straight);
    check_weights wd = {0};
    model_dir = dir;
    if (!train(k, mp, "adamw", 3, STEPS, name, 0, &wd, NULL)) {
        double e = check_weights_diff(&wd, w, worst, sizeof worst, NULL);
        double em = file_diff(name, straight, STEPS, "optimizer"), ew = file_diff(name, straight, STEPS, "model");
        CHECKF(e == 0 && em == 0 && ew == 0, "%s dp %d x mp %d zero 3 read from %s differs from the preset's run: "
               "%s %.3g, master %.3g, moments %.3g", rc_dtype_name(dtype), dp, mp, dir, worst, e, ew, em);
    }
    model_dir = NULL;
    check_weights_free(&wd);
}

static int base_held;               /* collates that found the LoRA base's buffer */

static int collate_watch(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    task *k = user;
    base_held += rc_params_buffer(k->model->params, 0, NULL) != NULL;
    return lm_task_collate(out, ex, n, user, err);
}

/* LoRA (rank 4 on c_attn and c_proj) on tiny-gpt2 with ZeRO stage `zero`: the adapters after
 * `opt` into *adapters, the base weights after fit into *base; 0 or -1 */
static int train_lora(task *k, int mp, const char *opt, int zero, const char *name, check_weights *adapters,
                      check_weights *base)
{
    rc_error err = {0};
    char wd[160];
    snprintf(wd, sizeof wd, "%s/%s", root, name);
    rc_deployer_options dopt = {.seed = 3, .mp = mp, .workdir = wd, .device = device};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->model = !d ? NULL : model_dir ? rc_model_load(model_dir, 1, RC_F32, &err) : rc_model_create("tiny-gpt2", 1, &err);
    if (k->model && rc_params_to(k->model->params, rc_deployer_backend(d), &err)) /* the base on the device */
        CHECKF(0, "%s: %s", name, err.msg);
    rc_lora *l = k->model ? rc_lora_new(k->model, &(rc_lora_options){4, 8, "c_attn,c_proj"}, 2, &err) : NULL;
    rc_trainer *t = l ? rc_trainer_new(d, collate_watch, lm_task_loss, k, rc_lora_params(l), NULL, &err) : NULL;
    int dp = d ? rc_deployer_mesh(d)->dp : 1;
    rc_train_options o = {.steps = STEPS, .batch_size = GLOBAL / ACCUM / dp, .grad_accum = ACCUM, .shuffle = 1,
                          .optimizer = opt, .lr = !strcmp(opt, "sgd") ? 0.5 : 1e-2, .grad_clip = CLIP, .eps = 1e-6,
                          .schedule = RC_SCHEDULE_CONSTANT, .zero = zero, .no_dropout = 1};
    base_held = 0;
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){lm_task_count, k}, NULL, NULL, &err) == 0;
    CHECKF(ok, "%s: %s", name, err.msg);
    if (ok)
        CHECK(check_weights_add_params(adapters, "", rc_lora_params(l), 0) == 0 &&
              check_weights_add_params(base, "", k->model->params, 0) == 0);
    rc_trainer_free(t);
    rc_lora_free(l);
    rc_model_free(k->model);
    rc_deployer_free(d);
    return ok ? 0 : -1;
}

/* LoRA with zero 3 against LoRA without (see the top) */
static void test_lora3(task *k, int dp, int mp, int rank)
{
    static const char *opts[2] = {"sgd", "adamw"};
    for (int o = 0; o < 2; o++) {
        char plain[64], zero3[64], worst[256] = "", bworst[256] = "";
        snprintf(plain, sizeof plain, "%dx%d-lora-%s", dp, mp, opts[o]);
        snprintf(zero3, sizeof zero3, "%dx%d-lora-zero3-%s", dp, mp, opts[o]);
        check_weights ap = {0}, bp = {0}, a3 = {0}, b3 = {0};
        if (!train_lora(k, mp, opts[o], 0, plain, &ap, &bp)) {
            int held_plain = base_held;
            if (!train_lora(k, mp, opts[o], 3, zero3, &a3, &b3)) {
                double e = check_weights_diff(&a3, &ap, worst, sizeof worst, NULL);
                double eb = check_weights_diff(&b3, &bp, bworst, sizeof bworst, NULL);
                CHECKF(e < 1e-6 && eb == 0, "%s dp %d x mp %d: LoRA with zero 3 differs from LoRA without: adapters "
                       "%s %.3g, base %s %.3g", opts[o], dp, mp, worst, e, bworst, eb);
                CHECKF(held_plain > 0 && (mp > 1 || base_held == 0), "%s dp %d x mp %d: the base's buffer was there "
                       "in %d collates with zero 3 (%d without)", opts[o], dp, mp, base_held, held_plain);
                if (rank == 0)
                    printf("%-5s dp %d x mp %d: LoRA with zero 3 vs without: adapters' worst tensor %s, rel L2 %.2e; "
                           "base unchanged; the base's buffer in %d of the collates (%d without)\n", opts[o], dp,
                           mp, worst, e, base_held, held_plain);
            }
        }
        if (o == 1 && a3.n) { /* read from a directory: the base is never whole, on any mesh */
            char dir[128], name[80];
            check_weights ad = {0}, bd = {0};
            save_preset(dir, sizeof dir, dp, mp);
            snprintf(name, sizeof name, "%s-dir", zero3);
            model_dir = dir;
            if (!train_lora(k, mp, opts[o], 3, name, &ad, &bd)) {
                double e = check_weights_diff(&ad, &a3, worst, sizeof worst, NULL);
                double eb = check_weights_diff(&bd, &b3, bworst, sizeof bworst, NULL);
                CHECKF(e == 0 && eb == 0 && base_held == 0, "dp %d x mp %d: LoRA with zero 3 read from %s: adapters "
                       "%s %.3g, base %s %.3g from the preset's run; the base's buffer in %d collates", dp, mp, dir,
                       worst, e, bworst, eb, base_held);
            }
            model_dir = NULL;
            check_weights_free(&ad), check_weights_free(&bd);
        }
        check_weights_free(&ap), check_weights_free(&bp), check_weights_free(&a3), check_weights_free(&b3);
    }
}

/* ZeRO stage 3 on a dp x mp mesh; the AdamW run's weights appended to *dumped unless NULL
 * (to compare across meshes: --dump) */
static void test_zero3(task *k, int dp, int mp, int rank, check_weights *dumped)
{
    static const char *opts[2] = {"sgd", "adamw"};
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < 2; o++) {
            if (r && o == 0)
                continue; /* remat: AdamW alone */
            remat = r;
            char plain[64], zero2[64], zero3[64];
            snprintf(plain, sizeof plain, "%dx%d-z3plain-%s-%d", dp, mp, opts[o], r);
            snprintf(zero2, sizeof zero2, "%dx%d-z3zero2-%s-%d", dp, mp, opts[o], r);
            snprintf(zero3, sizeof zero3, "%dx%d-zero3-%s-%d", dp, mp, opts[o], r);
            check_weights wp = {0}, w3 = {0};
            rc_train_result r0 = {0}, r2 = {0}, r3 = {0};
            with_eval = o == 1; /* AdamW: evaluated at the end too (zero 3's steps run in step) */
            if (!train(k, mp, opts[o], 0, STEPS, plain, 0, &wp, &r0) &&
                !train(k, mp, opts[o], 2, STEPS, zero2, 0, NULL, &r2) &&
                !train(k, mp, opts[o], 3, STEPS, zero3, 0, &w3, &r3)) {
                CHECKF(least_norm(zero3) > CLIP, "dp %d x mp %d zero 3: a step's gradient norm %.3g is not above the "
                       "clip %.3g", dp, mp, least_norm(zero3), CLIP);
                check_zero3(opts[o], dp, mp, rank, plain, zero3, &wp, &w3, 1e-6, &r2, &r3);
                CHECKF(!with_eval || (r3.eval_tokens == r0.eval_tokens && r0.eval_tokens > 0 &&
                                      fabs(r3.eval_loss - r0.eval_loss) < 1e-5 * r0.eval_loss),
                       "dp %d x mp %d zero 3: eval loss %.8g over %lld tokens, without %.8g over %lld", dp, mp,
                       r3.eval_loss, (long long)r3.eval_tokens, r0.eval_loss, (long long)r0.eval_tokens);
            }
            with_eval = 0;
            if (o == 1 && r == 0) {
                check_from_dir(k, dp, mp, zero3, &w3);
                for (int i = 0; dumped && i < w3.n; i++) /* AdamW across meshes: 1e-4, as mpi_train */
                    check_weights_add(dumped, "zero3-adamw.", w3.names[i], w3.data[i], w3.numel[i], 1e-4);
                char resumed[64], worst[256] = ""; /* resumed: bitwise the straight run */
                check_weights wr = {0};
                snprintf(resumed, sizeof resumed, "%dx%d-zero3-resume", dp, mp);
                if (!train(k, mp, "adamw", 3, HALF, resumed, 0, NULL, NULL) &&
                    !train(k, mp, "adamw", 3, STEPS, resumed, 1, &wr, NULL)) {
                    double e = check_weights_diff(&wr, &w3, worst, sizeof worst, NULL);
                    double em = file_diff(resumed, zero3, STEPS, "optimizer");
                    CHECKF(e == 0 && em == 0, "dp %d x mp %d zero 3: %d + %d steps resumed differ from %d straight: "
                           "%s %.3g, moments %.3g", dp, mp, HALF, STEPS - HALF, STEPS, worst, e, em);
                }
                check_weights_free(&wr);
            }
            check_weights_free(&wp), check_weights_free(&w3);
        }
    remat = 0;
    /* bf16 and f16 (its loss scale), one micro-batch: the same master and moments as the
     * run without; resumed bitwise */
    static const rc_dtype halves[2] = {RC_BF16, RC_F16};
    accum = 1;
    for (int hd = 0; hd < 2; hd++) {
        dtype = halves[hd];
        const char *dn = rc_dtype_name(dtype);
        char plain[64], zero3[64], resumed[64], worst[256] = "";
        snprintf(plain, sizeof plain, "%dx%d-%s-z3plain", dp, mp, dn);
        snprintf(zero3, sizeof zero3, "%dx%d-%s-zero3", dp, mp, dn);
        snprintf(resumed, sizeof resumed, "%dx%d-%s-zero3-resume", dp, mp, dn);
        check_weights wp = {0}, w3 = {0}, wr = {0};
        rc_train_result r3 = {0};
        /* (two ranks' gradients add in either order to the same f32 sum; over 4 ranks MPI's
         * all-reduce adds them in another order than the reduce-scatter's rank order, which
         * may round differently: f16's, scaled, often do, and bf16's too where a few
         * values' exponents lie more than 16 apart (one element of tiny-gpt2's c_attn
         * weight where oneDNN's AMX kernels computed the gradients), a rounding apart) */
        double tol = dtype == RC_F16 || dp > 2 ? 1e-6 : 0;
        if (!train(k, mp, "adamw", 0, STEPS, plain, 0, &wp, NULL) && !train(k, mp, "adamw", 3, STEPS, zero3, 0, &w3, &r3)) {
            check_zero3(dn, dp, mp, rank, plain, zero3, &wp, &w3, tol, NULL, &r3);
            if (dtype == RC_BF16)
                check_from_dir(k, dp, mp, zero3, &w3);
        }
        if (!train(k, mp, "adamw", 3, HALF, resumed, 0, NULL, NULL) &&
            !train(k, mp, "adamw", 3, STEPS, resumed, 1, &wr, NULL)) {
            double e = check_weights_diff(&wr, &w3, worst, sizeof worst, NULL);
            double em = file_diff(resumed, zero3, STEPS, "optimizer"), ew = file_diff(resumed, zero3, STEPS, "model");
            CHECKF(e == 0 && em == 0 && ew == 0, "%s dp %d x mp %d zero 3: %d + %d steps resumed differ from %d "
                   "straight: %s %.3g, master %.3g, moments %.3g", dn, dp, mp, HALF, STEPS - HALF, STEPS, worst, e, ew,
                   em);
        }
        check_weights_free(&wp), check_weights_free(&w3), check_weights_free(&wr);
    }
    accum = ACCUM;
    dtype = RC_F32;
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    int P = world.size, rank = world.rank;
    int stage3 = 0; /* --stage3: the zero 3 tests alone (their own CTests), else all but them */
    const char *dump = check_dump_path(argc, argv);
    check_weights dumped = {0}; /* --dump: zero 3's AdamW weights, to compare across meshes */
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--device"))
            device = argv[i + 1];
        stage3 |= !strcmp(argv[i], "--stage3");
    }
    snprintf(root, sizeof root, "/tmp/redco-zero-XXXXXX");
    if (rank == 0 && !mkdtemp(root))
        CHECK(0);
    rc_comm_bcast(world.world, root, sizeof root, 0, &err);
    lm_task task_data;
    CHECK(lm_task_init(&task_data, T, NTOK, 11) == 0); /* 2000-4000 ids: a failure ends in a crash below */
    task *k = &task_data;
    static const int meshes[5][2] = {{1, 1}, {2, 1}, {3, 1}, {2, 2}, {4, 1}};
    for (int m = 0; m < 5; m++) {
        int dp = meshes[m][0], mp = meshes[m][1];
        if (dp * mp != P)
            continue;
        check_weights plain = {0}, zero = {0};
        if (stage3) { /* dumped: one process's run, or on 4 processes dp 2 x mp 2's */
            test_zero3(k, dp, mp, rank, P == 1 || mp == 2 ? &dumped : NULL);
            test_lora3(k, dp, mp, rank);
            continue;
        }
        test_same(k, dp, mp, rank, &plain, &zero);
        if (plain.n && zero.n)
            test_resume(k, dp, mp, rank, &plain, &zero);
        test_one_micro(k, dp, mp, rank);
        test_half(k, dp, mp, rank);
        /* a checkpoint of dp 2 x mp 2 with zero resumes on dp 4 with zero */
        if (dp == 2 && mp == 2 && plain.n) {
            char worst[256] = "";
            check_weights w = {0};
            if (!train(k, 2, "adamw", 1, HALF, "mesh-change", 0, NULL, NULL) &&
                !train(k, 1, "adamw", 1, STEPS, "mesh-change", 1, &w, NULL)) {
                double e = check_weights_diff(&w, &plain, worst, sizeof worst, NULL);
                CHECKF(e < 1e-4, "%d steps on dp 2 x mp 2 with zero, then on dp 4 with zero: tensor %s differs by %.3g",
                       HALF, worst, e);
                if (rank == 0)
                    printf("%d steps on dp 2 x mp 2 + %d on dp 4, with zero, vs %d on dp 2 x mp 2 without: worst tensor "
                           "%s, rel L2 %.2e\n", HALF, STEPS - HALF, STEPS, worst, e);
            }
            check_weights_free(&w);
        }
        check_weights_free(&plain), check_weights_free(&zero);
    }
    lm_task_free(k);
    if (dump && rank == 0)
        CHECK(check_weights_save(&dumped, dump) == 0);
    check_weights_free(&dumped);
    rc_comm_barrier(world.world, &err);
    if (rank == 0) {
        check_rm_tree(root);
        CHECK(access(root, F_OK) != 0);
    }
    char name[64];
    snprintf(name, sizeof name, "mpi_zero rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_mesh_free(&world);
    rc_dist_finalize();
    return status;
}
