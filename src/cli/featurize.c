/*
 * featurize.c - `molprop featurize`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_featurize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("featurize", "not implemented yet");
}
