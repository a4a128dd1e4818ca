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

/* Molecule-level feature sets: a bit mask, bit v for mp_vec v
 * (featurize.h), concatenated in mp_vec order (morgan, morgan-count,
 * rdkit2d-core, rdkit2d, rdkit2d-normalized, v2-morgan, v2-morgan-count,
 * v2-rdkit2d, v2-charge), then the columns of the user's file
 * (--features-path, MP_FEAT_FILE: mp_features.file_values). */
enum {
    MP_FEAT_MORGAN          = 1u << MP_VEC_MORGAN,          /* 2048 bits (0/1)      */
    MP_FEAT_MORGAN_COUNT    = 1u << MP_VEC_MORGAN_COUNT,    /* 2048 hashed counts   */
    MP_FEAT_RDKIT2D_CORE    = 1u << MP_VEC_RDKIT2D_CORE,    /* RDKit's C++ registry
                                                             * (43; "rdkit2d" in
                                                             * model files before
                                                             * feature_sets)       */
    MP_FEAT_RDKIT2D         = 1u << MP_VEC_RDKIT2D,         /* v1 rdkit_2d (200)    */
    MP_FEAT_RDKIT2D_NORM    = 1u << MP_VEC_RDKIT2D_NORM,    /* rdkit_2d_normalized  */
    MP_FEAT_V2_MORGAN       = 1u << MP_VEC_V2_MORGAN,       /* v2 morgan_binary     */
    MP_FEAT_V2_MORGAN_COUNT = 1u << MP_VEC_V2_MORGAN_COUNT, /* v2 morgan_count      */
    MP_FEAT_V2_RDKIT2D      = 1u << MP_VEC_V2_RDKIT2D,      /* v2 rdkit_2d (208)    */
    MP_FEAT_V2_CHARGE       = 1u << MP_VEC_V2_CHARGE,       /* v2 charge (1)        */
    MP_FEAT_NAMED           = (1u << MP_N_VECS) - 1,        /* every named set      */
    MP_FEAT_FILE            = 1u << 16                      /* --features-path      */
};

/* Feature scaling (--features-scaling): Chemprop's StandardScaler fitted on
 * the training rows, per column.  A column left unscaled is kept as it is
 * (NaN read as 0); its scaler entry is the identity (mean 0, std 1). */
typedef enum {
    MP_FSCALE_AUTO = -1,   /* the descriptor sets and the file scaled; the
                            * fingerprints (bits and counts) and
                            * rdkit2d-normalized not                          */
    MP_FSCALE_OFF = 0,     /* nothing scaled (Chemprop's --no_features_scaling) */
    MP_FSCALE_ON = 1       /* everything scaled (Chemprop's default)         */
} mp_feature_scaling;

const char *mp_feature_scaling_name(mp_feature_scaling s);   /* "auto", "on", "off" */
mp_status   mp_feature_scaling_parse(const char *s, mp_feature_scaling *out);

/* Parses "morgan,rdkit2d-normalized,..." (or "" / "none") into a mask of
 * named sets; an unknown name is MP_ERR_ARG listing the valid ones. */
mp_status mp_feature_set_parse(const char *s, unsigned *mask);
/* The same with the names of model files written before the key
 * feature_sets existed: "morgan", "morgan-count", and "rdkit2d" for the
 * 43-value registry (MP_FEAT_RDKIT2D_CORE). */
mp_status mp_feature_set_parse_legacy(const char *s, unsigned *mask);
/* Writes the named sets of mask back as "morgan,rdkit2d" ("none" when it
 * has none; MP_FEAT_FILE is not named). */
void      mp_feature_set_name(unsigned mask, char *buf, size_t n);
/* Length of the concatenated vector: n_desc values for rdkit2d-core (what
 * RDKit's registry holds), n_file for MP_FEAT_FILE. */
int       mp_feature_set_dim(unsigned mask, int n_desc, int n_file);
/* Whether the columns of named set `bit` are scaled under mode s. */
int       mp_feature_set_scaled(unsigned bit, mp_feature_scaling s);
/* Refuses (MP_ERR_ARG, naming the set) a mask f does not hold: a set not
 * featurized, a core registry of another length than n_desc, a file of
 * another width than n_file. */
