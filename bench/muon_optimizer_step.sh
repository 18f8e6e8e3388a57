#!/usr/bin/env bash
# The optimizer step of GPT-2 124M's shapes (width 768, 12 heads, vocabulary 50257) under Muon
# against AdamW, on one process, FSDP-2 and FSDP-4 (bench_train --nproc, Gloo on this CPU),
# interleaved round by round so a busy machine slows all alike. Prints each run's median
# optimizer phase on rank 0 (bench_train's step split: AdamW, or Muon's momentum, gathers,
# Newton-Schulz on the matrices rank 0 owns and broadcasts, plus AdamW for the rest) and, per
# layout, the median over rounds, Muon minus AdamW, and rank 0's share of the Newton-Schulz FLOPs.
#   bash bench/muon_optimizer_step.sh [LAYERS] [ROUNDS] [NS_DTYPE]   (defaults 12, 3, bfloat16)
# LAYERS < 12 keeps 124M's matrices, fewer of them (each the same Newton-Schulz work).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-12} rounds=${2:-3} ns_dtype=${3:-bfloat16}
build=${BUILD:-build}
[ -x "$build/bench/bench_train" ] || { echo "muon_optimizer_step: no $build/bench/bench_train" >&2; exit 1; }
source bench/common.sh
echo "cores: $(nproc); GPT-2 124M shapes, $layers layers; ns_dtype $ns_dtype; $rounds rounds"
random_tokens "$work/train.bin" 50257 200000
cp "$work/train.bin" "$work/val.bin"
cat >"$work/gpt2.yaml" <<YAML
mesh: {shape: [1], axes: [fsdp]}
sharding_rules: [[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]
model: {vocab_size: 50257, block_size: 64, n_layer: $layers, n_head: 12, n_embd: 768, dropout: 0.0, bias: true}
data: {train: $work/train.bin, val: $work/val.bin, batch_size: 4}
train: {steps: 100, decay_steps: 100, warmup_steps: 0, lr: 6.0e-4, eval_every: 0, log_every: 1000,
        muon: {lr: 0.02, ns_dtype: $ns_dtype}}
checkpoint: {dir: ""}
output: {dir: $work/out}
runtime: {backend: gloo, device: cpu, threads_per_rank: auto}
YAML
python3 - "$work" "$build" "$rounds" <<'PY'
import json, statistics, subprocess, sys
work, build, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
layouts = [("1 process", 1), ("FSDP-2", 2), ("FSDP-4", 4)]
ms = {}
for r in range(rounds):
    for name, n in layouts:
        for opt in ("adamw", "muon"):
            out = f"{work}/{opt}-{n}-{r}.json"
            subprocess.run([f"{build}/bench/bench_train", "--config", f"{work}/gpt2.yaml", "--nproc", str(n),
                            "--set", f"mesh.shape=[{n}]", "--set", f"train.optimizer={opt}",
                            "--warmup", "1", "--steps", "3", "--peak-size", "256", "--json", out],
                           check=True, stdout=subprocess.DEVNULL)
            t = json.load(open(out))["component_medians_ms"]["optimizer"]
            ms.setdefault((name, opt), []).append(t)
            print(f"round {r + 1}: {name:9s} {opt:5s} optimizer {t:9.1f} ms", flush=True)
# Rank 0's share of the Newton-Schulz FLOPs: the owners' placement (summary.json of a 1-step run).
share = {}
for name, n in layouts:
    out = f"{work}/share-{n}"
    subprocess.run([f"{build}/app/spmd-train", "--config", f"{work}/gpt2.yaml", "--set", f"mesh.shape=[{n}]",
                    "--set", "train.optimizer=muon", "--set", "train.steps=1", "--set", f"output.dir={out}"],
                   check=True, stdout=subprocess.DEVNULL)
    share[name] = json.load(open(f"{out}/summary.json"))["muon_newton_schulz_flops"]
print()
print("| layout | AdamW optimizer ms | Muon optimizer ms | Muon - AdamW ms | rank 0's Newton-Schulz GFLOP |")
print("|---|---|---|---|---|")
for name, n in layouts:
    a, m = statistics.median(ms[(name, "adamw")]), statistics.median(ms[(name, "muon")])
    print(f"| {name} | {a:.1f} | {m:.1f} | {m - a:.1f} | {share[name] / 1e9:.1f} |")
PY
