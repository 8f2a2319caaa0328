#include "check.h"

#include "redco/device.h"
#include "redco/pipeline.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdlib.h>

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

char *check_read_file(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) &&
        fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (!p)
        return NULL;
    p[n] = 0;
    *len = (size_t)n;
    return p;
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

int check_weights_add(check_weights *w, const char *prefix, const char *name, const float *x, int64_t n,
                      double tol)
{
    int k = w->n;
    char **names = realloc(w->names, (size_t)(k + 1) * sizeof *names);
    if (names)
        w->names = names;
    int64_t *numel = realloc(w->numel, (size_t)(k + 1) * sizeof *numel);
    if (numel)
        w->numel = numel;
    float **data = realloc(w->data, (size_t)(k + 1) * sizeof *data);
    if (data)
        w->data = data;
    double *tols = realloc(w->tol, (size_t)(k + 1) * sizeof *tols);
    if (tols)
        w->tol = tols;
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *full = malloc(len);
    float *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (!names || !numel || !data || !tols || !full || !copy) {
        free(full), free(copy);
        return -1;
    }
    snprintf(full, len, "%s%s", prefix, name);
    memcpy(copy, x, (size_t)n * sizeof *copy);
    w->names[k] = full;
    w->numel[k] = n;
    w->data[k] = copy;
    w->tol[k] = tol;
    w->n = k + 1;
    return 0;
}

float *check_params_flat(rc_params *p)
{
    int64_t n = rc_params_numel(p);
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    if (x && rc_params_read_all(p, x, NULL)) {
        free(x);
        return NULL;
    }
    return x;
}

int check_weights_add_params(check_weights *w, const char *prefix, rc_params *p, double tol)
{
    for (int i = 0; i < rc_params_count(p); i++) {
        int64_t n = rc_params_tensor_numel(p, i);
        float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
        int bad = !x || rc_params_read(p, i, x, NULL) ||
                  check_weights_add(w, prefix, rc_params_name(p, i), x, n, tol);
        free(x);
        if (bad)
            return -1;
    }
    return 0;
}

rc_backend *check_device(const char *what, const char *spec)
{
    rc_error err = {0};
    rc_backend *be = rc_device_open(spec, 0, &err);
    if (be)
        return be;
    int cuda = !strncmp(spec, "cuda", 4);
    const char *kind = cuda ? "CUDA" : "OpenCL", *var = cuda ? "REDCO_REQUIRE_CUDA" : "REDCO_REQUIRE_OPENCL";
    const char *req = getenv(var);
    int present = cuda ? rc_cuda_device_count(NULL) > 0 : rc_opencl_device_count(NULL) > 0;
    int required = (req && !strcmp(req, "1")) || present;
    CHECKF(!required, "%s: no %s backend (a device is there, or %s=1): %s", what, kind, var, err.msg);
    if (!required)
        printf("%s: not run (no %s device; set %s=1 to fail): %s\n", what, kind, var, err.msg);
    return NULL;
}

rc_backend *check_opencl(const char *what)
{
    return check_device(what, "opencl:0");
}

int check_weights_add_file(check_weights *w, const char *path, int dtype)
{
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(path, &err);
    int rc = f ? 0 : -1;
    for (int i = 0; !rc && i < rc_safetensors_count(f); i++) {
        const rc_st_tensor *t = rc_safetensors_info(f, i);
        if (dtype >= 0 && t->dtype != dtype) {
            rc_error_set(&err, RC_ERR_DTYPE, "%s: %s is %s, not %s", path, t->name, t->dtype_name,
                         rc_dtype_name((rc_dtype)dtype));
            rc = -1;
            break;
        }
        float *x = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *x);
        rc = x && !rc_safetensors_read_f32(f, i, x, t->numel, &err) ? check_weights_add(w, "", t->name, x, t->numel, 0)
                                                                     : -1;
        free(x);
    }
    rc_safetensors_close(f);
    if (rc)
        fprintf(stderr, "check_weights_add_file: %s\n", err.msg[0] ? err.msg : "out of memory");
    return rc;
}

void check_weights_free(check_weights *w)
{
    for (int i = 0; i < w->n; i++) {
        free(w->names[i]);
        free(w->data[i]);
    }
    free(w->names), free(w->numel), free(w->data), free(w->tol);
    *w = (check_weights){0};
}

static void name_worst(char *worst, size_t size, const char *name)
{
    if (worst && size)
        snprintf(worst, size, "%s", name);
}

double check_weights_diff(const check_weights *a, const check_weights *ref, char *worst, size_t size,
                          double *tol)
{
    name_worst(worst, size, "(no tensors)");
    if (tol)
        *tol = 0;
    if (a->n != ref->n || ref->n == 0) {
        name_worst(worst, size, "(different tensor counts)");
        return INFINITY;
    }
    double e = 0;
    for (int i = 0; i < ref->n; i++) {
        if (strcmp(a->names[i], ref->names[i]) || a->numel[i] != ref->numel[i]) {
            name_worst(worst, size, ref->names[i]);
            return INFINITY;
        }
        double num = 0, den = 0;
        for (int64_t k = 0; k < ref->numel[i]; k++) {
            double d = (double)a->data[i][k] - ref->data[i][k];
            num += d * d;
            den += (double)ref->data[i][k] * ref->data[i][k];
        }
        /* a tensor whose values are rounding residue of zero (a bias with no gradient)
         * is measured against an RMS of CHECK_ZERO_RMS; NaN compares false, so a NaN
         * anywhere makes the tensor the worst */
        double floor = CHECK_ZERO_RMS * sqrt((double)ref->numel[i]);
        double r = num == 0 ? 0 : sqrt(num) / fmax(sqrt(den), floor);
        if (!(r <= e) || i == 0) {
            e = r == r ? r : INFINITY;
            name_worst(worst, size, ref->names[i]);
            if (tol)
                *tol = ref->tol[i];
        }
    }
    return e;
}

