/* comm_internal.h - what comm.c (the collectives) and watchdog.c (waiting for them) share. */
#ifndef REDCO_COMM_INTERNAL_H
#define REDCO_COMM_INTERNAL_H

#include "redco/dist.h"

#include <mpi.h>

struct rc_comm {
    MPI_Comm comm;                /* MPI_COMM_NULL in a world of one */
    int rank, size;
    unsigned id;                  /* groups made before it + 1 (the same on every rank, since
                                     they are made collectively); 0 for the world */
    int *world;                   /* the world rank of each of its ranks, [size] */
    char group[96];               /* for the watchdog's lines: "the model-parallel group of
                                     ranks 2, 3", "all 4 ranks" (world ranks) */
};

/* Waits for the request of a collective on c started with MPI status rc (op: its name for
 * messages), under the watchdog: past rc_comm_timeout() it finds out what every rank is
 * doing, one rank prints it, and the job is aborted. Returns the MPI status. */
int rci_comm_watched(rc_comm *c, int rc, MPI_Request *req, const char *op);

#endif
