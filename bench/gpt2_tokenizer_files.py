"""GPT-2's tokenizer as Hugging Face files (vocab.json + merges.txt) for spmd-prepare --tokenizer,
rebuilt from a tiktoken ranks file (base64 token bytes, rank per line; the openai-whisper sdist on
PyPI carries GPT-2's as whisper/assets/gpt2.tiktoken). A merge is recovered per token by running
BPE on its bytes with the lower ranks only: the two parts left are the merge's pair.

  python gpt2_tokenizer_files.py gpt2.tiktoken OUT_DIR
"""
import base64
import json
import os
import sys


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes (encoder.py's table)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def split_by_lower_ranks(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def main(ranks_path, out_dir):
    ranks = {}
    for line in open(ranks_path, "rb"):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    byte_char = bytes_to_unicode()
    as_text = lambda b: "".join(byte_char[x] for x in b)
    vocab = {as_text(t): r for t, r in ranks.items()}
    vocab["<|endoftext|>"] = len(ranks)
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            left, right = split_by_lower_ranks(ranks, token, rank)
            merges.append(f"{as_text(left)} {as_text(right)}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    print(f"{out_dir}: {len(vocab)} tokens, {len(merges)} merges (first: {merges[0]})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
