/* test_safetensors.c - safetensors files and checkpoint directories: write/read round trip,
 * exact F16/BF16/F64 conversion, sharded indexes, name-prefix tolerance, unused-tensor
 * reports, and every malformed-file case giving an error that names the file and tensor.
 *
 * Extra modes for tests/ref/test_checkpoint_ref.py:
 *   test_safetensors --write PATH   writes a known file (F32 tensors with special values,
 *                                   an F16 and a BF16 tensor, metadata) and prints it as
 *                                   JSON: {"metadata": {...}, "tensors": {NAME: {"dtype",
 *                                   "shape", "bits": [element bit patterns]}}}
 *   test_safetensors --dump PATH    opens PATH with rc_checkpoint_open (a directory, a
 *                                   .safetensors file or an index.json) and prints one JSON
 *                                   line per tensor: {"name", "dtype", "shape", "bits": [the
 *                                   f32 bit patterns rc_safetensors_read_f32 gives]}
 *                                   (I64/I32/... tensors: "bits": null)
 */
#include "check.h"
#include "redco.h"
#include "redco/safetensors.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n)
        fprintf(stderr, "cannot write %s\n", path);
    if (f)
        fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    fclose(f);
    return p;
}

/* A file from a header text and a data buffer (the length prefix computed). */
static void make_file(const char *path, const char *header, const void *data, size_t n)
{
    size_t h = strlen(header);
    unsigned char *b = malloc(8 + h + n + 1);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(b + 8, header, h);
    if (n)
        memcpy(b + 8 + h, data, n);
    write_bytes(path, b, 8 + h + n);
    free(b);
}

