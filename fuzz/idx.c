/* idx.c - fuzzes rc_idx_read (IDX arrays, plain or gzip-compressed), whole and cut to 2
 * items, and rc_image_set_load with the input as the images and a fixed label file of 3. */
#include "fuzz_util.h"
#include "redco/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 9};
    const char *lpath = fuzz_write("labels-idx1-ubyte", labels, sizeof labels);
    const char *path = fuzz_write("images-idx3-ubyte", data, size);
    if (!path || !lpath)
        return 0;
    rc_error err = {0};
    rc_idx a;
    if (rc_idx_read(path, 0, &a, &err) == 0)
        rc_idx_free(&a);
    if (rc_idx_read(path, 2, &a, &err) == 0)
        rc_idx_free(&a);
    rc_image_set s;
    if (rc_image_set_load(&s, path, lpath, 0, &err) == 0)
        rc_image_set_free(&s);
    return 0;
}
