/* comm.c - the mesh and collectives over MPI, and the world of one without a launcher. */
#include "internal.h"
#include "comm_internal.h"
#include "comm_async.h"
#include "backend.h"
#include "redco/dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

static int launched = -1;

int rc_dist_launched(void)
{
    if (launched < 0) {
        const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
        launched = 0;
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
            if (getenv(vars[i]))
                launched = 1;
    }
    return launched;
}

int rc_dist_signals_forwarded(void)
{
    const char *status = getenv("REDCO_LAUNCHER");
    return status && *status && rc_dist_launched();
}

int rc_dist_stop_signal(int sig)
{
    return sig == SIGUSR1 ? SIGTERM : sig == SIGUSR2 ? SIGINT : sig;
}

/* MPI is running: initialised and not yet finalized */
static int mpi_running(void)
{
    int started = 0, finished = 0;
    MPI_Initialized(&started);
    if (started)
        MPI_Finalized(&finished);
    return started && !finished;
}

int rc_dist_rank(void)
{
    int rank = 0;
    if (!rc_dist_launched())
        return 0;
    if (mpi_running())
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int rc_dist_size(void)
{
    int size = 1;
    if (!rc_dist_launched())
        return 1;
    if (mpi_running())
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

static int mpi_fail(rc_error *err, const char *what, int code)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return rc_error_set(err, RC_ERR_IO, "mpi: %s failed: %s", what, msg);
}

int rc_dist_init(int *argc, char ***argv, rc_error *err)
{
    int started = 0, finished = 0;
    if (!rc_dist_launched())
        return 0;
    MPI_Initialized(&started);
    if (started)
        MPI_Finalized(&finished);
    if (finished)
        return rc_error_set(err, RC_ERR_ARG, "mpi: already finalized (rc_dist_finalize, or "
                            "rc_deployer_free of the deployer that started it); MPI cannot start "
                            "twice: call rc_dist_init before the first deployer to keep it running");
    if (started)
        return 0;
    /* Open MPI's non-blocking allreduce (libnbc: every collective here is non-blocking, for
     * the watchdog) takes a binomial tree for in-place sums on fewer than 4 ranks, twice the
     * time of the blocking MPI_Allreduce from 1 MiB up; Rabenseifner's reduce-scatter and
     * allgather matches it (bench_comm). A setting of the user's own wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Init_thread", rc);
    /* errors come back as codes: we turn them into messages, never abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return 0;
}

void rc_dist_finalize(void)
{
    if (rc_dist_launched() && mpi_running())
        MPI_Finalize();
}

/* "the model-parallel group of ranks 2, 3" (as many as fit), "all 4 ranks" (kind NULL: the
 * world) or "this process alone" */
static void group_text(rc_comm *c, const char *kind)
{
    size_t size = sizeof c->group, used;
    if (c->comm == MPI_COMM_NULL) {
        snprintf(c->group, size, "this process alone");
        return;
    }
    if (!kind) {
        snprintf(c->group, size, "all %d ranks", c->size);
        return;
    }
    used = (size_t)snprintf(c->group, size, "the %s of rank%s", kind, c->size > 1 ? "s" : "");
    for (int r = 0; r < c->size && used < size; r++)
        used += (size_t)snprintf(c->group + used, size - used, r ? ", %d" : " %d", c->world[r]);
    if (used >= size) /* cut: end with "..." */
        memcpy(c->group + size - 4, "...", 4);
}

/* the world rank of each rank of c; 0 or -1 out of memory */
static int world_ranks(rc_comm *c)
{
    int *mine = calloc((size_t)c->size, sizeof *mine);
    c->world = calloc((size_t)c->size, sizeof *c->world);
    if (!mine || !c->world) {
        free(mine);
        return -1;
    }
    for (int r = 0; r < c->size; r++)
        c->world[r] = mine[r] = r;
    MPI_Group g, w;
    if (c->comm != MPI_COMM_NULL && MPI_Comm_group(c->comm, &g) == MPI_SUCCESS) {
        if (MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS) {
            MPI_Group_translate_ranks(g, c->size, mine, w, c->world);
            MPI_Group_free(&w);
        }
        MPI_Group_free(&g);
    }
    free(mine);
    return 0;
}

/* kind: "data-parallel group", ...; NULL for the world */
static rc_comm *comm_new(MPI_Comm comm, const char *kind)
{
    static unsigned made; /* groups made: the same count on every rank */
    rc_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->comm = comm;
    c->rank = 0;
    c->size = 1;
    if (comm != MPI_COMM_NULL) {
        MPI_Comm_rank(comm, &c->rank);
        MPI_Comm_size(comm, &c->size);
    }
    if (world_ranks(c)) {
        free(c);
        return NULL;
    }
    c->id = comm != MPI_COMM_NULL && kind ? ++made : 0; /* every world's id is 0: one communicator */
    group_text(c, kind);
    return c;
}

static void comm_free(rc_comm *c)
{
    if (!c)
        return;
    if (c->comm != MPI_COMM_NULL && c->comm != MPI_COMM_WORLD)
        MPI_Comm_free(&c->comm);
    free(c->world);
    free(c);
}

/* "1, 2, 4" : the model-shard counts that divide n */
static void divisors(int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int d = 1; d <= n && used < size; d++)
        if (n % d == 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%d", used ? ", " : "", d);
}

int rc_mesh_init(rc_mesh *m, int mp, rc_error *err)
{
    memset(m, 0, sizeof *m);
    int on = rc_dist_launched();
    if (on && !mpi_running())
        return rc_error_set(err, RC_ERR_ARG, "mesh: MPI is not running: call rc_dist_init first "
                            "(and rc_dist_finalize only after the last mesh)");
    m->world = comm_new(on ? MPI_COMM_WORLD : MPI_COMM_NULL, NULL);
    if (!m->world)
        return rc_error_set(err, RC_ERR_MEMORY, "mesh: out of memory");
    m->rank = m->world->rank;
    m->size = m->world->size;
    int size = m->size;
    if (mp < 1 || size % mp) {
        char ok[256];
        divisors(size, ok, sizeof ok);
        rc_mesh_free(m);
        if (mp < 1)
            return rc_error_set(err, RC_ERR_ARG, "mesh: %d model shards: need at least 1", mp);
        if (size == 1)
            return rc_error_set(err, RC_ERR_ARG,
                                "mesh: %d model shards need %d processes, and this is 1 process%s: "
                                "start %d with --nproc %d (redco's commands) or mpirun -np %d",
                                mp, mp, on ? "" : " (no launcher)", mp, mp, mp);
        return rc_error_set(err, RC_ERR_ARG,
                            "mesh: %d model shards do not divide %d processes (possible: %s)", mp,
                            size, ok);
    }
    m->mp = mp;
    m->dp = m->size / mp;
    m->dp_rank = m->rank / mp;
    m->mp_rank = m->rank % mp;
    MPI_Comm dp = MPI_COMM_NULL, mpc = MPI_COMM_NULL;
    if (on) {
        if (MPI_Comm_split(MPI_COMM_WORLD, m->mp_rank, m->dp_rank, &dp) != MPI_SUCCESS ||
            MPI_Comm_split(MPI_COMM_WORLD, m->dp_rank, m->mp_rank, &mpc) != MPI_SUCCESS) {
            rc_mesh_free(m);
            return rc_error_set(err, RC_ERR_IO, "mesh: MPI_Comm_split failed");
        }
    }
    if (on) /* the ranks' hosts, for the watchdog (once, at the first mesh) */
        rci_peers_gather();
    m->dp_comm = comm_new(dp, "data-parallel group");
    m->mp_comm = comm_new(mpc, "model-parallel group");
    if (!m->dp_comm || !m->mp_comm) {
        rc_mesh_free(m);
        return rc_error_set(err, RC_ERR_MEMORY, "mesh: out of memory");
    }
    return 0;
}

int rc_mesh_init_local(rc_mesh *m, rc_error *err)
{
    memset(m, 0, sizeof *m);
    m->world = comm_new(MPI_COMM_NULL, NULL);
    m->dp_comm = comm_new(MPI_COMM_NULL, NULL);
    m->mp_comm = comm_new(MPI_COMM_NULL, NULL);
    if (!m->world || !m->dp_comm || !m->mp_comm) {
        rc_mesh_free(m);
        return rc_error_set(err, RC_ERR_MEMORY, "mesh: out of memory");
    }
    m->size = m->dp = m->mp = 1;
    return 0;
}

void rc_mesh_free(rc_mesh *m)
{
    comm_free(m->world);
    comm_free(m->dp_comm);
    comm_free(m->mp_comm);
    memset(m, 0, sizeof *m);
}

int rc_comm_rank(const rc_comm *c)
{
    return c ? c->rank : 0;
}

int rc_comm_size(const rc_comm *c)
{
    return c ? c->size : 1;
}

/* MPI counts are ints: large buffers go in pieces */
enum { MAX_PIECE = 1 << 28 };

static int allreduce(rc_comm *c, void *data, int64_t n, MPI_Datatype t, size_t elem, MPI_Op op,
                     rc_error *err)
{
    if (!c || c->size == 1 || n == 0)
        return 0;
    for (int64_t at = 0; at < n; at += MAX_PIECE) {
        int count = (int)(n - at < MAX_PIECE ? n - at : MAX_PIECE);
        MPI_Request req;
        int rc = rci_comm_watched(c, MPI_Iallreduce(MPI_IN_PLACE, (char *)data + at * elem, count, t, op, c->comm, &req), &req, "MPI_Allreduce");
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Allreduce", rc);
    }
    return 0;
}

int rc_comm_allreduce_sum_f32(rc_comm *c, float *data, int64_t n, rc_error *err)
{
    return allreduce(c, data, n, MPI_FLOAT, sizeof(float), MPI_SUM, err);
}

int rc_comm_allreduce_sum_f64(rc_comm *c, double *data, int64_t n, rc_error *err)
{
    return allreduce(c, data, n, MPI_DOUBLE, sizeof(double), MPI_SUM, err);
}

int rc_comm_allreduce_max_f64(rc_comm *c, double *data, int64_t n, rc_error *err)
{
    return allreduce(c, data, n, MPI_DOUBLE, sizeof(double), MPI_MAX, err);
}

int rc_comm_allreduce_max_f32(rc_comm *c, float *data, int64_t n, rc_error *err)
{
    return allreduce(c, data, n, MPI_FLOAT, sizeof(float), MPI_MAX, err);
}

/* ---- collectives on backend buffers: host memory handed to MPI as it is, device memory
 * staged through a host copy ---------------------------------------------------------- */

/* bytes at offset of buf as host memory: the buffer's own (the CPU) or *stage, downloaded */
static void *host_view(rc_buffer *buf, size_t offset, size_t bytes, void **stage, rc_error *err)
{
    void *h = rci_buffer_host(buf, offset);
    *stage = NULL;
    if (h)
        return h;
    *stage = malloc(bytes ? bytes : 1);
    if (!*stage) {
        rc_error_set(err, RC_ERR_MEMORY, "collective: cannot stage %zu bytes", bytes);
        return NULL;
    }
    if (rc_buffer_download(buf, offset, *stage, bytes, err)) {
        free(*stage);
        *stage = NULL;
        return NULL;
    }
    return *stage;
}

/* the staged bytes back into the buffer (nothing to do for host memory) */
static int host_done(rc_buffer *buf, size_t offset, size_t bytes, void *stage, int status, rc_error *err)
{
    if (stage && !status)
        status = rc_buffer_upload(buf, offset, stage, bytes, err);
    free(stage);
    return status;
}

/* 16-bit values (bf16, f16): widened to f32, reduced in f32, rounded back once (as a
 * 16-bit kernel computes in f32 and rounds its output); every rank rounds the same sums */
static int allreduce_half(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op, rc_error *err)
{
    size_t bytes = (size_t)n * 2;
    void *stage, *h = host_view(buf, offset, bytes, &stage, err);
    float *wide = h ? malloc((size_t)(n ? n : 1) * sizeof *wide) : NULL;
    int rc = h ? 0 : -1;
    if (h && !wide)
        rc = rc_error_set(err, RC_ERR_MEMORY, "collective: %lld %s values: out of memory", (long long)n,
                          rc_dtype_name(t));
    if (!rc) {
        rc_convert(wide, RC_F32, h, t, n);
        rc = allreduce(c, wide, n, MPI_FLOAT, sizeof(float), op ? MPI_MAX : MPI_SUM, err);
    }
    if (!rc)
        rc_convert(h, t, wide, RC_F32, n);
    free(wide);
    return h ? host_done(buf, offset, bytes, stage, rc, err) : -1;
}

int rc_comm_allreduce_buffer(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op,
                             rc_error *err)
{
    if (t != RC_F32 && t != RC_F64 && t != RC_BF16 && t != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "collective: dtype %s", rc_dtype_name(t));
    if (!c || c->size == 1)
        return 0;
    if (t == RC_BF16 || t == RC_F16)
        return allreduce_half(c, buf, offset, n, t, op, err);
    size_t bytes = (size_t)n * rc_dtype_size(t);
    void *stage, *h = host_view(buf, offset, bytes, &stage, err);
    if (!h)
        return -1;
    MPI_Datatype mt = t == RC_F64 ? MPI_DOUBLE : MPI_FLOAT;
    int rc = allreduce(c, h, n, mt, rc_dtype_size(t), op ? MPI_MAX : MPI_SUM, err);
    return host_done(buf, offset, bytes, stage, rc, err);
}

int rc_comm_collective(void *ctx, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op,
                       rc_error *err)
{
    return rc_comm_allreduce_buffer(ctx, buf, offset, n, t, op, err);
}

int rc_comm_allreduce_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket,
                               rc_error *err)
{
    if (!c || c->size == 1)
        return 0;
    if (bucket <= 0)
        bucket = n;
    float inv = 1.0f / (float)c->size;
    for (int64_t at = 0; at < n; at += bucket) {
        int64_t len = n - at < bucket ? n - at : bucket;
        size_t off = offset + (size_t)at * sizeof(float), bytes = (size_t)len * sizeof(float);
        void *stage;
        float *h = host_view(buf, off, bytes, &stage, err);
        if (!h)
            return -1;
        int rc = rc_comm_allreduce_sum_f32(c, h, len, err);
        for (int64_t i = 0; !rc && i < len; i++)
            h[i] *= inv;
        if (host_done(buf, off, bytes, stage, rc, err))
            return -1;
    }
    return 0;
}

void rc_comm_share(int64_t n, int size, int rank, int64_t *lo, int64_t *hi)
{
    *lo = size > 1 ? n * rank / size : 0;
    *hi = size > 1 ? n * (rank + 1) / size : n;
}

/* counts[k] and displ[k]: rank k's share of n clipped to the bucket [at, at + len), and
 * where it starts in the bucket (the shares follow each other in rank order) */
static void bucket_shares(int size, int64_t n, int64_t at, int64_t len, int *counts, int *displ)
{
    int64_t start = 0;
    for (int k = 0; k < size; k++) {
        int64_t lo, hi;
        rc_comm_share(n, size, k, &lo, &hi);
        lo = lo > at ? lo : at;
        hi = hi < at + len ? hi : at + len;
        counts[k] = (int)(hi > lo ? hi - lo : 0);
        displ[k] = (int)start;
        start += counts[k];
    }
}

/* bucket floats (0 or more than MPI counts take: the largest piece) */
static int64_t bucket_size(int64_t bucket, int64_t n)
{
    if (bucket <= 0 || bucket > n)
        bucket = n;
    return bucket < MAX_PIECE ? bucket : MAX_PIECE;
}

/* One bucket of the reduce-scatter: h holds len floats of every rank; this rank's share of
 * the bucket ends up at its place in h, the mean of the ranks'. Pairwise: in round k every
 * rank sends rank me + k its part of h and receives rank me - k's part of its own share (the
 * p - 1 rounds started at once: each rank sends the ring's bytes, the bucket less its own
 * share), then adds the parts in rank order. (Open MPI's non-blocking reduce-scatter,
 * libnbc's, reduces the whole bucket at rank 0 and scatters it: over 2 processes about three
 * times the time of this exchange.) */
static int reduce_scatter_bucket(rc_comm *c, float *h, const int *counts, const int *displ, rc_error *err)
{
    enum { TAG = 0x5253 };
    int p = c->size, me = c->rank, n = counts[me], rc = MPI_SUCCESS;
    /* slot k - 1: the part of round k (rank me - k's); slot p - 1: this rank's own */
    float *in = malloc(((size_t)n * (size_t)p + 1) * sizeof *in), *mine = h + displ[me];
    MPI_Request *req = malloc((size_t)2 * (size_t)(p - 1) * sizeof *req);
    if (!in || !req) {
        free(in);
        free(req);
        return rc_error_set(err, RC_ERR_MEMORY, "reduce-scatter: cannot hold %d parts of %d floats", p, n);
    }
    for (int k = 1; k < p; k++) {
        int to = (me + k) % p, from = (me - k + p) % p;
        req[2 * k - 2] = req[2 * k - 1] = MPI_REQUEST_NULL;
        if (rc == MPI_SUCCESS)
            rc = MPI_Irecv(in + (size_t)(k - 1) * (size_t)n, n, MPI_FLOAT, from, TAG, c->comm, &req[2 * k - 2]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(h + displ[to], counts[to], MPI_FLOAT, to, TAG, c->comm, &req[2 * k - 1]);
    }
    for (int i = 0; i < 2 * (p - 1); i++) { /* every request started is waited for */
        int w = req[i] == MPI_REQUEST_NULL ? MPI_SUCCESS
                                           : rci_comm_watched(c, MPI_SUCCESS, &req[i], "MPI_Reduce_scatter");
        rc = rc == MPI_SUCCESS ? w : rc;
    }
    if (rc == MPI_SUCCESS) { /* the parts summed in rank order, then the mean */
        memcpy(in + (size_t)(p - 1) * (size_t)n, mine, (size_t)n * sizeof *mine);
        for (int r = 0; r < p; r++) {
            const float *x = in + (size_t)((me - r + p) % p + p - 1) % (size_t)p * (size_t)n;
            if (r == 0)
                memcpy(mine, x, (size_t)n * sizeof *mine);
            else
                for (int i = 0; i < n; i++)
                    mine[i] += x[i];
        }
        float inv = 1.0f / (float)p;
        for (int i = 0; i < n; i++)
            mine[i] *= inv;
    }
    free(in);
    free(req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Reduce_scatter", rc);
}

/* One window [at, at + len) of an n-element vector, held at byte off of buf: this rank's
 * share of n clipped to the window ends up at its place there, the mean of the ranks'.
 * stage: room for len floats when buf is device memory (NULL for host memory). */
static int reduce_scatter_window(rc_comm *c, rc_buffer *buf, size_t off, int64_t n, int64_t at, int64_t len,
                                 float *stage, int *counts, int *displ, rc_error *err)
{
    bucket_shares(c->size, n, at, len, counts, displ);
    int me = c->rank, rc = 0;
    /* device memory: the whole window goes down (every rank's part is summed), this rank's
     * share of it comes back */
    float *h = stage ? stage : rci_buffer_host(buf, off);
    if (stage)
        rc = rc_buffer_download(buf, off, stage, (size_t)len * sizeof(float), err);
    if (!rc)
        rc = reduce_scatter_bucket(c, h, counts, displ, err);
    if (!rc && stage && counts[me])
        rc = rc_buffer_upload(buf, off + (size_t)displ[me] * sizeof(float), stage + displ[me],
                              (size_t)counts[me] * sizeof(float), err);
    return rc;
}

int rc_comm_reduce_scatter_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket,
                                    rc_error *err)
{
    if (!c || c->size == 1 || n <= 0)
        return 0;
    bucket = bucket_size(bucket, n);
    int *counts = malloc((size_t)c->size * 2 * sizeof *counts), *displ = counts ? counts + c->size : NULL;
    int host = rci_buffer_host(buf, offset) != NULL;
    float *stage = host ? NULL : malloc((size_t)bucket * sizeof *stage);
    int rc = counts && (host || stage) ? 0 : rc_error_set(err, RC_ERR_MEMORY, "reduce-scatter: cannot stage %lld floats",
                                                         (long long)bucket);
    for (int64_t at = 0; !rc && at < n; at += bucket) {
        int64_t len = n - at < bucket ? n - at : bucket;
        rc = reduce_scatter_window(c, buf, offset + (size_t)at * sizeof(float), n, at, len, stage, counts, displ, err);
    }
    free(counts);
    free(stage);
    return rc;
}

int rc_comm_reduce_scatter_window_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t at,
                                           int64_t len, rc_error *err)
{
    if (!c || c->size == 1 || len <= 0)
        return 0;
    if (at < 0 || len > MAX_PIECE || at + len > n)
        return rc_error_set(err, RC_ERR_ARG, "reduce-scatter: window [%lld, %lld) of %lld floats (%lld at most)",
                            (long long)at, (long long)(at + len), (long long)n, (long long)MAX_PIECE);
    int *counts = malloc((size_t)c->size * 2 * sizeof *counts);
    int host = rci_buffer_host(buf, offset) != NULL;
    float *stage = host ? NULL : malloc((size_t)len * sizeof *stage);
    int rc = counts && (host || stage) ? 0 : rc_error_set(err, RC_ERR_MEMORY, "reduce-scatter: cannot stage %lld floats",
                                                         (long long)len);
    if (!rc)
        rc = reduce_scatter_window(c, buf, offset, n, at, len, stage, counts, counts + c->size, err);
    free(counts);
    free(stage);
    return rc;
}

int rc_comm_allgather(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int64_t bucket,
                      rc_error *err)
{
    if (t != RC_F32 && t != RC_BF16 && t != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "all-gather: dtype %s (f32, bf16 or f16)", rc_dtype_name(t));
    if (!c || c->size == 1 || n <= 0)
        return 0;
    size_t es = rc_dtype_size(t); /* 16-bit words travel as such: half the bytes of f32 */
    MPI_Datatype mt = t == RC_F32 ? MPI_FLOAT : MPI_UINT16_T;
    bucket = bucket_size(bucket, n);
    int *counts = malloc((size_t)c->size * 2 * sizeof *counts), *displ = counts + c->size;
    int host = rci_buffer_host(buf, offset) != NULL;
    char *stage = host ? NULL : malloc((size_t)bucket * es);
    int rc = counts && (host || stage) ? 0 : rc_error_set(err, RC_ERR_MEMORY, "all-gather: cannot stage %lld elements",
                                                         (long long)bucket);
    for (int64_t at = 0; !rc && at < n; at += bucket) {
        int64_t len = n - at < bucket ? n - at : bucket;
        size_t off = offset + (size_t)at * es;
        bucket_shares(c->size, n, at, len, counts, displ);
        int me = c->rank;
        /* device memory: this rank's share goes down, the whole bucket comes back */
        char *h = host ? rci_buffer_host(buf, off) : stage;
        if (!host && counts[me])
            rc = rc_buffer_download(buf, off + (size_t)displ[me] * es, stage + (size_t)displ[me] * es,
                                    (size_t)counts[me] * es, err);
        MPI_Request req;
        int mrc = rc ? MPI_SUCCESS : rci_comm_watched(c, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, counts, displ, mt, c->comm, &req), &req, "MPI_Allgatherv");
        if (mrc != MPI_SUCCESS)
            rc = mpi_fail(err, "MPI_Allgatherv", mrc);
        if (!rc && !host)
            rc = rc_buffer_upload(buf, off, stage, (size_t)len * es, err);
    }
    free(counts);
    free(stage);
    return rc;
}

