/*
 * ensemble.h - a trained predictor: one or more models (ensemble members that
 * differ only in their seeds) together with everything needed to turn a
 * featurized molecule into a prediction in the user's units: the molecule
 * features it reads, their scaler, the target scaler, task names and type.
 *
 * The trainer builds one; the model file (.mpm) stores one; predict and eval
 * load one.  Sits above models (model.h) and data (scaler, metrics).
 */
#ifndef MP_ENSEMBLE_H
#define MP_ENSEMBLE_H

#include "core/core.h"
#include "data/registry.h"
#include "data/scaler.h"
#include "featurize/featurize.h"
#include "models/model.h"
#include "run/columns.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Molecule-level feature sets (a bit mask; concatenated in this order). */
enum {
    MP_FEAT_MORGAN       = 1u << 0,  /* Morgan r=2, 2048 bits (0/1)        */
    MP_FEAT_MORGAN_COUNT = 1u << 1,  /* Morgan r=2, 2048 hashed counts     */
    MP_FEAT_RDKIT2D      = 1u << 2   /* RDKit's 2D descriptor registry     */
};

/* Parses "morgan,morgan-count,rdkit2d" (or "" / "none") into a mask. */
mp_status mp_feature_set_parse(const char *s, unsigned *mask);
/* Writes the mask back as "morgan,rdkit2d" ("none" when empty). */
void      mp_feature_set_name(unsigned mask, char *buf, size_t n);
/* Length of the concatenated vector (n_desc: descriptors per molecule). */
int       mp_feature_set_dim(unsigned mask, int n_desc);
/*
 * Fills out[i*dim ...] with the features of molecules mols[i] (unscaled;
 * an invalid molecule, or a NaN descriptor, reads as 0 after scaling because
 * it is left NaN here and the feature scaler maps NaN to 0).
 */
void      mp_feature_set_fill(unsigned mask, const mp_features *f, const int32_t *mols,
                              int32_t n, float *out);

typedef struct {
    mp_model_config cfg;          /* shared by every member                    */
    int             n_members;
    mp_model      **members;
    mp_backend     *backend;      /* owned                                     */
    mp_task_type    task;
    size_t          n_tasks;
    char          **task_names;   /* n_tasks                                   */
    char           *smiles_name;  /* header of the SMILES column at training  */
    mp_atom_layout  layout;
    unsigned        features;     /* MP_FEAT_* mask                            */
    int             n_desc;       /* descriptors per molecule at training      */
    mp_scaler       target_scaler;   /* regression only (n_cols == n_tasks)    */
    mp_scaler       feature_scaler;  /* when features != 0                     */
    mp_columns      cols;         /* user atom / bond columns: widths, mode,
                                   * scalers (columns.h; empty: none)        */
    void           *stream_bufs;  /* the streamed prediction's batch buffers,
                                   * kept between calls (owned)               */
} mp_ensemble;

/* Opens backend `backend_name` ("cpu", "cuda", "cuda:bf16", ...) and an empty
 * ensemble of n_members models built from cfg with seeds seed + i. */
mp_status mp_ensemble_create(mp_ensemble **out, const mp_model_config *cfg, int n_members,
                             uint64_t seed, const char *backend_name);
void      mp_ensemble_free(mp_ensemble *e);

/* Featurization options this ensemble needs (layout, Morgan, descriptors). */
mp_featurize_opts mp_ensemble_featurize_opts(const mp_ensemble *e);

/*
 * Predicts molecules mols[0..n) of f in the user's units: for each molecule
 * and task the mean over members (probabilities for classification) into
 * mean[i*n_tasks + t], and the member standard deviation (ddof 0) into std
 * (may be NULL).  Only members [first, first+count) are used when count > 0
 * (the trainer scores one member at a time); MP_ERR_ARG for a range outside
 * the ensemble.  Invalid molecules get NaN.  Works in batches of the valid
 * molecules among consecutive runs of batch_size entries of mols: the
 * outputs are bitwise those of mp_model_forward (training 0) on those
 * batches (ensemble_predict.c).
 *
 * One path on every backend: two batch slots in flight, the host packing
 * batch j + 1 into one (page-locked where the backend can) block and
 * uploading it on a copy lane while the device runs batch j, outputs read
 * back asynchronously (ops.h's streaming ops; on a backend without them,
 * the cpu and ref backends, the same code with synchronous copies).  The
 * slots' buffers are kept in e between calls (mp_ensemble_predict_release
 * frees them; mp_ensemble_free does too).
 */
mp_status mp_ensemble_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                              int32_t n, int first, int count, int32_t batch_size,
                              double *mean, double *std);

/* mp_ensemble_predict with stats (may be NULL): where the call's host time
 * went.  The same results. */
typedef struct {
    int    batches;
    double pack_s;        /* host: selecting, packing, checking batches     */
    double wait_s;        /* host: waiting for the device's outputs         */
    double total_s;       /* the whole call                                 */
    double upload_bytes;  /* packed bytes sent to the device                */
} mp_predict_stream_stats;

mp_status mp_ensemble_predict_stream(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *mean, double *std, mp_predict_stream_stats *stats);
void      mp_ensemble_predict_release(mp_ensemble *e);

/* The heads of issue 11 (models/heads.h): values per task of e's head
 * (mp_head_n_values: 1 for regression and classification, 2 for mve, ...),
 * and every value: vals [n x n_tasks x V] the member mean of value k of
 * task t at (i n_tasks + t) V + k (mean, variance, nu, alpha, beta,
 * interval, class probabilities, in the user's units as heads.h says), std
 * (may be NULL) their member spread.  mp_ensemble_predict's mean holds value
 * 0 of each task (the point prediction; for a multiclass head the
 * probability of class 0: use these values). */
int       mp_ensemble_n_values(const mp_ensemble *e);
mp_status mp_ensemble_predict_values(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *vals, double *std);

/* Model file (.mpm; modelio.c, in the format of modelfile.h): written
 * atomically; loading checks everything against the header and opens
 * backend `backend_name` for the members. */
mp_status mp_ensemble_save(const mp_ensemble *e, const char *path);
mp_status mp_ensemble_load(mp_ensemble **out, const char *path, const char *backend_name);

#ifdef __cplusplus
}
#endif
#endif /* MP_ENSEMBLE_H */
