/*
 * predict.c - `molprop predict`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_predict(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("predict", "not implemented yet");
}
