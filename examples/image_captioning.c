/* image_captioning.c - image captioning on Fashion-MNIST: a ViT-style encoder and a GPT-2
 * decoder with cross-attention, written as the three functions.
 *
 * Each image gets a caption made from its label with one of several templates ("a photo of
 * a sneaker", "an ankle boot, photographed in grey" ...), the template picked per example
 * from the seed. A small byte-level BPE tokenizer is trained by redco on those captions.
 *
 * The encoder cuts the 28 x 28 image into 4 x 4 patches of 7 x 7 pixels (a convolution with
 * stride 7), adds learned position embeddings and runs a few pre-LN transformer blocks. The
 * decoder is GPT-2 with a cross-attention layer in each block (Hugging Face's
 * GPT2LMHeadModel with add_cross_attention=true): its parameters carry that model's names
 * and layouts, so it saves as a Hugging Face directory. Encoder width = n_embd.
 *
 *   collate  images [B, 1, 28, 28] (normalised), ids [B, T] = <|endoftext|> + caption,
 *            targets [B, T] = caption + <|endoftext|>, padding -100
 *   loss     teacher-forced cross-entropy of the caption
 *   predict  the next-token logits at each row's current position (for generation)
 *
 * After training, held-out test images are captioned greedily and with beam search (both
 * written here: every step re-runs the predict function over the live rows through the
 * Predictor, data parallel, no key/value cache), and the fraction of captions naming the
 * image's class is printed (chance: 10%). With --workdir, WORKDIR/decoder is the decoder as
 * a Hugging Face GPT-2 directory (config.json, model.safetensors, vocab.json, merges.txt)
 * and WORKDIR/check.safetensors holds, for a few test images, the encoder's output and the
 * decoder's logits of their captions (the test compares them with transformers).
 *
 *   build/image_captioning [--steps 600] [--batch 32] [--lr 2e-3] [--train-limit 0]
 *        [--eval 200] [--beams 3] [--dim 64] [--heads 4] [--layers 2] [--vocab 400]
 *        [--seed 1] [--log-every N] [--data DIR] [--device cpu|opencl] [--workdir DIR]
 *   mpiexec -n 2 build/image_captioning ...      (data parallel)
 */
#include "redco/data.h"
#include "redco/dist.h"
#include "redco/pipeline.h"
#include "redco/predict.h"
#include "redco/safetensors.h"
#include "redco/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SIDE = 28, PATCH = 7, GRID = SIDE / PATCH, PATCHES = GRID * GRID, CLASSES = RC_FASHION_MNIST_CLASSES,
       TEMPLATES = 5, N_DUMP = 8 };

/* "%s %s" is the article and the class name */
static const char *const templates[TEMPLATES] = {
    "a photo of %s %s", "%s %s, photographed in grey", "a picture of %s %s",
    "a small grey image of %s %s", "a blurry photo of %s %s"};

typedef struct {
    int C, heads, layers, vocab, T;  /* width, heads, blocks (encoder and decoder each),
                                        ids, decoder positions */
} arch;

/* The user's data, handed to the three functions as `user`. */
typedef struct {
    arch a;
    rc_image_set train, test;
    uint64_t seed;
    char names[CLASSES][32];         /* "t-shirt", "trouser", ... "ankle boot" */
    char text[CLASSES * TEMPLATES][64];           /* every caption ... */
    int32_t *ids[CLASSES * TEMPLATES];            /* ... and its tokens */
    int64_t n_ids[CLASSES * TEMPLATES];
    int32_t eos;                     /* <|endoftext|>: start, end and input padding */
    int eval;                        /* 1: examples are test images */
    /* generation: rows are (image, beam); the Predictor runs over the live ones */
    int64_t n_rows, n_live, *live;   /* live[i]: the row of example i */
    int beams;
    int32_t *prefix;                 /* [n_rows, T + 1]: <|endoftext|> and the tokens so far */
    int32_t *len;                    /* [n_rows]: tokens in prefix */
    float *logits;                   /* [n_rows, vocab] of the last step (rank 0) */
} cap;

/* ---- captions ------------------------------------------------------------------------ */

/* The template of example i (training or test images): drawn from the seed. */
static int caption_of(const cap *d, int64_t i, int eval)
{
    rc_rng r = rc_rng_fold(rc_rng_fold(rc_rng_new(d->seed), eval ? 2 : 1), (uint64_t)i);
    int label = (eval ? d->test.labels : d->train.labels)[i];
    return label * TEMPLATES + (int)(rc_rng_next_u64(&r) % TEMPLATES);
}

static void make_captions(cap *d)
{
    for (int c = 0; c < CLASSES; c++) {
        const char *name = rc_fashion_mnist_class(c); /* "T-shirt/top" -> "t-shirt" */
        int k = 0;
        for (; name[k] && name[k] != '/' && k < 31; k++)
            d->names[c][k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] + 32 : name[k]);
        d->names[c][k] = 0;
        const char *article = strchr("aeiou", d->names[c][0]) ? "an" : "a";
        for (int t = 0; t < TEMPLATES; t++)
            snprintf(d->text[c * TEMPLATES + t], sizeof d->text[0], templates[t], article, d->names[c]);
    }
}

/* The class a caption names: the one class name in it as a whole phrase (not inside a
 * word, "shirt" not in "t-shirt"); -1 when it names none or several. */
