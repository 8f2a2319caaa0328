/* bench_tokenizer.c - tokenizing speed on one core: the bundled 1 MB Austen text through the
 * GPT-2 byte-level BPE and the two SentencePiece models (BPE with byte fallback, unigram).
 *
 *   bench_tokenizer [TEXT [DATA_DIR]]
 *     TEXT      default: data/austen_excerpt.txt (run from the repository root)
 *     DATA_DIR  default: data (gpt2/, spm/austen_bpe4k.model, spm/austen_unigram4k.model)
 *
 * One JSON line per tokenizer (jansson): {"bench":"tokenize","tokenizer":...,"text":...,
 * "bytes":...,"tokens":...,"seconds":...,"mb_per_s":...,"load_seconds":...,"peak_rss_bytes":...}.
 * seconds is the best of 3 encodes of the whole text (loading excluded; load_seconds
 * reports it). Each tokenizer runs in its own child process so peak_rss_bytes is its own
 * (loaded tokenizer + text + ids + work areas). A failure prints one line naming the call
 * and the library's message, and the exit status is 1. */
#include "common.h"
#include "redco.h"
#include "redco/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *NAME = "bench_tokenizer";

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) *len = (size_t)n;
    return p;
}

/* Runs in a child: loads, encodes 3 times, prints the line. Exit status 0 when it worked. */
static int bench_one(const char *name, const char *tok_path, const char *text_path, const char *text,
                     size_t len)
{
    rc_error err = {0};
    char who[128];
    snprintf(who, sizeof who, "%s %s", NAME, name);
    double t0 = bench_now();
    rc_tokenizer *t = rc_tokenizer_load(tok_path, &err);
    double load = bench_now() - t0;
    if (!t)
        bench_fail(who, "rc_tokenizer_load", err.msg);
    double best = 1e30;
    int64_t count = 0;
    for (int rep = 0; rep < 3; rep++) {
        int32_t *ids;
        double s = bench_now();
        if (rc_tokenizer_encode(t, text, len, 0, &ids, &count, &err))
            bench_fail(who, "rc_tokenizer_encode", err.msg);
        double e = bench_now() - s;
        if (e < best) best = e;
        free(ids);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        bench_fail(who, "getrusage", "no resource usage");
    json_t *o = bench_line("tokenize");
    bench_set_str(o, "tokenizer", name);
    bench_set_str(o, "text", text_path);
    bench_set_int(o, "bytes", (long long)len);
    bench_set_int(o, "tokens", (long long)count);
    bench_set_num(o, "seconds", best);
    bench_set_num(o, "mb_per_s", (double)len / 1e6 / best);
    bench_set_num(o, "load_seconds", load);
    bench_set_int(o, "peak_rss_bytes", (long long)ru.ru_maxrss * 1024);
    if (bench_print(o))
        bench_fail(who, "writing a JSON line", "jansson or stdout failed");
    rc_tokenizer_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    const char *text_path = argc > 1 ? argv[1] : "data/austen_excerpt.txt";
    size_t len = 0;
    char *text = read_file(text_path, &len);
    if (!text) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot read %s", text_path);
        bench_fail(NAME, "reading the text", msg);
    }
    static const char *names[3] = {"gpt2", "spm_bpe4k", "spm_unigram4k"};
    static const char *files[3] = {"gpt2", "spm/austen_bpe4k.model", "spm/austen_unigram4k.model"};
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", argc > 2 ? argv[2] : "data", files[i]);
        if (access(path, F_OK) != 0) {
            fprintf(stderr, "%s %s: finding the tokenizer failed: %s does not exist (run from the "
                    "repository root, or give TEXT DATA_DIR)\n", NAME, names[i], path);
            failed = 1;
            continue;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(bench_one(names[i], path, text_path, text, len));
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
            if (pid < 0 || !WIFEXITED(status)) /* a child that exited with 1 has said why */
                fprintf(stderr, "%s %s: the child process failed (%s)\n", NAME, names[i],
                        pid < 0 ? "fork" : "killed by a signal");
            failed = 1;
        }
    }
    free(text);
    return failed;
}
