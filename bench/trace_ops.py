#!/usr/bin/env python3
"""Self time per op of a libtorch chrome://tracing file (bench_train --trace): each event's duration
less its children's on the same thread, summed by name, per profiled step, largest first.

    python3 bench/trace_ops.py trace.json [--steps 3] [--top 30]
    python3 bench/trace_ops.py llama.json gpt2.json --steps 3   # side by side, ms a step
"""
import argparse
import collections
import json


def self_times(path):
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_thread[e.get("tid")].append(e)
    totals = collections.Counter()
    for spans in by_thread.values():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, child time]
        def close(entry):
            totals[entry[0]["name"]] += entry[0]["dur"] - entry[1]
        for e in spans:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                close(stack.pop())
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        while stack:
            close(stack.pop())
    return totals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", type=int, default=3, help="steps the trace holds (bench_train --trace: 3)")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    tables = [self_times(p) for p in args.traces]
    names = collections.Counter()
    for t in tables:
        names.update(t)
    print("| op | " + " | ".join(f"{p} ms/step" for p in args.traces) + " |")
    print("|---|" + "---|" * len(tables))
    for name, _ in names.most_common(args.top):
        print(f"| {name} | " + " | ".join(f"{t.get(name, 0) / 1e3 / args.steps:.2f}" for t in tables) + " |")
    print("| total | " + " | ".join(f"{sum(t.values()) / 1e3 / args.steps:.2f}" for t in tables) + " |")


if __name__ == "__main__":
    main()
