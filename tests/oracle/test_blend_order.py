"""A weighted blend's order against Grain's MapDataset.mix: for the first 100,000 samples of a
three-source blend, `spmd-inspect --data-order --json` names the source and the index within it
that grain's mix gives for that global index (weights scaled by 100/min and truncated, as grain
does). Then the rows themselves: the blend's rows as bench/dump_batches writes them equal, row for
row, sample `index` of a run with data.train set to that source and the same seed."""
import json
import os
import shutil
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from oracle_support import BIN, require, run, temp_dir, tool  # noqa: E402

grain = require("grain")

BATCH, BLOCK = 8, 16
SAMPLES = 100_000
NAMES = ["web", "code", "books"]
WEIGHTS = [1.0, 2.7, 0.37]  # proportions 270, 729, 100 after grain's scaling
SIZES = [5000, 9000, 3000]  # tokens: 312, 562 and 187 windows, so each source wraps its epochs


def write_tokens(path, count, vocab, salt):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{count}H", *[(i * 7919 + salt * 104729 + (i // 7) * salt) % vocab for i in range(count)]))


def make_config(d):
    sources = []
    for i, (name, weight, size) in enumerate(zip(NAMES, WEIGHTS, SIZES)):
        os.makedirs(f"{d}/{name}")
        write_tokens(f"{d}/{name}/train.bin", size, 72, i + 1)
        sources.append(f"{{name: {name}, path: {d}/{name}/train.bin, weight: {weight}}}")
    path = f"{d}/blend.yaml"
    with open(path, "w") as f:
        f.write("mesh: {shape: [1], axes: [data]}\n"
                "sharding_rules: [[batch, data], [vocab, null], [heads, null], [mlp, null], "
                "[embed, null], [seq, null], [kv, null]]\n"
                f"model: {{vocab_size: 72, block_size: {BLOCK}, n_layer: 1, n_head: 2, n_embd: 16}}\n"
                f"data: {{batch_size: {BATCH}, sources: [{', '.join(sources)}]}}\n"
                "train: {steps: 10, seed: 4242, eval_every: 0}\n")
    return path


def data_order(config, first, last, *extra):
    p = run([tool("spmd-inspect"), "--config", config, "--data-order", "--steps", f"{first}:{last}", "--json", *extra],
            timeout=300)
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def grain_mix(count):
    """(source, index) of global indices 0..count-1 from grain's MapDataset.mix over sources that
    yield (source, index) and are long enough never to end."""
    MapDataset = grain.MapDataset
    parents = [MapDataset.range(10**9).map(lambda x, i=i: (i, x)) for i in range(len(NAMES))]
    mixed = MapDataset.mix(parents, WEIGHTS)
    return [mixed[k] for k in range(count)]


def check_against_grain(config):
    lines = data_order(config, 1, SAMPLES // BATCH)
    assert len(lines) == SAMPLES, len(lines)
    want = grain_mix(SAMPLES)
    for k, (line, (source, index)) in enumerate(zip(lines, want)):
        assert sorted(line) == ["index", "row", "source", "step"], line
        assert (line["step"], line["row"]) == (k // BATCH + 1, k % BATCH), (k, line)
        assert (line["source"], line["index"]) == (NAMES[source], index), f"sample {k}: ours {line}, grain {(NAMES[source], index)}"
    # A window into the middle: steps A:B give the same lines as that part of the whole.
    assert data_order(config, 5001, 5003) == lines[5000 * BATCH:5003 * BATCH]
    return lines


def read_rows(path):
    with open(path, "rb") as f:
        data = f.read()
    width = (BLOCK + 1) * 2
    return [data[i:i + width] for i in range(0, len(data), width)]


def dump(config, out, steps, *settings):
    cmd = [os.path.join(BIN, "bench", "dump_batches"), "--config", config, "--steps", str(steps), "--out", out]
    for s in settings:
        cmd += ["--set", s]
    run(cmd, timeout=120)
    return read_rows(out)


def check_rows(d, config, lines):
    steps = 60
    blend = dump(config, f"{d}/blend.rows", steps)
    assert len(blend) == steps * BATCH
    for name in NAMES:
        needed = max(line["index"] for line in lines[:steps * BATCH] if line["source"] == name) + 1
        alone = dump(config, f"{d}/{name}.rows", -(-needed // BATCH), "data.sources=null",
                     f"data.train={d}/{name}/train.bin")
        for k, line in enumerate(lines[:steps * BATCH]):
            if line["source"] == name:
                assert blend[k] == alone[line["index"]], f"blend row {k} is not {name}'s sample {line['index']}"


def main():
    start = time.monotonic()
    d = temp_dir()
    try:
        config = make_config(d)
        lines = check_against_grain(config)
        check_rows(d, config, lines)
        counts = {name: sum(line["source"] == name for line in lines) for name in NAMES}
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"blend order oracle: ok in {time.monotonic() - start:.1f} s; samples per source {counts}")


if __name__ == "__main__":
    main()
