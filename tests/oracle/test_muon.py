"""Muon against torch.optim.Muon (and torch.optim.AdamW) themselves.

1. Whole matrices: the same matrices and gradients through torch.optim.Muon and through our
   momentum, Newton-Schulz and step (tests/workers/muon_worker.cpp, lib/muon/muon_update.cpp): the
   same bits at every step (the orthogonalised update, the momentum, the parameter), for ns_dtype
   bfloat16 (torch's own function) and float32 (torch's function with float32 in place of
   bfloat16), Nesterov on and off, both learning-rate adjustments, wide, tall and square matrices.
2. End to end: a GPT-2 from a Hugging Face folder (train.init_from) trained 1 and 3 steps by
   spmd-train with train.optimizer muon, exported, against a transformers GPT2LMHeadModel trained
   on the same batches by torch.optim.Muon (each block matrix as nn.Linear holds it: Conv1D's
   weight transposed) and torch.optim.AdamW (embeddings, norms, biases; nanoGPT's decay groups),
   after clipping the global gradient norm. The two forwards differ by float rounding, so the
   weights agree within a tolerance, relative to the size of the update itself (Frobenius norms).
   Measured (torch 2.15, CPU): Muon's matrices 6e-6 with ns_dtype float32 (tolerance 1e-4) and
   1-2 % with bfloat16, whose iteration amplifies its input's rounding (tolerance 0.1); AdamW's
   parameters 2e-4 (tolerance 1e-3; its first updates divide each gradient by its own size, so
   the rounding of the smallest shows), 3e-3 after three steps beside bfloat16 Muon (0.03). Losses
   agree to 1e-5 (measured 1e-7; 5e-6 with bfloat16).
"""
import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import BIN, require, run, temp_dir, tool  # noqa: E402
from hf_compare import write_config, write_windows  # noqa: E402

torch, transformers, safetensors_torch = require("torch", "transformers", "safetensors.torch")
import torch.optim._muon as torch_muon  # noqa: E402

if not hasattr(torch.optim, "Muon"):
    print(f"SKIP: torch {torch.__version__} has no torch.optim.Muon (PyTorch >= 2.9)")
    sys.exit(77)

COEFFS = (3.4445, -4.775, 2.0315)


def float32_newton_schulz():
    """torch's _zeropower_via_newtonschulz with float32 in place of bfloat16 (ns_dtype float32)."""
    source = inspect.getsource(torch_muon._zeropower_via_newtonschulz)
    assert source.count("torch.bfloat16") == 1, source
    namespace = dict(torch_muon.__dict__)
    exec(source.replace("torch.bfloat16", "torch.float32"), namespace)
    return namespace["_zeropower_via_newtonschulz"]


class NsDtype:
    """Within it, torch.optim.Muon orthogonalises in `dtype` (bfloat16: torch's own function)."""

    def __init__(self, dtype):
        self.fn = float32_newton_schulz() if dtype == "float32" else torch_muon._zeropower_via_newtonschulz

    def __enter__(self):
        self.saved = torch_muon._zeropower_via_newtonschulz
        torch_muon._zeropower_via_newtonschulz = self.fn
        return self.fn

    def __exit__(self, *exc):
        torch_muon._zeropower_via_newtonschulz = self.saved


