#!/usr/bin/env bash
# gpu_check.sh - the one prepared command for a machine with an NVIDIA GPU, its driver, the
# CUDA toolkit and PyTorch, but none of redco's Debian libraries and no network (docs/gpu.md).
# It runs the programs of gpu-bundle/ (scripts/gpu_bundle.sh makes it on a development
# machine) from the repository root:
#
#   scripts/gpu_check.sh [--bundle DIR] [--python PY] [--budget S] [--parts LIST]
#                        [--allow-no-gpu] [--quick]
#
# Parts, in this order (--parts takes a comma-separated subset):
#   info        the GPU, driver, CUDA, PyTorch, glibc; `redco devices`
#   cuda        the op table and the device model tests on cuda (REDCO_REQUIRE_CUDA=1), and
#               both again with bf16 attention in tiles on tensor cores (--attention-tiled)
#   step        GPT-2 124M training step, batch 8 x 1024, f32 and bf16 (bf16 attention in
#               tiles, the default; and with --attention products): redco train beside
#               scripts/torch_gpt2_step.py (same model, forward, backward, AdamW); the bf16
#               steps' profile (--profile)
#   matmul      bench_gpt2 on the same step: its matmuls against cuBLAS's own rate on the
#               same shapes (torch.matmul), and the host transfers per step
#   attention   bench_attention: the fused op's kernels alone in bf16 (products, and tiles:
#               --tiled) beside PyTorch's SDPA,
#               and in f32 with and without attention dropout; bench_gpt2 --attention-compare:
#               the same step with the fused attention op against product, softmax,
#               product, at 8 x 1024 and 4 x 2048
#   decode      greedy decoding of GPT-2 124M at batch 1: bench_generate beside PyTorch
#   opencl      the op table and the device model tests on NVIDIA's OpenCL, when the driver
#               has one (libnvidia-opencl.so.1)
#   baseline    (not in the default list) the bf16 step of each earlier state the bundle
#               holds (gpu_bundle.sh --baseline COMMIT: bin/redco-base-SHORT) beside this
#               state's in the same run (the step part's), with each one's profile: what a
#               run of unmeasured commits gained or lost, by op
#   kernels     (not in the default list) Nsight Compute's counters, where the machine has
#               ncu: the four attention tile kernels (bench_attention, bf16, the step's
#               dropout) and the first launches of the bf16 step's other kernels (redco
#               train, one step), each summed up by scripts/ncu_summary.py
# One JSON line per figure: {"check", "device", "value", "unit", "peer", ...}, then a summary
# line; progress and errors on lines starting with '#'. Every program runs under `timeout`,
# within --budget seconds in all (default 540: a 600-second command limit never cuts the
# summary off); a part that fails prints why and the others go on. The lines, and every
# program's log, are also written to $OUT (the device tool's folder) when it is set.
# --allow-no-gpu (a dry run on a machine without a GPU): the cuda tests must say "no CUDA
# device" and pass, and the benchmarks run on the CPU at tiny sizes (--quick) to check the
# script itself. Exit status: 0 when every test passed and every part ran; 1 when a test
# failed; 3 when only a benchmark part failed.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE_DIR=$ROOT/gpu-bundle
PY=python3
BUDGET=540
PARTS=info,cuda,step,matmul,attention,decode,opencl
ALLOW_NO_GPU=0
QUICK=0
WORK=${TMPDIR:-/tmp}/redco-gpu-check
START=$SECONDS

TESTS_PASSED=0
TESTS_FAILED=0
TESTS_SKIPPED=0
FIGURES=0
FAILED_PARTS=""
GOALS_MET=""
GOALS_MISSED=""
GPU_NAME="none"
HAVE_GPU=0
PART=""           # the part running (main), which the shared helpers' failures name
BF16_STEP_S=""    # this state's bf16 step (tiles), once the step part has timed it
RDEV=cuda         # redco's device for the benchmarks
TDEV=cuda         # PyTorch's

usage() {
    sed -n '7,8p' "$0" | sed 's/^# *//' >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
        --bundle) BUNDLE_DIR=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --parts) PARTS=$2; shift 2 ;;
        --allow-no-gpu) ALLOW_NO_GPU=1; shift ;;
        --quick) QUICK=1; shift ;;
        *) usage ;;
    esac
done

# ---- output -------------------------------------------------------------------------

note() {
    echo "# $*"
}

# a JSON string of $1
jstr() {
    local s=${1//\\/\\\\}
    s=${s//\"/\\\"}
    s=$(printf '%s' "$s" | tr -d '\000-\037')
    printf '"%s"' "$s"
}

# a JSON value of $1 for key $2: a number, null, true or false as it is (empty: null),
# anything else a string; versions are strings whatever they look like
jval() {
    case $2 in driver | cuda | glibc* | torch | compute_capability | bundle*) [ -n "$1" ] && { jstr "$1"; return; } ;; esac
    case $1 in
        "" | null | true | false) printf '%s' "${1:-null}" ;;
        *) if [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then printf '%s' "$1"; else jstr "$1"; fi ;;
    esac
}

