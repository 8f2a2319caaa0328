/* gemm_dnnl.c - the CPU's 16-bit matrix products on the CPU's 16-bit units, through oneDNN.
 *
 * A bf16 product runs as oneDNN's matmul when the CPU has bf16 dot-product instructions
 * (AVX512_BF16 or AMX: oneDNN's effective ISA includes avx512_core_bf16): operands read as
 * they are stored, products summed in f32, the sum rounded once to bf16 (nearest, ties to
 * even), so it equals kernels_half.c's widen + sgemm + round up to the order of the sums.
 * An f16 product takes the same path where the CPU also has AVX512_FP16 (cpuid) and oneDNN
 * an f16 kernel for it that is not its reference code (Debian's oneDNN 2.6 has none).
 * Everything else keeps kernels_half.c's paths; so does a product for which oneDNN offers
 * only its reference kernel.
 *
 * Operands map onto oneDNN's memory descriptors without copies: a transposed operand is
 * its strides, a batch of products one 3-D matmul, an operand shared by every batch a
 * batch of 1 (oneDNN broadcasts it), and a product whose B is shared while A is batched
 * and not transposed one 2-D product of A's stacked rows.
 *
 * Primitives are kept in a small cache keyed by the product (dtype, transposes, sizes,
 * threads): creating one costs far more than a small product. The cache, the engine and
 * the stream sit behind one lock, held while a product runs (oneDNN's CPU primitives run
 * to completion on the calling thread's OpenMP team); they are freed at exit.
 *
 * Threads: Debian's oneDNN is built with the OpenMP runtime (DNNL_CPU_RUNTIME OMP, GNU
 * libgomp, as redco and OpenBLAS): each product runs on omp_get_max_threads() threads, the
 * count rc_set_threads sets. */
#include "cpu.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP
/* another runtime (TBB, sequential) would not follow rc_set_threads' thread count */
#warning "oneDNN is not built with OpenMP: its products do not follow rc_set_threads"
#endif

enum { CACHE_SLOTS = 64 };

/* What a primitive is made for */
typedef struct {
    rc_dtype t;
    int ta, tb, threads;
    int64_t m, n, k, batch, ba, bb;
} gemm_key;

typedef struct {
    gemm_key key;
    dnnl_primitive_t prim;        /* NULL: oneDNN has no fast kernel for it (kernels_half.c runs it) */
    dnnl_memory_desc_t md[3];     /* A, B, C as oneDNN reads them */
    char impl[48];                /* oneDNN's name for the kernel (e.g. brg:avx512_core_bf16) */
} gemm_slot;

static struct {
    mtx_t lock;
    int ready;                    /* 1: the engine and stream exist */
    int bf16;                     /* 1: the CPU has bf16 dot products */
    int f16;                      /* 1: the CPU has f16 arithmetic (AVX512_FP16) */
    int off;                      /* 1: rci_cpu_dnnl_use(0) turned the path off */
    int at_exit;                  /* 1: cache_free is registered with atexit */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_slot slot[CACHE_SLOTS];
    int used, next;               /* slots filled; the slot replaced next when all are */
} g;

static once_flag g_once = ONCE_FLAG_INIT;
static int g_lock_made;

static void lock_make(void)
{
    g_lock_made = mtx_init(&g.lock, mtx_plain) == thrd_success;
}

/* 1 when the CPU has AVX512_FP16 (cpuid leaf 7: EDX bit 23); oneDNN 2.6 names no f16 ISA */
static int cpu_has_f16(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 23 & 1);
#else
    return 0;
#endif
}

/* the engine, the stream and the ISA test; under the lock. 0, or -1 when oneDNN cannot
 * make its CPU engine (the path is then off). */
