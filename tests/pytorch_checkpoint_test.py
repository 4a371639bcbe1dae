#!/usr/bin/env python3
"""A `hearsay peer` checkpoint in PyTorch, exactly as docs/GUIDE.md says to load it.

For each model (lenet, mlp, resnet20: its BatchNorm buffers and int64 counters too) a peer
trains a few seconds on Fashion-MNIST and checkpoints; then the GUIDE's code block
("Loading a checkpoint in PyTorch"), taken from the document itself, loads it with
load_state_dict(strict=True) and predicts the test set with the GUIDE's preprocessing. The
accuracy must be the one the peer measured on the same parameters: the modules' layout,
names, dtypes and preprocessing are all right, or it is not.

Runs real PyTorch (Debian's python3-torch, which scripts/setup installs). The safetensors
package is not in Debian: when it cannot be imported, `safetensors.torch.load_file` is
bench/pytorch_resnet.py's reader of the same format, a stand-in for that one function.

  pytorch_checkpoint_test.py --binary build/bin/hearsay
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from script_checks import Checks  # noqa: E402

check = Checks("pytorch checkpoint")
GUIDE_BLOCK = "# Loading a checkpoint in PyTorch"
# Accuracy differs only by images whose top two logits are within float rounding of each
# other (different summation orders in hearsay's kernels and PyTorch's): a few in 10,000.
TOLERANCE = 0.0015


def guide_code():
    """The Python block of docs/GUIDE.md that starts with GUIDE_BLOCK."""
    text = open(os.path.join(ROOT, "docs", "GUIDE.md"), encoding="utf-8").read()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        if block.startswith(GUIDE_BLOCK):
            return block
    raise SystemExit(f"docs/GUIDE.md has no ```python block starting with '{GUIDE_BLOCK}'")


def safetensors_stand_in(directory):
    """A `safetensors.torch.load_file` backed by bench/pytorch_resnet.py's reader."""
    package = os.path.join(directory, "safetensors")
    os.makedirs(package)
    open(os.path.join(package, "__init__.py"), "w").close()
    with open(os.path.join(package, "torch.py"), "w") as f:
        f.write("import sys\nsys.path.insert(0, %r)\nfrom pytorch_resnet import read_safetensors\n\n"
                "def load_file(path):\n    return read_safetensors(path)[0]\n" % os.path.join(ROOT, "bench"))
    return directory


def train_peer(binary, model, work):
    """A peer that trains alone for a fixed number of steps and checkpoints; its final
    record. A constant rate, so that even resnet20's few CPU steps take it well above
    chance: an agreement at chance (every image one class) would show nothing. Steps, not
    seconds: 20 s of resnet20 on a loaded 2-core box once ended under 0.5 (about 30
    steps there give 0.53, 101 steps 0.62; LeNet and the MLP pass 0.76 by 188)."""
    epochs = "0.054" if model == "resnet20" else "0.1"  # 101 steps, 188 steps of 32
    flags = [binary, "peer", "--listen", "tcp://127.0.0.1:*", "--id", "p", "--insecure", "--algo", "none",
             "--model", model, "--epochs", epochs, "--threads", "2", "--batch", "32",
             "--lr-schedule", "constant", "--checkpoint", "ckpt", "--metrics", "metrics.jsonl",
             "--log-every", "100"]
    p = subprocess.run(flags, capture_output=True, text=True, timeout=240, cwd=work)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr[-2000:]}"
    with open(os.path.join(work, "metrics.jsonl")) as f:
        final = [json.loads(line) for line in f][-1]
    return final, ""


def run_guide_block(code, model, work, images):
    """Runs the GUIDE's code in `work` for `model`, then its predict() over the images."""
    if model != "lenet":
        module = "pytorch_resnet" if model == "resnet20" else "pytorch_lenet"
        code = code.replace("from pytorch_lenet import lenet", f"from {module} import {model}")
        code = code.replace("net = lenet()", f"net = {model}()")
    scope = {}
    cwd = os.getcwd()
    os.chdir(work)
    try:
        exec(compile(code, "docs/GUIDE.md", "exec"), scope)
    finally:
        os.chdir(cwd)
    import torch
    return torch.cat([scope["predict"](images[i:i + 500]) for i in range(0, len(images), 500)])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    try:
        import torch
    except ImportError:
        print("FAIL PyTorch is not importable by " + sys.executable +
              ": install python3-torch (scripts/setup does)")
        return 1
    torch.set_num_threads(2)
    code = guide_code()
    with tempfile.TemporaryDirectory(prefix="hearsay-pytorch-") as work:
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:
            sys.path.append(safetensors_stand_in(os.path.join(work, "stand-in")))
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from pytorch_resnet import data_dir, read_idx
        images = torch.from_numpy(read_idx(data_dir(), "t10k-images-idx3-ubyte", 0x00000803, 3).copy())
        labels = torch.from_numpy(read_idx(data_dir(), "t10k-labels-idx1-ubyte", 0x00000801, 1).astype("int64"))
        for model in ("lenet", "mlp", "resnet20"):
            run = os.path.join(work, model)
            os.makedirs(run)
            os.symlink(os.path.join(ROOT, "bench"), os.path.join(run, "bench"))
            final, why = train_peer(binary, model, run)
            check(f"{model}: the peer trained well above chance and checkpointed",
                  final is not None and (final.get("test_acc") or 0) > 0.5, why or str(final))
            if final is None or not final.get("test_acc"):
                continue
            try:
                predictions = run_guide_block(code, model, run, images)
                accuracy = (predictions == labels).float().mean().item()
                detail = f"PyTorch {accuracy:.4f}, the peer {final['test_acc']:.4f}"
            except Exception as e:  # the GUIDE's code failed: say how, as the user would see it
                accuracy, detail = None, f"{type(e).__name__}: {e}"
            check(f"{model}: GUIDE.md's code loads it strictly and predicts as the peer did ({detail})",
                  accuracy is not None and abs(accuracy - final["test_acc"]) <= TOLERANCE, detail)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
