#!/usr/bin/env bash
# spmd-prepare --tokenizer with GPT-2's files against tiktoken (bench/prepare_vs_tiktoken.py) on
# English and multilingual fortunes. Fetches GPT-2's ranks from the openai-whisper sdist on PyPI
# (whisper/assets/gpt2.tiktoken) with pip, rebuilds vocab.json + merges.txt from them, writes the
# corpora from Debian's fortunes packages (downloaded and unpacked, not installed); all under $WORK
# (default /tmp/spmd-bench-prepare). Needs scripts/setup-oracles (tiktoken).
#   bash bench/prepare_vs_tiktoken.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
work=${WORK:-/tmp/spmd-bench-prepare}
python=.venv-torch2/bin/python
mkdir -p "$work"
ranks="$work/openai_whisper-20250625/whisper/assets/gpt2.tiktoken"
if [ ! -f "$ranks" ]; then
  "$python" -m pip download --quiet --no-deps --no-binary :all: openai-whisper==20250625 -d "$work"
  tar xzf "$work/openai_whisper-20250625.tar.gz" -C "$work" openai_whisper-20250625/whisper/assets/gpt2.tiktoken
fi
[ -f "$work/gpt2/merges.txt" ] || "$python" bench/gpt2_tokenizer_files.py "$ranks" "$work/gpt2"
[ -f "$work/english.jsonl" ] && [ -f "$work/multilingual.jsonl" ] || "$python" bench/prepare_corpora.py "$work"
lscpu | grep -E "Model name|^CPU\(s\)"
"$python" bench/prepare_vs_tiktoken.py "$build/app/spmd-prepare" "$work/gpt2" "$ranks" \
  "$work/english.jsonl" "$work/multilingual.jsonl" --rounds "$rounds"
