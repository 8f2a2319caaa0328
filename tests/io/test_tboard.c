/* test_tboard.c - TensorBoard event files, read back by a small reader of the TFRecord
 * framing and the Event protobuf that checks every CRC.
 *   test_tboard --write DIR   writes loss/lr for steps 1..5 (for tests/ref) */
#include "check.h"
#include "redco/tboard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char tag[64];
    float value;
    int64_t step;
    int is_version;
} event;

static uint64_t get_varint(const unsigned char *p, size_t n, size_t *at)
{
    uint64_t v = 0;
    for (int shift = 0; *at < n && shift < 64; shift += 7) {
        unsigned char c = p[(*at)++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            break;
    }
    return v;
}

/* Decodes the fields we write; returns 0, or -1 on anything malformed. */
static int parse_event(const unsigned char *p, size_t n, event *e)
{
    size_t at = 0;
    memset(e, 0, sizeof *e);
    while (at < n) {
        uint64_t key = get_varint(p, n, &at);
        int field = (int)(key >> 3), type = (int)(key & 7);
        if (type == 1) {
            at += 8;
        } else if (type == 0) {
            uint64_t v = get_varint(p, n, &at);
            if (field == 2)
                e->step = (int64_t)v;
        } else if (type == 2) {
            uint64_t len = get_varint(p, n, &at);
            if (at + len > n)
                return -1;
            if (field == 3)
                e->is_version = len == 13 && !memcmp(p + at, "brain.Event:2", 13);
            if (field == 5) { /* Summary { Value value = 1 { tag = 1; simple_value = 2 } } */
                size_t s = at, end = at + len;
                if (get_varint(p, end, &s) != (1 << 3 | 2))
                    return -1;
                size_t vlen = get_varint(p, end, &s), vend = s + vlen;
                while (s < vend) {
                    uint64_t k = get_varint(p, vend, &s);
                    if (k == (1 << 3 | 2)) {
                        size_t tl = get_varint(p, vend, &s);
                        memcpy(e->tag, p + s, tl < sizeof e->tag - 1 ? tl : sizeof e->tag - 1);
                        s += tl;
                    } else if (k == (2 << 3 | 5)) {
                        memcpy(&e->value, p + s, 4);
                        s += 4;
                    } else {
                        return -1;
                    }
                }
            }
            at += len;
        } else {
            return -1;
        }
    }
    return at == n ? 0 : -1;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads every record of path into ev (at most cap); returns the count or -1 on a bad CRC. */
static int read_events(const char *path, event *ev, int cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int count = 0;
    unsigned char head[12], *data = NULL;
    while (fread(head, 1, 12, f) == 12 && count < cap) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)head[i] << (8 * i);
        unsigned char crc[4];
        data = realloc(data, len ? len : 1);
        if (le32(head + 8) != rc_crc32c_masked(head, 8) || fread(data, 1, len, f) != len ||
            fread(crc, 1, 4, f) != 4 || le32(crc) != rc_crc32c_masked(data, len) ||
            parse_event(data, len, &ev[count])) {
            count = -1;
            break;
        }
        count++;
    }
    free(data);
    fclose(f);
    return count;
}

static int write_demo(const char *dir)
{
    rc_error err = {0};
    rc_tboard *tb = rc_tboard_open(dir, &err);
    for (int s = 1; tb && s <= 5; s++) {
        rc_tboard_scalar(tb, "train/loss", 4.0 / s, s, &err);
        rc_tboard_scalar(tb, "train/lr", 1e-3 * s, s, &err);
    }
    rc_tboard_close(tb);
    if (err.code)
        fprintf(stderr, "%s\n", err.msg);
    return err.code ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write"))
        return write_demo(argv[2]);
    CHECK(rc_crc32c("123456789", 9) == 0xE3069283u); /* the standard check value */
    char dir[] = "/tmp/redco-tboard-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rc_error err = {0};
    rc_tboard *tb = rc_tboard_open(dir, &err);
    CHECKF(tb != NULL, "%s", err.msg);
    for (int s = 0; tb && s < 10; s++)
        CHECK(rc_tboard_scalar(tb, s % 2 ? "eval/loss" : "train/loss", 0.5 * s, 100 + s, &err) == 0);
    char path[4200];
    snprintf(path, sizeof path, "%s", rc_tboard_path(tb));
    rc_tboard_close(tb);
    event ev[16];
    int n = read_events(path, ev, 16);
    CHECKF(n == 11, "%d events", n);
    CHECK(n > 0 && ev[0].is_version);
    for (int s = 0; n == 11 && s < 10; s++) {
        CHECK(!strcmp(ev[1 + s].tag, s % 2 ? "eval/loss" : "train/loss"));
        CHECK(ev[1 + s].value == (float)(0.5 * s) && ev[1 + s].step == 100 + s);
    }
    /* a flipped byte is caught by the CRC */
    FILE *f = fopen(path, "r+b");
    fseek(f, 40, SEEK_SET);
    fputc(0x5A, f);
    fclose(f);
    CHECK(read_events(path, ev, 16) == -1);
    /* a directory that does not exist: an error naming the path */
    err = (rc_error){0};
    CHECK(rc_tboard_open("/nonexistent/dir", &err) == NULL && strstr(err.msg, "/nonexistent/dir"));
    unlink(path);
    rmdir(dir);
    return check_summary("test_tboard");
}
