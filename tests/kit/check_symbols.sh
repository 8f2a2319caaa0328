#!/usr/bin/env bash
# check_symbols.sh LIB INCLUDE_DIR - every global symbol the static library defines is either
# public API (a function declared in the public headers: NAME followed by '(') or internal
# with the rci_ prefix, so the library cannot collide with a user's own names. Prints each
# offender; exits 1 when there is any.
set -euo pipefail
lib="$1"
inc="$2"
declared=$(grep -rhoE '\b[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' "$inc" | tr -d '( \t' | sort -u)
defined=$(nm -g --defined-only "$lib" | awk 'NF == 3 { print $3 }' | sort -u)
[ -n "$defined" ] || { echo "check_symbols: no symbols read from $lib"; exit 1; }
passed=0
failed=0
for s in $defined; do
    s="${s#__odr_asan.}"   # AddressSanitizer's ODR indicator of a global: judge the global's name
    if [[ "$s" == rci_* ]] || grep -qxF "$s" <<<"$declared"; then
        passed=$((passed + 1))
    else
        echo "check_symbols: $s is global but neither declared in $inc nor rci_-prefixed"
        failed=$((failed + 1))
    fi
done
echo "check_symbols: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
