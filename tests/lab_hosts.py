"""Lab hosts on one machine for the lab tests: network namespaces joined by a bridge, each
with its own IP address, an optional tc netem delay on its link, and its own sshd, which
scripts/launch reaches with its default remote shell (ssh) through an ssh config the lab
writes: a client key made for the test, the hosts' own host keys in a known_hosts file.
Nothing of the user's ~/.ssh is read or written.

    lab = Lab(work, hosts=4)
    try:
        lab.build()          # namespaces, bridge, an sshd in each
        ... scripts/launch --hosts lab.host_file() --ssh-config lab.ssh_config ...
    finally:
        lab.close()          # every sshd stopped, every namespace and link removed
"""
import os
import re
import shutil
import signal
import subprocess
import time

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"


def sh(*cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


def why_no_lab():
    """Why this machine cannot build the lab (the test skips), or None."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' is missing (Debian package iproute2)"
    if not os.access(SSHD, os.X_OK):
        return f"no {SSHD} (Debian package openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"'{tool}' is missing (Debian package openssh-client)"
    try:
        with open("/etc/shadow") as f:
            root = next((line.split(":") for line in f if line.startswith("root:")), None)
    except OSError:
        root = None
    if root and len(root) > 1 and root[1].startswith("!"):
        return "root's account is locked ('!' in /etc/shadow): sshd without PAM refuses it, even with a key"
    probe = f"hsprobe{os.getpid() % 10000}"
    p = sh("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"cannot create a network namespace: {p.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return None


def keygen(path, comment):
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path)
    with open(path + ".pub") as f:
        return f.read().split()[:2]  # type, key


class Lab:
    """Hosts NAME = hs<tag>h1..hN with <subnet>.1..N/24 on veths plugged into one bridge
    (which has <subnet>.254, so this namespace reaches them), each running an sshd."""

    def __init__(self, work, hosts, delay_ms=0):
        tag = os.getpid() % 10000
        self.work = work
        self.bridge = f"hsbr{tag}"
        self.subnet = f"10.{200 + tag % 50}.{tag % 250}"
        self.names = [f"hs{tag}h{i}" for i in range(1, hosts + 1)]
        self.outer = [f"hs{tag}v{i}" for i in range(1, hosts + 1)]
        self.delay_ms = delay_ms
        self.netem = None  # why tc netem failed, when it did
        self.made_ns, self.made_links, self.sshd = [], [], {}
        self.made_privsep = False
        self.ssh_config = os.path.join(work, "ssh_config")
        self.known_hosts = os.path.join(work, "known_hosts")
        self.client_key = os.path.join(work, "client_ed25519")
        self.host_keys = {}  # name: (type, key)

    def address(self, i):
        return f"{self.subnet}.{i + 1}"

    def host_dir(self, i):
        return os.path.join(self.work, "sshd", self.names[i])

    # -- building -------------------------------------------------------------------

    def build(self):
        self.build_network()
        keygen(self.client_key, "hearsay-lab-client")
        if not os.path.isdir(PRIVSEP_DIR):  # sshd's privilege separation chroot
            os.makedirs(PRIVSEP_DIR, mode=0o755)
            self.made_privsep = True
        for i in range(len(self.names)):
            os.makedirs(self.host_dir(i))
            self.host_keys[self.names[i]] = keygen(os.path.join(self.host_dir(i), "host_ed25519"), self.names[i])
            self.start_sshd(i)
        self.write_client_files()

    def build_network(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.made_links.append(self.bridge)
        sh("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        tag = self.bridge[4:]
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
            if self.delay_ms:
                p = sh("tc", "qdisc", "add", "dev", outer, "root", "netem", "delay", f"{self.delay_ms}ms",
                       check=False)
                if p.returncode != 0:
                    self.netem = p.stderr.strip() or f"exit {p.returncode}"

    def write_client_files(self):
        """The ssh config (a Host entry per host) and known_hosts that scripts/launch gets."""
        with open(self.ssh_config, "w") as f:
            for i, name in enumerate(self.names):
                f.write(f"Host {name}\n  HostName {self.address(i)}\n")
            f.write(f"Host *\n  User root\n  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {self.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
                    "  StrictHostKeyChecking yes\n")
        write_known_hosts(self.known_hosts, {self.address(i): self.host_keys[n] for i, n in enumerate(self.names)})

    def sshd_config(self, i, password_only):
        """Host i's sshd: key login as root; password_only: it knows no key of ours but
        takes passwords (a host nobody ran ssh-copy-id for)."""
        d = self.host_dir(i)
        authorized = os.path.join(d, "authorized_keys")
        with open(authorized, "w") as f:
            if not password_only:
                with open(self.client_key + ".pub") as key:
                    f.write(key.read())
        path = os.path.join(d, "sshd_config")
        with open(path, "w") as f:
            f.write(f"ListenAddress {self.address(i)}:22\n"
                    f"HostKey {os.path.join(d, 'host_ed25519')}\n"
                    f"PidFile {os.path.join(d, 'sshd.pid')}\n"
                    f"AuthorizedKeysFile {authorized}\n"
                    "UsePAM no\n"
                    "StrictModes no\n"  # the key files live under /tmp, which is world-writable
                    f"PermitRootLogin {'yes' if password_only else 'prohibit-password'}\n"
                    f"PasswordAuthentication {'yes' if password_only else 'no'}\n"
                    "KbdInteractiveAuthentication no\n"
                    "PubkeyAuthentication yes\n"
                    "X11Forwarding no\n"
                    "PrintMotd no\n")
        return path

    def start_sshd(self, i, password_only=False, timeout=20):
        """Starts host i's sshd in its namespace and waits until it listens (its pid file
        appears once its socket is bound)."""
        d = self.host_dir(i)
        pid_file = os.path.join(d, "sshd.pid")
        if os.path.exists(pid_file):
            os.unlink(pid_file)
        config = self.sshd_config(i, password_only)
        log = open(os.path.join(d, "sshd.log"), "ab")
        proc = subprocess.Popen(["ip", "netns", "exec", self.names[i], SSHD, "-D", "-e", "-f", config],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.sshd[i] = proc
        deadline = time.monotonic() + timeout
        while not os.path.exists(pid_file):
            if proc.poll() is not None:
                raise RuntimeError(f"sshd of {self.names[i]} exited with {proc.returncode}: {self.sshd_log(i)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of {self.names[i]} wrote no pid file within {timeout} s: "
                                   f"{self.sshd_log(i)}")
            time.sleep(0.02)

    def stop_sshd(self, i):
        """Stops host i's sshd (its listener; sessions it started end with their client)."""
        proc = self.sshd.pop(i, None)
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def sshd_log(self, i):
        try:
            with open(os.path.join(self.host_dir(i), "sshd.log"), errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-5:])
        except OSError:
            return ""

    def host_file(self, path, indices, slots=1):
        """A host file for scripts/launch: the ssh config's names, addr= their addresses."""
        with open(path, "w") as f:
            for i in indices:
                f.write(f"{self.names[i]} slots={slots} addr={self.address(i)}\n")
        return path

    def cut(self, i, up):
        sh("ip", "link", "set", self.outer[i], "up" if up else "down")

    def close(self):
        for i in list(self.sshd):
            self.stop_sshd(i)
        for ns in self.made_ns:
            sh("ip", "netns", "del", ns, check=False)
        for link in self.made_links:
            sh("ip", "link", "del", link, check=False)
        if self.made_privsep:
            try:
                os.rmdir(PRIVSEP_DIR)
            except OSError:
                pass


