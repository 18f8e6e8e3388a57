"""Fine-tuning data (spmd-prepare --format chat|prompt-completion) against transformers.

Two small tokenizer folders, trained here by tokenizers and saved by transformers:
  chatml: a GPT-2 style byte-level BPE with <|endoftext|>, <|im_start|>, <|im_end|>, and SmolLM2's
          chat template (its default system turn);
  llama3: a BPE behind Llama 3's Split pattern with <|begin_of_text|> (the post-processor's start
          token), <|end_of_text|>, <|eot_id|>, <|start_header_id|>, <|end_header_id|>, and Llama 3's
          chat template.
For each, conversations of every shape (a system turn or none, several assistant turns, content
with leading and trailing whitespace, newlines, non-ASCII text) are prepared by spmd-prepare and
rendered by transformers' apply_chat_template(..., return_assistant_tokens_mask=True) with a copy
of the template that marks each assistant turn's content and end-of-turn token with
{% generation %}. The ids and the targets must equal transformers' (tokens without added special
tokens; the template writes <|begin_of_text|> itself), packed into windows by the rule of
docs/fine-tuning.md: an example goes into the open window after a separator (the document-end id)
when it fits, else into a new one; the rest of a window is padding; one padding token ends the file.
Prompt/completion rows: the ids of prompt + completion without special tokens, the tokens overlapping
the completion (transformers' offsets) and one end-of-text token after it are the targets.
An unsupported template exits 2 naming the file.
Usage: test_fine_tuning_data.py [chatml|llama3|prompt|refuse] (default all)."""
import array
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402

tokenizers, transformers = require("tokenizers", "transformers")

BLOCK = 256

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SMOLLM2_MARKED = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}"
    "{% endif %}{{ '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA3_MARKED = (
    "{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
WORDS = ["the", "model", "mesh", "shards", "tokens", "loss", "Größe", "naïve", "日本語", "42", "3.14", "don't",
         "pipeline", "a", "of", "and", "\n", "\n\n", "  ", ".", "!", "?", ","]


def phrase(rng, n):
    return "".join(rng.choice(WORDS) + rng.choice(["", " ", " ", "\n"]) for _ in range(n))


def conversations(rng, n):
    rows = []
    for i in range(n):
        messages = []
        if i % 3 == 0:
            messages.append({"role": "system", "content": phrase(rng, 4)})
        for _ in range(1 + i % 3):
            messages.append({"role": "user", "content": rng.choice(["", " ", "\n"]) + phrase(rng, rng.randint(1, 8))})
            messages.append({"role": "assistant", "content": rng.choice(["", " ", "\n\n"]) + phrase(rng, rng.randint(0, 9))
                             + rng.choice(["", " ", "\n"])})
        rows.append({"messages": messages})
    rows.insert(n // 2, {"messages": [{"role": "user", "content": "long?"},
                                      {"role": "assistant", "content": phrase(rng, 400)}]})  # longer than BLOCK
    return rows


def train_bpe(pre_tokenizer, corpus):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


def save_folder(tok, d, specials, config):
    tok.add_special_tokens(specials)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **config)
    fast.save_pretrained(d)
    return transformers.AutoTokenizer.from_pretrained(d)


def chatml_folder(d, corpus):
    from tokenizers import pre_tokenizers
    tok = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), corpus)
    return save_folder(tok, d, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                       dict(eos_token="<|im_end|>", bos_token="<|im_start|>", chat_template=SMOLLM2_TEMPLATE))


def llama3_folder(d, corpus):
    from tokenizers import Regex, pre_tokenizers, processors
    tok = train_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), corpus)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    tok.add_special_tokens(specials)
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{specials[0]} $A", pair=f"{specials[0]} $A {specials[0]} $B",
                                      special_tokens=[(specials[0], bos)])])
    return save_folder(tok, d, specials, dict(bos_token=specials[0], eos_token="<|eot_id|>",
                                               chat_template=LLAMA3_TEMPLATE))


def pack(examples, sep):
    """The windows of docs/fine-tuning.md's rule, then one padding token."""
    ids, marks = [], []
    for e_ids, e_marks in examples:
        used = len(ids) % BLOCK
        if used:
            need_sep = ids[-1] != sep
            if used + need_sep + len(e_ids) > BLOCK:
                ids += [sep] * (BLOCK - used)
                marks += [0] * (BLOCK - used)
            elif need_sep:
                ids.append(sep)
                marks.append(0)
        ids += e_ids
        marks += e_marks
    if len(ids) % BLOCK:
        rest = BLOCK - len(ids) % BLOCK
        ids += [sep] * rest
        marks += [0] * rest
    return ids + [sep], marks + [0]


