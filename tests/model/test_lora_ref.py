"""LoRA fine-tuning with `redco train --lora-r` against PEFT (peft 0.7.1 on transformers):
- tiny GPT-2 (Conv1D c_attn and c_proj: fan_in_fan_out) and tiny LLaMA (q_proj, v_proj;
  grouped-query attention) Hugging Face directories written here are fine-tuned briefly;
  the base weights on disk are untouched, the printed / --json memory figures show the
  trainer keeping state for the adapters alone;
- workdir/adapter/ loads with PeftModel.from_pretrained onto the transformers model, whose
  logits equal redco's with the adapter attached (relative 1e-4), and the trained B is not
  zero; workdir/merged/ (--lora-merge) loads in transformers to the same logits; an adapter
  made and saved by peft itself (random B) gives redco peft's logits;
- `redco eval --lora` gives the merged model's loss (and not the base's); `redco generate
  --lora` gives PEFT's greedy continuation;
- the same run with --nproc 2 --mp 2 (adapters sharded with their base weights), and on
  --device opencl (2 SGD steps), and both at once (LLaMA), ends with the one-process CPU
  adapters (relative 1e-4).

Run by CTest as: python test_lora_ref.py --redco R --build B --source S
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers as T
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.numpy import load_file
from safetensors.torch import save_file

from refkit import MPI_ENV, check, finish, options

STEPS, SEQ, BATCH = 4, 32, 4


def run(redco, *args, env=None):
    e = dict(os.environ)
    e.update(MPI_ENV)
    e.update(env or {})
    r = subprocess.run([redco, *args], capture_output=True, text=True, env=e)
    if r.returncode:
        check(False, f"redco {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def last_json(r):
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def adapters_rel(a_dir, b_dir):
    a = load_file(os.path.join(a_dir, "adapter_model.safetensors"))
    b = load_file(os.path.join(b_dir, "adapter_model.safetensors"))
    if set(a) != set(b):
        return float("inf")
    return max(float(np.linalg.norm(a[k] - b[k]) / max(np.linalg.norm(b[k]), 1e-6)) for k in b)


def models(tmp):
    torch.manual_seed(7)
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=4))
    llama = T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=50257, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5))
    for name, m, targets in (("gpt2", gpt2, "c_attn,c_proj"), ("llama", llama, "q_proj,v_proj")):
        d = os.path.join(tmp, name)
        m.save_pretrained(d, safe_serialization=True)
        yield name, d, targets


def case(args, tmp, name, base, targets, data, tok):
    redco = args.redco
    wd = os.path.join(tmp, name + "-run")
    before = load_file(os.path.join(base, "model.safetensors"))
    common = ["--model", base, "--data", data, "--tokenizer", tok, "--steps", str(STEPS), "--batch-size",
              str(BATCH), "--seq-len", str(SEQ), "--lr", "0.01", "--no-shuffle", "--lora-r", "4", "--lora-alpha",
              "8", "--lora-targets", targets, "--no-dropout"]  # --mp 2 below must equal one process
    r = run(redco, "train", *common, "--workdir", wd, "--lora-merge", *(["--json"] if name == "llama" else []))
    if r.returncode:
        return
    if name == "llama":
        out = last_json(r)
        check(out is not None and out["step"] == STEPS and 0 < out["state_bytes"] * 50 < out["full_state_bytes"],
              f"{name}: --json memory figures {out}")
    else:
        line = [s for s in r.stdout.splitlines() if s.startswith("LoRA r=4")]
        check(len(line) == 1 and "full fine-tuning" in line[0], f"{name}: the memory line: {r.stdout[-500:]!r}")
        print(line[0] if line else "")
    after = load_file(os.path.join(base, "model.safetensors"))
    check(all(np.array_equal(before[k], after[k]) for k in before), f"{name}: the base model changed")
    adapter = os.path.join(wd, "adapter")
    cfg = json.load(open(os.path.join(adapter, "adapter_config.json")))
    check(cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["peft_type"] == "LORA" and
          cfg["fan_in_fan_out"] == (name == "gpt2"), f"{name}: adapter_config.json {cfg}")
    tensors = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    per_layer = 3 if name == "gpt2" else 2  # c_attn, attn.c_proj, mlp.c_proj / q_proj, v_proj
    check(len(tensors) == 2 * 2 * per_layer, f"{name}: {len(tensors)} adapter tensors: {sorted(tensors)[:4]}")
    b_norm = sum(float(np.linalg.norm(v)) for k, v in tensors.items() if "lora_B" in k)
    check(b_norm > 1e-3, f"{name}: the trained B are zero")

    # PEFT onto transformers vs redco with the adapter attached
    hf = T.AutoModelForCausalLM.from_pretrained(base)
    pm = PeftModel.from_pretrained(hf, adapter).eval()
    ids = torch.randint(0, 50257, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = pm(input_ids=ids).logits.numpy()
    feed, got_path = os.path.join(tmp, name + "-ids.safetensors"), os.path.join(tmp, name + "-logits.safetensors")
    save_file({"input_ids": ids.int()}, feed)
    t = subprocess.run([os.path.join(args.build, "test_lora"), "--logits", base, adapter, feed, got_path],
                       capture_output=True, text=True)
    check(t.returncode == 0, f"{name}: test_lora --logits: {t.stderr[-500:]}")
    if t.returncode == 0:
        d = rel(load_file(got_path)["logits"], want)
        print(f"{name}: redco + adapter vs peft: logits differ by {d:.2e}")
        check(d < 1e-4, f"{name}: redco's adapted logits differ from peft's by {d:.2e}")
    # the other way: an adapter made and saved by peft itself (random B), attached by redco
    own = os.path.join(tmp, name + "-peft-adapter")
    torch.manual_seed(5)
    made = get_peft_model(T.AutoModelForCausalLM.from_pretrained(base),
                          LoraConfig(r=2, lora_alpha=6, target_modules=targets.split(","), lora_dropout=0.0))
    with torch.no_grad():
        for k, p in made.named_parameters():
            if "lora_B" in k:
                p.normal_(0, 0.1)
    # PeftModel.save_pretrained's two files (its model card needs Jinja2, which the venv lacks)
    made.peft_config["default"].save_pretrained(own)
    save_file({k: v.contiguous() for k, v in get_peft_model_state_dict(made).items()},
              os.path.join(own, "adapter_model.safetensors"), metadata={"format": "pt"})
    with torch.no_grad():
        want_own = made.eval()(input_ids=ids).logits.numpy()
    t = subprocess.run([os.path.join(args.build, "test_lora"), "--logits", base, own, feed, got_path],
                       capture_output=True, text=True)
    check(t.returncode == 0, f"{name}: test_lora --logits on peft's own adapter: {t.stderr[-500:]}")
    if t.returncode == 0:
        d = rel(load_file(got_path)["logits"], want_own)
        print(f"{name}: peft's own adapter in redco vs peft: logits differ by {d:.2e}")
        check(d < 1e-4, f"{name}: peft's own adapter in redco differs from peft by {d:.2e}")
    merged = T.AutoModelForCausalLM.from_pretrained(os.path.join(wd, "merged")).eval()
    with torch.no_grad():
        d = rel(merged(input_ids=ids).logits.numpy(), want)
    check(d < 1e-4, f"{name}: the merged checkpoint's logits differ from peft's by {d:.2e}")

    # eval --lora: the merged model's loss, not the base's
    ev = ["--data", data, "--tokenizer", tok, "--seq-len", str(SEQ), "--batch-size", "8", "--json"]
    losses = [last_json(run(redco, "eval", "--model", m, *extra, *ev))
              for m, extra in ((base, ["--lora", adapter]), (os.path.join(wd, "merged"), []), (base, []))]
    if all(losses):
        a, m, b = (x["loss"] for x in losses)
        print(f"{name}: eval loss with --lora {a:.6f}, merged {m:.6f}, base {b:.6f}")
        check(abs(a - m) < 1e-5 * m and abs(a - b) > 1e-4, f"{name}: eval --lora {a} merged {m} base {b}")

    # generate --lora: PEFT's greedy continuation
    g = last_json(run(redco, "generate", "--model", base, "--lora", adapter, "--tokenizer", tok, "--prompt",
                      "It is a truth universally", "--max-new-tokens", "8", "--json"))
    if g:
        prompt = torch.tensor([g["prompt_ids"]])
        with torch.no_grad():
            hf_ids = pm.generate(input_ids=prompt, max_new_tokens=8, do_sample=False,
                                 pad_token_id=0)[0, prompt.shape[1]:].tolist()
        check(g["ids"] == hf_ids[:len(g["ids"])] and len(g["ids"]) > 0,
              f"{name}: generate --lora {g['ids']} vs peft {hf_ids}")

    # two model shards: the one-process adapters
    mp = os.path.join(tmp, name + "-mp2")
    r = run(redco, "train", *common, "--workdir", mp, "--nproc", "2", "--mp", "2", "--json")
    if r.returncode == 0:
        d = adapters_rel(os.path.join(mp, "adapter"), adapter)
        print(f"{name}: --mp 2 vs one process: adapters differ by {d:.2e}")
        check(d < 1e-4, f"{name}: --mp 2 adapters differ from one process's by {d:.2e}")

    # the OpenCL device: the CPU's adapters. SGD: AdamW's first steps move each element of B
    # by about lr whatever the size of its gradient, so a float-order difference in a
    # near-zero gradient shows as a 1e-4 difference of the adapters (GPT-2 measured); SGD's
    # adapters show the gradients' own agreement
    short = list(common) + ["--optimizer", "sgd"]
    short[short.index("--steps") + 1] = "2"
    short[short.index("--lr") + 1] = "0.5"
    cpu, dev = os.path.join(tmp, name + "-cpu2"), os.path.join(tmp, name + "-ocl2")
    run(redco, "train", *short, "--workdir", cpu, "--json")
    r = run(redco, "train", *short, "--workdir", dev, "--json", "--device", "opencl")
    if r.returncode == 0:
        d = adapters_rel(os.path.join(dev, "adapter"), os.path.join(cpu, "adapter"))
        print(f"{name}: --device opencl vs cpu: adapters differ by {d:.2e}")
        check(d < 1e-4, f"{name}: opencl adapters differ from the CPU's by {d:.2e}")
    if name == "llama":  # both at once: two model shards on the OpenCL device
        both = os.path.join(tmp, name + "-ocl-mp2")
        r = run(redco, "train", *short, "--workdir", both, "--json", "--device", "opencl", "--nproc", "2", "--mp", "2")
        if r.returncode == 0:
            d = adapters_rel(os.path.join(both, "adapter"), os.path.join(cpu, "adapter"))
            print(f"{name}: --device opencl --mp 2 vs one CPU process: adapters differ by {d:.2e}")
            check(d < 1e-4, f"{name}: opencl --mp 2 adapters differ from the CPU's by {d:.2e}")

def eval_metric(args):
    """A trainer's eval predictor and metric on LoRA adapters: on 2 model shards the predictor
    runs on the trainer's adapter and frozen base shards, and the metric is one process's;
    with zero 3 (the adapters sharded and gathered; the frozen base whole) over 2
    data-parallel processes and over dp 2 x mp 2 it is plain dp 2's."""
    tool = os.path.join(args.build, "test_lora")
    mpiexec = shutil.which("mpiexec")
    check(mpiexec is not None, "no mpiexec")
    if not mpiexec:
        return
    got = []
    runs = ([tool, "--eval-metric", "1"], [mpiexec, "-n", "2", tool, "--eval-metric", "2"],
            [mpiexec, "-n", "2", tool, "--eval-metric", "1"], [mpiexec, "-n", "2", tool, "--eval-metric", "1", "3"],
            [mpiexec, "-n", "4", tool, "--eval-metric", "2", "3"])
    for argv in runs:
        r = run(argv[0], *argv[1:])
        got.append([float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("metric ")])
    # (2 data-parallel processes take other examples per step than one: their own reference)
    for ref, other, name in ((0, 1, "one process vs 2 model shards"), (2, 3, "dp 2 vs dp 2 with zero 3"),
                             (2, 4, "dp 2 vs dp 2 x mp 2 with zero 3")):
        a, b = got[ref], got[other]
        print(f"eval metric with LoRA, {name}: {a} vs {b}")
        check(len(a) == 2 and len(b) == 2 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)),
              f"eval metric with LoRA, {name}: {a} vs {b}")

def main():
    args = options()
    tok = os.path.join(args.source, "data", "gpt2")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "austen.txt")
        with open(os.path.join(args.source, "data", "austen_excerpt.txt"), encoding="utf-8") as f:
            text = f.read(24000)
        with open(data, "w", encoding="utf-8") as f:
            f.write(text)
        for name, base, targets in models(tmp):
            case(args, tmp, name, base, targets, data, tok)
    eval_metric(args)
    return finish("test_lora_ref")


if __name__ == "__main__":
    sys.exit(main())
