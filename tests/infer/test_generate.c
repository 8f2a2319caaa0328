/* test_generate.c - text generation with the built-in models.
 *
 *   test_generate                 self-contained checks on the tiny presets (below)
 *   test_generate --generate DIR --ids 1,2,3 --max-new N [--beams K] [--eos E]
 *                 [--temperature T --top-k K --top-p P --seed S]
 *                                 loads the model directory DIR (rc_model_create) and
 *                                 prints the new token ids, space-separated, on one line
 *                                 of stdout (used by tests/ref/test_generate_ref.py);
 *                                 --eos -1 (the default) means no EOS token
 *
 * The checks: greedy decoding with the key/value cache picks, step by step, the arg-max of
 * an uncached full forward over the prefix so far (each decoder family, and T5 against its
 * full encoder-decoder forward); sampling is deterministic for a seed and differs across
 * seeds; top-k = 1 and a vanishing top-p equal greedy; top-k = 3 only ever picks one of the
 * three most likely tokens; a draw walks the kept tokens in id order, so logits that differ
 * in their last bits (two near-equal ones swapping their order) draw the same token for a
 * seed, and the draws' frequencies follow the probabilities (rci_pick_sample, with and
 * without top-k); EOS stops generation and is included; max_new_tokens bounds
 * the output; a batch of prompts decodes as the prompts one by one (greedy); beam search
 * is deterministic and, over two steps, finds the best pair among the beams' first tokens
 * (T5 and GPT-2); bad requests are errors naming the value; the decode steps' phase times
 * (rc_generate_stats) count every step after the prompt's, and timing them and their
 * kernels changes no token. */
#include "check.h"
#include "infer.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const decoders[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj"};

enum { NP = 5, NEW = 8 };
static const int32_t prompt[NP] = {17, 3, 200, 42, 99};

/* logits of the last position of a full forward, no cache: decoder-only over ids [1, n];
 * T5 with the prompt as encoder input and ids as decoder input */
static float *full_forward_last(rc_model *m, const int32_t *ids, int64_t n)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_const(g, "ids", RC_I32, 2, (int64_t[]){1, n}, ids);
    rc_tensor *enc = m->config.type == RC_MODEL_T5 ? rc_const(g, "enc", RC_I32, 2, (int64_t[]){1, NP}, prompt) : NULL;
    rc_tensor *l = rc_model_logits(g, m, x, enc, NULL);
    rc_error err = {0};
    rc_plan *p = rc_graph_error(g) ? NULL : rc_plan_new(g, &l, 1, &err);
    float *out = NULL;
    int64_t V = m->config.vocab_size;
    float *all = malloc((size_t)(n * V) * sizeof *all);
    if (p && all && rc_plan_run(p, &err) == 0 && rc_plan_read(p, l, all, &err) == 0) {
        out = malloc((size_t)V * sizeof *out);
        memcpy(out, all + (n - 1) * V, (size_t)V * sizeof *out);
    } else {
        fprintf(stderr, "forward: %s %s\n", rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    }
    free(all);
    rc_plan_free(p);
    rc_graph_free(g); /* a new graph at the same address must not see stale leaves */
    return out;
}

/* a preset with weights far from the initialisation (every parameter + N(0, 0.15)), so
 * greedy outputs vary instead of repeating one token and near-ties are rare */
static rc_model *make(const char *preset, uint64_t seed, rc_error *err)
{
    rc_model *m = rc_model_create(preset, seed, err);
    if (!m)
        return NULL;
    float *w = check_params_flat(m->params);
    size_t at;
    rc_buffer *buf = rc_params_buffer(m->params, 0, &at);
    rc_rng r = rc_rng_new(seed + 1000);
    for (int64_t i = 0; w && i < rc_params_numel(m->params); i++)
        w[i] += (float)(0.15 * rc_rng_normal(&r));
    if (!w || !buf || rc_buffer_upload(buf, at, w, (size_t)rc_params_numel(m->params) * sizeof *w, err)) {
        free(w);
        rc_model_free(m);
        return NULL;
    }
    free(w);
    return m;
}

static int argmax(const float *l, int64_t V)
{
    int best = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[best])
            best = (int)i;
    return best;
}

