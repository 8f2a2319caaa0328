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
/* The largest |a - r| / max(|r|, floor_frac max|r|) over n elements (the max over r's finite
 * ones; the floor at least 1e-30): NaN against NaN and equal infinities agree; any other
 * non-finite element makes it INFINITY. */
double check_rel_error(const double *a, const double *r, int64_t n, double floor_frac);
/* the same over floats */
double check_rel_error_f32(const float *a, const float *r, int64_t n, double floor_frac);
struct rc_backend;
struct rc_buffer;
/* n floats in a new buffer of be (NULL, a failed check, when it cannot be made) */
struct rc_buffer *check_buffer_of(struct rc_backend *be, const float *x, int64_t n);
/* check_rel_error(a, b, n, 1e-3) of two buffers' n floats (INFINITY when one cannot be read) */
double check_buffer_diff(struct rc_buffer *a, struct rc_buffer *b, int64_t n);
/* Weights copied tensor by tensor, each with the tolerance a comparison claims for it. */
typedef struct {
    int n;            /* tensors */
    char **names;     /* [n] */
    int64_t *numel;   /* [n] */
    float **data;     /* [n][numel[i]] */
    double *tol;      /* [n]: the largest relative difference claimed equal */
} check_weights;

struct rc_params;
/* appends one tensor (its name prefixed); 0 or -1 (out of memory) */
int check_weights_add(check_weights *w, const char *prefix, const char *name, const float *x, int64_t n,
                      double tol);
/* Every parameter of p copied out, flat in declaration order (malloc'ed; NULL on failure). */
float *check_params_flat(struct rc_params *p);
/* appends every tensor of p, named prefix + its name */
int check_weights_add_params(check_weights *w, const char *prefix, struct rc_params *p, double tol);
/* appends every tensor of the safetensors file at path, read as f32, under its own name;
 * with dtype >= 0 each must be stored in that rc_dtype. 0, or -1 with a message on stderr */
int check_weights_add_file(check_weights *w, const char *path, int dtype);
void check_weights_free(check_weights *w);
/* How far a run's weights are from a reference run's: the largest over tensors of
 * ||a - ref|| / max(||ref||, CHECK_ZERO_RMS sqrt(numel)) (L2 norms; 0 when equal; INFINITY
 * with a NaN, or when the two do not hold the same names and sizes). The floor only
 * matters for a tensor of RMS below 1e-6, far below any initial weight (std 0.02, norms
 * 1): rounding residue of zero, such as a bias without gradient (a key bias: softmax
 * ignores it). The worst tensor's name goes to worst (when not NULL) and its tolerance
 * (ref's) to *tol (when not NULL). */
#define CHECK_ZERO_RMS 1e-6
double check_weights_diff(const check_weights *a, const check_weights *ref, char *worst, size_t size,
                          double *tol);
/* a dump file: 0, or -1 with a message on stderr */
int check_weights_save(const check_weights *w, const char *path);
int check_weights_load(check_weights *w, const char *path);
/* The first OpenCL device's backend, or NULL: then a check fails when REDCO_REQUIRE_OPENCL=1
 * (CI sets it) or a device is there (its backend should have opened); otherwise `what` is
 * printed as not run, with the reason. */
struct rc_backend *check_opencl(const char *what);
/* The same for device `spec` ("opencl:N", "cuda", "cuda:N"): a missing CUDA device fails
 * when REDCO_REQUIRE_CUDA=1 or a CUDA device is there. */
struct rc_backend *check_device(const char *what, const char *spec);
/* the value of "--dump PATH" in argv (NULL when absent) */
const char *check_dump_path(int argc, char **argv);
/* The whole file at path, NUL-terminated (malloc'd; *len bytes before the NUL), or NULL
 * (and *len 0) when it cannot be opened or read whole. */
char *check_read_file(const char *path, size_t *len);
/* removes a file or a directory tree (tests' temporary directories) */
void check_rm_tree(const char *path);

#define CHECK(cond) check_report(!!(cond), __FILE__, __LINE__, #cond, NULL)
#define CHECKF(cond, ...) check_report(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)

#endif
