/*
 * molprop.h - the public API of libmolprop: molecular property prediction
 * with an FFN on fingerprints/descriptors and a directed message-passing
 * network (D-MPNN), on the CPU and NVIDIA GPUs.
 *
 * A program includes this one header and links build/libmolprop.a (plus the
 * libraries the Makefile's LDLIBS lists).  Example: featurize a CSV.
 *
 *     mp_dataset *d;
 *     if (mp_dataset_load(&d, "esol.csv", NULL) != MP_OK) {
 *         fprintf(stderr, "%s\n", mp_error_message());
 *         return 1;
 *     }
 *     mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1 };
 *     mp_features *f;
 *     mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &o);
 *     printf("%d atoms, %d directed edges\n", f->g.n_atoms, f->g.n_edges);
 *     mp_features_free(f);
 *     mp_dataset_free(d);
 *
 * Every function that can fail returns an mp_status; the message (file, line,
 * column, molecule) is then in mp_error_message().  Nothing calls exit().
 */
#ifndef MOLPROP_H
#define MOLPROP_H

#include "core/core.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "data/split.h"
#include "data/registry.h"
#include "featurize/featurize.h"
#include "core/progress.h"
#include "data/metrics.h"
#include "data/scaler.h"
#include "models/schedule.h"
#include "run/modelfile.h"
#include "models/model.h"
#include "run/ensemble.h"
#include "run/trainer.h"
#include "run/predict.h"

#endif /* MOLPROP_H */
