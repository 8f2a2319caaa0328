"""examples/lora_finetune.c, run as a user would, and what it must show:
- on tiny-gpt2 (GPT-2's vocabulary) with adapters on c_attn and c_proj: the base weights
  unchanged bit for bit, the held-out loss lower after training, the merged model's loss
  equal to the adapted one (relative 1e-5), a trainer state far below full fine-tuning's;
- workdir/adapter loads with PEFT: on merged/ (transformers) with peft's own delta of the
  adapter taken out of each target weight, the PeftModel's logits equal merged/'s
  (relative 1e-4);
- under `mpiexec -n 2 ... --mp 2` (model shards) and on --device opencl (3 steps) the
  adapters equal the one-process CPU run's: relative 1e-3, since B starts at zero and the
  difference is relative to the update itself, which AdamW makes of gradients normalised
  element by element (the few near zero magnify float-order differences: 1e-4 measured on
  OpenCL after 1-2 AdamW steps where SGD's adapters differ by 5e-6).
"""
import os
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

from refkit import check, finish, number, options, run, run_mpi

FLOAT = r"([-+0-9.e]+)"


def adapters(workdir):
    return load_file(os.path.join(workdir, "adapter", "adapter_model.safetensors"))


def rel(a, b):
    if set(a) != set(b):
        return float("inf")
    return max(float(np.linalg.norm(a[k] - b[k]) / max(np.linalg.norm(b[k]), 1e-6)) for k in b)


def peft_check(workdir):
    """The merged checkpoint minus peft's own delta of the adapter is the base; adding it
    back through PeftModel reproduces merged/'s logits."""
    import torch
    import transformers as T
    from peft import PeftModel
    merged_dir = os.path.join(workdir, "merged")
    merged = T.AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    base = T.AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    pm = PeftModel.from_pretrained(base, os.path.join(workdir, "adapter"))
    with torch.no_grad():
        for module in pm.modules():  # subtract the delta: base = merged - delta
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                module.base_layer.weight -= module.get_delta_weight("default")
        ids = torch.randint(0, 50257, (2, 10), generator=torch.Generator().manual_seed(1))
        want, got = merged(input_ids=ids).logits.numpy(), pm(input_ids=ids).logits.numpy()
    d = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"lora_finetune: peft's adapter on the unmerged base vs redco's merged model: {d:.2e}")
    check(d < 1e-4, f"lora_finetune: peft + adapter differs from the merged checkpoint by {d:.2e}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "austen.txt")
        with open(os.path.join(args.source, "data", "austen_excerpt.txt"), encoding="utf-8") as f:
            text = f.read(60000)
        with open(data, "w", encoding="utf-8") as f:
            f.write(text)
        common = ["--data", data, "--tokenizer", os.path.join(args.source, "data", "gpt2"), "--batch", "4"]
        one = os.path.join(tmp, "one")
        out = run(args.build, "lora_finetune", *common, "--steps", "12", "--workdir", one)
        if out:
            state = number(r"trainer state (\d+) bytes \(full fine-tuning: (\d+)\)", out[0], "lora_finetune")
            losses = number(rf"held-out loss: before {FLOAT}, after {FLOAT}", out[0], "lora_finetune")
            merged = number(rf"merged model: held-out loss {FLOAT}", out[0], "lora_finetune")
            check("base weights unchanged: yes" in out[0], "lora_finetune: the base weights changed")
            if state:
                check(0 < state[0] * 100 < state[1], f"lora_finetune: state {state[0]} vs full {state[1]} bytes")
            if losses and merged:
                print(f"lora_finetune: held-out loss {losses[0]:.4f} -> {losses[1]:.4f}, merged {merged[0]:.4f}")
                check(losses[1] < losses[0] - 0.02, f"lora_finetune: held-out loss {losses}")
                check(abs(merged[0] - losses[1]) <= 1e-4, f"lora_finetune: merged {merged[0]} vs adapted {losses[1]}")
            peft_check(one)
        short = [*common, "--steps", "3", "--dropout", "off"]  # mp 2 must equal one process
        cpu, two, dev = (os.path.join(tmp, n) for n in ("cpu3", "mp2", "ocl3"))
        a = run(args.build, "lora_finetune", *short, "--workdir", cpu)
        b = run_mpi(args.build, "lora_finetune", 2, *short, "--mp", "2", "--workdir", two)
        if a and b:
            d = rel(adapters(two), adapters(cpu))
            print(f"lora_finetune: mpiexec -n 2 --mp 2 vs one process: adapters differ by {d:.2e}")
            check(d < 1e-3, f"lora_finetune: --mp 2 adapters differ by {d:.2e}")
        c = run(args.build, "lora_finetune", *short, "--device", "opencl", "--workdir", dev)
        if a and c:
            d = rel(adapters(dev), adapters(cpu))
            print(f"lora_finetune: --device opencl vs cpu: adapters differ by {d:.2e}")
            check(d < 1e-3, f"lora_finetune: OpenCL adapters differ by {d:.2e}")
    return finish("test_example_lora_finetune")


if __name__ == "__main__":
    sys.exit(main())
