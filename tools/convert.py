#!/usr/bin/env python3
"""Converts a nanoGPT checkpoint (ckpt.pt, as saved by nanoGPT's train.py) or a Hugging Face
GPT-2 folder to a GGUF model file for gpt2.h. Standard library only: PyTorch is not needed, the
checkpoint's pickle is read with an unpickler that refuses anything but tensors, dicts, lists,
strings and numbers, and safetensors files with our own checked reader.

    python3 tools/convert.py out-shakespeare-char/ckpt.pt -o shakespeare.gguf
    python3 tools/convert.py out-gpt2/ckpt.pt -o gpt2.gguf --vocab gpt2-bpe/ --dtype f16
    python3 tools/convert.py gpt2-medium/ -o gpt2-medium.gguf

A Hugging Face folder holds config.json and model.safetensors or pytorch_model.bin, as
save_pretrained writes them (keys transformer.h.0...) or as OpenAI's GPT-2 sizes are published
(keys h.0...), and its vocab.json + merges.txt; shapes, layer_norm_epsilon and the GELU
(activation_function) come from config.json.

Vocabulary: a nanoGPT character vocabulary (meta.pkl) is taken from --meta, or found beside the
checkpoint as NAME.meta.pkl or meta.pkl; a GPT-2 BPE vocabulary comes from --vocab DIR. Without
either, the model is converted for token ids only. nanoGPT pads GPT-2's 50257-token vocabulary
to 50304 rows; the padding rows are dropped so they can never be sampled. See docs/FORMAT.md.
"""
import argparse
import json
import os
import pickle
import re
import struct
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
import safetensors_reader  # noqa: E402
import torch_checkpoint  # noqa: E402

CONVERTER_VERSION = "0.1.0"
GPT2_VOCAB_SIZE = 50257      # OpenAI GPT-2 BPE tokens, <|endoftext|> last
NANOGPT_PADDED_VOCAB = 50304  # nanoGPT's vocab_size for GPT-2, rounded up to a multiple of 64
LAYER_NORM_EPS = 1e-5         # nanoGPT's F.layer_norm default
CHUNK_ELEMENTS = 1 << 20      # elements converted at a time: bounds memory, keeps struct fast
# Hugging Face activation_function -> the GELU gpt2.h runs (gelu_new and gelu_fast are the tanh
# approximation OpenAI's GPT-2 was trained with, written two ways; "gelu" is the exact erf form).
HF_GELU = {"gelu_new": "tanh", "gelu_fast": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "erf"}


class ConvertError(Exception):
    """A problem with the user's input; the message is one line."""


# ---- vocabularies ------------------------------------------------------------------------

class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise ConvertError(f"refusing to load meta.pkl: it references {module}.{name}; a nanoGPT "
                           "vocabulary holds only dicts, strings and numbers")


def load_char_vocab(path):
    """nanoGPT's meta.pkl: {'vocab_size': n, 'itos': {id: char}, 'stoi': {char: id}}.
    Returns the characters in id order."""
    try:
        with open(path, "rb") as f:
            meta = _NoGlobalsUnpickler(f).load()
    except ConvertError:
        raise
    except OSError as e:
        raise ConvertError(f"cannot read {path}: {e.strerror}") from None
    except Exception as e:  # any malformed pickle: report it, never a traceback
        raise ConvertError(f"{path} is not a nanoGPT meta.pkl ({type(e).__name__}: {e})") from None
    bad = f"{path} is not a nanoGPT character vocabulary"
    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict) or not isinstance(meta.get("stoi"), dict):
        raise ConvertError(f"{bad} (expected a dict with 'itos' and 'stoi' dicts)")
    itos, stoi = meta["itos"], meta["stoi"]
    n = len(itos)
    if n == 0 or sorted(itos) != list(range(n)):
        raise ConvertError(f"{bad} (itos keys must be the ids 0..{max(n - 1, 0)})")
    chars = [itos[i] for i in range(n)]
    for i, c in enumerate(chars):
        if not isinstance(c, str) or len(c) != 1:
            raise ConvertError(f"{bad} (itos[{i}] is {c!r}, expected a single character)")
    if stoi != {c: i for i, c in enumerate(chars)}:
        raise ConvertError(f"{bad} (stoi is not the inverse of itos)")
    if meta.get("vocab_size", n) != n:
        raise ConvertError(f"{bad} (vocab_size {meta['vocab_size']} but itos has {n} entries)")
    return chars


