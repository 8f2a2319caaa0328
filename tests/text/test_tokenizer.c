/* test_tokenizer.c - tokenizers on small hand-made vocabularies (byte-level BPE as
 * tokenizer.json and as vocab.json + merges.txt, SentencePiece BPE and unigram as .model
 * files written here byte by byte), decode round trips, and every malformed input the
 * loaders and coders must refuse with a clear error: bad or truncated JSON, missing
 * fields, bad merges, truncated or corrupted protobuf, invalid UTF-8, ids past the
 * vocabulary. The real GPT-2 and SentencePiece files are the repository's own data/
 * (REDCO_DATA_DIR, set by CMakeLists.txt); a missing file fails the test. The comparisons
 * with the reference libraries are in tests/ref/test_tokenizer_ref.py. */
#include "check.h"
#include "redco.h"
#include "redco/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];
static char created[64][512];
static int n_created;

/* ---- helpers ------------------------------------------------------------------------ */

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

static void write_file(const char *name, const void *data, size_t n)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fwrite(data, 1, n, f);
    fclose(f);
    for (int i = 0; i < n_created; i++)
        if (!strcmp(created[i], path)) return;
    if (n_created < 64) snprintf(created[n_created++], sizeof created[0], "%s", path);
}

static void write_text(const char *name, const char *text)
{
    write_file(name, text, strlen(text));
}

