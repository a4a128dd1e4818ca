/*
 * schedule.h - the learning-rate schedule of Chemprop v1 ("Noam",
 * nn_utils.py::NoamLR), stepped after every batch: a linear warmup from
 * init_lr to max_lr, an exponential decay to final_lr at the end of the last
 * epoch, then final_lr.
 *
 *   steps_per_epoch = train_size / batch_size          (integer division)
 *   warmup          = (long)(warmup_epochs * steps_per_epoch)
 *   total           = epochs * steps_per_epoch
 *   lr(s) = init + s * (max - init) / warmup             for s <= warmup
 *         = max * gamma^(s - warmup),
 *           gamma = (final / max)^(1 / (total - warmup))  for s <= total
 *         = final                                         otherwise
 *
 * One detail matters for matching Chemprop batch for batch: PyTorch's
 * scheduler constructor already calls step() once, so the first batch trains
 * with lr(1), and batch b (0-based, counted over the whole run) with
 * lr(b + 1).  mp_noam_init therefore leaves the schedule at step 1.
 *
 * Training sets smaller than one batch give steps_per_epoch = 0, so warmup =
 * total = 0 and (as in Python, where the divisions by zero only warn) every
 * batch trains with final_lr.
 *
 *     mp_noam s;
 *     mp_noam_init(&s, 2.0, 30, n_train, 50, 1e-4, 1e-3, 1e-4);
 *     for each batch: adam_step(..., s.lr); mp_noam_step(&s);
 */
#ifndef MP_SCHEDULE_H
#define MP_SCHEDULE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double init_lr, max_lr, final_lr;
    long   steps_per_epoch;
    long   warmup_steps;
    long   total_steps;
    double linear_increment;   /* (max - init) / warmup; 0 when warmup == 0      */
    double gamma;              /* decay per step; 1 when there is no decay phase */
    long   step;               /* Chemprop's current_step                        */
    double lr;                 /* the rate for the next batch: lr(step)          */
} mp_noam;

/*
 * Sets up the schedule and takes the constructor's step (step = 1).
 * MP_ERR_ARG (with a message naming the value) when warmup_epochs is negative
 * or not finite, epochs < 0, batch_size == 0, max_lr <= 0, init_lr or
 * final_lr < 0, or a rate is not finite.
 */
mp_status mp_noam_init(mp_noam *s, double warmup_epochs, long epochs, size_t train_size,
                       size_t batch_size, double init_lr, double max_lr, double final_lr);

/* lr(step) as above; step 0 (never trained with) gives init_lr. */
double mp_noam_lr_at(const mp_noam *s, long step);

/* Advances one batch and returns the new s->lr. */
double mp_noam_step(mp_noam *s);

#ifdef __cplusplus
}
#endif
#endif /* MP_SCHEDULE_H */
