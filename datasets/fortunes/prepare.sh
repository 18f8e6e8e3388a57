#!/usr/bin/env bash
# Prepares the default corpus: the English text of Debian's `fortunes` package
# (/usr/share/games/fortunes, without the .dat/.u8 index files and the offensive off/ subdir)
# into datasets/fortunes/{train.bin,val.bin,meta.json} with a char vocabulary.
#
#   datasets/fortunes/prepare.sh [SPMD_PREPARE]    # default: build/app/spmd-prepare
#
# Does nothing when the outputs exist and are newer than every input file.
# FORTUNES_DIR overrides the source directory (tests, other distributions).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
src="${FORTUNES_DIR:-/usr/share/games/fortunes}"
prepare="${1:-build/app/spmd-prepare}"

die() { echo "fortunes/prepare.sh: error: $*" >&2; exit 1; }

# A relative binary path may be given from the current directory or from the repository root.
if [[ ! -x "$prepare" && "$prepare" != /* && -x "$root/$prepare" ]]; then
  prepare="$root/$prepare"
fi
[[ -x "$prepare" ]] || die "spmd-prepare not found at '$prepare' (build it: cmake --build build --target spmd-prepare)"

# The corpus files: plain files, minus index files and the offensive subdirectory.
list_inputs() {
  find -L "$src" -mindepth 1 \( -type d -name off -prune \) -o \
    \( -type f ! -name '*.dat' ! -name '*.u8' ! -name '.*' "$@" -print \)
}
[[ -d "$src" ]] || die "$src does not exist: install the fortunes package (apt-get install fortunes)"
[[ -n "$(list_inputs | head -n 1)" ]] || die "$src holds no fortune files: install the fortunes package (apt-get install fortunes)"

outputs=("$here/train.bin" "$here/val.bin" "$here/meta.json")
fresh=1
for f in "${outputs[@]}"; do [[ -f "$f" ]] || fresh=0; done
# meta.json is written last, so it is the oldest proof that all three are complete.
if [[ $fresh == 1 && -z "$(list_inputs -newer "$here/meta.json" | head -n 1)" ]]; then
  echo "fortunes/prepare.sh: $here is up to date"
  exit 0
fi

"$prepare" --input "$src" --out "$here" --vocab char --val-fraction 0.1 \
  --exclude '*.dat' '*.u8' 'off' '.*'
