/* test_nvrtc.c - the device source (rci_gpu_source: dialect.h, scalar.h, kernels.cl)
 * compiled as CUDA C++ by NVRTC (src/backend/cuda/nvrtc.c) for sm_80 and sm_90, for f32,
 * bf16 and f16 storage with fp64, each CUBIN holding every kernel of gpu.h as an entry
 * (a function symbol of its ELF symbol table). No GPU is needed; NVRTC is: built only with
 * REDCO_HAVE_CUDA, the test fails when libnvrtc cannot be opened. */
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

int main(void)
{
    const int archs[][2] = {{8, 0}, {9, 0}};
    const rc_dtype stores[] = {RC_F32, RC_BF16, RC_F16};
    int built = 0;
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < 3; s++) {
            void *image = NULL;
            size_t bytes = 0;
            rc_error err = {0};
            int rc = rci_nvrtc_compile(rci_gpu_source, archs[a][0], archs[a][1], stores[s], 1, &image, &bytes,
                                       &err);
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
            free(image);
        }
    /* a source that does not compile: an error with NVRTC's log on one line */
    void *image = NULL;
    size_t bytes = 0;
    rc_error err = {0};
    CHECK(rci_nvrtc_compile("extern \"C\" __global__ void k(float *o) { o[0] = undefined_name; }\n", 8, 0,
                            RC_F32, 0, &image, &bytes, &err) == -1);
    CHECKF(check_has(err.msg, "sm_80") && check_has(err.msg, "undefined_name") &&
           !strchr(err.msg, '\n'), "%s", err.msg);
    CHECK(image == NULL && bytes == 0);
    printf("test_nvrtc: a source that does not compile: %s\n", err.msg);
    if (built == 6)
        printf("test_nvrtc: %d kernels x 3 storages compiled for sm_80, sm_90\n", RCI_K_COUNT);
    else
        printf("test_nvrtc: only %d of 6 CUBINs built\n", built);
    return check_summary("test_nvrtc");
}
