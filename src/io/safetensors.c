/* safetensors.c - reading (memory-mapped, validated) and writing safetensors files.
 * The format and the validation rules are described in include/redco/safetensors.h. */
#define _DEFAULT_SOURCE /* madvise */
#include "redco/safetensors.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference library refuses headers above 100 MB. */
#define ST_MAX_HEADER 100000000ull

static const struct {
    const char *name;
    size_t size;
    int dtype;  /* rc_dtype or -1 */
} st_dtypes[] = {
    {"F32", 4, RC_F32}, {"F16", 2, RC_F16}, {"BF16", 2, RC_BF16}, {"F64", 8, RC_F64},
    {"I32", 4, RC_I32}, {"I64", 8, -1}, {"I16", 2, -1}, {"I8", 1, -1}, {"U8", 1, -1},
    {"U16", 2, -1}, {"U32", 4, -1}, {"U64", 8, -1}, {"BOOL", 1, -1}, {"F8_E4M3", 1, -1},
    {"F8_E5M2", 1, -1},
};
enum { N_ST_DTYPES = sizeof st_dtypes / sizeof st_dtypes[0] };

static int st_dtype_find(const char *name)
{
    for (int i = 0; name && i < N_ST_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return i;
    return -1;
}

size_t rc_st_dtype_size(const char *dtype_name)
{
    int i = st_dtype_find(dtype_name);
    return i < 0 ? 0 : st_dtypes[i].size;
}

typedef struct {
    const char *name;
    int index;
} name_ix;

struct rc_safetensors {
    char *path;
    uint8_t *map;             /* the whole file, read-only */
    size_t size;
    const uint8_t *buf;       /* the data buffer: map + 8 + header length */
    uint64_t buf_size;
    json_t *header;           /* owns the names and metadata strings */
    int n;
    rc_st_tensor *t;          /* in header order */
    int64_t *shapes;          /* every tensor's shape, concatenated */
    name_ix *by_name;         /* sorted by name, for find */
    int n_meta;
    const char **meta;        /* key, value pairs */
};

/* ---- small helpers ------------------------------------------------------------------ */

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* "[2, 3]" into buf. */
static const char *shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

/* ---- reading ------------------------------------------------------------------------ */

void rc_safetensors_close(rc_safetensors *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->size);
    json_decref(f->header);
    free(f->t);
    free(f->shapes);
    free(f->by_name);
    free(f->meta);
    free(f->path);
    free(f);
}

static int map_file(rc_safetensors *f, rc_error *err)
{
    int fd = open(f->path, O_RDONLY);
    if (fd < 0)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rc_error_set(err, RC_ERR_IO, "%s: not a regular file", f->path);
    }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        close(fd);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: file is %zu bytes, shorter than the "
                            "8-byte header length (truncated file?)", f->path, f->size);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot map: %s", f->path, strerror(errno));
    f->map = m;
    return 0;
}

static int parse_header_json(rc_safetensors *f, rc_error *err)
{
    uint64_t n = load_le64(f->map);
    if (n > ST_MAX_HEADER)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the "
                            "%llu-byte limit (not a safetensors file?)", f->path, n,
                            ST_MAX_HEADER);
    if (n > f->size - 8)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: header length %" PRIu64 " runs past the "
                            "end of the %zu-byte file (truncated file?)", f->path, n, f->size);
    const char *text = (const char *)f->map + 8;
    json_error_t jerr;
    f->header = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: header is not valid JSON: %s (byte %d of "
                            "the header)", f->path, jerr.text, jerr.position);
    if (!json_is_object(f->header))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    f->buf = f->map + 8 + n;
    f->buf_size = f->size - 8 - n;
    return 0;
}

static int parse_metadata(rc_safetensors *f, json_t *m, rc_error *err)
{
    if (json_is_null(m))
        return 0;
    if (!json_is_object(m))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: __metadata__ is not an object", f->path);
    f->meta = malloc(2 * (json_object_size(m) + 1) * sizeof *f->meta);
    if (!f->meta)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", f->path);
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (!json_is_string(v))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a "
                                "string", f->path, key);
        f->meta[2 * f->n_meta] = key;
        f->meta[2 * f->n_meta + 1] = json_string_value(v);
        f->n_meta++;
    }
    return 0;
}

