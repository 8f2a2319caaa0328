/* shared.c - what every backend's host code computes the same way: the axes of a strided
 * box merged, the product of a few rows that reads its weights directly, and AdamW's
 * per-step constants. */
#include "internal.h"
#include "backend.h"

#include <math.h>
#include <string.h>

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

int rci_matmul_few_rows(const rci_matmul_dims *d)
{
    return d->bb == 1 && (d->batch == 1 || !d->ta) && d->batch * d->m <= RCI_MATMUL_FEW_ROWS;
}

int rci_matmul_layout(const rci_matmul_dims *d, int64_t *ld, int64_t *st)
{
    int64_t m = d->m, n = d->n, k = d->k;
    ld[0] = d->lda ? d->lda : d->ta ? m : k;
    ld[1] = d->ldb ? d->ldb : d->tb ? k : n;
    ld[2] = d->ldc ? d->ldc : n;
    st[0] = d->ba == 1 ? 0 : d->sa ? d->sa : m * k;
    st[1] = d->bb == 1 ? 0 : d->sb ? d->sb : k * n;
    st[2] = d->sc ? d->sc : m * n;
    return d->lda || d->ldb || d->ldc || d->sa || d->sb || d->sc;
}

rci_adam_consts rci_adam_setup(const rci_update *u)
{
    double t = (double)u->step;
    rci_adam_consts a = {(float)u->beta1, (float)u->beta2, (float)(1.0 - u->beta1),
                         (float)(1.0 - u->beta2), (float)u->eps,
                         (float)(u->lr / (1.0 - pow(u->beta1, t))), (float)sqrt(1.0 - pow(u->beta2, t))};
    return a;
}
