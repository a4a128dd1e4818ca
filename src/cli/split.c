/*
 * split.c - `molprop split`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_split(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("split", "not implemented yet");
}
