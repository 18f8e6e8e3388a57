"""Hugging Face Qwen3, Qwen3-MoE, Mixtral and Qwen2-MoE in and out, against transformers' own models.

One family per run (the argument: qwen3, qwen3_moe, mixtral, qwen2_moe). A random small model of
that family (4 query heads over 2 key/value heads; the MoE ones 8 experts, 2 per token, router
auxiliary loss coefficient 0.1 so that it shows in the loss; Qwen3-MoE with mlp_only_layers [1],
Qwen2-MoE with a shared expert and its gate, Mixtral with the k weights renormalised), every norm
scale random (q_norm and k_norm too), initializer_range 0.2 so that a routing, RoPE or norm mistake
shows, written in two folders:
  A. save_pretrained, float32, small shards (model.safetensors.index.json): one tensor per expert;
  B. the model's own state dict as transformers 5 holds it (experts stacked: experts.gate_up_proj,
     experts.down_proj) in bfloat16, sharded by hand (MoE families; Qwen3 gets B as a bf16
     save_pretrained).
1. train.init_from: the first step's loss (before the first update; cross-entropy plus
   router_aux_loss_coef x the auxiliary loss) and aux_loss equal transformers' (the model called with
   output_router_logits=True, which returns load_balancing_loss_func's aux_loss; B: the bf16 weights
   in float32), on one process and on an expert-parallel mesh (2 processes, [expert, data]); matmuls
   in float32, relative tolerance 1e-5 (kFloatRounding); B also on experts x tensor parallel (2 x 2
   processes: each rank reads a block of experts and a slice of each expert's width).
2. export --out DIR of A after 3 steps: from_pretrained(DIR) loads it as the family's class and gives
   the loss (with its auxiliary loss) our run started from DIR gives.
3. Bad folders exit 2 naming the key or tensor: head_dim other than model.head_dim (Qwen3-MoE's model has
   heads twice hidden_size / num_attention_heads wide, as the published ones),
   an expert count other than model.moe.num_experts, a missing expert tensor, model.qk_norm unlike the
   family; and (qwen3_moe) export of experts no family has (no qk_norm, no shared expert,
   norm_topk_prob false) exits 2 naming model.qk_norm before making the folder.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402
from hf_compare import REL, check_close, spread_norm_scales, write_config, write_windows  # noqa: E402

torch, transformers = require("torch", "transformers")
from safetensors.torch import save_file  # noqa: E402  (installed with transformers)

V, T, B, C, L, H, HKV, F, E, K, I, S = 67, 32, 8, 32, 3, 4, 2, 48, 8, 2, 16, 24
COEF = 0.1
EP_MESH = ["--set", "mesh.shape=[2]", "--set", "mesh.axes=[data]", "--set",
           "sharding_rules=[[batch, data], [expert, data], [vocab, null], [heads, null], [mlp, null], "
           "[embed, null], [seq, null], [kv, null]]"]
# Experts over data, each expert's width (and the heads, the vocabulary) over model: 4 processes, so
# that a rank reads a block of experts and a slice of each.
EP_TP_MESH = ["--set", "mesh.shape=[2,2]", "--set", "mesh.axes=[data,model]", "--set",
              "sharding_rules=[[batch, data], [expert, data], [vocab, model], [heads, model], [mlp, model], "
              "[embed, null], [seq, null], [kv, null]]"]

FAMILIES = {
    "qwen3": dict(cls="Qwen3ForCausalLM", config="Qwen3Config", moe=None, qk_norm=True, kw={"head_dim": C // H}),
    # Heads wider than hidden_size / num_attention_heads, as in the published Qwen3-MoE models (model.head_dim).
    "qwen3_moe": dict(cls="Qwen3MoeForCausalLM", config="Qwen3MoeConfig", qk_norm=True, head_dim=2 * C // H,
                      moe=f"num_experts: {E}, num_experts_per_tok: {K}, moe_intermediate_size: {I}, "
                          f"router_aux_loss_coef: {COEF}, mlp_only_layers: [1]",
                      kw={"head_dim": 2 * C // H, "num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": I,
                          "router_aux_loss_coef": COEF, "mlp_only_layers": [1]}),
    "mixtral": dict(cls="MixtralForCausalLM", config="MixtralConfig", qk_norm=False,
                    moe=f"num_experts: {E}, num_experts_per_tok: {K}, moe_intermediate_size: {I}, "
                        f"router_aux_loss_coef: {COEF}, norm_topk_prob: true",
                    kw={"num_local_experts": E, "num_experts_per_tok": K, "router_aux_loss_coef": COEF},
                    intermediate=I),
    "qwen2_moe": dict(cls="Qwen2MoeForCausalLM", config="Qwen2MoeConfig", qk_norm=False,
                      moe=f"num_experts: {E}, num_experts_per_tok: {K}, moe_intermediate_size: {I}, "
                          f"router_aux_loss_coef: {COEF}, shared_expert_intermediate_size: {S}, norm_topk_prob: true",
                      kw={"num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": I,
                          "router_aux_loss_coef": COEF, "shared_expert_intermediate_size": S, "qkv_bias": False,
                          "norm_topk_prob": True}),
}


def random_model(fam):
    torch.manual_seed(0)
    cfg = getattr(transformers, fam["config"])(
        vocab_size=V, hidden_size=C, intermediate_size=fam.get("intermediate", F), num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=HKV, max_position_embeddings=2 * T, rms_norm_eps=1e-5,
        rope_theta=1000.0, tie_word_embeddings=False, initializer_range=0.2, bos_token_id=0, eos_token_id=0,
        **fam["kw"])
    return spread_norm_scales(getattr(transformers, fam["cls"])(cfg).eval())


def bf16_rounded(model):
    """The model with its parameters rounded to bfloat16 and held in float32 (its buffers, the rotary
    frequencies, untouched): what our float32 master weights hold after loading B."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def hf_losses(model, windows):
    """transformers' loss on the windows: cross-entropy (float64) plus router_aux_loss_coef x aux_loss, as
    its forward adds them when given labels, and the aux_loss alone (0 for a dense model)."""
    with torch.no_grad():
        moe = hasattr(model.config, "router_aux_loss_coef")
        out = model(windows[:, :-1], output_router_logits=True) if moe else model(windows[:, :-1])
        logits = out.logits.float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, V).double(), windows[:, 1:].reshape(-1)).item()
        aux = out.aux_loss.item() if moe else 0.0
        return ce + (model.config.router_aux_loss_coef * aux if moe else 0.0), aux


