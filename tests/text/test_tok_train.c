/* test_tok_train.c - the byte-level BPE trainer: merges on tiny corpora equal the ones
 * worked out by hand, the files it writes load and round-trip text, and errors name what
 * is wrong. */
#include "check.h"
#include "redco/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

/* merges.txt of dir equals want (the lines after #version, joined by '\n') */
static void check_merges(const char *dir, const char *want)
{
    char path[512];
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    size_t n;
    char *got = check_read_file(path, &n);
    CHECKF(got != NULL, "%s not written", path);
    if (!got) return;
    const char *body = strchr(got, '\n');
    CHECKF(!strncmp(got, "#version: 0.2\n", 14), "first line of %s", path);
    CHECKF(body && !strcmp(body + 1, want), "%s:\n%s\nwant:\n%s", path, body ? body + 1 : "", want);
    free(got);
}

/* encode text with the tokenizer in dir: ids must equal want (n_want of them), and
 * decoding must give text back */
static void check_encode(const char *dir, const char *text, const int32_t *want, int64_t n_want)
{
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(dir, &err);
    CHECKF(t != NULL, "load %s: %s", dir, err.msg);
    if (!t) return;
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECKF(rc_tokenizer_encode(t, text, strlen(text), 1, &ids, &n, &err) == 0, "%s", err.msg);
    int same = n == n_want;
    for (int64_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECKF(same, "'%s' -> %lld ids, first %d", text, (long long)n, n ? ids[0] : -1);
    char *back = NULL;
    size_t len = 0;
    CHECKF(rc_tokenizer_decode(t, ids, n, 0, &back, &len, &err) == 0, "%s", err.msg);
    CHECKF(back && len == strlen(text) && !memcmp(back, text, len), "decoded '%s'", back ? back : "");
    free(back);
    free(ids);
    rc_tokenizer_free(t);
}

/* "aaab aab ab" is the words "aaab", " aab", " ab" (GPT-2 pattern), once each.
 * Pairs: (a,a) 2+1 = 3, (a,b) 3, (' ',a) 2. Tie at 3: (97,97) < (97,98), so "a a" -> 256.
 * Words: [aa a b] [' ' aa b] [' ' a b]: (a,b) 2, every other pair 1, so "a b" -> 257.
 * Words: [aa ab] [' ' aa b] [' ' ab]: every pair once, below min_frequency 2: stop. */
static void test_by_hand(void)
{
    const char *text = "aaab aab ab";
    char dir[300];
    rc_error err = {0};
    snprintf(dir, sizeof dir, "%s/hand", tmp);
    rc_bpe_train_opts o = {.vocab_size = 1000, .min_frequency = 2};
    int64_t n = rc_tokenizer_train_bpe(text, strlen(text), &o, dir, &err);
    CHECKF(n == 259, "%lld ids (256 + 2 merges + <|endoftext|>): %s", (long long)n, err.msg);
    check_merges(dir, "a a\na b\n");
    /* "aaab" -> [aa ab], " aab" -> [' ' aa b], " ab" -> [' ' ab] */
    check_encode(dir, text, (int32_t[]){256, 257, 32, 256, 98, 32, 257}, 7);
    rc_tokenizer *t = rc_tokenizer_load(dir, &err);
    CHECKF(t && rc_tokenizer_vocab_size(t) == 259 && rc_tokenizer_eos(t) == 258 && rc_tokenizer_bos(t) == 258,
           "<|endoftext|> is id 258, BOS and EOS");
    rc_tokenizer_free(t);
    check_encode(dir, "ab<|endoftext|>", (int32_t[]){257, 258}, 2);

    /* min_frequency 1 goes on, every pair once, the smallest ids first:
     * (' ',aa)=(32,256) -> 258 "Ġaa"; words [aa ab] [Ġaa b] [' ' ab]
     * (' ',ab)=(32,257) -> 259 "Ġab"; words [aa ab] [Ġaa b] [Ġab]
     * (aa,ab)=(256,257) -> 260 "aaab"; then (Ġaa,b)=(258,98) -> 261 "Ġaab"; no pair left */
    snprintf(dir, sizeof dir, "%s/hand1", tmp);
    o.min_frequency = 1;
    n = rc_tokenizer_train_bpe(text, strlen(text), &o, dir, &err);
    CHECKF(n == 263, "%lld ids: %s", (long long)n, err.msg);
    check_merges(dir, "a a\na b\n\xC4\xA0 aa\n\xC4\xA0 ab\naa ab\n\xC4\xA0" "aa b\n");
    check_encode(dir, text, (int32_t[]){260, 261, 259}, 3);

    /* the vocabulary size stops it: 258 ids = 256 bytes + 1 merge + <|endoftext|> */
    snprintf(dir, sizeof dir, "%s/hand2", tmp);
    o.vocab_size = 258;
    n = rc_tokenizer_train_bpe(text, strlen(text), &o, dir, &err);
    CHECKF(n == 258, "%lld ids: %s", (long long)n, err.msg);
    check_merges(dir, "a a\n");

    /* bytes outside ASCII and the byte-level alphabet: "é" is C3 A9 -> "Ã" "©"; newlines
     * are Ċ (U+010A). "é\né\né" -> words "é", "\n", "é", ... : (C3,A9) 3 -> 256 */
    snprintf(dir, sizeof dir, "%s/hand3", tmp);
    o.vocab_size = 1000;
    o.min_frequency = 2;
    const char *accents = "\xC3\xA9\n\xC3\xA9\n\xC3\xA9";
    n = rc_tokenizer_train_bpe(accents, strlen(accents), &o, dir, &err);
    CHECKF(n == 258, "%lld ids: %s", (long long)n, err.msg);
    check_merges(dir, "\xC3\x83 \xC2\xA9\n");
    check_encode(dir, accents, (int32_t[]){256, 10, 256, 10, 256}, 5);
}

/* a real text: the trained tokenizer round-trips it exactly, compresses it, and
 * uses the whole vocabulary's ids only */
static void test_book(void)
{
    char path[1024], dir[300];
    snprintf(path, sizeof path, "%s/moby_dick.txt", REDCO_DATA_DIR);
    size_t len;
    char *text = check_read_file(path, &len);
    CHECKF(text != NULL, "%s is missing", path);
    if (!text) return;
    if (len > 300000) len = 300000;
    while (len && ((unsigned char)text[len] & 0xC0) == 0x80) len--;   /* whole characters */
    snprintf(dir, sizeof dir, "%s/book", tmp);
    rc_error err = {0};
    rc_bpe_train_opts o = {.vocab_size = 1024};
    int64_t n_ids = rc_tokenizer_train_bpe(text, len, &o, dir, &err);
    CHECKF(n_ids == 1024, "%lld ids: %s", (long long)n_ids, err.msg);
    rc_tokenizer *t = rc_tokenizer_load(dir, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        int32_t *ids = NULL;
        int64_t n = 0;
        CHECKF(rc_tokenizer_encode(t, text, len, 0, &ids, &n, &err) == 0, "%s", err.msg);
        int32_t max = -1;
        for (int64_t i = 0; i < n; i++)
            if (ids[i] > max) max = ids[i];
        /* 1024 ids make English about 3 bytes a token; bytes alone would be 1 */
        CHECKF(n > 0 && (double)len / (double)n > 2.5, "%zu bytes -> %lld tokens", len, (long long)n);
        CHECKF(max <= 1022, "largest id %d (1023 is <|endoftext|>)", max);
        char *back = NULL;
        size_t blen = 0;
        CHECKF(rc_tokenizer_decode(t, ids, n, 0, &back, &blen, &err) == 0, "%s", err.msg);
        CHECKF(back && blen == len && !memcmp(back, text, len), "round trip of %zu bytes gave %zu", len, blen);
        free(back);
        free(ids);
        rc_tokenizer_free(t);
    }
    free(text);
}

static void test_errors(void)
{
    rc_error err = {0};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/err", tmp);
    rc_bpe_train_opts o = {.vocab_size = 256};
    CHECK(rc_tokenizer_train_bpe("ab", 2, &o, dir, &err) == -1 && check_has(err.msg, "vocab_size 256"));
    o.vocab_size = 300;
    err = (rc_error){0};
    CHECK(rc_tokenizer_train_bpe("ab\xFF" "cd", 5, &o, dir, &err) == -1 && check_has(err.msg, "not valid UTF-8 at byte 2"));
    err = (rc_error){0};
    CHECK(rc_tokenizer_train_bpe(NULL, 0, &o, dir, &err) == -1 && check_has(err.msg, "text is NULL"));
    err = (rc_error){0};
    CHECK(rc_tokenizer_train_bpe("ab", 2, NULL, dir, &err) == -1 && check_has(err.msg, "opts is NULL"));
    /* a regular file where the directory should be */
    char file[320];
    snprintf(file, sizeof file, "%s/plain", tmp);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    err = (rc_error){0};
    CHECK(rc_tokenizer_train_bpe("abab", 4, &o, file, &err) == -1 && check_has(err.msg, file) &&
          check_has(err.msg, "not a directory"));
    /* a directory that cannot be created */
    snprintf(file, sizeof file, "%s/missing/deeper", tmp);
    err = (rc_error){0};
    CHECK(rc_tokenizer_train_bpe("abab", 4, &o, file, &err) == -1 && check_has(err.msg, file) &&
          check_has(err.msg, "cannot create"));
    /* empty text: only the bytes and <|endoftext|> */
    snprintf(dir, sizeof dir, "%s/empty", tmp);
    err = (rc_error){0};
    CHECKF(rc_tokenizer_train_bpe("", 0, &o, dir, &err) == 257, "%s", err.msg);
    check_merges(dir, "");
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/redco_tok_train_XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_by_hand();
    test_book();
    test_errors();
    check_rm_tree(tmp);
    return check_summary("tok_train");
}
