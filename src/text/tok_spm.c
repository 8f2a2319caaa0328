/* tok_spm.c - SentencePiece models (tokenizer.model), their normalizer, SentencePiece BPE
 * and the unigram model (for .model files and for tokenizer.json "Unigram").
 *
 * The .model file is a protobuf ModelProto. Fields read (others are skipped):
 *   ModelProto: 1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
 *   SentencePiece: 1 piece (string), 2 score (float), 3 type (NORMAL 1, UNKNOWN 2,
 *     CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6; default NORMAL)
 *   TrainerSpec: 3 model_type (UNIGRAM 1, BPE 2), 24 treat_whitespace_as_suffix,
 *     35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id, 44 unk_surface
 *   NormalizerSpec: 1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (default true),
 *     4 remove_extra_whitespaces (default true), 5 escape_whitespaces (default true)
 * Wire format: each field is a varint key (number << 3 | wire type); wire types 0 varint,
 * 1 fixed64, 2 length-delimited, 5 fixed32 (little-endian).
 *
 * precompiled_charsmap: a little-endian uint32 byte size of a Darts-clone double array,
 * the array (uint32 units), then NUL-terminated replacement strings. A unit holds
 * has_leaf (bit 8), a label (bits 0-7, bit 31), an offset ((u >> 10) << ((u & 512) >> 6));
 * the value (low 31 bits of the unit at a leaf) is the offset of the replacement. */
#include "tokenizer_internal.h"
#include "internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char META[] = "\xE2\x96\x81";

/* ---- protobuf wire format ---------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end, *base;        /* base: the file start, for offsets in messages */
} pb_buf;

typedef struct {
    uint32_t field;
    int wire;
    uint64_t v;                           /* varint / fixed value */
    pb_buf sub;                           /* length-delimited payload */
} pb_field;

static int pb_varint(pb_buf *b, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Reads the next field; 1 when one was read, 0 at the end, -1 when malformed. */
static int pb_next(pb_buf *b, pb_field *f)
{
    memset(f, 0, sizeof *f);
    if (b->p >= b->end) return 0;
    uint64_t key;
    if (pb_varint(b, &key) || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) return -1;
    f->field = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    if (f->wire == 0) return pb_varint(b, &f->v) ? -1 : 1;
    if (f->wire == 1 || f->wire == 5) {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n) return -1;
        for (size_t i = 0; i < n; i++) f->v |= (uint64_t)b->p[i] << (8 * i);
        b->p += n;
        return 1;
    }
    if (f->wire == 2) {
        uint64_t n;
        if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) return -1;
        f->sub.p = b->p;
        f->sub.end = b->p + n;
        f->sub.base = b->base;
        b->p += n;
        return 1;
    }
    return -1;                            /* groups (3, 4) and unknown wire types */
}

static int pb_bad(const char *path, const pb_buf *b, const char *what, rc_error *err)
{
    return rc_error_set(err, RC_ERR_FORMAT, "%s: truncated or malformed protobuf in %s (near byte %ld)", path, what,
                        (long)(b->p - b->base));
}

