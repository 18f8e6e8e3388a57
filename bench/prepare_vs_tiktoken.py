"""spmd-prepare --tokenizer (GPT-2) against tiktoken's encode_ordinary_batch on the same documents:
MB/s of text with 1, 2 and all workers/threads, rounds interleaved. spmd-prepare is timed as a whole
process (reading JSON Lines, encoding, writing train.bin) and also less its start-up (loading the
tokenizer: a run on one short document); tiktoken only inside encode_ordinary_batch on str that
are already in memory. Checks once per corpus that both give the same tokens (<|endoftext|>
between documents). tiktoken is a benchmark oracle only; the tool never uses it.

  python prepare_vs_tiktoken.py SPMD_PREPARE GPT2_DIR GPT2_TIKTOKEN CORPUS.jsonl... [--rounds N]
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time

import tiktoken
from tiktoken.load import load_tiktoken_bpe

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_prepare(binary, gpt2_dir, corpus, workers, out):
    """(wall seconds, CPU seconds) of one spmd-prepare run into an empty directory (untimed
    removal of the last run's files: replacing them would time the kernel freeing their pages)."""
    shutil.rmtree(out, ignore_errors=True)
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run([binary, "--input", corpus, "--out", out, "--tokenizer", gpt2_dir, "--quiet",
                    "--val-fraction", "0", "--workers", str(workers)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu


def check_same_tokens(encoding, docs, train_bin):
    ours = memoryview(open(train_bin, "rb").read()).cast("H").tolist()
    theirs = []
    for i, ids in enumerate(encoding.encode_ordinary_batch(docs)):
        if i > 0:
            theirs.append(50256)
        theirs.extend(ids)
    same = ours == theirs
    print(f"  tokens: spmd-prepare {len(ours)}, tiktoken {len(theirs)}, identical: {same}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary"), ap.add_argument("gpt2_dir"), ap.add_argument("ranks")
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    encoding = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=load_tiktoken_bpe(args.ranks),
                                 special_tokens={"<|endoftext|>": 50256})
    cores = len(os.sched_getaffinity(0))
    threads = sorted({1, 2, cores})
    tmp = tempfile.mkdtemp(prefix="spmd-bench-")
    tiny = os.path.join(tmp, "tiny.jsonl")
    open(tiny, "w").write(json.dumps({"text": "start-up"}) + "\n")
    results = []
    for corpus in args.corpora:
        docs = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        print(f"{corpus}: {len(docs)} documents, {mb:.2f} MB of text")
        run_prepare(args.binary, args.gpt2_dir, corpus, 1, os.path.join(tmp, "check"))
        check_same_tokens(encoding, docs, os.path.join(tmp, "check", "train.bin"))
        for _ in range(args.rounds):
            startup, startup_cpu = run_prepare(args.binary, args.gpt2_dir, tiny, 1, os.path.join(tmp, "tiny"))
            for t in threads:
                ours, ours_cpu = run_prepare(args.binary, args.gpt2_dir, corpus, t, os.path.join(tmp, "out"))
                start, cpu = time.perf_counter(), time.process_time()
                encoding.encode_ordinary_batch(docs, num_threads=t)
                theirs, theirs_cpu = time.perf_counter() - start, time.process_time() - cpu
                results.append({"corpus": os.path.basename(corpus), "threads": t, "mb": mb,
                                "spmd_s": ours, "startup_s": startup, "tiktoken_s": theirs,
                                "spmd_cpu_s": ours_cpu - startup_cpu, "tiktoken_cpu_s": theirs_cpu})
    med = lambda xs: sorted(xs)[len(xs) // 2]
    print("corpus, threads | wall MB/s: spmd-prepare (less start-up), tiktoken, ratio "
          "| MB per CPU-second: spmd-prepare (less start-up), tiktoken | CPU time vs 1 thread: "
          "spmd-prepare, tiktoken  (medians)")
    for corpus in args.corpora:
        name = os.path.basename(corpus)
        base = {}
        for t in threads:
            rows = [r for r in results if r["corpus"] == name and r["threads"] == t]
            ours = med([r["mb"] / r["spmd_s"] for r in rows])
            ours_less = med([r["mb"] / max(r["spmd_s"] - r["startup_s"], 1e-9) for r in rows])
            theirs = med([r["mb"] / r["tiktoken_s"] for r in rows])
            ours_cpu = med([r["spmd_cpu_s"] for r in rows])
            theirs_cpu = med([r["tiktoken_cpu_s"] for r in rows])
            base.setdefault("ours", ours_cpu), base.setdefault("theirs", theirs_cpu)
            print(f"{name}, {t} | {ours:.1f} ({ours_less:.1f}), {theirs:.1f}, {ours_less / theirs:.2f}x "
                  f"| {rows[0]['mb'] / ours_cpu:.1f}, {rows[0]['mb'] / theirs_cpu:.1f} "
                  f"| {ours_cpu / base['ours']:.2f}, {theirs_cpu / base['theirs']:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
