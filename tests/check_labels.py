"""Every ctest test carries exactly one of the labels unit, process, slow, lab, cuda, and
the Catch2 binary's listed test cases are exactly its ctest tests (none fell between the
label discoveries of tests/CMakeLists.txt, no hidden one slipped in). Prints the offenders; exit 1 when there are any."""
import argparse
import json
import subprocess
import sys

LABELS = {"unit", "process", "slow", "lab", "cuda"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--catch", required=True, help="the Catch2 test binary whose test cases must all be tests")
    args = ap.parse_args()
    shown = subprocess.run([args.ctest, "--show-only=json-v1"], cwd=args.build_dir, capture_output=True,
                           text=True, check=True)
    tests = json.loads(shown.stdout)["tests"]
    problems = []
    names = set()
    for t in tests:
        names.add(t["name"])
        labels = set()
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels.update(p["value"])
        ours = sorted(labels & LABELS)
        if len(ours) != 1:
            problems.append(f"{t['name']!r}: labels {sorted(labels)}, want exactly one of {sorted(LABELS)}")
    listed = subprocess.run([args.catch, "--list-test-names-only"], capture_output=True, text=True)
    cases = [line for line in listed.stdout.splitlines() if line.strip()]
    for case in cases:
        if case not in names:
            problems.append(f"{case!r}: a test case of {args.catch} that is no ctest test")
    for t in tests:  # and the reverse: no hidden test case, no name split at a ";"
        command = t.get("command") or [""]
        if command[0] == args.catch and t["name"] not in cases:
            problems.append(f"{t['name']!r}: runs {args.catch} but is none of its listed test cases")
    for p in problems:
        print("FAIL " + p)
    print(f"{len(tests)} tests, {len(cases)} of them Catch2 test cases: "
          + (f"{len(problems)} problem(s)" if problems else "each has exactly one label"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
