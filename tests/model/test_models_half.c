/* test_models_half.c - the built-in models with bf16 and f16 weights.
 *
 *   test_models_half              self-contained checks on the tiny presets (below)
 *   test_models_half --save-bf16 PRESET DIR
 *                                 saves a perturbed tiny PRESET in bf16 to DIR and writes
 *                                 DIR/redco.safetensors: "ids" (i32 [2, 8]) and "logits"
 *                                 (redco's bf16 logits widened to f32); used by
 *                                 tests/ref/test_half_models_ref.py against transformers
 *
 * The checks, for every family (tiny presets with weights far from their initialisation):
 *   - logits with bf16 weights and activations against the f32 model on the same
 *     bf16-rounded weights: max |diff| <= TOL_BF16 * max |f32 logits| (f16: TOL_F16), with
 *     a padding mask (f32, cast inside the model) on the second row;
 *   - the loss of 16-bit logits is f32 and close to the f32 loss;
 *   - greedy generation in bf16 (the key/value cache in bf16): each token is the arg-max of
 *     the uncached bf16 forward of its prefix, or within the bf16 tolerance of it (the
 *     cache path equals the no-cache path), and each is also the f32 model's arg-max or a
 *     near-tie of it; the agreement with f32 greedy is printed; beam search and sampling
 *     in bf16 are deterministic and give ids of the vocabulary;
 *   - rc_model_save of a bf16 / f16 model writes BF16 / F16 tensors and torch_dtype, and
 *     rc_model_load(dir, RC_BF16) reads the stored words back bit for bit; rc_model_create
 *     of that directory is f32, their exact widening;
 *   - the Predictor over bf16 logits hands the output function f32 rows: the logits
 *     widened;
 *   - the parameter interface: the leaves take the storage dtype, rc_params_write rounds
 *     to nearest even, read_raw / write_raw copy words, to_dtype back to f32 is exact. */
#include "check.h"
#include "redco/pipeline.h"
#include "redco/predict.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Measured worst ratios (max |diff| / max |f32 logits|) over the five tiny families with
 * these weights: bf16 1.2e-2 (OPT, masked), f16 1.6e-3 (T5, masked): 8 against 11 bits
 * of mantissa, rounded at every op of a few layers. The bounds leave about 2x room. */
#define TOL_BF16 2.5e-2
#define TOL_F16 4e-3
/* The weights' noise. Larger noise grows the activations, and T5's unscaled attention
 * scores amplify their rounding: at 0.15 T5's bf16 logits are 16% of their scale off f32
 * (f16 2.5%, the ratio of the two mantissas: rounding, not a bug); at 0.05 all five
 * families stay within the bounds above with a margin. */
#define NOISE 0.05

static const char *const families[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
enum { B = 2, T = 8, S = 6, NP = 5, NEW = 8 };

/* a preset with every parameter + N(0, NOISE) (far from the initialisation, so every term
 * matters and greedy outputs vary), in f32 */
static rc_model *make(const char *preset, uint64_t seed, rc_error *err)
{
    rc_model *m = rc_model_create(preset, seed, err);
    rc_rng r = rc_rng_new(seed + 1000);
    for (int i = 0; m && i < rc_params_count(m->params); i++) {
        int64_t n = rc_params_tensor_numel(m->params, i);
        float *x = malloc((size_t)n * sizeof *x);
        int rc = !x || rc_params_read(m->params, i, x, err);
        for (int64_t j = 0; !rc && j < n; j++)
            x[j] += (float)(NOISE * rc_rng_normal(&r));
        rc = rc || rc_params_write(m->params, i, x, err);
        free(x);
        if (rc) {
            rc_model_free(m);
            m = NULL;
        }
    }
    return m;
}

/* the same model in dtype dt; the f32 one is the bf16/f16-rounded weights widened back */
static rc_model *make_in(const char *preset, rc_dtype dt, rc_dtype rounded, rc_error *err)
{
    rc_model *m = make(preset, 3, err);
    if (m && (rc_model_to_dtype(m, rounded, err) || rc_model_to_dtype(m, dt, err))) {
        rc_model_free(m);
        return NULL;
    }
    return m;
}

static void fill_ids(const rc_model *m, int32_t *ids, int32_t *enc)
{
    int V = m->config.vocab_size;
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < B * S; i++)
        enc[i] = (int32_t)((i * 53 + 5) % V);
}

