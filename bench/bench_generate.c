/* bench_generate.c - greedy decoding speed with the key/value cache: one JSON line per
 * model and weight dtype, tokens/s of the decode steps (prompt excluded), the prompt's
 * time and the bytes of weights read per decoded token (every weight matrix is read once
 * per token: the parameters' bytes, less the rows of the position table not used).
 *   bench_generate [--device D] [--dtype f32,bf16] [PRESET ...]
 *       default: tiny-gpt2 gpt2 on the CPU, each in f32 then bf16 (same run, same weights:
 *       the bf16 model is the f32 one rounded; records generate_greedy and
 *       generate_greedy_bf16, the dtype also in "dtype")
 *   bench_generate [--device D] --attention-compare [PRESET ...]
 *       only the fused against unfused attention lines (generate_greedy_attention), gpt2
 *       unless presets are named, in f32: decoding with attention as product, softmax,
 *       product and as the fused op (rc_set_fused_attention off, on; the two
 *       alternate, best of 3 calls each), after a prompt of 8 tokens and after one of 512
 *       (capped at the model's positions less the new tokens), where the cached keys make
 *       attention a larger part of a token
 * The decode time is the span between the first and the last new token (stamped by the
 * on_token callback) over the steps between them, best of 3 calls; the prompt time is the
 * span from the call to the first token. Each generate_greedy* line also says where a
 * decode step's time goes (rc_generate_stats), per token: "phase_ms" (the best call's
 * phases: graph recorded, plan made, inputs bound, run, logits read, cache kept, step
 * freed, tokens picked, other: the rest of ms_per_token) and, from one more call with
 * every kernel timed (each waited for, so that call is slower and not in ms_per_token),
 * "kernel_ms", that call's "kernel_run_ms" and "top_ops" ("op ms, ..."). Any failure
 * prints one line and exits 1. */
#include "common.h"
#include "nn.h"
#include "redco/device.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P = 8, NEW = 20 };

typedef struct {
    double stamp[NEW];
    int n;
} stamps;

static int on_token(int row, int32_t id, void *user)
{
    stamps *s = user;
    (void)row, (void)id;
    if (s->n < NEW)
        s->stamp[s->n] = bench_now();
    s->n++;
    return 0;
}

/* best of `calls` calls: seconds per decode step and to the first token, after a prompt
 * of n tokens; phases (when not NULL): the best call's decode-step phases, its kernels
 * timed when time_kernels (then slower) */
static void time_decoding(const char *name, rc_model *m, const int32_t *prompt, int64_t n, int calls,
                          double *step_s, double *prompt_s, rc_generate_stats *phases, int time_kernels)
{
    rc_generate_options o = rc_generate_defaults(m);
    rc_generate_stats st;
    o.max_new_tokens = NEW;
    o.eos_id = -1;
    o.stats = phases ? &st : NULL;
    o.time_kernels = time_kernels;
    stamps s;
    o.on_token = on_token;
    o.user = &s;
    *step_s = *prompt_s = 1e30;
    for (int r = 0; r < calls; r++) {
        int32_t *out = NULL;
        int64_t n_out = 0;
        rc_error err = {0};
        s.n = 0;
        double t0 = bench_now();
        if (rc_generate(m, prompt, n, &o, &out, &n_out, &err))
            bench_fail(name, "rc_generate", err.msg);
        free(out);
        if (n_out != NEW || s.n != NEW)
            bench_fail(name, "rc_generate", "fewer tokens or callbacks than asked for");
        double step = (s.stamp[NEW - 1] - s.stamp[0]) / (NEW - 1), first = s.stamp[0] - t0;
        if (phases && step < *step_s)
            *phases = st;
        *step_s = step < *step_s ? step : *step_s;
        *prompt_s = first < *prompt_s ? first : *prompt_s;
    }
}

/* the factor from seconds summed over the decode steps to milliseconds per token */
static double ms_per_token(const rc_generate_stats *st)
{
    return 1e3 / (st->decode_steps > 0 ? (double)st->decode_steps : 1);
}

