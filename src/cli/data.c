/*
 * data.c - `molprop data`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_data(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("data", "not implemented yet");
}
