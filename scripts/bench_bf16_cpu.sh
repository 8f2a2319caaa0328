#!/usr/bin/env bash
# bench_bf16_cpu.sh - bf16 against f32 training steps on the CPU, redco and PyTorch in one run
# (GPT-2 124M, forward and backward): bench_gpt2 --bf16 prints redco's f32 and bf16 steps,
# their GEMM rates on the step's own shapes, the ratios, and the bf16 step on the widening
# path (bf16 products widened to f32 for sgemm); then PyTorch's step in f32 and with bf16
# autocast (scripts/torch_gpt2_step.py step, which adds AdamW) on the same CPU and threads.
#   scripts/bench_bf16_cpu.sh [BUILD [B [T [REPS]]]]   (build, 4, 128, 2)
# REDCO_PYREF names the reference Python (default .venv/pyref/bin/python); OMP_NUM_THREADS
# the threads of both (default 2). One JSON line per figure; exits 1 when either fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build} B=${2:-4} T=${3:-128} reps=${4:-2}
py=${REDCO_PYREF:-$root/.venv/pyref/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive
units=$(grep -o -m1 -w 'amx_bf16\|avx512_bf16' /proc/cpuinfo || echo "no bf16 units")
echo "{\"bench\": \"cpu\", \"bf16_units\": \"$units\", \"threads\": $OMP_NUM_THREADS}"
"$build/bench_gpt2" --bf16 "$reps" gpt2 "$B" "$T" 2>/dev/null | grep -E '"gpt2_124m_(fwd_bwd|bf16_vs_f32)"'
for dt in f32 bf16; do
  "$py" "$root/scripts/torch_gpt2_step.py" step --device cpu --dtype "$dt" --preset gpt2 --batch "$B" --seq "$T" \
    --steps "$reps" --warmup 1
done
