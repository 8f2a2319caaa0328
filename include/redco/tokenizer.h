/* redco/tokenizer.h - tokenizers loaded from a model or tokenizer directory.
 *
 * Byte-level BPE (GPT-2, GPT-J, OPT, RoBERTa) from tokenizer.json or vocab.json +
 * merges.txt; SentencePiece BPE with byte fallback (LLaMA) and unigram (T5) from
 * tokenizer.model or their tokenizer.json. Errors never abort: functions return -1 (or
 * NULL) and fill an rc_error naming the file, field or id at fault.
 *
 * What each form follows, so that ids equal the reference's:
 * - tokenizer.json: Hugging Face tokenizers (added tokens matched first, leftmost-longest,
 *   with lstrip/rstrip/single_word; normalizers Sequence, Prepend, Replace, Strip,
 *   Precompiled; pre-tokenizers ByteLevel with the GPT-2 pattern, Metaspace; models BPE
 *   (byte_fallback, unk_token, fuse_unk) and Unigram; post-processors TemplateProcessing,
 *   RobertaProcessing, BertProcessing, ByteLevel, Sequence; decoders ByteLevel, Metaspace,
 *   Replace/ByteFallback/Fuse/Strip). Added tokens are matched in the raw text even when
 *   marked "normalized". Other components are refused with RC_ERR_UNSUPPORTED.
 * - vocab.json + merges.txt: the GPT-2 family's slow tokenizer (byte-level, no prefix
 *   space); <|endoftext|>, <s>, </s>, <pad>, <unk>, <mask> when in the vocabulary are
 *   special tokens that are never split.
 * - tokenizer.model: the sentencepiece library (its normalizer with the precompiled
 *   charsmap, add_dummy_prefix, remove_extra_whitespaces; BPE by piece score; unigram
 *   Viterbi with float sums; byte fallback; runs of unknowns as one <unk>). Control
 *   pieces such as "<s>" written in the text are plain text, as in sentencepiece.
 *
 * BOS/EOS/pad ids come from tokenizer_config.json / special_tokens_map.json beside the
 * file when there is one; else from the .model's trainer_spec; else from the
 * post-processor and the usual spellings (<s>, </s>, <|endoftext|>, <pad>, ...).
 *
 * Encoding is thread-safe: a tokenizer is read-only after loading. */
#ifndef REDCO_TOKENIZER_H
#define REDCO_TOKENIZER_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rc_tokenizer rc_tokenizer;

/* Loads from DIR (tokenizer.json, else vocab.json + merges.txt, else tokenizer.model or
 * spiece.model) or from a path naming one of those files. */
rc_tokenizer *rc_tokenizer_load(const char *path, rc_error *err);
void rc_tokenizer_free(rc_tokenizer *t);

/* UTF-8 text -> ids in a malloc'ed array the caller frees (*n may be 0; *ids is then
 * still a valid pointer to free). Invalid UTF-8 is an error naming the byte offset.
 *
 * add_special adds the BOS/EOS tokens the family's own tokenizer adds by default:
 * - tokenizer.json: what its post_processor adds (GPT-2: none; OPT: </s> first; LLaMA:
 *   <s> first; T5: </s> last; RoBERTa: <s> ... </s>);
 * - vocab.json + merges.txt: none, unless tokenizer_config.json sets add_bos_token /
 *   add_eos_token;
 * - tokenizer.model: add_bos_token / add_eos_token of tokenizer_config.json when present,
 *   otherwise LLaMA's rule for BPE models (<s> first) and T5's for unigram models (</s>
 *   last). (sentencepiece itself adds nothing unless asked.) */
int rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, int64_t *n, rc_error *err);
/* ids -> malloc'ed NUL-terminated UTF-8 text (*len bytes, len may be NULL); an id outside
 * the vocabulary is an error. skip_special drops BOS/EOS/pad and added special tokens.
 * Byte-level tokenizers give back the exact text encoded (a cut multi-byte character
 * reads U+FFFD). SentencePiece-style decoding joins the pieces, turns U+2581 into spaces,
 * drops the space the dummy prefix added, reassembles <0xXX> byte pieces; a .model's
 * control pieces decode to nothing and <unk> to " \u2047 " as in sentencepiece, while a
 * tokenizer.json's decode as tokenizers' decoders do. */
int rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special,
                        char **text, size_t *len, rc_error *err);

/* Number of ids (the model's vocabulary and the added tokens: the largest id + 1). */
int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t);
/* special token ids, -1 when the tokenizer has none */
int32_t rc_tokenizer_bos(const rc_tokenizer *t);
int32_t rc_tokenizer_eos(const rc_tokenizer *t);
int32_t rc_tokenizer_pad(const rc_tokenizer *t);

/* Training a byte-level BPE vocabulary (GPT-2 style) from text. */
typedef struct {
    int64_t vocab_size;      /* ids in all: 256 bytes + merges + <|endoftext|>; >= 257 */
    int64_t min_frequency;   /* pairs seen fewer times are never merged (0: 2) */
} rc_bpe_train_opts;

/* Cuts UTF-8 text into words by the GPT-2 pattern, starts every word as its bytes, and
 * repeatedly merges the adjacent pair seen most often over all words (ties: the pair of
 * smaller ids, left id first) until vocab_size ids exist or no pair is seen min_frequency
 * times. Writes DIR/vocab.json and DIR/merges.txt (DIR is created when missing), which
 * rc_tokenizer_load reads: ids 0-255 are the bytes by value, then the merges in the order
 * learned (a merge spelling an existing token reuses its id), then <|endoftext|> (BOS and
 * EOS). Returns the number of ids written (<= vocab_size), or -1 with err naming the
 * option, the byte offset of invalid UTF-8 or the file that could not be written. */
int64_t rc_tokenizer_train_bpe(const char *text, size_t len, const rc_bpe_train_opts *opts,
                               const char *dir, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
