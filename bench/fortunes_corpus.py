"""Two benchmark corpora from Debian's fortunes packages, one cookie per JSON line ({"text": ...}):
English (the `fortunes` package) and multilingual (German, Russian, Spanish, Italian, Czech,
Polish, Bulgarian, Portuguese, Chinese). Cookies that are not valid UTF-8 are left out.

  python fortunes_corpus.py OUT_DIR      (writes OUT_DIR/english.jsonl, OUT_DIR/multilingual.jsonl)
"""
import json
import os
import subprocess
import sys

ENGLISH = ["fortunes"]
MULTILINGUAL = ["fortunes-de", "fortunes-ru", "fortunes-es", "fortunes-it", "fortunes-cs",
                "fortunes-pl", "fortunes-bg", "fortunes-br", "fortunes-zh"]


def cookie_files(package):
    out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
    for path in sorted(out.split("\n")):
        if path.startswith("/usr/share/games/fortunes/") and os.path.isfile(path) \
                and not path.endswith((".dat", ".u8")) and not os.path.islink(path):
            yield path


def write_corpus(packages, path):
    docs = 0
    with open(path, "w", encoding="utf-8") as out:
        for package in packages:
            for f in cookie_files(package):
                for cookie in open(f, "rb").read().split(b"\n%\n"):
                    try:
                        text = cookie.decode("utf-8")
                    except UnicodeDecodeError:
                        continue
                    if text.strip():
                        out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                        docs += 1
    print(f"{path}: {docs} documents, {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    missing = [p for p in ENGLISH + MULTILINGUAL
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        sys.exit(f"fortunes_corpus: install {' '.join(missing)} (apt-get install ...)")
    os.makedirs(sys.argv[1], exist_ok=True)
    write_corpus(ENGLISH, os.path.join(sys.argv[1], "english.jsonl"))
    write_corpus(MULTILINGUAL, os.path.join(sys.argv[1], "multilingual.jsonl"))
