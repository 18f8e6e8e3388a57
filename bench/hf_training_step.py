"""The training step the transformers peers time (bench/llama_transformers.py, bench/moe_transformers.py):
their command line, the model and AdamW as our benchmark configs set it, random windows of a token file,
and the timed loop."""
import argparse
import os
import time

import torch


def adamw_as_ours(model):
    """AdamW with weight decay 0.1 on the matrices and embeddings only, lr 1e-3, betas (0.9, 0.99)."""
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.99))


def window_sampler(path, batch, block):
    """batch() -> (inputs, targets): `batch` random windows of `block` + 1 ids of a uint16 token file."""
    data = torch.from_file(path, shared=False, size=os.path.getsize(path) // 2, dtype=torch.uint16)

    def sample():
        ix = torch.randint(0, len(data) - block - 1, (batch,))
        rows = torch.stack([data[i:i + block + 1].to(torch.int64) for i in ix.tolist()])
        return rows[:, :-1], rows[:, 1:]
    return sample


def timed_steps(model, optimizer, sample, loss_of, warmup, steps):
    """warmup + steps of forward (loss_of(x, y)), backward, clipping at 1.0 and the update; the timed
    steps' wall seconds, CPU seconds (every thread's: a busy machine inflates wall time) and losses."""
    times, cpu_times, losses = [], [], []
    for k in range(warmup + steps):
        x, y = sample()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = loss_of(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if k >= warmup:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            losses.append(loss.item())
    return times, cpu_times, losses


def peer_arguments(doc, presets, preset, warmup, steps, dtypes=False):
    """The peers' command line: --preset (of `presets`), --data, --dtype (with `dtypes`), --threads,
    --compile, --warmup, --steps, --peak-size, --json."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(presets), default=preset)
    ap.add_argument("--data", required=True, help="uint16 token file (ids < the preset's vocabulary)")
    if dtypes:
        ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="matmul operands: plain fp32, or bf16 autocast over fp32 weights")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--peak-size", type=int, default=2048, help="n of the n^3 matmul that measures the peak")
    ap.add_argument("--json", help="write the results here")
    return ap.parse_args()


def peer_model(args, preset, build_model):
    """Threads and seed set, the preset's model built: (model, its AdamW, the model the steps call:
    torch.compile'd with --compile)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    model = build_model(preset)
    return model, adamw_as_ours(model), torch.compile(model) if args.compile else model
