/* device.h - devices: opening one as a backend by name, and listing the OpenCL and CUDA
 * devices.
 *
 * rc_device_open is the one way to get a backend: "cpu", an OpenCL device "opencl:N", or
 * a CUDA device "cuda:N". OpenCL devices are numbered 0, 1, ... over every OpenCL platform
 * the ICD loader finds, in the loader's platform order, then each platform's device order;
 * CUDA devices in the driver's order (CUDA_VISIBLE_DEVICES applies). The CUDA libraries
 * (the driver's libcuda.so.1, cuBLAS, NVRTC) are opened with dlopen when a CUDA device is
 * first asked for, so a program runs without them until then:
 *
 *     int n = rc_opencl_device_count(&err);          // -1: no platform or device (err says
 *     for (int i = 0; i < n; i++) {                  //     what to install)
 *         rc_device_info d;
 *         rc_opencl_device_info(i, &d, &err);
 *         printf("opencl:%d %s (%s), %zu bytes\n", i, d.name, d.platform, d.global_bytes);
 *     }
 *     rc_backend *gpu = rc_device_open("opencl:0", 0, &err);  // then rc_plan_new_on(gpu, ...)
 *     rc_backend *nv = rc_device_open("cuda:0", 0, &err);     // rc_cuda_device_count lists them
 *     rc_backend *cpu = rc_device_open("cpu", 0, &err);       // never fails
 *     ...
 *     rc_device_close(gpu);   // released once its last buffer is freed too
 *     rc_device_close(nv);
 *     rc_device_close(cpu);
 */
#ifndef REDCO_DEVICE_H
#define REDCO_DEVICE_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int index;                /* N of "opencl:N" or "cuda:N" */
    char platform[128];       /* the platform's name ("Portable Computing Language", ...;
                                 CUDA devices: "CUDA 13.0", the driver's CUDA version) */
    char name[128];           /* the device's name */
    char version[128];        /* its CL_DEVICE_VERSION (CUDA devices: as platform) */
    char type[16];            /* "gpu", "cpu", "accelerator" or "other" */
    size_t global_bytes;      /* CL_DEVICE_GLOBAL_MEM_SIZE (CUDA: the device's memory) */
    size_t max_alloc_bytes;   /* CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest one buffer (CUDA:
                                 its memory) */
    int compute_units;
    int fp64;                 /* 1 with cl_khr_fp64 (CUDA devices: 1) */
    int compute_major;        /* CUDA devices: the compute capability (9.0: 9, 0); 0 for OpenCL */
    int compute_minor;
} rc_device_info;

/* The CPU device ("cpu"): its threads and what runs its matrix products, in words
 * (`redco devices` prints them). f32: OpenBLAS and its kernels ("OpenBLAS (SkylakeX
 * kernels)"); where they leave out the CPU's AVX2 (a CPU Debian's OpenBLAS does not know:
 * it loads its Prescott kernels) the text says so and what to set; bf16: oneDNN's kernel on
 * the CPU's bf16 units ("oneDNN brg:avx512_core_amx_bf16"), or the f32 products of widened
 * operands. */
typedef struct {
    int threads;                  /* rc_get_threads() */
    char f32_products[192];
    char bf16_products[96];
} rc_cpu_info;
void rc_cpu_device_info(rc_cpu_info *info);

/* The number of OpenCL devices (>= 1), or -1 with err saying that there is no platform or
 * no device and what to install. */
int rc_opencl_device_count(rc_error *err);
/* The description of device `index`; 0, or -1 with err set. */
int rc_opencl_device_info(int index, rc_device_info *info, rc_error *err);
/* The number of CUDA devices (>= 1), or -1 with err saying what is missing (this build has
 * no CUDA, the driver's libcuda.so.1 is not there, or it finds no device) and what to use
 * instead. The CUDA libraries are opened on this call, never before. */
int rc_cuda_device_count(rc_error *err);
/* The description of CUDA device `index` ("cuda:N"): name, memory, compute capability,
 * multiprocessors (compute_units); 0, or -1 with err set. */
int rc_cuda_device_info(int index, rc_device_info *info, rc_error *err);
/* The backend a device name asks for: "cpu"; "opencl" (device local_rank modulo the device
 * count); "opencl:N"; or "opencl:N,M,..." (entry local_rank modulo the list's length);
 * likewise "cuda", "cuda:N" and "cuda:N,M,...".
 * NULL or "" reads the environment's REDCO_DEVICE, and without it the CPU. local_rank < 0
 * takes the launcher's (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID; 0
 * without one). A device is opened on its first call (an OpenCL device's kernel program
 * built then) and shared: while it is open the same name gives the same backend. NULL with
 * err set for an unknown name or a device that cannot be opened. Each open is closed with
 * rc_device_close. */
rc_backend *rc_device_open(const char *spec, int local_rank, rc_error *err);
/* Gives back one open of rc_device_open. When every open of a device is closed and its
 * last buffer freed (now, or when that buffer is freed later), its resources are released
 * (an OpenCL device's context, queue, programs and scratch; the CPU holds none) and a later
 * open starts afresh; be must not be used after its last close but through the buffers
 * still alive. NULL does nothing. */
void rc_device_close(rc_backend *be);
/* Allows (on = 1) or forbids (0, the default) f32 matrix products on be to round their
 * operands to TF32 on tensor cores: several times faster on an H100, with 10-bit mantissas in
 * the products (sums stay f32). Only a CUDA device has it; elsewhere it changes nothing.
 * It holds for the device until its last open is closed (`--tf32`, rc_deployer_options'
 * tf32). NULL does nothing. */
void rc_device_allow_tf32(rc_backend *be, int on);
/* How CUDA devices of compute capability 8.0 and later run bf16 fused attention
 * (rc_attention) in the plans made after the call, process-wide: on (the default), in tiles
 * on tensor cores (FlashAttention-2's loops: each tile's scores stay on chip; the
 * probabilities and their gradients rounded to bf16 for their products, as FlashAttention
 * does) wherever a (batch, kv head) pair has at least 16 query rows; off, from the device's
 * matrix products over chunks of heads, the scores in scratch, every product float's to its
 * sums (`--attention products`). Other devices and dtypes are unchanged. */
void rc_set_tiled_attention(int on);
int rc_get_tiled_attention(void);

#ifdef __cplusplus
}
#endif

#endif
