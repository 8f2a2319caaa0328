/* redco/data.h - training data: token files, datasets, epoch order and its split over
 * data-parallel ranks.
 *
 * A quick tour.
 *
 *     rc_dataset_opts o = {.tokenizer = tok, .tokenizer_path = "data/gpt2"};
 *     rc_dataset *ds = rc_dataset_open("corpus.txt", &o, &err);
 *     int64_t T = 64, n = rc_dataset_windows(ds, T);      // floor((N - 1) / T)
 *     int64_t *order = malloc(n * sizeof *order);
 *     rc_epoch_order(n, seed, epoch, 1, order);           // a permutation of 0..n-1
 *     rc_data_split sp;
 *     rc_data_split_init(&sp, n, B, world, accum, RC_TAIL_DROP, &err);
 *     int64_t idx[B];
 *     for (int64_t s = 0; s < sp.steps; s++) {
 *         rc_data_split_batch(&sp, order, rank, s, idx, &err); // rank's B windows
 *         for (int b = 0; b < B; b++)
 *             rc_dataset_window(ds, T, idx[b], inputs + b * T, targets + b * T, &err);
 *     }
 *
 * Files (design.md §2):
 *   .npy    a 1-D array of token ids, dtype <i4, <u2 or <i8, NumPy format 1.0, 2.0 or 3.0,
 *           C order. Memory-mapped, never read whole. Ids are checked (>= 0, below the
 *           tokenizer's vocabulary when one is given, else below 2^31) as they are read.
 *   .txt    raw UTF-8 text: its tokens are exactly encode(text, add_special = 0), no BOS or
 *           EOS. Read in chunks (1 MiB by default); see "Chunk boundaries" below.
 *   .jsonl  one JSON object per line, every line of the same kind (blank lines skipped):
 *           {"text": ...}        language modelling. Each document is
 *                                encode(text, add_special = 1) followed by the tokenizer's
 *                                EOS (when it has one and add_special did not already end
 *                                the document with it), and documents are concatenated:
 *                                GPT-2 gives  doc <|endoftext|> doc <|endoftext|> ...
 *           {"prompt": ..., "completion": ...}   instruction tuning: one example per line,
 *                                ids = P ++ encode(prompt, 0) ++ encode(completion, 0) ++ [EOS]
 *                                where P is the prefix add_special puts before text (LLaMA's
 *                                <s>; nothing for GPT-2) and EOS is left out when the
 *                                tokenizer has none. loss_mask is 0 on P and the prompt, 1 on
 *                                the completion and EOS. Prompt and completion are encoded
 *                                separately, so the mask boundary is exact.
 *           {"source": ..., "target": ...}       sequence to sequence: one example per line,
 *                                source = encode(source, 1), target = encode(target, 1) (as
 *                                Hugging Face tokenizers do; T5 ends both with </s>).
 *           Other keys are ignored. A bad line is an error naming the file and line number.
 *
 * Language-model windows: the token stream of N tokens is cut into consecutive windows of
 * T + 1 tokens at stride T; window i covers tokens [i*T, i*T + T]: inputs = its first T,
 * targets = its last T (the next token of each). The incomplete tail is dropped, so there
 * are floor((N - 1) / T) windows (0 when N < T + 1).
 *
 * Token cache (.txt and {"text"} .jsonl): the tokens of DATA are saved beside it as
 * DATA.<fingerprint>.npy (or in the options' cache_dir), where the fingerprint is 16 hex digits of a 64-bit FNV-1a hash
 * of the tokenizer files' names and contents (tokenizer.json, vocab.json, merges.txt,
 * tokenizer.model, tokenizer_config.json, special_tokens_map.json, added_tokens.json,
 * whichever exist) and of this library's tokenization rules version. A cache is used only
 * when it is newer than DATA (modification times, as make does); otherwise it is rewritten.
 * It is written under a temporary name and renamed, so a crash never leaves a partial
 * cache. Ids are stored as <u2 when the vocabulary has at most 65536 ids (GPT-2: half the
 * disk), else <i4. When the directory is not writable the dataset still opens (tokens in
 * memory) and info.cache says RC_CACHE_UNWRITABLE, so the caller can print a note.
 * Instruction and seq2seq files are not cached (they are small; examples kept in memory).
 *
 * Chunk boundaries (.txt): a chunk is cut only where tokenizing the two sides apart gives
 * the same tokens as tokenizing them together: right after "\n" or right before " " when
 * the bytes on both sides of that character are printable ASCII (0x21-0x7E), e.g. "a\n|B"
 * or "a| b". For GPT-2-style byte-level BPE (its pre-tokenizer never joins a token across
 * such a point) this is exact. When a chunk holds no such point it is extended (up to 64
 * chunks); past that it is cut at a UTF-8 character boundary and info.unsafe_cuts counts
 * it. Whether the tokenizer is chunk-safe is checked at open on probe strings; when it is
 * not (SentencePiece adds a "▁" prefix to every encode call) the .txt is tokenized whole
 * and info.chunks is 1.
 *
 * Images (MNIST-style IDX files, Fashion-MNIST): see rc_idx_read and rc_image_set below.
 *
 * Epoch order and its split over data-parallel ranks: see rc_epoch_order and rc_data_split
 * below. (A tensor's split over model shards is another thing: redco/shard.h.)
 *
 * Errors never abort: functions return -1 (or NULL) and fill an rc_error naming the file,
 * line, field, index or id at fault.
 */
