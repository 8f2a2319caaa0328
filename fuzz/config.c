/* config.c - fuzzes rc_config_load (config.json of every family). */
#include "fuzz_util.h"
#include "redco/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("config.json", data, size);
    if (!path)
        return 0;
    rc_error err = {0};
    rc_model_config c;
    rc_config_load(path, &c, &err);
    return 0;
}