/* rank of token t among the logits (0: the largest) */
static int rank_of(const float *l, int64_t V, int t)
{
    int r = 0;
    for (int64_t i = 0; i < V; i++)
        r += l[i] > l[t];
    return r;
}

static double log_prob(const float *l, int64_t V, int t)
{
    double mx = l[0], s = 0;
    for (int64_t i = 1; i < V; i++)
        mx = fmax(mx, l[i]);
    for (int64_t i = 0; i < V; i++)
        s += exp(l[i] - mx);
    return l[t] - mx - log(s);
}

static int32_t *gen(rc_model *m, const rc_generate_options *o, int64_t *n, rc_error *err)
{
    int32_t *out = NULL;
    *n = 0;
    if (rc_generate(m, prompt, NP, o, &out, n, err))
        return NULL;
    return out;
}

static int same(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    return a && b && na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
}

/* the decoder prefix of step i: the prompt then the tokens so far (T5: start token then
 * the tokens so far) */
static int64_t prefix(const rc_model *m, const int32_t *toks, int64_t i, int32_t *buf)
{
    int64_t n = 0;
    if (m->config.type == RC_MODEL_T5)
        buf[n++] = m->config.decoder_start_token_id;
    else
        for (int k = 0; k < NP; k++)
            buf[n++] = prompt[k];
    for (int64_t k = 0; k < i; k++)
        buf[n++] = toks[k];
    return n;
}

/* m's defaults generating NEW tokens, no end-of-sequence id */
static rc_generate_options options_new_tokens(const rc_model *m)
{
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = NEW;
    o.eos_id = -1;
    return o;
}

/* greedy with the cache == arg-max of the uncached forward, step by step (a near-tie of
 * the two best logits within 1e-5 would be accepted, and is reported) */
static void test_greedy_matches_forward(const char *preset)
{
    rc_error err = {0};
    rc_model *m = make(preset, 11, &err);
    CHECKF(m, "%s: %s", preset, err.msg);
    if (!m)
        return;
    rc_generate_options o = options_new_tokens(m);
    int64_t n;
    int32_t *toks = gen(m, &o, &n, &err);
    CHECKF(toks && n == NEW, "%s: %s (n %lld)", preset, err.msg, (long long)n);
    int32_t buf[NP + NEW + 1];
    int64_t V = m->config.vocab_size;
    for (int64_t i = 0; toks && i < n; i++) {
        float *l = full_forward_last(m, buf, prefix(m, toks, i, buf));
        CHECKF(l, "%s step %lld: forward failed", preset, (long long)i);
        if (!l)
            break;
        int best = argmax(l, V);
        double gap = (double)l[best] - l[toks[i]];
        CHECKF(toks[i] == best || gap < 1e-5, "%s step %lld: generated %d, arg-max %d (gap %.3g)", preset,
               (long long)i, toks[i], best, gap);
        if (toks[i] != best)
            fprintf(stderr, "note: %s step %lld: near-tie %d vs %d (gap %.3g)\n", preset, (long long)i, toks[i], best, gap);
        free(l);
    }
    /* batch of three prompts (the second and third shifted) == each alone */
    int32_t batch[3 * NP];
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < NP; k++)
            batch[b * NP + k] = (prompt[k] + 37 * b) % (int32_t)V;
    int32_t *bout = NULL;
    int64_t bn[3];
    CHECKF(rc_generate_batch(m, batch, 3, NP, &o, &bout, bn, &err) == 0, "%s batch: %s", preset, err.msg);
    for (int b = 0; bout && b < 3; b++) {
        int32_t *one = NULL;
        int64_t n1 = 0;
        CHECK(rc_generate(m, batch + b * NP, NP, &o, &one, &n1, &err) == 0);
        CHECKF(same(one, n1, bout + b * NEW, bn[b]), "%s: batch row %d differs from its prompt alone", preset, b);
        free(one);
    }
    free(bout);
    free(toks);
    rc_model_free(m);
}