int rc_comm_allgather_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket, rc_error *err)
{
    return rc_comm_allgather(c, buf, offset, n, RC_F32, bucket, err);
}

int rc_comm_bcast_buffer(rc_comm *c, rc_buffer *buf, size_t offset, size_t bytes, int root,
                         rc_error *err)
{
    if (!c || c->size == 1)
        return 0;
    void *stage, *h = host_view(buf, offset, bytes, &stage, err);
    if (!h)
        return -1;
    return host_done(buf, offset, bytes, stage, rc_comm_bcast(c, h, bytes, root, err), err);
}

int rc_comm_bcast(rc_comm *c, void *data, size_t bytes, int root, rc_error *err)
{
    if (!c || c->size == 1)
        return 0;
    for (size_t at = 0; at < bytes; at += MAX_PIECE) {
        int count = (int)(bytes - at < MAX_PIECE ? bytes - at : MAX_PIECE);
        MPI_Request req;
        int rc = rci_comm_watched(c, MPI_Ibcast((char *)data + at, count, MPI_BYTE, root, c->comm, &req), &req, "MPI_Bcast");
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Bcast", rc);
    }
    return 0;
}

int rc_comm_barrier(rc_comm *c, rc_error *err)
{
    if (!c || c->size == 1)
        return 0;
    MPI_Request req;
    int rc = rci_comm_watched(c, MPI_Ibarrier(c->comm, &req), &req, "MPI_Barrier");
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Barrier", rc);
}

