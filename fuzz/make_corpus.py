"""make_corpus.py ROOT - writes the seed corpora fuzz/corpus/NAME/ of the repository at ROOT:
small valid files of each format, made with the reference Python packages (numpy,
transformers, tokenizers, sentencepiece) from data/. Run with .venv/pyref/bin/python."""
import json, os, struct, gzip, io, sys, tempfile
import numpy as np
tmp = tempfile.mkdtemp()
root = sys.argv[1]; C = os.path.join(root, 'fuzz/corpus'); SEP = b"\n--8<--\n"
def put(name, fname, data):
    d = os.path.join(C, name); os.makedirs(d, exist_ok=True)
    if isinstance(data, str): data = data.encode()
    open(os.path.join(d, fname), 'wb').write(data)
def st(tensors, meta=None):
    hdr = {}; buf = b''
    if meta: hdr['__metadata__'] = meta
    for name, (dt, shape, raw) in tensors.items():
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(buf), len(buf) + len(raw)]}; buf += raw
    h = json.dumps(hdr, separators=(',', ':')).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
    return struct.pack('<Q', len(h)) + h + buf
f32 = lambda a: np.asarray(a, '<f4').tobytes()
put('safetensors', 'f32_f16', st({'wte.weight': ('F32', [2, 3], f32(range(6))), 'ln.bias': ('F16', [3], np.asarray([1, -2, 65504], '<f2').tobytes())}, {'format': 'pt'}))
put('safetensors', 'bf16_f64_i32', st({'a': ('BF16', [2], b'\x80\x3f\x00\xc0'), 'b': ('F64', [1, 2], np.asarray([1.5, -3], '<f8').tobytes()), 'c': ('I32', [], struct.pack('<i', 7)), 'e': ('F32', [0, 4], b'')}))
put('checkpoint_index', 'two_shards', json.dumps({'metadata': {'total_size': 16}, 'weight_map': {'a': 'model-00001-of-00002.safetensors', 'b': 'model-00002-of-00002.safetensors'}}).encode() + SEP + st({'a': ('F32', [2], f32([1, 2]))}))
put('checkpoint_index', 'one_shard', json.dumps({'weight_map': {'transformer.h.0.ln_1.weight': 'model-00001-of-00002.safetensors', 'x': 'model-00001-of-00002.safetensors'}}).encode() + SEP + st({'transformer.h.0.ln_1.weight': ('F32', [2], f32([1, 2])), 'x': ('F16', [1], b'\x00\x3c')}))
from transformers import GPT2Config, LlamaConfig, OPTConfig, T5Config, BertConfig, MistralConfig
for name, cfg in [('gpt2', GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)),
                  ('llama', LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)),
                  ('opt', OPTConfig(hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100, word_embed_proj_dim=32)),
                  ('t5', T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, vocab_size=100)),
                  ('bert', BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)),
                  ('mistral', MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=100))]:
    put('config', name, cfg.to_json_string())
# tokenizers
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, normalizers, processors
text = open(os.path.join(root, 'data/austen_excerpt.txt')).read()[:20000]
lines = text.splitlines()
t = Tokenizer(models.BPE()); t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False); t.decoder = decoders.ByteLevel()
t.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=['<|endoftext|>']))
t.post_processor = processors.ByteLevel(trim_offsets=False)
put('tokenizer_json', 'bytelevel_bpe', t.to_str())
d = json.loads(t.to_str()); vocab = d['model']['vocab']; merges = d['model']['merges']
merges = [m if isinstance(m, str) else ' '.join(m) for m in merges]
put('bpe_files', 'gpt2_style', json.dumps(vocab).encode() + SEP + ('#version: 0.2\n' + '\n'.join(merges) + '\n').encode())
put('bpe_files', 'tiny', json.dumps({'a': 0, 'b': 1, 'ab': 2, '\u0120': 3, '\u0120a': 4, '<|endoftext|>': 5}).encode() + SEP + b'#version: 0.2\na b\n\xc4\xa0 a\n')
w = Tokenizer(models.WordPiece(unk_token='[UNK]')); w.normalizer = normalizers.BertNormalizer(lowercase=True); w.pre_tokenizer = pre_tokenizers.BertPreTokenizer(); w.decoder = decoders.WordPiece()
w.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=200, special_tokens=['[PAD]', '[UNK]', '[CLS]', '[SEP]']))
w.post_processor = processors.TemplateProcessing(single='[CLS] $A [SEP]', pair='[CLS] $A [SEP] $B:1 [SEP]:1', special_tokens=[('[CLS]', 2), ('[SEP]', 3)])
put('tokenizer_json', 'wordpiece', w.to_str())
u = Tokenizer(models.Unigram()); u.normalizer = normalizers.Sequence([normalizers.Replace(' ', '\u2581'), normalizers.Prepend('\u2581')]) if hasattr(normalizers, 'Prepend') else normalizers.Replace(' ', '\u2581')
u.pre_tokenizer = pre_tokenizers.Metaspace(); u.decoder = decoders.Metaspace()
u.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=150, special_tokens=['<pad>', '</s>', '<unk>'], unk_token='<unk>'))
u.post_processor = processors.TemplateProcessing(single='$A </s>', special_tokens=[('</s>', 1)])
put('tokenizer_json', 'unigram', u.to_str())
import sentencepiece as spm
open(os.path.join(tmp, 'austen.txt'), 'w').write(''.join(c for c in text if ord(c) < 128))
for mt in ['bpe', 'unigram']:
    spm.SentencePieceTrainer.train(input=os.path.join(tmp, 'austen.txt'), model_prefix=os.path.join(tmp, mt), vocab_size=(330 if mt == 'bpe' else 90), model_type=mt, character_coverage=1.0,
                                   normalization_rule_name='identity', byte_fallback=(mt == 'bpe'), minloglevel=2)
    put('spm_model', mt, open(os.path.join(tmp, mt + '.model'), 'rb').read())
# datasets: first byte even -> .txt, odd -> .jsonl
put('dataset', 'txt', b'\x00' + text[:1500].encode())
put('dataset', 'jsonl_text', b'\x01' + b''.join(json.dumps({'text': l}).encode() + b'\n' for l in lines[:8] if l))
put('dataset', 'jsonl_instruct', b'\x01' + b''.join(json.dumps({'prompt': 'Q: ' + l[:20], 'completion': ' ' + l[20:60]}).encode() + b'\n' for l in lines[:6] if l))
put('dataset', 'jsonl_seq2seq', b'\x01' + b''.join(json.dumps({'source': l[:30], 'target': l[30:50]}).encode() + b'\n' for l in lines[:6] if l))
for dt in ['<i4', '<u2', '<i8']:
    b = io.BytesIO(); np.save(b, np.arange(40, dtype=dt) * 7); put('npy', dt[1:], b.getvalue())
b = io.BytesIO(); np.lib.format.write_array(b, np.arange(10, dtype='<i4'), version=(2, 0)); put('npy', 'v2', b.getvalue())
b = io.BytesIO(); np.save(b, np.zeros(0, dtype='<i4')); put('npy', 'empty', b.getvalue())
raw = gzip.open(os.path.join(root, 'data/fashion-mnist/t10k-images-idx3-ubyte.gz')).read()
img = raw[:4] + struct.pack('>III', 3, 28, 28) + raw[16:16 + 3 * 28 * 28]
put('idx', 'images3', img)
put('idx', 'images3_gz', gzip.compress(img, mtime=0))
put('idx', 'labels1d', bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 9]))