/* logits [B, T, V] as f32 (NULL on failure, message on stderr); with_mask: row 1's first
 * two keys (decoder-only) or encoder tokens (T5) are padding. loss (when not NULL): mean
 * cross-entropy of next tokens, with its dtype in *loss_dtype. */
static float *logits_of(rc_model *m, const int32_t *ids, const int32_t *enc, int with_mask, float *loss,
                        rc_dtype *loss_dtype)
{
    int t5 = m->config.type == RC_MODEL_T5;
    int64_t V = m->config.vocab_size, K = t5 ? S : T;
    float mask[B * T];
    for (int i = 0; i < B * K; i++)
        mask[i] = i >= K && i < K + 2 ? 0.0f : 1.0f;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_const(g, "ids", RC_I32, 2, (int64_t[]){B, T}, ids);
    rc_tensor *e = t5 ? rc_const(g, "enc", RC_I32, 2, (int64_t[]){B, S}, enc) : NULL;
    rc_tensor *mk = with_mask ? rc_const(g, "mask", RC_F32, 2, (int64_t[]){B, K}, mask) : NULL;
    rc_tensor *l = rc_model_logits(g, m, x, e, mk);
    rc_tensor *outs[2] = {NULL, NULL};
    int nout = 1;
    if (l) {
        CHECKF(l->dtype == rc_params_dtype(m->params), "logits are %s, the weights %s", rc_dtype_name(l->dtype),
               rc_dtype_name(rc_params_dtype(m->params)));
        outs[0] = l->dtype == RC_F32 ? l : rc_cast(g, l, RC_F32);
    }
    if (l && loss) {
        int32_t tgt[B * T]; /* any targets but the masked positions (decoder-only) */
        for (int i = 0; i < B * T; i++)
            tgt[i] = with_mask && !t5 && i >= T && i < T + 2 ? -100 : ids[i];
        rc_tensor *tg = rc_const(g, "targets", RC_I32, 2, (int64_t[]){B, T}, tgt);
        outs[nout++] = rc_cross_entropy(g, l, tg, -100);
    }
    rc_error err = {0};
    rc_plan *p = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, nout, &err);
    float *out = malloc((size_t)(B * T * V) * sizeof *out);
    if (!p || !out || rc_plan_run(p, &err) || rc_plan_read(p, outs[0], out, &err) ||
        (loss && rc_plan_read(p, outs[1], loss, &err))) {
        fprintf(stderr, "forward %s: %s %s\n", m->config.model_type, rc_graph_error(g) ? rc_graph_error(g) : "",
                err.msg);
        free(out);
        out = NULL;
    }
    if (out && loss_dtype)
        *loss_dtype = outs[nout - 1]->dtype;
    rc_plan_free(p);
    rc_graph_free(g);
    return out;
}

/* max |a - b| / max |b| over n values (INFINITY with a NaN) */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return s > 0 ? d / s : d;
}

static void test_logits(const char *preset, rc_dtype dt, double tol)
{
    rc_error err = {0};
    rc_model *m32 = make_in(preset, RC_F32, dt, &err), *m16 = m32 ? make_in(preset, dt, dt, &err) : NULL;
    CHECKF(m32 && m16, "%s: %s", preset, err.msg);
    if (m32 && m16) {
        CHECK(rc_params_dtype(m16->params) == dt && rc_params_dtype(m32->params) == RC_F32);
        int32_t ids[B * T], enc[B * S];
        fill_ids(m32, ids, enc);
        int64_t n = B * T * (int64_t)m32->config.vocab_size;
        for (int with_mask = 0; with_mask < 2; with_mask++) {
            float l32 = 0, l16 = 0;
            rc_dtype ld = RC_F64;
            float *a = logits_of(m32, ids, enc, with_mask, &l32, NULL);
            float *b = logits_of(m16, ids, enc, with_mask, &l16, &ld);
            /* decoder-only with the mask: row 1's first two positions attend only to padding
             * (their outputs are meaningless, -1e9 in f32 and -3e4 in f16 give different
             * ones) and are left out */
            int64_t V = m32->config.vocab_size;
            int skip = with_mask && m32->config.type != RC_MODEL_T5;
            double r = a && b ? fmax(rel_diff(b, a, T * V), rel_diff(b + (T + 2 * skip) * V, a + (T + 2 * skip) * V,
                                                                   n - (T + 2 * skip) * V))
                              : INFINITY;
            printf("%s %s%s: logits max |diff| / max |f32| = %.3g (bound %.3g); loss f32 %.5f, %s %.5f\n", preset,
                   rc_dtype_name(dt), with_mask ? " masked" : "", r, tol, l32, rc_dtype_name(dt), l16);
            CHECKF(r <= tol, "%s %s%s: logits differ from f32 by %.3g of their scale (bound %.3g)", preset,
                   rc_dtype_name(dt), with_mask ? " masked" : "", r, tol);
            CHECKF(ld == RC_F32, "%s: the loss of %s logits is %s", preset, rc_dtype_name(dt), rc_dtype_name(ld));
            CHECKF(fabs(l16 - l32) <= 2e-2 * fabs(l32), "%s %s: loss %.5f vs f32 %.5f", preset, rc_dtype_name(dt),
                   l16, l32);
            free(a);
            free(b);
        }
    }
    rc_model_free(m32);
    rc_model_free(m16);
}

