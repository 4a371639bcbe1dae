"""A torch.nn.Module's parameters as a hearsay peer's.

    peer = hearsay.Peer.from_command_line()
    mixer = hearsay.torch.attach(peer, model, optimizer, shard_examples=len(shard),
                                 train_examples=len(train_set))
    for x, y in batches:                     # endless: the budget says when to stop
        loss = ...; optimizer.zero_grad(); loss.backward(); optimizer.step()
        if not mixer.step(loss.item()):
            break
    mixer.close()

attach() packs the parameters into one contiguous float32 tensor and points every
parameter's .data at its slice, so that the optimizer (which holds the Parameter objects)
and the model train in that buffer. On the CPU hearsay's algorithm mixes that very memory
in place after each step (no copies). On a GPU the buffer lives on the device and a
pinned host copy is what hearsay mixes: step() copies the parameters down, mixes, and
copies the result up (two copies of the model per step; the mixing itself is hearsay's).
The order is model.named_parameters()'s (then the float buffers with buffers=True), as in
a state_dict. A module whose tensors are those of one of hearsay's own models (the same
names and shapes: bench/pytorch_lenet.py's LeNet is --model lenet) is that model to the
run: it mixes with native peers, and its checkpoints are hearsay's.

After attach() the parameters must stay views of the buffer: move the model to its device
(model.to(device)) before attach(), never after (.to() gives the parameters new memory,
which hearsay would no longer see). cuDNN's RNNs (nn.LSTM, nn.GRU on CUDA) want their weights
in one chunk of their own; as views of hearsay's buffer they are not, so torch warns once
and copies the weights at each call (right, and slower): flatten_parameters() must not be
called after attach().

The learning rate: attach() and every step() set each param_group's "lr" to hearsay's
schedule (--lr, --lr-schedule, and under a global budget the run's progress), as a native
peer's optimizer takes it.

evaluate_with(model, fn) tells `hearsay sim` how to evaluate this script's model: the
simulator starts the script once more as its evaluator, and the call then serves the
simulator's requests (the averaged model, each peer's) instead of returning.
"""

import json
import os
import struct
import sys

import torch

__all__ = ["attach", "device", "Mixer", "evaluate_with"]


def device(setting):
    """The torch.device of a peer's --device setting, as a native peer reads it: "auto" is
    the first GPU when torch sees one and the CPU otherwise; "cpu"; "cuda" or "cuda:N" (a
    RuntimeError that says so when torch sees no GPU, as a native peer refuses)."""
    setting = str(setting)
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--device {setting}: torch sees no GPU here (torch.cuda.is_available() "
                           "is False); use --device cpu or auto")
    return torch.device(setting)


class Mixer:
    """What attach() returns: step() after each optimizer step, close() at the end."""

    def __init__(self, peer, optimizer, flat, host, set_lr):
        self.peer = peer
        self.optimizer = optimizer
        self.flat = flat  # the model's buffer (on its device): kept alive as long as the mixer
        self.host = host  # what hearsay mixes: flat itself on the CPU, a pinned copy for CUDA
        self.set_lr = set_lr
        self.steps = peer.start_step
        self._set_lr()

    @property
    def steps_per_epoch(self):
        return self.peer.steps_per_epoch

    @property
    def lr(self):
        return self.peer.learning_rate(self.steps)

    def _set_lr(self):
        if self.optimizer is not None and self.set_lr:
            rate = self.peer.learning_rate(self.steps)
            for group in self.optimizer.param_groups:
                group["lr"] = rate

    def step(self, loss=None):
        """hearsay's after-step hook: the algorithm mixes the parameters in place, the next
        step's learning rate is set. Returns False once the run's budget is spent."""
        self.steps += 1
        if self.host is self.flat:
            go_on = self.peer.after_step(self.steps, loss)
        else:
            with torch.no_grad():
                self.host.copy_(self.flat)
                go_on = self.peer.after_step(self.steps, loss)
                self.flat.copy_(self.host)
        self._set_lr()
        return go_on

    def close(self):
        """Closes the peer (mixes what is pending, writes the final checkpoint, says bye)."""
        self.peer.close()
        if self.host is not self.flat:
            with torch.no_grad():
                self.flat.copy_(self.host)


