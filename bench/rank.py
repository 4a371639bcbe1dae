#!/usr/bin/env python3
"""Ranks the algorithms of `hearsay sim` sweeps over their seeds, and says whether two
scales (peer counts) rank them alike.

Reads every summary.json under the directories given (one sweep per --out; run the same
sweep with --seed S, or --repeat R, for seeds). Runs are grouped by partition, graph and
peer count; gossip's random partners ignore --graph, so its runs join every graph's group
of their peer count (as do all-reduce's, on its own ring). An algorithm is named with what
changes its training: `dpsgd`, `dpsgd (quasi-global)`, `relaysgd (nesterov)`, `gossip [int4]`.

Two algorithms are ordered only where one ends ahead on every seed they share (two seeds
at least); otherwise they tie, since the seeds of one algorithm differ by more than many
algorithms do (docs/PERFORMANCE.md). A run that did not end ok (diverged, failed) is behind
every run that did on its seed, and shows its status (with the last accuracy measured, if
any). The table lists each group by mean accuracy (a run not ok counts 0 in the mean) and
marks each row `>` when it is ahead of the next on every seed.

Across peer counts (same partition and graph) a pair ordered one way at one scale and the
other way at the other is reversed: the ranking is not the same. A pair ordered at one and
tied at the other is not a reversal, and is listed apart.

  bench/rank.py out/noniid8-s1 out/noniid8-s2 out/noniid64-s1 out/noniid64-s2 [--best-kind]

--best-kind keeps, for each algorithm and group, only its best-scoring variant (by mean),
and then compares algorithms across scales by name, as the tables in docs/PERFORMANCE.md
do ("each algorithm in its better momentum kind").
"""
import argparse
import collections
import itertools
import json
import os
import sys

# One run's outcome: ok (it ended ok with the metric measured), the metric (0 where not
# measured), its status's first word, and whether the metric was measured.
Result = collections.namedtuple("Result", "ok value status measured")


def label_of(summary, run):
    settings = run.get("peer_settings") or {}  # what rank 0 trained with
    name = run["algo"]
    if summary.get("momentum_kind", "local") != "local":
        name += f" ({summary['momentum_kind']})"
    if settings.get("nesterov"):
        name += " (nesterov)"
    compress = settings.get("compress", summary.get("compress", "f32"))
    if compress not in ("f32", ""):
        name += f" [{compress}]"
    return name


