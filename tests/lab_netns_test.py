#!/usr/bin/env python3
"""Four lab hosts on one machine: network namespaces joined by a bridge, each with its
own IP address and a tc netem delay on its link (where the kernel has no sch_netem, the
peers add the same delay themselves with --link, and the test says so). Starts a
peer in each with scripts/launch --rsh "ip netns exec", CURVE on, then cuts one host's
link mid-run: the others must keep training and report it dead; restoring the link, it
must come back. Exits 77 (skipped) with the reason when it cannot build namespaces
(not root, no iproute2, no netns support).

  lab_netns_test.py --binary build/bin/hearsay --launch scripts/launch
"""
import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks  # noqa: E402

SKIP = 77


def sh(*cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


class Lab:
    """netns hosts h1..hN with 10.<net>.0.i/24 on veths plugged into one bridge."""

    def __init__(self, hosts, delay_ms):
        tag = os.getpid() % 10000
        self.bridge = f"hsbr{tag}"
        self.subnet = f"10.{200 + tag % 50}.{tag % 250}"
        self.names = [f"hs{tag}h{i}" for i in range(1, hosts + 1)]
        self.outer = [f"hs{tag}v{i}" for i in range(1, hosts + 1)]
        self.netem = None
        self.made_ns, self.made_links = [], []
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.made_links.append(self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, (ns, outer) in enumerate(zip(self.names, self.outer), 1):
            sh("ip", "netns", "add", ns)
            self.made_ns.append(ns)
            inner = f"hs{tag}i{i}"
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.made_links.append(outer)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "link", "set", outer, "master", self.bridge)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(i - 1)}/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            p = sh("tc", "qdisc", "add", "dev", outer, "root", "netem", "delay", f"{delay_ms}ms", check=False)
            if p.returncode != 0:
                self.netem = p.stderr.strip() or f"exit {p.returncode}"
        if self.netem:
            print(f"note: tc netem is not available here ({self.netem}): the peers emulate the delay "
                  f"themselves instead (--link 10gbit,{delay_ms}ms)", flush=True)
        else:
            print(f"links: {delay_ms} ms netem delay on each host's veth", flush=True)

    def address(self, i):
        return f"{self.subnet}.{i + 1}"

    def cut(self, i, up):
        sh("ip", "link", "set", self.outer[i], "up" if up else "down")

    def close(self):
        for ns in self.made_ns:
            sh("ip", "netns", "del", ns, check=False)
        for link in self.made_links:
            sh("ip", "link", "del", link, check=False)


def can_build_namespaces():
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' is missing (Debian package iproute2)"
    probe = f"hsprobe{os.getpid() % 10000}"
    p = sh("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"cannot create a network namespace: {p.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return None


class Output:
    """The launcher's output, line by line, searchable while it runs."""

    def __init__(self, proc):
        self.lines, self.cond = [], threading.Condition()
        self.thread = threading.Thread(target=self.read, args=(proc,), daemon=True)
        self.thread.start()

    def read(self, proc):
        for line in proc.stdout:
            sys.stdout.write("  | " + line)
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, pattern, timeout, since=0):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(since, len(self.lines)):
                    if rx.search(self.lines[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def count(self, pattern, since=0):
        rx = re.compile(pattern)
        with self.cond:
            return sum(1 for line in self.lines[since:] if rx.search(line))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--delay-ms", type=int, default=5)
    a = ap.parse_args()
    why = can_build_namespaces()
    if why:
        print(f"SKIPPED: {why}")
        return SKIP
    binary = os.path.abspath(a.binary)
    check = Checks("lab")

    lab, proc = None, None
    with tempfile.TemporaryDirectory(prefix="hearsay-lab-") as work:
        try:
            lab = Lab(a.hosts, a.delay_ms)
            hosts = os.path.join(work, "hosts")
            with open(hosts, "w") as f:
                for i, name in enumerate(lab.names):
                    f.write(f"{name} slots=1 addr={lab.address(i)}\n")
            cut = a.hosts - 1  # the last host, rank hosts-1
            cut_id = f"rank{cut}"
            # Short failure-detector times so the cut shows within seconds; steps paced so
            # the run lasts long enough to cut and restore a link in the middle.
            flags = ["--data", "synthetic", "--model", "mlp", "--epochs", "30", "--min-step-time", "40ms",
                     "--heartbeat", "250ms", "--suspect-after", "1s", "--dead-after", "2500ms",
                     "--round-timeout", "500ms", "--log-every", "2"]
            if lab.netem:  # no sch_netem in this kernel: the same delay, added by each peer's sender
                flags += ["--link", f"10gbit,{a.delay_ms}ms"]
            proc = subprocess.Popen([a.launch, "--hosts", hosts, "--rsh", "ip netns exec", "--binary", binary,
                                     "--keys", os.path.join(work, "keys"), "--", *flags],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out = Output(proc)
            joined = out.wait_for(rf"\[{lab.names[0]}:0\].*mixing with {a.hosts - 1} other peer", 60)
            check("every host's peer joined rank 0", joined is not None)
            if joined is None:
                raise RuntimeError("the run did not form")
            addresses = set(re.findall(r"joined \(tcp://([0-9.]+):\d+#", "\n".join(out.lines)))
            check("peers met at the hosts' own addresses, with CURVE keys",
                  addresses and all(ip.startswith(lab.subnet + ".") for ip in addresses)
                  and out.count("insecure") == 0, str(addresses))

            lab.cut(cut, up=False)
            cut_at = len(out.lines)
            print(f"cut {lab.names[cut]}'s link", flush=True)
            dead = out.wait_for(rf"\[hs\d+h\d+:[0-{cut - 1}]\].*member '{cut_id}' died", 30, since=cut_at)
            check(f"the others report {cut_id} dead after its link is cut", dead is not None)
            # A progress line of the others that comes after everything printed so far (the
            # death included): they train on while it is cut. The deadline only bounds a hang;
            # a busy machine takes longer, it does not fail.
            seen = len(out.lines)
            progress = out.wait_for(rf"\[hs\d+h\d+:[0-{cut - 1}]\] epoch .* step", 60, since=seen)
            check("the others keep training while it is cut", progress is not None,
                  f"no progress line of the others within 60 s after output line {seen}")

            lab.cut(cut, up=True)
            restored_at = len(out.lines)
            print(f"restored {lab.names[cut]}'s link", flush=True)
            back = out.wait_for(rf"\[hs\d+h\d+:[0-{cut - 1}]\].*member '{cut_id}' (revived|restarted|joined)", 45,
                                since=restored_at)
            check(f"{cut_id} rejoins once its link is back", back is not None)

            try:
                proc.wait(timeout=240)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=60)
            out.thread.join(timeout=10)
            summary = out.wait_for(r"\[launch\] every peer ended", 5) is not None
            check("the run trains to the end with every peer's exit 0",
                  proc.returncode == 0 and summary and out.count(r"exit [1-9]") == 0,
                  f"launcher exit {proc.returncode}")
        except Exception as e:  # report, then clean up
            check("the lab ran", False, repr(e))
        finally:
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
            if lab:
                lab.close()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
