"""Reads safetensors files (Hugging Face's model.safetensors) without the safetensors package
(named safetensors_reader so that it never shadows that package on sys.path).

Layout: an 8-byte little-endian header length N, N bytes of JSON header, then the data. The header
maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the
start of the data; an optional "__metadata__" holds strings. Every field is checked before any
tensor is read: the tensors must tile the data exactly (in offset order, no gap, no overlap, the
last one ending at the end of the file), and each one's byte size must be its shape times its
dtype's size. Tensors come back as torch_checkpoint.Tensor objects, read from the file on use.

    tensors, metadata = load("model.safetensors")
    w = tensors["transformer.wte.weight"]
    w.shape, w.dtype, w.tobytes()       # (50257, 768), "float32", row-major bytes
"""
import json
import os

import torch_checkpoint

# The safetensors library refuses headers over 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000
MAX_DIMS = 16

# safetensors dtype -> (dtype name as torch_checkpoint spells it, element size, struct code)
DTYPES = {
    "F64": ("float64", 8, "d"), "F32": ("float32", 4, "f"), "F16": ("float16", 2, "e"),
    "BF16": ("bfloat16", 2, None), "I64": ("int64", 8, "q"), "I32": ("int32", 4, "i"),
    "I16": ("int16", 2, "h"), "I8": ("int8", 1, "b"), "U64": ("uint64", 8, "Q"),
    "U32": ("uint32", 4, "I"), "U16": ("uint16", 2, "H"), "U8": ("uint8", 1, "B"),
    "BOOL": ("bool", 1, "?"), "F8_E4M3": ("float8_e4m3", 1, None), "F8_E5M2": ("float8_e5m2", 1, None),
}


class SafetensorsError(Exception):
    """The file is not a safetensors file we can read; the message is one line for the user."""


class FileStorage:
    """The bytes of one tensor in the file, read on first use (the interface of
    torch_checkpoint.Storage)."""

    def __init__(self, path, start, dtype, itemsize, code, numel):
        self.path, self.start = path, start
        self.dtype, self.itemsize, self.code, self.numel = dtype, itemsize, code, numel
        self._data = None

    def data(self):
        if self._data is None:
            with open(self.path, "rb") as f:
                f.seek(self.start)
                self._data = f.read(self.numel * self.itemsize)
            if len(self._data) != self.numel * self.itemsize:
                raise SafetensorsError(f"{self.path}: the file changed while it was read")
        return self._data

    def release(self):
        self._data = None


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise SafetensorsError(f"the header names {duplicate!r} twice")
    return dict(pairs)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def load(path):
    """Returns ({name: torch_checkpoint.Tensor}, {metadata string: string}); raises
    SafetensorsError (one-line message) or OSError."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: {size} bytes, too short for a safetensors file")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_BYTES:
            raise SafetensorsError(f"{path}: header length {n} is over the {MAX_HEADER_BYTES} byte limit "
                                   "(not a safetensors file?)")
        if 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} reaches past the end of the file ({size} bytes)")
        raw = f.read(n)
    where = f"{path}: header"
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except SafetensorsError as e:
        raise SafetensorsError(f"{where}: {e}") from None
    except RecursionError:
        raise SafetensorsError(f"{where} is nested too deeply to be a safetensors header") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"{where} is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where} is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{where}: __metadata__ is not an object of strings")

    data_start, data_size = 8 + n, size - 8 - n
    entries = []
    for name, info in header.items():
        bad = f"{path}: tensor {name!r:.80}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{bad}: expected an object with dtype, shape and data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise SafetensorsError(f"{bad}: unknown dtype {dtype!r:.40}")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_int(d) and d >= 0 for d in shape):
            raise SafetensorsError(f"{bad}: shape {shape!r:.80} is not a list of at most {MAX_DIMS} sizes")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise SafetensorsError(f"{bad}: data_offsets {offsets!r:.80} is not [begin, end] with begin <= end")
        numel = 1
        for d in shape:
            numel *= d
        name_t, itemsize, code = DTYPES[dtype]
        if numel * itemsize != offsets[1] - offsets[0]:
            raise SafetensorsError(f"{bad}: {dtype} of shape {shape} is {numel * itemsize} bytes but its "
                                   f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
        entries.append((offsets[0], offsets[1], name, name_t, itemsize, code, numel, shape))

    # The tensors tile the data section: sorted by offset, each begins where the previous ended.
    entries.sort(key=lambda e: (e[0], e[1]))
    end = 0
    for begin, stop, name, *_ in entries:
        if begin != end:
            what = "overlaps the tensor before it" if begin < end else f"leaves a gap of {begin - end} bytes before it"
            raise SafetensorsError(f"{path}: tensor {name!r:.80} at data_offsets [{begin}, {stop}] {what}")
        end = stop
    if end != data_size:
        if end > data_size:
            raise SafetensorsError(f"{path}: the tensors need {end} bytes of data but the file holds {data_size} "
                                   "(truncated?)")
        raise SafetensorsError(f"{path}: {data_size - end} bytes after the last tensor")

    tensors = {}
    for begin, _, name, name_t, itemsize, code, numel, shape in entries:
        storage = FileStorage(path, data_start + begin, name_t, itemsize, code, numel)
        stride, step = [], 1
        for d in reversed(shape):
            stride.append(step)
            step *= d
        tensors[name] = torch_checkpoint.Tensor(storage, 0, shape, reversed(stride))
    return tensors, metadata
