#!/usr/bin/env bash
# check_layers_selftest.sh CHECK_LAYERS_PY CC - the layering check fails where it must:
# objects made here from tiny C files (a pair of files calling each other; a loop of three;
# a lower room calling a higher one) are each reported, and a clean stack passes.
set -euo pipefail
check="$1"
cc="${2:-cc}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
obj() { # obj ROOM/FILE 'C source': CMakeFiles/t.dir/src/ROOM/FILE.c.o
    mkdir -p "$tmp/CMakeFiles/t.dir/src/$(dirname "$1")"
    mkdir -p "$tmp/$(dirname "$1")"
    printf '%s\n' "$2" >"$tmp/$1.c"
    "$cc" -c -o "$tmp/CMakeFiles/t.dir/src/$1.c.o" "$tmp/$1.c"
}
objs() { find "$tmp/CMakeFiles" -name '*.o' | sort; }
expect() { # expect WHAT PATTERN STATUS: the check's output has PATTERN and it exits STATUS
    set +e
    out=$(python3 "$check" $(objs) --order "low high" 2>&1)
    rc=$?
    set -e
    echo "$out"
    if [ "$rc" -ne "$3" ] || ! grep -q "$2" <<<"$out"; then
        echo "layers_selftest: FAIL: $1 (exit $rc, wanted $3 and '$2')"
        exit 1
    fi
    echo "layers_selftest: ok: $1"
}
obj low/a 'int b(void); int a(void) { return 1; } int c(void) { return b(); }'
obj low/b 'int a(void); int b(void) { return a(); }'
expect "two files calling each other" "low/a.c, src/low/b.c depend on each other" 1
rm -rf "$tmp/CMakeFiles"
obj low/a 'int b(void); int a(void) { return b(); }'
obj low/b 'int c(void); int b(void) { return c(); }'
obj low/c 'int a(void); int c(void) { return a(); }'
expect "a loop of three" "call each other in a loop" 1
rm -rf "$tmp/CMakeFiles"
obj low/a 'int h(void); int a(void) { return h(); }'
obj high/h 'int h(void) { return 2; }'
expect "a lower room calling a higher one" "src/low/a.c (low) calls the higher room high" 1
rm -rf "$tmp/CMakeFiles"
obj low/a 'int a(void) { return 1; }'
obj high/h 'int a(void); int h(void) { return a(); }'
expect "a clean stack" "0 offences" 0
