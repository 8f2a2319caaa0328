/* npy.c - fuzzes rc_npy_open (magic, version, header dict, shape, dtype, data length) and
 * rc_dataset_open on the same .npy (ids bounded by nothing, then windows read). */
#include "fuzz_util.h"
#include "redco/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("tokens.npy", data, size);
    if (!path)
        return 0;
    rc_error err = {0};
    rc_npy a;
    if (rc_npy_open(&a, path, &err) == 0) {
        for (int64_t i = 0; i < a.n && i < 64; i++)
            rc_npy_get(&a, i);
        if (a.n > 0)
            rc_npy_get(&a, a.n - 1);
        rc_npy_close(&a);
    }
    rc_dataset *ds = rc_dataset_open(path, NULL, &err);
    if (ds) {
        int32_t in[8], tg[8];
        int64_t w = rc_dataset_windows(ds, 8);
        if (w > 0) {
            rc_dataset_window(ds, 8, 0, in, tg, &err);
            rc_dataset_window(ds, 8, w - 1, in, tg, &err);
        }
        rc_dataset_window(ds, 8, w, in, tg, &err);
        rc_dataset_read(ds, 0, 8, in, &err);
        rc_dataset_close(ds);
    }
    return 0;
}
