/* dataset.c - datasets for training: token streams cut into language-model windows, and
 * instruction / seq2seq examples; the token cache; epoch order and sharding.
 * The formats and rules are documented in include/redco/data.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "npy.h"
#include "internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Bump when the tokenization rules change, so old caches are not reused. */
#define RC_DATA_RULES "redco-data-rules-1"

enum { DEFAULT_CHUNK = 1 << 20, MAX_CHUNK_GROWTH = 64 };

struct rc_dataset {
    char *path;
    rc_dataset_info info;
    int64_t id_limit;          /* ids must be in [0, id_limit) */

    /* RC_DATA_LM: the token stream, mapped from a .npy (ours or the user's) or in memory */
    int mapped;
    rc_npy npy;
    int32_t *mem;
    int64_t n_tokens;

    /* RC_DATA_INSTRUCT / RC_DATA_SEQ2SEQ: example i is ids[off[i] .. off[i+1]) (and mask
     * alongside), target tgt[toff[i] .. toff[i+1]) */
    int64_t n_examples;
    int32_t *ids, *tgt;
    uint8_t *mask;
    int64_t *off, *toff;
    int64_t n_ids, cap_ids, n_tgt, cap_tgt, cap_ex;
};

/* ---- small helpers ------------------------------------------------------------------- */

/* grows *p (elements of es bytes, capacity *cap) to hold at least need */
static int vec_reserve(void **p, int64_t *cap, int64_t need, size_t es)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * es);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* ---- tokenizer fingerprint ----------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

/* hashes NAME and the contents of DIR/NAME when it exists; 1 when it did, -1 on a read error */
static int fingerprint_file(uint64_t *h, const char *dir, const char *name, rc_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    *h = fnv1a(*h, name, strlen(name) + 1);
    uint8_t buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0)
        *h = fnv1a(*h, buf, r);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return rc_error_set(err, RC_ERR_IO, "%s: read failed", path);
    return 1;
}

/* 16 hex digits naming the tokenizer at PATH (a directory or one of its files) */
static int tokenizer_fingerprint(const char *path, char out[17], rc_error *err)
{
    static const char *names[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                  "tokenizer.model", "tokenizer_config.json",
                                  "special_tokens_map.json", "added_tokens.json"};
    struct stat st;
    if (stat(path, &st) != 0)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot read tokenizer: %s", path,
                            strerror(errno));
    char dir[4096];
    const char *self = NULL;          /* the file PATH names, when it names one */
    snprintf(dir, sizeof dir, "%s", path);
    if (!S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            self = path + (slash + 1 - dir);
        } else {
            snprintf(dir, sizeof dir, ".");
            self = path;
        }
    }
    uint64_t h = fnv1a(0xCBF29CE484222325ull, RC_DATA_RULES, sizeof RC_DATA_RULES);
    int found = 0, r;
    if (self) {
        if ((r = fingerprint_file(&h, dir, self, err)) < 0)
            return -1;
        found += r;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (self && strcmp(self, names[i]) == 0)
            continue;
        if ((r = fingerprint_file(&h, dir, names[i], err)) < 0)
            return -1;
        found += r;
    }
    if (!found)
        return rc_error_set(err, RC_ERR_IO, "%s: no tokenizer files found to fingerprint", path);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return 0;
}

/* ---- token sinks: the cache writer, or memory ---------------------------------------- */

typedef struct {
    rci_npy_writer *w;         /* NULL: into mem */
    int32_t *mem;
    int64_t n, cap;
} tok_sink;

static int sink_put(tok_sink *s, const int32_t *ids, int64_t n, rc_error *err)
{
    if (s->w) {
        if (rci_npy_writer_append(s->w, ids, n, err))
            return -1;
    } else if (n > 0) {
        if (vec_reserve((void **)&s->mem, &s->cap, s->n + n, sizeof *s->mem))
            return rc_error_set(err, RC_ERR_MEMORY, "out of memory for %lld tokens",
                                (long long)(s->n + n));
        memcpy(s->mem + s->n, ids, (size_t)n * sizeof *ids);
    }
    s->n += n;
    return 0;
}