mp_status mp_feature_set_check(unsigned mask, const mp_features *f, int n_desc, int n_file);
/*
 * Fills out[i*dim ...] (dim = mp_feature_set_dim) with the features of
 * molecules mols[i], unscaled, in double: NaN read as 0 as Chemprop does
 * (mp_features_vec_row), an invalid molecule's row NaN throughout.  The
 * values of rdkit2d-core are rounded to float first, as molprop did before
 * the other sets existed (its models then train and predict as they did).
 */
void      mp_feature_set_fill(unsigned mask, const mp_features *f, const int32_t *mols,
                              int32_t n, double *out);
/* The same, scaled by s (its kind MP_SCALE_FEATURES, dim columns) and
 * rounded once to float: what the model reads (the scaler reads NaN as 0,
 * so an invalid molecule's row is finite; its prediction is NaN anyway). */
void      mp_feature_set_fill_scaled(unsigned mask, const mp_features *f, const int32_t *mols,
                                     int32_t n, const mp_scaler *s, float *out);
/*
 * The feature scaler of a training run: fitted on molecules rows[0..n) of f
 * in double (raw Ipc reaches 1e41), with the columns of every set that mode
 * `scaling` leaves unscaled set to the identity.  MP_ERR_NOMEM; *s empty on
 * failure.
 */
mp_status mp_feature_scaler_fit(mp_scaler *s, unsigned mask, mp_feature_scaling scaling,
                                const mp_features *f, const int32_t *rows, int32_t n);
/* A stored scaler against its mode: the columns of every unscaled set must
 * be the identity (MP_ERR_FORMAT naming the first that is not). */
mp_status mp_feature_scaler_check(const mp_scaler *s, unsigned mask, mp_feature_scaling scaling,
                                  int n_desc, int n_file);

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
    int             n_file;       /* columns of the features file at training  */
    mp_feature_scaling feature_scaling;   /* how feature_scaler was made      */
    mp_scaler       target_scaler;   /* regression only (n_cols == n_tasks)    */
    mp_scaler       feature_scaler;  /* when features != 0                     */
    mp_columns      cols;         /* user atom / bond columns: widths, mode,
                                   * scalers (columns.h; empty: none)        */
    void           *stream_bufs;  /* the streamed prediction's batch buffers,
                                   * kept between calls (owned)               */
    /* Monte Carlo dropout at prediction (mp_ensemble_set_mc_dropout; off
     * when mc_samples is 0): mc_samples passes per member at probability
     * mc_p, keyed by (mc_seed, member, pass, mc_row0 + first row of the
     * batch), so a prediction run is deterministic for a seed. */
    int             mc_samples;
    double          mc_p;
    uint64_t        mc_seed;
    int64_t         mc_row0;
    int             predict_raw;  /* during mp_ensemble_predict_raw only      */
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

/*
 * Turns Monte Carlo dropout on for the following mp_ensemble_predict calls
 * (samples >= 2 passes per member with every dropout layer at p, in
 * [0, 1); samples 0 turns it off): mean = the mean over members and
 * passes; std = sqrt of the mean over members of the variance (ddof 0)
 * over their passes (Chemprop v2.3.1's DropoutEstimator).  row0: the
 * index, in the whole input, of the row of mols[0] (a streaming caller
 * advances it by chunk) so the keys do not depend on the chunking; they do
 * depend on the batch size.  MP_ERR_ARG for bad values.
 */
mp_status mp_ensemble_set_mc_dropout(mp_ensemble *e, int samples, double p, uint64_t seed,
                                     int64_t row0);
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

/* Member `member`'s raw outputs (the FFN's last layer, heads.h's layouts)
 * of molecules mols[0..n) as doubles into raw [n x outputs]; NaN rows for
 * invalid molecules.  For the heads whose outputs are as many as their
 * values (MP_ERR_ARG otherwise; every head of heads.h today); the
 * uncertainty estimators that need more than the values read them
 * (multiclass-dirichlet's u = C / S). */
mp_status mp_ensemble_predict_raw(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                  int32_t n, int member, int32_t batch_size, double *raw);

/* Model file (.mpm; modelio.c, in the format of modelfile.h): written
 * atomically; loading checks everything against the header and opens
 * backend `backend_name` for the members. */
mp_status mp_ensemble_save(const mp_ensemble *e, const char *path);
mp_status mp_ensemble_load(mp_ensemble **out, const char *path, const char *backend_name);

#ifdef __cplusplus
}
#endif
#endif /* MP_ENSEMBLE_H */
