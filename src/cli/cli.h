/*
 * cli.h - shared glue for the molprop command-line verbs.  Each verb lives in
 * its own file as `int cli_<verb>(int argc, char **argv)` and returns the
 * process exit status (0 success, 1 failure with a message already printed).
 */
#ifndef MP_CLI_H
#define MP_CLI_H

#include "molprop.h"

int cli_data(int argc, char **argv);
int cli_featurize(int argc, char **argv);
int cli_split(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_predict(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_bench(int argc, char **argv);

/* Prints "molprop <verb>: <message>\n" to stderr and returns 1. */
int cli_fail(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error as "molprop <verb>: <message>" and returns 1. */
int cli_fail_status(const char *verb, mp_status st);

/* Option-value parsers: print a message naming the option and return 1 on
 * bad input, else 0. */
int cli_parse_int(const char *verb, const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *verb, const char *opt, const char *s, double lo, double hi, double *out);

/* Backend name for --device cpu|gpu and --precision fp32|tf32|bf16:
 * "cpu" or "cuda:<precision>".  Prints a message and returns 1 on a bad
 * combination, else 0. */
int cli_backend_name(const char *verb, const char *device, const char *precision,
                     char *out, size_t n);

#endif /* MP_CLI_H */
