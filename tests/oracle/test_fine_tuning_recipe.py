"""The fine-tuning recipe of docs/fine-tuning.md end to end, on a tiny model: the instruction set
scripts/make-instruction-set makes from the repository's docs; a Hugging Face folder (a small ChatML
tokenizer with SmolLM2's template, and a random LlamaForCausalLM beside it); spmd-prepare --format
chat; configs/smollm2-135m-sft.yaml with the tiny model's shape on 2 data-parallel processes
starting from the folder; the loss falls and the validation loss (over the assistant turns) is
logged; spmd-train sample --chat answers, its reply cut at the end-of-turn token; the export loads
in transformers. A --chat on data prepared from plain text exits 2."""
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import SRC, require, run, temp_dir, tool  # noqa: E402

torch, transformers = require("torch", "transformers")
from test_fine_tuning_data import chatml_folder  # noqa: E402

T, C, L, H, HKV, F = 256, 32, 2, 4, 2, 64


def main():
    d = temp_dir()
    rows_path = os.path.join(d, "repo-chat.jsonl")
    with open(rows_path, "w", encoding="utf-8") as f:
        subprocess.run([sys.executable, os.path.join(SRC, "scripts", "make-instruction-set"), SRC], stdout=f, check=True,
                       timeout=60)
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")]
    assert len(rows) >= 50, len(rows)
    folder = os.path.join(d, "hf")
    corpus = [m["content"] for r in rows for m in r["messages"]]
    rng = random.Random(0)
    rng.shuffle(corpus)
    hf = chatml_folder(folder, corpus)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(hf), hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                                   num_attention_heads=H, num_key_value_heads=HKV, max_position_embeddings=T,
                                   rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)

    data = os.path.join(d, "repo-chat")
    p = run([tool("spmd-prepare"), "--format", "chat", "--tokenizer", folder, "--block-size", str(T), "--input",
             rows_path, "--out", data])
    print(p.stdout.strip())
    out = os.path.join(d, "out")
    shape = [f"model.vocab_size={len(hf)}", f"model.block_size={T}", f"model.n_layer={L}", f"model.n_head={H}",
             f"model.n_kv_head={HKV}", f"model.n_embd={C}", f"model.intermediate_size={F}"]
    sets = shape + [f"train.init_from={folder}", f"data.train={data}/train.bin", f"data.val={data}/val.bin",
                    "train.steps=30", "train.decay_steps=30", "train.lr=3.0e-3", "train.min_lr=3.0e-4",
                    "train.warmup_steps=3", "train.eval_every=15", "train.log_every=1", "checkpoint.every=30",
                    f"checkpoint.dir={out}/ckpt", f"output.dir={out}", "runtime.device=cpu", "runtime.backend=gloo"]
    cmd = [tool("spmd-train"), "--config", os.path.join(SRC, "configs", "smollm2-135m-sft.yaml")]
    for s in sets:
        cmd += ["--set", s]
    run(cmd, timeout=400)
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    first, last = metrics[0]["loss"], metrics[-1]["loss"]
    vals = [m["val_loss"] for m in metrics if "val_loss" in m]
    print(f"loss {first:.4f} -> {last:.4f}; val {vals}")
    assert last < first - 0.3 and len(vals) == 2 and vals[1] < vals[0], (first, last, vals)

    checkpoint = os.path.join(out, "ckpt")
    p = run([tool("spmd-train"), "sample", "--checkpoint", checkpoint, "--chat",
             "What does docs/packing.md say about \"Cost\"?", "--tokens", "40", "--temperature", "0", "--set",
             "runtime.device=cpu", "--set", "runtime.backend=gloo"], timeout=200)
    print(f"sample --chat: {p.stdout.strip()!r}")
    assert "<|im_end|>" not in p.stdout and "<|im_start|>" not in p.stdout, p.stdout

    exported = os.path.join(d, "exported")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(checkpoint, "step_00000030"), "--out", exported])
    model = transformers.LlamaForCausalLM.from_pretrained(exported).eval()
    ids = hf.apply_chat_template(rows[0]["messages"], tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        loss = model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    print(f"export loads in transformers: loss {loss:.4f} on the first chat")
    assert loss == loss and loss < 20

    print("OK")


if __name__ == "__main__":
    main()
