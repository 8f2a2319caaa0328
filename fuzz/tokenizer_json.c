/* tokenizer_json.c - fuzzes rc_tokenizer_load on a tokenizer.json (BPE, WordPiece,
 * Unigram models; normalizers, pre-tokenizers, post-processors, added tokens), then
 * encodes and decodes with what loaded. */
#include "fuzz_util.h"
#include "tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("tokenizer.json", data, size);
    if (path)
        tok_load_exercise(path);
    return 0;
}
