#!/usr/bin/env python3
"""transformers' LlamaForCausalLM training step on PyTorch 2.x, eager or torch.compile: the peer
bench_train's Llama is compared with (bench/llama_cpu_vs_transformers.sh).

The model is built from a LlamaConfig of the preset's shape (no download): RMSNorm, rotary
positions, grouped-query attention through F.scaled_dot_product_attention ("sdpa"), SwiGLU, no
biases. The step is the one bench/gpt2_pytorch.py times: forward (bf16 autocast over fp32 weights
with --dtype bfloat16), backward, grad clipping 1.0, torch.optim.AdamW over decay (matrices) /
no-decay groups with configs/bench/baby.yaml's settings (lr 1e-3, betas 0.9/0.99, weight decay
0.1), zero_grad(set_to_none=True). Batches are random windows of a uint16 token file. Reports the
median step, MFU against an n^3 matmul in --dtype measured here (FLOPs as bench_train counts them:
6 N + 12 L T C per token, N every parameter) and the losses.

    python3 bench/llama_transformers.py --preset baby --data tokens.bin --threads 2 [--compile] [--json out.json]
"""
import json
import os
import statistics
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_pytorch import matmul_peak_gflops  # noqa: E402  the same peak as the GPT-2 peer's
from hf_training_step import peer_arguments, peer_model, timed_steps, window_sampler  # noqa: E402

# bench_train's shapes (bench/llama_cpu_vs_transformers.sh passes the same as --set overrides).
PRESETS = {
    # nanoGPT's CPU "baby" size as a Llama.
    "baby": dict(layers=4, heads=4, kv_heads=2, width=128, mlp=352, block=64, batch=12, vocab=65, theta=10000.0,
                 tied=False),
    # The 10.7M GPT-2's shape as a Llama (9.5M parameters).
    "9.5m": dict(layers=6, heads=6, kv_heads=2, width=384, mlp=1024, block=256, batch=16, vocab=65, theta=10000.0,
                 tied=False),
    # SmolLM2-135M (configs/smollm2-135m.yaml) with a short block.
    "smollm2-135m": dict(layers=30, heads=9, kv_heads=3, width=576, mlp=1536, block=128, batch=4, vocab=49152,
                         theta=100000.0, tied=True),
}


def build_model(p):
    config = transformers.LlamaConfig(
        vocab_size=p["vocab"], hidden_size=p["width"], intermediate_size=p["mlp"], num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"], max_position_embeddings=p["block"],
        rms_norm_eps=1e-5, rope_theta=p["theta"], tie_word_embeddings=p["tied"], attention_dropout=0.0)
    config._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(config).train()


def main():
    args = peer_arguments(__doc__, PRESETS, "baby", 3, 20, dtypes=True)
    p = PRESETS[args.preset]
    B, T = p["batch"], p["block"]
    model, optimizer, step_model = peer_model(args, p, build_model)

    def loss_of(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
            logits = step_model(input_ids=x).logits
        return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    times, _, losses = timed_steps(model, optimizer, window_sampler(args.data, B, T), loss_of, args.warmup, args.steps)

    n_params = sum(q.numel() for q in model.parameters())
    flops_per_token = 6 * n_params + 12 * p["layers"] * T * p["width"]
    step_s = statistics.median(times)
    achieved = flops_per_token * B * T / step_s / 1e9
    peak = matmul_peak_gflops(args.peak_size, torch.device("cpu"), getattr(torch, args.dtype))
    result = dict(mode="compile" if args.compile else "eager", preset=args.preset, torch=torch.__version__,
                  transformers=transformers.__version__, dtype=args.dtype, threads=torch.get_num_threads(),
                  params=n_params, tokens_per_step=B * T, median_step_ms=step_s * 1e3, step_ms=[t * 1e3 for t in times],
                  achieved_gflops=achieved, matmul_peak_gflops=peak, mfu=achieved / peak, losses=losses,
                  loadavg_1m=os.getloadavg()[0])
    print(f"llama_transformers {result['mode']}: {args.preset}, {n_params} params, {args.dtype}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, batch {B}x{T}: median step {step_s * 1e3:.1f} ms, "
          f"MFU {100 * result['mfu']:.1f}% of {peak:.0f} GFLOP/s, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
