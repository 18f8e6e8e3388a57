#!/usr/bin/env python3
"""transformers' Qwen3MoeForCausalLM training step on PyTorch 2.x, eager or torch.compile: the peer
bench_train's mixture-of-experts Llama is compared with (bench/moe_vs_transformers.sh).

The model is built from a Qwen3MoeConfig of the preset's shape (no download): every layer's MLP
is E routed SwiGLU experts, k per token (softmax router, top-k, renormalised), per-head query/key
RMSNorm, grouped-query attention through "sdpa", the load-balancing loss added with
router_aux_loss_coef (output_router_logits). The experts run as transformers runs them by
default (config._experts_implementation, reported). The step is bench/llama_transformers.py's:
forward, backward, grad clipping 1.0, AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on
matrices), zero_grad(set_to_none=True), random windows of a uint16 token file. MFU counts the
active parameters (k of E experts): 6 N_active + 12 L T C FLOPs per token.

    python3 bench/moe_transformers.py --preset 10m --data tokens.bin --threads 2 [--compile] [--json out.json]
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

# bench_train's shapes (bench/moe_vs_transformers.sh passes the same as --set overrides).
PRESETS = {
    # 6 layers, 384 wide, 6 query / 2 key-value heads, 8 experts of width 512, 2 per token:
    # 9.5M active parameters (31M in all), a character vocabulary.
    "10m": dict(layers=6, heads=6, kv_heads=2, width=384, experts=8, k=2, expert_mlp=512, block=128, batch=16,
                vocab=65, theta=10000.0),
    # The tests' size, for a quick try.
    "tiny": dict(layers=2, heads=4, kv_heads=2, width=64, experts=4, k=2, expert_mlp=32, block=32, batch=4,
                 vocab=65, theta=10000.0),
}


def build_model(p):
    config = transformers.Qwen3MoeConfig(
        vocab_size=p["vocab"], hidden_size=p["width"], num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"], head_dim=p["width"] // p["heads"],
        intermediate_size=4 * p["width"], moe_intermediate_size=p["expert_mlp"], num_experts=p["experts"],
        num_experts_per_tok=p["k"], norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        output_router_logits=True, router_aux_loss_coef=0.001, max_position_embeddings=p["block"],
        rms_norm_eps=1e-5, rope_theta=p["theta"], tie_word_embeddings=False, attention_dropout=0.0)
    config._attn_implementation = "sdpa"
    return transformers.Qwen3MoeForCausalLM(config).train()


def active_params(model, p):
    """Every parameter but the experts' (E - k) / E share that a token does not reach."""
    total = sum(q.numel() for name, q in model.named_parameters())
    experts = sum(q.numel() for name, q in model.named_parameters() if ".experts." in name)
    return total, total - experts + experts * p["k"] // p["experts"]


def main():
    args = peer_arguments(__doc__, PRESETS, "10m", 2, 5)
    p = PRESETS[args.preset]
    B, T = p["batch"], p["block"]
    model, optimizer, step_model = peer_model(args, p, build_model)

    def loss_of(x, y):
        out = step_model(input_ids=x)
        loss = torch.nn.functional.cross_entropy(out.logits.float().view(-1, out.logits.size(-1)), y.reshape(-1))
        return loss + model.config.router_aux_loss_coef * out.aux_loss  # as the model's own loss adds it

    times, cpu_times, losses = timed_steps(model, optimizer, window_sampler(args.data, B, T), loss_of, args.warmup,
                                           args.steps)

    n_params, n_active = active_params(model, p)
    flops_per_token = 6 * n_active + 12 * p["layers"] * T * p["width"]
    step_s = statistics.median(times)
    achieved = flops_per_token * B * T / step_s / 1e9
    peak = matmul_peak_gflops(args.peak_size, torch.device("cpu"), torch.float32)
    result = dict(mode="compile" if args.compile else "eager", preset=args.preset, torch=torch.__version__,
                  transformers=transformers.__version__, experts_implementation=model.config._experts_implementation,
                  threads=torch.get_num_threads(), params=n_params, active_params=n_active, tokens_per_step=B * T,
                  flops_per_token=flops_per_token,
                  median_step_ms=step_s * 1e3, step_ms=[t * 1e3 for t in times],
                  step_cpu_ms=[t * 1e3 for t in cpu_times], median_step_cpu_ms=statistics.median(cpu_times) * 1e3, achieved_gflops=achieved,
                  matmul_peak_gflops=peak, mfu=achieved / peak, losses=losses, loadavg_1m=os.getloadavg()[0])
    print(f"moe_transformers {result['mode']}: {args.preset}, {n_params} params ({n_active} active), experts "
          f"{result['experts_implementation']}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"batch {B}x{T}: median step {step_s * 1e3:.1f} ms, MFU {100 * result['mfu']:.1f}% of {peak:.0f} GFLOP/s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
