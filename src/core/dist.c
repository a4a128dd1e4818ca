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

#include <pthread.h>
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

/* the thread group this thread is a rank of (NULL: none), and its rank */
typedef struct thread_group thread_group;
static _Thread_local thread_group *tl_group;
static _Thread_local int           tl_rank, tl_device;

static int group_size(const thread_group *g);

int mp_dist_rank(void) { return tl_group ? tl_rank : g_rank; }
int mp_dist_size(void) { return tl_group ? group_size(tl_group) : g_size; }
int mp_dist_local_rank(void) { return tl_group ? tl_rank : g_local; }
int mp_dist_in_threads(void) { return tl_group != NULL; }
int mp_dist_device(void) { return tl_group ? tl_device : g_local; }

#if MP_HAVE_MPI

void mp_dist_finalize(void)
{
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (inited && !done)
        MPI_Finalize();
}

static void finalize(void) { mp_dist_finalize(); }

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
    if (g_init || tl_group)
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

static int proc_all_ok(int ok)
{
    if (g_size == 1)
        return ok;
    int mine = ok ? 1 : 0, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
        return 0;
    return all;
}

static mp_status proc_allgather_float(const float *mine, float *all, size_t n)
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

static mp_status proc_sum_u64(uint64_t *v, int n)
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

static mp_status proc_sum_double(double *v, int n)
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

