#!/usr/bin/env bash
# The default demo (`make demo`), about 3 minutes on 2 cores:
#   1. a byte-level BPE vocabulary of 4096 ids learned from Moby Dick (redco tokenizer-train);
#   2. the tensor-parallel plan redco derives for a small GPT-2 over 2 processes (redco plan);
#   3. training on 2 processes under that plan, with the progress bar (redco train --mp 2);
#   4. held-out bits per byte next to a unigram model and a character bigram model, both
#      estimated on the training text (bits per byte do not depend on the tokenizer);
#   5. a sample, and the share of its words that are words of the book.
#   scripts/demo.sh [STEPS]   (default 5500; run from the repository root after make)
set -euo pipefail
steps="${1:-5500}"
redco=build/redco
run=demo-run
vocab=4096
seq=64
batch=8
goal_bpb=2.0
goal_words=80
mkdir -p "$run"
t_start=$(date +%s)

# The book without the Project Gutenberg header and licence, with Unix line ends. About
# 60 kB from the middle (1100 lines, whole paragraphs of the story) are held out.
awk '/^\*\*\* START OF/ { on = 1; next } /^End of Project Gutenberg/ { on = 0 } on' \
  data/moby_dick.txt | tr -d '\r' > "$run/book.txt"
lines=$(wc -l < "$run/book.txt")
from=$((lines / 2))
awk -v a="$from" 'NR < a || NR >= a + 1100' "$run/book.txt" > "$run/train.txt"
awk -v a="$from" 'NR >= a && NR < a + 1100' "$run/book.txt" > "$run/eval.txt"
eval_bytes=$(wc -c < "$run/eval.txt")
echo "== Moby Dick: $(wc -c < "$run/train.txt") bytes to train on, $eval_bytes held out"

echo
echo "== 1. a byte-level BPE vocabulary of $vocab ids learned from the training text"
$redco tokenizer-train --data "$run/train.txt" --vocab-size "$vocab" --out "$run/tokenizer"
echo "   first merges: $(sed -n '2,9p' "$run/tokenizer/merges.txt" | tr '\n' '|' | sed 's/|/  /g')"

echo
echo "== 2. the tensor-parallel plan of gpt2-demo over 2 processes (layers 1-3 as layer 0)"
$redco plan --model gpt2-demo --mp 2 --batch-size "$batch" --seq-len "$seq" |
  grep -v '^transformer\.h\.[1-9]'

echo
echo "== 3. training gpt2-demo on 2 processes (mp 2: each holds half of every split weight)"
rm -rf "$run/work"
t_train=$(date +%s)
$redco train --model gpt2-demo --data "$run/train.txt" --tokenizer "$run/tokenizer" \
  --workdir "$run/work" --steps "$steps" --batch-size "$batch" --seq-len "$seq" --lr 3e-3 \
  --warmup 100 --schedule cosine --weight-decay 0.3 --save-every 0 --log-every 250 \
  --mp 2 --nproc 2
train_s=$(($(date +%s) - t_train))

echo
echo "== 4. held-out bits per byte (lower is better)"
eval_json=$($redco eval --model "$run/work/final" --data "$run/eval.txt" --seq-len "$seq" --json | tail -n 1)
loss=$(echo "$eval_json" | sed 's/.*"loss": *\([0-9.eE+-]*\).*/\1/')
$redco tokenize --tokenizer "$run/tokenizer" --no-special < "$run/train.txt" | tr ' ' '\n' > "$run/train.ids"
$redco tokenize --tokenizer "$run/tokenizer" --no-special < "$run/eval.txt" | tr ' ' '\n' > "$run/eval.ids"
eval_tokens=$(wc -l < "$run/eval.ids")
# eval's loss is the mean over the tokens it predicts; spread over all the held-out
# tokens, it gives the total, in bits, per byte of held-out text
model_bpb=$(awk -v l="$loss" -v t="$eval_tokens" -v b="$eval_bytes" 'BEGIN { printf "%.3f", l * t / b / log(2) }')
# unigram: each token on its own, with add-one counts over the vocabulary
unigram_bpb=$(awk -v V="$vocab" -v b="$eval_bytes" '
  NR == FNR { c[$1]++; n++; next }
  { bits -= log((c[$1] + 1) / (n + V)) / log(2) }
  END { printf "%.3f", bits / b }' "$run/train.ids" "$run/eval.ids")
# character bigram: each byte given the one before, with add-one counts over 256 bytes
bigram_bpb=$(LC_ALL=C awk '
  function see(c) {
    if (NR == FNR) { if (p != "") { pair[p, c]++; after[p]++ } one[c]++; n++ }
    else if (p == "") bits -= log((one[c] + 1) / (n + 256)) / log(2)
    else bits -= log((pair[p, c] + 1) / (after[p] + 256)) / log(2)
    p = c; bytes++
  }
  FNR == 1 { p = ""; bytes = 0 }
  { k = split($0, ch, ""); for (i = 1; i <= k; i++) see(ch[i]); see("\n") }
  END { printf "%.3f", bits / bytes }' "$run/train.txt" "$run/eval.txt")
printf '   %-44s %s bits/byte\n' "unigram of the $vocab tokens" "$unigram_bpb" \
  "character bigram" "$bigram_bpb" \
  "gpt2-demo (loss $(printf "%.3f" "$loss") nats over $eval_tokens tokens)" "$model_bpb"

echo
echo "== 5. a sample"
prompt="Call me Ishmael."
sample=$($redco generate --model "$run/work/final" --prompt "$prompt" --max-new-tokens 100 \
  --temperature 0.8 --top-k 40 --seed 1)
echo "$sample"
# the words of the new text (lower case, letters only) that are words of the book
words=$(printf '%s' "${sample#"$prompt"}" | tr 'A-Z' 'a-z' | tr -c 'a-z' '\n' | grep -v '^$' || true)
known=$(tr 'A-Z' 'a-z' < "$run/train.txt" | tr -c 'a-z' '\n' | grep -v '^$' | sort -u |
  awk -v w="$(echo "$words" | tr '\n' ' ')" '
    { book[$0] = 1 }
    END { n = split(w, a, " "); for (i = 1; i <= n; i++) k += (a[i] in book); printf "%d %d", k, n }')
read -r k n <<< "$known"
pct=$(awk -v k="$k" -v n="$n" 'BEGIN { printf "%.0f", n ? 100 * k / n : 0 }')

echo
echo "== summary"
verdict() { awk -v ok="$1" 'BEGIN { print ok ? "goal met" : "goal NOT met" }'; }
echo "   held-out: $model_bpb bits/byte (goal <= $goal_bpb: $(verdict "$(awk -v x="$model_bpb" -v g="$goal_bpb" 'BEGIN { print (x <= g) }')");" \
  "unigram $unigram_bpb, character bigram $bigram_bpb)"
echo "   sample: $k of $n words are words of the book, $pct% (goal >= $goal_words%: $(verdict "$((pct >= goal_words))"))"
echo "   time: training ${train_s} s, whole demo $(($(date +%s) - t_start)) s"