/* the arg-max of the last position of an uncached forward of prefix[0 .. n) (T5: the
 * decoder prefix after the prompt as encoder input), and the gap of token t below it
 * relative to the logits' scale */
static int last_argmax(rc_model *m, const int32_t *prompt, const int32_t *prefix, int64_t n, int t, double *gap)
{
    int t5 = m->config.type == RC_MODEL_T5;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_const(g, "ids", RC_I32, 2, (int64_t[]){1, n}, prefix);
    rc_tensor *e = t5 ? rc_const(g, "enc", RC_I32, 2, (int64_t[]){1, NP}, prompt) : NULL;
    rc_tensor *l = rc_model_logits(g, m, x, e, NULL);
    if (l && l->dtype != RC_F32)
        l = rc_cast(g, l, RC_F32);
    rc_error err = {0};
    rc_plan *p = rc_graph_error(g) ? NULL : rc_plan_new(g, &l, 1, &err);
    int64_t V = m->config.vocab_size;
    float *all = malloc((size_t)(n * V) * sizeof *all);
    int best = -1;
    if (p && all && !rc_plan_run(p, &err) && !rc_plan_read(p, l, all, &err)) {
        const float *v = all + (n - 1) * V;
        double scale = 0;
        best = 0;
        for (int64_t i = 0; i < V; i++) {
            best = v[i] > v[best] ? (int)i : best;
            scale = fmax(scale, fabs(v[i]));
        }
        *gap = ((double)v[best] - v[t]) / (scale > 0 ? scale : 1);
    } else {
        fprintf(stderr, "forward: %s %s\n", rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    }
    free(all);
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

static void test_greedy(const char *preset)
{
    static const int32_t prompt[NP] = {17, 3, 200, 42, 99};
    rc_error err = {0};
    rc_model *m32 = make_in(preset, RC_F32, RC_BF16, &err), *m16 = m32 ? make_in(preset, RC_BF16, RC_BF16, &err) : NULL;
    CHECKF(m32 && m16, "%s: %s", preset, err.msg);
    if (!m32 || !m16) {
        rc_model_free(m32);
        rc_model_free(m16);
        return;
    }
    rc_generate_options o = rc_generate_defaults(m16);
    o.max_new_tokens = NEW;
    o.eos_id = -1;
    rc_generate_stats st = {0};
    o.stats = &st;
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    CHECKF(rc_generate(m16, prompt, NP, &o, &b, &nb, &err) == 0 && nb == NEW, "%s bf16: %s", preset, err.msg);
    o.stats = NULL;
    CHECKF(rc_generate(m32, prompt, NP, &o, &a, &na, &err) == 0 && na == NEW, "%s f32: %s", preset, err.msg);
    int t5 = m16->config.type == RC_MODEL_T5;
    if (!t5) { /* the cache is bf16: half the bytes of f32 */
        int64_t want = 2LL * m16->config.n_layer * m16->config.n_kv_head * (NP + NEW) * m16->config.head_dim * 2;
        CHECKF(st.cache_bytes == want, "%s: bf16 cache of %lld bytes, expected %lld", preset,
               (long long)st.cache_bytes, (long long)want);
    }
    int agree = 0;
    while (a && b && agree < NEW && a[agree] == b[agree])
        agree++;
    printf("%s greedy: bf16 equals f32 for the first %d of %d tokens\n", preset, agree, NEW);
    int32_t buf[NP + NEW + 1];
    for (int64_t i = 0; a && b && i < nb; i++) { /* each bf16 token from an uncached forward */
        int64_t n = 0;
        if (t5)
            buf[n++] = m16->config.decoder_start_token_id;
        else
            for (int k = 0; k < NP; k++)
                buf[n++] = prompt[k];
        for (int64_t k = 0; k < i; k++)
            buf[n++] = b[k];
        double gap16 = 1, gap32 = 1;
        int best16 = last_argmax(m16, prompt, buf, n, b[i], &gap16);
        int best32 = last_argmax(m32, prompt, buf, n, b[i], &gap32);
        /* the cached and uncached bf16 paths round matrix products of different shapes: a
         * near-tie within a few bf16 steps (2^-8 of the scale) may go either way */
        CHECKF(best16 == b[i] || gap16 <= 1e-2, "%s step %lld: cached bf16 picked %d, uncached bf16 %d (gap %.3g)",
               preset, (long long)i, b[i], best16, gap16);
        CHECKF(best32 == b[i] || gap32 <= TOL_BF16, "%s step %lld: bf16 picked %d, f32 arg-max %d (gap %.3g)",
               preset, (long long)i, b[i], best32, gap32);
        if (best16 != b[i] || best32 != b[i])
            printf("  %s step %lld: near-tie: bf16 cached %d, uncached %d (gap %.3g), f32 %d (gap %.3g)\n", preset,
                   (long long)i, b[i], best16, gap16, best32, gap32);
    }
    /* beam search and sampling read the same f32 logits of the last position */
    int64_t V = m16->config.vocab_size;
    for (int mode = 0; mode < 2; mode++) {
        rc_generate_options q = o;
        q.num_beams = mode == 0 ? 3 : 1;
        q.temperature = mode == 1 ? 1.0 : 0.0;
        q.seed = 7;
        int32_t *x = NULL, *y = NULL;
        int64_t nx = 0, ny = 0;
        int ok = rc_generate(m16, prompt, NP, &q, &x, &nx, &err) == 0 &&
                 rc_generate(m16, prompt, NP, &q, &y, &ny, &err) == 0 && nx == ny && nx >= 1 &&
                 !memcmp(x, y, (size_t)nx * sizeof *x);
        for (int64_t i = 0; ok && i < nx; i++)
            ok = x[i] >= 0 && x[i] < V;
        CHECKF(ok, "%s bf16 %s: %s", preset, mode == 0 ? "beam search" : "sampling", err.msg);
        free(x);
        free(y);
    }
    free(a);
    free(b);
    rc_model_free(m32);
    rc_model_free(m16);
}

/* the dtype string of every tensor of DIR/model.safetensors equals want */
static int file_dtypes(const char *dir, const char *want)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(path, &err);
    int ok = f && rc_safetensors_count(f) > 0;
    for (int i = 0; ok && i < rc_safetensors_count(f); i++)
        ok = !strcmp(rc_safetensors_info(f, i)->dtype_name, want);
    rc_safetensors_close(f);
    return ok;
}

static void test_save_load(const char *preset, rc_dtype dt)
{
    rc_error err = {0};
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/redco_half_%s_%s_%d", preset, rc_dtype_name(dt), (int)getpid());
    rc_model *m = make_in(preset, dt, dt, &err);
    CHECKF(m && rc_model_save(m, dir, NULL, &err) == 0, "%s save: %s", preset, err.msg);
    CHECKF(file_dtypes(dir, dt == RC_BF16 ? "BF16" : "F16"), "%s: the saved tensors are not all %s", preset,
           rc_dtype_name(dt));
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    size_t len = 0;
    char *text = check_read_file(cfg, &len);
    CHECKF(text && strstr(text, dt == RC_BF16 ? "\"torch_dtype\": \"bfloat16\"" : "\"torch_dtype\": \"float16\""),
           "%s: config.json has no torch_dtype for %s", preset, rc_dtype_name(dt));
    free(text);
    rc_model *back = m ? rc_model_load(dir, 0, dt, &err) : NULL;
    rc_model *wide = m ? rc_model_create(dir, 0, &err) : NULL;
    CHECKF(back && wide, "%s load: %s", preset, err.msg);
    int bitwise = back && wide && rc_params_dtype(back->params) == dt && rc_params_dtype(wide->params) == RC_F32;
    for (int i = 0; bitwise && i < rc_params_count(m->params); i++) {
        int64_t n = rc_params_tensor_numel(m->params, i);
        uint16_t *x = malloc((size_t)n * 2), *y = malloc((size_t)n * 2);
        float *f = malloc((size_t)n * sizeof *f);
        bitwise = x && y && f && !rc_params_read_raw(m->params, i, x, &err) &&
                  !rc_params_read_raw(back->params, i, y, &err) && !memcmp(x, y, (size_t)n * 2) &&
                  !rc_params_read(wide->params, i, f, &err);
        for (int64_t j = 0; bitwise && j < n; j++)
            bitwise = f[j] == (dt == RC_BF16 ? rc_bf16_to_f32(x[j]) : rc_f16_to_f32(x[j]));
        free(x);
        free(y);
        free(f);
    }
    CHECKF(bitwise, "%s %s: the checkpoint does not load back bit for bit (%s)", preset, rc_dtype_name(dt), err.msg);
    /* a BF16 checkpoint asked for in bf16 is not rounded twice: saving it again is identical */
    char again[300];
    snprintf(again, sizeof again, "%s_again", dir);
    size_t la = 0, lb = 0;
    char p1[320], p2[320];
    snprintf(p1, sizeof p1, "%s/model.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model.safetensors", again);
    char *f1 = NULL, *f2 = NULL;
    if (back && rc_model_save(back, again, NULL, &err) == 0) {
        f1 = check_read_file(p1, &la);
        f2 = check_read_file(p2, &lb);
    }
    CHECKF(f1 && f2 && la == lb && !memcmp(f1, f2, la), "%s %s: saving the loaded model again changes the file",
           preset, rc_dtype_name(dt));
    free(f1);
    free(f2);
    check_rm_tree(again);
    check_rm_tree(dir);
    rc_model_free(m);
    rc_model_free(back);
    rc_model_free(wide);
}

static void test_params_interface(void)
{
    rc_error err = {0};
    rc_params *p = rc_params_new();
    CHECK(rc_params_add(p, "w", 2, (int64_t[]){2, 3}) == 0 && rc_params_add(p, "b", 1, (int64_t[]){5}) == 0);
    CHECK(rc_params_to_dtype(p, RC_BF16, &err) == 0 && rc_params_dtype(p) == RC_BF16); /* before the buffer */
    const float w[6] = {1.0f, 1.00390625f, 1.01171875f, -3.140625f, 65504.0f, 1e-3f}; /* ties, exact */
    const float b[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    CHECK(rc_params_write(p, 0, w, &err) == 0 && rc_params_write(p, 1, b, &err) == 0);
    size_t off = 0;
    CHECK(rc_params_buffer(p, 1, &off) && off == 6 * 2); /* byte offset in 16-bit elements */
    uint16_t raw[6];
    float back[11];
    CHECK(rc_params_read_raw(p, 0, raw, &err) == 0);
    int ok = 1;
    for (int i = 0; i < 6; i++)
        ok &= raw[i] == rc_f32_to_bf16(w[i]);
    CHECKF(ok, "bf16 storage holds the round-to-nearest-even words");
    CHECK(rc_params_read_all(p, back, &err) == 0);
    ok = 1;
    for (int i = 0; i < 11; i++)
        ok &= back[i] == rc_bf16_to_f32(rc_f32_to_bf16(i < 6 ? w[i] : b[i - 6]));
    CHECKF(ok, "rc_params_read_all widens the stored bf16 values");
    rc_graph *g = rc_graph_new();
    rc_tensor *leaf = rc_params_get(g, p, "b");
    CHECKF(leaf && leaf->dtype == RC_BF16, "the leaf of a bf16 parameter is bf16");
    rc_graph_free(g);
    uint16_t one[5] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0}; /* 1 .. 5 */
    CHECK(rc_params_write_raw(p, 1, one, &err) == 0 && rc_params_to_dtype(p, RC_F32, &err) == 0);
    CHECK(rc_params_read(p, 1, back, &err) == 0 && back[0] == 1 && back[4] == 5 && rc_params_dtype(p) == RC_F32);
    CHECK(rc_params_buffer(p, 1, &off) && off == 6 * 4);
    CHECK(rc_params_to_dtype(p, RC_I32, &err) == -1 && check_has(err.msg, "i32"));
    rc_params_free(p);
    CHECK(rc_model_load("tiny-gpt2", 0, RC_F64, &err) == NULL && check_has(err.msg, "f64"));
}

/* ---- the Predictor over a bf16 model: its rows are f32 ---- */

typedef struct {
    rc_model *m;
    int32_t ids[B * T];
    float *rows;                  /* [B, T, V] as the output function received them */
    int bad;
} pred_ctx;

static int pred_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    pred_ctx *c = user;
    int32_t *x = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    if (!x)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        memcpy(x + i * T, c->ids + ex[i] * T, T * sizeof *x);
    return 0;
}

