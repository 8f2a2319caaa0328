/* cli.c - flag reading (getopt_long), error lines and the --nproc relaunch shared by the commands. */
#include "cli.h"
#include "redco/device.h"
#include "redco/dist.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_rank;
static char line_context[4300]; /* said before each error line: "--config FILE: " while it is read */

static void vline(const char *cmd, const char *fmt, va_list ap, int usage)
{
    if (cli_rank != 0)
        return;
    fprintf(stderr, "redco %s: %s", cmd, line_context);
    vfprintf(stderr, fmt, ap);
    if (usage)
        fprintf(stderr, " (see 'redco %s --help')", cmd);
    fputc('\n', stderr);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, fmt, ap, 0);
    va_end(ap);
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, fmt, ap, 1);
    va_end(ap);
    return 2;
}

static void args_start(cli_args *a, const char *cmd, const struct option *flags)
{
    *a = (cli_args){.cmd = cmd, .flags = flags};
    optind = 0; /* glibc: start afresh, reading the "-" of the option string again */
    opterr = 0; /* our own error lines, not getopt's */
}

static const struct option *flag_of(const struct option *flags, int val)
{
    for (; flags->name; flags++)
        if (flags->val == val)
            return flags;
    return NULL;
}

/* Is the argument written (--name or --name=VALUE) this flag's whole name? */
static int whole_name(const char *written, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(written, "--", 2) && !strncmp(written + 2, name, n) && (!written[2 + n] || written[2 + n] == '=');
}

/* The flag getopt_long returned as c (index: its entry, -1 if none): c, or CLI_BAD after
 * the usage error of an unknown flag (abbreviations included), a missing value or a value
 * given to a flag that takes none. */
static int check_flag(cli_args *a, int c, int index, char **argv)
{
    if (c == CLI_ARG || (c == CLI_HELP && index < 0)) /* a positional argument, or -h */
        return c;
    if (c == '?' && optopt > 0 && optopt < CLI_FLAG0 && optopt != CLI_HELP) {
        cli_usage(a->cmd, "unknown flag '-%c'", optopt);
        return CLI_BAD;
    }
    /* the argument that named the flag: the one before its value when that came apart */
    const char *written = argv[optind - 1];
    if (c != '?' && c != ':' && optarg == argv[optind - 1] && optind >= 2)
        written = argv[optind - 2];
    const struct option *f = index >= 0 ? &a->flags[index] : flag_of(a->flags, c == '?' || c == ':' ? optopt : c);
    if (!f || !whole_name(written, f->name)) {
        cli_usage(a->cmd, "unknown flag '%.*s'", (int)strcspn(written, "="), written);
        return CLI_BAD;
    }
    snprintf(a->flag, sizeof a->flag, "--%s", f->name);
    if (c == ':' || c == '?') {
        cli_usage(a->cmd, c == ':' ? "%s needs a value" : "%s takes no value", a->flag);
        return CLI_BAD;
    }
    return c;
}

/* digits only (no sign): a value an optional flag takes from the next argument */
static int whole_number(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* The next flag's val, CLI_ARG, CLI_END when argv is done, or CLI_BAD after a usage error. */
static int args_next(cli_args *a, int argc, char **argv)
{
    /* "-": positional arguments come back in order as 1; ":": a missing value is ':' */
    int index = -1;
    a->flag[0] = 0;
    if (!a->rest) {
        optarg = NULL;
        int c = getopt_long(argc, argv, "-:h", a->flags, &index);
        a->value = optarg;
        if (c != -1) {
            c = check_flag(a, c, index, argv);
            /* an optional value may also come apart when it is a whole number: --zero 2 */
            if (c >= CLI_FLAG0 && !optarg && index >= 0 && a->flags[index].has_arg == optional_argument &&
                optind < argc && whole_number(argv[optind]))
                a->value = argv[optind++];
            return c;
        }
        a->rest = 1; /* getopt is done (and must not be asked again): past "--" all is positional */
    }
    if (optind >= argc)
        return CLI_END;
    a->value = argv[optind++];
    return CLI_ARG;
}

int cli_parse(const char *cmd, int argc, char **argv, const struct option *flags, const char *help, cli_take take,
              void *user)
{
    cli_args a;
    args_start(&a, cmd, flags);
    int c, rc;
    while ((c = args_next(&a, argc, argv)) != CLI_END) {
        if (c == CLI_BAD)
            return 2;
        if (c == CLI_HELP) {
            fputs(help, stdout);
            return -1;
        }
        if ((rc = take(cmd, c, &a, user)))
            return rc;
    }
    return 0;
}

int cli_int64(const char *cmd, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        return cli_usage(cmd, "%s: '%s' is not a whole number in [%lld, %lld]", flag, text, (long long)lo,
                         (long long)hi);
    }
    *out = v;
    return 0;
}

int cli_zero(const char *cmd, const char *v, int *out)
{
    int64_t stage = 1;
    if (v && cli_int64(cmd, "--zero", v, 0, 3, &stage))
        return 2;
    *out = (int)stage;
    return 0;
}

