/* spm_model.c - fuzzes rc_tokenizer_load on a SentencePiece tokenizer.model (protobuf:
 * pieces, scores, types, trainer and normalizer specs), then encodes and decodes with
 * what loaded. */
#include "fuzz_util.h"
#include "tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("tokenizer.model", data, size);
    if (path)
        tok_load_exercise(path);
    return 0;
}
