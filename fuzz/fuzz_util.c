/* fuzz_util.c - the temporary directory and files of the harnesses (fuzz_util.h). */
#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static void dir_remove(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/redco-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(dir_remove);
    }
    return dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next];
    next = (next + 1) % 4;
    snprintf(path, sizeof paths[0], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    size_t put = size ? fwrite(data, 1, size, f) : 0;
    if (fclose(f) != 0 || put != size)
        return NULL;
    return path;
}

void fuzz_remove(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

void fuzz_split(const uint8_t *data, size_t size, const uint8_t **p0, size_t *n0,
                const uint8_t **p1, size_t *n1)
{
    size_t k = strlen(FUZZ_SEP);
    *p0 = data;
    *n0 = size;
    *p1 = data + size;
    *n1 = 0;
    for (size_t i = 0; i + k <= size; i++)
        if (!memcmp(data + i, FUZZ_SEP, k)) {
            *n0 = i;
            *p1 = data + i + k;
            *n1 = size - i - k;
            return;
        }
}
