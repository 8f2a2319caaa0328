/* tok_load_spm.c - loading a SentencePiece model (tokenizer.model, spiece.model) into a
 * tokenizer object: the protobuf is read field by field, its pieces become the token table
 * (with their scores and types), and its trainer and normalizer specs pick the model (BPE
 * or unigram), byte fallback, unknowns, the special ids and the normalizer. Calls
 * tok_files.c (reading, special-token configs), tok_normalize.c (the precompiled
 * charsmap), tok_pretok.c (the Metaspace check), tok_unigram.c (its prefix table),
 * tok_vocab.c, tok_tables.c and unicode.c; see tokenizer.c for the layering.
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
 * 1 fixed64, 2 length-delimited, 5 fixed32 (little-endian). */
#include "tok_pipeline.h"
#include "tok_files.h"
#include "tok_models.h"
#include "tok_stages.h"
#include "unicode.h"
#include "internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (rci_strmap_get(&t->vocab, rci_tok_text(t, id), (size_t)t->tok_len[id]) != id) continue;
        if (rci_unigram_index_piece(t, id)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
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
            int b = rci_tok_byte_value(rci_tok_text(t, i), p->len);
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
    rci_tok_norm *x = calloc(1, sizeof *x);
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

rc_tokenizer *rci_tok_load_spm(const char *path, rc_error *err)
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
    rci_tok_path_dir(dir, sizeof dir, path);
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
    rci_tok_free(t);
    return NULL;
}
