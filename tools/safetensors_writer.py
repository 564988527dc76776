"""Small numpy-only helpers shared by the synthetic checkpoint generators (make_synthetic_k2.py,
make_synthetic_k3.py): bf16 conversion, a streaming safetensors shard writer, atomic JSON."""
import json
import os

import numpy as np

ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "I64": 8, "U8": 1}


def bf16_bits(x):
    """float32 array -> bf16 bits as uint16 (round to nearest even)."""
    x = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)


def bf16(rng, shape, scale):
    """Random normal * scale as bf16 bits."""
    return bf16_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))


class Lazy:
    """A tensor made only when its bytes are written, so a shard never has to be in memory at once."""

    def __init__(self, shape, make):
        self.shape, self.make = tuple(shape), make


def nbytes(dtype, arr):
    return int(np.prod(arr.shape, dtype=np.int64)) * ITEMSIZE[dtype]


def write_shard(path, tensors, metadata=None):
    """tensors: {name: (dtype, ndarray or Lazy)}, written in the dict's order. Writes path + '.tmp',
    then renames it over path. Returns the tensor bytes written."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, arr) in tensors.items():
        n = nbytes(dtype, arr)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name, (dtype, arr) in tensors.items():
            data = arr.make() if isinstance(arr, Lazy) else arr
            raw = np.ascontiguousarray(data).tobytes()
            if len(raw) != nbytes(dtype, arr) or tuple(data.shape) != tuple(arr.shape):
                raise ValueError(f"{name}: made {data.shape} ({len(raw)} bytes), header says {arr.shape} {dtype}")
            f.write(raw)
    os.replace(tmp, path)
    return offset


def write_json(path, obj):
    """json.dump(obj, indent=1) to path + '.tmp', then rename."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)
