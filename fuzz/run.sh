#!/usr/bin/env bash
# fuzz/run.sh BUILD SECONDS [NAME...] - runs each libFuzzer harness BUILD/fuzz_NAME (all of
# fuzz/*.c when no NAME is given) for SECONDS, starting from its seed corpus
# fuzz/corpus/NAME and the inputs that once crashed, fuzz/regressions/NAME. New inputs go to
# a scratch corpus under BUILD/fuzz-work/NAME (the committed seeds stay as they are); a
# crash, leak, sanitizer report or timeout is written there as crash-* / leak-* / timeout-*
# and fails the run. Prints one line per harness with the inputs executed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$1 seconds=$2
shift 2
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in fuzz/*.c; do
    n=$(basename "$src" .c)
    case $n in replay|fuzz_util) ;; *) names+=("$n") ;; esac
  done
fi
failed=()
for n in "${names[@]}"; do
  work=$build/fuzz-work/$n
  mkdir -p "$work/corpus"
  inputs=(fuzz/corpus/$n)
  [ -d fuzz/regressions/$n ] && inputs+=(fuzz/regressions/$n)
  log=$work/log.txt
  # -rss_limit_mb: an input may not make a parser take more than 2 GiB; -timeout: nor 10 s
  OMP_NUM_THREADS=1 "$build/fuzz_$n" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "${inputs[@]}" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    echo "fuzz $n: FAILED after ${runs:-?} inputs (exit $rc); the input and report:" >&2
    ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >&2 2>/dev/null
    echo "  (full log: $log)" >&2
    grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | head -20 >&2
    failed+=("$n")
  else
    echo "fuzz $n: ${runs:-?} inputs in ${seconds} s, no crash"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: ${failed[*]} crashed: add the input to fuzz/regressions/NAME/ and fix the parser" >&2
  exit 1
fi