/* encodes text[len] into the sink; WHERE names the text in messages */
static int encode_into(const rc_tokenizer *tok, const char *text, size_t len, int add_special,
                       tok_sink *s, const char *where, rc_error *err)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (rc_tokenizer_encode(tok, text, len, add_special, &ids, &n, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return rc_error_set(err, err->code ? err->code : RC_ERR_FORMAT, "%s: %s", where, msg);
    }
    int rc = sink_put(s, ids, n, err);
    free(ids);
    return rc;
}

/* ---- .txt: chunked reading at safe boundaries ---------------------------------------- */

static int printable(uint8_t c) { return c >= 0x21 && c <= 0x7e; }

/* The largest safe cut p in buf[len] with p >= from (0: none): after "\n" in "x\nY", or
 * before " " in "x Y", with x and Y printable ASCII. */
static size_t safe_cut(const uint8_t *buf, size_t len, size_t from)
{
    if (from < 2)
        from = 2;
    for (size_t p = len; p-- > from;) {
        if (buf[p - 1] == '\n' && printable(buf[p - 2]) && printable(buf[p]))
            return p;
        if (buf[p] == ' ' && p + 1 < len && printable(buf[p - 1]) && printable(buf[p + 1]))
            return p;
    }
    return 0;
}

/* the last UTF-8 character boundary in buf[len] after position 0 (0: none) */
static size_t utf8_cut(const uint8_t *buf, size_t len)
{
    if (len < 2)
        return 0;
    for (size_t p = len - 1; p > 0; p--)
        if ((buf[p] & 0xC0) != 0x80)
            return p;
    return 0;
}

/* Whether encoding both sides of a safe cut apart equals encoding them together, on probes. */
static int tokenizer_chunk_safe(const rc_tokenizer *tok)
{
    static const char *probes[][2] = {
        {"Hello world.\n", "The end."}, {"a", " b"}, {"it", " 's 12"},
        {"x,\n", "-y\n"}, {"caf\xc3\xa9:", " (ok)"}, {"1", " 2"},
    };
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
        char whole[64];
        snprintf(whole, sizeof whole, "%s%s", probes[k][0], probes[k][1]);
        int32_t *a = NULL, *b = NULL, *c = NULL;
        int64_t na = 0, nb = 0, nc = 0;
        int ok = rc_tokenizer_encode(tok, probes[k][0], strlen(probes[k][0]), 0, &a, &na, NULL) == 0 &&
                 rc_tokenizer_encode(tok, probes[k][1], strlen(probes[k][1]), 0, &b, &nb, NULL) == 0 &&
                 rc_tokenizer_encode(tok, whole, strlen(whole), 0, &c, &nc, NULL) == 0 &&
                 na + nb == nc && (na == 0 || memcmp(a, c, (size_t)na * sizeof *a) == 0) &&
                 (nb == 0 || memcmp(b, c + na, (size_t)nb * sizeof *b) == 0);
        free(a);
        free(b);
        free(c);
        if (!ok)
            return 0;
    }
    return 1;
}

