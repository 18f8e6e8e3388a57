"""Shared by the oracles that compare spmd-train's first-step loss with transformers' loss on the
same batch: the token file whose windows are the whole first batch, a one-process config that
logs that step, the two losses, and their comparison."""
import json
import os

from oracle_support import run, tool

REL = 1e-5  # relative: float rounding, as the invariance tests (kFloatRounding)

# A data x model mesh of 4 processes with every tensor-parallel rule (vocab padded, heads split).
DATA_MODEL_2X2 = ["--set", "mesh.shape=[2,2]", "--set", "mesh.axes=[data,model]", "--set",
                  "sharding_rules=[[batch, data], [vocab, model], [heads, model], [mlp, model], "
                  "[embed, null], [seq, null], [kv, null]]"]


def write_windows(d, tokens, block, batch):
    """tokens (batch * block + 1 ids, a torch tensor) as the uint16 token file d/train.bin. Returns its
    path and the batch windows of block + 1 tokens (batch, block + 1): the first step's whole batch
    when the config's batch_size is `batch`."""
    import torch
    path = os.path.join(d, "train.bin")
    with open(path, "wb") as f:
        f.write(tokens.numpy().astype("<u2").tobytes())
    windows = torch.stack([tokens[i * block: i * block + block + 1] for i in range(batch)]).long()
    return path, windows


def spread_norm_scales(model):
    """The model with every norm scale moved away from 1, each one different (a random model's are all
    1, which would hide a scale read from the wrong tensor)."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
    return model


def write_config(path, model, data):
    """A one-process config at `path` that trains one step and logs it; `model` and `data` are the
    insides of the model and data maps."""
    with open(path, "w") as f:
        f.write("mesh: {shape: [1], axes: [data]}\n"
                "sharding_rules: [[batch, data], [vocab, null], [heads, null], [mlp, null], [embed, null], "
                "[seq, null], [kv, null]]\n"
                f"model: {{{model}}}\n"
                f"data: {{{data}}}\n"
                "train: {steps: 1, decay_steps: 10, warmup_steps: 0, lr: 1.0e-3, log_every: 1, eval_every: 0}\n"
                "runtime: {timeout_s: 60}\n")
    return path


def transformers_loss(model, windows):
    """transformers' mean cross-entropy over the windows (batch, block + 1): inputs all but the last
    token, targets all but the first."""
    import torch
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()  # (batch, block, vocab)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                                 windows[:, 1:].reshape(-1)).item()


def our_first_loss(config, out, extra):
    """Trains with `extra` and returns the first step's loss (metrics.jsonl: before the first update)."""
    run([tool("spmd-train"), "--config", config, "--set", f"output.dir={out}"] + extra, timeout=240)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        first = json.loads(f.readline())
    assert first["step"] == 1, first  # numbered as the progress line
    return first["loss"]


def check_close(what, ours, theirs):
    rel = abs(ours - theirs) / abs(theirs)
    print(f"{what}: spmd-train {ours:.7f} transformers {theirs:.7f} (relative {rel:.1e})")
    assert rel <= REL, f"{what}: relative difference {rel:.2e} above {REL}"
