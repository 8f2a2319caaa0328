"""The examples/ programs, run on tiny settings as a user would, and what each must show:
- causal_lm: GPT-2 tokenizer on a slice of Moby Dick; the held-out loss starts near
  ln(50257) (random weights) and falls by at least 20% in 30 steps; the logged training
  loss falls; the workdir has log.jsonl and final/ with the resized vocabulary.
- instruction_tuning: a prompt/completion .jsonl written here; the held-out masked loss
  falls by at least 40%, and it covers exactly the completion tokens + <|endoftext|> of
  the held-out lines as Hugging Face `tokenizers` counts them (the prompt is masked out).
- seq2seq_t5: reversing id sequences; the held-out loss falls by at least 50% and the
  teacher-forced token accuracy rises from chance to at least 0.6.
- run() itself reports a program that prints the expected lines and then exits non-zero
  (or dies by a signal) as failed: every program's exit status is checked.
- maml: the meta-gradient through the inner step matches finite differences (relative
  error < 1e-6) while the first-order MAML gradient does not (> 1e-3): the second-order
  term is there; after meta-training the adapted query loss is below half the unadapted
  one and below half of what adapting achieved before meta-training.
"""
import json
import math
import os
import re
import sys
import tempfile

from tokenizers import Tokenizer

from refkit import FAILED, check, finish, number, options, run


def self_check_run():
    """run() itself fails a program that prints what the checks look for and then exits
    non-zero or crashes; a program that exits 0 passes."""
    line = "held-out loss: before 10.8, after 5.0"
    print("self-check of run(): the next two FAIL lines are expected")
    failed_before = len(FAILED)
    for code, script in ((3, f"echo '{line}'; exit 3"), (-11, f"echo '{line}'; kill -SEGV $$")):
        out = run("", "self-check", argv=["sh", "-c", script])
        caught = out is None and len(FAILED) == failed_before + 1 and f"exited {code}" in FAILED[-1]
        if caught:
            FAILED.pop()  # the failure was the expected outcome
        check(caught, f"self-check: a program printing the line and exiting {code} was not reported as failed")
    out = run("", "self-check", argv=["sh", "-c", f"echo '{line}'"])
    check(out is not None and line in out[0], "self-check: a program exiting 0 was not accepted")


def train_losses(stderr):
    return [float(x) for x in re.findall(r"^step \d+/\d+  loss ([0-9.]+)", stderr, re.M)]


def causal_lm(build, source, tmp):
    text = open(os.path.join(source, "data", "moby_dick.txt"), encoding="utf-8").read()
    corpus = os.path.join(tmp, "moby.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(text[10000:60000])
    work = os.path.join(tmp, "lm-work")
    out = run(build, "causal_lm", "--steps", "30", "--data", corpus, "--tokenizer",
              os.path.join(source, "data", "gpt2"), "--batch", "4", "--seq-len", "16", "--lr", "6e-3",
              "--workdir", work)
    if not out:
        return
    stdout, stderr = out
    v = number(r"held-out loss: before ([0-9.]+), after ([0-9.]+)", stdout, "causal_lm")
    if v:
        before, after = v
        print(f"causal_lm: held-out loss {before:.3f} -> {after:.3f}")
        check(abs(before - math.log(50257)) < 0.3, f"causal_lm: initial loss {before} is not ~ln(50257)")
        check(after < 0.8 * before, f"causal_lm: held-out loss fell only {before} -> {after}")
    losses = train_losses(stderr)
    check(len(losses) == 10 and losses[-1] < losses[0] - 1.0,
          f"causal_lm: logged training losses {losses} do not fall")
    with open(os.path.join(work, "log.jsonl")) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    check([r["step"] for r in logged if "train/loss" in r] == list(range(3, 31, 3)),
          "causal_lm: log.jsonl does not hold the loss every 3 steps")
    with open(os.path.join(work, "final", "config.json")) as f:
        cfg = json.load(f)
    check(cfg.get("vocab_size") == 50257 and cfg.get("n_embd") == 64,
          f"causal_lm: final/config.json is not tiny-gpt2 with GPT-2's vocabulary: {cfg}")
    check(os.path.exists(os.path.join(work, "final", "model.safetensors")), "causal_lm: no final weights")
    check("sample: Call me Ishmael." in stdout, "causal_lm: no sample")


def instruction_lines(n):
    words = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "fish", "bird"]
    lines = []
    for i in range(n):
        a, b, c = words[i % 10], words[(i * 3 + 1) % 10], words[(i * 7 + 2) % 10]
        if i % 2:
            lines.append({"prompt": f"Reverse: {a} {b} {c}\nAnswer:", "completion": f" {c} {b} {a}"})
        else:
            x, y = (i * 13) % 50, (i * 29) % 50
            lines.append({"prompt": f"Add: {x} + {y}\nAnswer:", "completion": f" {x + y}"})
    return lines


