#!/usr/bin/env python3
"""PyTorch reference for scripts/bench: LeNet (or MLP) training samples/s on one core.

Same model, batch and optimizer (SGD, momentum 0.9) as `hearsay` bench, synthetic
inputs so data loading is not measured. Prints one JSON line.
With --device cuda (scripts/gpu-check) the same on the GPU against bench_gpu.
"""
import argparse, json, statistics
import torch
import torch.nn as nn

from torch_speed import training_rates  # bench/torch_speed.py, beside this script

# The modules of hearsay's --model lenet and mlp, under the state_dict names of its
# checkpoints (docs/GUIDE.md, "Checkpoints in PyTorch").
def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 20, kernel_size=3), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))

class FlatInput(nn.Sequential):
    """A Sequential that flattens its input first, without a Flatten layer of its own: the
    layers keep hearsay's state_dict names (0, 2, 4), so its checkpoints load strictly."""

    def forward(self, x):
        return super().forward(x.flatten(1))


def mlp():
    return FlatInput(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="lenet", choices=["lenet", "mlp"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    a = ap.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        # fp32 against fp32: hearsay's CUDA backend keeps cuDNN and cuBLAS off TF32 and
        # picks its convolution algorithms from cuDNN's heuristics without trial runs.
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = (lenet() if a.model == "lenet" else mlp()).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (a.batch,), device=device)

    def sync():
        # CUDA work is queued asynchronously: the clock is read once it has all run.
        if cuda:
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    rates = training_rates(step, sync, 20 if cuda else 10, a.steps, a.repeats, a.batch)
    out = {"impl": "pytorch", "torch": torch.__version__, "model": a.model,
           "batch": a.batch, "threads": a.threads,
           "samples_per_s": statistics.median(rates), "all": rates}
    if cuda:
        out["device"] = str(device)
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))

if __name__ == "__main__":
    main()