# emit KEY VALUE KEY VALUE ...: one JSON line, on stdout and into the lines file
emit() {
    local line="{" sep=""
    while [ $# -ge 2 ]; do
        line+="$sep$(jstr "$1"): $(jval "$2" "$1")"
        sep=", "
        shift 2
    done
    line+="}"
    put_line "$line"
}

# a JSON line as it is, on stdout and into the lines file
put_line() {
    echo "$1"
    echo "$1" >>"$WORK/gpu_check.jsonl"
}

# a figure: check, device, value, unit, peer, then more KEY VALUE pairs
figure() {
    local check=$1 dev=$2 value=$3 unit=$4 peer=$5
    shift 5
    [ -n "$value" ] || value=null
    [ -n "$peer" ] || peer=null
    emit check "$check" device "$dev" value "$value" unit "$unit" peer "$peer" "$@"
    FIGURES=$((FIGURES + 1))
}

# the value of KEY in the first line of FILE that has "MATCH" (a record's name); empty
# when absent or null (redco's and the PyTorch script's lines are flat JSON)
jget() {
    grep -m1 "\"$2\"" "$1" 2>/dev/null | sed -n "s/.*\"$3\": \(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"' |
        sed 's/^null$//'
}

# awk arithmetic on numbers: calc EXPR A B ... ($1, $2 ... in EXPR); empty if any is
# empty or the result is not finite
calc() {
    local expr=$1 v
    shift
    for v in "$@"; do [ -n "$v" ] || return 0; done
    v=$(awk -v args="$*" "BEGIN { \$0 = args; printf \"%.6g\", ($expr) }" 2>/dev/null)
    case $v in *inf* | *nan*) ;; *) printf '%s' "$v" ;; esac # a division by zero: no figure
}

# true or false: whether the awk condition EXPR holds on A B ...; empty if any is empty
holds() {
    local r
    r=$(calc "$@")
    [ -n "$r" ] || return 0
    [ "$r" = 1 ] && echo true || echo false
}

# goal NAME MET(true|false|empty): recorded for the summary
goal() {
    [ -n "$2" ] || return 0
    if [ "$2" = true ]; then GOALS_MET+="${GOALS_MET:+,}$1"; else GOALS_MISSED+="${GOALS_MISSED:+,}$1"; fi
}

part_failed() {
    case ,$FAILED_PARTS, in *,$1,*) ;; *) FAILED_PARTS+="${FAILED_PARTS:+,}$1" ;; esac
    note "part $1 failed: $2"
}

# ---- running ------------------------------------------------------------------------

left() {
    echo $((BUDGET - (SECONDS - START)))
}

# run NAME LIMIT CMD...: CMD under `timeout`, for at most LIMIT seconds and what is left
# of the budget; stdout and stderr into $WORK/logs/NAME.log; the exit status (124: cut at
# its time; 125: not started, no time left)
run() {
    local name=$1 limit=$2 have rc
    shift 2
    have=$(($(left) - 15))
    [ "$have" -lt "$limit" ] && limit=$have
    if [ "$limit" -lt 10 ]; then
        echo "not started: the budget of ${BUDGET}s is spent" >"$WORK/logs/$name.log"
        return 125
    fi
    note "$name: $(shown "$@") (at most ${limit}s)"
    timeout -k 5 "$limit" "$@" >"$WORK/logs/$name.log" 2>&1 </dev/null
    rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "cut after ${limit}s (timeout)" >>"$WORK/logs/$name.log" && rc=124
    return $rc
}

# a command as shown in the progress lines: without env's words and the variables it sets
# (but REDCO_*), the bundle's folder as bundle/
shown() {
    local w out=""
    for w in "$@"; do
        case $w in env | -u | OMPI_COMM_WORLD_SIZE | PMI_SIZE | PMIX_RANK | MPI_LOCALNRANKS | LD_LIBRARY_PATH=*) continue ;; esac
        out+="${out:+ }${w/#$BUNDLE\//bundle/}"
    done
    echo "$out"
}

# the last lines of a program's log, for a failure
tail_log() {
    tail -n "${2:-12}" "$WORK/logs/$1.log" | sed 's/^/#   | /'
}

