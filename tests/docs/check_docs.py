#!/usr/bin/env python3
"""Checks the commands that README.md, CONTRIBUTING.md and docs/*.md show against the programs.

- Every spmd-train / spmd-inspect / spmd-prepare command line in a code block uses only options
  its program (or subcommand) declares in --help.
- Every `$ spmd-inspect ...` block that shows output is run from the repository root, and each line
  it shows (other than "...") appears in the real output, in order.
- Every `bash scripts/X` or `bash bench/X` (and configs/... path) it names exists.

Run by ctest as "docs: ..." with SPMD_BINARY_DIR and SPMD_SOURCE_DIR set. Prints each problem as
FILE:LINE: what; exit 1 if any.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

SRC = os.environ.get("SPMD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SPMD_BINARY_DIR", os.path.join(SRC, "build"))
PROGRAMS = ("spmd-train", "spmd-inspect", "spmd-prepare")
SUBCOMMANDS = {"spmd-train": ("sample", "export", "plot")}
problems = []


def code_lines(path):
    """(line number, text) of every line inside ``` fences or indented 4+ spaces after a blank line."""
    fenced, prev_blank, indented = False, True, False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        indented = (indented or prev_blank) and line.startswith("    ") and not fenced
        if fenced or indented:
            yield n, line
        prev_blank = not line.strip()


def joined(lines):
    """Joins backslash continuations; yields (first line number, command text)."""
    buf, start = "", None
    for n, text in lines:
        if start is None:
            start = n
        if text.rstrip().endswith("\\"):
            buf += text.rstrip()[:-1] + " "
            continue
        yield start, buf + text
        buf, start = "", None


_help = {}


def declared_options(prog, sub):
    key = (prog, sub)
    if key not in _help:
        argv = [os.path.join(BIN, "app", prog)] + ([sub] if sub else []) + ["--help"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
        _help[key] = set(re.findall(r"(--[a-z][a-z0-9-]*)", out)) | {"--help"}
    return _help[key]


def check_options(path, n, text):
    for prog in PROGRAMS:
        at = text.find(prog + " ")
        if at < 0 or (at > 0 and text[at - 1] not in " $(|`/"):
            continue
        try:
            words = shlex.split(text[at:].split("#")[0].split("|")[0], posix=True)
        except ValueError:
            continue
        sub = words[1] if len(words) > 1 and words[1] in SUBCOMMANDS.get(prog, ()) else None
        known = declared_options(prog, sub)
        for w in words[1:]:
            opt = w.split("=")[0]
            if opt.startswith("--") and re.fullmatch(r"--[a-z][a-z0-9-]*", opt) and opt not in known:
                problems.append(f"{path}:{n}: {prog}{' ' + sub if sub else ''} has no option {opt}: {text.strip()}")


def check_inspect_blocks(path, rel):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"\s*\$ (spmd-inspect .*)", lines[i])
        if not m:
            i += 1
            continue
        cmd, start = m.group(1), i + 1
        while cmd.rstrip().endswith("\\"):
            i += 1
            cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
        shown = []
        i += 1
        while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith(("```", "$ ")):
            shown.append(lines[i].rstrip())
            i += 1
        argv = shlex.split(cmd)
        argv[0] = os.path.join(BIN, "app", "spmd-inspect")
        real = subprocess.run(argv, capture_output=True, text=True, cwd=SRC, timeout=300)
        got = [l.rstrip() for l in (real.stdout + real.stderr).split("\n")]
        pos = 0
        for line in shown:
            if line.strip() in ("...", "…"):
                continue
            want = line.strip()
            found = next((k for k in range(pos, len(got)) if got[k].strip() == want), None)
            if found is None:
                problems.append(f"{rel}:{start}: `{cmd.strip()}` does not print (in this order): {want}")
                break
            pos = found + 1


def check_paths(path, n, text):
    for m in re.finditer(r"\b((?:scripts|bench|configs|datasets)/[\w./-]+\.?\w*)", text):
        p = m.group(1).rstrip(".,:;)")
        if "*" in p or "<" in p or p.endswith("/"):
            continue
        if not os.path.exists(os.path.join(SRC, p)) and not p.startswith(("datasets/", "configs/rates/mine")):
            problems.append(f"{path}:{n}: {p} does not exist")


def main():
    docs = [os.path.join(SRC, "README.md"), os.path.join(SRC, "CONTRIBUTING.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
    for path in docs:
        rel = os.path.relpath(path, SRC)
        for n, text in joined(code_lines(path)):
            check_options(rel, n, text)
            if re.search(r"\bbash (scripts|bench)/", text):
                check_paths(rel, n, text)
        check_inspect_blocks(path, rel)
    for p in problems:
        print(p)
    print(f"check_docs: {len(docs)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