static int named_class(const cap *d, const char *text)
{
    int found = -1;
    for (int c = 0; c < CLASSES; c++) {
        size_t n = strlen(d->names[c]);
        for (const char *s = strstr(text, d->names[c]); s; s = strstr(s + 1, d->names[c])) {
            char before = s > text ? s[-1] : ' ', after = s[n];
            int alone = !(before >= 'a' && before <= 'z') && before != '-' && !(after >= 'a' && after <= 'z');
            if (alone && found >= 0 && found != c)
                return -1;
            if (alone)
                found = c;
        }
    }
    return found;
}

/* Trains the BPE on the training captions (one per line) into dir and loads it; tokenizes
 * every caption and sets the decoder's positions T (the longest caption + 1). */
static rc_tokenizer *make_tokenizer(cap *d, const char *dir, int64_t vocab, rc_error *err)
{
    size_t size = (size_t)d->train.n * sizeof d->text[0] + 1, len = 0;
    char *text = malloc(size);
    if (!text) {
        rc_error_set(err, RC_ERR_MEMORY, "image_captioning: out of memory for the caption text");
        return NULL;
    }
    for (int64_t i = 0; i < d->train.n; i++)
        len += (size_t)snprintf(text + len, size - len, "%s\n", d->text[caption_of(d, i, 0)]);
    rc_bpe_train_opts o = {.vocab_size = vocab};
    int64_t got = rc_tokenizer_train_bpe(text, len, &o, dir, err);
    free(text);
    rc_tokenizer *tok = got < 0 ? NULL : rc_tokenizer_load(dir, err);
    if (!tok)
        return NULL;
    d->a.vocab = (int)rc_tokenizer_vocab_size(tok);
    d->eos = rc_tokenizer_eos(tok);
    d->a.T = 0;
    for (int k = 0; k < CLASSES * TEMPLATES; k++) {
        if (rc_tokenizer_encode(tok, d->text[k], strlen(d->text[k]), 0, &d->ids[k], &d->n_ids[k], err)) {
            rc_tokenizer_free(tok);
            return NULL;
        }
        if (d->n_ids[k] + 1 > d->a.T)
            d->a.T = (int)d->n_ids[k] + 1;
    }
    return tok;
}

/* ---- the model ------------------------------------------------------------------------ */

/* parameter PRE.NAME (e.g. "transformer.h.0" + "ln_1.weight") */
static rc_tensor *param(rc_graph *g, rc_params *p, const char *pre, const char *name)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", pre, name);
    return rc_params_get(g, p, full);
}

/* GPT-2's Conv1D: x [..., in] @ w [in, out] + b [out] */
static rc_tensor *conv1d(rc_graph *g, rc_params *p, const char *pre, const char *name, rc_tensor *x)
{
    char w[64], b[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    return rc_add(g, rc_matmul(g, x, param(g, p, pre, w), 0, 0), param(g, p, pre, b));
}

static rc_tensor *norm(rc_graph *g, rc_params *p, const char *pre, const char *name, rc_tensor *x)
{
    char w[64], b[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    return rc_layer_norm(g, x, param(g, p, pre, w), param(g, p, pre, b), 1e-5);
}

/* [B, T, C] -> [B, H, T, C / H] */
static rc_tensor *split_heads(rc_graph *g, rc_tensor *x, int H)
{
    if (!x)
        return NULL;
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[2] / H;
    return rc_permute(g, rc_reshape(g, x, 4, (int64_t[]){B, T, H, D}), (int[]){0, 2, 1, 3});
}

/* scaled dot-product attention of q [B, Tq, C] over k, v [B, Tk, C] in H heads -> [B, Tq, C] */
static rc_tensor *attend(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, int H, int causal)
{
    if (!q || !k || !v)
        return NULL;
    int64_t B = q->shape[0], Tq = q->shape[1], C = q->shape[2];
    q = split_heads(g, q, H), k = split_heads(g, k, H), v = split_heads(g, v, H);
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), NULL, 1.0 / sqrt((double)(C / H)), causal);
    rc_tensor *y = rc_permute(g, rc_matmul(g, att, v, 0, 0), (int[]){0, 2, 1, 3}); /* [B, Tq, H, D] */
    return rc_reshape(g, y, 3, (int64_t[]){B, Tq, C});
}

/* One pre-LN block PRE of h [B, T, C]: self-attention (causal in the decoder), then in the
 * decoder cross-attention over enc [B, P, C] (enc NULL: none), then the MLP. */
static rc_tensor *block(rc_graph *g, rc_params *p, const char *pre, int H, rc_tensor *h, rc_tensor *enc)
{
    rc_tensor *qkv[3] = {NULL, NULL, NULL};
    rc_split(g, conv1d(g, p, pre, "attn.c_attn", norm(g, p, pre, "ln_1", h)), 2, 3, qkv);
    h = rc_add(g, h, conv1d(g, p, pre, "attn.c_proj", attend(g, qkv[0], qkv[1], qkv[2], H, enc != NULL)));
    if (enc) {
        rc_tensor *q = conv1d(g, p, pre, "crossattention.q_attn", norm(g, p, pre, "ln_cross_attn", h));
        rc_tensor *kv[2] = {NULL, NULL};
        rc_split(g, conv1d(g, p, pre, "crossattention.c_attn", enc), 2, 2, kv); /* key, then value */
        h = rc_add(g, h, conv1d(g, p, pre, "crossattention.c_proj", attend(g, q, kv[0], kv[1], H, 0)));
    }
    rc_tensor *m = rc_gelu(g, conv1d(g, p, pre, "mlp.c_fc", norm(g, p, pre, "ln_2", h)));
    return rc_add(g, h, conv1d(g, p, pre, "mlp.c_proj", m));
}

