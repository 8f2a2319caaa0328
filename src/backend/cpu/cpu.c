/* cpu.c - the CPU backend: buffers in host memory, nodes run by the kernels in place
 * (data movement first, then the arithmetic kernels of the node's dtype), the workspace
 * the 16-bit kernels are handed, the thread count shared by OpenMP and OpenBLAS, and what
 * rc_cpu_device_info says of them. */
#include "cpu.h"
#include "redco/device.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

enum { CPU_ALIGN = 64 };

static rc_backend cpu; /* the backend's table (defined at the end) */

/* Zeroed buffers come from calloc, whose large blocks are fresh zero pages that are not
 * touched twice; the others (a plan's arena) are 64-byte aligned and left as they are. */
static int cpu_alloc(rc_backend *be, rc_buffer *b, size_t bytes, int zero, rc_error *err)
{
    size_t size = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    b->impl = zero ? calloc(1, size ? size : CPU_ALIGN) : aligned_alloc(CPU_ALIGN, size ? size : CPU_ALIGN);
    if (!b->impl)
        return rc_error_set(err, RC_ERR_MEMORY, "cpu: cannot allocate %zu bytes (%zu in use)",
                            bytes, be->used_bytes);
    return 0;
}

static void cpu_free(rc_backend *be, rc_buffer *b)
{
    (void)be;
    free(b->impl);
}

static int cpu_upload(rc_backend *be, rc_buffer *b, size_t off, const void *host, size_t bytes,
                      rc_error *err)
{
    (void)be, (void)err;
    memcpy((char *)b->impl + off, host, bytes);
    return 0;
}

static int cpu_download(rc_backend *be, const rc_buffer *b, size_t off, void *host, size_t bytes,
                        rc_error *err)
{
    (void)be, (void)err;
    memcpy(host, (const char *)b->impl + off, bytes);
    return 0;
}

static int cpu_copy(rc_backend *be, rc_buffer *dst, size_t doff, const rc_buffer *src, size_t soff,
                    size_t bytes, rc_error *err)
{
    (void)be, (void)err;
    memmove((char *)dst->impl + doff, (const char *)src->impl + soff, bytes);
    return 0;
}

static int cpu_fill_zero(rc_backend *be, rc_buffer *b, size_t off, size_t bytes, rc_error *err)
{
    (void)be, (void)err;
    memset((char *)b->impl + off, 0, bytes);
    return 0;
}

/* Kernels: data movement for every dtype; everything else for the float dtypes, computed
 * in f64 for f64 and in f32 for f32, bf16 and f16. */
static int cpu_supports(const rc_backend *be, rc_op op, rc_dtype t)
{
    (void)be;
    if (op == RC_OP_LEAF || op == RC_OP_RESHAPE || op == RC_OP_STOP_GRADIENT ||
        op == RC_OP_MP_ENTER)
        return 1;
    if (rci_cpu_is_move(op))
        return (unsigned)t < RC_DTYPE_COUNT;
    return rc_dtype_is_float(t);
}

/* 1 when node reads or writes 16-bit floats (a loss of bf16 logits is f32) */
static int touches_half(const rc_tensor *node)
{
    if (rci_dtype_is_half(node->dtype))
        return 1;
    for (int k = 0; k < node->nsrc; k++)
        if (node->src[k] && rci_dtype_is_half(node->src[k]->dtype))
            return 1;
    return 0;
}

/* ---- the 16-bit kernels' workspace ---------------------------------------------------------
 * One block per thread, handed to each 16-bit node as rci_cpu_args.work: grown to the
 * largest need seen and kept (counted in the backend's used bytes), so runs after the first
 * allocate nothing. A thread that exits frees its block (work_at_exit, through a C11
 * thread-specific key whose value is the block itself), so threads a program starts and ends
 * leak nothing. Nodes run from one thread at a time, as buffers are made. */

typedef struct {
    float *p;
    size_t cap;                   /* floats */
} work_block;

static _Thread_local work_block work;
static tss_t work_key;
static once_flag work_once = ONCE_FLAG_INIT;
static int work_key_made;

static void work_at_exit(void *block)
{
    work_block *w = block;
    cpu.used_bytes -= w->cap * sizeof(float);
    free(w->p);
    *w = (work_block){NULL, 0};
}

static void work_key_make(void)
{
    work_key_made = tss_create(&work_key, work_at_exit) == thrd_success;
}

/* The growth policy: the floats held after a need of n floats with cap held (a quarter
 * more than asked, so that slightly larger nodes later allocate nothing) */
static size_t work_grown(size_t cap, size_t n)
{
    return n <= cap ? cap : n + n / 4;
}

