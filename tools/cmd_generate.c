/* cmd_generate.c - `redco generate` (placeholder until the generation module lands). */
#include "cli.h"

int cmd_generate(int argc, char **argv)
{
    (void)argc, (void)argv;
    return cli_fail("generate", "not available in this build yet");
}
