/* cli.c - flag parsing, error lines and the --nproc relaunch shared by the commands. */
#include "cli.h"
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

static void vline(const char *cmd, const char *fmt, va_list ap)
{
    if (cli_rank != 0)
        return;
    fprintf(stderr, "redco %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, fmt, ap);
    va_end(ap);
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, fmt, ap);
    va_end(ap);
    if (cli_rank == 0)
        fprintf(stderr, "(see 'redco %s --help')\n", cmd);
    return 2;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_usage(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int64(const char *cmd, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        cli_usage(cmd, "%s: '%s' is not a whole number in [%lld, %lld]", flag, text, (long long)lo,
                  (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *text, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage(cmd, "%s: '%s' is not a number in [%g, %g]", flag, text, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_shard(const char *cmd, const char *text, cli_shards *s)
{
    const char *eq = strrchr(text, '=');
    size_t len = eq ? (size_t)(eq - text) : 0;
    if (!eq || !len || len >= sizeof s->names[0] || s->n == CLI_MAX_SHARD) {
        cli_usage(cmd, "--shard '%s': NAME=AXIS[:GROUPS] or NAME=replicated (at most %d)", text, CLI_MAX_SHARD);
        return -1;
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
            cli_usage(cmd, "--shard '%s': the axis (and groups) must be whole numbers, or 'replicated'", text);
            return -1;
        }
        o->axis = (int)axis;
        o->groups = groups;
    }
    s->n++;
    return 0;
}

void cli_print_json(json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(obj);
}

int cli_relaunch(const char *cmd, int nproc, int argc, char **argv)
{
    if (nproc <= 0 || rc_dist_launched())
        return -1;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_fail(cmd, "--nproc: cannot find this program's path: %s", strerror(errno));
    self[n] = 0;
    char np[16];
    snprintf(np, sizeof np, "%d", nproc);
    char **args = calloc((size_t)argc + 8, sizeof *args);
    if (!args)
        return cli_fail(cmd, "out of memory");
    int k = 0;
    args[k++] = "mpiexec";
    args[k++] = "--quiet";
    args[k++] = "-n";
    args[k++] = np;
    args[k++] = self;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--nproc")) {
            i++; /* drop the flag and its value */
            continue;
        }
        args[k++] = argv[i];
    }
    /* more processes than cores, and root in containers, are normal for us */
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    if (getuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    if (!getenv("OMP_NUM_THREADS")) { /* share the cores between the processes */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char threads[24];
        snprintf(threads, sizeof threads, "%ld", cores > nproc ? cores / nproc : 1);
        setenv("OMP_NUM_THREADS", threads, 1);
    }
    fflush(NULL);
    execvp(args[0], args);
    int e = errno;
    free(args);
    return cli_fail(cmd, "--nproc: cannot start mpiexec: %s (install openmpi-bin)", strerror(e));
}