static int txt_tokenize(rc_dataset *ds, const rc_tokenizer *tok, size_t chunk, tok_sink *s,
                        rc_error *err)
{
    FILE *f = fopen(ds->path, "rb");
    if (!f)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", ds->path, strerror(errno));
    int chunked = tokenizer_chunk_safe(tok);
    size_t cap = 0, len = 0, target = chunked ? chunk : SIZE_MAX;
    uint8_t *buf = NULL;
    size_t scanned = 0;       /* buf[0 .. scanned) holds no safe cut */
    int64_t offset = 0;       /* file offset of buf[0] */
    int eof = 0, rc = 0;
    while (!eof || len > 0) {
        while (!eof && len < target) {
            if (len == cap) {
                size_t c = cap ? cap * 2 : (chunked ? 2 * chunk : DEFAULT_CHUNK);
                uint8_t *q = realloc(buf, c);
                if (!q) {
                    rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory reading", ds->path);
                    goto done;
                }
                buf = q;
                cap = c;
            }
            size_t want = cap - len < target - len ? cap - len : target - len;
            size_t r = fread(buf + len, 1, want, f);
            len += r;
            if (r < want) {
                if (ferror(f)) {
                    rc = rc_error_set(err, RC_ERR_IO, "%s: read failed at byte %lld", ds->path,
                                      (long long)(offset + (int64_t)len));
                    goto done;
                }
                eof = 1;
            }
        }
        size_t cut = len;
        if (!eof) {
            cut = safe_cut(buf, len, scanned);
            if (cut == 0 && len < MAX_CHUNK_GROWTH * chunk) {
                target = len + chunk;          /* read on until a safe point */
                scanned = len - 1;             /* a space cut at len - 1 needs the next byte */
                continue;
            }
            if (cut == 0) {
                cut = utf8_cut(buf, len);
                ds->info.unsafe_cuts++;
                if (cut == 0)
                    cut = len;
            }
        }
        char where[1200];
        snprintf(where, sizeof where, "%s: bytes %lld-%lld", ds->path, (long long)offset,
                 (long long)(offset + (int64_t)cut));
        if (encode_into(tok, (const char *)buf, cut, 0, s, where, err)) {
            rc = -1;
            goto done;
        }
        ds->info.chunks++;
        ds->info.tokenized_bytes += (int64_t)cut;
        memmove(buf, buf + cut, len - cut);
        len -= cut;
        offset += (int64_t)cut;
        target = chunked ? chunk : SIZE_MAX;
        scanned = 0;
    }
done:
    free(buf);
    fclose(f);
    return rc;
}

/* ---- .jsonl -------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    char *line;
    size_t cap;
    int64_t lineno;
    const char *path;
} line_reader;

static int blank(const char *s, ssize_t n)
{
    for (ssize_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* the next non-blank line parsed as a JSON object into *obj; 0 at the end, -1 on error */
static int jsonl_next(line_reader *r, json_t **obj, rc_error *err)
{
    ssize_t n;
    *obj = NULL;
    while ((n = getline(&r->line, &r->cap, r->f)) >= 0) {
        r->lineno++;
        if (blank(r->line, n))
            continue;
        json_error_t je;
        json_t *j = json_loadb(r->line, (size_t)n, 0, &je);
        if (!j)
            return rc_error_set(err, RC_ERR_FORMAT, "%s:%lld: invalid JSON: %s", r->path,
                                (long long)r->lineno, je.text);
        if (!json_is_object(j)) {
            json_decref(j);
            return rc_error_set(err, RC_ERR_FORMAT, "%s:%lld: expected a JSON object", r->path,
                                (long long)r->lineno);
        }
        *obj = j;
        return 1;
    }
    if (ferror(r->f))
        return rc_error_set(err, RC_ERR_IO, "%s: read failed after line %lld", r->path,
                            (long long)r->lineno);
    return 0;
}

static int jsonl_field(line_reader *r, json_t *obj, const char *key, const char **s,
                       size_t *len, rc_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return rc_error_set(err, RC_ERR_FORMAT, "%s:%lld: missing field \"%s\"", r->path,
                            (long long)r->lineno, key);
    if (!json_is_string(v))
        return rc_error_set(err, RC_ERR_FORMAT, "%s:%lld: field \"%s\" is not a string",
                            r->path, (long long)r->lineno, key);
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

/* the kind of a .jsonl from its first non-blank line */
static int jsonl_kind(const char *path, rc_data_kind *kind, rc_error *err)
{
    line_reader r = {fopen(path, "rb"), NULL, 0, 0, path};
    if (!r.f)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_t *obj;
    int got = jsonl_next(&r, &obj, err), rc = 0;
    if (got == 0)
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: no JSON lines", path);
    else if (got > 0) {
        if (json_object_get(obj, "text"))
            *kind = RC_DATA_LM;
        else if (json_object_get(obj, "prompt"))
            *kind = RC_DATA_INSTRUCT;
        else if (json_object_get(obj, "source"))
            *kind = RC_DATA_SEQ2SEQ;
        else
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s:%lld: expected \"text\", \"prompt\" + "
                              "\"completion\" or \"source\" + \"target\"", path,
                              (long long)r.lineno);
        json_decref(obj);
    } else {
        rc = -1;
    }
    free(r.line);
    fclose(r.f);
    return rc;
}