def prepare(work, name, rows, tok_dir, *args):
    data = os.path.join(work, f"{name}.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    out = os.path.join(work, f"out_{name}")
    run([tool("spmd-prepare"), "--input", data, "--out", out, "--tokenizer", tok_dir, "--block-size", str(BLOCK),
         "--val-fraction", "0", *args])
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    width = "I" if meta["dtype"] == "uint32" else "H"
    ids = array.array(width, open(os.path.join(out, "train.bin"), "rb").read())
    marks = list(open(os.path.join(out, "train.targets.bin"), "rb").read())
    return list(ids), marks, meta


def check_same(label, ours, theirs):
    if ours != theirs:
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        raise AssertionError(f"{label}: differs first at {first} (lengths {len(ours)} vs {len(theirs)}): "
                             f"ours {ours[max(0, first - 5):first + 5]} theirs {theirs[max(0, first - 5):first + 5]}")
    print(f"{label}: {len(ours)} equal")


def check_chat(work, name, make_folder, marked, sep_token):
    rng = random.Random(3)
    corpus = [phrase(rng, 200) for _ in range(20)]
    tok_dir = os.path.join(work, f"tok_{name}")
    hf = make_folder(tok_dir, corpus)
    rows = conversations(random.Random(4 if name == "chatml" else 5), 30)
    examples, dropped = [], 0
    for r in rows:
        out = hf.apply_chat_template(r["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                     chat_template=marked)
        ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
        assert sum(mask) > 0, r
        if len(ids) > BLOCK:  # dropped and counted
            dropped += 1
            continue
        examples.append((ids, mask))
    assert 0 < dropped < len(rows) // 3, dropped
    for r in rows[:6]:
        plain = hf.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]
        marked_ids = hf.apply_chat_template(r["messages"], tokenize=True, return_dict=True, chat_template=marked)
        assert list(plain) == list(marked_ids["input_ids"]), "the marked template copy must render as the shipped one"
    sep = hf.convert_tokens_to_ids(sep_token)
    ids, marks, meta = prepare(work, name, rows, tok_dir, "--format", "chat")
    theirs_ids, theirs_marks = pack(examples, sep)
    check_same(f"{name}: ids", ids, theirs_ids)
    check_same(f"{name}: targets", marks, theirs_marks)
    ft = meta["fine_tuning"]
    assert ft["document_end"] == sep and ft["examples"] == len(examples) and ft["dropped_longer_than_block"] == dropped and ft["train_targets"] == sum(theirs_marks), ft
    if name == "llama3":
        assert ids[0] == hf.convert_tokens_to_ids("<|begin_of_text|>") and ids[1] != ids[0], "one <|begin_of_text|>"
    return tok_dir


def check_prompt_completion(work, tok_dir):
    hf = transformers.AutoTokenizer.from_pretrained(tok_dir)
    rng = random.Random(9)
    rows = [{"prompt": phrase(rng, rng.randint(1, 6)), "completion": rng.choice(["", " "]) + phrase(rng, rng.randint(0, 8))}
            for _ in range(40)]
    eot = hf.convert_tokens_to_ids("<|endoftext|>")
    examples = []
    for r in rows:
        text = r["prompt"] + r["completion"]
        enc = hf(text, add_special_tokens=False, return_offsets_mapping=True)
        a = len(r["prompt"])
        mask = [1 if e > a else 0 for s, e in enc["offset_mapping"]]
        ids = list(enc["input_ids"]) + [eot]
        mask = mask + [1]
        mask[0] = 0
        examples.append((ids, mask))
    ids, marks, meta = prepare(work, "prompt", rows, tok_dir, "--format", "prompt-completion")
    theirs_ids, theirs_marks = pack(examples, eot)
    check_same("prompt-completion: ids", ids, theirs_ids)
    check_same("prompt-completion: targets", marks, theirs_marks)


def check_refused(work, tok_dir):
    config = os.path.join(tok_dir, "tokenizer_config.json")
    with open(config) as f:
        j = json.load(f)
    j["chat_template"] = "{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}{% endfor %}"
    other = os.path.join(work, "tok_other")
    os.makedirs(other)
    for name in os.listdir(tok_dir):
        if name != "tokenizer_config.json" and name != "chat_template.jinja":
            with open(os.path.join(tok_dir, name), "rb") as src, open(os.path.join(other, name), "wb") as dst:
                dst.write(src.read())
    with open(os.path.join(other, "tokenizer_config.json"), "w") as f:
        json.dump(j, f)
    data = os.path.join(work, "refused.jsonl")
    with open(data, "w") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) + "\n")
    p = run([tool("spmd-prepare"), "--input", data, "--out", os.path.join(work, "out_refused"), "--tokenizer", other,
             "--format", "chat", "--block-size", str(BLOCK)], check=False)
    assert p.returncode == 2 and "tokenizer_config.json" in p.stderr and "ChatML" in p.stderr, (p.returncode, p.stderr)
    assert not os.path.exists(os.path.join(work, "out_refused", "meta.json"))
    print("an unknown template: exit 2 naming the file and the supported families")
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    bad_rows = {"not JSON": ("{oops", "refused2.jsonl:2: not valid JSON"),
                "unknown role": (json.dumps({"messages": [{"role": "tool", "content": "x"}]}), 'unknown role "tool"'),
                "no target": (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "refused2.jsonl:2: no target")}
    for what, (line, reason) in bad_rows.items():
        data = os.path.join(work, "refused2.jsonl")
        with open(data, "w") as f:
            f.write(good + "\n" + line + "\n")
        out = os.path.join(work, "out_refused2")
        p = run([tool("spmd-prepare"), "--input", data, "--out", out, "--tokenizer", tok_dir, "--format", "chat",
                 "--block-size", str(BLOCK)], check=False)
        assert p.returncode == 2 and reason in p.stderr, (what, p.returncode, p.stderr)
        assert not os.path.exists(out) or not os.listdir(out), (what, os.listdir(out))
        print(f"{what}: exit 2, {reason}, nothing written")


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    work = temp_dir()
    chatml_dir = None
    if which in ("chatml", "prompt", "refuse", "all"):
        chatml_dir = check_chat(work, "chatml", chatml_folder, SMOLLM2_MARKED, "<|endoftext|>")
    if which in ("llama3", "all"):
        check_chat(work, "llama3", llama3_folder, LLAMA3_MARKED, "<|end_of_text|>")
    if which in ("prompt", "all"):
        check_prompt_completion(work, chatml_dir)
    if which in ("refuse", "all"):
        check_refused(work, chatml_dir)


if __name__ == "__main__":
    main()