def check_whole_matrices(d):
    shapes = {"wide": (32, 96), "tall": (96, 32), "square": (48, 48)}
    settings = [
        dict(ns_dtype="float32", nesterov=True, adjust_lr_fn="original"),
        dict(ns_dtype="bfloat16", nesterov=True, adjust_lr_fn="original"),
        dict(ns_dtype="float32", nesterov=False, adjust_lr_fn="match_rms_adamw"),
        dict(ns_dtype="bfloat16", nesterov=False, adjust_lr_fn="match_rms_adamw"),
    ]
    steps, lr, wd, momentum, eps, ns_steps = 3, 0.02, 0.1, 0.95, 1e-7, 5
    g = torch.Generator().manual_seed(5)
    tensors = {}
    for name, shape in shapes.items():
        tensors[f"{name}.param"] = torch.randn(shape, generator=g)
        for k in range(steps):
            tensors[f"{name}.grad.{k}"] = torch.randn(shape, generator=g) * (0.5 + k)
    for n, s in enumerate(settings):
        meta = {"matrices": ",".join(shapes), "steps": str(steps), "lr": repr(lr), "weight_decay": repr(wd),
                "momentum": repr(momentum), "nesterov": "1" if s["nesterov"] else "0", "ns_steps": str(ns_steps),
                "ns_a": repr(COEFFS[0]), "ns_b": repr(COEFFS[1]), "ns_c": repr(COEFFS[2]), "eps": repr(eps),
                "adjust_lr_fn": s["adjust_lr_fn"], "ns_dtype": s["ns_dtype"]}
        inp, out = os.path.join(d, f"in{n}.safetensors"), os.path.join(d, f"out{n}.safetensors")
        safetensors_torch.save_file(tensors, inp, metadata=meta)
        run([os.path.join(BIN, "tests", "muon_worker"), inp, out])
        ours = safetensors_torch.load_file(out)
        with NsDtype(s["ns_dtype"]) as ns:
            for name in shapes:
                p = torch.nn.Parameter(tensors[f"{name}.param"].clone())
                opt = torch.optim.Muon([p], lr=lr, weight_decay=wd, momentum=momentum, nesterov=s["nesterov"],
                                       ns_coefficients=COEFFS, eps=eps, ns_steps=ns_steps,
                                       adjust_lr_fn=s["adjust_lr_fn"])
                buf = torch.zeros_like(p)
                for k in range(steps):
                    grad = tensors[f"{name}.grad.{k}"].clone()
                    buf = buf.lerp(grad, 1 - momentum)  # what torch orthogonalises, for comparing it alone
                    update = grad.lerp(buf, momentum) if s["nesterov"] else buf
                    theirs_ns = ns(update, COEFFS, ns_steps, eps).float()
                    p.grad = grad
                    opt.step()
                    what = f"{s} {name} step {k}"
                    for kind, theirs in (("ns", theirs_ns), ("buf", opt.state[p]["momentum_buffer"]), ("param", p.detach())):
                        mine = ours[f"{name}.{kind}.{k}"]
                        assert torch.equal(mine, theirs), \
                            f"{what}: {kind} differs by {(mine - theirs).abs().max().item():.3e}"
        print(f"whole matrices, {s}: the same bits as torch.optim.Muon over {steps} steps")


V, T, B, C, L, H = 65, 32, 8, 32, 2, 4  # vocab, block, global batch, width, layers, heads
MUON_LR, LR = 0.02, 1.0e-3
# Of the update's size (relative Frobenius): (Muon's matrices, AdamW's parameters).
TOLERANCE = {"float32": (1e-4, 1e-3), "bfloat16": (0.1, 0.03)}


def takes_muon(name):
    """The blocks' matrices (transformers' names): attention's c_attn and c_proj, the MLP's c_fc and c_proj."""
    return ".h." in name and name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))


def reference_training(pretrained, windows, ns_dtype, steps):
    """transformers' GPT-2 trained by torch.optim.Muon + AdamW; its state dict after each step."""
    model = transformers.GPT2LMHeadModel.from_pretrained(pretrained).train()
    matrices = {n: p for n, p in model.named_parameters() if takes_muon(n)}
    assert len(matrices) == 4 * L
    linear = {n: torch.nn.Parameter(p.detach().t().contiguous()) for n, p in matrices.items()}  # (out, in)
    decay = [p for n, p in model.named_parameters() if n not in matrices and p.dim() == 2]  # wte, wpe
    no_decay = [p for n, p in model.named_parameters() if n not in matrices and p.dim() < 2]
    adamw = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=LR, betas=(0.9, 0.99), eps=1e-8)
    muon = torch.optim.Muon(list(linear.values()), lr=MUON_LR, weight_decay=0.1, momentum=0.95, nesterov=True,
                            ns_coefficients=COEFFS, eps=1e-7, ns_steps=5)
    snapshots, losses = [], []
    for _ in range(steps):
        model.zero_grad()
        logits = model(windows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), windows[:, 1:].reshape(-1))
        loss.backward()
        losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for n, p in matrices.items():
            linear[n].grad = p.grad.t().contiguous()
        adamw.step()
        with NsDtype(ns_dtype):
            muon.step()
        with torch.no_grad():
            for n, p in matrices.items():
                p.copy_(linear[n].t())
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return snapshots, losses


