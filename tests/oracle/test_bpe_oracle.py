"""Oracle: spmd-prepare's byte-level BPE against Hugging Face `tokenizers`.
(a) tokenizers trains a GPT-2 style ByteLevel BPE on multi-script text; spmd-prepare --tokenizer
    with its vocab.json + merges.txt, and with its tokenizer.json (merges as pairs and as "a b"
    strings), must write exactly tokenizers' ids, <|endoftext|> between the input files.
(b) the vocab.json + merges.txt that spmd-prepare --vocab bpe:N learns load in tokenizers, whose
    encoding of the input equals our train.bin.
Usage: test_bpe_oracle.py [a|b] (default both)."""
import array
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_support import require, run, temp_dir, tool  # noqa: E402

tokenizers = require("tokenizers")

EOT = "<|endoftext|>"
FRAGMENTS = [
    "The quick brown fox jumps over the lazy dog.", "It's", "we'll", "they're", "I've", "you'd",
    "DON'T", "naïve café", "crème brûlée", "Straße", "Ærøskøbing", "e\u0301 combining",
    "Ελληνικά γράμματα", "Съешь же ещё этих мягких булок", "日本語のテキスト", "中文文本",
    "한국어 문장", "العربية نص", "עברית", "हिन्दी पाठ", "ภาษาไทย", "١٢٣", "12345", "3.14",
    "🎉", "🎭👩‍👩‍👧", "¢£€", "“quotes”", "«guillemets»", "a->b", "x != y;", "𝄞",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2003", "\u2028",
    "\u0085", "\u000b", "\u180e", "\u200b", "\u001c", "\u2029",
]


def make_docs(seed, n_docs, n_fragments):
    """Random multi-script documents, the same for a given seed."""
    rng = random.Random(seed)
    return ["".join(rng.choice(FRAGMENTS) + rng.choice(["", " ", " ", "\n"])
                    for _ in range(n_fragments)) for _ in range(n_docs)]


def write_inputs(work, docs):
    paths = []
    for i, doc in enumerate(docs):
        path = os.path.join(work, f"doc{i}.txt")  # spmd-prepare reads files in the order given
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(doc)
        paths.append(path)
    return paths


def prepare(inputs, out, *args):
    p = run([tool("spmd-prepare"), "--input", *inputs, "--out", out, "--val-fraction", "0",
             "--quiet", *args], timeout=120)
    assert "BPE" in p.stdout, p.stdout  # the final line names the tokenizer
    with open(os.path.join(out, "train.bin"), "rb") as f:
        tokens = array.array("H")
        tokens.frombytes(f.read())
    with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
        return tokens.tolist(), json.load(f)


def expected_ids(encode, docs, eot):
    ids = []
    for i, doc in enumerate(docs):
        if i:
            ids.append(eot)
        ids.extend(encode(doc))
    return ids


def check_same(label, ours, theirs):
    if ours == theirs:
        print(f"ok: {label}: {len(ours)} tokens identical")
        return
    i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    raise AssertionError(f"{label}: differs at token {i} of {len(ours)} (ours) / {len(theirs)} "
                         f"(tokenizers): ours {ours[max(0, i - 5):i + 5]} theirs "
                         f"{theirs[max(0, i - 5):i + 5]}")


def check_hf_files(work, docs, inputs):
    """(a): tokenizers' own files drive spmd-prepare --tokenizer."""
    hf = tokenizers.ByteLevelBPETokenizer()
    hf.train_from_iterator(docs, vocab_size=1200, min_frequency=1, special_tokens=[EOT],
                           show_progress=False)
    eot = hf.token_to_id(EOT)
    theirs = expected_ids(lambda d: hf.encode(d).ids, docs, eot)
    files_dir = os.path.join(work, "hf_files")
    os.makedirs(files_dir)
    hf.save_model(files_dir)
    ours, meta = prepare(inputs, os.path.join(work, "out_files"), "--tokenizer", files_dir)
    assert meta["vocabulary"] == "bpe" and meta["tokenizer"]["eot_token"] == eot, meta
    check_same("--tokenizer vocab.json + merges.txt", ours, theirs)

    saved = json.loads(hf.to_str())
    for form in ("pairs", "strings"):
        merges = [m if isinstance(m, list) else m.split(" ") for m in saved["model"]["merges"]]
        saved["model"]["merges"] = merges if form == "pairs" else [" ".join(m) for m in merges]
        json_dir = os.path.join(work, f"hf_json_{form}")
        os.makedirs(json_dir)
        with open(os.path.join(json_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(saved, f, ensure_ascii=False)
        ours, _ = prepare(inputs, os.path.join(work, f"out_json_{form}"), "--tokenizer", json_dir)
        check_same(f"--tokenizer tokenizer.json (merges as {form})", ours, theirs)


def check_trained_files(work, docs, inputs):
    """(b): the files spmd-prepare learns are Hugging Face files that encode the same way."""
    out = os.path.join(work, "out_trained")
    ours, meta = prepare(inputs, out, "--vocab", "bpe:800")
    hf = tokenizers.ByteLevelBPETokenizer(os.path.join(out, "vocab.json"),
                                          os.path.join(out, "merges.txt"))
    eot = hf.token_to_id(EOT)
    assert eot == meta["tokenizer"]["eot_token"] == meta["vocab_size"] - 1, (eot, meta)
    assert meta["vocab_size"] == hf.get_vocab_size() == 256 + 800 + 1, meta
    check_same("--vocab bpe:800 files in tokenizers", ours,
               expected_ids(lambda d: hf.encode(d).ids, docs, eot))


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "ab"
    work = temp_dir()
    docs = make_docs(seed=1, n_docs=3, n_fragments=3000)
    inputs = write_inputs(work, docs)
    if "a" in which:
        check_hf_files(work, docs, inputs)
    if "b" in which:
        check_trained_files(work, docs, inputs)


if __name__ == "__main__":
    main()
