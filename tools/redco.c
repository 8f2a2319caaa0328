/* redco - the command line: train, eval, generate, tokenize. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "redco %s - distributed training and inference of language models\n"
            "\n"
            "usage: redco <command> [options]      (redco <command> --help for its options)\n"
            "\n"
            "commands:\n"
            "  train      train a preset or a Hugging Face model directory on text or tokens\n"
            "  eval       loss and perplexity of a model on data\n"
            "  generate   continue a prompt with a model\n"
            "  plan       the tensor-parallel plan of a model over N shards (no weights allocated)\n"
            "  tokenize   text -> token ids, or ids -> text (--decode)\n"
            "  tokenizer-train  learn a byte-level BPE vocabulary from a text file\n"
            "  devices    list the OpenCL devices (opencl:N) and their memory\n"
            "  privacy    epsilon of a DP-SGD run, or the noise multiplier for a target epsilon\n"
            "  version    print the version\n"
            "\n"
            "Distributed runs: mpirun -np P redco train ..., or redco train --nproc P ...\n",
            REDCO_VERSION);
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
    if (!strcmp(cmd, "train"))
        return cli_exit_status(cmd_train(argc - 1, argv + 1));
    if (!strcmp(cmd, "eval"))
        return cli_exit_status(cmd_eval(argc - 1, argv + 1));
    if (!strcmp(cmd, "generate"))
        return cli_exit_status(cmd_generate(argc - 1, argv + 1));
    if (!strcmp(cmd, "plan"))
        return cli_exit_status(cmd_plan(argc - 1, argv + 1));
    if (!strcmp(cmd, "tokenizer-train"))
        return cli_exit_status(cmd_tokenizer_train(argc - 1, argv + 1));
    if (!strcmp(cmd, "devices"))
        return cli_exit_status(cmd_devices(argc - 1, argv + 1));
    if (!strcmp(cmd, "tokenize"))
        return cli_exit_status(cmd_tokenize(argc - 1, argv + 1));
    if (!strcmp(cmd, "privacy"))
        return cli_exit_status(cmd_privacy(argc - 1, argv + 1));
    fprintf(stderr, "redco: unknown command '%s' (see 'redco help')\n", cmd);
    return 2;
}
