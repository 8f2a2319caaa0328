/* comm_internal.h - what comm.c (the collectives), watchdog.c (waiting for them) and peers.c
 * (probing the ranks' hosts) share. */
#ifndef REDCO_COMM_INTERNAL_H
#define REDCO_COMM_INTERNAL_H

#include "internal.h"   /* rci_clock_s: the watchdog's waits, the probes' deadline */
#include "redco/dist.h"

#include <mpi.h>
#include <stddef.h>
#include <time.h>

struct rc_comm {
    MPI_Comm comm;                /* MPI_COMM_NULL in a world of one */
    int rank, size;
    unsigned id;                  /* groups made before it + 1 (the same on every rank, since
                                     they are made collectively); 0 for the world */
    int *world;                   /* the world rank of each of its ranks, [size] */
    char group[96];               /* for the watchdog's lines: "the model-parallel group of
                                     ranks 2, 3", "all 4 ranks" (world ranks) */
};

/* sleeps ms milliseconds between polls */
static inline void rci_comm_nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Waits for the request of a collective on c started with MPI status rc (op: its name for
 * messages), under the watchdog: past rc_comm_timeout() it finds out what every rank is
 * doing, one rank prints it, and the job is aborted. Returns the MPI status. */
int rci_comm_watched(rc_comm *c, int rc, MPI_Request *req, const char *op);

/* The hosts of the job's ranks (peers.c). rci_peers_gather: at the first mesh, on every rank
 * (collective on MPI_COMM_WORLD): each rank's host name and address, and a listening socket
 * of its own that the watchdog's probes connect to. */
void rci_peers_gather(void);
/* "node07 (10.1.0.7)" of world rank r, or "?" before the gather */
void rci_peers_host(int rank, char *text, size_t size);
/* world ranks a and b run on one host (as gathered; a == b before the gather) */
int rci_peers_same_host(int a, int b);

enum { RCI_PEER_UNKNOWN, RCI_PEER_ALIVE, RCI_PEER_GONE, RCI_PEER_UNREACHABLE };
/* verdict[i] for world rank ranks[i]: its host answers a TCP connection to the rank's socket
 * (RCI_PEER_ALIVE), refuses it (RCI_PEER_GONE: the process is gone), or does not answer
 * within `seconds` (RCI_PEER_UNREACHABLE); RCI_PEER_UNKNOWN without the gather. The n probes
 * run at once. */
void rci_peers_probe(const int *ranks, int n, int *verdict, double seconds);

#endif
