/*
 * featurize_rate.c - times mp_featurize on the first column of a CSV (plain
 * or gzipped; read here with zlib so only featurization is timed).
 *
 *   build/bench/featurize_rate FILE.csv[.gz] [--threads N] [--no-morgan]
 *                              [--descriptors] [--scaffolds] [--layout v1|v2|organic]
 *                              [--check-morgan] [--reference]
 *
 * --reference takes RDKit's own functions throughout (mp_rdk_set_reference,
 * as every run did before 2026-12-07): every SMILES through the whole
 * SmilesToMol, stereo perception included, and RDKit's MurckoDecompose.
 * --check-morgan then compares every molecule's Morgan counts with RDKit's
 * own GetHashedMorganFingerprint (untimed) and exits 1 on any difference.
 */
#include "internal.h"   /* every module header */
#include "featurize/rdkit_bridge.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.csv[.gz] [--threads N] [--no-morgan] [--descriptors] "
                        "[--scaffolds] [--layout L] [--check-morgan] [--reference]\n", argv[0]);
        return 1;
    }
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .n_threads = 1 };
    int check = 0, reference = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            o.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-morgan"))
            o.morgan = 0;
        else if (!strcmp(argv[i], "--descriptors"))
            o.descriptors = 1;
        else if (!strcmp(argv[i], "--scaffolds"))
            o.scaffolds = 1;
        else if (!strcmp(argv[i], "--check-morgan"))
            check = 1;
        else if (!strcmp(argv[i], "--reference"))
            reference = 1;
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc) {
            if (mp_atom_layout_parse(argv[++i], &o.layout) != MP_OK) {
                fprintf(stderr, "%s\n", mp_error_message());
                return 1;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 1;
        }
    }
    mp_rdk_set_reference(reference);
    gzFile gz = gzopen(argv[1], "rb");
    if (!gz) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    size_t n = 0, cap = 1024;
    char **smiles = malloc(cap * sizeof *smiles);
    static char line[1 << 20];
    int header = 1;
    while (smiles && gzgets(gz, line, sizeof line)) {
        if (header) {
            header = 0;
            continue;
        }
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
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    double t0 = mp_time_now();
    mp_status st = mp_featurize(&f, (const char *const *)smiles, (int32_t)n, &o);
    double s = mp_time_now() - t0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    if (st) {
        fprintf(stderr, "%s\n", mp_error_message());
        return 1;
    }
    int32_t valid = 0;
    for (int32_t i = 0; i < f->g.n_mols; i++)
        valid += f->g.valid[i];
    printf("featurize_rate file=%s threads=%d morgan=%d descriptors=%d scaffolds=%d layout=%s "
           "reference=%d molecules=%zu valid=%d atoms=%d edges=%d seconds=%.3f molecules_per_s=%.0f cpu_seconds=%.3f molecules_per_cpu_s=%.0f\n",
           argv[1], o.n_threads, o.morgan, o.descriptors, o.scaffolds,
           mp_atom_layout_name(o.layout), reference, n, (int)valid, (int)f->g.n_atoms, (int)f->g.n_edges, s,
           (double)n / s, cpu, (double)n / cpu);
    long differ = 0;
    if (check && o.morgan) {
        static uint32_t ref[MP_MORGAN_BITS];
        static float mine[MP_MORGAN_BITS];
        for (int32_t m = 0; m < (int32_t)n; m++) {
            int v = mp_rdk_morgan_reference(smiles[m], ref);
            mp_features_morgan_dense(f, m, 1, mine);
            int d = v != f->g.valid[m];
            for (int j = 0; v && j < MP_MORGAN_BITS; j++)
                d |= mine[j] != (float)ref[j];
            if (d && differ++ < 5)
                fprintf(stderr, "Morgan differs from RDKit: row %d %s\n", (int)m, smiles[m]);
        }
        printf("check_morgan molecules=%zu differ=%ld\n", n, differ);
    }
    mp_features_free(f);
    for (size_t i = 0; i < n; i++)
        free(smiles[i]);
    free(smiles);
    return differ ? 1 : 0;
}
