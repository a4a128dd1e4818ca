/*
 * cli.h - shared glue for the molprop command-line verbs.  Each verb lives in
 * its own file as `int cli_<verb>(int argc, char **argv)` and returns the
 * process exit status (0 success, 1 failure with a message already printed).
 * The command line uses the public header alone (it is compiled with
 * -Iinclude only): every option, check and default is the library's table
 * (mp_options_*); this layer maps argv and the environment onto it.
 */
#ifndef MP_CLI_H
#define MP_CLI_H

#include "molprop.h"

int cli_data(int argc, char **argv);
int cli_featurize(int argc, char **argv);
int cli_split(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_predict(int argc, char **argv);
int cli_fingerprint(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_hpopt(int argc, char **argv);

/* Prints "molprop <verb>: <message>\n" to stderr and returns 1. */
int cli_fail(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error as "molprop <verb>: <message>" and returns 1. */
int cli_fail_status(const char *verb, mp_status st);

/*
 * The options of `verb` from argv[1..argc): the environment's defaults
 * (MOLPROP_REGISTRY, MOLPROP_DATA_MIRROR, MOLPROP_DATA_URL,
 * MOLPROP_SLOT_CLASSES, MOLPROP_GPU_PROFILE where the verb has the option),
 * then the [verb] section of each --config file in order,
 * then every --key value, --key=value and --flag in order, so flags override
 * the file.  Other arguments go to pos[0..*n_pos) (argv's own strings) when
 * pos is not NULL, else they are an error.  --help or -h prints `usage`, the
 * option list and returns 2.  Returns 0 with *out set (free it with
 * mp_options_free), 1 after printing an error, 2 after the help.
 */
int cli_options(const char *verb, const char *usage, int argc, char **argv, mp_options **out,
                char **pos, int *n_pos);
/* The same for a verb that takes the options of several tables (hpopt: its
 * own, then train's): out[k] gets table k's; a key goes to the first table
 * that has it, --config files are read into each, --help lists them all. */
int cli_options_sets(const char *verb, const char *usage, int argc, char **argv,
                     const char *const *tables, int n, mp_options **out, char **pos, int *n_pos);

/* Prints a run's invalid rows to stderr as "molprop <verb>: FILE:LINE:
 * invalid SMILES 'S'<sep>REASON<tail>", the first `max` of them, then how
 * many more. */
void cli_report_invalid(const char *verb, const mp_summary *s, const char *file, size_t max,
                        const char *sep, const char *tail);

#endif /* MP_CLI_H */