int rc_comm_gather(rc_comm *c, const void *data, size_t bytes, int root, void **out,
                   size_t *counts, rc_error *err)
{
    int size = rc_comm_size(c), rank = rc_comm_rank(c);
    if (bytes > (size_t)MAX_PIECE)
        return rc_error_set(err, RC_ERR_ARG, "gather: %zu bytes from one rank (at most %d)", bytes, MAX_PIECE);
    if (size == 1) {
        *out = malloc(bytes ? bytes : 1);
        if (!*out)
            return rc_error_set(err, RC_ERR_MEMORY, "gather: out of memory");
        memcpy(*out, data, bytes);
        counts[0] = bytes;
        return 0;
    }
    int mine = (int)bytes, *all = rank == root ? malloc((size_t)size * sizeof *all) : NULL;
    int *displ = rank == root ? malloc((size_t)size * sizeof *displ) : NULL;
    MPI_Request req;
    int rc = rci_comm_watched(c, MPI_Igather(&mine, 1, MPI_INT, all, 1, MPI_INT, root, c->comm, &req), &req, "MPI_Gather");
    if (rc != MPI_SUCCESS) {
        free(all);
        free(displ);
        return mpi_fail(err, "MPI_Gather", rc);
    }
    int64_t total = 0;
    if (rank == root) {
        for (int r = 0; r < size; r++) {
            displ[r] = (int)total;
            counts[r] = (size_t)all[r];
            total += all[r];
        }
        *out = malloc(total ? (size_t)total : 1);
    }
    rc = rci_comm_watched(c, MPI_Igatherv(data, mine, MPI_BYTE, rank == root ? *out : NULL, all, displ, MPI_BYTE, root,
                                 c->comm, &req), &req, "MPI_Gatherv");
    free(all);
    free(displ);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Gatherv", rc);
}

