/* bpe_files.c - fuzzes rc_tokenizer_load on a GPT-2 style directory: the input is
 * vocab.json, then FUZZ_SEP, then merges.txt. Encodes and decodes with what loaded. */
#include "fuzz_util.h"
#include "tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *vocab, *merges;
    size_t n_vocab, n_merges;
    fuzz_split(data, size, &vocab, &n_vocab, &merges, &n_merges);
    if (fuzz_write("vocab.json", vocab, n_vocab) && fuzz_write("merges.txt", merges, n_merges))
        tok_load_exercise(fuzz_dir());
    return 0;
}
