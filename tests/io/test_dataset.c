/* test_dataset.c - token files, datasets, windows, epoch order, its data split and the token
 * cache (include/redco/data.h), with the real GPT-2 tokenizer.
 *
 * Also a helper for tests/ref/test_dataset_ref.py:
 *   test_dataset --dump FILE.npy              prints "dtype n" then the ids, one a line
 *   test_dataset --order N SEED EPOCH         prints rc_epoch_order's permutation
 *   test_dataset --cache DATA TOKDIR CHUNK    opens DATA through the cache, prints its path */
#include "check.h"
#include "npy.h"
#include "redco/data.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];
static char gpt2_dir[1024];
static rc_tokenizer *tok;

/* ---- helpers ------------------------------------------------------------------------- */

static int has(const char *msg, const char *part) { return msg && strstr(msg, part) != NULL; }

/* out[cap] = a + b (+ c); a test setup error when it does not fit */
static void join(char *out, size_t cap, const char *a, const char *b, const char *c)
{
    int k = snprintf(out, cap, "%s%s%s", a, b, c ? c : "");
    if (k < 0 || (size_t)k >= cap) {
        fprintf(stderr, "path too long: %s%s\n", a, b);
        exit(2);
    }
}

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
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* A .npy made by hand: preamble of version MAJOR, the dict text padded with spaces and a
 * newline to a multiple of 64 bytes, then DATA. */
static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t nbytes)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    unsigned char *buf = calloc(1, total + nbytes + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t k = 0; k < pre - 8; k++)
        buf[8 + k] = (unsigned char)(hlen >> (8 * k));
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, dl);
    buf[total - 1] = '\n';
    if (nbytes)
        memcpy(buf + total, data, nbytes);
    write_file(path, buf, total + nbytes);
    free(buf);
}

static int32_t *encode(const char *text, size_t len, int add_special, int64_t *n)
{
    int32_t *ids = NULL;
    rc_error err = {0};
    if (rc_tokenizer_encode(tok, text, len, add_special, &ids, n, &err)) {
        fprintf(stderr, "encode failed: %s\n", err.msg);
        exit(2);
    }
    return ids;
}

/* encode(text, add_special = 1) with tokenizer t */
static int32_t *encode_with(const rc_tokenizer *t, const char *text, int64_t *n)
{
    int32_t *ids = NULL;
    rc_error err = {0};
    if (rc_tokenizer_encode(t, text, strlen(text), 1, &ids, n, &err)) {
        fprintf(stderr, "encode failed: %s\n", err.msg);
        exit(2);
    }
    return ids;
}

/* all tokens of an LM dataset */
static int32_t *all_tokens(const rc_dataset *ds, int64_t *n)
{
    *n = rc_dataset_tokens(ds);
    int32_t *ids = malloc((size_t)(*n + 1) * sizeof *ids);
    rc_error err = {0};
    if (rc_dataset_read(ds, 0, *n, ids, &err)) {
        fprintf(stderr, "read failed: %s\n", err.msg);
        exit(2);
    }
    return ids;
}

