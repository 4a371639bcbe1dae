"""Named checks for the Python integration tests: each prints ok/FAIL with its detail,
and the test's exit status says whether any failed."""


class Checks:
    def __init__(self, name):
        self.name, self.failures = name, []

    def __call__(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else f"\n     {detail}"), flush=True)
        if not ok:
            self.failures.append(what)

    def exit_status(self):
        if self.failures:
            print(f"{len(self.failures)} check(s) failed")
            return 1
        print(f"all {self.name} checks passed")
        return 0


def free_ports(count, addresses=("127.0.0.1",)):
    """A first port P with P..P+count-1 free on every address (bound and released here; a
    test that starts servers on them soon after rarely meets another taker)."""
    import socket
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                for addr in addresses:
                    with socket.socket() as s:
                        s.bind((addr, port))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no run of {count} free ports on {', '.join(addresses)}")
