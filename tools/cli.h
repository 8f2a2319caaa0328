/* cli.h - what the command-line tools share: flag parsing and error lines. */
#ifndef REDCO_CLI_H
#define REDCO_CLI_H

#include "redco.h"
#include "redco/shard.h"

/* This process's rank: only rank 0 prints errors (all ranks agree on them first). */
extern int cli_rank;

/* Prints "redco CMD: message" on stderr; returns 1 (2 for usage errors via cli_usage). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The value after argv[*i] (advancing *i), or NULL with a usage error printed. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* Whole numbers and reals with range checks; -1 with a usage error printed. */
int cli_int64(const char *cmd, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out);
int cli_double(const char *cmd, const char *flag, const char *text, double lo, double hi, double *out);

/* --nproc P: re-runs this command under `mpiexec -n P` (with oversubscription, and root
 * allowed in containers) unless a launcher already started us. Returns the launcher's
 * exit status, or -1 when no relaunch is needed. */
int cli_relaunch(const char *cmd, int nproc, int argc, char **argv);

/* Overrides of the tensor-parallel plan from --shard NAME=AXIS[:GROUPS] or NAME=replicated
 * (repeatable). */
enum { CLI_MAX_SHARD = 64 };
typedef struct {
    int n;
    char names[CLI_MAX_SHARD][128];
    rc_shard_override o[CLI_MAX_SHARD];
} cli_shards;
/* adds one --shard value; -1 with a usage error printed */
int cli_shard(const char *cmd, const char *text, cli_shards *s);

/* Prints a JSON object as one line of stdout (the --json contract) and releases it. */
struct json_t;
void cli_print_json(struct json_t *obj);

/* The command implementations: argv[0] is the command's name. */
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_tokenizer_train(int argc, char **argv);

#endif
