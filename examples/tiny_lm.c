/* tiny_lm.c - the demo until the full pipeline lands: a small GPT-2 shaped model learns
 * to predict the next byte of Moby Dick, printing its falling loss.
 *
 *   build/tiny_lm [corpus.txt] [steps]
 */
#include "nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)*size)) && fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "data/moby_dick.txt";
    int steps = argc > 2 ? atoi(argv[2]) : 300;
    long size = 0;
    unsigned char *text = read_file(path, &size);
    rc_model_config cfg = nn_gpt2_config(256, 64, 2, 4, 128);
    const int B = 16, T = 64;
    if (!text || size < T + 1) {
        fprintf(stderr, "tiny_lm: cannot read a corpus of at least %d bytes from %s\n", T + 1, path);
        return 1;
    }

    nn_weights w = {0};
    rc_error err = {0};
    if (nn_model_weights(&cfg, &w, &err) || nn_weights_alloc(&w)) {
        fprintf(stderr, "tiny_lm: %s\n", err.code ? err.msg : "out of memory");
        return 1;
    }
    nn_model_init(&cfg, &w, 42);

    rc_graph *g = rc_graph_new();
    rc_tensor **p = malloc((size_t)w.n * sizeof *p), **grads = malloc((size_t)w.n * sizeof *grads);
    nn_model_leaves(g, &w, p);
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *targets = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    nn_inputs in = {.ids = ids};
    rc_tensor *loss = rc_cross_entropy(g, nn_model_logits(g, &cfg, &w, p, &in), targets, -100);
    rc_backward(g, loss, p, w.n, grads);
    if (rc_graph_error(g)) {
        fprintf(stderr, "tiny_lm: %s\n", rc_graph_error(g));
        return 1;
    }
    int32_t *xb = malloc(sizeof(int32_t) * B * T), *yb = malloc(sizeof(int32_t) * B * T);
    rc_tensor_bind(ids, xb);
    rc_tensor_bind(targets, yb);
    rc_tensor **outs = malloc((size_t)(w.n + 1) * sizeof *outs);
    outs[0] = loss;
    memcpy(outs + 1, grads, (size_t)w.n * sizeof *grads);
    rc_plan *plan = rc_plan_new(g, outs, w.n + 1, &err);
    if (!plan) {
        fprintf(stderr, "tiny_lm: %s\n", err.msg);
        return 1;
    }
    float *m = calloc((size_t)w.numel, sizeof *m), *v = calloc((size_t)w.numel, sizeof *v);
    rc_adam opt = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0};
    rc_rng rng = rc_rng_new(7);
    fprintf(stderr, "tiny_lm: %lld parameters, %s (%ld bytes), batch %d x %d, arena %.1f MB\n",
            (long long)w.numel, path, size, B, T, rc_plan_get_stats(plan).peak_bytes / 1e6);
    for (int step = 1; step <= steps; step++) {
        for (int b = 0; b < B; b++) {
            long at = (long)(rc_rng_next_u64(&rng) % (uint64_t)(size - T - 1));
            for (int t = 0; t < T; t++) {
                xb[b * T + t] = text[at + t];
                yb[b * T + t] = text[at + t + 1];
            }
        }
        if (rc_plan_run(plan, &err)) {
            fprintf(stderr, "tiny_lm: step %d: %s\n", step, err.msg);
            return 1;
        }
        opt.step = step;
        for (int i = 0; i < w.n; i++) {
            int64_t off = w.p[i].offset;
            rc_adamw_update(w.data + off, rc_tensor_data(grads[i]), m + off, v + off, w.p[i].numel, &opt);
        }
        float l = *(float *)rc_tensor_data(loss);
        if (step == 1 || step % 25 == 0)
            printf("step %4d  loss %.4f  (%.1f ms/step)\n", step, l,
                   1e3 * rc_plan_get_stats(plan).last_run_s);
        if (!isfinite(l)) {
            fprintf(stderr, "tiny_lm: loss is %f at step %d\n", l, step);
            return 1;
        }
    }
    rc_plan_free(plan);
    rc_graph_free(g);
    nn_weights_free(&w);
    free(p), free(grads), free(outs), free(xb), free(yb), free(m), free(v), free(text);
    return 0;
}
