#!/usr/bin/env python3
"""PyTorch reference for hearsay's --model resnet20: a CIFAR-style ResNet-20 on Fashion-MNIST.

Sub-commands (speed when none is given):
  speed  training samples/s with synthetic inputs (SGD lr 0.1, momentum 0.9, weight decay
         5e-4), one JSON line; --device cuda for the GPU.
  train  the accuracy recipe: Fashion-MNIST pixels as x/255 (no normalisation, no
         augmentation), a seeded reshuffle each epoch, every batch trained (the last one
         partial), SGD with coupled weight decay on every parameter, and the learning rate
         set before each step from hearsay's per-step cosine:
         lr_s = min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * s / T)), min_lr 0,
         T = epochs * ceil(60000 / batch). Progress per epoch on stderr, one JSON line.
  eval   loads a .safetensors checkpoint strictly (names, shapes and dtype kinds must match
         the module's state_dict) and evaluates it on the 10,000 test images.
  keys   the module's state_dict, one `name [shape] dtype` line each, dtypes named as in
         safetensors (F32, I64).

Data: the four IDX files (plain or .gz) in $HEARSAY_DATA, else /usr/share/datasets/fashion-mnist.
A bad checkpoint or data file is a one-line error on stderr and exit status 2.
"""
import argparse, gzip, json, math, os, statistics, struct, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_speed import training_rates  # bench/torch_speed.py, beside this script

PARAMS = 272_186
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