static int same_ids(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    if (na != nb)
        return 0;
    for (int64_t i = 0; i < na; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* files in tmpdir whose names start with PREFIX */
static int count_prefixed(const char *prefix)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- .npy ---------------------------------------------------------------------------- */

static void test_npy_versions_and_dtypes(void)
{
    static const char *descrs[] = {"<i4", "<u2", "<i8"};
    static const rc_npy_dtype dtypes[] = {RC_NPY_I32, RC_NPY_U16, RC_NPY_I64};
    const int64_t vals[] = {0, 1, 255, 256, 50256, 65535, 7, 12345};
    const int n = 8;
    for (int major = 1; major <= 3; major++) {
        for (int d = 0; d < 3; d++) {
            int es = (int)dtypes[d];
            unsigned char data[64];
            for (int i = 0; i < n; i++)
                for (int k = 0; k < es; k++)
                    data[i * es + k] = (unsigned char)((uint64_t)vals[i] >> (8 * k));
            char dict[128];
            /* vary key order and spacing as other writers do */
            if (d == 1)
                snprintf(dict, sizeof dict, "{\"shape\": (%d,), \"fortran_order\": False, "
                         "\"descr\": \"%s\"}", n, descrs[d]);
            else
                snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                         "'shape': (%d,), }", descrs[d], n);
            const char *path = tmp_path("v.npy");
            write_npy_raw(path, major, dict, data, (size_t)(n * es));
            rc_npy a;
            rc_error err = {0};
            int rc = rc_npy_open(&a, path, &err);
            CHECKF(rc == 0, "v%d %s: %s", major, descrs[d], err.msg);
            if (rc)
                continue;
            CHECK(a.dtype == dtypes[d] && a.n == n && a.version == major);
            int ok = 1;
            for (int i = 0; i < n; i++)
                ok &= rc_npy_get(&a, i) == vals[i];
            CHECKF(ok, "values of v%d %s", major, descrs[d]);
            rc_npy_close(&a);

            /* the same file as a dataset: 8 tokens, T = 3 -> 2 windows */
            rc_dataset *ds = rc_dataset_open(path, NULL, &err);
            CHECKF(ds != NULL, "%s", err.msg);
            if (!ds)
                continue;
            CHECK(rc_dataset_kind(ds) == RC_DATA_LM && rc_dataset_tokens(ds) == n);
            CHECK(rc_dataset_windows(ds, 3) == 2);
            int32_t in[3], tg[3];
            CHECK(rc_dataset_window(ds, 3, 1, in, tg, &err) == 0);
            CHECK(in[0] == 256 && in[1] == 50256 && in[2] == 65535);
            CHECK(tg[0] == 50256 && tg[1] == 65535 && tg[2] == 7);
            rc_dataset_close(ds);
        }
    }
    /* Python 2 era "10L" shapes and an empty array */
    write_npy_raw(tmp_path("l.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2L,), }",
                  "\x01\0\0\0\x02\0\0\0", 8);
    rc_npy a;
    rc_error err = {0};
    CHECKF(rc_npy_open(&a, tmp_path("l.npy"), &err) == 0 && a.n == 2 && rc_npy_get(&a, 1) == 2,
           "%s", err.msg);
    rc_npy_close(&a);
    write_npy_raw(tmp_path("e.npy"), 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (0,), }",
                  NULL, 0);
    rc_dataset *ds = rc_dataset_open(tmp_path("e.npy"), NULL, &err);
    CHECKF(ds && rc_dataset_tokens(ds) == 0 && rc_dataset_windows(ds, 4) == 0, "%s", err.msg);
    rc_dataset_close(ds);
}

static void expect_npy_error(const char *what, const void *bytes, size_t n, int code,
                             const char *part)
{
    const char *path = tmp_path("bad.npy");
    write_file(path, bytes, n);
    rc_npy a;
    rc_error err = {0};
    int rc = rc_npy_open(&a, path, &err);
    CHECKF(rc == -1 && err.code == code && has(err.msg, part) && has(err.msg, "bad.npy"),
           "%s: rc %d code %d msg: %s", what, rc, err.code, err.msg);
    if (rc == 0)
        rc_npy_close(&a);
    /* the dataset reports the same */
    rc_error err2 = {0};
    rc_dataset *ds = rc_dataset_open(path, NULL, &err2);
    CHECKF(ds == NULL && has(err2.msg, part), "%s via dataset: %s", what, err2.msg);
    rc_dataset_close(ds);
}

static void expect_npy_dict_error(const char *what, int major, const char *dict,
                                  size_t data_bytes, int code, const char *part)
{
    unsigned char data[64] = {0};
    write_npy_raw(tmp_path("bad.npy"), major, dict, data, data_bytes);
    size_t n;
    char *bytes = check_read_file(tmp_path("bad.npy"), &n);
    expect_npy_error(what, bytes, n, code, part);
    free(bytes);
}

static void test_npy_malformed(void)
{
    expect_npy_error("bad magic", "\x93NUMPZ\x01\x00\x10\x00{'descr': '<i4'}      \n", 26,
                     RC_ERR_FORMAT, "bad magic");
    expect_npy_error("text file", "hello, this is not numpy\n", 25, RC_ERR_FORMAT, "bad magic");
    expect_npy_error("tiny", "\x93NU", 3, RC_ERR_FORMAT, "not a .npy");
    /* header length 118 but only 20 bytes of it present */
    expect_npy_error("truncated header", "\x93NUMPY\x01\x00\x76\x00{'descr': '<i4', 'fo", 30,
                     RC_ERR_FORMAT, "truncated");
    expect_npy_error("truncated v2 preamble", "\x93NUMPY\x02\x00\x76", 9, RC_ERR_FORMAT,
                     "truncated");
    expect_npy_error("version 4", "\x93NUMPY\x04\x00\x10\x00{}              \n", 26,
                     RC_ERR_UNSUPPORTED, "version 4.0");
    expect_npy_dict_error("fortran order", 1,
                          "{'descr': '<i4', 'fortran_order': True, 'shape': (4,), }", 16,
                          RC_ERR_UNSUPPORTED, "Fortran");
    expect_npy_dict_error("2-D", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                          16, RC_ERR_SHAPE, "1-D");
    expect_npy_dict_error("scalar", 2, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                          4, RC_ERR_SHAPE, "0 dimensions");
    expect_npy_dict_error("float dtype", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
                          16, RC_ERR_DTYPE, "'<f4'");
    expect_npy_dict_error("big-endian", 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }",
                          16, RC_ERR_DTYPE, "'>i4'");
    expect_npy_dict_error("short data", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }",
                          16, RC_ERR_FORMAT, "shorter than its shape (5,)");
    expect_npy_dict_error("short data v2 i8", 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                          20, RC_ERR_FORMAT, "shorter");
    expect_npy_dict_error("missing shape", 1, "{'descr': '<i4', 'fortran_order': False, }", 16,
                          RC_ERR_FORMAT, "lacks 'shape'");
    expect_npy_dict_error("extra key", 1,
                          "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), 'x': 1}", 16,
                          RC_ERR_FORMAT, "unexpected key 'x'");
    expect_npy_dict_error("not a dict", 1, "['descr', '<i4']", 16, RC_ERR_FORMAT, "not a dict");
    expect_npy_dict_error("bad shape", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': 4, }",
                          16, RC_ERR_FORMAT, "'shape' must be a tuple");
    /* a missing file */
    rc_npy a;
    rc_error err = {0};
    CHECK(rc_npy_open(&a, tmp_path("nope.npy"), &err) == -1 && err.code == RC_ERR_IO &&
          has(err.msg, "nope.npy"));
}

static void test_npy_write(void)
{
    int32_t ids[5] = {0, 1, 65535, 300, 42};
    rc_npy_dtype dts[3] = {RC_NPY_U16, RC_NPY_I32, RC_NPY_I64};
    for (int d = 0; d < 3; d++) {
        rc_error err = {0};
        const char *path = tmp_path("w.npy");
        CHECKF(rc_npy_write(path, dts[d], ids, 5, &err) == 0, "%s", err.msg);
        rc_npy a;
        CHECKF(rc_npy_open(&a, path, &err) == 0, "%s", err.msg);
        int ok = a.dtype == dts[d] && a.n == 5;
        for (int i = 0; ok && i < 5; i++)
            ok = rc_npy_get(&a, i) == ids[i];
        CHECKF(ok, "round trip of dtype %d", (int)dts[d]);
        CHECK(((uintptr_t)a.data % 64) == 0 || (a.data - (const uint8_t *)a.map) == 128);
        rc_npy_close(&a);
    }
    /* a negative id round-trips through <i8 and <i4 */
    int32_t neg[2] = {-5, 7};
    rc_error err = {0};
    CHECK(rc_npy_write(tmp_path("w.npy"), RC_NPY_I64, neg, 2, &err) == 0);
    rc_npy a;
    CHECK(rc_npy_open(&a, tmp_path("w.npy"), &err) == 0 && rc_npy_get(&a, 0) == -5);
    rc_npy_close(&a);
    /* ids that do not fit <u2: an error, and neither the target nor a temporary is left */
    int32_t big[2] = {1, 70000};
    CHECK(rc_npy_write(tmp_path("big.npy"), RC_NPY_U16, big, 2, &err) == -1 &&
          has(err.msg, "70000") && has(err.msg, "'<u2'"));
    CHECK(count_prefixed("big.npy") == 0);
    /* a directory that does not exist */
    CHECK(rc_npy_write(tmp_path("no/such/dir.npy"), RC_NPY_I32, ids, 5, &err) == -1 &&
          err.code == RC_ERR_IO && has(err.msg, "no/such/dir.npy"));
}

