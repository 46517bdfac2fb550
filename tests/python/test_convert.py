"""Tests of tools/convert.py, tools/torch_checkpoint.py and tools/gguf.py (standard library only).

Run from tests/python:  python3 -m unittest -v test_convert
GPT2_TEST_SCRATCH names a scratch folder (default: a temporary one).

The numeric checks do not trust the converter's own reading of the checkpoints: each test
checkpoint comes with NAME.reference.json, written with PyTorch by tools/make_test_checkpoints.py,
holding logits computed in float64 and samples of every tensor as torch sees it. Here a plain
Python forward pass over the GGUF file must reproduce those logits.
"""
import atexit
import contextlib
import io
import json
import math
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(ROOT, "tools")
DATA = os.path.join(ROOT, "tests", "data")
CKPTS = os.path.join(DATA, "checkpoints")
sys.path.insert(0, TOOLS)
import convert  # noqa: E402
import gguf  # noqa: E402
import torch_checkpoint  # noqa: E402

QUANTIZE = os.path.join(os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build")), "bench", "gpt2-quantize")
PWNED = "/tmp/gpt2h_pwned"
VARIANTS = ["bias_char", "nobias", "compiled", "untied", "f16", "bf16"]

# nanoGPT state_dict name -> GGUF name (the layout docs/FORMAT.md promises).
NAMES = [("transformer.wte.weight", "token_embd.weight"), ("transformer.wpe.weight", "position_embd.weight"),
         ("transformer.ln_f.", "output_norm."), ("lm_head.weight", "output.weight"),
         (".ln_1.", ".attn_norm."), (".attn.c_attn.", ".attn_qkv."), (".attn.c_proj.", ".attn_output."),
         (".ln_2.", ".ffn_norm."), (".mlp.c_fc.", ".ffn_up."), (".mlp.c_proj.", ".ffn_down."),
         ("transformer.h.", "blk.")]


def gguf_name(key):
    for old, new in NAMES:
        key = key.replace(old, new)
    return key


_own_scratch = []


def scratch():
    """A new empty folder under $GPT2_TEST_SCRATCH (emptied when these tests start and kept after
    them for inspection, so runs do not pile up; CTest gives each test program its own, as two
    run at once: test_convert_hf uses this too), or under a temporary folder removed when the
    tests end."""
    if not _own_scratch:
        base = os.environ.get("GPT2_TEST_SCRATCH")
        if base:
            shutil.rmtree(base, ignore_errors=True)
            os.makedirs(base)
        else:
            base = tempfile.mkdtemp(prefix="gpt2h_test_convert_")
            atexit.register(shutil.rmtree, base, True)
        _own_scratch.append(base)
    return tempfile.mkdtemp(prefix="case_", dir=_own_scratch[0])


def reference(name):
    with open(os.path.join(CKPTS, name + ".reference.json")) as f:
        return json.load(f)


def run_cli(*args):
    """convert.py as a user runs it: (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, os.path.join(TOOLS, "convert.py"), *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def convert_quietly(ckpt, out, **options):
    return convert.convert(ckpt, out, log=lambda msg: None, **options)


# ---- a plain-Python GPT-2 forward pass over a GGUF file ------------------------------------

def forward(path, ids):
    """Logits of every position, from the GGUF file alone. Weights with dims [n_in, n_out] are
    n_out rows of n_in values (PyTorch's (out, in) row-major order)."""
    r = gguf.Reader(path)
    kv = r.kv
    C, H, L = kv["gpt2.embedding_length"], kv["gpt2.attention.head_count"], kv["gpt2.block_count"]
    eps = kv["gpt2.attention.layer_norm_epsilon"]
    tanh_gelu = kv.get("gpt2h.gelu", "tanh") == "tanh"  # as gpt2.h decides
    t = {name: r.tensor_values(name) for name in r.tensors}

    def rows(name):
        n_in = r.tensors[name].dims[0]
        v = t[name]
        return [v[i:i + n_in] for i in range(0, len(v), n_in)]

    def linear(x, name):
        w, b = rows(name + ".weight"), t.get(name + ".bias")
        y = [sum(a * c for a, c in zip(row, x)) for row in w]
        return [a + c for a, c in zip(y, b)] if b else y

    def layer_norm(x, name):
        mean = sum(x) / len(x)
        var = sum((a - mean) ** 2 for a in x) / len(x)
        w, b = t[name + ".weight"], t.get(name + ".bias") or [0.0] * len(x)
        return [(a - mean) / math.sqrt(var + eps) * g + c for a, g, c in zip(x, w, b)]

    wte, wpe = rows("token_embd.weight"), rows("position_embd.weight")
    head = rows("output.weight") if "output.weight" in t else wte
    xs = [[a + b for a, b in zip(wte[tok], wpe[pos])] for pos, tok in enumerate(ids)]
    hs = C // H
    for i in range(L):
        p = f"blk.{i}."
        qkv = [linear(layer_norm(x, p + "attn_norm"), p + "attn_qkv") for x in xs]
        ys = []
        for pos in range(len(xs)):
            y = []
            for h in range(H):
                q = qkv[pos][h * hs:(h + 1) * hs]
                scores = [sum(a * b for a, b in zip(q, qkv[j][C + h * hs:C + (h + 1) * hs])) / math.sqrt(hs)
                          for j in range(pos + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                z = sum(e)
                y += [sum(e[j] / z * qkv[j][2 * C + h * hs + d] for j in range(pos + 1)) for d in range(hs)]
            ys.append(y)
        xs = [[a + b for a, b in zip(x, linear(y, p + "attn_output"))] for x, y in zip(xs, ys)]
        for n, x in enumerate(xs):
            u = linear(layer_norm(x, p + "ffn_norm"), p + "ffn_up")
            if tanh_gelu:  # OpenAI GPT-2's approximation
                u = [0.5 * a * (1 + math.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))) for a in u]
            else:
                u = [0.5 * a * (1 + math.erf(a / math.sqrt(2))) for a in u]
            xs[n] = [a + b for a, b in zip(x, linear(u, p + "ffn_down"))]
    xs = [layer_norm(x, "output_norm") for x in xs]
    return [[sum(a * b for a, b in zip(row, x)) for row in head] for x in xs]


class ConvertedModels(unittest.TestCase):
    """Every test checkpoint converted once (f32), shared by the tests below."""

    @classmethod
    def setUpClass(cls):
        cls.out = scratch()
        cls.files = {}
        for name in VARIANTS:
            cls.files[name] = os.path.join(cls.out, name + ".gguf")
            convert_quietly(os.path.join(CKPTS, name + ".pt"), cls.files[name])

    def reader(self, name):
        return gguf.Reader(self.files[name])

    def test_logits_match_the_float64_reference_for_every_variant(self):
        for name in VARIANTS:
            with self.subTest(name):
                ref = reference(name)
                got = forward(self.files[name], ref["ids"])
                self.assertEqual(len(got[0]), ref["n_vocab"])
                worst = max(abs(a - b) for gr, rr in zip(got, ref["all_logits"]) for a, b in zip(gr, rr))
                self.assertLess(worst, 1e-9)

    def test_every_tensor_equals_what_torch_sees(self):
        for name in VARIANTS:
            r = self.reader(name)
            for key, sample in reference(name)["tensors"].items():
                with self.subTest(name=name, tensor=key):
                    target = gguf_name(key)
                    if key == "lm_head.weight" and target not in r.tensors:
                        continue  # tied: checked by the logits
                    values = r.tensor_values(target)
                    self.assertEqual(values[:8], sample["first"])
                    self.assertAlmostEqual(math.fsum(values), sample["sum"], delta=1e-9 * max(1, len(values)))
                    self.assertEqual(r.tensors[target].dims, sample["shape"][::-1])

    def test_keys_of_a_char_model(self):
        r = self.reader("bias_char")
        kv, types = r.kv, r.kv_types
        self.assertEqual(r.version, 3)
        self.assertEqual(kv["general.alignment"], 32)
        self.assertEqual(kv["general.architecture"], "gpt2")
        self.assertEqual(kv["general.name"], "bias_char")
        self.assertEqual(kv["general.file_type"], 0)
        expected = {"gpt2.context_length": 16, "gpt2.embedding_length": 16, "gpt2.feed_forward_length": 64,
                    "gpt2.block_count": 2, "gpt2.attention.head_count": 2}
        for key, value in expected.items():
            self.assertEqual((kv[key], types[key][0]), (value, gguf.UINT32), key)
        self.assertEqual(types["gpt2.attention.layer_norm_epsilon"][0], gguf.FLOAT32)
        self.assertAlmostEqual(kv["gpt2.attention.layer_norm_epsilon"], 1e-5, places=12)
        self.assertEqual(kv["gpt2h.gelu"], "erf")
        self.assertEqual(kv["gpt2h.converter_version"], convert.CONVERTER_VERSION)
        self.assertEqual(kv["gpt2h.tokenizer.kind"], "char")
        self.assertEqual(kv["gpt2h.tokenizer.chars"], list("\n !',.:;?ACEHIMORSTaehilmnorstuy"))
        self.assertEqual(json.loads(kv["gpt2h.nanogpt.model_args"]), reference("bias_char")["model_args"])
        self.assertEqual((kv["gpt2h.nanogpt.iter_num"], types["gpt2h.nanogpt.iter_num"][0]), (1234, gguf.UINT64))
        self.assertAlmostEqual(kv["gpt2h.nanogpt.best_val_loss"], 2.59, places=6)
        self.assertNotIn("gpt2h.nanogpt.padded_vocab_size", kv)
        # llama.cpp's "no vocabulary": it requires tokenizer.ggml.model, and takes n_vocab from gpt2.vocab_size
        self.assertEqual(kv["tokenizer.ggml.model"], "none")
        self.assertEqual((kv["gpt2.vocab_size"], types["gpt2.vocab_size"][0]), (len(kv["gpt2h.tokenizer.chars"]), gguf.UINT32))
        self.assertNotIn("tokenizer.ggml.tokens", kv)

    def test_tensor_layout_with_bias(self):
        r = self.reader("bias_char")
        C, V, T, F = 16, 32, 16, 64
        expected = {"token_embd.weight": [C, V], "position_embd.weight": [C, T],
                    "output_norm.weight": [C], "output_norm.bias": [C]}
        for i in range(2):
            for part, dims in (("attn_norm", [C]), ("attn_qkv", [C, 3 * C]), ("attn_output", [C, C]),
                               ("ffn_norm", [C]), ("ffn_up", [C, F]), ("ffn_down", [F, C])):
                expected[f"blk.{i}.{part}.weight"] = dims
                expected[f"blk.{i}.{part}.bias"] = [dims[-1]]
        self.assertEqual({n: i.dims for n, i in r.tensors.items()}, expected)
        self.assertTrue(all(i.type == gguf.F32 for i in r.tensors.values()))
        self.assertTrue(all(i.offset % 32 == 0 for i in r.tensors.values()))

    def test_bias_false_model_has_no_bias_tensors(self):
        names = set(self.reader("nobias").tensors)
        self.assertFalse([n for n in names if n.endswith(".bias")])
        self.assertIn("blk.1.ffn_norm.weight", names)

    def test_zero_biases_add_every_bias_as_zeros_and_keep_the_logits(self):
        out = os.path.join(scratch(), "nobias_zero.gguf")
        convert_quietly(os.path.join(CKPTS, "nobias.pt"), out, zero_biases=True)
        r, plain = gguf.Reader(out), self.reader("nobias")
        biases = {n for n in r.tensors if n.endswith(".bias")}
        self.assertEqual(set(r.tensors) - biases, set(plain.tensors))
        self.assertEqual(biases, {n[:-len("weight")] + "bias" for n in plain.tensors
                                  if n.startswith(("blk.", "output_norm"))})  # what llama.cpp's GPT-2 requires
        self.assertTrue(all(v == 0.0 for n in biases for v in r.tensor_values(n)))
        ids = reference("nobias")["ids"]
        self.assertEqual(forward(out, ids), forward(self.files["nobias"], ids))

    def test_orig_mod_prefix_is_removed(self):
        names = set(self.reader("compiled").tensors)
        self.assertEqual(names, set(self.reader("nobias").tensors))
        self.assertEqual(self.reader("compiled").kv["gpt2.attention.head_count"], 4)

    def test_tied_head_is_written_once_and_untied_head_separately(self):
        self.assertNotIn("output.weight", self.reader("nobias").tensors)
        r = self.reader("untied")
        self.assertEqual(r.tensors["output.weight"].dims, [16, 24])
        self.assertNotEqual(r.tensor_values("output.weight"), r.tensor_values("token_embd.weight"))

    def test_ids_only_model_has_no_tokenizer_but_llama_cpps_no_vocabulary(self):
        kv = self.reader("nobias").kv
        self.assertEqual([k for k in kv if k.startswith("tokenizer.") or k.startswith("gpt2h.tokenizer")], ["tokenizer.ggml.model"])
        rows = self.reader("nobias").tensors["token_embd.weight"].dims[1]
        self.assertEqual((kv["tokenizer.ggml.model"], kv["gpt2.vocab_size"]), ("none", rows))


# ---- the key table: docs/FORMAT.md, the converter, tools/gguf_write.h and the loader agree --------

USES = ("required", "optional", "not read")
# What each of the loader's getters (src/model/gguf.h) accepts, in docs/FORMAT.md's type names.
GETTER_TYPES = {"int": {"uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"},
                "float": {"float32", "float64"}, "string": {"string"}, "strings": {"string[]"}}


def documented_keys():
    """docs/FORMAT.md's key table: key -> (type as written there, what gpt2.h does with it)."""
    with open(os.path.join(ROOT, "docs", "FORMAT.md"), encoding="utf-8") as f:
        section = f.read().split("\n### Keys\n", 1)[1].split("\n### ", 1)[0]
    keys = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]  # a cell may hold an escaped \|
        if len(cells) == 4 and cells[0].startswith("`"):
            uses = [u for u in USES if cells[2].startswith(u)]
            if not uses:
                raise AssertionError(f"docs/FORMAT.md: key {cells[0]}: gpt2.h column '{cells[2]}' is none of {USES}")
            keys[cells[0].strip("`")] = (cells[1], uses[0])
    return keys


def type_name(vtype, elem_type):
    """A GGUF value type as docs/FORMAT.md writes it: uint32, string[], ..."""
    return gguf.TYPE_NAMES[elem_type] + "[]" if vtype == gguf.ARRAY else gguf.TYPE_NAMES[vtype]


def cpp_key_table():
    """tools/gguf_write.h's gguf_keys[]: key -> (type, use), and the number of entries seen."""
    with open(os.path.join(TOOLS, "gguf_write.h"), encoding="utf-8") as f:
        table = f.read().split("gguf_keys[] = {", 1)[1].split("};", 1)[0]
    keys = {}
    for name, use, vtype, elem in re.findall(r'\{"([^"]+)",\s*GGUF_(\w+),\s*GGUF_(\w+)(?:,\s*GGUF_(\w+))?\}', table):
        keys[name] = (elem.lower() + "[]" if vtype == "ARRAY" else vtype.lower(), use.lower().replace("_", " "))
    return keys, table.count('{"')


def loader_reads():
    """Every key src/model/model.h reads with a getter: key -> (getter, required or optional)."""
    with open(os.path.join(ROOT, "src", "model", "model.h"), encoding="utf-8") as f:
        calls = re.findall(r'gpt2__gguf_get_(\w+)\(g, "([^"]+)", (true|false)', f.read())
    return {key: (getter, "required" if required == "true" else "optional") for getter, key, required in calls}


class KeyTable(unittest.TestCase):
    """docs/FORMAT.md's key table is the contract: the converter writes exactly its keys with its
    types, tools/gguf_write.h lists the same keys, and the loader reads them as the table says."""

    @classmethod
    def setUpClass(cls):
        cls.documented = documented_keys()
        out = scratch()
        char, bpe = os.path.join(out, "char.gguf"), os.path.join(out, "bpe.gguf")
        convert_quietly(os.path.join(CKPTS, "bias_char.pt"), char)  # characters, iter_num, best_val_loss
        convert_quietly(os.path.join(CKPTS, "padded_gpt2.pt"), bpe, vocab=os.path.join(DATA, "gpt2-bpe"))  # BPE, padding
        cls.written = {}
        for path in (char, bpe):
            r = gguf.Reader(path)
            cls.written.update({key: type_name(*r.kv_types[key]) for key in r.kv})

    def test_the_documented_table_is_found(self):
        self.assertGreater(len(self.documented), 20)
        self.assertEqual(self.documented["gpt2.context_length"], ("uint32", "required"))

    def test_converter_writes_exactly_the_documented_keys_with_their_types(self):
        self.assertEqual(self.written, {key: t for key, (t, _) in self.documented.items()})

    def test_cpp_key_table_lists_the_documented_keys_types_and_uses(self):
        table, entries = cpp_key_table()
        self.assertEqual(len(table), entries, "an entry of gguf_keys[] that the pattern does not read")
        self.assertEqual(table, self.documented)

    def test_loader_reads_the_documented_keys_as_documented(self):
        reads = loader_reads()
        for key, (getter, use) in reads.items():
            with self.subTest(key):
                self.assertIn(key, self.documented)
                doc_type, doc_use = self.documented[key]
                self.assertIn(doc_type, GETTER_TYPES[getter])
                self.assertEqual(use, doc_use)
        # general.alignment is read by the GGUF parser itself (gpt2__gguf_parse): an optional uint32.
        self.assertEqual(set(reads) | {"general.alignment"}, {k for k, (_, use) in self.documented.items() if use != "not read"})


class CheckpointReader(unittest.TestCase):
    def test_strided_views_read_as_torch_sees_them(self):
        with open(os.path.join(CKPTS, "strided.json")) as f:
            expected = json.load(f)
        views = torch_checkpoint.load(os.path.join(CKPTS, "strided.pt"))
        self.assertEqual(set(views), set(expected))
        for name, want in expected.items():
            with self.subTest(name):
                self.assertEqual(list(views[name].shape), want["shape"])
                self.assertEqual(views[name].tolist(), want["values"])

    def test_real_checkpoint_storage_is_shared_by_tied_weights(self):
        model = torch_checkpoint.load(os.path.join(DATA, "shakespeare_char", "ckpt_slim.pt"))["model"]
        self.assertTrue(model["lm_head.weight"].same_data(model["transformer.wte.weight"]))


class Float16(unittest.TestCase):
    def test_f16_weights_are_float32_rounded_to_nearest_even(self):
        out = scratch()
        f32, f16 = os.path.join(out, "a.gguf"), os.path.join(out, "b.gguf")
        ckpt = os.path.join(CKPTS, "untied.pt")
        convert_quietly(ckpt, f32)
        convert_quietly(ckpt, f16, dtype="f16")
        a, b = gguf.Reader(f32), gguf.Reader(f16)
        self.assertEqual(b.kv["general.file_type"], 1)
        self.assertEqual(set(a.tensors), set(b.tensors))
        for name, info in b.tensors.items():
            with self.subTest(name):
                values = a.tensor_values(name)
                if len(info.dims) == 1:
                    self.assertEqual(info.type, gguf.F32)
                    self.assertEqual(b.tensor_bytes(name), a.tensor_bytes(name))
                else:
                    self.assertEqual(info.type, gguf.F16)
                    self.assertEqual(b.tensor_bytes(name), struct.pack(f"<{len(values)}e", *values))

    def test_f16_stored_checkpoint_converts_exactly(self):
        out = os.path.join(scratch(), "f16.gguf")
        convert_quietly(os.path.join(CKPTS, "f16.pt"), out, dtype="f16")
        r = gguf.Reader(out)
        first = reference("f16")["tensors"]["transformer.h.0.attn.c_attn.weight"]["first"]
        self.assertEqual(r.tensor_values("blk.0.attn_qkv.weight")[:8], first)

    def test_values_beyond_the_f16_range_become_infinity(self):
        storage = torch_checkpoint.Storage(None, "x", "float32", 4, "f", 4)
        storage._data = struct.pack("<4f", 1.0, 65504.0, 1e6, -1e6)
        t = torch_checkpoint.Tensor(storage, 0, (2, 2), (2, 1))
        packed = b"".join(convert._float_chunks(t, 4, gguf.F16))
        self.assertEqual(struct.unpack("<4e", packed), (1.0, 65504.0, math.inf, -math.inf))


class Vocabularies(unittest.TestCase):
    def test_padded_gpt2_vocabulary_is_cut_to_50257_tokens(self):
        out = os.path.join(scratch(), "padded.gguf")
        convert_quietly(os.path.join(CKPTS, "padded_gpt2.pt"), out)
        r = gguf.Reader(out)
        self.assertEqual(r.tensors["token_embd.weight"].dims, [8, 50257])
        self.assertEqual(r.kv["gpt2h.nanogpt.padded_vocab_size"], 50304)
        ref = reference("padded_gpt2")
        logits = forward(out, ref["ids"])
        for got, want in zip(logits, ref["all_logits_first_columns"]):
            self.assertLess(max(abs(a - b) for a, b in zip(got, want)), 1e-9)
        last = logits[-1]
        self.assertEqual(len(last), 50257)
        for column, value in zip(ref["last_logits_columns"], ref["last_logits_values"]):
            self.assertAlmostEqual(last[column], value, delta=1e-9)
        self.assertEqual(max(range(len(last)), key=last.__getitem__), ref["last_argmax"])
        m = max(last)
        self.assertAlmostEqual(m + math.log(math.fsum(math.exp(v - m) for v in last)), ref["last_logsumexp"], delta=1e-9)

    def test_gpt2_bpe_vocabulary_is_written_like_llama_cpp(self):
        out = os.path.join(scratch(), "bpe.gguf")
        convert_quietly(os.path.join(CKPTS, "padded_gpt2.pt"), out, vocab=os.path.join(DATA, "gpt2-bpe"))
        r = gguf.Reader(out)
        with open(os.path.join(DATA, "gpt2-bpe", "encoder.json"), encoding="utf-8") as f:
            encoder = json.load(f)
        with open(os.path.join(DATA, "gpt2-bpe", "vocab.bpe"), encoding="utf-8") as f:
            merges = [line for line in f.read().split("\n")[1:] if line]
        tokens = r.kv["tokenizer.ggml.tokens"]
        self.assertEqual(r.kv["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(len(tokens), 50257)
        self.assertEqual({t: i for i, t in enumerate(tokens)}, encoder)
        self.assertEqual(tokens[198], "\u010a")  # "\n" in the byte-level alphabet
        self.assertEqual(r.kv["tokenizer.ggml.merges"], merges)
        self.assertEqual(r.kv["tokenizer.ggml.merges"][0], "\u0120 t")
        types = r.kv["tokenizer.ggml.token_type"]
        self.assertEqual(r.kv_types["tokenizer.ggml.token_type"], (gguf.ARRAY, gguf.INT32))
        self.assertEqual((types[50256], set(types[:50256])), (3, {1}))
        for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            self.assertEqual((r.kv[key], r.kv_types[key][0]), (50256, gguf.UINT32))
        self.assertEqual(r.kv["gpt2h.nanogpt.padded_vocab_size"], 50304)

    def test_hugging_face_vocabulary_files_give_the_same_tokenizer(self):
        folder = scratch()
        shutil.copy(os.path.join(DATA, "gpt2-bpe", "encoder.json"), os.path.join(folder, "vocab.json"))
        shutil.copy(os.path.join(DATA, "gpt2-bpe", "vocab.bpe"), os.path.join(folder, "merges.txt"))
        tokens, merges = convert.load_bpe_vocab(folder)
        self.assertEqual((tokens, merges), convert.load_bpe_vocab(os.path.join(DATA, "gpt2-bpe")))

    def test_shakespeare_fixture_matches_nanogpt_reference(self):
        out = os.path.join(scratch(), "shakespeare.gguf")
        convert_quietly(os.path.join(DATA, "shakespeare_char", "ckpt_slim.pt"), out)
        r = gguf.Reader(out)
        with open(os.path.join(DATA, "shakespeare_char", "meta.pkl"), "rb") as f:
            self.assertEqual(r.kv["gpt2h.tokenizer.chars"], convert.load_char_vocab(f.name))
        self.assertEqual(r.kv["general.name"], "shakespeare_char")
        self.assertNotIn("blk.0.attn_norm.bias", r.tensors)
        with open(os.path.join(DATA, "shakespeare_char", "reference.json")) as f:
            prompt = json.load(f)["prompts"][1]  # "\n": one token keeps the Python forward quick
        got = forward(out, prompt["ids"])[-1]
        self.assertLess(max(abs(a - b) for a, b in zip(got, prompt["last_logits"])), 1e-4)

    def test_meta_pkl_that_is_not_a_vocabulary_is_refused(self):
        folder = scratch()
        cases = {
            "list.pkl": (pickle.dumps([1, 2, 3]), "not a nanoGPT character vocabulary"),
            "gap.pkl": (pickle.dumps({"itos": {0: "a", 2: "b"}, "stoi": {"a": 0, "b": 2}}), "ids 0..1"),
            "long.pkl": (pickle.dumps({"itos": {0: "ab"}, "stoi": {"ab": 0}}), "single character"),
            "stoi.pkl": (pickle.dumps({"itos": {0: "a", 1: "b"}, "stoi": {"a": 1, "b": 0}}), "inverse"),
            "global.pkl": (pickle.dumps({"itos": __import__("collections").OrderedDict()}), "collections.OrderedDict"),
            "junk.pkl": (b"\x00garbage", "not a nanoGPT meta.pkl"),
        }
        for name, (data, message) in cases.items():
            with self.subTest(name):
                path = os.path.join(folder, name)
                with open(path, "wb") as f:
                    f.write(data)
                code, err, out = run_main(os.path.join(CKPTS, "nobias.pt"), "-o", os.path.join(folder, "x.gguf"),
                                          "--meta", path)
                self.assertEqual(code, 1)
                self.assertIn(message, err)
                self.assertFalse(os.path.exists(os.path.join(folder, "x.gguf")))


def run_main(*args):
    """convert.main in this process: (exit code, stderr, stdout)."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = convert.main(list(args))
    return code, err.getvalue(), out.getvalue()


class UserMistakes(unittest.TestCase):
    def test_a_character_checkpoint_without_its_meta_pkl_is_told_to_give_meta(self):
        folder = scratch()
        shutil.copy(os.path.join(DATA, "shakespeare_char", "ckpt_slim.pt"), folder)  # no meta.pkl beside it
        notes = []
        convert.convert(os.path.join(folder, "ckpt_slim.pt"), os.path.join(folder, "m.gguf"), log=notes.append)
        note = [n for n in notes if "no vocabulary given" in n]
        self.assertEqual(len(note), 1, notes)
        self.assertIn("--meta PATH/meta.pkl", note[0])
        self.assertNotIn("--vocab", note[0])

    def setUp(self):
        self.out = scratch()
        self.target = os.path.join(self.out, "model.gguf")

    def assertRefused(self, ckpt, message, *extra):
        code, err, _ = run_main(ckpt, "-o", self.target, *extra)
        self.assertEqual(code, 1)
        self.assertTrue(err.startswith("convert.py: error: "), err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(message, err)
        self.assertEqual(os.listdir(self.out), [])  # no output, no temporary file
        return err

    def test_malicious_pickle_is_refused_without_running_it(self):
        if os.path.exists(PWNED):
            os.remove(PWNED)
        code, out, err = run_cli(os.path.join(CKPTS, "malicious.pt"), "-o", self.target)
        self.assertEqual(code, 1)
        self.assertIn("refusing to load checkpoint: it references os.system", err)
        self.assertNotIn("Traceback", err)
        self.assertFalse(os.path.exists(PWNED))
        self.assertFalse(os.path.exists(self.target))

    def test_stack_global_to_builtins_eval_is_refused(self):
        payload = (b"\x80\x04" + b"\x8c\x08builtins" + b"\x8c\x04eval" + b"\x93"
                   + b"\x8c\x1a__import__('os').getpid()" + b"\x85R.")
        path = os.path.join(scratch(), "evil.pt")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("evil/data.pkl", payload)
        self.assertRefused(path, "it references builtins.eval")

    def test_truncated_zip_is_refused(self):
        path = os.path.join(scratch(), "truncated.pt")
        with open(os.path.join(CKPTS, "nobias.pt"), "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:len(data) // 2])
        self.assertRefused(path, "truncated")

    def test_storage_shorter_than_its_tensor_is_refused(self):
        path = os.path.join(scratch(), "short.pt")
        with zipfile.ZipFile(os.path.join(CKPTS, "nobias.pt")) as zin, zipfile.ZipFile(path, "w") as zout:
            for info in zin.infolist():
                data = zin.read(info.filename)
                zout.writestr(info.filename, data[:16] if info.filename == "nobias/data/0" else data)
        self.assertRefused(path, "but the archive holds 16")

    def test_absurd_storage_size_is_refused_before_allocating(self):
        numel = 10 ** 12
        payload = (b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
                   b"X\x03\x00\x00\x00cpu" + b"\x8a\x05" + numel.to_bytes(5, "little") + b"tQ.")
        path = os.path.join(scratch(), "huge.pt")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("huge/data.pkl", payload)
            z.writestr("huge/data/0", b"\0" * 64)
        self.assertRefused(path, "GiB limit")

    def test_wrong_shape_and_missing_tensor_are_refused(self):
        self.assertRefused(os.path.join(CKPTS, "bad_shape.pt"),
                           "transformer.h.0.attn.c_proj.weight: shape [8, 12], expected [8, 8]")
        self.assertRefused(os.path.join(CKPTS, "bad_missing_tensor.pt"), "missing tensor transformer.h.0.ln_2.bias")

    def test_missing_file_and_non_zip_are_refused(self):
        self.assertRefused(os.path.join(self.out, "nope.pt"), "no such file")
        path = os.path.join(scratch(), "text.pt")
        with open(path, "w") as f:
            f.write("hello\n")
        self.assertRefused(path, "not a PyTorch checkpoint")

    def test_zip_that_is_not_a_checkpoint_is_refused(self):
        path = os.path.join(scratch(), "other.zip")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("readme.txt", "hi")
        self.assertRefused(path, "no TOP/data.pkl")

    def test_failed_conversion_keeps_the_existing_output(self):
        with open(self.target, "w") as f:
            f.write("old")
        code, _, _ = run_main(os.path.join(CKPTS, "bad_shape.pt"), "-o", self.target)
        self.assertEqual(code, 1)
        self.assertEqual(os.listdir(self.out), ["model.gguf"])
        with open(self.target) as f:
            self.assertEqual(f.read(), "old")

    def test_user_error_prints_one_line_and_no_traceback(self):
        path = os.path.join(scratch(), "truncated.pt")
        with open(os.path.join(CKPTS, "untied.pt"), "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-200])
        for args in ([path], [os.path.join(CKPTS, "malicious.pt")], [os.path.join(CKPTS, "bad_shape.pt")],
                     [os.path.join(CKPTS, "nobias.pt"), "--vocab", self.out]):
            with self.subTest(args[-1]):
                code, out, err = run_cli(*args, "-o", self.target)
                self.assertEqual(code, 1)
                self.assertNotIn("Traceback", err)
                self.assertTrue(err.startswith("convert.py: error: "), err)

    def test_missing_output_folder_is_refused(self):
        code, err, _ = run_main(os.path.join(CKPTS, "nobias.pt"), "-o", os.path.join(self.out, "no", "m.gguf"))
        self.assertEqual(code, 1)
        self.assertIn("the output folder does not exist", err)

    def test_meta_and_vocab_together_are_refused(self):
        self.assertRefused(os.path.join(CKPTS, "nobias.pt"), "not both", "--meta", "m.pkl", "--vocab", "v")


class CommandLine(unittest.TestCase):
    def test_help_explains_every_flag(self):
        code, out, err = run_cli("--help")
        self.assertEqual(code, 0)
        for flag in ("--output", "--meta", "--vocab", "--dtype", "--gelu", "--name"):
            self.assertIn(flag, out)

    def test_usage_error_exits_1(self):
        code, out, err = run_cli(os.path.join(CKPTS, "nobias.pt"))
        self.assertEqual(code, 1)
        self.assertIn("convert.py: error: the following arguments are required: -o/--output", err)

    def test_cli_converts_and_notes_missing_tokenizer(self):
        target = os.path.join(scratch(), "m.gguf")
        code, out, err = run_cli(os.path.join(CKPTS, "nobias.pt"), "-o", target, "--gelu", "tanh",
                                 "--name", "tiny", "--dtype", "f16")
        self.assertEqual(code, 0, err)
        self.assertIn("--meta PATH/meta.pkl", err)  # its tiny vocabulary looks like characters
        kv = gguf.Reader(target).kv
        self.assertEqual((kv["gpt2h.gelu"], kv["general.name"], kv["general.file_type"]), ("tanh", "tiny", 1))

    def test_make_test_models_writes_every_model(self):
        out = scratch()
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "make_test_models.py"), out],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        expected = {"shakespeare_char.gguf", "shakespeare_char_f16.gguf", "padded_gpt2.gguf", "padded_rows_gpt2.gguf"}
        expected |= {name + ".gguf" for name in VARIANTS}
        self.assertEqual(set(os.listdir(out)), expected)
        self.assertEqual(gguf.Reader(os.path.join(out, "shakespeare_char_f16.gguf")).kv["general.file_type"], 1)
        self.assertEqual(gguf.Reader(os.path.join(out, "padded_gpt2.gguf")).kv["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(gguf.Reader(os.path.join(out, "padded_rows_gpt2.gguf")).tensors["token_embd.weight"].dims, [8, 50304])

    def test_gguf_dump_lists_keys_and_tensors(self):
        target = os.path.join(scratch(), "m.gguf")
        convert_quietly(os.path.join(CKPTS, "bias_char.pt"), target)
        p = subprocess.run([sys.executable, os.path.join(TOOLS, "gguf.py"), "dump", target],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("gpt2.block_count", p.stdout)
        self.assertIn("blk.1.ffn_down.weight", p.stdout)
        # A file alone dumps it too (issue 32: `gguf.py FILE` failed without `dump`).
        alone = subprocess.run([sys.executable, os.path.join(TOOLS, "gguf.py"), target], capture_output=True, text=True, timeout=60)
        self.assertEqual((alone.returncode, alone.stdout), (0, p.stdout), alone.stderr)


class GgufTool(unittest.TestCase):
    """tools/gguf.py reads every weight type gpt2.h runs, as gpt2.h reads it."""

    def test_q8_0_q4_0_and_bf16_values_are_read_as_gpt2_h_reads_them(self):
        path = os.path.join(scratch(), "types.gguf")
        q8_0 = struct.pack("<e32b", 0.5, *range(-16, 16)) + struct.pack("<e32b", -0.25, *([127] * 32))
        # q4_0: byte j = value j (low nibble) and value j + 16 (high nibble), each scale * (nibble - 8)
        q4_0 = struct.pack("<e", 0.5) + bytes(j | (15 - j) << 4 for j in range(16))
        bf16 = struct.pack("<3H", 0x3F80, 0xC040, 0x0001)  # 1, -3 and the smallest subnormal
        w = gguf.Writer()
        w.add_tensor("q", [32, 2], gguf.Q8_0, lambda: [q8_0])
        w.add_tensor("n", [32], gguf.Q4_0, lambda: [q4_0])
        w.add_tensor("b", [3], gguf.BF16, lambda: [bf16])
        with open(path, "wb") as f:
            w.write(f)
        r = gguf.Reader(path)
        self.assertEqual(r.tensor_values("q"), [0.5 * q for q in range(-16, 16)] + [-0.25 * 127] * 32)
        self.assertEqual(r.tensor_values("n"), [0.5 * (j - 8) for j in range(16)] + [0.5 * (7 - j) for j in range(16)])
        self.assertEqual(r.tensor_values("b"), [1.0, -3.0, struct.unpack("<f", struct.pack("<I", 0x10000))[0]])
        p = subprocess.run([sys.executable, os.path.join(TOOLS, "gguf.py"), "dump", path],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\bq +Q8_0 \[32, 2\]")
        self.assertRegex(p.stdout, r"\bn +Q4_0 \[32\]")
        self.assertRegex(p.stdout, r"\bb +BF16 \[3\]")

    def test_q8_0_rows_that_are_not_whole_blocks_are_refused_in_one_line(self):
        path = os.path.join(scratch(), "short_rows.gguf")
        w = gguf.Writer()
        w.add_tensor("x", [16], gguf.F32, lambda: [bytes(64)])
        with open(path, "wb") as f:
            w.write(f)
        with open(path, "r+b") as f:  # retype x as q8_0: rows of 16 values are half a block
            data = f.read()
            f.seek(data.index(struct.pack("<Q", 1) + b"x") + 9 + 4 + 8)
            f.write(struct.pack("<I", gguf.Q8_0))
        p = subprocess.run([sys.executable, os.path.join(TOOLS, "gguf.py"), "dump", path],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr, f"gguf.py: error: {path}: tensor x: rows of 16 values, not a multiple of the Q8_0 block of 32\n")

    @unittest.skipUnless(os.path.exists(QUANTIZE), "needs gpt2-quantize (GPT2_BINARY_DIR)")
    def test_dump_reads_what_gpt2_quantize_writes_and_its_file_type(self):
        out = scratch()
        f32 = os.path.join(out, "shakespeare.gguf")
        convert_quietly(os.path.join(DATA, "shakespeare_char", "ckpt_slim.pt"), f32)
        want = gguf.Reader(f32).tensor_values("blk.0.ffn_up.weight")
        # q4_0: the tied head (token_embd.weight) stays q8_0, as llama-quantize keeps it at more bits;
        # its values are within a level (1/8 of a block's largest) of the float32 ones, plus f16 rounding
        for name, ttype, head_type, file_type, tolerance in (("f16", gguf.F16, gguf.F16, 1, 0.01), ("q8_0", gguf.Q8_0, gguf.Q8_0, 7, 0.01),
                                                            ("bf16", gguf.BF16, gguf.BF16, 32, 0.01), ("q4_0", gguf.Q4_0, gguf.Q8_0, 2, 0.126)):
            with self.subTest(name):
                path = os.path.join(out, f"shakespeare_{name}.gguf")
                p = subprocess.run([QUANTIZE, f32, path, "--type", name], capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
                r = gguf.Reader(path)
                self.assertEqual(r.kv["general.file_type"], file_type)  # llama.cpp's llama_ftype
                self.assertEqual(r.tensors["token_embd.weight"].type, head_type)
                self.assertEqual(r.tensors["blk.0.ffn_up.weight"].type, ttype)
                got = r.tensor_values("blk.0.ffn_up.weight")
                self.assertLess(max(abs(a - b) for a, b in zip(got, want)), tolerance * max(abs(b) for b in want))
                p = subprocess.run([sys.executable, os.path.join(TOOLS, "gguf.py"), "dump", path],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertRegex(p.stdout, r"token_embd\.weight +" + gguf.TENSOR_TYPES[head_type][0] + r" ")


if __name__ == "__main__":
    unittest.main()