/* The special ids add_special puts before and after text: the difference between
 * encode("a", 1) and encode("a", 0). */
typedef struct {
    int32_t prefix[4], suffix[4];
    int n_prefix, n_suffix;
} specials;

static int specials_probe(const rc_tokenizer *tok, specials *sp, rc_error *err)
{
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    memset(sp, 0, sizeof *sp);
    if (rc_tokenizer_encode(tok, "a", 1, 0, &a, &na, err) ||
        rc_tokenizer_encode(tok, "a", 1, 1, &b, &nb, err)) {
        free(a);
        return -1;
    }
    for (int64_t p = 0; na > 0 && p + na <= nb; p++) {
        if (memcmp(b + p, a, (size_t)na * sizeof *a) != 0)
            continue;
        int64_t ns = nb - p - na;
        if (p <= 4 && ns <= 4) {
            sp->n_prefix = (int)p;
            sp->n_suffix = (int)ns;
            memcpy(sp->prefix, b, (size_t)p * sizeof *b);
            memcpy(sp->suffix, b + p + na, (size_t)ns * sizeof *b);
        }
        break;
    }
    free(a);
    free(b);
    return 0;
}

/* {"text"} lines: each document encode(text, 1) + EOS unless add_special ended it with EOS */
static int jsonl_tokenize_lm(rc_dataset *ds, const rc_tokenizer *tok, tok_sink *s,
                             rc_error *err)
{
    specials sp;
    if (specials_probe(tok, &sp, err))
        return -1;
    int32_t eos = rc_tokenizer_eos(tok);
    int add_eos = eos >= 0 && !(sp.n_suffix > 0 && sp.suffix[sp.n_suffix - 1] == eos);
    line_reader r = {fopen(ds->path, "rb"), NULL, 0, 0, ds->path};
    if (!r.f)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", ds->path, strerror(errno));
    json_t *obj;
    int got, rc = 0;
    while ((got = jsonl_next(&r, &obj, err)) > 0) {
        const char *text = NULL;
        size_t len = 0;
        char where[1200];
        snprintf(where, sizeof where, "%s:%lld", ds->path, (long long)r.lineno);
        rc = jsonl_field(&r, obj, "text", &text, &len, err);
        if (!rc)
            rc = encode_into(tok, text, len, 1, s, where, err);
        if (!rc && add_eos)
            rc = sink_put(s, &eos, 1, err);
        if (!rc)
            ds->info.tokenized_bytes += (int64_t)len;
        json_decref(obj);
        if (rc)
            break;
    }
    if (got < 0)
        rc = -1;
    ds->info.lines = r.lineno;
    free(r.line);
    fclose(r.f);
    return rc;
}

/* appends ids (and mask value m for each) to the example arrays */
static int ex_put(rc_dataset *ds, const int32_t *ids, int64_t n, int m)
{
    int64_t need = ds->n_ids + n, cap = ds->cap_ids;
    if (vec_reserve((void **)&ds->ids, &cap, need, sizeof *ds->ids))
        return -1;
    cap = ds->cap_ids;
    if (vec_reserve((void **)&ds->mask, &cap, need, sizeof *ds->mask))
        return -1;
    ds->cap_ids = cap;
    if (n > 0) {
        memcpy(ds->ids + ds->n_ids, ids, (size_t)n * sizeof *ids);
        memset(ds->mask + ds->n_ids, m, (size_t)n);
    }
    ds->n_ids = need;
    return 0;
}

