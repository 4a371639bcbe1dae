"""scripts/launch --slurm: one srun task becomes one peer (scripts/slurm/hearsay.sbatch).

Everything a peer needs comes from the task's environment: its rank (SLURM_PROCID), the
world size (SLURM_NTASKS), its slot on the node (SLURM_LOCALID: it listens on --port +
slot and gets HEARSAY_LOCAL_RANK), its node (SLURMD_NODENAME) and the job's nodes
(SLURM_JOB_NODELIST: rank 0 runs on the first, which every other rank joins). The keys
are read from a directory the nodes share (scripts/launch keys --out DIR NODE...), so
nothing has to travel between the tasks. The task then execs the peer: srun's signals
(scancel, the time limit, a requeue) reach it directly.
"""
import os
import re
import shutil
import subprocess

from launch_plan import UsageError, bracket, http_port_per_slot, peer_argv, peer_program, start_together


def expand_nodelist(text):
    """'node[01-03,07],gpu5' -> ['node01', 'node02', 'node03', 'node07', 'gpu5'] (scontrol's forms)."""
    if shutil.which("scontrol"):
        p = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.split():
            return p.stdout.split()
    names, depth, item = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            if item:
                names.extend(expand_one(item))
            item = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        item += ch
    return names


def expand_one(item):
    m = re.match(r"^(.*?)\[([^\]]+)\](.*)$", item)
    if not m:
        return [item]
    prefix, ranges, suffix = m.groups()
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if hi:
            width = len(lo)
            out.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi) + 1))
        else:
            out.append(prefix + lo)
    return [name for o in out for name in expand_one(o + suffix)] if "[" in suffix else [o + suffix for o in out]


def run_slurm(args, peer_flags, read_public_key):
    """Execs this task's peer; read_public_key(path) is the Z85 key of a peer.pub file."""
    env = os.environ
    missing = [v for v in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST") if v not in env]
    if missing:
        raise UsageError("--slurm runs inside srun, one task per peer; missing " + ", ".join(missing))
    rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env["SLURM_LOCALID"])
    nodes = expand_nodelist(env["SLURM_JOB_NODELIST"])
    me = env.get("SLURMD_NODENAME") or os.uname().nodename
    join = f"tcp://{bracket(nodes[0])}:{args.port}"
    own = None if args.insecure else os.path.join(args.keys, me)
    if own:
        if not os.path.exists(os.path.join(own, "peer.secret")):
            raise UsageError(f"no key pair for node '{me}' in {args.keys}: make them once on a shared "
                             f"filesystem with: scripts/launch keys --out {args.keys} "
                             + " ".join(nodes))
        if rank > 0:
            join += "#" + read_public_key(os.path.join(args.keys, nodes[0], "peer.pub"))
    argv = peer_argv(peer_program(args), rank, world, f"tcp://{bracket(me)}:{args.port + local}", join, own,
                     os.path.join(args.keys, "authorized"))
    peer_flags = start_together(peer_flags) + http_port_per_slot(peer_flags, local)
    os.environ["HEARSAY_LOCAL_RANK"] = str(local)
    os.execvp(argv[0], argv + peer_flags)
