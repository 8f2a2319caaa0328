/* npy.h - the .npy pieces the dataset code shares: header parsing and a streaming writer.
 * The public half (rc_npy_open / rc_npy_write) is in include/redco/data.h. */
#ifndef REDCO_NPY_H
#define REDCO_NPY_H

#include "redco/data.h"

#include <stdio.h>

/* A .npy written as ids arrive: a fixed 128-byte header patched with the final shape at
 * commit, data appended. Written to "PATH.tmp.PID.TIME" and renamed over PATH at commit. */
typedef struct {
    FILE *f;
    char *path, *tmp;
    rc_npy_dtype dtype;
    int64_t n;
} rci_npy_writer;

/* Fails (errno kept, err set) when the temporary file cannot be created. */
int rci_npy_writer_open(rci_npy_writer *w, const char *path, rc_npy_dtype dtype, rc_error *err);
int rci_npy_writer_append(rci_npy_writer *w, const int32_t *ids, int64_t n, rc_error *err);
/* Finishes the header, flushes and renames into place. Frees the writer either way. */
int rci_npy_writer_commit(rci_npy_writer *w, rc_error *err);
/* Removes the temporary file and frees the writer. */
void rci_npy_writer_abort(rci_npy_writer *w);

#endif
