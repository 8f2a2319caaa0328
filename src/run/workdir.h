/* workdir.h - a run's working directory as files: the names of its checkpoints, the
 * last_checkpoint pointer, directories published whole, the leftovers of an interrupted
 * save, and the log kept up to a resumed step (workdir.c). The deployer opens the workdir
 * and the trainer's checkpoints write into it; neither knows the other's files.
 *
 * workdir/checkpoint-STEP/  a training checkpoint (src/train/ckpt.c says what is in it)
 * workdir/last_checkpoint   the name of the last complete checkpoint, one line
 * workdir/best/, final/     the best by eval score, and the final model
 * workdir/log.jsonl         one JSON record per logging call
 *
 * Every directory is written under .tmp-NAME and renamed to NAME when complete (the
 * previous NAME kept as NAME.old until then); the pointer is replaced by rename after
 * that: a run killed at any moment leaves the previous checkpoint as the last valid one. */
#ifndef REDCO_WORKDIR_H
#define REDCO_WORKDIR_H

#include "redco.h"

#include <stddef.h>

/* dir + "/" + name into out; -1 when it does not fit */
int rci_path_join(char *out, size_t size, const char *dir, const char *name);

/* The name of the checkpoint of `step`: "checkpoint-STEP". */
void rci_workdir_checkpoint_name(int64_t step, char *name, size_t size);

/* The name of the workdir's last complete checkpoint (its last_checkpoint pointer) into
 * name; -1 when there is none. */
int rci_workdir_last(const char *workdir, char *name, size_t size);
/* Points last_checkpoint at name (written to a temporary file, synced, renamed). */
int rci_workdir_set_last(const char *workdir, const char *name, rc_error *err);

/* Keeps the newest `keep` checkpoint-STEP directories (by STEP; the one last_checkpoint
 * names always): each older one is renamed to .tmp-checkpoint-STEP, then removed (a kill in
 * between leaves a leftover rci_workdir_clean removes). */
int rci_workdir_rotate(const char *workdir, int keep, rc_error *err);

/* A fresh, empty workdir/.tmp-NAME to write directory NAME into; its path into tmp. */
int rci_workdir_stage(const char *workdir, const char *name, char *tmp, size_t size, rc_error *err);
/* Replaces workdir/NAME by the complete staged directory tmp. */
int rci_workdir_publish(const char *workdir, const char *name, const char *tmp, rc_error *err);

/* Removes what a save killed midway leaves in the workdir (.tmp-NAME directories,
 * last_checkpoint.tmp, NAME.old beside a complete NAME, log.jsonl.tmp). Returns how many
 * entries it removed. */
int rci_workdir_clean(const char *workdir);

/* Rewrites the log file at path keeping the records of steps <= step (and lines without
 * a step); a line that is not a JSON object (torn by a kill) is dropped. Through a
 * temporary file and a rename. */
int rci_workdir_log_keep(const char *path, int64_t step, rc_error *err);

#endif
