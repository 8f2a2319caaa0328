/* cmd_devices.c - `redco devices`: the OpenCL platforms and devices, with their memory. */
#include "cli.h"
#include "redco/device.h"

#include <stdio.h>

static const char *help =
    "usage: redco devices\n"
    "\n"
    "Lists the OpenCL devices of every platform the OpenCL ICD loader finds, one per line:\n"
    "its device name (opencl:N), type, name, platform, OpenCL version, global memory and the\n"
    "largest single buffer, compute units, and whether it has double precision. The CPU\n"
    "(the cpu device) is always there and is not listed. No platform or device is an\n"
    "error: install a GPU driver's OpenCL ICD, or pocl-opencl-icd for the CPU.\n"
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

int cmd_devices(int argc, char **argv)
{
    const char *cmd = "devices";
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc_error err = {0};
    int n = rc_opencl_device_count(&err);
    if (n < 0)
        return cli_fail(cmd, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        rc_device_info d;
        if (rc_opencl_device_info(i, &d, &err))
            return cli_fail(cmd, "%s", err.msg);
        printf("opencl:%d  %-4s %s | platform %s | %s | memory %.2f GiB (largest buffer %.2f GiB) "
               "| %d compute units | fp64 %s\n",
               i, d.type, d.name, d.platform, d.version, gib(d.global_bytes),
               gib(d.max_alloc_bytes), d.compute_units, d.fp64 ? "yes" : "no");
    }
    return 0;
}
