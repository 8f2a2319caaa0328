/* dialect.h - the first part of the device source (rci_gpu_source, gpu.h): what makes
 * kernels.cl, written once in OpenCL C 1.2, also compile as CUDA C++ under NVRTC. It is
 * never included by C code; CMake prepends it, then src/core/scalar.h, to kernels.cl.
 *
 * Under OpenCL: the pragmas (no contraction into fused multiply-adds; fp64 with RC_FP64)
 * and the fixed-width names scalar.h uses. Under CUDA (NVRTC defines __CUDACC__), what
 * OpenCL C has built in:
 * - __kernel is extern "C" __global__ (unmangled entry names); __global is empty.
 * - Helper functions stay plain `static`: rci_nvrtc_compile builds with -default-device,
 *   so a function without an execution space is a __device__ one.
 * - get_global_id(0) is the thread's index in the grid, get_global_size(0) the grid's
 *   threads. CUDA launches whole blocks, so every kernel returns for work-items past its
 *   item count.
 * - Work-groups (the blocks): get_local_id(0), get_group_id(0), get_local_size(0) are
 *   threadIdx.x, blockIdx.x, blockDim.x; barrier(CLK_LOCAL_MEM_FENCE) is __syncthreads().
 *   Local memory: an array declared __local at a kernel's outermost scope is __shared__;
 *   a helper's parameter pointing into it is LOCAL_MEM float * (OpenCL's __local; empty
 *   here, a generic pointer reaching shared memory). A kernel with barriers must not
 *   return early from any work-item: it guards the work instead.
 * - long8 and long16 are structs of 8 and 16 longs named as OpenCL's components (s0 ..
 *   s7, s0 .. sf): the same 64 and 128 bytes by value (rci_gpu_long8, rci_gpu_long16).
 * - Math functions are called with float arguments: CUDA's C++ overloads pick the float
 *   functions, as OpenCL's do. rci_nvrtc_compile passes --fmad=false (FP_CONTRACT OFF)
 *   and keeps NVRTC's correctly rounded division and square root.
 * - UNROLL before a loop over a register array (a kernel's fragments, accumulators and
 *   rows) is #pragma unroll under CUDA: an array indexed by a loop left a loop lives on the
 *   stack, in local memory (the tile kernels' 256-480 bytes a thread before). Under OpenCL
 *   it is empty: PoCL's build of the tiles' emulated products, unrolled, took minutes.
 * Both: rci_f32_bits / rci_bits_f32 reinterpret a float's bits, RC_DEVICE_SOURCE marks the
 * device source for scalar.h, RC_REAL (float) is the type of scalar.h's activations. */
#define RC_DEVICE_SOURCE 1
#define RC_REAL float

#ifdef __CUDACC__

#define __kernel extern "C" __global__
#define __global
#define __local __shared__
#define LOCAL_MEM
#define CLK_LOCAL_MEM_FENCE 1
#define UNROLL _Pragma("unroll")

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

typedef struct {
    long s0, s1, s2, s3, s4, s5, s6, s7;
} long8;
typedef struct {
    long s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, sa, sb, sc, sd, se, sf;
} long16;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef INT_MAX
#define INT_MAX 2147483647
#define INT_MIN (-INT_MAX - 1)
#endif

static long get_global_id(int dim)
{
    (void)dim;
    return (long)blockIdx.x * blockDim.x + threadIdx.x;
}

static long get_global_size(int dim)
{
    (void)dim;
    return (long)gridDim.x * blockDim.x;
}

static long get_local_id(int dim)
{
    (void)dim;
    return threadIdx.x;
}

static long get_group_id(int dim)
{
    (void)dim;
    return blockIdx.x;
}

static long get_local_size(int dim)
{
    (void)dim;
    return blockDim.x;
}

/* every thread of the block waits here; shared memory written before is seen after */
static void barrier(int flags)
{
    (void)flags;
    __syncthreads();
}

static int atomic_min(int *p, int v)
{
    return atomicMin(p, v);
}

static uint rci_f32_bits(float f)
{
    return __float_as_uint(f);
}

static float rci_bits_f32(uint u)
{
    return __uint_as_float(u);
}

#else /* OpenCL C */

#define LOCAL_MEM __local
#define UNROLL

#pragma OPENCL FP_CONTRACT OFF
#ifdef RC_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

static uint rci_f32_bits(float f)
{
    return as_uint(f);
}

static float rci_bits_f32(uint u)
{
    return as_float(u);
}

#endif

/* the fixed-width names of C's <stdint.h>, for scalar.h */
typedef uchar uint8_t;
typedef ushort uint16_t;
typedef int int32_t;
typedef uint uint32_t;
typedef long int64_t;
typedef ulong uint64_t;

/* value i (0 to 7) of a long8: a switch, so no array of it goes to a GPU's stack */
static long long8_at(long8 v, int i)
{
    switch (i) {
    case 0: return v.s0;
    case 1: return v.s1;
    case 2: return v.s2;
    case 3: return v.s3;
    case 4: return v.s4;
    case 5: return v.s5;
    case 6: return v.s6;
    default: return v.s7;
    }
}

/* the 8 values of a long8, into a[0, 8) */
static void long8_get(long8 v, long *a)
{
    a[0] = v.s0;
    a[1] = v.s1;
    a[2] = v.s2;
    a[3] = v.s3;
    a[4] = v.s4;
    a[5] = v.s5;
    a[6] = v.s6;
    a[7] = v.s7;
}
