/* tokenizer.c - the public tokenizer API (redco/tokenizer.h): rc_tokenizer_load picks the
 * loader by the files it finds, rc_tokenizer_encode / _decode check their arguments and
 * hand the work to the pipeline, and the accessors read the loaded tokenizer. Everything
 * else lives in the files below, each a concern of its own.
 *
 * The files of src/text, top to bottom:
 *   tokenizer.c       the public API (this file)
 *   tok_train.c       the BPE trainer, rc_tokenizer_train_bpe (public API too, beside it)
 *   tok_load_hf.c     loading tokenizer.json, vocab.json + merges.txt
 *   tok_load_spm.c    loading SentencePiece .model files
 *   tok_encode.c      the encode pipeline: added tokens, then normalizer, pre-tokenizer, model
 *   tok_decode.c      the decoders: byte-level, SentencePiece, tokenizer.json Metaspace/fallback
 *   tok_bpe.c         model: Hugging Face BPE (byte-level or with byte fallback)
 *   tok_spm_bpe.c     model: SentencePiece BPE
 *   tok_unigram.c     model: unigram (SentencePiece's and tokenizer.json's)
 *   tok_normalize.c   normalizers: tokenizer.json's, SentencePiece's, the precompiled charsmap
 *   tok_pretok.c      pre-tokenizers: GPT-2 pattern and byte-level alphabet, Metaspace
 *   tok_files.c       reading files and JSON, paths, special tokens from the configs
 *   tok_vocab.c       the tokenizer object: token table, added tokens, finishing
 *   tok_tables.c      buffers, hash tables, the merge heap, the per-call work area
 *   unicode.c         UTF-8 and Unicode classes, grapheme clusters
 *
 * Which files each one calls. It is a DAG: a file calls only files below it, nothing calls
 * back up into this one, and the models, the loaders, and encode / decode do not call each
 * other. (Checked on the objects: for each .o of src/text, `nm -u` lists the rci_ symbols it
 * needs and `nm --defined-only` on the others says which .o defines them.)
 *   tokenizer.c     -> tok_load_hf tok_load_spm tok_encode tok_decode tok_files tok_vocab
 *                      tok_tables unicode
 *   tok_train.c     -> tok_pretok tok_tables unicode
 *   tok_load_hf.c   -> tok_files tok_unigram tok_normalize tok_pretok tok_vocab tok_tables unicode
 *   tok_load_spm.c  -> tok_files tok_unigram tok_normalize tok_pretok tok_vocab tok_tables unicode
 *   tok_encode.c    -> tok_bpe tok_spm_bpe tok_unigram tok_normalize tok_pretok tok_tables unicode
 *   tok_decode.c    -> tok_pretok tok_vocab tok_tables unicode
 *   tok_bpe.c       -> tok_tables unicode
 *   tok_spm_bpe.c   -> tok_pretok tok_vocab tok_tables unicode
 *   tok_unigram.c   -> tok_vocab tok_tables unicode
 *   tok_normalize.c -> tok_tables unicode
 *   tok_pretok.c    -> tok_tables unicode
 *   tok_files.c     -> tok_vocab tok_tables
 *   tok_vocab.c     -> tok_tables
 *   tok_tables.c, unicode.c -> nothing in src/text
 *
 * Headers follow the layers: unicode.h, tok_tables.h (containers), tok_vocab.h (the
 * tokenizer object), tok_files.h, tok_stages.h (normalizers, pre-tokenizers), tok_models.h
 * (the three models), tok_pipeline.h (loaders, encode, decode). */
#include "tok_pipeline.h"
#include "tok_files.h"
#include "unicode.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ------------------------------------------------------------------------------- */

/* A directory: its tokenizer.json, else vocab.json + merges.txt, else tokenizer.model or
 * spiece.model. A file: by its name, else by its first byte ('{' is JSON). */
