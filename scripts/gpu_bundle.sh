#!/usr/bin/env bash
# gpu_bundle.sh - builds redco for a GPU machine and packs what scripts/gpu_check.sh runs
# there into gpu-bundle/ (ignored by git), so the machine's time goes to the checks alone
# (docs/gpu.md). Run it here, on a development machine, from anywhere in the repository:
#
#   scripts/gpu_bundle.sh [--build DIR] [--out DIR] [--no-cuda] [--march M] [--jobs N]
#                         [--no-chroot-test] [--baseline COMMIT ...]
#
# - builds in DIR (default build-gpu/) with -DREDCO_CUDA=ON (when that configuration fails,
#   or this tree has no such option, it builds without CUDA and says so, loudly, here and
#   in the bundle's MANIFEST), for -march=M (default x86-64-v3: the GPU machine's processor
#   is not this one, so no -march=native);
# - packs the programs the check runs (redco, the op table or the older op suites, the
#   device model tests, any tests/*/test_cuda*.c, bench_gpt2, bench_generate,
#   bench_attention), stripped,
#   with every shared library they link except glibc's own and CUDA's/NVIDIA's (the GPU
#   machine has those; it has none of OpenBLAS, OpenMPI, jansson, utf8proc, CLBlast,
#   ocl-icd), into gpu-bundle/redco-bundle.tar.gz, and writes gpu-bundle/MANIFEST.txt;
# - checks the unpacked bundle: every library of every program resolves from the bundle or
#   glibc (LD_DEBUG=libs, the system's library paths hidden), and, unless --no-chroot-test,
#   the programs run in a chroot holding glibc and the bundle alone;
# - --baseline COMMIT (repeatable): also builds that commit's `redco` alone, from its own
#   tree (git archive) in DIR/baseline-SHORT/, with the same flags, as bin/redco-base-SHORT,
#   so that one GPU call times the step of an earlier state beside this one
#   (gpu_check.sh --parts baseline): what a run of several unmeasured commits gained or lost.
# OpenMPI: redco calls MPI_Init only under a launcher (rc_dist_init returns before it when
# none of OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, MPI_LOCALNRANKS is set), so a process
# started alone needs OpenMPI's libraries only, not orted, its plugins or its help files.
# Exit status: 0 with the bundle made and checked; 1 otherwise.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-gpu
OUT=$ROOT/gpu-bundle
CUDA=ON
MARCH=x86-64-v3
JOBS=2
CHROOT_TEST=1
LIMIT_MIB=60
BASELINES=()

usage() {
    sed -n '6,7p' "$0" | sed 's/^# *//' >&2
    exit 2
}

die() {
    echo "gpu_bundle: $*" >&2
    exit 1
}

say() {
    echo "gpu_bundle: $*"
}

while [ $# -gt 0 ]; do
    case $1 in
        --build) BUILD=$(realpath -m "$2"); shift 2 ;;
        --out) OUT=$(realpath -m "$2"); shift 2 ;;
        --no-cuda) CUDA=OFF; shift ;;
        --march) MARCH=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --no-chroot-test) CHROOT_TEST=0; shift ;;
        --baseline) [ $# -ge 2 ] || usage; BASELINES+=("$2"); shift 2 ;;
        *) usage ;;
    esac
done
[ "$(uname -m)" = x86_64 ] || die "the GPU machine is x86-64; build the bundle on an x86-64 machine (this is $(uname -m))"

# the libraries the GPU machine has: glibc's own, and the driver's and CUDA's
is_system_lib() {
    case $(basename "$1") in
        linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
            libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.*) return 0 ;;
        libcuda.so* | libcudart.so* | libnvrtc* | libcublas* | libnvidia* | libnvJitLink*) return 0 ;;
    esac
    return 1
}

# configure with the given REDCO_CUDA (source $2 into build $3: this tree into $BUILD by
# default); the log into the build's bundle-configure.log
configure() {
    local flags="-O3 -march=$MARCH -DNDEBUG" src=${2:-$ROOT} dir=${3:-$BUILD}
    mkdir -p "$dir"
    # a build type of our own: CMakeLists.txt pins Release to -march=native
    cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Bundle "-DCMAKE_C_FLAGS_BUNDLE=$flags" \
        "-DCMAKE_CXX_FLAGS_BUNDLE=$flags" "-DREDCO_CUDA=$1" >"$dir/bundle-configure.log" 2>&1
}

