#!/usr/bin/env python3
"""Accuracy of N `hearsay peer` processes trained to the end under different peer flags,
side by side: for each seed, every variant runs in turn on the same data, shards and seed.

It answers "what does this flag cost in accuracy, and what does it save in time?", for
instance gossip's default (a round at every step) against --skip-when-served (a peer that a
partner averaged with since its last round skips its own), which is the default comparison.

Each run starts N peers on loopback, all pinned to --cpus (default: the first 2 CPUs this
process may use), with --rank i --world N (so peer i trains on shard i of the training set),
--model lenet and the given --epochs, --batch, --lr, --momentum and --seed; peer 0 is the
seed, the others --join it. The run ends when every peer has exited (each evaluates its own
model on the test set at every epoch end). Per run it reports the wall time from the first
start to the last exit, the mean and the lowest per-peer test accuracy after each epoch,
exchanges per peer per step, and the mean distance to partners (||x_self - x_partner||
before each exchange, as the peers log it).

Example:
  bench/peer_accuracy.py --seeds 1,2 --epochs 1
  bench/peer_accuracy.py --variant every-step= --variant every-2nd=--gossip-every=2
"""
import argparse, glob, json, os, shlex, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_throughput import DEFAULT_BIN, free_ports, pinned_cpus, tail, wait_ready  # noqa: E402

DEFAULT_VARIANTS = ["default=", "skip=--skip-when-served"]


