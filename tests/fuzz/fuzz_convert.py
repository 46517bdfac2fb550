#!/usr/bin/env python3
"""Fuzzes tools/convert.py with mutated nanoGPT checkpoints and Hugging Face safetensors files:
whatever the input, the converter
must either succeed (exit 0, the output file written and nothing else left behind) or refuse it
(exit 1, one line "convert.py: error: ..." last on stderr, no Python traceback, and no output
file nor temporary file left behind). A crash, a traceback, a hang or a leftover file is a bug;
the input is saved to the failures folder and the run fails.

    python3 tests/fuzz/fuzz_convert.py --seconds 60
    python3 tests/fuzz/fuzz_convert.py --iterations 500 --seed 7 --failures /tmp/convert-failures

Mutations, applied to the small checkpoints of tests/data/checkpoints/:
  bytes   flip, overwrite, insert or delete bytes anywhere, or truncate the file (the zip
          container itself breaks: bad central directory, CRCs, local headers)
  entry   rewrite one member of the zip (data.pkl, a tensor storage, the byteorder or version
          file) with its bytes mutated, truncated or extended, into an otherwise valid zip, so
          the unpickler and the tensor rebuilding see the damage rather than the zip reader
  pickle  change one opcode's argument in data.pkl (numbers: shapes, strides, offsets, sizes)

and to the model.safetensors files of tests/data/hf/ (converted as a Hugging Face folder with
that folder's config.json and vocabulary):
  st-length  replace the 8-byte header length (0, off by a few, past the end, 2^63, 2^64 - 1)
  st-header  change one field of one tensor in the JSON header (dtype, a shape size, a data
             offset: small steps, swaps, huge values, wrong types) or drop / duplicate an entry,
             then write the header back with its correct length
  st-bytes   flip, overwrite, insert or delete bytes of the header text, or anywhere in the file
"""
import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONVERT = os.path.join(ROOT, "tools", "convert.py")
CHECKPOINTS = os.path.join(ROOT, "tests", "data", "checkpoints")
HF = os.path.join(ROOT, "tests", "data", "hf")
# Hugging Face folders whose model.safetensors is mutated.
HF_SEEDS = ["save_pretrained", "original"]
# Small checkpoints that convert (with their vocabulary options), as seeds.
SEEDS = [
    ("nobias.pt", []),
    ("bias_char.pt", ["--meta", os.path.join(CHECKPOINTS, "bias_char.meta.pkl")]),
    ("f16.pt", []),
    ("bf16.pt", ["--dtype", "f16"]),
    ("untied.pt", []),
    ("compiled.pt", []),
]
TIMEOUT_S = 60