/* "phase_ms": the decode steps' phases in ms per token (other: the rest of the step_s
 * between tokens, i.e. what no phase covers) */
static void set_phases(json_t *o, const rc_generate_stats *st, double step_s)
{
    double ms = ms_per_token(st);
    const char *key[] = {"graph", "plan", "bind", "run", "read", "keep", "free", "pick", "reorder"};
    double v[] = {st->graph_s, st->plan_s, st->bind_s, st->run_s, st->read_s, st->keep_s, st->free_s,
                  st->pick_s, st->reorder_s};
    json_t *ph = json_object();
    double sum = 0;
    for (int i = 0; i < (int)(sizeof v / sizeof *v); i++) {
        bench_set_num(ph, key[i], v[i] * ms);
        sum += v[i];
    }
    bench_set_num(ph, "other", 1e3 * step_s - sum * ms);
    json_object_set_new(o, "phase_ms", ph);
}

/* "kernel_ms" (per token, inside kernels), "kernel_run_ms" (the run phase of the same
 * timed pass, each kernel waited for) and "top_ops": the five ops with the most kernel
 * time per token, "op ms, ..." */
static void set_kernels(json_t *o, const rc_generate_stats *st)
{
    double ms = ms_per_token(st);
    bench_set_num(o, "kernel_ms", st->kernel_s * ms);
    bench_set_num(o, "kernel_run_ms", st->run_s * ms);
    char top[256];
    bench_top_ops(st->op_s, ms, 5, top, sizeof top);
    bench_set_str(o, "top_ops", top);
}

/* --attention-compare: for each prompt length (8 and 512, capped at the model's positions
 * less the new tokens), decoding in f32 with attention as product, softmax, product
 * (unfused) and then as the fused op; one generate_greedy_attention line each */
static void attention_compare(const char *name, rc_backend *be, const int32_t *base)
{
    rc_error err = {0};
    rc_model *m = rc_model_create(name, 1, &err);
    if (!m || rc_params_to(m->params, be, &err))
        bench_fail(name, "rc_model_create", err.msg);
    int64_t lens[2] = {P, 512}, room = m->config.max_positions - NEW;
    int32_t *p = malloc(512 * sizeof *p);
    if (!p)
        bench_fail(name, "the prompt", "out of memory");
    for (int k = 0; k < 512; k++) /* the 8 tokens again and again, shifted each time round */
        p[k] = (base[k % P] + 31 * (k / P)) % m->config.vocab_size;
    for (int j = 0; j < 2; j++) {
        int64_t n = lens[j] < room ? lens[j] : room;
        if (n < 1 || (j && n <= lens[0]))
            continue;
        /* unfused and fused alternate, best of 3 calls each, so both see the same machine */
        double step_s[2] = {1e30, 1e30}, prompt_s[2] = {1e30, 1e30};
        for (int r = 0; r < 3; r++)
            for (int on = 0; on < 2; on++) {
                double st, pr;
                rc_set_fused_attention(on);
                time_decoding(name, m, p, n, 1, &st, &pr, NULL, 0);
                step_s[on] = st < step_s[on] ? st : step_s[on];
                prompt_s[on] = pr < prompt_s[on] ? pr : prompt_s[on];
            }
        json_t *o = bench_line("generate_greedy_attention");
        bench_set_str(o, "model", name);
        bench_set_str(o, "dtype", "f32");
        bench_set_str(o, "device", rc_backend_name(be));
        bench_set_int(o, "prompt", n);
        bench_set_int(o, "new_tokens", NEW);
        bench_set_num(o, "unfused_ms_per_token", 1e3 * step_s[0]);
        bench_set_num(o, "fused_ms_per_token", 1e3 * step_s[1]);
        bench_set_num(o, "speedup", step_s[0] / step_s[1]); /* > 1: fused decodes faster */
        bench_set_num(o, "unfused_prompt_ms", 1e3 * prompt_s[0]);
        bench_set_num(o, "fused_prompt_ms", 1e3 * prompt_s[1]);
        bench_set_int(o, "threads", rc_get_threads());
        if (bench_print(o))
            bench_fail(name, "writing a JSON line", "jansson or stdout failed");
    }
    free(p);
    rc_model_free(m);
}

