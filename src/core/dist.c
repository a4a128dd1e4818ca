/*
 * dist.c - the processes of one run (dist.h): Open MPI when built with
 * MP_HAVE_MPI=1, the one-process identities otherwise.
 *
 * MPI starts only under a launcher (its environment says so): a plain
 * `molprop predict` never touches MPI, so a build with MPI runs where no
 * MPI runtime is configured.  Reductions are allgathers summed in rank
 * order rather than MPI_Allreduce, whose order of additions the standard
 * leaves to the implementation (and Open MPI's changes with the message
 * size and the number of ranks).
 */
#include "core/dist.h"

#include <stdlib.h>
#include <string.h>

#ifndef MP_HAVE_MPI
#define MP_HAVE_MPI 0
#endif
#if MP_HAVE_MPI
#include <mpi.h>
#endif

static int g_init, g_rank, g_size = 1, g_local;

int mp_dist_built_with_mpi(void) { return MP_HAVE_MPI; }

int mp_dist_launched_size(void)
{
    /* mpirun (Open MPI), PMI-1/2 (MPICH's hydra, srun --mpi=pmi2); PMIx
     * (srun --mpi=pmix, Open MPI 5) names the rank only: the step's size */
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    const char *n = getenv("SLURM_STEP_NUM_TASKS");
    if (getenv("PMIX_RANK") && n && atoi(n) > 0)
        return atoi(n);
    return 1;
}

int mp_dist_rank(void) { return g_rank; }
int mp_dist_size(void) { return g_size; }
int mp_dist_local_rank(void) { return g_local; }

#if MP_HAVE_MPI

static void finalize(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Finalize();
}

static mp_status mpi_fail(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", rc);
    return mp_error_set(MP_ERR_IO, "MPI: %s failed on rank %d of %d: %s", what, g_rank, g_size,
                        msg);
}

mp_status mp_dist_init(void)
{
    if (g_init)
        return MP_OK;
    g_init = 1;
    if (mp_dist_launched_size() <= 1)
        return MP_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Init_thread", rc);
        atexit(finalize);
    }
    /* errors come back as codes, so a failure is a status and a message */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    /* the ranks sharing this node's memory, in rank order: the local index */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_local);
        MPI_Comm_free(&node);
    }
    return MP_OK;
}

int mp_dist_all_ok(int ok)
{
    if (g_size == 1)
        return ok;
    int mine = ok ? 1 : 0, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
        return 0;
    return all;
}

mp_status mp_dist_allgather_float(const float *mine, float *all, size_t n)
{
    if (g_size == 1) {
        memcpy(all, mine, n * sizeof *all);
        return MP_OK;
    }
    if (n > (size_t)2147483647)
        return mp_error_set(MP_ERR_ARG, "MPI: %zu values in one gather (at most 2^31-1)", n);
    int rc = MPI_Allgather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Allgather", rc);
}

/* Gathers n values of elem bytes from every rank into all. */
static mp_status gather_bytes(const void *mine, void *all, size_t bytes)
{
    if (bytes > (size_t)2147483647)
        return mp_error_set(MP_ERR_ARG, "MPI: %zu bytes in one gather", bytes);
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Allgather", rc);
}

mp_status mp_dist_sum_u64(uint64_t *v, int n)
{
    if (g_size == 1)
        return MP_OK;
    uint64_t *all = mp_malloc(sizeof *all * (size_t)n * (size_t)g_size);
    if (!all)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (MPI sum)");
    mp_status st = gather_bytes(v, all, sizeof *v * (size_t)n);
    for (int i = 0; !st && i < n; i++) {
        uint64_t s = 0;
        for (int r = 0; r < g_size; r++)
            s += all[(size_t)r * (size_t)n + (size_t)i];
        v[i] = s;
    }
    mp_free(all);
    return st;
}

mp_status mp_dist_sum_double(double *v, int n)
{
    if (g_size == 1)
        return MP_OK;
    double *all = mp_malloc(sizeof *all * (size_t)n * (size_t)g_size);
    if (!all)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (MPI sum)");
    mp_status st = gather_bytes(v, all, sizeof *v * (size_t)n);
    for (int i = 0; !st && i < n; i++) {
        double s = 0;
        for (int r = 0; r < g_size; r++)
            s += all[(size_t)r * (size_t)n + (size_t)i];
        v[i] = s;
    }
    mp_free(all);
    return st;
}

mp_status mp_dist_max_double(double *v)
{
    if (g_size == 1)
        return MP_OK;
    double in = *v;
    int rc = MPI_Allreduce(&in, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Allreduce", rc);
}

mp_status mp_dist_bcast(void *buf, size_t bytes, int root)
{
    if (g_size == 1)
        return MP_OK;
    if (bytes > (size_t)2147483647)
        return mp_error_set(MP_ERR_ARG, "MPI: %zu bytes in one broadcast", bytes);
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Bcast", rc);
}

mp_status mp_dist_barrier(void)
{
    if (g_size == 1)
        return MP_OK;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Barrier", rc);
}

#else /* !MP_HAVE_MPI */

mp_status mp_dist_init(void)
{
    int k = mp_dist_launched_size();
    g_init = 1;
    if (k > 1)
        return mp_error_set(MP_ERR_ARG, "started as one of %d MPI ranks, but this molprop was "
                            "built without MPI (install Open MPI's libopenmpi-dev, Debian, and "
                            "rebuild: make finds it with pkg-config ompi-c); each rank would "
                            "do the whole job.  Without MPI: run one process, or split a "
                            "prediction with --shard I/N and --merge", k);
    return MP_OK;
}

int mp_dist_all_ok(int ok) { return ok; }

mp_status mp_dist_allgather_float(const float *mine, float *all, size_t n)
{
    memcpy(all, mine, n * sizeof *all);
    return MP_OK;
}

mp_status mp_dist_sum_u64(uint64_t *v, int n) { (void)v; (void)n; return MP_OK; }
mp_status mp_dist_sum_double(double *v, int n) { (void)v; (void)n; return MP_OK; }
mp_status mp_dist_max_double(double *v) { (void)v; return MP_OK; }
mp_status mp_dist_bcast(void *buf, size_t bytes, int root)
{
    (void)buf; (void)bytes; (void)root;
    return MP_OK;
}
mp_status mp_dist_barrier(void) { return MP_OK; }

#endif /* MP_HAVE_MPI */

mp_status mp_dist_sum_float(float *v, size_t n, const float *w, float *scratch)
{
    if (g_size == 1 && !w)
        return MP_OK;
    float *all = scratch ? scratch : mp_malloc(sizeof *all * n * (size_t)g_size);
    if (!all)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (MPI sum of %zu values)", n);
    mp_status st = mp_dist_allgather_float(v, all, n);
    if (!st)
        for (size_t i = 0; i < n; i++) {
            /* rank 0 first, then 1, ...: the same bits on every rank
             * (volatile: each product rounded, never fused into an FMA) */
            volatile float s = w ? w[0] * all[i] : all[i];
            for (int r = 1; r < g_size; r++) {
                volatile float p = w ? w[r] * all[(size_t)r * n + i] : all[(size_t)r * n + i];
                s = s + p;
            }
            v[i] = s;
        }
    if (!scratch)
        mp_free(all);
    return st;
}