def read_records(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def run_once(a, name, extra, seed, cpus, workdir):
    tag = f"{name}-s{seed}"
    ports = free_ports(a.peers)
    seed_addr = None
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    procs, files = [], []
    start = time.monotonic()
    try:
        for i, port in enumerate(ports):
            metrics = os.path.join(workdir, f"{tag}-p{i}.jsonl")
            errp = os.path.join(workdir, f"{tag}-p{i}.err")
            ready = os.path.join(workdir, f"{tag}-p{i}.ready")
            cmd = [a.binary, "peer", "--listen", f"tcp://127.0.0.1:{port}", "--insecure",
                   "--ready-file", ready,
                   "--rank", str(i), "--world", str(a.peers), "--algo", a.algo,
                   "--data", a.data, "--model", "lenet", "--batch", str(a.batch),
                   "--lr", str(a.lr), "--momentum", str(a.momentum), "--threads", "1",
                   "--seed", str(seed), "--epochs", str(a.epochs), "--log-every", "1",
                   "--run", f"acc-{os.getpid()}-{tag}", "--metrics", metrics]
            cmd += ([] if i == 0 else ["--join", seed_addr]) + extra
            with open(errp, "w") as err:
                procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err,
                                              stderr=err, preexec_fn=preexec))
            files.append((metrics, errp))
            if i == 0:  # the seed listens before the others join it, at the address it says
                seed_addr = wait_ready(ready, procs[0], f"peer 0 ({tag})", errp)["address"]
        deadline = start + a.timeout
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        late = [i for i, p in enumerate(procs) if p.poll() is None]
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.monotonic() - start
    failed = [f"peer {i} still running after {a.timeout:g} s; killed" for i in late]
    failed += [f"peer {i} exited with status {p.returncode}" for i, p in enumerate(procs)
               if i not in late and p.returncode != 0]
    if failed:
        for msg in failed:
            print(f"FAIL ({tag}): {msg}", file=sys.stderr)
        print(f"--- stderr tail of peer 0 ({files[0][1]}):\n{tail(files[0][1])}", file=sys.stderr)
        raise RuntimeError(f"run {tag} failed; logs in {workdir}")

    per_epoch, xchg_per_step, dist_sum, dist_n = {}, [], 0.0, 0
    for metrics, _ in files:
        recs = read_records(metrics)
        last = None
        for r in recs:
            if r.get("type") == "epoch":
                per_epoch.setdefault(r["epoch"], []).append(r["test_acc"])
            elif r.get("type") == "metrics":
                last = r
                n = r.get("exchanges_in_interval", 0)
                if n and r.get("partner_distance") is not None:
                    dist_sum += r["partner_distance"] * n
                    dist_n += n
        if last and last.get("step"):
            xchg_per_step.append(last.get("exchanges_ok", 0) / last["step"])
    epochs = [{"epoch": e, "mean_acc": statistics.mean(v), "min_acc": min(v), "peers": len(v)}
              for e, v in sorted(per_epoch.items())]
    if not epochs or epochs[-1]["peers"] != a.peers:
        raise RuntimeError(f"run {tag}: not every peer logged its last epoch; logs in {workdir}")
    return {"variant": name, "seed": seed, "wall_s": wall, "epochs": epochs,
            "final_mean_acc": epochs[-1]["mean_acc"], "final_min_acc": epochs[-1]["min_acc"],
            "exchanges_per_peer_step": statistics.mean(xchg_per_step) if xchg_per_step else 0.0,
            "partner_distance": dist_sum / dist_n if dist_n else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=DEFAULT_BIN, help="hearsay binary (default: %(default)s)")
    ap.add_argument("--peers", type=int, default=8, help="peers per run (default: 8)")
    ap.add_argument("--cpus", default=None,
                    help="comma-separated CPUs to pin the peers to, or 'all' (default: the first 2)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                    help="--data of the peers (default: %(default)s)")
    ap.add_argument("--algo", default="gossip", help="--algo of the peers (default: gossip)")
    ap.add_argument("--epochs", type=int, default=3, help="peers' --epochs (default: 3)")
    ap.add_argument("--batch", type=int, default=32, help="peers' --batch (default: 32)")
    ap.add_argument("--lr", type=float, default=0.1, help="peers' --lr (default: 0.1)")
    ap.add_argument("--momentum", type=float, default=0.9, help="peers' --momentum (default: 0.9)")
    ap.add_argument("--seeds", default="1,2,3,4", help="comma-separated seeds (default: 1,2,3,4)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="a named set of extra peer flags, e.g. skip=--skip-when-served "
                         "(repeatable; default: " + " and ".join(DEFAULT_VARIANTS) + ")")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds one run may take before its peers are killed (default: 900)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--keep", action="store_true", help="keep the metrics/logs directory")
    a = ap.parse_args()

    if not os.access(a.binary, os.X_OK):
        sys.exit(f"no hearsay binary at {a.binary} (build it or pass --binary)")
    variants = []
    for v in a.variant or DEFAULT_VARIANTS:
        name, sep, args = v.partition("=")
        if not sep or not name:
            sys.exit(f"--variant {v!r}: expected NAME=ARGS (ARGS may be empty)")
        variants.append((name, shlex.split(args)))
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        sys.exit(f"--seeds {a.seeds!r}: expected comma-separated integers")
    cpus, cpu_text = pinned_cpus(a.cpus)

    workdir = tempfile.mkdtemp(prefix="hearsay-accuracy-bench-")
    print(f"{a.peers} LeNet peers, --algo {a.algo}, {a.epochs} epochs, batch {a.batch}, lr {a.lr:g}, "
          f"momentum {a.momentum:g}, cpus {cpu_text}, data {a.data}; logs in {workdir}")
    print("acc: test accuracy after each epoch, mean over peers (lowest peer); "
          "xchg/step: exchanges per peer per step")
    print(f"{'seed':>4} {'variant':>10} {'wall s':>7} {'xchg/step':>9} {'distance':>8}  acc by epoch")
    runs = []
    try:
        for seed in seeds:
            for name, extra in variants:
                r = run_once(a, name, extra, seed, cpus, workdir)
                runs.append(r)
                accs = "  ".join(f"{e['mean_acc']:.4f} ({e['min_acc']:.4f})" for e in r["epochs"])
                dist = f"{r['partner_distance']:.4f}" if r["partner_distance"] is not None else "-"
                print(f"{seed:>4} {name:>10} {r['wall_s']:>7.1f} {r['exchanges_per_peer_step']:>9.2f} "
                      f"{dist:>8}  {accs}", flush=True)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)

    summary = {}
    base = variants[0][0]
    for name, _ in variants:
        mine = [r for r in runs if r["variant"] == name]
        by_seed = {r["seed"]: r for r in runs if r["variant"] == base}
        summary[name] = {
            "median_final_mean_acc": statistics.median(r["final_mean_acc"] for r in mine),
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
            "median_acc_minus_" + base: statistics.median(
                r["final_mean_acc"] - by_seed[r["seed"]]["final_mean_acc"] for r in mine),
            "median_wall_ratio_to_" + base: statistics.median(
                r["wall_s"] / by_seed[r["seed"]]["wall_s"] for r in mine),
        }
        s = summary[name]
        print(f"{name}: median final accuracy {s['median_final_mean_acc']:.4f}, median wall "
              f"{s['median_wall_s']:.1f} s; against {base} (same seed): accuracy "
              f"{s['median_acc_minus_' + base]:+.4f}, wall x{s['median_wall_ratio_to_' + base]:.3f}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"peers": a.peers, "cpus": cpu_text, "algo": a.algo, "epochs": a.epochs,
                       "batch": a.batch, "lr": a.lr, "momentum": a.momentum, "data": a.data,
                       "variants": {n: e for n, e in variants}, "runs": runs, "summary": summary},
                      f, indent=2)
    if not a.keep:
        for path in glob.glob(os.path.join(workdir, "*")):
            os.remove(path)
        os.rmdir(workdir)


if __name__ == "__main__":
    main()