class Fail(Exception):
    """A user-facing error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------------- model

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.projecting = stride != 1 or cin != cout
        if self.projecting:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + (self.shortcut(x) if self.projecting else x)
        return F.relu(out)


class GlobalAvgPool(nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


def resnet20():
    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=1, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        BasicBlock(16, 16, 1), BasicBlock(16, 16, 1), BasicBlock(16, 16, 1),
        BasicBlock(16, 32, 2), BasicBlock(32, 32, 1), BasicBlock(32, 32, 1),
        BasicBlock(32, 64, 2), BasicBlock(64, 64, 1), BasicBlock(64, 64, 1),
        GlobalAvgPool(),
        nn.Linear(64, 10))
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    count = sum(p.numel() for p in net.parameters())
    assert count == PARAMS, f"resnet20 has {count} parameters, expected {PARAMS}"
    return net


# ---------------------------------------------------------------------------------- safetensors

# safetensors dtype -> (bytes per element, numpy little-endian dtype or None for bf16)
ST_DTYPES = {
    "F64": (8, "<f8"), "F32": (4, "<f4"), "F16": (2, "<f2"), "BF16": (2, None),
    "I64": (8, "<i8"), "I32": (4, "<i4"), "I16": (2, "<i2"), "I8": (1, "i1"),
    "U8": (1, "u1"), "BOOL": (1, "?"),
}
TORCH_TO_ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def read_safetensors(path):
    """The tensors of a .safetensors file and its __metadata__ (or None), without the
    safetensors package. Each entry is checked before its bytes are read."""
    import numpy as np
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise Fail(f"cannot read checkpoint '{path}': {e.strerror or e}")
    where = f"checkpoint '{path}'"
    if len(blob) < 8:
        raise Fail(f"{where}: file too short ({len(blob)} bytes; a safetensors file starts with an "
                   f"8-byte header length)")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise Fail(f"{where}: header length {n} runs past the end of the {len(blob)}-byte file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Fail(f"{where}: header is not valid JSON ({e})")
    if not isinstance(header, dict):
        raise Fail(f"{where}: header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not isinstance(metadata, dict):
        raise Fail(f"{where}: __metadata__ is not a JSON object")
    tensors = {}
    for name, info in header.items():
        at = f"{where}: tensor '{name}'"
        if not isinstance(info, dict):
            raise Fail(f"{at}: entry is not a JSON object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in ST_DTYPES:
            raise Fail(f"{at}: unsupported dtype {dtype!r} (expected one of {', '.join(ST_DTYPES)})")
        if (not isinstance(shape, list)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise Fail(f"{at}: shape {shape!r} is not a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise Fail(f"{at}: data_offsets {offsets!r} is not a pair of integers")
        begin, end = offsets
        if not 0 <= begin <= end <= len(data):
            raise Fail(f"{at}: data_offsets [{begin}, {end}] out of range (the data section holds "
                       f"{len(data)} bytes)")
        size, np_dtype = ST_DTYPES[dtype]
        numel = math.prod(shape)
        if end - begin != numel * size:
            raise Fail(f"{at}: data_offsets [{begin}, {end}] span {end - begin} bytes but {dtype} "
                       f"{shape} needs {numel * size}")
        raw = data[begin:end]
        if np_dtype is None:  # BF16: the high half of an F32
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            t = torch.from_numpy(bits.view(np.float32).copy()).to(torch.bfloat16)
        else:
            le = np.dtype(np_dtype)
            t = torch.from_numpy(np.frombuffer(raw, dtype=le).astype(le.newbyteorder("=")))
        tensors[name] = t.reshape(shape)
    return tensors, metadata


def load_checkpoint(path):
    """(tensors, metadata) through safetensors.torch.load_file when importable, else the reader
    above."""
    try:
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError:
        return read_safetensors(path)
    if not os.path.isfile(path):
        raise Fail(f"cannot read checkpoint '{path}': no such file")
    try:
        tensors = load_file(path)
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata()
    except Exception as e:  # SafetensorError and friends: keep it to one line
        raise Fail(f"checkpoint '{path}': {' '.join(str(e).split())}")
    return tensors, metadata


def state_from_checkpoint(net, tensors, path):
    """The checkpoint's tensors as the module's dtypes; a one-line Fail listing every missing,
    unexpected, misshapen or wrong-kind key."""
    expected = net.state_dict()
    missing = [k for k in expected if k not in tensors]
    unexpected = [k for k in tensors if k not in expected]
    shapes, kinds = [], []
    state = {}
    for k, want in expected.items():
        got = tensors.get(k)
        if got is None:
            continue
        if tuple(got.shape) != tuple(want.shape):
            shapes.append(f"{k} {list(got.shape)} (expected {list(want.shape)})")
        elif got.is_floating_point() != want.is_floating_point():
            kinds.append(f"{k} {TORCH_TO_ST.get(got.dtype, got.dtype)} "
                         f"(expected {TORCH_TO_ST[want.dtype]})")
        else:
            state[k] = got.to(want.dtype)
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {', '.join(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {', '.join(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {', '.join(shapes)}")
    if kinds:
        problems.append(f"{len(kinds)} dtype mismatch(es): {', '.join(kinds)}")
    if problems:
        raise Fail(f"checkpoint '{path}' does not match resnet20: {'; '.join(problems)}")
    return state


# ----------------------------------------------------------------------------------------- data

def data_dir():
    return os.environ.get("HEARSAY_DATA") or DEFAULT_DATA


def read_idx(directory, base, magic, ndim):
    """A uint8 IDX array from DIR/BASE.gz (preferred, as the Debian package installs it) or
    DIR/BASE."""
    import numpy as np
    gz, plain = os.path.join(directory, base + ".gz"), os.path.join(directory, base)
    path = gz if os.path.exists(gz) else plain
    if not os.path.exists(path):
        raise Fail(f"data directory '{directory}' is missing '{gz}' (or '{plain}'); install "
                   f"dataset-fashion-mnist or set HEARSAY_DATA")
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            blob = f.read()
    except (OSError, EOFError) as e:
        raise Fail(f"IDX file '{path}': cannot read ({e})")
    if len(blob) < 4 + 4 * ndim:
        raise Fail(f"IDX file '{path}': file too short for its header")
    (got,) = struct.unpack(">I", blob[:4])
    if got != magic:
        raise Fail(f"IDX file '{path}': magic 0x{got:08x}, expected 0x{magic:08x}")
    dims = struct.unpack(f">{ndim}I", blob[4:4 + 4 * ndim])
    count = math.prod(dims)
    if len(blob) - 4 - 4 * ndim != count:
        raise Fail(f"IDX file '{path}': dimensions {list(dims)} need {count} bytes of data but the "
                   f"file holds {len(blob) - 4 - 4 * ndim}")
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(directory, prefix):
    images = read_idx(directory, f"{prefix}-images-idx3-ubyte", 0x00000803, 3)
    labels = read_idx(directory, f"{prefix}-labels-idx1-ubyte", 0x00000801, 1)
    if len(images) != len(labels):
        raise Fail(f"data directory '{directory}': {len(images)} {prefix} images but "
                   f"{len(labels)} labels")
    if labels.max() >= 10:
        raise Fail(f"data directory '{directory}': {prefix} label {labels.max()} is out of range")
    x = torch.from_numpy(images.astype("float32")).div_(255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype("int64"))


# ---------------------------------------------------------------------------------------- shared

def setup_device(name, threads):
    device = torch.device(name)
    if device.type == "cuda":
        # fp32 against fp32: hearsay's CUDA backend keeps cuDNN and cuBLAS off TF32 and picks
        # its convolution algorithms from cuDNN's heuristics without trial runs.
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(threads)
    return device


def evaluate(net, x, y, device, batch=250):
    """(accuracy, mean cross-entropy) in eval mode over all of x. Batches of 250: on one core
    batches of 1000 run several times slower per image."""
    net.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            xb, yb = x[i:i + batch].to(device), y[i:i + batch].to(device)
            out = net(xb)
            loss += F.cross_entropy(out, yb, reduction="sum").item()
            correct += (out.argmax(1) == yb).sum().item()
    return correct / len(x), loss / len(x)


def sgd(net, lr, momentum, weight_decay):
    return torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)


# ------------------------------------------------------------------------------------- commands

def cmd_speed(a):
    device = setup_device(a.device, a.threads)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    net = resnet20().to(device)
    net.train()
    opt = sgd(net, 0.1, 0.9, 5e-4)
    x = torch.randn(a.batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (a.batch,), device=device)

    def sync():
        # CUDA work is queued asynchronously: the clock is read once it has all run.
        if cuda:
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    rates = training_rates(step, sync, a.warmup if a.warmup is not None else (20 if cuda else 3), a.steps, a.repeats, a.batch)
    out = {"impl": "pytorch", "torch": torch.__version__, "model": "resnet20",
           "batch": a.batch, "threads": a.threads,
           "samples_per_s": statistics.median(rates), "all": rates}
    if cuda:
        out["device"] = str(device)
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))


def cmd_train(a):
    device = setup_device(a.device, a.threads)
    directory = data_dir()
    x_train, y_train = load_split(directory, "train")
    x_test, y_test = load_split(directory, "t10k")
    torch.manual_seed(a.seed)
    net = resnet20().to(device)
    opt = sgd(net, a.lr, a.momentum, a.weight_decay)
    shuffle = torch.Generator().manual_seed(a.seed)
    n = len(x_train)
    steps_per_epoch = math.ceil(n / a.batch)
    total = a.epochs * steps_per_epoch
    min_lr = 0.0
    step = 0
    train_seconds = 0.0
    print(f"resnet20: {n} train / {len(x_test)} test images from {directory}, {a.epochs} epochs x "
          f"{steps_per_epoch} steps, batch {a.batch}, lr {a.lr} cosine, {a.threads} thread(s), "
          f"torch {torch.__version__}", file=sys.stderr, flush=True)
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        net.train()
        order = torch.randperm(n, generator=shuffle)
        loss_sum = 0.0
        for i in range(0, n, a.batch):
            idx = order[i:i + a.batch]
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            lr = min_lr + (a.lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * step / total))
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            step += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        t0 = time.perf_counter()
        acc, test_loss = evaluate(net, x_test, y_test, device)
        print(f"epoch {epoch + 1}/{a.epochs}: train loss {loss_sum / n:.4f}, test acc {acc:.4f}, "
              f"test loss {test_loss:.4f}, train {seconds:.1f} s, eval {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
    if a.save:
        torch.save(net.state_dict(), a.save)
        print(f"saved the state_dict to {a.save}", file=sys.stderr)
    out = {"impl": "pytorch", "model": "resnet20", "epochs": a.epochs, "batch": a.batch,
           "test_acc": acc, "test_loss": test_loss,
           "train_seconds": train_seconds, "threads": a.threads}
    print(json.dumps(out))


def cmd_eval(a):
    device = setup_device(a.device, a.threads)
    net = resnet20()
    tensors, metadata = load_checkpoint(a.checkpoint)
    if metadata:
        print(f"metadata: {json.dumps(metadata)}", file=sys.stderr)
    # Checkpoints of format 1 carried the optimizer's state inside, which is not part of a
    # module's state_dict (format 2 keeps it in a file of its own): set it aside, and load
    # every other key strictly.
    if "optimizer.state" in tensors:
        tensors.pop("optimizer.state")
        print("set aside 'optimizer.state' (the optimizer's, not the module's)", file=sys.stderr)
    state = state_from_checkpoint(net, tensors, a.checkpoint)
    net.load_state_dict(state, strict=True)
    net.to(device)
    x_test, y_test = load_split(data_dir(), "t10k")
    acc, loss = evaluate(net, x_test, y_test, device)
    print(json.dumps({"checkpoint": a.checkpoint, "test_acc": acc, "test_loss": loss,
                      "keys": len(tensors)}))


def cmd_keys(a):
    for name, t in resnet20().state_dict().items():
        print(f"{name} [{','.join(str(d) for d in t.shape)}] {TORCH_TO_ST[t.dtype]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", metavar="{speed,train,eval,keys}")

    sp = sub.add_parser("speed", help="training samples/s on synthetic inputs")
    sp.add_argument("--batch", type=int, default=128)
    sp.add_argument("--threads", type=int, default=1)
    sp.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    sp.add_argument("--repeats", type=int, default=5)
    sp.add_argument("--warmup", type=int, default=None,
                    help="untimed steps first (default 3 on the CPU, 20 on CUDA)")
    sp.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")

    tp = sub.add_parser("train", help="the accuracy recipe on Fashion-MNIST")
    tp.add_argument("--epochs", type=int, default=3)
    tp.add_argument("--batch", type=int, default=128)
    tp.add_argument("--lr", type=float, default=0.1, help="peak of the per-step cosine")
    tp.add_argument("--momentum", type=float, default=0.9)
    tp.add_argument("--weight-decay", type=float, default=5e-4)
    tp.add_argument("--seed", type=int, default=0)
    tp.add_argument("--threads", type=int, default=1)
    tp.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    tp.add_argument("--save", metavar="PATH", help="torch.save the trained state_dict to PATH")

    ep = sub.add_parser("eval", help="test accuracy of a .safetensors checkpoint")
    ep.add_argument("--checkpoint", required=True, metavar="FILE.safetensors")
    ep.add_argument("--threads", type=int, default=1)
    ep.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")

    sub.add_parser("keys", help="the state_dict: name [shape] dtype, one per line")

    argv = sys.argv[1:]
    if not argv or (argv[0] not in sub.choices and argv[0] not in ("-h", "--help")):
        argv = ["speed"] + argv
    a = ap.parse_args(argv)
    for opt in ("batch", "threads", "steps", "repeats", "epochs"):
        if getattr(a, opt, 1) < 1:
            ap.error(f"--{opt} must be at least 1")
    if getattr(a, "warmup", None) is not None and a.warmup < 0:
        ap.error("--warmup must not be negative")
    try:
        {"speed": cmd_speed, "train": cmd_train, "eval": cmd_eval, "keys": cmd_keys}[a.cmd](a)
    except Fail as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `keys | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
