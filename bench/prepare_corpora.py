"""Two benchmark corpora from Debian packages, one document per JSON line ({"text": ...}).
English: the `fortunes` package's cookies, Perl's manual (`perl-doc`: its .pod files cut at
their =head1 and =head2 sections) and the Linux kernel's documentation (`linux-doc-6.1`: each
English .rst file a document), ~32 MB: large enough that spmd-prepare's ~40 ms start-up is a small
part of a run, as it is on a real corpus. Multilingual: fortunes in German, Russian, Spanish,
Italian, Czech, Polish, Bulgarian, Portuguese and Chinese, ~16 MB. Documents that are not valid
UTF-8 are left out. The packages are fetched with `apt-get download` and unpacked under
OUT_DIR/debs, never installed: installed, the fortunes would join the default corpus that
datasets/fortunes/prepare.sh reads.

  python prepare_corpora.py OUT_DIR      (writes OUT_DIR/english.jsonl, OUT_DIR/multilingual.jsonl)
"""
import gzip
import itertools
import json
import os
import re
import subprocess
import sys

ENGLISH = ["fortunes"]
MULTILINGUAL = ["fortunes-de", "fortunes-ru", "fortunes-es", "fortunes-it", "fortunes-cs",
                "fortunes-pl", "fortunes-bg", "fortunes-br", "fortunes-zh"]


def unpack(package, debs):
    """The package's files, unpacked under debs/package; returns that root."""
    root = os.path.join(debs, package)
    if not os.path.isdir(root):
        subprocess.run(["apt-get", "download", "-q", package], cwd=debs, check=True)
        deb = next(f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb"))
        subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), root], check=True)
    return root


def cookie_files(package, debs):
    base = os.path.join(unpack(package, debs), "usr/share/games/fortunes")
    for folder, _, names in sorted(os.walk(base)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if not name.endswith((".dat", ".u8")) and not os.path.islink(path):
                yield path


def cookies(packages, debs):
    for package in packages:
        for f in cookie_files(package, debs):
            yield from open(f, "rb").read().split(b"\n%\n")


def pod_sections(debs):
    base = unpack("perl-doc", debs)
    for folder, _, names in sorted(os.walk(base)):
        for name in sorted(names):
            if name.endswith(".pod"):
                text = open(os.path.join(folder, name), "rb").read()
                yield from re.split(rb"\n(?==head[12] )", text)


def kernel_docs(debs):
    base = os.path.join(unpack("linux-doc-6.1", debs), "usr/share/doc/linux-doc-6.1/Documentation")
    for folder, dirs, names in os.walk(base):  # top-down, in sorted order, skipping translations
        dirs[:] = sorted(d for d in dirs if d != "translations")
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.endswith(".rst.gz"):
                yield gzip.open(path).read()
            elif name.endswith(".rst"):
                yield open(path, "rb").read()


def write_corpus(documents, path):
    docs = 0
    with open(path, "w", encoding="utf-8") as out:
        for raw in documents:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text.strip():
                out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                docs += 1
    print(f"{path}: {docs} documents, {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    debs = os.path.join(sys.argv[1], "debs")
    os.makedirs(debs, exist_ok=True)
    english = itertools.chain(cookies(ENGLISH, debs), pod_sections(debs), kernel_docs(debs))
    write_corpus(english, os.path.join(sys.argv[1], "english.jsonl"))
    write_corpus(cookies(MULTILINGUAL, debs), os.path.join(sys.argv[1], "multilingual.jsonl"))
