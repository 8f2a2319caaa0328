/* bench_generate.c - greedy decoding speed with the key/value cache: one JSON line per
 * model and weight dtype, tokens/s of the decode steps (prompt excluded), the prompt's
 * time and the bytes of weights read per decoded token (every weight matrix is read once
 * per token: the parameters' bytes, less the rows of the position table not used).
 *   bench_generate [--device D] [--dtype f32,bf16] [PRESET ...]
 *       default: tiny-gpt2 gpt2 on the CPU, each in f32 then bf16 (same run, same weights:
 *       the bf16 model is the f32 one rounded; records generate_greedy and
 *       generate_greedy_bf16, the dtype also in "dtype")
 * The decode time is the span between the first and the last new token (stamped by the
 * on_token callback) over the steps between them, best of 3 calls; the prompt time is the
 * span from the call to the first token. Any failure prints one line and exits 1. */
#include "common.h"
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

/* best of 3 calls: seconds per decode step and to the first token */
static void time_decoding(const char *name, rc_model *m, const int32_t *prompt, double *step_s, double *prompt_s)
{
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = NEW;
    o.eos_id = -1;
    stamps s;
    o.on_token = on_token;
    o.user = &s;
    *step_s = *prompt_s = 1e30;
    for (int r = 0; r < 3; r++) {
        int32_t *out = NULL;
        int64_t n_out = 0;
        rc_error err = {0};
        s.n = 0;
        double t0 = bench_now();
        if (rc_generate(m, prompt, P, &o, &out, &n_out, &err))
            bench_fail(name, "rc_generate", err.msg);
        free(out);
        if (n_out != NEW || s.n != NEW)
            bench_fail(name, "rc_generate", "fewer tokens or callbacks than asked for");
        double step = (s.stamp[NEW - 1] - s.stamp[0]) / (NEW - 1), first = s.stamp[0] - t0;
        *step_s = step < *step_s ? step : *step_s;
        *prompt_s = first < *prompt_s ? first : *prompt_s;
    }
}

/* the value of flag (e.g. --device D) taken out of argv (the rest are model names) */
static const char *take_flag(int *argc, char **argv, const char *flag)
{
    for (int i = 1; i + 1 < *argc; i++)
        if (!strcmp(argv[i], flag)) {
            const char *d = argv[i + 1];
            memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 2) * sizeof *argv);
            *argc -= 2;
            return d;
        }
    return NULL;
}

int main(int argc, char **argv)
{
    rc_error derr = {0};
    const char *device = take_flag(&argc, argv, "--device");
    const char *dtypes = take_flag(&argc, argv, "--dtype");
    rc_dtype dts[3];
    int n_dt = 0;
    char list[64];
    snprintf(list, sizeof list, "%s", dtypes ? dtypes : "f32,bf16");
    for (char *t = strtok(list, ","); t && n_dt < 3; t = strtok(NULL, ","))
        if (!strcmp(t, "f32") || !strcmp(t, "bf16") || !strcmp(t, "f16"))
            dts[n_dt++] = !strcmp(t, "f32") ? RC_F32 : !strcmp(t, "bf16") ? RC_BF16 : RC_F16;
        else
            bench_fail("bench_generate", "--dtype", "one of f32, bf16, f16 (comma-separated)");
    rc_backend *be = rc_device_open(device ? device : "cpu", 0, &derr);
    if (!be)
        bench_fail("bench_generate", "rc_device_open", derr.msg);
    const char *def[] = {"tiny-gpt2", "gpt2"};
    const char *const *names = argc > 1 ? (const char *const *)argv + 1 : def;
    int count = argc > 1 ? argc - 1 : 2;
    int32_t prompt[P] = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};
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
            double step_s, prompt_s;
            time_decoding(names[i], m, p, &step_s, &prompt_s);
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
            if (bench_print(o))
                bench_fail(names[i], "writing a JSON line", "jansson or stdout failed");
        }
        rc_model_free(m);
    }
    return 0;
}