def write_stacked(model, folder, dtype):
    """The model's in-memory state dict (stacked experts) in `dtype`, in 3 shards with an index, beside
    save_pretrained's config.json."""
    model.config.save_pretrained(folder)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    assert any(k.endswith("experts.gate_up_proj") for k in state), sorted(state)[:20]
    names = sorted(state)
    weight_map = {}
    for i in range(3):
        part = names[i::3]
        file = f"model-{i + 1:05d}-of-00003.safetensors"
        save_file({k: state[k] for k in part}, os.path.join(folder, file), metadata={"format": "pt"})
        weight_map.update({k: file for k in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def our_config(d, name, fam, data):
    """hf_compare's one-process config, the experts replicated ([expert, null])."""
    moe = f", moe: {{{fam['moe']}}}" if fam["moe"] else ""
    moe += f", head_dim: {fam['head_dim']}" if "head_dim" in fam else ""
    path = write_config(os.path.join(d, f"{name}.yaml"),
                        f"arch: llama, vocab_size: {V}, block_size: {T}, n_layer: {L}, n_head: {H}, "
                        f"n_kv_head: {HKV}, n_embd: {C}, intermediate_size: {F}, rms_norm_eps: 1.0e-5, "
                        f"rope_theta: 1000.0, tie_embeddings: false, dropout: 0.0, matmul_dtype: float32, "
                        f"qk_norm: {str(fam['qk_norm']).lower()}{moe}",
                        f"train: {data}, val: {data}, batch_size: {B}")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[kv, null]]", "[kv, null], [expert, null]]", 1))
    return path


def our_first(config, out, extra):
    """Trains with `extra`; the first step's loss and aux_loss (metrics.jsonl: before the first update)."""
    run([tool("spmd-train"), "--config", config, "--set", f"output.dir={out}"] + extra, timeout=300)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        first = json.loads(f.readline())
    assert first["step"] == 1, first
    return first["loss"], first.get("aux_loss", 0.0)


def compare(what, ours, theirs):
    check_close(what + ": loss", ours[0], theirs[0])
    if theirs[1] != 0.0:
        check_close(what + ": aux_loss", ours[1], theirs[1])


def check_refused(config, d, name, folder, sets, named):
    extra = []
    for s in sets:
        extra += ["--set", s]
    p = run([tool("spmd-train"), "--config", config, "--set", f"output.dir={os.path.join(d, 'bad-' + name)}",
             "--set", f"train.init_from={folder}"] + extra, check=False, timeout=120)
    out = p.stderr + p.stdout
    assert p.returncode == 2 and all(n in out for n in named), (name, p.returncode, out[-2000:])
    print(f"{name}: exit 2 naming {', '.join(named)}")


