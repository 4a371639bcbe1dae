#!/usr/bin/env python3
"""Linear models of two mixing recurrences, for docs/PERFORMANCE.md.

d2      D²'s disagreement modes: along each eigenvalue λ of its lazy W (every peer's own
        weight raised to 0.4, as d2.hpp does) a disagreement follows z² − 2λz + λ = 0. The
        table gives the largest |z| over λ ≠ 1 for the exponential graph as given (directed),
        over its edges both ways, and for the ring. Above 1 the peers drift apart whatever the
        learning rate.

relay   RelaySGD on a quadratic of curvature L: every peer averages all models, each as old
        as its hops on the spanning tree less one (relaysgd.hpp), after a heavy-ball (or
        Nesterov) step of momentum β scaled by s (1, or the tree's κ). It prints the largest
        ηL (on a grid) for which the peers still converge, and all-reduce's (every model
        this round's; heavy ball's bound is 2(1 + β), Nesterov's 2(1 + β) / (1 + 2β)).

relay-step
        RelaySGD's answer to one step: every peer steps by κ (the tree's step correction) in
        one round and never again, and the peers' mean model is printed round by round. It
        ends at 1 (κ's definition); how it gets there says what the delays do to a step.

relay-noise
        Heterogeneous optima and noisy gradients: peer i minimises |x − b_i|² / 2 (b_i and
        the gradient noise N(0, 1), 64 coordinates), heavy-ball momentum, steps η. Over the
        second half of 3000 rounds it prints the mean model's squared distance from the
        optimum (what the averaged-model accuracy measures) and the peers' squared distance
        from their mean (the consensus distance), for all-reduce and for RelaySGD with κ.

Usage: bench/mixing_modes.py d2 | relay | relay-step | relay-noise [--peers 8,64] [--momentum 0.9]
                             [--nesterov]
"""
import argparse
import collections

import numpy as np


def exp_neighbours(n, both_ways):
    offsets = [2**k for k in range(n.bit_length()) if 2**k < n]
    out = [{(i + o) % n for o in offsets} for i in range(n)]
    if both_ways:
        for i in range(n):
            for o in offsets:
                out[(i + o) % n].add(i)
    return [sorted(s - {i}) for i, s in enumerate(out)]


def ring_neighbours(n):
    return [sorted({(i - 1) % n, (i + 1) % n} - {i}) for i in range(n)]


def lazy_uniform(neighbours, floor=0.4):
    n = len(neighbours)
    w = np.zeros((n, n))
    for i, nb in enumerate(neighbours):
        w[i, i] = 1.0 / (len(nb) + 1)
        for j in nb:
            w[i, j] = 1.0 / (len(nb) + 1)
    least = w.diagonal().min()
    c = max(0.0, (floor - least) / (1 - least))
    return (1 - c) * w + c * np.eye(n)


def d2_modulus(w):
    worst = 0.0
    for lam in np.linalg.eigvals(w):
        if abs(lam - 1) < 1e-9:
            continue
        worst = max(worst, np.abs(np.roots([1, -2 * lam, lam])).max())
    return worst


def bfs_tree(neighbours):
    n = len(neighbours)
    tree = [[] for _ in range(n)]
    seen = [False] * n
    seen[0] = True
    queue = collections.deque([0])
    while queue:
        u = queue.popleft()
        for v in neighbours[u]:
            if not seen[v]:
                seen[v] = True
                queue.append(v)
                tree[u].append(v)
                tree[v].append(u)
    return tree


def hops(tree):
    n = len(tree)
    d = np.zeros((n, n), dtype=int)
    for s in range(n):
        seen = [-1] * n
        seen[s] = 0
        queue = collections.deque([s])
        while queue:
            u = queue.popleft()
            for v in tree[u]:
                if seen[v] < 0:
                    seen[v] = seen[u] + 1
                    queue.append(v)
        d[s] = seen
    return d


def ages(d):
    """How old each peer's model is when another mixes it (a tree neighbour's is this
    round's), the rounds of history that needs, and the column index for gathering."""
    age = np.maximum(d - 1, 0)
    return age, age.max() + 1, np.arange(len(d))[None, :]


def relay_converges(d, eta_l, beta, scale, nesterov, rounds=600):
    """Whether the peers' models of a quadratic settle (True) or grow (False)."""
    n = len(d)
    age, history, cols = ages(d)
    x = np.zeros((rounds + history, n))
    step = np.zeros_like(x)
    x[:history] = 1 + np.random.default_rng(0).normal(size=n)
    v = np.zeros(n)
    for t in range(history - 1, rounds + history - 1):
        g = eta_l * x[t]
        v = beta * v + g
        step[t] = -scale * (g + beta * v if nesterov else v)
        x[t + 1] = (x[t - age, cols] + step[t - age, cols]).mean(axis=1)
        if not np.isfinite(x[t + 1]).all() or np.abs(x[t + 1]).max() > 1e6:
            return False
    return np.abs(x[-1]).max() < 10


