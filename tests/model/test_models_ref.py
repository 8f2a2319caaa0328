"""Every model family against Hugging Face transformers (PyTorch): a small random model of
each family is saved as a Hugging Face directory (config.json + model.safetensors); redco
loads it and must match the logits (relative error < 1e-5) and every parameter gradient
of the LM loss (< 1e-4). Then redco saves the model again, and the file must load in the
safetensors library and in transformers with identical tensors.

Dropout: a model of each family with its config's dropouts set (each probability its own
value) in train mode. redco writes the factors of its training graph's dropout sites in the
order it records them (test_models --dropout-masks); transformers runs with
torch.nn.functional.dropout replaced by "take the next factor" (which must have the input's
shape and the probability transformers passes), so every site must be where transformers
drops, in its order and with its probability; then redco's training graph must match
transformers' logits and gradients, with attention unfused and fused (the same masks).

Run by CTest as: python test_models_ref.py --redco R --build B --source S
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers as T
from safetensors.torch import load_file, save_file

B, TGT, SRC = 2, 7, 9


def cases():
    """(name, model) pairs covering GQA, untied heads, post-LN OPT, partial rotary, GPT-J's
    tied head and both T5 feed-forward forms."""
    yield "gpt2", T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4))
    yield "gpt2-untied-gelu", T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=48,
        activation_function="gelu", tie_word_embeddings=False))
    yield "llama-gqa-untied", T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rope_theta=500.0, rms_norm_eps=1e-5))
    yield "llama-tied-mha", T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32,
        tie_word_embeddings=True))
    yield "mistral", T.MistralForCausalLM(T.MistralConfig(
        vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=32,
        sliding_window=64))
    yield "opt-pre-ln", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, word_embed_proj_dim=32))
    yield "opt-post-ln-proj", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, word_embed_proj_dim=16, do_layer_norm_before=False))
    yield "opt-no-affine-no-final-ln", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, layer_norm_elementwise_affine=False,
        _remove_final_layer_norm=True))
    yield "gptj-partial-rotary", T.GPTJForCausalLM(T.GPTJConfig(
        vocab_size=103, n_positions=16, n_embd=32, n_layer=2, n_head=4, rotary_dim=4))
    yield "t5-gated-gelu", T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3,
        num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
        relative_attention_num_buckets=8, relative_attention_max_distance=16))
    yield "t5-relu-tied", T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
        feed_forward_proj="relu", relative_attention_num_buckets=8,
        relative_attention_max_distance=16))
    # last, so the cases above keep their random draws: GPT-J's head tied to wte (its bias
    # stays its own), as GPTJForCausalLM ties it when the config says so
    yield "gptj-tied", T.GPTJForCausalLM(T.GPTJConfig(
        vocab_size=103, n_positions=16, n_embd=32, n_layer=2, n_head=4, rotary_dim=8,
        tie_word_embeddings=True))


def dropout_cases():
    """(name, model): each family with dropout, the probabilities set apart so that a site
    taking another's shows; attention eager, where transformers drops through dropout()."""
    yield "gpt2-dropout", T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.1,
        embd_pdrop=0.2, attn_pdrop=0.3))
    yield "llama-gqa-dropout", T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        attention_dropout=0.3, attn_implementation="eager"))
    yield "opt-pre-ln-dropout", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, word_embed_proj_dim=32, dropout=0.1, attention_dropout=0.3,
        attn_implementation="eager"))
    yield "opt-post-ln-proj-dropout", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, word_embed_proj_dim=16, do_layer_norm_before=False,
        dropout=0.2, attention_dropout=0.1, attn_implementation="eager"))
    yield "gptj-dropout", T.GPTJForCausalLM(T.GPTJConfig(
        vocab_size=103, n_positions=16, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
        resid_pdrop=0.1, embd_pdrop=0.2, attn_pdrop=0.3))
    yield "t5-gated-gelu-dropout", T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3,
        num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.2))
    yield "t5-relu-tied-dropout", T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
        feed_forward_proj="relu", relative_attention_num_buckets=8,
        relative_attention_max_distance=16, dropout_rate=0.3))


def randomise(model, gen):
    """Weights far from the defaults so every term matters (norm weights around 1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name or "ln_" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(0.15 * noise)


def inputs(model, gen):
    """(the model's keyword inputs, the tensors ref.safetensors holds: ids, labels)"""
    cfg = model.config
    ids = torch.randint(0, cfg.vocab_size, (B, TGT), generator=gen)
    labels = torch.randint(0, cfg.vocab_size, (B, TGT), generator=gen)
    labels[0, 1] = -100
    feed = {"input_ids": ids}
    tensors = {"input_ids": ids.int(), "labels": labels.int()}
    if cfg.model_type == "t5":
        enc = torch.randint(0, cfg.vocab_size, (B, SRC), generator=gen)
        feed = {"input_ids": enc, "decoder_input_ids": ids}
        tensors["encoder_ids"] = enc.int()
    return feed, tensors


def run_reference(model, feed, tensors, out_dir):
    """logits, loss and gradients into out_dir/ref.safetensors beside the inputs"""
    cfg = model.config
    labels = tensors["labels"].long()
    logits = model(**feed).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), labels.reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    tensors["logits"] = logits.detach().contiguous()
    tensors["loss"] = loss.detach().reshape(1)
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().contiguous()
    save_file(tensors, os.path.join(out_dir, "ref.safetensors"))


