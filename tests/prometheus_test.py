#!/usr/bin/env python3
"""A real Prometheus scrapes a 4-peer run: scripts/launch --local 4 with --http writes the
file_sd targets file, Debian's prometheus (monitoring/prometheus.yml, scraping every 1 s)
finds the peers in it, and its HTTP API must hold every peer's hearsay_* series (steps,
loss, accuracy, consensus distance, bytes, live members, dropped messages by reason),
labelled run, rank, host and algorithm. Each scraped value is checked against the peer's
own metrics lines: a scrape at uptime u lies between the lines logged just before and
just after u (one log interval). Every query of the Grafana dashboard
(monitoring/grafana-dashboard.json) must answer with a series per peer. Exits 77
(skipped) with the reason when prometheus is not installed.

  prometheus_test.py --binary build/bin/hearsay --launch scripts/launch --monitoring monitoring
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import Checks, free_ports  # noqa: E402

SKIP = 77
PEERS = 4
LOG_EVERY_S = 1
SERIES = ("hearsay_step", "hearsay_epoch", "hearsay_train_loss", "hearsay_train_accuracy",
          "hearsay_partner_distance", "hearsay_sent_bytes_total", "hearsay_received_bytes_total",
          "hearsay_live_members", "hearsay_dropped_messages_total")


class Prometheus:
    def __init__(self, binary, config, work):
        self.port = free_ports(1)
        self.log = open(os.path.join(work, "prometheus.log"), "w")
        self.proc = subprocess.Popen([binary, f"--config.file={config}",
                                      f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path, **params):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def query(self, expr):
        """The API's result list for an instant query (vector or matrix)."""
        answer = json.loads(self.get("/api/v1/query", query=expr))
        if answer.get("status") != "success":
            raise RuntimeError(f"{expr}: {answer}")
        return answer["data"]["result"]

    def ready(self):
        try:
            self.get("/-/ready")
            return True
        except OSError:
            return False

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_until(what, condition, timeout, every=0.5):
    """Polls condition() until it is true; None when the deadline passes (the deadline only
    bounds a hang: a busy machine is slower, it does not fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    print(f"  (gave up waiting for {what} after {timeout:.0f} s)", flush=True)
    return None


def metrics_lines(path):
    lines = []
    try:
        with open(path) as f:
            for raw in f:
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError:
                    continue  # the line being written
                if record.get("type") == "metrics":
                    lines.append(record)
    except OSError:
        pass
    return lines


def scrapes_of(prom, run):
    """{rank: {timestamp: {series: value}}}: the raw samples of the last 5 minutes, one dict
    per scrape (every series of one scrape carries its timestamp)."""
    names = "|".join(n[len("hearsay_"):] for n in ("hearsay_uptime_seconds", "hearsay_step",
                                                    "hearsay_train_loss", "hearsay_sent_bytes_total",
                                                    "hearsay_received_bytes_total"))
    out = {}
    for series in prom.query(f'{{__name__=~"hearsay_({names})",run="{run}"}}[5m]'):
        rank = int(series["metric"]["rank"])
        for ts, value in series["values"]:
            out.setdefault(rank, {}).setdefault(ts, {})[series["metric"]["__name__"]] = float(value)
    return out


def check_against_lines(check, rank, scrapes, lines):
    """Each scrape at uptime u against the metrics lines around u: step and byte counters
    between the line before (or the one before that: a scrape may fall between a line's
    reading and its publication) and the line after; the loss, which the peer publishes
    with its line, equal to one of those two lines'."""
    times = [line["time_s"] for line in lines]
    compared, wrong = 0, []
    for ts, s in sorted(scrapes.items()):
        if len(s) < 5:
            continue
        u = s["hearsay_uptime_seconds"]
        after = next((i for i, t in enumerate(times) if t >= u), None)
        before = max((i for i, t in enumerate(times) if t <= u), default=None)
        if after is None or before is None:
            continue  # before the first line or after the last: nothing to bracket it
        lo = lines[max(0, before - 1)]
        hi = lines[after]
        compared += 1
        for name, key in (("hearsay_step", "step"), ("hearsay_sent_bytes_total", "bytes_sent"),
                          ("hearsay_received_bytes_total", "bytes_received")):
            if not lo[key] <= s[name] <= hi[key]:
                wrong.append(f"uptime {u:.2f}: {name} {s[name]:.0f} not in [{lo[key]}, {hi[key]}]")
        if s["hearsay_train_loss"] not in (lines[before]["loss"], lo["loss"]):
            wrong.append(f"uptime {u:.2f}: hearsay_train_loss {s['hearsay_train_loss']!r} is neither line's "
                         f"({lines[before]['loss']!r}, {lo['loss']!r})")
    check(f"rank {rank}: {compared} scrapes match its own metrics lines within one log interval",
          compared >= 5 and not wrong, f"{compared} compared; " + "; ".join(wrong[:5]))


def check_dashboard(check, prom, path, run):
    with open(path) as f:
        dashboard = json.load(f)
    queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    check("the dashboard has queries", len(queries) >= 6, str(queries))
    for title, expr in queries:
        concrete = expr.replace("$run", run).replace("$__rate_interval", "10s")
        try:
            ranks = {s["metric"].get("rank") for s in prom.query(concrete)}
        except (OSError, RuntimeError) as e:
            ranks = {f"error: {e}"}
        check(f"dashboard '{title}': {concrete} answers for every peer",
              ranks == {str(r) for r in range(PEERS)}, f"ranks {sorted(map(str, ranks))}")