/* ---- windows ------------------------------------------------------------------------- */

static rc_dataset *iota_dataset(int64_t n)
{
    int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)i;
    rc_error err = {0};
    const char *path = tmp_path("iota.npy");
    if (rc_npy_write(path, RC_NPY_I32, ids, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
    free(ids);
    return rc_dataset_open(path, NULL, &err);
}

static void test_windows(void)
{
    const int64_t Ns[] = {0, 1, 2, 3, 4, 5, 8, 9, 10, 17, 64, 65, 100};
    const int64_t Ts[] = {1, 2, 3, 4, 8, 16, 64};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++) {
        rc_dataset *ds = iota_dataset(Ns[a]);
        CHECK(ds != NULL);
        if (!ds)
            continue;
        for (size_t b = 0; b < sizeof Ts / sizeof Ts[0]; b++) {
            int64_t N = Ns[a], T = Ts[b];
            int64_t expect = N >= 1 ? (N - 1) / T : 0;
            int64_t nw = rc_dataset_windows(ds, T);
            CHECKF(nw == expect, "N %lld T %lld: %lld windows", (long long)N, (long long)T,
                   (long long)nw);
            int32_t in[64], tg[64];
            int ok = 1;
            rc_error err = {0};
            for (int64_t i = 0; i < nw; i++) {
                ok &= rc_dataset_window(ds, T, i, in, tg, &err) == 0;
                for (int64_t t = 0; t < T; t++)
                    ok &= in[t] == i * T + t && tg[t] == i * T + t + 1;
            }
            CHECKF(ok, "window contents N %lld T %lld", (long long)N, (long long)T);
            /* the tail: the last window ends at or before the last token; one past fails */
            if (nw > 0)
                CHECK(nw * T + 1 <= N && (nw + 1) * T + 1 > N);
            CHECK(rc_dataset_window(ds, T, nw, in, tg, &err) == -1 && err.code == RC_ERR_INDEX &&
                  has(err.msg, "out of range"));
            CHECK(rc_dataset_window(ds, T, -1, in, tg, &err) == -1);
        }
        CHECK(rc_dataset_windows(ds, 0) == 0);
        CHECK(rc_dataset_examples(ds) == 0);
        rc_data_example ex;
        rc_error err = {0};
        CHECK(rc_dataset_example(ds, 0, &ex, &err) == -1 && has(err.msg, "not examples"));
        rc_dataset_close(ds);
    }
    /* ids checked as they are read: negative, and past the tokenizer's vocabulary */
    int32_t ids[6] = {1, 2, -3, 4, 50257, 6};
    rc_error err = {0};
    CHECK(rc_npy_write(tmp_path("badids.npy"), RC_NPY_I32, ids, 6, &err) == 0);
    rc_dataset *ds = rc_dataset_open(tmp_path("badids.npy"), NULL, &err);
    int32_t in[2], tg[2];
    CHECK(ds && rc_dataset_window(ds, 2, 0, in, tg, &err) == -1 && has(err.msg, "-3") &&
          has(err.msg, "position 2") && has(err.msg, "badids.npy"));
    rc_dataset_close(ds);
    rc_dataset_opts o = {.tokenizer = tok};
    ids[2] = 3;
    CHECK(rc_npy_write(tmp_path("badids.npy"), RC_NPY_I32, ids, 6, &err) == 0);
    ds = rc_dataset_open(tmp_path("badids.npy"), &o, &err);
    CHECK(ds && rc_dataset_window(ds, 2, 0, in, tg, &err) == 0);
    CHECK(ds && rc_dataset_window(ds, 2, 1, in, tg, &err) == -1 && has(err.msg, "50257") &&
          has(err.msg, "[0, 50257)"));
    rc_dataset_close(ds);
}

/* ---- epoch order and data split ------------------------------------------------------- */

static int is_permutation(const int64_t *p, int64_t n)
{
    char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]])
            ok = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_epoch_order(void)
{
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N], d[N];
    rc_epoch_order(N, 1234, 0, 1, a);
    rc_epoch_order(N, 1234, 0, 1, b);
    rc_epoch_order(N, 1234, 1, 1, c);
    rc_epoch_order(N, 1235, 0, 1, d);
    CHECK(is_permutation(a, N) && is_permutation(c, N) && is_permutation(d, N));
    CHECK(memcmp(a, b, sizeof a) == 0);              /* deterministic */
    CHECK(memcmp(a, c, sizeof a) != 0);              /* differs across epochs */
    CHECK(memcmp(a, d, sizeof a) != 0);              /* and across seeds */
    int64_t fixed = 0, moved_far = 0;
    for (int i = 0; i < N; i++) {
        fixed += a[i] == i;
        moved_far += llabs(a[i] - i) > N / 10;
    }
    CHECKF(fixed < 10 && moved_far > N / 2, "fixed %lld, moved far %lld", (long long)fixed,
           (long long)moved_far);
    rc_epoch_order(N, 1234, 0, 0, a);
    int ident = 1;
    for (int i = 0; i < N; i++)
        ident &= a[i] == i;
    CHECK(ident);
    /* tiny sizes, and every ordering of 3 reachable over epochs */
    int64_t one[1];
    rc_epoch_order(1, 5, 0, 1, one);
    CHECK(one[0] == 0);
    rc_epoch_order(0, 5, 0, 1, one);
    int seen[6] = {0};
    for (uint64_t e = 0; e < 200; e++) {
        int64_t p[3];
        rc_epoch_order(3, 99, e, 1, p);
        CHECK(is_permutation(p, 3));
        seen[p[0] * 2 + (p[1] > p[2])]++;
    }
    int all = 1;
    for (int k = 0; k < 6; k++)
        all &= seen[k] > 10;
    CHECKF(all, "orderings of 3: %d %d %d %d %d %d", seen[0], seen[1], seen[2], seen[3],
           seen[4], seen[5]);
}

