/* bench_tokenizer.c - tokenizing speed on one core: the 4 MB Austen text through the
 * GPT-2 byte-level BPE and the two SentencePiece models (BPE with byte fallback, unigram).
 *
 *   bench_tokenizer [TEXT [DATA_DIR]]
 *     TEXT      default ../shared/data/text/jane_austen_6novels.txt
 *     DATA_DIR  default ../shared/data (gpt2/, spm/austen_bpe4k.model, spm/austen_unigram4k.model)
 *
 * One JSON line per tokenizer: {"bench":"tokenize","tokenizer":...,"bytes":...,"tokens":...,
 * "seconds":...,"mb_per_s":...,"peak_rss_bytes":...}. seconds is the best of 3 encodes of
 * the whole text (loading excluded; load_seconds reports it). Each tokenizer runs in its own
 * child process so peak_rss_bytes is its own (loaded tokenizer + text + ids + work areas). */
#include "redco.h"
#include "redco/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static void json_error(const char *name, const char *msg)
{
    printf("{\"bench\":\"tokenize\",\"tokenizer\":\"%s\",\"error\":\"", name);
    for (const char *c = msg; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        putchar((unsigned char)*c < 0x20 ? ' ' : *c);
    }
    printf("\"}\n");
}

/* Runs in a child: loads, encodes 3 times, prints the line. Exit status 0 when it worked. */
static int bench_one(const char *name, const char *tok_path, const char *text, size_t len)
{
    rc_error err = {0};
    double t0 = now();
    rc_tokenizer *t = rc_tokenizer_load(tok_path, &err);
    double load = now() - t0;
    if (!t) {
        json_error(name, err.msg);
        return 1;
    }
    double best = 1e30;
    int64_t count = 0;
    for (int rep = 0; rep < 3; rep++) {
        int32_t *ids;
        double s = now();
        if (rc_tokenizer_encode(t, text, len, 0, &ids, &count, &err)) {
            json_error(name, err.msg);
            rc_tokenizer_free(t);
            return 1;
        }
        double e = now() - s;
        if (e < best) best = e;
        free(ids);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"bench\":\"tokenize\",\"tokenizer\":\"%s\",\"bytes\":%zu,\"tokens\":%lld,\"seconds\":%.4f,"
           "\"mb_per_s\":%.2f,\"load_seconds\":%.4f,\"peak_rss_bytes\":%lld}\n",
           name, len, (long long)count, best, (double)len / 1e6 / best, load, (long long)ru.ru_maxrss * 1024);
    rc_tokenizer_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    const char *text_path = argc > 1 ? argv[1] : "../shared/data/text/jane_austen_6novels.txt";
    const char *data = argc > 2 ? argv[2] : "../shared/data";
    size_t len = 0;
    char *text = read_file(text_path, &len);
    if (!text) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot read the text %s (give TEXT [DATA_DIR], or run from the repo root)", text_path);
        json_error("all", msg);
        return 1;
    }
    static const char *names[3] = {"gpt2", "spm_bpe4k", "spm_unigram4k"};
    static const char *files[3] = {"gpt2", "spm/austen_bpe4k.model", "spm/austen_unigram4k.model"};
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", data, files[i]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int rc = bench_one(names[i], path, text, len);
            fflush(stdout);
            _exit(rc);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) failed = 1;
    }
    free(text);
    return failed;
}
