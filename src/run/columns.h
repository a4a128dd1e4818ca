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
} mp_columns_opts;

/* What a model keeps: the widths, the mode and the scalers (n_cols 0: not
 * scaled). */
typedef struct {
    mp_atom_cols_mode atom_mode;
    int               atom_dim, bond_dim;
    mp_scaler         atom_scaler, bond_scaler;
} mp_columns;

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

#ifdef __cplusplus
}
#endif
#endif /* MP_COLUMNS_H */
