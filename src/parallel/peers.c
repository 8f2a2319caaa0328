/* peers.c - the host of each rank, and whether a silent rank's host can still be reached.
 *
 * At the first mesh every rank opens a listening TCP socket (any port, never accepted from)
 * and the ranks gather one record each: host name, an IPv4 address of the host and that
 * port. When a collective times out, the watchdog probes the ranks that did not answer: a
 * TCP connection to the rank's port is answered by its host's kernel whatever the process
 * is doing, so
 *   - connected: the host is reachable and the process is alive (hung, or busy);
 *   - refused: the host is reachable and the process is gone (its socket closed with it);
 *   - no answer within the probe's time, or no route: the host is unreachable (a cut link,
 *     a host down).
 * The address is the one the job's TCP traffic uses where OpenMPI was told
 * (OMPI_MCA_btl_tcp_if_include: an interface name or an IPv4 CIDR), else the host's first
 * IPv4 interface that is up and not the loopback, else 127.0.0.1. */
#define _DEFAULT_SOURCE /* getifaddrs and the interface flags (IFF_UP) are BSD's, not POSIX's */
#include "comm_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    char host[64];     /* gethostname */
    uint32_t addr;     /* IPv4, network order */
    uint16_t port;     /* network order; 0: no listener */
    uint16_t pad;
} peer;

static peer *peers;   /* [world size] once gathered */
static int npeers;
static int listener = -1;

/* "10.1.0.0/16" holds a (network order)? */
static int cidr_holds(const char *cidr, uint32_t a)
{
    char net[32];
    int bits = 32;
    const char *slash = strchr(cidr, '/');
    size_t n = slash ? (size_t)(slash - cidr) : strlen(cidr);
    if (n >= sizeof net)
        return 0;
    memcpy(net, cidr, n);
    net[n] = 0;
    if (slash)
        bits = atoi(slash + 1);
    struct in_addr want;
    if (inet_pton(AF_INET, net, &want) != 1 || bits < 0 || bits > 32)
        return 0;
    uint32_t mask = bits ? htonl(~0u << (32 - bits)) : 0;
    return (a & mask) == (want.s_addr & mask);
}

/* the interface (name, address) matches an entry of OpenMPI's comma-separated list */
static int listed(const char *list, const char *name, uint32_t a)
{
    char copy[512];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!strcmp(t, name) || (strchr(t, '.') && cidr_holds(t, a)))
            return 1;
    return 0;
}

/* the address this host is reached by (network order) */
static uint32_t own_address(void)
{
    const char *want = getenv("OMPI_MCA_btl_tcp_if_include");
    uint32_t found = htonl(INADDR_LOOPBACK);
    struct ifaddrs *all, *i;
    if (getifaddrs(&all))
        return found;
    for (i = all; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        int ok = want && *want ? listed(want, i->ifa_name, a) : !(i->ifa_flags & IFF_LOOPBACK);
        if (ok) {
            found = a;
            break;
        }
    }
    freeifaddrs(all);
    return found;
}

/* a listening socket on every address, any port; its port (network order), 0 on failure */
static uint16_t listen_any(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return 0;
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 128) ||
        getsockname(s, (struct sockaddr *)&a, &len)) {
        close(s);
        return 0;
    }
    listener = s;
    return a.sin_port;
}

void rci_peers_gather(void)
{
    int n = 1;
    if (peers)
        return;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    peer me;
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    me.addr = own_address();
    me.port = listen_any();
    peer *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return;
    /* every rank calls this at its first mesh, so the gather is collective; a failure leaves
     * the watchdog without hosts, as before */
    if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
        free(all);
        return;
    }
    peers = all;
    npeers = n;
}

void rci_peers_host(int rank, char *text, size_t size)
{
    if (!peers || rank < 0 || rank >= npeers) {
        snprintf(text, size, "?");
        return;
    }
    char ip[INET_ADDRSTRLEN] = "?";
    struct in_addr a = {peers[rank].addr};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    snprintf(text, size, "%s (%s)", peers[rank].host, ip);
}

int rci_peers_same_host(int a, int b)
{
    if (!peers || a < 0 || b < 0 || a >= npeers || b >= npeers)
        return a == b;
    return peers[a].addr == peers[b].addr && !strcmp(peers[a].host, peers[b].host);
}

/* a non-blocking connect to rank r's listener: the socket (>= 0), or -1 with *verdict set */
static int probe_start(int r, int *verdict)
{
    *verdict = RCI_PEER_UNKNOWN;
    if (!peers || r < 0 || r >= npeers || !peers[r].port)
        return -1;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = peers[r].addr;
    a.sin_port = peers[r].port;
    if (!connect(s, (struct sockaddr *)&a, sizeof a)) {
        *verdict = RCI_PEER_ALIVE;
        close(s);
        return -1;
    }
    if (errno == EINPROGRESS)
        return s;
    *verdict = errno == ECONNREFUSED ? RCI_PEER_GONE : RCI_PEER_UNREACHABLE;
    close(s);
    return -1;
}

void rci_peers_probe(const int *ranks, int n, int *verdict, double seconds)
{
    int *fd = malloc((size_t)(n > 0 ? n : 1) * sizeof *fd);
    if (!fd) {
        for (int i = 0; i < n; i++)
            verdict[i] = RCI_PEER_UNKNOWN;
        return;
    }
    int open = 0;
    for (int i = 0; i < n; i++)
        open += (fd[i] = probe_start(ranks[i], &verdict[i])) >= 0;
    for (double t0 = rci_clock_s(); open && rci_clock_s() - t0 < seconds;) {
        for (int i = 0; i < n; i++) {
            if (fd[i] < 0)
                continue;
            struct pollfd p = {fd[i], POLLOUT, 0};
            if (poll(&p, 1, 0) <= 0)
                continue;
            int e = 0;
            socklen_t len = sizeof e;
            getsockopt(fd[i], SOL_SOCKET, SO_ERROR, &e, &len);
            verdict[i] = !e ? RCI_PEER_ALIVE : e == ECONNREFUSED ? RCI_PEER_GONE : RCI_PEER_UNREACHABLE;
            close(fd[i]);
            fd[i] = -1;
            open--;
        }
        rci_comm_nap_ms(10);
    }
    for (int i = 0; i < n; i++)
        if (fd[i] >= 0) { /* no answer in time: the host is cut off */
            verdict[i] = RCI_PEER_UNREACHABLE;
            close(fd[i]);
        }
    free(fd);
}