/* images [B, 1, 28, 28] -> encoder states [B, 16, C] */
static rc_tensor *encode(rc_graph *g, rc_params *p, const arch *a, rc_tensor *images)
{
    if (!images)
        return NULL;
    int64_t B = images->shape[0];
    rc_conv2d_params cp = {.stride = {PATCH, PATCH}};
    rc_tensor *x = rc_conv2d(g, images, param(g, p, "encoder", "patch.weight"), param(g, p, "encoder", "patch.bias"), &cp);
    x = rc_permute(g, rc_reshape(g, x, 3, (int64_t[]){B, a->C, PATCHES}), (int[]){0, 2, 1});
    x = rc_add(g, x, param(g, p, "encoder", "pos"));
    char pre[32];
    for (int l = 0; l < a->layers; l++) {
        snprintf(pre, sizeof pre, "encoder.h.%d", l);
        x = block(g, p, pre, a->heads, x, NULL);
    }
    return norm(g, p, "encoder", "ln_f", x);
}

/* ids [B, T] attending to enc [B, P, C] -> logits [B, T, vocab] (GPT2LMHeadModel's) */
static rc_tensor *decode(rc_graph *g, rc_params *p, const arch *a, rc_tensor *ids, rc_tensor *enc)
{
    if (!ids || !enc)
        return NULL;
    int64_t T = ids->shape[1];
    int32_t pos[256];
    for (int t = 0; t < T && t < 256; t++)
        pos[t] = t;
    rc_tensor *wte = param(g, p, "transformer", "wte.weight");
    rc_tensor *h = rc_add(g, rc_embedding(g, wte, ids),
                          rc_embedding(g, param(g, p, "transformer", "wpe.weight"),
                                       rc_const(g, "positions", RC_I32, 1, &T, pos)));
    char pre[32];
    for (int l = 0; l < a->layers; l++) {
        snprintf(pre, sizeof pre, "transformer.h.%d", l);
        h = block(g, p, pre, a->heads, h, enc);
    }
    return rc_matmul(g, norm(g, p, "transformer", "ln_f", h), wte, 0, 1); /* lm_head tied to wte */
}

/* The parameters: encoder.* of our own, transformer.* as Hugging Face's GPT-2 names them.
 * Matrices N(0, 0.02), biases 0, layer-norm gains 1. A block's layer k is a layer norm
 * (in 0) or a Conv1D of weight [in C, out C], bias [out C]. */
static const struct {
    const char *name;
    int in, out, cross;
} layers[] = {
    {"ln_1", 0, 1, 0}, {"attn.c_attn", 1, 3, 0}, {"attn.c_proj", 1, 1, 0},
    {"ln_cross_attn", 0, 1, 1}, {"crossattention.q_attn", 1, 1, 1}, {"crossattention.c_attn", 1, 2, 1},
    {"crossattention.c_proj", 1, 1, 1}, {"ln_2", 0, 1, 0}, {"mlp.c_fc", 1, 4, 0}, {"mlp.c_proj", 4, 1, 0}};

static int add_layer(rc_params *p, const char *pre, const char *layer, int64_t C, int in, int out)
{
    char w[96], b[96];
    const rc_init ones = {.kind = RC_INIT_ONES};
    snprintf(w, sizeof w, "%s.%s.weight", pre, layer);
    snprintf(b, sizeof b, "%s.%s.bias", pre, layer);
    int rc = in ? rc_params_add(p, w, 2, (int64_t[]){in * C, out * C}) : rc_params_add_init(p, w, 1, &C, &ones);
    return rc | rc_params_add(p, b, 1, (int64_t[]){out * C});
}

static rc_params *make_params(const arch *a, uint64_t seed)
{
    rc_params *p = rc_params_new();
    int64_t C = a->C;
    int rc = !p;
    char pre[32];
    if (!rc) {
        rc |= rc_params_add(p, "encoder.patch.weight", 4, (int64_t[]){C, 1, PATCH, PATCH});
        rc |= rc_params_add(p, "encoder.patch.bias", 1, (int64_t[]){C});
        rc |= rc_params_add(p, "encoder.pos", 2, (int64_t[]){PATCHES, C});
        rc |= rc_params_add(p, "transformer.wte.weight", 2, (int64_t[]){a->vocab, C});
        rc |= rc_params_add(p, "transformer.wpe.weight", 2, (int64_t[]){a->T, C});
    }
    for (int decoder = 0; !rc && decoder < 2; decoder++) {
        for (int l = 0; l < a->layers; l++) {
            snprintf(pre, sizeof pre, "%s.h.%d", decoder ? "transformer" : "encoder", l);
            for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++)
                if (decoder || !layers[k].cross) /* the encoder has no cross-attention */
                    rc |= add_layer(p, pre, layers[k].name, C, layers[k].in, layers[k].out);
        }
        rc |= add_layer(p, decoder ? "transformer" : "encoder", "ln_f", C, 0, 1);
    }
    if (rc || rc_params_init_normal(p, 0.02, seed)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

/* ---- the three functions ---------------------------------------------------------------- */

static const rc_image_set *images_of(const cap *d)
{
    return d->eval ? &d->test : &d->train;
}

/* image i of s as [1, 28, 28], normalised with Fashion-MNIST's mean and std */
static void image_copy(float *dst, const rc_image_set *s, int64_t i)
{
    for (int k = 0; k < SIDE * SIDE; k++)
        dst[k] = (s->pixels[i * SIDE * SIDE + k] - 0.2860f) / 0.3530f;
}

/* collate: n images -> images [n, 1, 28, 28], ids [n, T] (<|endoftext|> + caption, padded
 * with <|endoftext|>) and targets [n, T] (caption + <|endoftext|>, padded with -100) */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    cap *d = user;
    int64_t T = d->a.T;
    float *images = rc_batch_add(out, "images", RC_F32, 4, (int64_t[]){n, 1, SIDE, SIDE});
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!images || !ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int b = 0; b < n; b++) {
        int k = caption_of(d, examples[b], d->eval);
        image_copy(images + b * SIDE * SIDE, images_of(d), examples[b]);
        for (int64_t t = 0; t < T; t++) {
            ids[b * T + t] = t == 0 ? d->eos : t <= d->n_ids[k] ? d->ids[k][t - 1] : d->eos;
            targets[b * T + t] = t < d->n_ids[k] ? d->ids[k][t] : t == d->n_ids[k] ? d->eos : RC_IGNORE_INDEX;
        }
    }
    return 0;
}

