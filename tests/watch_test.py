#!/usr/bin/env python3
"""`hearsay watch` read from a real terminal: tmux. Starts 4 peers with scripts/launch
--local (each serving --http on its own port, fast heartbeats), runs `hearsay watch` on
their addresses in a detached tmux session (160x40) and reads the screen with
capture-pane: all 4 peers shown with their steps advancing; one peer SIGKILLed must be
marked "no answer" and "dead per N peers" within the membership's --dead-after plus one
watch interval, while the 3 others keep advancing; `--once` off a terminal exits 0 while
all answer and 1 once one does not, and reads the launcher's targets file; a window made
narrow cuts every line to its width; Ctrl-C ends the watch with exit 0, the terminal back
from the alternate screen with its cursor, the last table left on it; SIGTERM too. Exits
77 (skipped) when tmux is not installed. --screens DIR keeps the captured screens.

  watch_test.py --binary build/bin/hearsay --launch scripts/launch [--screens DIR]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks, free_ports  # noqa: E402

SKIP = 77
PEERS = 4
INTERVAL_S = 0.5
HEARTBEAT_S = 0.25
DEAD_AFTER_S = 2.5
CAPTURE_EVERY_S = 0.2
KILLED = 2  # the rank killed: neither the seed (0) nor the last
# A table row: rank, host, state, then (for a peer that answers) epoch/epochs and step.
ROW = re.compile(r"^\s*(\d+)\s+(\S+)\s+(training|joining|waiting|held|paused|ending|starting)\s+(\d+)/\S+\s+(\d+)\s")
check = Checks("watch")


# Runs argv[2:], writes its pid to argv[1].pid and, when it ends, its exit status to argv[1].
WRAPPER = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
p = subprocess.Popen(sys.argv[2:])
open(sys.argv[1] + ".pid", "w").write(str(p.pid))
code = p.wait()
open(sys.argv[1] + ".tmp", "w").write(str(code))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class Tmux:
    """A tmux server of its own (-S, its socket in the test's directory), so that the
    user's sessions are never touched and nothing is left behind."""

    def __init__(self, work):
        self.work = work
        self.socket = os.path.join(work, "tmux.socket")
        self.conf = os.path.join(work, "tmux.conf")
        with open(self.conf, "w") as f:
            f.write("set -g remain-on-exit on\n")  # a watch that exits leaves its screen

    def run(self, *args, check_rc=True):
        p = subprocess.run(["tmux", "-S", self.socket, "-f", self.conf, *args], capture_output=True, text=True,
                           timeout=20)
        if check_rc and p.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def start(self, argv, raw, session="watch"):
        """argv in a 160x40 pane, under a small wrapper that writes its pid and, once it
        ended, its exit status to files (tmux itself sometimes never reaps a pane's
        process that had threads: a pane dead without a status). What argv writes to the
        terminal, escapes and all, also goes to the file `raw` when given (the cursor of a
        dead pane is tmux's, not the program's)."""
        status = os.path.join(self.work, f"{session}.status")
        # Several arguments: no shell in between; the wrapper ignores SIGINT, so that a
        # Ctrl-C is the watch's alone.
        self.run("new-session", "-d", "-s", session, "-x", "160", "-y", "40", sys.executable, "-c", WRAPPER, status,
                 *argv)
        if raw:
            self.run("pipe-pane", "-O", "-t", session, f"cat > {raw}")
        return status

    def screen(self, history=False, session="watch"):
        """The visible screen; with history, the lines scrolled off it too (tmux's "Pane is
        dead" line scrolls the screen by one)."""
        return self.run("capture-pane", "-p", "-t", session, *(["-S", "-100"] if history else []), check_rc=False)

    def pane(self, fmt, session="watch"):
        return self.run("display-message", "-p", "-t", session, fmt, check_rc=False).strip()

    def wait_exit(self, status_file, session, timeout=10):
        """'STATUS ALTERNATE_ON' once the wrapped program has ended (its exit status and
        whether the pane is still on the alternate screen), or 'none ...' at the timeout."""
        deadline = time.monotonic() + timeout
        status = read_text(status_file)
        while status is None and time.monotonic() < deadline:
            time.sleep(CAPTURE_EVERY_S)
            status = read_text(status_file)
        return f"{status or 'none'} {self.pane('#{alternate_on}', session)}"

    def kill(self):
        self.run("kill-server", check_rc=False)


def rows(screen):
    """{rank: (state, step)} of the peers that answer, and {rank: line} of every row."""
    answering, lines = {}, {}
    for line in screen.splitlines():
        m = re.match(r"^\s*(\d+)\s+(?:127\.0\.0\.1|localhost):\d+\s", line)
        if m:
            lines[int(m.group(1))] = line
        m = ROW.match(line)
        if m:
            answering[int(m.group(1))] = (m.group(3), int(m.group(5)))
    return answering, lines


def wait_screen(tmux, predicate, timeout, session="watch"):
    """Captures the screen every CAPTURE_EVERY_S (a terminal has nothing to wait on) until
    predicate(screen) holds; returns (screen, when) or (last screen, None)."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux.screen(session=session)
        if predicate(screen):
            return screen, time.monotonic()
        time.sleep(CAPTURE_EVERY_S)
    return screen, None


def advancing(tmux, ranks, timeout):
    """Whether every rank's step grows on screen within timeout; the last screen."""
    first, _ = wait_screen(tmux, lambda s: all(r in rows(s)[0] for r in ranks), timeout)
    base = rows(first)[0]
    if not all(r in base for r in ranks):
        return False, first

    def moved(s):
        now = rows(s)[0]
        return all(r in now and now[r][1] > base[r][1] for r in ranks)

    screen, when = wait_screen(tmux, moved, timeout)
    return when is not None, screen


def peer_pid(binary, http_port):
    """The pid of the peer serving --http on http_port (launch gives slot i PORT+i): the
    hearsay process itself, not the shell that launch --local wraps it in."""
    pattern = rf"^{re.escape(binary)} peer .*--http 127\.0\.0\.1:{http_port}( |$)"
    p = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    pids = [int(x) for x in p.stdout.split()]
    return pids[0] if len(pids) == 1 else None


def save(a, name, screen):
    print(f"--- screen: {name} ---\n{screen.rstrip()}\n---", flush=True)
    if a.screens:
        os.makedirs(a.screens, exist_ok=True)
        with open(os.path.join(a.screens, name + ".txt"), "w") as f:
            f.write(screen)


def once(a, urls):
    return subprocess.run([a.binary, "watch", "--once", "--interval", "500ms", *urls], capture_output=True,
                          text=True, timeout=30)


def terminal_restored(raw_path):
    """Whether the last alternate screen and hidden cursor the watch asked for were both
    given back: (ok, the escapes seen)."""
    try:
        with open(raw_path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return False, str(e)
    marks = [m.group(0).decode() for m in re.finditer(rb"\x1b\[\?(?:1049|25)[hl]", raw)]
    # (The first ones may come before pipe-pane started.)
    ok = (raw.rfind(b"\x1b[?1049l") > max(raw.rfind(b"\x1b[?1049h"), -1)
          and raw.rfind(b"\x1b[?25h") > max(raw.rfind(b"\x1b[?25l"), -1))
    return ok, " ".join(repr(m) for m in marks[-4:])


def scenario(a, tmux, urls, http, work):
    """Everything after the peers started; each step's failure is a check that failed."""
    raw = os.path.join(work, "pane.raw")
    exit_file = tmux.start([a.binary, "watch", "--interval", "500ms", *urls], raw)
    if all_four(a, tmux, urls, work) and killed_one(a, tmux, urls, http):
        the_terminal(a, tmux, urls, raw, exit_file)


def all_four(a, tmux, urls, work):
    """The 4 peers on screen, advancing; --once on their addresses and on the targets file."""
    ok, screen = advancing(tmux, range(PEERS), 120)
    save(a, "four-peers", screen)
    check("the screen shows all 4 peers training, their steps advancing", ok, screen)
    check("the header says 4/4 answering", "4/4 answering" in screen, screen)
    if not ok:
        return False
    p = once(a, urls)
    check("--once off a terminal: one table, exit 0 while every peer answers",
          p.returncode == 0 and len(rows(p.stdout)[1]) == PEERS and "\x1b" not in p.stdout,
          f"exit {p.returncode}\n{p.stdout}{p.stderr}")

    targets = os.path.join(work, "hearsay-targets.json")  # what scripts/launch writes for --http peers
    if os.path.exists(targets):
        p = once(a, [targets])
        check("--once on the launcher's targets file: the 4 peers by rank, with their host label",
              p.returncode == 0 and len(rows(p.stdout)[1]) == PEERS and "localhost:" in p.stdout,
              f"exit {p.returncode}\n{p.stdout}{p.stderr}")
    else:
        print(f"note: no {targets} (this scripts/launch writes no targets file); not read")
    return True


def killed_one(a, tmux, urls, http):
    """Rank KILLED SIGKILLed: marked in time, the others go on."""
    pid = peer_pid(a.binary, http + KILLED)
    check(f"found rank {KILLED}'s process", pid is not None, "pgrep found none or several")
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()

    def marked(s):
        line = rows(s)[1].get(KILLED, "")
        return "no answer" in line and re.search(r"dead per \d", line) is not None

    bound = DEAD_AFTER_S + INTERVAL_S + HEARTBEAT_S + CAPTURE_EVERY_S  # the membership ticks every heartbeat
    screen, when = wait_screen(tmux, marked, 30)
    took = None if when is None else when - killed_at
    save(a, "killed-peer", screen)
    check(f"the killed rank {KILLED} shows 'no answer' and 'dead per N peers' within --dead-after {DEAD_AFTER_S}s "
          f"+ one interval {INTERVAL_S}s (+ a heartbeat's tick and a capture: {bound:.2f}s): took "
          f"{'never' if took is None else f'{took:.2f}s'}", took is not None and took <= bound, screen)
    check("its reason is shown: connection refused", "connection refused" in rows(screen)[1].get(KILLED, ""), screen)
    screen, when = wait_screen(tmux, lambda s: "dead per 3 peers" in rows(s)[1].get(KILLED, ""), 10)
    check("every other peer says it is dead: 'dead per 3 peers'", when is not None, screen)
    check("the header says 3/4 answering", "3/4 answering" in screen, screen)
    others = [r for r in range(PEERS) if r != KILLED]
    ok, screen = advancing(tmux, others, 30)
    save(a, "three-advancing", screen)
    check("the 3 others keep advancing", ok, screen)
    p = once(a, urls)
    check("--once exits 1 when a peer does not answer, naming why",
          p.returncode == 1 and "connection refused" in p.stdout, f"exit {p.returncode}\n{p.stdout}{p.stderr}")
    return True


def the_terminal(a, tmux, urls, raw, exit_file):
    """A narrow window, Ctrl-C, and SIGTERM to a second watch."""
    tmux.run("resize-window", "-t", "watch", "-x", "72", "-y", "40")  # SIGWINCH: drawn again, cut to 72

    def narrow(s):
        lines = s.splitlines()
        return max(map(len, lines)) <= 72 and any(line.endswith("...") for line in lines) and "RANK" in s

    screen, when = wait_screen(tmux, narrow, 10)
    save(a, "narrow", screen)
    check("a terminal made narrow: every line cut to its 72 columns, ending in '...'", when is not None, screen)

    tmux.run("send-keys", "-t", "watch", "C-c")
    status = tmux.wait_exit(exit_file, "watch")
    screen = tmux.screen(history=True)
    save(a, "after-ctrl-c", screen)
    check("Ctrl-C ends the watch with exit 0, off the alternate screen", status == "0 0",
          f"exit status, alternate_on: {status!r}")
    restored = (False, "")
    deadline = time.monotonic() + 5
    while not restored[0] and time.monotonic() < deadline:  # pipe-pane's cat writes when it can
        restored = terminal_restored(raw)
        time.sleep(0 if restored[0] else CAPTURE_EVERY_S)
    check("its last escapes give the terminal back: normal screen, cursor shown", restored[0],
          f"last escapes written: {restored[1]}")
    check("the last table stays on the terminal", "answering" in screen and "RANK" in screen and
          len(rows(screen)[1]) == PEERS, screen)

    exit_file = tmux.start([a.binary, "watch", "--interval", "500ms", *urls], None, session="term")
    _, when = wait_screen(tmux, lambda s: "RANK" in s, 20, session="term")
    check("a second watch draws its table", when is not None, tmux.screen(session="term"))
    pid = read_text(exit_file + ".pid")
    if pid is None:
        check("the second watch's pid is known", False, "its wrapper wrote no pid file")
        return
    os.kill(int(pid), signal.SIGTERM)
    status = tmux.wait_exit(exit_file, "term")
    check("SIGTERM ends a watch the same way: exit 0, off the alternate screen", status == "0 0",
          f"exit status, alternate_on: {status!r}")


def stop_launch(launch):
    """SIGTERM to the launcher (it stops its peers), then SIGKILL to its whole group."""
    if launch.poll() is None:
        launch.send_signal(signal.SIGTERM)
        try:
            launch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(launch.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    launch.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--screens", help="write the captured screens into this directory")
    a = ap.parse_args()
    a.binary, a.launch = os.path.abspath(a.binary), os.path.abspath(a.launch)
    if shutil.which("tmux") is None:
        print("SKIPPED: tmux is not installed (scripts/setup installs it)")
        return SKIP
    ports = free_ports(2 * PEERS)
    listen, http = ports, ports + PEERS
    urls = [f"http://127.0.0.1:{http + i}" for i in range(PEERS)]
    with tempfile.TemporaryDirectory(prefix="hearsay-watch-") as work:
        tmux = Tmux(work)
        log = open(os.path.join(work, "launch.log"), "w+")
        launch = subprocess.Popen(
            [a.launch, "--local", str(PEERS), "--binary", a.binary, "--keys", os.path.join(work, "keys"), "--port",
             str(listen), "--", "--data", "synthetic", "--model", "mlp", "--epochs", "200", "--threads", "1",
             "--min-step-time", "40ms", "--http", f"127.0.0.1:{http}", "--heartbeat", f"{int(HEARTBEAT_S * 1000)}ms",
             "--suspect-after", "1s", "--dead-after", f"{int(DEAD_AFTER_S * 1000)}ms", "--log-every", "1",
             "--run", "watch-test"],
            cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            scenario(a, tmux, urls, http, work)
        finally:
            tmux.kill()
            stop_launch(launch)
            log.seek(0)
            print("--- launch output (last lines) ---\n" + "\n".join(log.read().splitlines()[-15:]))
            log.close()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
