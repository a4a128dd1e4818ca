/*
 * columns.h - the user atom / bond columns of a run (Chemprop v1.6.1's
 * --atom_descriptors_path with --atom_descriptors feature|descriptor, and
 * --bond_features_path): reading the files into the dataset's graph store
 * (featurize/atomcols.h), the standardization Chemprop applies to them
 * (a StandardScaler fitted on every atom / bond row of the training
 * molecules, on unless --no_atom_descriptor_scaling /
 * --no_bond_features_scaling), the widths they give the model
 * (model.h atom_extra_dim ...) and their model-file keys.
 */
#ifndef MP_COLUMNS_H
#define MP_COLUMNS_H

#include "data/scaler.h"
#include "featurize/atomcols.h"
#include "featurize/featurize.h"
#include "graph/graph.h"
#include "models/model.h"
#include "run/modelfile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_ATOM_COLS_NONE = 0,
    MP_ATOM_COLS_FEATURE,      /* appended to the atom features x_v   */
    MP_ATOM_COLS_DESCRIPTOR    /* appended to the atom hiddens (W_ad) */
} mp_atom_cols_mode;

/* "feature" / "descriptor" (MP_ERR_ARG for anything else) and back. */
mp_status   mp_atom_cols_parse(const char *s, mp_atom_cols_mode *out);
const char *mp_atom_cols_name(mp_atom_cols_mode m);

/* What a run was asked for. */
typedef struct {
    const char       *atom_path;   /* NULL: no atom columns           */
    mp_atom_cols_mode atom_mode;   /* NONE with a path: FEATURE       */
    const char       *bond_path;   /* NULL: no bond columns           */
    int               no_atom_scaling; /* 0: standardize (Chemprop's default) */
    int               no_bond_scaling;
    mp_atom_cols_mode bond_mode;   /* Chemprop v1.6.1's --bond_descriptors: NONE or *
                                    * FEATURE (the only kind for molecule targets;  *
                                    * DESCRIPTOR is refused, as Chemprop refuses it *
                                    * without --is_atom_bond_targets)               */
} mp_columns_opts;

/* What a model keeps: the widths, the mode and the scalers (n_cols 0: not
 * scaled). */
typedef struct {
    mp_atom_cols_mode atom_mode;
    int               atom_dim, bond_dim;
    mp_scaler         atom_scaler, bond_scaler;
} mp_columns;

/* The options o of a training run against each other: a mode without its
 * path (the atom mode: with no column file at all), columns for a model
 * without atoms (dmpnn 0), Chemprop's bond
 * "descriptor" mode (refused: see mp_columns_opts).  MP_ERR_ARG naming the
 * options. */
mp_status mp_columns_opts_check(const mp_columns_opts *o, int dmpnn);

/* Reads the files o names into g (the store of the whole input, molecule i
 * = input row i); smiles names molecules in messages.  Nothing to do: MP_OK. */
mp_status mp_columns_read(mp_graphs *g, const mp_columns_opts *o, const char *const *smiles);

/*
 * Sets *c from what g carries after mp_columns_read (widths, o's mode) and
 * fits its scalers, where o asks, on the rows of the molecules train[0..n)
 * (Chemprop's vstack of the training molecules' arrays).  *c must be empty
 * (zeroed); free with mp_columns_free.
 */
mp_status mp_columns_fit(mp_columns *c, const mp_columns_opts *o, const mp_graphs *g,
                         const int32_t *train, int32_t n);

/* Standardizes g's columns in place with c's scalers (where c has them). */
void mp_columns_apply(const mp_columns *c, mp_graphs *g);

/* The model widths of c into cfg. */
void mp_columns_config(const mp_columns *c, mp_model_config *cfg);

/*
 * g (read at prediction time with the same kind of files) against what the
 * model was trained with: MP_ERR_ARG naming the option when a file is
 * missing, extra, or of another width.
 */
mp_status mp_columns_check(const mp_columns *c, const mp_graphs *g, const char *model_path);

/* Model-file keys: atom_descriptors (feature|descriptor), atom_descriptors_dim,
 * bond_features_dim, atom_scaler.*, bond_scaler.* (only what c has: a model
 * without columns writes none).  get reads them back into c and cfg, each
 * checked (absent: none), naming path in messages. */
mp_status mp_columns_put(const mp_columns *c, mp_kv *kv);
mp_status mp_columns_get(mp_columns *c, const mp_kv *kv, const char *path);

void mp_columns_free(mp_columns *c);

/*
 * Molecules given in memory (a training run's inputs, trainer.h) whose
 * store carries user columns read unscaled by the caller (the benchmark
 * runner reads a dataset's once for all its runs): *view becomes a shallow
 * copy of src holding its own copies of the columns o asks for (the run
 * scales them in place; src's stay as they are) and none of the others (an
 * FFN run, or a D-MPNN run without columns, sees a store without them);
 * *viewed = 1 and *f = view.  A src without columns: nothing changes.
 * MP_ERR_ARG naming the option when o asks for columns src lacks.  Free the
 * copies with mp_columns_view_free.
 */
mp_status mp_columns_view(mp_features *view, int *viewed, const mp_features *src,
                          const mp_columns_opts *o, mp_features **f);
void      mp_columns_view_free(mp_features *view);

/* ===================================================================== */
/* The column files of a run that uses a saved model                      */
/* ===================================================================== */

/*
 * The atom / bond column files given to a verb that runs a saved model
 * (predict, predict --calibrate, eval, fingerprint), read once; each chunk
 * of the input takes its molecules' rows.
 */
typedef struct {
    mp_colfile  file[2];    /* atoms, bonds                              */
    int         has[2];
    const char *model_path;
} mp_columns_files;

/*
 * Reads the files a model with columns c needs: atom_path / bond_path (NULL:
 * none given) for n_mols input rows (-1: not known yet, see
 * mp_colfile_read).  MP_ERR_ARG naming the option (prefix + the option's
 * name: "" gives --atom-descriptors-path, "calibration-" gives
 * --calibration-atom-descriptors-path) when the model needs a file that is
 * not given or is given one it does not take; the file's own errors
 * otherwise.  *cf is set in any case: free with mp_columns_files_free.
 */
mp_status mp_columns_files_open(mp_columns_files *cf, const mp_columns *c, const char *atom_path,
                                const char *bond_path, const char *model_path, int32_t n_mols,
                                const char *prefix);

/*
 * The rows of the files' molecules first .. first + g->n_mols - 1 into the
 * store g (a chunk of the input: g's molecule i is input row first + i,
 * smiles[i] names it), checked against the model (mp_columns_check) and
 * standardized as at training (mp_columns_apply).  A model without
 * columns and no files: nothing to do.
 */
mp_status mp_columns_files_apply(const mp_columns_files *cf, const mp_columns *c, mp_graphs *g,
                                 int32_t first, const char *const *smiles);

/*
 * At the end of the input (seen rows in all, data_path names it): each
 * file covers it, no more and no less; last 0 (a shard before the last)
 * checks only that a file has no fewer molecules.  MP_ERR_FORMAT naming the
 * file.
 */
mp_status mp_columns_files_end(const mp_columns_files *cf, size_t seen, int last,
                               const char *data_path);

void mp_columns_files_free(mp_columns_files *cf);

#ifdef __cplusplus
}
#endif
#endif /* MP_COLUMNS_H */
