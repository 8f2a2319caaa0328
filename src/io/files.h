/* files.h - writing a whole file so that it is never seen half-written. */
#ifndef REDCO_FILES_H
#define REDCO_FILES_H

#include "redco.h"

#include <stddef.h>

/* Writes len bytes of data to path through path.tmp.PID: written, synced, renamed over
 * path. 0, or -1 with err naming the file (the temporary removed, path untouched). */
int rci_write_atomic(const char *path, const char *data, size_t len, rc_error *err);

#endif
