/* npy.c - NumPy .npy token arrays: a small header parser, a memory-mapped reader and an
 * atomic writer.
 *
 * Format (NumPy's format.py docs): "\x93NUMPY", major and minor version bytes, the header
 * length (2 bytes little-endian in version 1, 4 bytes in versions 2 and 3), then the header:
 * a Python dict literal such as {'descr': '<i4', 'fortran_order': False, 'shape': (10,), }
 * padded with spaces and ended by '\n' (version 3 allows UTF-8 in it; we need only ASCII).
 * The data follow, C order. We parse just that fixed dict, not Python literals in general. */
#include "npy.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { NPY_WRITER_HEADER = 128 };

/* ---- header dict parsing ------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    const char *name;       /* file name for messages */
} hdr_reader;

static void hdr_skip_ws(hdr_reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

/* 1 and consumes c when it is next (after spaces) */
static int hdr_accept(hdr_reader *r, char c)
{
    hdr_skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

/* a quoted string ('...' or "...", no escapes) into out[cap] */
static int hdr_string(hdr_reader *r, char *out, size_t cap, rc_error *err)
{
    hdr_skip_ws(r);
    if (r->p >= r->end || (*r->p != '\'' && *r->p != '"'))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: expected a quoted string",
                            r->name);
    char q = *r->p++;
    size_t k = 0;
    while (r->p < r->end && *r->p != q) {
        if (*r->p == '\\' || k + 1 >= cap)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: string too long or "
                                "escaped", r->name);
        out[k++] = *r->p++;
    }
    if (r->p >= r->end)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: unterminated string", r->name);
    r->p++;
    out[k] = 0;
    return 0;
}

/* True or False */
static int hdr_bool(hdr_reader *r, int *v, rc_error *err)
{
    hdr_skip_ws(r);
    size_t left = (size_t)(r->end - r->p);
    if (left >= 4 && memcmp(r->p, "True", 4) == 0) {
        r->p += 4;
        *v = 1;
        return 0;
    }
    if (left >= 5 && memcmp(r->p, "False", 5) == 0) {
        r->p += 5;
        *v = 0;
        return 0;
    }
    return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: 'fortran_order' must be True or "
                        "False", r->name);
}

/* a tuple of non-negative integers, e.g. (10,) or (2, 3) or (); Python 2's 10L accepted */
static int hdr_shape(hdr_reader *r, int64_t *dims, int *ndim, rc_error *err)
{
    *ndim = 0;
    if (!hdr_accept(r, '('))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: 'shape' must be a tuple",
                            r->name);
    for (;;) {
        if (hdr_accept(r, ')'))
            return 0;
        hdr_skip_ws(r);
        if (r->p >= r->end || *r->p < '0' || *r->p > '9')
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: bad 'shape' tuple",
                                r->name);
        int64_t v = 0;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: shape too large",
                                    r->name);
            v = v * 10 + (*r->p++ - '0');
        }
        if (r->p < r->end && *r->p == 'L')
            r->p++;
        if (*ndim < RC_MAX_DIMS)
            dims[*ndim] = v;
        (*ndim)++;
        if (hdr_accept(r, ')'))
            return 0;
        if (!hdr_accept(r, ','))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: bad 'shape' tuple",
                                r->name);
    }
}

static int npy_dtype_of(const char *descr, rc_npy_dtype *dtype)
{
    if (strcmp(descr, "<i4") == 0)
        *dtype = RC_NPY_I32;
    else if (strcmp(descr, "<u2") == 0)
        *dtype = RC_NPY_U16;
    else if (strcmp(descr, "<i8") == 0)
        *dtype = RC_NPY_I64;
    else
        return -1;
    return 0;
}

static const char *npy_descr(rc_npy_dtype dtype)
{
    return dtype == RC_NPY_U16 ? "<u2" : dtype == RC_NPY_I32 ? "<i4" : "<i8";
}

