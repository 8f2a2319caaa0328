/* redco - the command line: one table of commands (tools/cmd_*.c), the usage text from it. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* The commands: one table, read by the usage text and by main (and by the docs' check,
 * tests/kit/check_docs.py, which wants each described in docs/architecture.md). */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a preset or a Hugging Face model directory on text or tokens"},
    {"eval", cmd_eval, "loss and perplexity of a model on data"},
    {"generate", cmd_generate, "continue a prompt with a model"},
    {"presets", cmd_presets, "the architecture presets: parameters, vocabulary, positions"},
    {"plan", cmd_plan, "the tensor-parallel plan of a model over N shards (no weights allocated)"},
    {"tokenize", cmd_tokenize, "text -> token ids, or ids -> text (--decode)"},
    {"tokenizer-train", cmd_tokenizer_train, "learn a byte-level BPE vocabulary from a text file"},
    {"devices", cmd_devices, "list the OpenCL (opencl:N) and CUDA (cuda:N) devices and their memory"},
    {"privacy", cmd_privacy, "epsilon of a DP-SGD run, or the noise multiplier for a target epsilon"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f)
{
    fprintf(f,
            "redco %s - distributed training and inference of language models\n"
            "\n"
            "usage: redco <command> [options]      (redco <command> --help for its options)\n"
            "\n"
            "commands:\n",
            REDCO_VERSION);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-16s %s\n\nDistributed runs: mpirun -np P redco train ..., or redco train --nproc P ...\n",
            "version", "print the version");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    cli_launched_signals(); /* a rank of the --nproc launcher's job: its stop notices from the start */
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("redco %s\n", REDCO_VERSION);
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name))
            return cli_exit_status(commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "redco: unknown command '%s' (see 'redco help')\n", cmd);
    return 2;
}
