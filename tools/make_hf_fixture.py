#!/usr/bin/python3
"""Writes tests/data/hf/ (committed; rerun only to change it): a tiny random GPT-2 as Hugging Face
`transformers` saves it, in the layouts people have, with transformers' own logits as the
reference. Needs PyTorch, transformers and the gguf package, e.g.

    apt-get install -y python3-torch
    /usr/bin/python3 -m pip install --break-system-packages 'transformers<4.41' gguf
    /usr/bin/python3 tools/make_hf_fixture.py

The vocabulary is GPT-2's own (tests/data/gpt2-bpe/) cut to its first 512 tokens: the 256 byte
tokens, the first 255 merges (GPT-2's token 256 + k is the result of merge k, so every merge
result is a token) and <|endoftext|> as id 511. A full 50257-token embedding would make each
weight file megabytes; the code paths are the same. Weights are random, scaled so activations
are O(1) (so GELU's tanh and erf forms differ visibly) and rounded to float16 values, so the
float16 files hold exactly the model the reference logits come from.

    save_pretrained/      GPT2LMHeadModel.save_pretrained: model.safetensors (keys transformer.h.0...,
                          tied head left out), gelu_new, eps 1e-5
    save_pretrained_bin/  another model saved with safe_serialization=False: pytorch_model.bin in
                          float16, untied lm_head.weight, activation "gelu" (erf), eps 1e-6
    original/             the save_pretrained model laid out as openai-community/gpt2's files:
                          keys h.0... without "transformer.", the attn.bias (causal mask) and
                          attn.masked_bias buffers, n_ctx in config.json; model.safetensors
    original_bin/         the same as a torch.save pytorch_model.bin
    llama_cpp.gguf        the save_pretrained model as llama.cpp's convert_hf_to_gguf.py writes
                          it (default f16 output), with the gguf package (llama.cpp's gguf-py)
    reference.json        per model (tied: the gelu_new one, untied: the other) the prompts (ids),
                          transformers' float32 logits of the last position (to 9 digits) and the
                          12 greedy tokens after each; which model each file holds; and the
                          tokenizer's ids for a few texts
"""
import json
import os
import shutil
import sys
from collections import OrderedDict

# This folder holds our own gguf.py, which would hide the gguf package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "hf")
BPE = os.path.join(ROOT, "tests", "data", "gpt2-bpe")
N_VOCAB, N_EMBD, N_HEAD, N_LAYER, N_POSITIONS = 512, 16, 2, 2, 64
PROMPTS = [[464, 257, 318, 286], [11], [40, 256, 263, 301, 290, 262, 259, 280, 257, 283, 511, 72]]
TEXTS = ["Hello world, this is the test.", "  the\n\nend and then it's 3 o'clock"]
N_GREEDY = 12


