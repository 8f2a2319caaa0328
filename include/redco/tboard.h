/* redco/tboard.h - TensorBoard event files (events.out.tfevents.*) with scalar summaries,
 * readable by `tensorboard --logdir`. */
#ifndef REDCO_TBOARD_H
#define REDCO_TBOARD_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rc_tboard rc_tboard;

/* Creates DIR/events.out.tfevents.<seconds>.<host>.<pid> and writes the file-version
 * event. */
rc_tboard *rc_tboard_open(const char *dir, rc_error *err);
/* Appends one scalar event; flushed at once so a killed run keeps what it logged. */
int rc_tboard_scalar(rc_tboard *tb, const char *tag, double value, int64_t step, rc_error *err);
/* Marks a restart that continues at `step` (a SessionLog START event, as TensorFlow writes
 * when a job resumes): TensorBoard then drops the events of earlier files at steps >= step,
 * so steps re-run after a resume are shown once, from this file. */
int rc_tboard_restart(rc_tboard *tb, int64_t step, rc_error *err);
const char *rc_tboard_path(const rc_tboard *tb);
void rc_tboard_close(rc_tboard *tb);

/* CRC-32C (Castagnoli) of n bytes, and the masked form TFRecord stores. */
uint32_t rc_crc32c(const void *data, size_t n);
uint32_t rc_crc32c_masked(const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
