#!/usr/bin/env python3
"""Multiple-choice scoring (llm.c's rules, docs/evaluation.md) in PyTorch 2.x eager: the baseline
bench/eval_speed.sh compares `spmd-train eval` with. Not used by the project itself.

    python3 bench/eval_pytorch.py make --out DIR --examples N     # DIR/corpus.txt and DIR/task.jsonl
    python3 bench/eval_pytorch.py score --weights model.safetensors --meta meta.json --task task.jsonl \\
        --layers 6 --heads 6 --width 384 --block 256 --vocab 65 --batch 16 [--threads 2]

`score` loads spmd-train's export (GPT-2's Hugging Face names) into bench/gpt2_pytorch.py's GPT
(fused attention, tanh GELU, tied head), encodes with the dataset's character vocabulary, and scores
the examples batched as spmd-train does: all choices of batch / choices examples in one forward,
right-padded, padding never scored. Prints one JSON line: n, acc, acc_norm, seconds, examples_per_s
(the scoring loop alone; encoding is done before the clock starts, as in spmd-train eval).
"""
import argparse
import json
import os
import random
import sys
import time

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_pytorch import GPT  # noqa: E402

WORDS = ("the king and queen rode out of the castle at dawn while the knights watched over the river "
         "and the people of the town sang songs of war and peace until night came").split()


def make(args):
    rng = random.Random(1)
    words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    with open(os.path.join(args.out, "corpus.txt"), "w") as f:
        for _ in range(2000):
            f.write(words(12).capitalize() + ".\n")
    with open(os.path.join(args.out, "task.jsonl"), "w") as f:  # HellaSwag-sized rows, in characters
        for _ in range(args.examples):
            row = {"ctx": words(rng.randint(18, 28)).capitalize(), "endings": [words(rng.randint(6, 12)) + "." for _ in range(4)],
                   "label": rng.randrange(4)}
            f.write(json.dumps(row) + "\n")


def load_model(args):
    from safetensors.torch import load_file
    c = dict(n_layer=args.layers, n_head=args.heads, n_embd=args.width, block_size=args.block, vocab_size=args.vocab)
    model = GPT(c).eval()
    sd = {k.removeprefix("transformer."): v for k, v in load_file(args.weights).items()}
    with torch.no_grad():
        model.wte.weight.copy_(sd["wte.weight"])
        model.wpe.weight.copy_(sd["wpe.weight"])
        model.ln_f.weight.copy_(sd["ln_f.weight"]), model.ln_f.bias.copy_(sd["ln_f.bias"])
        for i, b in enumerate(model.blocks):
            p = f"h.{i}."
            pairs = [(b.ln1, "ln_1"), (b.ln2, "ln_2")]
            for mod, name in pairs:
                mod.weight.copy_(sd[p + name + ".weight"]), mod.bias.copy_(sd[p + name + ".bias"])
            for mod, name in [(b.qkv, "attn.c_attn"), (b.attn_out, "attn.c_proj"), (b.fc, "mlp.c_fc"), (b.mlp_out, "mlp.c_proj")]:
                mod.weight.copy_(sd[p + name + ".weight"].t()), mod.bias.copy_(sd[p + name + ".bias"])  # Conv1D -> Linear
    return model


def encode_task(args):
    with open(args.meta) as f:
        stoi = {ch: i for i, ch in enumerate(json.load(f)["vocabulary"])}
    rows = []
    for line in open(args.task):
        if not line.strip():
            continue
        row = json.loads(line)
        ctx = [stoi[ch] for ch in row["ctx"]]
        choices = []
        for ending in row["endings"]:
            seq = ctx + [stoi[ch] for ch in " " + ending]
            dropped = max(0, len(seq) - args.block)
            choices.append((seq[dropped:], max(1, len(ctx) - dropped)))
        rows.append((int(row["label"]), choices))
    return rows


def logits_of(model, idx):
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for block in model.blocks:
        x = block(x)
    return F.linear(model.ln_f(x), model.wte.weight)


def score(args):
    torch.set_num_threads(args.threads)
    model, rows = load_model(args), encode_task(args)
    K = max(len(c) for _, c in rows)
    per_pass = max(1, args.batch // K)
    right = right_norm = 0
    start = time.perf_counter()
    with torch.no_grad():
        for base in range(0, len(rows), per_pass):
            batch = rows[base:base + per_pass]
            T = max(len(seq) - 1 for _, choices in batch for seq, _ in choices)
            inputs = torch.zeros(len(batch) * K, T, dtype=torch.long)
            targets = torch.full((len(batch) * K, T), -1, dtype=torch.long)
            for e, (_, choices) in enumerate(batch):
                for c, (seq, first) in enumerate(choices):
                    inputs[e * K + c, :len(seq) - 1] = torch.tensor(seq[:-1])
                    targets[e * K + c, first - 1:len(seq) - 1] = torch.tensor(seq[first:])
            logits = logits_of(model, inputs)
            losses = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-1, reduction="none")
            sums = losses.view(len(batch), K, T).sum(2).double()
            for e, (label, choices) in enumerate(batch):
                s = sums[e, :len(choices)]
                means = s / torch.tensor([len(seq) - first for seq, first in choices], dtype=torch.double)
                right += int(torch.argmin(s)) == label  # argmin: the first of equal values
                right_norm += int(torch.argmin(means)) == label
    seconds = time.perf_counter() - start
    n = len(rows)
    print(json.dumps({"n": n, "acc": right / n, "acc_norm": right_norm / n, "seconds": seconds,
                      "examples_per_s": n / seconds, "threads": args.threads, "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--examples", type=int, default=200)
    s = sub.add_parser("score")
    for name in ("weights", "meta", "task"):
        s.add_argument("--" + name, required=True)
    for name, default in (("layers", 6), ("heads", 6), ("width", 384), ("block", 256), ("vocab", 65), ("batch", 16),
                          ("threads", os.cpu_count())):
        s.add_argument("--" + name, type=int, default=default)
    args = ap.parse_args()
    make(args) if args.cmd == "make" else score(args)


if __name__ == "__main__":
    main()
