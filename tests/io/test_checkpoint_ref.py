"""Checkpoint files against the reference libraries (safetensors 0.4, transformers 4.36).

(a) a safetensors file written by redco (test_safetensors --write) reads back through
    safetensors' safe_open / load_file with identical bits, dtypes, shapes and metadata;
(b) files written by safetensors (F32, F16, BF16, F64 with special values; a BF16 model;
    a tiny GPT-2 sharded by transformers' save_pretrained(max_shard_size=...)) read through
    redco (test_safetensors --dump) give the same f32 values bit for bit;
(c) config.json written by redco for every preset (test_config --save) loads with
    AutoConfig.from_pretrained into the same architecture, and the tiny presets build
    transformers models with exactly redco's parameter count;
(d) config.json written by transformers' config classes (every family, Mistral too, with
    non-default settings) loads in redco (test_config --dump) with the same fields and
    parameter count.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

failures = []
passed = 0


def check(ok, what):
    global passed
    if ok:
        passed += 1
    else:
        failures.append(what)
        print("FAIL", what)


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def f32_bits(t):
    return t.detach().float().contiguous().numpy().view(np.uint32).reshape(-1)


def same_bits(got, want):
    """got: list of u32 from redco, want: u32 array; NaNs compare as NaN."""
    got = np.array(got, dtype=np.uint32)
    if got.shape != want.shape:
        return False
    gf, wf = got.view(np.float32), want.view(np.float32)
    nan = np.isnan(wf)
    return bool(np.array_equal(np.isnan(gf), nan) and np.array_equal(got[~nan], want[~nan]))


def dump(build, path):
    out = run([os.path.join(build, "test_safetensors"), "--dump", path])
    return {d["name"]: d for d in (json.loads(line) for line in out.splitlines() if line)}


# ---- (a) redco writes, safetensors reads ----------------------------------------------

def part_a(build, tmp):
    path = os.path.join(tmp, "redco.safetensors")
    known = json.loads(run([os.path.join(build, "test_safetensors"), "--write", path]))
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    check(n % 8 == 0, "(a) header length padded to a multiple of 8")
    torch_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    view = {"F32": torch.int32, "F16": torch.int16, "BF16": torch.int16}
    mask = {"F32": 0xFFFFFFFF, "F16": 0xFFFF, "BF16": 0xFFFF}
    loaded = load_file(path)
    with safe_open(path, framework="pt") as f:
        check(f.metadata() == known["metadata"], "(a) metadata")
        check(sorted(f.keys()) == sorted(known["tensors"]), "(a) tensor names")
        for name, want in known["tensors"].items():
            t = f.get_tensor(name)
            dt = want["dtype"]
            ok = t.dtype == torch_dtype[dt] and list(t.shape) == want["shape"]
            bits = [int(x) & mask[dt] for x in t.view(view[dt]).reshape(-1).tolist()]
            ok = ok and bits == want["bits"] and torch.equal(
                loaded[name].view(view[dt]), t.view(view[dt]))
            check(ok, f"(a) tensor {name}: {t.dtype} {list(t.shape)}")


# ---- (b) safetensors / transformers write, redco reads --------------------------------

def part_b(build, tmp):
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40,
                            3.4e38, -1.5, 65504.0, 6e-8, 1e-5, 70000.0])
    tensors = {
        "f32": torch.randn(3, 5, generator=g),
        "f32_special": special.clone(),
        "f16": torch.randn(4, 7, generator=g).half(),
        "f16_special": special.half(),
        "f16_all": torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
                        .view(torch.float16),
        "bf16": (torch.randn(6, 2, generator=g) * 1000).bfloat16(),
        "bf16_special": special.bfloat16(),
        "f64": torch.randn(2, 3, 4, generator=g, dtype=torch.float64) * 1e3,
        "f64_special": torch.tensor([1e300, -1e-300, 0.1, 1 + 2 ** -24, 1 + 3 * 2 ** -24],
                                    dtype=torch.float64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "ids": torch.arange(5, dtype=torch.int64),
    }
    path = os.path.join(tmp, "reference.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    got = dump(build, path)
    check(sorted(got) == sorted(tensors), "(b) names of a safetensors file")
    for name, t in tensors.items():
        d = got.get(name)
        if d is None:
            continue
        ok = d["shape"] == list(t.shape)
        if t.dtype == torch.int64:
            ok = ok and d["dtype"] == "I64" and d["bits"] is None
        else:
            ok = ok and same_bits(d["bits"], f32_bits(t))
        check(ok, f"(b) {name} ({t.dtype}) read by redco")

    # a bf16 model, unsharded
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    mdir = os.path.join(tmp, "llama_bf16")
    model.save_pretrained(mdir, safe_serialization=True)
    got = dump(build, mdir)
    sd = model.state_dict()
    check(sorted(got) == sorted(sd), "(b) bf16 llama: redco sees the state dict's names")
    ok = all(name in got and got[name]["dtype"] == "BF16" and
             same_bits(got[name]["bits"], f32_bits(t)) for name, t in sd.items())
    check(ok, "(b) bf16 llama: every tensor bit-identical")

    # a sharded GPT-2 (tied lm_head dropped by transformers)
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=3, n_head=4,
                                  n_positions=64)
    torch.manual_seed(1)
    model = transformers.GPT2LMHeadModel(cfg)
    sdir = os.path.join(tmp, "gpt2_sharded")
    model.save_pretrained(sdir, max_shard_size="20KB", safe_serialization=True)
    with open(os.path.join(sdir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = set(index["weight_map"].values())
    check(len(shards) > 2 and not os.path.exists(os.path.join(sdir, "model.safetensors")),
          f"(b) transformers wrote {len(shards)} shards")
    got = dump(build, sdir)
    check(sorted(got) == sorted(index["weight_map"]), "(b) sharded: names match the weight map")
    sd = model.state_dict()
    ok = all(same_bits(got[n]["bits"], f32_bits(sd[n])) and got[n]["shape"] == list(sd[n].shape)
             for n in index["weight_map"])
    check(ok, f"(b) sharded gpt2: {len(index['weight_map'])} tensors bit-identical")
    # the index path itself and a single shard open too
    check(sorted(dump(build, os.path.join(sdir, "model.safetensors.index.json"))) ==
          sorted(got), "(b) sharded: opened through index.json")
    one = sorted(shards)[0]
    with safe_open(os.path.join(sdir, one), framework="pt") as f:
        keys = sorted(f.keys())
    check(sorted(dump(build, os.path.join(sdir, one))) == keys, "(b) one shard alone")


# ---- configs --------------------------------------------------------------------------

def hf_fields(c):
    """The transformers config in redco's field names (only the fields the family has)."""
    none = lambda v: -1 if v is None else v  # noqa: E731
    f = {"vocab_size": c.vocab_size, "tie_word_embeddings": int(c.tie_word_embeddings),
         "bos_token_id": none(c.bos_token_id), "eos_token_id": none(c.eos_token_id),
         "pad_token_id": none(c.pad_token_id)}
    mt = c.model_type
    if mt in ("gpt2", "gptj"):
        f.update(model_type=mt, d_model=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
                 n_kv_head=c.n_head, head_dim=c.n_embd // c.n_head,
                 d_ff=c.n_inner if c.n_inner is not None else 4 * c.n_embd,
                 max_positions=c.n_positions, norm_eps=c.layer_norm_epsilon,
                 activation=c.activation_function, resid_dropout=c.resid_pdrop,
                 embd_dropout=c.embd_pdrop, attn_dropout=c.attn_pdrop, gated_ffn=0)
        if mt == "gptj":
            f.update(rotary_dim=c.rotary_dim, type=3)
        else:
            f.update(type=0)
    elif mt in ("llama", "mistral"):
        hd = c.hidden_size // c.num_attention_heads
        f.update(type=1, model_type=mt, d_model=c.hidden_size, n_layer=c.num_hidden_layers,
                 n_head=c.num_attention_heads, n_kv_head=c.num_key_value_heads, head_dim=hd,
                 rotary_dim=hd, d_ff=c.intermediate_size,
                 max_positions=c.max_position_embeddings, norm_eps=c.rms_norm_eps,
                 rope_theta=c.rope_theta, activation=c.hidden_act, gated_ffn=1,
                 attn_dropout=c.attention_dropout)
        if mt == "mistral":
            f.update(sliding_window=c.sliding_window or 0, attention_bias=0)
        else:
            f.update(attention_bias=int(c.attention_bias), sliding_window=0)
    elif mt == "opt":
        f.update(type=2, model_type=mt, d_model=c.hidden_size, n_layer=c.num_hidden_layers,
                 n_head=c.num_attention_heads, head_dim=c.hidden_size // c.num_attention_heads,
                 d_ff=c.ffn_dim, max_positions=c.max_position_embeddings,
                 word_embed_proj_dim=c.word_embed_proj_dim,
                 do_layer_norm_before=int(c.do_layer_norm_before),
                 remove_final_layer_norm=int(c._remove_final_layer_norm),
                 enable_bias=int(c.enable_bias),
                 layer_norm_affine=int(c.layer_norm_elementwise_affine),
                 activation=c.activation_function, resid_dropout=c.dropout,
                 embd_dropout=0, attn_dropout=c.attention_dropout, norm_eps=1e-5)  # OPT drops no embeddings
    elif mt == "t5":
        f.update(type=4, model_type=mt, d_model=c.d_model, n_layer=c.num_layers,
                 n_decoder_layer=c.num_decoder_layers, n_head=c.num_heads, head_dim=c.d_kv,
                 d_ff=c.d_ff, norm_eps=c.layer_norm_epsilon, activation=c.dense_act_fn,
                 gated_ffn=int(c.is_gated_act),
                 rel_buckets=c.relative_attention_num_buckets,
                 rel_max_distance=c.relative_attention_max_distance,
                 decoder_start_token_id=none(c.decoder_start_token_id
                                             if c.decoder_start_token_id is not None
                                             else c.pad_token_id),
                 resid_dropout=c.dropout_rate, embd_dropout=c.dropout_rate,
                 attn_dropout=c.dropout_rate)
    return f


