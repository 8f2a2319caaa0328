/* nvrtc.h - the device source (rci_gpu_source) compiled for an NVIDIA GPU by NVRTC, the
 * CUDA runtime compiler. libnvrtc is opened with dlopen on first use: the library links no
 * CUDA library, and a machine without the toolkit gets an error naming what is missing.
 * Built only with REDCO_HAVE_CUDA (the toolkit's headers found by CMake). */
#ifndef REDCO_CUDA_NVRTC_H
#define REDCO_CUDA_NVRTC_H

#include "internal.h"

#include <stddef.h>

/* src (NUL-terminated) compiled for sm_<major><minor> into a CUBIN at *image (malloc'd: the
 * caller frees it), *bytes long. store (RC_F32, RC_BF16, RC_F16) picks how float values are
 * stored (-DRC_STORE_BF16, -DRC_STORE_F16); fp64 builds the double accumulators and rope
 * (-DRC_FP64); the attention tile kernels where rci_nvrtc_tiles says (-DRC_TILES). Always
 * --fmad=false (no contraction into fused multiply-adds, as OpenCL's FP_CONTRACT OFF),
 * correctly rounded division and square root, no flush of subnormals, -default-device
 * (dialect.h's plain static helpers are device functions), C++17.
 * report, when not NULL: ptxas's resources of each kernel (--ptxas-options=-v: registers,
 * stack frame, spills, shared memory), NVRTC's log as it prints it, malloc'd.
 * -1 with err set when libnvrtc cannot be opened or the source does not compile (the
 * start of NVRTC's log, on one line). */
int rci_nvrtc_compile(const char *src, int major, int minor, rc_dtype store, int fp64, void **image,
                      size_t *bytes, char **report, rc_error *err);
/* 1 when rci_nvrtc_compile builds the attention tile kernels for compute capability major:
 * sm_80 and later, where their shared memory is within the 48 KB of static arrays (gpu.h's
 * RCI_GPU_TILE_LOCAL_BYTES: before, their products are emulated through more of it) */
int rci_nvrtc_tiles(int major);

#endif
