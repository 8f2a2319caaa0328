"""Generation against Hugging Face transformers (PyTorch): small random models of every
family are saved as Hugging Face directories; redco loads each (rc_model_create) and its
generated token ids must equal transformers' generate():

  greedy   model.generate(ids, max_new_tokens=N, do_sample=False) for GPT-2, LLaMA (GQA),
           OPT, GPT-J and T5; once with no EOS in reach (all N tokens), and once with an EOS
           id taken from that output, so both stop at the same place with the EOS included;
  beams    num_beams=3, do_sample=False, early_stopping=False, length_penalty=1.0 for T5
           (its config's EOS, and an EOS that occurs in the search) and GPT-2.

redco prints the new tokens only; transformers returns the prompt (decoder-only) or the
decoder start token (T5) first, which is cut before comparing.

Run by CTest as: python test_generate_ref.py --redco R --build B --source S
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers as T

NEW = 10


def cases():
    yield "gpt2", T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4))
    yield "llama-gqa", T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rope_theta=500.0))
    yield "opt", T.OPTForCausalLM(T.OPTConfig(
        vocab_size=99, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, word_embed_proj_dim=32, pad_token_id=1))
    yield "gptj", T.GPTJForCausalLM(T.GPTJConfig(
        vocab_size=103, n_positions=32, n_embd=32, n_layer=2, n_head=4, rotary_dim=4))
    yield "t5", T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3,
        num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
        decoder_start_token_id=0))


def randomise(model, gen):
    """Weights far from the initialisation so outputs vary and near-ties are rare."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name or "ln_" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(0.3 * noise)


def hf_generate(model, ids, eos, beams):
    cfg = model.config
    kw = dict(max_new_tokens=NEW, do_sample=False, num_beams=beams, eos_token_id=eos,
              pad_token_id=cfg.pad_token_id if cfg.pad_token_id is not None else 0)
    if beams > 1:
        kw.update(early_stopping=False, length_penalty=1.0)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), **kw)[0].tolist()
    skip = 1 if cfg.is_encoder_decoder else len(ids)
    return out[skip:]


def redco_generate(tool, d, ids, eos, beams):
    cmd = [tool, "--generate", d, "--ids", ",".join(map(str, ids)), "--max-new", str(NEW),
           "--eos", str(eos), "--beams", str(beams)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()
    return [int(x) for x in r.stdout.split()], ""


def first_fresh(tokens):
    """the first token (after the first) that did not occur before it, or None"""
    for i in range(1, len(tokens)):
        if tokens[i] not in tokens[:i]:
            return tokens[i]
    return None


def main():
    ap = argparse.ArgumentParser()
    for a in ("--redco", "--build", "--source"):
        ap.add_argument(a)
    args = ap.parse_args()
    tool = os.path.join(args.build, "test_generate")
    failed = checked = 0
    gen = torch.Generator().manual_seed(4321)
    torch.manual_seed(4321)

    def check(label, d, model, ids, eos, beams):
        nonlocal failed, checked
        want = hf_generate(model, ids, eos if eos >= 0 else None, beams)
        got, msg = redco_generate(tool, d, ids, eos, beams)
        checked += 1
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {label}: transformers {want} redco {got if got is not None else msg}")
        failed += not ok
        return want

    with tempfile.TemporaryDirectory() as tmp:
        for name, model in cases():
            randomise(model, gen)
            model.eval()
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            V = model.config.vocab_size
            ids = torch.randint(0, V, (6,), generator=gen).tolist()
            none = V + 7  # an EOS id that can never be generated
            greedy = check(f"{name} greedy", d, model, ids, none, 1)
            eos = first_fresh(greedy)
            if eos is None:
                print(f"FAIL {name}: greedy output {greedy} repeats one token; pick another seed")
                failed += 1
            else:
                check(f"{name} greedy, EOS {eos}", d, model, ids, eos, 1)
            if name in ("t5", "gpt2"):
                beams = check(f"{name} 3 beams, no EOS", d, model, ids, none, 3)
                if name == "t5":
                    check(f"{name} 3 beams, EOS {model.config.eos_token_id}", d, model, ids,
                          model.config.eos_token_id, 3)
                # an EOS among the search's likely tokens: hypotheses end early and the
                # "done" heuristic and finalisation decide the result
                for e in sorted(set(beams[:6]) | ({eos} if eos is not None else set())):
                    check(f"{name} 3 beams, EOS {e}", d, model, ids, e, 3)
    print(f"test_generate_ref: {checked - failed} of {checked} generations equal transformers")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
