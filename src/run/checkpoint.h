/*
 * checkpoint.h - a training run's checkpoint: the file `molprop train
 * --checkpoint-every N` writes into its save directory after every N-th
 * epoch (atomically, replacing the last one), and `--resume D` continues
 * from, ending with the model bit for bit that of the uninterrupted run.
 *
 * It is a model file (modelfile.h: header, tensors, CRC) of its own kind,
 * "format = molprop-checkpoint", holding:
 *   - the run's identity, header keys the caller makes (trainer.c): the
 *     options that decide the result ("opt.*") and what the run made of its
 *     data ("data.*": rows, a CRC of the SMILES and labels, task, metric,
 *     the scalers), compared on resume key by key;
 *   - each member in training and its state after its last checkpointed
 *     epoch (mp_fit_state: the order's stream, the schedule, the next
 *     epoch's order and rates, the best epoch's parameters, score and
 *     number, the model's parameters, Adam moments and steps, the dropout
 *     stream, the batch source's state): one member when they train one
 *     after another, several when they train side by side (--member-jobs);
 *   - the members finished: their final parameters and best epochs;
 *   - the split (train, validation, test rows).
 * A member neither finished nor in training starts afresh on resume; each
 * member's training depends on nothing but its own state, so the resumed
 * run ends bit for bit as the uninterrupted one, whatever the order in
 * which the members ran.
 * Binary values are tensors of 32-bit words (a double or a 64-bit integer
 * is two, low word first; parameters are the backend's raw elements), so
 * nothing is rounded on the way.
 */
#ifndef MP_CHECKPOINT_H
#define MP_CHECKPOINT_H

#include "data/split.h"
#include "run/fit.h"
#include "run/modelfile.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_CHECKPOINT_FILE    "checkpoint.mpc"
#define MP_CHECKPOINT_VERSION 2   /* 1 (one member's state) is read too */

/* What a checkpoint holds besides the run's identity keys. */
typedef struct {
    int                 n_members;    /* the ensemble's size                        */
    size_t              n_params;     /* per member                                 */
    int                 n_done;       /* members finished                           */
    const int          *done_members; /* n_done: which, ascending                   */
    const float        *done_params;  /* n_done x n_params: their final parameters  */
    const int          *done_best;    /* n_done: their best epochs                  */
    int                 n_states;     /* members in training                        */
    const mp_fit_state *states;       /* n_states, k ascending, none of them done   */
    mp_split            split;
} mp_checkpoint;

/* A deep copy of state s into *out (its arrays mp_malloc'd: free with
 * mp_fit_state_free).  MP_ERR_NOMEM. */
mp_status mp_fit_state_copy(mp_fit_state *out, const mp_fit_state *s);

/*
 * What a run's next checkpoint holds, member by member (trainer.c keeps one
 * while it checkpoints or resumes): each member not started, in training
 * (its last checkpointed state, a deep copy) or done (its final parameters
 * and best epoch).  The members may train side by side, each checkpointing
 * after its own epochs: the caller serializes the calls.
 */
typedef struct {
    int           n_members;
    size_t        n_params;
    int          *status;     /* per member: 0 not started, 1 live, 2 done   */
    mp_fit_state *live;       /* status 1: the state                         */
    float        *final;      /* status 2: n_params each                     */
    int          *best;       /* status 2: the best epoch                    */
} mp_ck_table;

/* An empty table, or (resumed not NULL) the members of that checkpoint.
 * MP_ERR_NOMEM; free with mp_ck_table_free either way. */
mp_status mp_ck_table_open(mp_ck_table *t, int n_members, size_t n_params,
                           const mp_checkpoint *resumed);
void      mp_ck_table_free(mp_ck_table *t);
/* Member s->k in training: a copy of s replaces what the table held. */
mp_status mp_ck_table_set_state(mp_ck_table *t, const mp_fit_state *s);
/* Member k done: its final parameters (copied) and best epoch. */
void      mp_ck_table_set_done(mp_ck_table *t, int k, const float *params, int best_epoch);
/* The table as a checkpoint, written atomically (mp_checkpoint_write). */
mp_status mp_ck_table_write(const mp_ck_table *t, const char *path, const mp_kv *run,
                            const mp_split *split);
/* Where the table holds the run, for a message: "epoch 3 of member 1,
 * epoch 2 of member 2", or "2 members done". */
void      mp_ck_table_where(const mp_ck_table *t, char *buf, size_t n);

/*
 * Writes the checkpoint atomically to `path`: the keys of `run` (copied
 * into its header as they are), then ck.  MP_ERR_IO naming the file
 * (nothing is left at `path` but the previous checkpoint, if any).
 */
mp_status mp_checkpoint_write(const char *path, const mp_kv *run, const mp_checkpoint *ck);

/*
 * Reads and checks a checkpoint: *ck gets everything (its arrays owned by
 * *ck: free with mp_checkpoint_free), *run the header (every key, the
 * run's identity among them; mp_kv_free).  MP_ERR_IO when it cannot be read,
 * MP_ERR_FORMAT / MP_ERR_CHECKSUM for a file that is not a checkpoint of
 * this version or does not add up.
 */
mp_status mp_checkpoint_read(const char *path, mp_kv **run, mp_checkpoint *ck);
void      mp_checkpoint_free(mp_checkpoint *ck);

/*
 * Compares the keys beginning with `prefix` ("opt.", "data.") of the
 * checkpoint's header `saved` and of this run's `now`: MP_OK when both have
 * the same keys with the same values; otherwise MP_ERR_ARG naming the first
 * key that differs, its two values and `path`: "cannot resume from
 * D/checkpoint.mpc: it was made with epochs = 30, this run has epochs = 40".
 */
mp_status mp_checkpoint_match(const mp_kv *saved, const mp_kv *now, const char *prefix,
                              const char *path);

#ifdef __cplusplus
}
#endif
#endif /* MP_CHECKPOINT_H */
