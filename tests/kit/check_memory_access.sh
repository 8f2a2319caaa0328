#!/usr/bin/env bash
# check_memory_access.sh SOURCE_DIR - only backends touch tensor memory (issue #12).
# 1. rc_tensor (include/redco.h) has no data pointer: graph nodes carry shapes, not memory.
# 2. A buffer's memory (rc_buffer's impl) is read only under src/backend/.
# 3. rci_buffer_host (a buffer as host memory) is called only under src/backend/ and by the
#    collectives (src/parallel/comm.c), which hand CPU memory to MPI without a copy; tests
#    may call it to check that device memory has no host address.
# Prints each offender; exits 1 when there is any.
set -euo pipefail
src="$1"
failed=0
tensor=$(sed -n '/^struct rc_tensor {/,/^};/p' "$src/include/redco.h")
[ -n "$tensor" ] || { echo "check_memory_access: struct rc_tensor not found in include/redco.h"; exit 1; }
if grep -nE '\*[[:space:]]*data[;[:space:]]' <<<"$tensor"; then
    echo "check_memory_access: struct rc_tensor has a data pointer"
    failed=$((failed + 1))
fi
files=$(cd "$src" && find src tools tests bench examples -name '*.[ch]' -o -name '*.cpp' | grep -v '^src/backend/' | sort)
for f in $files; do
    if grep -nE '(->|\.)impl\b' "$src/$f"; then
        echo "check_memory_access: $f reads a buffer's memory outside a backend"
        failed=$((failed + 1))
    fi
    if [ "$f" != src/parallel/comm.c ] && [[ "$f" != tests/* ]] && grep -n 'rci_buffer_host' "$src/$f"; then
        echo "check_memory_access: $f takes a buffer as host memory outside a backend and the collectives"
        failed=$((failed + 1))
    fi
done
echo "check_memory_access: $(wc -w <<<"$files") files checked, $failed offences"
[ "$failed" -eq 0 ]