/* Files named *.tmp.* in tmpdir (a writer's leftovers). */
static int tmp_files_left(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* Opening path fails with every part in the message. */
#define EXPECT_OPEN_ERROR(path, ...)                                                            \
    do {                                                                                        \
        const char *parts_[] = {__VA_ARGS__};                                                   \
        rc_error err_ = {0};                                                                    \
        rc_safetensors *f_ = rc_safetensors_open(path, &err_);                                  \
        CHECKF(f_ == NULL && err_.code != 0, "opened %s", path);                                \
        for (size_t i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; i_++)                        \
            CHECKF(check_has(err_.msg, parts_[i_]), "'%s' not in: %s", parts_[i_], err_.msg);         \
        rc_safetensors_close(f_);                                                               \
    } while (0)

#define EXPECT_CKPT_ERROR(path, ...)                                                            \
    do {                                                                                        \
        const char *parts_[] = {__VA_ARGS__};                                                   \
        rc_error err_ = {0};                                                                    \
        rc_checkpoint *c_ = rc_checkpoint_open(path, &err_);                                    \
        CHECKF(c_ == NULL && err_.code != 0, "opened %s", path);                                \
        for (size_t i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; i_++)                        \
            CHECKF(check_has(err_.msg, parts_[i_]), "'%s' not in: %s", parts_[i_], err_.msg);         \
        rc_checkpoint_close(c_);                                                                \
    } while (0)

/* ---- the known file (also --write) ---------------------------------------------------- */

enum { KNOWN_N = 6 };
static float known_a[6], known_d[5];
static float known_b[1] = {-2.5f};
static uint16_t known_h[4] = {0x3c00, 0x0001, 0xfc00, 0x7bff};  /* F16: 1, 2^-24, -inf, 65504 */
static uint16_t known_bf[3] = {0x3f80, 0xc0a0, 0x0001};         /* BF16: 1, -5, tiny */
static const char *const known_meta[4] = {"format", "pt", "producer", "redco test"};

static void known_fill(void)
{
    float specials[6] = {0.1f, -0.0f, INFINITY, 1e-40f, 3.4028235e38f, -123.456f};
    memcpy(known_a, specials, sizeof specials);
    for (int i = 0; i < 5; i++)
        known_d[i] = (float)i / 7.0f - 0.25f;
}

static int known_write(const char *path, rc_error *err)
{
    known_fill();
    int64_t sa[2] = {2, 3}, sc[2] = {0, 4}, sd[1] = {5}, sh[2] = {2, 2}, sbf[1] = {3};
    float dummy = 0;
    rc_st_entry t[KNOWN_N] = {
        {"layer.0.weight", "F32", 2, sa, known_a},
        {"scalar", "F32", 0, NULL, known_b},
        {"empty", "F32", 2, sc, &dummy},
        {"layer.0.bias", "F32", 1, sd, known_d},
        {"half", "F16", 2, sh, known_h},
        {"brain", "BF16", 1, sbf, known_bf},
    };
    return rc_safetensors_write_entries(path, KNOWN_N, t, 2, known_meta, err);
}

static int mode_write(const char *path)
{
    rc_error err = {0};
    if (known_write(path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("{\"metadata\": {\"format\": \"pt\", \"producer\": \"redco test\"}, \"tensors\": {\n");
    printf("\"layer.0.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"bits\": [");
    for (int i = 0; i < 6; i++)
        printf("%s%u", i ? ", " : "", f32_bits(known_a[i]));
    printf("]},\n\"scalar\": {\"dtype\": \"F32\", \"shape\": [], \"bits\": [%u]},\n",
           f32_bits(known_b[0]));
    printf("\"empty\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"bits\": []},\n");
    printf("\"layer.0.bias\": {\"dtype\": \"F32\", \"shape\": [5], \"bits\": [");
    for (int i = 0; i < 5; i++)
        printf("%s%u", i ? ", " : "", f32_bits(known_d[i]));
    printf("]},\n\"half\": {\"dtype\": \"F16\", \"shape\": [2, 2], \"bits\": [%u, %u, %u, %u]},\n",
           known_h[0], known_h[1], known_h[2], known_h[3]);
    printf("\"brain\": {\"dtype\": \"BF16\", \"shape\": [3], \"bits\": [%u, %u, %u]}\n}}\n",
           known_bf[0], known_bf[1], known_bf[2]);
    return 0;
}

static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static int mode_dump(const char *path)
{
    rc_error err = {0};
    rc_checkpoint *ck = rc_checkpoint_open(path, &err);
    if (!ck) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (int k = 0; k < rc_checkpoint_count(ck) && !rc; k++) {
        rc_safetensors *f;
        int i;
        rc_checkpoint_entry(ck, k, &f, &i);
        const rc_st_tensor *t = rc_safetensors_info(f, i);
        printf("{\"name\": ");
        print_json_string(t->name);
        printf(", \"dtype\": \"%s\", \"shape\": [", t->dtype_name);
        for (int a = 0; a < t->ndim; a++)
            printf("%s%lld", a ? ", " : "", (long long)t->shape[a]);
        printf("], \"bits\": ");
        if (t->dtype == RC_F32 || t->dtype == RC_F16 || t->dtype == RC_BF16 ||
            t->dtype == RC_F64) {
            float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
            rc = rc_safetensors_read_f32(f, i, v, t->numel, &err);
            putchar('[');
            for (int64_t e = 0; e < t->numel && !rc; e++)
                printf("%s%u", e ? ", " : "", f32_bits(v[e]));
            putchar(']');
            free(v);
        } else {
            printf("null");
        }
        printf("}\n");
    }
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    rc_checkpoint_close(ck);
    return rc;
}

/* ---- 16-bit tensors ------------------------------------------------------------------- */

enum { HALF_N = 64 };

/* HALF_N f32 values: specials, ties, subnormals of f16, and a spread */
static void half_values(float *v)
{
    float specials[12] = {0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, 65504.0f, 65520.0f,
                          0x1p-24f, 0x1p-25f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f};
    memcpy(v, specials, sizeof specials);
    for (int i = 12; i < HALF_N; i++)
        v[i] = (float)((i * 37 % 101) - 50) * 0.01234567f * (float)(1 << (i % 9));
}

/* writes PATH with tensors "bf16" and "f16" (the values rounded by redco) and prints the
 * f32 source values and the 16-bit words as JSON */
static int mode_write_half(const char *path)
{
    float v[HALF_N];
    uint16_t bf[HALF_N], h[HALF_N];
    half_values(v);
    rc_convert(bf, RC_BF16, v, RC_F32, HALF_N);
    rc_convert(h, RC_F16, v, RC_F32, HALF_N);
    int64_t shape[2] = {8, HALF_N / 8};
    rc_st_entry t[2] = {{"bf16", rc_st_dtype_name(RC_BF16), 2, shape, bf}, {"f16", rc_st_dtype_name(RC_F16), 2, shape, h}};
    rc_error err = {0};
    if (rc_safetensors_write_entries(path, 2, t, 0, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("{\"f32\": [");
    for (int i = 0; i < HALF_N; i++)
        printf("%s%u", i ? ", " : "", f32_bits(v[i]));
    printf("], \"bf16\": [");
    for (int i = 0; i < HALF_N; i++)
        printf("%s%u", i ? ", " : "", bf[i]);
    printf("], \"f16\": [");
    for (int i = 0; i < HALF_N; i++)
        printf("%s%u", i ? ", " : "", h[i]);
    printf("]}\n");
    return 0;
}

/* prints, per BF16 / F16 tensor of PATH, its words as read into its own dtype and its
 * values read into f32 (bits), one JSON line each */
static int mode_dump_half(const char *path)
{
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(path, &err);
    if (!f) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < rc_safetensors_count(f) && !rc; i++) {
        const rc_st_tensor *t = rc_safetensors_info(f, i);
        if (t->dtype != RC_BF16 && t->dtype != RC_F16)
            continue;
        size_t n = (size_t)(t->numel ? t->numel : 1);
        uint16_t *w = malloc(n * 2);
        float *v = malloc(n * 4);
        rc = rc_safetensors_read(f, i, (rc_dtype)t->dtype, w, t->numel, &err) ||
             rc_safetensors_read(f, i, RC_F32, v, t->numel, &err);
        printf("{\"name\": ");
        print_json_string(t->name);
        printf(", \"words\": [");
        for (int64_t e = 0; e < t->numel && !rc; e++)
            printf("%s%u", e ? ", " : "", w[e]);
        printf("], \"f32\": [");
        for (int64_t e = 0; e < t->numel && !rc; e++)
            printf("%s%u", e ? ", " : "", f32_bits(v[e]));
        printf("]}\n");
        free(w);
        free(v);
    }
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    rc_safetensors_close(f);
    return rc;
}

/* BF16 and F16 tensors written from 16-bit words read back bit for bit into their own
 * dtype, convert to the other float dtypes as rc_convert does, and F32 reads into bf16
 * rounding to nearest even. */
static void test_half(void)
{
    const char *path = tmp_path("halfread.safetensors");
    float v[HALF_N];
    uint16_t bf[HALF_N], h[HALF_N];
    half_values(v);
    rc_convert(bf, RC_BF16, v, RC_F32, HALF_N);
    rc_convert(h, RC_F16, v, RC_F32, HALF_N);
    int64_t shape[1] = {HALF_N};
    int32_t ids[3] = {1, -2, 3};
    int64_t s3[1] = {3};
    rc_st_entry t[4] = {{"b", "BF16", 1, shape, bf}, {"h", "F16", 1, shape, h}, {"f", "F32", 1, shape, v},
                        {"i", "I32", 1, s3, ids}};
    rc_error err = {0};
    CHECKF(rc_safetensors_write_entries(path, 4, t, 0, NULL, &err) == 0, "%s", err.msg);
    rc_safetensors *f = rc_safetensors_open(path, &err);
    CHECKF(f, "%s", err.msg);
    if (!f)
        return;
    uint16_t w[HALF_N], want[HALF_N];
    float x[HALF_N], xw[HALF_N];
    double d[HALF_N];
    CHECK(rc_safetensors_read(f, 0, RC_BF16, w, HALF_N, &err) == 0 && !memcmp(w, bf, sizeof w));
    CHECK(rc_safetensors_read(f, 1, RC_F16, w, HALF_N, &err) == 0 && !memcmp(w, h, sizeof w));
    CHECK(rc_safetensors_read(f, 2, RC_BF16, w, HALF_N, &err) == 0 && !memcmp(w, bf, sizeof w));
    CHECK(rc_safetensors_read(f, 2, RC_F16, w, HALF_N, &err) == 0 && !memcmp(w, h, sizeof w));
    CHECK(rc_safetensors_read(f, 1, RC_BF16, w, HALF_N, &err) == 0);
    rc_convert(want, RC_BF16, h, RC_F16, HALF_N);
    CHECK(!memcmp(w, want, sizeof w));
    CHECK(rc_safetensors_read(f, 0, RC_F32, x, HALF_N, &err) == 0 && rc_safetensors_read_f32(f, 0, xw, HALF_N, &err) == 0);
    rc_convert(d, RC_F64, bf, RC_BF16, HALF_N);
    int same = !memcmp(x, xw, sizeof x);
    for (int i = 0; i < HALF_N; i++)
        same &= (double)x[i] == d[i];
    CHECK(same);
    CHECK(rc_safetensors_read(f, 1, RC_F64, d, HALF_N, &err) == 0 && d[0] == 0 && d[6] == 65504.0 && isinf(d[7]));
    int32_t ri[3];
    CHECK(rc_safetensors_read(f, 3, RC_I32, ri, 3, &err) == 0 && ri[1] == -2);
    err = (rc_error){0};
    CHECK(rc_safetensors_read(f, 3, RC_BF16, w, 3, &err) == -1 && err.code == RC_ERR_DTYPE &&
          check_has(err.msg, "'i'") && check_has(err.msg, "bf16"));
    err = (rc_error){0};
    CHECK(rc_safetensors_read(f, 0, RC_BF16, w, 3, &err) == -1 && err.code == RC_ERR_SHAPE);
    CHECK(!strcmp(rc_st_dtype_name(RC_BF16), "BF16") && !strcmp(rc_st_dtype_name(RC_F16), "F16") &&
          rc_st_dtype_name(RC_DTYPE_COUNT) == NULL);
    /* ranges: a share of a tensor reads as the same elements of the whole, in any dtype */
    float part[HALF_N];
    for (int first = 0; first <= HALF_N; first += 3) {
        int n = HALF_N - first < 4 ? HALF_N - first : 4;
        CHECK(rc_safetensors_read_range(f, 0, RC_F32, first, n, part, &err) == 0 &&
              !memcmp(part, x + first, (size_t)n * sizeof *part));
        CHECK(rc_safetensors_read_range(f, 2, RC_BF16, first, n, w, &err) == 0 &&
              !memcmp(w, bf + first, (size_t)n * sizeof *w));
    }
    CHECK(rc_safetensors_read_range(f, 3, RC_I32, 1, 2, ri, &err) == 0 && ri[0] == -2 && ri[1] == 3);
    err = (rc_error){0};
    CHECK(rc_safetensors_read_range(f, 0, RC_F32, HALF_N - 1, 2, part, &err) == -1 && err.code == RC_ERR_SHAPE &&
          check_has(err.msg, "'b'"));
    err = (rc_error){0};
    CHECK(rc_safetensors_read_range(f, 0, RC_F32, -1, 1, part, &err) == -1 && err.code == RC_ERR_SHAPE);
    rc_safetensors_close(f);
}

/* ---- round trip ----------------------------------------------------------------------- */

static void test_round_trip(void)
{
    rc_error err = {0};
    const char *path = tmp_path("known.safetensors");
    CHECKF(known_write(path, &err) == 0, "%s", err.msg);
    CHECK(tmp_files_left() == 0);

    size_t size;
    unsigned char *raw = read_bytes(path, &size);
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++)
        hlen |= (uint64_t)raw[k] << (8 * k);
    CHECKF(hlen % 8 == 0, "header length %llu not padded to 8", (unsigned long long)hlen);
    CHECK(raw[8] == '{' && (raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}'));
    CHECK(check_has((const char *)raw + 8, "\"__metadata__\":{\"format\":\"pt\""));
    size_t data_bytes = 6 * 4 + 4 + 0 + 5 * 4 + 4 * 2 + 3 * 2;
    CHECKF(size == 8 + hlen + data_bytes, "size %zu", size);

    rc_safetensors *f = rc_safetensors_open(path, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f) {
        free(raw);
        return;
    }
    CHECK(rc_safetensors_count(f) == KNOWN_N);
    CHECK(strcmp(rc_safetensors_path(f), path) == 0);
    CHECK(rc_safetensors_metadata_count(f) == 2);
    CHECK(rc_safetensors_metadata(f, "format") && strcmp(rc_safetensors_metadata(f, "format"), "pt") == 0);
    CHECK(rc_safetensors_metadata(f, "producer") &&
          strcmp(rc_safetensors_metadata(f, "producer"), "redco test") == 0);
    CHECK(rc_safetensors_metadata(f, "nope") == NULL);
    const char *mk, *mv;
    CHECK(rc_safetensors_metadata_at(f, 1, &mk, &mv) == 0 && strcmp(mk, "producer") == 0);
    CHECK(rc_safetensors_metadata_at(f, 2, &mk, &mv) == -1);

    /* header order, shapes, dtypes, consecutive offsets */
    const char *names[KNOWN_N] = {"layer.0.weight", "scalar", "empty", "layer.0.bias", "half",
                                  "brain"};
    uint64_t off = 0;
    for (int i = 0; i < KNOWN_N; i++) {
        const rc_st_tensor *t = rc_safetensors_info(f, i);
        CHECKF(strcmp(t->name, names[i]) == 0, "%d: %s", i, t->name);
        CHECK(rc_safetensors_find(f, names[i]) == i);
        CHECK(t->begin == off);
        off = t->end;
        CHECK((const char *)rc_safetensors_data(f, i) ==
              (const char *)rc_safetensors_data(f, 0) + t->begin);
    }
    CHECK(off == data_bytes);
    CHECK(rc_safetensors_find(f, "missing") == -1);
    CHECK(rc_safetensors_info(f, KNOWN_N) == NULL && rc_safetensors_info(f, -1) == NULL);
    const rc_st_tensor *a = rc_safetensors_info(f, 0);
    CHECK(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->numel == 6);
    CHECK(a->dtype == RC_F32 && strcmp(a->dtype_name, "F32") == 0 && a->elem_size == 4);
    const rc_st_tensor *s = rc_safetensors_info(f, 1);
    CHECK(s->ndim == 0 && s->numel == 1 && s->end - s->begin == 4);
    const rc_st_tensor *e = rc_safetensors_info(f, 2);
    CHECK(e->ndim == 2 && e->numel == 0 && e->begin == e->end);
    CHECK(rc_safetensors_info(f, 4)->dtype == RC_F16);
    CHECK(rc_safetensors_info(f, 5)->dtype == RC_BF16);
    /* the data buffer starts 8-aligned in the file: mapped pages are aligned, so F32 data is */
    CHECK(((uintptr_t)rc_safetensors_data(f, 0)) % 8 == 0);

    /* raw bytes and f32 reads are bit-identical */
    CHECK(memcmp(rc_safetensors_data(f, 0), known_a, sizeof known_a) == 0);
    CHECK(memcmp(rc_safetensors_data(f, 4), known_h, sizeof known_h) == 0);
    float got[6];
    CHECKF(rc_safetensors_read_f32(f, 0, got, 6, &err) == 0, "%s", err.msg);
    int same = 1;
    for (int i = 0; i < 6; i++)
        same &= f32_bits(got[i]) == f32_bits(known_a[i]);
    CHECK(same);
    CHECK(rc_safetensors_read_f32(f, 1, got, 1, &err) == 0 && got[0] == -2.5f);
    CHECK(rc_safetensors_read_f32(f, 2, got, 0, &err) == 0);
    CHECK(rc_safetensors_read_f32(f, 3, got, 5, &err) == 0 && memcmp(got, known_d, 20) == 0);
    CHECK(rc_safetensors_read_f32(f, 4, got, 4, &err) == 0 && got[0] == 1.0f &&
          got[1] == ldexpf(1, -24) && isinf(got[2]) && got[2] < 0 && got[3] == 65504.0f);
    CHECK(rc_safetensors_read_f32(f, 5, got, 3, &err) == 0 && got[0] == 1.0f && got[1] == -5.0f &&
          f32_bits(got[2]) == 0x00010000u);
    /* wrong element count names the tensor and both counts */
    err = (rc_error){0};
    CHECK(rc_safetensors_read_f32(f, 0, got, 5, &err) == -1);
    CHECKF(check_has(err.msg, "layer.0.weight") && check_has(err.msg, "6 elements") && check_has(err.msg, "[2, 3]"),
           "%s", err.msg);
    err = (rc_error){0};
    CHECK(rc_safetensors_read_f32(f, 9, got, 5, &err) == -1 && err.code == RC_ERR_INDEX);
    rc_safetensors_close(f);
    free(raw);

    /* the F32 convenience writer; overwriting replaces the file */
    float w0[4] = {1, 2, 3, 4}, w1[2] = {-1, 0.5f};
    const char *wn[2] = {"b", "a"};
    const int wd[2] = {2, 1};
    const int64_t s0[2] = {2, 2}, s1[1] = {2};
    const int64_t *ws[2] = {s0, s1};
    const float *wv[2] = {w0, w1};
    CHECKF(rc_safetensors_write(path, 2, wn, wd, ws, wv, 0, NULL, &err) == 0, "%s", err.msg);
    f = rc_safetensors_open(path, &err);
    CHECK(f && rc_safetensors_count(f) == 2 && rc_safetensors_metadata_count(f) == 0);
    if (f) {
        CHECK(rc_safetensors_find(f, "a") == 1 && rc_safetensors_find(f, "b") == 0);
        CHECK(rc_safetensors_read_f32(f, 1, got, 2, &err) == 0 && got[0] == -1 && got[1] == 0.5f);
        rc_safetensors_close(f);
    }
    /* zero tensors: an empty header object and an empty buffer */
    CHECK(rc_safetensors_write(tmp_path("none.safetensors"), 0, NULL, NULL, NULL, NULL, 0, NULL,
                               &err) == 0);
    f = rc_safetensors_open(tmp_path("none.safetensors"), &err);
    CHECKF(f && rc_safetensors_count(f) == 0, "%s", err.msg);
    rc_safetensors_close(f);

    /* writer errors: repeated or reserved names, unknown dtype, unwritable directory */
    const char *dup[2] = {"x", "x"};
    err = (rc_error){0};
    CHECK(rc_safetensors_write(tmp_path("dup.safetensors"), 2, dup, wd, ws, wv, 0, NULL, &err));
    CHECKF(check_has(err.msg, "'x'") && check_has(err.msg, "repeated"), "%s", err.msg);
    CHECK(access(tmp_path("dup.safetensors"), F_OK) != 0);
    rc_st_entry bad = {"w", "F7", 1, s1, w1};
    err = (rc_error){0};
    CHECK(rc_safetensors_write_entries(tmp_path("bad.safetensors"), 1, &bad, 0, NULL, &err));
    CHECKF(check_has(err.msg, "'w'") && check_has(err.msg, "unknown dtype 'F7'"), "%s", err.msg);
    err = (rc_error){0};
    CHECK(rc_safetensors_write(tmp_path("no/such/dir.safetensors"), 2, wn, wd, ws, wv, 0, NULL,
                               &err) == -1);
    CHECKF(err.code == RC_ERR_IO && check_has(err.msg, "no/such/dir"), "%s", err.msg);
}

/* ---- conversions ---------------------------------------------------------------------- */

/* The value of an IEEE half, computed independently of the library's bit manipulation. */
static float half_value(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (exp == 0x1f)
        return man ? NAN : sign * INFINITY;
    if (exp == 0)
        return sign * ldexpf((float)man, -24);
    return sign * ldexpf((float)(man + 1024), exp - 25);
}

static void test_conversions(void)
{
    /* every half and every bfloat16 pattern */
    static uint16_t all[65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;  /* little-endian host: bytes as the file stores them */
    char header[256];
    snprintf(header, sizeof header,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[256,256],\"data_offsets\":[0,131072]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[65536],\"data_offsets\":[131072,262144]}}");
    unsigned char *data = malloc(262144);
    memcpy(data, all, 131072);
    memcpy(data + 131072, all, 131072);
    const char *path = tmp_path("halves.safetensors");
    make_file(path, header, data, 262144);
    free(data);
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(path, &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f)
        return;
    CHECKF(rc_safetensors_read_f32(f, 0, got, 65536, &err) == 0, "%s", err.msg);
    int bad = 0, nan_payload = 1;
    for (int i = 0; i < 65536; i++) {
        float want = half_value((uint16_t)i);
        if (isnan(want)) {
            bad += !isnan(got[i]);
            /* the payload carried into the top mantissa bits, made quiet (as F16C does), sign
             * kept */
            nan_payload &= (f32_bits(got[i]) >> 13 & 0x3ff) == (uint32_t)((i & 0x3ff) | 0x200) &&
                           (f32_bits(got[i]) >> 31) == (uint32_t)(i >> 15);
        } else {
            bad += f32_bits(got[i]) != f32_bits(want);  /* also tells -0 from +0 */
        }
    }
    CHECKF(bad == 0, "%d of 65536 halves converted wrongly", bad);
    CHECK(nan_payload);
    CHECK(got[0x3555] == 0.333251953125f && got[0x0400] == ldexpf(1, -14) &&
          got[0x03ff] == ldexpf(1023, -24) && f32_bits(got[0x8000]) == 0x80000000u);
    CHECKF(rc_safetensors_read_f32(f, 1, got, 65536, &err) == 0, "%s", err.msg);
    bad = 0;
    for (int i = 0; i < 65536; i++)
        bad += f32_bits(got[i]) != (uint32_t)i << 16;
    CHECKF(bad == 0, "%d of 65536 bfloat16 converted wrongly", bad);
    rc_safetensors_close(f);

    /* F64 rounds to nearest, ties to even; overflow to inf, underflow to 0 */
    double d[8] = {0.1, -3.5, 1e300, 1e-50, 1.0 + ldexp(1, -24), 1.0 + 3 * ldexp(1, -24),
                   -0.0, 16777217.0};
    float want[8] = {0.1f, -3.5f, INFINITY, 0.0f, 1.0f, 1.0f + ldexpf(1, -22), -0.0f,
                     16777216.0f};
    /* plus I64 and I32 tensors, which do not convert */
    unsigned char buf[64 + 16 + 8];
    memcpy(buf, d, 64);
    memset(buf + 64, 0, 24);
    make_file(tmp_path("f64.safetensors"),
              "{\"d\":{\"dtype\":\"F64\",\"shape\":[8],\"data_offsets\":[0,64]},"
              "\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[64,80]},"
              "\"j\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[80,88]}}",
              buf, sizeof buf);
    f = rc_safetensors_open(tmp_path("f64.safetensors"), &err);
    CHECKF(f != NULL, "%s", err.msg);
    if (!f)
        return;
    CHECK(rc_safetensors_info(f, 0)->dtype == RC_F64);
    CHECK(rc_safetensors_info(f, 1)->dtype == -1 && rc_safetensors_info(f, 1)->elem_size == 8);
    CHECK(rc_safetensors_info(f, 2)->dtype == RC_I32);
    CHECK(rc_safetensors_read_f32(f, 0, got, 8, &err) == 0);
    bad = 0;
    for (int i = 0; i < 8; i++)
        bad += f32_bits(got[i]) != f32_bits(want[i]);
    CHECKF(bad == 0, "%d of 8 doubles rounded wrongly", bad);
    err = (rc_error){0};
    CHECK(rc_safetensors_read_f32(f, 1, got, 2, &err) == -1);
    CHECKF(err.code == RC_ERR_DTYPE && check_has(err.msg, "'i'") && check_has(err.msg, "I64") &&
           check_has(err.msg, "f64.safetensors"), "%s", err.msg);
    err = (rc_error){0};
    CHECK(rc_safetensors_read_f32(f, 2, got, 2, &err) == -1 && check_has(err.msg, "I32"));
    rc_safetensors_close(f);
    CHECK(rc_st_dtype_size("BF16") == 2 && rc_st_dtype_size("I64") == 8 &&
          rc_st_dtype_size("BOOL") == 1 && rc_st_dtype_size("F17") == 0);
}

/* ---- malformed files ------------------------------------------------------------------ */

static void test_truncated(void)
{
    rc_error err = {0};
    const char *good = tmp_path("good.safetensors");
    CHECKF(known_write(good, &err) == 0, "%s", err.msg);
    size_t size;
    unsigned char *raw = read_bytes(good, &size);
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++)
        hlen |= (uint64_t)raw[k] << (8 * k);
    const char *cut = tmp_path("cut.safetensors");

    write_bytes(cut, raw, 0);  /* empty file */
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "0 bytes", "8-byte header length");
    write_bytes(cut, raw, 5);  /* inside the length */
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "5 bytes", "truncated");
    write_bytes(cut, raw, 8);  /* just the length */
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "header length", "runs past the end", "truncated");
    write_bytes(cut, raw, 8 + hlen / 2);  /* inside the header */
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "runs past the end", "truncated");
    write_bytes(cut, raw, 8 + hlen);  /* header only: every tensor is outside the buffer */
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "tensor 'layer.0.weight'", "[0, 24]",
                      "outside the 0-byte buffer", "truncated");
    write_bytes(cut, raw, 8 + hlen + 10);  /* inside the first tensor's data */
    EXPECT_OPEN_ERROR(cut, "tensor 'layer.0.weight'", "outside the 10-byte buffer");
    write_bytes(cut, raw, size - 1);  /* inside the last tensor's data */
    EXPECT_OPEN_ERROR(cut, "tensor 'brain'", "outside the", "truncated");
    /* every other cut fails cleanly too */
    int opened = 0;
    for (size_t n = 0; n < size; n++) {
        write_bytes(cut, raw, n);
        rc_safetensors *f = rc_safetensors_open(cut, &err);
        opened += f != NULL;
        rc_safetensors_close(f);
    }
    CHECKF(opened == 0, "%d truncated files opened", opened);
    /* appended garbage is trailing bytes in no tensor */
    unsigned char *longer = malloc(size + 3);
    memcpy(longer, raw, size);
    memset(longer + size, 0, 3);
    write_bytes(cut, longer, size + 3);
    EXPECT_OPEN_ERROR(cut, "cut.safetensors", "the rest is in no tensor");
    free(longer);

    /* random corruption of the header never crashes: it opens or fails with a message */
    uint64_t s = 12345;
    int silent = 0;
    for (int trial = 0; trial < 3000; trial++) {
        unsigned char *m = malloc(size);
        memcpy(m, raw, size);
        for (int flips = 0; flips < 1 + trial % 3; flips++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(s >> 33) % (8 + hlen);
            m[at] = (unsigned char)(s >> 20);
        }
        write_bytes(cut, m, size);
        free(m);
        err = (rc_error){0};
        rc_safetensors *f = rc_safetensors_open(cut, &err);
        silent += !f && (err.code == 0 || !check_has(err.msg, "cut.safetensors"));
        rc_safetensors_close(f);
    }
    CHECKF(silent == 0, "%d corrupt files failed without a message naming the file", silent);
    free(raw);
}

