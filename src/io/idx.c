/* idx.c - IDX arrays (the MNIST format), plain or gzip-compressed, and labelled image sets
 * read from them (Fashion-MNIST). The format and the rules are in include/redco/data.h.
 *
 * zlib's gz* functions read both kinds of file: a gzip file is decompressed, any other is
 * passed through as it is (gzdirect tells which, for messages). */
#include "redco/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum {
    IDX_TYPE_U8 = 0x08,
    READ_CHUNK = 1 << 24           /* the data buffer grows by at most this much at a time */
};

/* Bytes in an IDX file's data past which we refuse (a corrupt header, not a data set). */
#define IDX_MAX_BYTES ((int64_t)1 << 40)

static const char *idx_type_name(int code)
{
    switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
    }
}

/* Reads up to n bytes into p. Returns the bytes read (fewer at the end of the data), or -1
 * on a zlib error, with its message in *zmsg. After a short read *zmsg is zlib's note (such
 * as "unexpected end of file" for a cut gzip stream) or NULL. */
static int64_t gz_read_full(gzFile gz, uint8_t *p, int64_t n, const char **zmsg)
{
    int64_t got = 0;
    int errnum = Z_OK;
    *zmsg = NULL;
    while (got < n) {
        unsigned chunk = n - got > (1 << 30) ? 1u << 30 : (unsigned)(n - got);
        int k = gzread(gz, p + got, chunk);
        if (k < 0) {
            *zmsg = gzerror(gz, &errnum);
            return -1;
        }
        if (k == 0)
            break;
        got += k;
    }
    if (got < n) {
        const char *m = gzerror(gz, &errnum);
        if (errnum != Z_OK)
            *zmsg = m;
    }
    return got;
}

/* "28 x 28" for dims[from..ndim) into out[cap] */
static void dims_str(const int64_t *dims, int from, int ndim, char *out, size_t cap)
{
    size_t k = 0;
    out[0] = 0;
    for (int i = from; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i > from ? " x " : "",
                              (long long)dims[i]);
}

/* The header: magic, type, dims. 0 or -1 with err set. */
static int idx_read_header(gzFile gz, const char *path, rc_idx *a, rc_error *err)
{
    uint8_t h[4 + 4 * 255];
    const char *zmsg;
    int64_t got = gz_read_full(gz, h, 4, &zmsg);
    if (got < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: broken gzip stream (%s)", path, zmsg);
    if (got < 4)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: truncated IDX header: %lld of its 4 first "
                            "bytes", path, (long long)got);
    if (h[0] != 0 || h[1] != 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: not an IDX file: bad magic %02x %02x %02x "
                            "%02x (an IDX file starts 00 00 <type> <dims>)", path, h[0], h[1],
                            h[2], h[3]);
    if (h[2] != IDX_TYPE_U8)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: IDX type code 0x%02x (%s) is not "
                            "supported: only 0x08 (unsigned byte) is read", path, h[2],
                            idx_type_name(h[2]));
    int ndim = h[3];
    if (ndim < 1 || ndim > RC_IDX_MAX_DIMS)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: IDX array of %d dimensions (1 to %d "
                            "are read)", path, ndim, RC_IDX_MAX_DIMS);
    got = gz_read_full(gz, h + 4, 4 * ndim, &zmsg);
    if (got < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: broken gzip stream (%s)", path, zmsg);
    if (got < 4 * ndim)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: truncated IDX header: %lld of the %d bytes "
                            "of its %d sizes", path, (long long)got, 4 * ndim, ndim);
    a->ndim = ndim;
    /* the product of the nonzero sizes is bounded, so every product of some of them is
     * (an item's size with 0 items still fits int64) */
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        const uint8_t *d = h + 4 + 4 * i;
        a->dims[i] = (int64_t)d[0] << 24 | (int64_t)d[1] << 16 | (int64_t)d[2] << 8 | d[3];
        if (a->dims[i] > 0 && n > IDX_MAX_BYTES / a->dims[i])
            return rc_error_set(err, RC_ERR_FORMAT, "%s: IDX sizes too large (their nonzero "
                                "product is over 2^40 bytes)", path);
        if (a->dims[i] > 0)
            n *= a->dims[i];
    }
    a->file_items = a->dims[0];
    return 0;
}

/* Reads a->n bytes of data, growing the buffer as they come (a lying header costs no more
 * memory than the file holds). FILE_N is the element count the header promises. */
