#!/usr/bin/env python3
"""A small GGUF (version 3) writer and reader, standard library only.

GGUF layout: header (magic "GGUF", version, tensor count, key/value count), the key/values, one
info record per tensor (name, dims fastest-first, type, offset), padding to `general.alignment`,
then the tensor data, each tensor starting at a multiple of the alignment. Little-endian.

    python3 tools/gguf.py dump MODEL.gguf   print the keys and the tensor table
"""
import argparse
import mmap
import struct
import sys

MAGIC = b"GGUF"
VERSION = 3
DEFAULT_ALIGNMENT = 32

# Value types of the key/value section.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f",
           BOOL: "?", UINT64: "Q", INT64: "q", FLOAT64: "d"}
TYPE_NAMES = {UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
              INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
              UINT64: "uint64", INT64: "int64", FLOAT64: "float64"}

# Tensor types (ggml numbering) this project writes and reads: (name, values per block, bytes per
# block). A q8_0 block is an f16 scale and 32 int8 values; a q4_0 block an f16 scale d and 16
# bytes, byte j holding value j in its low 4 bits and value j + 16 in its high 4 bits, each
# d * (nibble - 8); a row holds whole blocks.
F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
TENSOR_TYPES = {F32: ("F32", 1, 4), F16: ("F16", 1, 2), Q4_0: ("Q4_0", 32, 18), Q8_0: ("Q8_0", 32, 34), BF16: ("BF16", 1, 2)}


class GGUFError(Exception):
    """The file is not a GGUF file we can read."""


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value, elem_type=None):
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        head = struct.pack("<IQ", elem_type, len(value))
        if elem_type == STRING:
            return head + b"".join(_string(v) for v in value)
        return head + struct.pack(f"<{len(value)}{_SCALAR[elem_type]}", *value)
    return struct.pack("<" + _SCALAR[vtype], value)


def _pad(n, alignment):
    return (alignment - n % alignment) % alignment


def tensor_nbytes(ttype, dims):
    """Bytes of a tensor of type `ttype` with dims fastest-first; None when its rows (dims[0]
    values each) do not hold whole blocks of the type."""
    _, block, block_bytes = TENSOR_TYPES[ttype]
    if dims and dims[0] % block:
        return None
    n = 1
    for d in dims:
        n *= d
    return n // block * block_bytes


class Writer:
    """Collects keys and tensors, then streams the file in one pass.

    Tensor data comes from a callable returning an iterable of byte chunks, so a large model is
    converted piece by piece rather than held in memory whole.
    """

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self.kv = []        # (key, type, value, element type)
        self.tensors = []   # (name, dims fastest-first, tensor type, nbytes, chunks)
        self.add("general.alignment", UINT32, alignment)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_tensor(self, name, dims, ttype, chunks):
        nbytes = tensor_nbytes(ttype, dims)
        if nbytes is None:
            raise ValueError(f"{name}: rows of {dims[0]} values do not hold whole {TENSOR_TYPES[ttype][0]} blocks")
        self.tensors.append((name, list(dims), ttype, nbytes, chunks))

    def write(self, f):
        f.write(MAGIC + struct.pack("<IQQ", VERSION, len(self.tensors), len(self.kv)))
        for key, vtype, value, elem_type in self.kv:
            f.write(_string(key) + struct.pack("<I", vtype) + _value(vtype, value, elem_type))
        offset = 0
        for name, dims, ttype, nbytes, _ in self.tensors:
            f.write(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ttype, offset))
            offset += nbytes + _pad(nbytes, self.alignment)
        f.write(b"\0" * _pad(f.tell(), self.alignment))
        for name, dims, ttype, nbytes, chunks in self.tensors:
            written = 0
            for chunk in chunks():
                f.write(chunk)
                written += len(chunk)
            if written != nbytes:
                raise AssertionError(f"{name}: wrote {written} bytes, expected {nbytes}")
            f.write(b"\0" * _pad(nbytes, self.alignment))


class TensorInfo:
    def __init__(self, name, dims, ttype, offset, nbytes):
        self.name, self.dims, self.type, self.offset, self.nbytes = name, dims, ttype, offset, nbytes

    def __repr__(self):
        return f"{self.name} {TENSOR_TYPES[self.type][0]} {self.dims}"