def ours_after(d, config, pretrained, ns_dtype, steps):
    """spmd-train's weights after each of `steps` steps (exported checkpoints), and its losses."""
    out, ck = os.path.join(d, f"out-{ns_dtype}"), os.path.join(d, f"ck-{ns_dtype}")
    run([tool("spmd-train"), "--config", config, "--set", f"output.dir={out}", "--set", f"train.init_from={pretrained}",
         "--set", f"train.steps={steps}", "--set", "train.lr_schedule=constant", "--set", "train.optimizer=muon",
         "--set", f"train.muon.lr={MUON_LR}", "--set", f"train.muon.ns_dtype={ns_dtype}",
         "--set", f"checkpoint.dir={ck}", "--set", "checkpoint.every=1", "--set", f"checkpoint.keep={steps}"],
        timeout=240)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    weights = []
    for step in range(1, steps + 1):
        exported = os.path.join(d, f"export-{ns_dtype}-{step}")
        run([tool("spmd-train"), "export", "--checkpoint", os.path.join(ck, f"step_{step:08d}"), "--out", exported])
        model = transformers.GPT2LMHeadModel.from_pretrained(exported)
        weights.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return weights, losses


def check_end_to_end(d):
    g = torch.Generator().manual_seed(7)
    data, windows = write_windows(d, torch.randint(0, V, (B * T + 1,), generator=g, dtype=torch.int32), T, B)
    config = write_config(os.path.join(d, "tiny.yaml"),
                          f"vocab_size: {V}, block_size: {T}, n_layer: {L}, n_head: {H}, n_embd: {C}, dropout: 0.0",
                          f"train: {data}, val: {data}, batch_size: {B}")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    pretrained = os.path.join(d, "pretrained")
    transformers.GPT2LMHeadModel(cfg).save_pretrained(pretrained)
    initial = {n: p.detach().clone() for n, p in transformers.GPT2LMHeadModel.from_pretrained(pretrained).named_parameters()}
    steps = 3
    for ns_dtype, tolerance in TOLERANCE.items():  # tolerance: (Muon's matrices, AdamW's parameters)
        theirs, their_losses = reference_training(pretrained, windows, ns_dtype, steps)
        ours, our_losses = ours_after(d, config, pretrained, ns_dtype, steps)
        for k in (0, steps - 1):
            worst = {}
            for n, want in theirs[k].items():
                moved = (want - initial[n]).norm().item()
                if moved == 0:
                    continue
                worst[n] = (ours[k][n] - want).norm().item() / moved
            muon_worst = max(v for n, v in worst.items() if takes_muon(n))
            adamw_worst = max(v for n, v in worst.items() if not takes_muon(n))
            print(f"end to end, ns_dtype {ns_dtype}, after step {k + 1}: Muon matrices within {muon_worst:.2e} of "
                  f"the update's size, AdamW's parameters within {adamw_worst:.2e} (tolerances {tolerance[0]:g}, {tolerance[1]:g})")
            assert muon_worst <= tolerance[0] and adamw_worst <= tolerance[1], \
                sorted(worst.items(), key=lambda kv: -kv[1])[:4]
        rel = max(abs(a - b) / abs(b) for a, b in zip(our_losses, their_losses))
        print(f"end to end, ns_dtype {ns_dtype}: losses {our_losses} vs {their_losses} (relative {rel:.1e})")
        assert rel <= 1e-5, (our_losses, their_losses)


def main():
    d = temp_dir()
    check_whole_matrices(d)
    check_end_to_end(d)
    print("OK")


if __name__ == "__main__":
    main()
