"""examples/image_captioning.c (ViT encoder + GPT-2 decoder with cross-attention on
Fashion-MNIST), run on small settings, and what it must show:
- after 600 steps on 20,000 training images (seed 1), the greedy and the beam-search captions
  of 200 held-out test images name the right class for at least half of them (chance: 10%),
  and the held-out caption loss falls from ~ln(vocab) to under a fifth of that;
- the saved decoder directory loads in transformers' GPT2LMHeadModel with no missing or
  unexpected weights; fed the dumped encoder states as encoder_hidden_states it gives
  redco's logits within 1e-4, and its generate() (greedy, and beam search with 3 beams,
  length penalty 1, no early stopping) captions the 8 dumped images as redco does;
- the saved tokenizer loads in GPT2Tokenizer and GPT2TokenizerFast, which encode the dumped
  captions to the ids redco trained on;
- five steps on OpenCL (--device opencl) log the CPU's losses (relative 1e-4) and the
  OpenCL-trained decoder also matches transformers within 1e-4;
- data parallel under mpiexec -n 2 (batch 8 per process) logs the losses of one process with
  batch 16 within 2% (each process averages over its own caption tokens) and captions too.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from transformers import GPT2LMHeadModel, GPT2Tokenizer, GPT2TokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refkit import FAILED, MPI_ENV, check, finish, number, options, run

NAME = "image_captioning"


def logged_losses(work):
    with open(os.path.join(work, "log.jsonl")) as f:
        return [r["train/loss"] for r in map(json.loads, filter(str.strip, f)) if "train/loss" in r]


def captions(stdout):
    """{image: (greedy, beam)} of the captions the program prints"""
    found = re.findall(r'^test image (\d+) \([^)]*\): greedy "([^"]*)", beam "([^"]*)"', stdout, re.M)
    return {int(i): (g, b) for i, g, b in found}


class Captioner(GPT2LMHeadModel):
    """GPT2LMHeadModel whose generate() passes encoder_hidden_states on to each step (GPT-2's
    own prepare_inputs_for_generation drops them); beam search expands them per beam."""

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        inputs = super().prepare_inputs_for_generation(input_ids, past_key_values=past_key_values, **kwargs)
        inputs["encoder_hidden_states"] = kwargs["encoder_hidden_states"]
        return inputs


def check_decoder(work, what, printed=None):
    """The HF directory work/decoder against work/check.safetensors, and redco's captions of
    the dumped images (when given) against transformers' generate(), greedy and beam."""
    d = os.path.join(work, "decoder")
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    model.eval()
    check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"{what}: loading the decoder: {info}")
    check(model.config.add_cross_attention and model.config.model_type == "gpt2",
          f"{what}: config is not GPT-2 with cross-attention: {model.config}")
    f = safe_open(os.path.join(work, "check.safetensors"), "pt")
    meta = f.metadata()
    enc, ids, logits = f.get_tensor("encoder_hidden_states"), f.get_tensor("input_ids").long(), f.get_tensor("logits")
    with torch.no_grad():
        ref = model(input_ids=ids, encoder_hidden_states=enc).logits
    err = (ref - logits).abs().max().item()
    print(f"{what}: transformers' logits vs redco's: max abs difference {err:.2e} over {tuple(logits.shape)}")
    check(err < 1e-4, f"{what}: transformers' logits differ from redco's by {err}")
    eos = model.config.eos_token_id
    for cls in (GPT2Tokenizer, GPT2TokenizerFast):
        tok = cls.from_pretrained(d)
        for i in range(ids.shape[0]):
            caption = meta[f"caption{i}"]
            got = tok.encode(caption)
            n = len(got)
            row = ids[i].tolist()
            check(row[0] == eos and row[1:1 + n] == got and all(x == eos for x in row[1 + n:]),
                  f"{what}: {cls.__name__} encodes {caption!r} to {got}; redco's input ids {row}")
            check(tok.decode(got) == caption, f"{what}: {cls.__name__} decodes {got} to {tok.decode(got)!r}")
    if printed is None:
        return
    tok = GPT2Tokenizer.from_pretrained(d)
    model = Captioner.from_pretrained(d)
    model.eval()
    start = torch.full((enc.shape[0], 1), eos)
    for k, beams in enumerate((1, 3)):
        out = model.generate(start, encoder_hidden_states=enc, num_beams=beams, do_sample=False,
                             max_length=model.config.n_positions + 1, eos_token_id=eos, pad_token_id=eos,
                             length_penalty=1.0, early_stopping=False)
        for i, row in enumerate(out):
            text = tok.decode(row, skip_special_tokens=True)
            check(text == printed[i][k], f"{what}: test image {i}: transformers' generate(num_beams={beams}) "
                                         f"gives {text!r}, redco {printed[i][k]!r}")
    print(f"{what}: transformers' greedy and beam captions of the {enc.shape[0]} dumped images: "
          f"{'the same as redco' if not FAILED else 'see above'}")


