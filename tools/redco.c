/* redco - the command line. */
#include "redco.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "redco %s - distributed training and inference of language models\n"
            "\n"
            "usage: redco <command> [options]\n"
            "\n"
            "commands:\n"
            "  version    print the version\n"
            "  help       print this message\n"
            "\n"
            "train, eval, generate, plan and tokenize arrive with the next milestones.\n",
            REDCO_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return argc < 2 ? 1 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("redco %s\n", REDCO_VERSION);
        return 0;
    }
    fprintf(stderr, "redco: unknown command '%s' (see 'redco help')\n", argv[1]);
    return 2;
}