static void test_sampling(const char *preset)
{
    rc_error err = {0};
    rc_model *m = make(preset, 5, &err);
    if (!m) {
        CHECKF(0, "%s: %s", preset, err.msg);
        return;
    }
    int64_t V = m->config.vocab_size;
    rc_generate_options g = rc_generate_defaults(m);
    g.max_new_tokens = NEW;
    g.eos_id = -1;
    rc_generate_options s = g;
    s.temperature = 1.0;
    s.seed = 7;
    int64_t ng, n1, n2, n3, nk, np;
    int32_t *greedy = gen(m, &g, &ng, &err);
    int32_t *a = gen(m, &s, &n1, &err), *b = gen(m, &s, &n2, &err);
    s.seed = 8;
    int32_t *c = gen(m, &s, &n3, &err);
    CHECKF(greedy && a && b && c, "%s: %s", preset, err.msg);
    CHECKF(same(a, n1, b, n2), "%s: the same seed gave different samples", preset);
    CHECKF(!same(a, n1, c, n3), "%s: seeds 7 and 8 gave the same %d samples", preset, NEW);
    /* top-k 1 and a vanishing top-p keep only the most likely token: greedy */
    rc_generate_options k1 = s;
    k1.top_k = 1;
    int32_t *tk = gen(m, &k1, &nk, &err);
    CHECKF(same(tk, nk, greedy, ng), "%s: top-k 1 differs from greedy", preset);
    rc_generate_options p0 = s;
    p0.top_p = 1e-9;
    int32_t *tp = gen(m, &p0, &np, &err);
    CHECKF(same(tp, np, greedy, ng), "%s: top-p 1e-9 differs from greedy", preset);
    /* top-k 3 (with top-p 0.9 and temperature 0.7): every token among the 3 most likely of
     * the uncached forward of its prefix */
    rc_generate_options k3 = s;
    k3.top_k = 3;
    k3.top_p = 0.9;
    k3.temperature = 0.7;
    int64_t n3k;
    int32_t *t3 = gen(m, &k3, &n3k, &err);
    int32_t buf[NP + NEW + 1];
    for (int64_t i = 0; t3 && i < n3k; i++) {
        float *l = full_forward_last(m, buf, prefix(m, t3, i, buf));
        CHECKF(l && rank_of(l, V, t3[i]) < 3, "%s: top-k 3 picked token %d of rank %d at step %lld", preset,
               t3[i], l ? rank_of(l, V, t3[i]) : -1, (long long)i);
        free(l);
    }
    free(greedy), free(a), free(b), free(c), free(tk), free(tp), free(t3);
    rc_model_free(m);
}

/* The draw over three tokens whose last two logits are near-equal, then the same two
 * swapped by an ulp (their order of probability swaps): the same token for every seed,
 * where walking them in order of probability would give the other whenever the draw falls
 * in the first one's share; the frequencies over the seeds near the probabilities, and
 * with top-k 2 token 0 never */
static void test_sample_order(void)
{
    enum { V = 3, SEEDS = 4000 };
    float one = 1.0f, up = nextafterf(1.0f, 2.0f);
    const float l[V] = {0.0f, one, up}, swapped[V] = {0.0f, up, one};
    rc_generate_options o = {.temperature = 1.0, .top_p = 1.0, .num_beams = 1};
    rci_scored work[V];
    int same_all = 1, count[V] = {0}, k2_zero = 0;
    for (int s = 0; s < SEEDS; s++) {
        rc_rng key = rc_rng_new((uint64_t)s);
        int32_t a = rci_pick_sample(l, V, &o, key, work), b = rci_pick_sample(swapped, V, &o, key, work);
        same_all &= a == b;
        count[a]++;
        rc_generate_options k2 = o;
        k2.top_k = 2;
        k2_zero += rci_pick_sample(l, V, &k2, key, work) == 0;
    }
    double e = exp(1.0), p0 = 1 / (1 + 2 * e), p1 = e / (1 + 2 * e);
    CHECKF(same_all, "sampling: logits an ulp apart drew different tokens for a seed");
    CHECKF(fabs(count[0] / (double)SEEDS - p0) < 0.03 && fabs(count[1] / (double)SEEDS - p1) < 0.03 &&
           fabs(count[2] / (double)SEEDS - p1) < 0.03, "sampling: frequencies %d %d %d of %d, probabilities "
           "%.3f %.3f %.3f", count[0], count[1], count[2], SEEDS, p0, p1, p1);
    CHECKF(k2_zero == 0, "sampling: top-k 2 drew the least likely token %d times", k2_zero);
    printf("sampling: %d seeds draw the same token from logits an ulp apart; frequencies %.3f %.3f %.3f "
           "(probabilities %.3f %.3f %.3f)\n", SEEDS, count[0] / (double)SEEDS, count[1] / (double)SEEDS,
           count[2] / (double)SEEDS, p0, p1, p1);
}

