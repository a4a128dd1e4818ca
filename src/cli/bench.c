/*
 * bench.c - `molprop bench`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("bench", "not implemented yet");
}
