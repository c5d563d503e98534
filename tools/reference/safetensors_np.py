"""Minimal safetensors reader (numpy) for the reference scripts: Debian has no
python3-safetensors, and the format is a JSON header plus raw little-endian data."""
import json
import os
import struct

import numpy as np

_DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64,
       "U8": np.uint8, "I8": np.int8, "BF16": None, "F8_E4M3": None}


def _bf16_to_f32(raw):
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read_header(path):
    """(header dict with __metadata__, byte offset of the data section)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def read_file(path, names=None):
    """The named tensors of one file (all when names is None), read by seeking: BF16 as float32, the
    other known dtypes as themselves, packed formats as raw bytes."""
    header, base = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, e in header.items():
            if name == "__metadata__" or (names is not None and name not in names):
                continue
            b, en = e["data_offsets"]
            f.seek(base + b)
            buf = f.read(en - b)
            if e["dtype"] == "BF16":
                arr = _bf16_to_f32(np.frombuffer(buf, dtype=np.uint16))
            elif e["dtype"] in _DT and _DT[e["dtype"]] is not None:
                arr = np.frombuffer(buf, dtype=_DT[e["dtype"]])
            else:
                arr = np.frombuffer(buf, dtype=np.uint8)  # packed formats: raw bytes
            out[name] = arr.reshape(e["shape"]).copy()
    return out


def read_model(dirname):
    """All tensors of a model directory (sharded or not), as float32 numpy arrays."""
    tensors = {}
    for fn in sorted(os.listdir(dirname)):
        if fn.endswith(".safetensors"):
            tensors.update(read_file(os.path.join(dirname, fn)))
    return tensors
