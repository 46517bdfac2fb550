"""Reads PyTorch checkpoints (torch.save zip files) without PyTorch and without running code.

A torch checkpoint is a zip archive: `TOP/data.pkl` is a pickle of the saved object, and each
tensor storage is a raw little-endian file `TOP/data/KEY`. Unpickling an untrusted pickle can run
any function it names, so the unpickler here resolves only the handful of globals a tensor
checkpoint uses, and rebuilds tensors itself as `Tensor` objects (storage bytes + offset + shape +
strides). Anything else is refused before it is called.

    ckpt = load("ckpt.pt")              # dict with Tensor values where torch would have tensors
    w = ckpt["model"]["lm_head.weight"]
    w.shape, w.dtype, w.tobytes()       # (65, 128), "float32", contiguous row-major bytes
"""
import collections
import pickle
import struct
import zipfile

# Largest data.pkl and largest single storage we are willing to read. A 124M-parameter GPT-2 has
# a 154 MB embedding; 16 GiB leaves room for much larger models while refusing absurd sizes.
MAX_PICKLE_BYTES = 256 << 20
MAX_STORAGE_BYTES = 16 << 30

# torch storage class name -> (dtype name, element size, struct code for one element)
STORAGE_TYPES = {
    "FloatStorage": ("float32", 4, "f"),
    "HalfStorage": ("float16", 2, "e"),
    "BFloat16Storage": ("bfloat16", 2, None),
    "DoubleStorage": ("float64", 8, "d"),
    "LongStorage": ("int64", 8, "q"),
    "IntStorage": ("int32", 4, "i"),
    "ShortStorage": ("int16", 2, "h"),
    "CharStorage": ("int8", 1, "b"),
    "ByteStorage": ("uint8", 1, "B"),
    "BoolStorage": ("bool", 1, "?"),
    "UntypedStorage": ("uint8", 1, "B"),
}


class CheckpointError(Exception):
    """The file is not a checkpoint we can read; the message is one sentence for the user."""


class StorageType:
    """Stands in for torch.FloatStorage & co. in the pickle: only its name is used."""

    def __init__(self, name):
        self.name = name
        self.dtype, self.itemsize, self.code = STORAGE_TYPES[name]


class Storage:
    """One `data/KEY` file of the archive, read on first use."""

    def __init__(self, archive, entry, dtype, itemsize, code, numel):
        self.archive, self.entry = archive, entry
        self.dtype, self.itemsize, self.code, self.numel = dtype, itemsize, code, numel
        self._data = None

    def data(self):
        if self._data is None:
            with self.archive.open(self.entry) as f:
                self._data = f.read(self.numel * self.itemsize)
            if len(self._data) != self.numel * self.itemsize:
                raise CheckpointError(f"{self.entry}: storage is truncated")
        return self._data

    def release(self):
        """Drops the bytes read so far (they are read again when needed)."""
        self._data = None


class Tensor:
    """A strided view of a Storage, like torch.Tensor without the arithmetic."""

    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset = storage, offset
        self.shape, self.stride = tuple(shape), tuple(stride)
        self.dtype, self.itemsize = storage.dtype, storage.itemsize

    def __repr__(self):
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype})"

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def is_contiguous(self):
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def same_data(self, other):
        """True when both view the same elements of the same storage (tied weights)."""
        return (self.storage is other.storage and self.offset == other.offset
                and self.shape == other.shape and self.stride == other.stride)

    def tobytes(self):
        """The elements in row-major order, little-endian, gathered when the view is strided.
        Returns a bytes-like object (a memoryview into the storage when no copy is needed)."""
        data, size = self.storage.data(), self.itemsize
        if self.is_contiguous():
            start = self.offset * size
            return memoryview(data)[start:start + self.numel * size]
        # One strided slice per row of the last dimension (elements viewed as same-sized ints).
        elements = memoryview(data).cast({1: "B", 2: "H", 4: "I", 8: "Q"}[size])
        last, last_stride = self.shape[-1], self.stride[-1]
        out = bytearray()
        for index in _indices(self.shape[:-1]):
            base = self.offset + sum(i * s for i, s in zip(index, self.stride))
            if last_stride:
                out += elements[base:base + (last - 1) * last_stride + 1:last_stride].tobytes()
            else:  # a broadcast (expanded) dimension repeats one element
                out += elements[base:base + 1].tobytes() * last
        return bytes(out)

    def tolist(self):
        """Flat list of Python numbers (row-major); for small tensors such as best_val_loss."""
        raw = self.tobytes()
        if self.dtype == "bfloat16":
            raw = bfloat16_to_float32(raw)
            return list(struct.unpack(f"<{self.numel}f", raw))
        return list(struct.unpack(f"<{self.numel}{self.storage.code}", raw))


