#!/usr/bin/env python3
"""bench/rank.py, the ranking of sweeps over seeds and across peer counts.

(a) Summaries written here, with known orders: an algorithm ahead on every seed is ordered,
    one that changes places with another between seeds ties with it, a diverged run is
    behind every run that ended ok on its seed, and one seed orders nothing. Across peer
    counts a pair ordered both ways is reversed ("not the same ranking"); a pair ordered at
    one scale and tied at the other is listed apart and reverses nothing. Gossip's runs
    (topology "random") join every graph of their size, and --best-kind keeps each
    algorithm's better momentum kind.
(b) Bad input: no summary, a file that is not a summary, a directory that does not exist:
    each a one-line error naming it, exit status not 0, no traceback.
(c) A real `hearsay sim` sweep (virtual engine, 4 MLP peers, two seeds): rank.py reads its
    summary, and both algorithms are ranked over both seeds.

  rank_test.py --binary build/bin/hearsay
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RANK = os.path.join(os.path.dirname(HERE), "bench", "rank.py")
sys.path.insert(0, HERE)
from script_checks import Checks  # noqa: E402

check = Checks("rank")


def write_sweep(root, name, peers, graph, results, kind="local", nesterov=False):
    """results: {algo: [(seed, status, accuracy), ...]}; gossip's topology is "random"."""
    runs = []
    for algo, seeds in results.items():
        for seed, status, acc in seeds:
            runs.append({"algo": algo, "topology": "random" if algo == "gossip" else graph, "peers": peers,
                         "seed": seed, "status": status, "final_acc_avg_model": acc,
                         "peer_settings": {"nesterov": nesterov, "compress": "f32"}})
    os.makedirs(os.path.join(root, name))
    with open(os.path.join(root, name, "summary.json"), "w") as f:
        json.dump({"partition": "dirichlet:0.1", "graph": graph, "momentum_kind": kind, "compress": "f32",
                   "runs": runs}, f)


def rank(*args):
    done = subprocess.run([sys.executable, RANK, *args], capture_output=True, text=True, timeout=60)
    print(done.stdout, done.stderr, sep="\n", flush=True)
    return done


