#!/usr/bin/python3
"""Writes the tiny nanoGPT-style checkpoints under tests/data/checkpoints/ (committed; rerun only
to change them). Needs PyTorch and NumPy, e.g. Debian's: /usr/bin/python3 tools/make_test_checkpoints.py

Each NAME.pt is a torch.save of the dict nanoGPT's train.py saves (model, model_args, iter_num,
best_val_loss, config) with random weights under nanoGPT's state_dict key names. Beside it,
NAME.reference.json holds the logits of a fixed id sequence, computed here in float64 with a
straight transcription of nanoGPT's GPT.forward (pre-LayerNorm blocks, eps 1e-5, causal
attention, exact erf GELU), plus samples of every tensor as torch sees it. The variants:

    bias_char      bias=True, character vocabulary in bias_char.meta.pkl, causal-mask buffers
    nobias         bias=False, token ids only, causal-mask buffers (as torch < 2.0 saves them)
    compiled       keys prefixed "_orig_mod." (torch.compile), no mask buffers (torch >= 2.0)
    untied         lm_head.weight differs from wte, and is a transposed (non-contiguous) view
    f16            every tensor stored as float16
    bf16           every tensor stored as bfloat16
    padded_gpt2    vocab_size 50304 (nanoGPT's padded GPT-2 vocabulary); to stay small the
                   embedding is an overlapping strided view (row i = s[i:i+n_embd]) of one
                   low-entropy storage, and the zip is re-compressed with deflate (torch.load
                   reads it). Its reference stores only some logit columns (see the JSON).
    bad_shape      attn.c_proj.weight of the wrong shape (refused)
    bad_missing_tensor  a bias=True model without one LayerNorm bias (refused)
    malicious      a data.pkl that calls os.system("touch /tmp/gpt2h_pwned") when unpickled
    strided        not a model: tensors viewed with permuted, stepped, broadcast strides and offsets
"""
import json
import math
import os
import pickle
import zipfile
from collections import OrderedDict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "checkpoints")
IDS = [1, 5, 3, 0, 7, 2, 9, 4, 4, 11]
GPT2_VOCAB = 50257


def make_state(gen, n_layer, n_head, n_embd, block_size, vocab_size, bias, mask_buffers):
    """A state_dict in the order and with the names nanoGPT's model.py gives it."""
    def randn(*shape, std=0.3):
        return torch.randn(*shape, generator=gen) * std

    C = n_embd
    sd = OrderedDict()
    sd["transformer.wte.weight"] = randn(vocab_size, C, std=0.5)
    sd["transformer.wpe.weight"] = randn(block_size, C, std=0.2)

    def layer_norm(prefix):
        sd[prefix + ".weight"] = 1 + randn(C, std=0.1)
        if bias:
            sd[prefix + ".bias"] = randn(C, std=0.1)

    def linear(prefix, n_out, n_in):
        sd[prefix + ".weight"] = randn(n_out, n_in, std=1 / math.sqrt(n_in))
        if bias:
            sd[prefix + ".bias"] = randn(n_out, std=0.1)

    for i in range(n_layer):
        p = f"transformer.h.{i}."
        layer_norm(p + "ln_1")
        if mask_buffers:
            sd[p + "attn.bias"] = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        linear(p + "attn.c_attn", 3 * C, C)
        linear(p + "attn.c_proj", C, C)
        layer_norm(p + "ln_2")
        linear(p + "mlp.c_fc", 4 * C, C)
        linear(p + "mlp.c_proj", C, 4 * C)
    layer_norm("transformer.ln_f")
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # weight tying, as in nanoGPT
    return sd


