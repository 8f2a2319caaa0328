/* dataset.c - fuzzes rc_dataset_open on text datasets: the first byte of the input picks
 * .txt (even) or .jsonl (odd; {"text"}, {"prompt","completion"} or {"source","target"}
 * lines), the rest is the file. Tokenized with GPT-2's vocab.json + merges.txt from the
 * repository's data/ (loaded once), no cache; then windows and examples are read. */
#include "fuzz_util.h"
#include "redco/data.h"
#include "redco/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

static rc_tokenizer *tok;

static void tok_free(void)
{
    rc_tokenizer_free(tok);
}

static void read_back(const rc_dataset *ds)
{
    rc_error err = {0};
    int32_t in[16], tg[16];
    int64_t w = rc_dataset_windows(ds, 16);
    if (w > 0) {
        rc_dataset_window(ds, 16, 0, in, tg, &err);
        rc_dataset_window(ds, 16, w - 1, in, tg, &err);
    }
    int64_t n = rc_dataset_examples(ds);
    for (int64_t i = 0; i < n && i < 16; i++) {
        rc_data_example ex;
        if (rc_dataset_example(ds, i, &ex, &err) == 0 && ex.loss_mask)
            rc_data_example_pack(&ex, 16, 0, in, tg);
    }
    rc_data_example ex;
    rc_dataset_example(ds, n, &ex, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rc_error err = {0};
    if (!tok) {
        tok = rc_tokenizer_load(REDCO_DATA_DIR "/gpt2", &err);
        if (!tok) {
            fprintf(stderr, "fuzz dataset: %s\n", err.msg);
            abort();
        }
        atexit(tok_free);
    }
    if (size < 1)
        return 0;
    const char *name = data[0] % 2 ? "data.jsonl" : "data.txt";
    const char *path = fuzz_write(name, data + 1, size - 1);
    if (!path)
        return 0;
    rc_dataset_opts o = {.tokenizer = tok, .no_cache = 1, .chunk_bytes = 64};
    rc_dataset *ds = rc_dataset_open(path, &o, &err);
    if (ds) {
        read_back(ds);
        rc_dataset_close(ds);
    }
    return 0;
}