# a bundled program's environment, the command before it (set once CUDA's libraries are
# found): the bundle's libraries first, then CUDA's, then the machine's own; no launcher
# variables (redco then never starts MPI); what runs Python has none of this
set_rc_env() {
    RC_ENV=(env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u MPI_LOCALNRANKS
        "LD_LIBRARY_PATH=$BUNDLE/lib${CUDA_LIBS:+:$CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
}

# ---- setup --------------------------------------------------------------------------

unpack_bundle() {
    local tgz=$BUNDLE_DIR/redco-bundle.tar.gz
    BUNDLE=$WORK/bundle
    [ -f "$tgz" ] || { note "no bundle at $tgz: run scripts/gpu_bundle.sh on a development machine first"; return 1; }
    mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xzf "$tgz" || { note "cannot unpack $tgz"; return 1; }
    # tests built with the data folder's absolute path (REDCO_DATA_DIR): give them this one
    local src
    src=$(sed -n 's/^source: //p' "$BUNDLE/MANIFEST.txt")
    if [ -n "$src" ] && [ ! -e "$src/data" ] && [ -d "$ROOT/data" ]; then
        mkdir -p "$src" 2>/dev/null && ln -s "$ROOT/data" "$src/data" 2>/dev/null
    fi
    return 0
}

# the folders holding CUDA's NVRTC and cuBLAS (redco opens them at run time), unless the
# loader's cache already has them
find_cuda_libs() {
    local d dirs="" lib site
    site=$("$PY" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for lib in libnvrtc.so libcublas.so libcublasLt.so libcuda.so.1; do
        ldconfig -p 2>/dev/null | grep -q "$lib" && continue
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
            /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
            compgen -G "$d/$lib*" >/dev/null && { dirs+="${dirs:+:}$d"; break; }
        done
        case :$dirs: in *:/usr/local/cuda*) continue ;; esac
        for d in $site; do # PyTorch's wheels: site-packages/nvidia/*/lib
            compgen -G "$d/nvidia/*/lib/$lib*" >/dev/null || continue
            d=$(dirname "$(compgen -G "$d/nvidia/*/lib/$lib*" | head -1)")
            dirs+="${dirs:+:}$d"
            break
        done
    done
    CUDA_LIBS=$(echo "$dirs" | tr ':' '\n' | awk 'NF && !seen[$0]++' | paste -sd:)
}

# ---- parts --------------------------------------------------------------------------

part_info() {
    local driver="" smi="" cuda="" torch="" glibc
    if command -v nvidia-smi >/dev/null && smi=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
        --format=csv,noheader 2>/dev/null) && [ -n "$smi" ]; then
        HAVE_GPU=1
        GPU_NAME=$(echo "$smi" | head -1 | cut -d, -f1 | sed 's/ *$//')
        driver=$(echo "$smi" | head -1 | cut -d, -f2 | tr -d ' ')
    fi
    cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
    torch=$(timeout 60 "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null)
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    note "GPU: ${smi:-none (nvidia-smi found no device)}"
    note "CUDA libraries from: ${CUDA_LIBS:-the cache of ld.so}"
    emit check environment device "$GPU_NAME" value "$driver" unit driver peer null \
        memory "$(echo "$smi" | head -1 | cut -d, -f3 | sed 's/^ *//')" \
        compute_capability "$(echo "$smi" | head -1 | cut -d, -f4 | tr -d ' ')" cuda "${cuda:-none}" \
        torch "${torch:-none}" ncu "$(find_ncu)" glibc "$glibc" glibc_needed "$(sed -n 's/^glibc needed: //p' "$BUNDLE/MANIFEST.txt")" \
        bundle "$(sed -n 's/^commit: //p' "$BUNDLE/MANIFEST.txt")" bundle_cuda "$(sed -n 's/^cuda: //p' "$BUNDLE/MANIFEST.txt")" \
        date "$(date -u +%Y-%m-%dT%H:%MZ)"
    run devices 30 "${RC_ENV[@]}" "$BUNDLE/bin/redco" devices
    sed 's/^/#   /' "$WORK/logs/devices.log"
}

# test NAME DEVICE LIMIT ENV... -- CMD...: one test program; pass, fail or skip (a test
# that says it did not run, allowed only without a GPU under --allow-no-gpu)
run_test() {
    local name=$1 dev=$2 limit=$3 t0=$SECONDS rc status reason=""
    shift 3
    run "$name" "$limit" "$@"
    rc=$?
    if [ $rc -eq 0 ] && grep -qi "not run\|no CUDA device\|no OpenCL device" "$WORK/logs/$name.log" &&
        ! grep -qi "passed" "$WORK/logs/$name.log"; then
        status=skip
        reason=$(grep -i -m1 "not run\|no CUDA device\|no OpenCL device" "$WORK/logs/$name.log")
    elif [ $rc -eq 0 ] && ! grep -qi "$dev" "$WORK/logs/$name.log"; then
        status=fail # e.g. a test that ignores --device and ran elsewhere
        reason="exit 0, but its output never names $dev: does this build's test take --device $dev?"
    elif [ $rc -eq 0 ]; then
        status=pass
    else
        status=fail
        reason="exit $rc: $(grep -v '^$' "$WORK/logs/$name.log" | tail -1)"
    fi
    if [ $status = skip ] && [ "$dev" = cuda ] && [ $HAVE_GPU = 1 ]; then
        status=fail # a GPU is here: a cuda test that did not run failed
    fi
    case $status in
        pass) TESTS_PASSED=$((TESTS_PASSED + 1)) ;;
        skip) TESTS_SKIPPED=$((TESTS_SKIPPED + 1)) ;;
        fail) TESTS_FAILED=$((TESTS_FAILED + 1)); note "$name failed: $reason"; tail_log "$name" ;;
    esac
    grep -i "passed\|failed\|cases" "$WORK/logs/$name.log" | tail -3 | sed 's/^/#   /'
    emit check "test:$name" device "$dev" value "$status" unit status peer null seconds $((SECONDS - t0)) reason "$reason"
}

# the op table and the device model tests, on DEVICE (cuda or opencl) with ENV... set
device_tests() {
    local dev=$1 t
    shift
    if [ -x "$BUNDLE/bin/test_ops" ]; then
        run_test "op_table_$dev" "$dev" 200 "${RC_ENV[@]}" "$@" "$BUNDLE/bin/test_ops" --device "$dev"
    else
        TESTS_FAILED=$((TESTS_FAILED + 1))
        note "op_table_$dev: this bundle has no test_ops (tests/backend/test_ops.c): the op table cannot run on $dev"
        emit check "test:op_table_$dev" device "$dev" value fail unit status peer null reason "no test_ops in the bundle"
    fi
    run_test "device_models_$dev" "$dev" 200 "${RC_ENV[@]}" "$@" "$BUNDLE/bin/test_device_models" --device "$dev"
    if [ "$dev" = cuda ]; then
        for t in "$BUNDLE"/bin/test_cuda*; do
            [ -x "$t" ] && run_test "$(basename "$t")" cuda 120 "${RC_ENV[@]}" "$@" "$t"
        done
    fi
}

part_cuda() {
    local require=1
    [ $HAVE_GPU = 0 ] && [ $ALLOW_NO_GPU = 1 ] && require=0
    device_tests cuda REDCO_REQUIRE_CUDA=$require REDCO_DEVICE=cuda
    # bf16 attention in tiles on tensor cores (--attention tiled): the op table's attention
    # cases with mma.sync itself, where PoCL runs the same fragments through local memory
    run_test op_table_cuda_tiled cuda 150 "${RC_ENV[@]}" REDCO_REQUIRE_CUDA=$require REDCO_DEVICE=cuda \
        "$BUNDLE/bin/test_ops" --device cuda --attention-tiled
    run_test device_models_cuda_tiled cuda 150 "${RC_ENV[@]}" REDCO_REQUIRE_CUDA=$require REDCO_DEVICE=cuda \
        "$BUNDLE/bin/test_device_models" --device cuda --attention-tiled
}