static void test_malformed(void)
{
    const char *p = tmp_path("bad.safetensors");
    unsigned char zeros[64] = {0};

    /* the length prefix */
    unsigned char big[16] = {0};
    big[0] = 0xe8, big[1] = 0x03;  /* 1000 */
    write_bytes(p, big, 16);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "header length 1000", "runs past the end",
                      "16-byte file");
    memset(big, 0, 16);
    big[5] = 1;  /* 2^40 */
    write_bytes(p, big, 16);
    EXPECT_OPEN_ERROR(p, "header length 1099511627776", "100000000-byte limit");

    /* the JSON */
    make_file(p, "{\"a\": {\"dtype\": \"F32\",", zeros, 8);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "not valid JSON");
    make_file(p, "[1, 2]", zeros, 0);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "not a JSON object");
    make_file(p, "\"text\"", zeros, 0);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "not valid JSON");
    make_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", zeros, 8);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "not valid JSON", "duplicate");
    make_file(p, "{\"__metadata__\":[1],\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}", zeros, 4);
    EXPECT_OPEN_ERROR(p, "__metadata__ is not an object");
    make_file(p, "{\"__metadata__\":{\"k\":3}}", zeros, 0);
    EXPECT_OPEN_ERROR(p, "__metadata__ value of 'k' is not a string");

    /* the entries */
    make_file(p, "{\"w\":5}", zeros, 0);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'w'", "not an object");
    make_file(p, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"dtype\" is missing");
    make_file(p, "{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'w'", "unknown dtype 'F17'");
    make_file(p, "{\"w\":{\"dtype\":\"float32\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "unknown dtype 'float32'");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'w'", "\"shape\" is missing or not a list");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"shape\" is missing");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", zeros,
              16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "shape axis 1", "non-negative integer");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "shape axis 0");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296]," 
                 "\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "shape is too large");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"data_offsets\" is not a list of two");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,\"16\"]}}", zeros,
              16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"data_offsets\" is not a list of two");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-4,12]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"data_offsets\" is not a list of two");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "\"data_offsets\"");

    /* offsets against the buffer */
    make_file(p, "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[25],"
                 "\"data_offsets\":[0,100]}}", zeros, 64);
    EXPECT_OPEN_ERROR(p, "bad.safetensors: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 100] "
                         "outside the 64-byte buffer");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", zeros, 8);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "[8, 4]", "outside");
    make_file(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", zeros, 8);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'w'", "[0, 8] hold 8 bytes", "F32 [3]",
                      "needs 12");
    make_file(p, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT_OPEN_ERROR(p, "tensor 'w'", "BF16 [2, 2] needs 8");
    make_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", zeros, 12);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'b'", "[4, 12] overlap tensor 'a' at [0, 8]");
    make_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", zeros, 8);
    EXPECT_OPEN_ERROR(p, "overlap tensor");
    make_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", zeros, 12);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "tensor 'b'", "leaving bytes [4, 8)");
    make_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 8);
    EXPECT_OPEN_ERROR(p, "bad.safetensors", "end at byte 4 of the 8-byte data buffer");
    EXPECT_OPEN_ERROR(tmp_path("absent.safetensors"), "absent.safetensors", "cannot open");
    EXPECT_OPEN_ERROR(tmpdir, "not a regular file");

    /* accepted: padding spaces before and after the JSON, null metadata, unknown entry
     * keys, zero-size tensors sharing an offset, a scalar, entries out of offset order */
    make_file(p, "  {\"__metadata__\":null,\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[4,8],\"extra\":1},\"z\":{\"dtype\":\"I8\",\"shape\":[0,5],"
                 "\"data_offsets\":[4,4]},\"a\":{\"dtype\":\"U8\",\"shape\":[],"
                 "\"data_offsets\":[0,1]},\"c\":{\"dtype\":\"BOOL\",\"shape\":[3],"
                 "\"data_offsets\":[1,4]}}   ", zeros, 8);
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(p, &err);
    CHECKF(f && rc_safetensors_count(f) == 4, "%s", err.msg);
    rc_safetensors_close(f);
}

