/* bench_generate.c - greedy decoding speed with the key/value cache: one JSON line per
 * model, tokens/s of the decode steps (prompt excluded) and the prompt's time.
 *   bench_generate [PRESET ...]      default: tiny-gpt2 gpt2 */
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* best of `reps` runs of max_new tokens */
static double best_time(rc_model *m, const int32_t *prompt, int n, int max_new, int reps, rc_error *err)
{
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = max_new;
    o.eos_id = -1;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int32_t *out = NULL;
        int64_t n_out = 0;
        double t0 = now_s();
        if (rc_generate(m, prompt, n, &o, &out, &n_out, err))
            return -1;
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
        free(out);
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *def[] = {"tiny-gpt2", "gpt2"};
    const char *const *names = argc > 1 ? (const char *const *)argv + 1 : def;
    int count = argc > 1 ? argc - 1 : 2;
    enum { P = 8, NEW = 20 };
    int32_t prompt[P] = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};
    for (int i = 0; i < count; i++) {
        rc_error err = {0};
        rc_model *m = rc_model_create(names[i], 1, &err);
        if (!m) {
            fprintf(stderr, "%s: %s\n", names[i], err.msg);
            return 1;
        }
        int32_t p[P];
        for (int k = 0; k < P; k++)
            p[k] = prompt[k] % m->config.vocab_size;
        double t1 = best_time(m, p, P, 1, 3, &err), tn = best_time(m, p, P, NEW + 1, 3, &err);
        if (t1 < 0 || tn < 0) {
            fprintf(stderr, "%s: %s\n", names[i], err.msg);
            return 1;
        }
        printf("{\"bench\": \"generate_greedy\", \"model\": \"%s\", \"prompt\": %d, \"new_tokens\": %d, "
               "\"tokens_per_s\": %.1f, \"ms_per_token\": %.3f, \"prompt_ms\": %.3f, \"threads\": %d}\n",
               names[i], P, NEW, NEW / (tn - t1), 1e3 * (tn - t1) / NEW, 1e3 * t1, rc_get_threads());
        rc_model_free(m);
    }
    return 0;
}
