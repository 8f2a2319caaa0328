"""Every model family against Hugging Face transformers (PyTorch): a small random model of
each family is saved as a Hugging Face directory (config.json + model.safetensors); redco
loads it and must match the logits (relative error < 1e-5) and every parameter gradient
of the LM loss (< 1e-4). Then redco saves the model again, and the file must load in the
safetensors library and in transformers with identical tensors.

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


def randomise(model, gen):
    """Weights far from the defaults so every term matters (norm weights around 1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name or "ln_" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(0.15 * noise)


def reference(name, model, out_dir, gen):
    model.eval()
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
    logits = model(**feed).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), labels.reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    tensors["logits"] = logits.detach().contiguous()
    tensors["loss"] = loss.detach().reshape(1)
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().contiguous()
    model.save_pretrained(out_dir, safe_serialization=True)
    save_file(tensors, os.path.join(out_dir, "ref.safetensors"))


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
            r = subprocess.run([tool, "--compare", d], capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode:
                failed += 1
                sys.stdout.write(r.stderr)
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
    total = sum(1 for _ in cases())
    print(f"test_models_ref: {total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
