#!/usr/bin/env bash
# check_install.sh pkgconfig|cmake BUILD_DIR PROGRAM.c - installs the build into a
# temporary prefix (cmake --install BUILD_DIR --prefix TMP), builds PROGRAM.c outside the
# tree as a user would, and runs it: it must exit 0 and print "trained N steps".
#   pkgconfig: cc PROGRAM.c $(pkg-config --cflags --libs redco) against libredco.so, then
#              against libredco.a with pkg-config --static (a folder holding only the archive).
#   cmake:     the project tests/install/CMakeLists.txt: find_package(redco) and
#              redco::redco (shared) and redco::redco_static.
# REDCO_APP_FLAGS (environment): flags for building the program, e.g. the sanitizers the
# library was built with.
set -u
mode=$1 build=$2 program=$3
flags=${REDCO_APP_FLAGS:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_install ($mode): $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "cmake --install $build --prefix $tmp/prefix failed"; }
for f in bin/redco include/redco.h include/redco/pipeline.h lib/libredco.a lib/libredco.so \
         lib/pkgconfig/redco.pc lib/cmake/redco/redcoConfig.cmake lib/cmake/redco/redcoConfigVersion.cmake; do
    [ -e "$tmp/prefix/$f" ] || fail "the install has no $f"
done
soname=$(objdump -p "$tmp/prefix/lib/libredco.so" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libredco.so.0 ] || fail "libredco.so's SONAME is '$soname', not libredco.so.0"

# run NAME: runs the program built as $tmp/NAME in $tmp (its workdir is none)
run() {
    local out
    out=$(cd "$tmp" && OMP_NUM_THREADS=2 "$tmp/$1" 2>&1) || { echo "$out"; fail "$1 exited $?"; }
    echo "$out"
    grep -q "trained [0-9]* steps" <<<"$out" || fail "$1 did not print 'trained N steps'"
}

if [ "$mode" = pkgconfig ]; then
    export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
    cc=${CC:-cc}
    set -x
    $cc -Wall -Wextra $flags -o "$tmp/app_shared" "$program" $(pkg-config --cflags --libs redco) \
        -Wl,-rpath,"$(pkg-config --variable=libdir redco)" || fail "building against libredco.so failed"
    mkdir "$tmp/static" && ln -s "$tmp/prefix/lib/libredco.a" "$tmp/static/libredco.a"
    $cc -Wall -Wextra $flags -o "$tmp/app_static" "$program" $(pkg-config --cflags redco) -L"$tmp/static" \
        $(pkg-config --static --libs redco) || fail "building against libredco.a failed"
    set +x
    ldd "$tmp/app_shared" | grep -q "libredco.so.0 => $tmp/prefix/lib/" ||
        fail "app_shared does not load $tmp/prefix/lib/libredco.so.0"
    ! ldd "$tmp/app_static" | grep -q libredco || fail "app_static loads a libredco.so"
elif [ "$mode" = cmake ]; then
    cmake -S "$here" -B "$tmp/app" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DAPP_SOURCE="$program" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$flags" >"$tmp/config.log" 2>&1 ||
        { cat "$tmp/config.log"; fail "configuring tests/install/CMakeLists.txt failed"; }
    cmake --build "$tmp/app" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the app failed"; }
    mv "$tmp/app/app_shared" "$tmp/app/app_static" "$tmp/" || fail "the app's programs are missing"
    ldd "$tmp/app_shared" | grep -q "libredco.so.0 => $tmp/prefix/lib/" ||
        fail "app_shared (redco::redco) does not load $tmp/prefix/lib/libredco.so.0"
    ! ldd "$tmp/app_static" | grep -q libredco || fail "app_static (redco::redco_static) loads a libredco.so"
else
    fail "the mode is pkgconfig or cmake, not '$mode'"
fi
run app_shared
run app_static
echo "check_install ($mode): built and ran the program against libredco.so and libredco.a"