class Reader:
    """Parses a GGUF file (memory-mapped). `kv` maps key -> value, `kv_types` key -> (type,
    element type), `tensors` name -> TensorInfo with absolute file offsets."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if f.seek(0, 2) else b""
        self.pos = 0
        if self._take(4) != MAGIC:
            raise GGUFError(f"{path} is not a GGUF file (bad magic)")
        self.version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
        if self.version != VERSION:
            raise GGUFError(f"{path}: GGUF version {self.version}, expected {VERSION}")
        self.kv, self.kv_types = {}, {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._unpack("I")
            elem_type = self._unpack("I") if vtype == ARRAY else None
            self.kv[key] = self._read_value(vtype, elem_type)
            self.kv_types[key] = (vtype, elem_type)
        self.alignment = self.kv.get("general.alignment", DEFAULT_ALIGNMENT)
        self.tensors = {}
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._unpack("I")
            if n_dims > 4:
                raise GGUFError(f"{path}: tensor {name} has {n_dims} dimensions")
            dims = list(struct.unpack(f"<{n_dims}Q", self._take(8 * n_dims)))
            ttype, offset = struct.unpack("<IQ", self._take(12))
            if ttype not in TENSOR_TYPES:
                raise GGUFError(f"{path}: tensor {name} has unsupported type {ttype}")
            nbytes = tensor_nbytes(ttype, dims)
            if nbytes is None:
                type_name, block, _ = TENSOR_TYPES[ttype]
                raise GGUFError(f"{path}: tensor {name}: rows of {dims[0]} values, not a multiple of the {type_name} block of {block}")
            infos.append(TensorInfo(name, dims, ttype, offset, nbytes))
        self.data_start = self.pos + _pad(self.pos, self.alignment)
        for info in infos:
            if info.offset % self.alignment:
                raise GGUFError(f"{path}: tensor {info.name} offset {info.offset} is not aligned")
            info.offset += self.data_start
            if info.offset + info.nbytes > len(self.data):
                raise GGUFError(f"{path}: tensor {info.name} extends past the end of the file")
            self.tensors[info.name] = info

    def _take(self, n):
        if self.pos + n > len(self.data):
            raise GGUFError("GGUF file is truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _unpack(self, code):
        return struct.unpack("<" + code, self._take(struct.calcsize(code)))[0]

    def _str(self):
        return self._take(self._unpack("Q")).decode("utf-8")

    def _read_value(self, vtype, elem_type):
        if vtype == STRING:
            return self._str()
        if vtype == ARRAY:
            count = self._unpack("Q")
            if elem_type == STRING:
                return [self._str() for _ in range(count)]
            if elem_type not in _SCALAR:
                raise GGUFError(f"unsupported array element type {elem_type}")
            code = _SCALAR[elem_type]
            return list(struct.unpack(f"<{count}{code}", self._take(count * struct.calcsize(code))))
        if vtype not in _SCALAR:
            raise GGUFError(f"unsupported value type {vtype}")
        return self._unpack(_SCALAR[vtype])

    def tensor_bytes(self, name):
        info = self.tensors[name]
        return self.data[info.offset:info.offset + info.nbytes]

    def tensor_values(self, name):
        """All elements as Python floats, in file order (ne0 fastest); bf16, q8_0 and q4_0 values
        as gpt2.h reads them (a q8_0 value is its block's scale times the int8, a q4_0 value its
        block's scale times the nibble less 8)."""
        info = self.tensors[name]
        data = self.tensor_bytes(name)
        if info.type == F32:
            return list(struct.unpack(f"<{len(data) // 4}f", data))
        if info.type == F16:
            return list(struct.unpack(f"<{len(data) // 2}e", data))
        if info.type == BF16:  # the top half of a float32
            n = len(data) // 2
            return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(h << 16 for h in struct.unpack(f"<{n}H", data)))))
        values = []
        if info.type == Q4_0:
            for block in range(0, len(data), 18):
                scale = struct.unpack_from("<e", data, block)[0]
                packed = data[block + 2:block + 18]
                values += [scale * ((b & 15) - 8) for b in packed] + [scale * ((b >> 4) - 8) for b in packed]
            return values
        for block in range(0, len(data), 34):
            scale = struct.unpack_from("<e", data, block)[0]
            values += [scale * q for q in struct.unpack_from("<32b", data, block + 2)]
        return values


def _show(value, limit=8):
    if isinstance(value, list):
        shown = ", ".join(repr(v) for v in value[:limit])
        return f"[{shown}{', ...' if len(value) > limit else ''}] ({len(value)} items)"
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def dump(path, out=sys.stdout):
    r = Reader(path)
    print(f"GGUF version {r.version}, {len(r.kv)} keys, {len(r.tensors)} tensors, alignment {r.alignment}", file=out)
    for key, value in r.kv.items():
        vtype, elem_type = r.kv_types[key]
        tname = TYPE_NAMES[vtype] + (f"[{TYPE_NAMES[elem_type]}]" if vtype == ARRAY else "")
        print(f"  {key:40s} {tname:16s} {_show(value)}", file=out)
    for info in r.tensors.values():
        print(f"  {info.name:32s} {TENSOR_TYPES[info.type][0]:4s} {str(info.dims):16s} at byte {info.offset}", file=out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump", help="print the keys and tensors of a GGUF file")
    p.add_argument("file", help="the .gguf file")
    argv = sys.argv[1:]
    if argv and argv[0] not in ("dump", "-h", "--help"):
        argv = ["dump", *argv]  # `gguf.py FILE` is `gguf.py dump FILE`, the one command
    args = parser.parse_args(argv)
    try:
        dump(args.file)
    except BrokenPipeError:  # e.g. piped into head
        sys.stderr.close()
    except (OSError, GGUFError, UnicodeDecodeError) as e:
        sys.exit(f"gguf.py: error: {e}")


if __name__ == "__main__":
    main()