def write_vocabulary(folder):
    with open(os.path.join(BPE, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(BPE, "vocab.bpe"), encoding="utf-8") as f:
        merges = f.read().split("\n")[1:N_VOCAB - 256]
    tokens = sorted((i, t) for t, i in encoder.items() if i < N_VOCAB - 1)
    vocab = {t: i for i, t in tokens}
    vocab["<|endoftext|>"] = N_VOCAB - 1
    assert len(vocab) == N_VOCAB and all(vocab[m.replace(" ", "")] == 256 + k for k, m in enumerate(merges))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def make_model(seed, activation, eps, tied):
    config = GPT2Config(vocab_size=N_VOCAB, n_positions=N_POSITIONS, n_embd=N_EMBD, n_layer=N_LAYER,
                        n_head=N_HEAD, activation_function=activation, layer_norm_epsilon=eps,
                        bos_token_id=N_VOCAB - 1, eos_token_id=N_VOCAB - 1, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif name.endswith("wte.weight") or name.endswith("lm_head.weight"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith("wpe.weight"):
                p.copy_(0.2 * torch.randn_like(p))
            else:  # Conv1D weights, stored (in, out)
                p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5 * 1.5)
            p.copy_(p.half().float())  # exactly representable in float16
    if not tied:
        assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    return model


def reference(model):
    out = []
    with torch.no_grad():
        for ids in PROMPTS:
            logits = model(torch.tensor([ids])).logits[0, -1]
            seq, greedy, margins = list(ids), [], []
            for _ in range(N_GREEDY):
                step = model(torch.tensor([seq])).logits[0, -1]
                top = torch.topk(step, 2).values
                margins.append(float(top[0] - top[1]))
                seq.append(int(step.argmax()))
                greedy.append(seq[-1])
            assert min(margins) > 1e-3, f"a near tie in the greedy tokens of {ids}: {min(margins)}"
            out.append({"ids": ids, "last_logits": [float(f"{v:.9g}") for v in logits.tolist()], "greedy": greedy,
                        "min_greedy_margin": min(margins)})
    return out


def original_state(model):
    """openai-community/gpt2's key names and buffers (its files predate save_pretrained's)."""
    state = OrderedDict()
    for key, value in model.transformer.state_dict().items():
        state[key] = value.clone()
        if key.endswith("ln_1.bias"):
            prefix = key[:-len("ln_1.bias")]
            mask = torch.tril(torch.ones(N_POSITIONS, N_POSITIONS)).view(1, 1, N_POSITIONS, N_POSITIONS)
            state[prefix + "attn.bias"] = mask
            state[prefix + "attn.masked_bias"] = torch.tensor(-1e4)
    return state


def original_config(folder):
    config = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
              "bos_token_id": N_VOCAB - 1, "embd_pdrop": 0.1, "eos_token_id": N_VOCAB - 1,
              "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
              "n_ctx": N_POSITIONS, "n_embd": N_EMBD, "n_head": N_HEAD, "n_layer": N_LAYER,
              "n_positions": N_POSITIONS, "resid_pdrop": 0.1, "vocab_size": N_VOCAB}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_llama_cpp_gguf(model, tokenizer_folder, path):
    """What convert_hf_to_gguf.py's GPT2Model writes: its set_gguf_parameters keys, the GPT-2
    vocabulary (_set_vocab_gpt2), Conv1D weights transposed to (out, in), the mask buffers
    skipped, no output.weight when the file has no lm_head; matrices f16, vectors f32."""
    import gguf
    import numpy as np
    hp = model.config
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("Save_Pretrained")
    w.add_block_count(hp.n_layer)
    w.add_context_length(hp.n_ctx if hasattr(hp, "n_ctx") else hp.n_positions)
    w.add_embedding_length(hp.n_embd)
    w.add_feed_forward_length(4 * hp.n_embd)
    w.add_head_count(hp.n_head)
    w.add_layer_norm_eps(hp.layer_norm_epsilon)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    with open(os.path.join(tokenizer_folder, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(tokenizer_folder, "merges.txt"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t == "<|endoftext|>" else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(N_VOCAB - 1)
    w.add_eos_token_id(N_VOCAB - 1)
    w.add_unk_token_id(N_VOCAB - 1)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    names = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm", "ln_1": "attn_norm",
             "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    for key, value in model.transformer.state_dict().items():
        if key.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        parts = key.split(".")
        if parts[0] == "h":
            name = f"blk.{parts[1]}.{names['.'.join(parts[2:-1])]}.{parts[-1]}"
        else:
            name = f"{names[parts[0]]}.{parts[-1]}"
        data = value
        if key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            data = data.transpose(1, 0)
        data = data.contiguous().numpy()
        w.add_tensor(name, data.astype(np.float16 if data.ndim == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    vocab_folder = os.path.join(OUT, "save_pretrained")
    write_vocabulary(vocab_folder)
    tokenizer = GPT2Tokenizer(os.path.join(vocab_folder, "vocab.json"), os.path.join(vocab_folder, "merges.txt"))
    assert len(tokenizer) == N_VOCAB

    tied = make_model(1, "gelu_new", 1e-5, tied=True)
    untied = make_model(2, "gelu", 1e-6, tied=False)

    tied.save_pretrained(os.path.join(OUT, "save_pretrained"))  # safetensors by default
    untied.half().save_pretrained(os.path.join(OUT, "save_pretrained_bin"), safe_serialization=False)
    untied.float()
    state = original_state(tied)
    for folder in ("original", "original_bin"):
        os.makedirs(os.path.join(OUT, folder))
        original_config(os.path.join(OUT, folder))
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(OUT, "original", "model.safetensors"),
              metadata={"format": "pt"})
    torch.save(state, os.path.join(OUT, "original_bin", "pytorch_model.bin"))
    for folder in ("save_pretrained", "save_pretrained_bin", "original", "original_bin"):
        tokenizer.save_pretrained(os.path.join(OUT, folder))
    write_llama_cpp_gguf(tied, os.path.join(OUT, "save_pretrained"), os.path.join(OUT, "llama_cpp.gguf"))

    # The layouts must load back in transformers as the models the references come from.
    for folder, model in (("save_pretrained", tied), ("save_pretrained_bin", untied), ("original", tied),
                          ("original_bin", tied)):
        loaded = GPT2LMHeadModel.from_pretrained(os.path.join(OUT, folder), torch_dtype=torch.float32).eval()
        ids = torch.tensor([PROMPTS[0]])
        assert torch.equal(loaded(ids).logits, model(ids).logits), folder

    tied_ref, untied_ref = reference(tied), reference(untied)
    ref = {"conventions": "last_logits: transformers' float32 logits of the last prompt position, over "
                          "token ids 0..n_vocab-1; greedy: argmax tokens generated after the prompt",
           "transformers": __import__("transformers").__version__, "torch": torch.__version__,
           "models": {"tied": tied_ref, "untied": untied_ref},
           "files": {"save_pretrained": "tied", "original": "tied", "original_bin": "tied",
                     "llama_cpp.gguf": "tied", "save_pretrained_bin": "untied"},
           "tokenizer": [{"text": t, "ids": tokenizer.encode(t)} for t in TEXTS]}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f)
    for dirpath, _, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            print(f"{os.path.getsize(path):8d}  {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