static int stop_after_two(int row, int32_t id, void *user)
{
    (void)row, (void)id;
    return ++*(int *)user >= 2;
}

/* EOS: greedy until the first new token that did not occur before it; with that id as
 * EOS, generation stops there and includes it */
static void test_eos_and_limits(void)
{
    rc_error err = {0};
    rc_model *m = make("tiny-gpt2", 3, &err);
    if (!m) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    rc_generate_options o = rc_generate_defaults(m);
    CHECK(o.eos_id == 255 && o.max_new_tokens == 20 && o.temperature == 0 && o.num_beams == 1);
    o.eos_id = -1;
    o.max_new_tokens = 12;
    int64_t n, ne;
    int32_t *t = gen(m, &o, &n, &err);
    CHECKF(t && n == 12, "max tokens: %lld of 12 (%s)", (long long)n, err.msg);
    int at = -1;
    for (int i = 1; t && i < n && at < 0; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= t[j] == t[i];
        if (!seen)
            at = i;
    }
    CHECKF(at > 0, "no fresh token in the greedy output");
    if (at > 0) {
        o.eos_id = t[at];
        int32_t *e = gen(m, &o, &ne, &err);
        CHECKF(e && ne == at + 1 && !memcmp(e, t, (size_t)ne * sizeof *e), "EOS %d at %d: got %lld tokens", t[at], at,
               (long long)ne);
        free(e);
        /* sampling stops at EOS too */
        o.temperature = 1.0;
        o.top_k = 1;
        e = gen(m, &o, &ne, &err);
        CHECKF(e && ne == at + 1, "sampled EOS: %lld tokens", (long long)ne);
        free(e);
    }
    /* the callback sees every token and can stop a row */
    int calls = 0;
    rc_generate_options cb = rc_generate_defaults(m);
    cb.eos_id = -1;
    cb.max_new_tokens = 10;
    cb.on_token = stop_after_two;
    cb.user = &calls;
    int32_t *c = gen(m, &cb, &ne, &err);
    CHECKF(c && ne == 2 && calls == 2 && !memcmp(c, t, 2 * sizeof *c), "callback stop: %lld tokens, %d calls",
           (long long)ne, calls);
    free(c);
    /* one token */
    o = rc_generate_defaults(m);
    o.max_new_tokens = 1;
    int32_t *one = gen(m, &o, &ne, &err);
    CHECK(one && ne == 1 && one[0] == t[0]);
    free(one);
    free(t);
    rc_model_free(m);
}

static void test_beams(const char *preset)
{
    rc_error err = {0};
    rc_model *m = make(preset, 9, &err);
    if (!m) {
        CHECKF(0, "%s: %s", preset, err.msg);
        return;
    }
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = 6;
    o.num_beams = 3;
    int64_t n1, n2;
    int32_t *a = gen(m, &o, &n1, &err), *b = gen(m, &o, &n2, &err);
    CHECKF(a && n1 >= 1 && n1 <= 6, "%s beams: %s", preset, err.msg);
    CHECKF(same(a, n1, b, n2), "%s: beam search is not deterministic", preset);
    /* two steps without EOS: beam search (3 beams) is exhaustive over the 3 most likely
     * first tokens, so it returns the best pair (t1, t2) with t1 among them */
    o.eos_id = -1;
    o.max_new_tokens = 2;
    int32_t *bb = gen(m, &o, &n1, &err);
    int32_t buf[NP + 8], pair[2] = {-1, -1};
    int64_t V = m->config.vocab_size;
    float *l0 = full_forward_last(m, buf, prefix(m, NULL, 0, buf));
    double best = -INFINITY;
    for (int64_t t1 = 0; l0 && t1 < V; t1++) {
        if (rank_of(l0, V, (int)t1) >= 3)
            continue;
        int32_t first = (int32_t)t1;
        float *l1 = full_forward_last(m, buf, prefix(m, &first, 1, buf));
        if (!l1)
            break;
        int t2 = argmax(l1, V);
        double s = log_prob(l0, V, (int)t1) + log_prob(l1, V, t2);
        if (s > best) {
            best = s;
            pair[0] = first;
            pair[1] = t2;
        }
        free(l1);
    }
    CHECKF(bb && n1 == 2 && bb[0] == pair[0] && bb[1] == pair[1], "%s: beams gave (%d, %d), the best pair is (%d, %d)",
           preset, bb && n1 > 0 ? bb[0] : -1, bb && n1 > 1 ? bb[1] : -1, pair[0], pair[1]);
    free(l0);
    free(a), free(b), free(bb);
    rc_model_free(m);
}