/* This thread's block grown to at least n floats; 0, or -1 with err set */
static int work_reserve(size_t n, rc_error *err)
{
    if (n <= work.cap)
        return 0;
    size_t cap = work_grown(work.cap, n);
    float *p = aligned_alloc(CPU_ALIGN, (cap * sizeof(float) + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN);
    call_once(&work_once, work_key_make);
    if (!p || !work_key_made || tss_set(work_key, &work) != thrd_success) {
        free(p);
        return rc_error_set(err, RC_ERR_MEMORY, "cpu: cannot allocate %zu bytes of 16-bit workspace",
                            cap * sizeof(float));
    }
    cpu.used_bytes += (cap - work.cap) * sizeof(float);
    cpu.peak_bytes = cpu.used_bytes > cpu.peak_bytes ? cpu.used_bytes : cpu.peak_bytes;
    free(work.p);
    work = (work_block){p, cap};
    return 0;
}

/* ---- running nodes ------------------------------------------------------------------------ */

static void *address(const rci_mem *m)
{
    return m->buf ? (char *)m->buf->impl + m->off : NULL;
}

static int cpu_run_node(rc_backend *be, const rci_node_run *r, rc_error *err)
{
    (void)be;
    const rc_tensor *node = r->node;
    rci_cpu_args a = {node, address(&r->out), {0}, r->run_key, NULL, 0, address(&r->kept)};
    for (int k = 0; k < node->nsrc; k++)
        a.in[k] = address(&r->in[k]);
    if (node->op == RC_OP_LEAF || node->op == RC_OP_RESHAPE || node->view_src)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: leaves and views have no kernel",
                            rc_op_name(node->op));
    if (rci_cpu_kernel_move(&a))
        return 0;
    if (touches_half(node)) {
        if (work_reserve(rci_cpu_half_work(node), err))
            return -1;
        a.work = work.p;
        a.work_floats = work.cap;
        return rci_cpu_kernel_half(&a, err);
    }
    switch (node->dtype) {
    case RC_F32:
        return rci_cpu_kernel_f32(&a, err);
    case RC_F64:
        return rci_cpu_kernel_f64(&a, err);
    default:
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s",
                            rc_op_name(node->op), rc_dtype_name(node->dtype));
    }
}

static size_t cpu_scratch_bytes(const rc_backend *be, const rc_tensor *node, size_t held)
{
    (void)be;
    if (node->op == RC_OP_LEAF || node->op == RC_OP_RESHAPE || node->view_src || rci_cpu_is_move(node->op) ||
        !touches_half(node))
        return held; /* as cpu_run_node: these take no scratch */
    return work_grown(held / sizeof(float), rci_cpu_half_work(node)) * sizeof(float);
}

static int cpu_wait(rc_backend *be, rc_error *err)
{
    (void)be, (void)err;
    return 0; /* kernels run when they are called */
}

static void *cpu_host_address(const rc_backend *be, const rc_buffer *b, size_t off)
{
    (void)be;
    return (char *)b->impl + off;
}

/* the machine's physical memory, 0 when the system does not say */
static size_t physical_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

static rc_backend cpu = {
    .name = "cpu",
    .buffer_alloc = cpu_alloc,
    .buffer_free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .supports = cpu_supports,
    .run_node = cpu_run_node,
    .scratch_bytes = cpu_scratch_bytes,
    .wait = cpu_wait,
    .update = rci_cpu_update,
    .sum_squares = rci_cpu_sum_squares,
    .accumulate = rci_cpu_accumulate,
    .round_f32 = rci_cpu_round_f32,
    .host_address = cpu_host_address,
};

rc_backend *rci_backend_cpu(void)
{
    if (!cpu.total_bytes)
        cpu.total_bytes = physical_bytes();
    return &cpu;
}

void rc_cpu_device_info(rc_cpu_info *info)
{
    if (!info)
        return;
    memset(info, 0, sizeof *info);
    info->threads = rc_get_threads();
    rci_cpu_sgemm_describe(info->f32_products, sizeof info->f32_products);
    /* a product of GPT-2's sizes stands for every bf16 product */
    rci_matmul_dims d = {.m = 512, .n = 768, .k = 768, .kb = 768, .batch = 1, .ba = 1, .bb = 1};
    const char *k = rci_cpu_dnnl_kernel(RC_BF16, &d);
    if (k)
        snprintf(info->bf16_products, sizeof info->bf16_products, "oneDNN %s", k);
    else
        snprintf(info->bf16_products, sizeof info->bf16_products,
                 "f32 products of widened operands (no bf16 dot products here)");
}

void rc_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int rc_get_threads(void)
{
    return omp_get_max_threads();
}
