/* cli.h - what the command-line tools share: flag parsing and error lines. */
#ifndef REDCO_CLI_H
#define REDCO_CLI_H

#include "redco.h"
#include "redco/model.h"
#include "redco/shard.h"

#include <getopt.h>

/* This process's rank: only rank 0 prints errors (all ranks agree on them first). */
extern int cli_rank;

/* Prints the one line "redco CMD: message" on stderr and returns 1; cli_usage adds
 * "(see 'redco CMD --help')" to the line and returns 2, the exit status of usage errors. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reading a command's flags with getopt_long: in argv's order (argv is never permuted, so
 * cli_relaunch sees it as given), --flag VALUE and --flag=VALUE alike, whole flag names
 * only (no abbreviations), -h for --help, and everything after "--" positional. A flag
 * with an optional value (optional_argument) takes --flag=VALUE, or the next argument when
 * that is a whole number (--zero 2, --remat 2). Each
 * entry of a command's flag table gives its val (>= CLI_FLAG0, or CLI_HELP for help) and
 * has_arg; the table ends with a zero entry. */
enum { CLI_END = -1, CLI_BAD = -2, CLI_ARG = 1, CLI_HELP = 'h', CLI_FLAG0 = 256 };
typedef struct {
    const char *cmd;
    const struct option *flags;
    const char *value; /* the flag's value, or the positional argument */
    char flag[64];     /* "--name" of the flag just read, for messages */
    int rest;          /* getopt_long is done: what is left of argv is positional */
} cli_args;
/* Reads all of argv: prints help on stdout for --help or -h, and gives every other flag's
 * val (CLI_ARG for a positional argument) to take, which returns 0 or the exit status of a
 * bad value. An unknown flag, a missing value or a value given to a flag that takes none
 * is a usage error. Returns 0, -1 after the help, or the exit status of the first error. */
typedef int (*cli_take)(const char *cmd, int c, const cli_args *a, void *user);
int cli_parse(const char *cmd, int argc, char **argv, const struct option *flags, const char *help, cli_take take,
              void *user);

/* --config FILE: a JSON object whose keys are the command's flags' long names ("lr" for
 * --lr), read after the command line; a flag the command line gave (given[val - CLI_FLAG0]
 * set) keeps its value. A value is a string or a number (the flag's value), true (a flag
 * that takes none, or an optional value left out), false or null (not given), or an array
 * of values (a repeatable flag, as --shard). An unknown key (or "config"), bad JSON or a
 * value of the wrong kind is a usage error naming the key and the file; each value goes
 * through take as the command line's would, its strings inside *doc (the document, which
 * the caller releases with json_decref when done with the values). Returns 0 or the exit
 * status. */
enum { CLI_MAX_FLAGS = 128 };
struct json_t;
int cli_config_read(const char *cmd, const char *path, const struct option *flags, const unsigned char *given,
                    cli_take take, void *user, struct json_t **doc);

/* --zero[=STAGE] (train and plan): STAGE 0, 1 or 2 into *out, 1 without a value (v NULL);
 * 0, or 2 with a usage error printed (stage 3 is one line saying it is not built yet). */
int cli_zero(const char *cmd, const char *v, int *out);
/* --attention fused|unfused (train, eval, generate, plan): sets rc_set_fused_attention for
 * the graphs recorded after it; 0, or 2 with a usage error printed. */
int cli_attention(const char *cmd, const char *v);
/* Whole numbers and reals with range checks; 0, or 2 (the exit status) with a usage error printed. */
int cli_int64(const char *cmd, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out);
int cli_double(const char *cmd, const char *flag, const char *text, double lo, double hi, double *out);

/* --nproc P: runs this command again under `mpiexec -n P` (with oversubscription, and root
 * allowed in containers) unless a launcher already started us: argv as given, less
 * --nproc P (or --nproc=P). This process waits for mpiexec, passes the first SIGINT or
 * SIGTERM it receives on to every rank as a stop notice and a second one (not within
 * RC_STOP_REPEAT_MS of the first) as the end of the job; mpiexec itself is deaf to SIGTERM,
 * so that a scheduler signalling every process stops the job as well (launch.c). Returns
 * the job's exit status (128 + the signal after a stop), or -1 when no relaunch is needed. */
int cli_relaunch(const char *cmd, int nproc, int argc, char **argv);
/* In a rank of the launcher's job (else nothing): its stop notices end the rank as the
 * signals they stand for would, until a fit catches them. Called first thing in main. */
void cli_launched_signals(void);
/* The exit status of a command, as main returns it: code, or in a rank of the launcher's
 * job 0 after leaving a non-zero code in the launcher's status directory (the launcher
 * exits with it; mpiexec would print a page about a non-zero exit). */
int cli_exit_status(int code);

/* Overrides of the tensor-parallel plan from --shard NAME=AXIS[:GROUPS] or NAME=replicated
 * (repeatable). */
enum { CLI_MAX_SHARD = 64 };
typedef struct {
    int n;
    char names[CLI_MAX_SHARD][128];
    rc_shard_override o[CLI_MAX_SHARD];
} cli_shards;
/* adds one --shard value; 0, or 2 (the exit status) with a usage error printed */
int cli_shard(const char *cmd, const char *text, cli_shards *s);

/* The configuration of --model: DIR/config.json when there is one, else the preset of that
 * name (no weights read). */
int cli_model_config(const char *model, rc_model_config *c, rc_error *err);
/* 1 when MODEL is a directory with a config.json (else a preset's name) */
int cli_model_is_dir(const char *model);

/* How a dp x mp mesh lies on hosts of per_host ranks each (ranks in order, plan_hosts.c),
 * and the bytes of one step's collectives under a ring in rank order: what a rank sends on
 * each axis, what crosses the network in all and leaves one host. */
typedef struct {
    int64_t per_host, hosts;
    int64_t model_hosts, data_hosts;  /* the most hosts one group of the axis spans */
    double model_rank, data_rank;     /* bytes a rank sends per step */
    double model_across, data_across; /* bytes crossing between hosts per step, all ranks */
    double model_host_out, data_host_out; /* of those, what host 0 sends (each full host alike) */
} cli_hosts_traffic;
/* model_vector: the model axis' all-reduced bytes a rank per step (forward and backward);
 * data_vector: what a rank's data-axis collectives would send over p ranks as p grows (an
 * all-reduce: twice its gradients' bytes; reduce-scatter + all-gather: their two vectors).
 * 0, or -1 for per_host < 1 or more than 2^24 ranks. */
int cli_hosts_traffic_of(int64_t dp, int64_t mp, int64_t per_host, double model_vector, double data_vector,
                         cli_hosts_traffic *t);
/* the "across hosts" section of `redco plan` */
void cli_hosts_traffic_print(const cli_hosts_traffic *t, int64_t dp, int64_t mp);

/* Prints a JSON object as one line of stdout (the --json contract) and releases it. */
struct json_t;
void cli_print_json(struct json_t *obj);
/* A JSON number, or null when x is NaN or infinite (JSON has no such numbers). */
struct json_t *cli_json_real(double x);

/* The command implementations: argv[0] is the command's name. */
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_presets(int argc, char **argv);
int cmd_tokenizer_train(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_privacy(int argc, char **argv);

#endif