/* dump file: "RCWT1\n", int32 n, then per tensor int32 name length, the name, int64
 * numel, double tol, numel floats (this machine's byte order) */
static const char dump_magic[6] = "RCWT1\n";

int check_weights_save(const check_weights *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    int32_t n = w->n;
    ok = ok && fwrite(dump_magic, 1, 6, f) == 6 && fwrite(&n, sizeof n, 1, f) == 1;
    for (int i = 0; ok && i < w->n; i++) {
        int32_t len = (int32_t)strlen(w->names[i]);
        ok = fwrite(&len, sizeof len, 1, f) == 1 && fwrite(w->names[i], 1, (size_t)len, f) == (size_t)len &&
             fwrite(&w->numel[i], sizeof w->numel[i], 1, f) == 1 && fwrite(&w->tol[i], sizeof w->tol[i], 1, f) == 1 &&
             fwrite(w->data[i], sizeof(float), (size_t)w->numel[i], f) == (size_t)w->numel[i];
    }
    if (f && fclose(f))
        ok = 0;
    if (!ok)
        fprintf(stderr, "%s: cannot write the weights dump\n", path);
    return ok ? 0 : -1;
}

int check_weights_load(check_weights *w, const char *path)
{
    *w = (check_weights){0};
    FILE *f = fopen(path, "rb");
    char magic[6];
    int32_t n = 0;
    int ok = f && fread(magic, 1, 6, f) == 6 && !memcmp(magic, dump_magic, 6) && fread(&n, sizeof n, 1, f) == 1 &&
             n >= 0 && n < 1000000;
    for (int i = 0; ok && i < n; i++) {
        int32_t len = 0;
        int64_t numel = 0;
        double tol = 0;
        char name[4096];
        ok = fread(&len, sizeof len, 1, f) == 1 && len >= 0 && len < (int32_t)sizeof name &&
             fread(name, 1, (size_t)len, f) == (size_t)len && fread(&numel, sizeof numel, 1, f) == 1 &&
             numel >= 0 && numel < ((int64_t)1 << 32) && fread(&tol, sizeof tol, 1, f) == 1;
        float *x = ok ? malloc((size_t)(numel > 0 ? numel : 1) * sizeof *x) : NULL;
        if (ok) {
            name[len] = 0;
            ok = x && fread(x, sizeof *x, (size_t)numel, f) == (size_t)numel &&
                 check_weights_add(w, "", name, x, numel, tol) == 0;
        }
        free(x);
    }
    if (f)
        fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: %s\n", path, f ? "not a whole weights dump" : "cannot open the weights dump");
        check_weights_free(w);
    }
    return ok ? 0 : -1;
}

const char *check_dump_path(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--dump"))
            return argv[i + 1];
    return NULL;
}

double check_rel_error(const double *a, const double *r, int64_t n, double floor_frac)
{
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(r[i]))
            scale = fmax(scale, fabs(r[i]));
    double floor = fmax(floor_frac * scale, 1e-30);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(r[i]))
            continue;
        if (!isfinite(a[i]) || !isfinite(r[i])) {
            if (a[i] != r[i])
                return INFINITY;
            continue;
        }
        worst = fmax(worst, fabs(a[i] - r[i]) / fmax(fabs(r[i]), floor));
    }
    return worst;
}

double check_rel_error_f32(const float *a, const float *r, int64_t n, double floor_frac)
{
    double *da = malloc((size_t)(n > 0 ? n : 1) * sizeof *da), *dr = malloc((size_t)(n > 0 ? n : 1) * sizeof *dr);
    double e = INFINITY;
    if (da && dr) {
        for (int64_t i = 0; i < n; i++)
            da[i] = a[i], dr[i] = r[i];
        e = check_rel_error(da, dr, n, floor_frac);
    }
    free(da), free(dr);
    return e;
}

rc_buffer *check_buffer_of(rc_backend *be, const float *x, int64_t n)
{
    rc_error err = {0};
    rc_buffer *b = rc_buffer_new(be, (size_t)n * sizeof(float), &err);
    if (b && rc_buffer_upload(b, 0, x, (size_t)n * sizeof(float), &err)) {
        rc_buffer_free(b);
        b = NULL;
    }
    CHECKF(b, "a buffer of %lld floats: %s", (long long)n, err.msg);
    return b;
}

double check_buffer_diff(rc_buffer *a, rc_buffer *b, int64_t n)
{
    rc_error err = {0};
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double e = INFINITY;
    if (x && y && !rc_buffer_download(a, 0, x, (size_t)n * sizeof *x, &err) &&
        !rc_buffer_download(b, 0, y, (size_t)n * sizeof *y, &err))
        e = check_rel_error_f32(x, y, n, 1e-3);
    CHECKF(isfinite(e) || !err.msg[0], "reading two buffers back: %s", err.msg);
    free(x), free(y);
    return e;
}
