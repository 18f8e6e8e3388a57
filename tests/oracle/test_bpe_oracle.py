"""Oracle: spmd-prepare's byte-level BPE against Hugging Face `tokenizers`.
(a) tokenizers trains a GPT-2 style ByteLevel BPE on multi-script text; spmd-prepare --tokenizer
    with its vocab.json + merges.txt, and with its tokenizer.json (merges as pairs and as "a b"
    strings), must write exactly tokenizers' ids, <|endoftext|> between the input files.
(b) the vocab.json + merges.txt that spmd-prepare --vocab bpe:N learns load in tokenizers, whose
    encoding of the input equals our train.bin.
(c) a Llama 3 style tokenizer.json (tokenizers trains a byte-level BPE behind a Split on Llama 3's
    pattern, read from the file; special tokens added after the vocabulary, a non-special added
    token, ignore_merges, a <|begin_of_text|> template): spmd-prepare --tokenizer writes exactly
    tokenizers' ids on held-out text, special tokens written in the text included, with
    <|begin_of_text|> before every document; the dataset keeps the tokenizer.json.
(d) that tokenizer widened past uint16 (70,000 unused tokens after the 256 bytes push its merged
    and special tokens' ids past 65535, as Llama 3's 128,256 are): spmd-prepare writes "dtype":
    "uint32" files that numpy reads as nanoGPT does (np.memmap, uint32), and --shard-tokens writes
    shards that numpy reads as llm.c's Llama 3 shards (256 x int32 header: 20240801, version 7,
    the count; then uint32), both holding exactly tokenizers' ids.
Usage: test_bpe_oracle.py [a|b|c|d] (default all)."""
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
    os.makedirs(work, exist_ok=True)
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
    with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    tokens = array.array({"uint16": "H", "uint32": "I"}[meta["dtype"]])
    assert tokens.itemsize == int(meta["dtype"][4:]) // 8, tokens.itemsize
    with open(os.path.join(out, "train.bin"), "rb") as f:
        tokens.frombytes(f.read())
    return tokens.tolist(), meta


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


# Llama 3's pre-tokenizer pattern, as its tokenizer.json holds it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_FRAGMENTS = FRAGMENTS + [
    "Die Würde des Menschen ist unantastbar.", "Größenordnung", "Привет, мир! Как дела?", "съешь",
    "我们今天去公园散步。", "東京都は日本の首都です。", "ひらがなとカタカナ", "👍🏽🚀✨", "2026-11-28", "1234567890",
    "3,141,592", "I'M", "YOU'RE", "It'S", "we'LL", "\r\n\r\n", ".\n\n", "?!\n", "#include <x>\n",
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<custom>", "<|begin_of_text", "<|end_of_text|>!",
]
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def llama_style_tokenizer(train_docs):
    """tokenizers' ByteLevel BPE behind Llama 3's Split, with its added tokens and template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=1500, min_frequency=1, show_progress=False,
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_docs, trainer)
    tok.add_special_tokens(SPECIALS)  # after the vocabulary, outside model.vocab, as Llama 3's
    tok.add_tokens(["<custom>"])
    bos = tok.token_to_id(SPECIALS[0])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{SPECIALS[0]} $A", pair=f"{SPECIALS[0]} $A {SPECIALS[0]} $B",
                                      special_tokens=[(SPECIALS[0], bos)])])
    saved = json.loads(tok.to_str())
    saved["model"]["ignore_merges"] = True  # as Llama 3's
    assert saved["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == LLAMA3_PATTERN, saved["pre_tokenizer"]
    return Tokenizer.from_str(json.dumps(saved)), saved, bos


def check_llama_style(work):
    """(c): a Llama 3 style tokenizer.json drives spmd-prepare --tokenizer."""
    train_docs = make_docs_from(LLAMA_FRAGMENTS, seed=5, n_docs=4, n_fragments=1500)
    hf, saved, bos = llama_style_tokenizer(train_docs)
    held_out = make_docs_from(LLAMA_FRAGMENTS, seed=6, n_docs=3, n_fragments=2000)
    inputs = write_inputs(os.path.join(work, "llama_inputs"), held_out)
    tok_dir = os.path.join(work, "llama_tokenizer")
    os.makedirs(tok_dir)
    with open(os.path.join(tok_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(saved, f, ensure_ascii=False)
    out = os.path.join(work, "out_llama")
    ours, meta = prepare(inputs, out, "--tokenizer", tok_dir)
    theirs = [i for doc in held_out for i in hf.encode(doc).ids]  # the template: <|begin_of_text|> first
    assert theirs[0] == bos and any(i == hf.token_to_id(SPECIALS[1]) for i in theirs), "no special tokens in text"
    assert meta["tokenizer"]["eot_token"] == bos and meta["vocab_size"] == hf.get_vocab_size(), meta
    assert meta["tokenizer"]["tokenizer_json"] == "tokenizer.json", meta
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        assert json.load(f) == saved, "the dataset should keep the tokenizer.json as it was"
    check_same("--tokenizer Llama 3 style tokenizer.json", ours, theirs)


def shifted_ids(node, by):
    """Every TemplateProcessing special token's ids in a tokenizer.json subtree moved up by `by`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "special_tokens" and isinstance(value, dict):
                for special in value.values():
                    special["ids"] = [i + by for i in special["ids"]]
            else:
                shifted_ids(value, by)
    elif isinstance(node, list):
        for value in node:
            shifted_ids(value, by)


