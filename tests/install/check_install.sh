#!/usr/bin/env bash
# check_install.sh pkgconfig|cmake BUILD_DIR PROGRAM.c - installs the build into a
# temporary prefix (cmake --install BUILD_DIR --prefix TMP), builds PROGRAM.c outside the
# tree as a user would, and runs it: it must exit 0 and print "trained N steps".
#   pkgconfig: cc PROGRAM.c $(pkg-config --cflags --libs redco) against libredco.so, then
#              against libredco.a with pkg-config --static (a folder holding only the archive).
#   cmake:     the project tests/install/CMakeLists.txt: find_package(redco) and
#              redco::redco (shared) and redco::redco_static.
# check_install.sh pipeline BUILD_DIR examples/mlp_classifier.c DATA_DIR MPIEXEC - the
#   README's own pipeline: built with its pkg-config line, run on 1 process and under
#   MPIEXEC -n 2 on DATA_DIR's images; its test accuracy must reach 0.6 (chance: 0.1) and
#   the two runs must print the same accuracy and final loss (relative 1e-5).
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
elif [ "$mode" = pipeline ]; then
    data=$4 mpiexec=$5
    export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
    set -x
    ${CC:-cc} -Wall -Wextra -Werror $flags "$program" $(pkg-config --cflags --libs redco) \
        -Wl,-rpath,"$(pkg-config --variable=libdir redco)" -o "$tmp/mlp_classifier" || fail "building $program failed"
    set +x
    ldd "$tmp/mlp_classifier" | grep -q "libredco.so.0 => $tmp/prefix/lib/" ||
        fail "mlp_classifier does not load $tmp/prefix/lib/libredco.so.0"
    out1=$(cd "$tmp" && OMP_NUM_THREADS=1 ./mlp_classifier --data "$data" 2>&1) || { echo "$out1"; fail "1 process: exited $?"; }
    out2=$(cd "$tmp" && OMP_NUM_THREADS=1 "$mpiexec" -n 2 ./mlp_classifier --data "$data" 2>&1) ||
        { echo "$out2"; fail "2 processes: exited $?"; }
    # figure NAME OUTPUT: the number after NAME in OUTPUT's last line naming it
    figure() { sed -n "s/.*$1 \([-0-9.e+]*\).*/\1/p" <<<"$2" | tail -1; }
    acc1=$(figure "test accuracy" "$out1") acc2=$(figure "test accuracy" "$out2")
    loss1=$(figure "final loss" "$out1") loss2=$(figure "final loss" "$out2")
    grep -E "^(trained|test accuracy)" <<<"$out1"
    grep -E "^(trained|test accuracy)" <<<"$out2"
    [ -n "$acc1" ] && [ -n "$loss1" ] || { echo "$out1"; fail "1 process: no test accuracy or final loss"; }
    awk -v a="$acc1" 'BEGIN { exit !(a >= 0.6) }' || fail "test accuracy $acc1 (at least 0.6 expected)"
    [ "$acc1" = "$acc2" ] || { echo "$out2"; fail "2 processes: test accuracy $acc2, 1 process: $acc1"; }
    awk -v a="$loss1" -v b="$loss2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-5 * (a < 0 ? -a : a)) }' ||
        fail "2 processes: final loss $loss2, 1 process: $loss1"
    echo "check_install (pipeline): built against the install; 1 and 2 processes agree, test accuracy $acc1"
    exit 0
else
    fail "the mode is pkgconfig, cmake or pipeline, not '$mode'"
fi
run app_shared
run app_static
echo "check_install ($mode): built and ran the program against libredco.so and libredco.a"
