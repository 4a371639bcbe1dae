#!/usr/bin/env python3
"""The `hearsay` Python module: a PyTorch script as a hearsay peer (python/, peer/external_peer.hpp).

(a) Consensus. Two processes, one per rank, each run a peer of three runs in turn
    (--algo none, the baseline; gossip; dpsgd) that trains the same small MLP (one init
    seed) on its own random data; they run while this process checks (b). The distance between the two peers' flat parameters at the end must be far
    below the baseline's: the algorithm mixed the tensors the optimizer trains, in place.
(b) Bad use. A float64 parameter: TypeError naming it. A step after close: RuntimeError
    saying the peer is closed. algo="nope": ValueError with `hearsay peer`'s own message
    (the same parser). A model of other shapes joining a run: RuntimeError at attach,
    from the seed's refusal.

Runs Debian's python3-torch (/usr/bin/python3) and the module from the build tree; skips
(exit 77, "SKIPPED: reason") when either is missing.

  python_peer_test.py --module-dir build/python [--binary build/bin/hearsay]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from script_checks import Checks, free_ports  # noqa: E402

STEPS = 60
check = Checks("python peer")


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(77)


def make_model(torch, hidden=32):
    torch.manual_seed(0)  # every peer starts from the same parameters
    return torch.nn.Sequential(torch.nn.Linear(20, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


ALGOS = ("none", "gossip", "dpsgd")  # none: the baseline, no mixing


def train_one_peer(hearsay, torch, args, algo, port):
    """One peer of a run of algo: trains STEPS steps on its own data, saves its parameters."""
    model = make_model(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    settings = dict(rank=args.rank, world=2, listen=f"tcp://127.0.0.1:{port + args.rank}", algo=algo,
                    insecure=True, run=f"python-{algo}", join_timeout="60s")
    if args.rank > 0:
        settings["join"] = [f"tcp://127.0.0.1:{port}"]
    if algo != "dpsgd":
        settings["min_peers"] = 2  # start together (dpsgd waits for every rank itself)
    data = torch.Generator().manual_seed(100 + args.rank)  # each peer its own data
    x = torch.randn(512, 20, generator=data)
    y = torch.randint(0, 10, (512,), generator=data)
    out = os.path.join(args.out, f"{algo}-{args.rank}.pt")
    with hearsay.Peer(**settings) as peer:
        mixer = hearsay.torch.attach(peer, model, optimizer)
        for _ in range(STEPS):
            batch = torch.randint(0, 512, (32,), generator=data)
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mixer.step()
        # Both peers stay until both have trained: the one that ends first keeps answering
        # its partner's rounds (the mixer's thread) instead of leaving it to train alone,
        # and close() applies what they mixed meanwhile.
        open(f"{out}.trained", "w").close()
        partner = os.path.join(args.out, f"{algo}-{1 - args.rank}.pt.trained")
        deadline = time.monotonic() + 120
        while not os.path.exists(partner) and time.monotonic() < deadline:
            time.sleep(0.01)
        peer.close()
        totals = peer.totals()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    # The parameters are views of the buffer hearsay mixed: the same values.
    assert torch.equal(flat, mixer.flat), "the parameters are not views of the mixed buffer"
    torch.save({"flat": flat, "exchanges": totals["exchanges_ok"]}, out)


def worker(args):
    """One rank's process: a peer of each run of ALGOS in turn (torch imported once)."""
    import hearsay
    import hearsay.torch
    import torch

    torch.set_num_threads(1)
    for i, algo in enumerate(ALGOS):
        train_one_peer(hearsay, torch, args, algo, args.port + 2 * i)


def start_workers(tmp):
    port = free_ports(2 * len(ALGOS))
    return [subprocess.Popen([sys.executable, __file__, "--worker", "--rank", str(rank), "--port", str(port),
                              "--out", tmp, "--module-dir", ARGS.module_dir]) for rank in range(2)]


def consensus_checks(workers, tmp):
    """The two ranks' parameters at the end of each run: mixed far closer than unmixed."""
    import torch

    codes = [p.wait(timeout=300) for p in workers]
    check("both ranks' processes ended cleanly", codes == [0, 0], f"exit codes {codes}")
    if codes != [0, 0]:
        return
    distance, exchanges = {}, {}
    for algo in ALGOS:
        a, b = (torch.load(os.path.join(tmp, f"{algo}-{rank}.pt")) for rank in range(2))
        distance[algo] = float((a["flat"] - b["flat"]).norm())
        exchanges[algo] = min(a["exchanges"], b["exchanges"])
        print(f"distance with {algo}: {distance[algo]:.3g} ({exchanges[algo]} exchanges)", flush=True)
    baseline = distance["none"]
    for algo in ALGOS[1:]:
        check(f"{algo}: the peers exchanged", exchanges[algo] > 0, f"{exchanges[algo]} exchanges")
        check(f"{algo}: the peers' parameters are close (under a fifth of the unmixed distance)",
              distance[algo] < 0.2 * baseline, f"{distance[algo]} with {algo}, {baseline} without mixing")


def expect(what, error_type, call, *words):
    try:
        call()
    except error_type as e:
        message = str(e)
        check(what, all(w in message for w in words), f"the message '{message}' lacks one of {words}")
        return message
    except Exception as e:  # noqa: BLE001: the wrong kind is the failure reported
        check(what, False, f"{type(e).__name__}: {e}")
        return None
    check(what, False, f"no {error_type.__name__}")
    return None


