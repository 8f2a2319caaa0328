/* schedule.c - learning-rate schedules, counted in optimizer steps (never micro-batches:
 * with gradient accumulation upstream advanced them k times too slowly). */
#include "redco.h"

#include <math.h>

double rc_schedule_lr(const rc_schedule *s, int64_t step)
{
    if (s->warmup > 0 && step < s->warmup)
        return s->lr * (double)(step + 1) / (double)s->warmup;
    if (s->kind == RC_SCHEDULE_CONSTANT || s->total <= s->warmup)
        return s->lr;
    double progress = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    if (progress > 1.0)
        progress = 1.0;
    double decay = s->kind == RC_SCHEDULE_LINEAR ? 1.0 - progress : 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return s->min_lr + (s->lr - s->min_lr) * decay;
}
