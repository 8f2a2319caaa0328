#!/usr/bin/env python3
"""redco's tokenizers against the reference libraries.

- GPT-2 (byte-level BPE): ids equal tokenizers.Tokenizer.from_file(gpt2/tokenizer.json) on
  the whole of Moby Dick and on a Unicode stress text, for tokenizer.json and for
  vocab.json + merges.txt; decode(encode(text)) == text; post-processors (a RoBERTa one and
  an OPT-style template) written into copies of tokenizer.json add what tokenizers adds.
- The SentencePiece models (BPE with byte fallback, unigram): ids equal the sentencepiece
  library's on the first 300 KB of the Austen text (data/austen_excerpt.txt), line by line,
  and on the stress text;
  redco's decode equals sentencepiece's decode of those ids.
- The same models as tokenizer.json (converted here by transformers into a temporary
  directory): ids equal the fast tokenizers' with and without special tokens; decode
  equals tokenizers' decode, with and without skip_special_tokens.
- The CLI refuses bad input with one "redco tokenize: ..." line and a non-zero exit.

Usage: test_tokenizer_ref.py --redco BUILD/redco --build BUILD --source REPO (data: REPO/data)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

STRESS = (
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d \u2018single\u2019 \u00c5ngstr\u00f6m "
    "e\u0301t\u00e9 decomposed\n"
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4 "
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 "
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0391\u03b8\u03ae\u03bd\u03b1 "
    "\u041c\u043e\u0441\u043a\u0432\u0430\n"
    "\U0001F468\u200d\U0001F469\u200d\U0001F467 family \U0001F44D\U0001F3FD thumbs "
    "\U0001F1EB\U0001F1F7 flag 1\ufe0f\u20e3 keycap \u2764\ufe0f \U0001F600\U0001F600\n"
    "tab\there\t\tdouble\r\nCRLF line\u00a0nbsp\u00a0\u00a0two  spaces   three    four\u3000ideo \n"
    "It's I'M he'LL we'd THEY'RE 'S don't y'all rock'n'roll ''quoted''\n"
    "1234567 3.14159 1,000,000 -42 +7 \u00bd \u2460 \u2167 x\u00b2 \u0661\u0662\u0663\n"
    "before<|endoftext|>after <|endoftext|> spaced\n"
    "\ufb01 ligature \uff26\uff55\uff4c\uff4c width \u33cf \u2126 \u212b\n"
    "zero\u200bwidth soft\u00adhyphen a\u200db \uff21\u0301b \u1100\u1161\u11a8 \u3131\u314f \u00c5\u030a\n"
    "   leading and trailing   \n\n\n"
    "end with spaces   "
)

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def same_ids(got, ref, what):
    ok = got == ref
    if not ok:
        i = first_diff(got, ref)
        what += " (first difference at %d of %d/%d: redco %s, reference %s)" % (
            i, len(got), len(ref), got[max(0, i - 3):i + 5], ref[max(0, i - 3):i + 5])
    check(ok, what)


class Redco:
    def __init__(self, exe):
        self.exe = exe

    def run(self, tok, data, *flags, expect_ok=True):
        p = subprocess.run([self.exe, "tokenize", "--tokenizer", tok] + list(flags), input=data,
                           capture_output=True, timeout=120)
        if expect_ok and p.returncode != 0:
            raise RuntimeError("redco tokenize %s %s failed: %s" % (tok, flags, p.stderr.decode(errors="replace")))
        return p

    def encode(self, tok, text, special=False):
        out = self.run(tok, text.encode(), *([] if special else ["--no-special"])).stdout
        return [int(x) for x in out.split()]

    def encode_lines(self, tok, lines, special=False):
        assert all("\n" not in l for l in lines)
        out = self.run(tok, "\n".join(lines).encode(), "--lines", *([] if special else ["--no-special"])).stdout
        rows = out.decode().split("\n")
        return [[int(x) for x in r.split()] for r in rows[:len(lines)]]

    def decode(self, tok, ids, skip=False):
        data = " ".join(map(str, ids)).encode()
        return self.run(tok, data, "--decode", *(["--no-special"] if skip else [])).stdout.decode()

    def decode_lines(self, tok, rows):
        data = "\n".join(" ".join(map(str, r)) for r in rows).encode()
        out = self.run(tok, data, "--decode", "--lines").stdout.decode()
        return out.split("\n")[:len(rows)]


def read_text(path, limit=None):
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    return text[:limit] if limit else text


def test_gpt2(r, data, tmp):
    from tokenizers import Tokenizer
    gdir = os.path.join(data, "gpt2")
    ref = Tokenizer.from_file(os.path.join(gdir, "tokenizer.json"))
    moby = read_text(os.path.join(data, "moby_dick.txt"))
    ref_moby = ref.encode(moby).ids
    ref_stress = ref.encode(STRESS).ids
    for form in [gdir, os.path.join(gdir, "vocab.json")]:
        name = "gpt2 " + os.path.basename(form)
        got = r.encode(form, moby)
        same_ids(got, ref_moby, name + ": Moby Dick ids")
        check(r.decode(form, got) == moby, name + ": decode(encode(Moby Dick)) == Moby Dick")
        got = r.encode(form, STRESS)
        same_ids(got, ref_stress, name + ": stress text ids")
        check(r.decode(form, got) == STRESS, name + ": stress text round trip")
        check(r.decode(form, got) == ref.decode(got, skip_special_tokens=False), name + ": decode as tokenizers")
        check(r.decode(form, got, skip=True) == ref.decode(got, skip_special_tokens=True),
              name + ": decode skipping specials as tokenizers")
        check(r.encode(form, STRESS, special=True) == ref_stress, name + ": GPT-2 adds no special tokens")
    # post-processors are read from the file: an OPT-like template and RoBERTa's
    with open(os.path.join(gdir, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    posts = {
        "opt": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}},
        "roberta": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 50256], "cls": ["<|endoftext|>", 50256],
                    "trim_offsets": True, "add_prefix_space": False},
    }
    for name, post in posts.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        j = dict(base)
        j["post_processor"] = post
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f)
        t = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        text = "Hello there, world."
        same_ids(r.encode(d, text, special=True), t.encode(text).ids, name + " post-processor: ids with specials")
        same_ids(r.encode(d, text), t.encode(text, add_special_tokens=False).ids, name + ": ids without specials")
    # added tokens with lstrip / rstrip / single_word, as RoBERTa's <mask>
    d = os.path.join(tmp, "added")
    os.makedirs(d)
    j = dict(base)
    j["added_tokens"] = base["added_tokens"] + [
        {"id": 50257, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 50258, "content": "[R]", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": False, "special": False},
        {"id": 50259, "content": "ww", "single_word": True, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False}]
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f)
    t = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    for text in ["Hello  <mask> world<mask>!", "a [R]   b[R]\n c", "ww awwa ww, (ww) wwx", STRESS]:
        same_ids(r.encode(d, text), t.encode(text).ids, "added tokens with options: %r" % text[:40])
        ids = t.encode(text).ids
        check(r.decode(d, ids, skip=True) == t.decode(ids, skip_special_tokens=True),
              "added tokens decode skipping specials: %r" % text[:40])


def spm_lines(data):
    austen = read_text(os.path.join(data, "austen_excerpt.txt"), 300000)
    check(len(austen) == 300000, "data/austen_excerpt.txt holds fewer than 300000 characters")
    return austen.split("\n")


def test_spm(r, data):
    import sentencepiece as spm
    lines = spm_lines(data)
    for name, add in [("austen_bpe4k", "bos"), ("austen_unigram4k", "eos")]:
        path = os.path.join(data, "spm", name + ".model")
        sp = spm.SentencePieceProcessor(model_file=path)
        ref = [sp.encode(l) for l in lines]
        got = r.encode_lines(path, lines)
        bad = [i for i in range(len(lines)) if got[i] != ref[i]]
        check(not bad, "%s: ids on %d Austen lines (%d differ%s)" % (
            name, len(lines), len(bad), ", first %r: %s vs %s" % (lines[bad[0]], got[bad[0]], ref[bad[0]]) if bad else ""))
        dec = r.decode_lines(path, ref)
        bad = [i for i in range(len(lines)) if dec[i] != sp.decode(ref[i])]
        check(not bad, "%s: decode equals sentencepiece's on the Austen lines (%d differ)" % (name, len(bad)))
        got = r.encode(path, STRESS)
        same_ids(got, sp.encode(STRESS), name + ": stress text ids")
        check(r.decode(path, got) == sp.decode(got), name + ": stress text decode equals sentencepiece's")
        for i, l in enumerate(STRESS.split("\n")):
            same_ids(r.encode(path, l), sp.encode(l), "%s: stress line %d" % (name, i))
        text = "It is a truth universally acknowledged."
        plain = sp.encode(text)
        want = [sp.bos_id()] + plain if add == "bos" else plain + [sp.eos_id()]
        check(r.encode(path, text, special=True) == want, name + ": add_special adds " + add.upper())


def test_spm_variants(r, data, tmp):
    """The models with user-defined pieces (matched whole) and pieces marked UNUSED."""
    import sentencepiece as spm
    # the protobuf module transformers' converter uses too (two modules registering
    # sentencepiece_model.proto clash)
    from transformers.convert_slow_tokenizer import import_protobuf
    pb = import_protobuf()
    kind = pb.ModelProto.SentencePiece
    lines = spm_lines(data)[:2000] + ["a<sep>b Mr. Darcy<sep><sep>", "the thing and nothing", "Mr.Mr. x<sep", STRESS]
    lines = [l for text in lines for l in text.split("\n")]
    for name in ["austen_bpe4k", "austen_unigram4k"]:
        m = pb.ModelProto()
        with open(os.path.join(data, "spm", name + ".model"), "rb") as f:
            m.ParseFromString(f.read())
        for text in ["<sep>", "Mr."]:
            p = m.pieces.add()
            p.piece, p.score, p.type = text, 0.0, kind.USER_DEFINED
        for p in m.pieces:
            if p.piece in ("\u2581the", "\u2581and", "ing"):
                p.type = kind.UNUSED
        path = os.path.join(tmp, name + "_variant.model")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        sp = spm.SentencePieceProcessor(model_file=path)
        got = r.encode_lines(path, lines)
        bad = [i for i in range(len(lines)) if got[i] != sp.encode(lines[i])]
        check(not bad, "%s with user-defined and unused pieces: ids on %d lines (%d differ%s)" % (
            name, len(lines), len(bad), ", first %r" % lines[bad[0]] if bad else ""))


def test_spm_json(r, data, tmp):
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizerFast, T5TokenizerFast
    from transformers.utils import logging
    logging.set_verbosity_error()
    lines = spm_lines(data)
    made = {
        "llama_json": lambda p: LlamaTokenizerFast(vocab_file=p),
        "t5_json": lambda p: T5TokenizerFast(vocab_file=p, extra_ids=0),
    }
    models = {"llama_json": "austen_bpe4k", "t5_json": "austen_unigram4k"}
    for name, make in made.items():
        d = os.path.join(tmp, name)
        make(os.path.join(data, "spm", models[name] + ".model")).save_pretrained(d)
        if os.path.exists(os.path.join(d, "tokenizer.model")):
            os.remove(os.path.join(d, "tokenizer.model"))  # redco must read tokenizer.json
        hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        for special in (False, True):
            ref = [e.ids for e in hf.encode_batch(lines, add_special_tokens=special)]
            got = r.encode_lines(d, lines, special)
            bad = [i for i in range(len(lines)) if got[i] != ref[i]]
            check(not bad, "%s: ids on %d Austen lines, specials %s (%d differ%s)" % (
                name, len(lines), special, len(bad),
                ", first %r: %s vs %s" % (lines[bad[0]], got[bad[0]], ref[bad[0]]) if bad else ""))
            ids = r.encode(d, STRESS, special)
            same_ids(ids, hf.encode(STRESS, add_special_tokens=special).ids, "%s: stress ids, specials %s" % (name, special))
            for skip in (False, True):
                check(r.decode(d, ids, skip) == hf.decode(ids, skip_special_tokens=skip),
                      "%s: stress decode (specials %s, skip %s) equals tokenizers'" % (name, special, skip))
        # added tokens inside the text are cut out first; each segment is normalized alone
        for text in ["Hello <s> world </s> end", "<unk>x</s></s>  <pad> y", "</s>"]:
            for special in (False, True):
                same_ids(r.encode(d, text, special), hf.encode(text, add_special_tokens=special).ids,
                         "%s: added tokens in %r, specials %s" % (name, text, special))
        rows = [e.ids for e in hf.encode_batch(lines[:500])]
        dec = r.decode_lines(d, rows)
        bad = [i for i in range(len(rows)) if dec[i] != hf.decode(rows[i], skip_special_tokens=False)]
        check(not bad, "%s: decode of Austen lines equals tokenizers' (%d differ)" % (name, len(bad)))


def test_cli_errors(r, data, tmp):
    gdir = os.path.join(data, "gpt2")

    def fails(args, data, what):
        p = subprocess.run([r.exe, "tokenize"] + args, input=data, capture_output=True, timeout=60)
        err = p.stderr.decode(errors="replace")
        check(p.returncode != 0 and err.startswith("redco tokenize: ") and err.count("\n") == 1,
              "CLI %s: exit %d, stderr %r" % (what, p.returncode, err))

    fails(["--tokenizer", gdir], b"ok \xff\xfe bad", "invalid UTF-8")
    fails(["--tokenizer", gdir, "--decode"], b"15496 50257", "id past the vocabulary")
    fails(["--tokenizer", gdir, "--decode"], b"15496 abc", "a word that is not an id")
    fails(["--tokenizer", os.path.join(tmp, "nowhere")], b"x", "missing tokenizer")
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}')
    fails(["--tokenizer", bad], b"x", "bad merges")
    fails([], b"x", "no --tokenizer")
    fails(["--tokenizer", gdir, "--bogus"], b"x", "unknown option")
    p = subprocess.run([r.exe, "tokenize", "--help"], capture_output=True, timeout=60)
    check(p.returncode == 0 and b"usage: redco tokenize" in p.stdout, "CLI --help")
    p = subprocess.run([r.exe, "tokenize", "--tokenizer", gdir, "Hello world"], capture_output=True, timeout=60)
    check(p.returncode == 0 and p.stdout == b"15496 995\n", "CLI TEXT argument: %r" % p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redco", required=True)
    ap.add_argument("--build")
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    data = os.path.join(a.source, "data")
    try:
        import sentencepiece  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print("FAIL: reference package missing:", e)
        return 1
    r = Redco(a.redco)
    with tempfile.TemporaryDirectory() as tmp:
        test_gpt2(r, data, tmp)
        test_spm(r, data)
        test_spm_variants(r, data, tmp)
        test_spm_json(r, data, tmp)
        test_cli_errors(r, data, tmp)
    if failures:
        print("tokenizer reference: %d check(s) failed" % len(failures))
        return 1
    print("tokenizer reference: all checks passed (GPT-2 x2 forms, SentencePiece BPE/unigram as .model and tokenizer.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