def _indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _indices(shape[1:]):
            yield (i,) + rest


def bfloat16_to_float32(raw):
    """bfloat16 is the top half of a float32: widen by putting zero bytes below each value."""
    out = bytearray(len(raw) * 2)
    out[2::4] = raw[0::2]
    out[3::4] = raw[1::2]
    return bytes(out)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    if not isinstance(storage, Storage):
        raise CheckpointError("_rebuild_tensor_v2 called on something that is not a storage")
    shape, stride = tuple(size), tuple(stride)
    if len(shape) != len(stride) or any(not isinstance(v, int) or v < 0 for v in shape + stride + (storage_offset,)):
        raise CheckpointError(f"tensor with invalid shape {list(shape)} / strides {list(stride)}")
    last = storage_offset + sum((d - 1) * s for d, s in zip(shape, stride)) if all(shape) else -1
    if last >= storage.numel:
        raise CheckpointError(f"tensor of shape {list(shape)} reaches past the end of its storage "
                              f"({storage.numel} elements)")
    tensor = Tensor(storage, storage_offset, shape, stride)
    if tensor.numel * tensor.itemsize > MAX_STORAGE_BYTES:  # strides of 0 can make a view huge
        raise CheckpointError(f"tensor of shape {list(shape)} is larger than the "
                              f"{MAX_STORAGE_BYTES >> 30} GiB limit")
    return tensor


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    return data


# The only globals a checkpoint may name. Everything a nanoGPT checkpoint holds besides tensors
# (model_args, config, iter_num) is plain dicts, strings and numbers, which need no global.
_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
}
for _name in STORAGE_TYPES:
    _ALLOWED[("torch", _name)] = StorageType(_name)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, top):
        super().__init__(file)
        self.archive, self.top = archive, top
        self.storages = {}

    def find_class(self, module, name):
        found = _ALLOWED.get((module, name))
        if found is None:
            raise CheckpointError(f"refusing to load checkpoint: it references {module}.{name}, "
                                  "which is not part of a tensor checkpoint")
        return found

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], StorageType) and isinstance(pid[2], str) and isinstance(pid[4], int)):
            raise CheckpointError(f"unsupported persistent id in checkpoint: {pid!r:.80}")
        _, storage_type, key, _location, numel = pid
        if key in self.storages:  # one storage pickled twice: tied weights
            return self.storages[key]
        entry = f"{self.top}/data/{key}"
        try:
            info = self.archive.getinfo(entry)
        except KeyError:
            raise CheckpointError(f"checkpoint is missing storage {entry}") from None
        nbytes = numel * storage_type.itemsize
        if numel < 0 or nbytes > MAX_STORAGE_BYTES:
            raise CheckpointError(f"{entry}: storage of {numel} elements is larger than the "
                                  f"{MAX_STORAGE_BYTES >> 30} GiB limit")
        if info.file_size < nbytes:
            raise CheckpointError(f"{entry}: storage needs {nbytes} bytes but the archive holds "
                                  f"{info.file_size}")
        storage = Storage(self.archive, entry, storage_type.dtype, storage_type.itemsize,
                          storage_type.code, numel)
        self.storages[key] = storage
        return storage


def load(path):
    """Loads a torch.save zip checkpoint; raises CheckpointError (or OSError) on bad input."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, ValueError, EOFError):  # ValueError: e.g. a member name that is not UTF-8
        raise CheckpointError(f"{path} is not a PyTorch checkpoint: not a zip archive, or a truncated "
                              "one (torch < 1.6 legacy checkpoints are not supported)") from None
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise CheckpointError(f"{path} is a zip archive but not a PyTorch checkpoint (no TOP/data.pkl)")
    top = pickles[0].split("/")[0]
    byteorder = f"{top}/byteorder"
    if byteorder in archive.namelist() and archive.read(byteorder).strip() != b"little":
        raise CheckpointError(f"{path}: big-endian checkpoints are not supported")
    info = archive.getinfo(pickles[0])
    if info.file_size > MAX_PICKLE_BYTES:
        raise CheckpointError(f"{path}: data.pkl is {info.file_size} bytes, over the "
                              f"{MAX_PICKLE_BYTES >> 20} MiB limit")
    try:
        with archive.open(pickles[0]) as f:
            return _Unpickler(f, archive, top).load()
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, struct.error, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: corrupt checkpoint ({type(e).__name__}: {e})") from None
    except MemoryError:  # a corrupt length field in data.pkl asking for gigabytes
        raise CheckpointError(f"{path}: corrupt checkpoint (data.pkl asks for more memory than there is)") from None