# the CMake targets the check needs, as far as this tree has them
targets() {
    local t
    echo redco_cli test_ops test_device_models bench_gpt2 bench_generate bench_attention
    for t in "$ROOT"/tests/*/test_cuda*.c; do
        [ -f "$t" ] && basename "$t" .c
    done
}

# "yes", or why not: whether the built redco has the CUDA backend
cuda_state() {
    if [ ! -d "$ROOT/src/backend/cuda" ]; then
        echo "no: this tree has no src/backend/cuda"
    elif grep -A4 "not used by the project" "$BUILD/bundle-configure.log" | grep -q REDCO_CUDA; then
        echo "no: this tree's CMakeLists.txt has no REDCO_CUDA option"
    elif grep -aq "built without CUDA" "$BUILD/redco"; then
        echo "no: the build has the stub that says 'built without CUDA'"
    else
        echo yes
    fi
}

build() {
    local cuda_used=$CUDA
    if ! configure "$CUDA"; then
        [ "$CUDA" = ON ] || { cat "$BUILD/bundle-configure.log" >&2; die "cmake failed (log above)"; }
        say "WARNING: configuring with REDCO_CUDA=ON failed; building WITHOUT CUDA (log: $BUILD/bundle-configure.log.cuda)"
        tail -20 "$BUILD/bundle-configure.log" >&2
        mv "$BUILD/bundle-configure.log" "$BUILD/bundle-configure.log.cuda"
        rm -f "$BUILD/CMakeCache.txt"
        configure OFF || { cat "$BUILD/bundle-configure.log" >&2; die "cmake failed without CUDA too"; }
        cuda_used=OFF
    fi
    say "building $(targets | xargs) in $BUILD (-march=$MARCH, REDCO_CUDA=$cuda_used)"
    # shellcheck disable=SC2046
    cmake --build "$BUILD" -j "$JOBS" --target $(targets) >"$BUILD/bundle-build.log" 2>&1 ||
        { tail -40 "$BUILD/bundle-build.log" >&2; die "the build failed (log: $BUILD/bundle-build.log)"; }
}

# COMMIT's redco (the CLI alone) built from its own tree with this build's flags and CUDA
# as $BUILD/baseline-SHORT/build/redco; its short name on stdout
build_baseline() {
    local commit=$1 short dir
    short=$(git -C "$ROOT" rev-parse --short "$commit^{commit}" 2>/dev/null) || die "--baseline $commit: no such commit"
    dir=$BUILD/baseline-$short
    rm -rf "$dir"
    mkdir -p "$dir/src"
    git -C "$ROOT" archive "$short" | tar -x -C "$dir/src" || die "--baseline $commit: git archive failed"
    configure "$CUDA" "$dir/src" "$dir/build" ||
        { tail -20 "$dir/build/bundle-configure.log" >&2; die "--baseline $commit: cmake failed"; }
    say "building $short's redco in $dir/build (-march=$MARCH, REDCO_CUDA=$CUDA)" >&2
    cmake --build "$dir/build" -j "$JOBS" --target redco_cli >"$dir/build/bundle-build.log" 2>&1 ||
        { tail -40 "$dir/build/bundle-build.log" >&2; die "--baseline $commit: the build failed"; }
    echo "$short"
}

# the non-system libraries of the programs in $1/bin (ldd, transitively: ldd lists all)
needed_libs() {
    local f
    for f in "$1"/bin/*; do
        ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
    done | sort -u | while read -r lib; do
        is_system_lib "$lib" || echo "$lib"
    done
}

# the bundle's tree in $1: bin/ (with the baselines' redco of $2..., their short names),
# lib/
stage() {
    local dir=$1 t lib short
    shift
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/lib"
    for t in $(targets); do
        [ "$t" = redco_cli ] && t=redco
        cp "$BUILD/$t" "$dir/bin/" || die "$t was not built"
        strip --strip-unneeded "$dir/bin/$t"
    done
    for short in "$@"; do
        cp "$BUILD/baseline-$short/build/redco" "$dir/bin/redco-base-$short" || die "$short's redco was not built"
        strip --strip-unneeded "$dir/bin/redco-base-$short"
    done
    needed_libs "$dir" >"$dir/libs.txt"
    while read -r lib; do # under its soname, the name the programs ask for
        cp -L "$lib" "$dir/lib/$(basename "$lib")" && strip --strip-unneeded "$dir/lib/$(basename "$lib")" ||
            die "cannot copy $lib"
    done <"$dir/libs.txt"
    rm "$dir/libs.txt"
}

# a .npy of 4000 uint16 token ids below 256 at $1 (tiny-gpt2's vocabulary), for a tiny
# `redco train`
write_tokens() {
    python3 - "$1" 4000 <<'EOF'
import random, struct, sys
from array import array
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
ids = array("H", (rng.randrange(256) for _ in range(n)))
head = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }" % n
head += " " * (63 - (10 + len(head)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + ids.tobytes())
EOF
}

# the newest glibc symbol version the bundle needs
glibc_needed() {
    objdump -T "$1"/bin/* "$1"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1
}

manifest() {
    local dir=$1 cuda=$2 short
    {
        echo "redco GPU bundle (scripts/gpu_bundle.sh; docs/gpu.md)"
        echo "made: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
        echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "source: $ROOT"
        echo "cuda: $cuda"
        echo "march: $MARCH"
        echo "glibc needed: $(glibc_needed "$dir")"
        for short in "${@:3}"; do
            echo "baseline: $short $(git -C "$ROOT" log -1 --format='%cs %s' "$short")"
        done
        echo "files:"
        (cd "$dir" && find bin lib -type f -printf '  %p %s\n' | sort)
    } >"$dir/MANIFEST.txt"
}

# every library of every program in $1 resolves from $1/lib or glibc: the loader's own
# answer for the libraries linked (ldd, with the bundle first on the path), then LD_DEBUG=libs
# over real runs for what is opened at run time (no OpenCL vendor: that is the machine's)
check_resolution() {
    local dir=$1 f tmp lib bad=0
    tmp=$(mktemp -d)
    for f in "$dir"/bin/*; do
        LD_LIBRARY_PATH=$dir/lib ldd "$f" | awk -v p="$(basename "$f")" '
            /not found/ {print p ": " $1 " not found"; next}
            $2 == "=>" && $3 ~ /^\// {print p ": " $3}' >>"$tmp/resolved"
    done
    write_tokens "$tmp/tokens.npy" || return 1
    for f in "redco devices" "bench_generate --dtype f32 tiny-gpt2" \
        "redco train --model tiny-gpt2 --data $tmp/tokens.npy --workdir $tmp/w --steps 2 --batch-size 2 --seq-len 16"; do
        # shellcheck disable=SC2086
        OCL_ICD_VENDORS=$tmp LD_LIBRARY_PATH=$dir/lib LD_DEBUG=libs "$dir"/bin/$f >/dev/null 2>"$tmp/log" </dev/null
        sed -n "s/.*calling init: /${f%% *}: /p" "$tmp/log" >>"$tmp/resolved"
    done
    while read -r prog lib rest; do
        [ -n "$rest" ] && { echo "$prog $lib $rest"; continue; }
        is_system_lib "$lib" || case $lib in "$dir"/lib/*) ;; *) echo "$prog $lib" ;; esac
    done <"$tmp/resolved" | sort -u >"$tmp/bad"
    if [ -s "$tmp/bad" ]; then
        echo "libraries not found or loaded from outside the bundle:" >&2
        cat "$tmp/bad" >&2
        bad=1
    fi
    rm -rf "$tmp"
    return $bad
}

# the programs in a chroot that holds glibc and the bundle alone (nothing else of this
# machine's libraries): redco's help and device list, a CPU op suite, tiny benchmarks and
# a tiny training run (the Deployer, the Trainer, checkpoints: no MPI started)
check_chroot() {
    local dir=$1 jail lib rc=0 out
    [ "$(id -u)" = 0 ] || { say "chroot test skipped: needs root"; return 0; }
    jail=$(mktemp -d /tmp/gpu-bundle-jail.XXXXXX)
    mkdir -p "$jail/lib64" "$jail/lib/x86_64-linux-gnu" "$jail/tmp" "$jail/proc" "$jail/sys" "$jail/etc/OpenCL/vendors"
    cp -a "$dir" "$jail/bundle"
    for lib in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/{libc.so.6,libm.so.6,libpthread.so.0,libdl.so.2,librt.so.1}; do
        cp -L "$lib" "$jail$lib"
    done
    mount -t proc proc "$jail/proc" 2>/dev/null
    mount --rbind /sys "$jail/sys" 2>/dev/null
    run_jail() {
        out=$(chroot "$jail" /usr/bin/env -i LD_LIBRARY_PATH=/bundle/lib OMP_NUM_THREADS=2 "$@" 2>&1) ||
            { echo "chroot: $* failed:" >&2; echo "$out" | tail -5 >&2; rc=1; }
        echo "$out" | tail -2 | sed 's/^/  chroot> /'
    }
    mkdir -p "$jail/usr/bin" && cp /usr/bin/env "$jail/usr/bin/env"
    run_jail /bundle/bin/redco --help
    # no OpenCL platform in the jail: `redco devices` says what to install (exit 1 is right)
    out=$(chroot "$jail" /usr/bin/env -i LD_LIBRARY_PATH=/bundle/lib /bundle/bin/redco devices 2>&1)
    echo "$out" | tail -2 | sed 's/^/  chroot> /'
    echo "$out" | grep -q "error while loading shared libraries" && { echo "chroot: redco devices: $out" >&2; rc=1; }
    run_jail /bundle/bin/test_ops cpu
    run_jail /bundle/bin/bench_gpt2 1 tiny-gpt2 2 16
    run_jail /bundle/bin/bench_generate --dtype f32 tiny-gpt2
    run_jail /bundle/bin/bench_attention --cases 1:32:1 --dropout 0.1
    write_tokens "$jail/tmp/tokens.npy" &&
        run_jail /bundle/bin/redco train --model tiny-gpt2 --data /tmp/tokens.npy --workdir /tmp/w --steps 2 \
            --batch-size 2 --seq-len 16 --json
    umount -l "$jail/sys" 2>/dev/null
    umount "$jail/proc" 2>/dev/null
    rm -rf "$jail"
    return $rc
}

main() {
    local stagedir cuda size commit short shorts=()
    build
    cuda=$(cuda_state)
    for commit in "${BASELINES[@]}"; do
        short=$(build_baseline "$commit") || exit 1
        shorts+=("$short")
    done
    stagedir=$BUILD/bundle-tree
    stage "$stagedir" "${shorts[@]}"
    manifest "$stagedir" "$cuda" "${shorts[@]}"
    mkdir -p "$OUT"
    rm -f "$OUT"/redco-bundle.tar.gz "$OUT"/MANIFEST.txt
    tar -C "$stagedir" -czf "$OUT/redco-bundle.tar.gz" bin lib MANIFEST.txt || die "tar failed"
    cp "$stagedir/MANIFEST.txt" "$OUT/MANIFEST.txt"
    size=$(du -sm "$OUT" | cut -f1)
    say "bundle: $OUT/redco-bundle.tar.gz, $(du -h "$OUT/redco-bundle.tar.gz" | cut -f1) packed, $(du -sh "$stagedir" | cut -f1) unpacked"
    [ "$size" -lt "$LIMIT_MIB" ] || die "the bundle is ${size} MiB, over the ${LIMIT_MIB} MiB it must stay under"
    check_resolution "$stagedir" || die "the bundle is incomplete (above)"
    say "every library of $(ls "$stagedir/bin" | xargs) resolves from the bundle or glibc"
    if [ "$CHROOT_TEST" = 1 ]; then
        check_chroot "$stagedir" || die "the programs do not run from the bundle alone (above)"
        say "the programs ran in a chroot holding glibc and the bundle alone"
    fi
    say "glibc needed: $(glibc_needed "$stagedir") (the GPU machine's must be as new)"
    case $cuda in
        yes) say "CUDA: built in" ;;
        *) say "WARNING: this bundle has NO CUDA backend ($cuda); its cuda checks will fail" ;;
    esac
    say "next: the device tool's run with carry [\"gpu-bundle\"] and the command in docs/gpu.md"
}

main
