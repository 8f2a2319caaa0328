/* mpi_deployer.c - a deployer that starts MPI itself finalizes it when freed, and what
 * comes after is harmless: rc_dist_finalize does nothing, rank and size fall back to a
 * world of one, and starting MPI or a mesh again is an error, never an abort. Run with 1,
 * 2 and 4 processes and without a launcher (then MPI is never started). */
#include "check.h"
#include "redco/pipeline.h"

#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    rc_error err = {0};
    int launched = rc_dist_launched(), started = 0, finished = 0;
    MPI_Initialized(&started);
    CHECK(!started);
    rc_deployer_options o = {.seed = 1, .mp = 1};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &o, &err);
    CHECKF(d, "%s", err.msg);
    int rank = d ? rc_deployer_mesh(d)->rank : 0, size = d ? rc_deployer_mesh(d)->size : 0;
    MPI_Initialized(&started);
    CHECKF(started == launched, "MPI started: %d, launched: %d", started, launched);
    CHECK(rc_deployer_agree(d, 0, &err) == 0);
    /* f32 sums and maxima over the world: of the ranks, and of -rank */
    const rc_mesh *m = d ? rc_deployer_mesh(d) : NULL;
    float s[2] = {(float)rank, -(float)rank}, x[2] = {(float)rank, -(float)rank};
    CHECK(m && rc_comm_allreduce_sum_f32(m->world, s, 2, &err) == 0 &&
          s[0] == (float)(size * (size - 1) / 2) && s[1] == -s[0]);
    CHECK(m && rc_comm_allreduce_max_f32(m->world, x, 2, &err) == 0 && x[0] == (float)(size - 1) && x[1] == 0.0f);
    rc_deployer_free(d);
    MPI_Finalized(&finished);
    CHECKF(finished == launched, "MPI finalized after rc_deployer_free: %d (launched: %d)", finished, launched);
    rc_dist_finalize(); /* harmless now */
    CHECK(rc_dist_rank() == 0 && rc_dist_size() == 1);
    if (launched) {
        CHECKF(rc_dist_init(&argc, &argv, &err) == -1 && check_has(err.msg, "finalized"), "%s", err.msg);
        rc_mesh m;
        CHECKF(rc_mesh_init(&m, 1, &err) == -1 && check_has(err.msg, "MPI is not running"), "%s", err.msg);
        CHECK(rc_deployer_new(NULL, NULL, &o, &err) == NULL && check_has(err.msg, "finalized"));
    }
    char name[64];
    snprintf(name, sizeof name, "mpi_deployer rank %d/%d", rank, size);
    return check_summary(name);
}