/* ---- checkpoint directories ------------------------------------------------------------ */

static void write_f32_file(const char *path, int n, const char *const *names, const float *vals)
{
    int ndims[8];
    int64_t one[1] = {2};
    const int64_t *shapes[8];
    const float *data[8];
    for (int i = 0; i < n; i++) {
        ndims[i] = 1;
        shapes[i] = one;
        data[i] = vals + 2 * i;
    }
    rc_error err = {0};
    if (rc_safetensors_write(path, n, names, ndims, shapes, data, 0, NULL, &err))
        fprintf(stderr, "%s\n", err.msg);
}

static void test_sharded(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    mkdir(dir, 0755);
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    const char *n1[3] = {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                         "transformer.h.0.attn.bias"};
    const char *n2[2] = {"transformer.ln_f.weight", "lm_head.weight"};
    char p1[300], p2[300], idx[300];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    write_f32_file(p1, 3, n1, v);
    write_f32_file(p2, 2, n2, v + 6);
    FILE *fp = fopen(idx, "w");
    fprintf(fp, "{\"metadata\": {\"total_size\": 40}, \"weight_map\": {"
                "\"lm_head.weight\": \"model-00002-of-00002.safetensors\", "
                "\"transformer.h.0.attn.bias\": \"model-00001-of-00002.safetensors\", "
                "\"transformer.h.0.attn.c_attn.weight\": \"model-00001-of-00002.safetensors\", "
                "\"transformer.ln_f.weight\": \"model-00002-of-00002.safetensors\", "
                "\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\"}}\n");
    fclose(fp);

    rc_error err = {0};
    rc_checkpoint *ck = rc_checkpoint_open(dir, &err);
    CHECKF(ck != NULL, "%s", err.msg);
    if (!ck)
        return;
    CHECK(rc_checkpoint_count(ck) == 5);
    CHECK(strcmp(rc_checkpoint_path(ck), dir) == 0);
    /* shards in the order the weight map first names them: shard 2 first */
    CHECK(strcmp(rc_checkpoint_name(ck, 0), "transformer.ln_f.weight") == 0);
    CHECK(strcmp(rc_checkpoint_name(ck, 2), "transformer.wte.weight") == 0);
    CHECK(rc_checkpoint_name(ck, 5) == NULL);
    rc_safetensors *fa, *fb, *fc;
    int ia, ib, ic;
    int ka = rc_checkpoint_find(ck, "lm_head.weight", &fa, &ia);
    int kb = rc_checkpoint_find(ck, "transformer.ln_f.weight", &fb, &ib);
    int kc = rc_checkpoint_find(ck, "transformer.wte.weight", &fc, &ic);
    CHECK(ka >= 0 && kb >= 0 && kc >= 0);
    CHECK(fa == fb && fa != fc);  /* each shard opened once */
    CHECK(check_has(rc_safetensors_path(fa), "model-00002-of-00002.safetensors"));
    float got[2];
    CHECK(rc_safetensors_read_f32(fa, ia, got, 2, &err) == 0 && got[0] == 8 && got[1] == 9);
    CHECK(rc_safetensors_read_f32(fc, ic, got, 2, &err) == 0 && got[0] == 0 && got[1] == 1);
    CHECK(rc_checkpoint_used(ck, ka) && rc_checkpoint_used(ck, kc));
    /* prefix tolerance: the base-model name finds the head-model one */
    int kh = rc_checkpoint_find(ck, "h.0.attn.c_attn.weight", &fb, &ib);
    CHECK(kh >= 0 && strcmp(rc_checkpoint_name(ck, kh), "transformer.h.0.attn.c_attn.weight") == 0);
    CHECK(rc_checkpoint_find(ck, "h.0.attn.c_proj.weight", NULL, NULL) == -1);
    /* the mask buffer is known, so nothing is reported unused */
    err = (rc_error){0};
    CHECK(rc_checkpoint_check_unused(ck, &err) == 0 && err.code == 0);
    rc_checkpoint_close(ck);

    /* opened through the index path itself */
    ck = rc_checkpoint_open(idx, &err);
    CHECKF(ck && rc_checkpoint_count(ck) == 5, "%s", err.msg);
    if (ck) {
        rc_checkpoint_find(ck, "wte.weight", NULL, NULL);
        err = (rc_error){0};
        /* unused: ln_f, lm_head, c_attn.weight (attn.bias is a known buffer) */
        CHECK(rc_checkpoint_check_unused(ck, &err) == 3);
        CHECKF(err.code == RC_ERR_FORMAT && check_has(err.msg, "3 tensors not used by the model") &&
               check_has(err.msg, "'lm_head.weight'") && check_has(err.msg, "'transformer.ln_f.weight'") &&
               !check_has(err.msg, "attn.bias'"), "%s", err.msg);
    }
    rc_checkpoint_close(ck);

    /* model.safetensors is preferred when both exist; a file path opens just that file */
    char single[300];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    const char *ns[1] = {"only"};
    write_f32_file(single, 1, ns, v);
    ck = rc_checkpoint_open(dir, &err);
    CHECKF(ck && rc_checkpoint_count(ck) == 1, "%s", err.msg);
    rc_checkpoint_close(ck);
    ck = rc_checkpoint_open(p1, &err);
    CHECKF(ck && rc_checkpoint_count(ck) == 3, "%s", err.msg);
    rc_checkpoint_close(ck);
    unlink(single);

    /* malformed indexes */
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                "\"b\": \"model-00009-of-00009.safetensors\"}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "model.safetensors.index.json", "model-00009-of-00009.safetensors",
                      "'b'", "does not exist");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\", "
                "\"lm_head.weight\": \"model-00001-of-00002.safetensors\"}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "index.json", "puts 'lm_head.weight' in "
                      "'model-00001-of-00002.safetensors'", "no such tensor");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\", "
                "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    fclose(fp);
    /* both shards hold nothing twice, so this one opens, though the map lists only two */
    ck = rc_checkpoint_open(dir, &err);
    CHECKF(ck && rc_checkpoint_count(ck) == 5, "%s", err.msg);
    rc_checkpoint_close(ck);
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"a\": 3}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "index.json", "entry 'a' is not a relative file name");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "entry 'a' is not a relative file name");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"metadata\": {}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "index.json", "\"weight_map\" is missing or not an object");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "\"weight_map\" is empty");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": [\"a\"]}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "\"weight_map\" is missing or not an object");
    fp = fopen(idx, "w");
    fprintf(fp, "[]");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "index.json", "not a JSON object");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"a\": \"x\",");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "index.json", "invalid JSON");
    fp = fopen(idx, "w");
    fprintf(fp, "{\"metadata\": 7, \"weight_map\": {\"lm_head.weight\": "
                "\"model-00002-of-00002.safetensors\"}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "\"metadata\" is not an object");
    /* a name in two shards */
    const char *n3[2] = {"x", "lm_head.weight"};
    char p3[300];
    snprintf(p3, sizeof p3, "%s/extra.safetensors", dir);
    write_f32_file(p3, 2, n3, v);
    fp = fopen(idx, "w");
    fprintf(fp, "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\", "
                "\"x\": \"extra.safetensors\"}}");
    fclose(fp);
    EXPECT_CKPT_ERROR(dir, "tensor 'lm_head.weight' is in both", "extra.safetensors");
    /* a broken shard is reported under its own name */
    write_bytes(p3, "abc", 3);
    EXPECT_CKPT_ERROR(dir, "extra.safetensors", "3 bytes");
    CHECK(tmp_files_left() == 0);
    unlink(idx);
    EXPECT_CKPT_ERROR(dir, "no model.safetensors or model.safetensors.index.json");
    EXPECT_CKPT_ERROR(tmp_path("nowhere"), "nowhere", "no such file or directory");
}

