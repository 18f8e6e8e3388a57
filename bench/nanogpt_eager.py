#!/usr/bin/env python3
"""nanoGPT's model and training step in eager PyTorch, for a same-machine baseline of bench_train.

A faithful copy of karpathy/nanoGPT model.py + train.py's inner loop (as of 2023): pre-LN blocks,
the "slow" attention path (PyTorch < 2.0 has no scaled_dot_product_attention, so nanoGPT masks a
materialized (T, T) score matrix), exact-erf nn.GELU, tied LM head, AdamW over decay/no-decay groups,
grad clipping 1.0, zero_grad(set_to_none=True). Batches are drawn at random from the same uint16
train.bin that bench_train reads. Optional: `python3 -c 'import torch'` must work (Debian:
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


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        T = c["block_size"]
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], c["bias"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], c["bias"]),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self):
        return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


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

    t0 = time.perf_counter()
    for it in range(args.train):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        X, Y = window_batch() if args.windows else get_batch()
        loss = model(X, Y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (it + 1) % 250 == 0:
            print(f"step {it + 1}: train loss {loss.item():.4f}, val (20 batches) {val_loss(20):.4f}", flush=True)
    print(f"nanogpt_eager: {args.train} steps in {time.perf_counter() - t0:.0f} s, feeding "
          f"{'stride-T windows' if args.windows else 'random offsets'}: val loss {val_loss(20):.4f} (20 batches), "
          f"{val_loss(200):.4f} (200 batches)")


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
    ap.add_argument("--windows", action="store_true",
                    help="with --train: feed non-overlapping block_size windows in a shuffled order each epoch "
                         "(as spmd-train's loader) instead of nanoGPT's random offsets")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    c = dict(PRESETS[args.preset], vocab_size=65, bias=False)
    model = GPT(c)
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

    if args.train:
        train(args, model, optimizer, get_batch, data, B, T)
        return

    times, losses = [], []
    for k in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        X, Y = get_batch()
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
                  loadavg_1m=os.getloadavg()[0])
    print(f"nanogpt_eager: {args.preset} | torch {torch.__version__} | {args.threads} thread(s) | {n} params | "
          f"{B * T} tokens/step | load {result['loadavg_1m']:.2f}")
    print(f"  tokens/s      {tokens_per_s:.0f}")
    print(f"  median step   {median_ms:.2f} ms (min {min(times):.2f})")
    print(f"  model FLOP/s  {result['achieved_gflops']:.1f} GFLOP/s (6N + 12 L T C per token)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
