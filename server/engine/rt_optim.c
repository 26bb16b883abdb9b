/*
 * rt_optim.c - learning-rate schedules. The backends apply the optimizers
 * and clipping (server/kernels/cpu/rt_kern_optim.c has the formulas).
 */
#include <math.h>

#include "rt_engine_impl.h"

float rt__sched_lr(const rt_train_config *c, int64_t step)
{
    const double lr = c->lr, lo = c->min_lr;
    switch (c->sched) {
    case RT_SCHED_STEP:
        return (float)(lr * pow(c->gamma, floor((double)step / (double)c->step_size)));
    case RT_SCHED_COSINE: {
        double t = (double)(step < (int64_t)c->total_steps ? step : (int64_t)c->total_steps);
        return (float)(lo + (lr - lo) * (1 + cos(M_PI * t / c->total_steps)) / 2);
    }
    case RT_SCHED_EXP: return (float)(lr * pow(c->gamma, (double)step / (double)c->step_size));
    case RT_SCHED_LINEAR_WARMUP: {
        double f = (double)(step + 1) / (double)c->warmup_steps;
        return (float)(lr * (f < 1 ? f : 1));
    }
    case RT_SCHED_WARMUP_COSINE: {
        if (step < (int64_t)c->warmup_steps)
            return (float)(lr * (double)(step + 1) / (double)c->warmup_steps);
        double span = (double)(c->total_steps - c->warmup_steps);
        double t = (double)(step - (int64_t)c->warmup_steps);
        if (t > span)
            t = span;
        return (float)(lo + (lr - lo) * (1 + cos(M_PI * t / span)) / 2);
    }
    default: return c->lr;
    }
}
