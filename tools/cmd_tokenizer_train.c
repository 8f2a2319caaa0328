/* cmd_tokenizer_train.c - `redco tokenizer-train`: a byte-level BPE vocabulary learned
 * from a text file, written as vocab.json + merges.txt for --tokenizer. */
#include "cli.h"
#include "redco/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *help =
    "usage: redco tokenizer-train --data FILE --vocab-size N --out DIR [--min-frequency N]\n"
    "                             [--json]\n"
    "\n"
    "Learns a byte-level BPE vocabulary (GPT-2 style) from the UTF-8 text of FILE: the text\n"
    "is cut into words by the GPT-2 pattern, each word starts as its bytes, and the pair of\n"
    "adjacent symbols seen most often is merged, again and again, until N ids exist (256\n"
    "bytes + the merges + <|endoftext|>) or no pair is seen --min-frequency times (default\n"
    "2). Writes DIR/vocab.json and DIR/merges.txt (DIR is created when missing), which\n"
    "--tokenizer DIR of train, eval, generate and tokenize reads; the model's vocabulary\n"
    "must hold the N ids. Prints the ids written and how many bytes a token holds on FILE\n"
    "(with --json, one line {\"vocab_size\", \"bytes\", \"tokens\", \"bytes_per_token\",\n"
    "\"seconds\"}).\n";

typedef struct {
    const char *data, *out;
    int64_t vocab_size, min_frequency;
    int json;
} options;

/* 0, -1 after --help, or the exit status of a bad flag */
static int parse(int argc, char **argv, options *o)
{
    const char *cmd = "tokenizer-train";
    static const struct option longs[] = {
        {"data", required_argument, NULL, 'd'},
        {"vocab-size", required_argument, NULL, 'v'},
        {"out", required_argument, NULL, 'o'},
        {"min-frequency", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (options){.min_frequency = 2};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': o->data = optarg; break;
        case 'o': o->out = optarg; break;
        case 'v': bad = cli_int64(cmd, "--vocab-size", optarg, 257, INT32_MAX, &o->vocab_size); break;
        case 'm': bad = cli_int64(cmd, "--min-frequency", optarg, 1, INT64_MAX, &o->min_frequency); break;
        case 'j': o->json = 1; break;
        case 'h': fputs(help, stdout); return -1;
        case ':': return cli_usage(cmd, "%s needs a value", argv[optind - 1]);
        default: return cli_usage(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
        if (bad) return 2;
    }
    if (optind < argc)
        return cli_usage(cmd, "unexpected argument '%s'", argv[optind]);
    if (!o->data || !o->out || !o->vocab_size)
        return cli_usage(cmd, "--data, --vocab-size and --out are required");
    return 0;
}

static int read_file(const char *path, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    while (p) {
        if (n == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) break;
            p = q;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = !p || ferror(f) || n == cap;
    fclose(f);
    if (bad) {
        free(p);
        return -1;
    }
    *data = p;
    *len = n;
    return 0;
}

int cmd_tokenizer_train(int argc, char **argv)
{
    const char *cmd = "tokenizer-train";
    options o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char *text;
    size_t len;
    if (read_file(o.data, &text, &len))
        return cli_fail(cmd, "%s: cannot read: %s", o.data, errno ? strerror(errno) : "out of memory");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc_error err = {0};
    rc_bpe_train_opts opts = {.vocab_size = o.vocab_size, .min_frequency = o.min_frequency};
    int64_t n_ids = rc_tokenizer_train_bpe(text, len, &opts, o.out, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    rc_tokenizer *tok = n_ids < 0 ? NULL : rc_tokenizer_load(o.out, &err);
    int32_t *ids = NULL;
    int64_t n_tokens = 0;
    if (!tok || rc_tokenizer_encode(tok, text, len, 0, &ids, &n_tokens, &err)) {
        free(text);
        rc_tokenizer_free(tok);
        return cli_fail(cmd, "%s", err.msg);
    }
    double per_token = n_tokens ? (double)len / (double)n_tokens : 0;
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "vocab_size", json_integer(n_ids));
        json_object_set_new(j, "bytes", json_integer((json_int_t)len));
        json_object_set_new(j, "tokens", json_integer(n_tokens));
        json_object_set_new(j, "bytes_per_token", json_real(per_token));
        json_object_set_new(j, "seconds", json_real(seconds));
        cli_print_json(j);
    } else {
        printf("%s: %lld ids (256 bytes, merges, <|endoftext|>) learned from %s in %.1f s;\n"
               "  %zu bytes -> %lld tokens, %.2f bytes per token\n",
               o.out, (long long)n_ids, o.data, seconds, len,
               (long long)n_tokens, per_token);
    }
    free(ids);
    free(text);
    rc_tokenizer_free(tok);
    return 0;
}