#ifndef REDCO_DATA_H
#define REDCO_DATA_H

#include "redco.h"
#include "redco/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ---- .npy token arrays ------------------------------------------------------------ */

/* Element types of token files; the value is the element size in bytes. */
typedef enum { RC_NPY_U16 = 2, RC_NPY_I32 = 4, RC_NPY_I64 = 8 } rc_npy_dtype;

/* A read-only, memory-mapped 1-D .npy array. */
typedef struct {
    rc_npy_dtype dtype;
    int64_t n;               /* elements */
    const uint8_t *data;     /* n * dtype bytes, little-endian, maybe unaligned */
    void *map;               /* the mapping (NULL for an empty array) */
    size_t map_len;
    int version;             /* format major version: 1, 2 or 3 */
} rc_npy;

/* Maps PATH. Errors: not a .npy (magic), truncated header, unknown version, a header dict
 * without 'descr'/'fortran_order'/'shape', fortran_order True, a shape that is not 1-D,
 * a dtype other than <i4/<u2/<i8, data shorter than the shape says. */
int rc_npy_open(rc_npy *a, const char *path, rc_error *err);
void rc_npy_close(rc_npy *a);
/* element i (0 <= i < a->n) as int64 */
int64_t rc_npy_get(const rc_npy *a, int64_t i);

/* Writes ids[n] (int32 values) as a 1-D .npy (format 1.0) of DTYPE, atomically: to a
 * temporary name beside PATH, then renamed over it. An id that does not fit DTYPE is an
 * error. */
int rc_npy_write(const char *path, rc_npy_dtype dtype, const int32_t *ids, int64_t n,
                 rc_error *err);

/* ---- datasets --------------------------------------------------------------------- */

typedef struct rc_dataset rc_dataset;

typedef enum {
    RC_DATA_LM = 0,          /* a token stream cut into windows (.npy, .txt, {"text"}) */
    RC_DATA_INSTRUCT,        /* {"prompt", "completion"} examples */
    RC_DATA_SEQ2SEQ          /* {"source", "target"} examples */
} rc_data_kind;

typedef enum {
    RC_CACHE_OFF = 0,        /* nothing to cache (.npy, examples), or no tokenizer_path */
    RC_CACHE_HIT,            /* tokens read from an existing cache: nothing tokenized */
    RC_CACHE_WRITTEN,        /* tokenized, and the cache written */
    RC_CACHE_UNWRITABLE      /* tokenized, but the cache could not be written (kept in memory) */
} rc_cache_status;

typedef struct {
    const rc_tokenizer *tokenizer;  /* needed for .txt and .jsonl; may be NULL for .npy
                                       (given, it bounds the ids of a .npy too) */
    const char *tokenizer_path;     /* the directory or file the tokenizer was loaded from:
                                       its files name the cache. NULL: no cache */
    int no_cache;                   /* 1: never read or write a cache */
    const char *cache_dir;          /* NULL: the cache beside DATA. Else the cache is
                                       CACHE_DIR/NAME-<path>.<fingerprint>.npy, NAME being
                                       DATA's file name and <path> 16 hex digits of a hash of
                                       DATA's absolute path (files of one name in different
                                       directories apart); CACHE_DIR and its parents are made
                                       when missing */
    size_t chunk_bytes;             /* .txt read size; 0: 1 MiB (tests use small ones) */
} rc_dataset_opts;

/* What open did, for logs and tests. */
typedef struct {
    rc_data_kind kind;
    rc_cache_status cache;
    char cache_path[1024];          /* the cache file (set unless cache is RC_CACHE_OFF) */
    int64_t tokenized_bytes;        /* text bytes encoded by this open (0 on a cache hit) */
    int64_t chunks;                 /* encode calls on .txt text */
    int64_t unsafe_cuts;            /* .txt chunk cuts at a mere UTF-8 boundary */
    int64_t lines;                  /* .jsonl lines read */
} rc_dataset_info;

