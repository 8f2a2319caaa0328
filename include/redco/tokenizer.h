/* redco/tokenizer.h - tokenizers loaded from a model or tokenizer directory.
 *
 * Byte-level BPE (GPT-2, GPT-J, OPT, RoBERTa) from tokenizer.json or vocab.json +
 * merges.txt; SentencePiece BPE with byte fallback (LLaMA) and unigram (T5) from
 * tokenizer.model or their tokenizer.json. Errors never abort: functions return -1 (or
 * NULL) and fill an rc_error naming the file, field or id at fault. */
#ifndef REDCO_TOKENIZER_H
#define REDCO_TOKENIZER_H

#include "redco.h"

typedef struct rc_tokenizer rc_tokenizer;

/* Loads from DIR (tokenizer.json, else vocab.json + merges.txt, else tokenizer.model)
 * or from a path naming one of those files. */
rc_tokenizer *rc_tokenizer_load(const char *path, rc_error *err);
void rc_tokenizer_free(rc_tokenizer *t);

/* UTF-8 text -> ids in a malloc'ed array the caller frees. add_special adds the BOS/EOS
 * tokens the family's own tokenizer adds by default (none for GPT-2; OPT's </s> prefix;
 * LLaMA's <s>; T5's </s> suffix). Invalid UTF-8 is an error. */
int rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, int64_t *n, rc_error *err);
/* ids -> malloc'ed NUL-terminated UTF-8 text; an id outside the vocabulary is an error.
 * skip_special drops BOS/EOS/pad/added special tokens. */
int rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special,
                        char **text, size_t *len, rc_error *err);

int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t);
/* special token ids, -1 when the tokenizer has none */
int32_t rc_tokenizer_bos(const rc_tokenizer *t);
int32_t rc_tokenizer_eos(const rc_tokenizer *t);
int32_t rc_tokenizer_pad(const rc_tokenizer *t);

#endif