def reference(name, model, out_dir, gen):
    model.eval()
    feed, tensors = inputs(model, gen)
    model.save_pretrained(out_dir, safe_serialization=True)
    run_reference(model, feed, tensors, out_dir)


class TakeMasks:
    """torch.nn.functional.dropout's stand-in: multiplies by redco's next factor"""

    def __init__(self, masks, real):
        self.masks, self.real, self.used, self.bad = masks, real, 0, []

    def __call__(self, x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        name = f"mask.{self.used}"
        self.used += 1
        m = self.masks.get(name)
        if m is not None and m.numel() == x.numel():  # OPT drops [B H, T, T] and [B T, C] views
            m = m.reshape(x.shape)
        if m is None or tuple(m.shape) != tuple(x.shape):
            self.bad.append(f"{name}: redco {None if m is None else tuple(m.shape)}, "
                            f"transformers drops {tuple(x.shape)} (p {p})")
            return self.real(x, p, training, inplace)
        kept = m[m != 0]
        if kept.numel() and abs(float(kept[0]) - 1 / (1 - p)) > 1e-6 * (1 / (1 - p)):
            self.bad.append(f"{name}: redco keeps x {float(kept[0]):.6f}, transformers' p {p}")
        return x * m


def train_reference(name, model, out_dir, gen, tool):
    """train mode with redco's dropout masks; None when they line up, else why not"""
    model.train()
    feed, tensors = inputs(model, gen)
    model.save_pretrained(out_dir, safe_serialization=True)
    save_file(tensors, os.path.join(out_dir, "ref.safetensors"))
    r = subprocess.run([tool, "--dropout-masks", out_dir], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode:
        return "--dropout-masks: " + r.stderr.strip()
    real = torch.nn.functional.dropout
    take = TakeMasks(load_file(os.path.join(out_dir, "masks.safetensors")), real)
    torch.nn.functional.dropout = take
    try:
        run_reference(model, feed, tensors, out_dir)
    finally:
        torch.nn.functional.dropout = real
    if take.used != len(take.masks):
        take.bad.append(f"transformers dropped at {take.used} sites, redco at {len(take.masks)}")
    return "; ".join(take.bad) or None


def compare(tool, mode, model_dir):
    """test_models MODE DIR, its output shown: True when redco matched the reference"""
    r = subprocess.run([tool, mode, model_dir], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode:
        sys.stdout.write(r.stderr)
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    tool = os.path.join(args.build, "test_models")
    failed = 0
    gen = torch.Generator().manual_seed(1234)
    torch.manual_seed(1234)
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in cases():
            d = os.path.join(tmp, name)
            randomise(model, gen)
            reference(name, model, d, gen)
            if not compare(tool, "--compare", d):
                failed += 1
                print(f"FAIL {name}: redco differs from transformers")
                continue
            out = os.path.join(tmp, name + "-resaved")
            r = subprocess.run([tool, "--resave", d, out], capture_output=True, text=True)
            if r.returncode:
                failed += 1
                print(f"FAIL {name}: resave: {r.stderr.strip()}")
                continue
            saved = load_file(os.path.join(out, "model.safetensors"))
            again = type(model).from_pretrained(out)
            want = {k: v for k, v in model.state_dict().items()}
            got = again.state_dict()
            bad = [k for k in want if not torch.equal(want[k], got[k])]
            missing = [k for k in want if k not in got]
            if bad or missing or not saved:
                failed += 1
                print(f"FAIL {name}: reloaded tensors differ: {(bad + missing)[:5]}")
            else:
                print(f"{name}: saved by redco, reloaded by transformers: {len(want)} tensors identical")
        for name, model in dropout_cases():
            d = os.path.join(tmp, name)
            randomise(model, gen)
            why = train_reference(name, model, d, gen, tool)
            if why:
                failed += 1
                print(f"FAIL {name}: dropout sites differ: {why}")
                continue
            if not compare(tool, "--compare-train", d):
                failed += 1
                print(f"FAIL {name}: redco's training graph differs from transformers' in train mode")
    total = sum(1 for _ in cases()) + sum(1 for _ in dropout_cases())
    print(f"test_models_ref: {total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
