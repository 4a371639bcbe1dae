#!/usr/bin/env python3
"""scripts/launch without other machines: a remote shell that runs commands here
(tests/fake_rsh, argv mode like `ip netns exec`) and two "hosts" on 127.0.0.1 and
127.0.0.2. Checks the host file errors, unreachable hosts, a missing binary, flags the
launcher owns, a CURVE-secured run to the end, Ctrl-C stopping every peer, and PyTorch
script peers (--peer-command).

  launch_test.py --binary build/bin/hearsay --launch scripts/launch
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from script_checks import Checks  # noqa: E402
from read_safetensors import summarize  # noqa: E402
FAKE_RSH = os.path.join(HERE, "fake_rsh")
check = Checks("launch")


def run_launch(a, work, host_lines, extra=(), peer_flags=(), timeout=120, port=None, cwd=None):
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("\n".join(host_lines) + "\n")
    cmd = [a.launch, "--hosts", hosts, "--rsh", FAKE_RSH, "--binary", a.binary,
           "--keys", os.path.join(work, "keys"), "--remote-keys", os.path.join(work, "remote-keys"),
           "--port", str(port or free_port_base()), *extra, "--", *peer_flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def free_port_base():
    # Distinct per call and per process, away from the ephemeral range.
    free_port_base.n = getattr(free_port_base, "n", 0) + 1
    return 20000 + (os.getpid() % 500) * 20 + free_port_base.n * 4


def metrics_records(path):
    """The records of a metrics file, or None when a line is not whole JSON."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f]
    except (OSError, ValueError):
        return None


def peer_of_checkpoint(path):
    try:
        return summarize(path)["metadata"].get("peer")
    except SystemExit:  # the reader's way of saying the file is broken
        return None


def per_rank_files(a, work):
    """4 slots on one host, one --metrics and --checkpoint given: a file of each per rank,
    whole; before, the four peers wrote one metrics file (4 readable lines, 2 broken) and
    one checkpoint."""
    run_dir = os.path.join(work, "slots")
    os.makedirs(run_dir)
    flags = ["--data", "synthetic", "--model", "mlp", "--epochs", "2", "--min-step-time", "30ms", "--metrics",
             "metrics.jsonl", "--checkpoint", "ckpt", "--log-every", "1"]
    # Relative paths are the peers' working directory's, as on a host.
    p = run_launch(a, work, ["127.0.0.1 slots=4"], peer_flags=flags, cwd=run_dir)
    check("slots=4 with one --metrics: the launcher says each peer has its own",
          p.returncode == 0 and "--metrics metrics.jsonl: each peer has its own, metrics-{rank}.jsonl" in p.stdout,
          f"exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr}")
    for rank in range(4):
        records = metrics_records(os.path.join(run_dir, f"metrics-{rank}.jsonl"))
        check(f"rank {rank} wrote its own whole metrics file, start to final",
              records is not None and records[0]["type"] == "start" and records[-1]["type"] == "final"
              and all(r.get("peer") in (None, f"rank{rank}") for r in records),
              str(records)[:500])
        check(f"rank {rank} wrote its own checkpoint",
              peer_of_checkpoint(os.path.join(run_dir, f"ckpt-{rank}", "checkpoint.safetensors")) == f"rank{rank}",
              str(os.listdir(run_dir)))
    check("no shared metrics file or checkpoint directory was made",
          not os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and not os.path.exists(
              os.path.join(run_dir, "ckpt")), str(os.listdir(run_dir)))


