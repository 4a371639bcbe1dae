#!/usr/bin/env python3
"""Reads a safetensors file with the Python standard library only and prints a JSON summary.

An independent check of hearsay's checkpoint writer: it knows nothing of the C++ code,
only the safetensors layout (8-byte little-endian header length, JSON header, raw
little-endian data whose tensors tile the data section). Usage:

    python3 tests/read_safetensors.py FILE

Prints {"header_bytes", "data_start", "metadata", "tensors": [{"name", "dtype", "shape",
"data_offsets", "sum"}]} with tensors in data order; "sum" (F32 tensors only) is the sum of
the values in double precision. Exits 1 with a message on stderr when the file breaks the
format.
"""
import json
import struct
import sys

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def fail(message):
    print("read_safetensors: " + message, file=sys.stderr)
    sys.exit(1)


def summarize(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (header_bytes,) = struct.unpack("<Q", blob[:8])
    if 8 + header_bytes > len(blob):
        fail(f"{path}: header length {header_bytes} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + header_bytes].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        fail(f"{path}: __metadata__ is not a map of strings")

    data = blob[8 + header_bytes:]
    tensors = []
    for name, entry in header.items():
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPE_BYTES:
            fail(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            fail(f"{path}: tensor {name!r} has a bad shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets):
            fail(f"{path}: tensor {name!r} has bad data_offsets {offsets!r}")
        count = 1
        for d in shape:
            count *= d
        begin, end = offsets
        if not 0 <= begin <= end <= len(data):
            fail(f"{path}: tensor {name!r} data_offsets {offsets} outside the {len(data)}-byte data section")
        if end - begin != count * DTYPE_BYTES[dtype]:
            fail(f"{path}: tensor {name!r} spans {end - begin} bytes, {dtype} {shape} needs {count * DTYPE_BYTES[dtype]}")
        record = {"name": name, "dtype": dtype, "shape": shape, "data_offsets": offsets}
        if dtype == "F32":
            # math.fsum would be more exact; a plain double sum is close enough for the
            # relative comparison the C++ test makes.
            record["sum"] = sum(struct.unpack(f"<{count}f", data[begin:end]))
        tensors.append(record)

    # The tensors must tile the data section: contiguous, no overlap, nothing left over.
    tensors.sort(key=lambda t: tuple(t["data_offsets"]))
    position = 0
    for t in tensors:
        begin, end = t["data_offsets"]
        if begin != position:
            fail(f"{path}: tensor {t['name']!r} starts at {begin}, expected {position} (gap or overlap)")
        position = end
    if position != len(data):
        fail(f"{path}: {len(data) - position} bytes after the last tensor")
    return {"header_bytes": header_bytes, "data_start": 8 + header_bytes, "metadata": metadata, "tensors": tensors}


def main():
    if len(sys.argv) != 2:
        fail("usage: read_safetensors.py FILE")
    print(json.dumps(summarize(sys.argv[1])))


if __name__ == "__main__":
    main()
