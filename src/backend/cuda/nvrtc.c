/* nvrtc.c - NVRTC through dlopen: the entry points of libnvrtc are looked up on the first
 * compile (the toolkit's nvrtc.h gives their types; nothing links against it), and the
 * device source is compiled to a CUBIN for one compute capability (nvrtc.h here). */
#include "cuda/nvrtc.h"

#include <nvrtc.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the characters of NVRTC's log an error keeps (as OpenCL's build errors) */
enum { LOG_MAX = 400 };

/* the entry points used, with the types of the toolkit's nvrtc.h */
typedef const char *(*error_string_fn)(nvrtcResult);
typedef nvrtcResult (*create_fn)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                 const char *const *);
typedef nvrtcResult (*destroy_fn)(nvrtcProgram *);
typedef nvrtcResult (*compile_fn)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*size_fn)(nvrtcProgram, size_t *);
typedef nvrtcResult (*get_fn)(nvrtcProgram, char *);

/* each type checked against the header's declaration (_Generic does not evaluate, so no
 * symbol of libnvrtc is referenced) */
_Static_assert(_Generic(&nvrtcGetErrorString, error_string_fn: 1, default: 0), "nvrtcGetErrorString");
_Static_assert(_Generic(&nvrtcCreateProgram, create_fn: 1, default: 0), "nvrtcCreateProgram");
_Static_assert(_Generic(&nvrtcDestroyProgram, destroy_fn: 1, default: 0), "nvrtcDestroyProgram");
_Static_assert(_Generic(&nvrtcCompileProgram, compile_fn: 1, default: 0), "nvrtcCompileProgram");
_Static_assert(_Generic(&nvrtcGetProgramLogSize, size_fn: 1, default: 0), "nvrtcGetProgramLogSize");
_Static_assert(_Generic(&nvrtcGetProgramLog, get_fn: 1, default: 0), "nvrtcGetProgramLog");
_Static_assert(_Generic(&nvrtcGetCUBINSize, size_fn: 1, default: 0), "nvrtcGetCUBINSize");
_Static_assert(_Generic(&nvrtcGetCUBIN, get_fn: 1, default: 0), "nvrtcGetCUBIN");

typedef struct {
    void *lib;
    error_string_fn error_string;
    create_fn create;
    destroy_fn destroy;
    compile_fn compile;
    size_fn log_size;
    get_fn log;
    size_fn cubin_size;
    get_fn cubin;
} nvrtc_api;

static nvrtc_api api;
static int api_state;            /* 0 not tried, 1 open, -1 failed (api_error says why) */
static char api_error[256];
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;

/* the library's names, newest first: through the loader's path, then the toolkit's usual
 * directory */
static const char *const lib_names[] = {
    "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11",
};
static const char *const lib_dirs[] = {"", "/usr/local/cuda/lib64/"};

static void *open_lib(void)
{
    char path[128];
    for (size_t d = 0; d < sizeof lib_dirs / sizeof *lib_dirs; d++)
        for (size_t n = 0; n < sizeof lib_names / sizeof *lib_names; n++) {
            snprintf(path, sizeof path, "%s%s", lib_dirs[d], lib_names[n]);
            void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (lib)
                return lib;
        }
    return NULL;
}

/* the entry point `name` into *fn; 0, or -1 naming it in api_error */
static int find(const char *name, void *fn, size_t size)
{
    void *p = dlsym(api.lib, name);
    if (!p) {
        snprintf(api_error, sizeof api_error, "libnvrtc has no %s (too old a CUDA toolkit: 11.2 or newer needed)",
                 name);
        return -1;
    }
    memcpy(fn, &p, size);   /* an object pointer's bits as a function pointer (POSIX dlsym) */
    return 0;
}

static int open_api(void)
{
    api.lib = open_lib();
    if (!api.lib) {
        snprintf(api_error, sizeof api_error,
                 "NVRTC (libnvrtc.so, the CUDA toolkit's runtime compiler) not found; install the CUDA "
                 "toolkit or use --device opencl or cpu");
        return -1;
    }
    if (find("nvrtcGetErrorString", &api.error_string, sizeof api.error_string) ||
        find("nvrtcCreateProgram", &api.create, sizeof api.create) ||
        find("nvrtcDestroyProgram", &api.destroy, sizeof api.destroy) ||
        find("nvrtcCompileProgram", &api.compile, sizeof api.compile) ||
        find("nvrtcGetProgramLogSize", &api.log_size, sizeof api.log_size) ||
        find("nvrtcGetProgramLog", &api.log, sizeof api.log) ||
        find("nvrtcGetCUBINSize", &api.cubin_size, sizeof api.cubin_size) ||
        find("nvrtcGetCUBIN", &api.cubin, sizeof api.cubin)) {
        dlclose(api.lib);
        api.lib = NULL;
        return -1;
    }
    return 0;
}