static void check_split(int64_t n, int B, int W, int K, rc_tail_policy tail)
{
    int64_t *order = malloc((size_t)(n + 1) * sizeof *order);
    rc_epoch_order(n, 7, 3, 1, order);
    rc_data_split s;
    rc_error err = {0};
    CHECK(rc_data_split_init(&s, n, B, W, K, tail, &err) == 0);
    int64_t G = (int64_t)B * W * K, rem = n % G;
    int64_t *count = calloc((size_t)n + 1, sizeof *count);
    int64_t pads = 0, slots = 0;
    int ok = s.steps % K == 0, disjoint = 1, layout = 1;
    int64_t out[16];
    for (int64_t st = 0; st < s.steps; st++) {
        for (int r = 0; r < W; r++) {
            ok &= rc_data_split_batch(&s, order, r, st, out, &err) == 0;
            for (int k = 0; k < B; k++) {
                slots++;
                int64_t pos = st * B * W + (int64_t)r * B + k;      /* rank r: [r*B, (r+1)*B) */
                if (out[k] < 0) {
                    pads++;
                    layout &= tail == RC_TAIL_PAD && pos >= n;
                    continue;
                }
                layout &= out[k] == order[pos % n];
                count[out[k]]++;
            }
        }
        /* no example twice within one global batch (unless wrapping a tiny epoch) */
        if (tail != RC_TAIL_WRAP || n >= B * W) {
            for (int r = 0; r < W; r++) {
                int64_t x[16], y[16];
                rc_data_split_batch(&s, order, r, st, x, &err);
                for (int q = r + 1; q < W; q++) {
                    rc_data_split_batch(&s, order, q, st, y, &err);
                    for (int i = 0; i < B; i++)
                        for (int j = 0; j < B; j++)
                            disjoint &= x[i] < 0 || x[i] != y[j];
                }
            }
        }
    }
    int64_t once = 0, zero = 0, more = 0;
    for (int64_t i = 0; i < n; i++) {
        once += count[i] == 1;
        zero += count[i] == 0;
        more += count[i] > 1;
    }
    const char *pol = tail == RC_TAIL_DROP ? "drop" : tail == RC_TAIL_WRAP ? "wrap" : "pad";
    if (tail == RC_TAIL_DROP) {
        ok &= s.dropped == rem && s.filled == 0 && once == n - rem && more == 0 &&
              s.steps == n / G * K && pads == 0;
        /* the dropped ones are the end of the epoch order */
        for (int64_t i = n - rem; i < n; i++)
            ok &= count[order[i]] == 0;
    } else if (tail == RC_TAIL_PAD) {
        ok &= once == n && s.dropped == 0 && pads == s.filled && slots == n + s.filled &&
              s.filled == (rem ? G - rem : 0);
    } else {
        ok &= zero == 0 && s.dropped == 0 && slots == n + s.filled &&
              s.filled == (rem && n ? G - rem : 0) && pads == 0;
        if (n >= G)
            ok &= more == s.filled;
    }
    CHECKF(ok && disjoint && layout, "%s n %lld B %d world %d accum %d: steps %lld dropped %lld "
           "filled %lld once %lld zero %lld more %lld", pol, (long long)n, B, W, K,
           (long long)s.steps, (long long)s.dropped, (long long)s.filled, (long long)once,
           (long long)zero, (long long)more);
    free(order);
    free(count);
}

static void test_data_split(void)
{
    const int64_t ns[] = {0, 1, 5, 16, 37, 64, 100};
    const int worlds[] = {1, 2, 4};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (int w = 0; w < 3; w++)
            for (int B = 1; B <= 3; B++)
                for (int K = 1; K <= 2; K++)
                    for (int t = 0; t < 3; t++)
                        check_split(ns[a], B, worlds[w], K, (rc_tail_policy)t);
    /* one concrete layout: 10 examples, B 2, world 2, identity order, pad */
    rc_data_split s;
    rc_error err = {0};
    CHECK(rc_data_split_init(&s, 10, 2, 2, 1, RC_TAIL_PAD, &err) == 0 && s.steps == 3 &&
          s.filled == 2);
    int64_t out[2];
    CHECK(rc_data_split_batch(&s, NULL, 1, 0, out, &err) == 0 && out[0] == 2 && out[1] == 3);
    CHECK(rc_data_split_batch(&s, NULL, 0, 2, out, &err) == 0 && out[0] == 8 && out[1] == 9);
    CHECK(rc_data_split_batch(&s, NULL, 1, 2, out, &err) == 0 && out[0] == -1 && out[1] == -1);
    CHECK(rc_data_split_batch(&s, NULL, 2, 0, out, &err) == -1 && has(err.msg, "rank 2 of 2"));
    CHECK(rc_data_split_batch(&s, NULL, 0, 3, out, &err) == -1 && has(err.msg, "step 3 of 3"));
    CHECK(rc_data_split_init(&s, 10, 0, 2, 1, RC_TAIL_DROP, &err) == -1 && err.code == RC_ERR_ARG);
    CHECK(rc_data_split_init(&s, 10, 2, 2, 1, (rc_tail_policy)9, &err) == -1);
    /* wrap: the last global batch is completed from the start of the order */
    CHECK(rc_data_split_init(&s, 5, 2, 2, 1, RC_TAIL_WRAP, &err) == 0 && s.steps == 2 && s.filled == 3);
    CHECK(rc_data_split_batch(&s, NULL, 0, 1, out, &err) == 0 && out[0] == 4 && out[1] == 0);
    CHECK(rc_data_split_batch(&s, NULL, 1, 1, out, &err) == 0 && out[0] == 1 && out[1] == 2);
}

/* ---- text and jsonl with the GPT-2 tokenizer ----------------------------------------- */

