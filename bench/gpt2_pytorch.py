#!/usr/bin/env python3
"""GPT-2 in PyTorch 2.x, eager or torch.compile: the baseline bench_train is compared with on a GPU.

The same model and step as spmd-train's configs/gpt2-124m.yaml: pre-LN blocks with biases, fused
causal attention (F.scaled_dot_product_attention), GPT-2's tanh GELU, the LM head tied to the token
embedding, bf16 autocast over fp32 master weights (spmd-train's model.matmul_dtype: bfloat16),
AdamW (fused on CUDA) over decay / no-decay groups, grad clipping 1.0. Batches are random windows
of a uint16 token file. Reports tokens/s, the median step, MFU against a bf16 n^3 matmul measured
here (the same FLOP count as bench_train: 6 N + 12 L T C per token, N without wpe) and the peak of
the CUDA caching allocator. Needs torch >= 2.0; not used by the project itself.

    python3 bench/gpt2_pytorch.py --data tokens.bin --device cuda --batch 16 [--compile] [--json out.json]
    python3 bench/gpt2_pytorch.py --data tokens.bin --device cpu --preset tiny --steps 3   # a check anywhere
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
    "tiny": dict(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=50257),
    # nanoGPT's CPU runs on char-level shakespeare (configs/bench/baby.yaml, shakespeare-char.yaml): no biases.
    "baby": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, bias=False, batch=12),
    "shakespeare-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, bias=False, batch=64),
}


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["n_embd"]
        self.n_head = c["n_head"]
        bias = c.get("bias", True)
        self.ln1, self.ln2 = nn.LayerNorm(C, bias=bias), nn.LayerNorm(C, bias=bias)
        self.qkv, self.attn_out = nn.Linear(C, 3 * C, bias=bias), nn.Linear(C, C, bias=bias)
        self.fc, self.mlp_out = nn.Linear(C, 4 * C, bias=bias), nn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], bias=c.get("bias", True))
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith(("attn_out.weight", "mlp_out.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def matmul_peak_gflops(n, device, dtype):
    """Best of 5 n^3 products in `dtype`, timed from a synchronized start to a synchronized end."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(6):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="uint16 token file (ids < the vocabulary)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, help="sequences per step (default: the preset's, else 16)")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="matmul operands: bf16 autocast over fp32 weights, or plain fp32")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--peak-size", type=int, default=8192, help="n of the n^3 matmul (in --dtype) that measures the peak")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    c = PRESETS[args.preset]
    B, T = args.batch or c.get("batch", 16), c["block_size"]
    dtype = getattr(torch, args.dtype)
    model = GPT(c).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    step_model = torch.compile(model) if args.compile else model
    # The uint16 token file through torch alone (no numpy needed on the GPU host).
    data = torch.from_file(args.data, shared=False, size=os.path.getsize(args.data) // 2, dtype=torch.uint16)

    def batch():
        ix = torch.randint(0, len(data) - T - 1, (B,))
        rows = torch.stack([data[i:i + T + 1].to(torch.int64) for i in ix.tolist()]).to(device)
        return rows[:, :-1], rows[:, 1:]

    times, losses = [], []
    for k in range(args.warmup + args.steps):
        x, y = batch()
        sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        if k >= args.warmup:
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())

    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops_per_token = 6 * n_params + 12 * c["n_layer"] * T * c["n_embd"]
    step_s = statistics.median(times)
    tokens_per_s = B * T / step_s
    peak = matmul_peak_gflops(args.peak_size, device, dtype)
    result = dict(mode="compile" if args.compile else "eager", preset=args.preset, torch=torch.__version__, dtype=args.dtype,
                  threads=torch.get_num_threads(),
                  device=str(device), batch=B, tokens_per_step=B * T, median_step_ms=step_s * 1e3,
                  tokens_per_s=tokens_per_s, achieved_gflops=flops_per_token * tokens_per_s / 1e9,
                  matmul_peak_gflops=peak, mfu=flops_per_token * tokens_per_s / 1e9 / peak,
                  peak_memory_mib=torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
                  losses=losses)
    print(f"gpt2_pytorch {result['mode']}: {args.preset} on {device}, torch {torch.__version__}, batch {B}x{T}: "
          f"{tokens_per_s:.0f} tokens/s, median step {step_s * 1e3:.1f} ms, MFU {100 * result['mfu']:.1f}% of "
          f"{peak / 1e3:.1f} TFLOP/s, peak memory {result['peak_memory_mib'] or float('nan'):.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
