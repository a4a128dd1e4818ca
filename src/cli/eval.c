/*
 * eval.c - `molprop eval`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_eval(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("eval", "not implemented yet");
}
