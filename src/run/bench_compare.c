/* placeholder, replaced below */
#include "run/bench.h"
mp_status mp_run_bench_compare(const mp_options *o, FILE *out, mp_summary **s) { (void)o; (void)out; if (s) *s = NULL; return mp_error_set(MP_ERR_INTERNAL, "not yet"); }
mp_status mp_run_bench_report(const mp_options *o, mp_summary **s) { (void)o; if (s) *s = NULL; return mp_error_set(MP_ERR_INTERNAL, "not yet"); }
