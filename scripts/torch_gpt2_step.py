#!/usr/bin/env python3
"""torch_gpt2_step.py - PyTorch's side of the GPU check (scripts/gpu_check.sh, docs/gpu.md):
the same GPT-2 as redco's presets, timed in plain PyTorch eager on the same device.

  torch_gpt2_step.py step   [--device D] [--dtype f32|bf16] [--preset P] [--batch B] [--seq T]
                            [--steps N] [--warmup W] [--attention sdpa|math]
      one training step as redco's Trainer runs it: forward, cross-entropy, backward and
      torch.optim.AdamW (lr 3e-4, weight decay 0.01, redco's defaults), dropout 0.1 as in
      redco's GPT-2 presets; bf16 through torch.autocast (f32 weights, bf16 products).
      Prints step_s_median and step_s_min over N timed steps after W warm-up steps.
  torch_gpt2_step.py decode [--device D] [--dtype f32|bf16] [--preset P] [--prompt 8] [--new 20]
      greedy decoding at batch 1 with a key/value cache, as bench_generate does: the model's
      weights cast to the dtype, each new id read back to the host (redco's on_token sees
      each id), ms per token over the span from the first to the last new token, best of 3.
  torch_gpt2_step.py matmul [--device D] [--dtype f32|bf16] (--shapes FILE | --preset P --batch B --seq T)
      cuBLAS's own rate on a step's matrix products: each product of FILE (JSON lines
      {"a": [...], "b": [...], "ta": 0|1, "tb": 0|1, "count": n}, as `bench_gpt2 --shapes`
      writes them) timed alone with torch.matmul, the times summed over the step's products.
      Without FILE, the products of GPT-2's step as this script's model makes them.
  torch_gpt2_step.py attention [--device D] [--dtype f32|bf16] [--batch B] [--seq T] [--attention sdpa|math]
      causal attention alone, forward and backward (the gradients of sum(y r) for q, k, v),
      at GPT-2's 12 heads of 64 without dropout, as bench_attention times redco's fused op:
      the median ms of --reps runs after one warm-up.

f32 products are true f32 (TF32 off) unless --tf32, as redco's are. Presets: gpt2 (124M),
gpt2-mini, tiny-gpt2 (redco's sizes). One JSON line per run on stdout; exits 1 on failure.
Runs on torch 1.13 (no scaled_dot_product_attention there: the math attention is used).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# vocabulary, positions, layers, heads, width (src/model/gpt2.c's presets)
PRESETS = {
    "gpt2": (50257, 1024, 12, 12, 768),
    "gpt2-mini": (50257, 256, 4, 4, 128),
    "tiny-gpt2": (256, 128, 2, 4, 64),
}
DROPOUT = 0.1
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    def __init__(self, C, H, attention):
        super().__init__()
        self.H, self.attention = H, attention
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop = nn.Dropout(DROPOUT)

    def attend(self, q, k, v, causal):
        """q: (B, H, Tq, D), k and v: (B, H, Tk, D); causal over the last Tq of Tk"""
        p = DROPOUT if self.training else 0.0
        if self.attention == "sdpa" and HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            Tq, Tk = q.shape[-2], k.shape[-2]
            mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
            s = s.masked_fill(~mask, float("-inf"))
        return F.dropout(s.softmax(-1), p, self.training) @ v

    def forward(self, x, cache=None, pos=0):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if cache is not None:  # (B, H, Tmax, D) each: keys and values of positions < pos + T
            cache[0][:, :, pos:pos + T] = k
            cache[1][:, :, pos:pos + T] = v
            k, v = cache[0][:, :, :pos + T], cache[1][:, :, :pos + T]
        y = self.attend(q, k, v, causal=T > 1)
        x = x + self.drop(self.attn_proj(y.transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT2(nn.Module):
    def __init__(self, V, P, L, H, C, attention="sdpa"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(P, C)
        self.blocks = nn.ModuleList(Block(C, H, attention) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.drop = nn.Dropout(DROPOUT)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, caches=None, pos=0):
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(pos, pos + ids.shape[1], device=ids.device)))
        for i, blk in enumerate(self.blocks):
            x = blk(x, caches[i] if caches else None, pos)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return "cpu"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def make_model(a, dev, attention="sdpa"):
    V, P, L, H, C = PRESETS[a.preset]
    torch.manual_seed(0)
    return GPT2(V, P, L, H, C, attention).to(dev), V


def run_step(a, dev):
    m, V = make_model(a, dev, a.attention)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (a.batch, a.seq), generator=g).to(dev)
    y = torch.randint(0, V, (a.batch, a.seq), generator=g).to(dev)
    times = []
    for i in range(a.warmup + a.steps):
        sync(dev)
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = F.cross_entropy(m(x).float().view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    return {"record": "torch_gpt2_step", "step_s_median": statistics.median(times), "step_s_min": min(times),
            "steps": a.steps, "batch": a.batch, "seq": a.seq, "attention": a.attention if HAVE_SDPA else "math",
            "loss": float(loss), "params": sum(p.numel() for p in m.parameters())}


@torch.no_grad()
def run_decode(a, dev):
    m, V = make_model(a, dev)
    m.eval()
    if a.dtype == "bf16":
        m = m.to(torch.bfloat16)
    _, P, L, H, C = PRESETS[a.preset]
    wd = m.wte.weight.dtype
    prompt = torch.tensor([[464, 2068, 7586, 21831, 18045, 625, 262, 16931][:a.prompt]], device=dev) % V
    best_step, best_first = 1e30, 1e30
    for _ in range(3):
        caches = [(torch.empty(1, H, P, C // H, dtype=wd, device=dev), torch.empty(1, H, P, C // H, dtype=wd, device=dev))
                  for _ in range(L)]
        stamps = []
        sync(dev)
        t0 = time.perf_counter()
        ids, pos = prompt, 0
        for _ in range(a.new):
            nxt = m(ids, caches, pos)[:, -1].argmax(-1)
            pos += ids.shape[1]
            int(nxt.item())  # the id on the host, as redco's on_token gets it
            stamps.append(time.perf_counter())
            ids = nxt.view(1, 1)
        best_step = min(best_step, (stamps[-1] - stamps[0]) / (a.new - 1))
        best_first = min(best_first, stamps[0] - t0)
    return {"record": "torch_generate_greedy", "ms_per_token": 1e3 * best_step, "prompt_ms": 1e3 * best_first,
            "prompt": a.prompt, "new_tokens": a.new}


def step_shapes(a):
    """the products of one GPT-2 training step of this script's model: (a, b, ta, tb, count)"""
    V, _, L, H, C = PRESETS[a.preset]
    N, B, T, D = a.batch * a.seq, a.batch, a.seq, C // H
    fwd = [((N, C), (3 * C, C), 0, 1, L), ((N, C), (C, C), 0, 1, L), ((N, C), (4 * C, C), 0, 1, L),
           ((N, 4 * C), (C, 4 * C), 0, 1, L), ((N, C), (V, C), 0, 1, 1),
           ((B, H, T, D), (B, H, T, D), 0, 1, L), ((B, H, T, T), (B, H, T, D), 0, 0, L)]
    out = []
    for sa, sb, ta, tb, n in fwd:  # y = a b^T: dA = dY b, dB = dY^T a (each as a product of its own)
        out.append((sa, sb, ta, tb, n))
        M = sa[:-2] + (sa[-2], sb[-2] if tb else sb[-1])
        out.append((M, sb, 0, 1 - tb, n))
        out.append((M, sa, 1, 0, n) if tb else (sa, M, 1, 0, n))
    return [{"a": list(sa), "b": list(sb), "ta": ta, "tb": tb, "count": n} for sa, sb, ta, tb, n in out]


