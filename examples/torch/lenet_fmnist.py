#!/usr/bin/env python3
"""LeNet on Fashion-MNIST as a hearsay peer: the same model as `hearsay peer --model lenet`.

The module's tensors have --model lenet's names, shapes and order, so to the run it IS that
model: it mixes with native `hearsay peer --model lenet` peers, its checkpoints are
hearsay's, and `hearsay sim` evaluates it as it evaluates native peers. It trains on the
shard a native peer of the same flags takes (hearsay.shard), with hearsay's learning-rate
schedule (mixer.step() sets it), SGD with the flags' momentum and weight decay.

By hand, one line per peer (the flags are `hearsay peer`'s; --help lists them):
  PYTHONPATH=build/python /usr/bin/python3 examples/torch/lenet_fmnist.py \\
      --listen tcp://127.0.0.1:29500 --rank 0 --world 2 --insecure --algo gossip --epochs 2
  PYTHONPATH=build/python /usr/bin/python3 examples/torch/lenet_fmnist.py \\
      --listen tcp://127.0.0.1:29501 --rank 1 --world 2 --insecure --algo gossip --epochs 2 \\
      --join tcp://127.0.0.1:29500
Under the simulator, against native peers of the same settings:
  hearsay sim --peers 8 --peer-command "python3 examples/torch/lenet_fmnist.py" \\
      --algo gossip,dpsgd,allreduce --epochs 3 --out out/torch
  hearsay sim --peers 8 --model lenet --algo gossip,dpsgd,allreduce --epochs 3 --out out/native

Threads: one per peer (peers share the box), or HEARSAY_TORCH_THREADS. --device as a native
peer's: auto (a GPU when torch sees one), cpu, cuda[:N].
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402
import hearsay  # noqa: E402
import hearsay.torch  # noqa: E402


def lenet():
    """--model lenet (model/zoo.cpp), under its state_dict names (0, 3, 7, 9)."""
    return nn.Sequential(
        nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))


def init_as_hearsay(model):
    """hearsay's initialisation (model/layer.cpp): Kaiming-uniform weights (bound sqrt(6 /
    fan_in)), Xavier-uniform for the last layer, zero biases. The values differ (another
    random stream), their distribution does not."""
    layers = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer in layers:
        if layer is layers[-1]:
            nn.init.xavier_uniform_(layer.weight)
        else:
            nn.init.kaiming_uniform_(layer.weight, a=0, nonlinearity="relu")
        nn.init.zeros_(layer.bias)


def main():
    torch.set_num_threads(int(os.environ.get("HEARSAY_TORCH_THREADS", "1")))
    # The flags before there is a peer: the evaluator process `hearsay sim` starts reads
    # them too (it gets the run's flags), for --data.
    s = hearsay.command_line_settings()
    test_x, test_y = fmnist.load("t10k", s["data"])
    model = lenet()
    # How `hearsay sim` evaluates this model: in its evaluator process this serves and exits.
    # (For this module the simulator evaluates natively; a model of your own needs it.)
    hearsay.torch.evaluate_with(model, lambda m: fmnist.evaluate(m, test_x, test_y))

    peer = hearsay.Peer.from_command_line()
    s = peer.settings
    rank, world = max(s["rank"], 0), max(s["world"], 1)  # no --rank: the whole training set
    torch.manual_seed(s["init_seed"] if s["init_seed"] is not None else s["seed"])
    init_as_hearsay(model)
    device = hearsay.torch.device(s["device"])
    model.to(device)  # before attach: the parameters then stay views of hearsay's buffer

    train_x, train_y = fmnist.load("train", s["data"])
    shard = hearsay.shard(train_y, rank, world, s["partition"], s["seed"])
    if s["optimizer"] == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=s["lr"], momentum=s["momentum"],
                                    weight_decay=s["weight_decay"], nesterov=s["nesterov"])
    mixer = hearsay.torch.attach(peer, model, optimizer, shard_examples=len(shard),
                                 train_examples=len(train_y))
    print(f"lenet_fmnist: {peer.id} shard of {len(shard)} examples, {mixer.steps_per_epoch} steps an "
          f"epoch, on {device}", file=sys.stderr, flush=True)

    # data_seed: this peer's own shuffle, as a native peer of its id takes (also without --rank)
    for batch in fmnist.batches(shard, s["batch"], s["data_seed"]):
        x, y = train_x[batch].to(device), train_y[batch].to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not mixer.step(loss.item()):
            break
    mixer.close()
    accuracy, _ = fmnist.evaluate(model, test_x, test_y)
    print(f"lenet_fmnist: {peer.id} ended after step {mixer.steps}: test accuracy {accuracy:.4f}",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