static int ex_encode(rc_dataset *ds, const rc_tokenizer *tok, const char *text, size_t len,
                     int add_special, int target, int m, const char *where, rc_error *err)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (rc_tokenizer_encode(tok, text, len, add_special, &ids, &n, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return rc_error_set(err, err->code ? err->code : RC_ERR_FORMAT, "%s: %s", where, msg);
    }
    int bad;
    if (target) {
        bad = vec_reserve((void **)&ds->tgt, &ds->cap_tgt, ds->n_tgt + n, sizeof *ds->tgt);
        if (!bad && n > 0) {
            memcpy(ds->tgt + ds->n_tgt, ids, (size_t)n * sizeof *ids);
            ds->n_tgt += n;
        }
    } else {
        bad = ex_put(ds, ids, n, m);
    }
    free(ids);
    ds->info.tokenized_bytes += (int64_t)len;
    return bad ? rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", where) : 0;
}

/* room for one more example's offsets; off[0] = toff[0] = 0 */
static int ex_reserve(rc_dataset *ds)
{
    int64_t need = ds->n_examples + 2, cap = ds->cap_ex;
    if (vec_reserve((void **)&ds->off, &cap, need, sizeof *ds->off))
        return -1;
    cap = ds->cap_ex;
    if (vec_reserve((void **)&ds->toff, &cap, need, sizeof *ds->toff))
        return -1;
    ds->cap_ex = cap;
    if (ds->n_examples == 0)
        ds->off[0] = ds->toff[0] = 0;
    return 0;
}

/* {"prompt", "completion"} or {"source", "target"} lines into examples */
static int jsonl_examples(rc_dataset *ds, const rc_tokenizer *tok, rc_error *err)
{
    int instruct = ds->info.kind == RC_DATA_INSTRUCT;
    const char *k1 = instruct ? "prompt" : "source", *k2 = instruct ? "completion" : "target";
    specials sp;
    if (specials_probe(tok, &sp, err))
        return -1;
    int32_t eos = rc_tokenizer_eos(tok);
    line_reader r = {fopen(ds->path, "rb"), NULL, 0, 0, ds->path};
    if (!r.f)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", ds->path, strerror(errno));
    json_t *obj;
    int got, rc = 0;
    while ((got = jsonl_next(&r, &obj, err)) > 0) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        char where[1200];
        snprintf(where, sizeof where, "%s:%lld", ds->path, (long long)r.lineno);
        rc = jsonl_field(&r, obj, k1, &a, &na, err) || jsonl_field(&r, obj, k2, &b, &nb, err);
        if (!rc && ex_reserve(ds))
            rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", where);
        if (!rc && instruct) {
            /* P ++ prompt (mask 0) ++ completion ++ EOS (mask 1) */
            if (ex_put(ds, sp.prefix, sp.n_prefix, 0))
                rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", where);
            rc = rc || ex_encode(ds, tok, a, na, 0, 0, 0, where, err) ||
                 ex_encode(ds, tok, b, nb, 0, 0, 1, where, err);
            if (!rc && eos >= 0 && ex_put(ds, &eos, 1, 1))
                rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", where);
        } else if (!rc) {
            rc = ex_encode(ds, tok, a, na, 1, 0, 0, where, err) ||
                 ex_encode(ds, tok, b, nb, 1, 1, 0, where, err);
        }
        json_decref(obj);
        if (rc) {
            rc = -1;
            break;
        }
        ds->n_examples++;
        ds->off[ds->n_examples] = ds->n_ids;
        ds->toff[ds->n_examples] = ds->n_tgt;
    }
    if (got < 0)
        rc = -1;
    ds->info.lines = r.lineno;
    free(r.line);
    fclose(r.f);
    return rc;
}

/* ---- opening ------------------------------------------------------------------------- */

static int mtime_newer_or_equal(const struct stat *a, const struct stat *b)
{
    if (a->st_mtim.tv_sec != b->st_mtim.tv_sec)
        return a->st_mtim.tv_sec > b->st_mtim.tv_sec;
    return a->st_mtim.tv_nsec >= b->st_mtim.tv_nsec;
}

/* mkdir -p dir; 0, or -1 when some part cannot be made */
static int make_dirs(const char *dir)
{
    char path[1024];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0777) && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* The cache file's path for the tokenizer fingerprint fp: beside DATA, or in o->cache_dir
 * (made when missing; "" when it cannot be, and the tokens then stay in memory). */
