/* mpi_comm.c - the mesh and collectives, run with 1, 2 and 4 processes (and without a
 * launcher). Every rank checks; each prints its own summary and exits non-zero on failure. */
#include "check.h"
#include "internal.h"
#include "redco/device.h"
#include "redco/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_mesh(int size)
{
    for (int mp = 1; mp <= size; mp++) {
        rc_mesh m;
        rc_error err = {0};
        if (size % mp) {
            CHECK(rc_mesh_init(&m, mp, &err) == -1);
            CHECKF(strstr(err.msg, "do not divide") && strstr(err.msg, "possible: 1"), "%s", err.msg);
            continue;
        }
        CHECKF(rc_mesh_init(&m, mp, &err) == 0, "%s", err.msg);
        CHECK(m.dp * m.mp == size && m.mp == mp);
        CHECK(m.rank == m.dp_rank * mp + m.mp_rank);
        CHECK(rc_comm_size(m.dp_comm) == m.dp && rc_comm_size(m.mp_comm) == m.mp);
        CHECK(rc_comm_rank(m.dp_comm) == m.dp_rank && rc_comm_rank(m.mp_comm) == m.mp_rank);
        /* the model axis joins consecutive ranks: their sum is known */
        double s = m.rank;
        CHECK(rc_comm_allreduce_sum_f64(m.mp_comm, &s, 1, &err) == 0);
        double want = 0;
        for (int r = 0; r < mp; r++)
            want += m.dp_rank * mp + r;
        CHECKF(s == want, "mp sum %g, want %g", s, want);
        rc_mesh_free(&m);
    }
}

static void test_collectives(rc_mesh *m)
{
    rc_error err = {0};
    enum { N = 1000 };
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++)
        x[i] = (float)(m->rank + 1) * (float)i;
    /* mean in buckets of 77 over a buffer, from element 3: (sum over ranks of (r + 1)) / size * i */
    rc_buffer *buf = rc_buffer_new(rc_device_open("cpu", 0, NULL), (N + 3) * sizeof *x, &err);
    CHECK(buf && rc_buffer_upload(buf, 3 * sizeof *x, x, N * sizeof *x, &err) == 0);
    CHECK(buf && rc_comm_allreduce_mean_f32(m->world, buf, 3 * sizeof *x, N, 77, &err) == 0);
    CHECK(buf && rc_buffer_download(buf, 3 * sizeof *x, x, N * sizeof *x, &err) == 0);
    rc_buffer_free(buf);
    float scale = (float)(m->size + 1) / 2.0f;
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= x[i] == scale * (float)i;
    CHECKF(ok, "bucketed mean wrong on rank %d", m->rank);
    double mx = m->rank;
    CHECK(rc_comm_allreduce_max_f64(m->world, &mx, 1, &err) == 0 && mx == m->size - 1);
    char word[16] = "";
    if (m->rank == 0)
        strcpy(word, "redco");
    CHECK(rc_comm_bcast(m->world, word, sizeof word, 0, &err) == 0 && !strcmp(word, "redco"));
    /* rank r sends r + 1 bytes of value r */
    unsigned char mine[8];
    memset(mine, m->rank, sizeof mine);
    void *all = NULL;
    size_t counts[64];
    CHECK(rc_comm_gather(m->world, mine, (size_t)m->rank + 1, 0, &all, counts, &err) == 0);
    if (m->rank == 0) {
        const unsigned char *p = all;
        for (int r = 0; r < m->size; r++) {
            CHECK(counts[r] == (size_t)r + 1);
            for (int k = 0; k <= r; k++)
                CHECK(*p++ == r);
        }
    }
    free(all);
    free(x);
}

/* a failure on one rank reaches every rank with its message, and nobody hangs */
static void test_agree(rc_mesh *m)
{
    rc_error err = {0};
    CHECK(rc_comm_agree(m->world, 0, &err) == 0);
    int bad = m->size > 1 ? 1 : 0;
    int status = 0;
    if (m->rank == bad)
        status = rc_error_set(&err, RC_ERR_FORMAT, "data.jsonl: line 3: not JSON");
    CHECK(rc_comm_agree(m->world, status, &err) == -1);
    char want[64]; /* a world of one needs no rank in its messages */
    snprintf(want, sizeof want, m->size > 1 ? "rank %d: data.jsonl: line 3" : "data.jsonl: line 3", bad);
    CHECKF(strstr(err.msg, want) != NULL, "rank %d got '%s'", m->rank, err.msg);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    CHECKF(rc_dist_init(&argc, &argv, &err) == 0, "%s", err.msg);
    rc_mesh m;
    CHECKF(rc_mesh_init(&m, 1, &err) == 0, "%s", err.msg);
    test_mesh(m.size);
    test_collectives(&m);
    test_agree(&m);
    char name[64];
    snprintf(name, sizeof name, "mpi_comm rank %d/%d", m.rank, m.size);
    int status = check_summary(name);
    rc_mesh_free(&m);
    rc_dist_finalize();
    return status;
}
