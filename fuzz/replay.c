/* replay.c - runs a harness once over each file named, or each file inside each directory
 * named (fuzz/corpus/NAME, fuzz/regressions/NAME), without fuzzing: what the CTests
 * fuzz_replay_NAME do in every build, so inputs that once crashed stay regression tests.
 * Exits 0 after the last input (a crash or a sanitizer report ends it before), 1 when an
 * argument cannot be read or names no input at all. */
#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = p;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    /* an exact-size copy, so ASan sees a read past the input as one */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    if (n)
        memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file in DIR, in name order; returns the inputs run or -1. */
static int replay_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", path);
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p)
                break;
            names = p;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int runs = 0;
    for (int i = 0; i < n; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        struct stat st;
        if (!rc && stat(file, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(file))
                rc = -1;
            else
                runs++;
        }
        free(names[i]);
    }
    free(names);
    return rc ? -1 : runs;
}

int main(int argc, char **argv)
{
    int runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        int r = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) ? -1 : 1;
        if (r < 0)
            return 1;
        runs += r;
    }
    if (runs == 0) {
        fprintf(stderr, "replay: no input given\n");
        return 1;
    }
    printf("replay: %d inputs ran without a crash\n", runs);
    return 0;
}