static void cache_path(rc_dataset *ds, const rc_dataset_opts *o, const char *fp)
{
    char *out = ds->info.cache_path, full[4096];
    size_t size = sizeof ds->info.cache_path;
    if (!o->cache_dir) {
        snprintf(out, size, "%s.%s.npy", ds->path, fp);
        return;
    }
    const char *name = strrchr(ds->path, '/');
    name = name ? name + 1 : ds->path;
    if (!realpath(ds->path, full))
        snprintf(full, sizeof full, "%s", ds->path);
    uint64_t h = fnv1a(0xCBF29CE484222325ull, full, strlen(full));
    int n = snprintf(out, size, "%s/%s-%016llx.%s.npy", o->cache_dir, name, (unsigned long long)h, fp);
    if (n < 0 || (size_t)n >= size || make_dirs(o->cache_dir))
        out[0] = 0;
}

/* Tokenizes a .txt or {"text"} .jsonl into the token stream, through the cache when the
 * options allow one. */
static int open_stream(rc_dataset *ds, const rc_dataset_opts *o, rc_error *err)
{
    const rc_tokenizer *tok = o->tokenizer;
    int txt = has_suffix(ds->path, ".txt");
    rc_npy_dtype dtype = rc_tokenizer_vocab_size(tok) <= 65536 ? RC_NPY_U16 : RC_NPY_I32;
    rci_npy_writer w;
    tok_sink s = {0};

    if (o->tokenizer_path && !o->no_cache) {
        char fp[17];
        if (tokenizer_fingerprint(o->tokenizer_path, fp, err))
            return -1;
        cache_path(ds, o, fp);
        struct stat sd, sc;
        if (stat(ds->path, &sd) != 0)
            return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", ds->path,
                                strerror(errno));
        if (stat(ds->info.cache_path, &sc) == 0 && mtime_newer_or_equal(&sc, &sd) &&
            rc_npy_open(&ds->npy, ds->info.cache_path, NULL) == 0) {
            ds->mapped = 1;
            ds->n_tokens = ds->npy.n;
            ds->info.cache = RC_CACHE_HIT;
            return 0;
        }
        if (ds->info.cache_path[0] && rci_npy_writer_open(&w, ds->info.cache_path, dtype, NULL) == 0) {
            s.w = &w;
            ds->info.cache = RC_CACHE_WRITTEN;
        } else {
            ds->info.cache = RC_CACHE_UNWRITABLE;
        }
    }
    int rc = txt ? txt_tokenize(ds, tok, o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK, &s,
                                err)
                 : jsonl_tokenize_lm(ds, tok, &s, err);
    if (rc) {
        if (s.w)
            rci_npy_writer_abort(s.w);
        free(s.mem);
        return -1;
    }
    ds->n_tokens = s.n;
    if (!s.w) {
        ds->mem = s.mem;
        return 0;
    }
    if (rci_npy_writer_commit(s.w, err) || rc_npy_open(&ds->npy, ds->info.cache_path, err))
        return -1;
    ds->mapped = 1;
    return 0;
}

rc_dataset *rc_dataset_open(const char *path, const rc_dataset_opts *opts, rc_error *err)
{
    rc_dataset_opts none = {0};
    const rc_dataset_opts *o = opts ? opts : &none;
    int npy = has_suffix(path, ".npy"), txt = has_suffix(path, ".txt"),
        jsonl = has_suffix(path, ".jsonl");
    if (!npy && !txt && !jsonl) {
        rc_error_set(err, RC_ERR_ARG, "%s: unknown data format (expected .txt, .jsonl or .npy)",
                     path);
        return NULL;
    }
    if (!npy && !o->tokenizer) {
        rc_error_set(err, RC_ERR_ARG, "%s: a tokenizer is needed to read %s", path,
                     txt ? ".txt" : ".jsonl");
        return NULL;
    }
    rc_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->path = strdup(path))) {
        free(ds);
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    ds->id_limit = o->tokenizer ? rc_tokenizer_vocab_size(o->tokenizer) : (int64_t)1 << 31;
    int rc;
    if (npy) {
        rc = rc_npy_open(&ds->npy, path, err);
        ds->mapped = rc == 0;
        ds->n_tokens = ds->npy.n;
    } else if (txt) {
        rc = open_stream(ds, o, err);
    } else {
        rc = jsonl_kind(path, &ds->info.kind, err);
        if (!rc)
            rc = ds->info.kind == RC_DATA_LM ? open_stream(ds, o, err)
                                             : jsonl_examples(ds, o->tokenizer, err);
        if (!rc && ds->info.kind != RC_DATA_LM)
            ds->n_tokens = ds->n_ids + ds->n_tgt;
    }
    if (rc) {
        rc_dataset_close(ds);
        return NULL;
    }
    return ds;
}

