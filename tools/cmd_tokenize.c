/* cmd_tokenize.c - `redco tokenize`: text -> token ids, or ids -> text with --decode. */
#include "redco.h"
#include "redco/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *f)
{
    fprintf(f,
            "usage: redco tokenize --tokenizer DIR [--decode] [--no-special] [--lines] [TEXT]\n"
            "\n"
            "Encodes TEXT (or all of standard input when TEXT is absent) and prints the token\n"
            "ids on one line, separated by spaces. DIR holds tokenizer.json, or vocab.json +\n"
            "merges.txt, or tokenizer.model; it may also name one of those files.\n"
            "\n"
            "  --decode      read token ids (TEXT or standard input, separated by white space)\n"
            "                and print their text exactly, with no newline added\n"
            "  --no-special  encoding: do not add the BOS/EOS tokens the tokenizer's family adds\n"
            "                (GPT-2 none, OPT </s> first, LLaMA <s> first, T5 </s> last);\n"
            "                decoding: drop BOS/EOS/pad and other special tokens\n"
            "  --lines       treat each input line on its own: one line of ids per line of text\n"
            "                (the newline itself is not encoded), or one line of text per line\n"
            "                of ids with --decode\n"
            "  --help        print this message\n");
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

static int read_all(FILE *f, char **data, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    if (!p) return -1;
    for (;;) {
        if (n == cap) {
            char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                return -1;
            }
            p = q;
            cap *= 2;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(p);
        return -1;
    }
    *data = p;
    *len = n;
    return 0;
}

static int encode_one(const rc_tokenizer *t, const char *s, size_t n, int add_special)
{
    int32_t *ids;
    int64_t count;
    rc_error err = {0};
    if (rc_tokenizer_encode(t, s, n, add_special, &ids, &count, &err)) {
        fprintf(stderr, "redco tokenize: %s\n", err.msg);
        return -1;
    }
    for (int64_t i = 0; i < count; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

/* Parses the ids in s[0..n) (white space separated) and prints their text. */
static int decode_one(const rc_tokenizer *t, const char *s, size_t n, int skip_special, int newline)
{
    int64_t count = 0, cap = 256;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "redco tokenize: out of memory\n");
        return -1;
    }
    size_t i = 0;
    while (i < n) {
        while (i < n && is_space(s[i])) i++;
        if (i == n) break;
        size_t start = i;
        while (i < n && !is_space(s[i])) i++;
        char word[32];
        size_t len = i - start;
        char *end = NULL;
        long v = 0;
        if (len < sizeof word) {
            memcpy(word, s + start, len);
            word[len] = 0;
            errno = 0;
            v = strtol(word, &end, 10);
        }
        if (len >= sizeof word || end != word + len || errno || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "redco tokenize: '%.*s' is not a token id\n", (int)(len > 40 ? 40 : len), s + start);
            free(ids);
            return -1;
        }
        if (count == cap) {
            int32_t *p = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!p) {
                free(ids);
                fprintf(stderr, "redco tokenize: out of memory\n");
                return -1;
            }
            ids = p;
        }
        ids[count++] = (int32_t)v;
    }
    char *text;
    size_t len;
    rc_error err = {0};
    int rc = rc_tokenizer_decode(t, ids, count, skip_special, &text, &len, &err);
    free(ids);
    if (rc) {
        fprintf(stderr, "redco tokenize: %s\n", err.msg);
        return -1;
    }
    fwrite(text, 1, len, stdout);
    if (newline) fputc('\n', stdout);
    free(text);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL, *text = NULL;
    int decode = 0, special = 1, lines = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "redco tokenize: --tokenizer needs a directory\n");
                return 2;
            }
            dir = argv[++i];
        } else if (!strncmp(a, "--tokenizer=", 12)) {
            dir = a + 12;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (!strcmp(a, "--no-special")) {
            special = 0;
        } else if (!strcmp(a, "--lines")) {
            lines = 1;
        } else if (a[0] == '-' && a[1] == '-' && a[2]) {
            fprintf(stderr, "redco tokenize: unknown option '%s' (see 'redco tokenize --help')\n", a);
            return 2;
        } else if (text) {
            fprintf(stderr, "redco tokenize: more than one TEXT argument (quote the text)\n");
            return 2;
        } else {
            text = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "redco tokenize: --tokenizer DIR is required (see 'redco tokenize --help')\n");
        return 2;
    }
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(dir, &err);
    if (!t) {
        fprintf(stderr, "redco tokenize: %s\n", err.msg);
        return 1;
    }
    char *data = NULL;
    size_t len;
    if (text) {
        len = strlen(text);
    } else if (read_all(stdin, &data, &len)) {
        fprintf(stderr, "redco tokenize: cannot read standard input\n");
        rc_tokenizer_free(t);
        return 1;
    }
    const char *s = text ? text : data;
    int rc = 0;
    if (!lines) {
        rc = decode ? decode_one(t, s, len, !special, 0) : encode_one(t, s, len, special);
    } else {
        size_t pos = 0;
        while (pos < len && !rc) {
            const char *nl = memchr(s + pos, '\n', len - pos);
            size_t n = nl ? (size_t)(nl - (s + pos)) : len - pos;
            rc = decode ? decode_one(t, s + pos, n, !special, 1) : encode_one(t, s + pos, n, special);
            pos += n + 1;
        }
    }
    free(data);
    rc_tokenizer_free(t);
    if (fflush(stdout) && !rc) {
        fprintf(stderr, "redco tokenize: cannot write standard output\n");
        rc = -1;
    }
    return rc ? 1 : 0;
}
