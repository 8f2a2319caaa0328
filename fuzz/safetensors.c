/* safetensors.c - fuzzes rc_safetensors_open (header JSON, dtypes, shapes, data offsets)
 * and reads every tensor that opened, to f32 and bit for bit. */
#include "fuzz_util.h"
#include "redco/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.safetensors", data, size);
    if (!path)
        return 0;
    rc_error err = {0};
    rc_safetensors *f = rc_safetensors_open(path, &err);
    if (!f)
        return 0;
    for (int i = 0; i < rc_safetensors_count(f); i++) {
        const rc_st_tensor *t = rc_safetensors_info(f, i);
        if (t->numel > (1 << 20))
            continue;
        double *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(double));
        if (!buf)
            continue;
        rc_safetensors_read_f32(f, i, (float *)buf, t->numel, &err);
        rc_safetensors_read(f, i, RC_F64, buf, t->numel, &err);
        rc_safetensors_read(f, i, RC_I32, buf, t->numel, &err);
        free(buf);
    }
    for (int i = 0; i < rc_safetensors_metadata_count(f); i++) {
        const char *k, *v;
        rc_safetensors_metadata_at(f, i, &k, &v);
    }
    rc_safetensors_close(f);
    return 0;
}