/* every phase time of st is >= 0; with kernels, op_s adds up to kernel_s */
static int phases_sane(const rc_generate_stats *st, int kernels)
{
    double ph[] = {st->graph_s, st->plan_s, st->bind_s, st->run_s, st->read_s, st->keep_s,
                   st->free_s, st->pick_s, st->reorder_s, st->kernel_s};
    int ok = 1;
    for (size_t i = 0; i < sizeof ph / sizeof *ph; i++)
        ok = ok && ph[i] >= 0;
    double sum = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        sum += st->op_s[op];
    return ok && (kernels ? fabs(sum - st->kernel_s) <= 1e-9 + 1e-6 * st->kernel_s : sum == 0 && st->kernel_s == 0);
}

/* greedy and beam search give the same tokens with the phase stats and kernel timing on;
 * the stats count the decode steps (every step after the prompt's: new tokens - 1) */
static void test_phase_stats(const char *preset, int beams)
{
    rc_error err = {0};
    rc_model *m = make(preset, 13, &err);
    CHECKF(m, "%s: %s", preset, err.msg);
    if (!m)
        return;
    rc_generate_options o = options_new_tokens(m);
    o.num_beams = beams;
    int64_t n0, n1, n2;
    int32_t *plain = gen(m, &o, &n0, &err);
    rc_generate_stats st;
    memset(&st, 0xff, sizeof st); /* every field is set by the call */
    o.stats = &st;
    int32_t *phased = gen(m, &o, &n1, &err);
    CHECKF(same(plain, n0, phased, n1), "%s beams %d: the phase stats changed the tokens", preset, beams);
    CHECKF(st.decode_steps == NEW - 1 && (st.cache_bytes > 0 || m->config.type == RC_MODEL_T5) && phases_sane(&st, 0),
           "%s beams %d: %lld decode steps (expected %d), cache %lld bytes, kernel %g s", preset, beams,
           (long long)st.decode_steps, NEW - 1, (long long)st.cache_bytes, st.kernel_s);
    CHECKF(beams > 1 || st.reorder_s == 0, "%s: greedy reordered the cache", preset);
    o.time_kernels = 1;
    int32_t *timed = gen(m, &o, &n2, &err);
    CHECKF(same(plain, n0, timed, n2), "%s beams %d: timing the kernels changed the tokens", preset, beams);
    CHECKF(st.decode_steps == NEW - 1 && phases_sane(&st, 1), "%s beams %d: timed kernels: %lld decode steps, "
           "kernel %g s", preset, beams, (long long)st.decode_steps, st.kernel_s);
    free(plain), free(phased), free(timed);
    rc_model_free(m);
}

static void expect_error(rc_model *m, const int32_t *p, int64_t n, const rc_generate_options *o, const char *part)
{
    rc_error err = {0};
    int32_t *out = (int32_t *)&err; /* must be reset to NULL */
    int64_t n_out = -1;
    int rc = rc_generate(m, p, n, o, &out, &n_out, &err);
    CHECKF(rc == -1 && err.code != 0 && strstr(err.msg, part) && out == NULL, "expected an error with '%s', got rc %d: %s",
           part, rc, err.msg);
}