/* ---- loading a .model ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *piece;
    size_t len;
    float score;
    int type;
} spm_piece;

typedef struct {
    spm_piece *pieces;
    int64_t n, cap;
    int model_type, byte_fallback, ws_suffix;
    int32_t unk_id, bos_id, eos_id, pad_id;
    const uint8_t *unk_surface;
    size_t unk_surface_len;
    const uint8_t *charsmap;
    size_t charsmap_len;
    const uint8_t *norm_name;
    size_t norm_name_len;
    int dummy_prefix, remove_ws, escape_ws;
    int has_trainer, has_normalizer;
} spm_proto;

static int parse_piece(const char *path, pb_buf b, int64_t index, spm_piece *p, rc_error *err)
{
    pb_field f;
    int r;
    char what[64];
    snprintf(what, sizeof what, "pieces[%lld]", (long long)index);
    memset(p, 0, sizeof *p);
    p->type = 1;
    int has_piece = 0;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.field == 1 && f.wire == 2) {
            p->piece = f.sub.p;
            p->len = (size_t)(f.sub.end - f.sub.p);
            has_piece = 1;
        } else if (f.field == 2 && f.wire == 5) {
            uint32_t u = (uint32_t)f.v;
            memcpy(&p->score, &u, 4);
        } else if (f.field == 3 && f.wire == 0) {
            p->type = (int)f.v;
        }
    }
    if (r < 0) return pb_bad(path, &b, what, err);
    if (!has_piece || p->len == 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: %s has no piece text", path, what);
    if (p->type < 1 || p->type > 6) return rc_error_set(err, RC_ERR_FORMAT, "%s: %s has unknown type %d", path, what, p->type);
    if (rci_utf8_check((const char *)p->piece, p->len) != p->len)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s is not valid UTF-8", path, what);
    return 0;
}

static int parse_trainer(const char *path, pb_buf b, spm_proto *m, rc_error *err)
{
    pb_field f;
    int r;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.wire == 0) {
            int32_t v = (int32_t)(int64_t)f.v;        /* int32 fields sign-extend to 64 bits */
            switch (f.field) {
            case 3: m->model_type = v; break;
            case 24: m->ws_suffix = v != 0; break;
            case 35: m->byte_fallback = v != 0; break;
            case 40: m->unk_id = v; break;
            case 41: m->bos_id = v; break;
            case 42: m->eos_id = v; break;
            case 43: m->pad_id = v; break;
            default: break;
            }
        } else if (f.wire == 2 && f.field == 44) {
            m->unk_surface = f.sub.p;
            m->unk_surface_len = (size_t)(f.sub.end - f.sub.p);
        }
    }
    return r < 0 ? pb_bad(path, &b, "trainer_spec", err) : 0;
}

static int parse_normalizer_spec(const char *path, pb_buf b, spm_proto *m, rc_error *err)
{
    pb_field f;
    int r;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.wire == 2 && f.field == 1) {
            m->norm_name = f.sub.p;
            m->norm_name_len = (size_t)(f.sub.end - f.sub.p);
        } else if (f.wire == 2 && f.field == 2) {
            m->charsmap = f.sub.p;
            m->charsmap_len = (size_t)(f.sub.end - f.sub.p);
        } else if (f.wire == 0 && f.field == 3) {
            m->dummy_prefix = f.v != 0;
        } else if (f.wire == 0 && f.field == 4) {
            m->remove_ws = f.v != 0;
        } else if (f.wire == 0 && f.field == 5) {
            m->escape_ws = f.v != 0;
        }
    }
    return r < 0 ? pb_bad(path, &b, "normalizer_spec", err) : 0;
}

static int parse_model(const char *path, const uint8_t *data, size_t len, spm_proto *m, rc_error *err)
{
    pb_buf b = {data, data + len, data};
    pb_field f;
    int r;
    m->model_type = 1;
    m->unk_id = 0;
    m->bos_id = 1;
    m->eos_id = 2;
    m->pad_id = -1;
    m->dummy_prefix = m->remove_ws = m->escape_ws = 1;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.wire != 2) continue;
        if (f.field == 1) {
            if (m->n == m->cap) {
                int64_t cap = m->cap ? m->cap * 2 : 1024;
                spm_piece *p = realloc(m->pieces, (size_t)cap * sizeof *p);
                if (!p) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
                m->pieces = p;
                m->cap = cap;
            }
            if (parse_piece(path, f.sub, m->n, &m->pieces[m->n], err)) return -1;
            m->n++;
        } else if (f.field == 2) {
            if (parse_trainer(path, f.sub, m, err)) return -1;
            m->has_trainer = 1;
        } else if (f.field == 3) {
            if (parse_normalizer_spec(path, f.sub, m, err)) return -1;
            m->has_normalizer = 1;
        }
    }
    if (r < 0) {
        char what[64];
        if (f.field == 1)
            snprintf(what, sizeof what, "pieces[%lld]", (long long)m->n);
        else if (f.field == 2 || f.field == 3)
            snprintf(what, sizeof what, "%s", f.field == 2 ? "trainer_spec" : "normalizer_spec");
        else
            snprintf(what, sizeof what, "ModelProto field %u", (unsigned)f.field);
        return pb_bad(path, &b, what, err);
    }
    if (m->n == 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: no pieces (not a SentencePiece model?)", path);
    /* sentencepiece writes both specs after the pieces: a file cut between fields lacks them */
    if (!m->has_trainer || !m->has_normalizer)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: no %s (a truncated SentencePiece model?)", path,
                            m->has_trainer ? "normalizer_spec" : "trainer_spec");
    if (m->n > INT32_MAX / 2) return rc_error_set(err, RC_ERR_FORMAT, "%s: too many pieces", path);
    return 0;
}

