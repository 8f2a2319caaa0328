/* test_idx.c - IDX arrays (plain and gzip), image sets and Fashion-MNIST: small files this
 * test writes into a temporary directory (valid ones and broken ones: bad magic, an
 * unsupported type, truncated, bytes past the data, counts that differ), the 512 test
 * images bundled in data/fashion-mnist/, and the real data set from Debian's
 * dataset-fashion-mnist package (scripts/setup.sh installs it: missing, the test fails). */
#include "check.h"
#include "redco/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 1024, "%s/%s", tmpdir, name);
    return b;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "test setup: cannot write %s\n", path);
        exit(2);
    }
}

/* an IDX header (type 0x08) for dims[ndim] into h; returns its length */
static size_t idx_header(uint8_t *h, int type, int ndim, const uint32_t *dims)
{
    h[0] = 0;
    h[1] = 0;
    h[2] = (uint8_t)type;
    h[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++)
            h[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    return 4 + 4 * (size_t)ndim;
}

/* A raw IDX file: a header for dims, then DATA_BYTES bytes (i * 7 + 3 mod 256). */
static void write_idx_raw(const char *path, int type, int ndim, const uint32_t *dims,
                          size_t data_bytes)
{
    uint8_t *buf = malloc(4 + 4 * 255 + data_bytes);
    size_t h = idx_header(buf, type, ndim, dims);
    for (size_t i = 0; i < data_bytes; i++)
        buf[h + i] = (uint8_t)(i * 7 + 3);
    write_file(path, buf, h + data_bytes);
    free(buf);
}

/* ---- the reader and writer -------------------------------------------------------------- */

static void test_round_trip(void)
{
    uint8_t data[3 * 2 * 4];
    for (int i = 0; i < 24; i++)
        data[i] = (uint8_t)(i * 11);
    rc_idx a = {.ndim = 3, .dims = {3, 2, 4}, .n = 24, .data = data};
    for (int gz = 0; gz <= 1; gz++) {
        const char *path = tmp_path(gz ? "rt.idx.gz" : "rt.idx");
        rc_error err = {0};
        CHECKF(rc_idx_write(path, &a, gz, &err) == 0, "%s", err.msg);
        /* the file itself: compressed or the plain bytes (header 28 + data 24) */
        FILE *f = fopen(path, "rb");
        uint8_t head[2] = {0};
        CHECK(f && fread(head, 1, 2, f) == 2);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        if (gz)
            CHECKF(head[0] == 0x1f && head[1] == 0x8b, "gzip magic: %02x %02x", head[0], head[1]);
        else
            CHECKF(head[0] == 0 && head[1] == 0 && size == 16 + 24, "plain: size %ld", size);

        rc_idx b;
        CHECKF(rc_idx_read(path, 0, &b, &err) == 0, "%s", err.msg);
        CHECK(b.ndim == 3 && b.dims[0] == 3 && b.dims[1] == 2 && b.dims[2] == 4);
        CHECK(b.n == 24 && b.file_items == 3 && b.data && memcmp(b.data, data, 24) == 0);
        rc_idx_free(&b);

        /* the first 2 items only; a limit past the end reads them all */
        CHECKF(rc_idx_read(path, 2, &b, &err) == 0, "%s", err.msg);
        CHECK(b.dims[0] == 2 && b.n == 16 && b.file_items == 3 && memcmp(b.data, data, 16) == 0);
        rc_idx_free(&b);
        CHECKF(rc_idx_read(path, 99, &b, &err) == 0 && b.dims[0] == 3 && b.n == 24, "%s",
               err.msg);
        rc_idx_free(&b);
    }

    /* an empty array (0 items) reads as such */
    rc_idx e = {.ndim = 1, .dims = {0}, .n = 0};
    rc_error err = {0};
    CHECKF(rc_idx_write(tmp_path("empty.idx"), &e, 0, &err) == 0, "%s", err.msg);
    rc_idx b;
    CHECKF(rc_idx_read(tmp_path("empty.idx"), 0, &b, &err) == 0 && b.n == 0 && b.ndim == 1,
           "%s", err.msg);
    rc_idx_free(&b);

    /* the writer checks its array */
    rc_idx bad = {.ndim = 2, .dims = {3, 4}, .n = 11, .data = data};
    CHECK(rc_idx_write(tmp_path("bad.idx"), &bad, 0, &err) == -1 && check_has(err.msg, "n = 11"));
}

/* reads PATH expecting failure; 1 when the message names the file and holds every part */
static int read_fails(const char *path, const char *part1, const char *part2)
{
    rc_idx a;
    rc_error err = {0};
    int rc = rc_idx_read(path, 0, &a, &err);
    int ok = rc == -1 && a.data == NULL && check_has(err.msg, path) && check_has(err.msg, part1) &&
             (!part2 || check_has(err.msg, part2));
    if (!ok)
        fprintf(stderr, "  %s: rc %d, message: %s\n", path, rc, err.msg);
    return ok;
}

static void test_errors(void)
{
    uint32_t dims[3] = {5, 4, 3};

    CHECK(read_fails(tmp_path("missing.idx"), "cannot open", "No such file"));

    uint8_t magic[] = {0x01, 0x02, 0x08, 0x03, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 9};
    write_file(tmp_path("magic.idx"), magic, sizeof magic);
    CHECK(read_fails(tmp_path("magic.idx"), "bad magic", "01 02 08 03"));
    write_file(tmp_path("short.idx"), magic + 2, 1);
    CHECK(read_fails(tmp_path("short.idx"), "truncated IDX header", NULL));

    write_idx_raw(tmp_path("f32.idx"), 0x0D, 3, dims, 60 * 4);
    CHECK(read_fails(tmp_path("f32.idx"), "type code 0x0d", "float32"));
    write_idx_raw(tmp_path("d0.idx"), 0x08, 0, dims, 0);
    CHECK(read_fails(tmp_path("d0.idx"), "0 dimensions", NULL));
    uint32_t dims5[5] = {1, 1, 1, 1, 2};
    write_idx_raw(tmp_path("d5.idx"), 0x08, 5, dims5, 2);
    CHECK(read_fails(tmp_path("d5.idx"), "5 dimensions", NULL));

    /* sizes cut short, data cut short, data too long */
    uint8_t h[16];
    idx_header(h, 0x08, 3, dims);
    write_file(tmp_path("hdr.idx"), h, 10);
    CHECK(read_fails(tmp_path("hdr.idx"), "truncated IDX header", "6 of the 12 bytes"));
    write_idx_raw(tmp_path("trunc.idx"), 0x08, 3, dims, 59);
    CHECK(read_fails(tmp_path("trunc.idx"), "truncated", "5 items of 4 x 3 (60 bytes of data), "
                     "the file holds 59"));
    write_idx_raw(tmp_path("long.idx"), 0x08, 3, dims, 62);
    CHECK(read_fails(tmp_path("long.idx"), "2 bytes past the data", "60 bytes"));
    /* a limit reads a prefix: bytes after it are not an error */
    rc_idx a;
    rc_error err = {0};
    CHECKF(rc_idx_read(tmp_path("long.idx"), 4, &a, &err) == 0 && a.n == 48, "%s", err.msg);
    rc_idx_free(&a);
    /* a header promising far more than the file holds fails without allocating it */
    uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffu};
    write_idx_raw(tmp_path("huge.idx"), 0x08, 3, huge, 10);
    CHECK(read_fails(tmp_path("huge.idx"), "too large", NULL));
    uint32_t big[3] = {60000000u, 28, 28};
    write_idx_raw(tmp_path("big.idx"), 0x08, 3, big, 100);
    CHECK(read_fails(tmp_path("big.idx"), "truncated", "the file holds 100"));

    /* gzip: a cut stream (in the data, or just its trailer) and a corrupt checksum */
    uint8_t data[60];
    for (int i = 0; i < 60; i++)
        data[i] = (uint8_t)(i * 37);
    rc_idx g = {.ndim = 3, .dims = {5, 4, 3}, .n = 60, .data = data};
    CHECKF(rc_idx_write(tmp_path("g.idx.gz"), &g, 1, &err) == 0, "%s", err.msg);
    size_t len = 0;
    char *gz = check_read_file(tmp_path("g.idx.gz"), &len);
    CHECK(gz && len > 30);
    if (gz && len > 30) {
        write_file(tmp_path("gcut.idx.gz"), gz, len / 2);
        CHECK(read_fails(tmp_path("gcut.idx.gz"), "truncated", "decompressed stream"));
        write_file(tmp_path("gtrail.idx.gz"), gz, len - 4);
        CHECK(read_fails(tmp_path("gtrail.idx.gz"), "gzip", NULL));
        gz[len - 6] ^= 0x55;  /* the CRC-32 in the trailer */
        write_file(tmp_path("gcrc.idx.gz"), gz, len);
        CHECK(read_fails(tmp_path("gcrc.idx.gz"), "broken gzip stream", NULL));
    }
    free(gz);
}

