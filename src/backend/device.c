/* device.c - the one way to open a device: a name ("cpu", "opencl", "opencl:N",
 * "opencl:N,M,...", "cuda", "cuda:N", "cuda:N,M,...") resolved to a backend for this
 * process. */
#include "internal.h"
#include "backend.h"
#include "redco/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* this process's rank on its machine, from the launcher's environment (0 without one) */
static int local_rank_from_env(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

/* "N,M,...": the entry local_rank picks (modulo the list's length); -1 when malformed */
static int pick_from_list(const char *list, int local_rank)
{
    int ids[64], n = 0;
    const char *p = list;
    while (*p && n < 64) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ','))
            return -1;
        ids[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n && !*p ? ids[local_rank % n] : -1;
}

static rc_backend *bad_spec(const char *spec, rc_error *err)
{
    rc_error_set(err, RC_ERR_ARG, "device '%s': expected cpu, opencl, opencl:N, opencl:N,M,..., cuda, "
                 "cuda:N or cuda:N,M,... (redco devices lists the OpenCL and CUDA devices)", spec);
    return NULL;
}

#ifdef REDCO_HAVE_CUDA
static rc_backend *cuda_backend(int index, rc_error *err)
{
    return rci_backend_cuda(index, err);
}
#else
/* A build without CUDA's headers has no CUDA backend (src/backend/cuda/ is not built). */
#define NO_CUDA "cuda: this redco was built without CUDA (the CUDA toolkit's headers were not found when it " \
                "was built): use --device opencl or cpu"

int rc_cuda_device_count(rc_error *err)
{
    return rc_error_set(err, RC_ERR_UNSUPPORTED, NO_CUDA);
}

int rc_cuda_device_info(int index, rc_device_info *info, rc_error *err)
{
    (void)index, (void)info;
    return rc_error_set(err, RC_ERR_UNSUPPORTED, NO_CUDA);
}

static rc_backend *cuda_backend(int index, rc_error *err)
{
    (void)index;
    rc_error_set(err, RC_ERR_UNSUPPORTED, NO_CUDA);
    return NULL;
}
#endif

static rc_backend *device_of(const char *spec, int local_rank, rc_error *err)
{
    if (!spec || !*spec)
        spec = getenv("REDCO_DEVICE");
    if (!spec || !*spec || !strcmp(spec, "cpu"))
        return rci_backend_cpu();
    if (local_rank < 0)
        local_rank = local_rank_from_env();
    if (!strcmp(spec, "opencl")) {
        int n = rc_opencl_device_count(err);
        return n < 0 ? NULL : rci_backend_opencl(local_rank % n, err);
    }
    if (!strcmp(spec, "cuda")) {
        int n = rc_cuda_device_count(err);
        return n < 0 ? NULL : cuda_backend(local_rank % n, err);
    }
    if (!strncmp(spec, "opencl:", 7)) {
        int index = pick_from_list(spec + 7, local_rank);
        return index < 0 ? bad_spec(spec, err) : rci_backend_opencl(index, err);
    }
    if (!strncmp(spec, "cuda:", 5)) {
        int index = pick_from_list(spec + 5, local_rank);
        return index < 0 ? bad_spec(spec, err) : cuda_backend(index, err);
    }
    return bad_spec(spec, err);
}

rc_backend *rc_device_open(const char *spec, int local_rank, rc_error *err)
{
    rc_backend *be = device_of(spec, local_rank, err);
    if (be) {
        be->opens++;
        be->closing = 0;
    }
    return be;
}

void rc_device_close(rc_backend *be)
{
    if (!be || be->opens <= 0)
        return;
    if (--be->opens == 0) {
        be->closing = 1;
        rci_backend_release_idle(be); /* now, or with its last buffer */
    }
}

void rc_device_allow_tf32(rc_backend *be, int on)
{
    if (be)
        be->tf32 = on != 0;
}