/* loss: the caption's cross-entropy given the image, teacher forced */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    cap *d = user;
    (void)rng, (void)err; /* no dropout */
    rc_tensor *enc = encode(g, params, &d->a, rc_batch_input(g, b, "images"));
    rc_tensor *logits = decode(g, params, &d->a, rc_batch_input(g, b, "ids"), enc);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* collate for generation: n live rows -> images, ids [n, T] (the prefix so far, padded) and
 * at [n, 1, T] (1 at the prefix's last position) */
static int collate_step(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    cap *d = user;
    int64_t T = d->a.T;
    float *images = rc_batch_add(out, "images", RC_F32, 4, (int64_t[]){n, 1, SIDE, SIDE});
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    float *at = rc_batch_add(out, "at", RC_F32, 3, (int64_t[]){n, 1, T});
    if (!images || !ids || !at)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int b = 0; b < n; b++) {
        int64_t row = d->live[examples[b]];
        image_copy(images + b * SIDE * SIDE, &d->test, row / d->beams);
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = t < d->len[row] ? d->prefix[row * (T + 1) + t] : d->eos;
        at[b * T + d->len[row] - 1] = 1;
    }
    return 0;
}

/* predict: the logits of the next token of each row [B, vocab] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    cap *d = user;
    (void)rng, (void)err;
    rc_tensor *enc = encode(g, params, &d->a, rc_batch_input(g, b, "images"));
    rc_tensor *logits = decode(g, params, &d->a, rc_batch_input(g, b, "ids"), enc); /* [B, T, V] */
    rc_tensor *next = rc_matmul(g, rc_batch_input(g, b, "at"), logits, 0, 0);    /* [B, 1, V] */
    return next ? rc_reshape(g, next, 2, (int64_t[]){next->shape[0], d->a.vocab}) : NULL;
}

/* output: the logits of example (live row) i, kept on rank 0 */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    cap *d = user;
    memcpy(d->logits + d->live[example] * d->a.vocab, row, (size_t)row_len * sizeof *row);
    return 0;
}

/* ---- generation ----------------------------------------------------------------------------- */

/* log-softmax of the logits x[V] into lp[V] */
static void log_softmax(const float *x, int V, double *lp)
{
    double m = x[0], s = 0;
    for (int v = 1; v < V; v++)
        m = x[v] > m ? x[v] : m;
    for (int v = 0; v < V; v++)
        s += exp(x[v] - m);
    for (int v = 0; v < V; v++)
        lp[v] = x[v] - m - log(s);
}

/* One step: the predictor over the live rows (every rank), then rank 0's choice (choose),
 * then the new prefixes and live rows sent from rank 0 to every rank. */
static int step(rc_deployer *dep, rc_predictor *p, cap *d, int batch, void (*choose)(cap *, void *),
                void *state, rc_error *err)
{
    if (rc_predictor_run(p, d->n_live, batch, err))
        return -1;
    if (rc_deployer_is_main(dep))
        choose(d, state);
    rc_comm *world = rc_deployer_mesh(dep)->world;
    int64_t T = d->a.T;
    if (rc_comm_bcast(world, &d->n_live, sizeof d->n_live, 0, err) ||
        rc_comm_bcast(world, d->live, (size_t)d->n_rows * sizeof *d->live, 0, err) ||
        rc_comm_bcast(world, d->len, (size_t)d->n_rows * sizeof *d->len, 0, err))
        return -1;
    return rc_comm_bcast(world, d->prefix, (size_t)(d->n_rows * (T + 1)) * sizeof *d->prefix, 0, err);
}

/* greedy: each live row takes its arg-max; a row ends at <|endoftext|> or T tokens */
static void choose_greedy(cap *d, void *state)
{
    (void)state;
    int64_t T = d->a.T, kept = 0;
    for (int64_t i = 0; i < d->n_live; i++) {
        int64_t row = d->live[i];
        const float *x = d->logits + row * d->a.vocab;
        int32_t best = 0;
        for (int v = 1; v < d->a.vocab; v++)
            best = x[v] > x[best] ? v : best;
        d->prefix[row * (T + 1) + d->len[row]++] = best;
        if (best != d->eos && d->len[row] <= T)
            d->live[kept++] = row;
    }
    d->n_live = kept;
}

/* Beam search state (rank 0): each image keeps `beams` rows; finished hypotheses are kept,
 * the best `beams` of them, scored by their summed log-probability / generated length. */
typedef struct {
    double *score;                   /* [n_rows] summed log-probability of each row */
    double *hyp_score;               /* [images, beams] */
    int32_t *hyp;                    /* [images, beams, T + 1] */
    int *n_hyp, *done;               /* [images] */
    int32_t *old_prefix, *old_len;
    double *lp;
} beam_state;