rc_tokenizer *rc_tokenizer_load(const char *path, rc_error *err)
{
    char a[1100], b[1100];
    if (!path || !*path) {
        rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_load: no path");
        return NULL;
    }
    if (strlen(path) > 900) {
        rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_load: path too long");
        return NULL;
    }
    if (rci_tok_is_dir(path)) {
        rci_tok_path_join(a, sizeof a, path, "tokenizer.json");
        if (rci_tok_is_file(a)) return rci_tok_load_json(a, err);
        rci_tok_path_join(a, sizeof a, path, "vocab.json");
        rci_tok_path_join(b, sizeof b, path, "merges.txt");
        if (rci_tok_is_file(a) && rci_tok_is_file(b)) return rci_tok_load_vocab_merges(a, b, err);
        rci_tok_path_join(a, sizeof a, path, "tokenizer.model");
        if (rci_tok_is_file(a)) return rci_tok_load_spm(a, err);
        rci_tok_path_join(a, sizeof a, path, "spiece.model");
        if (rci_tok_is_file(a)) return rci_tok_load_spm(a, err);
        rc_error_set(err, RC_ERR_IO, "%s: no tokenizer.json, vocab.json + merges.txt or tokenizer.model in this directory", path);
        return NULL;
    }
    if (!rci_tok_is_file(path)) {
        rc_error_set(err, RC_ERR_IO, "%s: no such file or directory", path);
        return NULL;
    }
    char dir[1024];
    rci_tok_path_dir(dir, sizeof dir, path);
    if (rci_tok_ends_with(path, "vocab.json") || rci_tok_ends_with(path, "merges.txt")) {
        rci_tok_path_join(a, sizeof a, dir, "vocab.json");
        rci_tok_path_join(b, sizeof b, dir, "merges.txt");
        return rci_tok_load_vocab_merges(rci_tok_ends_with(path, "vocab.json") ? path : a,
                                         rci_tok_ends_with(path, "merges.txt") ? path : b, err);
    }
    if (rci_tok_ends_with(path, ".model")) return rci_tok_load_spm(path, err);
    if (rci_tok_ends_with(path, ".json")) return rci_tok_load_json(path, err);
    /* otherwise sniff: JSON starts with '{' */
    FILE *f = fopen(path, "rb");
    int c = f ? fgetc(f) : EOF;
    while (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = fgetc(f);
    if (f) fclose(f);
    return c == '{' ? rci_tok_load_json(path, err) : rci_tok_load_spm(path, err);
}

/* ---- encoding and decoding ---------------------------------------------------------------- */

int rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, int64_t *n, rc_error *err)
{
    if (!t || !ids || !n || (!text && len)) return rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_encode: NULL argument");
    *ids = NULL;
    *n = 0;
    size_t bad = rci_utf8_check(text, len);
    if (bad < len)
        return rc_error_set(err, RC_ERR_ARG, "%s: input is not valid UTF-8 (byte 0x%02X at offset %zu)", t->path,
                            (unsigned char)text[bad], bad);
    rci_tok_ids out = {0};
    if (rci_tok_encode(t, text, len, add_special, &out, err)) {
        free(out.p);
        return -1;
    }
    if (!out.p) out.p = malloc(sizeof(int32_t));
    if (!out.p) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    *ids = out.p;
    *n = out.len;
    return 0;
}

int rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special,
                        char **text, size_t *len, rc_error *err)
{
    if (!t || !text || (!ids && n > 0) || n < 0) return rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_decode: bad argument");
    *text = NULL;
    if (len) *len = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_tokens || t->tok_len[ids[i]] < 0)
            return rc_error_set(err, RC_ERR_INDEX, "%s: token id %d (position %lld) is outside the vocabulary of %lld ids",
                                t->path, (int)ids[i], (long long)i, (long long)t->n_tokens);
    rci_tok_buf out = {0};
    int rc = rci_buf_put(&out, "", 0);
    if (!rc) rc = rci_tok_decode(t, ids, n, skip_special, &out);
    if (rc) {
        free(out.p);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    *text = out.p;
    if (len) *len = out.len;
    return 0;
}

void rc_tokenizer_free(rc_tokenizer *t)
{
    rci_tok_free(t);
}

/* ---- accessors ------------------------------------------------------------------------------- */

int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t)
{
    return t ? t->n_tokens : 0;
}

int32_t rc_tokenizer_bos(const rc_tokenizer *t)
{
    return t ? t->bos : -1;
}

int32_t rc_tokenizer_eos(const rc_tokenizer *t)
{
    return t ? t->eos : -1;
}

int32_t rc_tokenizer_pad(const rc_tokenizer *t)
{
    return t ? t->pad : -1;
}