int rc_comm_gather_f32(rc_comm *c, const float *data, int64_t n, int root, float *out, int64_t *total,
                       rc_error *err)
{
    int size = rc_comm_size(c), rank = rc_comm_rank(c);
    if (n > INT_MAX)
        return rc_error_set(err, RC_ERR_ARG, "gather: %lld floats from one rank (at most %d)", (long long)n, INT_MAX);
    if (size == 1) {
        memmove(out, data, (size_t)n * sizeof *out);
        *total = n;
        return 0;
    }
    int mine = (int)n, *counts = malloc((size_t)size * 2 * sizeof *counts);
    if (!counts)
        return rc_error_set(err, RC_ERR_MEMORY, "gather: out of memory");
    int *displ = counts + size;
    /* every rank learns every count, so all of them agree when the total is too large */
    MPI_Request req;
    int rc = rci_comm_watched(c, MPI_Iallgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, c->comm, &req), &req, "MPI_Allgather");
    if (rc != MPI_SUCCESS) {
        free(counts);
        return mpi_fail(err, "MPI_Allgather", rc);
    }
    int64_t sum = 0;
    for (int r = 0; r < size; r++) {
        displ[r] = (int)(sum < INT_MAX ? sum : INT_MAX);
        sum += counts[r];
    }
    if (sum > INT_MAX) {
        free(counts);
        return rc_error_set(err, RC_ERR_ARG, "gather: %lld floats in all (at most %d)", (long long)sum, INT_MAX);
    }
    if (rank == root) {
        *total = sum;
        memmove(out + displ[rank], data, (size_t)n * sizeof *out);
        rc = rci_comm_watched(c, MPI_Igatherv(MPI_IN_PLACE, 0, MPI_FLOAT, out, counts, displ, MPI_FLOAT, root, c->comm, &req), &req, "MPI_Gatherv");
    } else {
        rc = rci_comm_watched(c, MPI_Igatherv(data, mine, MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, root, c->comm, &req), &req, "MPI_Gatherv");
    }
    free(counts);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Gatherv", rc);
}