static rc_tensor *pred_logits(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    pred_ctx *c = user;
    (void)params, (void)rng, (void)err;
    return rc_model_logits(g, c->m, rc_batch_input(g, b, "ids"), NULL, NULL); /* bf16 [n, T, V] */
}

static int pred_output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    pred_ctx *c = user;
    int64_t V = c->m->config.vocab_size;
    if (example < 0 || example >= B || row_len != T * V)
        return c->bad = 1, -1;
    memcpy(c->rows + example * T * V, row, (size_t)row_len * sizeof *row);
    return 0;
}

static void test_predictor(void)
{
    rc_error err = {0};
    pred_ctx c = {0};
    c.m = make_in("tiny-gpt2", RC_BF16, RC_BF16, &err);
    int32_t enc[B * S];
    float *want = NULL;
    if (c.m) {
        fill_ids(c.m, c.ids, enc);
        want = logits_of(c.m, c.ids, enc, 0, NULL, NULL);
        c.rows = calloc((size_t)(B * T * c.m->config.vocab_size), sizeof *c.rows);
    }
    rc_deployer_options dopt = {.seed = 1, .mp = 1};
    rc_deployer *d = want && c.rows ? rc_deployer_new(NULL, NULL, &dopt, &err) : NULL;
    rc_predictor *p = d ? rc_predictor_new(d, pred_collate, pred_logits, pred_output, &c, c.m->params, &err) : NULL;
    CHECKF(p && rc_predictor_run(p, B, B, &err) == 0 && !c.bad, "predictor over bf16 logits: %s", err.msg);
    CHECKF(p && !memcmp(c.rows, want, (size_t)(B * T * c.m->config.vocab_size) * sizeof *want),
           "the Predictor's f32 rows are the bf16 logits widened");
    rc_predictor_free(p);
    rc_deployer_free(d);
    free(want);
    free(c.rows);
    rc_model_free(c.m);
}

