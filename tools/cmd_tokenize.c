/* cmd_tokenize.c - `redco tokenize`: text -> token ids, or ids -> text with --decode. */
#include "cli.h"
#include "redco/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *help =
    "usage: redco tokenize --tokenizer DIR [--decode] [--no-special] [--lines] [TEXT]\n"
    "\n"
    "Encodes TEXT (or all of standard input when TEXT is absent) and prints the token\n"
    "ids on one line, separated by spaces. DIR holds tokenizer.json, or vocab.json +\n"
    "merges.txt, or tokenizer.model; it may also name one of those files. A TEXT that\n"
    "begins with '-' goes after '--' (redco tokenize --tokenizer DIR -- -TEXT).\n"
    "\n"
    "  --decode      read token ids (TEXT or standard input, separated by white space)\n"
    "                and print their text exactly, with no newline added\n"
    "  --no-special  encoding: do not add the BOS/EOS tokens the tokenizer's family adds\n"
    "                (GPT-2 none, OPT </s> first, LLaMA <s> first, T5 </s> last);\n"
    "                decoding: drop BOS/EOS/pad and other special tokens\n"
    "  --lines       treat each input line on its own: one line of ids per line of text\n"
    "                (the newline itself is not encoded), or one line of text per line\n"
    "                of ids with --decode\n"
    "  --help        print this message\n";

enum { F_TOKENIZER = CLI_FLAG0, F_DECODE, F_NO_SPECIAL, F_LINES };

static const struct option flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"tokenizer", required_argument, NULL, F_TOKENIZER},
    {"decode", no_argument, NULL, F_DECODE},
    {"no-special", no_argument, NULL, F_NO_SPECIAL},
    {"lines", no_argument, NULL, F_LINES},
    {NULL, 0, NULL, 0},
};

typedef struct {
    const char *dir, *text;
    int decode, special, lines;
} options;

/* Reads one flag or the TEXT into o; 0, or 2 after a usage error. */
static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    options *o = user;
    switch (c) {
    case F_TOKENIZER: o->dir = a->value; return 0;
    case F_DECODE: o->decode = 1; return 0;
    case F_NO_SPECIAL: o->special = 0; return 0;
    case F_LINES: o->lines = 1; return 0;
    default: /* CLI_ARG */
        if (o->text)
            return cli_usage(cmd, "more than one TEXT argument (quote the text)");
        o->text = a->value;
        return 0;
    }
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
        cli_fail("tokenize", "%s", err.msg);
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
        cli_fail("tokenize", "out of memory");
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
            cli_fail("tokenize", "'%.*s' is not a token id", (int)(len > 40 ? 40 : len), s + start);
            free(ids);
            return -1;
        }
        if (count == cap) {
            int32_t *p = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!p) {
                free(ids);
                cli_fail("tokenize", "out of memory");
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
        cli_fail("tokenize", "%s", err.msg);
        return -1;
    }
    fwrite(text, 1, len, stdout);
    if (newline) fputc('\n', stdout);
    free(text);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    options o = {.special = 1};
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.dir)
        return cli_usage(cmd, "--tokenizer DIR is required");
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(o.dir, &err);
    if (!t)
        return cli_fail(cmd, "%s", err.msg);
    char *data = NULL;
    size_t len;
    if (o.text) {
        len = strlen(o.text);
    } else if (read_all(stdin, &data, &len)) {
        cli_fail(cmd, "cannot read standard input");
        rc_tokenizer_free(t);
        return 1;
    }
    const char *s = o.text ? o.text : data;
    if (!o.lines) {
        rc = o.decode ? decode_one(t, s, len, !o.special, 0) : encode_one(t, s, len, o.special);
    } else {
        size_t pos = 0;
        while (pos < len && !rc) {
            const char *nl = memchr(s + pos, '\n', len - pos);
            size_t n = nl ? (size_t)(nl - (s + pos)) : len - pos;
            rc = o.decode ? decode_one(t, s + pos, n, !o.special, 1) : encode_one(t, s + pos, n, o.special);
            pos += n + 1;
        }
    }
    free(data);
    rc_tokenizer_free(t);
    if (fflush(stdout) && !rc) {
        cli_fail(cmd, "cannot write standard output");
        rc = -1;
    }
    return rc ? 1 : 0;
}
