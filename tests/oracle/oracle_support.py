"""Shared by the oracle tests: where the binaries are, a temp dir, running a command with a
deadline, and the skip protocol (exit 77 when an oracle package is missing)."""
import importlib
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("SPMD_BINARY_DIR", os.getcwd())
SRC = os.environ.get("SPMD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def require(*modules):
    """Imports the oracle packages, or reports the test skipped (ctest SKIP_RETURN_CODE 77)."""
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as e:
            print(f"SKIP: oracle package {name} missing ({e}); run bash scripts/setup-oracles")
            sys.exit(77)
    return loaded[0] if len(loaded) == 1 else loaded


def tool(name):
    return os.path.join(BIN, "app", name)


def run(cmd, timeout=300, check=True, **kw):
    """Runs cmd (a list) with a deadline; returns CompletedProcess with text stdout/stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def temp_dir():
    return tempfile.mkdtemp(prefix="spmd-oracle-")