/* A non-negative JSON integer, or -1. */
static long long json_count(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return json_integer_value(v);
}

/* Fills t from one header entry, shape into shape (room for ndim values). */
static int parse_entry(rc_safetensors *f, const char *name, json_t *e, rc_st_tensor *t,
                       int64_t *shape, rc_error *err)
{
    t->name = name;
    if (!json_is_object(e))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': entry is not an object",
                            f->path, name);
    json_t *dt = json_object_get(e, "dtype");
    if (!json_is_string(dt))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is missing or not a "
                            "string", f->path, name);
    int d = st_dtype_find(json_string_value(dt));
    if (d < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'",
                            f->path, name, json_string_value(dt));
    t->dtype_name = st_dtypes[d].name;
    t->dtype = st_dtypes[d].dtype;
    t->elem_size = st_dtypes[d].size;
    json_t *sh = json_object_get(e, "shape");
    if (!json_is_array(sh))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': \"shape\" is missing or not a "
                            "list", f->path, name);
    t->ndim = (int)json_array_size(sh);
    t->shape = shape;
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        long long s = json_count(json_array_get(sh, (size_t)i));
        if (s < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': shape axis %d is not a "
                                "non-negative integer", f->path, name, i);
        if (s > 0 && t->numel > INT64_MAX / 16 / s)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': shape is too large",
                                f->path, name);
        shape[i] = s;
        t->numel *= s;
    }
    json_t *off = json_object_get(e, "data_offsets");
    long long b = -1, en = -1;
    if (json_is_array(off) && json_array_size(off) == 2) {
        b = json_count(json_array_get(off, 0));
        en = json_count(json_array_get(off, 1));
    }
    if (b < 0 || en < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not a list "
                            "of two non-negative integers", f->path, name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (t->begin > t->end || t->end > f->buf_size)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %"
                            PRIu64 "] outside the %" PRIu64 "-byte buffer%s", f->path, name,
                            t->begin, t->end, f->buf_size,
                            t->begin <= t->end ? " (truncated file?)" : "");
    uint64_t need = (uint64_t)t->numel * t->elem_size;
    if (t->end - t->begin != need) {
        char s[128];
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %"
                            PRIu64 "] hold %" PRIu64 " bytes but %s %s needs %" PRIu64, f->path,
                            name, t->begin, t->end, t->end - t->begin, t->dtype_name,
                            shape_str(s, sizeof s, t->ndim, t->shape), need);
    }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const rc_st_tensor *x = *(rc_st_tensor *const *)a, *y = *(rc_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* The tensors, sorted by offset, must tile the buffer: no overlap, no hole, no tail. */
static int check_layout(rc_safetensors *f, rc_error *err)
{
    rc_st_tensor **order = malloc((size_t)(f->n ? f->n : 1) * sizeof *order);
    if (!order)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", f->path);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_by_offset);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        const rc_st_tensor *t = order[i];
        if (t->begin < pos) {
            const rc_st_tensor *p = order[i - 1];
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %"
                              PRIu64 "] overlap tensor '%s' at [%" PRIu64 ", %" PRIu64 "]",
                              f->path, t->name, t->begin, t->end, p->name, p->begin, p->end);
        } else if (t->begin > pos) {
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s': data_offsets begin at %"
                              PRIu64 ", leaving bytes [%" PRIu64 ", %" PRIu64 ") of the buffer "
                              "in no tensor", f->path, t->name, t->begin, pos, t->begin);
        }
        pos = t->end;
    }
    if (!rc && pos != f->buf_size)
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: the tensors end at byte %" PRIu64 " of the %"
                          PRIu64 "-byte data buffer; the rest is in no tensor", f->path, pos,
                          f->buf_size);
    free(order);
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static int parse_tensors(rc_safetensors *f, rc_error *err)
{
    const char *key;
    json_t *v;
    size_t dims = 0;
    json_t *meta = NULL;
    json_object_foreach(f->header, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            meta = v;
            continue;
        }
        f->n++;
        json_t *sh = json_is_object(v) ? json_object_get(v, "shape") : NULL;
        dims += json_is_array(sh) ? json_array_size(sh) : 0;
    }
    if (meta && parse_metadata(f, meta, err))
        return -1;
    f->t = calloc((size_t)f->n + 1, sizeof *f->t);
    f->shapes = malloc((dims + 1) * sizeof *f->shapes);
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!f->t || !f->shapes || !f->by_name)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", f->path);
    int i = 0;
    size_t d = 0;
    json_object_foreach(f->header, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        if (parse_entry(f, key, v, &f->t[i], f->shapes + d, err))
            return -1;
        d += (size_t)f->t[i].ndim;
        f->by_name[i] = (name_ix){key, i};
        i++;
    }
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    return check_layout(f, err);
}