# a folder of OpenCL vendor files naming NVIDIA's ICD alone; empty when the driver has none
nvidia_vendors() {
    local dir=$WORK/vendors lib f
    mkdir -p "$dir"
    for f in /etc/OpenCL/vendors/*.icd; do # NVIDIA's is nvidia.icd: "libnvidia-opencl.so.1"
        [ -f "$f" ] && grep -q nvidia "$f" && cp "$f" "$dir/" && { echo "$dir"; return; }
    done
    lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
    [ -n "$lib" ] || lib=$(compgen -G "/usr/local/nvidia/lib*/libnvidia-opencl.so.1" | head -1)
    [ -n "$lib" ] || lib=$(compgen -G "/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1" | head -1)
    [ -n "$lib" ] || return 0
    echo "$lib" >"$dir/nvidia.icd"
    echo "$dir"
}

part_opencl() {
    local vendors
    vendors=$(nvidia_vendors)
    if [ -z "$vendors" ]; then
        note "opencl: no NVIDIA OpenCL driver here (no nvidia.icd in /etc/OpenCL/vendors, no libnvidia-opencl.so.1): not run"
        emit check "test:opencl" device opencl value skip unit status peer null reason "no NVIDIA OpenCL ICD"
        TESTS_SKIPPED=$((TESTS_SKIPPED + 1))
        return
    fi
    note "opencl: NVIDIA's ICD: $(cat "$vendors"/*.icd)"
    run devices_opencl 30 "${RC_ENV[@]}" OCL_ICD_VENDORS="$vendors" "$BUNDLE/bin/redco" devices
    sed 's/^/#   /' "$WORK/logs/devices_opencl.log"
    device_tests opencl OCL_ICD_VENDORS="$vendors" REDCO_REQUIRE_OPENCL=1 REDCO_DEVICE=opencl
}

# sizes: GPT-2 124M at 8 x 1024 on a GPU; tiny-gpt2 at 2 x 32 for a dry run
sizes() {
    if [ $QUICK = 1 ]; then
        PRESET=tiny-gpt2 BATCH=2 SEQ=32 STEPS=4 VOCAB=256
    else
        PRESET=gpt2 BATCH=8 SEQ=1024 STEPS=8 VOCAB=50257
    fi
}

# token ids for redco train: a .npy of uint16 ids below VOCAB, enough for the steps
make_tokens() {
    "$PY" - "$1" "$VOCAB" $(((STEPS + 4) * BATCH * (SEQ + 1))) <<'EOF'
import random, struct, sys
from array import array
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
ids = array("H", (rng.randrange(vocab) for _ in range(n)))
head = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }" % n
head += " " * (63 - (10 + len(head)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + ids.tobytes())
EOF
}

# redco's training step in DTYPE: seconds per step from the trainer's log (tokens per
# second of each step after the first two), into REDCO_STEP_S; a run cut at its time still
# gives the steps it logged (REDCO_STEPS_LOGGED says how many)
# (REDCO_BIN: another build's redco, as the baselines', with REDCO_TAG added to the names)
redco_step() {
    local dtype=$1 attention=${2:-fused} name=redco_train_$1${2:+_$2}${REDCO_TAG:-} wd=$WORK/train_$1 rc
    REDCO_STEP_S="" REDCO_STEPS_LOGGED=0
    rm -rf "$wd"
    run "$name" 240 "${RC_ENV[@]}" "${REDCO_BIN:-$BUNDLE/bin/redco}" train --model "$PRESET" --data "$WORK/tokens.npy" --workdir "$wd" \
        --steps "$STEPS" --batch-size "$BATCH" --seq-len "$SEQ" --grad-clip 0 --log-every 1 --device "$RDEV" \
        --dtype "$dtype" --attention "$attention" --json
    rc=$?
    [ $rc -eq 0 ] || { part_failed "$PART" "redco train --dtype $dtype: exit $rc"; tail_log "$name"; }
    [ -f "$wd/log.jsonl" ] || return
    REDCO_STEPS_LOGGED=$(grep -c tokens_per_s "$wd/log.jsonl")
    REDCO_STEP_S=$(sed -n 's/.*"train\/tokens_per_s": \([0-9.eE+-]*\).*/\1/p' "$wd/log.jsonl" | tail -n +3 | sort -g |
        awk -v bt=$((BATCH * SEQ)) '{ t[++k] = $1 } END { if (!k) exit; m = k % 2 ? t[(k + 1) / 2] : (t[k / 2] + t[k / 2 + 1]) / 2; printf "%.6g", bt / m }')
    rm -rf "$wd"
}

# redco's bf16 step again with --profile (4 steps): where a train step's time goes, its
# phases and its kernels by op (each waited for), from the trainer's note line (REDCO_BIN,
# REDCO_TAG as redco_step's)
redco_profile() {
    local attention=${1:-fused} name=redco_train_bf16_profile${1:+_$1}${REDCO_TAG:-} wd=$WORK/train_profile line
    rm -rf "$wd"
    run "$name" 120 "${RC_ENV[@]}" "${REDCO_BIN:-$BUNDLE/bin/redco}" train --model "$PRESET" --data "$WORK/tokens.npy" \
        --workdir "$wd" --steps 4 --batch-size "$BATCH" --seq-len "$SEQ" --grad-clip 0 --device "$RDEV" --dtype bf16 \
        --attention "$attention" --profile || { part_failed "$PART" "redco train --profile: exit $?"; tail_log "$name"; return; }
    line=$(grep -m1 "profile, ms a step" "$WORK/logs/$name.log" | sed 's/.*waited for): //')
    figure "gpt2_train_bf16_profile${1:+_$1}${REDCO_TAG:-}" "$RDEV" "$(printf '%s' "$line" | sed -n 's/.* run \([0-9.]*\),.*/\1/p')" \
        "ms/step (run)" null breakdown "$line"
    rm -rf "$wd"
}