def compare(label, redco, hf):
    bad = [f"{k}: redco {redco.get(k)!r} vs transformers {v!r}" for k, v in hf.items()
           if redco.get(k) != v]
    check(not bad, f"{label}: " + "; ".join(bad))


def model_of(cfg):
    if cfg.model_type == "t5":
        return transformers.T5ForConditionalGeneration(cfg)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def param_count(model):
    return sum(p.numel() for p in model.parameters())


ARCH = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "opt": "OPTForCausalLM",
        "gptj": "GPTJForCausalLM", "t5": "T5ForConditionalGeneration",
        "mistral": "MistralForCausalLM"}


def part_c(build, tmp):
    tc = os.path.join(build, "test_config")
    names = run([tc, "--presets"]).split()
    check(len(names) == 28, f"(c) {len(names)} presets")
    counted = 0
    for name in names:
        d = os.path.join(tmp, "preset-" + name)
        os.makedirs(d)
        run([tc, "--save", name, d])
        cfg = transformers.AutoConfig.from_pretrained(d)
        redco = json.loads(run([tc, "--dump", d]))
        check(cfg.architectures == [ARCH[cfg.model_type]] and
              redco["architecture"] == ARCH[cfg.model_type], f"(c) {name}: architectures")
        compare(f"(c) preset {name}", redco, hf_fields(cfg))
        # real models small enough to build here, and every tiny one
        if name.startswith("tiny-") or name in ("gpt2", "t5-small", "opt-125m"):
            torch.manual_seed(0)
            n = param_count(model_of(cfg))
            check(n == redco["param_count"],
                  f"(c) {name}: transformers has {n} parameters, redco counts "
                  f"{redco['param_count']}")
            counted += 1
    print(f"(c) {len(names)} presets load in transformers; {counted} parameter counts match")


