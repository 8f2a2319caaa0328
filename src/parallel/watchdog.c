/* watchdog.c - waiting for collectives, and what happens when one never completes.
 *
 * Every collective of comm.c starts as its non-blocking form and is waited for here. A rank
 * that waits past the timeout asks every rank of the world what it is doing. A rank that
 * waits for a collective of its own answers from its wait loop (the operation, the group,
 * how long); a hung or busy rank cannot answer. The asking rank listens a moment, and the
 * lowest rank that timed out prints one line: the operation it waited in, each rank of its
 * group that did not arrive with where that rank waits instead, and the ranks that answered
 * from no collective at all, the likely culprits. Then the job is aborted (MPI_Abort ends
 * every rank: a stuck rank cannot be recovered from, and the alternative is a job that
 * hangs until its time limit). Questions and answers are point-to-point messages on
 * MPI_COMM_WORLD with tags of their own.
 *
 * A rank that does not answer is probed over TCP (peers.c): its host answers whatever the
 * process does, so silence there means the host cannot be reached (a cut link, a host
 * down), which the line says with the host's name and ranks, rather than "hung". Then
 * MPI_Abort would wait forever for the lost host's daemon: each rank that found a host
 * unreachable leaves its status for redco's launcher (REDCO_LAUNCHER, tools/launch.c; a
 * file "lost" tells it to end mpiexec) and exits at once. Under a bare mpirun the ranks
 * on reachable hosts end the same way, and mpirun itself may wait for the lost host. */
#include "comm_internal.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_QUERY = 0x7e17, TAG_ANSWER = 0x7e18 };

static double coll_timeout = 600.0;  /* seconds; <= 0: wait forever */
static long coll_count;              /* collectives waited for by this process */
static int lowest_timed_out = INT_MAX; /* the lowest world rank known to have timed out */

/* what this rank waits for (op NULL: nothing), as it answers a question */
static struct {
    const rc_comm *c;
    const char *op;
    long seq;
    double since;
} waiting;

typedef struct {
    int timed_out;                /* its own wait passed the timeout */
    unsigned id;                  /* the communicator's number (rc_comm.id) */
    double waited;                /* seconds */
    char op[48];
    char group[96];
} answer;

void rc_comm_set_timeout(double seconds)
{
    coll_timeout = seconds;
}

double rc_comm_timeout(void)
{
    return coll_timeout;
}

