/* tok_common.h - what the tokenizer harnesses do with what they wrote: load it, and when it
 * loaded, encode a short text and decode the ids back, so the tables the loader built are
 * used too. */
#ifndef REDCO_FUZZ_TOK_COMMON_H
#define REDCO_FUZZ_TOK_COMMON_H

#include "redco/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static void tok_exercise(rc_tokenizer *t)
{
    static const char *text = "Hello world, it's 2024! caf\xc3\xa9 \xe2\x96\x81x  \n\tend";
    rc_error err = {0};
    int32_t *ids = NULL;
    int64_t n = 0;
    for (int special = 0; special < 2; special++) {
        if (rc_tokenizer_encode(t, text, strlen(text), special, &ids, &n, &err) == 0) {
            char *back = NULL;
            size_t len = 0;
            if (rc_tokenizer_decode(t, ids, n, special, &back, &len, &err) == 0)
                free(back);
            free(ids);
            ids = NULL;
        }
    }
    /* every id of a small vocabulary, and one past it (an error) */
    int64_t v = rc_tokenizer_vocab_size(t);
    if (v > 0 && v <= 4096) {
        int32_t *all = malloc((size_t)(v + 1) * sizeof *all);
        if (all) {
            for (int64_t i = 0; i <= v; i++)
                all[i] = (int32_t)i;
            char *back = NULL;
            if (rc_tokenizer_decode(t, all, v, 0, &back, NULL, &err) == 0)
                free(back);
            if (rc_tokenizer_decode(t, all, v + 1, 1, &back, NULL, &err) == 0)
                free(back);
            free(all);
        }
    }
}

/* Loads the tokenizer at path (a file, or a directory of files) and exercises it; a load
 * that fails is the expected outcome of most inputs. */
static void tok_load_exercise(const char *path)
{
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(path, &err);
    if (t) {
        tok_exercise(t);
        rc_tokenizer_free(t);
    }
}

#endif