static int idx_read_data(gzFile gz, const char *path, rc_idx *a, int64_t file_n, rc_error *err)
{
    int64_t cap = 0, got = 0;
    while (got < a->n) {
        int64_t want = a->n - got < READ_CHUNK ? a->n - got : READ_CHUNK;
        if (got + want > cap) {
            int64_t c = cap ? cap : READ_CHUNK;
            while (c < got + want)
                c *= 2;
            if (c > a->n)
                c = a->n;
            uint8_t *q = realloc(a->data, (size_t)c);
            if (!q)
                return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory for %lld bytes",
                                    path, (long long)c);
            a->data = q;
            cap = c;
        }
        const char *zmsg;
        int64_t k = gz_read_full(gz, a->data + got, want, &zmsg);
        if (k < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: broken gzip stream (%s)", path, zmsg);
        got += k;
        if (k < want) {
            char shape[96];
            dims_str(a->dims, 1, a->ndim, shape, sizeof shape);
            return rc_error_set(err, RC_ERR_FORMAT, "%s: truncated: the header says %lld "
                                "items%s%s (%lld bytes of data), the %s holds %lld%s%s%s", path,
                                (long long)a->file_items, shape[0] ? " of " : "", shape,
                                (long long)file_n, gzdirect(gz) ? "file" : "decompressed stream",
                                (long long)got, zmsg ? " (gzip: " : "", zmsg ? zmsg : "",
                                zmsg ? ")" : "");
        }
    }
    return 0;
}

int rc_idx_read(const char *path, int64_t limit, rc_idx *a, rc_error *err)
{
    memset(a, 0, sizeof *a);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", path,
                            errno ? strerror(errno) : "out of memory");
    gzbuffer(gz, 1 << 17);
    if (idx_read_header(gz, path, a, err) != 0)
        goto fail;
    int64_t item = 1;
    for (int i = 1; i < a->ndim; i++)
        item *= a->dims[i];
    int64_t file_n = item * a->dims[0];
    if (limit > 0 && limit < a->dims[0])
        a->dims[0] = limit;
    a->n = item * a->dims[0];
    if (idx_read_data(gz, path, a, file_n, err) != 0)
        goto fail;
    if (a->dims[0] == a->file_items) {
        /* a whole read: nothing may follow (and a gzip stream's checksum is checked here) */
        uint8_t extra[4096];
        const char *zmsg;
        int64_t k = gz_read_full(gz, extra, sizeof extra, &zmsg);
        if (k < 0) {
            rc_error_set(err, RC_ERR_FORMAT, "%s: broken gzip stream (%s)", path, zmsg);
            goto fail;
        }
        if (k > 0) {
            int64_t more = k;
            while ((k = gz_read_full(gz, extra, sizeof extra, &zmsg)) > 0)
                more += k;
            rc_error_set(err, RC_ERR_FORMAT, "%s: %lld%s bytes past the data: the header says "
                         "%lld items (%lld bytes of data)", path, (long long)more,
                         k < 0 ? " or more" : "", (long long)a->file_items, (long long)file_n);
            goto fail;
        }
        if (zmsg) {
            rc_error_set(err, RC_ERR_FORMAT, "%s: broken gzip stream (%s)", path, zmsg);
            goto fail;
        }
    }
    gzclose(gz);
    return 0;
fail:
    gzclose(gz);
    rc_idx_free(a);
    return -1;
}

void rc_idx_free(rc_idx *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

int rc_idx_write(const char *path, const rc_idx *a, int gzip, rc_error *err)
{
    if (a->ndim < 1 || a->ndim > RC_IDX_MAX_DIMS)
        return rc_error_set(err, RC_ERR_ARG, "%s: IDX write: %d dimensions (1 to %d)", path,
                            a->ndim, RC_IDX_MAX_DIMS);
    uint8_t h[4 + 4 * RC_IDX_MAX_DIMS] = {0, 0, IDX_TYPE_U8, (uint8_t)a->ndim};
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) {
        int64_t d = a->dims[i];
        if (d < 0 || d > 0xffffffffLL)
            return rc_error_set(err, RC_ERR_ARG, "%s: IDX write: size %lld of dimension %d is "
                                "not a uint32", path, (long long)d, i);
        for (int b = 0; b < 4; b++)
            h[4 + 4 * i + b] = (uint8_t)(d >> (24 - 8 * b));
        n *= d;
    }
    if (n != a->n)
        return rc_error_set(err, RC_ERR_ARG, "%s: IDX write: n = %lld, the sizes make %lld", path,
                            (long long)a->n, (long long)n);
    /* "wT": zlib writes the bytes as they are; "wb9": gzip level 9 (header time 0) */
    gzFile gz = gzopen(path, gzip ? "wb9" : "wT");
    if (!gz)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", path,
                            errno ? strerror(errno) : "out of memory");
    int ok = gzwrite(gz, h, (unsigned)(4 + 4 * a->ndim)) == 4 + 4 * a->ndim;
    for (int64_t off = 0; ok && off < n; off += 1 << 30) {
        unsigned chunk = n - off > (1 << 30) ? 1u << 30 : (unsigned)(n - off);
        ok = gzwrite(gz, a->data + off, chunk) == (int)chunk;
    }
    int errnum = Z_OK;
    const char *zmsg = ok ? "" : gzerror(gz, &errnum);
    int closed = gzclose(gz);
    if (!ok || closed != Z_OK)
        return rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", path,
                            errnum == Z_ERRNO || closed == Z_ERRNO ? strerror(errno) : zmsg);
    return 0;
}