def bad_use_checks():
    import hearsay
    import hearsay.torch
    import torch

    port = free_ports(3)

    def float64():
        model = make_model(torch).double()
        hearsay.torch.attach(hearsay.Peer(listen=f"tcp://127.0.0.1:{port}", insecure=True), model)

    expect("a float64 parameter: TypeError naming it", TypeError, float64, "'0.weight'", "float64")

    def step_after_close():
        peer = hearsay.Peer(listen=f"tcp://127.0.0.1:{port}", insecure=True, algo="none")
        mixer = hearsay.torch.attach(peer, make_model(torch))
        mixer.step()
        peer.close()
        mixer.step()

    expect("a step after close: RuntimeError saying so", RuntimeError, step_after_close, "closed")

    message = expect("algo='nope': ValueError", ValueError,
                     lambda: hearsay.Peer(listen=f"tcp://127.0.0.1:{port}", insecure=True, algo="nope"),
                     "--algo", "nope")
    if message and ARGS.binary and os.path.exists(ARGS.binary):
        cli = subprocess.run([ARGS.binary, "peer", "--listen", f"tcp://127.0.0.1:{port}", "--insecure",
                              "--algo", "nope"], capture_output=True, text=True, timeout=60)
        check("algo='nope': the message is hearsay peer's own", message in cli.stderr,
              f"module: {message!r}; hearsay peer: {cli.stderr!r}")
    expect("an unknown setting: ValueError naming it", ValueError,
           lambda: hearsay.Peer(listen=f"tcp://127.0.0.1:{port}", insecure=True, no_such_setting=1),
           "--no-such-setting")

    def other_model():
        with hearsay.Peer(listen=f"tcp://127.0.0.1:{port + 1}", insecure=True, algo="none",
                          run="shapes") as first:
            hearsay.torch.attach(first, make_model(torch))
            joiner = hearsay.Peer(listen=f"tcp://127.0.0.1:{port + 2}", insecure=True, algo="none",
                                  run="shapes", join=[f"tcp://127.0.0.1:{port + 1}"], join_timeout="20s")
            hearsay.torch.attach(joiner, make_model(torch, hidden=33))

    expect("another model joining: RuntimeError at attach", RuntimeError, other_model, "same model")


def settings_checks():
    """What a script reads of its flags: before there is a peer, and the peer's own."""
    import hearsay
    import hearsay.torch
    import torch

    words = ["--listen", "tcp://127.0.0.1:*", "--rank", "2", "--world", "4", "--insecure", "--data",
             "/some dir", "--lr", "0.3", "--partition", "dirichlet:0.5"]
    s = hearsay.command_line_settings(words)
    check("command_line_settings: the flags' values", (s["rank"], s["world"], s["data"], s["partition"]) ==
          (2, 4, "/some dir", "dirichlet:0.5") and abs(s["lr"] - 0.3) < 1e-6, repr(s))
    check("command_line_settings: no data_seed without a peer", "data_seed" not in s, repr(s))
    try:
        hearsay.command_line_settings(words + ["--algo", "nope"])
        check("command_line_settings: a bad flag exits 2", False, "it returned")
    except SystemExit as e:
        check("command_line_settings: a bad flag exits 2", e.code == 2, f"exit {e.code}")

    port = free_ports(2)
    seeds = []
    for rank in (0, 1):
        peer = hearsay.Peer(listen=f"tcp://127.0.0.1:{port + rank}", insecure=True, algo="none", rank=rank,
                            world=2, seed=5)
        seeds.append(peer.settings["data_seed"])
        peer.close()
    check("peer.settings: each peer's data_seed is its own", isinstance(seeds[0], int) and seeds[0] != seeds[1],
          repr(seeds))

    labels = torch.arange(100) % 10
    check("shard: a tensor of labels gives the list's shard",
          hearsay.shard(labels, 1, 3, "iid", 7) == hearsay.shard(labels.tolist(), 1, 3, "iid", 7))
    check("torch.device('auto') is where torch can train",
          hearsay.torch.device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu"))
    if not torch.cuda.is_available():
        expect("--device cuda without a GPU: RuntimeError saying so", RuntimeError,
               lambda: hearsay.torch.device("cuda"), "--device cuda", "no GPU")


def main():
    if not os.path.exists(os.path.join(ARGS.module_dir, "hearsay")):
        skip(f"no hearsay module in {ARGS.module_dir} (pybind11-dev missing when it was configured?)")
    try:
        import hearsay  # noqa: F401
    except ImportError as e:
        skip(f"the hearsay module does not import: {e}")
    try:
        import torch  # noqa: F401
    except ImportError:
        skip(f"no torch for {sys.executable} (Debian's python3-torch: scripts/setup)")
    with tempfile.TemporaryDirectory() as tmp:
        workers = start_workers(tmp)  # the runs go on while this process checks bad use
        try:
            bad_use_checks()
            settings_checks()
        finally:
            consensus_checks(workers, tmp)
    return check.exit_status()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--module-dir", required=True, help="build/python: where the hearsay package is")
    parser.add_argument("--binary", help="build/bin/hearsay: its messages are compared")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--out")
    ARGS = parser.parse_args()
    sys.path.insert(0, os.path.abspath(ARGS.module_dir))
    if ARGS.worker:
        worker(ARGS)
        sys.exit(0)
    sys.exit(main())