def _tensors(model, buffers):
    named = list(model.named_parameters())
    if buffers:
        named += [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return named


def _check(named):
    if not named:
        raise ValueError("attach: the model has no parameters")
    devices = {t.device for _, t in named}
    for name, t in named:
        if t.dtype != torch.float32:
            raise TypeError(
                f"attach: parameter '{name}' is {t.dtype}; hearsay mixes float32 parameters only "
                "(model.float() converts them)"
            )
    if len(devices) > 1:
        raise ValueError(f"attach: the model's tensors are on several devices ({sorted(map(str, devices))}); "
                         "put the model on one device first")
    return devices.pop()


def _pack(named, device):
    """One flat float32 tensor on device that every tensor of named becomes a view of."""
    total = sum(t.numel() for _, t in named)
    flat = torch.empty(total, dtype=torch.float32, device=device)
    offset = 0
    with torch.no_grad():
        for _, t in named:
            n = t.numel()
            view = flat[offset:offset + n].view_as(t)
            view.copy_(t)
            t.data = view
            offset += n
    return flat


def fingerprint(model, buffers=False):
    """The fingerprint the run knows this model by (a zoo model's when it is one)."""
    from . import _hearsay
    named = _tensors(model, buffers)
    return _hearsay.layout_fingerprint([n for n, _ in named], [list(t.shape) for _, t in named])


def attach(peer, model, optimizer=None, shard_examples=None, train_examples=None, buffers=False,
           set_lr=True):
    """Makes model's parameters (and its float buffers, with buffers=True) views of one flat
    float32 buffer, hands it to peer, and joins the run (this blocks until the run's world
    or min_peers is there and, under `hearsay sim`, until every peer is ready). Returns a
    Mixer.

    shard_examples: this peer's training examples; train_examples: the whole training
    set's. With --rank/--world every peer's epoch is train_examples / world (as a native
    peer's), which sets mixer.steps_per_epoch, --epochs' end and the schedule. Without
    them a peer's epoch is shard_examples (default 1: give them).

    Attach before the optimizer has state (its momentum buffers are not moved). With --resume
    and a checkpoint (a zoo model's) the parameters are the checkpoint's when this returns,
    and mixer.steps goes on from its step. TypeError names a tensor that is not float32.
    """
    named = _tensors(model, buffers)
    device = _check(named)
    if optimizer is not None and len(optimizer.state) > 0:
        raise RuntimeError("attach: the optimizer already has state; attach before the first step")
    shard = int(shard_examples) if shard_examples is not None else 1
    train = int(train_examples) if train_examples is not None else shard
    flat = _pack(named, device)
    host = flat if device.type == "cpu" else torch.empty(flat.numel(), dtype=torch.float32).pin_memory()
    if host is not flat:
        host.copy_(flat)
    peer._attach(host.data_ptr(), [n for n, _ in named], [list(t.shape) for _, t in named], shard, train)
    if host is not flat:  # resumed parameters come up to the device
        with torch.no_grad():
            flat.copy_(host)
    return Mixer(peer, optimizer, flat, host, set_lr)


# ---- the simulator's evaluator ---------------------------------------------------------------

# `hearsay sim --peer-command` starts the command once more with HEARSAY_EVALUATOR="R:W",
# two pipe descriptors (sim/external_evaluator.hpp has the other side). The script's
# evaluate_with() then writes one JSON line {"fingerprint", "count"} to W and answers
# requests until R ends: a request is a little-endian u64 n and n float32 values (the model's
# flat state, in attach()'s order), the answer two little-endian f64, accuracy and loss.
EVALUATOR_VARIABLE = "HEARSAY_EVALUATOR"


def _read_exactly(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _answer(value):
    """(accuracy, loss) from what the user's function returned: a pair, or a dict."""
    if isinstance(value, dict):
        return float(value["accuracy"]), float(value.get("loss", float("nan")))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return float(value[0]), float(value[1])
    raise TypeError("evaluate_with: the function must return (accuracy, loss) or "
                    "{'accuracy': ..., 'loss': ...}, not " + repr(value))


def evaluate_with(model, fn, buffers=False):
    """Registers fn(model) -> (accuracy, loss) as how this script's model is evaluated
    (accuracy in [0, 1], on the script's test set). In a peer it returns at once; in the
    evaluator process `hearsay sim` starts it serves the simulator until it is done, then
    exits the process. Call it before hearsay.Peer.from_command_line()."""
    spec = os.environ.get(EVALUATOR_VARIABLE)
    if not spec:
        return
    read_fd, write_fd = (int(v) for v in spec.split(":"))
    named = _tensors(model, buffers)
    device = _check(named)
    flat = _pack(named, device)
    os.write(write_fd, (json.dumps({"fingerprint": fingerprint(model, buffers), "count": flat.numel()}) + "\n").encode())
    model.eval()
    while True:
        head = _read_exactly(read_fd, 8)
        if head is None:
            sys.exit(0)
        (count,) = struct.unpack("<Q", head)
        if count != flat.numel():
            print(f"evaluator: asked for {count} values, the model has {flat.numel()}", file=sys.stderr)
            sys.exit(1)
        data = _read_exactly(read_fd, 4 * count)
        if data is None:
            sys.exit(0)
        with torch.no_grad():
            flat.copy_(torch.frombuffer(bytearray(data), dtype=torch.float32))
            accuracy, loss = _answer(fn(model))
        os.write(write_fd, struct.pack("<dd", accuracy, loss))
