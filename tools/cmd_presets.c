/* cmd_presets.c - `redco presets`: every built-in architecture preset with its size. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>

static const char *help =
    "usage: redco presets [--json]\n"
    "\n"
    "Lists the architecture presets `redco train --model PRESET` (and `redco plan`) take, one\n"
    "per line: the name, the model family, the parameters (tied matrices counted once), the\n"
    "vocabulary (ids), the positions (the longest sequence; T5's relative positions have no\n"
    "limit: \"relative\"), the layers (T5: encoder + decoder), the width and the attention heads.\n"
    "A preset's weights are random; `redco train --vocab-size N` gives one another vocabulary.\n"
    "With --json stdout is one JSON array of objects {\"name\", \"model_type\", \"parameters\",\n"
    "\"vocab_size\", \"max_positions\", \"n_layer\", \"d_model\", \"n_head\"}.\n"
    "\n"
    "  --json        one JSON line\n"
    "  --help        print this message\n";

enum { F_JSON = CLI_FLAG0 };

static const struct option flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"json", no_argument, NULL, F_JSON},
    {NULL, 0, NULL, 0},
};

static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    if (c == F_JSON) {
        *(int *)user = 1;
        return 0;
    }
    return cli_usage(cmd, "unexpected argument '%s'", a->value);
}

/* 124439808 -> "124.4M", 6050882784 -> "6.05B", 124672 -> "124.7K" */
static void count_text(int64_t n, char *buf, size_t size)
{
    if (n >= 1000000000)
        snprintf(buf, size, "%.3gB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(buf, size, "%.4gM", (double)n / 1e6);
    else
        snprintf(buf, size, "%.4gK", (double)n / 1e3);
}

static int layers(const rc_model_config *c)
{
    return c->n_layer + (c->type == RC_MODEL_T5 ? c->n_decoder_layer : 0);
}

int cmd_presets(int argc, char **argv)
{
    const char *cmd = "presets";
    int json = 0;
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, &json);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *const *names = rc_config_preset_names();
    json_t *all = json ? json_array() : NULL;
    if (!json)
        printf("%-12s %-7s %12s %8s %10s %7s %6s %6s\n", "preset", "family", "parameters", "vocab", "positions",
               "layers", "width", "heads");
    for (int i = 0; names[i]; i++) {
        rc_model_config c;
        rc_error err = {0};
        if (rc_config_preset(names[i], &c, &err))
            return cli_fail(cmd, "%s", err.msg);
        int64_t params = rc_config_param_count(&c);
        if (json) {
            json_array_append_new(all, json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:i}", "name", names[i],
                                                 "model_type", c.model_type, "parameters", (json_int_t)params,
                                                 "vocab_size", c.vocab_size, "max_positions", c.max_positions,
                                                 "n_layer", layers(&c), "d_model", c.d_model, "n_head", c.n_head));
            continue;
        }
        char count[32], positions[16];
        count_text(params, count, sizeof count);
        if (c.max_positions > 0)
            snprintf(positions, sizeof positions, "%d", c.max_positions);
        else
            snprintf(positions, sizeof positions, "relative");
        printf("%-12s %-7s %12s %8d %10s %7d %6d %6d\n", names[i], c.model_type, count, c.vocab_size, positions,
               layers(&c), c.d_model, c.n_head);
    }
    if (json)
        cli_print_json(all);
    return 0;
}