int rc_comm_agree(rc_comm *c, int status, rc_error *err)
{
    if (!c || c->size == 1)
        return status ? -1 : 0;
    /* the lowest failing rank (size when none failed) ... */
    int mine = status ? c->rank : c->size, first;
    MPI_Request req;
    if (rci_comm_watched(c, MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->comm, &req), &req, "MPI_Allreduce (agreement)") != MPI_SUCCESS)
        return rc_error_set(err, RC_ERR_IO, "mpi: agreement on failure failed");
    if (first == c->size)
        return 0;
    /* ... tells everyone its message */
    rc_error msg = {0};
    if (c->rank == first && err)
        msg = *err;
    rci_comm_watched(c, MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, first, c->comm, &req), &req, "MPI_Bcast (agreement)");
    if (err) {
        char text[sizeof err->msg];
        snprintf(text, sizeof text, "rank %d: %.490s", first, msg.msg);
        err->code = msg.code ? msg.code : RC_ERR_IO;
        memcpy(err->msg, text, sizeof err->msg);
    }
    return -1;
}

/* ---- collectives started now, finished later (comm_async.h) --------------------------- */

struct rci_comm_pending {
    rc_comm *c;
    MPI_Request req;
    int status;                   /* MPI's, of the start */
    rc_buffer *dst;               /* device memory: the staged range goes here at the end */
    size_t dst_off, bytes;
    char *stage;                  /* the range in host memory (device buffers), else NULL */
    int *counts;                  /* [2 size]: each rank's count, then its place in the range */
};