/* adds a finished hypothesis (prefix tokens, their count) to image i's best `beams` */
static void hyp_add(cap *d, beam_state *s, int64_t i, const int32_t *tokens, int32_t len, double score)
{
    int64_t T = d->a.T, K = d->beams, at = s->n_hyp[i] < K ? s->n_hyp[i]++ : -1;
    if (at < 0) { /* full: replace the worst when better */
        at = 0;
        for (int64_t k = 1; k < K; k++)
            at = s->hyp_score[i * K + k] < s->hyp_score[i * K + at] ? k : at;
        if (s->hyp_score[i * K + at] >= score)
            return;
    }
    s->hyp_score[i * K + at] = score;
    int32_t *h = s->hyp + (i * K + at) * (T + 1);
    for (int64_t t = 0; t <= T; t++)
        h[t] = t < len ? tokens[t] : d->eos;
}

static double worst_hyp(const cap *d, const beam_state *s, int64_t i)
{
    double w = INFINITY;
    for (int k = 0; k < s->n_hyp[i]; k++)
        w = s->hyp_score[i * d->beams + k] < w ? s->hyp_score[i * d->beams + k] : w;
    return w;
}

typedef struct { double score; int beam; int32_t token; } cand;

static int cand_cmp(const void *x, const void *y)
{
    double a = ((const cand *)x)->score, b = ((const cand *)y)->score;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Image i's step, as Hugging Face's beam search (length penalty 1, no early stopping): the
 * top 2K continuations of its K beams; one ending in <|endoftext|> among the first K becomes
 * a hypothesis, the best K others the new beams. The image is done when its K hypotheses
 * all score at least the best candidate's sum / generated length, or at T tokens (captions
 * are short: T <= 64, tokens[] has room). */