def main_run(build, tmp):
    work = os.path.join(tmp, "work")
    out = run(build, NAME, "--steps", "600", "--train-limit", "20000", "--eval", "200", "--beams", "3",
              "--seed", "1", "--workdir", work)
    if not out:
        return
    stdout, _ = out
    vocab = number(r"BPE of (\d+) ids", stdout, NAME)
    loss = number(r"held-out caption loss: before ([0-9.]+), after ([0-9.]+)", stdout, NAME)
    acc = number(r"naming the right class: greedy ([0-9.]+), beam\(3\) ([0-9.]+) over 200 images", stdout, NAME)
    if not vocab or not loss or not acc:
        return
    print(f"{NAME}: held-out loss {loss[0]:.3f} -> {loss[1]:.3f}; right class: greedy {acc[0]:.3f}, "
          f"beam {acc[1]:.3f} (chance 0.1)")
    check(abs(loss[0] - math.log(vocab[0])) < 0.5, f"{NAME}: initial loss {loss[0]} is not ~ln({vocab[0]})")
    check(loss[1] < 0.2 * loss[0], f"{NAME}: held-out loss fell only {loss[0]} -> {loss[1]}")
    check(acc[0] >= 0.6 and acc[1] >= 0.6, f"{NAME}: captions name the right class for only {acc} of the images")
    losses = logged_losses(work)
    check(len(losses) == 10 and losses[-1] < 0.5 * losses[0], f"{NAME}: logged losses {losses} do not fall")
    printed = captions(stdout)
    check(all(i in printed for i in range(8)), f"{NAME}: no captions of test images 0-7 in:\n{stdout}")
    check_decoder(work, NAME, printed if all(i in printed for i in range(8)) else None)


def opencl_run(build, tmp):
    short = ["--steps", "5", "--train-limit", "320", "--eval", "8", "--batch", "16", "--log-every", "1"]
    works = {}
    for device in ("cpu", "opencl"):
        works[device] = os.path.join(tmp, f"short-{device}")
        if not run(build, NAME, *short, "--device", device, "--workdir", works[device]):
            return
    cpu, cl = logged_losses(works["cpu"]), logged_losses(works["opencl"])
    print(f"{NAME}: losses cpu {cpu}\n{NAME}: losses opencl {cl}")
    check(len(cpu) == 5 and len(cl) == 5 and all(abs(a - b) <= 1e-4 * a for a, b in zip(cpu, cl)),
          f"{NAME}: OpenCL losses {cl} differ from the CPU's {cpu}")
    check(cl[-1] < cl[0], f"{NAME}: OpenCL losses {cl} do not fall")
    check_decoder(works["opencl"], f"{NAME} --device opencl")


def mpi_run(build, tmp):
    mpiexec = shutil.which("mpiexec")
    check(mpiexec is not None, f"{NAME}: no mpiexec")
    if not mpiexec:
        return
    env = dict(os.environ, **MPI_ENV)
    short = ["--steps", "5", "--train-limit", "320", "--eval", "8", "--log-every", "1"]
    one, two = os.path.join(tmp, "dp1"), os.path.join(tmp, "dp2")
    if not run(build, NAME, *short, "--batch", "16", "--workdir", one):
        return
    argv = [mpiexec, "-n", "2", os.path.join(build, NAME), *short, "--batch", "8", "--workdir", two]
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    check(r.returncode == 0, f"{NAME}: mpiexec -n 2 exited {r.returncode}:\n{r.stderr[-2000:]}")
    if r.returncode:
        return
    a, b = logged_losses(one), logged_losses(two)
    print(f"{NAME}: losses 1 process {a}\n{NAME}: losses 2 processes {b}")
    check(len(a) == 5 and len(b) == 5 and all(abs(x - y) <= 0.02 * x for x, y in zip(a, b)),
          f"{NAME}: data-parallel losses {b} are not those of one process {a}")
    check(len(re.findall(r"naming the right class", r.stdout)) == 1,
          f"{NAME}: mpiexec -n 2 did not caption (once, on rank 0):\n{r.stdout[-1500:]}")


def main():
    args = options()
    with tempfile.TemporaryDirectory() as tmp:
        main_run(args.build, tmp)
        opencl_run(args.build, tmp)
        mpi_run(args.build, tmp)
    return finish("test_example_image_captioning")


if __name__ == "__main__":
    sys.exit(main())