def load_in_pytorch(paths):
    """Empty when each file loads into bench/pytorch_lenet.py's mlp() with strict=True, else
    why not. PyTorch is Debian's python3-torch (scripts/setup installs it); the files are read
    with bench/pytorch_resnet.py's reader, the safetensors package not being in Debian."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
        from pytorch_lenet import mlp
        from pytorch_resnet import read_safetensors
    except ImportError as e:
        return f"PyTorch is not importable ({e}): install python3-torch (scripts/setup does)"
    for path in paths:
        try:
            mlp().load_state_dict(read_safetensors(path)[0], strict=True)
        except Exception as e:  # the error PyTorch gives a user, in one line
            return f"{path}: {' '.join(str(e).split())}"
    return ""


def local_run_and_resume(a, work):
    """--local 4: peers on this machine without a remote shell; then --resume, each rank from
    its own checkpoint."""
    run_dir = os.path.join(work, "local")
    os.makedirs(run_dir)
    base = [a.launch, "--local", "4", "--binary", a.binary, "--keys", os.path.join(work, "local-keys"),
            "--port", str(free_port_base()), "--", "--data", "synthetic", "--model", "mlp", "--min-step-time",
            "30ms", "--metrics", "metrics.jsonl", "--checkpoint", "ckpt", "--log-every", "1"]
    p = subprocess.run(base + ["--epochs", "2"], capture_output=True, text=True, timeout=180, cwd=run_dir)
    check("--local 4 runs 4 CURVE peers here and every one exits 0",
          p.returncode == 0 and "every peer ended: rank 0@localhost exit 0, rank 1@localhost exit 0, "
          "rank 2@localhost exit 0, rank 3@localhost exit 0" in p.stdout and "insecure" not in p.stdout,
          f"exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr}")
    steps = {}
    for rank in range(4):
        try:
            steps[rank] = int(summarize(os.path.join(run_dir, f"ckpt-{rank}", "checkpoint.safetensors"))
                              ["metadata"]["hearsay.step"])
        except (SystemExit, KeyError, ValueError):
            steps[rank] = None
    check("--local 4 left a checkpoint per rank", all(s for s in steps.values()), str(steps))
    loaded = load_in_pytorch([os.path.join(run_dir, f"ckpt-{rank}", "checkpoint.safetensors") for rank in range(4)])
    check("every rank's checkpoint loads into PyTorch's module strictly", loaded == "", loaded)
    p = subprocess.run(base + ["--epochs", "3", "--resume"], capture_output=True, text=True, timeout=180,
                       cwd=run_dir)
    for rank in range(4):
        said = any(line.startswith(f"[localhost:{rank}] ") and
                   f"resumed from ckpt-{rank}/checkpoint.safetensors at step {steps[rank]} " in line
                   for line in p.stdout.splitlines())
        check(f"--resume: rank {rank} goes on from its own checkpoint", p.returncode == 0 and said,
              f"exit {p.returncode}\n{p.stdout[-3000:]}{p.stderr}")


def python_peers(a, work):
    """--peer-command: the peers are examples/torch/lenet_fmnist.py, a PyTorch script of the
    hearsay module, given the launcher's flags (rank, world, listen, join, CURVE keys) as a
    native peer is. Skipped (said) where the module or Debian's torch is missing."""
    p = subprocess.run([a.launch, "--local", "2", "--peer-command", " ", "--", "--epochs", "1"],
                       capture_output=True, text=True, timeout=60)
    check("--peer-command with an empty command: exit 2 saying so",
          p.returncode == 2 and "--peer-command: the command is empty" in p.stderr, f"exit {p.returncode}: {p.stderr}")
    module = os.path.join(os.path.dirname(os.path.dirname(a.binary)), "python")
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch, hearsay"], capture_output=True,
                           env=dict(os.environ, PYTHONPATH=module))
    if probe.returncode != 0:
        print(f"skipped: --peer-command with a PyTorch script (no torch or hearsay module in {module})")
        return
    script = os.path.join(os.path.dirname(HERE), "examples", "torch", "lenet_fmnist.py")
    run_dir = os.path.join(work, "python")
    os.makedirs(run_dir)
    p = subprocess.run([a.launch, "--local", "2", "--binary", a.binary, "--keys", os.path.join(work, "python-keys"),
                        "--port", str(free_port_base()),
                        "--peer-command", f"env PYTHONPATH={module} /usr/bin/python3 {script}", "--",
                        "--algo", "gossip", "--epochs", "0.05", "--metrics", "metrics.jsonl"],
                       capture_output=True, text=True, timeout=300, cwd=run_dir)
    out = p.stdout
    check("--peer-command: two PyTorch peers run under CURVE and exit 0",
          p.returncode == 0 and "rank 0@localhost exit 0, rank 1@localhost exit 0" in out and "insecure" not in out,
          f"exit {p.returncode}\n{out[-3000:]}{p.stderr}")
    check("--peer-command: each script trained its rank's shard to the end",
          all(f"[localhost:{r}] lenet_fmnist: rank{r} ended after step" in out for r in range(2)), out[-2000:])
    records = metrics_records(os.path.join(run_dir, "metrics-1.jsonl")) or []
    check("--peer-command: rank 1's metrics file is its own, per rank, with its steps",
          any(r.get("type") == "final" and r.get("peer") == "rank1" for r in records), str(records[-1:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--launch", required=True)
    a = ap.parse_args()
    a.binary, a.launch = os.path.abspath(a.binary), os.path.abspath(a.launch)
    with tempfile.TemporaryDirectory(prefix="hearsay-launch-") as work:
        # Host file errors: exit 2, naming the file and line.
        for lines, expect in [
            (["alpha slots=two"], "hosts:1: slots must be a whole number"),
            (["alpha", "beta slot=2"], "hosts:2: unknown option 'slot'"),
            (["alpha", "alpha slots=2"], "hosts:2: host 'alpha' is listed again"),
            (["alpha addr"], "hosts:1: 'addr' is not an option"),
            (["# nothing but a comment"], "lists no hosts"),
            (["alpha addr=127.0.0.2", "beta addr=127.0.0.2"], "hosts:2: host 'beta' has the address '127.0.0.2' of line 1"),
            (["127.0.0.2", "beta addr=127.0.0.2"], "hosts:2: host 'beta' has the address '127.0.0.2' of line 1"),
        ]:
            p = run_launch(a, work, lines)
            check(f"host file {lines!r} is refused: {expect}", p.returncode == 2 and expect in p.stderr,
                  f"exit {p.returncode}, stderr: {p.stderr.strip()}")

        # Flags the launcher sets itself.
        p = run_launch(a, work, ["alpha addr=127.0.0.1"], peer_flags=["--rank", "3"])
        check("a peer flag the launcher owns (--rank) is refused", p.returncode == 2 and "--rank" in p.stderr,
              p.stderr.strip())

        # An unreachable host and a missing binary: exit 1, the host named, nothing started.
        p = run_launch(a, work, ["alpha addr=127.0.0.1", "down-7 addr=127.0.0.2"])
        check("an unreachable host is named and nothing starts",
              p.returncode == 1 and "host 'down-7': unreachable" in p.stdout and "Connection refused" in p.stdout
              and "started" not in p.stdout, f"exit {p.returncode}\n{p.stdout}{p.stderr}")
        p = run_launch(a, work, ["alpha addr=127.0.0.1"], extra=["--binary", "/nonexistent/hearsay"])
        check("a missing binary is named with its host",
              p.returncode == 1 and "host 'alpha': /nonexistent/hearsay is not there" in p.stdout,
              f"exit {p.returncode}\n{p.stdout}{p.stderr}")

        # A run to the end: 3 peers on two hosts, CURVE on (joined addresses carry keys).
        flags = ["--data", "synthetic", "--model", "mlp", "--epochs", "2", "--min-step-time", "30ms",
                 "--log-every", "1"]
        logs = os.path.join(work, "logs")
        p = run_launch(a, work, ["alpha slots=2 addr=127.0.0.1", "beta addr=127.0.0.2"], peer_flags=flags,
                       extra=["--log-dir", logs])
        out = p.stdout
        check("a two-host run ends with every peer's exit 0",
              p.returncode == 0 and "rank 0@alpha exit 0, rank 1@alpha exit 0, rank 2@beta exit 0" in out,
              f"exit {p.returncode}\n{out[-3000:]}{p.stderr}")
        check("output is prefixed with host:rank", "[alpha:1] " in out and "[beta:2] " in out, out[-2000:])
        check("peers met at the hosts' addresses with CURVE keys",
              "member 'rank2' joined (tcp://127.0.0.2:" in out and "#" in out.split("member 'rank2' joined (")[1][:60]
              and "insecure" not in out, out[-3000:])
        beta_log = os.path.join(logs, "beta-rank2.log")
        check("--log-dir keeps each peer's output in its own file",
              os.path.exists(beta_log) and "finished:" in open(beta_log).read()
              and sorted(os.listdir(logs)) == ["alpha-rank0.log", "alpha-rank1.log", "beta-rank2.log"],
              str(os.listdir(logs)) if os.path.isdir(logs) else "no log directory")
        remote = os.path.join(work, "remote-keys")
        check("each host made its own key pair and got the authorized keys",
              all(os.path.exists(os.path.join(remote, *f)) for f in
                  [("alpha", "peer.secret"), ("beta", "peer.pub"), ("authorized", "alpha.pub"),
                   ("authorized", "beta.pub")])
              and oct(os.stat(os.path.join(remote, "alpha", "peer.secret")).st_mode & 0o777) == "0o600",
              str(list(os.walk(remote))))
        local_files = [f for _, _, files in os.walk(os.path.join(work, "keys")) for f in files]
        check("no secret key is kept on the launching machine",
              sorted(local_files) == ["alpha.pub", "beta.pub"], str(local_files))

        # Ctrl-C: every peer finishes its step and says bye; the launcher exits 130.
        hosts = os.path.join(work, "hosts")
        with open(hosts, "w") as f:
            f.write("alpha slots=2 addr=127.0.0.1\n")
        long_flags = ["--data", "synthetic", "--model", "mlp", "--epochs", "50", "--min-step-time", "50ms"]
        proc = subprocess.Popen([a.launch, "--hosts", hosts, "--rsh", FAKE_RSH, "--binary", a.binary,
                                 "--keys", os.path.join(work, "keys"),
                                 "--remote-keys", remote, "--port", str(free_port_base()), "--", *long_flags],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = ""
        deadline = time.monotonic() + 60
        while "joined the run" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        seen += rest
        check("Ctrl-C stops every peer cleanly and the launcher exits 130",
              proc.returncode == 130 and "rank 0@alpha exit 0, rank 1@alpha exit 0" in seen,
              f"exit {proc.returncode}\n{seen[-2000:]}")
        # "--": the pattern starts with a dash, which pgrep would take for an option.
        leftovers = subprocess.run(["pgrep", "-f", "--", f"--keys {remote}"], capture_output=True,
                                   text=True).stdout
        check("no peer is left running", leftovers.strip() == "", leftovers)
        per_rank_files(a, work)
        local_run_and_resume(a, work)
        python_peers(a, work)

        # Under Slurm: one task per peer, everything from the environment. --binary echo
        # prints the peer command the task would exec.
        keys = os.path.join(work, "slurm-keys")
        p = subprocess.run([a.launch, "keys", "--out", keys, "--local-binary", a.binary, "node01", "node02"],
                           capture_output=True, text=True)
        check("launch keys makes a pair per node", p.returncode == 0 and os.path.exists(
            os.path.join(keys, "node02", "peer.secret")), p.stdout + p.stderr)
        env = dict(os.environ, SLURM_PROCID="3", SLURM_NTASKS="4", SLURM_LOCALID="1",
                   SLURM_JOB_NODELIST="node[01-02]", SLURMD_NODENAME="node02")
        p = subprocess.run([a.launch, "--slurm", "--binary", "echo", "--keys", keys, "--port", "7000", "--",
                            "--data", "synthetic"], capture_output=True, text=True, env=env)
        words = p.stdout.split()
        check("--slurm gives the task its rank, world, node address and rank 0's address with its key",
              p.returncode == 0 and words[:9] == ["peer", "--rank", "3", "--world", "4", "--listen",
                                                  "tcp://node02:7001", "--join", words[8]]
              and words[8].startswith("tcp://node01:7000#") and len(words[8]) == len("tcp://node01:7000#") + 40
              and f"{keys}/node02" in words and words[-3:] == ["--wait-for-world", "--data", "synthetic"],
              p.stdout + p.stderr)
        p = subprocess.run([a.launch, "--slurm", "--binary", "echo", "--", "--data", "synthetic"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
        check("--slurm outside srun says what is missing", p.returncode == 2 and "SLURM_PROCID" in p.stderr,
              p.stderr)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
