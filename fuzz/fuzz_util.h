/* fuzz_util.h - what the harnesses share: each fuzz input is written to a file in one
 * temporary directory per process (the parsers read files), and an input holding several
 * files is cut at a separator line.
 *
 * A harness defines LLVMFuzzerTestOneInput; it is linked either with libFuzzer (the fuzz
 * build, -DREDCO_FUZZ=ON) or with fuzz/replay.c (every build: the CTest fuzz_replay_NAME
 * runs it over fuzz/corpus/NAME and fuzz/regressions/NAME). */
#ifndef REDCO_FUZZ_UTIL_H
#define REDCO_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The separator between the files of one input ("\n--8<--\n"). */
#define FUZZ_SEP "\n--8<--\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process's temporary directory (made on the first call, removed at exit). */
const char *fuzz_dir(void);
/* Writes data[size] to NAME inside fuzz_dir(); returns the full path in a static buffer
 * of up to 4 paths in rotation, or NULL (then the harness returns 0). */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);
/* Removes NAME from fuzz_dir() (absent is fine). */
void fuzz_remove(const char *name);
/* Cuts data at the first FUZZ_SEP: part 0 before it, part 1 after it (empty when there is
 * no separator). */
void fuzz_split(const uint8_t *data, size_t size, const uint8_t **p0, size_t *n0,
                const uint8_t **p1, size_t *n1);

#endif
