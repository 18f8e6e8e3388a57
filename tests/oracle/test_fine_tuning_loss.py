"""Fine-tuning's loss against transformers, from a Hugging Face folder.

A random LlamaForCausalLM over a small ChatML tokenizer (test_fine_tuning_data.py's) is saved as a
folder. spmd-prepare --format chat packs conversations into windows of T tokens; spmd-train starts
from the folder (train.init_from) with one step's batch holding every window. Its first-step loss
(before any update) must equal transformers' loss over the same conversations run one by one, with
labels = -100 on every token that is not a target (apply_chat_template's assistant mask), each
conversation's mean weighted by its target count, i.e. the sum of the targets' losses over their
number: on one process and on a data x model mesh. One long answer among short ones makes a
per-example mean (every conversation weighed alike) differ from it by more than 1e-3, checked, so
that averaging could not pass.
After 3 steps, the export loads in transformers (from_pretrained), whose loss on the conversations
equals the first-step loss of a run started from the export.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402
from hf_compare import DATA_MODEL_2X2, check_close, our_first_loss, write_config  # noqa: E402

torch, transformers = require("torch", "transformers")
from test_fine_tuning_data import SMOLLM2_MARKED, chatml_folder, phrase  # noqa: E402

T, C, L, H, HKV, F = 192, 32, 2, 4, 2, 48


def rows_of(rng, n):
    rows = []
    for i in range(n):
        messages = [{"role": "system", "content": phrase(rng, 3)}] if i % 4 == 0 else []
        for _ in range(1 + i % 2):
            messages.append({"role": "user", "content": phrase(rng, rng.randint(1, 5))})
            # One long answer among short ones: a per-example mean would weigh them alike.
            n_words = 20 if i % 7 == 3 else rng.randint(0, 4)
            messages.append({"role": "assistant", "content": phrase(rng, n_words)})
        rows.append({"messages": messages})
    return rows


def random_llama(vocab):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
        num_key_value_heads=HKV, max_position_embeddings=2 * T, rms_norm_eps=1e-5, rope_theta=1000.0,
        tie_word_embeddings=False, initializer_range=0.2, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


def examples_of(hf, rows):
    out = []
    for r in rows:
        enc = hf.apply_chat_template(r["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                     chat_template=SMOLLM2_MARKED)
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
        assert len(ids) <= T, len(ids)
        out.append((ids, mask))
    return out


def transformers_sft_loss(model, examples):
    """Each example alone, labels -100 off the targets: the sum of the target losses over their count."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in examples:
            x = torch.tensor([ids])
            labels = torch.tensor([[i if m else -100 for i, m in zip(ids, mask)]])
            logits = model(x).logits.double()
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100, reduction="sum")
            total += loss.item()
            count += int((labels[0, 1:] != -100).sum())
    return total / count


def per_example_mean(model, examples):
    """The averaging that weighs every example alike (what a per-example mean would give)."""
    with torch.no_grad():
        means = []
        for ids, mask in examples:
            labels = torch.tensor([i if m else -100 for i, m in zip(ids, mask)])
            logits = model(torch.tensor([ids])).logits.double()
            means.append(torch.nn.functional.cross_entropy(logits[0, :-1], labels[1:], ignore_index=-100).item())
    return sum(means) / len(means)


def main():
    d = temp_dir()
    rng = random.Random(21)
    tok_dir = os.path.join(d, "tok")
    hf = chatml_folder(tok_dir, [phrase(rng, 200) for _ in range(20)])
    vocab = len(hf)
    rows = rows_of(random.Random(22), 24)
    examples = examples_of(hf, rows)
    data = os.path.join(d, "rows.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    prepared = os.path.join(d, "sft")
    run([tool("spmd-prepare"), "--input", data, "--out", prepared, "--tokenizer", tok_dir, "--format", "chat",
         "--block-size", str(T), "--val-fraction", "0"])
    with open(os.path.join(prepared, "meta.json")) as f:
        meta = json.load(f)
    windows = (meta["train_tokens"] - 1) // T
    assert meta["fine_tuning"]["examples"] == len(rows) and windows % 2 == 0 and windows < len(rows), (meta, windows)

    folder = os.path.join(d, "hf")
    random_llama(vocab).save_pretrained(folder)
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    config = write_config(os.path.join(d, "llama.yaml"),
                          f"arch: llama, vocab_size: {vocab}, block_size: {T}, n_layer: {L}, n_head: {H}, "
                          f"n_kv_head: {HKV}, n_embd: {C}, intermediate_size: {F}, rms_norm_eps: 1.0e-5, "
                          f"rope_theta: 1000.0, tie_embeddings: false, dropout: 0.0",
                          f"train: {os.path.join(prepared, 'train.bin')}, batch_size: {windows}")
    theirs = transformers_sft_loss(model, examples)
    wrong = per_example_mean(model, examples)
    assert abs(wrong / theirs - 1) > 1e-3, (wrong, theirs)
    for mesh_name, mesh in (("single", []), ("data-model-2x2", DATA_MODEL_2X2)):
        extra = mesh + ["--set", f"train.init_from={folder}"]
        if mesh_name == "single":
            extra += ["--set", "train.steps=3", "--set", f"checkpoint.dir={os.path.join(d, 'ck')}"]
        ours = our_first_loss(config, os.path.join(d, f"out-{mesh_name}"), extra)
        check_close(f"first-step loss over the targets, mesh {mesh_name}", ours, theirs)
    print(f"a per-example mean would give {wrong:.7f}")

    exported = os.path.join(d, "exported")
    run([tool("spmd-train"), "export", "--checkpoint", os.path.join(d, "ck", "step_00000003"), "--out", exported])
    trained = transformers.LlamaForCausalLM.from_pretrained(exported).eval()
    theirs = transformers_sft_loss(trained, examples)
    ours = our_first_loss(config, os.path.join(d, "out-export"), ["--set", f"train.init_from={exported}"])
    check_close("export after 3 fine-tuning steps, from_pretrained", ours, theirs)
    print("OK")


if __name__ == "__main__":
    main()
