"""A torch.nn.Module's parameters as a hearsay peer's (no copies on the CPU).

attach() packs the parameters into one contiguous float32 tensor and points every
parameter's .data at its slice, so that the optimizer (which holds the Parameter objects)
and the model train in that buffer, and hearsay's algorithm mixes the same memory in place
after each step. The order is model.named_parameters()'s, as in a state_dict.
"""

import hashlib

import torch

__all__ = ["attach", "Mixer"]


class Mixer:
    """What attach() returns: step() after each optimizer step, close() at the end."""

    def __init__(self, peer, flat, names):
        self.peer = peer
        self.flat = flat  # the buffer hearsay mixes: kept alive as long as the mixer
        self.names = names
        self.steps = 0

    def step(self):
        """hearsay's after-step hook: the algorithm mixes the parameters in place."""
        self.steps += 1
        self.peer.after_step(self.steps)

    def close(self):
        """Closes the peer (mixes what is pending, says bye)."""
        self.peer.close()


def _tensors(model, buffers):
    named = list(model.named_parameters())
    if buffers:
        named += [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return named


def fingerprint(named):
    """The model's identity for the run: peers of other fingerprints refuse each other."""
    count = sum(t.numel() for _, t in named)
    text = ";".join(f"{n}:{tuple(t.shape)}" for n, t in named)
    return f"torch-{count}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def attach(peer, model, optimizer=None, buffers=False):
    """Makes model's parameters (and its float buffers, with buffers=True) views of one flat
    float32 buffer, hands it to peer, and joins the run (this blocks until the run's world
    or min_peers is there). Returns a Mixer.

    optimizer is accepted for the shape of the API: it keeps working as it is, since the
    Parameter objects stay the same and only their storage moves. Attach before the
    optimizer has state (its momentum buffers are not moved). TypeError names a parameter
    that is not float32; NotImplementedError for parameters that are not on the CPU.
    """
    named = _tensors(model, buffers)
    if not named:
        raise ValueError("attach: the model has no parameters")
    for name, t in named:
        if t.dtype != torch.float32:
            raise TypeError(
                f"attach: parameter '{name}' is {t.dtype}; hearsay mixes float32 parameters only "
                "(model.float() converts them)"
            )
        if t.device.type != "cpu":
            raise NotImplementedError(
                f"attach: parameter '{name}' is on {t.device}; hearsay.torch mixes CPU tensors only "
                "for now (CUDA tensors are not supported yet)"
            )
    if optimizer is not None and len(optimizer.state) > 0:
        raise RuntimeError("attach: the optimizer already has state; attach before the first step")
    total = sum(t.numel() for _, t in named)
    flat = torch.empty(total, dtype=torch.float32)
    offset = 0
    with torch.no_grad():
        for _, t in named:
            n = t.numel()
            view = flat[offset:offset + n].view_as(t)
            view.copy_(t)
            t.data = view
            offset += n
    peer._attach(flat.data_ptr(), total, fingerprint(named))
    return Mixer(peer, flat, [n for n, _ in named])
