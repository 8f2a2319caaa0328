/* The double-precision build of kernels_real.c (RC_REAL=double, set by CMake). */
#include "kernels_real.c"
