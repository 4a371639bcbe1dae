#!/usr/bin/env python3
"""scripts/launch_remote.py's reading of ssh's errors, for the ones the lab tests cannot
cause on every machine (a timeout, a name that does not resolve, a key file others can
read): ssh's own messages (OpenSSH 9) in, one line with what to do out. The lab tests
(lab_ssh_failures_test.py) cause the others for real. Also the ssh options' place in the
command and their refusal for a remote shell that is not ssh.

  launch_remote_test.py --scripts scripts
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks  # noqa: E402

check = Checks("launch ssh errors")

# (what, ssh's stderr, the reason it must read as)
CASES = [
    ("a connection timeout", "ssh: connect to host 10.0.0.9 port 22: Connection timed out\n",
     r"^no answer from 10\.0\.0\.9:22 \(connection timed out\): is the host up, and port 22 open in its firewall\?$"),
    ("a name that does not resolve", "ssh: Could not resolve hostname lab-x: Name or service not known\n",
     r"^the name 'lab-x' does not resolve \(Name or service not known\): fix it in the host file, or give it a "
     r"Host entry with HostName in --ssh-config$"),
    ("no DNS at all", "ssh: Could not resolve hostname lab-x: Temporary failure in name resolution\n",
     r"^the name 'lab-x' does not resolve \(Temporary failure in name resolution\)"),
    ("a network this machine has no route to", "ssh: connect to host 10.9.0.1 port 22: Network is unreachable\n",
     r"^cannot reach 10\.9\.0\.1 \(network is unreachable\): is the host up"),
    ("sshd down", "ssh: connect to host 10.0.0.9 port 2222: Connection refused\n",
     r"^no ssh server answers at 10\.0\.0\.9:2222 \(connection refused\): is sshd running there\?$"),
    ("a private key others can read",
     "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
     "@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @\n"
     "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
     "Permissions 0644 for '/home/u/.ssh/lab' are too open.\n"
     "It is required that your private key files are NOT accessible by others.\n"
     "This private key will be ignored.\n"
     'Load key "/home/u/.ssh/lab": bad permissions\n'
     "u@10.0.0.1: Permission denied (publickey).\n",
     r"^ssh ignored the key /home/u/\.ssh/lab: its permissions 0644 are too open \(chmod 600 /home/u/\.ssh/lab\)$"),
    ("a key the host does not take, and no passwords", "u@10.0.0.1: Permission denied (publickey).\n",
     r"^ssh to u@10\.0\.0\.1 was refused: the host did not accept our key \(it offers publickey\); .*"
     r"ssh-copy-id -F /lab/ssh_config lab-a"),
    ("a host key not known, asked in BatchMode", "Host key verification failed.\n",
     r"^its ssh host key is not known here \(no key for lab-a in /lab/known_hosts\): check its fingerprint and "
     r"add it \(ssh-keyscan lab-a >> /lab/known_hosts\), or pass --accept-new-host-keys"),
    ("an sshd that hangs up before login",
     "kex_exchange_identification: read: Connection reset by peer\nConnection reset by 10.0.0.1 port 22\n",
     r"^the ssh server closed the connection before login .*Connection reset by 10\.0\.0\.1 port 22\)$"),
    ("an ssh config others may write", "Bad owner or permissions on /lab/ssh_config\n",
     r"^ssh refuses /lab/ssh_config: bad owner or permissions \(.*chmod 600 /lab/ssh_config\)$"),
]


class Shell:
    is_ssh = True
    ssh_config = "/lab/ssh_config"
    known_hosts = "/lab/known_hosts"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scripts", required=True, help="the scripts/ directory (launch_remote.py)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.scripts))
    from launch_remote import RemoteShell, ssh_reason
    from launch_plan import UsageError

    for what, stderr, expected in CASES:
        reason = ssh_reason(stderr, "lab-a", Shell())
        check(f"{what} reads as one line with what to do",
              reason is not None and "\n" not in reason and re.search(expected, reason) is not None, repr(reason))
    check("an error ssh's stderr does not explain is left to the plain last line",
          ssh_reason("something else went wrong\n", "lab-a", Shell()) is None)

    ssh = RemoteShell("ssh -o BatchMode=yes", "auto", ssh_config=__file__, known_hosts="/tmp/kh",
                      accept_new_host_keys=True)
    cmd = ssh.command("lab-a", ["sh", "-c", "echo hi"])
    check("the ssh options go before the host, the command is one string after it",
          cmd == ["ssh", "-o", "BatchMode=yes", "-F", os.path.abspath(__file__), "-o", "UserKnownHostsFile=/tmp/kh",
                  "-o", "StrictHostKeyChecking=accept-new", "lab-a", "sh -c 'echo hi'"], str(cmd))
    plain = RemoteShell("ssh -o BatchMode=yes", "auto")
    check("without them the ssh command is as it was",
          plain.command("lab-a", ["true"]) == ["ssh", "-o", "BatchMode=yes", "lab-a", "true"])
    try:
        RemoteShell("env", "auto", known_hosts="/tmp/kh")
        refused = None
    except UsageError as e:
        refused = str(e)
    check("an ssh option with a remote shell that is not ssh is refused, naming both",
          refused is not None and "--known-hosts is an ssh option" in refused and "'env'" in refused, str(refused))
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