def forward(sd, ids, n_head, bias):
    """nanoGPT's GPT.forward for all positions, in float64. sd has no _orig_mod. prefix."""
    w = {k: v.double() for k, v in sd.items()}
    T = len(ids)
    C = w["transformer.wte.weight"].shape[1]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w.get(p + ".bias"), 1e-5)

    def lin(x, p):
        y = x @ w[p + ".weight"].T
        return y + w[p + ".bias"] if bias else y

    x = w["transformer.wte.weight"][torch.tensor(ids)] + w["transformer.wpe.weight"][:T]
    n_layer = len({k.split(".")[2] for k in w if k.startswith("transformer.h.")})
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        q, k, v = lin(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=1)
        hs = C // n_head
        q, k, v = (t.view(T, n_head, hs).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + lin(y, p + "attn.c_proj")
        h = lin(ln(x, p + "ln_2"), p + "mlp.c_fc")
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # exact GELU, nn.GELU()
        x = x + lin(h, p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return x @ w["lm_head.weight"].T


def tensor_samples(sd, n_vocab):
    """First 8 values (row-major) and the float64 sum of each tensor, as torch sees it. For the
    embedding and head the sum covers only the first n_vocab rows (the rows the converter keeps)."""
    out = {}
    for key, t in sd.items():
        clean = key[len("_orig_mod."):] if key.startswith("_orig_mod.") else key
        if clean.endswith("attn.bias") and t.dim() == 4:
            continue
        d = t.double()
        if clean in ("transformer.wte.weight", "lm_head.weight"):
            d = d[:n_vocab]
        out[clean] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                      "first": d.flatten()[:8].tolist(), "sum": d.sum().item()}
    return out


def save(name, sd, model_args, n_vocab, meta_chars=None, deflate=False, reference_columns=None):
    path = os.path.join(OUT, name + ".pt")
    clean = OrderedDict((k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k, v) for k, v in sd.items())
    ckpt = {
        "model": sd,
        "model_args": model_args,
        "iter_num": 1234,
        "best_val_loss": torch.tensor(2.5 + len(name) / 100),
        "config": {"out_dir": "out-" + name, "batch_size": 12, "learning_rate": 1e-3, "compile": False,
                   "dataset": "shakespeare_char" if meta_chars else "openwebtext", "bias": model_args["bias"]},
    }
    torch.save(ckpt, path)
    if deflate:
        with zipfile.ZipFile(path) as zin:
            entries = [(i.filename, zin.read(i.filename)) for i in zin.infolist()]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for filename, data in entries:
                zout.writestr(_entry(filename, zipfile.ZIP_DEFLATED), data)
    reloaded = torch.load(path)["model"]  # the reference is what torch reads back
    assert all(torch.equal(reloaded[k], sd[k]) for k in sd)
    if meta_chars:
        meta = {"vocab_size": len(meta_chars), "itos": dict(enumerate(meta_chars)),
                "stoi": {c: i for i, c in enumerate(meta_chars)}}
        with open(os.path.join(OUT, name + ".meta.pkl"), "wb") as f:
            pickle.dump(meta, f)

    logits = forward(clean, IDS, model_args["n_head"], model_args["bias"])[:, :n_vocab]
    ref = {"checkpoint": name + ".pt", "model_args": model_args, "n_vocab": n_vocab,
           "ids": IDS, "conventions": "logits computed in float64 from the stored weights with "
           "nanoGPT's forward (pre-LN, LayerNorm eps 1e-5, causal attention, exact erf GELU); "
           "columns are token ids 0..n_vocab-1 (padding rows excluded); tensors: first 8 values and "
           "float64 sum as torch sees each tensor (embedding/head: first n_vocab rows only)"}
    if reference_columns is None:
        ref["all_logits"] = logits.tolist()
    else:
        cols = reference_columns
        ref["conventions"] += ("; this model's vocabulary is too large to store every logit: "
                               f"all_logits_first_columns holds columns 0..{cols - 1} of every "
                               "position, last_logits_columns/last_logits_values some columns of the "
                               "last position, and last_argmax/last_logsumexp are over all n_vocab columns")
        last = logits[-1]
        picked = list(range(cols)) + list(range(n_vocab - cols, n_vocab)) + [int(last.argmax())]
        ref["all_logits_first_columns"] = logits[:, :cols].tolist()
        ref["last_logits_columns"] = picked
        ref["last_logits_values"] = [last[c].item() for c in picked]
        ref["last_argmax"] = int(last.argmax())
        ref["last_logsumexp"] = torch.logsumexp(last, 0).item()
    ref["tensors"] = tensor_samples(sd, n_vocab)
    with open(os.path.join(OUT, name + ".reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def args(n_layer=2, n_head=2, n_embd=16, block_size=16, bias=True, vocab_size=32):
    return {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "block_size": block_size,
            "bias": bias, "vocab_size": vocab_size, "dropout": 0.0}


def _entry(filename, compression=zipfile.ZIP_STORED):
    """A zip entry with a fixed date, so that rerunning this script changes no file."""
    info = zipfile.ZipInfo(filename, date_time=(2024, 1, 1, 0, 0, 0))
    info.compress_type = compression
    return info


def write_malicious():
    """A checkpoint whose pickle calls os.system when loaded by an unrestricted unpickler. Built
    from raw opcodes: PROTO 2, GLOBAL 'os system', BINUNICODE cmd, TUPLE1, REDUCE, STOP."""
    cmd = b"touch /tmp/gpt2h_pwned"
    payload = (b"\x80\x02" + b"cos\nsystem\n" + b"X" + len(cmd).to_bytes(4, "little") + cmd
               + b"\x85" + b"R" + b".")
    with zipfile.ZipFile(os.path.join(OUT, "malicious.pt"), "w") as z:
        z.writestr(_entry("malicious/data.pkl"), payload)
        z.writestr(_entry("malicious/version"), "3\n")
    print("wrote malicious.pt")


def main():
    os.makedirs(OUT, exist_ok=True)
    chars = list("\n !',.:;?ACEHIMORSTaehilmnorstuy")  # 32 characters
    gen = torch.Generator().manual_seed(1337)

    a = args(bias=True, vocab_size=len(chars))
    save("bias_char", make_state(gen, **_shape(a), mask_buffers=True), a, len(chars), meta_chars=chars)

    a = args(bias=False)
    save("nobias", make_state(gen, **_shape(a), mask_buffers=True), a, 32)

    a = args(bias=False, n_head=4)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    save("compiled", OrderedDict(("_orig_mod." + k, v) for k, v in sd.items()), a, 32)

    a = args(bias=True, vocab_size=24)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    sd["lm_head.weight"] = (torch.randn(16, 24, generator=gen) * 0.5).t()  # stride (1, 24)
    save("untied", sd, a, 24)

    a = args(bias=True, vocab_size=20)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    half = OrderedDict((k, v.half()) for k, v in sd.items())
    half["lm_head.weight"] = half["transformer.wte.weight"]
    save("f16", half, a, 20)

    a = args(bias=False, vocab_size=20)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    bf = OrderedDict((k, v.bfloat16()) for k, v in sd.items())
    bf["lm_head.weight"] = bf["transformer.wte.weight"]
    save("bf16", bf, a, 20)

    a = args(n_layer=1, n_head=2, n_embd=8, block_size=16, bias=False, vocab_size=50304)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    levels = torch.randint(-8, 8, (50304 + 8 - 1,), generator=gen).float() / 8
    wte = torch.as_strided(levels, (50304, 8), (1, 1))  # row i = levels[i:i+8]
    sd["transformer.wte.weight"] = sd["lm_head.weight"] = wte
    save("padded_gpt2", sd, a, GPT2_VOCAB, deflate=True, reference_columns=64)

    # Broken on purpose (the converter must refuse them; no reference).
    a = args(n_layer=1, n_embd=8, vocab_size=8)
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    sd["transformer.h.0.attn.c_proj.weight"] = torch.zeros(8, 12)
    torch.save({"model": sd, "model_args": a, "iter_num": 0}, os.path.join(OUT, "bad_shape.pt"))
    sd = make_state(gen, **_shape(a), mask_buffers=False)
    del sd["transformer.h.0.ln_2.bias"]
    torch.save({"model": sd, "model_args": a, "iter_num": 0}, os.path.join(OUT, "bad_missing_tensor.pt"))
    print("wrote bad_shape.pt, bad_missing_tensor.pt")

    write_malicious()
    write_strided()


def write_strided():
    """Not a model: views with unusual strides, for the reader's gather (strided.json: values)."""
    base = torch.arange(120, dtype=torch.float32).view(2, 3, 5, 4) / 7
    views = {"permuted": base.permute(3, 1, 0, 2), "stepped": base[:, ::2, 1:, ::3],
             "expanded": torch.arange(3.0).view(3, 1).expand(3, 4), "transposed": base.view(24, 5).t(),
             "bf16_permuted": base.bfloat16().permute(1, 0, 3, 2), "f16_transposed": base.half()[1].transpose(0, 2),
             "offset": base.view(-1)[7:19].view(3, 4), "scalar": torch.tensor(2.5)}
    torch.save(views, os.path.join(OUT, "strided.pt"))
    with open(os.path.join(OUT, "strided.json"), "w") as f:
        json.dump({k: {"shape": list(v.shape), "values": v.double().flatten().tolist()} for k, v in views.items()}, f)
        f.write("\n")
    print("wrote strided.pt")


def _shape(a):
    return {k: a[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")}


if __name__ == "__main__":
    main()