static void test_txt_streaming(void)
{
    size_t len;
    char path[4200];
    join(path, sizeof path, gpt2_dir, "/../moby_dick.txt", NULL);
    char *moby = check_read_file(path, &len);
    CHECKF(moby != NULL, "cannot read %s", path);
    if (!moby)
        return;
    /* 48 KB from the middle, plus hand-made tricky boundaries */
    const char *tricky = "end.  \n\n  Next\r\nline\n\n\nX y\t z \xc3\xa9t\xc3\xa9 \xe2\x80\x94 "
                         "it's 1234 5678\n'quote' -- \"dq\"\n";
    size_t take = 48 * 1024;
    char *text = malloc(take + 4096);
    memcpy(text, moby + 200000, take);
    size_t tl = strlen(tricky);
    for (int k = 0; k < 20; k++)
        memcpy(text + take + k * tl, tricky, tl);
    size_t n_text = take + 20 * tl;
    write_file(tmp_path("stream.txt"), text, n_text);
    int64_t n_whole;
    int32_t *whole = encode(text, n_text, 0, &n_whole);

    const size_t chunks[] = {256, 1000, 4096, 1 << 20};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        rc_dataset_opts o = {.tokenizer = tok, .chunk_bytes = chunks[c]};
        rc_error err = {0};
        rc_dataset *ds = rc_dataset_open(tmp_path("stream.txt"), &o, &err);
        CHECKF(ds != NULL, "%s", err.msg);
        if (!ds)
            continue;
        const rc_dataset_info *info = rc_dataset_info_get(ds);
        int64_t n;
        int32_t *got = all_tokens(ds, &n);
        CHECKF(same_ids(got, n, whole, n_whole), "chunk %zu: %lld tokens vs %lld whole",
               chunks[c], (long long)n, (long long)n_whole);
        CHECK(info->cache == RC_CACHE_OFF && info->unsafe_cuts == 0 &&
              info->tokenized_bytes == (int64_t)n_text);
        if (chunks[c] < n_text)
            CHECKF(info->chunks >= (int64_t)(n_text / chunks[c]) / 2, "only %lld chunks",
                   (long long)info->chunks);
        else
            CHECK(info->chunks == 1);
        free(got);
        rc_dataset_close(ds);
    }
    /* no safe point at all: the chunk grows to 64 chunks, then is cut at a UTF-8 boundary
     * and the cut is reported */
    size_t nl = 40000;
    char *run = malloc(nl);
    for (size_t i = 0; i < nl; i += 2)
        memcpy(run + i, "\xc3\xa9", 2);
    write_file(tmp_path("run.txt"), run, nl);
    rc_dataset_opts o = {.tokenizer = tok, .chunk_bytes = 256};
    rc_error err = {0};
    rc_dataset *ds = rc_dataset_open(tmp_path("run.txt"), &o, &err);
    CHECKF(ds && rc_dataset_info_get(ds)->unsafe_cuts >= 2, "%s", err.msg);
    if (ds) {
        /* the cuts fell on character boundaries: decoding gives the text back */
        int64_t n;
        int32_t *got = all_tokens(ds, &n);
        char *dec = NULL;
        size_t dl = 0;
        CHECK(rc_tokenizer_decode(tok, got, n, 0, &dec, &dl, &err) == 0 && dl == nl &&
              memcmp(dec, run, nl) == 0);
        free(dec);
        free(got);
    }
    rc_dataset_close(ds);
    /* invalid UTF-8 is an error naming the file and the byte range */
    write_file(tmp_path("bad.txt"), "good text\nthen \xff bad\n", 21);
    ds = rc_dataset_open(tmp_path("bad.txt"), &o, &err);
    CHECKF(ds == NULL && has(err.msg, "bad.txt: bytes 0-21"), "%s", err.msg);
    free(run);
    free(whole);
    free(text);
    free(moby);
}

static void test_cache(void)
{
    char copy_dir[1100];
    const char *text = "The cache holds these tokens.\nA second line, and a third.\n";
    size_t tl = strlen(text);
    const char *data = tmp_path("corpus.txt");
    write_file(data, text, tl);
    int64_t n_whole;
    int32_t *whole = encode(text, tl, 0, &n_whole);

    rc_dataset_opts o = {.tokenizer = tok, .tokenizer_path = gpt2_dir};
    rc_error err = {0};
    rc_dataset *ds = rc_dataset_open(data, &o, &err);
    CHECKF(ds != NULL, "%s", err.msg);
    if (!ds)
        return;
    rc_dataset_info i1 = *rc_dataset_info_get(ds);
    CHECKF(i1.cache == RC_CACHE_WRITTEN && i1.tokenized_bytes == (int64_t)tl, "cache %d",
           (int)i1.cache);
    /* corpus.txt.<16 hex>.npy beside the data, <u2 for GPT-2's 50257 ids */
    size_t dl = strlen(data);
    CHECKF(strncmp(i1.cache_path, data, dl) == 0 && strlen(i1.cache_path) == dl + 1 + 16 + 4 &&
           has(i1.cache_path + dl + 17, ".npy"), "%s", i1.cache_path);
    rc_npy a;
    CHECK(rc_npy_open(&a, i1.cache_path, &err) == 0 && a.dtype == RC_NPY_U16 && a.n == n_whole);
    rc_npy_close(&a);
    int64_t n;
    int32_t *got = all_tokens(ds, &n);
    CHECK(same_ids(got, n, whole, n_whole));
    free(got);
    rc_dataset_close(ds);

    /* second open: read from the cache, nothing tokenized */
    ds = rc_dataset_open(data, &o, &err);
    CHECK(ds != NULL);
    if (ds) {
        const rc_dataset_info *i2 = rc_dataset_info_get(ds);
        CHECK(i2->cache == RC_CACHE_HIT && i2->tokenized_bytes == 0 && i2->chunks == 0 &&
              strcmp(i2->cache_path, i1.cache_path) == 0);
        got = all_tokens(ds, &n);
        CHECK(same_ids(got, n, whole, n_whole));
        free(got);
        rc_dataset_close(ds);
    }

    /* a different tokenizer (here: the same files plus a tokenizer_config.json) has another
     * fingerprint, so another cache */
    snprintf(copy_dir, sizeof copy_dir, "%s/tok2", tmpdir);
    mkdir(copy_dir, 0755);
    const char *files[] = {"tokenizer.json", "vocab.json", "merges.txt"};
    for (int k = 0; k < 3; k++) {
        char src[4300], dst[1300];
        join(src, sizeof src, gpt2_dir, "/", files[k]);
        join(dst, sizeof dst, copy_dir, "/", files[k]);
        size_t fl;
        char *bytes = check_read_file(src, &fl);
        if (bytes)
            write_file(dst, bytes, fl);
        free(bytes);
    }
    rc_dataset_opts o2 = {.tokenizer = tok, .tokenizer_path = copy_dir};
    ds = rc_dataset_open(data, &o2, &err);
    CHECK(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_HIT);   /* same file contents */
    rc_dataset_close(ds);
    char cfg[1300];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", copy_dir);
    write_file(cfg, "{}", 2);
    ds = rc_dataset_open(data, &o2, &err);
    CHECK(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_WRITTEN &&
          strcmp(rc_dataset_info_get(ds)->cache_path, i1.cache_path) != 0 &&
          rc_dataset_info_get(ds)->tokenized_bytes == (int64_t)tl);
    rc_dataset_close(ds);
    /* a tokenizer path naming a file fingerprints that file (and its known siblings) */
    char vocab[1300];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", copy_dir);
    rc_dataset_opts o3 = {.tokenizer = tok, .tokenizer_path = vocab};
    ds = rc_dataset_open(data, &o3, &err);
    CHECK(ds && rc_dataset_info_get(ds)->cache != RC_CACHE_OFF);
    rc_dataset_close(ds);

    /* data newer than its cache: tokenized again, with the new text */
    const char *text2 = "Changed text.\n";
    write_file(data, text2, strlen(text2));
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    struct stat sc;
    stat(i1.cache_path, &sc);
    ts[1].tv_sec = sc.st_mtim.tv_sec + 2;
    ts[1].tv_nsec = 0;
    utimensat(AT_FDCWD, data, ts, 0);
    ds = rc_dataset_open(data, &o, &err);
    CHECK(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_WRITTEN);
    if (ds) {
        int64_t n2;
        int32_t *w2 = encode(text2, strlen(text2), 0, &n2);
        got = all_tokens(ds, &n);
        CHECK(same_ids(got, n, w2, n2));
        free(got);
        free(w2);
    }
    rc_dataset_close(ds);

    /* no_cache: nothing read or written */
    rc_dataset_opts o4 = {.tokenizer = tok, .tokenizer_path = gpt2_dir, .no_cache = 1};
    ds = rc_dataset_open(data, &o4, &err);
    CHECK(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_OFF &&
          rc_dataset_info_get(ds)->tokenized_bytes > 0);
    rc_dataset_close(ds);

    /* a cache that cannot be written: the dataset still opens (tokens in memory) and says
     * so. The data's name leaves no room for the cache's suffix (names are at most 255
     * bytes), which fails even for root; a read-only directory is tried when not root. */
    char longname[300], longdata[1400];
    memset(longname, 'x', 240);
    strcpy(longname + 240, ".txt");
    join(longdata, sizeof longdata, tmpdir, "/", longname);
    write_file(longdata, text, tl);
    ds = rc_dataset_open(longdata, &o, &err);
    CHECKF(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_UNWRITABLE &&
           rc_dataset_info_get(ds)->tokenized_bytes == (int64_t)tl, "%s", err.msg);
    if (ds) {
        got = all_tokens(ds, &n);
        CHECK(same_ids(got, n, whole, n_whole));
        free(got);
    }
    rc_dataset_close(ds);
    CHECK(count_prefixed("xxxxxxxxxx") == 1);       /* the data only */
    if (geteuid() != 0) {
        char rodir[1100], rodata[1200];
        join(rodir, sizeof rodir, tmpdir, "/ro", NULL);
        mkdir(rodir, 0755);
        join(rodata, sizeof rodata, rodir, "/corpus.txt", NULL);
        write_file(rodata, text, tl);
        chmod(rodir, 0555);
        ds = rc_dataset_open(rodata, &o, &err);
        CHECKF(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_UNWRITABLE, "%s", err.msg);
        rc_dataset_close(ds);
        chmod(rodir, 0755);
    }
    free(whole);
}

