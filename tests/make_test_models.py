#!/usr/bin/env python3
"""Converts the test checkpoints to the GGUF files the C++ tests read (run by CTest first).

    python3 tests/make_test_models.py OUTDIR

writes OUTDIR/shakespeare_char.gguf (f32) and shakespeare_char_f16.gguf from
tests/data/shakespeare_char/, and OUTDIR/NAME.gguf (f32) for each tests/data/checkpoints/NAME.pt
(padded_gpt2 with the GPT-2 BPE vocabulary of tests/data/gpt2-bpe/; the broken-on-purpose
malicious.pt and bad_*.pt, and strided.pt, are skipped), and padded_rows_gpt2.gguf: padded_gpt2
with nanoGPT's 47 padding rows kept in the embedding.
"""
import argparse
import glob
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import convert  # noqa: E402

DATA = os.path.join(HERE, "data")
# Refused by design; tested in tests/python/test_convert.py.
NOT_MODELS = {"malicious", "bad_shape", "bad_missing_tensor", "strided"}
VOCAB = {"padded_gpt2": os.path.join(DATA, "gpt2-bpe")}


def jobs(out):
    ckpt = os.path.join(DATA, "shakespeare_char", "ckpt_slim.pt")
    meta = os.path.join(DATA, "shakespeare_char", "meta.pkl")
    yield ckpt, os.path.join(out, "shakespeare_char.gguf"), dict(meta=meta, name="shakespeare_char")
    yield ckpt, os.path.join(out, "shakespeare_char_f16.gguf"), dict(meta=meta, name="shakespeare_char", dtype="f16")
    for path in sorted(glob.glob(os.path.join(DATA, "checkpoints", "*.pt"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name not in NOT_MODELS:
            yield path, os.path.join(out, name + ".gguf"), dict(name=name, vocab=VOCAB.get(name))


def write_with_padding_rows(src, out, extra_rows, value):
    """Copies src with `extra_rows` rows appended to token_embd.weight, all set to `value`: a
    GGUF whose embedding has more rows than its vocabulary (nanoGPT's padded vocab_size, as other
    converters keep it). Large padding values would win every argmax if a loader sampled them."""
    reader = convert.gguf.Reader(src)
    writer = convert.gguf.Writer(reader.alignment)
    for key, value_ in reader.kv.items():
        if key != "general.alignment":
            writer.add(key, reader.kv_types[key][0], value_, reader.kv_types[key][1])
    for name, info in reader.tensors.items():
        data = reader.tensor_bytes(name)
        dims = list(info.dims)
        if name == "token_embd.weight":
            data += struct.pack(f"<{dims[0] * extra_rows}f", *([value] * (dims[0] * extra_rows)))
            dims[1] += extra_rows
        writer.add_tensor(name, dims, info.type, lambda data=data: [data])
    with open(out, "wb") as f:
        writer.write(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", help="folder to write the .gguf files to (created if missing)")
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    for ckpt, out, options in jobs(args.outdir):
        try:
            convert.convert(ckpt, out, log=lambda msg: None, **options)
        except (convert.ConvertError, convert.torch_checkpoint.CheckpointError, OSError) as e:
            sys.exit(f"make_test_models.py: error: {ckpt}: {e}")
        print(f"wrote {out}")
    padded = os.path.join(args.outdir, "padded_rows_gpt2.gguf")
    write_with_padding_rows(os.path.join(args.outdir, "padded_gpt2.gguf"), padded, 50304 - 50257, 100.0)
    print(f"wrote {padded}")


if __name__ == "__main__":
    main()
