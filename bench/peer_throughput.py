#!/usr/bin/env python3
"""Gossip overhead benchmark: summed training samples/s of N `hearsay peer` processes on a
small CPU set with --algo gossip versus --algo none (no communication).

Acceptance figure: on 2 cores, 8 LeNet peers with --algo gossip reach >= 90% of the summed
samples/s of 8 peers with --algo none. The two configurations run alternately (none, gossip,
none, gossip, ...) for --rounds rounds so a slow phase of a shared machine hits both alike.

Each run starts N peers on loopback (peer 0 first, the others --join it), all pinned to --cpus,
with --threads 1 --model lenet --batch 64 and the same --seed; waits --warmup seconds, measures
for --window seconds, then stops them with SIGTERM (kill -9 after 10 s, reported as a failure).
A peer's throughput is (step at window end - step at window start) * batch / window, with the
steps interpolated from its --metrics lines (--log-every); the run's figure is the sum over peers.
Exchanges per peer per second come from the exchanges_ok deltas the same way.

Example:
  bench/peer_throughput.py --peers 4 --window 8 --warmup 3 --rounds 1
  bench/peer_throughput.py --json out/bench/peer_throughput.json
"""
import argparse, datetime, json, os, shlex, signal, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN = os.path.join(HERE, "..", "build", "bin", "hearsay")


class PeerFailure(RuntimeError):
    pass


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"(cannot read {path}: {e})"