/* answers every question waiting: what this rank waits for */
static void answer_questions(void)
{
    for (;;) {
        int flag = 0, from;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        MPI_Recv(&from, 1, MPI_INT, st.MPI_SOURCE, TAG_QUERY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (st.MPI_SOURCE < lowest_timed_out) /* only a rank that timed out asks */
            lowest_timed_out = st.MPI_SOURCE;
        answer a;
        memset(&a, 0, sizeof a);
        if (waiting.op) {
            a.id = waiting.c->id;
            a.waited = rci_clock_s() - waiting.since;
            a.timed_out = coll_timeout > 0 && a.waited > coll_timeout;
            snprintf(a.op, sizeof a.op, "%s", waiting.op);
            snprintf(a.group, sizeof a.group, "%s", waiting.c->group);
        }
        MPI_Send(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, MPI_COMM_WORLD);
    }
}

/* asks every other rank, and listens `grace` seconds (answering the others' questions):
 * heard[r] and got[r] for each rank r that answered */
static void ask_everyone(int me, int n, char *heard, answer *got, double grace)
{
    MPI_Request req;
    for (int r = 0; r < n; r++)
        if (r != me && MPI_Isend(&me, 1, MPI_INT, r, TAG_QUERY, MPI_COMM_WORLD, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    for (double t0 = rci_clock_s(); rci_clock_s() - t0 < grace;) {
        answer_questions();
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANSWER, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            rci_comm_nap_ms(1);
            continue;
        }
        answer a;
        MPI_Recv(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        heard[st.MPI_SOURCE] = 1;
        got[st.MPI_SOURCE] = a;
        if (a.timed_out && st.MPI_SOURCE < lowest_timed_out)
            lowest_timed_out = st.MPI_SOURCE;
    }
}

/* appends to the line, keeping it within its buffer */
static void add(char *line, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *line, size_t size, const char *fmt, ...)
{
    size_t used = strlen(line);
    if (used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + used, size - used, fmt, ap);
    va_end(ap);
}

/* what a silent rank w is, from its probe: " on HOST" for a live one, the rest in words */
static void add_silent(char *line, size_t size, int w, int verdict)
{
    char host[128];
    rci_peers_host(w, host, sizeof host);
    if (verdict == RCI_PEER_UNREACHABLE)
        add(line, size, " (its host %s cannot be reached)", host);
    else if (verdict == RCI_PEER_GONE)
        add(line, size, " (its process on %s is gone)", host);
    else if (verdict == RCI_PEER_ALIVE)
        add(line, size, " (in no collective on %s: hung, or busy far longer than the others)", host);
    else
        add(line, size, " (in no collective: hung, or busy far longer than the others)");
}

/* "; host H: ranks 2, 3 unreachable ..." for each host whose silent ranks its probes found
 * unreachable; the count of such ranks */
static int add_lost_hosts(char *line, size_t size, int n, const int *verdict, double probe)
{
    int lost = 0;
    char *said = calloc((size_t)n, 1);
    for (int w = 0; w < n && said; w++) {
        if (verdict[w] != RCI_PEER_UNREACHABLE || said[w])
            continue;
        char host[128];
        rci_peers_host(w, host, sizeof host);
        int k = 0;
        for (int v = w; v < n; v++)
            k += verdict[v] == RCI_PEER_UNREACHABLE && rci_peers_same_host(v, w);
        add(line, size, "; host %s unreachable (no TCP answer within %.0f s: a cut link or a host down, not a hung "
            "process): rank%s", host, probe, k > 1 ? "s" : "");
        k = 0;
        for (int v = w; v < n; v++)
            if (verdict[v] == RCI_PEER_UNREACHABLE && rci_peers_same_host(v, w))
                said[v] = 1, lost++, add(line, size, "%s %d", k++ ? "," : "", v);
    }
    free(said);
    return lost;
}

/* the line: the ranks of c that did not arrive and where each is; then the world's ranks
 * that answered from no collective, and the hosts that cannot be reached */
static void report(const rc_comm *c, const char *op, double waited, int n, const char *heard, const answer *got,
                  const int *verdict, double probe)
{
    char line[4096], host[128];
    int me = c->world[c->rank], k = 0;
    rci_peers_host(me, host, sizeof host);
    snprintf(line, sizeof line, "redco: collective timeout: %s on %s (collective #%ld of rank %d on %s) waited %.0f s",
             op, c->group, waiting.seq, me, host, waited);
    char *culprit = calloc((size_t)n, 1);
    for (int r = 0; r < c->size; r++) {
        int w = c->world[r];
        if (r == c->rank || (heard[w] && got[w].id == c->id && !strcmp(got[w].op, op)))
            continue; /* arrived */
        add(line, sizeof line, "; rank %d did not arrive", w);
        if (heard[w])
            add(line, sizeof line, " (it waits in %s on %s, %.1f s)", got[w].op, got[w].group, got[w].waited);
        else if (culprit)
            culprit[w] = 1, add_silent(line, sizeof line, w, verdict[w]);
    }
    k = 0;
    for (int w = 0; w < n; w++)
        if (w != me && !heard[w] && !(culprit && culprit[w]))
            add(line, sizeof line, "%s%d", k++ ? ", " : "; in no collective either: rank ", w);
    free(culprit);
    if (add_lost_hosts(line, sizeof line, n, verdict, probe))
        fprintf(stderr, "%s; ending the ranks that can be reached\n", line);
    else
        fprintf(stderr, "%s; aborting all ranks (raise --collective-timeout if a step can take this long)\n", line);
    fflush(stderr);
}

/* a host is lost: MPI_Abort would wait for its daemon forever. Leaves this rank's status
 * (1) where redco's launcher reads it, with the file "lost" that tells the launcher to end
 * mpiexec, and exits. */
static void exit_lost(int me)
{
    const char *dir = getenv("REDCO_LAUNCHER");
    if (dir && *dir) {
        char path[4096];
        for (int i = 0; i < 2; i++) {
            if (i == 0)
                snprintf(path, sizeof path, "%s/rank-%d", dir, me);
            else
                snprintf(path, sizeof path, "%s/lost", dir);
            FILE *f = fopen(path, "w");
            if (f) {
                fprintf(f, "1\n");
                fclose(f);
            }
        }
    }
    fflush(NULL);
    _exit(1);
}

/* verdict[w] for each world rank w that did not answer (heard[w] 0): is its host there at
 * all? Probed at once, `seconds` at most; 1 when some host cannot be reached */
static int probe_silent(int me, int n, const char *heard, int *verdict, double seconds)
{
    int *silent = calloc((size_t)n, sizeof *silent), *v = calloc((size_t)n, sizeof *v), k = 0, lost = 0;
    for (int w = 0; silent && v && w < n; w++)
        if (w != me && !heard[w])
            silent[k++] = w;
    if (silent && v)
        rci_peers_probe(silent, k, v, seconds);
    for (int i = 0; i < k; i++)
        lost |= (verdict[silent[i]] = v[i]) == RCI_PEER_UNREACHABLE;
    free(silent);
    free(v);
    return lost;
}

/* past the timeout: find out what every rank does; the lowest rank that timed out reports,
 * and the job ends */
static void timed_out(rc_comm *c, const char *op, double waited)
{
    int me = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (me < lowest_timed_out)
        lowest_timed_out = me;
    char *heard = calloc((size_t)n, 1);
    answer *got = calloc((size_t)n, sizeof *got);
    /* the others' timeouts started within a moment of ours: listen as long again, capped */
    double grace = coll_timeout < 2.0 ? coll_timeout : 2.0;
    int *verdict = calloc((size_t)n, sizeof *verdict), lost = 0;
    if (heard && got && verdict) {
        ask_everyone(me, n, heard, got, grace);
        lost = probe_silent(me, n, heard, verdict, grace);
    }
    if (!heard || !got || !verdict || lowest_timed_out == me) {
        if (heard && got && verdict)
            report(c, op, waited, n, heard, got, verdict, grace);
        else
            fprintf(stderr, "redco: collective timeout: %s on %s waited %.0f s; aborting all ranks\n", op, c->group,
                    waited);
    } else { /* the reporting rank ends the job: answer the late askers meanwhile */
        for (double t0 = rci_clock_s(); rci_clock_s() - t0 < 2.0; rci_comm_nap_ms(1))
            answer_questions();
    }
    free(heard);
    free(got);
    free(verdict);
    if (lost)
        exit_lost(me);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int rci_comm_watched(rc_comm *c, int rc, MPI_Request *req, const char *op)
{
    if (rc != MPI_SUCCESS)
        return rc;
    waiting.c = c;
    waiting.op = op;
    waiting.seq = ++coll_count;
    waiting.since = rci_clock_s();
    for (long spins = 0;; spins++) {
        int done = 0;
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            break;
        if (spins > 1000)
            sched_yield();
        if ((spins & 255) == 0) {
            answer_questions();
            double waited = rci_clock_s() - waiting.since;
            if (coll_timeout > 0 && waited > coll_timeout)
                timed_out(c, op, waited);
        }
    }
    waiting.op = NULL;
    return rc;
}
