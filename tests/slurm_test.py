#!/usr/bin/env python3
"""scripts/slurm/hearsay.sbatch under a real Slurm: a one-machine cluster in a temporary
directory (its own munged, slurmctld and four slurmd, named after loopback addresses
127.0.0.11-14 so that the peers of each "node" bind an address of their own), torn down at
the end, whatever happened.

Job A (4 tasks, the script's default, D-PSGD: lockstep, so the ranks stop within a step of
each other): every task's rank, world, listen and join address come from Slurm; scancel
mid-run makes every peer checkpoint and write its final record before the job ends;
`scontrol requeue` starts it again and every rank goes on from its own checkpoint (its
first step is the checkpoint's + 1) to the planned end, the job COMPLETED with exit 0.
Job B (3 tasks from the sbatch line, gossip, run directory and peer flags from the
environment), at the same time on the other two nodes: its one-minute time limit sends
the same SIGTERM, and every peer checkpoints before the job ends as TIMEOUT.

Exits 77 (skipped) with the reason when no cluster can be built here: not root, a Slurm
or munge program missing, a daemon that will not start in this container.

  slurm_test.py --binary build/bin/hearsay --sbatch scripts/slurm/hearsay.sbatch
"""
import argparse
import ctypes
import json
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks, free_ports  # noqa: E402

SKIP = 77
NODES = [f"127.0.0.{11 + i}" for i in range(4)]
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
READ_SAFETENSORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "read_safetensors.py")


class Skip(Exception):
    """This machine cannot run a Slurm cluster: exit 77."""


def poll(what, condition, timeout, every=0.25):
    """condition()'s first true value within timeout seconds; raises naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def die_with_parent():
    """In a daemon's child process: SIGTERM it if this test dies (even by SIGKILL)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def job_fields(text):
    return dict(re.findall(r"(\w+)=(\S*)", text))


