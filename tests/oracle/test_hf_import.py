"""Pretrained GPT-2 in and out, against Hugging Face transformers.

1. A GPT2LMHeadModel saved by save_pretrained starts spmd-train (train.init_from) on meshes [1],
   [2,2] (data x model, vocab padded 65 -> 128) and FSDP-4: the first step's loss, taken before the
   first update, equals transformers' loss on the same batch.
2. spmd-train's export of a trained checkpoint as a folder (config.json and model.safetensors)
   opens with from_pretrained and gives the loss our own run gives when it starts from that
   export; the single-file export (--out X.safetensors) holds the same weights.

The batch is pinned by the data: the token file holds exactly batch_size windows, so the first
step's global batch is all of them (in the loader's order, which a mean loss does not see).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402
from hf_compare import (DATA_MODEL_2X2, check_close, our_first_loss, transformers_loss,  # noqa: E402
                        write_config, write_windows)

torch, transformers = require("torch", "transformers")

V, T, B, C, L, H = 65, 32, 8, 32, 2, 4  # vocab, block, global batch, width, layers, heads

MESHES = {
    "single": [],
    "data-model-2x2": DATA_MODEL_2X2,
    "fsdp-4": ["--set", "mesh.shape=[4]", "--set", "mesh.axes=[fsdp]", "--set",
               "sharding_rules=[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], "
               "[seq, null], [kv, null]]"],
}


def write_data(d):
    """B windows of T+1 tokens (B*T+1 tokens): the first step's batch is all of them."""
    g = torch.Generator().manual_seed(7)
    return write_windows(d, torch.randint(0, V, (B * T + 1,), generator=g, dtype=torch.int32), T, B)


def main():
    d = temp_dir()
    data, windows = write_data(d)
    config = write_config(os.path.join(d, "tiny.yaml"),
                          f"vocab_size: {V}, block_size: {T}, n_layer: {L}, n_head: {H}, n_embd: {C}, dropout: 0.0",
                          f"train: {data}, val: {data}, batch_size: {B}")

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    pretrained = os.path.join(d, "pretrained")
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # every tensor distinct (LayerNorm gains, biases too): a mixed-up mapping shows
        for p in hf.parameters():
            p.add_(0.2 * torch.randn_like(p))
    hf.save_pretrained(pretrained)
    reference = transformers_loss(hf, windows)
    assert abs(reference - torch.log(torch.tensor(float(V))).item()) > 0.1, "the model should be far from uniform"

    # 1. HF weights in, on three meshes (the single-process run also trains on, for part 2).
    ck = os.path.join(d, "ck")
    for name, mesh in MESHES.items():
        extra = mesh + ["--set", f"train.init_from={pretrained}"]
        if name == "single":
            extra += ["--set", "train.steps=3", "--set", f"checkpoint.dir={ck}"]
        check_close(f"init_from, mesh {name}", our_first_loss(config, os.path.join(d, "out-" + name), extra), reference)

    # 2. Our export out: transformers opens it and agrees with our run started from it.
    exported = os.path.join(d, "exported")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(ck, "step_00000003"), "--out", exported])
    trained = transformers.GPT2LMHeadModel.from_pretrained(exported).eval()
    one_file = os.path.join(d, "one.safetensors")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(ck, "step_00000003"), "--out", one_file])
    with open(one_file, "rb") as a, open(os.path.join(exported, "model.safetensors"), "rb") as b:
        assert a.read() == b.read(), "the folder's weights should be the single file's"
    theirs = transformers_loss(trained, windows)
    assert abs(theirs - reference) > 1e-4, "the export should hold the trained weights, not the pretrained ones"
    ours = our_first_loss(config, os.path.join(d, "out-export"), ["--set", f"train.init_from={exported}"])
    check_close("export of 3 trained steps, from_pretrained", ours, theirs)
    print("OK")


if __name__ == "__main__":
    main()