int cli_attention(const char *cmd, const char *v)
{
    /* tiled: what fused was called while tiles were not the default */
    if (strcmp(v, "fused") && strcmp(v, "unfused") && strcmp(v, "tiled") && strcmp(v, "products"))
        return cli_usage(cmd, "--attention '%s': fused, products or unfused", v);
    rc_set_fused_attention(strcmp(v, "unfused") != 0);
    rc_set_tiled_attention(strcmp(v, "products") != 0);
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *text, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi) {
        return cli_usage(cmd, "%s: '%s' is not a number in [%g, %g]", flag, text, lo, hi);
    }
    *out = v;
    return 0;
}

int cli_shard(const char *cmd, const char *text, cli_shards *s)
{
    const char *eq = strrchr(text, '=');
    size_t len = eq ? (size_t)(eq - text) : 0;
    if (!eq || !len || len >= sizeof s->names[0] || s->n == CLI_MAX_SHARD) {
        return cli_usage(cmd, "--shard '%s': NAME=AXIS[:GROUPS] or NAME=replicated (at most %d)", text,
                         CLI_MAX_SHARD);
    }
    rc_shard_override *o = &s->o[s->n];
    memcpy(s->names[s->n], text, len);
    s->names[s->n][len] = 0;
    *o = (rc_shard_override){s->names[s->n], -1, 0};
    if (strcmp(eq + 1, "replicated")) {
        char *end;
        long axis = strtol(eq + 1, &end, 10);
        long long groups = *end == ':' ? strtoll(end + 1, &end, 10) : 0;
        if (end == eq + 1 || *end || axis < 0 || axis >= RC_MAX_DIMS || groups < 0) {
            return cli_usage(cmd, "--shard '%s': the axis (and groups) must be whole numbers, or 'replicated'",
                             text);
        }
        o->axis = (int)axis;
        o->groups = groups;
    }
    s->n++;
    return 0;
}

json_t *cli_json_real(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

void cli_print_json(json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(obj);
}

int cli_model_is_dir(const char *model)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", model);
    return access(path, R_OK) == 0;
}

int cli_model_config(const char *model, rc_model_config *c, rc_error *err)
{
    if (cli_model_is_dir(model))
        return rc_config_load(model, c, err);
    return rc_config_preset(model, c, err);
}

/* One value of key for flag f as take receives it; 0 or the exit status. */
static int config_value(const char *cmd, const char *path, const struct option *f, const char *key, json_t *v,
                        cli_take take, void *user)
{
    char text[64];
    cli_args a = {.cmd = cmd, .value = NULL};
    snprintf(a.flag, sizeof a.flag, "--%s", f->name);
    if (json_is_string(v))
        a.value = json_string_value(v);
    else if (json_is_integer(v))
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v)), a.value = text;
    else if (json_is_real(v))
        snprintf(text, sizeof text, "%.17g", json_real_value(v)), a.value = text;
    else if (!json_is_true(v))
        return cli_usage(cmd, "--config %s: key '%s' holds %s: give a string, a number, true or false", path, key,
                         json_is_object(v) ? "an object" : "an array inside an array");
    if (f->has_arg == no_argument && a.value)
        return cli_usage(cmd, "--config %s: key '%s' is a flag without a value: true or false", path, key);
    if (f->has_arg == required_argument && !a.value)
        return cli_usage(cmd, "--config %s: key '%s' needs a value, not true", path, key);
    snprintf(line_context, sizeof line_context, "--config %s, key '%s': ", path, key);
    int rc = take(cmd, f->val, &a, user);
    line_context[0] = 0;
    return rc;
}

int cli_config_read(const char *cmd, const char *path, const struct option *flags, const unsigned char *given,
                    cli_take take, void *user, json_t **doc)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    *doc = NULL;
    if (!root)
        return je.line > 0 ? cli_usage(cmd, "--config %s: bad JSON at line %d, column %d: %s", path, je.line,
                                       je.column, je.text)
                           : cli_usage(cmd, "--config %s: %s", path, je.text);
    int rc = json_is_object(root) ? 0 : cli_usage(cmd, "--config %s: not a JSON object of flags", path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const struct option *f = flags;
        while (!rc && f->name && (strcmp(f->name, key) || f->val < CLI_FLAG0))
            f++;
        if (!rc && (!f->name || !strcmp(key, "config")))
            rc = cli_usage(cmd, "--config %s: unknown key '%s' (the keys are the flags' long names, as \"lr\" for "
                           "--lr)", path, key);
        if (rc)
            break;
        if (given[f->val - CLI_FLAG0] || json_is_null(v) || json_is_false(v)) /* the command line wins */
            continue;
        if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if ((rc = config_value(cmd, path, f, key, e, take, user))) /* an array in it: refused */
                    break;
            }
        } else {
            rc = config_value(cmd, path, f, key, v, take, user);
        }
        if (rc)
            break;
    }
    *doc = root; /* the values taken point into it */
    return rc;
}
