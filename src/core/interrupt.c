/*
 * interrupt.c - stopping a run cleanly: the process-wide "stop requested"
 * flag that a signal handler sets and long loops poll, and the list of
 * paths a run created that a last-resort handler may remove.
 *
 * The flag is one sig_atomic_t-sized int written with a relaxed atomic
 * store: async-signal-safe to set, cheap to read from any thread.  A poll
 * that finds it set returns MP_ERR_INTERRUPTED, and the run unwinds through
 * its normal error paths (temp files aborted, directories it made removed).
 *
 * The cleanup list keeps each path in a fixed slot of static memory, so
 * mp_cleanup_run (a second signal, a handler that cannot wait for the
 * unwinding) only calls unlink and rmdir on bytes that are never freed.
 */
#include "core.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

/* ===================================================================== */
/* The stop flag                                                          */
/* ===================================================================== */

static int stop_signo;              /* 0: no stop requested               */
static long poll_count;             /* polls so far (test hook)           */
static long poll_countdown = -1;    /* < 0: no simulated interruption     */
static int poll_signo;

void mp_interrupt_request(int signo)
{
    __atomic_store_n(&stop_signo, signo > 0 ? signo : SIGINT, __ATOMIC_RELAXED);
}

int mp_interrupted(void)
{
    return __atomic_load_n(&stop_signo, __ATOMIC_RELAXED);
}

void mp_interrupt_clear(void)
{
    __atomic_store_n(&stop_signo, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&poll_countdown, -1, __ATOMIC_RELAXED);
}

const char *mp_signal_name(int signo)
{
    switch (signo) {
    case SIGINT:  return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP:  return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default:      return "a signal";
    }
}

int mp_interrupt_check(void)
{
    __atomic_add_fetch(&poll_count, 1, __ATOMIC_RELAXED);
    long c = __atomic_load_n(&poll_countdown, __ATOMIC_RELAXED);
    if (c >= 0 && __atomic_sub_fetch(&poll_countdown, 1, __ATOMIC_RELAXED) == -1)
        mp_interrupt_request(poll_signo);
    return mp_interrupted();
}

mp_status mp_interrupt_poll(void)
{
    int s = mp_interrupt_check();
    if (!s)
        return MP_OK;
    return mp_error_set(MP_ERR_INTERRUPTED, "interrupted by %s", mp_signal_name(s));
}

void mp_interrupt_after_polls(long n, int signo)
{
    __atomic_store_n(&poll_signo, signo > 0 ? signo : SIGINT, __ATOMIC_RELAXED);
    __atomic_store_n(&poll_countdown, n < 0 ? -1 : n, __ATOMIC_RELAXED);
}

long mp_interrupt_polls(void) { return __atomic_load_n(&poll_count, __ATOMIC_RELAXED); }

/* ===================================================================== */
/* Paths to remove on a fatal signal                                      */
/* ===================================================================== */

#define CLEANUP_SLOTS 64
#define CLEANUP_PATH  4096

enum { SLOT_FREE, SLOT_BUSY, SLOT_FILE, SLOT_DIR };

static struct {
    int  state;                  /* SLOT_*, changed atomically            */
    long seq;                    /* registration order (newest first)     */
    char path[CLEANUP_PATH];
} slots[CLEANUP_SLOTS];
static long cleanup_seq;

int mp_cleanup_add(const char *path, int is_dir)
{
    size_t n = strlen(path);
    if (n == 0 || n >= CLEANUP_PATH)
        return -1;
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        int expect = SLOT_FREE;
        if (!__atomic_compare_exchange_n(&slots[i].state, &expect, SLOT_BUSY, 0,
                                         __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        memcpy(slots[i].path, path, n + 1);
        slots[i].seq = __atomic_add_fetch(&cleanup_seq, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&slots[i].state, is_dir ? SLOT_DIR : SLOT_FILE, __ATOMIC_RELEASE);
        return i;
    }
    return -1;   /* full: the normal unwinding still removes it */
}

void mp_cleanup_remove(int id)
{
    if (id >= 0 && id < CLEANUP_SLOTS)
        __atomic_store_n(&slots[id].state, SLOT_FREE, __ATOMIC_RELEASE);
}

void mp_cleanup_run(void)
{
    /* files first, then directories newest first (a directory made inside
     * another one goes before it); rmdir leaves a directory that is not
     * empty, so nothing a run did not create is ever removed */
    for (int i = 0; i < CLEANUP_SLOTS; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == SLOT_FILE)
            (void)unlink(slots[i].path);
    long last = -1;
    for (;;) {
        int pick = -1;
        for (int i = 0; i < CLEANUP_SLOTS; i++)
            if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == SLOT_DIR &&
                (last < 0 || slots[i].seq < last) && (pick < 0 || slots[i].seq > slots[pick].seq))
                pick = i;
        if (pick < 0)
            break;
        last = slots[pick].seq;
        (void)rmdir(slots[pick].path);
    }
}

int mp_cleanup_count(void)
{
    int n = 0;
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        int s = __atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE);
        n += s == SLOT_FILE || s == SLOT_DIR;
    }
    return n;
}
