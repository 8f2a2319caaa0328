/* tok_files.c - reading the files a tokenizer comes from: whole files and JSON documents
 * (with messages naming the file, line and column), path helpers for finding the files of
 * a model directory, and the special tokens: bos/eos/pad and add_bos/add_eos from the
 * tokenizer_config.json / special_tokens_map.json beside the tokenizer, or, without them,
 * guessed from the post-processor and well-known spellings; and copying a tokenizer's
 * files into a model directory. Calls tok_vocab.c (to look tokens up) and tok_tables.c;
 * see tokenizer.c for the layering. */
#include "tok_files.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- files ---------------------------------------------------------------------------- */

int rci_tok_read_file(const char *path, char **data, size_t *len, rc_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return rc_error_set(err, RC_ERR_IO, "%s: cannot open", path);
    rci_tok_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (rci_buf_put(&b, chunk, got)) {
            fclose(f);
            free(b.p);
            return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        return rc_error_set(err, RC_ERR_IO, "%s: read error", path);
    }
    if (!b.p && rci_buf_put(&b, "", 0)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    *data = b.p;
    *len = b.len;
    return 0;
}

int rci_tok_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int rci_tok_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void rci_tok_path_join(char *out, size_t size, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    snprintf(out, size, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

void rci_tok_path_dir(char *out, size_t size, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, size, ".");
    else
        snprintf(out, size, "%.*s", (int)(slash - path + (slash == path)), path);
}

int rci_tok_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* flags: jansson's decoding flags (configs read integers as reals: they hold numbers
 * such as model_max_length = 1e30 that overflow a json_int_t) */
/* from copied to to; an absent from is not an error (not every tokenizer has every file) */
static int copy_file(const char *from, const char *to, rc_error *err)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return 0;
    FILE *out = fopen(to, "wb");
    int rc = out ? 0 : rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", to, strerror(errno));
    char buf[65536];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", to, strerror(errno));
    fclose(in);
    if (out && fclose(out) && !rc)
        rc = rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", to, strerror(errno));
    return rc;
}

int rci_tok_copy_files(const char *from_dir, const char *to_dir, rc_error *err)
{
    static const char *const files[] = {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model",
                                        "tokenizer_config.json", "special_tokens_map.json"};
    char from[4200], to[4200];
    for (size_t i = 0; from_dir && i < sizeof files / sizeof *files; i++) {
        if (snprintf(from, sizeof from, "%s/%s", from_dir, files[i]) >= (int)sizeof from ||
            snprintf(to, sizeof to, "%s/%s", to_dir, files[i]) >= (int)sizeof to)
            return rc_error_set(err, RC_ERR_ARG, "%s: path too long", to_dir);
        if (copy_file(from, to, err))
            return -1;
    }
    return 0;
}

json_t *rci_tok_read_json(const char *path, size_t flags, rc_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, flags | JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (!rci_tok_is_file(path))
            rc_error_set(err, RC_ERR_IO, "%s: cannot open", path);
        else
            rc_error_set(err, RC_ERR_FORMAT, "%s: bad JSON at line %d, column %d: %s", path, je.line, je.column, je.text);
    }
    return j;
}

/* ---- tokenizer_config.json / special_tokens_map.json -------------------------------------- */

static const char *config_token_text(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* Reads bos/eos/pad from the configs beside the tokenizer, when there are any. Returns 1
 * when a config named them, 0 when there is none. add_bos / add_eos: -1 when unset. */
int rci_tok_read_configs(rc_tokenizer *t, const char *dir, int *add_bos, int *add_eos, rc_error *err)
{
    static const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    static const char *keys[3] = {"bos_token", "eos_token", "pad_token"};
    int32_t *dst[3] = {&t->bos, &t->eos, &t->pad};
    int found = 0, set[3] = {0, 0, 0};
    *add_bos = *add_eos = -1;
    for (int f = 0; f < 2; f++) {
        char p[1100];
        rci_tok_path_join(p, sizeof p, dir, names[f]);
        if (!rci_tok_is_file(p)) continue;
        json_t *cfg = rci_tok_read_json(p, JSON_DECODE_INT_AS_REAL, err);
        if (!cfg) return -1;
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return rc_error_set(err, RC_ERR_FORMAT, "%s: the top level is not a JSON object", p);
        }
        found = 1;
        for (int k = 0; k < 3; k++) {
            const char *s = config_token_text(cfg, keys[k]);
            if (s && !set[k]) {
                *dst[k] = rci_tok_find(t, s);
                set[k] = 1;
            }
        }
        if (f == 0) {
            json_t *b = json_object_get(cfg, "add_bos_token"), *e = json_object_get(cfg, "add_eos_token");
            if (json_is_boolean(b)) *add_bos = json_is_true(b);
            if (json_is_boolean(e)) *add_eos = json_is_true(e);
        }
        json_decref(cfg);
    }
    if (found)
        for (int k = 0; k < 3; k++)
            if (!set[k]) *dst[k] = -1;
    return found;
}

/* Without configs: the post-processor's tokens, then well-known spellings. */
void rci_tok_guess_specials(rc_tokenizer *t)
{
    static const char *bos[] = {"<s>", "<|endoftext|>", "<|begin_of_text|>", "[CLS]", NULL};
    static const char *eos[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "[SEP]", NULL};
    static const char *pad[] = {"<pad>", "[PAD]", "<|padding|>", NULL};
    if (t->bos < 0 && t->n_prefix) t->bos = t->prefix_ids[0];
    if (t->eos < 0 && t->n_suffix) t->eos = t->suffix_ids[t->n_suffix - 1];
    for (int i = 0; t->bos < 0 && bos[i]; i++) t->bos = rci_tok_find(t, bos[i]);
    for (int i = 0; t->eos < 0 && eos[i]; i++) t->eos = rci_tok_find(t, eos[i]);
    for (int i = 0; t->pad < 0 && pad[i]; i++) t->pad = rci_tok_find(t, pad[i]);
}