def mutate_bytes(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(("flip", "set", "insert", "delete", "truncate"))
        pos = rng.randrange(max(len(data), 1))
        if kind == "flip" and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == "set" and data:
            data[pos] = rng.choice((0, 0xff, 0x7f, 0x80, rng.randrange(256)))
        elif kind == "insert":
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == "delete":
            del data[pos:pos + rng.randint(1, 16)]
        elif kind == "truncate":
            del data[pos:]
            break
    return bytes(data)


def mutate_pickle_number(data, rng):
    """Changes the argument of one BININT1/BININT2/BININT/LONG1 opcode: shapes, strides, offsets."""
    data = bytearray(data)
    spots = [i for i, b in enumerate(data) if b in (0x4b, 0x4d, 0x4a)]  # K, M, J
    if not spots:
        return mutate_bytes(data, rng)
    i = rng.choice(spots)
    width = {0x4b: 1, 0x4d: 2, 0x4a: 4}[data[i]]
    value = rng.choice((0, 1, 2, 255, 65535, 0x7fffffff, 0xffffffff, rng.randrange(1 << (8 * width))))
    value &= (1 << (8 * width)) - 1
    data[i + 1:i + 1 + width] = value.to_bytes(width, "little")
    return bytes(data)


def mutate_entry(data, rng):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    pkl = [i for i, (info, _) in enumerate(entries) if info.filename.endswith("data.pkl")]
    index = rng.choice(pkl) if pkl and rng.random() < 0.6 else rng.randrange(len(entries))
    info, content = entries[index]
    r = rng.random()
    if info.filename.endswith("data.pkl") and r < 0.5:
        content = mutate_pickle_number(content, rng)
    elif r < 0.7:
        content = content[:rng.randrange(len(content) + 1)]
    elif r < 0.8:
        content = content + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    else:
        content = mutate_bytes(content, rng)
    entries[index] = (info, content)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info, content in entries:
            z.writestr(info.filename, content)
    return out.getvalue()


def mutate(data, rng):
    kind = rng.choice(("bytes", "entry", "entry", "pickle"))
    if kind == "bytes":
        return kind, mutate_bytes(data, rng)
    if kind == "pickle":
        return kind, mutate_entry_pickle(data, rng)
    return kind, mutate_entry(data, rng)


def mutate_entry_pickle(data, rng):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        entries = [(info.filename, z.read(info)) for info in z.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, content in entries:
            z.writestr(name, mutate_pickle_number(content, rng) if name.endswith("data.pkl") else content)
    return out.getvalue()


def _safetensors_parts(data):
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def _safetensors_join(header, rest):
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + rest


def mutate_safetensors(data, rng):
    kind = rng.choice(("st-length", "st-header", "st-header", "st-bytes"))
    if kind == "st-length":
        n = int.from_bytes(data[:8], "little")
        value = rng.choice((0, 1, n - 1, n + 1, n + rng.randint(2, 64), len(data), 1 << 63, (1 << 64) - 1,
                            rng.randrange(1 << 64)))
        return kind, value.to_bytes(8, "little") + data[8:]
    if kind == "st-bytes":
        if rng.random() < 0.5:
            return kind, mutate_bytes(data, rng)
        n = int.from_bytes(data[:8], "little")
        return kind, data[:8] + mutate_bytes(data[8:8 + n], rng) + data[8 + n:]
    header, rest = _safetensors_parts(data)
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entry = dict(header[name])
    field = rng.choice(("dtype", "shape", "data_offsets", "drop", "duplicate", "type"))
    if field == "dtype":
        entry["dtype"] = rng.choice(("F32", "F16", "BF16", "F64", "I32", "U8", "BOOL", "F8_E4M3", "X", ""))
    elif field == "shape" and entry["shape"]:
        i = rng.randrange(len(entry["shape"]))
        entry["shape"] = list(entry["shape"])
        entry["shape"][i] = rng.choice((0, 1, entry["shape"][i] + 1, entry["shape"][i] - 1, 1 << 40, -1))
    elif field == "data_offsets":
        offsets = list(entry["data_offsets"])
        i = rng.randrange(2)
        offsets[i] = rng.choice((0, offsets[i] + 4, offsets[i] - 4, offsets[1 - i], 1 << 63, len(rest), -8))
        entry["data_offsets"] = offsets
    elif field == "drop":
        del header[name]
        return kind, _safetensors_join(header, rest)
    elif field == "duplicate":
        header[name + ".copy"] = entry
        return kind, _safetensors_join(header, rest)
    else:
        key = rng.choice(("dtype", "shape", "data_offsets"))
        entry[key] = rng.choice((None, "1", 1.5, [], {}, [[1]], True))
    header[name] = entry
    return kind, _safetensors_join(header, rest)


def check(workdir, ckpt_bytes, options, hf_folder=None):
    """Runs the converter on the bytes (a checkpoint, or the model.safetensors of a copy of
    hf_folder); returns None when it behaved, else what went wrong."""
    outdir = os.path.join(workdir, "out")
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    if hf_folder:
        src = os.path.join(workdir, "hf")
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        for name in ("config.json", "vocab.json", "merges.txt"):
            shutil.copy(os.path.join(hf_folder, name), src)
        target = os.path.join(src, "model.safetensors")
    else:
        src = target = os.path.join(workdir, "ckpt.pt")
    with open(target, "wb") as f:
        f.write(ckpt_bytes)
    output = os.path.join(outdir, "model.gguf")
    try:
        proc = subprocess.run([sys.executable, CONVERT, src, "-o", output] + options,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no answer within {TIMEOUT_S} s"
    left = sorted(os.listdir(outdir))
    err = proc.stderr.strip().splitlines()
    if "Traceback" in proc.stderr:
        return "traceback:\n" + proc.stderr[-3000:]
    if proc.returncode == 0:
        if left != ["model.gguf"]:
            return f"exit 0 but the output folder holds {left}"
        return None
    if proc.returncode != 1:
        return f"exit status {proc.returncode} (expected 0 or 1); stderr:\n{proc.stderr[-3000:]}"
    if not err or not err[-1].startswith("convert.py: error: "):
        return f"exit 1 without a 'convert.py: error: ...' line last on stderr:\n{proc.stderr[-3000:]}"
    if left:
        return f"exit 1 but the output folder holds {left}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60, help="stop after this long (default 60)")
    parser.add_argument("--iterations", type=int, default=0, help="stop after this many conversions (0: no limit)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    parser.add_argument("--failures", default=os.path.join(ROOT, "build-fuzz", "convert_failures"),
                        help="folder for the inputs that made the converter misbehave (default build-fuzz/convert_failures)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    seeds = [(name, open(os.path.join(CHECKPOINTS, name), "rb").read(), opts, None) for name, opts in SEEDS]
    for folder in HF_SEEDS:
        with open(os.path.join(HF, folder, "model.safetensors"), "rb") as f:
            seeds.append((f"hf-{folder}.safetensors", f.read(), [], os.path.join(HF, folder)))
    start = time.monotonic()
    runs = refused = failures = 0
    kinds = {}
    with tempfile.TemporaryDirectory(prefix="fuzz_convert.") as workdir:
        while time.monotonic() - start < args.seconds and (not args.iterations or runs < args.iterations):
            name, data, opts, hf_folder = rng.choice(seeds)
            kind, mutated = mutate_safetensors(data, rng) if hf_folder else mutate(data, rng)
            kinds[kind] = kinds.get(kind, 0) + 1
            problem = check(workdir, mutated, opts, hf_folder)
            runs += 1
            if problem is None:
                refused += 0 if os.path.exists(os.path.join(workdir, "out", "model.gguf")) else 1
                continue
            failures += 1
            os.makedirs(args.failures, exist_ok=True)
            suffix = ".safetensors" if hf_folder else ".pt"
            path = os.path.join(args.failures, f"{os.path.splitext(name)[0]}-{kind}-{runs}{suffix}")
            with open(path, "wb") as f:
                f.write(mutated)
            print(f"FAIL ({name}, {kind} mutation, saved as {path}; options {opts}): {problem}")
    elapsed = time.monotonic() - start
    print(f"fuzz_convert: seed {seed}, {runs} conversions in {elapsed:.0f} s "
          f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}): {runs - refused} converted, "
          f"{refused} refused cleanly, {failures} misbehaved")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
