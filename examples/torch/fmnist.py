"""Fashion-MNIST for the examples: the four IDX files, read as hearsay reads them.

data_dir(): --data when given, else $HEARSAY_DATA, else the Debian package's directory
(/usr/share/datasets/fashion-mnist, which scripts/setup installs). Pixels are scaled to
[0, 1] by dividing by 255, exactly as model/data/dataset.cpp does, so that a model trained
here and one trained by `hearsay peer` see the same inputs.
"""

import gzip
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def data_dir(given=""):
    return given or os.environ.get("HEARSAY_DATA") or DEFAULT_DIR


def _read_idx(directory, base, magic):
    gz, plain = os.path.join(directory, base + ".gz"), os.path.join(directory, base)
    path = gz if os.path.exists(gz) else plain
    if not os.path.exists(path):
        raise SystemExit(f"Fashion-MNIST: '{directory}' has no {base}(.gz): run scripts/setup, "
                         "or give --data DIR / set HEARSAY_DATA")
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        blob = f.read()
    got, = struct.unpack(">I", blob[:4])
    if got != magic:
        raise SystemExit(f"Fashion-MNIST: {path} is not an IDX file of this kind (magic 0x{got:08x})")
    ndim = magic & 0xFF
    dims = struct.unpack(f">{ndim}I", blob[4:4 + 4 * ndim])
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, directory=""):
    """(images [N,1,28,28] float32 in [0,1], labels [N] int64) of "train" or "t10k"."""
    d = data_dir(directory)
    images = _read_idx(d, f"{split}-images-idx3-ubyte", 0x00000803)
    labels = _read_idx(d, f"{split}-labels-idx1-ubyte", 0x00000801)
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0)).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def evaluate(model, images, labels, batch=1000):
    """(accuracy, mean cross-entropy) of model on a labelled set, in eval mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            x, y = images[i:i + batch].to(device), labels[i:i + batch].to(device)
            logits = model(x)
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
    model.train(was_training)
    return correct / len(labels), loss / len(labels)


def batches(indices, batch, seed, device="cpu"):
    """Endless batches of a shard's indices: a fresh shuffle each pass (seeded by seed and
    the pass), the last batch of a pass short, as a native peer's epochs are."""
    indices = torch.as_tensor(indices, dtype=torch.int64)
    generator = torch.Generator()
    passes = 0
    while True:
        generator.manual_seed((seed + passes * 0x9E3779B97F4A7C15) % 2**64)
        order = indices[torch.randperm(len(indices), generator=generator)]
        for i in range(0, len(order), batch):
            yield order[i:i + batch]
        passes += 1