# PyTorch's training step in DTYPE (and ATTENTION): into TORCH_STEP_S
torch_step() {
    local dtype=$1 attention=${2:-sdpa} name=torch_step_$1_${2:-sdpa}
    TORCH_STEP_S=""
    run "$name" 150 "$PY" "$ROOT/scripts/torch_gpt2_step.py" step --device "$TDEV" --dtype "$dtype" --preset "$PRESET" \
        --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --warmup 3 --attention "$attention" ||
        { part_failed "step" "torch step --dtype $dtype: exit $?"; tail_log "$name"; return; }
    TORCH_STEP_S=$(jget "$WORK/logs/$name.log" torch_gpt2_step step_s_median)
    TORCH_ATTENTION=$(jget "$WORK/logs/$name.log" torch_gpt2_step attention)
}

part_step() {
    local dtype ratio met want peer_how
    sizes
    make_tokens "$WORK/tokens.npy" || { part_failed step "cannot write the token file"; return; }
    for dtype in f32 bf16; do # interleaved: PyTorch, redco, for each dtype
        torch_step "$dtype"
        redco_step "$dtype"
        [ "$dtype" = bf16 ] && BF16_STEP_S=$REDCO_STEP_S
        ratio=$(calc '$1 / $2' "$REDCO_STEP_S" "$TORCH_STEP_S")
        met="" want=none peer_how="f32, TF32 off"
        if [ "$dtype" = bf16 ]; then
            want="ratio <= 1.1" peer_how="autocast bf16"
            met=$(holds '$1 <= 1.3' "$ratio")
            goal bf16_step_within_1.3x_of_pytorch "$met" # issue 25's goal
            met=$(holds '$1 <= 1.1' "$ratio")
            goal bf16_step_within_1.1x_of_pytorch_sdpa "$met" # issue 26's, with fused attention
        fi
        figure "gpt2_step_$dtype" "$RDEV" "$REDCO_STEP_S" "s/step" "$TORCH_STEP_S" ratio "${ratio:-null}" \
            goal "$want" met "${met:-null}" model "$PRESET" batch "$BATCH" seq "$SEQ" steps "$REDCO_STEPS_LOGGED" \
            peer_attention "${TORCH_ATTENTION:-}"
    done
    # the bf16 step with its attention from products over scratch (--attention products; the
    # default above runs it in tiles on tensor cores), beside the same PyTorch step (SDPA),
    # and where each one's time goes
    redco_step bf16 products
    ratio=$(calc '$1 / $2' "$REDCO_STEP_S" "$TORCH_STEP_S")
    figure gpt2_step_bf16_products "$RDEV" "$REDCO_STEP_S" "s/step" "$TORCH_STEP_S" ratio "${ratio:-null}" \
        model "$PRESET" batch "$BATCH" seq "$SEQ" steps "$REDCO_STEPS_LOGGED" peer_attention "${TORCH_ATTENTION:-}"
    redco_profile
    redco_profile products
    # PyTorch without its fused attention kernel (product, softmax, product): what SDPA is
    # worth to PyTorch, beside what rc_attention is worth to redco (bench_gpt2 --attention-compare)
    torch_step bf16 math
    figure gpt2_step_bf16_torch_math_attention "$TDEV" "$TORCH_STEP_S" "s/step" null model "$PRESET"
}