void rc_dataset_close(rc_dataset *ds)
{
    if (!ds)
        return;
    if (ds->mapped)
        rc_npy_close(&ds->npy);
    free(ds->mem);
    free(ds->ids);
    free(ds->tgt);
    free(ds->mask);
    free(ds->off);
    free(ds->toff);
    free(ds->path);
    free(ds);
}

const rc_dataset_info *rc_dataset_info_get(const rc_dataset *ds) { return &ds->info; }
rc_data_kind rc_dataset_kind(const rc_dataset *ds) { return ds->info.kind; }
int64_t rc_dataset_tokens(const rc_dataset *ds) { return ds->n_tokens; }
int64_t rc_dataset_examples(const rc_dataset *ds) { return ds->n_examples; }

/* ---- windows ------------------------------------------------------------------------- */

int64_t rc_dataset_windows(const rc_dataset *ds, int64_t T)
{
    if (ds->info.kind != RC_DATA_LM || T < 1 || ds->n_tokens < 1)
        return 0;
    return (ds->n_tokens - 1) / T;
}

int rc_dataset_read(const rc_dataset *ds, int64_t start, int64_t n, int32_t *out,
                    rc_error *err)
{
    if (ds->info.kind != RC_DATA_LM)
        return rc_error_set(err, RC_ERR_ARG, "%s: not a token stream (an example dataset)",
                            ds->path);
    if (start < 0 || n < 0 || start > ds->n_tokens - n)
        return rc_error_set(err, RC_ERR_INDEX, "%s: tokens [%lld, %lld) out of range [0, %lld)",
                            ds->path, (long long)start, (long long)(start + n),
                            (long long)ds->n_tokens);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ds->mapped ? rc_npy_get(&ds->npy, start + i) : ds->mem[start + i];
        if (v < 0 || v >= ds->id_limit)
            return rc_error_set(err, RC_ERR_INDEX, "%s: token id %lld at position %lld is "
                                "outside the vocabulary [0, %lld)", ds->path, (long long)v,
                                (long long)(start + i), (long long)ds->id_limit);
        out[i] = (int32_t)v;
    }
    return 0;
}

int rc_dataset_window(const rc_dataset *ds, int64_t T, int64_t i, int32_t *inputs,
                      int32_t *targets, rc_error *err)
{
    int64_t n = rc_dataset_windows(ds, T);
    if (T < 1 || i < 0 || i >= n)
        return rc_error_set(err, RC_ERR_INDEX, "%s: window %lld out of range: %lld windows of "
                            "%lld tokens", ds->path, (long long)i, (long long)n, (long long)T);
    if (rc_dataset_read(ds, i * T, T, inputs, err))
        return -1;
    /* targets = inputs shifted by one, plus the window's last token */
    if (T > 1)
        memcpy(targets, inputs + 1, (size_t)(T - 1) * sizeof *targets);
    return rc_dataset_read(ds, i * T + T, 1, targets + T - 1, err);
}

/* ---- examples ------------------------------------------------------------------------ */

