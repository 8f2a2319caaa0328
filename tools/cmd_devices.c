/* cmd_devices.c - `redco devices`: the OpenCL and CUDA devices, with their memory. */
#include "cli.h"
#include "redco/device.h"

#include <stdio.h>

static const char *help =
    "usage: redco devices\n"
    "\n"
    "Lists the OpenCL devices of every platform the OpenCL ICD loader finds, one per line:\n"
    "its device name (opencl:N), type, name, platform, OpenCL version, global memory and the\n"
    "largest single buffer, compute units, and whether it has double precision. Then the\n"
    "CUDA devices the NVIDIA driver finds (cuda:N): name, CUDA version, compute capability,\n"
    "memory and multiprocessors. A kind with no device gets one line on stderr saying why\n"
    "(no OpenCL platform, no NVIDIA driver, a build without CUDA). The CPU (the cpu device,\n"
    "always there) comes first: its threads and the libraries that run its f32 and bf16\n"
    "matrix products. No OpenCL or CUDA device is an error: install a\n"
    "GPU driver (its OpenCL ICD, or NVIDIA's driver for CUDA), or pocl-opencl-icd for the CPU.\n"
    "\n"
    "  --help        print this message\n";

static const struct option flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {NULL, 0, NULL, 0},
};

static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    (void)c, (void)user;
    return cli_usage(cmd, "unexpected argument '%s'", a->value);
}

static double gib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

/* the CPU, one line */
static void show_cpu(void)
{
    rc_cpu_info c;
    rc_cpu_device_info(&c);
    printf("cpu       %d threads | f32 products: %s | bf16 products: %s\n", c.threads, c.f32_products,
           c.bf16_products);
}

/* the OpenCL devices, one line each: how many, or -1 with err set */
static int list_opencl(rc_error *err)
{
    int n = rc_opencl_device_count(err);
    for (int i = 0; i < n; i++) {
        rc_device_info d;
        if (rc_opencl_device_info(i, &d, err))
            return -1;
        printf("opencl:%d  %-4s %s | platform %s | %s | memory %.2f GiB (largest buffer %.2f GiB) "
               "| %d compute units | fp64 %s\n",
               i, d.type, d.name, d.platform, d.version, gib(d.global_bytes),
               gib(d.max_alloc_bytes), d.compute_units, d.fp64 ? "yes" : "no");
    }
    return n;
}

/* the CUDA devices, one line each: how many, or -1 with err set */
static int list_cuda(rc_error *err)
{
    int n = rc_cuda_device_count(err);
    for (int i = 0; i < n; i++) {
        rc_device_info d;
        if (rc_cuda_device_info(i, &d, err))
            return -1;
        printf("cuda:%d    %-4s %s | %s | compute %d.%d | memory %.2f GiB | %d multiprocessors | fp64 yes\n", i,
               d.type, d.name, d.platform, d.compute_major, d.compute_minor, gib(d.global_bytes),
               d.compute_units);
    }
    return n;
}

int cmd_devices(int argc, char **argv)
{
    const char *cmd = "devices";
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc_error ocl_err = {0}, cuda_err = {0};
    show_cpu();
    int n_ocl = list_opencl(&ocl_err);
    int n_cuda = list_cuda(&cuda_err);
    if (n_ocl < 0 && n_cuda < 0) {
        cli_fail(cmd, "%s", ocl_err.msg);
        return cli_fail(cmd, "%s", cuda_err.msg);
    }
    if (n_ocl < 0)
        fprintf(stderr, "%s\n", ocl_err.msg);
    if (n_cuda < 0)
        fprintf(stderr, "%s\n", cuda_err.msg);
    return 0;
}
