"""The peers of a launch: every peer's rank, addresses and command line (scripts/launch).

What makes one peer's command differ from another's besides its rank and addresses: the
paths that are a peer's own. Given once after `--`, --metrics, --checkpoint and
--ready-file would be one file for every peer of a host (and of every host on a shared
filesystem), and the peers would write over each other; so each is made per rank with a
{rank} placeholder, which `hearsay peer` expands (it refuses a file another live peer
holds, too). An --http port is made per slot: the peers of a host cannot share a port.
"""
import os
import shlex

PER_PEER_PATHS = ("--metrics", "--checkpoint", "--ready-file")
OWNED = ("--rank", "--world", "--listen", "--join", "--keys", "--authorized")


class UsageError(Exception):
    """Bad flags or host file: exit 2."""


class Peer:
    def __init__(self, rank, host, slot, argv):
        self.rank, self.host, self.slot, self.argv = rank, host, slot, argv
        self.process = None
        self.status = None
        self.reader = None

    @property
    def label(self):
        return f"{self.host.name}:{self.rank}"


def peer_flags_conflict(flags):
    for f in flags:
        name = f.split("=", 1)[0]
        if name in OWNED:
            raise UsageError(f"peer flag {name} is set by the launcher for every peer; leave it out")


def per_rank_path(value):
    """value with a {rank} placeholder: as it is when it has {rank} or {id} already, else
    'metrics.jsonl' -> 'metrics-{rank}.jsonl', 'ckpt' and 'ckpt/' -> 'ckpt-{rank}'."""
    if "{rank}" in value or "{id}" in value:
        return value
    trimmed = value.rstrip("/") or value
    head, name = os.path.split(trimmed)
    stem, dot, ext = name.rpartition(".")
    name = f"{stem}-{{rank}}.{ext}" if dot and stem else f"{name}-{{rank}}"
    return os.path.join(head, name)


def flag_values(flags):
    """(index of the value, flag name) for every '--flag VALUE' and '--flag=VALUE'."""
    i = 0
    while i < len(flags):
        name, eq, _ = flags[i].partition("=")
        if eq:
            yield i, name
        elif name.startswith("--") and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            yield i + 1, name
            i += 1
        i += 1


def with_value(flags, index, value):
    out = list(flags)
    name, eq, _ = out[index].partition("=")
    out[index] = f"{name}={value}" if eq else value
    return out


def per_rank_flags(flags):
    """The peer flags with each peer's own paths made per rank, and notes saying what changed."""
    notes = []
    for index, name in list(flag_values(flags)):
        if name not in PER_PEER_PATHS:
            continue
        given = flags[index].partition("=")[2] if flags[index].startswith(name + "=") else flags[index]
        made = per_rank_path(given)
        if made != given:
            flags = with_value(flags, index, made)
            notes.append(f"{name} {given}: each peer has its own, {made} ({made.replace('{rank}', '0')}, "
                         f"{made.replace('{rank}', '1')}, ...)")
    return flags, notes


def http_port_per_slot(flags, slot):
    """--http [HOST]:PORT becomes PORT + slot, as --listen ports are (:0 stays: the system picks)."""
    for index, name in flag_values(flags):
        if name != "--http":
            continue
        value = flags[index].partition("=")[2] if flags[index].startswith("--http=") else flags[index]
        host, colon, port = value.rpartition(":")
        if colon and port.isdigit() and int(port) > 0 and slot > 0:
            flags = with_value(flags, index, f"{host}:{int(port) + slot}")
    return flags


def start_together(flags):
    """--wait-for-world unless the flags say how to start (--wait-for-world, --min-peers): the
    launcher starts every rank at once, and rank 0 must not train alone until the others
    are up (a short run ended before they joined)."""
    given = {f.split("=", 1)[0] for f in flags}
    return [] if given & {"--wait-for-world", "--min-peers"} else ["--wait-for-world"]


def peer_program(args):
    """What a peer runs: `BINARY peer`, or --peer-command's words (a script of the hearsay
    Python module, which takes `hearsay peer`'s flags: python/hearsay/__init__.py)."""
    command = getattr(args, "peer_command", None)
    if command is None:
        return [args.binary, "peer"]
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise UsageError(f"--peer-command {command!r} does not parse as a command line ({e})")
    if not words:
        raise UsageError("--peer-command: the command is empty; give the program and its arguments, "
                         "e.g. --peer-command 'python3 train.py'")
    return words


def peer_argv(program, rank, world, listen, join, keys_dir, authorized_dir):
    """The peer's program (peer_program) with what the launcher decides: rank 0 joins
    nobody; no keys means --insecure."""
    argv = list(program) + ["--rank", str(rank), "--world", str(world), "--listen", listen]
    if rank > 0:
        argv += ["--join", join]
    if keys_dir:
        return argv + ["--keys", keys_dir, "--authorized", authorized_dir]
    return argv + ["--insecure"]


def bracket(addr):
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def plan_peers(hosts, args, peer_flags, keys, remote_keys):
    """Every peer, ranks in host file order; peer_flags already per rank (per_rank_flags)."""
    world = sum(h.slots for h in hosts)
    first = hosts[0]
    join = f"tcp://{bracket(first.addr)}:{args.port}"
    if keys:
        join += "#" + keys[first.name]
    peers, rank = [], 0
    for host in hosts:
        for slot in range(host.slots):
            argv = peer_argv(peer_program(args), rank, world, f"tcp://{bracket(host.addr)}:{args.port + slot}", join,
                             os.path.join(remote_keys, host.name) if keys else None,
                             os.path.join(remote_keys, "authorized") if keys else None)
            argv = (["env", f"HEARSAY_LOCAL_RANK={slot}"] + argv + start_together(peer_flags)
                    + http_port_per_slot(peer_flags, slot))
            peers.append(Peer(rank, host, slot, argv))
            rank += 1
    return peers
