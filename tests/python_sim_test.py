#!/usr/bin/env python3
"""PyTorch peers in a hearsay run: `hearsay sim --peer-command`, and native peers mixing
with a Python one (python/, peer/external_peer.hpp, sim/external_evaluator.hpp).

(a) The simulator runs examples/torch/lenet_fmnist.py as its peers, with a peer killed
    half-way: gossip trains on past it (status ok, the fault fired, the averaged model well
    above chance) and all-reduce fails naming the dead peer, as with native peers. The
    peers' metrics records say they are external, and the module is --model lenet to the
    run (evaluated natively: no evaluator of its own is kept).
(b) The simulator runs examples/torch/lstm_sequences.py, a model hearsay does not know:
    the script evaluates it (its evaluator process answers the simulator), and the
    averaged model learns its task.
(c) The LSTM alone with --checkpoint: its checkpoint holds its own tensors under their
    state_dict names (it loads strictly into the module), and --resume goes on from it.
(d) Two native `hearsay peer --model lenet` and one Python LeNet peer in one all-reduce
    run: the three final checkpoints hold the same parameters (the native checkpoint
    format, written by both), and they moved from where they started.

Runs Debian's python3-torch (/usr/bin/python3) and the module from the build tree; skips
(exit 77, "SKIPPED: reason") when either, or the Fashion-MNIST data, is missing.

  python_sim_test.py --module-dir build/python --binary build/bin/hearsay
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from script_checks import Checks, free_ports  # noqa: E402

check = Checks("python sim")
LENET = os.path.join(ROOT, "examples", "torch", "lenet_fmnist.py")
LSTM = os.path.join(ROOT, "examples", "torch", "lstm_sequences.py")


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(77)


def environment():
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ARGS.module_dir), PYTHONUNBUFFERED="1")
    return env


def sim(out, command, *flags, timeout=900):
    cmd = [ARGS.binary, "sim", "--peer-command", f"/usr/bin/python3 {command}", "--out", out,
           "--no-progress", *flags]
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=timeout)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    summary = os.path.join(out, "summary.json")
    if not os.path.exists(summary):
        check("hearsay sim wrote its summary", False, f"exit {done.returncode}")
        return done, None
    with open(summary) as f:
        return done, {r["algo"]: r for r in json.load(f)["runs"]}


def lenet_under_the_simulator(tmp):
    out = os.path.join(tmp, "lenet")
    done, runs = sim(out, LENET, "--peers", "4", "--algo", "gossip,allreduce", "--epochs", "0.5",
                     "--faults", "kill:3@0.25ep")
    if runs is None:
        return
    check("a run with a failed all-reduce exits 1", done.returncode == 1, f"exit {done.returncode}")
    gossip, allreduce = runs.get("gossip"), runs.get("allreduce")
    check("gossip trains on past the killed peer: status ok", gossip and gossip["status"] == "ok",
          gossip and gossip["status"])
    check("gossip: the kill fired", gossip and all(f["fired"] for f in gossip["faults"]), gossip and gossip["faults"])
    acc = gossip and gossip["final_acc_avg_model"]
    check("gossip: the averaged model learnt (accuracy above 0.6 after half an epoch)", acc and acc > 0.6, acc)
    check("gossip: evaluated along the way", gossip and gossip["evaluations"] >= 3,
          gossip and gossip["evaluations"])
    status = allreduce and allreduce["status"]
    check("all-reduce fails naming the dead peer", status and status.startswith("failed") and "rank3" in status,
          status)
    with open(os.path.join(out, "gossip-0", "peer0.jsonl")) as f:
        start = next(json.loads(line) for line in f if '"type":"start"' in line)
    check("a Python peer's start record says it is external and --model lenet",
          start.get("external") is True and start.get("fingerprint", "").startswith("lenet-"), start)
    check("the LeNet module is --model lenet to the simulator: evaluated natively, not by the script",
          "the script evaluates it" not in done.stderr, done.stderr[-500:])


def lstm_under_the_simulator(tmp):
    out = os.path.join(tmp, "lstm")
    done, runs = sim(out, LSTM, "--peers", "3", "--algo", "dpsgd", "--epochs", "2", "--batch", "32")
    if runs is None:
        return
    run = runs.get("dpsgd")
    check("the simulator says the script evaluates its model", "the script evaluates it" in done.stderr,
          done.stderr[-500:])
    check("the LSTM run ends ok", done.returncode == 0 and run and run["status"] == "ok", run and run["status"])
    acc = run and run["final_acc_avg_model"]
    # Chance is a quarter; the script's own evaluation of the averaged model says it learnt.
    check("the LSTM's averaged model, evaluated by the script, learnt its task (above 0.5)", acc and acc > 0.5, acc)
    check("the LSTM run was evaluated at points along the way", run and run["evaluations"] >= 3,
          run and run["evaluations"])


def f32_tensors(path):
    """name -> list of floats of a safetensors file's F32 tensors (little-endian)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        raw = blob[8 + n + a:8 + n + b]
        tensors[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
    return tensors


def native_and_python_peers(tmp):
    port = free_ports(3)
    procs, logs = [], []
    common = ["--world", "3", "--algo", "allreduce", "--insecure", "--epochs", "0.1", "--batch", "32",
              "--run", "mixed", "--wait-for-world", "--join-timeout", "120s", "--model", "lenet", "--seed", "3"]
    for rank in range(3):
        flags = ["--listen", f"tcp://127.0.0.1:{port + rank}", "--rank", str(rank), "--checkpoint",
                 os.path.join(tmp, f"ckpt{rank}"), *common]
        if rank > 0:
            flags += ["--join", f"tcp://127.0.0.1:{port}"]
        cmd = (["/usr/bin/python3", LENET] if rank == 2 else [ARGS.binary, "peer", "--threads", "1"]) + flags
        log = open(os.path.join(tmp, f"mixed{rank}.log"), "w")
        logs.append(log)
        procs.append(subprocess.Popen(cmd, env=environment(), stdout=log, stderr=subprocess.STDOUT))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=600))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    for log in logs:
        log.close()
    if codes != [0, 0, 0]:
        for rank in range(3):
            print(open(os.path.join(tmp, f"mixed{rank}.log")).read()[-2000:])
    check("two native peers and a Python peer end their all-reduce run cleanly", codes == [0, 0, 0], codes)
    if codes != [0, 0, 0]:
        return
    states = [f32_tensors(os.path.join(tmp, f"ckpt{r}", "checkpoint.safetensors")) for r in range(3)]
    check("the three checkpoints hold the same tensors", all(set(s) == set(states[0]) for s in states),
          [sorted(s) for s in states])
    # All-reduce averages every step, and every peer applies the same average: they agree
    # to float rounding (the sums are in one order per step, so exactly, in practice).
    worst = max(abs(a - b) for name in states[0] for a, b in zip(states[0][name], states[2][name]))
    worst = max(worst, max(abs(a - b) for name in states[0] for a, b in zip(states[0][name], states[1][name])))
    check("native and Python peers reached consensus (the same parameters to 1e-5)", worst < 1e-5, worst)