static void test_jsonl(void)
{
    const char *lm = "{\"text\": \"First document.\"}\n"
                     "\n"
                     "{\"text\": \"Second one, with \\\"quotes\\\" and \\u00e9.\", \"id\": 2}\n"
                     "{\"text\": \"\"}\n";
    write_file(tmp_path("lm.jsonl"), lm, strlen(lm));
    rc_dataset_opts o = {.tokenizer = tok, .tokenizer_path = gpt2_dir};
    rc_error err = {0};
    rc_dataset *ds = rc_dataset_open(tmp_path("lm.jsonl"), &o, &err);
    CHECKF(ds != NULL, "%s", err.msg);
    if (ds) {
        /* doc <|endoftext|> doc <|endoftext|> <|endoftext|> */
        const char *docs[] = {"First document.", "Second one, with \"quotes\" and \xc3\xa9.", ""};
        int32_t expect[256];
        int64_t ne = 0;
        int32_t eos = rc_tokenizer_eos(tok);
        CHECK(eos == 50256);
        for (int k = 0; k < 3; k++) {
            int64_t m;
            int32_t *ids = encode(docs[k], strlen(docs[k]), 1, &m);
            memcpy(expect + ne, ids, (size_t)m * sizeof *ids);
            ne += m;
            expect[ne++] = eos;
            free(ids);
        }
        int64_t n;
        int32_t *got = all_tokens(ds, &n);
        CHECK(rc_dataset_kind(ds) == RC_DATA_LM && same_ids(got, n, expect, ne));
        CHECK(rc_dataset_info_get(ds)->cache == RC_CACHE_WRITTEN &&
              rc_dataset_info_get(ds)->lines == 4);
        free(got);
        rc_dataset_close(ds);
        ds = rc_dataset_open(tmp_path("lm.jsonl"), &o, &err);
        CHECK(ds && rc_dataset_info_get(ds)->cache == RC_CACHE_HIT && rc_dataset_tokens(ds) == ne);
        rc_dataset_close(ds);
    }

    /* instruction tuning: the prompt masked out */
    const char *ins = "{\"prompt\": \"Translate to French: cheese\", \"completion\": \" fromage\"}\n"
                      "{\"prompt\": \"Q: 2+2?\\nA:\", \"completion\": \" 4\"}\n";
    write_file(tmp_path("ins.jsonl"), ins, strlen(ins));
    ds = rc_dataset_open(tmp_path("ins.jsonl"), &o, &err);
    CHECKF(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK(rc_dataset_kind(ds) == RC_DATA_INSTRUCT && rc_dataset_examples(ds) == 2 &&
              rc_dataset_windows(ds, 4) == 0 && rc_dataset_info_get(ds)->cache == RC_CACHE_OFF);
        const char *prompts[] = {"Translate to French: cheese", "Q: 2+2?\nA:"};
        const char *comps[] = {" fromage", " 4"};
        for (int k = 0; k < 2; k++) {
            rc_data_example ex;
            CHECK(rc_dataset_example(ds, k, &ex, &err) == 0);
            int64_t np, nc;
            int32_t *p = encode(prompts[k], strlen(prompts[k]), 0, &np);
            int32_t *c = encode(comps[k], strlen(comps[k]), 0, &nc);
            int ok = ex.n == np + nc + 1 && ex.loss_mask && !ex.target;
            for (int64_t i = 0; ok && i < ex.n; i++) {
                int32_t want = i < np ? p[i] : i < np + nc ? c[i - np] : 50256;
                ok = ex.ids[i] == want && ex.loss_mask[i] == (i >= np);
            }
            CHECKF(ok, "example %d: %lld ids, prompt %lld completion %lld", k,
                   (long long)ex.n, (long long)np, (long long)nc);
            /* packed for a decoder: targets are -100 until the completion */
            int64_t T = 64;
            int32_t in[64], tg[64];
            int64_t live = rc_data_example_pack(&ex, T, 0, in, tg);
            ok = live == nc + 1;
            for (int64_t t = 0; t < T; t++) {
                ok &= in[t] == (t < ex.n ? ex.ids[t] : 0);
                int32_t want = t + 1 < ex.n && t + 1 >= np ? ex.ids[t + 1] : RC_IGNORE_INDEX;
                ok &= tg[t] == want;
            }
            CHECKF(ok, "pack of example %d (%lld live)", k, (long long)live);
            /* truncated to T + 1 tokens */
            int32_t in2[3], tg2[3];
            live = rc_data_example_pack(&ex, 3, 0, in2, tg2);
            int64_t m = ex.n < 4 ? ex.n : 4, want_live = 0;
            for (int64_t t = 0; t < 3; t++)
                want_live += t + 1 < m && t + 1 >= np;
            CHECK(in2[0] == ex.ids[0] && in2[2] == ex.ids[2] && tg2[2] == (3 >= np ? ex.ids[3] : RC_IGNORE_INDEX) &&
                  live == want_live);
            free(p);
            free(c);
        }
        rc_data_example ex;
        CHECK(rc_dataset_example(ds, 2, &ex, &err) == -1 && has(err.msg, "example 2"));
        rc_dataset_close(ds);
    }

    /* sequence to sequence: source and target kept apart */
    const char *s2s = "{\"source\": \"hello there\", \"target\": \"bonjour\"}\n"
                      "{\"source\": \"good night\", \"target\": \"bonne nuit\"}\n";
    write_file(tmp_path("s2s.jsonl"), s2s, strlen(s2s));
    ds = rc_dataset_open(tmp_path("s2s.jsonl"), &o, &err);
    CHECKF(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK(rc_dataset_kind(ds) == RC_DATA_SEQ2SEQ && rc_dataset_examples(ds) == 2);
        rc_data_example ex;
        CHECK(rc_dataset_example(ds, 1, &ex, &err) == 0 && ex.loss_mask == NULL);
        int64_t ns, nt;
        int32_t *s = encode("good night", 10, 1, &ns);
        int32_t *t = encode("bonne nuit", 10, 1, &nt);
        CHECK(same_ids(ex.ids, ex.n, s, ns) && same_ids(ex.target, ex.n_target, t, nt));
        CHECK(rc_dataset_tokens(ds) > ns + nt);
        free(s);
        free(t);
        int32_t buf[4];
        CHECK(rc_dataset_read(ds, 0, 1, buf, &err) == -1 && has(err.msg, "not a token stream"));
        rc_dataset_close(ds);
    }
}

