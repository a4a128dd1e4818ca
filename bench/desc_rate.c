/*
 * desc_rate.c - times molprop's Chemprop descriptor sets (featurize.h's
 * MP_SET_*) on the first column of a CSV (plain or gzipped; read with zlib
 * so only featurization is timed), as bench/descriptors.sh runs it beside
 * descriptastorus (bench/desc_rate_descriptastorus.py).
 *
 *   build/bench/desc_rate FILE.csv[.gz] [--stride K] [--max N] [--threads T]
 *                         [--sets rdkit2d|rdkit2d,rdkit2d-normalized|...]
 *
 * --stride K keeps every K-th data row (from the first), --max N at most N
 * of those.  Prints one line: molecules, valid, threads, wall seconds, process CPU
 * seconds, molecules per wall second and per CPU second (on a shared
 * machine the CPU figure is the per-core rate: a process that gets half a
 * core is charged half the seconds).  The featurization is all of it: the
 * SMILES parsed as Chemprop's make_mol does, the graph, the canonical SMILES
 * written and read again for descriptastorus' path, the descriptors.
 */
#include "internal.h"   /* every module header */

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_sets(const char *s, unsigned *sets)
{
    *sets = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        mp_vec v;
        if (mp_vec_parse(t, &v) != MP_OK) {
            free(copy);
            return -1;
        }
        mp_featurize_opts o = { 0 };
        mp_vec_request(v, &o);
        *sets |= o.sets;
    }
    free(copy);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.csv[.gz] [--stride K] [--max N] [--threads T] [--sets LIST]\n",
                argv[0]);
        return 1;
    }
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 1, .sets = MP_SET_RDKIT2D };
    long max = 0, stride = 1, row = 0;
    const char *sets_name = "rdkit2d";
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            o.n_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--stride") && i + 1 < argc) {
            stride = atol(argv[++i]);
            if (stride < 1)
                stride = 1;
        } else if (!strcmp(argv[i], "--max") && i + 1 < argc) {
            max = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--sets") && i + 1 < argc) {
            sets_name = argv[++i];
            if (parse_sets(sets_name, &o.sets) != 0) {
                fprintf(stderr, "%s\n", mp_error_message());
                return 1;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 1;
        }
    }
    gzFile gz = gzopen(argv[1], "rb");
    if (!gz) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    size_t n = 0, cap = 1024;
    char **smiles = malloc(cap * sizeof *smiles);
    static char line[1 << 20];
    int header = 1;
    while (smiles && (max <= 0 || (long)n < max) && gzgets(gz, line, sizeof line)) {
        if (header) {
            header = 0;
            continue;
        }
        if (row++ % stride != 0)
            continue;
        line[strcspn(line, ",\r\n")] = '\0';
        if (n == cap)
            smiles = realloc(smiles, (cap *= 2) * sizeof *smiles);
        if (smiles)
            smiles[n++] = strdup(line);
    }
    gzclose(gz);
    if (!smiles)
        return 1;
    mp_features *f;
    double c0 = cpu_now(), t0 = mp_time_now();
    mp_status st = mp_featurize(&f, (const char *const *)smiles, (int32_t)n, &o);
    double wall = mp_time_now() - t0, cpu = cpu_now() - c0;
    if (st) {
        fprintf(stderr, "%s\n", mp_error_message());
        return 1;
    }
    int32_t valid = 0;
    for (int32_t i = 0; i < f->g.n_mols; i++)
        valid += f->g.valid[i];
    printf("desc_rate tool=molprop file=%s sets=%s threads=%d molecules=%zu valid=%d "
           "wall_s=%.3f cpu_s=%.3f molecules_per_s=%.1f molecules_per_cpu_s=%.1f\n",
           argv[1], sets_name, o.n_threads, n, (int)valid, wall, cpu, (double)n / wall,
           (double)n / cpu);
    mp_features_free(f);
    for (size_t i = 0; i < n; i++)
        free(smiles[i]);
    free(smiles);
    return 0;
}
