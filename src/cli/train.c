/*
 * train.c - `molprop train`.  (Placeholder until its issue lands: it refuses.)
 */
#include "cli.h"

int cli_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("train", "not implemented yet");
}