int main(int argc, char **argv)
{
    rc_error derr = {0};
    const char *device = bench_take_flag(&argc, argv, "--device");
    const char *dtypes = bench_take_flag(&argc, argv, "--dtype");
    int compare = bench_take_switch(&argc, argv, "--attention-compare");
    rc_dtype dts[3];
    int n_dt = 0;
    char list[64];
    snprintf(list, sizeof list, "%s", dtypes ? dtypes : "f32,bf16");
    for (char *t = strtok(list, ","); t && n_dt < 3; t = strtok(NULL, ","))
        if (bench_float_dtype(t) != RC_DTYPE_COUNT)
            dts[n_dt++] = bench_float_dtype(t);
        else
            bench_fail("bench_generate", "--dtype", "one of f32, bf16, f16 (comma-separated)");
    rc_backend *be = rc_device_open(device ? device : "cpu", 0, &derr);
    if (!be)
        bench_fail("bench_generate", "rc_device_open", derr.msg);
    const char *def[] = {"tiny-gpt2", "gpt2"};
    const char *const *names = argc > 1 ? (const char *const *)argv + 1 : compare ? def + 1 : def;
    int count = argc > 1 ? argc - 1 : compare ? 1 : 2;
    int32_t prompt[P] = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};
    for (int i = 0; compare && i < count; i++)
        attention_compare(names[i], be, prompt);
    if (compare)
        return 0;
    for (int i = 0; i < count; i++) {
        rc_error err = {0};
        rc_model *m = rc_model_create(names[i], 1, &err);
        if (!m)
            bench_fail(names[i], "rc_model_create", err.msg);
        if (rc_params_to(m->params, be, &err))
            bench_fail(names[i], "rc_params_to", err.msg);
        int32_t p[P];
        for (int k = 0; k < P; k++)
            p[k] = prompt[k] % m->config.vocab_size;
        /* the position table is read only at the positions used */
        int unused = m->config.type == RC_MODEL_GPT2 || m->config.type == RC_MODEL_OPT;
        int64_t read = rc_params_numel(m->params) - (unused ? (int64_t)m->config.max_positions * m->config.d_model : 0);
        for (int k = 0; k < n_dt; k++) {
            if (rc_model_to_dtype(m, dts[k], &err))
                bench_fail(names[i], "rc_model_to_dtype", err.msg);
            double step_s, prompt_s, t_step, t_prompt;
            rc_generate_stats phases = {0}, timed = {0};
            time_decoding(names[i], m, p, P, 3, &step_s, &prompt_s, &phases, 0);
            /* one more call with every kernel timed (waited for): the kernels' share */
            time_decoding(names[i], m, p, P, 1, &t_step, &t_prompt, &timed, 1);
            /* f32 keeps the record name scripts/bench_compare.py compares across builds */
            json_t *o = bench_line(dts[k] == RC_F32 ? "generate_greedy"
                                   : dts[k] == RC_BF16 ? "generate_greedy_bf16" : "generate_greedy_f16");
            bench_set_str(o, "model", names[i]);
            bench_set_str(o, "dtype", rc_dtype_name(dts[k]));
            bench_set_str(o, "device", rc_backend_name(be));
            bench_set_int(o, "prompt", P);
            bench_set_int(o, "new_tokens", NEW);
            bench_set_num(o, "tokens_per_s", 1.0 / step_s);
            bench_set_num(o, "ms_per_token", 1e3 * step_s);
            bench_set_num(o, "prompt_ms", 1e3 * prompt_s);
            bench_set_int(o, "weight_bytes_per_token", read * (int64_t)rc_dtype_size(dts[k]));
            bench_set_int(o, "threads", rc_get_threads());
            set_phases(o, &phases, step_s);
            set_kernels(o, &timed);
            if (bench_print(o))
                bench_fail(names[i], "writing a JSON line", "jansson or stdout failed");
        }
        rc_model_free(m);
    }
    return 0;
}
