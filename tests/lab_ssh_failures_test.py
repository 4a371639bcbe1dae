#!/usr/bin/env python3
"""scripts/launch against lab hosts it cannot log in to with ssh: four network namespaces,
each with its own sshd (lab_hosts.py), and a host file with one bad host among good ones:

  - a host whose sshd is down,
  - a host that would ask for a password (its sshd holds no key of ours),
  - a host whose host key changed (known_hosts holds another key for it),
  - a host whose host key is not known yet (and --accept-new-host-keys trusting it),
  - an address where no host is (no route).

Each bad run must exit 1 with one line naming the bad host and the reason, say that
nothing started, and start nothing on any host: no `hearsay peer` of the run appears, no
key pair is made, while the good hosts were reached. Exits 77 (skipped) with the reason
when it cannot build the lab (not root, no iproute2, no sshd, no netns support).

  lab_ssh_failures_test.py --binary build/bin/hearsay --launch scripts/launch
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from script_checks import Checks  # noqa: E402
from lab_hosts import Lab, home_ssh_state, keygen, kill_peers, peer_pids, why_no_lab, write_known_hosts  # noqa: E402

SKIP = 77
check = Checks("lab ssh failures")


class Launcher:
    def __init__(self, a, lab, work):
        self.a, self.lab, self.work, self.runs = a, lab, work, 0
        self.binary = os.path.abspath(a.binary)

    def logins(self, i):
        """How many logins host i's sshd has accepted so far."""
        with open(os.path.join(self.lab.host_dir(i), "sshd.log"), errors="replace") as f:
            return f.read().count("Accepted publickey")

    def run(self, hosts, extra=(), dry_run=False, host_names=None):
        """Runs scripts/launch over the lab hosts `hosts` (indices); returns (exit, stdout,
        stderr, the pids of any of its peers seen while it ran)."""
        self.runs += 1
        run = f"lab-ssh-fail-{os.getpid()}-{self.runs}"
        host_file = os.path.join(self.work, f"hosts-{self.runs}")
        if host_names:
            with open(host_file, "w") as f:
                f.write("".join(f"{name} slots=1\n" for name in host_names))
        else:
            self.lab.host_file(host_file, hosts)
        self.keys = os.path.join(self.work, f"keys-{self.runs}")
        cmd = [self.a.launch, "--hosts", host_file, "--ssh-config", self.lab.ssh_config, "--binary", self.binary,
               "--keys", self.keys, "--timeout", "60", *extra, *(["--dry-run"] if dry_run else []), "--",
               "--run", run, "--data", "synthetic", "--model", "mlp", "--epochs", "1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"})
        seen = set()
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # watch for peers while it runs
            seen.update(peer_pids(self.binary, run))
            time.sleep(0.2)
        try:
            stdout, stderr = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        seen.update(kill_peers(self.binary, run, timeout=0))
        for line in (stdout + stderr).splitlines():
            print("  | " + line, flush=True)
        return proc.returncode, stdout, stderr, sorted(seen)

    def refused(self, what, bad, good, reason, extra=(), host_names=None):
        """One bad host among good ones: exit 1, one line naming it with the reason, and
        nothing started anywhere."""
        before = {i: self.logins(i) for i in good}
        code, stdout, stderr, peers = self.run(sorted(good + [bad]) if bad is not None else good, extra,
                                               host_names=host_names)
        name = host_names[-1] if host_names else self.lab.names[bad]
        lines = [line for line in stdout.splitlines() if line.startswith("[launch] host '")]
        check(f"{what}: exit 1 and one line, naming host '{name}' and why",
              code == 1 and len(lines) == 1 and re.search(f"^\\[launch\\] host '{re.escape(name)}': {reason}",
                                                          lines[0]) is not None,
              f"exit {code}, lines {lines}\n{stdout}{stderr}")
        check(f"{what}: it says nothing started, and nothing did (no peer, no key pair)",
              "nothing started" in stderr and not peers and not os.path.exists(self.keys),
              f"peers {peers}, keys made: {os.path.exists(self.keys)}\n{stderr}")
        check(f"{what}: the good hosts were reached (their sshd took our key)",
              all(self.logins(i) > before[i] for i in good), f"logins before {before}, after "
              f"{ {i: self.logins(i) for i in good} }")
        return lines[0] if lines else ""