class Cluster:
    """munged, slurmctld and one slurmd per node, as children of this process."""

    def __init__(self, work):
        self.work = work
        self.conf = os.path.join(work, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for name in list(self.env):
            if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and name != "SLURM_CONF":
                del self.env[name]  # this test may itself run inside a job
        self.daemons = []  # (name, Popen, log path)
        self.jobs = []

    def run(self, *cmd, check=True, timeout=60):
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip() or f'exit {p.returncode}'}")
        return p.stdout

    def write_config(self):
        w = self.work
        ctld_port = free_ports(1)
        slurmd_ports = [free_ports(1) for _ in NODES]
        host = socket.gethostname().split(".")[0]
        with open(os.path.join(w, "plugstack.conf"), "w"):
            pass  # no SPANK plugins of the machine's own /etc/slurm
        nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=2"
                          for n, p in zip(NODES, slurmd_ports))
        with open(self.conf, "w") as f:
            f.write(f"""\
ClusterName=hearsaytest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this + 1 s before it may start again (default 120 s)
AuthInfo=socket={w}/munge.socket,cred_expire=10
StateSaveLocation={w}/state
SlurmdSpoolDir={w}/spool/%n
SlurmctldPidFile={w}/slurmctld.pid
SlurmdPidFile={w}/slurmd-%n.pid
SlurmctldLogFile={w}/slurmctld.log
SlurmdLogFile={w}/slurmd-%n.log
PlugStackConfig={w}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# a job whose begin time passes (a requeued one) starts at the next pass (default every 60 s)
SchedulerParameters=sched_interval=2
SlurmdParameters=config_overrides
ReturnToService=2
# the peers' time to finish a step and checkpoint between SIGTERM and SIGKILL
KillWait=30
MpiDefault=none
MailProg=/bin/true
{nodes}
PartitionName=hearsay Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        os.makedirs(os.path.join(w, "state"))
        for n in NODES:
            os.makedirs(os.path.join(w, "spool", n))

    def spawn(self, name, argv):
        log = os.path.join(self.work, name + ".out")
        with open(log, "wb") as out:
            # A session of its own: a signal to this test's process group (Ctrl-C, timeout)
            # leaves the daemons to the orderly stop below.
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=self.env, preexec_fn=die_with_parent, start_new_session=True)
        self.daemons.append((name, p, log))
        return p

    def refused(self, name, p, log):
        """Why a daemon that ended at start-up ended (its last line), as a Skip."""
        with open(log, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
        return Skip(f"{name} will not start here (exit {p.returncode}): {lines[-1] if lines else 'no output'}")

    def start(self):
        w = self.work
        key = os.path.join(w, "munge.key")
        with open(key, "wb") as f:
            f.write(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        socket_path = os.path.join(w, "munge.socket")
        munged = self.spawn("munged", ["munged", "--foreground", f"--socket={socket_path}", f"--key-file={key}",
                                       f"--pid-file={w}/munged.pid", f"--log-file={w}/munged.log",
                                       f"--seed-file={w}/munged.seed"])
        try:
            poll("munged's socket", lambda: os.path.exists(socket_path) or munged.poll() is not None, 20)
        except TimeoutError:
            raise Skip(f"munged made no socket within 20 s (its output: {w}/munged.out)")
        if munged.poll() is not None:
            raise self.refused("munged", munged, os.path.join(w, "munged.out"))
        self.write_config()
        self.spawn("slurmctld", ["slurmctld", "-D"])
        for n in NODES:
            self.spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n])

        def all_idle():
            for name, p, log in self.daemons:
                if p.poll() is not None:
                    raise self.refused(name, p, log)
            p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=self.env)
            states = dict(line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
            return sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}

        poll("the cluster's four nodes idle in sinfo", all_idle, 60, every=0.5)

    def sbatch(self, *args, env=None):
        out = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                             env=dict(self.env, **(env or {})))
        if out.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)}: {out.stderr.strip()}")
        job = out.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def job(self, job):
        return job_fields(self.run("scontrol", "show", "job", "-o", job))

    def wait_state(self, job, states, timeout):
        """The job's fields once its JobState is one of states (a finished one: no longer completing)."""
        def reached():
            f = self.job(job)
            done = f.get("JobState") in states and "COMPLETING" not in self.run("squeue", "-h", "-j", job, "-o",
                                                                                "%T", check=False)
            return f if done else None
        return poll(f"job {job} {'/'.join(states)}", reached, timeout, every=0.5)

    def stop(self):
        """Cancels the jobs, waits for them to end, stops the daemons; ends what is left
        (SIGTERM: a peer still checkpoints; SIGKILL after 10 s) and names it."""
        left = []
        if self.jobs and any(p.poll() is None for name, p, _ in self.daemons if name == "slurmctld"):
            subprocess.run(["scancel", *self.jobs], capture_output=True, env=self.env)
            try:
                poll("the jobs to end after scancel", lambda: not self.run("squeue", "-h", "-o", "%i").strip(), 45)
            except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
                left.append(str(e))
        for name, p, _ in reversed(self.daemons):  # slurmd, then slurmctld, then munged
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    left.append(f"{name} ignored SIGTERM for 20 s")
        stray = {pid: cmdline(pid)[:60] for pid in processes_with(f"SLURM_CONF={self.conf}")}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in processes_with(f"SLURM_CONF={self.conf}"):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            try:
                poll("what was left to end", lambda: not processes_with(f"SLURM_CONF={self.conf}"), 10)
                break
            except TimeoutError:
                pass
        return left + [f"pid {pid} ({command or 'ended'})" for pid, command in stray.items()]


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(e.split("=", 1) for e in f.read().decode(errors="replace").split("\0") if "=" in e)
    except OSError:
        return {}


def processes_with(entry):
    """Pids (not this one) whose environment holds NAME=VALUE `entry`."""
    name, _, value = entry.partition("=")
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != os.getpid() and environ(int(p)).get(name) == value]