rc_safetensors *rc_safetensors_open(const char *path, rc_error *err)
{
    rc_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    if (map_file(f, err) || parse_header_json(f, err) || parse_tensors(f, err)) {
        rc_safetensors_close(f);
        return NULL;
    }
    return f;
}

const char *rc_safetensors_path(const rc_safetensors *f)
{
    return f->path;
}

int rc_safetensors_count(const rc_safetensors *f)
{
    return f->n;
}

const rc_st_tensor *rc_safetensors_info(const rc_safetensors *f, int i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

int rc_safetensors_find(const rc_safetensors *f, const char *name)
{
    name_ix key = {name, 0};
    const name_ix *hit = name && f->n
                             ? bsearch(&key, f->by_name, (size_t)f->n, sizeof key, cmp_name)
                             : NULL;
    return hit ? hit->index : -1;
}

const void *rc_safetensors_data(const rc_safetensors *f, int i)
{
    return i >= 0 && i < f->n ? f->buf + f->t[i].begin : NULL;
}

int rc_safetensors_metadata_count(const rc_safetensors *f)
{
    return f->n_meta;
}

int rc_safetensors_metadata_at(const rc_safetensors *f, int i, const char **key,
                               const char **value)
{
    if (i < 0 || i >= f->n_meta)
        return -1;
    *key = f->meta[2 * i];
    *value = f->meta[2 * i + 1];
    return 0;
}

const char *rc_safetensors_metadata(const rc_safetensors *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

int rc_safetensors_read_f32(const rc_safetensors *f, int i, float *dst, int64_t n,
                            rc_error *err)
{
    return rc_safetensors_read(f, i, RC_F32, dst, n, err);
}

const char *rc_st_dtype_name(rc_dtype t)
{
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == (int)t)
            return st_dtypes[i].name;
    return NULL;
}

/* n elements of dtype st at the file's bytes p converted by rc_convert (a little-endian
 * file on a little-endian host, as the copy of an equal dtype): directly when p is aligned
 * for st, else a block at a time through aligned memory */
static void convert_from_file(void *dst, rc_dtype dt, const uint8_t *p, rc_dtype st, int64_t n)
{
    enum { BLOCK = 4096 };
    size_t es = rc_dtype_size(st), ds = rc_dtype_size(dt);
    if ((uintptr_t)p % es == 0) {
        rc_convert(dst, dt, p, st, n);
        return;
    }
    double block[BLOCK];   /* BLOCK elements of any dtype */
    for (int64_t k = 0; k < n; k += BLOCK) {
        int64_t len = n - k < BLOCK ? n - k : BLOCK;
        memcpy(block, p + k * (int64_t)es, (size_t)len * es);
        rc_convert((char *)dst + k * (int64_t)ds, dt, block, st, len);
    }
}

int rc_safetensors_read(const rc_safetensors *f, int i, rc_dtype dt, void *dst, int64_t n, rc_error *err)
{
    if (i >= 0 && i < f->n && n != f->t[i].numel) {
        const rc_st_tensor *t = &f->t[i];
        char s[128];
        return rc_error_set(err, RC_ERR_SHAPE, "%s: tensor '%s' has %" PRId64 " elements (shape "
                            "%s), the destination %" PRId64, f->path, t->name, t->numel,
                            shape_str(s, sizeof s, t->ndim, t->shape), n);
    }
    return rc_safetensors_read_range(f, i, dt, 0, n, dst, err);
}

/* The mapped pages under bytes [p, p + n) given back once copied out (they stay in the page
 * cache, and a later read maps them again): a process reading a model a part at a time
 * keeps only the parts it copied, not the file, resident. */
static void pages_release(const rc_safetensors *f, const uint8_t *p, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    if (n && lo >= (uintptr_t)f->map && hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int rc_safetensors_read_range(const rc_safetensors *f, int i, rc_dtype dt, int64_t first, int64_t n, void *dst,
                              rc_error *err)
{
    if (i < 0 || i >= f->n)
        return rc_error_set(err, RC_ERR_INDEX, "%s: tensor index %d out of range [0, %d)",
                            f->path, i, f->n);
    const rc_st_tensor *t = &f->t[i];
    if (first < 0 || n < 0 || first > t->numel || n > t->numel - first)
        return rc_error_set(err, RC_ERR_SHAPE, "%s: tensor '%s' has %" PRId64 " elements, not the range [%" PRId64
                            ", %" PRId64 ")", f->path, t->name, t->numel, first, first + n);
    const uint8_t *p = f->buf + t->begin + (size_t)first * t->elem_size;
    if (t->dtype >= 0 && t->dtype == (int)dt) { /* the same type: the bytes as they are */
        memcpy(dst, p, (size_t)n * t->elem_size); /* little-endian file, little-endian host */
        pages_release(f, p, (size_t)n * t->elem_size);
        return 0;
    }
    int from_ok = t->dtype == RC_F32 || t->dtype == RC_F64 || t->dtype == RC_BF16 || t->dtype == RC_F16;
    int to_ok = dt == RC_F32 || dt == RC_F64 || dt == RC_BF16 || dt == RC_F16;
    if (!from_ok || !to_ok)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: tensor '%s' has dtype %s, which does not convert to %s "
                            "(F32, F64, BF16 and F16 convert between f32, f64, bf16 and f16)", f->path,
                            t->name, t->dtype_name, rc_dtype_name(dt));
    convert_from_file(dst, dt, p, (rc_dtype)t->dtype, n);
    pages_release(f, p, (size_t)n * t->elem_size);
    return 0;
}

/* ---- writing ------------------------------------------------------------------------ */

/* The header JSON (compact, __metadata__ first, tensors in the given order with
 * consecutive offsets), padded with spaces to a multiple of 8 bytes. An entry's data may
 * be missing only when `sourced` (given by a source as the file is written). */
static char *header_build(const char *path, int n, const rc_st_entry *t, int n_meta,
                          const char *const *meta, int sourced, size_t *len, rc_error *err)
{
    json_t *root = json_object();
    if (!root) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    int rc = 0;
    if (n_meta > 0) {
        json_t *m = json_object();
        for (int k = 0; k < n_meta && !rc; k++) {
            if (!meta[2 * k] || !meta[2 * k + 1])
                rc = rc_error_set(err, RC_ERR_ARG, "%s: metadata pair %d has a NULL string",
                                  path, k);
            else
                json_object_set_new(m, meta[2 * k], json_string(meta[2 * k + 1]));
        }
        json_object_set_new(root, "__metadata__", m);
    }
    uint64_t off = 0;
    for (int i = 0; i < n && !rc; i++) {
        size_t size = rc_st_dtype_size(t[i].dtype_name);
        const char *name = t[i].name;
        if (!name || strcmp(name, "__metadata__") == 0 || json_object_get(root, name)) {
            rc = rc_error_set(err, RC_ERR_ARG, "%s: tensor %d: name '%s' is missing, reserved or "
                              "repeated", path, i, name ? name : "(null)");
            break;
        }
        if (!size) {
            rc = rc_error_set(err, RC_ERR_DTYPE, "%s: tensor '%s': unknown dtype '%s'", path, name,
                              t[i].dtype_name ? t[i].dtype_name : "(null)");
            break;
        }
        json_t *shape = json_array();
        uint64_t numel = 1;
        for (int a = 0; a < t[i].ndim; a++) {
            if (t[i].shape[a] < 0)
                rc = rc_error_set(err, RC_ERR_SHAPE, "%s: tensor '%s': negative size at axis %d",
                                  path, name, a);
            json_array_append_new(shape, json_integer(t[i].shape[a]));
            numel *= (uint64_t)(t[i].shape[a] < 0 ? 0 : t[i].shape[a]);
        }
        if (t[i].ndim < 0 || (t[i].ndim > 0 && !t[i].shape))
            rc = rc_error_set(err, RC_ERR_SHAPE, "%s: tensor '%s': bad ndim %d", path, name,
                              t[i].ndim);
        if (numel && !t[i].data && !sourced)
            rc = rc_error_set(err, RC_ERR_ARG, "%s: tensor '%s': no data", path, name);
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(t[i].dtype_name));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t)off, (json_int_t)(off + numel * size)));
        json_object_set_new(root, name, e);
        off += numel * size;
    }
    char *text = rc ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (rc)
        return NULL;
    if (!text) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    size_t l = strlen(text), padded = (l + 7) / 8 * 8;
    char *out = realloc(text, padded + 1);
    if (!out) {
        free(text);
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    memset(out + l, ' ', padded - l);
    out[padded] = 0;
    *len = padded;
    return out;
}