/* SentencePiece models: whichever way the .txt is read (chunks when the probes pass, else
 * whole), its tokens equal encoding it whole; BOS / EOS placement follows add_special. */
static void test_sentencepiece(void)
{
    const char *models[] = {"austen_bpe4k.model", "austen_unigram4k.model"};
    char text_path[1200];
    join(text_path, sizeof text_path, gpt2_dir, "/../austen_excerpt.txt", NULL);
    size_t len;
    char *austen = check_read_file(text_path, &len);
    CHECKF(austen && len > 120000, "cannot read %s", text_path);
    if (!austen)
        return;
    size_t take = 24000;
    write_file(tmp_path("austen.txt"), austen + 100000, take);
    for (int m = 0; m < 2; m++) {
        char mp[1300];
        join(mp, sizeof mp, gpt2_dir, "/../spm/", models[m]);
        rc_error err = {0};
        rc_tokenizer *t = rc_tokenizer_load(mp, &err);
        CHECKF(t != NULL, "%s", err.msg);
        if (!t)
            continue;
        int32_t *whole = NULL;
        int64_t n_whole = 0;
        CHECK(rc_tokenizer_encode(t, austen + 100000, take, 0, &whole, &n_whole, &err) == 0);
        rc_dataset_opts o = {.tokenizer = t, .chunk_bytes = 700};
        rc_dataset *ds = rc_dataset_open(tmp_path("austen.txt"), &o, &err);
        CHECKF(ds != NULL, "%s", err.msg);
        if (ds) {
            int64_t n;
            int32_t *got = all_tokens(ds, &n);
            CHECKF(same_ids(got, n, whole, n_whole), "%s: %lld tokens in %lld chunks vs %lld "
                   "whole", models[m], (long long)n, (long long)rc_dataset_info_get(ds)->chunks,
                   (long long)n_whole);
            free(got);
            rc_dataset_close(ds);
        }
        free(whole);

        /* bpe4k adds <s> before text (LLaMA), unigram4k </s> after it (T5) */
        const char *ins = "{\"prompt\": \"Who is she?\", \"completion\": \" Emma.\"}\n";
        write_file(tmp_path("spm_ins.jsonl"), ins, strlen(ins));
        ds = rc_dataset_open(tmp_path("spm_ins.jsonl"), &o, &err);
        rc_data_example ex;
        CHECKF(ds && rc_dataset_example(ds, 0, &ex, &err) == 0, "%s", err.msg);
        if (ds) {
            int bos_first = ex.ids[0] == rc_tokenizer_bos(t);
            CHECK(bos_first == (m == 0) && ex.ids[ex.n - 1] == rc_tokenizer_eos(t) &&
                  ex.loss_mask[0] == 0 && ex.loss_mask[ex.n - 1] == 1);
            rc_dataset_close(ds);
        }
        const char *lm = "{\"text\": \"Emma Woodhouse\"}\n{\"text\": \"handsome\"}\n";
        write_file(tmp_path("spm_lm.jsonl"), lm, strlen(lm));
        ds = rc_dataset_open(tmp_path("spm_lm.jsonl"), &o, &err);
        CHECKF(ds != NULL, "%s", err.msg);
        if (ds) {
            /* one EOS after each document, never two */
            int64_t n, a, b;
            int32_t *got = all_tokens(ds, &n);
            int32_t *da = encode_with(t, "Emma Woodhouse", &a), *db = encode_with(t, "handsome", &b);
            int32_t eos = rc_tokenizer_eos(t);
            int64_t want = a + b + (da[a - 1] != eos) + (db[b - 1] != eos);
            CHECKF(n == want && got[n - 1] == eos && memcmp(got, da, (size_t)a * 4) == 0,
                   "%s: %lld tokens, want %lld", models[m], (long long)n, (long long)want);
            free(got);
            free(da);
            free(db);
            rc_dataset_close(ds);
        }
        rc_tokenizer_free(t);
    }
    free(austen);
}