/* Opens PATH by its extension (.npy, .txt, .jsonl). OPTS may be NULL for a .npy. */
rc_dataset *rc_dataset_open(const char *path, const rc_dataset_opts *opts, rc_error *err);
void rc_dataset_close(rc_dataset *ds);
const rc_dataset_info *rc_dataset_info_get(const rc_dataset *ds);
rc_data_kind rc_dataset_kind(const rc_dataset *ds);

/* N: tokens in the stream (RC_DATA_LM), or in all examples together. */
int64_t rc_dataset_tokens(const rc_dataset *ds);
/* floor((N - 1) / T) for RC_DATA_LM; 0 for the example kinds or T < 1. */
int64_t rc_dataset_windows(const rc_dataset *ds, int64_t T);
/* Window i of length T: inputs[T] = tokens [i*T, i*T + T), targets[T] = tokens
 * [i*T + 1, i*T + T]. Errors: i out of range, an id out of range (named with its position). */
int rc_dataset_window(const rc_dataset *ds, int64_t T, int64_t i, int32_t *inputs,
                      int32_t *targets, rc_error *err);
/* Tokens [start, start + n) of the stream into out[n] (RC_DATA_LM). */
int rc_dataset_read(const rc_dataset *ds, int64_t start, int64_t n, int32_t *out,
                    rc_error *err);

/* One instruction or seq2seq example; the arrays belong to the dataset. */
typedef struct {
    const int32_t *ids;        /* [n]: prompt + completion (instruct), source (seq2seq) */
    const uint8_t *loss_mask;  /* [n]: 1 where the token is predicted by the loss (the
                                  completion and EOS), 0 on the prompt; NULL for seq2seq */
    int64_t n;
    const int32_t *target;     /* [n_target]: seq2seq target ids; NULL for instruct */
    int64_t n_target;
} rc_data_example;

/* Examples in an RC_DATA_INSTRUCT or RC_DATA_SEQ2SEQ dataset (0 for RC_DATA_LM). */
int64_t rc_dataset_examples(const rc_dataset *ds);
int rc_dataset_example(const rc_dataset *ds, int64_t i, rc_data_example *ex, rc_error *err);

/* Packs an instruction example for a decoder-only model, as a window:
 * inputs[t] = ids[t], targets[t] = ids[t + 1] where loss_mask[t + 1] is 1, else
 * RC_IGNORE_INDEX; positions past the example get inputs = pad and targets =
 * RC_IGNORE_INDEX. An example longer than T + 1 tokens is truncated to its first T + 1.
 * Returns the number of targets that count (not ignored). */
int64_t rc_data_example_pack(const rc_data_example *ex, int64_t T, int32_t pad,
                             int32_t *inputs, int32_t *targets);

/* ---- IDX arrays and image sets (MNIST, Fashion-MNIST) ------------------------------- */

/* IDX, the format of MNIST and Fashion-MNIST: bytes 0, 0, a type code, the number of
 * dimensions D; D sizes, each a big-endian uint32; then the elements in C order. Only the
 * type code 0x08 (unsigned byte, what those data sets use) is read. A file whose first two
 * bytes are 1f 8b is gzip-compressed (Debian ships Fashion-MNIST so) and is decompressed as
 * it is read; any other file is read as it is. */
enum { RC_IDX_MAX_DIMS = 4 };

typedef struct {
    int ndim;                       /* 1..RC_IDX_MAX_DIMS */
    int64_t dims[RC_IDX_MAX_DIMS];  /* dims[0]: the items read (at most the file's) */
    int64_t n;                      /* elements read: the product of dims */
    int64_t file_items;             /* dims[0] as the file's header says */
    uint8_t *data;                  /* [n], malloc'ed (NULL when n is 0) */
} rc_idx;

/* Reads PATH into A: the first LIMIT items along dimension 0 (all when LIMIT <= 0). Errors
 * name the file: it cannot be opened, not IDX (magic), a type code other than 0x08, 0 or
 * more than RC_IDX_MAX_DIMS dimensions, a truncated header or data (with the bytes the
 * header promises and those there are), bytes past the data (whole reads only), a broken
 * gzip stream. */
int rc_idx_read(const char *path, int64_t limit, rc_idx *a, rc_error *err);
void rc_idx_free(rc_idx *a);
/* Writes A (type 0x08) to PATH, gzip-compressed (level 9, no name or time in the gzip
 * header, so the bytes depend only on A) when GZIP is 1. A->file_items is not used. */
