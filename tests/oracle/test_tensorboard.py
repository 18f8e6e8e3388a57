"""TensorBoard's own reader against our event files: a run resumed once (one file per run;
every scalar at the right steps with metrics.jsonl's values, the curve continuing across both
files), a two-process run killed with SIGKILL (one file, from rank 0; readable up to its last
flush), and the loss.svg a finished run leaves (XML with one point per train and val loss).
The finished runs are single-process: a two-process start and exit costs seconds here."""
import glob
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(__file__))
from oracle_support import require, run, temp_dir, tool  # noqa: E402

event_accumulator = require("tensorboard.backend.event_processing.event_accumulator")

TAGS = ["loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "step_ms"]
TWO_RANKS = ["--set", "mesh.shape=[2, 1]"]


def write_tokens(path, count, vocab, seed):
    """uint16 tokens: words of a small random lexicon separated by 0, something a model learns."""
    rng = random.Random(seed)
    lexicon = [[rng.randrange(1, vocab) for _ in range(rng.randrange(2, 7))] for _ in range(40)]
    tokens = []
    while len(tokens) < count:
        tokens += rng.choice(lexicon) + [0]
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{count}H", *tokens[:count]))


def tiny_config(d):
    write_tokens(f"{d}/train.bin", 20000, 72, 1)
    write_tokens(f"{d}/val.bin", 4000, 72, 2)
    path = f"{d}/tiny.yaml"
    with open(path, "w") as f:
        f.write("mesh: {shape: [1, 1], axes: [data, model]}\n"
                "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], "
                "[embed, null], [seq, null], [kv, null]]\n"
                "model: {vocab_size: 72, block_size: 16, n_layer: 2, n_head: 8, n_embd: 32, dropout: 0.0}\n"
                f"data: {{train: {d}/train.bin, val: {d}/val.bin, batch_size: 8}}\n"
                "train: {steps: 12, decay_steps: 12, warmup_steps: 3, lr: 3.0e-3, log_every: 1, "
                "eval_every: 6, eval_batches: 2}\n"
                "runtime: {timeout_s: 60}\n")
    return path


def train_cmd(config, out, *extra):
    return [tool("spmd-train"), "--config", config, "--set", f"output.dir={out}", *extra]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def as_float32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def scalars(out):
    acc = event_accumulator.EventAccumulator(out, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert acc.file_version == 2.0, acc.file_version  # parsed from "brain.Event:2"
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected_scalars(records):
    want = {tag: [] for tag in TAGS}
    for r in records:
        for tag in TAGS:
            if isinstance(r.get(tag), (int, float)):
                want[tag].append((r["step"], as_float32(r[tag])))
    return {tag: points for tag, points in want.items() if points}


def event_files(out):
    return sorted(glob.glob(f"{out}/events.out.tfevents.*"))


def check_resumed_run(d, config):
    out, ck = f"{d}/out", f"{d}/ck"
    run(train_cmd(config, out, "--set", f"checkpoint.dir={ck}", "--set", "train.steps=6"), timeout=120)
    first = read_jsonl(f"{out}/metrics.jsonl")
    assert len(event_files(out)) == 1, event_files(out)
    got = scalars(out)
    assert got == expected_scalars(first), (got, first)
    run(train_cmd(config, out, "--set", f"checkpoint.dir={ck}", "--resume"), timeout=120)
    # metrics.jsonl keeps the steps before the checkpoint and continues: every step once.
    whole = read_jsonl(f"{out}/metrics.jsonl")
    assert whole[:len(first)] == first, (first, whole)
    assert [r["step"] for r in whole] == list(range(1, 13)), whole  # numbered from 1, as the progress line
    assert len(event_files(out)) == 2, event_files(out)  # a new file for the resumed run
    got = scalars(out)
    assert sorted(got) == sorted(TAGS), sorted(got)
    assert got == expected_scalars(whole), (got, whole)
    return out, whole


def check_plot(out, records):
    root = ET.parse(f"{out}/loss.svg").getroot()
    lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    counts = [len(line.get("points").split()) for line in lines]
    want = [sum("loss" in r for r in records), sum("val_loss" in r for r in records)]
    assert counts == want, (counts, want)
    assert not os.path.exists(f"{out}/loss.svg.tmp")


def check_killed_run(d, config):
    """SIGKILL to the launcher's process group once a few steps are logged: the event file reads,
    holding exactly the logged steps up to an evaluation (the last flush)."""
    out = f"{d}/killed"
    cmd = train_cmd(config, out, *TWO_RANKS, "--set", "train.steps=100000", "--set", "train.decay_steps=100000")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=os.setsid)
    try:
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.exists(f"{out}/metrics.jsonl") and len(read_jsonl(f"{out}/metrics.jsonl")) >= 9:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"training exited {proc.returncode} before it was killed"
        assert len(read_jsonl(f"{out}/metrics.jsonl")) >= 9, "no 9 metrics lines within 50 s"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert not os.path.exists(f"{out}/summary.json"), "the run finished instead of being killed"
    assert len(event_files(out)) == 1, event_files(out)  # rank 0 only
    logged = read_jsonl(f"{out}/metrics.jsonl")
    got = scalars(out)
    steps = [s for s, _ in got["loss"]]
    assert steps == [r["step"] for r in logged[:len(steps)]], (steps, logged)
    last = logged[len(steps) - 1]
    assert "val_loss" in last and last["step"] >= 5, (steps, logged)  # flushed at an evaluation
    assert got == expected_scalars(logged[:len(steps)]), got


def main():
    start = time.monotonic()
    d = temp_dir()
    try:
        config = tiny_config(d)
        out, whole = check_resumed_run(d, config)
        check_plot(out, whole)
        check_killed_run(d, config)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"tensorboard oracle: ok in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
