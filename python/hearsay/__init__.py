"""hearsay: a Python program as a peer of a hearsay run.

    import hearsay, hearsay.torch
    peer = hearsay.Peer(rank=0, world=2, listen="tcp://127.0.0.1:29500", algo="gossip", insecure=True)
    mixer = hearsay.torch.attach(peer, model, optimizer)
    for x, y in data:
        ...; optimizer.step()
        mixer.step()          # the algorithm mixes the parameters in place
    peer.close()              # bye; also on leaving a `with hearsay.Peer(...) as peer:` block

A script started by `hearsay sim --peer-command` or `scripts/launch --peer-command` gets
`hearsay peer`'s flags on its command line: `hearsay.Peer.from_command_line()`.

Settings are `hearsay peer`'s flags, with the same names (dashes as underscores) and
defaults, parsed and checked by hearsay's own parser (peer/peer_config.hpp, one
declaration of every setting): `algo="dpsgd"` is `--algo dpsgd`, `insecure=True` is
`--insecure`, a list is the flag repeated (`join=[a, b]`), `config="peer.toml"` reads a
config file as `hearsay peer --config` does. Bad settings raise ValueError with hearsay's
own message; failures of the run (no seed answered, a lost neighbour) RuntimeError. The
training flags (model, epochs, lr, ...) are accepted and ignored: the script trains.
"""

from . import _hearsay

__all__ = ["Peer", "command_line_settings", "settings_to_flags", "shard"]


def shard(labels, rank, world, partition="iid", seed=42):
    """The indices of rank's shard of a training set with these labels (class numbers), as a
    native peer of those settings takes it (`--partition iid` or `dirichlet:ALPHA`, ...): a
    list of ints. labels: any sequence of ints, a numpy array or a tensor. ValueError or
    RuntimeError with hearsay's message for bad values."""
    if hasattr(labels, "tolist"):  # numpy, torch: one conversion, not one object per label
        labels = labels.tolist()
    return _hearsay.shard([int(v) for v in labels], int(rank), int(world), str(partition), int(seed))


def _flags_or_exit(argv, use):
    """use(argv) for `hearsay peer` flags on the command line, exiting as `hearsay peer` does:
    --help prints the flags (exit 0), a bad flag hearsay's message (exit 2)."""
    import sys
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return use(argv)
    except ValueError as e:
        text = str(e)
        if "--help" in argv or "-h" in argv:
            print(text)
            sys.exit(0)
        print(f"{sys.argv[0]}: {text}", file=sys.stderr)
        sys.exit(2)


def command_line_settings(argv=None):
    """The settings of the `hearsay peer` flags on this program's command line (sys.argv[1:]
    by default), as Peer.settings gives them but without starting a peer (and without
    data_seed, which is the peer's): what a script needs before it has a peer, such as
    --data for the test set its evaluate_with function reads. `hearsay sim` starts a
    script's evaluator with its rank 0's flags, so that this reads the run's settings there
    too. --help and bad flags exit as in Peer.from_command_line()."""
    return _flags_or_exit(argv, _hearsay.settings_of)


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

    def __init__(self, config=None, args=None, **settings):
        if config is not None:
            settings = {"config": config, **settings}
        words = list(args or []) + settings_to_flags(settings)
        self._native = _hearsay.Peer(words)
        self._attached = False

    @classmethod
    def from_command_line(cls, argv=None):
        """A peer from `hearsay peer`'s flags on this program's command line (sys.argv[1:] by
        default): how `hearsay sim --peer-command` and `scripts/launch --peer-command` start
        a script, and how one starts it by hand. --help prints the flags and exits; a bad
        flag prints hearsay's message and exits 2, as `hearsay peer` does."""
        import os
        import sys
        if os.environ.get("HEARSAY_EVALUATOR"):
            # Started as `hearsay sim`'s evaluator, and the script never registered how to
            # evaluate its model: say so, and let the simulator evaluate it as --model.
            print(f"{sys.argv[0]}: hearsay sim started this script as its evaluator, but it calls "
                  "hearsay.Peer before hearsay.torch.evaluate_with(model, fn): the simulator "
                  "evaluates its peers as --model", file=sys.stderr)
            sys.exit(3)
        peer = _flags_or_exit(argv, lambda words: cls(args=words))
        peer.stop_on_signals()
        return peer

    def stop_on_signals(self, signals=None):
        """SIGTERM (and SIGINT) end the run as they end a native peer's: the step in progress
        finishes, mixer.step() returns False, and the script's close() mixes what is
        pending, writes the final checkpoint and says bye. What `hearsay sim`, the launcher
        and Slurm send. from_command_line() calls it (from the main thread only)."""
        import signal
        import threading
        if threading.current_thread() is not threading.main_thread():
            return
        for number in signals or (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: self.request_stop())

    def request_stop(self):
        """Ends the run at the next step (mixer.step() returns False)."""
        self._native.request_stop()

    @property
    def settings(self):
        """The training settings of the peer's flags (rank, world, batch, epochs, lr, momentum,
        weight_decay, nesterov, optimizer, seed, init_seed, data, partition, device, algo,
        lr_schedule, budget), and data_seed: the seed a native peer with this peer's id
        shuffles its shard with (distinct per peer, also for peers without --rank). What the
        script trains with, as a native peer would."""
        return self._native.settings

    # The flat float32 buffer at `address` holding the tensors names/shapes in order, kept
    # alive by the caller until close(). One model per peer. Used by hearsay.torch.attach.
    def _attach(self, address, names, shapes, shard_examples, train_examples):
        if self._attached:
            raise RuntimeError("attach: the peer already has a model; a peer takes one model")
        self._native.attach(address, names, shapes, int(shard_examples), int(train_examples))
        self._attached = True

    def after_step(self, step, loss=None):
        """The after-step hook: the algorithm mixes the parameters in place. Returns False
        once the run's budget is spent (train no more)."""
        return self._native.after_step(step, None if loss is None else float(loss))

    def learning_rate(self, step):
        """The schedule's learning rate for the step after `step` steps."""
        return self._native.learning_rate(step)

    @property
    def steps_per_epoch(self):
        return self._native.steps_per_epoch

    @property
    def start_step(self):
        """The step a peer resumed from its checkpoint goes on from (0 otherwise)."""
        return self._native.start_step

    @property
    def fingerprint(self):
        return self._native.fingerprint

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