def run_matmul(a, dev):
    if a.shapes:
        with open(a.shapes) as f:
            shapes = [json.loads(line) for line in f if line.strip()]
    else:
        shapes = step_shapes(a)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    flop = seconds = 0.0
    for s in shapes:
        A = torch.randn(s["a"], device=dev, dtype=dt)
        Bm = torch.randn(s["b"], device=dev, dtype=dt)
        op_a = A.transpose(-1, -2) if s["ta"] else A
        op_b = Bm.transpose(-1, -2) if s["tb"] else Bm
        out = torch.matmul(op_a, op_b)
        k = op_a.shape[-1]
        times = []
        for _ in range(a.reps + 1):  # the first warms up
            sync(dev)
            t0 = time.perf_counter()
            torch.matmul(op_a, op_b, out=out)
            sync(dev)
            times.append(time.perf_counter() - t0)
        n = s.get("count", 1)
        flop += n * 2.0 * out.numel() * k
        seconds += n * statistics.median(times[1:])
        del A, Bm, out
    return {"record": "torch_matmul_step_shapes", "gflop": flop * 1e-9, "seconds": seconds,
            "gflops": flop / seconds * 1e-9, "products": sum(s.get("count", 1) for s in shapes),
            "shapes": len(shapes), "source": a.shapes or "this script's GPT-2 step"}


def run_attention(a, dev):
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    B, H, T, D = a.batch, 12, a.seq, 64
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    r = torch.randn(B, H, T, D, device=dev, dtype=dt)
    blk = Block(H * D, H, a.attention).eval()  # no dropout: p 0 in attend
    times = []
    for _ in range(a.reps + 1):  # the first warms up
        q.grad = k.grad = v.grad = None
        sync(dev)
        t0 = time.perf_counter()
        (blk.attend(q, k, v, True) * r).sum().backward()
        sync(dev)
        times.append(time.perf_counter() - t0)
    sdpa = a.attention == "sdpa" and HAVE_SDPA
    return {"record": "torch_attention_fwd_bwd", "fwd_bwd_ms": 1e3 * statistics.median(times[1:]), "batch": B,
            "heads": H, "T": T, "head_dim": D, "attention": "sdpa" if sdpa else "math"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["step", "decode", "matmul", "attention"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="gpt2")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--new", type=int, default=20)
    ap.add_argument("--shapes")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tf32", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    try:
        r = {"step": run_step, "decode": run_decode, "matmul": run_matmul, "attention": run_attention}[a.mode](a, dev)
    except Exception as e:  # one line naming the mode, then exit 1
        print(f"torch_gpt2_step.py {a.mode}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    r.update({"device": device_name(dev), "dtype": a.dtype, "preset": a.preset, "torch": torch.__version__,
              "tf32": a.tf32})
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
