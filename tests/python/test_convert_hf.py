"""Tests of tools/convert.py on Hugging Face GPT-2 folders and of gpt2.h on llama.cpp's GPT-2 files.

Run from tests/python:  python3 -m unittest -v test_convert_hf
GPT2_BINARY_DIR names the build folder: the tests that run the gpt2 program skip without it.

The fixture, tests/data/hf/, was written by tools/make_hf_fixture.py with transformers: a tiny
random GPT-2 saved by save_pretrained (model.safetensors; pytorch_model.bin for an untied model
with the erf GELU), the same model in openai-community/gpt2's layout (keys h.0..., mask buffers)
as safetensors and as a torch .bin, and as llama.cpp's convert_hf_to_gguf.py writes it. Its
reference.json holds transformers' logits and greedy tokens: the converted files must reproduce
them, both in a plain-Python forward pass and in gpt2.h (the gpt2 program's --json output).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import unittest

from test_convert import DATA, ROOT, TOOLS, forward, run_main, scratch

sys.path.insert(0, TOOLS)
import gguf  # noqa: E402

HF = os.path.join(DATA, "hf")
FOLDERS = ["save_pretrained", "save_pretrained_bin", "original", "original_bin"]
PROGRAM = os.path.join(os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build")), "examples", "gpt2")
TOLERANCE = 1e-4

with open(os.path.join(HF, "reference.json")) as _f:
    REFERENCE = json.load(_f)


def prompts(file):
    return REFERENCE["models"][REFERENCE["files"][file]]


def run_gpt2(model, *args):
    p = subprocess.run([PROGRAM, "-m", model, "-t", "1", *args], capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise AssertionError(f"gpt2 {' '.join(args)} failed: {p.stderr}")
    return json.loads(p.stdout)


def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


class HuggingFaceFolders(unittest.TestCase):
    """Each layout of tests/data/hf/ converted once (f32), as `convert.py DIR -o FILE`."""

    @classmethod
    def setUpClass(cls):
        cls.out = scratch()
        cls.files = {}
        for folder in FOLDERS:
            cls.files[folder] = os.path.join(cls.out, folder + ".gguf")
            code, err, _ = run_main(os.path.join(HF, folder), "-o", cls.files[folder])
            if code:
                raise AssertionError(f"converting {folder}: {err}")
        cls.files["llama_cpp.gguf"] = os.path.join(HF, "llama_cpp.gguf")

    def test_python_forward_of_every_file_gives_transformers_logits(self):
        for file, path in self.files.items():
            for prompt in prompts(file):
                with self.subTest(file=file, ids=prompt["ids"]):
                    got = forward(path, prompt["ids"])[-1]
                    self.assertEqual(len(got), len(prompt["last_logits"]))
                    self.assertLess(worst(got, prompt["last_logits"]), TOLERANCE)

    @unittest.skipUnless(os.path.exists(PROGRAM), "needs the gpt2 program (GPT2_BINARY_DIR)")
    def test_gpt2_h_gives_transformers_logits_and_greedy_tokens(self):
        for file, path in self.files.items():
            for prompt in prompts(file):
                with self.subTest(file=file, ids=prompt["ids"]):
                    got = run_gpt2(path, "--json", "--prompt-ids", ",".join(map(str, prompt["ids"])),
                                   "-n", str(len(prompt["greedy"])), "--temp", "0")
                    self.assertLess(worst(got["last_logits"], prompt["last_logits"]), TOLERANCE)
                    self.assertEqual(got["ids"], prompt["greedy"])

    @unittest.skipUnless(os.path.exists(PROGRAM), "needs the gpt2 program (GPT2_BINARY_DIR)")
    def test_vocabulary_found_in_the_folder_tokenizes_as_transformers_does(self):
        for case in REFERENCE["tokenizer"]:
            for file in ("save_pretrained", "llama_cpp.gguf"):
                with self.subTest(file=file, text=case["text"]):
                    self.assertEqual(run_gpt2(self.files[file], "--tokenize", case["text"]), case["ids"])

    def test_config_json_gives_shapes_epsilon_and_gelu(self):
        for folder, gelu, eps in (("save_pretrained", "tanh", 1e-5), ("original", "tanh", 1e-5),
                                  ("save_pretrained_bin", "erf", 1e-6)):
            with self.subTest(folder):
                r = gguf.Reader(self.files[folder])
                kv = r.kv
                self.assertEqual(kv["gpt2h.gelu"], gelu)
                self.assertAlmostEqual(kv["gpt2.attention.layer_norm_epsilon"], eps, delta=eps * 1e-6)
                self.assertEqual((kv["gpt2.context_length"], kv["gpt2.embedding_length"], kv["gpt2.block_count"],
                                  kv["gpt2.attention.head_count"], kv["gpt2.feed_forward_length"]), (64, 16, 2, 2, 64))
                self.assertEqual(kv["general.name"], folder)
                self.assertEqual(kv["tokenizer.ggml.model"], "gpt2")
                self.assertEqual(len(kv["tokenizer.ggml.tokens"]), 512)
                self.assertEqual(kv["tokenizer.ggml.eos_token_id"], 511)
                self.assertNotIn("gpt2h.nanogpt.model_args", kv)
                self.assertEqual(r.tensors["token_embd.weight"].dims, [16, 512])

    def test_conv1d_weights_are_transposed_and_layouts_agree(self):
        r = gguf.Reader(self.files["save_pretrained"])
        self.assertEqual(r.tensors["blk.0.attn_qkv.weight"].dims, [16, 48])  # 48 rows (out) of 16 (in)
        self.assertEqual(r.tensors["blk.1.ffn_down.weight"].dims, [64, 16])
        for other in ("original", "original_bin"):
            o = gguf.Reader(self.files[other])
            self.assertEqual(set(o.tensors), set(r.tensors), other)
            for name in r.tensors:
                self.assertEqual(o.tensor_bytes(name), r.tensor_bytes(name), f"{other}: {name}")

    def test_head_is_tied_unless_the_file_has_its_own_lm_head(self):
        self.assertNotIn("output.weight", gguf.Reader(self.files["save_pretrained"]).tensors)
        self.assertNotIn("output.weight", gguf.Reader(self.files["original_bin"]).tensors)
        r = gguf.Reader(self.files["save_pretrained_bin"])
        self.assertEqual(r.tensors["output.weight"].dims, [16, 512])
        self.assertNotEqual(r.tensor_bytes("output.weight"), r.tensor_bytes("token_embd.weight"))

    def test_f16_output(self):
        target = os.path.join(scratch(), "f16.gguf")
        code, err, _ = run_main(os.path.join(HF, "save_pretrained"), "-o", target, "--dtype", "f16")
        self.assertEqual(code, 0, err)
        prompt = prompts("save_pretrained")[1]
        # The fixture's weights are float16 values, so f16 storage is exact.
        self.assertLess(worst(forward(target, prompt["ids"])[-1], prompt["last_logits"]), TOLERANCE)


# ---- the llama.cpp file itself ----------------------------------------------------------------

class LlamaCppFile(unittest.TestCase):
    def test_it_has_llama_cpp_keys_and_none_of_ours(self):
        r = gguf.Reader(os.path.join(HF, "llama_cpp.gguf"))
        self.assertFalse([k for k in r.kv if k.startswith("gpt2h.")])  # so gpt2.h picks the tanh GELU
        self.assertEqual(r.kv["tokenizer.ggml.pre"], "gpt-2")
        self.assertEqual(r.kv["general.file_type"], 1)
        self.assertEqual(r.tensors["token_embd.weight"].type, gguf.F16)
        self.assertEqual(r.tensors["blk.0.attn_norm.bias"].type, gguf.F32)


# ---- hostile and wrong input ------------------------------------------------------------------

def safetensors_bytes(header, data=b"", length=None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


class BadFolders(unittest.TestCase):
    """Wrong or hostile Hugging Face folders are refused in one line, naming the problem."""

    def folder(self, weights=None, config=None, name="model.safetensors"):
        folder = scratch()
        src = os.path.join(HF, "save_pretrained")
        for f in ("config.json", "vocab.json", "merges.txt"):
            shutil.copy(os.path.join(src, f), folder)
        if weights is not None:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(weights)
        else:
            shutil.copy(os.path.join(src, "model.safetensors"), folder)
        if config is not None:
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(config, f)
        return folder

    def assertRefused(self, folder, message, *extra):
        out = scratch()
        code, err, _ = run_main(folder, "-o", os.path.join(out, "m.gguf"), *extra)
        self.assertEqual(code, 1, err)
        self.assertTrue(err.startswith("convert.py: error: "), err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(message, err)
        self.assertEqual(os.listdir(out), [])

    def test_hostile_safetensors_headers_are_refused(self):
        f32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        cases = {
            "length past the end": (safetensors_bytes({"a": f32}, bytes(8), length=1000), "reaches past the end"),
            "2^63 length": (safetensors_bytes({"a": f32}, bytes(8), length=1 << 63), "over the 100000000 byte limit"),
            "header too large": (safetensors_bytes(b"{" + b" " * 100, length=200_000_000), "byte limit"),
            "too short": (b"\x01\x02", "too short"),
            "deep JSON": (safetensors_bytes(b"[" * 100000 + b"]" * 100000), "nested too deeply"),
            "not JSON": (safetensors_bytes(b"{'a': 1}"), "is not JSON"),
            "not an object": (safetensors_bytes(b"[1, 2]"), "not a JSON object"),
            "data past the end": (safetensors_bytes({"a": f32}, bytes(4)), "file holds 4"),
            "trailing bytes": (safetensors_bytes({"a": f32}, bytes(12)), "4 bytes after the last tensor"),
            "overlap": (safetensors_bytes({"a": f32, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                                          bytes(12)), "overlaps"),
            "gap": (safetensors_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
                    "leaves a gap of 4 bytes"),
            "reversed offsets": (safetensors_bytes({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}},
                                                   bytes(8)), "begin <= end"),
            "size mismatch": (safetensors_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                                                bytes(8)), "is 12 bytes but its data_offsets [0, 8] span 8"),
            "dtype mismatch": (safetensors_bytes({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 8]}},
                                                 bytes(8)), "is 4 bytes"),
            "unknown dtype": (safetensors_bytes({"a": {"dtype": "F128", "shape": [], "data_offsets": [0, 16]}},
                                                bytes(16)), "unknown dtype 'F128'"),
            "dtype not a string": (safetensors_bytes({"a": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}},
                                                     bytes(8)), "unknown dtype ['F32']"),
            "negative size": (safetensors_bytes({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
                                                bytes(8)), "is not a list of at most 16 sizes"),
            "duplicate": (safetensors_bytes(b'{"a": ' + json.dumps(f32).encode() + b', "a": '
                                            + json.dumps(f32).encode() + b"}", bytes(8)), "names 'a' twice"),
            "extra field": (safetensors_bytes({"a": dict(f32, x=1)}, bytes(8)), "expected an object with dtype"),
        }
        for name, (data, message) in cases.items():
            with self.subTest(name):
                self.assertRefused(self.folder(data), message)

    def test_wrong_tensors_are_refused_naming_them(self):
        def only(name, dtype="F32", shape=(512, 16)):
            n = 1
            for d in shape:
                n *= d
            size = n * {"F32": 4, "I32": 4}[dtype]
            return safetensors_bytes({name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, size]}},
                                     bytes(size))
        self.assertRefused(self.folder(only("transformer.wte.weight")), "missing tensor transformer.wpe.weight")
        self.assertRefused(self.folder(only("transformer.wte.weight", "I32")), "unsupported dtype int32")
        self.assertRefused(self.folder(only("wte.weight", shape=(500, 16))),
                           "wte.weight: shape [500, 16], expected [512, 16] from config.json")
        self.assertRefused(self.folder(only("h.0.attn.c_attn.weight", shape=(48, 16))),
                           "h.0.attn.c_attn.weight: shape [48, 16], expected [16, 48] (Conv1D: in, out)")
        self.assertRefused(self.folder(only("h.0.attn.q_proj.weight")), "unexpected tensor h.0.attn.q_proj.weight")

    def test_config_json_problems_are_refused(self):
        with open(os.path.join(HF, "save_pretrained", "config.json")) as f:
            config = json.load(f)
        self.assertRefused(self.folder(config=dict(config, model_type="llama")), "model_type is 'llama'")
        self.assertRefused(self.folder(config=dict(config, activation_function="relu")), "activation_function is 'relu'")
        self.assertRefused(self.folder(config=dict(config, n_head=3)), "n_embd 16 is not a multiple of n_head 3")
        self.assertRefused(self.folder(config=dict(config, n_embd="16")), "n_embd is '16'")
        self.assertRefused(self.folder(config=dict(config, scale_attn_by_inverse_layer_idx=True)),
                           "scale_attn_by_inverse_layer_idx")
        folder = self.folder()
        os.remove(os.path.join(folder, "config.json"))
        self.assertRefused(folder, "has no config.json")
        folder = self.folder()
        os.remove(os.path.join(folder, "model.safetensors"))
        self.assertRefused(folder, "holds no model.safetensors or pytorch_model.bin")
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            f.write("{}")
        self.assertRefused(folder, "sharded weights")

    def test_gelu_flag_that_contradicts_config_json_is_refused(self):
        self.assertRefused(os.path.join(HF, "save_pretrained"), "config.json's activation_function is the tanh GELU",
                           "--gelu", "erf")

    def test_pytorch_model_bin_that_is_not_a_checkpoint_is_refused(self):
        folder = self.folder()
        os.remove(os.path.join(folder, "model.safetensors"))
        with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
            f.write(b"not a zip")
        self.assertRefused(folder, "not a PyTorch checkpoint")

if __name__ == "__main__":
    unittest.main()