typedef struct {
    float score;
    int32_t id;
} scored_id;

static int scored_cmp(const void *a, const void *b)
{
    const scored_id *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id - y->id;
}

/* SPM BPE merges the pair whose piece has the highest score: rank pieces by score (equal
 * scores share a rank, so ties fall to the leftmost pair as in sentencepiece). */
static int spm_ranks(rc_tokenizer *t, rc_error *err)
{
    int32_t n = (int32_t)t->n_tokens;
    scored_id *order = malloc((size_t)n * sizeof *order);
    t->spm_rank = malloc((size_t)n * sizeof *t->spm_rank);
    if (!order || !t->spm_rank) {
        free(order);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    for (int32_t i = 0; i < n; i++) {
        order[i].score = t->score_f[i];
        order[i].id = i;
    }
    qsort(order, (size_t)n, sizeof *order, scored_cmp);
    int32_t rank = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i > 0 && order[i].score != order[i - 1].score) rank++;
        t->spm_rank[order[i].id] = rank;
    }
    free(order);
    return 0;
}

static int build_prefixes(rc_tokenizer *t, rc_error *err)
{
    for (int32_t id = 0; id < (int32_t)t->n_tokens; id++) {
        if (rci_strmap_get(&t->vocab, t->tok_arena + t->tok_off[id], (size_t)t->tok_len[id]) != id) continue;
        const char *s = t->tok_arena + t->tok_off[id];
        size_t len = (size_t)t->tok_len[id];
        for (size_t k = 1; k < len; k++)
            if (rci_strmap_add(&t->prefixes, s, k, -2) == INT64_MIN) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        if (rci_strmap_set(&t->prefixes, s, len, id)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    return 0;
}

static int fill_from_proto(rc_tokenizer *t, const spm_proto *m, rc_error *err)
{
    if (m->model_type != 1 && m->model_type != 2)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: trainer_spec.model_type %d is not supported (UNIGRAM 1 and BPE 2 are)",
                            t->path, m->model_type);
    if (m->ws_suffix)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: treat_whitespace_as_suffix is not supported", t->path);
    if (rci_tok_alloc_ids(t, m->n, err)) return -1;
    t->score_f = malloc((size_t)m->n * sizeof *t->score_f);
    if (!t->score_f) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    /* as sentencepiece: the max starts at FLT_MIN (the least positive float), so with the
     * usual negative scores user-defined pieces score length * FLT_MIN - 0.1 */
    t->min_score_f = FLT_MAX;
    t->max_score_f = FLT_MIN;
    for (int32_t i = 0; i < (int32_t)m->n; i++) {
        const spm_piece *p = &m->pieces[i];
        const char *s = (const char *)p->piece;
        if (rci_tok_set_token(t, i, s, p->len, err)) return -1;
        t->score_f[i] = p->score;
        static const uint8_t flags[7] = {0, 0, TOKF_UNKNOWN, TOKF_CONTROL | TOKF_SPECIAL, TOKF_USER, TOKF_UNUSED, TOKF_BYTE};
        t->tok_flags[i] = flags[p->type];
        if (p->type == 1 || p->type == 4 || p->type == 5) {     /* sentencepiece's pieces_ */
            if (rci_strmap_get(&t->vocab, s, p->len) >= 0)
                return rc_error_set(err, RC_ERR_FORMAT, "%s: piece '%.*s' (id %d) appears twice", t->path, (int)p->len, s, (int)i);
            if (rci_strmap_set(&t->vocab, s, p->len, i)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        }
        if (p->type == 1) {
            if (p->score < t->min_score_f) t->min_score_f = p->score;
            if (p->score > t->max_score_f) t->max_score_f = p->score;
        }
        if (p->type == 2 && t->unk_id < 0) t->unk_id = i;
        if (p->type == 6) {
            int b = rci_tok_byte_value(t->tok_arena + t->tok_off[i], p->len);
            if (b < 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: BYTE piece %d is not <0xXX>", t->path, (int)i);
            t->byte_piece[b] = i;
        }
        if (p->type == 4) {
            char **u = realloc(t->user_pieces, (size_t)(t->n_user + 1) * sizeof *u);
            if (!u) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
            t->user_pieces = u;
            u[t->n_user] = malloc(p->len + 1);
            if (!u[t->n_user]) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
            memcpy(u[t->n_user], s, p->len);
            u[t->n_user++][p->len] = 0;
        }
    }
    if (t->unk_id < 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: no UNKNOWN piece", t->path);
    t->byte_fallback = m->byte_fallback;
    t->model = m->model_type == 2 ? TOK_MODEL_SPM_BPE : TOK_MODEL_SPM_UNIGRAM;
    t->dec = TOK_DEC_SPM;
    t->spm_dummy_prefix = m->dummy_prefix;
    t->spm_remove_ws = m->remove_ws;
    t->spm_escape_ws = m->escape_ws;
    if (m->unk_surface && m->unk_surface_len < sizeof t->unk_surface)
        snprintf(t->unk_surface, sizeof t->unk_surface, "%.*s", (int)m->unk_surface_len, (const char *)m->unk_surface);
    else
        snprintf(t->unk_surface, sizeof t->unk_surface, " \xE2\x81\x87 ");
    int32_t ids[3] = {m->bos_id, m->eos_id, m->pad_id};
    int32_t *dst[3] = {&t->bos, &t->eos, &t->pad};
    for (int i = 0; i < 3; i++) *dst[i] = ids[i] >= 0 && ids[i] < (int32_t)m->n ? ids[i] : -1;
    return 0;
}

static int spm_normalizer(rc_tokenizer *t, const spm_proto *m, rc_error *err)
{
    tok_norm *x = calloc(1, sizeof *x);
    if (!x) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->norm = x;
    t->n_norm = 1;
    x->kind = NORM_SPM;
    if (m->charsmap_len == 0) return 0;
    x->map_blob = malloc(m->charsmap_len);
    if (!x->map_blob) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    memcpy(x->map_blob, m->charsmap, m->charsmap_len);
    return rci_charsmap_init(&x->map, x->map_blob, m->charsmap_len, t->path, err);
}

rc_tokenizer *rci_spm_load(const char *path, rc_error *err)
{
    char *data;
    size_t len;
    if (rci_tok_read_file(path, &data, &len, err)) return NULL;
    spm_proto m;
    memset(&m, 0, sizeof m);
    rc_tokenizer *t = NULL;
    if (parse_model(path, (const uint8_t *)data, len, &m, err)) goto fail;
    t = rci_tok_new(path, err);
    if (!t || fill_from_proto(t, &m, err) || spm_normalizer(t, &m, err)) goto fail;
    if (t->model == TOK_MODEL_SPM_BPE ? spm_ranks(t, err) : build_prefixes(t, err)) goto fail;
    rci_meta_check_split(t);
    char dir[1024];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1, slash ? path : ".");
    int add_bos, add_eos;
    if (rci_tok_read_configs(t, dir, &add_bos, &add_eos, err) < 0) goto fail;
    /* add_special: the family's own default (LLaMA's <s> for BPE models, T5's </s> for
     * unigram ones), unless tokenizer_config.json says add_bos_token / add_eos_token */
    if (add_bos < 0 && add_eos < 0) {
        add_bos = t->model == TOK_MODEL_SPM_BPE;
        add_eos = t->model == TOK_MODEL_SPM_UNIGRAM;
    }
    if ((add_bos == 1 && t->bos >= 0 && rci_tok_ids_append(&t->prefix_ids, &t->n_prefix, t->bos)) ||
        (add_eos == 1 && t->eos >= 0 && rci_tok_ids_append(&t->suffix_ids, &t->n_suffix, t->eos))) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    if (rci_tok_finish(t, err)) goto fail;
    free(m.pieces);
    free(data);
    return t;
fail:
    free(m.pieces);
    free(data);
    rc_tokenizer_free(t);
    return NULL;
}

/* ---- the charsmap (Darts-clone double array) ----------------------------------------------- */

int rci_charsmap_init(tok_charsmap *m, uint8_t *blob, size_t n, const char *path, rc_error *err)
{
    memset(m, 0, sizeof *m);
    if (n < 4) return rc_error_set(err, RC_ERR_FORMAT, "%s: precompiled_charsmap of %zu bytes is truncated", path, n);
    uint32_t size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24;
    if (size % 4 || size > n - 4 || size == 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: precompiled_charsmap: trie size %u does not fit its %zu bytes", path, size, n);
    /* units are copied out so that reads are aligned and little-endian on any host */
    uint32_t *units = malloc(size);
    if (!units) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    for (uint32_t i = 0; i < size / 4; i++) {
        const uint8_t *p = blob + 4 + 4 * (size_t)i;
        units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    /* the blob keeps its bytes; units replace the trie part (same size) */
    memcpy(blob + 4, units, size);
    free(units);
    m->units = (const uint32_t *)(blob + 4);
    m->nunits = size / 4;
    m->strings = (const char *)blob + 4 + size;
    m->nstrings = n - 4 - size;
    return 0;
}

static uint32_t unit_offset(uint32_t u)
{
    return (u >> 10) << ((u & (1u << 9)) >> 6);
}

/* Prefixes of key[0..n) that are keys of the map, shortest first: their lengths and
 * replacement strings. Returns how many (at most max). A NUL byte ends the key. */
static int charsmap_prefixes(const tok_charsmap *m, const char *key, size_t n, size_t *lens,
                             const char **repl, size_t *repl_len, int max)
{
    if (!m->nunits) return 0;
    size_t pos = unit_offset(m->units[0]);
    int found = 0;
    for (size_t i = 0; i < n && found < max; i++) {
        uint8_t c = (uint8_t)key[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= m->nunits) break;
        uint32_t u = m->units[pos];
        if ((u & ((1u << 31) | 0xFF)) != c) break;
        pos ^= unit_offset(u);
        if (pos >= m->nunits) break;
        if ((u >> 8) & 1) {
            uint32_t v = m->units[pos] & ((1u << 31) - 1);
            if (v >= m->nstrings) continue;                     /* a malformed map: ignore */
            const char *s = m->strings + v, *z = memchr(s, 0, m->nstrings - v);
            lens[found] = i + 1;
            repl[found] = s;
            repl_len[found] = z ? (size_t)(z - s) : m->nstrings - v;
            found++;
        }
    }
    return found;
}

/* sentencepiece's NormalizePrefix: the longest user-defined piece or charsmap key at s,
 * else one character unchanged. */
static size_t spm_prefix(const rc_tokenizer *t, const tok_charsmap *m, const char *s, size_t n,
                         const char **out, size_t *out_len)
{
    size_t best = 0;
    for (int i = 0; i < t->n_user; i++) {
        size_t l = strlen(t->user_pieces[i]);
        if (l > best && l <= n && !memcmp(s, t->user_pieces[i], l)) best = l;
    }
    if (best) {
        *out = s;
        *out_len = best;
        return best;
    }
    size_t lens[32], rl[32];
    const char *r[32];
    int k = charsmap_prefixes(m, s, n, lens, r, rl, 32);
    if (k > 0) {
        *out = r[k - 1];
        *out_len = rl[k - 1];
        return lens[k - 1];
    }
    size_t l = (size_t)rci_utf8_len((unsigned char)s[0]);
    if (l > n) l = n;
    *out = s;
    *out_len = l;
    return l;
}

static int put_ws(tok_buf *out, int escape)
{
    return escape ? rci_buf_put(out, META, 3) : rci_buf_put(out, " ", 1);
}

int rci_spm_normalize(const rc_tokenizer *t, const char *s, size_t n, tok_buf *out)
{
    const tok_charsmap *m = &t->norm[0].map;
    const char *r;
    size_t rl;
    if (t->spm_remove_ws) {               /* leading whitespace goes */
        while (n > 0) {
            size_t c = spm_prefix(t, m, s, n, &r, &rl);
            if (rl != 1 || r[0] != ' ') break;
            s += c;
            n -= c;
        }
    }
    if (n == 0) return 0;
    int prev_space = t->spm_remove_ws;
    if (t->spm_dummy_prefix && put_ws(out, t->spm_escape_ws)) return -1;
    while (n > 0) {
        size_t c = spm_prefix(t, m, s, n, &r, &rl);
        while (prev_space && rl > 0 && r[0] == ' ') {
            r++;
            rl--;
        }
        if (rl > 0) {
            for (size_t i = 0; i < rl; i++) {
                int rc = r[i] == ' ' && t->spm_escape_ws ? rci_buf_put(out, META, 3) : rci_buf_put(out, r + i, 1);
                if (rc) return -1;
            }
            prev_space = r[rl - 1] == ' ';
        }
        s += c;
        n -= c;
        if (!t->spm_remove_ws) prev_space = 0;
    }
    if (t->spm_remove_ws) {               /* and trailing whitespace */
        size_t w = t->spm_escape_ws ? 3 : 1;
        const char *sp = t->spm_escape_ws ? META : " ";
        while (out->len >= w && !memcmp(out->p + out->len - w, sp, w)) out->len -= w;
        out->p[out->len] = 0;
    }
    return 0;
}

/* tokenizers' Precompiled normalizer: per grapheme cluster shorter than 6 bytes, its first
 * (shortest) key prefix replaces the whole cluster; otherwise char by char. */
int rci_precompiled_normalize(const tok_charsmap *m, const char *s, size_t n, tok_buf *out)
{
    size_t pos = 0, lens[1], rl[1];
    const char *r[1];
    while (pos < n) {
        size_t g = rci_uni_grapheme_len(s + pos, n - pos);
        if (g == 0) g = 1;
        if (g < 6 && charsmap_prefixes(m, s + pos, g, lens, r, rl, 1) == 1) {
            if (rci_buf_put(out, r[0], rl[0])) return -1;
            pos += g;
            continue;
        }
        size_t end = pos + g;
        while (pos < end) {
            size_t l = (size_t)rci_utf8_len((unsigned char)s[pos]);
            if (l > end - pos) l = end - pos;
            int k = charsmap_prefixes(m, s + pos, l, lens, r, rl, 1);
            if (k == 1 ? rci_buf_put(out, r[0], rl[0]) : rci_buf_put(out, s + pos, l)) return -1;
            pos += l;
        }
    }
    return 0;
}

/* ---- SentencePiece BPE ------------------------------------------------------------------------ */

typedef struct {
    int32_t start, len, prev, next;
    int freeze;
} spm_sym;

/* A pair of neighbours whose joined text is a piece goes on the heap. */
static int spm_pair(const rc_tokenizer *t, tok_work *w, const char *s, const spm_sym *sym, int32_t left)
{
    int32_t right = left >= 0 ? sym[left].next : -1;
    if (left < 0 || right < 0 || sym[left].freeze || sym[right].freeze) return 0;
    int32_t size = sym[left].len + sym[right].len;
    int64_t id = rci_strmap_get(&t->vocab, s + sym[left].start, (size_t)size);
    if (id < 0) return 0;
    if ((t->tok_flags[id] & TOKF_UNUSED) &&
        rci_strmap_set(&w->cache2, s + sym[left].start, (size_t)size, sym[left].len))
        return -1;
    tok_hent e = {t->spm_rank[id], left, right, size};
    return rci_heap_push(w, e);
}

/* Appends the ids of piece s[0..n) (its id, or -1 to look it up): unused pieces split
 * back into their halves; unknown ones become <0xXX> pieces (byte_fallback) or one unk
 * per run. */
static int spm_emit(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, int64_t id, int *prev_unk,
                    tok_ids *out)
{
    if (id < 0) id = rci_strmap_get(&t->vocab, s, n);
    if (id >= 0 && (t->tok_flags[id] & TOKF_UNUSED)) {
        int64_t left = rci_strmap_get(&w->cache2, s, n);
        if (left > 0 && (size_t)left < n)
            return spm_emit(t, w, s, (size_t)left, -1, prev_unk, out) ||
                   spm_emit(t, w, s + left, n - (size_t)left, -1, prev_unk, out);
    }
    if (id < 0) id = t->unk_id;
    if (id == t->unk_id && t->byte_fallback) {
        for (size_t i = 0; i < n; i++) {
            int32_t b = t->byte_piece[(unsigned char)s[i]];
            if (rci_ids_put(out, b >= 0 ? b : t->unk_id)) return -1;
        }
        *prev_unk = 1;
        return 0;
    }
    if (id == t->unk_id && *prev_unk) return 0;   /* runs of unknowns read as one */
    *prev_unk = id == t->unk_id;
    return rci_ids_put(out, (int32_t)id);
}

static int spm_bpe_piece(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, int *prev_unk,
                         tok_ids *out)
{
    int64_t cnt = 0;
    for (size_t i = 0; i < n; i += (size_t)rci_utf8_len((unsigned char)s[i])) cnt++;
    if (cnt > INT32_MAX / 2) return -1;
    if (cnt > w->sym_cap) {
        void *p = realloc(w->sym, (size_t)cnt * sizeof(spm_sym));
        if (!p) return -1;
        w->sym = p;
        w->sym_cap = cnt;
    }
    spm_sym *sym = w->sym;
    int32_t k = 0;
    for (size_t i = 0; i < n; k++) {
        size_t l = 0;
        for (int u = 0; u < t->n_user; u++) {
            size_t ul = strlen(t->user_pieces[u]);
            if (ul > l && ul <= n - i && !memcmp(s + i, t->user_pieces[u], ul)) l = ul;
        }
        sym[k].freeze = l > 0;
        if (!l) l = (size_t)rci_utf8_len((unsigned char)s[i]);
        if (l > n - i) l = n - i;
        sym[k].start = (int32_t)i;
        sym[k].len = (int32_t)l;
        sym[k].prev = k - 1;
        sym[k].next = -1;
        if (k > 0) sym[k - 1].next = k;
        i += l;
    }
    w->heap_len = 0;
    for (int32_t i = 0; i + 1 < k; i++)
        if (spm_pair(t, w, s, sym, i)) return -1;
    while (w->heap_len) {
        tok_hent e = rci_heap_pop(w);
        int32_t left = e.pos, right = e.a;
        if (sym[left].len == 0 || sym[right].len == 0 || sym[left].len + sym[right].len != e.b) continue;
        sym[left].len += sym[right].len;
        sym[right].len = 0;
        sym[left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = left;
        if (spm_pair(t, w, s, sym, sym[left].prev) || spm_pair(t, w, s, sym, left)) return -1;
    }
    for (int32_t i = k ? 0 : -1; i >= 0; i = sym[i].next)
        if (spm_emit(t, w, s + sym[i].start, (size_t)sym[i].len, -1, prev_unk, out)) return -1;
    return 0;
}

int rci_spm_bpe_encode(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    int prev_unk = 0;
    if (!t->split_meta) return spm_bpe_piece(t, w, s, n, &prev_unk, out);
    /* merges never cross a '▁' that follows another char: encode (and cache) the words */
    size_t start = 0;
    for (size_t i = 0; i <= n; i += i < n ? (size_t)rci_utf8_len((unsigned char)s[i]) : 1) {
        int cut = i == n || (i > start && i + 3 <= n && !memcmp(s + i, META, 3) &&
                             !(i >= 3 && !memcmp(s + i - 3, META, 3)));
        if (!cut) continue;
        const char *word = s + start;
        size_t len = i - start;
        start = i;
        /* a word starts with a known '▁' piece, so no unknown run crosses into it */
        prev_unk = 0;
        int64_t v = len <= 256 ? rci_strmap_get(&w->cache, word, len) : -1;
        if (v >= 0) {
            int64_t off = v >> 20, cnt = v & ((1 << 20) - 1);
            for (int64_t j = 0; j < cnt; j++)
                if (rci_ids_put(out, w->cache_ids.p[off + j])) return -1;
            continue;
        }
        int64_t before = out->len;
        if (spm_bpe_piece(t, w, word, len, &prev_unk, out)) return -1;
        if (len <= 256 && out->len - before < (1 << 20)) {
            int64_t off = w->cache_ids.len;
            for (int64_t j = before; j < out->len; j++)
                if (rci_ids_put(&w->cache_ids, out->p[j])) return -1;
            if (rci_strmap_set(&w->cache, word, len, off << 20 | (out->len - before))) return -1;
        }
    }
    return 0;
}

/* Cutting before each '▁' that follows a non-'▁' char is exact when no piece holds such
 * a '▁' inside, and '▁' itself is a piece. */
int rci_meta_check_split(rc_tokenizer *t)
{
    t->split_meta = 0;
    if (rci_strmap_get(&t->vocab, META, 3) < 0) return 0;
    for (int64_t e = 0; e < t->vocab.n; e++) {
        const char *s = t->vocab.arena + t->vocab.key_off[e];
        size_t n = t->vocab.key_len[e];
        for (size_t i = 1; i + 3 <= n; i++)
            if (!memcmp(s + i, META, 3) && !(i >= 3 && !memcmp(s + i - 3, META, 3))) return 0;
    }
    t->split_meta = 1;
    return 0;
}

/* ---- unigram ---------------------------------------------------------------------------- */

typedef struct {
    double score;
    int32_t start, id;
} lat_node;

/* Viterbi over the pieces that match at each char (sentencepiece's EncodeOptimized; the
 * same walk as tokenizers' Unigram). SentencePiece sums scores in float, tokenizers in
 * double; an unknown char scores min_score - 10. */
int rci_unigram_encode(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (n + 1 > (size_t)INT32_MAX) return -1;
    int spm = t->model == TOK_MODEL_SPM_UNIGRAM;
    if ((int64_t)n + 1 > w->lattice_cap) {
        void *p = realloc(w->lattice, (n + 1) * sizeof(lat_node));
        if (!p) return -1;
        w->lattice = p;
        w->lattice_cap = (int64_t)n + 1;
    }
    lat_node *lat = w->lattice;
    for (size_t i = 0; i <= n; i++) {
        lat[i].score = 0;
        lat[i].start = -1;
        lat[i].id = -1;
    }
    double unk_score = spm ? (double)(float)(t->min_score_f - 10.0f) : t->min_score_d - 10.0;
    for (size_t start = 0; start < n;) {
        double base = lat[start].score;
        size_t mblen = (size_t)rci_utf8_len((unsigned char)s[start]);
        if (mblen > n - start) mblen = n - start;
        int single = 0;
        for (size_t end = start; end < n;) {
            end += (size_t)rci_utf8_len((unsigned char)s[end]);
            if (end > n) end = n;
            int64_t v = rci_strmap_get(&t->prefixes, s + start, end - start);
            if (v == -1) break;
            if (v < 0) continue;
            if (spm && (t->tok_flags[v] & TOKF_UNUSED)) continue;
            double score;
            if (spm && (t->tok_flags[v] & TOKF_USER))
                score = (double)((float)(end - start) * t->max_score_f) - 0.1;   /* float product */
            else
                score = spm ? t->score_f[v] : t->score_d[v];
            double cand = score + base;
            if (spm) cand = (float)cand;
            if (lat[end].start < 0 || cand > lat[end].score) {
                lat[end].score = cand;
                lat[end].start = (int32_t)start;
                lat[end].id = (int32_t)v;
            }
            if (end - start == mblen) single = 1;
        }
        if (!single) {
            double cand = unk_score + base;
            if (spm) cand = (float)cand;
            lat_node *x = &lat[start + mblen];
            if (x->start < 0 || cand > x->score) {
                x->score = cand;
                x->start = (int32_t)start;
                x->id = t->unk_id;
            }
        }
        start += mblen;
    }
    /* backtrack into w->ids as (start, id) pairs, last node first */
    w->ids.len = 0;
    for (int64_t end = (int64_t)n; end > 0; end = lat[end].start)
        if (rci_ids_put(&w->ids, lat[end].start) || rci_ids_put(&w->ids, lat[end].id)) return -1;
    int64_t m = w->ids.len / 2;
    const int32_t *bk = w->ids.p;
    int prev_unk = 0;
    for (int64_t i = 0; i < m; i++) {
        int32_t st = bk[2 * (m - 1 - i)], id = bk[2 * (m - 1 - i) + 1];
        size_t e = i + 1 < m ? (size_t)bk[2 * (m - 2 - i)] : n;
        if (spm) {
            if (spm_emit(t, w, s + st, e - (size_t)st, id, &prev_unk, out)) return -1;
            continue;
        }
        if (id != t->unk_id || id < 0) {
            if (id >= 0 && rci_ids_put(out, id)) return -1;
            continue;
        }
        /* tokenizers fuses a run of unknowns, then looks its text up again */
        while (i + 1 < m && bk[2 * (m - 2 - i) + 1] == t->unk_id) {
            i++;
            e = i + 1 < m ? (size_t)bk[2 * (m - 2 - i)] : n;
        }
        int64_t v = rci_strmap_get(&t->prefixes, s + st, e - (size_t)st);
        if (v >= 0) {
            if (rci_ids_put(out, (int32_t)v)) return -1;
            continue;
        }
        int all = t->byte_fallback;
        for (size_t k = (size_t)st; all && k < e; k++) all = t->byte_piece[(unsigned char)s[k]] >= 0;
        if (all) {
            for (size_t k = (size_t)st; k < e; k++)
                if (rci_ids_put(out, t->byte_piece[(unsigned char)s[k]])) return -1;
        } else if (rci_ids_put(out, t->unk_id)) {
            return -1;
        }
    }
    return 0;
}