static int beam_image(cap *d, beam_state *s, int64_t i, const int *alive)
{
    int K = d->beams, V = d->a.vocab, n = 0;
    int64_t T = d->a.T;
    cand *c = malloc((size_t)(K * 2 * K) * sizeof *c);
    if (!c) {
        s->done[i] = 1;
        return 0;
    }
    for (int b = 0; b < K; b++) {
        int64_t row = i * K + b;
        if (!alive[b])
            continue;
        log_softmax(d->logits + row * V, V, s->lp);
        for (int r = 0; r < 2 * K; r++) { /* the 2K best tokens of this beam */
            int32_t best = -1;
            for (int v = 0; v < V; v++)
                if (s->lp[v] > -INFINITY && (best < 0 || s->lp[v] > s->lp[best]))
                    best = v;
            c[n++] = (cand){s->score[row] + s->lp[best], b, best};
            s->lp[best] = -INFINITY;
        }
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    int kept = 0;
    for (int r = 0; r < n && kept < K; r++) {
        const int32_t *src = s->old_prefix + (i * K + c[r].beam) * (T + 1);
        int32_t len = s->old_len[i * K + c[r].beam];
        if (c[r].token == d->eos) {
            if (r < K) {
                int32_t tokens[257];
                memcpy(tokens, src, (size_t)len * sizeof *src);
                tokens[len] = d->eos;
                hyp_add(d, s, i, tokens, len + 1, c[r].score / len); /* len generated, EOS in */
            }
            continue;
        }
        int64_t row = i * K + kept++;
        memcpy(d->prefix + row * (T + 1), src, (size_t)len * sizeof *src);
        d->prefix[row * (T + 1) + len] = c[r].token;
        d->len[row] = len + 1;
        s->score[row] = c[r].score;
    }
    /* done: K hypotheses, none below the best candidate's score / generated length */
    int32_t len = d->len[i * K];
    s->done[i] = s->n_hyp[i] == K && worst_hyp(d, s, i) >= c[0].score / (len - 1);
    if (!s->done[i] && len > T) { /* out of positions: the open beams become hypotheses */
        for (int b = 0; b < kept; b++)
            hyp_add(d, s, i, d->prefix + (i * K + b) * (T + 1), len, s->score[i * K + b] / (len - 1));
        s->done[i] = 1;
    }
    free(c);
    return kept;
}

static void choose_beam(cap *d, void *state)
{
    beam_state *s = state;
    int64_t T = d->a.T, K = d->beams, images = d->n_rows / K;
    int *alive = calloc((size_t)d->n_rows, sizeof *alive);
    if (!alive) { /* out of memory: stop, with the hypotheses found so far */
        d->n_live = 0;
        return;
    }
    for (int64_t i = 0; i < d->n_live; i++)
        alive[d->live[i]] = 1;
    memcpy(s->old_prefix, d->prefix, (size_t)(d->n_rows * (T + 1)) * sizeof *d->prefix);
    memcpy(s->old_len, d->len, (size_t)d->n_rows * sizeof *d->len);
    d->n_live = 0;
    for (int64_t i = 0; i < images; i++) {
        if (s->done[i])
            continue;
        int kept = beam_image(d, s, i, alive + i * K);
        for (int64_t b = 0; b < kept && !s->done[i]; b++)
            d->live[d->n_live++] = i * K + b;
    }
    free(alive);
}

/* Captions test images 0 .. n-1 with `beams` beams (1: greedy); on rank 0 fills caption[i]
 * (malloc'ed text). */
static int generate(rc_deployer *dep, rc_predictor *p, cap *d, const rc_tokenizer *tok, int64_t n, int beams,
                    int batch, char **caption, rc_error *err)
{
    int64_t T = d->a.T, V = d->a.vocab;
    d->beams = beams, d->n_rows = n * beams;
    d->live = malloc((size_t)d->n_rows * sizeof *d->live);
    d->prefix = malloc((size_t)(d->n_rows * (T + 1)) * sizeof *d->prefix);
    d->len = malloc((size_t)d->n_rows * sizeof *d->len);
    d->logits = malloc((size_t)(d->n_rows * V) * sizeof *d->logits);
    beam_state s = {calloc((size_t)d->n_rows, sizeof(double)), calloc((size_t)d->n_rows, sizeof(double)),
                    calloc((size_t)(d->n_rows * (T + 1)), sizeof(int32_t)), calloc((size_t)n, sizeof(int)),
                    calloc((size_t)n, sizeof(int)), malloc((size_t)(d->n_rows * (T + 1)) * sizeof(int32_t)),
                    malloc((size_t)d->n_rows * sizeof(int32_t)), malloc((size_t)V * sizeof(double))};
    int rc = !d->live || !d->prefix || !d->len || !d->logits || !s.score || !s.hyp_score || !s.hyp ||
             !s.n_hyp || !s.done || !s.old_prefix || !s.old_len || !s.lp;
    if (rc)
        rc_error_set(err, RC_ERR_MEMORY, "image_captioning: out of memory for %lld rows", (long long)d->n_rows);
    d->n_live = 0;
    for (int64_t r = 0; !rc && r < d->n_rows; r++) {
        d->prefix[r * (T + 1)] = d->eos, d->len[r] = 1;
        if (r % beams == 0) /* at first one beam per image: the others would repeat it */
            d->live[d->n_live++] = r;
    }
    d->eval = 1;
    while (!rc && d->n_live > 0)
        rc = step(dep, p, d, batch, beams > 1 ? choose_beam : choose_greedy, &s, err);
    d->eval = 0;
    for (int64_t i = 0; !rc && rc_deployer_is_main(dep) && i < n; i++) {
        const int32_t *ids = d->prefix + i * (T + 1);
        int64_t len = d->len[i];
        if (beams > 1) { /* the best hypothesis */
            int best = 0;
            for (int k = 1; k < s.n_hyp[i]; k++)
                best = s.hyp_score[i * beams + k] > s.hyp_score[i * beams + best] ? k : best;
            ids = s.hyp + (i * beams + best) * (T + 1);
            for (len = 1; len <= T && ids[len] != d->eos; len++)
                ;
        }
        rc = rc_tokenizer_decode(tok, ids, len, 1, &caption[i], NULL, err);
    }
    free(d->live), free(d->prefix), free(d->len), free(d->logits);
    free(s.score), free(s.hyp_score), free(s.hyp), free(s.n_hyp), free(s.done), free(s.old_prefix);
    free(s.old_len), free(s.lp);
    return rc;
}

/* ---- saving: the decoder as a Hugging Face GPT-2 directory, and the check file ------------- */

static int copy_file(const char *from, const char *to, rc_error *err)
{
    char tmp[4200], buf[65536];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE *in = fopen(from, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    size_t n;
    int rc = !out;
    while (out && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc |= fwrite(buf, 1, n, out) != n;
    rc |= in && ferror(in);
    if (in)
        fclose(in);
    if (out)
        rc |= fclose(out) != 0;
    if (rc || rename(tmp, to))
        return rc_error_set(err, RC_ERR_IO, "image_captioning: cannot copy %s to %s", from, to);
    return 0;
}

static int save_decoder(const cap *d, rc_params *params, const char *tok_dir, const char *dir, rc_error *err)
{
    char path[4100], tmp[4200];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return rc_error_set(err, RC_ERR_IO, "image_captioning: cannot write %s", tmp);
    fprintf(f, "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
               "  \"add_cross_attention\": true,\n  \"vocab_size\": %d,\n  \"n_positions\": %d,\n"
               "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
               "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
               "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
               "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n"
               "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"float32\"\n}\n",
            d->a.vocab, d->a.T, d->a.C, d->a.layers, d->a.heads, d->eos, d->eos);
    if (fclose(f) || rename(tmp, path))
        return rc_error_set(err, RC_ERR_IO, "image_captioning: cannot write %s", path);
    /* the decoder's tensors: every transformer.* parameter (lm_head is wte, as HF saves it) */
    int n = rc_params_count(params), m = 0, rc = 0;
    const char **names = calloc((size_t)n, sizeof *names);
    int *ndims = calloc((size_t)n, sizeof *ndims);
    const int64_t **shapes = calloc((size_t)n, sizeof *shapes);
    float **data = calloc((size_t)n, sizeof *data);
    rc = !names || !ndims || !shapes || !data;
    for (int i = 0; !rc && i < n; i++) {
        if (strncmp(rc_params_name(params, i), "transformer.", 12))
            continue;
        names[m] = rc_params_name(params, i);
        rc_params_shape(params, i, &ndims[m], &shapes[m]);
        data[m] = malloc((size_t)rc_params_tensor_numel(params, i) * sizeof(float));
        rc = !data[m] || rc_params_read(params, i, data[m], err);
        m++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", "pt"};
    if (!rc)
        rc = rc_safetensors_write(path, m, names, ndims, shapes, (const float *const *)data, 1, meta, err);
    else if (!err->code)
        rc_error_set(err, RC_ERR_MEMORY, "image_captioning: out of memory saving the decoder");
    for (int i = 0; i < m; i++)
        free(data[i]);
    free(names), free(ndims), free(shapes), free(data);
    static const char *const files[2] = {"vocab.json", "merges.txt"};
    for (int k = 0; !rc && k < 2; k++) {
        snprintf(tmp, sizeof tmp, "%s/%s", tok_dir, files[k]);
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        rc = copy_file(tmp, path, err);
    }
    return rc;
}

/* The check file: for test images 0 .. N_DUMP-1, images, their caption's ids, the encoder
 * states and the decoder's logits (the same functions as the loss, run on the deployer's
 * device); the captions' text in the metadata. */
static int save_check(rc_deployer *dep, cap *d, rc_params *params, const char *path, rc_error *err)
{
    rc_batch b = {0};
    int64_t ex[N_DUMP] = {0, 1, 2, 3, 4, 5, 6, 7};
    d->eval = 1;
    int rc = collate(&b, ex, N_DUMP, d, err);
    d->eval = 0;
    rc_graph *g = rc_graph_new();
    rc_tensor *enc = encode(g, params, &d->a, rc_batch_input(g, &b, "images"));
    rc_tensor *logits = decode(g, params, &d->a, rc_batch_input(g, &b, "ids"), enc);
    rc_tensor *outs[2] = {enc, logits};
    rc_plan *plan = NULL;
    float *e = NULL, *l = NULL;
    if (!rc && rc_graph_error(g))
        rc = rc_error_set(err, RC_ERR_ARG, "image_captioning: %s", rc_graph_error(g));
    if (!rc) {
        plan = rc_plan_new_on(rc_deployer_backend(dep), g, outs, 2, err);
        e = malloc(rc_tensor_nbytes(enc)), l = malloc(rc_tensor_nbytes(logits));
        rc = !plan || !e || !l || rc_batch_feed(&b, plan, err) || rc_plan_run(plan, err) ||
             rc_plan_read(plan, enc, e, err) || rc_plan_read(plan, logits, l, err);
    }
    const rc_array *im = rc_batch_get(&b, "images"), *ids = rc_batch_get(&b, "ids");
    if (!rc) {
        rc_st_entry t[4] = {{"images", "F32", 4, im->shape, im->data},
                            {"input_ids", "I32", 2, ids->shape, ids->data},
                            {"encoder_hidden_states", "F32", 3, enc->shape, e},
                            {"logits", "F32", 3, logits->shape, l}};
        char keys[N_DUMP][16];
        const char *meta[2 * N_DUMP + 2] = {"format", "pt"};
        for (int i = 0; i < N_DUMP; i++) {
            snprintf(keys[i], sizeof keys[i], "caption%d", i);
            meta[2 + 2 * i] = keys[i];
            meta[3 + 2 * i] = d->text[caption_of(d, i, 1)];
        }
        rc = rc_safetensors_write_entries(path, 4, t, N_DUMP + 1, meta, err);
    }
    free(e), free(l);
    rc_plan_free(plan);
    rc_graph_free(g);
    rc_batch_free(&b);
    return rc;
}

/* ---- main --------------------------------------------------------------------------------- */

static int64_t count_train(int epoch, void *user)
{
    (void)epoch;
    return ((cap *)user)->train.n;
}

static int64_t count_test(int epoch, void *user)
{
    (void)epoch;
    return ((cap *)user)->test.n;
}

/* The teacher-forced caption loss over the test images (collate reads them while d->eval). */
static int evaluate(rc_trainer *t, cap *d, int batch, double *out, rc_error *err)
{
    int64_t tokens = 0;
    d->eval = 1;
    int rc = rc_trainer_eval(t, (rc_examples){count_test, d}, batch, out, &tokens, err);
    d->eval = 0;
    return rc;
}

typedef struct {
    int64_t steps, train_limit, eval, log_every;
    int batch, beams, dim, heads, layers, vocab;
    double lr;
    uint64_t seed;
    const char *data, *device, *workdir;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){600, 0, 200, 0, 32, 3, 64, 4, 2, 400, 2e-3, 1, NULL, NULL, NULL};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--train-limit")) a->train_limit = atoll(v);
        else if (!strcmp(k, "--eval")) a->eval = atoll(v);
        else if (!strcmp(k, "--log-every")) a->log_every = atoll(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--beams")) a->beams = atoi(v);
        else if (!strcmp(k, "--dim")) a->dim = atoi(v);
        else if (!strcmp(k, "--heads")) a->heads = atoi(v);
        else if (!strcmp(k, "--layers")) a->layers = atoi(v);
        else if (!strcmp(k, "--vocab")) a->vocab = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--seed")) a->seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    if (!ok || a->steps < 1 || a->batch < 1 || a->eval < N_DUMP || a->beams < 2 || a->dim < 1 || a->heads < 1 ||
        a->dim % a->heads || a->layers < 1 || a->vocab < 257 || a->train_limit < 0) {
        fprintf(stderr, "usage: image_captioning [--steps N] [--batch B] [--lr LR] [--train-limit N]\n"
                        "        [--eval N >= %d] [--beams K >= 2] [--dim C] [--heads H] [--layers L]\n"
                        "        [--vocab V] [--seed S] [--log-every N] [--data DIR] [--device cpu|opencl]\n"
                        "        [--workdir DIR]\n", N_DUMP);
        return -1;
    }
    return 0;
}

/* Captions the first n test images greedily and with beam search; prints a few and the
 * fraction naming the right class. */
static int caption_test(rc_deployer *dep, rc_predictor *p, cap *d, const rc_tokenizer *tok, int64_t n, int beams,
                        int batch, rc_error *err)
{
    char **greedy = calloc((size_t)n, sizeof *greedy), **beam = calloc((size_t)n, sizeof *beam);
    int rc = !greedy || !beam ? rc_error_set(err, RC_ERR_MEMORY, "image_captioning: out of memory") : 0;
    if (!rc)
        rc = generate(dep, p, d, tok, n, 1, batch, greedy, err);
    if (!rc)
        rc = generate(dep, p, d, tok, n, beams, batch, beam, err);
    if (!rc && rc_deployer_is_main(dep)) {
        int right[2] = {0, 0}, formed[2] = {0, 0};
        for (int64_t i = 0; i < n; i++) {
            int label = d->test.labels[i];
            char *c[2] = {greedy[i], beam[i]};
            for (int k = 0; k < 2; k++) {
                right[k] += named_class(d, c[k]) == label;
                for (int t = 0; t < TEMPLATES; t++)
                    formed[k] += !strcmp(c[k], d->text[label * TEMPLATES + t]);
            }
            if (i < N_DUMP)
                printf("test image %lld (%s): greedy \"%s\", beam \"%s\"\n", (long long)i, d->names[label], greedy[i],
                       beam[i]);
        }
        printf("held-out captions naming the right class: greedy %.3f, beam(%d) %.3f over %lld images "
               "(chance 0.100)\n", (double)right[0] / n, beams, (double)right[1] / n, (long long)n);
        printf("captions that are exactly a template of the right class: greedy %.3f, beam %.3f\n",
               (double)formed[0] / n, (double)formed[1] / n);
    }
    for (int64_t i = 0; i < n; i++)
        free(greedy ? greedy[i] : NULL), free(beam ? beam[i] : NULL);
    free(greedy), free(beam);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    cap d = {.a = {.C = a.dim, .heads = a.heads, .layers = a.layers}, .seed = a.seed};
    make_captions(&d);
    char tok_dir[] = "/tmp/image_captioning_tok_XXXXXX";
    rc_tokenizer *tok = NULL;
    rc_params *params = NULL;
    if (!rc_fashion_mnist_load(&d.train, a.data, "train", a.train_limit, &err) &&
        !rc_fashion_mnist_load(&d.test, a.data, "t10k", a.eval, &err)) {
        if (!mkdtemp(tok_dir))
            rc_error_set(&err, RC_ERR_IO, "image_captioning: cannot make a directory %s", tok_dir);
        else
            tok = make_tokenizer(&d, tok_dir, a.vocab, &err);
    }
    if (tok && !(params = make_params(&d.a, a.seed)))
        rc_error_set(&err, RC_ERR_MEMORY, "image_captioning: cannot make the parameters");
    rc_deployer_options o = {.seed = a.seed, .workdir = a.workdir, .verbose = 1, .device = a.device};
    rc_deployer *dep = params ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    rc_trainer *t = dep ? rc_trainer_new(dep, collate, loss, &d, params, NULL, &err) : NULL;
    rc_predictor *p = t ? rc_predictor_new(dep, collate_step, predict, output, &d, params, &err) : NULL;
    if (!p) {
        fprintf(stderr, "image_captioning: %s\n", err.msg);
        return 1;
    }
    int main_rank = rc_deployer_is_main(dep);
    if (main_rank)
        printf("Fashion-MNIST: %lld train + %lld test images; BPE of %d ids, captions of at most %d tokens; "
               "ViT encoder + GPT-2 decoder, %d + %d blocks of width %d (%lld parameters) on %s\n",
               (long long)d.train.n, (long long)d.test.n, d.a.vocab, d.a.T - 1, d.a.layers, d.a.layers, d.a.C,
               (long long)rc_params_numel(params), rc_backend_name(rc_deployer_backend(dep)));

    double before = 0, after = 0;
    int64_t log_every = a.log_every ? a.log_every : a.steps >= 10 ? a.steps / 10 : 1;
    rc_train_options to = {.steps = a.steps, .batch_size = a.batch, .shuffle = 1, .optimizer = "adamw",
                           .lr = a.lr, .weight_decay = 0.01, .grad_clip = 1.0, .schedule = RC_SCHEDULE_COSINE,
                           .warmup = a.steps / 10, .log_every = log_every, .tokenizer_dir = tok_dir};
    int rc = evaluate(t, &d, 50, &before, &err);
    if (!rc)
        rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err);
    if (!rc)
        rc = evaluate(t, &d, 50, &after, &err);
    if (!rc && main_rank)
        printf("held-out caption loss: before %.4f, after %.4f\n", before, after);
    if (!rc)
        rc = caption_test(dep, p, &d, tok, d.test.n, a.beams, 64, &err);
    if (!rc && main_rank && a.workdir) {
        char path[4000];
        snprintf(path, sizeof path, "%s/decoder", a.workdir);
        rc = save_decoder(&d, params, tok_dir, path, &err);
        snprintf(path, sizeof path, "%s/check.safetensors", a.workdir);
        if (!rc)
            rc = save_check(dep, &d, params, path, &err);
        if (!rc)
            printf("saved %s/decoder (Hugging Face GPT-2 with cross-attention) and %s\n", a.workdir, path);
    }
    if (rc)
        fprintf(stderr, "image_captioning: %s\n", err.msg);
    rc_predictor_free(p);
    rc_trainer_free(t);
    rc_deployer_free(dep); /* and MPI, which it started when run under mpirun */
    rc_params_free(params);
    rc_tokenizer_free(tok);
    for (int k = 0; k < CLASSES * TEMPLATES; k++)
        free(d.ids[k]);
    rc_image_set_free(&d.train);
    rc_image_set_free(&d.test);
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.json", tok_dir), unlink(path);
    snprintf(path, sizeof path, "%s/merges.txt", tok_dir), unlink(path);
    rmdir(tok_dir);
    return rc ? 1 : 0;
}
