"""The remote shell of a launch (scripts/launch): how a command reaches a host, the
check every host passes before anything starts, and what ssh's errors mean.

Every remote command goes through --rsh. ssh (the default) gets the launcher's ssh
options: --ssh-config FILE (ssh -F: Host entries with HostName, User, IdentityFile,
UserKnownHostsFile), --known-hosts FILE (the host keys to trust) and
--accept-new-host-keys (trust a host's key on first contact; a changed key is still
refused). The launcher runs ssh with BatchMode=yes, so it never prompts: a host that
would ask for a password, or whose host key is unknown or changed, fails the check,
and ssh's stderr is turned into one line that says what is wrong and what to do.
"""
import os
import re
import shlex
import shutil
import subprocess

from launch_plan import UsageError

SSH_COMMANDS = ("ssh", "autossh")  # take ssh's options (-F, -o)


def add_ssh_arguments(ap):
    """The ssh options of scripts/launch's parser."""
    ap.add_argument("--ssh-config", metavar="FILE",
                    help="ssh client config for the hosts (ssh -F FILE: Host NAME with HostName, User, IdentityFile, "
                         "UserKnownHostsFile, ...), read instead of ~/.ssh/config and /etc/ssh/ssh_config")
    ap.add_argument("--known-hosts", metavar="FILE",
                    help="the hosts' ssh host keys, in known_hosts format (ssh -o UserKnownHostsFile=FILE, which "
                         "wins over --ssh-config's; default: the file ssh reads, ~/.ssh/known_hosts)")
    ap.add_argument("--accept-new-host-keys", action="store_true",
                    help="trust a host whose key is not known yet and record its key (StrictHostKeyChecking="
                         "accept-new); a host whose key changed is still refused")


def remote_shell(args):
    """The RemoteShell scripts/launch's flags describe."""
    return RemoteShell(args.rsh, args.rsh_mode, ssh_config=args.ssh_config, known_hosts=args.known_hosts,
                       accept_new_host_keys=args.accept_new_host_keys)


class RemoteShell:
    def __init__(self, rsh, mode, ssh_config=None, known_hosts=None, accept_new_host_keys=False):
        self.argv = shlex.split(rsh)
        if not self.argv:
            raise UsageError("--rsh is empty")
        if shutil.which(self.argv[0]) is None:
            raise UsageError(f"--rsh: '{self.argv[0]}' is not a command here")
        if mode == "auto":
            mode = "string" if os.path.basename(self.argv[0]) in ("ssh", "rsh", "autossh") else "argv"
        self.mode = mode
        self.text = rsh
        self.is_ssh = os.path.basename(self.argv[0]) in SSH_COMMANDS
        self.ssh_config, self.known_hosts = ssh_config, known_hosts
        self.options = self.ssh_options(ssh_config, known_hosts, accept_new_host_keys)

    def ssh_options(self, ssh_config, known_hosts, accept_new):
        given = [flag for flag, value in (("--ssh-config", ssh_config), ("--known-hosts", known_hosts),
                                          ("--accept-new-host-keys", accept_new)) if value]
        if not given:
            return []
        if not self.is_ssh:
            raise UsageError(f"{given[0]} is an ssh option, but the remote shell is '{self.text}': "
                             "leave it out, or use ssh (the default --rsh)")
        options = []
        if ssh_config:
            if not os.path.isfile(ssh_config) or not os.access(ssh_config, os.R_OK):
                raise UsageError(f"--ssh-config {ssh_config}: no readable file there")
            self.ssh_config = os.path.abspath(ssh_config)
            options += ["-F", self.ssh_config]
        if known_hosts:
            self.known_hosts = os.path.abspath(known_hosts)
            if not os.path.isdir(os.path.dirname(self.known_hosts)):
                raise UsageError(f"--known-hosts {known_hosts}: its directory does not exist")
            # ssh splits the value at spaces (several files); quotes keep one path whole.
            path = f'"{self.known_hosts}"' if re.search(r"\s", self.known_hosts) else self.known_hosts
            options += ["-o", f"UserKnownHostsFile={path}"]
        if accept_new:
            options += ["-o", "StrictHostKeyChecking=accept-new"]
        return options

    def command(self, host, argv):
        """The local argv that runs `argv` on host."""
        if self.mode == "string":
            return self.argv + self.options + [host, " ".join(shlex.quote(a) for a in argv)]
        return self.argv + self.options + [host] + list(argv)


class LocalShell:
    """--local: the commands run here, as they are."""
    mode = "argv"
    text = "this machine"
    is_ssh = False

    def command(self, host, argv):
        return list(argv)


