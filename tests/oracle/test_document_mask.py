"""Packed documents (data.document_mask) against Hugging Face transformers.

A token file of B windows, each holding several documents ended by the end-of-text id (windows
after the first start mid-document). spmd-train trains three steps with document_mask on and
exports the checkpoint; GPT2LMHeadModel loads the export and runs every document of every window
alone (its position ids from 0). The mean cross-entropy of those runs over all B*T positions, the
end-of-text tokens' own targets included, equals the first-step loss of spmd-train started from
the export with document_mask on, on one process, a tensor-parallel mesh and a context-parallel
ring. The same windows run whole (no mask) give a clearly different loss: the check can fail.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402
from hf_compare import (DATA_MODEL_2X2, check_close, our_first_loss, transformers_loss,  # noqa: E402
                        write_config, write_windows)

torch, transformers = require("torch", "transformers")

V, T, B, C, L, H = 65, 32, 8, 32, 2, 4  # vocab, block, global batch, width, layers, heads
EOT = 3

MESHES = {
    "single": [],
    "data-model-2x2": DATA_MODEL_2X2,
    "context-ring-2": ["--set", "mesh.shape=[2]", "--set", "mesh.axes=[context]", "--set",
                       "sharding_rules=[[batch, null], [seq, context], [vocab, null], [heads, null], [mlp, null], "
                       "[embed, null], [kv, null]]", "--set", "runtime.context_exchange=ring"],
}


def write_data(d):
    """B windows of T+1 tokens (B*T+1 tokens, documents of 1 to 9 tokens): the first step's batch is all of them."""
    g = torch.Generator().manual_seed(11)
    tokens = []
    while len(tokens) < B * T + 1:
        n = int(torch.randint(1, 10, (1,), generator=g))
        tokens += [int(t) for t in torch.randint(0, V, (n - 1,), generator=g) if int(t) != EOT] + [EOT]
    return write_windows(d, torch.tensor(tokens[:B * T + 1], dtype=torch.int32), T, B)


def documents(window):
    """[start, end) of each document of a window's T inputs: an end-of-text token ends (and belongs to) its own."""
    spans, start = [], 0
    for t in range(T):
        if int(window[t]) == EOT:
            spans.append((start, t + 1))
            start = t + 1
    if start < T:
        spans.append((start, T))
    return spans


def packed_loss(model, windows):
    """Every document run alone from position 0; the mean cross-entropy over all B*T positions."""
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            for a, b in documents(w):
                logits = model(w[a:b].unsqueeze(0)).logits[0]  # (b - a, V), position ids 0 .. b - a - 1
                total += torch.nn.functional.cross_entropy(logits.double(), w[a + 1:b + 1], reduction="sum").item()
                count += b - a
    assert count == B * T
    return total / count


def main():
    d = temp_dir()
    data, windows = write_data(d)
    assert all(len(documents(w)) >= 3 for w in windows), "every window should pack several documents"
    assert any(int(windows[i - 1][T - 1]) != EOT for i in range(1, B)), "some window should start mid-document"
    config = write_config(os.path.join(d, "packed.yaml"),
                          f"vocab_size: {V}, block_size: {T}, n_layer: {L}, n_head: {H}, n_embd: {C}, dropout: 0.0",
                          f"train: {data}, val: {data}, batch_size: {B}, document_mask: true, eot_token: {EOT}")

    # A random GPT-2 (every tensor perturbed, so a mixed-up mapping shows), trained three packed steps.
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=EOT, eos_token_id=EOT)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.2 * torch.randn_like(p))
    pretrained = os.path.join(d, "pretrained")
    hf.save_pretrained(pretrained)
    ck = os.path.join(d, "ck")
    our_first_loss(config, os.path.join(d, "out-train"),
                   ["--set", f"train.init_from={pretrained}", "--set", "train.steps=3", "--set", f"checkpoint.dir={ck}"])

    exported = os.path.join(d, "exported")
    os.makedirs(exported)
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(ck, "step_00000003"),
         "--out", os.path.join(exported, "model.safetensors")])
    cfg.save_pretrained(exported)
    trained = transformers.GPT2LMHeadModel.from_pretrained(exported).eval()
    theirs = packed_loss(trained, windows)
    unpacked = transformers_loss(trained, windows)
    print(f"transformers: documents alone {theirs:.7f}, whole windows {unpacked:.7f}")
    assert abs(unpacked - theirs) / theirs > 1e-3, "the mask should change the loss"

    for name, mesh in MESHES.items():
        ours = our_first_loss(config, os.path.join(d, "out-" + name), mesh + ["--set", f"train.init_from={exported}"])
        check_close(f"packed batch, mesh {name}", ours, theirs)
    print("OK")


if __name__ == "__main__":
    main()