static int write_all(FILE *fp, const void *p, size_t n)
{
    return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int rc_safetensors_write_entries(const char *path, int n, const rc_st_entry *t, int n_meta,
                                 const char *const *meta, rc_error *err)
{
    return rc_safetensors_write_from(path, n, t, n_meta, meta, NULL, NULL, err);
}

int rc_safetensors_write_from(const char *path, int n, const rc_st_entry *t, int n_meta,
                              const char *const *meta, rc_st_source source, void *ctx, rc_error *err)
{
    size_t hlen;
    char *header = header_build(path, n, t, n_meta, meta, source != NULL, &hlen, err);
    if (!header)
        return -1;
    size_t plen = strlen(path) + 32;
    char *tmp = malloc(plen);
    FILE *fp = NULL;
    if (tmp) {
        snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
        fp = fopen(tmp, "wb");
    }
    if (!fp) {
        rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", tmp ? tmp : path, strerror(errno));
        free(tmp);
        free(header);
        return -1;
    }
    uint8_t len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (uint8_t)((uint64_t)hlen >> (8 * k));
    int bad = write_all(fp, len8, 8) || write_all(fp, header, hlen), failed = 0;
    for (int i = 0; i < n && !bad; i++) {
        size_t numel = 1;
        for (int a = 0; a < t[i].ndim; a++)
            numel *= (size_t)t[i].shape[a];
        const void *data = t[i].data;
        if (!data && source && source(ctx, i, &data, err)) { /* the source said why */
            bad = failed = 1;
            break;
        }
        bad = !data || write_all(fp, data, numel * rc_st_dtype_size(t[i].dtype_name));
    }
    bad = fflush(fp) != 0 || fsync(fileno(fp)) != 0 || bad;
    int saved = errno;
    bad = fclose(fp) != 0 || bad;
    if (!bad && rename(tmp, path) != 0) {
        saved = errno;
        bad = 1;
    }
    if (bad) {
        unlink(tmp);
        if (!failed)
            rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", path, strerror(saved));
    }
    free(tmp);
    free(header);
    return bad ? -1 : 0;
}

int rc_safetensors_write(const char *path, int n, const char *const *names, const int *ndims,
                         const int64_t *const *shapes, const float *const *data, int n_meta,
                         const char *const *meta, rc_error *err)
{
    if (n < 0 || (n > 0 && (!names || !ndims || !shapes || !data)))
        return rc_error_set(err, RC_ERR_ARG, "%s: bad tensor list", path);
    rc_st_entry *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    for (int i = 0; i < n; i++)
        t[i] = (rc_st_entry){names[i], "F32", ndims[i], shapes[i], data[i]};
    int rc = rc_safetensors_write_entries(path, n, t, n_meta, meta, err);
    free(t);
    return rc;
}