/* ---- image sets ----------------------------------------------------------------------------- */

static void test_image_set(void)
{
    uint8_t px[3 * 2 * 2] = {0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t lb[3] = {7, 0, 9};
    rc_idx im = {.ndim = 3, .dims = {3, 2, 2}, .n = 12, .data = px};
    rc_idx la = {.ndim = 1, .dims = {3}, .n = 3, .data = lb};
    rc_error err = {0};
    CHECK(rc_idx_write(tmp_path("im.idx"), &im, 0, &err) == 0);
    CHECK(rc_idx_write(tmp_path("la.idx.gz"), &la, 1, &err) == 0);

    rc_image_set s;
    CHECKF(rc_image_set_load(&s, tmp_path("im.idx"), tmp_path("la.idx.gz"), 0, &err) == 0, "%s",
           err.msg);
    CHECK(s.n == 3 && s.h == 2 && s.w == 2);
    int ok = 1;
    for (int i = 0; i < 12; i++)
        ok &= s.pixels[i] == (float)px[i] / 255.0f;
    CHECK(ok);
    CHECK(s.pixels[0] == 0.0f && s.pixels[1] == 1.0f && s.pixels[2] == 0.2f);
    CHECK(s.labels[0] == 7 && s.labels[1] == 0 && s.labels[2] == 9);
    rc_image_set_free(&s);

    CHECKF(rc_image_set_load(&s, tmp_path("im.idx"), tmp_path("la.idx.gz"), 2, &err) == 0 &&
           s.n == 2 && s.labels[1] == 0 && s.pixels[7] == 4.0f / 255.0f, "%s", err.msg);
    rc_image_set_free(&s);

    /* counts that differ (named with both files), even when a limit would hide it */
    rc_idx la2 = {.ndim = 1, .dims = {2}, .n = 2, .data = lb};
    CHECK(rc_idx_write(tmp_path("la2.idx"), &la2, 0, &err) == 0);
    for (int limit = 0; limit <= 1; limit++) {
        CHECK(rc_image_set_load(&s, tmp_path("im.idx"), tmp_path("la2.idx"), limit, &err) == -1);
        CHECKF(check_has(err.msg, "count mismatch") && check_has(err.msg, "im.idx holds 3 images") &&
               check_has(err.msg, "la2.idx 2 labels"), "%s", err.msg);
        CHECK(s.pixels == NULL && s.labels == NULL && s.n == 0);
    }
    /* images given as labels and the other way round */
    CHECK(rc_image_set_load(&s, tmp_path("la.idx.gz"), tmp_path("im.idx"), 0, &err) == -1);
    CHECKF(check_has(err.msg, "la.idx.gz: images must be a 3-D") && check_has(err.msg, "[3]"),
           "%s", err.msg);
    rc_idx im4 = {.ndim = 3, .dims = {3, 4, 1}, .n = 12, .data = px};
    CHECK(rc_idx_write(tmp_path("im4.idx"), &im4, 0, &err) == 0);
    CHECK(rc_image_set_load(&s, tmp_path("im4.idx"), tmp_path("im.idx"), 0, &err) == -1);
    CHECKF(check_has(err.msg, "im.idx: labels must be a 1-D") &&
           check_has(err.msg, "[3 x 2 x 2]"), "%s", err.msg);
    /* a broken file's message comes through */
    CHECK(rc_image_set_load(&s, tmp_path("im.idx"), tmp_path("magic.idx"), 0, &err) == -1 &&
          check_has(err.msg, "magic.idx: not an IDX file"));
}

static void test_fashion_dir(void)
{
    rc_image_set s;
    rc_error err = {0};
    /* a directory without the files: both names looked for, no package hint (not the
     * default directory) */
    CHECK(rc_fashion_mnist_load(&s, tmpdir, "t10k", 0, &err) == -1);
    CHECKF(check_has(err.msg, "t10k-images-idx3-ubyte.gz nor") &&
           check_has(err.msg, tmpdir) && !check_has(err.msg, "dataset-fashion-mnist"), "%s",
           err.msg);
    CHECK(rc_fashion_mnist_load(&s, tmpdir, "test", 0, &err) == -1 &&
          check_has(err.msg, "\"train\" or \"t10k\""));

    /* plain (not .gz) files are found too; a label of 10 is an error */
    uint8_t px[2 * 28 * 28] = {0};
    uint8_t lb[2] = {3, 10};
    rc_idx im = {.ndim = 3, .dims = {2, 28, 28}, .n = 2 * 28 * 28, .data = px};
    rc_idx la = {.ndim = 1, .dims = {2}, .n = 2, .data = lb};
    CHECK(rc_idx_write(tmp_path("train-images-idx3-ubyte"), &im, 0, &err) == 0);
    CHECK(rc_idx_write(tmp_path("train-labels-idx1-ubyte"), &la, 0, &err) == 0);
    CHECK(rc_fashion_mnist_load(&s, tmpdir, "train", 0, &err) == -1);
    CHECKF(check_has(err.msg, "train-labels-idx1-ubyte: label 10 of item 1 is outside [0, 10)"),
           "%s", err.msg);
    CHECKF(rc_fashion_mnist_load(&s, tmpdir, "train", 1, &err) == 0 && s.n == 1 &&
           s.labels[0] == 3, "%s", err.msg);
    rc_image_set_free(&s);

    CHECK(strcmp(rc_fashion_mnist_class(0), "T-shirt/top") == 0);
    CHECK(strcmp(rc_fashion_mnist_class(7), "Sneaker") == 0);
    CHECK(strcmp(rc_fashion_mnist_class(9), "Ankle boot") == 0);
    CHECK(rc_fashion_mnist_class(10) == NULL && rc_fashion_mnist_class(-1) == NULL);
}

/* ---- Fashion-MNIST itself ----------------------------------------------------------------- */

static void histogram(const rc_image_set *s, int64_t hist[10])
{
    memset(hist, 0, 10 * sizeof *hist);
    for (int64_t i = 0; i < s->n; i++)
        if (s->labels[i] >= 0 && s->labels[i] < 10)
            hist[s->labels[i]]++;
}

/* sum of the pixel bytes (pixels * 255, exact in float) */
static int64_t byte_sum(const rc_image_set *s)
{
    int64_t sum = 0;
    for (int64_t i = 0; i < s->n * s->h * s->w; i++)
        sum += (int64_t)(s->pixels[i] * 255.0f + 0.5f);
    return sum;
}

/* data/fashion-mnist: the first 512 test images and labels (data/README.md) */
static void test_bundled(rc_image_set *small)
{
    rc_error err = {0};
    CHECKF(rc_fashion_mnist_load(small, REDCO_DATA_DIR "/fashion-mnist", "t10k", 0, &err) == 0,
           "%s", err.msg);
    CHECK(small->n == 512 && small->h == 28 && small->w == 28);
    int64_t hist[10], want[10] = {56, 53, 71, 46, 58, 40, 47, 48, 45, 48};
    histogram(small, hist);
    CHECK(memcmp(hist, want, sizeof hist) == 0);
    CHECK(small->n == 512 && small->labels[0] == 9 && small->labels[1] == 2 && small->labels[9] == 7);
    int64_t sum = byte_sum(small);
    CHECKF(sum == 30331366, "byte sum %lld", (long long)sum);
}

/* Debian's package (installed by scripts/setup.sh, so missing is a failure) */
static void test_package(const rc_image_set *small)
{
    rc_image_set s;
    rc_error err = {0};
    for (int train = 0; train <= 1; train++) {
        int64_t want_n = train ? 60000 : 10000;
        int rc = rc_fashion_mnist_load(&s, NULL, train ? "train" : "t10k", 0, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc != 0)
            continue;
        CHECK(s.n == want_n && s.h == 28 && s.w == 28);
        int64_t hist[10];
        histogram(&s, hist);
        int flat = 1;
        for (int c = 0; c < 10; c++)
            flat &= hist[c] == want_n / 10;
        CHECKF(flat, "class histogram %lld %lld ... %lld", (long long)hist[0], (long long)hist[1],
               (long long)hist[9]);
        float lo = 1, hi = 0;
        for (int64_t i = 0; i < s.n * 28 * 28; i++) {
            lo = s.pixels[i] < lo ? s.pixels[i] : lo;
            hi = s.pixels[i] > hi ? s.pixels[i] : hi;
        }
        CHECK(lo == 0.0f && hi == 1.0f);
        /* byte sums and first labels from Python's gzip module on the same files */
        int64_t sum = byte_sum(&s);
        CHECKF(sum == (train ? 3431114169LL : 573469082LL), "byte sum %lld", (long long)sum);
        CHECK(train ? s.labels[0] == 9 && s.labels[3] == 3 && s.labels[6] == 7
                    : s.labels[0] == 9 && s.labels[4] == 6 && s.labels[9] == 7);
        if (!train) {
            /* the bundled subset is the test set's first 512 pairs */
            CHECK(small->n == 512 &&
                  memcmp(s.pixels, small->pixels, 512 * 28 * 28 * sizeof(float)) == 0 &&
                  memcmp(s.labels, small->labels, 512 * sizeof(int32_t)) == 0);
        }
        rc_image_set_free(&s);
    }
    /* a limit reads the first pairs only */
    CHECKF(rc_fashion_mnist_load(&s, NULL, "t10k", 100, &err) == 0 && s.n == 100 &&
           memcmp(s.labels, small->labels, 100 * sizeof(int32_t)) == 0, "%s", err.msg);
    rc_image_set_free(&s);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/redco_test_idx_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_round_trip();
    test_errors();
    test_image_set();
    test_fashion_dir();
    rc_image_set small = {0};
    test_bundled(&small);
    test_package(&small);
    rc_image_set_free(&small);
    check_rm_tree(tmpdir);
    return check_summary("idx");
}