/* --save-bf16 PRESET DIR (for the transformers comparison) */
static int save_bf16(const char *preset, const char *dir)
{
    rc_error err = {0};
    rc_model *m = make_in(preset, RC_BF16, RC_BF16, &err);
    int32_t ids[B * T], enc[B * S];
    float *l = NULL;
    if (m) {
        fill_ids(m, ids, enc);
        l = logits_of(m, ids, enc, 0, NULL, NULL);
    }
    int rc = m && l ? rc_model_save(m, dir, NULL, &err) : -1;
    if (!rc) {
        char path[4200];
        snprintf(path, sizeof path, "%s/redco.safetensors", dir);
        int64_t ish[2] = {B, T}, lsh[3] = {B, T, m->config.vocab_size};
        rc_st_entry t[2] = {{"ids", "I32", 2, ish, ids}, {"logits", "F32", 3, lsh, l}};
        rc = rc_safetensors_write_entries(path, 2, t, 0, NULL, &err);
    }
    if (rc)
        fprintf(stderr, "save-bf16 %s: %s\n", preset, err.msg);
    free(l);
    rc_model_free(m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--save-bf16"))
        return save_bf16(argv[2], argv[3]);
    test_params_interface();
    test_predictor();
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        test_logits(families[i], RC_BF16, TOL_BF16);
        test_logits(families[i], RC_F16, TOL_F16);
        test_greedy(families[i]);
    }
    test_save_load("tiny-gpt2", RC_BF16);
    test_save_load("tiny-llama", RC_BF16);
    test_save_load("tiny-t5", RC_F16);
    return check_summary("test_models_half");
}