def load(dirs, metric):
    """{(partition, graph, peers): {label: {seed: Result}}}."""
    groups = collections.defaultdict(lambda: collections.defaultdict(dict))
    free = collections.defaultdict(lambda: collections.defaultdict(dict))  # (partition, peers): ...
    found = 0
    for top in dirs:
        if not os.path.isdir(top):
            sys.exit(f"rank.py: {top} is not a directory (give the --out directories of hearsay sim)")
        for root, _, files in sorted(os.walk(top)):
            if "summary.json" not in files:
                continue
            path = os.path.join(root, "summary.json")
            try:
                with open(path) as f:
                    summary = json.load(f)
                runs = summary["runs"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                sys.exit(f"rank.py: {path} is not a hearsay sim summary ({e})")
            for run in runs:
                try:
                    partition, peers, topology = summary.get("partition", "?"), int(run["peers"]), run["topology"]
                    seed, ok, value = int(run["seed"]), run["status"] == "ok", run.get(metric)
                except (KeyError, TypeError, ValueError) as e:
                    sys.exit(f"rank.py: a run in {path} lacks {e}: is it from an older hearsay sim?")
                # A run whose algorithm ignores --graph (gossip's random partners, all-reduce's
                # own ring) belongs to every graph's group.
                graph = summary.get("graph", topology)
                target = free[(partition, peers)] if topology == "random" or topology != graph else \
                    groups[(partition, graph, peers)]
                label = label_of(summary, run)
                if seed in target[label]:
                    print(f"rank.py: {label} seed {seed} ({partition}, {peers} peers) appears twice; keeping {path}",
                          file=sys.stderr)
                target[label][seed] = Result(ok and value is not None, float(value or 0),
                                             str(run["status"]).split(":")[0], value is not None)
                found += 1
    if not found:
        sys.exit(f"rank.py: no summary.json under {' '.join(dirs)}")
    for (partition, peers), pool in free.items():
        keys = [k for k in groups if (k[0], k[2]) == (partition, peers)] or [(partition, "any graph", peers)]
        for key in keys:
            for label, seeds in pool.items():
                for seed, result in seeds.items():
                    groups[key][label].setdefault(seed, result)
    return groups


def mean(seeds):
    return sum(r.value if r.ok else 0.0 for r in seeds.values()) / len(seeds)


def best_kinds(group):
    """Each algorithm's best-scoring variant, named by the algorithm."""
    best = {}
    for label, seeds in group.items():
        algo = label.split(" ")[0]
        if algo not in best or mean(seeds) > mean(group[best[algo]]):
            best[algo] = label
    return {algo: group[label] for algo, label in best.items()}, best


def seed_order(a, b):
    """+1 when a ends ahead of b, -1 behind, 0 level: a run not ok is behind every run ok."""
    if a.ok != b.ok:
        return 1 if a.ok else -1
    if not a.ok or a.value == b.value:
        return 0
    return 1 if a.value > b.value else -1


def order(a, b):
    """'>' (a ahead on every shared seed, two at least), '<', or '=' (a tie)."""
    shared = sorted(set(a) & set(b))
    signs = {seed_order(a[s], b[s]) for s in shared}
    if len(shared) < 2 or len(signs) != 1 or 0 in signs:
        return "="
    return ">" if signs == {1} else "<"


def table(key, group, chosen):
    partition, topology, peers = key
    seeds = sorted({s for runs in group.values() for s in runs})
    rows = sorted(group, key=lambda name: -mean(group[name]))
    lines = [f"\n{peers} peers, {topology}, {partition}\n",
             "| rank | algorithm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | ahead of the next |",
             "|---|---|" + "---|" * len(seeds) + "---|---|"]
    for i, name in enumerate(rows):
        cells = []
        for s in seeds:
            if s not in group[name]:
                cells.append("")
                continue
            r = group[name][s]
            cells.append(f"{r.value:.4f}" if r.ok else f"{r.status} ({r.value:.4f})" if r.measured else r.status)
        shown = chosen.get(name, name)
        ahead = order(group[name], group[rows[i + 1]]) if i + 1 < len(rows) else ""
        mark = {">": "> on every seed", "=": "tie", "<": "behind on every seed", "": ""}[ahead]
        lines.append(f"| {i + 1} | {shown} | " + " | ".join(cells) + f" | {mean(group[name]):.4f} | {mark} |")
    return "\n".join(lines)


def compare(groups, keys):
    """The pairs two peer counts order oppositely, and those one orders and the other ties."""
    out = []
    by_setting = collections.defaultdict(list)
    for key in keys:
        by_setting[key[:2]].append(key)
    for (partition, topology), sizes in sorted(by_setting.items()):
        for small, large in itertools.combinations(sorted(sizes, key=lambda k: k[2]), 2):
            a, b = groups[small], groups[large]
            names = sorted(set(a) & set(b))
            reversed_, loose = [], []
            for x, y in itertools.combinations(names, 2):
                here, there = order(a[x], a[y]), order(b[x], b[y])
                if "=" not in (here, there) and here != there:
                    reversed_.append(f"{x} {here} {y} at {small[2]} peers, {there} at {large[2]}")
                elif (here == "=") != (there == "="):
                    loose.append(f"{x} {here} {y} at {small[2]} peers, {there} at {large[2]}")
            verdict = "the same ranking" if not reversed_ else \
                f"not the same ranking: {len(reversed_)} pair{'s' if len(reversed_) > 1 else ''} reversed"
            out.append(f"\n{topology}, {partition}, {small[2]} against {large[2]} peers "
                       f"({len(names)} algorithms in both): {verdict}")
            out += [f"- reversed: {line}" for line in reversed_]
            out += [f"- ordered at one scale only: {line}" for line in loose]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", help="--out directories of hearsay sim (searched for summary.json)")
    parser.add_argument("--metric", default="final_acc_avg_model", help="a run's field in summary.json")
    parser.add_argument("--best-kind", action="store_true", help="each algorithm's best variant per group only")
    args = parser.parse_args()
    groups = load(args.dirs, args.metric)
    keys = sorted(groups)
    for key in keys:
        chosen = {}
        if args.best_kind:
            groups[key], chosen = best_kinds(groups[key])
        print(table(key, groups[key], chosen))
    print(compare(groups, keys))


if __name__ == "__main__":
    main()