def records(path, kind=None):
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []
    return [r for r in rows if kind is None or r.get("type") == kind]


def checkpoint(run_dir, rank):
    """(metadata, tensors) of rank's checkpoint as tests/read_safetensors.py reads it, or (None, why)."""
    path = os.path.join(run_dir, f"ckpt-{rank}", "checkpoint.safetensors")
    p = subprocess.run([sys.executable, READ_SAFETENSORS, path], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    summary = json.loads(p.stdout)
    return summary["metadata"], summary["tensors"]


def checkpoints_load(run_dir, ranks, finals, params):
    """Whether every rank's checkpoint reads back as its final record says, and why not."""
    bad = []
    for rank in ranks:
        meta, tensors = checkpoint(run_dir, rank)
        if meta is None:
            bad.append(f"rank {rank}: {tensors}")
            continue
        count = sum(math.prod(t["shape"]) for t in tensors)
        finite = all(math.isfinite(t.get("sum", 0.0)) for t in tensors)
        optimizer = os.path.join(run_dir, f"ckpt-{rank}", meta.get("hearsay.optimizer_file", "?"))
        final_step = finals.get(rank, {}).get("step")
        if (meta.get("peer") != f"rank{rank}" or meta.get("hearsay.step") != str(final_step) or count != params
                or not finite or not os.path.exists(optimizer)):
            bad.append(f"rank {rank}: peer {meta.get('peer')}, step {meta.get('hearsay.step')} (final record: "
                       f"{final_step}), {count} values of {params}, finite {finite}, optimizer file "
                       f"{os.path.exists(optimizer)}")
    return not bad, "; ".join(bad)


def peers_of(binary, run_dir):
    """{rank: (pid, argv, environment)} of the running peers of run_dir."""
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue
        if argv[:2] == [binary, "peer"] and any(run_dir in a for a in argv):
            found[int(argv[argv.index("--rank") + 1])] = (int(p), argv, environ(int(p)))
    return found


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def check_slurm_gave(check, name, peers, world, port, run_dir, cluster, job):
    """Each peer's rank, world, listen and join address are its srun task's."""
    nodelist = cluster.job(job)["NodeList"]
    nodes = cluster.run("scontrol", "show", "hostnames", nodelist).split()
    with open(os.path.join(run_dir, "keys", nodes[0], "peer.pub")) as f:
        key = re.search(r'public-key\s*=\s*"([^"]+)"', f.read()).group(1)
    bad = []
    for rank, (_, argv, env) in sorted(peers.items()):
        want = {"--rank": env.get("SLURM_PROCID"), "--world": env.get("SLURM_NTASKS"),
                "--listen": f"tcp://{env.get('SLURMD_NODENAME')}:{port + int(env.get('SLURM_LOCALID', -1))}",
                "--join": None if rank == 0 else f"tcp://{nodes[0]}:{port}#{key}"}
        got = {option: flag(argv, option) for option in want}
        if (got != want or env.get("SLURM_JOB_ID") != job or env.get("SLURM_JOB_NODELIST") != nodelist
                or str(world) != env.get("SLURM_NTASKS")):
            bad.append(f"rank {rank}: {got}, its task's: {want}, job {env.get('SLURM_JOB_ID')}")
    check(f"job {name} ({job}): ranks 0..{world - 1}, world {world}, listen at the task's node and port + "
          f"SLURM_LOCALID, join at the first node of {nodelist} ({nodes[0]}:{port}) with its key",
          sorted(peers) == list(range(world)) and not bad, f"ranks {sorted(peers)}; " + "; ".join(bad))
    return nodes


def wait_for_steps(cluster, job, start_dir, ranks, steps, timeout):
    """Until every rank's metrics file has a progress record at step >= steps (the job running)."""
    def every_rank_stepped():
        state = cluster.job(job).get("JobState")
        if state not in ("PENDING", "CONFIGURING", "RUNNING"):
            output = output_of(os.path.dirname(start_dir), job)
            raise RuntimeError(f"job {job} is {state} before every peer took {steps} steps; its output ends:\n"
                               + output[-2000:])
        return all(any(r.get("step", 0) >= steps for r in records(f"{start_dir}/metrics-{rank}.jsonl", "metrics"))
                   for rank in ranks)
    poll(f"every peer's metrics at step {steps}", every_rank_stepped, timeout, every=0.5)


def planned_steps(start):
    """The step a rank's run ends at, from its start record (hearsay's planned_steps)."""
    per_epoch = -(-start["epoch_examples"] // start["batch"])
    return max(1, math.floor(start["epochs"] * per_epoch + 0.5))


def finals_of(start_dir, ranks):
    return {rank: (records(f"{start_dir}/metrics-{rank}.jsonl", "final") or [{}])[-1] for rank in ranks}


def output_of(run_dir, job):
    try:
        with open(os.path.join(run_dir, f"slurm-{job}.out"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


PEER_FLAGS = ["--model", "mlp", "--data", "synthetic", "--batch", "32", "--threads", "1"]


def submit_time_limited(check, cluster, a, work, port):
    """Job B: 3 tasks, a 1-minute limit; run directory and peer flags from the environment."""
    run_dir = os.path.join(work, "run-b")
    os.makedirs(run_dir)
    # --time-budget: should this test be killed, its peers end by themselves all the same
    flags = PEER_FLAGS + ["--epochs", "200", "--min-step-time", "200ms", "--log-every", "5", "--time-budget", "4m"]
    job = cluster.sbatch("--ntasks", "3", "--time", "1", "--output", f"{run_dir}/slurm-%j.out", a.sbatch,
                         env={"HEARSAY_RUN_DIR": run_dir, "HEARSAY_PEER_FLAGS": " ".join(flags),
                              "HEARSAY_BINARY": a.binary, "HEARSAY_PORT": str(port)})
    wait_for_steps(cluster, job, os.path.join(run_dir, "start-1"), range(3), 1, 120)
    peers = poll("job B's three peers in /proc", lambda: (lambda p: p if len(p) == 3 else None)(
        peers_of(a.binary, run_dir)), 30)
    check_slurm_gave(check, "B", peers, 3, port, run_dir, cluster, job)
    return job, run_dir


def cancel_and_requeue(check, cluster, a, work, port):
    """Job A: scancel mid-run, every rank checkpoints; scontrol requeue, every rank resumes."""
    run_dir = os.path.join(work, "run-a")
    os.makedirs(run_dir)
    flags = PEER_FLAGS + ["--algo", "dpsgd", "--graph", "ring", "--epochs", "2", "--min-step-time", "150ms",
                          "--log-every", "1"]
    job = cluster.sbatch("--output", f"{run_dir}/slurm-%j.out", a.sbatch, run_dir, *flags,
                         env={"HEARSAY_BINARY": a.binary, "HEARSAY_PORT": str(port)})
    ranks = range(4)
    first, second = os.path.join(run_dir, "start-1"), os.path.join(run_dir, "start-2")
    wait_for_steps(cluster, job, first, ranks, 10, 120)
    peers = poll("job A's four peers in /proc", lambda: (lambda p: p if len(p) == 4 else None)(
        peers_of(a.binary, run_dir)), 30)
    check_slurm_gave(check, "A", peers, 4, port, run_dir, cluster, job)
    starts = {rank: records(f"{first}/metrics-{rank}.jsonl", "start")[0] for rank in ranks}
    check("job A: the peer flags from the sbatch line reached every peer (dpsgd, mlp), a fresh start with --resume",
          all(s["algo"] == "dpsgd" and s["model"] == "mlp" and s["peer"] == f"rank{r}" and not s["resumed"]
              and s["start_step"] == 0 for r, s in starts.items()), str(starts))

    cancelled = time.monotonic()
    cluster.run("scancel", job)
    fields = cluster.wait_state(job, {"CANCELLED"}, 90)
    took = time.monotonic() - cancelled
    finals = finals_of(first, ranks)
    steps = {rank: f.get("step") for rank, f in finals.items()}
    print(f"job A: scancel at every rank's step >= 10; the job ended CANCELLED {took:.1f} s later; "
          f"checkpoint steps {steps}", flush=True)
    check("job A: scancel stops every peer by SIGTERM (each logs it stopped and said bye)",
          all(re.search(rf"^{r}: hearsay peer rank{r}: stopped at step {steps[r]}, said bye", output_of(run_dir, job),
                        re.M) for r in ranks) and not any(os.path.exists(f"/proc/{pid}") for pid, _, _ in
                                                          peers.values()),
          output_of(run_dir, job)[-3000:])
    check("job A: before the job ended, every peer wrote its final record (interrupted) ...",
          all(f.get("interrupted") is True and isinstance(f.get("step"), int) and f["step"] >= 10
              for f in finals.values()), str(finals))
    params = starts[0]["params"]
    ok, why = checkpoints_load(run_dir, ranks, finals, params)
    check(f"... and its checkpoint, which loads: {params} finite values, its rank, its final step, its optimizer file",
          ok, why)

    cluster.run("scontrol", "requeue", job)
    requeued = time.monotonic()
    cluster.wait_state(job, {"RUNNING"}, 120)
    print(f"job A: requeued; running again {time.monotonic() - requeued:.1f} s later", flush=True)
    fields = cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, 300)
    check("job A: the requeued job ends COMPLETED, exit 0, restarted once",
          (fields.get("JobState"), fields.get("ExitCode"), fields.get("Restarts")) == ("COMPLETED", "0:0", "1"),
          " ".join(f"{k}={fields.get(k)}" for k in ("JobState", "ExitCode", "Restarts", "Reason")))
    resumed = {rank: (records(f"{second}/metrics-{rank}.jsonl", "start") or [{}])[0] for rank in ranks}
    first_steps = {rank: (records(f"{second}/metrics-{rank}.jsonl", "metrics") or [{}])[0].get("step")
                   for rank in ranks}
    print(f"job A: resumed at {dict((r, s.get('start_step')) for r, s in resumed.items())}, first steps "
          f"{first_steps}", flush=True)
    log = output_of(run_dir, job)
    check("job A: every rank resumed from its own checkpoint, at its step (the log and the start record)",
          all(s.get("resumed") is True and s.get("start_step") == steps[r] and
              re.search(rf"^{r}: .* resumed from {re.escape(run_dir)}/ckpt-{r}/checkpoint\.safetensors at step "
                        rf"{steps[r]} ", log, re.M) for r, s in resumed.items()), f"{resumed}\n{log[-3000:]}")
    check("job A: each rank's first step after the requeue is its checkpoint's step + 1",
          all(first_steps[r] == steps[r] + 1 for r in ranks), f"first {first_steps}, checkpoints {steps}")
    finals = finals_of(second, ranks)
    planned = planned_steps(starts[0])
    check(f"job A: every rank trained to the planned end, step {planned}, and says so in its final record",
          all(f.get("step") == planned and f.get("interrupted") is False and f.get("ended_by") == "epochs"
              for f in finals.values()), str(finals))
    check("job A: --open-mode=append kept the first start's output beside the second's",
          "start 1 of" in log and "start 2 of" in log and "CANCELLED AT" in log, log[:2000])


def time_limit(check, cluster, job, run_dir):
    """Job B, submitted first: its time limit stops every peer as scancel does."""
    fields = cluster.wait_state(job, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, 240)
    ranks = range(3)
    first = os.path.join(run_dir, "start-1")
    finals = finals_of(first, ranks)
    steps = {rank: f.get("step") for rank, f in finals.items()}
    print(f"job B: ended {fields.get('JobState')} after {fields.get('RunTime')} (--time 1); checkpoint steps "
          f"{steps}", flush=True)
    log = output_of(run_dir, job)
    check("job B: the time limit ended it (TIMEOUT) with SIGTERM to every peer",
          fields.get("JobState") == "TIMEOUT" and "DUE TO TIME LIMIT" in log and
          all(f"hearsay peer rank{r}: stopped at step" in log for r in ranks), log[-3000:])
    start = (records(f"{first}/metrics-0.jsonl", "start") or [{}])[0]
    check("job B: 3 tasks from the sbatch line, run directory and flags from the environment (gossip, --epochs 200)",
          start.get("algo") == "gossip" and start.get("epochs") == 200 and
          sorted(int(s["peer"][4:]) for r in ranks for s in records(f"{first}/metrics-{r}.jsonl", "start"))
          == list(ranks), str(start))
    check("job B: every peer wrote its final record (interrupted) before the job ended",
          all(f.get("interrupted") is True for f in finals.values()), str(finals))
    ok, why = checkpoints_load(run_dir, ranks, finals, start.get("params"))
    check("job B: every peer's checkpoint loads, at its final step", ok, why)


def preconditions():
    if os.geteuid() != 0:
        raise Skip("a Slurm cluster of its own needs root (SlurmUser=root, munged's key)")
    missing = [p for p in PROGRAMS if not any(os.access(os.path.join(d, p), os.X_OK)
                                              for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin"])]
    if missing:
        raise Skip(f"{', '.join(missing)} not installed (scripts/setup installs slurmctld slurmd slurm-client munge)")
    try:
        free_ports(2, NODES)
    except (OSError, RuntimeError) as e:
        raise Skip(f"cannot bind the nodes' loopback addresses {NODES[0]}..{NODES[-1]}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the hearsay executable")
    ap.add_argument("--sbatch", required=True, help="scripts/slurm/hearsay.sbatch")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, configs, run dirs)")
    a = ap.parse_args()
    a.binary, a.sbatch = os.path.abspath(a.binary), os.path.abspath(a.sbatch)
    os.environ["PATH"] += ":/usr/sbin:/sbin"
    check = Checks("slurm")
    try:
        preconditions()
    except Skip as e:
        print(f"SKIPPED: {e}")
        return SKIP
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))  # cleans up on the way out
    work = tempfile.mkdtemp(prefix="hearsay-slurm-")
    os.chmod(work, 0o755)  # munged: every directory above its socket must be executable by all
    cluster = Cluster(work)
    began = time.monotonic()
    try:
        cluster.start()
        print(f"cluster up in {time.monotonic() - began:.1f} s: nodes {', '.join(NODES)} ({work})", flush=True)
        port = free_ports(4, NODES)  # a node's tasks listen at PORT + SLURM_LOCALID: 2 each for A and B
        job_b, run_b = submit_time_limited(check, cluster, a, work, port)
        cancel_and_requeue(check, cluster, a, work, port + 2)
        time_limit(check, cluster, job_b, run_b)
    except Skip as e:
        print(f"SKIPPED: {e}")
        return SKIP
    except Exception as e:  # report, then clean up
        check("the Slurm jobs ran", False, repr(e))
        for name in ("slurmctld.log", "slurmd-127.0.0.11.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                print(f"--- last lines of {path}:\n" + "".join(open(path, errors="replace").readlines()[-15:]))
    finally:
        left = cluster.stop()
        check("every daemon stopped and nothing of the cluster is left running", not left, "; ".join(left))
        print(f"test took {time.monotonic() - began:.0f} s", flush=True)
        if a.keep or check.failures:
            print(f"kept {work}")
        else:
            subprocess.run(["rm", "-rf", work])
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
