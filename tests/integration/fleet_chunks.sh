#!/usr/bin/env bash
# fleet_chunks.sh: bench-fleet's light clients against chunked tasks, small
# and quick. gpt-tiny (34,688 params) with --chunk-bytes 4096: a task's fp32
# weights are the codec's 12-byte header and 4 x 34,688 = 138,752 bytes,
# 138,764 in all, so they come by fetch in ceil(138,764 / 4096) = 34 chunks
# (33 whole and one of 3,596 bytes). An int8 update is the 12-byte header
# and, per block of 256 values, a 4-byte fp32 scale and the block's int8
# values: 136 blocks (the last of 128), 12 + 136 x 4 + 34,688 = 35,244
# bytes, longer than the welcome's chunk_bytes, so it goes up in
# ceil(35,244 / 4096) = 9 puts (8 whole and one of 2,476) before the update
# that names it. 4 clients, all 4 drawn for each of 2 rounds: every round
# must close ok (each needs all 4 updates, --min-quorum), no client fail,
# and the clients must have fetched exactly 2 x 4 x 34 = 272 chunks and put
# 2 x 4 x 9 = 72 (a coordinator that sent the weights whole, took updates
# whole, or served or held a chunk twice or not at all, is caught here).
# Usage: fleet_chunks.sh BENCH_FLEET COORDINATOR MODELS_DIR
set -euo pipefail
bench=$1 coord=$2 models=$3
out=$("$bench" --coordinator "$coord" --model "$models/gpt-tiny.json" --chunk-bytes 4096 \
  --clients 4 --per-round 4 --rounds 2 --timeout 60 --json)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
want = {"params": 34688, "rounds_ok": 2, "failed_clients": 0, "update_bytes": 35244,
        "chunk_fetches": 2 * 4 * 34, "chunk_puts": 2 * 4 * 9}
bad = {k: (r.get(k), v) for k, v in want.items() if r.get(k) != v}
if bad:
    sys.exit("fleet_chunks: got (got, want) " + repr(bad))
print("fleet_chunks: ok")
PY