def last_error_line(stderr, returncode):
    """What a failed remote command said last, for the one-line error naming its host."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    return (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]


# ---------------------------------------------------------------------------------------
# ssh's errors, as one line each: what is wrong, and what to do. ssh exits 255 on its own
# errors; its messages (as OpenSSH 9 words them) are matched in order, the most specific first.


def ssh_reason(text, host, rsh):
    """Why ssh could not run a command on host (text: ssh's stderr), in one line; None
    when ssh's stderr says nothing this knows."""
    config = f" -F {shlex.quote(rsh.ssh_config)}" if getattr(rsh, "ssh_config", None) else ""
    known = getattr(rsh, "known_hosts", None)
    m = re.search(r"Permissions (\S+) for '([^']+)' are too open", text)
    if m and "Permission denied" in text:
        return (f"ssh ignored the key {m.group(2)}: its permissions {m.group(1)} are too open "
                f"(chmod 600 {shlex.quote(m.group(2))})")
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        m = re.search(r"Host key for (\S+) has changed", text)
        name = m.group(1) if m else host
        m = re.search(r"Offending \S+ key in (\S+):(\d+)", text)
        where = f"{m.group(1)}:{m.group(2)}" if m else "known_hosts"
        target = f"-f {shlex.quote(m.group(1))} " if m else ""
        return (f"its ssh host key changed: {where} holds another key for {name} (a reinstalled host, or "
                f"someone in between); check the new key with whoever runs it, then remove the old one: "
                f"ssh-keygen {target}-R {shlex.quote(name)}")
    m = re.search(r"No (\S+) host key is known for (\S+) and you have requested strict checking", text)
    if m or "Host key verification failed" in text:
        name = m.group(2) if m else host
        known = known or ssh_setting(rsh, host, "userknownhostsfile") or "known_hosts"
        return (f"its ssh host key is not known here (no key for {name} in {known}): check its fingerprint and "
                f"add it (ssh-keyscan {name} >> {known}), or pass --accept-new-host-keys to trust it on first contact")
    m = re.search(r"(\S+): Permission denied \(([^)]*)\)", text)
    if m:
        who, methods = m.group(1), m.group(2)
        copy = f"ssh-copy-id{config} {shlex.quote(host)}"
        if "password" in methods or "keyboard-interactive" in methods:
            return (f"ssh to {who} would ask for a password, which the launcher cannot type: the host did not "
                    f"accept our key (it offers {methods}); install the key there once: {copy} "
                    "(add -i KEY.pub for a key other than ~/.ssh/id_*)")
        return (f"ssh to {who} was refused: the host did not accept our key (it offers {methods}); add our "
                f"public key to its authorized_keys ({copy}) or set IdentityFile to the right key")
    if "Too many authentication failures" in text:
        return ("ssh offered too many keys before the right one and the host hung up: set IdentitiesOnly yes "
                "and IdentityFile for it (in --ssh-config)")
    m = re.search(r"connect to host (\S+) port (\d+): (.+)", text)
    if m:
        addr, port, why = m.group(1), m.group(2), m.group(3).strip()
        low = why.lower()
        if "refused" in low:
            return f"no ssh server answers at {addr}:{port} ({low}): is sshd running there?"
        if "timed out" in low:
            return (f"no answer from {addr}:{port} ({low}): is the host up, and port {port} open in its "
                    "firewall?")
        if "no route" in low or "unreachable" in low:
            return f"cannot reach {addr} ({low}): is the host up, and on a network this machine reaches?"
        return f"cannot connect to {addr}:{port} ({low})"
    m = re.search(r"Could not resolve hostname (\S+?):? (.+)", text)
    if m:
        return (f"the name '{m.group(1)}' does not resolve ({m.group(2).strip()}): fix it in the host file, or "
                "give it a Host entry with HostName in --ssh-config")
    if re.search(r"Connection closed by|Connection reset by|kex_exchange_identification", text):
        return ("the ssh server closed the connection before login (its MaxStartups, a TCP wrapper or a "
                f"firewall): look at its sshd log ({last_error_line(text, 255)})")
    m = re.search(r"Bad owner or permissions on (\S+)", text)
    if m:
        return (f"ssh refuses {m.group(1)}: bad owner or permissions (it must be yours, writable by you only: "
                f"chmod 600 {shlex.quote(m.group(1))})")
    m = re.search(r"Can't open user config file (\S+): (.+)", text)
    if m:
        return f"ssh cannot read its config {m.group(1)} ({m.group(2).strip()})"
    return None


def ssh_setting(rsh, host, name):
    """The first value of an ssh setting for host, as ssh resolves it (ssh -G), or None."""
    if os.path.basename(getattr(rsh, "argv", [""])[0]) != "ssh":
        return None
    try:
        p = subprocess.run(rsh.argv + rsh.options + ["-G", host], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in p.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.split():
            return value.split()[0]
    return None


PREFLIGHT = r'''
binary=$1
if [ ! -x "$binary" ] && ! command -v "$binary" >/dev/null 2>&1; then echo "hearsay-preflight missing-binary"; exit 0; fi
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
echo "hearsay-preflight ok gpus=${gpus:-0}"
'''


def preflight(rsh, host, binary, timeout):
    """Checks that host answers through rsh and has the binary; learns its GPU count."""
    cmd = rsh.command(host.name, ["sh", "-c", PREFLIGHT, "hearsay-preflight", binary])
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"host '{host.name}': no answer through '{rsh.text}' within {timeout:.0f} s (is it up and reachable?)"
    except OSError as e:
        return f"host '{host.name}': cannot run '{rsh.text}': {e.strerror}"
    words = p.stdout.split()
    if "hearsay-preflight" not in words:
        reason = ssh_reason(p.stderr, host.name, rsh) if rsh.is_ssh and p.returncode == 255 else None
        if reason:
            return f"host '{host.name}': {reason}"
        return f"host '{host.name}': unreachable through '{rsh.text}': {last_error_line(p.stderr, p.returncode)}"
    if "missing-binary" in words:
        return (f"host '{host.name}': {binary} is not there or not executable "
                "(install hearsay on it, or pass --binary with its path there)")
    for w in words:
        if w.startswith("gpus="):
            host.gpus = int(w[5:]) if w[5:].isdigit() else 0
    if host.slots is None:
        host.slots = max(1, host.gpus)
    return None
