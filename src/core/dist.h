/*
 * dist.h - the ranks of one run: MPI processes when molprop was built with
 * MPI (MP_HAVE_MPI, Open MPI's libopenmpi-dev) and started by a launcher
 * (mpirun, srun), or the threads of one process (mp_dist_run_threads below:
 * `train --devices N`), one process otherwise.  Sharded prediction
 * (run/shard.c) and data-parallel training (run/fit.c) talk to the other
 * ranks through these calls only, whichever kind they are; without either
 * they are the one-process identities.
 *
 * Every collective here is deterministic: a reduction gathers every rank's
 * values and adds them in rank order on every rank, so K ranks give the same
 * bits each run, and the same bits on every rank.
 */
#ifndef MP_DIST_H
#define MP_DIST_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build has MPI. */
int mp_dist_built_with_mpi(void);

/* The number of processes the launcher says it started (its environment:
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIx under srun), 1 when none. */
int mp_dist_launched_size(void);

/*
 * Joins the launcher's processes (MPI_Init once; MPI_Finalize at exit).
 * Idempotent.  Started without a launcher: one process, MPI left alone.
 * Under a launcher of K > 1 processes in a build without MPI: MP_ERR_ARG
 * saying what is missing (each rank would do the whole job).
 */
mp_status mp_dist_init(void);
/* MPI_Finalize when MPI was initialized and not finalized yet (the exit
 * handler mp_dist_init registers; mp_exit calls it before _exit). */
void      mp_dist_finalize(void);
int       mp_dist_rank(void);   /* 0 before mp_dist_init or without MPI */
int       mp_dist_size(void);   /* 1 before mp_dist_init or without MPI */

/* Every rank calls it with its own ok; returns 1 on every rank when all
 * were ok.  A failed MPI call counts as not ok. */
int       mp_dist_all_ok(int ok);
/* Sums of n values over the ranks, in rank order, on every rank. */
mp_status mp_dist_sum_u64(uint64_t *v, int n);
mp_status mp_dist_sum_double(double *v, int n);
/* The maximum over the ranks, on every rank. */
mp_status mp_dist_max_double(double *v);
/* all[r * n ... ] = rank r's mine[0 .. n), on every rank. */
mp_status mp_dist_allgather_float(const float *mine, float *all, size_t n);
/* v[i] := sum over the ranks r, in rank order, of w[r] * (rank r's v[i]),
 * on every rank (w NULL: every weight 1); each product rounded once, then
 * added (no fused multiply-add: the cuda backend's twin gives the same
 * bits).  scratch: n * mp_dist_size() floats (NULL: allocated here). */
mp_status mp_dist_sum_float(float *v, size_t n, const float *w, float *scratch);
/* This rank's index among the ranks of its node (0 without MPI): which GPU
 * of the node it takes. */
int       mp_dist_local_rank(void);
mp_status mp_dist_bcast(void *buf, size_t bytes, int root);
mp_status mp_dist_barrier(void);

/*
 * Threads as ranks (train --devices N): mp_dist_run_threads starts n
 * threads, thread r rank r of n, and calls fn(arg, r) in each; every call
 * above made from one of them (and only from them: a thread they start is
 * outside the group) talks to the group in shared memory, with the same
 * rank-order sums as MPI, so a run gives the same bits over n threads as
 * over n MPI processes.  device: n GPU indices (thread r's
 * mp_dist_device()), NULL for 0, 1, ... n-1.  Returns when every thread
 * has; a thread that fails wakes the others' collectives (they fail with
 * "another rank failed"), and the status and message returned are the
 * first failure's, preferring a rank's own over that echo.  n <= 1 calls
 * fn(arg, 0) in the caller's thread, outside any group.  Refused under MPI
 * ranks (one process per GPU there).
 */
typedef mp_status (*mp_dist_thread_fn)(void *arg, int rank);
mp_status mp_dist_run_threads(int n, const int *device, mp_dist_thread_fn fn, void *arg);
/* 1 in a thread of mp_dist_run_threads' group. */
int       mp_dist_in_threads(void);
/* The GPU this rank takes: its device in a thread group, its local rank
 * under MPI (the caller takes it modulo the GPUs it sees), 0 otherwise. */
int       mp_dist_device(void);

#ifdef __cplusplus
}
#endif
#endif /* MP_DIST_H */
