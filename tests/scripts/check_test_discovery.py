#!/usr/bin/env python3
"""Checks that no ctest entry can pass without running, and that a skip is reported as a skip.

- Every ctest entry made from a doctest binary (unit, integration, gpu, fuzz) names exactly one of
  that binary's cases (a ';' in a case name splits it into entries that match none), and carries
  SKIP_RETURN_CODE 77, the exit code of SPMD_SKIP (tests/support/skip.h).
- A filter that matches no case fails the binary (tests/support/doctest_main.cpp); a case that
  skips exits 77.
- No test prints a "SKIP" line of its own instead of calling SPMD_SKIP.

Usage: check_test_discovery.py BUILD_DIR SOURCE_DIR. Prints each problem; exit 1 if any.
"""
import json
import os
import re
import subprocess
import sys

build, source = sys.argv[1], sys.argv[2]
problems = []
shown = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True,
                                  check=True).stdout)
# ctest names the entries PREFIX + case name; CMake drops the space TEST_PREFIX ends with.
prefixes = {"unit:": "unit_tests", "integration:": "integration_tests", "gpu:": "gpu_tests", "fuzz:": "fuzz_tests"}
cases = {}
for prefix, binary in prefixes.items():
    path = os.path.join(build, "tests", binary) if binary != "fuzz_tests" else os.path.join(build, "tests", "fuzz", binary)
    if not os.path.exists(path):
        problems.append(f"{path}: not built")
        continue
    listed = subprocess.run([path, "--list-test-cases", "--no-version"], capture_output=True, text=True).stdout
    names = [line.strip() for line in listed.splitlines() if line.strip() and not line.startswith("[doctest]")
             and not line.startswith("=====")]
    cases[prefix] = (path, set(names))
    for name in names:
        if ";" in name:
            problems.append(f"{binary}: case '{name}' has a ';', which ctest splits into entries that run nothing")

entries = {prefix: [] for prefix in prefixes}
for test in shown["tests"]:
    prefix = next((p for p in prefixes if test["name"].startswith(p)), None)
    if prefix is None:
        continue
    entries[prefix].append(test["name"])
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    if str(props.get("SKIP_RETURN_CODE")) != "77":
        problems.append(f"ctest '{test['name']}': no SKIP_RETURN_CODE 77, so a skip would count as a pass")
    if prefix in cases and test["name"][len(prefix):] not in cases[prefix][1]:
        problems.append(f"ctest '{test['name']}': matches no case of {os.path.basename(cases[prefix][0])}")
for prefix, (path, names) in cases.items():
    missing = names - {e[len(prefix):] for e in entries[prefix]}
    for name in sorted(missing):
        problems.append(f"{os.path.basename(path)}: case '{name}' has no ctest entry")

# The runner's own guards, shown to work.
if "unit:" in cases:
    unit = cases["unit:"][0]
    r = subprocess.run([unit, "--test-case=no case has this name"], capture_output=True, text=True)
    if r.returncode == 0:
        problems.append("unit_tests with a filter that matches no case exited 0")
    r = subprocess.run([unit, "--test-case=suite: a case that skips makes its run exit 77"], capture_output=True,
                       text=True, env={**os.environ, "SPMD_SELF_TEST_SKIP": "1"})
    if r.returncode != 77 or "SKIP: " not in r.stdout:
        problems.append(f"a skipping case's run exited {r.returncode}, not 77:\n{r.stdout}{r.stderr}")

own_skip = re.compile(r'(MESSAGE|printf|std::cout)\s*\(\s*"SKIP')
for folder in ("unit", "integration", "gpu", "fuzz", "support"):
    for dirpath, _, files in os.walk(os.path.join(source, "tests", folder)):
        for name in files:
            path = os.path.join(dirpath, name)
            if name == "doctest_main.cpp":  # where SPMD_SKIP's line is printed
                continue
            for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                if own_skip.search(line):
                    problems.append(f"{os.path.relpath(path, source)}:{number}: prints its own SKIP line; use SPMD_SKIP")
for p in problems:
    print(p)
print(f"checked {sum(len(v) for v in entries.values())} ctest entries of doctest binaries: "
      f"{'problems above' if problems else 'each runs one case; skips exit 77'}")
sys.exit(1 if problems else 0)