int rc_idx_write(const char *path, const rc_idx *a, int gzip, rc_error *err);

/* Labelled grey-scale images. pixels is [n, h, w], which is also NCHW with C = 1. */
typedef struct {
    int64_t n, h, w;
    float *pixels;                  /* [n, h, w]: the bytes / 255, in [0, 1] */
    int32_t *labels;                /* [n] */
} rc_image_set;

/* Reads an IDX image file ([n, h, w]) and its IDX label file ([n]): the first LIMIT pairs
 * (all when LIMIT <= 0). Errors: those of rc_idx_read, images not 3-D or labels not 1-D,
 * counts that differ in the two files' headers (both named). */
int rc_image_set_load(rc_image_set *s, const char *images, const char *labels, int64_t limit,
                      rc_error *err);
void rc_image_set_free(rc_image_set *s);

/* Where Debian's dataset-fashion-mnist package puts the files (scripts/setup.sh installs it). */
#define RC_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
enum { RC_FASHION_MNIST_CLASSES = 10 };

/* Fashion-MNIST's SPLIT ("train": 60,000 images, "t10k": 10,000; 28 x 28) from DIR (NULL:
 * RC_FASHION_MNIST_DIR): DIR/SPLIT-images-idx3-ubyte.gz and DIR/SPLIT-labels-idx1-ubyte.gz,
 * or the same names without .gz. The first LIMIT pairs (all when LIMIT <= 0). Errors: those
 * of rc_image_set_load, a missing file (naming the paths looked for and, for the default
 * directory, the package to install), a label outside [0, 10). data/fashion-mnist/ in this
 * repository holds the first 512 test pairs (data/README.md). */
int rc_fashion_mnist_load(rc_image_set *s, const char *dir, const char *split, int64_t limit,
                          rc_error *err);
/* The class name of LABEL ("T-shirt/top", "Trouser", ... "Ankle boot"); NULL outside [0, 10). */
const char *rc_fashion_mnist_class(int label);

/* ---- epoch order and its split over data-parallel ranks ---------------------------- */

/* order[n] = a permutation of 0..n-1 for EPOCH. With shuffle, Fisher-Yates driven by
 * r = rc_rng_fold(rc_rng_new(seed), epoch): start from the identity; for i = n-1 down to 1,
 * draw x = rc_rng_next_u64(&r), redrawing while x >= 2^64 - (2^64 mod (i+1)) (so j is
 * unbiased), take j = x mod (i+1) and swap order[i] and order[j]. Without shuffle the
 * identity. The same (seed, epoch) gives the same order on every rank and after a resume. */
void rc_epoch_order(int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t *order);

/* What to do with the end of an epoch that does not fill a whole optimizer step. */
typedef enum {
    RC_TAIL_DROP = 0,   /* leave it out; dropped counts it */
    RC_TAIL_WRAP,       /* fill the last step from the start of the epoch order again;
                           filled counts the repeated slots */
    RC_TAIL_PAD         /* fill the last step with -1 (padding the loss must ignore);
                           filled counts them. Every example exactly once: for eval */
} rc_tail_policy;

/* Splitting an epoch of n examples (in the order from rc_epoch_order) over data-parallel
 * ranks. A micro-batch step s takes the G = batch * world examples at positions
 * [s*G, (s+1)*G) of the epoch order, and rank r takes positions [s*G + r*batch,
 * s*G + (r+1)*batch): the ranks' slices are disjoint and together the whole global batch.
 * accum consecutive steps form one optimizer step, so the tail policy applies to the
 * n % (G * accum) examples that do not fill a whole optimizer step. */
typedef struct {
    int64_t n;
    int batch, world, accum;
    rc_tail_policy tail;
    int64_t steps;      /* micro-batch steps per epoch, a multiple of accum */
    int64_t dropped;    /* examples left out (RC_TAIL_DROP) */
    int64_t filled;     /* slots past the end: repeats (RC_TAIL_WRAP) or -1 (RC_TAIL_PAD) */
} rc_data_split;

int rc_data_split_init(rc_data_split *s, int64_t n, int batch, int world, int accum,
                       rc_tail_policy tail, rc_error *err);
/* out[batch] = the example indices (order[position], or -1 for padding) that RANK takes in
 * micro-batch STEP (0 <= step < s->steps). ORDER may be NULL: the identity. */
int rc_data_split_batch(const rc_data_split *s, const int64_t *order, int rank, int64_t step,
                        int64_t *out, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
