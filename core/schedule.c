/* core/schedule.c — the learning rate at an epoch and optimizer step: [train] schedule (constant, step, cosine, poly,
 * linear) and warmup_steps. Not where the keys are read and T is counted (core/model.c). */
#include <math.h>
#include "parts.h"

/* schedule = poly | linear at optimizer step t (1-based) of T, warmup W, as transformers'
 * get_polynomial_decay_schedule_with_warmup's factor at t: lr * t/W up to W, then (lr - min_lr) * (1 - (t-W)/(T-W))^power
 * + min_lr, which reaches min_lr at step T and stays there past it. The warmup is the schedule's own first part here,
 * not a factor on top of it. */
static double poly_lr(const struct glia__model_trainer *tr, int64_t t)
{
    int64_t w = tr->warmup_steps, T = tr->total_steps;
    if (w > 0 && t <= w) return tr->lr * (double)t / (double)w;
    if (t >= T) return tr->min_lr;  /* also when W >= T: no steps left to decay over */
    return (tr->lr - tr->min_lr) * pow(1.0 - (double)(t - w) / (double)(T - w), tr->power) + tr->min_lr;
}

double glia__model_lr(const struct glia_model *m, int epoch, int64_t step)
{
    if (m->trainer.schedule >= GLIA__SCHED_POLY) return poly_lr(&m->trainer, step);
    double lr = m->trainer.lr;
    switch (m->trainer.schedule) {
    case GLIA__SCHED_POLY:
    case GLIA__SCHED_LINEAR: break;  /* above */
    case GLIA__SCHED_CONSTANT: break;
    case GLIA__SCHED_STEP: lr *= pow(m->trainer.gamma, (double)((epoch - 1) / m->trainer.step_epochs)); break;
    case GLIA__SCHED_COSINE:
        lr = m->trainer.min_lr + (m->trainer.lr - m->trainer.min_lr) * 0.5 * (1.0 + cos(M_PI * (double)(epoch - 1) / (double)m->trainer.epochs));
        break;
    }
    if (m->trainer.warmup_steps > 0 && step <= m->trainer.warmup_steps) lr *= (double)step / (double)m->trainer.warmup_steps;
    return lr;
}
