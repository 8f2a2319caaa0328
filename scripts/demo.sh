#!/usr/bin/env bash
# The default demo: trains a 7.3M-parameter GPT-2 (the real GPT-2 tokenizer and vocabulary)
# from scratch on Moby Dick over 2 data-parallel processes for a couple of minutes, with the
# progress bar and checkpoints; then evaluates it on held-out text, compares the loss with
# the corpus's unigram entropy, and generates a sample from a prompt.
#   scripts/demo.sh [STEPS]   (default 200; run from the repository root after make)
set -euo pipefail
steps="${1:-200}"
redco=build/redco
run=demo-run
mkdir -p "$run"

# 100 kB from the middle of the book are held out for evaluation (the end would be the
# Project Gutenberg licence, another kind of text)
{ head -c 600000 data/moby_dick.txt; tail -c +700001 data/moby_dick.txt; } > "$run/train.txt"
head -c 700000 data/moby_dick.txt | tail -c +600001 > "$run/eval.txt"

echo "== training gpt2-mini on $run/train.txt, 2 processes, $steps steps" >&2
rm -rf "$run/work"
$redco train --model gpt2-mini --data "$run/train.txt" --eval-data "$run/eval.txt" \
  --tokenizer data/gpt2 --workdir "$run/work" --steps "$steps" --batch-size 8 --seq-len 64 \
  --lr 2e-3 --warmup 10 --schedule cosine --save-every 50 --log-every 10 --nproc 2

echo "== evaluating $run/work/final on the held-out text" >&2
eval_json=$($redco eval --model "$run/work/final" --data "$run/eval.txt" --seq-len 64 --json | tail -n 1)
echo "$eval_json"

# the unigram entropy of the training text in GPT-2 tokens: what a model that ignores
# context can reach at best
entropy=$($redco tokenize --tokenizer data/gpt2 --no-special < "$run/train.txt" |
  tr ' ' '\n' | awk 'NF { c[$1]++; n++ } END { for (k in c) h -= c[k] / n * log(c[k] / n); printf "%.4f", h }')
loss=$(echo "$eval_json" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
echo "== held-out loss $loss nats/token vs unigram entropy $entropy nats/token" >&2

echo "== a sample" >&2
$redco generate --model "$run/work/final" --prompt "Call me Ishmael. Some years ago" \
  --max-new-tokens 40 --temperature 0.8 --top-k 40 --seed 1