/* the dict {'descr': ..., 'fortran_order': ..., 'shape': ...} in any key order */
static int hdr_dict(hdr_reader *r, rc_npy_dtype *dtype, int64_t *n, rc_error *err)
{
    char key[32], descr[32] = "";
    int fortran = -1, ndim = -1;
    int64_t dims[RC_MAX_DIMS] = {0};
    if (!hdr_accept(r, '{'))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header is not a dict", r->name);
    while (!hdr_accept(r, '}')) {
        if (hdr_string(r, key, sizeof key, err))
            return -1;
        if (!hdr_accept(r, ':'))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: expected ':' after '%s'",
                                r->name, key);
        if (strcmp(key, "descr") == 0) {
            if (hdr_string(r, descr, sizeof descr, err))
                return -1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (hdr_bool(r, &fortran, err))
                return -1;
        } else if (strcmp(key, "shape") == 0) {
            if (hdr_shape(r, dims, &ndim, err))
                return -1;
        } else {
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: unexpected key '%s'",
                                r->name, key);
        }
        if (!hdr_accept(r, ',')) {
            if (hdr_accept(r, '}'))
                break;
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header: expected ',' or '}' "
                                "after '%s'", r->name, key);
        }
    }
    if (!descr[0] || fortran < 0 || ndim < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy header lacks '%s'", r->name,
                            !descr[0] ? "descr" : fortran < 0 ? "fortran_order" : "shape");
    if (fortran)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: .npy array is in Fortran order "
                            "(fortran_order: True); token files must be C order", r->name);
    if (ndim != 1)
        return rc_error_set(err, RC_ERR_SHAPE, "%s: .npy shape has %d dimensions; token files "
                            "must be 1-D", r->name, ndim);
    if (npy_dtype_of(descr, dtype))
        return rc_error_set(err, RC_ERR_DTYPE, "%s: .npy dtype '%s' unsupported; token files "
                            "must be '<i4', '<u2' or '<i8'", r->name, descr);
    *n = dims[0];
    return 0;
}

/* Parses the header at the start of buf[len] (magic, version, header length, the dict).
 * On success sets *dtype, *n (the 1-D shape), *version and *data_offset. NAME is used in
 * messages. */
static int npy_parse_header(const uint8_t *buf, size_t len, const char *name, rc_npy_dtype *dtype,
                        int64_t *n, int *version, size_t *data_offset, rc_error *err)
{
    if (len < 8 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: not a .npy file (bad magic)", name);
    int major = buf[6], minor = buf[7];
    size_t hlen, off;
    if (major == 1) {
        if (len < 10)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy file truncated in its header",
                                name);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy file truncated in its header",
                                name);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
               (size_t)buf[11] << 24;
        off = 12;
    } else {
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: .npy format version %d.%d "
                            "unsupported (1.0, 2.0, 3.0 are)", name, major, minor);
    }
    if (hlen > len - off)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy file truncated in its header (header "
                            "says %zu bytes, file has %zu after the preamble)", name, hlen,
                            len - off);
    hdr_reader r = {(const char *)buf + off, (const char *)buf + off + hlen, name};
    if (hdr_dict(&r, dtype, n, err))
        return -1;
    *version = major;
    *data_offset = off + hlen;
    return 0;
}

/* ---- reading ------------------------------------------------------------------------- */

