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
