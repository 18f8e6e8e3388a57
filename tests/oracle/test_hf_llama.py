"""Hugging Face Llama in and out, against transformers' LlamaForCausalLM.

Two random models (grouped-query attention, 4 query heads over 2 key/value heads, every norm
scale random, initializer_range 0.2 so that RoPE or norm mistakes show), each written by
save_pretrained in small shards (model.safetensors.index.json):
  A. float32, untied lm_head, Llama 3 rope scaling (all three frequency bands), config.json as
     transformers 5 writes it (rope_parameters, dtype, head_dim);
  B. bfloat16, tied embeddings, config.json in the layout published folders use (top-level
     rope_theta, rope_scaling, torch_dtype), block_size shorter than max_position_embeddings.
1. train.init_from: the first step's loss (before the first update) equals transformers' loss on
   the same batch (B: of the bf16 weights in float32, which is what our fp32 master weights hold),
   on one process and on a data x model mesh (vocab 67 padded to 68, heads split).
2. export --out DIR of A after 3 steps: from_pretrained(DIR) gives the loss our run started from
   DIR gives.
3. A model key that differs from config.json exits 2 naming it.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402
from hf_compare import (DATA_MODEL_2X2, check_close, our_first_loss, transformers_loss,  # noqa: E402
                        spread_norm_scales, write_config, write_windows)

torch, transformers = require("torch", "transformers")

V, T, B, C, L, H, HKV, F = 67, 32, 8, 32, 2, 4, 2, 48
SCALING = {"factor": 8.0, "low_freq_factor": 0.5, "high_freq_factor": 2.0, "original_max_position_embeddings": 32}


def write_data(d):
    """B windows of T+1 tokens: the first step's batch is all of them."""
    g = torch.Generator().manual_seed(7)
    return write_windows(d, torch.randint(0, V, (B * T + 1,), generator=g, dtype=torch.int32), T, B)


def llama_config(d, name, data, tied, scaling):
    rope = "" if scaling is None else ", rope_scaling: {" + ", ".join(f"{k}: {v}" for k, v in scaling.items()) + "}"
    return write_config(os.path.join(d, f"{name}.yaml"),
                        f"arch: llama, vocab_size: {V}, block_size: {T}, n_layer: {L}, n_head: {H}, "
                        f"n_kv_head: {HKV}, n_embd: {C}, intermediate_size: {F}, rms_norm_eps: 1.0e-5, "
                        f"rope_theta: 1000.0, tie_embeddings: {str(tied).lower()}, dropout: 0.0{rope}",
                        f"train: {data}, val: {data}, batch_size: {B}")


def random_llama(tied, scaling):
    torch.manual_seed(1 if tied else 0)
    cfg = transformers.LlamaConfig(
        vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
        num_key_value_heads=HKV, max_position_embeddings=2 * T, rms_norm_eps=1e-5, rope_theta=1000.0,
        rope_scaling=None if scaling is None else {"rope_type": "llama3", **scaling}, tie_word_embeddings=tied,
        initializer_range=0.2, bos_token_id=0, eos_token_id=0)
    return spread_norm_scales(transformers.LlamaForCausalLM(cfg).eval())


def published_layout(folder):
    """Rewrites config.json as published folders have it: top-level rope_theta and rope_scaling."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg.pop("head_dim")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def main():
    d = temp_dir()
    data, windows = write_data(d)
    cases = {"A": (False, SCALING, torch.float32), "B": (True, None, torch.bfloat16)}
    folders, configs = {}, {}
    for name, (tied, scaling, dtype) in cases.items():
        folder = os.path.join(d, f"hf-{name}")
        random_llama(tied, scaling).to(dtype).save_pretrained(folder, max_shard_size="20KB")
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json")), os.listdir(folder)
        if name == "B":
            published_layout(folder)
        folders[name], configs[name] = folder, llama_config(d, name, data, tied, scaling)
        loaded = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        reference = transformers_loss(loaded, windows)
        assert abs(reference - torch.log(torch.tensor(float(V))).item()) > 0.1, "far from uniform"
        for mesh_name, mesh in (("single", []), ("data-model-2x2", DATA_MODEL_2X2)):
            extra = mesh + ["--set", f"train.init_from={folder}"]
            if name == "A" and mesh_name == "single":
                extra += ["--set", "train.steps=3", "--set", f"checkpoint.dir={os.path.join(d, 'ck')}"]
            ours = our_first_loss(configs[name], os.path.join(d, f"out-{name}-{mesh_name}"), extra)
            check_close(f"{name}: init_from, mesh {mesh_name}", ours, reference)

    # 2. export of A's 3 trained steps as a folder that from_pretrained opens.
    exported = os.path.join(d, "exported")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(d, "ck", "step_00000003"), "--out", exported])
    trained = transformers.LlamaForCausalLM.from_pretrained(exported).eval()
    theirs = transformers_loss(trained, windows)
    ours = our_first_loss(configs["A"], os.path.join(d, "out-export"), ["--set", f"train.init_from={exported}"])
    check_close("A: export of 3 trained steps, from_pretrained", ours, theirs)
    p = run([tool("spmd-train"), "export", "--checkpoint", os.path.join(d, "ck", "step_00000003"), "--out", exported],
            check=False)
    assert p.returncode == 2 and "not empty" in p.stderr + p.stdout, (p.returncode, p.stderr)

    # 3. a model key that differs from config.json.
    for key, value, named in (("model.rope_theta", "10000.0", "rope_theta"), ("model.n_kv_head", "4", "n_kv_head"),
                              ("model.tie_embeddings", "true", "tie_embeddings")):
        p = run([tool("spmd-train"), "--config", configs["A"], "--set", f"output.dir={os.path.join(d, 'bad')}",
                 "--set", f"train.init_from={folders['A']}", "--set", f"{key}={value}"], check=False)
        assert p.returncode == 2 and named in p.stderr, (key, p.returncode, p.stderr[-2000:])
        print(f"{key}={value}: exit 2 naming {named}")
    print("OK")


if __name__ == "__main__":
    main()
