#!/usr/bin/env python3
"""The layout planner against measurement (docs/planner.md, "How good are the predictions").

For each config and device count: calibrate this machine (spmd-inspect --calibrate), rank every
valid layout (spmd-inspect --plan --json), run the planner's top plans and a spread of the others
with spmd-train on a random token file, and compare predicted with measured step time (median of
the logged steps after the warm-up) and peak tensor memory (summary.json). Prints one row per plan
and per case the Spearman rank correlation, the measured time of the predicted best over the
measured best, and the memory error; writes everything to --out as JSON.

  python3 bench/plan_validation.py --build build --configs baby,10.7M --devices 2,4 \
      --top 3 --spread 5 --steps 12 --out out/plan-validation.json
"""
import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys

CONFIGS = {"baby": "configs/bench/baby.yaml", "10.7M": "configs/bench/shakespeare-char.yaml"}


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def token_file(path, count, vocab):
    rng = random.Random(1)
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{count}H", *(rng.randrange(vocab) for _ in range(count))))


def ranks(xs):
    """Ranks from 0, tied values sharing their average rank (Spearman's definition: plans the
    model predicts alike are not ordered by the order they were listed in)."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    pos = 0
    while pos < len(order):
        end = pos
        while end + 1 < len(order) and xs[order[end + 1]] == xs[order[pos]]:
            end += 1
        for k in range(pos, end + 1):
            r[order[k]] = (pos + end) / 2
        pos = end + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def chosen(plans, top, spread):
    """The top plans and `spread` others evenly spaced over the rest of the ranking."""
    picks = list(range(min(top, len(plans))))
    rest = list(range(len(picks), len(plans)))
    for k in range(spread):
        if rest:
            picks.append(rest[(k * len(rest)) // spread])
    return [plans[i] for i in sorted(set(picks))]


def measure(args, plan, data, out):
    yaml_path = os.path.join(out, f"plan-{plan['rank']}.yaml")
    with open(yaml_path, "w") as f:
        f.write(plan["yaml"])
    run_dir = os.path.join(out, f"run-{plan['rank']}")
    run([os.path.join(args.build, "app/spmd-train"), "--config", yaml_path, "--set", f"output.dir={run_dir}",
         "--set", f"data.train={data}", "--set", f"data.val={data}", "--set", f"train.steps={args.steps}",
         "--set", "train.eval_every=0", "--set", "train.log_every=1", "--set", "checkpoint.dir=",
         "--set", "model.dropout=0"], timeout=600)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step_ms"] for line in f][args.warmup:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return statistics.median(steps) / 1e3, summary.get("peak_tensor_bytes")


def summary(rows):
    pred = [r["predicted_s"] for r in rows]
    meas = [r["measured_s"] for r in rows]
    best_predicted = rows[pred.index(min(pred))]["measured_s"]
    mem = [abs(r["predicted_bytes"] / r["measured_bytes"] - 1) for r in rows if r["measured_bytes"]]
    return {"spearman": spearman(pred, meas) if len(rows) > 2 else None,
            "best_predicted_over_best_measured": best_predicted / min(meas),
            "memory_error_max": max(mem) if mem else None,
            "memory_error_median": statistics.median(mem) if mem else None}


def print_summary(r):
    print(f"{r['config']} N={r['devices']}: {len(r['plans'])} plans of {r['valid_layouts']}; rank correlation "
          f"{r['spearman']:.2f}; predicted best / measured best {r['best_predicted_over_best_measured']:.2f}x; "
          f"memory error median {r['memory_error_median']:.0%} max {r['memory_error_max']:.0%}", flush=True)


def case(args, name, devices, out):
    config = CONFIGS[name]
    inspect = os.path.join(args.build, "app/spmd-inspect")
    rates = os.path.join(out, f"rates-{devices}.json")
    # Calibrated right before the runs it predicts: on a shared machine the load of an hour ago says little.
    run([inspect, "--config", config, "--calibrate", "--devices", str(devices), "--rates", rates])
    data = os.path.join(out, "tokens.bin")
    if not os.path.exists(data):
        token_file(data, 400_000, 65)
    listing = json.loads(run([inspect, "--config", config, "--set", "model.dropout=0", "--plan", "--devices",
                              str(devices), "--rates", rates, "--json", "--top", "100000"]))
    rows = []
    for plan in chosen(listing["plans"], args.top, args.spread):
        measured_s, peak = measure(args, plan, data, out)
        rows.append({"rank": plan["rank"], "sharding": plan["sharding"], "mesh": plan["mesh"]["shape"],
                     "predicted_s": plan["step_s"], "measured_s": measured_s,
                     "predicted_bytes": plan["memory_bytes"], "measured_bytes": peak})
        print(f"  {name} N={devices} #{plan['rank']:>3} {plan['sharding']:<36} predicted {plan['step_s']*1e3:8.1f} ms"
              f"  measured {measured_s*1e3:8.1f} ms  memory predicted {plan['memory_bytes']/2**20:7.1f} MiB"
              f"  measured {(peak or 0)/2**20:7.1f} MiB", flush=True)
    result = {"config": name, "devices": devices, "plans": rows, "valid_layouts": listing["valid_fitting"]}
    result.update(summary(rows))
    print_summary(result)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--configs", default="baby,10.7M")
    p.add_argument("--devices", default="2,4")
    p.add_argument("--top", type=int, default=3)
    p.add_argument("--spread", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=4, help="logged steps left out of the median")
    p.add_argument("--out", default="out/plan-validation.json")
    p.add_argument("--summarize", metavar="JSON", help="print the summary of an earlier --out file and exit")
    args = p.parse_args()
    if args.summarize:
        for result in json.load(open(args.summarize)):
            result.update(summary(result["plans"]))
            print_summary(result)
        return
    work = os.path.splitext(args.out)[0]
    os.makedirs(work, exist_ok=True)
    results = []
    for name in args.configs.split(","):
        for n in args.devices.split(","):
            os.makedirs(os.path.join(work, f"{name}-{n}"), exist_ok=True)
            results.append(case(args, name, int(n), os.path.join(work, f"{name}-{n}")))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
