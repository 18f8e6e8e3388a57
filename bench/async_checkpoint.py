#!/usr/bin/env python3
"""Checkpoints in the background vs in the loop (docs/async-checkpoints.md).

For a config (default: the 10.7M model on 2 data-parallel ranks), runs spmd-train with no
checkpoints, synchronous ones and asynchronous ones every --every steps, interleaved --reps
times, and prints per variant: the median time a checkpoint step held the loop (summary.json's
checkpoint_blocked_ms, rank 0) and the throughput (steps / loop_s). With --rss-saves N it then
saves at every step for N steps and samples every rank's resident memory (VmRSS) as it goes.
Random tokens stand in for the dataset (timing does not depend on the text). Standard library
only:

    python3 bench/async_checkpoint.py --build build --reps 2 --steps 40 --rss-saves 50
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def write_tokens(path, count, vocab, seed):
    import random
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(b"".join(rng.randrange(vocab).to_bytes(2, "little") for _ in range(count)))


def rank_pids(launcher_pid):
    """The launcher's child processes (one per rank)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == launcher_pid:
                pids.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return sorted(pids)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def train(args, work, name, extra, sample_rss=False):
    out = os.path.join(work, "out-" + name)
    cmd = [os.path.join(args.build, "app", "spmd-train"), "--config", args.config,
           "--set", f"data.train={work}/train.bin", "--set", f"data.val={work}/val.bin",
           "--set", f"data.batch_size={args.batch}", "--set", "model.dropout=0",
           "--set", "train.eval_every=0", "--set", "train.log_every=10",
           "--set", f"output.dir={out}"] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples = {}  # pid -> [MiB, ...]
    if sample_rss:
        def sample():
            while proc.poll() is None:
                for pid in rank_pids(proc.pid):
                    mib = rss_mib(pid)
                    if mib is not None:
                        samples.setdefault(pid, []).append(mib)
                time.sleep(0.2)
        sampler = threading.Thread(target=sample)
        sampler.start()
    output, _ = proc.communicate()
    if sample_rss:
        sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{name}: spmd-train exited {proc.returncode}:\n{output[-3000:]}")
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), samples


def checkpointing(work, name, every, asynchronous, keep=2):
    return ["--set", f"checkpoint.dir={work}/ck-{name}", "--set", f"checkpoint.every={every}",
            "--set", f"checkpoint.keep={keep}", "--set", f"checkpoint.async={'true' if asynchronous else 'false'}"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--config", default="configs/bench/dp2.yaml")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--batch", type=int, default=8, help="data.batch_size (the config's 64 is slow on 2 cores)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--rss-saves", type=int, default=0)
    p.add_argument("--set", action="append", default=[], help="extra k=v for every run")
    args = p.parse_args()
    extra_sets = [a for kv in args.set for a in ("--set", kv)]
    with tempfile.TemporaryDirectory(prefix="bench-async-ckpt-") as work:
        write_tokens(f"{work}/train.bin", 400_000, 65, 1)
        write_tokens(f"{work}/val.bin", 40_000, 65, 2)
        variants = {"none": [], "sync": None, "async": None}
        results = {v: {"loop_s": [], "steps_s": [], "blocked_ms": [], "write_s": []} for v in variants}
        steps = ["--set", f"train.steps={args.steps}"] + extra_sets
        for rep in range(args.reps):
            for v in variants:  # interleaved: the machine's load drifts
                name = f"{v}-{rep}"
                # "none" saves nothing, not even the config's own checkpoint.dir at the end.
                extra = steps + (["--set", 'checkpoint.dir=""'] if v == "none"
                                 else checkpointing(work, name, args.every, v == "async"))
                summary, _ = train(args, work, name, extra)
                results[v]["loop_s"].append(summary["loop_s"])
                results[v]["steps_s"].append(summary["steps_s"])
                results[v]["blocked_ms"] += summary.get("checkpoint_blocked_ms", [])
                results[v]["write_s"] += summary.get("checkpoint_write_s", [])
                print(f"rep {rep} {v:>5}: loop {summary['loop_s']:.1f} s (steps {summary['steps_s']:.1f} s), blocked ms "
                      f"{[round(x, 1) for x in summary.get('checkpoint_blocked_ms', [])]}", flush=True)
        if args.reps:
            report(args, results)
        if args.rss_saves:
            rss(args, work, extra_sets)


def report(args, results):
    """Throughput two ways: over the whole loop (the end-of-run save or the wait for the one in
    flight included) and over the steps alone (the saves whose writes ran beside them included)."""
    base = statistics.median(results["none"]["loop_s"])
    base_steps = statistics.median(results["none"]["steps_s"])
    print(f"\n{args.config}, batch {args.batch}, {args.steps} steps, checkpoint every {args.every}, {args.reps} reps")
    print("variant | median blocked ms per checkpoint step | median write s | median loop s | throughput vs none "
          "| median steps s | steps' throughput vs none")
    for v, r in results.items():
        blocked = f"{statistics.median(r['blocked_ms']):.1f}" if r["blocked_ms"] else "-"
        write = f"{statistics.median(r['write_s']):.2f}" if r["write_s"] else "-"
        loop, steps = statistics.median(r["loop_s"]), statistics.median(r["steps_s"])
        print(f"{v} | {blocked} | {write} | {loop:.1f} | {base / loop * 100:.1f}% | {steps:.1f} | "
              f"{base_steps / steps * 100:.1f}%")


def rss(args, work, extra_sets):
    summary, samples = train(args, work, "rss", ["--set", f"train.steps={args.rss_saves}"] + extra_sets +
                             checkpointing(work, "rss", 1, True), sample_rss=True)
    print(f"\nRSS over {len(summary['checkpoint_write_s'])} async saves (one per step), "
          f"staging {summary['checkpoint_staging_bytes'] / 2**20:.1f} MiB on rank 0:")
    for i, (pid, mib) in enumerate(sorted(samples.items())):
        third = max(1, len(mib) // 3)
        print(f"rank process {i}: {len(mib)} samples; max RSS first third {max(mib[:third]):.1f} MiB, "
              f"middle {max(mib[third:2 * third] or [0]):.1f} MiB, last third {max(mib[-third:]):.1f} MiB")


if __name__ == "__main__":
    main()