def widened(saved, fillers):
    """`saved` with `fillers` unused tokens after ids 0..255: every other id moves up by that many.
    A filler is byte 0x01 and digits (as byte-level text, 'ā' and the digits): no word of the text."""
    wide = json.loads(json.dumps(saved))
    vocab = {tok: (i if i < 256 else i + fillers) for tok, i in wide["model"]["vocab"].items()}
    vocab.update({f"\u0101{k}": 256 + k for k in range(fillers)})
    wide["model"]["vocab"] = vocab
    for added in wide["added_tokens"]:
        added["id"] += fillers
    shifted_ids(wide["post_processor"], fillers)
    return wide


def check_wide(work):
    """(d): ids past uint16, in files and shards numpy reads as nanoGPT and llm.c do."""
    np = require("numpy")
    train_docs = make_docs_from(LLAMA_FRAGMENTS, seed=5, n_docs=4, n_fragments=1500)
    _, saved, _ = llama_style_tokenizer(train_docs)
    wide = widened(saved, 70000)
    hf = tokenizers.Tokenizer.from_str(json.dumps(wide))
    assert hf.get_vocab_size() > 70000, hf.get_vocab_size()
    held_out = make_docs_from(LLAMA_FRAGMENTS, seed=7, n_docs=3, n_fragments=1500)
    inputs = write_inputs(os.path.join(work, "wide_inputs"), held_out)
    theirs = [i for doc in held_out for i in hf.encode(doc).ids]
    assert max(theirs) > 65535 and min(theirs) < 256, (min(theirs), max(theirs))
    tok_dir = os.path.join(work, "wide_tokenizer")
    os.makedirs(tok_dir)
    with open(os.path.join(tok_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(wide, f, ensure_ascii=False)

    out = os.path.join(work, "out_wide")
    run([tool("spmd-prepare"), "--input", *inputs, "--out", out, "--val-fraction", "0.25", "--quiet",
         "--tokenizer", tok_dir], timeout=120)
    with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    assert meta["dtype"] == "uint32" and meta["vocab_size"] == hf.get_vocab_size(), meta
    # nanoGPT's train.py: np.memmap(path, dtype=..., mode="r"), the dtype from the meta.
    flat = [np.memmap(os.path.join(out, name), dtype=np.uint32, mode="r") for name in ("train.bin", "val.bin")]
    assert len(flat[0]) == meta["train_tokens"] and len(flat[1]) == meta["val_tokens"], meta
    check_same("uint32 train.bin + val.bin read by numpy", np.concatenate(flat).tolist(), theirs)

    shards = os.path.join(work, "out_wide_shards")
    run([tool("spmd-prepare"), "--input", *inputs, "--out", shards, "--shard-tokens", "4000", "--quiet",
         "--tokenizer", tok_dir], timeout=120)
    names = sorted(n for n in os.listdir(shards) if n.startswith("val_")) + \
        sorted(n for n in os.listdir(shards) if n.startswith("train_"))
    assert len(names) >= 3, names
    ids = []
    for name in names:  # as llm.c reads a shard: the 256 x int32 header, then the tokens
        path = os.path.join(shards, name)
        header = np.fromfile(path, dtype=np.int32, count=256)
        assert header[0] == 20240801 and header[1] == 7 and not header[3:].any(), (name, header[:4])
        tokens = np.memmap(path, dtype=np.uint32, mode="r", offset=256 * 4)
        assert len(tokens) == header[2], (name, header[2], len(tokens))
        ids.extend(tokens.tolist())
    check_same("llm.c Llama 3 shards read by numpy", ids, theirs)


def make_docs_from(fragments, seed, n_docs, n_fragments):
    rng = random.Random(seed)
    return ["".join(rng.choice(fragments) + rng.choice(["", " ", " ", "\n"]) for _ in range(n_fragments))
            for _ in range(n_docs)]


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "abcd"
    work = temp_dir()
    docs = make_docs(seed=1, n_docs=3, n_fragments=3000)
    inputs = write_inputs(work, docs)
    if "a" in which:
        check_hf_files(work, docs, inputs)
    if "b" in which:
        check_trained_files(work, docs, inputs)
    if "c" in which:
        check_llama_style(work)
    if "d" in which:
        check_wide(work)


if __name__ == "__main__":
    main()