def edited_copy(src, dst, edit_config=None, drop=None):
    """A copy of folder src with its config.json edited, or one tensor dropped from the index."""
    shutil.copytree(src, dst)
    if edit_config:
        path = os.path.join(dst, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(path, "w") as f:
            json.dump(cfg, f)
    if drop:
        path = os.path.join(dst, "model.safetensors.index.json")
        with open(path) as f:
            index = json.load(f)
        del index["weight_map"][drop]
        with open(path, "w") as f:
            json.dump(index, f)
    return dst


def bad_folders(d, config, fam, folder):
    wrong = 2 * fam.get("head_dim", C // H)
    check_refused(config, d, "head_dim", edited_copy(folder, os.path.join(d, "bad-hd"),
                                                     lambda c: c.update(head_dim=wrong)), [], ["model.head_dim"])
    check_refused(config, d, "qk_norm", folder, [f"model.qk_norm={str(not fam['qk_norm']).lower()}"],
                  ["model_type", "model.qk_norm"])
    if fam["moe"] is None:
        return
    check_refused(config, d, "num_experts", folder, ["model.moe.num_experts=4"], ["model.moe.num_experts", "config.json"])
    prefix = "block_sparse_moe.experts.3.w2" if fam["cls"].startswith("Mixtral") else "mlp.experts.3.down_proj"
    missing = f"model.layers.2.{prefix}.weight"
    check_refused(config, d, "missing expert", edited_copy(folder, os.path.join(d, "bad-missing"), drop=missing), [],
                  [missing])


def main():
    name = sys.argv[1]
    fam = FAMILIES[name]
    d = temp_dir()
    g = torch.Generator().manual_seed(7)
    data, windows = write_windows(d, torch.randint(0, V, (B * T + 1,), generator=g, dtype=torch.int32), T, B)
    config = our_config(d, name, fam, data)
    model = random_model(fam)
    folders = {"A": os.path.join(d, "hf-A"), "B": os.path.join(d, "hf-B")}
    model.save_pretrained(folders["A"], max_shard_size="20KB")
    assert os.path.exists(os.path.join(folders["A"], "model.safetensors.index.json")), os.listdir(folders["A"])
    if fam["moe"]:
        write_stacked(model, folders["B"], torch.bfloat16)
    else:
        model.to(torch.bfloat16).save_pretrained(folders["B"], max_shard_size="20KB")
        model = random_model(fam)
    reference = {"A": hf_losses(model, windows), "B": hf_losses(bf16_rounded(random_model(fam)), windows)}
    assert abs(reference["A"][0] - torch.log(torch.tensor(float(V))).item()) > 0.1, "far from uniform"
    if fam["moe"]:
        assert reference["A"][1] > 1.0, reference  # E * sum f_e P_e: 1 when balanced

    # 1. init_from on one process and on the expert-parallel mesh.
    for case, folder in folders.items():
        meshes = [("single", []), ("expert-parallel-2", EP_MESH)]
        if case == "B":
            meshes.append(("expert-x-tensor-2x2", EP_TP_MESH))
        for mesh_name, mesh in meshes:
            extra = mesh + ["--set", f"train.init_from={folder}"]
            if case == "A" and mesh_name == "single":
                extra += ["--set", "train.steps=3", "--set", f"checkpoint.dir={os.path.join(d, 'ck')}"]
            ours = our_first(config, os.path.join(d, f"out-{case}-{mesh_name}"), extra)
            compare(f"{name} {case}: init_from, mesh {mesh_name}", ours, reference[case])

    # 2. export of A's 3 trained steps, loaded by from_pretrained as the family's class.
    exported = os.path.join(d, "exported")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(d, "ck", "step_00000003"), "--out", exported])
    with open(os.path.join(exported, "config.json")) as f:
        assert json.load(f)["architectures"] == [fam["cls"]]
    trained = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    assert type(trained).__name__ == fam["cls"], type(trained)
    theirs = hf_losses(trained, windows)
    assert abs(theirs[0] - reference["A"][0]) > 1e-4, "the export holds the trained weights"
    ours = our_first(config, os.path.join(d, "out-export"), ["--set", f"train.init_from={exported}"])
    compare(f"{name}: export of 3 trained steps, from_pretrained", ours, theirs)

    # 3. bad folders; experts of no family (Qwen3-MoE's without qk_norm) are not exported.
    bad_folders(d, config, fam, folders["A"])
    if name == "qwen3_moe":
        unfit = os.path.join(d, "ck-unfit")
        our_first(config, os.path.join(d, "out-unfit"), ["--set", "model.qk_norm=false", "--set",
                                                          f"checkpoint.dir={unfit}"])
        p = run([tool("spmd-train"), "export", "--checkpoint", os.path.join(unfit, "step_00000001"), "--out",
                 os.path.join(d, "unfit")], check=False)
        assert p.returncode == 2 and "model.qk_norm" in p.stderr, (p.returncode, p.stderr[-2000:])
        assert not os.path.exists(os.path.join(d, "unfit")), "refused before the folder is made"
        print("export of experts no family has: exit 2 naming model.qk_norm")
    print(f"OK (relative tolerance {REL})")


if __name__ == "__main__":
    main()