def part_d(build, tmp):
    T = transformers
    configs = {
        "gpt2": T.GPT2Config(vocab_size=120, n_embd=48, n_layer=2, n_head=6, n_positions=40),
        "gpt2-custom": T.GPT2Config(vocab_size=120, n_embd=48, n_layer=2, n_head=6,
                                    n_inner=100, activation_function="relu",
                                    layer_norm_epsilon=1e-6, tie_word_embeddings=False,
                                    resid_pdrop=0.0, bos_token_id=3, eos_token_id=4,
                                    pad_token_id=5),
        "llama": T.LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=2, num_attention_heads=8),
        "llama-gqa": T.LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=2, rope_theta=500000.0,
                                   rms_norm_eps=1e-5, tie_word_embeddings=True,
                                   attention_bias=True, max_position_embeddings=128),
        "mistral": T.MistralConfig(vocab_size=200, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=8),
        "mistral-nowindow": T.MistralConfig(vocab_size=200, hidden_size=64,
                                            intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=8, num_key_value_heads=4,
                                            sliding_window=None),
        "opt": T.OPTConfig(vocab_size=150, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, ffn_dim=64, max_position_embeddings=50),
        "opt-350m-style": T.OPTConfig(vocab_size=150, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, ffn_dim=64,
                                      word_embed_proj_dim=16, do_layer_norm_before=False),
        "opt-nobias": T.OPTConfig(vocab_size=150, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, ffn_dim=64, enable_bias=False,
                                  layer_norm_elementwise_affine=False,
                                  tie_word_embeddings=False),
        "gptj": T.GPTJConfig(vocab_size=130, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                             n_positions=64),
        "gptj-tied": T.GPTJConfig(vocab_size=130, n_embd=64, n_layer=2, n_head=4,
                                  rotary_dim=16, n_inner=80, tie_word_embeddings=True),
        "t5": T.T5Config(vocab_size=110, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                         num_heads=4),
        "t5-gated": T.T5Config(vocab_size=110, d_model=32, d_kv=16, d_ff=48, num_layers=2,
                               num_decoder_layers=3, num_heads=4,
                               feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                               relative_attention_num_buckets=8,
                               relative_attention_max_distance=20,
                               decoder_start_token_id=0),
        "t5-silu": T.T5Config(vocab_size=110, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                              num_heads=4, feed_forward_proj="gated-silu"),
    }
    tc = os.path.join(build, "test_config")
    for label, cfg in configs.items():
        d = os.path.join(tmp, "hf-" + label)
        cfg.save_pretrained(d)
        redco = json.loads(run([tc, "--dump", d]))
        compare(f"(d) transformers {label}", redco, hf_fields(cfg))
        torch.manual_seed(0)
        n = param_count(model_of(cfg))
        check(n == redco["param_count"],
              f"(d) {label}: transformers has {n} parameters, redco counts "
              f"{redco['param_count']}")
    print(f"(d) {len(configs)} transformers configs load in redco with the same fields")


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="redco_ckpt_ref_") as tmp:
        for part in (part_a, part_b, part_c, part_d):
            try:
                part(args.build, tmp)
            except Exception as e:  # a crash of one part is a failure, not a skip
                check(False, f"{part.__name__} raised {type(e).__name__}: {e}")
    print(f"test_checkpoint_ref: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
