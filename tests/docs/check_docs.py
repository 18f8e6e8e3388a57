#!/usr/bin/env python3
"""Checks the commands that README.md, CONTRIBUTING.md and docs/*.md show against the programs.

- Every spmd-train / spmd-inspect / spmd-prepare command line in a code block uses only options
  its program (or subcommand) declares in --help.
- Every `$ spmd-inspect ...` block that shows output is run from the repository root, and each line
  it shows (other than "...") appears in the real output, in order.
- Every `bash scripts/X` or `bash bench/X` (and configs/... path) it names exists.
- Every training command (`spmd-train --config F [--set ...]`) is laid out by `spmd-inspect` with
  the same config and overrides, which must accept them (exit 0); every other `spmd-inspect`
  command is run as shown (but --calibrate, which times this machine for minutes). A command's
  `> FILE` goes to a scratch folder, where a later command's --config finds it.

Run by ctest as "docs: ..." with SPMD_BINARY_DIR and SPMD_SOURCE_DIR set. Prints each problem as
FILE:LINE: what; exit 1 if any.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

SRC = os.environ.get("SPMD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SPMD_BINARY_DIR", os.path.join(SRC, "build"))
PROGRAMS = ("spmd-train", "spmd-inspect", "spmd-prepare")
SUBCOMMANDS = {"spmd-train": ("sample", "eval", "export", "plot")}
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
        words = command_words(prog, text)
        if not words:
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


SCRATCH = tempfile.mkdtemp(prefix="check-docs-")


def command_words(prog, text):
    """The words of `prog`'s command in `text` (comments and pipes cut off), or None."""
    at = text.find(prog + " ")
    if at < 0 or (at > 0 and text[at - 1] not in " $(|`/"):
        return None
    try:
        return shlex.split(text[at:].split("#")[0].split("|")[0], posix=True)
    except ValueError:
        return None


def check_runs(path, n, text):
    words = command_words("spmd-train", text)
    if words and ("--config" in words or "-c" in words) and words[1] not in SUBCOMMANDS["spmd-train"]:
        # The config and overrides, laid out without training: the flags of the launch itself
        # (--nproc, --resume, ...) are checked against --help above.
        argv = [w for i, w in enumerate(words[1:], 1) if w in ("--config", "-c", "--set") or
                words[i - 1] in ("--config", "-c", "--set")]
        run_inspect(path, n, text, argv)
        return
    words = command_words("spmd-inspect", text)
    if words and "--calibrate" not in words and "..." not in words:
        run_inspect(path, n, text, words[1:])


def run_inspect(path, n, text, args):
    args = list(args)
    out_file = None
    if ">" in args:  # `... > FILE`: keep FILE for the commands after it
        out_file = os.path.join(SCRATCH, args[args.index(">") + 1])
        args = args[:args.index(">")]
    for i, w in enumerate(args[:-1]):
        if w in ("--config", "-c") and os.path.exists(os.path.join(SCRATCH, args[i + 1])):
            args[i + 1] = os.path.join(SCRATCH, args[i + 1])
    real = subprocess.run([os.path.join(BIN, "app", "spmd-inspect")] + args, capture_output=True, text=True,
                          cwd=SRC, timeout=300)
    if real.returncode != 0:
        last = (real.stderr.strip() or real.stdout.strip()).split("\n")[-1]
        problems.append(f"{path}:{n}: `{text.strip()}` is refused (spmd-inspect exit {real.returncode}): {last}")
    elif out_file:
        with open(out_file, "w") as f:
            f.write(real.stdout)


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
            check_runs(rel, n, text)
            if re.search(r"\bbash (scripts|bench)/", text):
                check_paths(rel, n, text)
        check_inspect_blocks(path, rel)
    for p in problems:
        print(p)
    print(f"check_docs: {len(docs)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