static void pending_free(rci_comm_pending *q)
{
    free(q->stage);
    free(q->counts);
    free(q);
}

/* where the range's bytes are gathered: dst itself (host memory) or a stage of the range
 * with this rank's part downloaded into it */
static char *gather_room(rci_comm_pending *q, rc_buffer *share, size_t share_off, size_t es, rc_error *err)
{
    char *h = rci_buffer_host(q->dst, q->dst_off);
    if (h)
        return h;
    int me = q->c->rank, *displ = q->counts + q->c->size;
    if (!(q->stage = malloc(q->bytes ? q->bytes : 1))) {
        rc_error_set(err, RC_ERR_MEMORY, "all-gather: cannot stage %zu bytes", q->bytes);
        return NULL;
    }
    if (q->counts[me] && rc_buffer_download(share, share_off, q->stage + (size_t)displ[me] * es,
                                            (size_t)q->counts[me] * es, err))
        return NULL;
    return q->stage;
}

rci_comm_pending *rci_comm_gather_range_start(rc_comm *c, rc_buffer *share, size_t share_off, rc_buffer *dst,
                                              size_t dst_off, int64_t n, int64_t a, int64_t b, rc_dtype t,
                                              rc_error *err)
{
    if (t != RC_F32 && t != RC_BF16 && t != RC_F16) {
        rc_error_set(err, RC_ERR_DTYPE, "all-gather: dtype %s (f32, bf16 or f16)", rc_dtype_name(t));
        return NULL;
    }
    if (a < 0 || b < a || b > n || b - a > MAX_PIECE) {
        rc_error_set(err, RC_ERR_ARG, "all-gather: range [%lld, %lld) of %lld elements (%lld at most at once)",
                     (long long)a, (long long)b, (long long)n, (long long)MAX_PIECE);
        return NULL;
    }
    int size = c ? c->size : 1;
    rci_comm_pending *q = calloc(1, sizeof *q);
    if (q)
        q->counts = malloc((size_t)size * 2 * sizeof *q->counts);
    if (!q || !q->counts) {
        free(q);
        rc_error_set(err, RC_ERR_MEMORY, "all-gather: out of memory");
        return NULL;
    }
    size_t es = rc_dtype_size(t);
    *q = (rci_comm_pending){c, MPI_REQUEST_NULL, MPI_SUCCESS, dst, dst_off, (size_t)(b - a) * es, NULL, q->counts};
    int64_t lo, hi; /* this rank's share of the vector */
    rc_comm_share(n, size, c ? c->rank : 0, &lo, &hi);
    if (size == 1) { /* the share is the whole vector: a copy */
        if (b > a && share->be->copy(share->be, dst, dst_off, share, share_off + (size_t)(a - lo) * es, q->bytes, err)) {
            pending_free(q);
            return NULL;
        }
        q->c = NULL;
        return q;
    }
    bucket_shares(size, n, a, b - a, q->counts, q->counts + size);
    char *h = gather_room(q, share, share_off + (size_t)((a > lo ? a : lo) - lo) * es, es, err);
    if (!h) {
        pending_free(q);
        return NULL;
    }
    int me = c->rank;
    const void *mine = rci_buffer_host(share, share_off + (size_t)((a > lo ? a : lo) - lo) * es);
    /* the stage already holds this rank's part at its place: in place; host memory: from the share */
    q->status = MPI_Iallgatherv(q->stage || !q->counts[me] ? MPI_IN_PLACE : mine, q->counts[me],
                                t == RC_F32 ? MPI_FLOAT : MPI_UINT16_T, h, q->counts, q->counts + size,
                                t == RC_F32 ? MPI_FLOAT : MPI_UINT16_T, c->comm, &q->req);
    return q;
}

int rci_comm_pending_wait(rci_comm_pending *q, rc_error *err)
{
    if (!q)
        return 0;
    int rc = 0;
    if (q->c) {
        int mrc = rci_comm_watched(q->c, q->status, &q->req, "MPI_Allgatherv");
        if (mrc != MPI_SUCCESS)
            rc = mpi_fail(err, "MPI_Allgatherv", mrc);
    }
    if (!rc && q->stage)
        rc = rc_buffer_upload(q->dst, q->dst_off, q->stage, q->bytes, err);
    pending_free(q);
    return rc;
}
