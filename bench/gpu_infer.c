/*
 * gpu_infer.c - inference throughput of the real model code (mp_model_forward,
 * training = 0) on the CUDA backend, for the default D-MPNN (hidden 300,
 * depth 3) on random molecule-shaped graphs (20-34 atoms, a few rings: about
 * 27 atoms and 29 bonds per molecule, like the reference), at large
 * batches and each precision.  A call includes uploading the batch's graph
 * and downloading the outputs, as streaming prediction does.  Median of 9.
 *   build/gpu_infer [batch ...]        (default 4096 16384 65536)
 */
#include "molprop.h"
#include "gpu/gpu.h"
#include "../tests/randgraph.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    char why[256];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        fprintf(stderr, "gpu_infer: no GPU: %s\n", why);
        return 1;
    }
    int batches[16] = { 4096, 16384, 65536 }, n_batches = 3;
    if (argc > 1) {
        n_batches = 0;
        for (int i = 1; i < argc && n_batches < 16; i++)
            batches[n_batches++] = atoi(argv[i]);
    }
    static const char *precisions[3] = { "cuda:fp32", "cuda:tf32", "cuda:bf16" };
    rg_opts ro = { .min_atoms = 20, .max_atoms = 34, .p_empty = 0, .p_no_bonds = 0, .max_rings = 3 };
    printf("%-10s %8s %9s %9s %12s %14s\n", "precision", "batch", "atoms", "edges", "ms/batch",
           "molecules/s");
    for (int bi = 0; bi < n_batches; bi++) {
        mp_graphs g;
        mp_rng r;
        mp_rng_seed(&r, 7, (uint64_t)bi);
        if (!rg_make(&g, &r, batches[bi], 133, &ro)) {
            fprintf(stderr, "gpu_infer: out of memory building %d molecules\n", batches[bi]);
            return 1;
        }
        float *out = malloc(sizeof(float) * (size_t)batches[bi]);
        for (int p = 0; p < 3; p++) {
            mp_backend *b;
            mp_model *m;
            mp_model_config cfg = mp_model_config_default();
            if (mp_backend_open(&b, precisions[p]) || mp_model_create(&m, &cfg, b, 1) ||
                mp_model_reserve(m, g.n_mols, g.n_atoms, g.n_edges)) {
                fprintf(stderr, "gpu_infer: %s\n", mp_error_message());
                return 1;
            }
            double t[9];
            for (int rep = -2; rep < 9; rep++) {      /* two warm-up calls */
                double t0 = mp_time_now();
                if (mp_model_forward(m, &g, NULL, g.n_mols, 0, out) || b->sync(b)) {
                    fprintf(stderr, "gpu_infer: %s\n", mp_error_message());
                    return 1;
                }
                if (rep >= 0)
                    t[rep] = mp_time_now() - t0;
            }
            qsort(t, 9, sizeof t[0], cmp_double);
            printf("%-10s %8d %9d %9d %12.3f %14.0f\n", precisions[p] + 5, g.n_mols, g.n_atoms,
                   g.n_edges, 1e3 * t[4], g.n_mols / t[4]);
            mp_model_free(m);
            mp_backend_close(b);
        }
        free(out);
        mp_graphs_free(&g);
    }
    return 0;
}
