/* check.h - the tests' tiny assertion kit. Each CHECK counts; a test program exits
 * non-zero when any failed and prints "N passed, N failed". */
#ifndef REDCO_CHECK_H
#define REDCO_CHECK_H

#include <stdint.h>
#include <stdio.h>

extern int check_passed, check_failed;

void check_report(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* prints the summary line; returns the process exit status */
int check_summary(const char *suite);

/* 1 when msg contains part (NULL msg: 0) */
int check_has(const char *msg, const char *part);
/* max |a - b| over max |b| (1 when b is all zeros): how far a run's weights are from a
 * reference run's */
double check_rel_diff(const float *a, const float *b, int64_t n);
/* removes a file or a directory tree (tests' temporary directories) */
void check_rm_tree(const char *path);

#define CHECK(cond) check_report(!!(cond), __FILE__, __LINE__, #cond, NULL)
#define CHECKF(cond, ...) check_report(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)

#endif