static int ready(void)
{
    if (g.ready)
        return g.ready > 0 ? 0 : -1;
    g.ready = -1;
    if (dnnl_engine_create(&g.engine, dnnl_cpu, 0) != dnnl_success)
        return -1;
    if (dnnl_stream_create(&g.stream, g.engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(g.engine);
        return -1;
    }
    /* ISA values are nested bit sets: AMX's includes avx512_core_bf16's bits */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    g.bf16 = (isa & bf16) == bf16;
    g.f16 = g.bf16 && cpu_has_f16();
    g.ready = 1;
    return 0;
}

static void slot_clear(gemm_slot *s)
{
    if (s->prim)
        dnnl_primitive_destroy(s->prim);
    memset(s, 0, sizeof *s);
}

/* every primitive, the stream and the engine, at exit */
static void cache_free(void)
{
    mtx_lock(&g.lock);
    for (int i = 0; i < g.used; i++)
        slot_clear(&g.slot[i]);
    g.used = g.next = 0;
    if (g.ready > 0) {
        dnnl_stream_destroy(g.stream);
        dnnl_engine_destroy(g.engine);
    }
    g.ready = 0;
    mtx_unlock(&g.lock);
}

static int same_key(const gemm_key *a, const gemm_key *b)
{
    return a->t == b->t && a->ta == b->ta && a->tb == b->tb && a->threads == b->threads && a->m == b->m &&
           a->n == b->n && a->k == b->k && a->batch == b->batch && a->ba == b->ba && a->bb == b->bb;
}

/* A [ba, m, k] (stored [ba, k, m] when ta), B [bb, k, n] (stored [bb, n, k] when tb) and
 * C [batch, m, n] as oneDNN's descriptors: 2-D for one product (or A's batches stacked into
 * its rows under a shared B), else 3-D with a shared operand's batch of 1. */
static int descs_of(const gemm_key *q, dnnl_data_type_t dt, dnnl_memory_desc_t md[3])
{
    int64_t m = q->m, n = q->n, k = q->k, ba = q->ba, bb = q->bb, batch = q->batch;
    int stacked = batch > 1 && bb == 1 && ba == batch && !q->ta;
    if (stacked)
        m *= batch, ba = bb = batch = 1;
    int nd = batch > 1 ? 3 : 2, o = nd - 2;
    dnnl_dims_t da = {0}, sa = {0}, db = {0}, sb = {0}, dc = {0}, sc = {0};
    if (nd == 3) {
        da[0] = ba, db[0] = bb, dc[0] = batch;
        sa[0] = m * k, sb[0] = k * n, sc[0] = m * n;
    }
    da[o] = m, da[o + 1] = k, sa[o] = q->ta ? 1 : k, sa[o + 1] = q->ta ? m : 1;
    db[o] = k, db[o + 1] = n, sb[o] = q->tb ? 1 : n, sb[o + 1] = q->tb ? k : 1;
    dc[o] = m, dc[o + 1] = n, sc[o] = n, sc[o + 1] = 1;
    return dnnl_memory_desc_init_by_strides(&md[0], nd, da, dt, sa) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(&md[1], nd, db, dt, sb) != dnnl_success ||
                   dnnl_memory_desc_init_by_strides(&md[2], nd, dc, dt, sc) != dnnl_success
               ? -1
               : 0;
}

/* s's primitive for its key: left NULL when oneDNN has none, or only its reference code */
static void slot_make(gemm_slot *s)
{
    dnnl_data_type_t dt = s->key.t == RC_BF16 ? dnnl_bf16 : dnnl_f16;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd;
    const char *impl = NULL;
    if (descs_of(&s->key, dt, s->md) || dnnl_matmul_desc_init(&desc, &s->md[0], &s->md[1], NULL, &s->md[2]) ||
        dnnl_primitive_desc_create(&pd, &desc, NULL, g.engine, NULL) != dnnl_success)
        return;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
        strncmp(impl, "ref", 3)) {
        snprintf(s->impl, sizeof s->impl, "%s", impl);
        if (dnnl_primitive_create(&s->prim, pd) != dnnl_success)
            s->prim = NULL;
    }
    dnnl_primitive_desc_destroy(pd);
}

/* The cached slot of key q, made when missing (under the lock); NULL when the path is off
 * or the dtype has no 16-bit units here */
static gemm_slot *slot_of(const gemm_key *q)
{
    if (g.off || ready() || (q->t == RC_BF16 && !g.bf16) || (q->t == RC_F16 && !g.f16) ||
        (q->t != RC_BF16 && q->t != RC_F16))
        return NULL;
    for (int i = 0; i < g.used; i++)
        if (same_key(&g.slot[i].key, q))
            return &g.slot[i];
    gemm_slot *s;
    if (g.used < CACHE_SLOTS) {
        s = &g.slot[g.used++];
    } else { /* full: the oldest slot is replaced */
        s = &g.slot[g.next];
        g.next = (g.next + 1) % CACHE_SLOTS;
    }
    slot_clear(s);
    s->key = *q;
    slot_make(s);
    return s;
}

