"""hearsay: a Python program as a peer of a hearsay run.

    import hearsay, hearsay.torch
    peer = hearsay.Peer(rank=0, world=2, listen="tcp://127.0.0.1:29500", algo="gossip", insecure=True)
    mixer = hearsay.torch.attach(peer, model, optimizer)
    for x, y in data:
        ...; optimizer.step()
        mixer.step()          # the algorithm mixes the parameters in place
    peer.close()              # bye; also on leaving a `with hearsay.Peer(...) as peer:` block

Settings are `hearsay peer`'s flags, with the same names (dashes as underscores) and
defaults, parsed and checked by hearsay's own parser (peer/peer_config.hpp, one
declaration of every setting): `algo="dpsgd"` is `--algo dpsgd`, `insecure=True` is
`--insecure`, a list is the flag repeated (`join=[a, b]`), `config="peer.toml"` reads a
config file as `hearsay peer --config` does. Bad settings raise ValueError with hearsay's
own message; failures of the run (no seed answered, a lost neighbour) RuntimeError. The
training flags (model, epochs, lr, ...) are accepted and ignored: the script trains.
"""

from . import _hearsay

__all__ = ["Peer", "settings_to_flags"]


def _word(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # reads back exactly
    return str(value)


def settings_to_flags(settings):
    """The `hearsay peer` command-line words for keyword settings: `--name=value` each (so a
    value that starts with a dash stays a value), a list as the flag repeated, a bool as
    `--flag=true|false` (CLI11 reads either for a flag), None left out."""
    args = []
    for key, value in settings.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        values = value if isinstance(value, (list, tuple)) else [value]
        args += [f"{flag}={_word(v)}" for v in values]
    return args


class Peer:
    """One peer of a hearsay run whose training is this program's (peer/external_peer.hpp).

    It binds, joins and starts mixing when a model is attached (hearsay.torch.attach), and
    says bye on close() or when a `with` block ends.
    """

    def __init__(self, config=None, **settings):
        if config is not None:
            settings = {"config": config, **settings}
        self._native = _hearsay.Peer(settings_to_flags(settings))
        self._attached = False

    # The flat float32 buffer at `address` (count values), kept alive by the caller until
    # close(). One model per peer. Used by hearsay.torch.attach.
    def _attach(self, address, count, fingerprint):
        if self._attached:
            raise RuntimeError("attach: the peer already has a model; a peer takes one model")
        self._native.attach(address, count, fingerprint)
        self._attached = True

    def after_step(self, step):
        """The after-step hook: the algorithm mixes the parameters in place."""
        self._native.after_step(step)

    def close(self):
        """Mixes what is pending, stops mixing and says bye to the run. Idempotent."""
        self._native.close()

    @property
    def id(self):
        return self._native.id

    @property
    def address(self):
        """Where other peers join this one (after attach)."""
        return self._native.address

    @property
    def closed(self):
        return self._native.closed

    @property
    def live_members(self):
        return self._native.live_members

    def totals(self):
        """What mixing did so far: exchanges, bytes, rounds."""
        return self._native.totals()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
