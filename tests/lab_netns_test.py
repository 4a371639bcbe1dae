#!/usr/bin/env python3
"""Four lab hosts on one machine: network namespaces joined by a bridge, each with its
own IP address, its own sshd (lab_hosts.py) and a tc netem delay on its link (where the
kernel has no sch_netem, the peers add the same delay themselves with --link, and the
test says so). Starts a peer in each with scripts/launch and its default remote shell,
ssh, given the lab's ssh config (--ssh-config: the test's client key and the hosts' own
host keys; the user's ~/.ssh is neither read nor written), CURVE on, then cuts one
host's link mid-run: the others must keep training and report it dead; restoring the
link, it must come back. Exits 77 (skipped) with the reason when it cannot build the lab
(not root, no iproute2, no sshd, no netns support).

  lab_netns_test.py --binary build/bin/hearsay --launch scripts/launch
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks  # noqa: E402
from lab_hosts import (Lab, home_ssh_state, kill_peers, peer_pids, sh, started_by_sshd,  # noqa: E402
                       why_no_lab)

SKIP = 77


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
    why = why_no_lab()
    if why:
        print(f"SKIPPED: {why}")
        return SKIP
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))  # cleans up on the way out
    binary = os.path.abspath(a.binary)
    run = f"lab-ssh-{os.getpid()}"  # a run name no other test's peers have
    check = Checks("lab")
    home_ssh = home_ssh_state()

    lab, proc = None, None
    with tempfile.TemporaryDirectory(prefix="hearsay-lab-") as work:
        try:
            lab = Lab(work, a.hosts, a.delay_ms)
            lab.build()
            if lab.netem:
                print(f"note: tc netem is not available here ({lab.netem}): the peers emulate the delay "
                      f"themselves instead (--link 10gbit,{a.delay_ms}ms)", flush=True)
            else:
                print(f"links: {a.delay_ms} ms netem delay on each host's veth", flush=True)
            hosts = lab.host_file(os.path.join(work, "hosts"), range(a.hosts))
            cut = a.hosts - 1  # the last host, rank hosts-1
            cut_id = f"rank{cut}"
            # Short failure-detector times so the cut shows within seconds; steps paced so
            # the run lasts long enough to cut and restore a link in the middle.
            flags = ["--run", run, "--data", "synthetic", "--model", "mlp", "--epochs", "30",
                     "--min-step-time", "40ms", "--heartbeat", "250ms", "--suspect-after", "1s",
                     "--dead-after", "2500ms", "--round-timeout", "500ms", "--log-every", "2"]
            if lab.netem:  # no sch_netem in this kernel: the same delay, added by each peer's sender
                flags += ["--link", f"10gbit,{a.delay_ms}ms"]
            # No --rsh: the launcher's own ssh, told about the lab's hosts by its ssh config.
            proc = subprocess.Popen([a.launch, "--hosts", hosts, "--ssh-config", lab.ssh_config,
                                     "--binary", binary, "--keys", os.path.join(work, "keys"), "--", *flags],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"})
            out = Output(proc)
            joined = out.wait_for(rf"\[{lab.names[0]}:0\].*mixing with {a.hosts - 1} other peer", 90)
            check("every host's peer joined rank 0", joined is not None)
            if joined is None:
                raise RuntimeError("the run did not form")
            addresses = set(re.findall(r"joined \(tcp://([0-9.]+):\d+#", "\n".join(out.lines)))
            check("peers met at the hosts' own addresses, with CURVE keys",
                  addresses and all(ip.startswith(lab.subnet + ".") for ip in addresses)
                  and out.count("insecure") == 0, str(addresses))
            pids = peer_pids(binary, run)
            namespaces = sorted(sh("ip", "netns", "identify", str(pid), check=False).stdout.strip() for pid in pids)
            check("each host's peer runs in that host's namespace, started by its sshd",
                  namespaces == sorted(lab.names) and all(started_by_sshd(pid) for pid in pids),
                  f"peers {pids} in namespaces {namespaces}")

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
            check("the user's ~/.ssh is as it was (the launcher used the lab's ssh config only)",
                  home_ssh_state() == home_ssh, f"before {home_ssh}, after {home_ssh_state()}")
        except Exception as e:  # report, then clean up
            check("the lab ran", False, repr(e))
            if lab:
                for i in range(len(lab.names)):
                    print(f"  sshd of {lab.names[i]}: {lab.sshd_log(i)}")
        finally:
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
            left = kill_peers(binary, run)
            if left:
                check("no peer outlives the launcher", False, f"killed {left}")
            if lab:
                lab.close()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