static gemm_key key_of(rc_dtype t, const rci_matmul_dims *d)
{
    return (gemm_key){t, d->ta, d->tb, omp_get_max_threads(), d->m, d->n, d->k, d->batch, d->ba, d->bb};
}

/* 0 when the lock exists (taken), -1 when it could not be made */
static int lock_take(void)
{
    call_once(&g_once, lock_make);
    if (!g_lock_made)
        return -1;
    mtx_lock(&g.lock);
    return 0;
}

int rci_cpu_dnnl_takes(rc_dtype t, const rci_matmul_dims *d)
{
    if (d->k <= 0 || d->m <= 0 || d->n <= 0 || lock_take())
        return 0;
    gemm_key q = key_of(t, d);
    gemm_slot *s = slot_of(&q);
    int yes = s && s->prim;
    mtx_unlock(&g.lock);
    return yes;
}

const char *rci_cpu_dnnl_kernel(rc_dtype t, const rci_matmul_dims *d)
{
    static _Thread_local char name[48];
    name[0] = 0;
    if (d->k <= 0 || d->m <= 0 || d->n <= 0 || lock_take())
        return NULL;
    gemm_key q = key_of(t, d);
    gemm_slot *s = slot_of(&q);
    if (s && s->prim)
        snprintf(name, sizeof name, "%s", s->impl);
    mtx_unlock(&g.lock);
    return name[0] ? name : NULL;
}

int rci_cpu_dnnl_use(int on)
{
    if (lock_take())
        return 0;
    int was = !g.off;
    if (on >= 0)
        g.off = !on;
    mtx_unlock(&g.lock);
    return was;
}

/* "matmul: oneDNN <what> (status N) for [ba] m x k @ [bb] k x n (ta, tb, dtype) ..." */
static int gemm_fail(const rc_tensor *node, const gemm_key *q, const char *what, dnnl_status_t st, rc_error *err)
{
    return rc_error_set(err, st == dnnl_out_of_memory ? RC_ERR_MEMORY : RC_ERR_UNSUPPORTED,
                        "%s: oneDNN %s failed (status %d) for [%lld] %lld x %lld @ [%lld] %lld x %lld -> "
                        "[%lld] %lld x %lld (ta %d, tb %d, %s, node %d)",
                        rc_op_name(node->op), what, (int)st, (long long)q->ba, (long long)q->m, (long long)q->k,
                        (long long)q->bb, (long long)q->k, (long long)q->n, (long long)q->batch, (long long)q->m,
                        (long long)q->n, q->ta, q->tb, rc_dtype_name(q->t), node->id);
}

/* one product on s's primitive, A, B and C at host addresses a, b, c (under the lock) */
static dnnl_status_t slot_run(const gemm_slot *s, const void *a, const void *b, void *c, const char **what)
{
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    void *at[3] = {(void *)a, (void *)b, c};
    dnnl_status_t st = dnnl_success;
    *what = "memory";
    for (int i = 0; i < 3 && st == dnnl_success; i++)
        st = dnnl_memory_create(&mem[i], &s->md[i], g.engine, at[i]);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        *what = "matmul";
        st = dnnl_primitive_execute(s->prim, g.stream, 3, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(g.stream);
    }
    for (int i = 0; i < 3; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return st;
}

int rci_cpu_dnnl_matmul(const rci_cpu_args *io, const rci_matmul_dims *d, rc_error *err)
{
    const rc_tensor *node = io->node;
    gemm_key q = key_of(node->dtype, d);
    if (lock_take())
        return rc_error_set(err, RC_ERR_MEMORY, "%s: cannot make the oneDNN lock", rc_op_name(node->op));
    gemm_slot *s = slot_of(&q);
    const char *what = "primitive";
    dnnl_status_t st = s && s->prim ? slot_run(s, io->in[0], io->in[1], io->out, &what) : dnnl_unimplemented;
    if (st == dnnl_success && !g.at_exit) /* after oneDNN made its own state: freed before it */
        g.at_exit = atexit(cache_free) == 0;
    mtx_unlock(&g.lock);
    return st == dnnl_success ? 0 : gemm_fail(node, &q, what, st, err);
}
