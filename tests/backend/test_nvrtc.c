/* test_nvrtc.c - the device source (rci_gpu_source: dialect.h, scalar.h, kernels.cl)
 * compiled as CUDA C++ by NVRTC (src/backend/cuda/nvrtc.c) for sm_80 and sm_90, for f32,
 * bf16 and f16 storage with fp64, each CUBIN holding every kernel of gpu.h as an entry
 * (a function symbol of its ELF symbol table); and for sm_75 (a T4, an RTX 20), where the
 * attention tile kernels would pass the 48 KB of static shared memory: every kernel but
 * those four. No GPU is needed; NVRTC is: built only with REDCO_HAVE_CUDA, the test fails
 * when libnvrtc cannot be opened. */
#include "check.h"
#include "gpu/gpu.h"
#include "cuda/nvrtc.h"

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* 1 when the ELF image (bytes long) defines a function symbol `name` */
static int has_function(const unsigned char *image, size_t bytes, const char *name)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)image;
    if (bytes < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > bytes)
        return 0;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(image + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > bytes || strs->sh_offset + strs->sh_size > bytes)
            return 0;
        const Elf64_Sym *sym = (const Elf64_Sym *)(image + sh[i].sh_offset);
        const char *str = (const char *)(image + strs->sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++)
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_name < strs->sh_size &&
                strcmp(str + sym[k].st_name, name) == 0)
                return 1;
    }
    return 0;
}

/* ptxas's stack frame and registers of kernel `name` in NVRTC's resource report (its
 * "Function properties for NAME" line, then "N bytes stack frame", then "Used N
 * registers"); 0, or -1 when the report does not name it so */
static int kernel_resources(const char *report, const char *name, int *stack, int *regs)
{
    char key[96];
    snprintf(key, sizeof key, "Function properties for %s\n", name);
    const char *p = strstr(report, key);
    if (!p)
        return -1;
    p += strlen(key);
    const char *frame = strstr(p, "bytes stack frame"), *used = strstr(p, "Used ");
    if (!frame || !used || sscanf(used, "Used %d registers", regs) != 1)
        return -1;
    while (frame > p && frame[-1] == ' ')
        frame--;
    while (frame > p && frame[-1] >= '0' && frame[-1] <= '9')
        frame--;
    return sscanf(frame, "%d", stack) == 1 ? 0 : -1;
}

/* Every kernel for sm_90 with bf16 values keeps its arrays in registers: no stack frame
 * (a loop over a register array left a loop puts the array there, in local memory: the
 * tile kernels' 256-480 bytes a thread before dialect.h's UNROLL), except k_rope, whose
 * double sine and cosine take libdevice's slow path. Prints the hot kernels' registers. */
static void check_resources(const char *report)
{
    const char *shown[] = {"k_attention_tile", "k_attention_stats", "k_attention_tile_dq", "k_attention_tile_dkv",
                           "k_binary", "k_act", "k_copy"};
    for (int k = 0; k < RCI_K_COUNT; k++) {
        const char *name = rci_gpu_kernel_names[k];
        int stack = -1, regs = -1;
        int rc = kernel_resources(report, name, &stack, &regs);
        CHECKF(rc == 0, "sm_90 bf16: no resources of %s in ptxas's report", name);
        if (rc)
            continue;
        CHECKF(stack == 0 || strcmp(name, "k_rope") == 0, "sm_90 bf16: %s has a %d-byte stack frame", name,
               stack);
        for (size_t i = 0; i < sizeof shown / sizeof *shown; i++)
            if (strcmp(name, shown[i]) == 0)
                printf("test_nvrtc: sm_90 bf16 %s: %d registers, %d bytes of stack\n", name, regs, stack);
    }
}

int main(void)
{
    const int archs[][2] = {{8, 0}, {9, 0}};
    const rc_dtype stores[] = {RC_F32, RC_BF16, RC_F16};
    int built = 0;
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < 3; s++) {
            void *image = NULL;
            size_t bytes = 0;
            char *report = NULL;
            rc_error err = {0};
            int reported = archs[a][0] == 9 && stores[s] == RC_BF16;
            int rc = rci_nvrtc_compile(rci_gpu_source, archs[a][0], archs[a][1], stores[s], 1, &image, &bytes,
                                       reported ? &report : NULL, &err);
            CHECKF(rc == 0, "sm_%d%d %s: %s", archs[a][0], archs[a][1], rc_dtype_name(stores[s]), err.msg);
            if (rc)
                continue;
            built++;
            int found = 0;
            for (int k = 0; k < RCI_K_COUNT; k++) {
                int has = has_function(image, bytes, rci_gpu_kernel_names[k]);
                CHECKF(has, "sm_%d%d %s: no entry %s in the CUBIN", archs[a][0], archs[a][1],
                       rc_dtype_name(stores[s]), rci_gpu_kernel_names[k]);
                found += has;
            }
            CHECK(found == RCI_K_COUNT);
            if (reported)
                check_resources(report);
            free(report);
            free(image);
        }
    /* before sm_80: everything but the tile kernels (nvrtc.c builds them from sm_80 on) */
    for (int s = 0; s < 3; s++) {
        void *image = NULL;
        size_t bytes = 0;
        rc_error err = {0};
        int rc = rci_nvrtc_compile(rci_gpu_source, 7, 5, stores[s], 1, &image, &bytes, NULL, &err);
        CHECKF(rc == 0, "sm_75 %s: %s", rc_dtype_name(stores[s]), err.msg);
        int found = 0;
        for (int k = 0; rc == 0 && k < RCI_K_COUNT; k++) {
            int has = has_function(image, bytes, rci_gpu_kernel_names[k]);
            CHECKF(has == !rci_gpu_is_tile_kernel((rci_gpu_kernel)k), "sm_75 %s: %s %s in the CUBIN",
                   rc_dtype_name(stores[s]), rci_gpu_kernel_names[k], has ? "is" : "is not");
            found += has;
        }
        CHECK(rc != 0 || found == RCI_K_COUNT - 3); /* all but the 3 tile kernels */
        built += rc == 0;
        free(image);
    }
    /* a source that does not compile: an error with NVRTC's log on one line */
    void *image = NULL;
    size_t bytes = 0;
    rc_error err = {0};
    CHECK(rci_nvrtc_compile("extern \"C\" __global__ void k(float *o) { o[0] = undefined_name; }\n", 8, 0,
                            RC_F32, 0, &image, &bytes, NULL, &err) == -1);
    CHECKF(check_has(err.msg, "sm_80") && check_has(err.msg, "undefined_name") &&
           !strchr(err.msg, '\n'), "%s", err.msg);
    CHECK(image == NULL && bytes == 0);
    printf("test_nvrtc: a source that does not compile: %s\n", err.msg);
    if (built == 9)
        printf("test_nvrtc: %d kernels x 3 storages compiled for sm_80, sm_90; %d for sm_75\n", RCI_K_COUNT,
               RCI_K_COUNT - 3);
    else
        printf("test_nvrtc: only %d of 9 CUBINs built\n", built);
    return check_summary("test_nvrtc");
}