int rc_npy_open(rc_npy *a, const char *path, rc_error *err)
{
    memset(a, 0, sizeof *a);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rc_error_set(err, RC_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    if (len < 8) {
        close(fd);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: not a .npy file (%zu bytes)", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    size_t off = 0;
    if (npy_parse_header(map, len, path, &a->dtype, &a->n, &a->version, &off, err)) {
        munmap(map, len);
        return -1;
    }
    size_t have = (len - off) / (size_t)a->dtype;
    if ((uint64_t)a->n > have) {
        munmap(map, len);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: .npy data shorter than its shape (%lld,): "
                            "%zu bytes hold %zu elements of '%s'", path, (long long)a->n,
                            len - off, have, npy_descr(a->dtype));
    }
    a->map = map;
    a->map_len = len;
    a->data = (const uint8_t *)map + off;
    return 0;
}

void rc_npy_close(rc_npy *a)
{
    if (a->map)
        munmap(a->map, a->map_len);
    memset(a, 0, sizeof *a);
}

int64_t rc_npy_get(const rc_npy *a, int64_t i)
{
    /* byte by byte: little-endian on any host, and no unaligned loads (compilers merge these
     * into single loads on little-endian machines) */
    const uint8_t *p = a->data + i * (int64_t)a->dtype;
    switch (a->dtype) {
    case RC_NPY_U16:
        return (int64_t)(p[0] | (uint32_t)p[1] << 8);
    case RC_NPY_I32:
        return (int32_t)(p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    default: {
        uint64_t v = 0;
        for (int k = 7; k >= 0; k--)
            v = v << 8 | p[k];
        return (int64_t)v;
    }
    }
}

/* ---- writing ------------------------------------------------------------------------- */

/* the fixed-size version 1.0 header for n elements into h[NPY_WRITER_HEADER] */
static void npy_header(uint8_t *h, rc_npy_dtype dtype, int64_t n)
{
    memset(h, ' ', NPY_WRITER_HEADER);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (NPY_WRITER_HEADER - 10) & 0xff;
    h[9] = (NPY_WRITER_HEADER - 10) >> 8;
    char dict[100];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': "
                     "(%lld,), }", npy_descr(dtype), (long long)n);
    memcpy(h + 10, dict, (size_t)k);
    h[NPY_WRITER_HEADER - 1] = '\n';
}

static void writer_free(rci_npy_writer *w)
{
    free(w->path);
    free(w->tmp);
    w->path = w->tmp = NULL;
    w->f = NULL;
}

int rci_npy_writer_open(rci_npy_writer *w, const char *path, rc_npy_dtype dtype, rc_error *err)
{
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->path = strdup(path);
    size_t cap = strlen(path) + 32;
    w->tmp = malloc(cap);
    if (!w->path || !w->tmp) {
        writer_free(w);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    }
    /* unique among processes (and hosts sharing the directory) writing the same file */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(w->tmp, cap, "%s.tmp.%ld.%lx", path, (long)getpid(),
             (unsigned long)(ts.tv_nsec ^ ts.tv_sec << 30));
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int e = errno;
        rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(e));
        writer_free(w);
        errno = e;
        return -1;
    }
    uint8_t h[NPY_WRITER_HEADER];
    npy_header(h, dtype, 0);
    if (fwrite(h, 1, sizeof h, w->f) != sizeof h) {
        rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
        rci_npy_writer_abort(w);
        return -1;
    }
    return 0;
}

int rci_npy_writer_append(rci_npy_writer *w, const int32_t *ids, int64_t n, rc_error *err)
{
    uint8_t buf[4096];
    int es = (int)w->dtype;
    int64_t per = (int64_t)sizeof buf / es;
    for (int64_t s = 0; s < n; s += per) {
        int64_t m = n - s < per ? n - s : per;
        for (int64_t i = 0; i < m; i++) {
            int32_t id = ids[s + i];
            if (w->dtype == RC_NPY_U16 && (id < 0 || id > 65535))
                return rc_error_set(err, RC_ERR_INDEX, "%s: id %d at %lld does not fit '<u2'",
                                    w->path, id, (long long)(w->n + s + i));
            uint64_t v = (uint64_t)(int64_t)id;      /* sign-extends for '<i8' */
            for (int k = 0; k < es; k++)
                buf[i * es + k] = (uint8_t)(v >> (8 * k));
        }
        if (fwrite(buf, (size_t)es, (size_t)m, w->f) != (size_t)m)
            return rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    }
    w->n += n;
    return 0;
}

int rci_npy_writer_commit(rci_npy_writer *w, rc_error *err)
{
    uint8_t h[NPY_WRITER_HEADER];
    npy_header(h, w->dtype, w->n);
    int ok = fflush(w->f) == 0 && fseek(w->f, 0, SEEK_SET) == 0 &&
             fwrite(h, 1, sizeof h, w->f) == sizeof h && fflush(w->f) == 0 &&
             fsync(fileno(w->f)) == 0;
    int e = errno;
    if (fclose(w->f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    w->f = NULL;
    if (ok && rename(w->tmp, w->path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        rc_error_set(err, RC_ERR_IO, "%s: cannot write: %s", w->path, strerror(e));
        unlink(w->tmp);
        writer_free(w);
        return -1;
    }
    writer_free(w);
    return 0;
}

void rci_npy_writer_abort(rci_npy_writer *w)
{
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    writer_free(w);
}

int rc_npy_write(const char *path, rc_npy_dtype dtype, const int32_t *ids, int64_t n,
                 rc_error *err)
{
    rci_npy_writer w;
    if (rci_npy_writer_open(&w, path, dtype, err))
        return -1;
    if (rci_npy_writer_append(&w, ids, n, err)) {
        rci_npy_writer_abort(&w);
        return -1;
    }
    return rci_npy_writer_commit(&w, err);
}
