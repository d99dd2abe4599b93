#!/bin/sh
# run.sh: runs one libFuzzer harness for a fixed time from its checked-in seed
# corpus, as the `fuzz` suite does. New inputs go to a temporary directory
# (libFuzzer writes only into the first corpus directory it is given), so the
# source tree is never written; a crashing input is kept in ARTIFACT_DIR to
# reproduce with `HARNESS FILE`. Exits with the harness's status.
# Usage: run.sh HARNESS SEED_CORPUS_DIR SECONDS ARTIFACT_DIR [libFuzzer flags...]
set -eu
if [ $# -lt 4 ]; then
  echo "usage: run.sh HARNESS SEED_CORPUS_DIR SECONDS ARTIFACT_DIR [libFuzzer flags...]" >&2
  exit 2
fi
harness=$1 seeds=$2 seconds=$3 artifacts=$4
shift 4
[ -d "$seeds" ] || { echo "run.sh: no seed corpus at $seeds" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/hfl-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
# libFuzzer's own failure status, 77, would read as "skipped" to meson.
"$harness" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$artifacts/" "$@" "$work" "$seeds"