def known_orders(tmp):
    ok = "ok"
    # 8 peers: relaysgd and gossip change places between seeds (a tie), as do d2 and dpsgd;
    # relaysgd is ahead of d2 on both; tracking diverged on seed 2, behind everyone there.
    write_sweep(tmp, "s8", 8, "ring", {
        "relaysgd": [(1, ok, 0.87), (2, ok, 0.86)],
        "gossip": [(1, ok, 0.86), (2, ok, 0.865)],
        "d2": [(1, ok, 0.85), (2, ok, 0.84)],
        "dpsgd": [(1, ok, 0.84), (2, ok, 0.845)],
        "tracking": [(1, ok, 0.80), (2, "diverged: NaN", 0.50)],
    })
    # 64 peers: d2 ahead of relaysgd on both seeds (reversed); gossip ahead of relaysgd and
    # d2 ahead of dpsgd on both (tied at 8: not reversals); sgp only here, on one seed.
    write_sweep(tmp, "s64", 64, "ring", {
        "relaysgd": [(1, ok, 0.82), (2, ok, 0.83)],
        "gossip": [(1, ok, 0.87), (2, ok, 0.865)],
        "d2": [(1, ok, 0.86), (2, ok, 0.85)],
        "dpsgd": [(1, ok, 0.85), (2, ok, 0.82)],
        "tracking": [(1, ok, 0.81), (2, ok, 0.80)],
        "sgp": [(1, ok, 0.95)],
    })
    done = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s64"))
    out = done.stdout
    check("it ranks and exits 0", done.returncode == 0, done.stderr)
    check("the verdict across sizes: one pair reversed",
          "ring, dirichlet:0.1, 8 against 64 peers (5 algorithms in both): not the same ranking: 1 pair reversed"
          in out, out)
    reversed_ = [line for line in out.splitlines() if line.startswith("- reversed: ")]
    check("the reversed pair is d2 against relaysgd",
          reversed_ == ["- reversed: d2 < relaysgd at 8 peers, > at 64"], out)
    check("a pair tied at 8 and ordered at 64 is listed apart, not reversed",
          "- ordered at one scale only: gossip = relaysgd at 8 peers, > at 64" in out
          and "- ordered at one scale only: d2 = dpsgd at 8 peers, > at 64" in out, out)
    check("a diverged run is behind every run ok on its seed, and its row says so",
          "| 5 | tracking | 0.8000 | diverged (0.5000) | 0.4000 |  |" in out
          and "- ordered at one scale only" not in "".join(line for line in out.splitlines() if "tracking" in line), out)
    check("one seed orders nothing: sgp ties with its neighbour", "| 1 | sgp | 0.9500 |  | 0.9500 | tie |" in out, out)
    check("the 8-peer table lists by mean and marks ties and orders",
          "| 1 | relaysgd | 0.8700 | 0.8600 | 0.8650 | tie |" in out
          and "| 2 | gossip | 0.8600 | 0.8650 | 0.8625 | > on every seed |" in out, out)
    done = rank(os.path.join(tmp, "s8"))
    check("one size alone is ranked, with nothing to compare", done.returncode == 0 and "against" not in done.stdout,
          done.stdout)

    # --best-kind: dpsgd with quasi-global momentum beats its local runs at 8 peers.
    write_sweep(tmp, "s8qg", 8, "ring", {"dpsgd": [(1, ok, 0.86), (2, ok, 0.865)]}, kind="quasi-global")
    out = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s8qg"), "--best-kind").stdout
    check("--best-kind keeps dpsgd's better kind and names it",
          "| dpsgd (quasi-global) | 0.8600 | 0.8650 | 0.8625 |" in out and "| dpsgd | 0.8400" not in out, out)
    out = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s8qg")).stdout
    check("without it both kinds are ranked", "dpsgd (quasi-global)" in out and "| dpsgd | 0.8400" in out, out)

    # --nesterov, as rank 0 trained with it (peer_settings), names a variant of its own.
    write_sweep(tmp, "s8nest", 8, "ring", {"relaysgd": [(1, ok, 0.88), (2, ok, 0.87)]}, nesterov=True)
    out = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s8nest")).stdout
    check("a run with --nesterov is its own variant", "| 1 | relaysgd (nesterov) | 0.8800 | 0.8700 |" in out
          and "| relaysgd | 0.8700 | 0.8600 |" in out, out)
    out = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s8nest"), "--best-kind").stdout
    check("--best-kind takes it over the heavy-ball runs", "relaysgd (nesterov)" in out
          and "| relaysgd | 0.8700" not in out, out)

    # Gossip (random partners) joins an exp sweep of its size as well.
    write_sweep(tmp, "s8exp", 8, "exp", {"dpsgd": [(1, ok, 0.83), (2, ok, 0.83)]})
    out = rank(os.path.join(tmp, "s8"), os.path.join(tmp, "s8exp")).stdout
    exp_table = out.split("8 peers, exp, dirichlet:0.1")[-1].split("peers, ")[0]
    check("gossip's runs join the exp graph's table", "| gossip | 0.8600 | 0.8650 |" in exp_table, out)


def bad_input(tmp):
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    junk = os.path.join(tmp, "junk")
    os.makedirs(junk)
    with open(os.path.join(junk, "summary.json"), "w") as f:
        f.write("{not json")
    for args, says in (([empty], "no summary.json under"), ([junk], "is not a hearsay sim summary"),
                       ([os.path.join(tmp, "nowhere")], "is not a directory")):
        done = rank(*args)
        check(f"bad input {os.path.basename(args[0])}: {says}",
              done.returncode != 0 and says in done.stderr and "Traceback" not in done.stderr, done.stderr)


def real_sweep(tmp, binary):
    out = os.path.join(tmp, "real")
    cmd = [binary, "sim", "--engine", "virtual", "--peers", "4", "--model", "mlp", "--data", "synthetic",
           "--epochs", "1", "--algo", "dpsgd,gossip", "--graph", "ring", "--partition", "dirichlet:0.5",
           "--repeat", "2", "--out", out, "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check("hearsay sim ran", done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:])
    result = rank(out)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "rank" not in line]
    check("both algorithms are ranked over both seeds, in the ring's table of dirichlet:0.5",
          "4 peers, ring, dirichlet:0.5" in result.stdout and len(rows) == 2
          and all(line.count("0.") >= 3 for line in rows), result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        known_orders(tmp)
        bad_input(tmp)
        real_sweep(tmp, args.binary)
    sys.exit(check.exit_status())


if __name__ == "__main__":
    main()