def instruction_tuning(build, source, tmp):
    lines = instruction_lines(240)
    data = os.path.join(tmp, "instruct.jsonl")
    with open(data, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    tok = Tokenizer.from_file(os.path.join(source, "data", "gpt2", "tokenizer.json"))
    T = 16
    n_prompt = [len(tok.encode(x["prompt"]).ids) for x in lines]
    n_completion = [len(tok.encode(x["completion"]).ids) + 1 for x in lines]  # + <|endoftext|>
    check(max(p + c for p, c in zip(n_prompt, n_completion)) <= T + 1, "instruction_tuning: examples too long for T")
    out = run(build, "instruction_tuning", "--steps", "30", "--data", data, "--tokenizer",
              os.path.join(source, "data", "gpt2"), "--batch", "4", "--seq-len", str(T), "--lr", "6e-3")
    if not out:
        return
    stdout, _ = out
    split = number(r"(\d+) train \+ (\d+) held-out examples", stdout, "instruction_tuning")
    v = number(r"masked loss over (\d+) completion tokens: before ([0-9.]+), after ([0-9.]+)", stdout,
               "instruction_tuning")
    if not split or not v:
        return
    n_train, n_eval = int(split[0]), int(split[1])
    tokens, before, after = int(v[0]), v[1], v[2]
    print(f"instruction_tuning: masked loss {before:.3f} -> {after:.3f} over {tokens} tokens")
    check(n_train + n_eval == len(lines), f"instruction_tuning: split {n_train} + {n_eval}")
    expect = sum(n_completion[n_train:])
    check(tokens == expect, f"instruction_tuning: the loss counts {tokens} tokens; the held-out completions "
                            f"+ EOS have {expect} (prompts {sum(n_prompt[n_train:])})")
    check(after < 0.6 * before, f"instruction_tuning: masked loss fell only {before} -> {after}")
    # the packed example shows -100 exactly on the prompt: its targets start at the completion
    m = re.search(r"targets\s+([-\d\s]+)\n", stdout)
    if m:
        row = m.group(1).split()
        masked = sum(1 for x in row[: n_prompt[0] - 1] if x == "--")
        check(masked == n_prompt[0] - 1 and row[n_prompt[0] - 1] != "--",
              f"instruction_tuning: packed targets {row} do not mask the {n_prompt[0]}-token prompt")


def seq2seq_t5(build, tmp):
    out = run(build, "seq2seq_t5", "--steps", "150", "--max-len", "6", "--batch", "32", "--workdir",
              os.path.join(tmp, "t5-work"))
    if not out:
        return
    stdout, _ = out
    loss = number(r"held-out loss: before ([0-9.]+), after ([0-9.]+)", stdout, "seq2seq_t5")
    acc = number(r"token accuracy \(teacher forced\): before ([0-9.]+), after ([0-9.]+)", stdout, "seq2seq_t5")
    if not loss or not acc:
        return
    print(f"seq2seq_t5: held-out loss {loss[0]:.3f} -> {loss[1]:.3f}, token accuracy {acc[0]:.3f} -> {acc[1]:.3f}")
    check(loss[1] < 0.5 * loss[0], f"seq2seq_t5: loss fell only {loss[0]} -> {loss[1]}")
    check(acc[0] < 0.3 and acc[1] >= 0.6, f"seq2seq_t5: token accuracy {acc[0]} -> {acc[1]}")


def maml(build, tmp):
    out = run(build, "maml", "--steps", "1500", "--workdir", os.path.join(tmp, "maml-work"))
    if not out:
        return
    stdout, _ = out
    grad = number(r"second-order ([0-9.e+-]+), first-order ([0-9.e+-]+)", stdout, "maml")
    pre = number(r"before meta-training: unadapted ([0-9.]+), adapted ([0-9.]+)", stdout, "maml")
    post = number(r"after meta-training: +unadapted ([0-9.]+), adapted ([0-9.]+)", stdout, "maml")
    if not grad or not pre or not post:
        return
    print(f"maml: meta-gradient rel. error {grad[0]:.2e} (first-order {grad[1]:.2e}); "
          f"query MSE unadapted/adapted before {pre[0]:.3f}/{pre[1]:.3f}, after {post[0]:.3f}/{post[1]:.3f}")
    check(grad[0] < 1e-6, f"maml: second-order meta-gradient differs from finite differences by {grad[0]}")
    check(grad[1] > 1e-3, f"maml: first-order gradient agrees with finite differences ({grad[1]}): "
                          "the check cannot see the second-order term")
    check(post[1] < 0.5 * post[0], f"maml: adapted query loss {post[1]} is not well below unadapted {post[0]}")
    check(post[1] < 0.5 * pre[1], f"maml: meta-training did not help adaptation: {pre[1]} -> {post[1]}")


def main():
    args = options()
    self_check_run()
    with tempfile.TemporaryDirectory() as tmp:
        causal_lm(args.build, args.source, tmp)
        instruction_tuning(args.build, args.source, tmp)
        seq2seq_t5(args.build, tmp)
        maml(args.build, tmp)
    return finish("test_examples")


if __name__ == "__main__":
    sys.exit(main())
