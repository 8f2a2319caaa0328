/* weights_cmp.c - compares weight dumps of runs claimed equal (tests/mpi_*.c --dump):
 *   weights_cmp REF OTHER...
 * Each OTHER must hold REF's tensors, each within the tolerance REF records for it
 * (||other - ref|| / ||ref|| per tensor). Prints the worst tensor of each comparison; exits
 * non-zero when any comparison fails or a dump is missing. */
#include "check.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: weights_cmp REF OTHER...\n");
        return 2;
    }
    check_weights ref = {0};
    CHECKF(check_weights_load(&ref, argv[1]) == 0, "reference dump %s", argv[1]);
    for (int i = 2; ref.n && i < argc; i++) {
        check_weights w = {0};
        int loaded = check_weights_load(&w, argv[i]) == 0;
        CHECKF(loaded, "dump %s", argv[i]);
        if (!loaded)
            continue;
        char worst[256];
        double tol = 0, e = check_weights_diff(&w, &ref, worst, sizeof worst, &tol);
        CHECKF(e <= tol, "%s vs %s: tensor %s differs by %.3g (relative L2), claimed within %.3g", argv[i], argv[1],
               worst, e, tol);
        printf("%s vs %s: worst tensor %s, relative L2 difference %.2e (claimed within %.0e)\n", argv[i], argv[1],
               worst, e, tol);
        check_weights_free(&w);
    }
    check_weights_free(&ref);
    return check_summary("weights_cmp");
}