static mp_status proc_max_double(double *v)
{
    if (g_size == 1)
        return MP_OK;
    double in = *v;
    int rc = MPI_Allreduce(&in, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Allreduce", rc);
}

static mp_status proc_bcast(void *buf, size_t bytes, int root)
{
    if (g_size == 1)
        return MP_OK;
    if (bytes > (size_t)2147483647)
        return mp_error_set(MP_ERR_ARG, "MPI: %zu bytes in one broadcast", bytes);
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Bcast", rc);
}

static mp_status proc_barrier(void)
{
    if (g_size == 1)
        return MP_OK;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Barrier", rc);
}

#else /* !MP_HAVE_MPI */

void mp_dist_finalize(void) {}

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

static int proc_all_ok(int ok) { return ok; }

static mp_status proc_allgather_float(const float *mine, float *all, size_t n)
{
    memcpy(all, mine, n * sizeof *all);
    return MP_OK;
}

static mp_status proc_sum_u64(uint64_t *v, int n) { (void)v; (void)n; return MP_OK; }
static mp_status proc_sum_double(double *v, int n) { (void)v; (void)n; return MP_OK; }
static mp_status proc_max_double(double *v) { (void)v; return MP_OK; }
static mp_status proc_bcast(void *buf, size_t bytes, int root)
{
    (void)buf; (void)bytes; (void)root;
    return MP_OK;
}
static mp_status proc_barrier(void) { return MP_OK; }

#endif /* MP_HAVE_MPI */

/* ===================================================================== */
/* Threads as ranks                                                       */
/* ===================================================================== */

/* The group: a barrier that a failed rank can break, and one slot per rank
 * through which a collective's inputs are read by every rank in place. */
struct thread_group {
    int             n;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             arrived;
    unsigned long   gen;        /* barriers passed                        */
    int             broken;     /* a rank failed: every wait fails now    */
    const void    **slot;       /* n: each rank's input of the collective */
};

static int group_size(const thread_group *g) { return g->n; }

static mp_status broken_error(void)
{
    return mp_error_set(MP_ERR_IO, "rank %d of %d: another rank failed (its message says why)",
                        tl_rank, tl_group->n);
}

/* Waits until all n ranks came here; MP_ERR_IO once the group is broken. */
static mp_status group_wait(thread_group *g)
{
    pthread_mutex_lock(&g->mu);
    int broken = g->broken;
    if (!broken) {
        unsigned long gen = g->gen;
        if (++g->arrived == g->n) {
            g->arrived = 0;
            g->gen++;
            pthread_cond_broadcast(&g->cv);
        } else {
            while (g->gen == gen && !g->broken)
                pthread_cond_wait(&g->cv, &g->mu);
            broken = g->gen == gen;   /* woken by the break, not the last rank */
        }
    }
    pthread_mutex_unlock(&g->mu);
    return broken ? broken_error() : MP_OK;
}

static void group_break(thread_group *g)
{
    pthread_mutex_lock(&g->mu);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* all[r * bytes ...] = rank r's mine: published, copied, and held until
 * every rank has copied (mine may change after the call). */
static mp_status group_gather(const void *mine, void *all, size_t bytes)
{
    thread_group *g = tl_group;
    g->slot[tl_rank] = mine;
    mp_status st = group_wait(g);
    for (int r = 0; !st && r < g->n; r++)
        memcpy((char *)all + (size_t)r * bytes, g->slot[r], bytes);
    mp_status st2 = st ? st : group_wait(g);
    return st2;
}

static int group_all_ok(int ok)
{
    int *all = mp_malloc(sizeof(int) * (size_t)tl_group->n);
    if (!all) {
        group_break(tl_group);
        return 0;
    }
    int mine = ok != 0, res = group_gather(&mine, all, sizeof mine) == MP_OK;
    for (int r = 0; res && r < tl_group->n; r++)
        res = all[r];
    mp_free(all);
    return res;
}

static mp_status group_bcast(void *buf, size_t bytes, int root)
{
    thread_group *g = tl_group;
    g->slot[tl_rank] = buf;
    mp_status st = group_wait(g);
    if (!st && tl_rank != root)
        memcpy(buf, g->slot[root], bytes);
    return st ? st : group_wait(g);
}

/* The weighted rank-order sum read from every rank's v in place into
 * out (not v: the others still read it), then copied back. */
static mp_status group_sum_float(float *v, size_t n, const float *w, float *out)
{
    thread_group *g = tl_group;
    g->slot[tl_rank] = v;
    mp_status st = group_wait(g);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++) {
        const float *a = g->slot[0];
        volatile float s = w ? w[0] * a[i] : a[i];
        for (int r = 1; r < g->n; r++) {
            const float *b = g->slot[r];
            volatile float p = w ? w[r] * b[i] : b[i];
            s = s + p;
        }
        out[i] = s;
    }
    if ((st = group_wait(g)))
        return st;
    memcpy(v, out, n * sizeof *v);
    return MP_OK;
}

typedef struct {
    thread_group     *g;
    int               rank, device;
    mp_dist_thread_fn fn;
    void             *arg;
    pthread_t         tid;
    int               started;
    mp_status         st;
    char              msg[2048];
} rank_thread;

static void *rank_main(void *p)
{
    rank_thread *t = p;
    tl_group = t->g;
    tl_rank = t->rank;
    tl_device = t->device;
    t->st = t->fn(t->arg, t->rank);
    if (t->st) {
        snprintf(t->msg, sizeof t->msg, "%s", mp_error_message());
        group_break(t->g);   /* the others' collectives would wait forever */
    }
    tl_group = NULL;
    return NULL;
}

mp_status mp_dist_run_threads(int n, const int *device, mp_dist_thread_fn fn, void *arg)
{
    if (n <= 1)
        return fn(arg, 0);
    if (tl_group || g_size > 1)
        return mp_error_set(MP_ERR_ARG, "%d thread ranks inside %s: one or the other (under "
                            "MPI, one rank per GPU)", n,
                            tl_group ? "a thread rank" : "an MPI run");
    thread_group g;
    memset(&g, 0, sizeof g);
    g.n = n;
    g.slot = mp_calloc((size_t)n, sizeof *g.slot);
    rank_thread *t = mp_calloc((size_t)n, sizeof *t);
    if (!g.slot || !t) {
        mp_free(g.slot);
        mp_free(t);
        return mp_error_set(MP_ERR_NOMEM, "out of memory starting %d thread ranks", n);
    }
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    mp_status st = MP_OK;
    for (int r = 0; r < n; r++) {
        t[r] = (rank_thread){ .g = &g, .rank = r, .device = device ? device[r] : r, .fn = fn,
                              .arg = arg };
        if (pthread_create(&t[r].tid, NULL, rank_main, &t[r]) != 0) {
            st = mp_error_set(MP_ERR_INTERNAL, "cannot start thread rank %d of %d", r, n);
            group_break(&g);
            break;
        }
        t[r].started = 1;
    }
    for (int r = 0; r < n; r++)
        if (t[r].started)
            pthread_join(t[r].tid, NULL);
    /* the first rank's own failure, else the first echo of one */
    int pick = -1;
    for (int r = 0; !st && r < n; r++)
        if (t[r].st && (pick < 0 || (strstr(t[pick].msg, "another rank failed") &&
                                     !strstr(t[r].msg, "another rank failed"))))
            pick = r;
    if (pick >= 0)
        st = mp_error_set(t[pick].st, "%s", t[pick].msg);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    mp_free(g.slot);
    mp_free(t);
    return st;
}

/* ===================================================================== */
/* The calls: the thread group where this thread is in one, else MPI      */
/* ===================================================================== */

int mp_dist_all_ok(int ok) { return tl_group ? group_all_ok(ok) : proc_all_ok(ok); }

mp_status mp_dist_allgather_float(const float *mine, float *all, size_t n)
{
    return tl_group ? group_gather(mine, all, n * sizeof *mine)
                    : proc_allgather_float(mine, all, n);
}

mp_status mp_dist_sum_u64(uint64_t *v, int n)
{
    if (!tl_group)
        return proc_sum_u64(v, n);
    int k = tl_group->n;
    uint64_t *all = mp_malloc(sizeof *all * (size_t)n * (size_t)k);
    if (!all) {
        group_break(tl_group);
        return mp_error_set(MP_ERR_NOMEM, "out of memory (sum over thread ranks)");
    }
    mp_status st = group_gather(v, all, sizeof *v * (size_t)n);
    for (int i = 0; !st && i < n; i++) {
        uint64_t s = 0;
        for (int r = 0; r < k; r++)
            s += all[(size_t)r * (size_t)n + (size_t)i];
        v[i] = s;
    }
    mp_free(all);
    return st;
}

mp_status mp_dist_sum_double(double *v, int n)
{
    if (!tl_group)
        return proc_sum_double(v, n);
    int k = tl_group->n;
    double *all = mp_malloc(sizeof *all * (size_t)n * (size_t)k);
    if (!all) {
        group_break(tl_group);
        return mp_error_set(MP_ERR_NOMEM, "out of memory (sum over thread ranks)");
    }
    mp_status st = group_gather(v, all, sizeof *v * (size_t)n);
    for (int i = 0; !st && i < n; i++) {
        double s = 0;
        for (int r = 0; r < k; r++)
            s += all[(size_t)r * (size_t)n + (size_t)i];
        v[i] = s;
    }
    mp_free(all);
    return st;
}

mp_status mp_dist_max_double(double *v)
{
    if (!tl_group)
        return proc_max_double(v);
    int k = tl_group->n;
    double *all = mp_malloc(sizeof *all * (size_t)k);
    if (!all) {
        group_break(tl_group);
        return mp_error_set(MP_ERR_NOMEM, "out of memory (max over thread ranks)");
    }
    mp_status st = group_gather(v, all, sizeof *v);
    for (int r = 0; !st && r < k; r++)
        *v = all[r] > *v ? all[r] : *v;
    mp_free(all);
    return st;
}

mp_status mp_dist_bcast(void *buf, size_t bytes, int root)
{
    return tl_group ? group_bcast(buf, bytes, root) : proc_bcast(buf, bytes, root);
}

mp_status mp_dist_barrier(void) { return tl_group ? group_wait(tl_group) : proc_barrier(); }

mp_status mp_dist_sum_float(float *v, size_t n, const float *w, float *scratch)
{
    int k = mp_dist_size();
    if (k == 1 && !w)
        return MP_OK;
    /* thread ranks read each other's v in place: scratch needs n floats */
    float *all = scratch ? scratch : mp_malloc(sizeof *all * (n ? n : 1) * (size_t)k);
    if (!all) {
        if (tl_group)
            group_break(tl_group);
        return mp_error_set(MP_ERR_NOMEM, "out of memory (sum of %zu values over %d ranks)", n,
                            k);
    }
    mp_status st;
    if (tl_group)
        st = group_sum_float(v, n, w, all);
    else if (!(st = proc_allgather_float(v, all, n)))
        for (size_t i = 0; i < n; i++) {
            /* rank 0 first, then 1, ...: the same bits on every rank
             * (volatile: each product rounded, never fused into an FMA) */
            volatile float s = w ? w[0] * all[i] : all[i];
            for (int r = 1; r < k; r++) {
                volatile float p = w ? w[r] * all[(size_t)r * n + i] : all[(size_t)r * n + i];
                s = s + p;
            }
            v[i] = s;
        }
    if (!scratch)
        mp_free(all);
    return st;
}
