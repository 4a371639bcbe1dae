"""Prometheus file_sd targets for the peers of a launch (scripts/launch --targets).

A peer started with --http [HOST]:PORT serves /metrics there; the launcher knows where
every peer runs, so it writes the one file Prometheus needs to find them all:

    [{"targets": ["10.0.0.11:9100"],
      "labels": {"run": "hearsay", "rank": "0", "host": "lab-a", "algorithm": "gossip"}}, ...]

(Prometheus's file_sd_configs format; `hearsay watch FILE` reads it too.) A peer that
listens on every interface (":9100", "0.0.0.0:9100") is reached at its host's addr=.
The run id and algorithm are what the peers themselves run with: the flags, and a
--config file if one is given, as `hearsay peer --print-config` resolves them.
"""
import json
import os
import subprocess
import tempfile
import tomllib

from launch_plan import bracket, flag_values

ANY_INTERFACE = ("", "0.0.0.0", "::", "[::]", "*")


def http_value(argv):
    """The value of --http in a peer's command line, or None."""
    value = None
    for index, name in flag_values(argv):
        if name == "--http":
            value = argv[index].partition("=")[2] if argv[index].startswith("--http=") else argv[index]
    return value


def endpoint(http, host_addr):
    """'HOST:PORT' Prometheus scrapes for a peer's --http value on a host reached at host_addr;
    None when the port is 0 (the system picks it: only the peer knows)."""
    host, colon, port = http.rpartition(":")
    if not colon:
        host, port = "", http
    if not port.isdigit() or int(port) == 0:
        return None
    if host in ANY_INTERFACE:
        host = bracket(host_addr)
    return f"{host}:{port}"


def run_and_algorithm(local_binary, peer_flags):
    """(run id, algorithm) the peers run with. With a hearsay binary here, its own answer
    (--print-config: flags and --config file resolved as a peer resolves them); without
    one, the flags as given, with hearsay peer's defaults."""
    if local_binary:
        try:
            p = subprocess.run([local_binary, "peer", "--print-config", *peer_flags], capture_output=True,
                               text=True, timeout=30)
            if p.returncode == 0:
                settings = tomllib.loads(p.stdout)
                return (settings.get("network", {}).get("run", "hearsay"),
                        settings.get("mixing", {}).get("algo", "gossip"))
        except (OSError, subprocess.TimeoutExpired, tomllib.TOMLDecodeError):
            pass
    run, algo = "hearsay", "gossip"
    for index, name in flag_values(peer_flags):
        value = peer_flags[index].partition("=")[2] if peer_flags[index].startswith(name + "=") else peer_flags[index]
        if name == "--run":
            run = value
        elif name == "--algo":
            algo = value
    return run, algo


def targets(peers, run, algo):
    """The file_sd entries of the peers that serve --http on a known port, and the ranks
    that do not (port 0)."""
    entries, unknown = [], []
    for p in peers:
        http = http_value(p.argv)
        if http is None:
            continue
        where = endpoint(http, p.host.addr)
        if where is None:
            unknown.append(p.rank)
            continue
        entries.append({"targets": [where],
                        "labels": {"run": run, "rank": str(p.rank), "host": p.host.name, "algorithm": algo}})
    return entries, unknown


def write_targets(path, entries):
    """Writes the file whole or not at all: Prometheus re-reads it when it changes, and a
    half-written file would drop every target until the next write."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".targets-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