def lstm_checkpoint_and_resume(tmp):
    """A model hearsay does not know gets a checkpoint of its own tensors, under its
    state_dict names: it loads strictly into the module, and --resume goes on from its step."""
    work = os.path.join(tmp, "lstm-alone")
    port = free_ports(1)
    flags = ["--listen", f"tcp://127.0.0.1:{port}", "--insecure", "--algo", "none", "--checkpoint",
             os.path.join(work, "ckpt"), "--batch", "32", "--seed", "5"]
    first = subprocess.run(["/usr/bin/python3", LSTM, *flags, "--epochs", "0.2"], env=environment(),
                           capture_output=True, text=True, timeout=300)
    check("a lone LSTM peer with --checkpoint ends cleanly", first.returncode == 0, first.stderr[-1500:])
    path = os.path.join(work, "ckpt", "checkpoint.safetensors")
    probe = subprocess.run(["/usr/bin/python3", "-c", f"""
import json, struct, sys, torch
sys.path.insert(0, {os.path.dirname(LSTM)!r})
import lstm_sequences
blob = open({path!r}, "rb").read()
n, = struct.unpack("<Q", blob[:8]); header = json.loads(blob[8:8 + n]); meta = header.pop("__metadata__")
state = {{k: torch.frombuffer(bytearray(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                             dtype=torch.float32).reshape(v["shape"]) for k, v in header.items()}}
model = lstm_sequences.Classifier()
model.load_state_dict(state, strict=True)
print(meta["hearsay.step"], meta["hearsay.fingerprint"])
"""], env=environment(), capture_output=True, text=True, timeout=120)
    words = probe.stdout.split()
    check("its checkpoint loads strictly into the module (state_dict names, shapes)",
          probe.returncode == 0 and len(words) == 2 and words[1].startswith("torch-"), probe.stdout + probe.stderr[-1500:])
    again = subprocess.run(["/usr/bin/python3", LSTM, *flags, "--epochs", "0.4", "--resume"], env=environment(),
                           capture_output=True, text=True, timeout=300)
    step = words[0] if words else "?"
    check("--resume goes on from the checkpoint's step",
          again.returncode == 0 and f"at step {step}" in again.stderr and "resumed from" in again.stderr,
          again.stderr[-1500:])


def main():
    if not os.path.exists(os.path.join(ARGS.module_dir, "hearsay")):
        skip(f"no hearsay module in {ARGS.module_dir} (pybind11-dev missing when it was configured?)")
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch, hearsay"], env=environment(),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        skip("no torch or hearsay module for /usr/bin/python3 (Debian's python3-torch: scripts/setup): " +
             probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "")
    data = os.environ.get("HEARSAY_DATA") or "/usr/share/datasets/fashion-mnist"
    if not any(os.path.exists(os.path.join(data, f)) for f in ("train-images-idx3-ubyte", "train-images-idx3-ubyte.gz")):
        skip(f"no Fashion-MNIST in {data} (scripts/setup installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        native_and_python_peers(tmp)
        lenet_under_the_simulator(tmp)
        lstm_under_the_simulator(tmp)
        lstm_checkpoint_and_resume(tmp)
    return check.exit_status()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--module-dir", required=True, help="build/python: where the hearsay package is")
    parser.add_argument("--binary", required=True, help="build/bin/hearsay")
    ARGS = parser.parse_args()
    sys.exit(main())
