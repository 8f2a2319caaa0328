/* shared.c - what every backend's host code computes the same way: element strides of
 * contiguous and broadcast tensors, and AdamW's per-step constants. */
#include "internal.h"
#include "backend.h"

#include <math.h>
#include <string.h>

void rci_contiguous_strides(int nd, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

int rci_bcast_strides(const rc_tensor *t, int nd, const int64_t *shape, int64_t *st)
{
    int off = nd - t->ndim;
    if (off < 0)
        return -1;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int j = i - off;
        if (j < 0) {
            st[i] = 0;
            continue;
        }
        if (t->shape[j] == shape[i])
            st[i] = shape[i] == 1 ? 0 : s;
        else if (t->shape[j] == 1)
            st[i] = 0;
        else
            return -1;
        s *= t->shape[j];
    }
    return 0;
}

int rci_merge_axes(int nd, const int64_t *shape, int k, int64_t st[][RC_MAX_DIMS], int64_t *mshape,
                   int64_t mst[][RC_MAX_DIMS])
{
    int m = 0;
    memset(mshape, 0, RC_MAX_DIMS * sizeof *mshape);
    for (int j = 0; j < k; j++)
        memset(mst[j], 0, RC_MAX_DIMS * sizeof *mst[j]);
    for (int i = 0; i < nd; i++) {
        int64_t n = shape[i];
        if (n == 1)
            continue;
        int merge = m > 0;
        for (int j = 0; merge && j < k; j++)
            merge = mst[j][m - 1] == st[j][i] * n;
        if (merge)
            mshape[m - 1] *= n;
        else
            mshape[m++] = n;
        for (int j = 0; j < k; j++)
            mst[j][m - 1] = st[j][i];
    }
    if (m == 0)
        mshape[m++] = 1;
    return m;
}

rci_adam_consts rci_adam_setup(const rci_update *u)
{
    double t = (double)u->step;
    rci_adam_consts a = {(float)u->beta1, (float)u->beta2, (float)(1.0 - u->beta1),
                         (float)(1.0 - u->beta2), (float)u->eps,
                         (float)(u->lr / (1.0 - pow(u->beta1, t))), (float)sqrt(1.0 - pow(u->beta2, t))};
    return a;
}