# The bf16 step (tiles, the default) of each earlier state in the bundle (bin/redco-base-*,
# gpu_bundle.sh --baseline) beside this state's (the step part's, else timed here first),
# and each earlier state's profile beside the step part's: ratio = the earlier step's time
# over this one's (above 1: this state is faster)
part_baseline() {
    local base short now ratio bases=()
    for base in "$BUNDLE"/bin/redco-base-*; do
        [ -x "$base" ] && bases+=("$base")
    done
    if [ ${#bases[@]} = 0 ]; then
        note "the bundle holds no earlier state (gpu_bundle.sh --baseline COMMIT)"
        part_failed baseline "no bin/redco-base-* in the bundle"
        return
    fi
    sizes
    [ -f "$WORK/tokens.npy" ] || make_tokens "$WORK/tokens.npy" || { part_failed baseline "cannot write the token file"; return; }
    now=$BF16_STEP_S
    if [ -z "$now" ]; then
        redco_step bf16
        now=$REDCO_STEP_S
    fi
    for base in "${bases[@]}"; do
        short=${base##*/redco-base-}
        REDCO_BIN=$base REDCO_TAG=_at_$short redco_step bf16
        ratio=$(calc '$1 / $2' "$REDCO_STEP_S" "$now")
        figure "gpt2_step_bf16_at_$short" "$RDEV" "$REDCO_STEP_S" "s/step" "$now" ratio "${ratio:-null}" \
            baseline "$(sed -n "s/^baseline: $short //p" "$BUNDLE/MANIFEST.txt")" bundle_commit "$(sed -n 's/^commit: //p' "$BUNDLE/MANIFEST.txt")" \
            model "$PRESET" batch "$BATCH" seq "$SEQ" steps "$REDCO_STEPS_LOGGED"
        REDCO_BIN=$base REDCO_TAG=_at_$short redco_profile
    done
}

part_matmul() {
    local log=$WORK/logs/bench_gpt2.log gflop mm_s step_s transfer alone alone16 cub cub16 ratio met reps=3
    sizes
    [ $QUICK = 1 ] && reps=1
    run bench_gpt2 300 "${RC_ENV[@]}" "$BUNDLE/bin/bench_gpt2" --device "$RDEV" --shapes "$WORK/shapes.jsonl" --gemm-bf16 --bf16 \
        "$reps" "$PRESET" "$BATCH" "$SEQ" || { part_failed matmul "bench_gpt2: exit $?"; tail_log bench_gpt2; return; }
    gflop=$(jget "$log" gpt2_124m_fwd_bwd matmul_gflop)
    step_s=$(jget "$log" gpt2_124m_fwd_bwd step_s)
    mm_s=$(jget "$log" gpt2_124m_breakdown matmul_s)
    transfer=$(jget "$log" gpt2_124m_fwd_bwd host_transfer_s)
    alone=$(jget "$log" gpt2_124m_fwd_bwd gemm_gflops_same_shapes)
    alone16=$(jget "$log" gpt2_124m_fwd_bwd gemm_gflops_same_shapes_bf16)
    run torch_matmul_f32 120 "$PY" "$ROOT/scripts/torch_gpt2_step.py" matmul --device "$TDEV" --dtype f32 \
        --shapes "$WORK/shapes.jsonl" || { part_failed matmul "torch matmul f32: exit $?"; tail_log torch_matmul_f32; }
    run torch_matmul_bf16 120 "$PY" "$ROOT/scripts/torch_gpt2_step.py" matmul --device "$TDEV" --dtype bf16 \
        --shapes "$WORK/shapes.jsonl" || { part_failed matmul "torch matmul bf16: exit $?"; tail_log torch_matmul_bf16; }
    cub=$(jget "$WORK/logs/torch_matmul_f32.log" torch_matmul_step_shapes gflops)
    cub16=$(jget "$WORK/logs/torch_matmul_bf16.log" torch_matmul_step_shapes gflops)

    ratio=$(calc '$1 / $2 / $3' "$gflop" "$mm_s" "$cub")
    met=$(holds '$1 >= 0.8' "$ratio")
    goal matmul_f32_in_step_at_80pct_of_cublas "$met"
    figure matmul_f32_in_step "$RDEV" "$(calc '$1 / $2' "$gflop" "$mm_s")" GFLOP/s "$cub" ratio "${ratio:-null}" \
        goal "ratio >= 0.8" met "${met:-null}" matmul_gflop "${gflop:-null}" matmul_s "${mm_s:-null}"
    ratio=$(calc '$1 / $2' "$alone" "$cub")
    figure matmul_f32_alone "$RDEV" "$alone" GFLOP/s "$cub" ratio "${ratio:-null}"
    ratio=$(calc '$1 / $2' "$alone16" "$cub16")
    met=$(holds '$1 >= 0.8' "$ratio")
    goal matmul_bf16_at_80pct_of_cublas "$met"
    figure matmul_bf16_alone "$RDEV" "$alone16" GFLOP/s "$cub16" ratio "${ratio:-null}" goal "ratio >= 0.8" \
        met "${met:-null}"
    ratio=$(calc '100 * $1 / ($1 + $2)' "$transfer" "$step_s")
    met=$(holds '$1 < 1' "$ratio")
    goal host_transfers_under_1pct "$met"
    figure host_transfers "$RDEV" "$ratio" "% of step" null goal "value < 1" met "${met:-null}" \
        transfer_s "${transfer:-null}" step_s "${step_s:-null}" bytes $((2 * BATCH * SEQ * 4 + 4))
    figure gpt2_fwd_bwd_f32 "$RDEV" "${step_s:-null}" "s/step" null \
        timed_run_ms "$(calc '1e3 * $1' "$(jget "$log" gpt2_124m_breakdown run_s)")" top_ops "$(jget "$log" gpt2_124m_breakdown top_ops)"
    figure gpt2_fwd_bwd_bf16 "$RDEV" "$(jget "$log" gpt2_124m_bf16_vs_f32 bf16_step_s)" "s/step" null \
        kernel_ms "$(jget "$log" gpt2_124m_bf16_vs_f32 bf16_kernel_ms)" top_ops "$(jget "$log" gpt2_124m_bf16_vs_f32 bf16_top_ops)"
}

# the fused attention's kernels alone (bench_attention: GPT-2's 12 heads of 64, causal, f32)
# at the step's batch and length, with attention dropout P: where their time goes
attention_kernels() {
    local drop=$1 name=bench_attention_$1 cases="$BATCH:$SEQ:2" f u
    [ $QUICK = 1 ] && cases="$BATCH:$SEQ:1"
    [ -x "$BUNDLE/bin/bench_attention" ] || { note "this bundle has no bench_attention: rebuild it"; return; }
    run "$name" 90 "${RC_ENV[@]}" "$BUNDLE/bin/bench_attention" --device "$RDEV" --dropout "$drop" --cases "$cases" ||
        { part_failed attention "bench_attention --dropout $drop: exit $?"; tail_log "$name"; return; }
    f=$WORK/logs/$name.fused
    u=$WORK/logs/$name.unfused
    grep '"attention": "fused"' "$WORK/logs/$name.log" >"$f"
    grep '"attention": "unfused"' "$WORK/logs/$name.log" >"$u"
    figure "attention_kernels_dropout_$drop" "$RDEV" "$(jget "$f" bench_attention fwd_bwd_ms)" "ms" null \
        unfused_ms "$(jget "$u" bench_attention fwd_bwd_ms)" attention_ms "$(jget "$f" bench_attention ms_attention)" \
        stats_ms "$(jget "$f" bench_attention ms_attention_stats)" grad_ms "$(jget "$f" bench_attention ms_attention_grad)" \
        unfused_matmul_ms "$(jget "$u" bench_attention ms_matmul)" batch "$BATCH" seq "$SEQ"
}

# the fused attention in bf16 (the step's: causal blocks, tensor-core products) beside
# PyTorch's SDPA forward and backward on the same shapes, without dropout
attention_bf16() {
    local tiled=${1:-} name=bench_attention_bf16${1:+_tiled} cases="$BATCH:$SEQ:3" f red torch ratio
    [ $QUICK = 1 ] && cases="$BATCH:$SEQ:1"
    [ -x "$BUNDLE/bin/bench_attention" ] || return 0
    run "$name" 90 "${RC_ENV[@]}" "$BUNDLE/bin/bench_attention" --device "$RDEV" --dtype bf16 --cases "$cases" $tiled ||
        { part_failed attention "bench_attention --dtype bf16 $tiled: exit $?"; tail_log "$name"; return; }
    [ -f "$WORK/logs/torch_attention_bf16.log" ] ||
        run torch_attention_bf16 90 "$PY" "$ROOT/scripts/torch_gpt2_step.py" attention --device "$TDEV" --dtype bf16 \
            --batch "$BATCH" --seq "$SEQ" --reps 5 || { part_failed attention "torch attention bf16: exit $?"
            tail_log torch_attention_bf16; }
    f=$WORK/logs/$name.fused
    grep '"attention": "fused"' "$WORK/logs/$name.log" >"$f"
    red=$(jget "$f" bench_attention fwd_bwd_ms)
    torch=$(jget "$WORK/logs/torch_attention_bf16.log" torch_attention_fwd_bwd fwd_bwd_ms)
    ratio=$(calc '$1 / $2' "$red" "$torch")
    figure "attention_kernels_bf16${1:+_tiled}" "$RDEV" "$red" "ms" "$torch" ratio "${ratio:-null}" \
        attention_ms "$(jget "$f" bench_attention ms_attention)" \
        stats_ms "$(jget "$f" bench_attention ms_attention_stats)" \
        grad_ms "$(jget "$f" bench_attention ms_attention_grad)" \
        torch_attention "$(jget "$WORK/logs/torch_attention_bf16.log" torch_attention_fwd_bwd attention)" \
        batch "$BATCH" seq "$SEQ"
}

part_attention() {
    local log=$WORK/logs/bench_attention_compare.log seqs line T
    sizes
    attention_bf16
    attention_bf16 --tiled
    attention_kernels 0
    attention_kernels 0.1
    seqs="$SEQ:$BATCH,2048:4"
    [ $QUICK = 1 ] && seqs="32:2,64:1"
    run bench_attention_compare 150 "${RC_ENV[@]}" "$BUNDLE/bin/bench_gpt2" --device "$RDEV" --attention-compare \
        --attention-seqs "$seqs" 2 "$PRESET" || { part_failed attention "bench_gpt2 --attention-compare: exit $?"
        tail_log bench_attention_compare; return; }
    for T in $(sed -n 's/.*"gpt2_124m_attention_fused_vs_unfused".*"T": \([0-9]*\).*/\1/p' "$log"); do
        line=$WORK/logs/attention_T$T.line
        grep "\"T\": $T," "$log" | grep -m1 gpt2_124m_attention_fused_vs_unfused >"$line"
        figure "gpt2_step_attention_fused_T$T" "$RDEV" "$(jget "$line" gpt2_124m_attention_fused_vs_unfused fused_step_s)" "s/step" null \
            unfused_step_s "$(jget "$line" gpt2_124m_attention_fused_vs_unfused unfused_step_s)" speedup "$(jget "$line" gpt2_124m_attention_fused_vs_unfused speedup)" \
            batch "$(jget "$line" gpt2_124m_attention_fused_vs_unfused B)" peak_ratio "$(jget "$line" gpt2_124m_attention_fused_vs_unfused peak_ratio)"
    done
}

# Nsight Compute's command line program, where the machine has one (empty: none)
find_ncu() {
    local c
    for c in "$(command -v ncu 2>/dev/null)" /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu \
        /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/nsight-compute*/ncu; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }
    done
}

# ncu_figures NAME CHECK [--by-name]: ncu's CSV in NAME's log as figure lines, one a kernel
# (check CHECK/KERNEL, its time in us)
ncu_figures() {
    local name=$1 check=$2 line
    "$PY" "$ROOT/scripts/ncu_summary.py" "$WORK/logs/$name.log" ${3:-} --check "$check" --device "$RDEV" \
        >"$WORK/logs/$name.json" || { part_failed kernels "no kernel in ncu's report ($name)"; tail_log "$name"; return; }
    while IFS= read -r line; do
        put_line "$line"
        FIGURES=$((FIGURES + 1))
    done <"$WORK/logs/$name.json"
}

# Where the tile kernels' time goes, from the GPU's own counters (Nsight Compute): each
# kernel's throughput against the SM's and memory's peaks, occupancy, the tensor pipe's
# share and its warps' stall reasons; then the step's other kernels, their time and DRAM
# share by kernel name. Clocks as they run (--clock-control none), caches flushed before
# each launch (ncu's default).
part_kernels() {
    local ncu sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats
        --section InstructionStats)
    local others='regex:^k_(binary_runs|binary|unary|act|where|copy|cast|fill|reduce_cols|reduce_part|reduce_finish|reduce_rows|reduce|softmax|layer_norm|norm_grad|embedding|embedding_grad|ce_rows|ce_grad|ce_mean|ce_scale|dropout|adamw|accumulate|sum_squares)$'
    sizes
    ncu=$(find_ncu)
    if [ -z "$ncu" ]; then
        note "no Nsight Compute (ncu) on this machine: no kernel counters"
        figure kernel_counters "$RDEV" null "" null ncu none
        return
    fi
    note "ncu: $ncu, $("$ncu" --version 2>/dev/null | tail -1)"
    # bench_attention's second run (the first warms up): its forward, stats, dQ and dK/dV
    run ncu_attention 150 "${RC_ENV[@]}" "$ncu" --csv --page raw --clock-control none \
        --kernel-name regex:^k_attention_tile --launch-skip 4 --launch-count 4 "${sections[@]}" \
        "$BUNDLE/bin/bench_attention" --device "$RDEV" --dtype bf16 --tiled --dropout 0.1 --cases "$BATCH:$SEQ:1" ||
        { part_failed kernels "ncu bench_attention: exit $?"; tail_log ncu_attention; }
    ncu_figures ncu_attention ncu_attention
    make_tokens "$WORK/tokens.npy" || { part_failed kernels "cannot write the token file"; return; }
    rm -rf "$WORK/train_ncu"
    run ncu_step 180 "${RC_ENV[@]}" "$ncu" --csv --page raw --clock-control none --kernel-name "$others" \
        --launch-count 300 --section SpeedOfLight --section LaunchStats \
        "$BUNDLE/bin/redco" train --model "$PRESET" --data "$WORK/tokens.npy" --workdir "$WORK/train_ncu" --steps 1 \
        --batch-size "$BATCH" --seq-len "$SEQ" --grad-clip 0 --device "$RDEV" --dtype bf16 ||
        { part_failed kernels "ncu redco train: exit $?"; tail_log ncu_step; }
    ncu_figures ncu_step ncu_step_by_kernel --by-name
    rm -rf "$WORK/train_ncu"
}

part_decode() {
    local dtype rms tms ratio met preset=gpt2 rec k log="$WORK/logs/bench_generate.log"
    local -a phases
    [ $QUICK = 1 ] && preset=tiny-gpt2
    run bench_generate 200 "${RC_ENV[@]}" "$BUNDLE/bin/bench_generate" --device "$RDEV" --dtype f32,bf16 "$preset" ||
        { part_failed decode "bench_generate: exit $?"; tail_log bench_generate; }
    for dtype in f32 bf16; do
        run "torch_decode_$dtype" 120 "$PY" "$ROOT/scripts/torch_gpt2_step.py" decode --device "$TDEV" --dtype "$dtype" \
            --preset "$preset" || { part_failed decode "torch decode $dtype: exit $?"; tail_log "torch_decode_$dtype"; }
        rec=generate_greedy
        [ "$dtype" = bf16 ] && rec=generate_greedy_bf16
        rms=$(grep "\"bench\": \"$rec\"" "$WORK/logs/bench_generate.log" 2>/dev/null | sed -n 's/.*"ms_per_token": \([^,}]*\).*/\1/p')
        tms=$(jget "$WORK/logs/torch_decode_$dtype.log" torch_generate_greedy ms_per_token)
        ratio=$(calc '$1 / $2' "$rms" "$tms")
        met=$(holds '$1 <= 1' "$ratio")
        goal "decode_${dtype}_no_slower_than_pytorch" "$met"
        # where a token's time goes (bench_generate's phase_ms, kernel_ms, top_ops), flat
        phases=()
        for k in graph plan bind run read keep free pick other; do
            phases+=("phase_${k}_ms" "$(jget "$log" "$rec" "$k")")
        done
        for k in kernel_ms kernel_run_ms top_ops; do
            phases+=("$k" "$(jget "$log" "$rec" "$k")")
        done
        figure "decode_$dtype" "$RDEV" "$rms" ms/token "$tms" ratio "${ratio:-null}" goal "ratio <= 1" met "${met:-null}" \
            model "$preset" "${phases[@]}"
    done
}

# ---- main ---------------------------------------------------------------------------

finish() {
    local status=pass rc=0
    [ -n "$FAILED_PARTS" ] && status=fail rc=3
    [ $TESTS_FAILED -gt 0 ] && status=fail rc=1
    emit check summary device "$GPU_NAME" value "$status" unit status peer null tests_passed $TESTS_PASSED \
        tests_failed $TESTS_FAILED tests_skipped $TESTS_SKIPPED figures $FIGURES parts_failed "$FAILED_PARTS" \
        goals_met "$GOALS_MET" goals_missed "$GOALS_MISSED" elapsed_s $((SECONDS - START)) dry_run $ALLOW_NO_GPU
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then # the device tool brings these back
        cp "$WORK/gpu_check.jsonl" "$OUT/" 2>/dev/null
        tar -C "$WORK" -czf "$OUT/gpu_check_logs.tar.gz" logs 2>/dev/null
    fi
    exit $rc
}

main() {
    local p
    rm -rf "$WORK"
    mkdir -p "$WORK/logs"
    : >"$WORK/gpu_check.jsonl"
    note "redco GPU check: parts $PARTS, budget ${BUDGET}s, work in $WORK"
    if ! unpack_bundle; then
        TESTS_FAILED=$((TESTS_FAILED + 1))
        FAILED_PARTS=bundle
        finish
    fi
    find_cuda_libs
    set_rc_env
    part_info # always: it finds the GPU
    if [ $HAVE_GPU = 0 ]; then
        if [ $ALLOW_NO_GPU = 1 ]; then
            note "no CUDA device: a dry run (--allow-no-gpu); the benchmarks run on the CPU at tiny sizes"
            RDEV=cpu TDEV=cpu QUICK=1
        else
            note "no CUDA device (nvidia-smi found none): the cuda checks will fail; --allow-no-gpu for a dry run"
        fi
    fi
    for p in cuda step baseline matmul attention decode opencl kernels; do
        case ,$PARTS, in *,$p,*) ;; *) continue ;; esac
        if [ "$(left)" -lt 25 ]; then
            note "part $p not run: the budget of ${BUDGET}s is spent"
            part_failed "$p" "no time left"
            continue
        fi
        note "---- $p ($(left)s left)"
        PART=$p
        "part_$p"
    done
    finish
}

main