static void test_errors(void)
{
    rc_error err = {0};
    rc_model *m = rc_model_create("tiny-gpt2", 3, &err);
    if (!m) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    rc_generate_options o = rc_generate_defaults(m);
    expect_error(m, prompt, 0, &o, "empty");
    expect_error(m, NULL, 3, &o, "empty");
    int32_t bad[3] = {1, 256, 2}, neg[2] = {-1, 4};
    expect_error(m, bad, 3, &o, "token 1 is id 256, outside the vocabulary [0, 256)");
    expect_error(m, neg, 2, &o, "token 0 is id -1");
    rc_generate_options x = o;
    x.max_new_tokens = 0;
    expect_error(m, prompt, NP, &x, "max_new_tokens 0");
    x = o;
    x.temperature = -1;
    expect_error(m, prompt, NP, &x, "temperature -1");
    x = o;
    x.top_p = 1.5;
    expect_error(m, prompt, NP, &x, "top_p 1.5");
    x = o;
    x.top_k = -2;
    expect_error(m, prompt, NP, &x, "top_k -2");
    x = o;
    x.num_beams = 2;
    x.temperature = 0.5;
    expect_error(m, prompt, NP, &x, "beam search with sampling");
    x = o;
    x.max_new_tokens = 125; /* 5 + 125 - 1 positions > 128 */
    expect_error(m, prompt, NP, &x, "need 129 positions; model gpt2 has 128");
    x.max_new_tokens = 124; /* exactly fits */
    int32_t *out = NULL;
    int64_t n = 0;
    x.eos_id = -1;
    CHECKF(rc_generate(m, prompt, NP, &x, &out, &n, &err) == 0 && n == 124, "124 new tokens: %s", err.msg);
    free(out);
    int64_t nb[1];
    CHECK(rc_generate_batch(m, prompt, 0, NP, &o, &out, nb, &err) == -1 && strstr(err.msg, "0 prompts"));
    rc_model_free(m);
}

/* ---- the reference mode ---------------------------------------------------------------- */

static int parse_ids(const char *s, int32_t *ids, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            return -1;
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int generate_mode(int argc, char **argv)
{
    const char *dir = NULL;
    int32_t ids[512];
    int n = 0;
    rc_generate_options o = {.max_new_tokens = 8, .top_p = 1.0, .eos_id = -1, .num_beams = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--generate"))
            dir = v;
        else if (!strcmp(k, "--ids"))
            n = parse_ids(v, ids, 512);
        else if (!strcmp(k, "--max-new"))
            o.max_new_tokens = atoi(v);
        else if (!strcmp(k, "--beams"))
            o.num_beams = atoi(v);
        else if (!strcmp(k, "--eos"))
            o.eos_id = atoi(v);
        else if (!strcmp(k, "--temperature"))
            o.temperature = atof(v);
        else if (!strcmp(k, "--top-k"))
            o.top_k = atoi(v);
        else if (!strcmp(k, "--top-p"))
            o.top_p = atof(v);
        else if (!strcmp(k, "--seed"))
            o.seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    if (!dir || n < 0) {
        fprintf(stderr, "usage: test_generate --generate DIR --ids 1,2,3 --max-new N [--beams K] [--eos E]\n");
        return 2;
    }
    rc_error err = {0};
    rc_model *m = rc_model_create(dir, 0, &err);
    int32_t *out = NULL;
    int64_t n_out = 0;
    if (!m || rc_generate(m, ids, n, &o, &out, &n_out, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        rc_model_free(m);
        return 1;
    }
    for (int64_t i = 0; i < n_out; i++)
        printf("%s%d", i ? " " : "", out[i]);
    printf("\n");
    free(out);
    rc_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return generate_mode(argc, argv);
    for (size_t i = 0; i < sizeof decoders / sizeof decoders[0]; i++) {
        test_greedy_matches_forward(decoders[i]);
        test_sampling(decoders[i]);
    }
    test_greedy_matches_forward("tiny-t5");
    test_sampling("tiny-t5");
    test_sample_order();
    test_eos_and_limits();
    test_beams("tiny-t5");
    test_beams("tiny-gpt2");
    test_phase_stats("tiny-gpt2", 1);
    test_phase_stats("tiny-t5", 1);
    test_phase_stats("tiny-gpt2", 3);
    test_errors();
    return check_summary("test_generate");
}
