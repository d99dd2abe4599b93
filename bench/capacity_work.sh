#!/bin/sh
# capacity_work.sh: capacity-aware local work against fixed local epochs on
# scenarios/edge-fleet.json, as simulated time to the quickstart's final test
# accuracy (what capacity-aware work must show: at least 1.5x less), per seed.
#
# usage: bench/capacity_work.sh [BUILD_DIR [ROUNDS [SEEDS]]]   (defaults: build 40 4,5,6)
#
# bench/time_to_accuracy.py does the runs: the quickstart first for the
# target, then the edge fleet with "local_work" "epochs" and "capacity",
# everything else equal (its 20% dropout included).
set -eu
build=${1:-build}
rounds=${2:-40}
seeds=${3:-4,5,6}
exec python3 "$(dirname "$0")/time_to_accuracy.py" --build "$build" --seeds "$seeds" \
    epochs="{\"local_work\": \"epochs\", \"rounds\": $rounds}" \
    capacity="{\"local_work\": \"capacity\", \"rounds\": $rounds}"
