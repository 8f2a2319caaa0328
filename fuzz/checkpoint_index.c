/* checkpoint_index.c - fuzzes rc_checkpoint_open on a sharded checkpoint: the input is
 * model.safetensors.index.json, then FUZZ_SEP, then the bytes of the shard
 * model-00001-of-00002.safetensors; model-00002-of-00002.safetensors is a fixed valid
 * file (one F32 tensor "b"). */
#include "fuzz_util.h"
#include "redco/safetensors.h"

#include <string.h>

static const char shard2[] = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        uint8_t buf[8 + sizeof shard2 + 8] = {0};
        uint64_t hn = sizeof shard2 - 1;
        for (int i = 0; i < 8; i++)
            buf[i] = (uint8_t)(hn >> (8 * i));
        memcpy(buf + 8, shard2, hn);
        if (!fuzz_write("model-00002-of-00002.safetensors", buf, 8 + hn + 8))
            return 0;
        ready = 1;
    }
    const uint8_t *index, *shard;
    size_t n_index, n_shard;
    fuzz_split(data, size, &index, &n_index, &shard, &n_shard);
    const char *path = fuzz_write("model.safetensors.index.json", index, n_index);
    if (!path || !fuzz_write("model-00001-of-00002.safetensors", shard, n_shard))
        return 0;
    rc_error err = {0};
    rc_checkpoint *ck = rc_checkpoint_open(path, &err);
    if (!ck)
        return 0;
    for (int k = 0; k < rc_checkpoint_count(ck); k++) {
        rc_safetensors *f;
        int i;
        const char *name = rc_checkpoint_name(ck, k);
        rc_checkpoint_entry(ck, k, &f, &i);
        if (name)
            rc_checkpoint_find(ck, name, NULL, NULL);
    }
    rc_checkpoint_find(ck, "transformer.h.0.ln_1.weight", NULL, NULL);
    rc_checkpoint_close(ck);
    return 0;
}