/* ---- image sets ------------------------------------------------------------------------ */

int rc_image_set_load(rc_image_set *s, const char *images, const char *labels, int64_t limit,
                      rc_error *err)
{
    memset(s, 0, sizeof *s);
    rc_idx im, lb;
    if (rc_idx_read(images, limit, &im, err) != 0)
        return -1;
    if (rc_idx_read(labels, limit, &lb, err) != 0) {
        rc_idx_free(&im);
        return -1;
    }
    int rc = -1;
    char shape[96];
    if (im.ndim != 3) {
        dims_str(im.dims, 0, im.ndim, shape, sizeof shape);
        rc_error_set(err, RC_ERR_SHAPE, "%s: images must be a 3-D IDX array [n, h, w], not [%s]",
                     images, shape);
        goto done;
    }
    if (lb.ndim != 1) {
        dims_str(lb.dims, 0, lb.ndim, shape, sizeof shape);
        rc_error_set(err, RC_ERR_SHAPE, "%s: labels must be a 1-D IDX array [n], not [%s]",
                     labels, shape);
        goto done;
    }
    if (im.file_items != lb.file_items) {
        rc_error_set(err, RC_ERR_SHAPE, "count mismatch: %s holds %lld images, %s %lld labels",
                     images, (long long)im.file_items, labels, (long long)lb.file_items);
        goto done;
    }
    s->n = im.dims[0];
    s->h = im.dims[1];
    s->w = im.dims[2];
    s->pixels = malloc((size_t)(im.n ? im.n : 1) * sizeof *s->pixels);
    s->labels = malloc((size_t)(s->n ? s->n : 1) * sizeof *s->labels);
    if (!s->pixels || !s->labels) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory for %lld images", images,
                     (long long)s->n);
        rc_image_set_free(s);
        goto done;
    }
    for (int64_t i = 0; i < im.n; i++)
        s->pixels[i] = (float)im.data[i] / 255.0f;
    for (int64_t i = 0; i < s->n; i++)
        s->labels[i] = lb.data[i];
    rc = 0;
done:
    rc_idx_free(&im);
    rc_idx_free(&lb);
    return rc;
}

void rc_image_set_free(rc_image_set *s)
{
    if (!s)
        return;
    free(s->pixels);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

/* ---- Fashion-MNIST ---------------------------------------------------------------------- */

static const char *const fashion_classes[RC_FASHION_MNIST_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"
};

const char *rc_fashion_mnist_class(int label)
{
    return label >= 0 && label < RC_FASHION_MNIST_CLASSES ? fashion_classes[label] : NULL;
}

static int file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fclose(f);
    return 1;
}

/* out[cap] = DIR/SPLIT-KIND-ubyte.gz or, when only that exists, without .gz; 0 or -1 */
static int fashion_path(char *out, size_t cap, const char *dir, const char *split,
                        const char *kind, int is_default, rc_error *err)
{
    int k = snprintf(out, cap, "%s/%s-%s-ubyte.gz", dir, split, kind);
    if (k < 0 || (size_t)k >= cap)
        return rc_error_set(err, RC_ERR_ARG, "Fashion-MNIST: directory name too long: %s", dir);
    if (file_exists(out))
        return 0;
    out[k - 3] = 0;
    if (file_exists(out))
        return 0;
    return rc_error_set(err, RC_ERR_IO, "Fashion-MNIST: neither %s.gz nor %s exists%s", out, out,
                        is_default ? ": install Debian's dataset-fashion-mnist package "
                        "(apt-get install dataset-fashion-mnist; scripts/setup.sh does)" : "");
}

int rc_fashion_mnist_load(rc_image_set *s, const char *dir, const char *split, int64_t limit,
                          rc_error *err)
{
    memset(s, 0, sizeof *s);
    if (!split || (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0))
        return rc_error_set(err, RC_ERR_ARG, "Fashion-MNIST: split \"%s\" (\"train\" or "
                            "\"t10k\")", split ? split : "(null)");
    int is_default = dir == NULL;
    if (!dir)
        dir = RC_FASHION_MNIST_DIR;
    char images[1024], labels[1024];
    if (fashion_path(images, sizeof images, dir, split, "images-idx3", is_default, err) != 0 ||
        fashion_path(labels, sizeof labels, dir, split, "labels-idx1", is_default, err) != 0)
        return -1;
    if (rc_image_set_load(s, images, labels, limit, err) != 0)
        return -1;
    for (int64_t i = 0; i < s->n; i++) {
        if (s->labels[i] >= RC_FASHION_MNIST_CLASSES) {
            rc_error_set(err, RC_ERR_FORMAT, "%s: label %d of item %lld is outside [0, %d)",
                         labels, s->labels[i], (long long)i, RC_FASHION_MNIST_CLASSES);
            rc_image_set_free(s);
            return -1;
        }
    }
    return 0;
}