def cases(a, lab, work):
    launcher = Launcher(a, lab, work)
    good = [0, 1]
    password_host, changed_host = 2, 3
    code, stdout, stderr, peers = launcher.run(range(4), dry_run=True)
    check("every lab host answers through ssh with the lab's ssh config (no --rsh)",
          code == 0 and all(f"[launch] {n}: 1 peer(s)" in stdout for n in lab.names) and not peers,
          f"exit {code}\n{stdout}{stderr}")
    if code != 0:
        raise RuntimeError("the lab's hosts do not answer: the failures below would mean nothing")

    # Host key changed: the known_hosts given with --known-hosts (it wins over the ssh
    # config's) holds another key for the host's address.
    other = keygen(os.path.join(work, "other_host_key"), "not-the-host")
    changed = os.path.join(work, "known_hosts_changed")
    keys = {lab.address(i): lab.host_keys[lab.names[i]] for i in good}
    write_known_hosts(changed, {**keys, lab.address(changed_host): other})
    launcher.refused("host key changed", changed_host, good,
                     rf"its ssh host key changed: {re.escape(changed)}:3 holds another key for "
                     rf"{re.escape(lab.address(changed_host))} .*ssh-keygen -f \S+ -R ",
                     extra=["--known-hosts", changed])
    launcher.refused("host key changed, with --accept-new-host-keys", changed_host, good,
                     "its ssh host key changed: ", extra=["--known-hosts", changed, "--accept-new-host-keys"])

    # A host key not known yet: refused, or, with --accept-new-host-keys, trusted and recorded.
    partial = os.path.join(work, "known_hosts_partial")
    write_known_hosts(partial, keys)
    launcher.refused("host key not known", changed_host, good,
                     "its ssh host key is not known here .*--accept-new-host-keys", extra=["--known-hosts", partial])
    code, stdout, stderr, _ = launcher.run(good + [changed_host], ["--known-hosts", partial, "--accept-new-host-keys"],
                                           dry_run=True)
    with open(partial) as f:
        recorded = f.read()
    check("--accept-new-host-keys: a new host is trusted and its real key recorded",
          code == 0 and " ".join(lab.host_keys[lab.names[changed_host]]) in recorded,
          f"exit {code}\n{stderr}\nknown_hosts:\n{recorded}")

    # A host nobody ran ssh-copy-id for: its sshd takes passwords but holds no key of ours.
    lab.stop_sshd(password_host)
    lab.start_sshd(password_host, password_only=True)
    launcher.refused("a host that would ask for a password", password_host, good,
                     r"ssh to root@\S+ would ask for a password.*ssh-copy-id -F \S+ " + lab.names[password_host])

    # sshd down.
    lab.stop_sshd(changed_host)
    launcher.refused("a host whose sshd is down", changed_host, good,
                     rf"no ssh server answers at {re.escape(lab.address(changed_host))}:22 \(connection refused\): "
                     "is sshd running there\\?")

    # An address where no host is: ARP finds nobody.
    nobody = f"{lab.subnet}.99"
    launcher.refused("an address where no host is", None, good,
                     rf"(cannot reach {re.escape(nobody)} \(no route to host\)|no answer from {re.escape(nobody)}:22)",
                     host_names=[lab.names[i] for i in good] + [nobody])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--launch", required=True)
    a = ap.parse_args()
    why = why_no_lab()
    if why:
        print(f"SKIPPED: {why}")
        return SKIP
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))  # cleans up on the way out
    home_ssh = home_ssh_state()
    lab = None
    with tempfile.TemporaryDirectory(prefix="hearsay-lab-ssh-") as work:
        try:
            lab = Lab(work, hosts=4)
            lab.build()
            cases(a, lab, work)
            check("the user's ~/.ssh is as it was", home_ssh_state() == home_ssh,
                  f"before {home_ssh}, after {home_ssh_state()}")
        except Exception as e:  # report, then clean up
            check("the lab ran", False, repr(e))
            if lab:
                for i in range(len(lab.names)):
                    print(f"  sshd of {lab.names[i]}: {lab.sshd_log(i)}")
        finally:
            if lab:
                lab.close()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
