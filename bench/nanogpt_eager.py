#!/usr/bin/env python3
"""nanoGPT's model and training step in eager PyTorch, for a same-machine baseline of bench_train.

The same computation as nanoGPT's training loop (as of 2023), written here with
torch.nn.functional: pre-LN blocks, the "slow" attention path (PyTorch < 2.0 has no
scaled_dot_product_attention, so the (T, T) scores are materialized and masked), exact-erf GELU,
tied LM head, torch.optim.AdamW over decay (matrices) / no-decay groups, grad clipping 1.0,
zero_grad(set_to_none=True). Batches are drawn at random from the same uint16 train.bin that
bench_train reads. Optional: `python3 -c 'import torch'` must work (Debian:
apt-get install python3-torch); not needed by the project itself.

    python3 bench/nanogpt_eager.py --preset baby --threads 2 --steps 20
    python3 bench/nanogpt_eager.py --preset shakespeare-char --threads 2 --steps 3 --warmup 1
    python3 bench/nanogpt_eager.py --preset baby --train 2000      # nanoGPT's whole baby run: val loss
    python3 bench/nanogpt_eager.py --preset baby --train 2000 --windows   # ... fed like spmd-train
"""
import argparse
import json
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

PRESETS = {
    # config/train_shakespeare_char.py with the README's CPU "baby" overrides.
    "baby": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0),
    # config/train_shakespeare_char.py itself (dropout 0 for timing, as bench_train's --set model.dropout=0).
    "shakespeare-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.0),
}