static void expect_jsonl_error(const char *content, const char *part)
{
    write_file(tmp_path("bad.jsonl"), content, strlen(content));
    rc_dataset_opts o = {.tokenizer = tok};
    rc_error err = {0};
    rc_dataset *ds = rc_dataset_open(tmp_path("bad.jsonl"), &o, &err);
    CHECKF(ds == NULL && has(err.msg, "bad.jsonl") && has(err.msg, part), "want '%s', got: %s",
           part, err.msg);
    rc_dataset_close(ds);
}

static void test_jsonl_errors(void)
{
    expect_jsonl_error("{\"text\": \"a\"}\n{\"text\": \"b\"\n{\"text\": \"c\"}\n",
                       "bad.jsonl:2: invalid JSON");
    expect_jsonl_error("{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n", "bad.jsonl:3: missing field \"text\"");
    expect_jsonl_error("{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"c\"}\n",
                       "bad.jsonl:2: missing field \"completion\"");
    expect_jsonl_error("{\"source\": \"a\", \"target\": 3}\n", "bad.jsonl:1: field \"target\" is not a string");
    expect_jsonl_error("[1, 2]\n", "bad.jsonl:1: expected a JSON object");
    expect_jsonl_error("{\"title\": \"a\"}\n", "bad.jsonl:1: expected \"text\"");
    expect_jsonl_error("\n\n", "no JSON lines");
    expect_jsonl_error("{\"text\": \"a\"}\n{\"text\": \"a\", }\n", "bad.jsonl:2");

    rc_error err = {0};
    rc_dataset_opts o = {.tokenizer = tok};
    CHECK(rc_dataset_open(tmp_path("data.csv"), &o, &err) == NULL && err.code == RC_ERR_ARG &&
          has(err.msg, "data.csv: unknown data format"));
    CHECK(rc_dataset_open(tmp_path("x.txt"), NULL, &err) == NULL &&
          has(err.msg, "a tokenizer is needed"));
    CHECK(rc_dataset_open(tmp_path("missing.txt"), &o, &err) == NULL && err.code == RC_ERR_IO &&
          has(err.msg, "missing.txt"));
}

/* ---- helper modes for the Python reference test -------------------------------------- */

static int dump_npy(const char *path)
{
    rc_npy a;
    rc_error err = {0};
    if (rc_npy_open(&a, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s %lld\n", a.dtype == RC_NPY_U16 ? "uint16" : a.dtype == RC_NPY_I32 ? "int32" : "int64",
           (long long)a.n);
    for (int64_t i = 0; i < a.n; i++)
        printf("%lld\n", (long long)rc_npy_get(&a, i));
    rc_npy_close(&a);
    return 0;
}

static int dump_order(int64_t n, uint64_t seed, uint64_t epoch)
{
    int64_t *p = malloc((size_t)(n + 1) * sizeof *p);
    rc_epoch_order(n, seed, epoch, 1, p);
    for (int64_t i = 0; i < n; i++)
        printf("%lld\n", (long long)p[i]);
    free(p);
    return 0;
}

static int cache_mode(const char *data, const char *tokdir, size_t chunk)
{
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(tokdir, &err);
    if (!t) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    rc_dataset_opts o = {.tokenizer = t, .tokenizer_path = tokdir, .chunk_bytes = chunk};
    rc_dataset *ds = rc_dataset_open(data, &o, &err);
    if (!ds) {
        fprintf(stderr, "%s\n", err.msg);
        rc_tokenizer_free(t);
        return 1;
    }
    const rc_dataset_info *info = rc_dataset_info_get(ds);
    printf("%s %d %lld %lld\n", info->cache_path, (int)info->cache, (long long)info->chunks,
           (long long)info->unsafe_cuts);
    rc_dataset_close(ds);
    rc_tokenizer_free(t);
    return 0;
}

/* the GPT-2 tokenizer: the repository's data/gpt2 (REDCO_DATA_DIR, set by CMakeLists.txt) */
static int find_gpt2(void)
{
    join(gpt2_dir, sizeof gpt2_dir, REDCO_DATA_DIR, "/gpt2", NULL);
    char probe[4200];
    join(probe, sizeof probe, gpt2_dir, "/vocab.json", NULL);
    return access(probe, R_OK) == 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--dump"))
        return dump_npy(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "--order"))
        return dump_order(atoll(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
    if (argc == 5 && !strcmp(argv[1], "--cache"))
        return cache_mode(argv[2], argv[3], (size_t)atoll(argv[4]));

    snprintf(tmpdir, sizeof tmpdir, "/tmp/redco_test_dataset_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    CHECKF(find_gpt2(), "GPT-2 tokenizer not found at %s", gpt2_dir);
    rc_error err = {0};
    tok = rc_tokenizer_load(gpt2_dir, &err);
    CHECKF(tok != NULL, "%s", err.msg);

    test_npy_versions_and_dtypes();
    test_npy_malformed();
    test_npy_write();
    test_epoch_order();
    test_data_split();
    if (tok) {
        test_windows();
        test_txt_streaming();
        test_cache();
        test_jsonl();
        test_jsonl_errors();
        test_sentencepiece();
    }
    rc_tokenizer_free(tok);
    check_rm_tree(tmpdir);
    return check_summary("dataset");
}
