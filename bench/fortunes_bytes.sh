#!/usr/bin/env bash
# Debian's fortunes (/usr/share/games/fortunes, without index files, off/ and dot files) read as
# bytes (vocab 256), 10% held out, into OUT_DIR with BUILD_DIR's spmd-prepare: the corpus of the
# benchmarks whose figures do not depend on the text.
#   bash bench/fortunes_bytes.sh BUILD_DIR OUT_DIR
set -euo pipefail
"${1:?build dir}/app/spmd-prepare" --input /usr/share/games/fortunes --out "${2:?output dir}" --vocab byte \
  --val-fraction 0.1 --exclude '*.dat' '*.u8' 'off' '.*' --quiet
