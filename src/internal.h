/*
 * internal.h - every module header at once, for the tests and benchmarks
 * that reach below the public API (include/molprop.h).  Not installed; the
 * library's own files include the module headers they use, and the command
 * line includes molprop.h alone.
 */
#ifndef MP_INTERNAL_H
#define MP_INTERNAL_H

#include "molprop.h"
#include "api/options.h"
#include "core/core.h"
#include "core/progress.h"
#include "data/csv.h"
#include "data/featfile.h"
#include "data/dataset.h"
#include "data/metrics.h"
#include "data/registry.h"
#include "data/scaler.h"
#include "data/split.h"
#include "featurize/featurize.h"
#include "models/model.h"
#include "models/schedule.h"
#include "run/ensemble.h"
#include "run/modelfile.h"
#include "run/predict.h"
#include "run/trainer.h"

#endif /* MP_INTERNAL_H */
