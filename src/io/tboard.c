/* tboard.c - TensorBoard event files: TFRecord framing (length, masked CRC-32C of the
 * length, payload, masked CRC-32C of the payload) around hand-encoded Event protobufs:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; } */
#include "internal.h"
#include "redco/tboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rc_tboard {
    FILE *f;
    char path[4096];
};

uint32_t rc_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) { /* reflected Castagnoli polynomial */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t rc_crc32c_masked(const void *data, size_t n)
{
    uint32_t crc = rc_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---- protobuf encoding into a fixed buffer ----------------------------------------- */

typedef struct {
    unsigned char b[1024];
    size_t n;
} pbuf;

static void put_byte(pbuf *p, unsigned char c)
{
    if (p->n < sizeof p->b)
        p->b[p->n++] = c;
}

static void put_varint(pbuf *p, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(p, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    put_byte(p, (unsigned char)v);
}

static void put_le(pbuf *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(p, (unsigned char)(v >> (8 * i)));
}

static void put_bytes(pbuf *p, int field, const void *data, size_t n)
{
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, n);
    for (size_t i = 0; i < n; i++)
        put_byte(p, ((const unsigned char *)data)[i]);
}

static void put_double(pbuf *p, int field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_varint(p, (uint64_t)field << 3 | 1);
    put_le(p, bits, 8);
}

static void put_float(pbuf *p, int field, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_varint(p, (uint64_t)field << 3 | 5);
    put_le(p, bits, 4);
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int write_record(rc_tboard *tb, const pbuf *e, rc_error *err)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)e->n >> (8 * i));
    uint32_t crc_len = rc_crc32c_masked(len, 8), crc_data = rc_crc32c_masked(e->b, e->n);
    unsigned char c1[4], c2[4];
    for (int i = 0; i < 4; i++) {
        c1[i] = (unsigned char)(crc_len >> (8 * i));
        c2[i] = (unsigned char)(crc_data >> (8 * i));
    }
    if (fwrite(len, 1, 8, tb->f) != 8 || fwrite(c1, 1, 4, tb->f) != 4 ||
        fwrite(e->b, 1, e->n, tb->f) != e->n || fwrite(c2, 1, 4, tb->f) != 4 || fflush(tb->f))
        return rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", tb->path, strerror(errno));
    return 0;
}

rc_tboard *rc_tboard_open(const char *dir, rc_error *err)
{
    rc_tboard *tb = calloc(1, sizeof *tb);
    if (!tb) {
        rc_error_set(err, RC_ERR_MEMORY, "tensorboard: out of memory");
        return NULL;
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
             (long long)time(NULL), host, (int)getpid());
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    pbuf e = {.n = 0};
    put_double(&e, 1, wall_time());
    put_bytes(&e, 3, "brain.Event:2", 13);
    if (write_record(tb, &e, err)) {
        rc_tboard_close(tb);
        return NULL;
    }
    return tb;
}

int rc_tboard_scalar(rc_tboard *tb, const char *tag, double value, int64_t step, rc_error *err)
{
    size_t tag_len = strlen(tag);
    if (tag_len > 512)
        return rc_error_set(err, RC_ERR_ARG, "tensorboard: tag of %zu bytes is too long", tag_len);
    pbuf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    put_bytes(&v, 1, tag, tag_len);
    put_float(&v, 2, (float)value);
    put_bytes(&s, 1, v.b, v.n);
    put_double(&e, 1, wall_time());
    put_varint(&e, 2 << 3 | 0);
    put_varint(&e, (uint64_t)step);
    put_bytes(&e, 5, s.b, s.n);
    return write_record(tb, &e, err);
}

int rc_tboard_restart(rc_tboard *tb, int64_t step, rc_error *err)
{
    /* Event.session_log (field 7) = SessionLog{status (field 1) = START (1)} at `step` */
    pbuf l = {.n = 0}, e = {.n = 0};
    put_varint(&l, 1 << 3 | 0);
    put_varint(&l, 1);
    put_double(&e, 1, wall_time());
    put_varint(&e, 2 << 3 | 0);
    put_varint(&e, (uint64_t)step);
    put_bytes(&e, 7, l.b, l.n);
    return write_record(tb, &e, err);
}

const char *rc_tboard_path(const rc_tboard *tb)
{
    return tb ? tb->path : NULL;
}

void rc_tboard_close(rc_tboard *tb)
{
    if (!tb)
        return;
    if (tb->f)
        fclose(tb->f);
    free(tb);
}
