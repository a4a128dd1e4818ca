/*
 * schedule.c - Chemprop v1's Noam learning-rate schedule, in the same
 * floating-point operations as its NumPy arithmetic so every rate agrees to
 * the last bit.
 */
/* init + s * inc must round twice, as NumPy does, even with FMA targets. */
#pragma GCC optimize("fp-contract=off")

#include "models/schedule.h"

#include <math.h>
#include <string.h>

mp_status mp_noam_init(mp_noam *s, double warmup_epochs, long epochs, size_t train_size,
                       size_t batch_size, double init_lr, double max_lr, double final_lr)
{
    memset(s, 0, sizeof *s);
    if (!isfinite(warmup_epochs) || warmup_epochs < 0)
        return mp_error_set(MP_ERR_ARG, "warmup epochs must be >= 0 (got %g)", warmup_epochs);
    if (epochs < 0)
        return mp_error_set(MP_ERR_ARG, "epochs must be >= 0 (got %ld)", epochs);
    if (batch_size == 0)
        return mp_error_set(MP_ERR_ARG, "batch size must be >= 1");
    if (!isfinite(max_lr) || max_lr <= 0)
        return mp_error_set(MP_ERR_ARG, "max learning rate must be > 0 (got %g)", max_lr);
    if (!isfinite(init_lr) || init_lr < 0)
        return mp_error_set(MP_ERR_ARG, "initial learning rate must be >= 0 (got %g)", init_lr);
    if (!isfinite(final_lr) || final_lr < 0)
        return mp_error_set(MP_ERR_ARG, "final learning rate must be >= 0 (got %g)", final_lr);

    s->init_lr = init_lr;
    s->max_lr = max_lr;
    s->final_lr = final_lr;
    s->steps_per_epoch = (long)(train_size / batch_size);
    /* numpy: (warmup_epochs * steps_per_epoch).astype(int) truncates */
    s->warmup_steps = (long)(warmup_epochs * (double)s->steps_per_epoch);
    s->total_steps = epochs * s->steps_per_epoch;
    s->linear_increment =
        s->warmup_steps > 0 ? (max_lr - init_lr) / (double)s->warmup_steps : 0.0;
    s->gamma = s->total_steps > s->warmup_steps
                   ? pow(final_lr / max_lr, 1.0 / (double)(s->total_steps - s->warmup_steps))
                   : 1.0;
    s->step = 0;
    s->lr = init_lr;
    mp_noam_step(s);   /* what torch's _LRScheduler.__init__ does */
    return MP_OK;
}

double mp_noam_lr_at(const mp_noam *s, long step)
{
    if (step <= 0)
        return s->init_lr;
    if (step <= s->warmup_steps)
        return s->init_lr + (double)step * s->linear_increment;
    if (step <= s->total_steps)
        return s->max_lr * pow(s->gamma, (double)(step - s->warmup_steps));
    return s->final_lr;
}

double mp_noam_step(mp_noam *s)
{
    s->step++;
    s->lr = mp_noam_lr_at(s, s->step);
    return s->lr;
}