def load_bpe_vocab(folder):
    """GPT-2 BPE from encoder.json + vocab.bpe (OpenAI) or vocab.json + merges.txt (Hugging Face).
    Returns (tokens in id order, merges in rank order)."""
    for vocab_name, merges_name in (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt")):
        vocab_path, merges_path = os.path.join(folder, vocab_name), os.path.join(folder, merges_name)
        if os.path.exists(vocab_path) and os.path.exists(merges_path):
            break
    else:
        raise ConvertError(f"{folder} holds no GPT-2 vocabulary (expected encoder.json + vocab.bpe, "
                           "or vocab.json + merges.txt)")
    try:
        with open(vocab_path, encoding="utf-8") as f:
            encoder = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise ConvertError(f"cannot read {e.filename}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError(f"{vocab_path} is not a JSON vocabulary ({e})") from None
    if not isinstance(encoder, dict) or not encoder:
        raise ConvertError(f"{vocab_path} is not a token -> id JSON object")
    n = len(encoder)
    tokens = [None] * n
    for token, i in encoder.items():
        if not isinstance(i, int) or not 0 <= i < n or tokens[i] is not None:
            raise ConvertError(f"{vocab_path}: ids must be 0..{n - 1}, each once ({token!r} -> {i!r})")
        tokens[i] = token
    merges = []
    for number, line in enumerate(lines, 1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        if len(line.split(" ")) != 2:
            raise ConvertError(f"{merges_path}:{number}: expected a merge 'a b', got {line[:40]!r}")
        merges.append(line)
    return tokens, merges


# ---- tensors -----------------------------------------------------------------------------

def _float_chunks(tensor, n_elements, out_type):
    """Yields the first n_elements of a float tensor (row-major) as out_type bytes, chunk by chunk."""
    raw = tensor.tobytes()
    size = tensor.itemsize
    for start in range(0, n_elements, CHUNK_ELEMENTS):
        count = min(CHUNK_ELEMENTS, n_elements - start)
        chunk = raw[start * size:(start + count) * size]
        if tensor.dtype == "bfloat16":
            chunk, source = torch_checkpoint.bfloat16_to_float32(chunk), "f"
        else:
            source = {"float32": "f", "float16": "e", "float64": "d"}[tensor.dtype]
        target = "f" if out_type == gguf.F32 else "e"
        if source == target:
            yield bytes(chunk)
            continue
        values = struct.unpack(f"<{count}{source}", chunk)
        try:
            yield struct.pack(f"<{count}{target}", *values)
        except OverflowError:  # beyond float16's range: round to infinity like IEEE casts do
            yield b"".join(_pack_saturating(target, v) for v in values)
    tensor.storage.release()


def _pack_saturating(code, v):
    try:
        return struct.pack("<" + code, v)
    except OverflowError:
        return struct.pack("<" + code, float("inf") if v > 0 else float("-inf"))


def _shape(t):
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def read_model(ckpt_path):
    """Loads the checkpoint; returns (state dict with clean keys, model_args, checkpoint dict)."""
    ckpt = torch_checkpoint.load(ckpt_path)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise ConvertError(f"{ckpt_path} is not a nanoGPT checkpoint (no 'model' state_dict)")
    if not isinstance(ckpt.get("model_args"), dict):
        raise ConvertError(f"{ckpt_path} is not a nanoGPT checkpoint (no 'model_args')")
    state = {}
    for key, value in ckpt["model"].items():
        if not isinstance(key, str) or not isinstance(value, torch_checkpoint.Tensor):
            raise ConvertError(f"{ckpt_path}: state_dict entry {key!r} is not a tensor")
        # torch.compile wraps the model; nanoGPT saves the wrapper's state_dict.
        clean = key[len("_orig_mod."):] if key.startswith("_orig_mod.") else key
        # nanoGPT's causal mask buffer (torch < 2.0 only): not a weight.
        if re.fullmatch(r"transformer\.h\.\d+\.attn\.bias", clean):
            continue
        state[clean] = value
    return state, ckpt["model_args"], ckpt


def read_hf_folder(folder):
    """A Hugging Face GPT-2 folder. Returns (state dict under nanoGPT's key names with the Conv1D
    weights viewed as nn.Linear's (out, in), hyperparameters, {nanoGPT key: key in the file},
    weights file)."""
    config_path = os.path.join(folder, "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise ConvertError(f"{folder} is a folder but has no config.json (expected a Hugging Face GPT-2 "
                           "folder, or give a nanoGPT ckpt.pt file)") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ConvertError(f"{config_path} is not JSON ({type(e).__name__}: {e})") from None
    if not isinstance(config, dict):
        raise ConvertError(f"{config_path} is not a JSON object")
    model_type = config.get("model_type")
    if model_type != "gpt2":
        raise ConvertError(f"{config_path}: model_type is {model_type!r:.40}, expected 'gpt2' (only GPT-2 "
                           "models convert)")
    hp = {}
    for key, ours in (("n_layer", "n_layer"), ("n_head", "n_head"), ("n_embd", "n_embd"),
                      ("n_positions", "block_size"), ("vocab_size", "vocab_size")):
        v = config.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= 1 << 24:
            raise ConvertError(f"{config_path}: {key} is {v!r:.40}, expected a positive integer")
        hp[ours] = v
    if hp["n_embd"] % hp["n_head"]:
        raise ConvertError(f"{config_path}: n_embd {hp['n_embd']} is not a multiple of n_head {hp['n_head']}")
    n_inner = config.get("n_inner")
    if n_inner is not None and (not isinstance(n_inner, int) or isinstance(n_inner, bool) or not 0 < n_inner <= 1 << 24):
        raise ConvertError(f"{config_path}: n_inner is {n_inner!r:.40}, expected a positive integer or null")
    hp["n_ff"] = n_inner or 4 * hp["n_embd"]
    hp["bias"] = True
    eps = config.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise ConvertError(f"{config_path}: layer_norm_epsilon is {eps!r:.40}, expected a small positive number")
    hp["eps"] = float(eps)
    activation = config.get("activation_function", "gelu_new")
    if activation not in HF_GELU:
        raise ConvertError(f"{config_path}: activation_function is {activation!r:.40}; gpt2.h runs "
                           f"{', '.join(sorted(HF_GELU))}")
    hp["gelu"] = HF_GELU[activation]
    # Options of transformers' GPT2Attention that change the arithmetic gpt2.h does.
    for key, plain in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if config.get(key, plain) != plain:
            raise ConvertError(f"{config_path}: {key} is {config[key]!r:.40}; gpt2.h runs GPT-2's "
                               f"attention ({key} {json.dumps(plain)})")

    for name in ("model.safetensors", "pytorch_model.bin"):
        weights = os.path.join(folder, name)
        if os.path.isfile(weights):
            break
    else:
        sharded = [n for n in ("model.safetensors.index.json", "pytorch_model.bin.index.json")
                   if os.path.exists(os.path.join(folder, n))]
        if sharded:
            raise ConvertError(f"{folder}: sharded weights ({sharded[0]}) are not supported; GPT-2 sizes "
                               "up to 1.5B are published as one file")
        raise ConvertError(f"{folder} holds no model.safetensors or pytorch_model.bin")
    if name == "model.safetensors":
        tensors, _ = safetensors_reader.load(weights)
    else:
        tensors = torch_checkpoint.load(weights)
        if not isinstance(tensors, dict):
            raise ConvertError(f"{weights} is not a state_dict (a dict of tensors)")
    state, names = {}, {}
    for key, value in tensors.items():
        if not isinstance(key, str) or not isinstance(value, torch_checkpoint.Tensor):
            raise ConvertError(f"{weights}: entry {key!r:.80} is not a tensor")
        # The causal mask and its fill value: buffers of transformers' GPT2Attention, not weights.
        if re.fullmatch(r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)", key):
            continue
        # save_pretrained names GPT2LMHeadModel's keys; OpenAI's published files GPT2Model's.
        clean = key if key.startswith("transformer.") or key == "lm_head.weight" else "transformer." + key
        if clean in state:
            raise ConvertError(f"{weights}: {key} and {names[clean]} are the same weight")
        state[clean], names[clean] = value, key
    # transformers' Conv1D stores its weight (in, out); nn.Linear's (out, in) is a transposed view.
    expected = {src: shape for src, _, shape in tensor_plan(hp)}
    for clean, t in list(state.items()):
        if re.fullmatch(r"transformer\.h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight", clean):
            want = expected.get(clean)
            if want is not None and t.shape != want[::-1]:
                raise ConvertError(f"{names[clean]}: shape {_shape(t)}, expected {list(want[::-1])} (Conv1D: "
                                   "in, out) from config.json")
            if len(t.shape) == 2:
                state[clean] = torch_checkpoint.Tensor(t.storage, t.offset, t.shape[::-1], t.stride[::-1])
    return state, hp, names, weights


def hyperparameters(model_args, state, ckpt_path):
    hp = {}
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        v = model_args.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= 1 << 24:
            raise ConvertError(f"{ckpt_path}: model_args[{key!r}] is {v!r}, expected a positive integer")
        hp[key] = v
    if hp["n_embd"] % hp["n_head"]:
        raise ConvertError(f"{ckpt_path}: n_embd {hp['n_embd']} is not a multiple of n_head {hp['n_head']}")
    has_bias = "transformer.ln_f.bias" in state
    bias = model_args.get("bias", has_bias)
    if bias != has_bias:
        raise ConvertError(f"{ckpt_path}: model_args says bias={bias} but the state_dict "
                           f"{'has' if has_bias else 'lacks'} bias tensors")
    hp["bias"] = bool(bias)
    fc = state.get("transformer.h.0.mlp.c_fc.weight")
    hp["n_ff"] = fc.shape[0] if fc is not None and len(fc.shape) == 2 else 4 * hp["n_embd"]
    return hp


def tensor_plan(hp):
    """(checkpoint key, GGUF name, expected torch shape) for every weight, in file order."""
    C, F, L, T, V = hp["n_embd"], hp["n_ff"], hp["n_layer"], hp["block_size"], hp["vocab_size"]
    plan = [("transformer.wte.weight", "token_embd.weight", (V, C)),
            ("transformer.wpe.weight", "position_embd.weight", (T, C))]

    def linear(src, dst, n_out, n_in):
        plan.append((src + ".weight", dst + ".weight", (n_out, n_in)))
        if hp["bias"]:
            plan.append((src + ".bias", dst + ".bias", (n_out,)))

    for i in range(L):
        p = f"transformer.h.{i}."
        linear(p + "ln_1", f"blk.{i}.attn_norm", C, None)
        linear(p + "attn.c_attn", f"blk.{i}.attn_qkv", 3 * C, C)
        linear(p + "attn.c_proj", f"blk.{i}.attn_output", C, C)
        linear(p + "ln_2", f"blk.{i}.ffn_norm", C, None)
        linear(p + "mlp.c_fc", f"blk.{i}.ffn_up", F, C)
        linear(p + "mlp.c_proj", f"blk.{i}.ffn_down", C, F)
    linear("transformer.ln_f", "output_norm", C, None)
    # LayerNorm weights are 1-D: drop the None "input size".
    return [(src, dst, tuple(d for d in shape if d is not None)) for src, dst, shape in plan]


# ---- conversion --------------------------------------------------------------------------

def find_meta(ckpt_path):
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    stem = os.path.splitext(os.path.basename(ckpt_path))[0]
    for name in (stem + ".meta.pkl", "meta.pkl"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def default_name(ckpt_path):
    """nanoGPT saves OUT_DIR/ckpt.pt, so the folder names the run; otherwise the file does (or
    the Hugging Face folder)."""
    if os.path.isdir(ckpt_path):
        return os.path.basename(os.path.abspath(ckpt_path))
    stem = os.path.splitext(os.path.basename(ckpt_path))[0]
    if stem.startswith("ckpt"):
        return os.path.basename(os.path.dirname(os.path.abspath(ckpt_path)))
    return stem


def convert(ckpt_path, out_path, meta=None, vocab=None, dtype="f32", gelu=None, name=None,
            zero_biases=False, log=print):
    """Converts ckpt_path (a nanoGPT checkpoint, or a Hugging Face GPT-2 folder) to out_path.
    Raises ConvertError (one-line message) on bad input. gelu: "erf" or "tanh"; None means
    config.json's activation for a folder, erf (nanoGPT's nn.GELU()) for a checkpoint.
    zero_biases: a model without biases gets zero bias tensors (the same model; llama.cpp's GPT-2
    requires them). Returns a summary dict (n_vocab, tokenizer, tied, rows, tensors, meta)."""
    if dtype not in ("f32", "f16"):
        raise ConvertError(f"--dtype must be f32 or f16, not {dtype!r}")
    if gelu not in (None, "erf", "tanh"):
        raise ConvertError(f"--gelu must be erf or tanh, not {gelu!r}")
    if meta and vocab:
        raise ConvertError("give either --meta (character vocabulary) or --vocab (GPT-2 BPE), not both")
    hf = os.path.isdir(ckpt_path)
    if not hf and not os.path.isfile(ckpt_path):
        raise ConvertError(f"{ckpt_path}: no such file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out_path))):
        raise ConvertError(f"{out_path}: the output folder does not exist")
    if meta is None and vocab is None:
        if not hf:
            meta = find_meta(ckpt_path)
        elif any(os.path.exists(os.path.join(ckpt_path, n)) for n in ("vocab.json", "encoder.json")):
            vocab = ckpt_path

    chars = tokens = merges = None
    if meta:
        chars = load_char_vocab(meta)
        log(f"convert.py: using the character vocabulary in {meta}")
    elif vocab:
        tokens, merges = load_bpe_vocab(vocab)

    if hf:
        state, hp, names, source = read_hf_folder(ckpt_path)
        if gelu is not None and gelu != hp["gelu"]:
            raise ConvertError(f"--gelu {gelu}: config.json's activation_function is the {hp['gelu']} GELU; "
                               "leave --gelu out for a Hugging Face folder")
        gelu, eps, model_args, ckpt = hp["gelu"], hp["eps"], None, {}
        shape_source, kind_of_model = "config.json", "GPT-2"
    else:
        state, model_args, ckpt = read_model(ckpt_path)
        hp = hyperparameters(model_args, state, ckpt_path)
        names, source = {}, ckpt_path
        gelu, eps = gelu or "erf", LAYER_NORM_EPS
        shape_source, kind_of_model = "model_args", "nanoGPT GPT"
    plan = tensor_plan(hp)
    expected = {src for src, _, _ in plan} | {"lm_head.weight"}
    for key in state:
        if key not in expected:
            raise ConvertError(f"{source}: unexpected tensor {names.get(key, key)} (not part of a {kind_of_model} "
                               f"with bias={hp['bias']} and n_layer={hp['n_layer']})")
    for src, dst, shape in plan:
        t = state.get(src)
        if t is None:
            raise ConvertError(f"{source}: missing tensor {names.get(src, src) if hf else src} (for {dst})")
        if t.shape != shape:
            raise ConvertError(f"{names.get(src, src)}: shape {_shape(t)}, expected {list(shape)} from {shape_source}")
        if t.dtype not in ("float32", "float16", "bfloat16", "float64"):
            raise ConvertError(f"{names.get(src, src)}: unsupported dtype {t.dtype}")

    # Vocabulary: how many embedding rows are real tokens.
    rows = hp["vocab_size"]
    if chars is not None:
        n_vocab, kind = len(chars), "char"
    elif tokens is not None:
        n_vocab, kind = len(tokens), "gpt2"
    else:
        n_vocab = GPT2_VOCAB_SIZE if rows == NANOGPT_PADDED_VOCAB else rows
        kind = "none"
    if n_vocab > rows:
        raise ConvertError(f"the vocabulary has {n_vocab} tokens but the model only {rows} embedding rows")

    head = state.get("lm_head.weight")
    wte = state["transformer.wte.weight"]
    if head is not None and head.dtype not in ("float32", "float16", "bfloat16", "float64"):
        raise ConvertError(f"lm_head.weight: unsupported dtype {head.dtype}")
    if head is not None and head.shape != wte.shape:
        raise ConvertError(f"lm_head.weight: shape {_shape(head)}, expected {list(wte.shape)}")
    tied = head is None or head.same_data(wte) or (head.dtype == wte.dtype and head.tobytes() == wte.tobytes())

    out_type = gguf.F16 if dtype == "f16" else gguf.F32
    w = gguf.Writer()
    w.add("general.architecture", gguf.STRING, "gpt2")
    w.add("general.name", gguf.STRING, name if name is not None else default_name(ckpt_path))
    w.add("general.file_type", gguf.UINT32, 1 if out_type == gguf.F16 else 0)
    w.add("gpt2.context_length", gguf.UINT32, hp["block_size"])
    w.add("gpt2.embedding_length", gguf.UINT32, hp["n_embd"])
    w.add("gpt2.feed_forward_length", gguf.UINT32, hp["n_ff"])
    w.add("gpt2.block_count", gguf.UINT32, hp["n_layer"])
    w.add("gpt2.attention.head_count", gguf.UINT32, hp["n_head"])
    w.add("gpt2.attention.layer_norm_epsilon", gguf.FLOAT32, eps)
    if kind != "gpt2":
        # llama.cpp requires tokenizer.ggml.model; "none" loads the model without a text vocabulary,
        # its n_vocab taken from gpt2.vocab_size (docs/FORMAT.md: "Our files in llama.cpp")
        w.add("gpt2.vocab_size", gguf.UINT32, n_vocab)
        w.add("tokenizer.ggml.model", gguf.STRING, "none")
    if kind == "gpt2":
        eos = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else None
        w.add("tokenizer.ggml.model", gguf.STRING, "gpt2")
        w.add("tokenizer.ggml.pre", gguf.STRING, "gpt-2")
        w.add("tokenizer.ggml.tokens", gguf.ARRAY, tokens, gguf.STRING)
        w.add("tokenizer.ggml.token_type", gguf.ARRAY, [3 if i == eos else 1 for i in range(n_vocab)], gguf.INT32)
        w.add("tokenizer.ggml.merges", gguf.ARRAY, merges, gguf.STRING)
        if eos is not None:
            w.add("tokenizer.ggml.bos_token_id", gguf.UINT32, eos)
            w.add("tokenizer.ggml.eos_token_id", gguf.UINT32, eos)
    w.add("gpt2h.gelu", gguf.STRING, gelu)
    w.add("gpt2h.converter_version", gguf.STRING, CONVERTER_VERSION)
    if kind == "char":
        w.add("gpt2h.tokenizer.kind", gguf.STRING, "char")
        w.add("gpt2h.tokenizer.chars", gguf.ARRAY, chars, gguf.STRING)
    if model_args is not None:
        w.add("gpt2h.nanogpt.model_args", gguf.STRING, json.dumps(model_args, sort_keys=True, default=str))
    iter_num = ckpt.get("iter_num")
    if isinstance(iter_num, int) and not isinstance(iter_num, bool) and 0 <= iter_num < 1 << 64:
        w.add("gpt2h.nanogpt.iter_num", gguf.UINT64, iter_num)
    best = ckpt.get("best_val_loss")
    if isinstance(best, torch_checkpoint.Tensor) and best.numel == 1:
        best = best.tolist()[0]
    if isinstance(best, (int, float)) and not isinstance(best, bool):
        w.add("gpt2h.nanogpt.best_val_loss", gguf.FLOAT32, float(best))
    if n_vocab < rows:
        w.add("gpt2h.nanogpt.padded_vocab_size", gguf.UINT32, rows)

    def add(dst, t, n_rows=None):
        if len(t.shape) == 1:
            w.add_tensor(dst, [t.shape[0]], gguf.F32, lambda: _float_chunks(t, t.numel, gguf.F32))
        else:
            n_rows = t.shape[0] if n_rows is None else n_rows
            w.add_tensor(dst, [t.shape[1], n_rows], out_type,
                         lambda: _float_chunks(t, n_rows * t.shape[1], out_type))

    if zero_biases and not hp["bias"]:
        # the plan of the same model with biases, its bias tensors all zeros: x + 0 is x
        plan = [(src if src in state else None, dst, shape) for src, dst, shape in tensor_plan(dict(hp, bias=True))]
    for src, dst, shape in plan:
        if src is None:
            w.add_tensor(dst, list(shape), gguf.F32, lambda n=shape[0]: [bytes(4 * n)])
        else:
            add(dst, state[src], n_vocab if dst == "token_embd.weight" else None)
    if not tied:
        add("output.weight", head, n_vocab)

    folder = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(out_path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            w.write(f)
        umask = os.umask(0)  # mkstemp creates the file private; give it the usual permissions
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out_path)
    except BaseException:
        os.unlink(tmp)
        raise
    if kind == "none" and n_vocab < GPT2_VOCAB_SIZE:  # nanoGPT's prepare.py wrote a character vocabulary
        log(f"convert.py: note: no vocabulary given, so the model works on token ids only; its {n_vocab} tokens "
            "look like a character vocabulary: pass --meta PATH/meta.pkl (written by nanoGPT's prepare.py, "
            "in the data folder) to get its text tokenizer")
    elif kind == "none":
        log("convert.py: note: no vocabulary given, so the model works on token ids only; pass "
            "--vocab DIR (a folder with encoder.json + vocab.bpe) to get a GPT-2 text tokenizer")
    return {"n_vocab": n_vocab, "tokenizer": kind, "tied": tied, "rows": rows,
            "tensors": len(w.tensors), "meta": meta}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="convert.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="nanoGPT checkpoint (a torch.save zip file, e.g. out/ckpt.pt), or a "
                        "Hugging Face GPT-2 folder (config.json + model.safetensors or pytorch_model.bin; "
                        "its vocab.json + merges.txt are used unless --vocab says otherwise)")
    parser.add_argument("-o", "--output", required=True, help="GGUF file to write (replaced only when "
                        "the conversion succeeds)")
    parser.add_argument("--meta", help="nanoGPT character vocabulary (meta.pkl from data/NAME/prepare.py); "
                        "default: NAME.meta.pkl or meta.pkl beside the checkpoint, if present")
    parser.add_argument("--vocab", metavar="DIR", help="folder with a GPT-2 BPE vocabulary: encoder.json + "
                        "vocab.bpe (OpenAI) or vocab.json + merges.txt (Hugging Face)")
    parser.add_argument("--dtype", choices=("f32", "f16"), default="f32", help="storage of the weight "
                        "matrices: f32 (exact, default) or f16 (half the size, rounded to nearest even); "
                        "biases and LayerNorm weights are always f32")
    parser.add_argument("--gelu", choices=("erf", "tanh"), help="GELU the model was "
                        "trained with: erf (exact, nanoGPT's nn.GELU(), the default for a checkpoint) or "
                        "tanh (the approximation used by OpenAI's GPT-2); a Hugging Face folder's "
                        "config.json says which (activation_function gelu_new: tanh, gelu: erf)")
    parser.add_argument("--zero-biases", action="store_true", help="for a model trained without biases "
                        "(nanoGPT's bias=False): write zero bias tensors, which leave the model as it is but "
                        "let llama.cpp load the file (its GPT-2 requires every bias; docs/FORMAT.md)")
    parser.add_argument("--name", help="general.name of the model (default: the checkpoint's folder name "
                        "for ckpt*.pt, nanoGPT's out_dir; else the file name without .pt)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error; every user mistake exits 1
        return 1 if e.code else 0
    try:
        info = convert(args.checkpoint, args.output, meta=args.meta, vocab=args.vocab, dtype=args.dtype,
                       gelu=args.gelu, name=args.name, zero_biases=args.zero_biases, log=lambda msg: print(msg, file=sys.stderr))
    except (ConvertError, torch_checkpoint.CheckpointError, safetensors_reader.SafetensorsError) as e:
        print(f"convert.py: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"convert.py: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except (zipfile.BadZipFile, EOFError, NotImplementedError) as e:  # NotImplementedError: zip flags we cannot read
        print(f"convert.py: error: {args.checkpoint}: corrupt checkpoint ({e})", file=sys.stderr)
        return 1
    vocab_text = {"char": "character vocabulary", "gpt2": "GPT-2 BPE vocabulary", "none": "no tokenizer"}
    print(f"wrote {args.output}: {info['tensors']} tensors, {info['n_vocab']} tokens "
          f"({vocab_text[info['tokenizer']]}), {'tied' if info['tied'] else 'untied'} output head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
