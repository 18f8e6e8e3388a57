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

# The corpus files: those of Debian's English packages (fortunes, fortunes-min) when dpkg knows
# them, so that other fortunes-* packages (German, Russian, ...) installed in the same directory do
# not change the default corpus; else every plain file, minus index files and the offensive subdirectory.
package_files() {
  [[ -z "${FORTUNES_DIR:-}" ]] && command -v dpkg-query >/dev/null && dpkg-query -W fortunes >/dev/null 2>&1 || return 1
  dpkg-query -L fortunes fortunes-min 2>/dev/null | grep "^$src/" | grep -v -e '\.dat$' -e '\.u8$' -e "^$src/off/" |
    while read -r f; do [[ -f "$f" ]] && echo "$f"; done | sort
}
list_inputs() {
  if package_files >/dev/null; then
    if [[ $# -gt 0 ]]; then package_files | xargs -r -d '\n' -I{} find {} "$@" -print; else package_files; fi
    return
  fi
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

if package_files >/dev/null; then
  mapfile -t files < <(package_files)
  "$prepare" --input "${files[@]}" --out "$here" --vocab char --val-fraction 0.1
else
  "$prepare" --input "$src" --out "$here" --vocab char --val-fraction 0.1 \
    --exclude '*.dat' '*.u8' 'off' '.*'
fi
