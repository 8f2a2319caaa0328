/* workdir.c - the files of a run's working directory (workdir.h): checkpoint names, the
 * last_checkpoint pointer, directories staged and published whole, cleanup of an
 * interrupted save's leftovers, and the log kept up to a resumed step. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "workdir.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PATH_MAX_LEN = 4400 };

int rci_path_join(char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf(out, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void rci_workdir_checkpoint_name(int64_t step, char *name, size_t size)
{
    snprintf(name, size, "checkpoint-%lld", (long long)step);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) ? -1 : 0;
}

/* Removes dir and everything under it (depth first, never following links); an absent
 * dir is not an error. */
static int remove_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) && errno == ENOENT)
        return 0;
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) ? -1 : 0;
}

int rci_workdir_last(const char *workdir, char *name, size_t size)
{
    char path[PATH_MAX_LEN];
    if (rci_path_join(path, sizeof path, workdir, "last_checkpoint"))
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(name, (int)size, f) != NULL;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    return ok && name[0] ? 0 : -1;
}

int rci_workdir_set_last(const char *workdir, const char *name, rc_error *err)
{
    char tmp[PATH_MAX_LEN], path[PATH_MAX_LEN];
    if (rci_path_join(tmp, sizeof tmp, workdir, "last_checkpoint.tmp") ||
        rci_path_join(path, sizeof path, workdir, "last_checkpoint"))
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", workdir);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f)) || fclose(f)) {
        if (f)
            fclose(f);
        return rc_error_set(err, RC_ERR_IO, "%s: cannot write", tmp);
    }
    if (rename(tmp, path))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot rename: %s", path, strerror(errno));
    return 0;
}

int rci_workdir_stage(const char *workdir, const char *name, char *tmp, size_t size, rc_error *err)
{
    char hidden[300];
    snprintf(hidden, sizeof hidden, ".tmp-%.250s", name);
    if (rci_path_join(tmp, size, workdir, hidden))
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", workdir);
    remove_tree(tmp);
    if (mkdir(tmp, 0777))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    return 0;
}

int rci_workdir_publish(const char *workdir, const char *name, const char *tmp, rc_error *err)
{
    char final[PATH_MAX_LEN], old[PATH_MAX_LEN + 8];
    if (rci_path_join(final, sizeof final, workdir, name))
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", workdir);
    snprintf(old, sizeof old, "%s.old", final);
    remove_tree(old);
    if (rename(final, old) && errno != ENOENT)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot replace: %s", final, strerror(errno));
    if (rename(tmp, final))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (remove_tree(old))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot remove the replaced directory: %s", old, strerror(errno));
    return 0;
}

/* STEP of a directory entry named checkpoint-STEP; -1 for any other name */
static int64_t checkpoint_step(const char *name)
{
    const char *p = name + 11;
    if (strncmp(name, "checkpoint-", 11) || !*p || strlen(p) > 18)
        return -1;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            return -1;
    return strtoll(p, NULL, 10);
}

static int step_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the steps of the workdir's checkpoint-STEP directories, newest first (malloc'ed) */
static int64_t *checkpoint_steps(const char *workdir, int *n)
{
    DIR *dir = opendir(workdir);
    int64_t *steps = NULL;
    int cap = 0;
    *n = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        int64_t s = checkpoint_step(e->d_name);
        if (s < 0)
            continue;
        if (*n == cap) {
            int64_t *more = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!more)
                break;
            steps = more;
        }
        steps[(*n)++] = s;
    }
    if (dir)
        closedir(dir);
    if (*n > 1)
        qsort(steps, (size_t)*n, sizeof *steps, step_desc);
    return steps;
}

int rci_workdir_rotate(const char *workdir, int keep, rc_error *err)
{
    char last[256] = "", name[64], path[PATH_MAX_LEN], aside[PATH_MAX_LEN];
    int n, rc = 0;
    if (rci_workdir_last(workdir, last, sizeof last))
        last[0] = 0;
    int64_t *steps = checkpoint_steps(workdir, &n);
    for (int i = keep; !rc && i < n; i++) {
        rci_workdir_checkpoint_name(steps[i], name, sizeof name);
        if (!strcmp(name, last) || rci_path_join(path, sizeof path, workdir, name) ||
            snprintf(aside, sizeof aside, "%s/.tmp-%s", workdir, name) >= (int)sizeof aside)
            continue;
        remove_tree(aside);
        if (rename(path, aside) || remove_tree(aside))
            rc = rc_error_set(err, RC_ERR_IO, "%s: cannot remove (keeping the newest %d checkpoints): %s", path,
                              keep, strerror(errno));
    }
    free(steps);
    return rc;
}

/* 1 for an entry an interrupted save left behind */
static int is_leftover(const char *workdir, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, ".tmp-", 5) == 0 && n > 5)
        return 1;
    if (strcmp(name, "last_checkpoint.tmp") == 0 || strcmp(name, "log.jsonl.tmp") == 0)
        return 1;
    /* NAME.old is the previous NAME, renamed just before the new one took its place: stale
     * only when NAME is there (otherwise it is the one complete copy) */
    char final[PATH_MAX_LEN];
    struct stat st;
    if (n > 4 && strcmp(name + n - 4, ".old") == 0 &&
        snprintf(final, sizeof final, "%s/%.*s", workdir, (int)(n - 4), name) < (int)sizeof final)
        return stat(final, &st) == 0 && S_ISDIR(st.st_mode);
    return 0;
}

int rci_workdir_clean(const char *workdir)
{
    DIR *dir = opendir(workdir);
    if (!dir)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        char path[PATH_MAX_LEN];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || !is_leftover(workdir, e->d_name) ||
            rci_path_join(path, sizeof path, workdir, e->d_name))
            continue;
        struct stat st;
        if (lstat(path, &st) == 0 && (S_ISDIR(st.st_mode) ? remove_tree(path) : remove(path)) == 0)
            removed++;
    }
    closedir(dir);
    return removed;
}

/* Copies the records of `in` with step <= step to `out`; lines without a step are kept, a
 * line that is not a JSON object (torn by a kill) is dropped. */
static int log_filter(FILE *in, FILE *out, int64_t step)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int failed = 0;
    while (!failed && (len = getline(&line, &cap, in)) > 0) {
        json_t *rec = json_loadb(line, (size_t)len, 0, NULL);
        json_t *s = json_object_get(rec, "step");
        int keep = json_is_object(rec) && (!json_is_integer(s) || json_integer_value(s) <= step);
        json_decref(rec);
        if (keep)
            failed = fputs(line, out) < 0 || (line[len - 1] != '\n' && fputc('\n', out) < 0);
    }
    free(line);
    return failed || ferror(in) ? -1 : 0;
}

int rci_workdir_log_keep(const char *path, int64_t step, rc_error *err)
{
    char tmp[PATH_MAX_LEN];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", path);
    FILE *in = fopen(path, "r"), *out = in ? fopen(tmp, "w") : NULL;
    int rc = in && out ? log_filter(in, out, step) : -1;
    if (in)
        fclose(in);
    if (out && (fflush(out) || fsync(fileno(out))))
        rc = -1;
    if (out && fclose(out))
        rc = -1;
    if (!rc && rename(tmp, path))
        rc = -1;
    if (rc) {
        rc_error_set(err, RC_ERR_IO, "%s: cannot drop the records after step %lld: %s", path, (long long)step,
                     strerror(errno));
        remove(tmp);
    }
    return rc;
}