static void test_prefixes(void)
{
    float v[16] = {0};
    const char *names[7] = {"h.0.mlp.c_fc.weight", "transformer.wte.weight",
                            "model.decoder.layers.0.fc1.weight", "decoder.embed_tokens.weight",
                            "x.weight", "model.x.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"};
    const char *path = tmp_path("prefix.safetensors");
    write_f32_file(path, 7, names, v);
    rc_error err = {0};
    rc_checkpoint *ck = rc_checkpoint_open(path, &err);
    CHECKF(ck != NULL, "%s", err.msg);
    if (!ck)
        return;
    struct { const char *ask, *found; } cases[] = {
        {"transformer.h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.weight"},   /* strip transformer. */
        {"h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.weight"},               /* exact */
        {"wte.weight", "transformer.wte.weight"},                     /* add transformer. */
        {"layers.0.fc1.weight", "model.decoder.layers.0.fc1.weight"}, /* add model.decoder. */
        {"model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight"}, /* strip model. */
        {"x.weight", "x.weight"},                                     /* exact beats model.x */
        {"model.x.weight", "model.x.weight"},
        {"decoder.layers.0.fc1.weight", "model.decoder.layers.0.fc1.weight"}, /* add model. */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int k = rc_checkpoint_find(ck, cases[i].ask, NULL, NULL);
        CHECKF(k >= 0 && strcmp(rc_checkpoint_name(ck, k), cases[i].found) == 0, "%s -> %s",
               cases[i].ask, k >= 0 ? rc_checkpoint_name(ck, k) : "(none)");
    }
    CHECK(rc_checkpoint_find(ck, "lm_head.weight", NULL, NULL) == -1);
    CHECK(rc_checkpoint_find(ck, "model.decoder.lm_head.weight", NULL, NULL) == -1);
    /* a very long name falls back to the heap buffer */
    char longname[600];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(rc_checkpoint_find(ck, longname, NULL, NULL) == -1);
    err = (rc_error){0};
    CHECK(rc_checkpoint_check_unused(ck, &err) == 0);  /* inv_freq is a known buffer */
    rc_checkpoint_close(ck);

    CHECK(rc_checkpoint_is_known_buffer("h.0.attn.bias"));
    CHECK(rc_checkpoint_is_known_buffer("transformer.h.11.attn.masked_bias"));
    CHECK(rc_checkpoint_is_known_buffer("h.0.crossattention.bias"));
    CHECK(rc_checkpoint_is_known_buffer("model.layers.3.self_attn.rotary_emb.inv_freq"));
    CHECK(rc_checkpoint_is_known_buffer("attn.bias"));
    CHECK(!rc_checkpoint_is_known_buffer("h.0.attn.c_attn.bias"));
    CHECK(!rc_checkpoint_is_known_buffer("h.0.attn.c_proj.bias"));
    CHECK(!rc_checkpoint_is_known_buffer("model.decoder.layers.0.self_attn.k_proj.bias"));
    CHECK(!rc_checkpoint_is_known_buffer("lm_head.weight"));
    CHECK(!rc_checkpoint_is_known_buffer("my_attn.bias"));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0)
        return mode_write(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--dump") == 0)
        return mode_dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--write-half") == 0)
        return mode_write_half(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--dump-half") == 0)
        return mode_dump_half(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_safetensors [--write PATH | --dump PATH | --write-half PATH | --dump-half PATH]\n");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/redco_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_conversions();
    test_half();
    test_truncated();
    test_malformed();
    test_sharded();
    test_prefixes();
    check_rm_tree(tmpdir);
    return check_summary("safetensors");
}
