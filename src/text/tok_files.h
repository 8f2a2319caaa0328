/* tok_files.h - the files around a tokenizer (tok_files.c): whole-file and JSON reads with
 * messages that name the file, path helpers, and the special-token configs
 * (tokenizer_config.json, special_tokens_map.json) that sit beside a tokenizer. */
#ifndef REDCO_TEXT_TOK_FILES_H
#define REDCO_TEXT_TOK_FILES_H

#include "tok_vocab.h"

#include <jansson.h>
#include <stddef.h>

/* The whole file into *data (NUL-terminated, *len bytes, free() it). */
int rci_tok_read_file(const char *path, char **data, size_t *len, rc_error *err);
/* The JSON document at path, duplicate keys rejected; NULL (err set) when it cannot be
 * read or parsed. flags: jansson's decoding flags. */
json_t *rci_tok_read_json(const char *path, size_t flags, rc_error *err);
int rci_tok_is_dir(const char *path);
int rci_tok_is_file(const char *path);
/* dir + "/" + name into out (no doubled '/'). */
void rci_tok_path_join(char *out, size_t size, const char *dir, const char *name);
/* The directory of path into out ("." when there is none). */
void rci_tok_path_dir(char *out, size_t size, const char *path);
int rci_tok_ends_with(const char *s, const char *suffix);
/* Copies the tokenizer files of from_dir that exist (tokenizer.json, vocab.json, merges.txt,
 * tokenizer.model, tokenizer_config.json, special_tokens_map.json) into to_dir: a model
 * directory or checkpoint carries its tokenizer. */
int rci_tok_copy_files(const char *from_dir, const char *to_dir, rc_error *err);

/* bos/eos/pad from tokenizer_config.json / special_tokens_map.json in dir (when one
 * exists it decides: tokens it does not name are -1); add_bos_token / add_eos_token into
 * add_bos / add_eos (-1 when unset). Returns 1 when a config was read, 0 when there is
 * none, -1 (err set) when one is not a JSON object. */
int rci_tok_read_configs(rc_tokenizer *t, const char *dir, int *add_bos, int *add_eos, rc_error *err);
/* Without configs: bos/eos/pad from the post-processor's tokens, then well-known spellings. */
void rci_tok_guess_specials(rc_tokenizer *t);

#endif