def write_known_hosts(path, keys):
    """known_hosts lines: ADDRESS TYPE KEY for each {address: (type, key)}."""
    with open(path, "w") as f:
        for address, (kind, key) in keys.items():
            f.write(f"{address} {kind} {key}\n")


def peer_pids(binary, run):
    """The pids of `hearsay peer` processes of run (a name unique to the test)."""
    literal = re.sub(r"([.+*?()\[\]{}|^$\\])", r"\\\1", binary)  # an ERE matching the path as it is
    p = sh("pgrep", "-f", f"^{literal} peer .*--run {run}( |$)", check=False)
    return [int(pid) for pid in p.stdout.split()]


def kill_peers(binary, run, timeout=15):
    """Waits for the run's peers to end (their launcher gone, they are asked to stop),
    then kills any left. Returns the pids that had to be killed."""
    deadline = time.monotonic() + timeout
    while peer_pids(binary, run) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = peer_pids(binary, run)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def started_by_sshd(pid):
    """Whether an sshd is among pid's ancestors."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return False
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name == "sshd":
            return True
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return False


def home_ssh_state():
    """The passwd home's ~/.ssh (what ssh would read): its files and their mtimes, or None
    when it does not exist; the lab must leave it as it found it."""
    import pwd
    home = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh")
    if not os.path.isdir(home):
        return None
    return {name: os.stat(os.path.join(home, name)).st_mtime_ns for name in sorted(os.listdir(home))}
