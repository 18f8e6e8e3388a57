"""Multiple-choice scoring (spmd-train eval) against transformers and llm.c's algorithm.

A tiny GPT-2 trains a few steps on a BPE dataset spmd-prepare wrote; `spmd-train eval --json`
scores a task file this test writes (some rows longer than block_size, so the truncation rule is
exercised; labels as integers and as strings). The oracle: `spmd-train export` opened by
transformers' GPT2LMHeadModel, the checkpoint's vocab.json + merges.txt opened by `tokenizers`, and
the scoring written here from the rules (docs/evaluation.md): ctx tokens, each choice " " + ending,
the window of a sequence its own last block_size tokens, per choice the sum and mean of the
cross-entropy of its tokens; acc by the lowest sum, acc_norm by the lowest mean, ties to the lowest
index. Per-choice sums and means agree to 1e-5 (relative), acc and acc_norm exactly, on one process
and on a data x model mesh of four; the exported folder scored through train.init_from agrees too.
"""
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402

torch, transformers, tokenizers = require("torch", "transformers", "tokenizers")

T, C, L, H = 32, 32, 2, 4  # block, width, layers, heads
REL = 1e-5
WORDS = ("the cat sat on a mat while dogs ran to the old log near river banks and birds sang "
         "over green hills where children played games until night fell quietly").split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def prepare(d):
    rng = random.Random(3)
    with open(os.path.join(d, "corpus.txt"), "w") as f:
        for _ in range(400):
            f.write(sentence(rng, 12).capitalize() + ".\n")
    run([tool("spmd-prepare"), "--input", os.path.join(d, "corpus.txt"), "--out", os.path.join(d, "data"),
         "--vocab", "bpe:200", "--quiet"])
    with open(os.path.join(d, "data", "meta.json")) as f:
        return json.load(f)["vocab_size"]


def write_config(d, vocab):
    path = os.path.join(d, "tiny.yaml")
    data = os.path.join(d, "data")
    with open(path, "w") as f:
        f.write("mesh: {shape: [1, 1], axes: [data, model]}\n"
                "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], "
                "[seq, null], [kv, null]]\n"
                f"model: {{vocab_size: {vocab}, block_size: {T}, n_layer: {L}, n_head: {H}, n_embd: {C}, dropout: 0.0}}\n"
                f"data: {{train: {data}/train.bin, val: {data}/val.bin, batch_size: 8}}\n"
                "train: {steps: 30, decay_steps: 30, warmup_steps: 3, lr: 1.0e-2, log_every: 10, eval_every: 0}\n"
                f"checkpoint: {{dir: {d}/ck, every: 30}}\n"
                f"output: {{dir: {d}/out}}\n"
                "runtime: {timeout_s: 60, device: cpu}\n")
    return path


def write_task(d):
    """Rows of 2 to 5 endings; a few contexts long enough that context + ending exceeds block_size."""
    rng = random.Random(11)
    path = os.path.join(d, "task.jsonl")
    with open(path, "w") as f:
        for i in range(24):
            n = 4 if i % 3 else rng.randint(2, 5)
            label = rng.randrange(n)
            row = {"ctx": sentence(rng, 50 if i % 5 == 0 else rng.randint(3, 8)).capitalize(),
                   "endings": [sentence(rng, rng.randint(1, 6)) + "." for _ in range(n)],
                   "label": str(label) if i % 2 else label, "source_id": f"row{i}"}
            f.write(json.dumps(row) + "\n")
    return path


def reference_scores(model, tok, task):
    """llm.c's scoring from the rules, one choice at a time (no batching, no padding)."""
    out = []
    with open(task) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        ctx = tok.encode(row["ctx"]).ids
        sums, means = [], []
        for ending in row["endings"]:
            end = tok.encode(" " + ending).ids
            seq = ctx + end
            dropped = max(0, len(seq) - T)
            seq = seq[dropped:]
            first = max(1, len(ctx) - dropped)  # the first scored position in the window
            ids = torch.tensor([seq])
            with torch.no_grad():
                logits = model(ids[:, :-1]).logits[0].double()  # (len-1, V)
            losses = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")[first - 1:]
            sums.append(losses.sum().item())
            means.append(losses.mean().item())
        out.append({"label": int(row["label"]), "sum": sums, "mean": means})
    return out


def lowest(values):
    return min(range(len(values)), key=lambda i: (values[i], i))


def compare(what, ours, theirs):
    assert ours["n"] == len(theirs), (ours["n"], len(theirs))
    worst = 0.0
    for i, (o, t) in enumerate(zip(ours["examples"], theirs)):
        assert o["index"] == i and o["label"] == t["label"], (o, t)
        for key in ("sum", "mean"):
            assert len(o[key]) == len(t[key]), (i, key)
            for a, b in zip(o[key], t[key]):
                rel = abs(a - b) / abs(b)
                worst = max(worst, rel)
                assert rel <= REL, f"{what}: example {i} {key}: ours {a} theirs {b} (relative {rel:.1e})"
    acc = sum(lowest(t["sum"]) == t["label"] for t in theirs) / len(theirs)
    acc_norm = sum(lowest(t["mean"]) == t["label"] for t in theirs) / len(theirs)
    print(f"{what}: acc {ours['acc']:.4f} (oracle {acc:.4f}) acc_norm {ours['acc_norm']:.4f} (oracle "
          f"{acc_norm:.4f}); worst relative difference {worst:.1e}")
    assert ours["acc"] == acc and ours["acc_norm"] == acc_norm, (ours["acc"], acc, ours["acc_norm"], acc_norm)


def eval_json(args):
    p = run([tool("spmd-train"), "eval"] + args + ["--json"], timeout=240)
    return json.loads(p.stdout)


def main():
    d = temp_dir()
    vocab = prepare(d)
    config = write_config(d, vocab)
    run([tool("spmd-train"), "--config", config], timeout=240)
    ck = os.path.join(d, "ck", "step_00000030")
    task = write_task(d)

    exported = os.path.join(d, "exported")
    os.makedirs(exported)
    run([tool("spmd-train"), "export", "--checkpoint", ck, "--out", os.path.join(exported, "model.safetensors")])
    transformers.GPT2Config(vocab_size=vocab, n_positions=T, n_embd=C, n_layer=L, n_head=H, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0).save_pretrained(exported)
    model = transformers.GPT2LMHeadModel.from_pretrained(exported).eval()
    tok_dir = os.path.join(ck, "tokenizer")
    tok = tokenizers.ByteLevelBPETokenizer(os.path.join(tok_dir, "vocab.json"), os.path.join(tok_dir, "merges.txt"))
    theirs = reference_scores(model, tok, task)
    assert any(max(0, len(tok.encode(json.loads(line)["ctx"]).ids) + 2 - T) for line in open(task)), \
        "some rows should be longer than block_size"

    compare("one process", eval_json(["--checkpoint", ck, "--task", task]), theirs)
    mesh = ["--set", "mesh.shape=[2,2]", "--set", "data.batch_size=4"]
    compare("mesh [2,2] data x model", eval_json(["--checkpoint", ck, "--task", task] + mesh), theirs)
    for name in ("vocab.json", "merges.txt"):  # a Hugging Face folder carries its tokenizer
        shutil.copy(os.path.join(tok_dir, name), exported)
    compare("exported folder through train.init_from",
            eval_json(["--config", config, "--set", f"train.init_from={exported}", "--task", task]), theirs)
    limited = eval_json(["--checkpoint", ck, "--task", task, "--limit", "5"])
    compare("--limit 5", limited, theirs[:5])
    print("OK")


if __name__ == "__main__":
    main()