def trees(sizes):
    """(peers, name, hops between every two peers, κ) for exp's and the ring's BFS trees."""
    for n in sizes:
        for name, graph in (("exp", exp_neighbours(n, True)), ("ring chain", ring_neighbours(n))):
            d = hops(bfs_tree(graph))
            yield n, name, d, 1 / n + d.sum() / n**2


def relay_step_response(d, scale, rounds):
    """The peers' mean model, round by round, after each peer steps by `scale` once."""
    n = len(d)
    age, history, cols = ages(d)
    x = np.zeros((rounds + history, n))
    step = np.zeros_like(x)
    step[history - 1] = scale
    for t in range(history - 1, rounds + history - 1):
        x[t + 1] = (x[t - age, cols] + step[t - age, cols]).mean(axis=1)
    return x[history:].mean(axis=1)


def relay_noise(d, eta, beta, scale, relay, rounds=3000, dims=64):
    """(mean model's squared error, peers' squared spread) over the second half."""
    n = len(d)
    age, history, cols = ages(d)
    rng = np.random.default_rng(0)
    b = rng.normal(size=(n, dims))
    x = np.zeros((rounds + history, n, dims))
    sent = np.zeros_like(x)
    v = np.zeros((n, dims))
    error, spread = [], []
    for t in range(history - 1, rounds + history - 1):
        v = beta * v + (x[t] - b) + rng.normal(size=(n, dims))
        if relay:
            sent[t] = x[t] - scale * eta * v
            x[t + 1] = sent[t - age, cols].mean(axis=1)
        else:
            x[t + 1] = (x[t] - eta * v).mean(axis=0)
        if not np.isfinite(x[t + 1]).all() or np.abs(x[t + 1]).max() > 1e6:
            return float("inf"), float("inf")
        if t >= rounds // 2:
            mean = x[t + 1].mean(axis=0)
            error.append(((mean - b.mean(axis=0)) ** 2).mean())
            spread.append(((x[t + 1] - mean) ** 2).mean())
    return float(np.mean(error)), float(np.mean(spread))


def largest_stable(d, beta, scale, nesterov):
    best = 0.0
    for eta_l in (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.25, 1.5, 2, 3, 3.5):
        if not relay_converges(d, eta_l, beta, scale, nesterov):
            break
        best = eta_l
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["d2", "relay", "relay-step", "relay-noise"])
    parser.add_argument("--peers", default="8,16,32,64", help="comma-separated peer counts")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--nesterov", action="store_true", help="Nesterov momentum (relay)")
    args = parser.parse_args()
    sizes = [int(p) for p in args.peers.split(",")]
    if args.model == "d2":
        print("peers  exp as given  exp both ways  ring")
        for n in sizes:
            row = [d2_modulus(lazy_uniform(g)) for g in
                   (exp_neighbours(n, False), exp_neighbours(n, True), ring_neighbours(n))]
            print(f"{n:5d}  {row[0]:12.3f}  {row[1]:13.3f}  {row[2]:4.3f}")
        return
    if args.model == "relay-step":
        print("peers  tree          κ      mean model after rounds 1-8                  largest (round)  within 2% from")
        for n, name, d, kappa in trees(sizes):
            m = relay_step_response(d, kappa, 400)
            settled = next(t for t in range(len(m)) if np.abs(m[t:] - 1).max() < 0.02) + 1
            first = " ".join(f"{v:.2f}" for v in m[:8])
            print(f"{n:5d}  {name:12s}  {kappa:5.2f}  {first:43s}  {m.max():.2f} ({m.argmax() + 1:3d})"
                  f"       {settled:4d}")
        return
    beta, nesterov = args.momentum, args.nesterov
    if args.model == "relay-noise":
        print(f"heavy-ball momentum {beta}; mean model's error / peers' spread")
        print("peers  tree          κ      η      all-reduce  relaysgd with κ")
        for n, name, d, kappa in trees(sizes):
            for eta in (0.01, 0.03, 0.1):
                alone, _ = relay_noise(d, eta, beta, 1.0, relay=False)
                error, spread = relay_noise(d, eta, beta, kappa, relay=True)
                print(f"{n:5d}  {name:12s}  {kappa:5.2f}  {eta:5.2f}  {alone:10.4f}  {error:.4f} / {spread:.4f}")
        return
    kind = "Nesterov" if nesterov else "heavy-ball"
    alone = largest_stable(np.zeros((2, 2), dtype=int), beta, 1.0, nesterov)
    print(f"{kind} momentum {beta}: all-reduce converges up to ηL = {alone:.2f} on this grid")
    print("peers  tree          κ      hops  ηL stable, s = 1  ηL stable, s = κ")
    for n, name, d, kappa in trees(sizes):
        print(f"{n:5d}  {name:12s}  {kappa:5.2f}  {d.max():4d}  {largest_stable(d, beta, 1.0, nesterov):16.2f}"
              f"  {largest_stable(d, beta, kappa, nesterov):16.2f}")


if __name__ == "__main__":
    main()