int rc_dataset_example(const rc_dataset *ds, int64_t i, rc_data_example *ex, rc_error *err)
{
    if (ds->info.kind == RC_DATA_LM)
        return rc_error_set(err, RC_ERR_ARG, "%s: a token stream has windows, not examples",
                            ds->path);
    if (i < 0 || i >= ds->n_examples)
        return rc_error_set(err, RC_ERR_INDEX, "%s: example %lld out of range [0, %lld)",
                            ds->path, (long long)i, (long long)ds->n_examples);
    memset(ex, 0, sizeof *ex);
    /* the arrays are NULL when every example's part is empty (no offset on NULL: UB) */
    ex->ids = ds->ids ? ds->ids + ds->off[i] : NULL;
    ex->n = ds->off[i + 1] - ds->off[i];
    if (ds->info.kind == RC_DATA_INSTRUCT) {
        ex->loss_mask = ds->mask ? ds->mask + ds->off[i] : NULL;
    } else {
        ex->target = ds->tgt ? ds->tgt + ds->toff[i] : NULL;
        ex->n_target = ds->toff[i + 1] - ds->toff[i];
    }
    return 0;
}

int64_t rc_data_example_pack(const rc_data_example *ex, int64_t T, int32_t pad,
                             int32_t *inputs, int32_t *targets)
{
    int64_t m = ex->n < T + 1 ? ex->n : T + 1, counted = 0;
    for (int64_t t = 0; t < T; t++) {
        inputs[t] = t < m ? ex->ids[t] : pad;
        int live = t + 1 < m && (!ex->loss_mask || ex->loss_mask[t + 1]);
        targets[t] = live ? ex->ids[t + 1] : RC_IGNORE_INDEX;
        counted += live;
    }
    return counted;
}

/* ---- epoch order and sharding -------------------------------------------------------- */

void rc_epoch_order(int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t *order)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    rc_rng r = rc_rng_fold(rc_rng_new(seed), epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t m = (uint64_t)i + 1;
        uint64_t rem = (UINT64_MAX % m + 1) % m;     /* 2^64 mod m */
        uint64_t x = rc_rng_next_u64(&r);
        while (rem && x >= 0 - rem)                  /* 0 - rem = 2^64 - rem */
            x = rc_rng_next_u64(&r);
        int64_t j = (int64_t)(x % m);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int rc_data_split_init(rc_data_split *s, int64_t n, int batch, int world, int accum,
                       rc_tail_policy tail, rc_error *err)
{
    memset(s, 0, sizeof *s);
    if (n < 0 || batch < 1 || world < 1 || accum < 1)
        return rc_error_set(err, RC_ERR_ARG, "data split: need n >= 0, batch, world and accum >= 1 "
                            "(got n %lld, batch %d, world %d, accum %d)", (long long)n, batch,
                            world, accum);
    if (tail != RC_TAIL_DROP && tail != RC_TAIL_WRAP && tail != RC_TAIL_PAD)
        return rc_error_set(err, RC_ERR_ARG, "data split: unknown tail policy %d", (int)tail);
    int64_t per_step = (int64_t)batch * world * accum;    /* examples per optimizer step */
    int64_t full = n / per_step, rem = n % per_step;
    s->n = n;
    s->batch = batch;
    s->world = world;
    s->accum = accum;
    s->tail = tail;
    if (tail == RC_TAIL_DROP || rem == 0) {
        s->steps = full * accum;
        s->dropped = tail == RC_TAIL_DROP ? rem : 0;
    } else {
        s->steps = (full + 1) * accum;
        s->filled = per_step - rem;
    }
    return 0;
}

int rc_data_split_batch(const rc_data_split *s, const int64_t *order, int rank, int64_t step,
                        int64_t *out, rc_error *err)
{
    if (rank < 0 || rank >= s->world || step < 0 || step >= s->steps)
        return rc_error_set(err, RC_ERR_INDEX, "data split: rank %d of %d, step %lld of %lld out of "
                            "range", rank, s->world, (long long)step, (long long)s->steps);
    int64_t base = step * s->batch * s->world + (int64_t)rank * s->batch;
    for (int k = 0; k < s->batch; k++) {
        int64_t pos = base + k;
        if (pos >= s->n)
            pos = s->tail == RC_TAIL_WRAP ? pos % s->n : -1;
        out[k] = pos < 0 ? -1 : order ? order[pos] : pos;
    }
    return 0;
}
