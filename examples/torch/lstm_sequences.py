#!/usr/bin/env python3
"""An LSTM as a hearsay peer: a model hearsay cannot express natively, on synthetic sequences.

The task: sequences of 20 symbols over an alphabet of 16; each holds the four marker symbols
0..3 once, at random places, among noise symbols 4..15, and its class is the marker that
comes first. Every sequence holds the same symbols, so a bag-of-symbols model stays at
chance (0.25): the order must be remembered, which an LSTM learns in a few hundred steps.
20,000 training and 2,000 test sequences, drawn from fixed seeds (every peer and the
evaluator make the same sets).

The module is none of hearsay's models: its fingerprint is torch-COUNT-HASH, hearsay writes
no checkpoint of it (only its final state, for `hearsay sim`), and `hearsay sim` evaluates
it through evaluate_with below:
  hearsay sim --peers 4 --peer-command "python3 examples/torch/lstm_sequences.py" \\
      --algo gossip,dpsgd --epochs 2 --out out/lstm
By hand, as lenet_fmnist.py (PYTHONPATH=build/python, `hearsay peer`'s flags).
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import hearsay
import hearsay.torch

SYMBOLS, LENGTH, MARKERS = 16, 20, 4
TRAIN, TEST = 20000, 2000


def sequences(count, seed):
    """(symbols [count, LENGTH] int64, labels [count] int64): the task above."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(MARKERS, SYMBOLS, (count, LENGTH), generator=g)
    places = torch.argsort(torch.rand(count, LENGTH, generator=g), dim=1)[:, :MARKERS]
    markers = torch.argsort(torch.rand(count, MARKERS, generator=g), dim=1)  # a random order of 0..3
    x.scatter_(1, places, markers)
    first = places.argmin(dim=1)  # the place that comes first among the four
    return x, markers.gather(1, first.unsqueeze(1)).squeeze(1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(SYMBOLS, 32)
        self.lstm = nn.LSTM(32, 64, batch_first=True)
        self.out = nn.Linear(64, MARKERS)

    def forward(self, x):
        h, _ = self.lstm(self.embed(x))
        return self.out(h[:, -1])


def evaluate(model, x, y):
    """(accuracy, mean cross-entropy) on the test sequences."""
    model.eval()
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    with torch.no_grad():
        logits = model(x)
        result = float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))
    model.train()
    return result


def main():
    torch.set_num_threads(int(os.environ.get("HEARSAY_TORCH_THREADS", "1")))
    test_x, test_y = sequences(TEST, seed=2)
    torch.manual_seed(0)  # the evaluator's model; a peer's is made from its --seed below
    model = Classifier()
    hearsay.torch.evaluate_with(model, lambda m: evaluate(m, test_x, test_y))

    peer = hearsay.Peer.from_command_line()
    s = peer.settings
    rank, world = max(s["rank"], 0), max(s["world"], 1)
    torch.manual_seed(s["init_seed"] if s["init_seed"] is not None else s["seed"])
    device = hearsay.torch.device(s["device"])
    model = Classifier().to(device)  # before attach: the parameters then stay views of hearsay's buffer
    train_x, train_y = sequences(TRAIN, seed=1)
    shard = torch.tensor(hearsay.shard(train_y, rank, world, s["partition"], s["seed"]))
    # Adam's rate of this small LSTM unless the flags say otherwise (hearsay's --lr
    # default, 0.05, is SGD's): --optimizer adamw --lr 0.003 does the same by flags.
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"] if s["optimizer"] == "adamw" else 0.003,
                                  weight_decay=s["weight_decay"])
    mixer = hearsay.torch.attach(peer, model, optimizer, shard_examples=len(shard), train_examples=TRAIN,
                                 set_lr=s["optimizer"] == "adamw")
    print(f"lstm_sequences: {peer.id} shard of {len(shard)} sequences, {mixer.steps_per_epoch} steps an "
          f"epoch, on {device}", file=sys.stderr, flush=True)
    g = torch.Generator().manual_seed(s["data_seed"])  # this peer's own draws, also without --rank
    while True:
        batch = shard[torch.randint(0, len(shard), (s["batch"],), generator=g)]
        loss = F.cross_entropy(model(train_x[batch].to(device)), train_y[batch].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not mixer.step(loss.item()):
            break
    mixer.close()
    accuracy, _ = evaluate(model, test_x, test_y)
    print(f"lstm_sequences: {peer.id} ended after step {mixer.steps}: test accuracy {accuracy:.4f}",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
