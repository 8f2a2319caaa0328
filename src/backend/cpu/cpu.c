/* cpu.c - the CPU back end's entry point: data movement first, then the arithmetic
 * kernels of the node's dtype; and the thread count shared by OpenMP and OpenBLAS. */
#include "internal.h"

#include <cblas.h>
#include <omp.h>

int rci_cpu_run(rc_tensor *node, rc_error *err)
{
    if (node->op == RC_OP_LEAF || node->op == RC_OP_RESHAPE || node->view_src)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: leaves and views have no kernel",
                            rc_op_name(node->op));
    int r = rci_cpu_kernel_move(node, err);
    if (r != 0)
        return r < 0 ? -1 : 0;
    switch (node->dtype) {
    case RC_F32:
        return rci_cpu_kernel_f32(node, err);
    case RC_F64:
        return rci_cpu_kernel_f64(node, err);
    default:
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s",
                            rc_op_name(node->op), rc_dtype_name(node->dtype));
    }
}

void rc_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int rc_get_threads(void)
{
    return omp_get_max_threads();
}