/* encode -> compare with want[0..nwant) */
static int encodes_to(const rc_tokenizer *t, const char *text, int add_special, const int32_t *want, int64_t nwant)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    rc_error err = {0};
    if (rc_tokenizer_encode(t, text, strlen(text), add_special, &ids, &n, &err)) {
        printf("  encode '%s': %s\n", text, err.msg);
        return 0;
    }
    int ok = n == nwant && (n == 0 || !memcmp(ids, want, (size_t)n * sizeof *ids));
    if (!ok) {
        printf("  encode '%s' gave", text);
        for (int64_t i = 0; i < n; i++) printf(" %d", (int)ids[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

/* decode(encode(text)) == text */
static int round_trips(const rc_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    rc_error err = {0};
    if (rc_tokenizer_encode(t, text, len, 0, &ids, &n, &err)) {
        printf("  encode: %s\n", err.msg);
        return 0;
    }
    char *back = NULL;
    size_t blen = 0;
    int ok = rc_tokenizer_decode(t, ids, n, 0, &back, &blen, &err) == 0 && blen == len && !memcmp(back, text, len) &&
             back[blen] == 0;
    if (!ok) printf("  round trip failed (%s): '%.*s' -> '%s'\n", err.msg, (int)len, text, back ? back : "");
    free(ids);
    free(back);
    return ok;
}

/* decode to a string compared with want */
static int decodes_to(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, const char *want)
{
    char *s = NULL;
    size_t len;
    rc_error err = {0};
    if (rc_tokenizer_decode(t, ids, n, skip, &s, &len, &err)) {
        printf("  decode: %s\n", err.msg);
        return 0;
    }
    int ok = len == strlen(want) && !strcmp(s, want);
    if (!ok) printf("  decoded '%s', wanted '%s'\n", s, want);
    free(s);
    return ok;
}

/* load must fail with code (any when < 0) and a message containing want */
static int load_fails(const char *path, int code, const char *want)
{
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(path, &err);
    if (t) {
        rc_tokenizer_free(t);
        printf("  %s loaded but should not\n", path ? path : "(null)");
        return 0;
    }
    int ok = (code < 0 || err.code == code) && strstr(err.msg, want) != NULL;
    if (!ok) printf("  %s: code %d message '%s' (wanted %d, '%s')\n", path ? path : "(null)", err.code, err.msg, code, want);
    return ok;
}

/* the byte-level alphabet: bytes 33-126, 161-172, 174-255 stand for themselves, the rest
 * map in order to U+0100.. */
static int byte_char(int b)
{
    int next = 256;
    for (int i = 0; i < 256; i++) {
        int keep = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
        if (i == b) return keep ? i : next;
        if (!keep) next++;
    }
    return -1;
}

static int put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- a tiny byte-level BPE -------------------------------------------------------------------
 * id b (0-255): the byte b's char, so ASCII letters are their own ids; then by rank
 *   h e -> he 256, l l -> ll 257, he ll -> hell 258, Ġ w -> Ġw 259, hell o -> hello 260,
 * and the added special token <|endoftext|> 261. */
static const char *tiny_merges[5][3] = {
    {"h", "e", "he"}, {"l", "l", "ll"}, {"he", "ll", "hell"}, {"\xC4\xA0", "w", "\xC4\xA0w"}, {"hell", "o", "hello"}};

static const char *tiny_vocab_json(void)
{
    static char buf[8192];
    size_t o = (size_t)sprintf(buf, "{");
    for (int b = 0; b < 256; b++) {
        char tok[8];
        int cp = byte_char(b);
        if (cp == '"' || cp == '\\')
            sprintf(tok, "\\%c", cp);
        else
            tok[put_utf8(tok, (uint32_t)cp)] = 0;
        o += (size_t)sprintf(buf + o, "%s\"%s\": %d", b ? ", " : "", tok, b);
    }
    for (int m = 0; m < 5; m++) o += (size_t)sprintf(buf + o, ", \"%s\": %d", tiny_merges[m][2], 256 + m);
    sprintf(buf + o, "}");
    return buf;
}

/* merges: NULL for the five above (alternating "a b" and ["a", "b"] spellings) */
static void write_tiny_bpe(const char *name, const char *post, const char *merges)
{
    static char json[16384];
    size_t o = (size_t)sprintf(json,
                               "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 261, \"content\": \"<|endoftext|>\", "
                               "\"special\": true, \"lstrip\": false, \"rstrip\": false, \"single_word\": false, "
                               "\"normalized\": false}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                               "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
                               "\"post_processor\": %s, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                               "\"dropout\": null, \"unk_token\": null, \"vocab\": %s, \"merges\": ",
                               post ? post : "null", tiny_vocab_json());
    if (merges) {
        o += (size_t)sprintf(json + o, "%s", merges);
    } else {
        o += (size_t)sprintf(json + o, "[");
        for (int m = 0; m < 5; m++)
            o += (size_t)sprintf(json + o, m % 2 ? "%s[\"%s\", \"%s\"]" : "%s\"%s %s\"", m ? ", " : "", tiny_merges[m][0],
                                 tiny_merges[m][1]);
        o += (size_t)sprintf(json + o, "]");
    }
    sprintf(json + o, "}}");
    write_text(name, json);
}

static const char *round_trip_texts[] = {
    "hello world", "  lead and trail  ", "tab\tand\r\nCRLF\n\n\nlines \n", "caf\xC3\xA9 na\xC3\xAFve e\xCC\x81",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
    "nbsp\xC2\xA0\xC2\xA0x\xE3\x80\x80y", "it's 12345 he'll THEY'RE 'S", "<|endoftext|><|endoftext|>x", "\x01\x7F\xC2\x80 "};

static void test_tiny_bpe(void)
{
    write_tiny_bpe("tiny.json", NULL, NULL);
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(tmp_path("tiny.json"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(rc_tokenizer_vocab_size(t) == 262);
    CHECK(encodes_to(t, "hello world", 0, (int32_t[]){260, 259, 'o', 'r', 'l', 'd'}, 6));
    /* of two spaces before a word the first stands alone (\s+(?!\S)), the second joins */
    CHECK(encodes_to(t, "hello  wo", 0, (int32_t[]){260, ' ', 259, 'o'}, 4));
    /* the special token is cut out before pre-tokenization */
    CHECK(encodes_to(t, "hi<|endoftext|>hello", 0, (int32_t[]){'h', 'i', 261, 260}, 4));
    /* contractions split off; an uppercase 'S is not one */
    CHECK(encodes_to(t, "it's IT'S", 0, (int32_t[]){'i', 't', '\'', 's', ' ', 'I', 'T', '\'', 'S'}, 9));
    /* GPT-2 style: no BOS/EOS, add_special adds nothing */
    CHECK(encodes_to(t, "hello", 1, (int32_t[]){260}, 1));
    CHECK(rc_tokenizer_bos(t) == 261 && rc_tokenizer_eos(t) == 261 && rc_tokenizer_pad(t) == -1);
    int32_t d[] = {260, 261, 259};
    CHECK(decodes_to(t, d, 3, 0, "hello<|endoftext|> w"));
    CHECK(decodes_to(t, d, 3, 1, "hello w"));
    /* a lone byte of a multi-byte char decodes to U+FFFD */
    CHECK(decodes_to(t, (int32_t[]){0xC3}, 1, 0, "\xEF\xBF\xBD"));
    CHECK(decodes_to(t, NULL, 0, 0, ""));
    CHECK(round_trips(t, "", 0));
    for (size_t i = 0; i < sizeof round_trip_texts / sizeof *round_trip_texts; i++)
        CHECKF(round_trips(t, round_trip_texts[i], strlen(round_trip_texts[i])), "text %zu", i);
    rc_tokenizer_free(t);

    /* post-processors come from the file: RoBERTa's cls ... sep, a template's tokens (OPT) */
    write_tiny_bpe("roberta.json", "{\"type\": \"RobertaProcessing\", \"sep\": [\"<|endoftext|>\", 261], "
                                   "\"cls\": [\"<|endoftext|>\", 261], \"trim_offsets\": true}", NULL);
    t = rc_tokenizer_load(tmp_path("roberta.json"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(encodes_to(t, "hello", 1, (int32_t[]){261, 260, 261}, 3));
        CHECK(encodes_to(t, "hello", 0, (int32_t[]){260}, 1));
        rc_tokenizer_free(t);
    }
    write_tiny_bpe("opt.json",
                   "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", "
                   "\"single\": [{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
                   "\"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", "
                   "\"ids\": [261], \"tokens\": [\"<|endoftext|>\"]}}}]}",
                   NULL);
    t = rc_tokenizer_load(tmp_path("opt.json"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(encodes_to(t, "hello", 1, (int32_t[]){261, 260}, 2));
        rc_tokenizer_free(t);
    }
}

/* the same vocabulary as vocab.json + merges.txt in a directory, and broken merges */
static void test_vocab_merges(void)
{
    const char *dir = tmp_path("vm");
    char path[512];
    snprintf(path, sizeof path, "%s", dir);
    if (mkdir(path, 0700)) {
        CHECKF(0, "mkdir %s", path);
        return;
    }
    write_text("vm/vocab.json", tiny_vocab_json());
    write_text("vm/merges.txt", "#version: 0.2\nh e\nl l\nhe ll\n\xC4\xA0 w\nhell o\n");
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(path, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(encodes_to(t, "hello world", 0, (int32_t[]){260, 259, 'o', 'r', 'l', 'd'}, 6));
        CHECK(round_trips(t, "x \xC3\xA9 y\n", 6));
        rc_tokenizer_free(t);
    }
    /* OPT's slow tokenizer: tokenizer_config.json asks for BOS ("</s>") */
    char vocab[9000];
    snprintf(vocab, sizeof vocab, "%.*s, \"</s>\": 261}", (int)strlen(tiny_vocab_json()) - 1, tiny_vocab_json());
    write_text("vm/vocab.json", vocab);
    write_text("vm/tokenizer_config.json", "{\"add_bos_token\": true, \"bos_token\": {\"content\": \"</s>\"}, "
                                           "\"eos_token\": \"</s>\"}");
    t = rc_tokenizer_load(path, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(rc_tokenizer_bos(t) == 261 && rc_tokenizer_eos(t) == 261 && rc_tokenizer_pad(t) == -1);
        CHECK(encodes_to(t, "hello", 1, (int32_t[]){261, 260}, 2));
        CHECK(encodes_to(t, "hello</s>", 0, (int32_t[]){260, 261}, 2));
        rc_tokenizer_free(t);
    }
    write_text("vm/tokenizer_config.json", "{\"add_bos_token\": tru");
    CHECK(load_fails(path, RC_ERR_FORMAT, "tokenizer_config.json: bad JSON"));
    unlink(tmp_path("vm/tokenizer_config.json"));
    write_text("vm/vocab.json", tiny_vocab_json());
    write_text("vm/merges.txt", "#version: 0.2\nh e\nl l l\n");
    CHECK(load_fails(path, RC_ERR_FORMAT, "line 3"));
    write_text("vm/merges.txt", "#version: 0.2\nh e\nhe\n");
    CHECK(load_fails(path, RC_ERR_FORMAT, "line 3: expected two tokens"));
    write_text("vm/merges.txt", "h e\nq \xE2\x82\xAC\n");
    CHECK(load_fails(path, RC_ERR_FORMAT, "'\xE2\x82\xAC' is not in the vocabulary"));
    write_text("vm/merges.txt", "h o\n");
    CHECK(load_fails(path, RC_ERR_FORMAT, "the merge of 'h' and 'o' is not in the vocabulary"));
    write_text("vm/vocab.json", "{\"a\": 0, \"b\": \"one\"}");
    CHECK(load_fails(path, RC_ERR_FORMAT, "the id of 'b' is not an integer"));
    write_text("vm/vocab.json", "{\"a\": 0, \"b\": 0}");
    CHECK(load_fails(path, RC_ERR_FORMAT, "id 0 is given to two tokens"));
    write_text("vm/vocab.json", "{\"a\": 0,");
    CHECK(load_fails(path, RC_ERR_FORMAT, "bad JSON"));
    unlink(tmp_path("vm/vocab.json"));
    unlink(tmp_path("vm/merges.txt"));
    CHECK(load_fails(path, RC_ERR_IO, "no tokenizer.json"));
    rmdir(path);
}

/* ---- malformed tokenizer.json ---------------------------------------------------------- */

static void test_bad_json(void)
{
    const char *p = tmp_path("bad.json");
    static const struct {
        const char *json;
        int code;
        const char *want;
    } cases[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [", RC_ERR_FORMAT, "bad JSON at line 1"},
        {"", RC_ERR_FORMAT, "bad JSON"},
        {"[]", RC_ERR_FORMAT, "not a JSON object"},
        {"{\"added_tokens\": []}", RC_ERR_FORMAT, "missing \"model\""},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", RC_ERR_UNSUPPORTED, "model type 'WordPiece'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", RC_ERR_FORMAT, "model.vocab is not an object"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", RC_ERR_FORMAT, "model.merges is not an array"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [\"aa\"]}}", RC_ERR_FORMAT,
         "model.merges 0: expected two tokens"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [\"a a\", [\"a\"]]}}", RC_ERR_FORMAT,
         "model.merges 1"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", RC_ERR_FORMAT,
         "'b' is not in the vocabulary"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", RC_ERR_FORMAT, "the id of 'a'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}", RC_ERR_FORMAT,
         "id 2000000000 is implausible for 1 tokens"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}", RC_ERR_FORMAT,
         "unk_token '<unk>'"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0], [\"b\"]]}}", RC_ERR_FORMAT,
         "model.vocab[1]: expected [piece, score]"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]], \"unk_id\": 7}}", RC_ERR_FORMAT, "unk_id 7"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", RC_ERR_FORMAT, "model.vocab is empty"},
        {"{\"added_tokens\": [{\"id\": -1, \"content\": \"x\"}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": []}}",
         RC_ERR_FORMAT, "added_tokens[0]"},
        {"{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_UNSUPPORTED, "normalizer type 'NFKC'"},
        {"{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"@@@\"}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_FORMAT, "not valid base64"},
        {"{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAE=\"}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_FORMAT, "precompiled_charsmap of 2 bytes is truncated"},
        {"{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"QAAAAAAAAAA=\"}, \"model\": {\"type\": "
         "\"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_FORMAT, "trie size 64 does not fit"},
        {"{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": []}}",
         RC_ERR_UNSUPPORTED, "pre_tokenizer type 'Whitespace'"},
        {"{\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], "
         "\"special_tokens\": {}}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_FORMAT, "special token '<s>' has no ids"},
        {"{\"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 9], \"cls\": [\"[CLS]\", 8]}, "
         "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         RC_ERR_FORMAT, "special token id 8 is not in the vocabulary"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_text("bad.json", cases[i].json);
        CHECKF(load_fails(p, cases[i].code, cases[i].want), "case %zu", i);
        rc_error err = {0};
        rc_tokenizer_load(p, &err);
        CHECKF(strstr(err.msg, "bad.json") != NULL, "case %zu names the file: %s", i, err.msg);
    }
    CHECK(load_fails(tmp_path("no-such-file.json"), RC_ERR_IO, "no such file"));
    CHECK(load_fails(NULL, RC_ERR_ARG, "no path"));
}

/* ---- invalid input to encode / decode ----------------------------------------------------- */

static void test_bad_input(void)
{
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(tmp_path("tiny.json"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    static const struct {
        const char *s;
        size_t offset;
    } bad[] = {{"\xFF", 0}, {"ab\xC3", 2}, {"x\xC0\xAF", 1}, {"ok \xED\xA0\x80", 3}, {"\xF4\x90\x80\x80", 0},
               {"abc\x80", 3}, {"\xE2\x82", 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t sentinel = 0, *ids = &sentinel;
        int64_t n = 5;
        char want[64];
        snprintf(want, sizeof want, "offset %zu", bad[i].offset);
        int rc = rc_tokenizer_encode(t, bad[i].s, strlen(bad[i].s), 1, &ids, &n, &err);
        CHECKF(rc == -1 && ids == NULL && n == 0 && err.code == RC_ERR_ARG && strstr(err.msg, "not valid UTF-8") &&
                   strstr(err.msg, want),
               "case %zu: %s", i, err.msg);
    }
    /* NUL bytes are valid UTF-8 and round trip */
    CHECK(round_trips(t, "a\0b", 3));
    int32_t past[] = {260, 262};
    char *s = NULL;
    size_t len = 7;
    CHECK(rc_tokenizer_decode(t, past, 2, 0, &s, &len, &err) == -1 && s == NULL && err.code == RC_ERR_INDEX &&
          strstr(err.msg, "token id 262 (position 1) is outside the vocabulary of 262 ids"));
    int32_t neg[] = {-1};
    CHECK(rc_tokenizer_decode(t, neg, 1, 0, &s, &len, &err) == -1 && strstr(err.msg, "token id -1"));
    int32_t *ids;
    int64_t n;
    CHECK(rc_tokenizer_encode(NULL, "x", 1, 0, &ids, &n, &err) == -1 && err.code == RC_ERR_ARG);
    rc_tokenizer_free(t);
}

/* ---- hand-made SentencePiece models ---------------------------------------------------------- */

typedef struct {
    uint8_t b[8192];
    size_t n;
} pb;

static void pb_varint(pb *p, uint64_t v)
{
    do {
        p->b[p->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void pb_int(pb *p, int field, int64_t v)
{
    pb_varint(p, (uint64_t)field << 3);
    pb_varint(p, (uint64_t)v);
}

static void pb_bytes(pb *p, int field, const void *data, size_t n)
{
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static void pb_float(pb *p, int field, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    pb_varint(p, (uint64_t)field << 3 | 5);
    for (int i = 0; i < 4; i++) p->b[p->n++] = (uint8_t)(u >> (8 * i));
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, BYTE = 6 };

static void pb_piece(pb *model, const char *piece, float score, int type)
{
    pb sp = {.n = 0};
    pb_bytes(&sp, 1, piece, strlen(piece));
    pb_float(&sp, 2, score);
    if (type != NORMAL) pb_int(&sp, 3, type);
    pb_bytes(model, 1, sp.b, sp.n);
}

/* BPE (model_type 2) with byte fallback, or unigram (1) without; identity normalizer. */
static size_t make_spm(pb *m, int bpe)
{
    m->n = 0;
    pb_piece(m, "<unk>", 0, UNKNOWN);
    pb_piece(m, "<s>", 0, CONTROL);
    pb_piece(m, "</s>", 0, CONTROL);
    if (bpe) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            pb_piece(m, name, 0, BYTE);
        }
        /* ids 259-264 */
        pb_piece(m, "\xE2\x96\x81" "a", -1, NORMAL);
        pb_piece(m, "ab", -2, NORMAL);
        pb_piece(m, "\xE2\x96\x81" "ab", -3, NORMAL);
        pb_piece(m, "\xE2\x96\x81", -4, NORMAL);
        pb_piece(m, "a", -5, NORMAL);
        pb_piece(m, "b", -6, NORMAL);
    } else {
        /* ids 3-8 */
        pb_piece(m, "\xE2\x96\x81", -2.0f, NORMAL);
        pb_piece(m, "a", -3.0f, NORMAL);
        pb_piece(m, "b", -3.0f, NORMAL);
        pb_piece(m, "ab", -2.7f, NORMAL);
        pb_piece(m, "\xE2\x96\x81" "a", -1.5f, NORMAL);
        pb_piece(m, "\xE2\x96\x81" "ab", -5.0f, NORMAL);
    }
    pb trainer = {.n = 0};
    pb_int(&trainer, 3, bpe ? 2 : 1);
    pb_int(&trainer, 4, bpe ? 265 : 9);
    if (bpe) pb_int(&trainer, 35, 1);
    pb_int(&trainer, 40, 0);
    pb_int(&trainer, 41, 1);
    pb_int(&trainer, 42, 2);
    pb_int(&trainer, 43, -1);
    pb_bytes(m, 2, trainer.b, trainer.n);
    pb norm = {.n = 0};
    pb_bytes(&norm, 1, "identity", 8);
    pb_int(&norm, 3, 1);
    pb_int(&norm, 4, 1);
    pb_int(&norm, 5, 1);
    pb_bytes(m, 3, norm.b, norm.n);
    return m->n;
}

static void test_spm_bpe(void)
{
    static pb m;
    make_spm(&m, 1);
    write_file("bpe.model", m.b, m.n);
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(tmp_path("bpe.model"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(rc_tokenizer_vocab_size(t) == 265 && rc_tokenizer_bos(t) == 1 && rc_tokenizer_eos(t) == 2 &&
          rc_tokenizer_pad(t) == -1);
    /* "▁ab▁ab": '▁a' (score -1) merges first, leftmost first, then '▁ab' */
    CHECK(encodes_to(t, "ab ab", 0, (int32_t[]){261, 261}, 2));
    /* extra white space goes (remove_extra_whitespaces) */
    CHECK(encodes_to(t, "  ab    ab  ", 0, (int32_t[]){261, 261}, 2));
    CHECK(encodes_to(t, "ba", 0, (int32_t[]){262, 264, 263}, 3));
    /* unknown chars fall back to their bytes */
    CHECK(encodes_to(t, "abc", 0, (int32_t[]){261, 3 + 'c'}, 2));
    CHECK(encodes_to(t, "\xC3\xA9", 0, (int32_t[]){262, 3 + 0xC3, 3 + 0xA9}, 3));
    /* add_special: a BPE model adds BOS (as LLaMA's tokenizer) */
    CHECK(encodes_to(t, "ab", 1, (int32_t[]){1, 261}, 2));
    CHECK(encodes_to(t, "", 1, (int32_t[]){1}, 1));
    CHECK(encodes_to(t, "   ", 0, NULL, 0));
    CHECK(decodes_to(t, (int32_t[]){1, 261, 261, 2}, 4, 0, "ab ab"));
    CHECK(decodes_to(t, (int32_t[]){262, 3 + 0xC3, 3 + 0xA9}, 3, 0, "\xC3\xA9"));
    /* bad byte runs: one U+FFFD per byte, as sentencepiece */
    CHECK(decodes_to(t, (int32_t[]){3 + 0xE6, 3 + 'A', 3 + 0xE6, 3 + 0x97}, 4, 0, "\xEF\xBF\xBD" "A\xEF\xBF\xBD\xEF\xBF\xBD"));
    CHECK(decodes_to(t, (int32_t[]){0, 261}, 2, 0, " \xE2\x81\x87  ab"));
    CHECK(round_trips(t, "ab abc \xE6\x97\xA5", strlen("ab abc \xE6\x97\xA5")));
    rc_tokenizer_free(t);
}

static void test_spm_unigram(void)
{
    static pb m;
    make_spm(&m, 0);
    write_file("uni.model", m.b, m.n);
    rc_error err = {0};
    rc_tokenizer *t = rc_tokenizer_load(tmp_path("uni.model"), &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    /* "▁ab": ▁a + b = -4.5 beats ▁ + ab = -4.7 and ▁ab = -5 */
    CHECK(encodes_to(t, "ab", 0, (int32_t[]){7, 5}, 2));
    CHECK(encodes_to(t, "ba", 0, (int32_t[]){3, 5, 4}, 3));
    /* a run of unknown chars is one <unk> */
    CHECK(encodes_to(t, "xyz", 0, (int32_t[]){3, 0}, 2));
    CHECK(encodes_to(t, "axyzb", 0, (int32_t[]){7, 0, 5}, 3));
    /* add_special: a unigram model adds EOS (as T5's tokenizer) */
    CHECK(encodes_to(t, "ab", 1, (int32_t[]){7, 5, 2}, 3));
    CHECK(decodes_to(t, (int32_t[]){7, 5, 3, 4, 2}, 5, 0, "ab a"));
    CHECK(decodes_to(t, (int32_t[]){3, 0}, 2, 0, " \xE2\x81\x87 "));
    rc_tokenizer_free(t);
}

/* every truncation of a model fails cleanly; random corruption never crashes */
static void test_spm_malformed(void)
{
    static pb m;
    size_t full = make_spm(&m, 1);
    int all_fail = 1;
    for (size_t len = 0; len < full; len += len < 300 || len + 300 > full ? 1 : 7) {
        write_file("cut.model", m.b, len);
        rc_error err = {0};
        rc_tokenizer *t = rc_tokenizer_load(tmp_path("cut.model"), &err);
        if (t || err.code != RC_ERR_FORMAT || !strstr(err.msg, "cut.model")) {
            printf("  truncated to %zu bytes: %s\n", len, t ? "loaded" : err.msg);
            all_fail = 0;
            rc_tokenizer_free(t);
            break;
        }
    }
    CHECK(all_fail);
    write_file("cut.model", m.b, 100);
    CHECK(load_fails(tmp_path("cut.model"), RC_ERR_FORMAT, "truncated or malformed protobuf in pieces["));
    write_file("cut.model", m.b, full - 3);
    CHECK(load_fails(tmp_path("cut.model"), RC_ERR_FORMAT, "normalizer_spec"));
    /* a piece of a type sentencepiece does not have; a bad byte piece; no <unk> */
    static pb x;
    x.n = 0;
    pb_piece(&x, "<unk>", 0, 9);
    write_file("bad.model", x.b, x.n);
    CHECK(load_fails(tmp_path("bad.model"), RC_ERR_FORMAT, "pieces[0] has unknown type 9"));
    x.n = 0;
    pb_piece(&x, "<unk>", 0, UNKNOWN);
    pb_piece(&x, "<0xZZ>", 0, BYTE);
    pb_bytes(&x, 2, "", 0);
    pb_bytes(&x, 3, "", 0);
    write_file("bad.model", x.b, x.n);
    CHECK(load_fails(tmp_path("bad.model"), RC_ERR_FORMAT, "BYTE piece 1 is not <0xXX>"));
    x.n = 0;
    pb_piece(&x, "a", 0, NORMAL);
    pb_bytes(&x, 2, "", 0);
    pb_bytes(&x, 3, "", 0);
    write_file("bad.model", x.b, x.n);
    CHECK(load_fails(tmp_path("bad.model"), RC_ERR_FORMAT, "no UNKNOWN piece"));
    write_text("bad.model", "not a protobuf at all");
    CHECK(load_fails(tmp_path("bad.model"), RC_ERR_FORMAT, "bad.model"));
    /* flipped bytes: load fails with a message, or loads and encodes without harm */
    uint64_t rng = 12345;
    int clean = 1;
    for (int it = 0; it < 300; it++) {
        static pb c;
        c = m;
        for (int k = 0; k < 3; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            c.b[(rng >> 33) % c.n] = (uint8_t)(rng >> 17);
        }
        write_file("fuzz.model", c.b, c.n);
        rc_error err = {0};
        rc_tokenizer *t = rc_tokenizer_load(tmp_path("fuzz.model"), &err);
        if (!t) {
            if (!err.msg[0]) clean = 0;
            continue;
        }
        int32_t *ids;
        int64_t n;
        if (rc_tokenizer_encode(t, "ab abc \xC3\xA9 ba", 13, 1, &ids, &n, &err) == 0) {
            char *s;
            size_t len;
            if (rc_tokenizer_decode(t, ids, n, 1, &s, &len, &err) == 0) free(s);
            free(ids);
        }
        rc_tokenizer_free(t);
    }
    CHECK(clean);
}

/* ---- the real files ------------------------------------------------------------------------ */

/* random text over a mix of scripts, spaces, digits, marks and emoji */
static size_t random_text(char *out, size_t chars, uint64_t *rng)
{
    static const uint32_t ranges[][2] = {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {' ', ' '}, {' ', ' '}, {'!', '/'},
                                         {'\t', '\r'}, {0xA0, 0xFF}, {0x300, 0x36F}, {0x391, 0x3C9}, {0x400, 0x45F},
                                         {0x4E00, 0x4FFF}, {0xAC00, 0xAD00}, {0x2000, 0x206F}, {0x1F300, 0x1F64F},
                                         {0x200D, 0x200D}, {0x3000, 0x3000}, {'\'', '\''}};
    size_t n = 0;
    for (size_t i = 0; i < chars; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t r = (size_t)(*rng >> 33) % (sizeof ranges / sizeof *ranges);
        uint32_t cp = ranges[r][0] + (uint32_t)((*rng >> 13) % (ranges[r][1] - ranges[r][0] + 1));
        n += (size_t)put_utf8(out + n, cp);
    }
    out[n] = 0;
    return n;
}

static void test_real(const char *data)
{
    char path[1200];
    static const char *gpt2_forms[3] = {"gpt2", "gpt2/tokenizer.json", "gpt2/vocab.json"};
    for (int f = 0; f < 3; f++) {
        snprintf(path, sizeof path, "%s/%s", data, gpt2_forms[f]);
        rc_error err = {0};
        rc_tokenizer *t = rc_tokenizer_load(path, &err);
        CHECKF(t != NULL, "%s", err.msg);
        if (!t) continue;
        CHECK(rc_tokenizer_vocab_size(t) == 50257 && rc_tokenizer_bos(t) == 50256 && rc_tokenizer_eos(t) == 50256 &&
              rc_tokenizer_pad(t) == -1);
        CHECK(encodes_to(t, "Hello world<|endoftext|>", 1, (int32_t[]){15496, 995, 50256}, 3));
        uint64_t rng = 99 + (uint64_t)f;
        static char text[4096];
        int ok = 1;
        for (int i = 0; i < 40 && ok; i++) ok = round_trips(t, text, random_text(text, 300, &rng));
        CHECKF(ok, "%s random round trips", gpt2_forms[f]);
        for (size_t i = 0; i < sizeof round_trip_texts / sizeof *round_trip_texts; i++)
            CHECK(round_trips(t, round_trip_texts[i], strlen(round_trip_texts[i])));
        rc_tokenizer_free(t);
    }
    static const char *models[2] = {"spm/austen_bpe4k.model", "spm/austen_unigram4k.model"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", data, models[k]);
        rc_error err = {0};
        rc_tokenizer *t = rc_tokenizer_load(path, &err);
        CHECKF(t != NULL, "%s", err.msg);
        if (!t) continue;
        CHECK(rc_tokenizer_vocab_size(t) == (k ? 4000 : 4096) && rc_tokenizer_bos(t) == 1 && rc_tokenizer_eos(t) == 2);
        const char *s = "It is a truth universally acknowledged, that a single man in possession of a good fortune.";
        CHECK(round_trips(t, s, strlen(s)));
        int32_t *ids;
        int64_t n;
        if (rc_tokenizer_encode(t, s, strlen(s), 1, &ids, &n, &err) == 0) {
            CHECK(k == 0 ? ids[0] == 1 && ids[n - 1] != 2 : ids[0] != 1 && ids[n - 1] == 2);
            free(ids);
        }
        uint64_t rng = 7;
        static char text[4096];
        int ok = 1;
        for (int i = 0; i < 20 && ok; i++) {
            size_t len = random_text(text, 300, &rng);
            ok = rc_tokenizer_encode(t, text, len, 1, &ids, &n, &err) == 0;
            char *back = NULL;
            size_t blen;
            if (ok) ok = rc_tokenizer_decode(t, ids, n, 1, &back, &blen, &err) == 0;
            if (ok) free(ids);
            free(back);
        }
        CHECKF(ok, "%s random text: %s", models[k], err.msg);
        rc_tokenizer_free(t);
        /* truncations of the real file */
        size_t len;
        char *bytes = check_read_file(path, &len);
        int all_fail = 1;
        for (size_t cut = 0; bytes && cut < len && all_fail; cut += cut + 64 >= len ? 1 : 4093) {
            write_file("real_cut.model", bytes, cut);
            rc_tokenizer *c = rc_tokenizer_load(tmp_path("real_cut.model"), &err);
            if (c) {
                printf("  %s cut to %zu bytes loaded\n", models[k], cut);
                rc_tokenizer_free(c);
                all_fail = 0;
            }
        }
        CHECK(all_fail);
        free(bytes);
    }
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/redco_test_tokenizer_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_tiny_bpe();
    test_vocab_merges();
    test_bad_json();
    test_bad_input();
    test_spm_bpe();
    test_spm_unigram();
    test_spm_malformed();
    static const char *needed[] = {"gpt2/tokenizer.json", "gpt2/vocab.json", "gpt2/merges.txt",
                                   "spm/austen_bpe4k.model", "spm/austen_unigram4k.model"};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", REDCO_DATA_DIR, needed[i]);
        CHECKF(access(path, R_OK) == 0, "%s: not found (the repository's data/ is incomplete)", path);
    }
    test_real(REDCO_DATA_DIR);
    for (int i = 0; i < n_created; i++) unlink(created[i]);
    rmdir(tmpdir);
    return check_summary("tokenizer");
}
