#include "check.h"

#include <math.h>

#include <dirent.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int check_passed, check_failed;

void check_report(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
{
    if (ok) {
        check_passed++;
        return;
    }
    check_failed++;
    fprintf(stderr, "FAIL %s:%d: %s", file, line, expr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

int check_summary(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

int check_has(const char *msg, const char *part)
{
    return msg && strstr(msg, part) != NULL;
}

void check_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[4096];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < (int)sizeof sub)
                check_rm_tree(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

double check_rel_diff(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}