def wait_ready(path, proc, who, log, timeout=60.0):
    """What peer `who` wrote to its --ready-file `path` once it listened (peer/ready_file.hpp):
    a dict with id, rank, run, address (what --join takes), pid and http_port. PeerFailure naming
    the peer and its log when it exits first or writes nothing within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        exited = proc.poll() is not None  # before the look: a file written just before the exit counts
        try:
            with open(path) as f:
                return json.load(f)  # written atomically: never a part
        except FileNotFoundError:
            pass
        except ValueError as e:
            raise PeerFailure(f"{who}: {path} is not a ready record ({e}); see {log}")
        if exited:
            raise PeerFailure(f"{who} exited with status {proc.returncode} before it listened; "
                              f"see {log}:\n{tail(log).rstrip()}")
        if time.monotonic() > deadline:
            raise PeerFailure(f"{who} did not listen within {timeout:g} s; see {log}")
        time.sleep(0.02)  # the file is all there is to watch


def read_metrics(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by the kill
                if rec.get("type") == "metrics":
                    out.append(rec)
    except OSError:
        pass
    return out


def cpu_snapshot(procs, cpus):
    """(busy ticks of the CPUs in `cpus`, ticks used by the peers): /proc/stat and /proc/PID/stat."""
    busy = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *v = line.split()
            if name.startswith("cpu") and name != "cpu" and (not cpus or int(name[3:]) in cpus):
                busy += sum(int(x) for x in v[:8]) - int(v[3]) - int(v[4])  # less idle, iowait
    ours = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                ours += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        except OSError:
            pass
    return busy, ours


def count_warnings(path, before):
    """warn/error lines of a peer's stderr logged before `before` (time.time()), less --insecure's."""
    n = 0
    with open(path, errors="replace") as f:
        for line in f:
            if (" warn " in line or " error " in line) and "insecure mode" not in line:
                try:
                    ts = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
                    ts = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
                except ValueError:
                    ts = 0.0
                n += ts < before
    return n


def interp(recs, t, key):
    """Value of recs[key] at peer time t, linear between the metrics lines around t."""
    for a, b in zip(recs, recs[1:]):
        if a["time_s"] <= t <= b["time_s"]:
            span = b["time_s"] - a["time_s"]
            f = (t - a["time_s"]) / span if span > 0 else 0.0
            return a[key] + f * (b[key] - a[key])
    return None


def pinned_cpus(arg):
    """(set of CPUs, text) for a --cpus value: 'all' (None), '0,1', or None for the first 2 CPUs
    this process may use."""
    if arg == "all":
        return None, "all"
    cpus = {int(c) for c in arg.split(",")} if arg else set(sorted(os.sched_getaffinity(0))[:2])
    return cpus, ",".join(map(str, sorted(cpus)))


def run_once(a, algo, cpus, workdir, tag):
    if a.transport == "ipc":  # Unix domain sockets: the peers of one box without the TCP stack
        ports = [os.path.join(workdir, f"{tag}-p{i}.sock") for i in range(a.peers)]
        address = lambda p: f"ipc://{p}"
    else:
        ports = free_ports(a.peers)
        address = lambda p: f"tcp://127.0.0.1:{p}"
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    procs, launched, files = [], [], []
    seed_addr = None
    epochs = 1000000
    for i, port in enumerate(ports):
        metrics = os.path.join(workdir, f"{tag}-p{i}.jsonl")
        errp = os.path.join(workdir, f"{tag}-p{i}.err")
        ready = os.path.join(workdir, f"{tag}-p{i}.ready")
        program = shlex.split(a.peer_command) if a.peer_command else [a.binary, "peer"]
        # A script reads its own data: the synthetic set is hearsay's.
        data = [] if a.peer_command and a.data == "synthetic" else ["--data", a.data]
        cmd = program + ["--listen", address(port), "--insecure", "--ready-file", ready, *data, "--model", "lenet", "--batch", str(a.batch), "--threads", "1",
               "--seed", str(a.seed), "--epochs", str(epochs), "--algo", algo,
               "--gossip-every", str(a.gossip_every), "--log-every", str(a.log_every),
               "--run", f"bench-{os.getpid()}-{tag}", "--metrics", metrics]
        cmd += ([] if i == 0 else ["--join", seed_addr]) + a.peer_arg
        err = open(errp, "w")
        launched.append(time.monotonic())
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                      preexec_fn=preexec))
        err.close()
        files.append((metrics, errp))
        if i == 0:  # the seed listens before the others join it, at the address it says
            try:
                seed_addr = wait_ready(ready, procs[0], "peer 0", errp)["address"]
            except PeerFailure:
                if procs[0].poll() is None:
                    procs[0].kill()
                    procs[0].wait()
                raise
    t0 = time.monotonic() + a.warmup
    t1 = t0 + a.window
    failures = []
    snaps = []
    try:
        for until in (t0, t1, t1 + 1.5 * a.log_every):
            while time.monotonic() < until:
                for i, p in enumerate(procs):
                    if p.poll() is not None:
                        raise PeerFailure(f"peer {i} exited early with status {p.returncode}")
                time.sleep(min(0.2, max(0.0, until - time.monotonic())))
            snaps.append(cpu_snapshot(procs, cpus))
    except PeerFailure as e:
        failures.append((None, str(e)))
    finally:
        stop_wall = time.time()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        # A script may end with work of its own (lenet_fmnist.py evaluates its model).
        grace = 60 if a.peer_command else 10
        deadline = time.monotonic() + grace
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                failures.append((i, f"peer {i} did not exit within {grace} s of SIGTERM; killed -9"))
    for i, p in enumerate(procs):
        if p.returncode != 0 and not any(j == i for j, _ in failures):
            failures.append((i, f"peer {i} exited with status {p.returncode}"))

    per_peer, min_live, warns = [], None, 0
    for i, (metrics, errp) in enumerate(files):
        recs = read_metrics(metrics)
        ta, tb = t0 - launched[i], t1 - launched[i]
        s0, s1 = interp(recs, ta, "step"), interp(recs, tb, "step")
        e0, e1 = interp(recs, ta, "exchanges_ok"), interp(recs, tb, "exchanges_ok")
        if None in (s0, s1, e0, e1):
            failures.append((i, f"peer {i}: metrics do not cover the window "
                                f"[{ta:.1f}, {tb:.1f}] s ({len(recs)} lines)"))
            continue
        live = [r["live_members"] for r in recs if ta <= r["time_s"] <= tb]
        if live:
            min_live = min(live) if min_live is None else min(min_live, min(live))
        if algo != "none" and (not live or min(live) < a.peers):
            failures.append((i, f"peer {i}: live_members {min(live) if live else '?'} < "
                                f"{a.peers} in the measurement window"))
        warns += count_warnings(errp, stop_wall)
        per_peer.append({"samples_per_s": (s1 - s0) * a.batch / a.window,
                         "exchanges_per_s": (e1 - e0) / a.window})
    if failures:
        for i, msg in failures:
            print(f"FAIL ({algo}): {msg}", file=sys.stderr)
            for j in ([i] if i is not None else range(len(files))):
                print(f"--- stderr tail of peer {j} ({files[j][1]}):\n{tail(files[j][1])}",
                      file=sys.stderr)
        raise PeerFailure(f"{algo} run {tag} failed")
    ncpu = len(cpus) if cpus else os.cpu_count()
    hz = os.sysconf("SC_CLK_TCK") * a.window * ncpu
    (b0, o0), (b1, o1) = snaps[0], snaps[1]
    return {"algo": algo, "samples_per_s": sum(p["samples_per_s"] for p in per_peer),
            "cpu_peers": (o1 - o0) / hz, "cpu_others": max(0.0, (b1 - b0) - (o1 - o0)) / hz,
            "exchanges_per_peer_s": statistics.mean(p["exchanges_per_s"] for p in per_peer),
            "min_live_members": min_live, "warn_lines": warns,
            "peers": [round(p["samples_per_s"], 1) for p in per_peer]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=DEFAULT_BIN, help="hearsay binary (default: %(default)s)")
    ap.add_argument("--peers", type=int, default=8, help="peers per run (default: 8)")
    ap.add_argument("--transport", choices=["tcp", "ipc"], default="tcp",
                    help="loopback TCP (default) or Unix domain sockets (ipc://) between the peers")
    ap.add_argument("--cpus", default=None,
                    help="CPU list all peers are pinned to, e.g. 0,1 (default: the first 2 usable "
                         "cores); 'all' for no pinning")
    ap.add_argument("--data", default="synthetic", help="--data of the peers (default: synthetic)")
    ap.add_argument("--window", type=float, default=20.0, help="measurement seconds (default: 20)")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds from the last launch to the window: joining and settling (default: 10)")
    ap.add_argument("--rounds", type=int, default=3, help="(none, gossip) pairs (default: 3)")
    ap.add_argument("--gossip-every", type=int, default=1, help="peers' --gossip-every (default: 1)")
    ap.add_argument("--batch", type=int, default=64, help="peers' --batch (default: 64)")
    ap.add_argument("--seed", type=int, default=0, help="peers' --seed (default: 0)")
    ap.add_argument("--log-every", type=float, default=1.0,
                    help="peers' --log-every in seconds (default: 1)")
    ap.add_argument("--peer-command", metavar="CMD",
                    help="run each peer as CMD with hearsay peer's flags after it (a PyTorch script of the "
                         "hearsay module, e.g. \"/usr/bin/python3 examples/torch/lenet_fmnist.py\"; its "
                         "PYTHONPATH must reach the module): what hearsay's mixing costs such a script")
    ap.add_argument("--peer-arg", action="append", default=[],
                    help="extra flag passed to every peer, e.g. --peer-arg=--compress=bf16 (repeatable)")
    ap.add_argument("--threshold", type=float, default=0.90, help="required ratio (default: 0.90)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--keep", action="store_true", help="keep the metrics/logs directory")
    a = ap.parse_args()

    if not os.access(a.binary, os.X_OK):
        sys.exit(f"no hearsay binary at {a.binary} (build it or pass --binary)")
    cpus, cpu_text = pinned_cpus(a.cpus)

    workdir = tempfile.mkdtemp(prefix="hearsay-peer-bench-")
    who = f"'{a.peer_command}'" if a.peer_command else "hearsay"
    data_label = "the script's own" if a.peer_command and a.data == "synthetic" else a.data
    print(f"{a.peers} LeNet peers ({who}), batch {a.batch}, cpus {cpu_text}, warm-up {a.warmup:g} s, "
          f"window {a.window:g} s, data {data_label}; load average {os.getloadavg()[0]:.2f}; "
          f"logs in {workdir}")
    print("cpu: busy share of the pinned CPUs during the window, peers/others (others > ~5% "
          "means the shared machine disturbed that run); ratio: gossip / that round's none")
    print(f"{'round':>5} {'algo':>6} {'samples/s':>10} {'ratio':>6} {'xchg/peer/s':>11} "
          f"{'min live':>8} {'warns':>5} {'cpu':>9}  per-peer samples/s")
    runs = []
    try:
        for r in range(a.rounds):
            for algo in ("none", "gossip"):
                res = run_once(a, algo, cpus, workdir, f"r{r}-{algo}")
                res["round"] = r
                if algo == "gossip" and runs[-1]["samples_per_s"] > 0:
                    res["round_ratio"] = res["samples_per_s"] / runs[-1]["samples_per_s"]
                runs.append(res)
                rr = f"{res['round_ratio']:.3f}" if "round_ratio" in res else ""
                cpu = f"{res['cpu_peers']:.0%}/{res['cpu_others']:.0%}"
                print(f"{r:>5} {algo:>6} {res['samples_per_s']:>10.1f} {rr:>6} "
                      f"{res['exchanges_per_peer_s']:>11.2f} {str(res['min_live_members']):>8} "
                      f"{res['warn_lines']:>5} {cpu:>9}  {res['peers']}", flush=True)
    except PeerFailure as e:
        print(f"error: {e}; logs kept in {workdir}", file=sys.stderr)
        sys.exit(1)

    med = {algo: statistics.median(x["samples_per_s"] for x in runs if x["algo"] == algo)
           for algo in ("none", "gossip")}
    xchg = statistics.median(x["exchanges_per_peer_s"] for x in runs if x["algo"] == "gossip")
    ratio = med["gossip"] / med["none"] if med["none"] > 0 else 0.0
    ok = ratio >= a.threshold
    print(f"median samples/s: none {med['none']:.1f}, gossip {med['gossip']:.1f}; "
          f"ratio gossip/none {ratio:.3f} ({'meets' if ok else 'misses'} {a.threshold:.2f}); "
          f"gossip exchanges/peer/s {xchg:.2f}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"peers": a.peers, "peer_command": a.peer_command, "cpus": cpu_text, "batch": a.batch, "data": a.data,
                       "window_s": a.window, "warmup_s": a.warmup, "gossip_every": a.gossip_every,
                       "peer_args": a.peer_arg, "runs": runs, "median_samples_per_s": med,
                       "median_exchanges_per_peer_s": xchg, "ratio": ratio,
                       "threshold": a.threshold, "meets": ok}, f, indent=2)
    if not a.keep:
        for name in os.listdir(workdir):
            os.remove(os.path.join(workdir, name))
        os.rmdir(workdir)


if __name__ == "__main__":
    main()