def check_series(check, prom, run):
    for name in SERIES:
        result = prom.query(f'{name}{{run="{run}"}}')
        ranks = {s["metric"].get("rank") for s in result}
        labels_ok = all(s["metric"].get("host") == "localhost" and s["metric"].get("algorithm") == "gossip"
                        for s in result)
        check(f"{name}: a series for every peer, labelled run, rank, host, algorithm",
              ranks == {str(r) for r in range(PEERS)} and labels_ok, json.dumps(result)[:400])
    reasons = prom.query(f'count by (rank) (hearsay_dropped_messages_total{{run="{run}"}})')
    check("hearsay_dropped_messages_total: every peer reports each reason",
          len(reasons) == PEERS and len({s["value"][1] for s in reasons}) == 1 and int(reasons[0]["value"][1]) >= 3,
          json.dumps(reasons))


def check_sim(check, prom, binary, work):
    """hearsay sim --http: its peers are found through OUT/prometheus-targets.json."""
    out = os.path.join(work, "sim")
    sim = subprocess.Popen([binary, "sim", "--peers", str(PEERS), "--algo", "dpsgd", "--model", "mlp", "--data",
                            "synthetic", "--epochs", "3", "--step-time", "60ms", "--http", str(free_ports(PEERS)),
                            "--no-progress", "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        def scraped():
            result = prom.query('hearsay_step{algorithm="dpsgd",run=~"sim-dpsgd-.*"} > 0')
            return len({s["metric"]["rank"] for s in result}) == PEERS and result
        found = wait_until("the simulator's 4 peers scraped", scraped, 120)
        check("hearsay sim --http: prometheus scrapes its 4 peers through OUT/prometheus-targets.json",
              found and all(s["metric"]["host"] == "127.0.0.1" for s in found),
              json.dumps(prom.query('up{job="hearsay"}'))[:600])
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGINT)
        try:
            sim.wait(timeout=120)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()


def start_run(a, work, run, http_port):
    targets_dir = os.path.join(work, "targets")
    os.makedirs(targets_dir)
    flags = ["--data", "synthetic", "--model", "mlp", "--epochs", "1000", "--time-budget", "90s",
             "--min-step-time", "40ms", "--http", f"127.0.0.1:{http_port}", "--log-every", str(LOG_EVERY_S),
             "--metrics", os.path.join(work, "metrics.jsonl"), "--run", run, "--algo", "gossip"]
    log = open(os.path.join(work, "launch.log"), "w")
    proc = subprocess.Popen([a.launch, "--local", str(PEERS), "--binary", a.binary, "--keys",
                             os.path.join(work, "keys"), "--port", str(free_ports(PEERS)), "--targets",
                             os.path.join(targets_dir, f"{run}.json"), "--", *flags],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--launch", required=True)
    ap.add_argument("--monitoring", required=True, help="the repository's monitoring/ directory")
    ap.add_argument("--prometheus", default=shutil.which("prometheus"))
    a = ap.parse_args()
    if not a.prometheus:
        print("SKIPPED: prometheus is not installed (Debian package prometheus; scripts/setup installs it)")
        return SKIP
    a.binary = os.path.abspath(a.binary)
    check = Checks("prometheus")
    run = f"prom-test-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="hearsay-prometheus-") as work:
        with open(os.path.join(a.monitoring, "prometheus.yml")) as f:
            config = f.read().replace("scrape_interval: 5s", "scrape_interval: 1s")
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(config.replace("refresh_interval: 5s", "refresh_interval: 1s")
                    .replace('files: ["targets/*.json"]', 'files: ["targets/*.json", "sim/prometheus-targets.json"]'))
        http_port = free_ports(PEERS)
        proc, log = start_run(a, work, run, http_port)
        prom = Prometheus(a.prometheus, os.path.join(work, "prometheus.yml"), work)
        try:
            check("prometheus is ready", wait_until("prometheus /-/ready", prom.ready, 60) is not None,
                  open(os.path.join(work, "prometheus.log")).read()[-2000:])
            up = wait_until("4 targets up", lambda: len(prom.query('up{job="hearsay"} == 1')) == PEERS, 120)
            check("prometheus found the 4 peers in the launcher's targets file and scrapes them", up,
                  json.dumps(prom.query('up{job="hearsay"}'))[:600])
            # Enough scrapes of training for the comparison: 12 s of steps at every peer.
            trained = wait_until("12 scrapes of training at every peer", lambda: len(prom.query(
                f'count_over_time(hearsay_step{{run="{run}"}}[1m]) >= 12 and hearsay_step{{run="{run}"}} > 0'))
                == PEERS, 150)
            check("every peer trained under scraping", trained)
            check_series(check, prom, run)
            scrapes = scrapes_of(prom, run)
            last = {r: max((s.get("hearsay_uptime_seconds", 0) for s in scrapes.get(r, {}).values()), default=0)
                    for r in range(PEERS)}
            wait_until("a metrics line after the last scrape read, at every peer", lambda: all(
                any(line["time_s"] >= last[r] for line in metrics_lines(os.path.join(work, f"metrics-{r}.jsonl")))
                for r in range(PEERS)), 30)
            for rank in range(PEERS):
                lines = metrics_lines(os.path.join(work, f"metrics-{rank}.jsonl"))
                check_against_lines(check, rank, scrapes.get(rank, {}), lines)
            check_dashboard(check, prom, os.path.join(a.monitoring, "grafana-dashboard.json"), run)
            check_sim(check, prom, a.binary, work)
        finally:
            prom.stop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            log.close()
            with open(os.path.join(work, "launch.log")) as f:
                tail = f.read().splitlines()[-8:]
            print("launch output (last lines):\n  " + "\n  ".join(tail), flush=True)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