/* libnvrtc's entry points, opened once; NULL with err set */
static const nvrtc_api *nvrtc(rc_error *err)
{
    pthread_mutex_lock(&api_lock);
    if (api_state == 0)
        api_state = open_api() ? -1 : 1;
    int state = api_state;
    pthread_mutex_unlock(&api_lock);
    if (state < 0) {
        rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: %s", api_error);
        return NULL;
    }
    return &api;
}

/* NVRTC's log of prog, malloc'd (NULL when there is none or no memory) */
static char *program_log(const nvrtc_api *a, nvrtcProgram prog)
{
    size_t len = 0;
    char *log = NULL;
    if (a->log_size(prog, &len) != NVRTC_SUCCESS || len == 0 || (log = calloc(1, len + 1)) == NULL)
        return NULL;
    if (a->log(prog, log) != NVRTC_SUCCESS) {
        free(log);
        return NULL;
    }
    return log;
}

/* the error of a failed compile of prog for sm_XY: NVRTC's status and the start of its
 * log on one line; -1 */
static int compile_failed(const nvrtc_api *a, nvrtcProgram prog, nvrtcResult s, int major, int minor,
                          rc_dtype store, rc_error *err)
{
    char *log = program_log(a, prog);
    for (char *c = log; c && *c; c++)
        *c = *c == '\n' || *c == '\r' ? ' ' : *c;   /* one line */
    rc_error_set(err, RC_ERR_UNSUPPORTED, "cuda: kernel build for sm_%d%d (%s values) failed (%s): %.*s", major,
                 minor, rc_dtype_name(store), a->error_string(s), LOG_MAX, log ? log : "");
    free(log);
    return -1;
}

int rci_nvrtc_tiles(int major)
{
    return major >= 8;
}

int rci_nvrtc_compile(const char *src, int major, int minor, rc_dtype store, int fp64, void **image,
                      size_t *bytes, char **report, rc_error *err)
{
    *image = NULL;
    *bytes = 0;
    if (report)
        *report = NULL;
    const nvrtc_api *a = nvrtc(err);
    if (!a)
        return -1;
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[12] = {arch, "--std=c++17", "-default-device", "--fmad=false", "--prec-div=true",
                            "--prec-sqrt=true", "--ftz=false"};
    int nopts = 7;
    if (rci_nvrtc_tiles(major))
        opts[nopts++] = "-DRC_TILES";
    if (store == RC_BF16)
        opts[nopts++] = "-DRC_STORE_BF16";
    else if (store == RC_F16)
        opts[nopts++] = "-DRC_STORE_F16";
    if (fp64)
        opts[nopts++] = "-DRC_FP64";
    if (report)
        opts[nopts++] = "--ptxas-options=-v";

    nvrtcProgram prog;
    nvrtcResult s = a->create(&prog, src, "kernels.cu", 0, NULL, NULL);
    if (s != NVRTC_SUCCESS)
        return rc_error_set(err, RC_ERR_MEMORY, "cuda: nvrtcCreateProgram failed (%s)", a->error_string(s));
    s = a->compile(prog, nopts, opts);
    if (s != NVRTC_SUCCESS) {
        compile_failed(a, prog, s, major, minor, store, err);
        a->destroy(&prog);
        return -1;
    }
    size_t n = 0;
    s = a->cubin_size(prog, &n);
    char *out = s == NVRTC_SUCCESS && n > 0 ? malloc(n) : NULL;
    if (!out || a->cubin(prog, out) != NVRTC_SUCCESS) {
        int code = out || s != NVRTC_SUCCESS || n == 0 ? RC_ERR_UNSUPPORTED : RC_ERR_MEMORY;
        free(out);
        a->destroy(&prog);
        return rc_error_set(err, code, "cuda: no CUBIN from NVRTC for sm_%d%d (%zu bytes)", major, minor, n);
    }
    if (report && (*report = program_log(a, prog)) == NULL) {
        free(out);
        a->destroy(&prog);
        return rc_error_set(err, RC_ERR_MEMORY, "cuda: no resource report from NVRTC for sm_%d%d", major, minor);
    }
    a->destroy(&prog);
    *image = out;
    *bytes = n;
    return 0;
}