class EagerGPT(nn.Module):
    """GPT-2 as nanoGPT trains it, written out with torch.nn.functional: pre-LN blocks, attention
    over a materialized (T, T) score matrix masked with -inf above the diagonal (PyTorch 1.13 has no
    fused attention), exact-erf GELU, no biases, the LM head tied to the token embedding. Init:
    normal(0, 0.02), residual output projections 0.02 / sqrt(2 n_layer), LayerNorm scales 1."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        C, L = c["n_embd"], c["n_layer"]
        normal = lambda *shape, std=0.02: nn.Parameter(torch.randn(*shape) * std)
        self.wte = normal(c["vocab_size"], C)
        self.wpe = normal(c["block_size"], C)
        self.layers = nn.ModuleList()
        for _ in range(L):
            layer = nn.ParameterDict({
                "ln1": nn.Parameter(torch.ones(C)),
                "qkv": normal(3 * C, C),                                  # F.linear layout: (out, in)
                "attn_out": normal(C, C, std=0.02 / math.sqrt(2 * L)),
                "ln2": nn.Parameter(torch.ones(C)),
                "fc": normal(4 * C, C),
                "mlp_out": normal(C, 4 * C, std=0.02 / math.sqrt(2 * L)),
            })
            self.layers.append(layer)
        self.ln_f = nn.Parameter(torch.ones(C))
        T = c["block_size"]
        self.register_buffer("future", torch.ones(T, T, dtype=torch.bool).triu(1))

    @torch.no_grad()
    def load_spmd_init(self, folder):
        """Copies in the parameters `SPMD_TEST_HOOKS=dump_init=DIR spmd-train` wrote (raw float32, our layouts:
        c_attn (C, 3, H, D), attention c_proj (H, D, C), MLP weights (in, out))."""
        C = self.c["n_embd"]
        read = lambda name: torch.from_numpy(np.fromfile(os.path.join(folder, name + ".f32"), dtype=np.float32))
        self.wte.copy_(read("wte").view_as(self.wte))
        self.wpe.copy_(read("wpe").view_as(self.wpe))
        self.ln_f.copy_(read("ln_f.weight"))
        for l, p in enumerate(self.layers):
            h = f"h.{l}."
            p["ln1"].copy_(read(h + "ln_1.weight"))
            p["ln2"].copy_(read(h + "ln_2.weight"))
            p["qkv"].copy_(read(h + "attn.c_attn.weight").view(C, 3 * C).t())
            p["attn_out"].copy_(read(h + "attn.c_proj.weight").view(C, C).t())
            p["fc"].copy_(read(h + "mlp.c_fc.weight").view(C, 4 * C).t())
            p["mlp_out"].copy_(read(h + "mlp.c_proj.weight").view(4 * C, C).t())

    def num_params(self):  # without the position embedding, as nanoGPT reports it
        return sum(p.numel() for p in self.parameters()) - self.wpe.numel()

    def attention(self, x, p):
        B, T, C = x.shape
        H = self.c["n_head"]
        qkv = F.linear(x, p["qkv"]).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        probs = F.dropout(F.softmax(scores.masked_fill(self.future[:T, :T], float("-inf")), dim=-1),
                          self.c["dropout"], self.training)
        y = (probs @ v).transpose(1, 2).reshape(B, T, C)
        return F.dropout(F.linear(y, p["attn_out"]), self.c["dropout"], self.training)

    def forward(self, idx, targets):
        C = self.c["n_embd"]
        x = F.dropout(F.embedding(idx, self.wte) + self.wpe[: idx.size(1)], self.c["dropout"], self.training)
        for p in self.layers:
            x = x + self.attention(F.layer_norm(x, (C,), p["ln1"], None, 1e-5), p)
            h = F.gelu(F.linear(F.layer_norm(x, (C,), p["ln2"], None, 1e-5), p["fc"]), approximate=self.c["gelu"])
            x = x + F.dropout(F.linear(h, p["mlp_out"]), self.c["dropout"], self.training)
        logits = F.linear(F.layer_norm(x, (C,), self.ln_f, None, 1e-5), self.wte)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def autocast(args):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast)


def train(args, model, optimizer, get_batch, data, B, T):
    val = np.memmap(os.path.join(os.path.dirname(args.data), "val.bin"), dtype=np.uint16, mode="r")
    order, cursor = [], 0

    def window_batch():  # stride-T windows of T+1 tokens, a fresh permutation every epoch
        nonlocal order, cursor
        rows = []
        for _ in range(B):
            if cursor == len(order):
                order, cursor = torch.randperm((len(data) - 1) // T).tolist(), 0
            rows.append(order[cursor] * T)
            cursor += 1
        x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in rows])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in rows])
        return x, y

    def lr_at(it, warmup=100, lr=1e-3, min_lr=1e-4):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        ratio = (it - warmup) / (args.train - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    @torch.no_grad()
    def val_loss(iters):
        model.eval()
        out = []
        for _ in range(iters):
            ix = torch.randint(len(val) - T, (B,))
            x = torch.stack([torch.from_numpy(val[i:i + T].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(val[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
            out.append(model(x, y).item())
        model.train()
        return sum(out) / len(out)

    @torch.no_grad()
    def val_loss_whole_split():  # every stride-T window of val.bin once, as spmd-train's eval_batches=145
        model.eval()
        starts = list(range(0, len(val) - T, T))
        total, count = 0.0, 0
        for k in range(0, len(starts) - B + 1, B):
            rows = starts[k:k + B]
            x = torch.stack([torch.from_numpy(val[i:i + T].astype(np.int64)) for i in rows])
            y = torch.stack([torch.from_numpy(val[i + 1:i + 1 + T].astype(np.int64)) for i in rows])
            total += model(x, y).item()
            count += 1
        model.train()
        return total / count

    fed = np.fromfile(args.batches, dtype=np.uint16).reshape(-1, T + 1) if args.batches else None
    loss_log = open(args.loss_log, "w") if args.loss_log else None
    t0 = time.perf_counter()
    for it in range(args.train):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        if fed is not None:  # spmd-train's own batches (bench/dump_batches)
            rows = torch.from_numpy(fed[it * B:(it + 1) * B].astype(np.int64))
            X, Y = rows[:, :T].contiguous(), rows[:, 1:].contiguous()
        else:
            X, Y = window_batch() if args.windows else get_batch()
        with autocast(args):
            loss = model(X, Y)
        loss.backward()
        if loss_log:
            loss_log.write(json.dumps({"step": it + 1, "loss": loss.item()}) + "\n")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (it + 1) % 250 == 0:
            print(f"step {it + 1}: train loss {loss.item():.4f}, val (20 batches) {val_loss(20):.4f}", flush=True)
    print(f"nanogpt_eager: {args.train} steps in {time.perf_counter() - t0:.0f} s, feeding "
          f"{'spmd-train batches' if fed is not None else 'stride-T windows' if args.windows else 'random offsets'}: val loss {val_loss(20):.4f} (20 batches), "
          f"{val_loss(200):.4f} (200 batches), {val_loss_whole_split():.4f} (whole split, stride-T windows)")


def compare_steps(args, model, optimizer, data, B, T):
    """Trains on one fixed window (every row the first block_size + 1 tokens of the data file) with
    spmd-train's schedule and prints each step's loss: run spmd-train on a file holding only that
    window, from the same initial parameters, and compare the curves step by step."""
    window = torch.from_numpy(data[:T + 1].astype(np.int64))
    X, Y = window[:T].repeat(B, 1), window[1:].repeat(B, 1)
    for it in range(args.compare_steps):
        lr = 1e-3 * (it + 1) / 101 if it < 100 else 1e-4 + 0.5 * (1 + math.cos(math.pi * (it - 100) / 1900)) * 9e-4
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(X, Y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(json.dumps({"step": it, "loss": loss.item()}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="baby")
    ap.add_argument("--data", default="datasets/shakespeare_char/train.bin")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--train", type=int, metavar="ITERS",
                    help="instead of timing, train ITERS steps with nanoGPT's schedule (warmup 100, cosine from "
                         "1e-3 to 1e-4 at ITERS) and report the val loss (eval_iters 20 and 200, random batches)")
    ap.add_argument("--gelu", choices=["none", "tanh"], default="none",
                    help="GELU: exact (nanoGPT's nn.GELU) or GPT-2's tanh approximation (spmd-train's)")
    ap.add_argument("--init", metavar="DIR", help="start from the parameters SPMD_TEST_HOOKS=dump_init=DIR spmd-train wrote")
    ap.add_argument("--compare-steps", type=int, metavar="N",
                    help="train N steps on the data file's first window only and print each loss as JSON")
    ap.add_argument("--seed", type=int, default=1337, help="torch.manual_seed: init and batch order")
    ap.add_argument("--windows", action="store_true",
                    help="with --train: feed non-overlapping block_size windows in a shuffled order each epoch "
                         "(as spmd-train's loader) instead of nanoGPT's random offsets")
    ap.add_argument("--autocast", action="store_true",
                    help="forward under torch.autocast('cpu', bfloat16): eager's counterpart of "
                         "model.matmul_dtype: bfloat16")
    ap.add_argument("--batches", metavar="FILE",
                    help="with --train: feed these rows of block_size + 1 tokens in order (bench/dump_batches "
                         "writes spmd-train's)")
    ap.add_argument("--loss-log", metavar="FILE", help="with --train: write each step's loss as JSON lines")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    c = dict(PRESETS[args.preset], vocab_size=65, bias=False, gelu=args.gelu)
    model = EagerGPT(c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.99))
    data = np.memmap(args.data, dtype=np.uint16, mode="r")
    B, T = c["batch_size"], c["block_size"]

    def get_batch():
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    if args.init:
        model.load_spmd_init(args.init)
    if args.compare_steps:
        compare_steps(args, model, optimizer, data, B, T)
        return
    if args.train:
        train(args, model, optimizer, get_batch, data, B, T)
        return

    times, losses = [], []
    for k in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        X, Y = get_batch()
        with autocast(args):
            loss = model(X, Y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item()
        dt = time.perf_counter() - t0
        if k >= args.warmup:
            times.append(dt * 1000)
            losses.append(lossf)

    n = model.num_params()
    flops_per_token = 6 * n + 12 * c["n_layer"] * T * c["n_embd"]
    median_ms = statistics.median(times)
    tokens_per_s = B * T / (median_ms / 1000)
    result = dict(preset=args.preset, torch=torch.__version__, threads=args.threads, params=n, tokens_per_step=B * T,
                  median_step_ms=median_ms, min_step_ms=min(times), tokens_per_s=tokens_per_s,
                  achieved_gflops=flops_per_token * tokens_per_s / 1e9, step_ms=times, losses=losses,
                  autocast_bf16=args.autocast, loadavg_1m=os.getloadavg()[0])
    print(f"nanogpt_eager: {args.preset} | torch {torch.__version__} | {args.threads} thread(s) | {n} params | "
          f"{B * T} tokens/step | {'bf16 autocast' if args.autocast else 'fp32'} | load {result['loadavg_1m']:.2f}")
    print(f"  tokens/s      {tokens_per_s:.0f}")
    print(f"  median step   {median_ms:.2f} ms (min {min(times):.2f})")
    print(f"  model FLOP/s  {result['achieved_gflops']:.1f} GFLOP/s (6N + 12 L T C per token)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
