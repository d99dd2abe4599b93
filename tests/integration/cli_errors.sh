#!/usr/bin/env bash
# cli_errors.sh: bad input to every program gets one clear line on stderr and
# a non-zero exit, never a crash (exit >= 128) or a hang; --help works.
# usage: cli_errors.sh HFL_COORDINATOR HFL_CLIENT HFL_SIM HFL_PKI HFL_DATA
set -u
coord=$1 client=$2 sim=$3 pki=$4 data=$5
tmp=$(mktemp -d /tmp/hfl-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect_error NAME CMD...: exit status 1..127, exactly one non-empty stderr line.
expect_error() {
  local name=$1; shift
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(grep -c . "$tmp/err")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$lines" -ne 1 ]; then
    echo "FAIL $name: exit $rc, $lines stderr lines:"; sed 's/^/  | /' "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok   $name: exit $rc: $(cat "$tmp/err")"
  fi
}

expect_help() {
  local name=$1; shift
  if "$@" --help >"$tmp/out" 2>&1 && grep -q '^usage:' "$tmp/out" && grep -q -- '--help' "$tmp/out"; then
    echo "ok   $name --help"
  else
    echo "FAIL $name --help"; fails=$((fails + 1))
  fi
}

"$pki" --out "$tmp/pki" --clients 1 >/dev/null || { echo "FAIL hfl-pki could not make a PKI"; exit 1; }
ca=$tmp/pki/ca.crt cpem=$tmp/pki/coordinator.pem c0=$tmp/pki/client-0.pem
echo '{ "name": "broken", "model": ' >"$tmp/broken.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "lr": 0.1, "colour": 1}' >"$tmp/unknown_key.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int3"}' >"$tmp/bad_codec.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 2, "partition": "iid", "codec": "int8", "client_memory": {"client-0": "8M"}, "memory_budget_at": {"client-0": "0:3M"}}' >"$tmp/bad_budget_at.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 2, "partition": "iid", "codec": "int8", "memory_budget_at": {"client-1": "2:3M"}}' >"$tmp/budget_at_alone.json"
echo '{"name": "x", "model": "resnet", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8"}' >"$tmp/bad_model.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "dirichlet:-1", "codec": "int8"}' >"$tmp/bad_partition.json"
echo '[1, 2]' >"$tmp/array.json"
printf '{"name": "x", "a\\nb\\u001b[2J": 1}\n' >"$tmp/control_key.json"
printf '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "client_codecs": {"client-01": "fp32"}}\n' >"$tmp/alias_client.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8"}' >"$tmp/good.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "virtual_time": true}' >"$tmp/vt_noprofile.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "virtual_time": 1}' >"$tmp/vt_notbool.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "compute_scale": 0.5}' >"$tmp/bad_compute.json"
echo '{"name": "x", "model": "mlp", "clients": 2, "rounds": 1, "partition": "iid", "codec": "int8", "profiles": {"t4-16g": 2}, "virtual_time": true, "over_selection": 0.5}' >"$tmp/vt_over.json"

for p in "$coord" "$client" "$sim" "$pki" "$data"; do expect_help "$(basename "$p")" "$p"; done
expect_error "data: no command"             "$data"
expect_error "data: unknown option"         "$data" stats --colour
expect_error "data: bad partition"          "$data" split --num-clients 2 --partition dirichlet:-1 --out "$tmp/d"
expect_error "data: bad format"             "$data" split --num-clients 2 --format csv --out "$tmp/d"
expect_error "data: bad client count"       "$data" split --num-clients 0 --out "$tmp/d"
expect_error "data: stats of nothing"       "$data" stats

expect_error "sim: missing scenario file"   "$sim" "$tmp/nope.json" --out "$tmp/run"
expect_error "sim: malformed JSON"          "$sim" "$tmp/broken.json" --out "$tmp/run"
expect_error "sim: scenario not an object"  "$sim" "$tmp/array.json" --out "$tmp/run"
expect_error "sim: unknown key"             "$sim" "$tmp/unknown_key.json" --out "$tmp/run"
# a language model typed bare, without its text shards: one line naming the scenario's own recipe
expect_error "sim: text model without shards" env --chdir="$HFL_SOURCE_ROOT" "$(realpath "$sim")" scenarios/lm-pretrain.json --out "$tmp/run"
grep -q 'kjv-books BOOKS && build/data/hfl-data text' "$tmp/err" ||
  { echo "FAIL sim: the refusal does not name lm-pretrain's preparation"; fails=$((fails + 1)); }
expect_error "sim: DiLoCo without shards"   env --chdir="$HFL_SOURCE_ROOT" "$(realpath "$sim")" scenarios/lm-diloco.json --out "$tmp/run"
grep -q 'kjv-books BOOKS && build/data/hfl-data text --out KJV8 --context 64 --num-clients 8' "$tmp/err" ||
  { echo "FAIL sim: the refusal does not name lm-diloco's preparation"; fails=$((fails + 1)); }
expect_error "sim: key with control chars"  "$sim" "$tmp/control_key.json" --out "$tmp/run"
expect_error "sim: client name alias"       "$sim" "$tmp/alias_client.json" --out "$tmp/run"
expect_error "sim: unknown codec"           "$sim" "$tmp/bad_codec.json" --out "$tmp/run"
expect_error "sim: memory_budget_at round 0" "$sim" "$tmp/bad_budget_at.json" --out "$tmp/run"
expect_error "sim: memory_budget_at, no budget" "$sim" "$tmp/budget_at_alone.json" --out "$tmp/run"
expect_error "sim: unknown model"           "$sim" "$tmp/bad_model.json" --out "$tmp/run"
expect_error "sim: bad partition"           "$sim" "$tmp/bad_partition.json" --out "$tmp/run"
expect_error "sim: unknown option"          "$sim" "$tmp/broken.json" --colour
expect_error "sim: missing data"            "$sim" "$tmp/good.json" --data /nonexistent --out "$tmp/run"
expect_error "sim: virtual_time without profiles" "$sim" "$tmp/vt_noprofile.json" --out "$tmp/run"
expect_error "sim: virtual_time not a bool" "$sim" "$tmp/vt_notbool.json" --out "$tmp/run"
expect_error "sim: compute_scale below 1"   "$sim" "$tmp/bad_compute.json" --out "$tmp/run"
expect_error "sim: virtual_time with over-selection" "$sim" "$tmp/vt_over.json" --out "$tmp/run"

expect_error "coordinator: unknown codec"   "$coord" --insecure --listen tcp://127.0.0.1:0 --codec int3
expect_error "coordinator: unknown model"   "$coord" --insecure --listen tcp://127.0.0.1:0 --model resnet
expect_error "coordinator: missing data"    "$coord" --insecure --listen tcp://127.0.0.1:0 --data /nonexistent
expect_error "coordinator: tcp without --insecure" "$coord" --listen tcp://127.0.0.1:0 --ca "$ca" --cert "$cpem"
expect_error "coordinator: missing cert file" "$coord" --listen tls+tcp://127.0.0.1:0 --ca "$ca" --cert "$tmp/none.pem"
expect_error "coordinator: bad number"      "$coord" --insecure --rounds ten
expect_error "coordinator: missing value"   "$coord" --insecure --rounds
expect_error "coordinator: no TLS files"    "$coord"
expect_error "coordinator: unknown strategy" "$coord" --insecure --strategy mean
expect_error "coordinator: bad trim"        "$coord" --insecure --strategy trimmed:0.6
expect_error "coordinator: unknown server optimizer" "$coord" --insecure --server-opt sgd
expect_error "coordinator: bad clip"        "$coord" --insecure --clip-norm adaptive:x
expect_error "coordinator: bad share"       "$coord" --insecure --max-share 0
expect_error "coordinator: async with over-selection" "$coord" --insecure --async 4 --over-select 0.5
expect_error "coordinator: virtual time with async" "$coord" --insecure --virtual-time --async 4
expect_error "coordinator: virtual time with late fold" "$coord" --insecure --virtual-time --late fold
expect_error "coordinator: async with a robust rule" "$coord" --insecure --async 4 --strategy median
expect_error "coordinator: bad async"       "$coord" --insecure --async -1
expect_error "coordinator: bad prox mu"     "$coord" --insecure --prox-mu -1
expect_error "coordinator: bad handshake timeout" "$coord" --insecure --handshake-timeout 0.5
expect_error "coordinator: schedule without local steps" "$coord" --insecure --lr-schedule cosine:10
expect_error "coordinator: warmup past the run" "$coord" --insecure --rounds 2 --local-steps 5 --lr-schedule cosine:10
expect_error "coordinator: unknown schedule" "$coord" --insecure --local-steps 5 --lr-schedule linear
expect_error "coordinator: local steps with capacity work" "$coord" --insecure --local-steps 5 --local-work capacity
printf 'not a model' > "$tmp/model.safetensors"
expect_error "coordinator: missing init model" "$coord" --insecure --listen tcp://127.0.0.1:0 --init-model "$tmp/none.safetensors"
expect_error "coordinator: bad metrics address" "$coord" --insecure --listen tcp://127.0.0.1:0 --metrics "127.0.0.1:notaport"
expect_error "coordinator: malformed init model" "$coord" --insecure --listen tcp://127.0.0.1:0 --init-model "$tmp/model.safetensors"
expect_error "client: pace without link"   "$client" --insecure --coordinator tcp://127.0.0.1:1 --pace 1
expect_error "client: bad link"            "$client" --insecure --coordinator tcp://127.0.0.1:1 --pace 1 --link 1:2
expect_error "client: profile without trial" "$client" --plan --model mlp --profile
expect_error "coordinator: robust rule over the memory limit" "$coord" --insecure --listen tcp://127.0.0.1:0 \
  --strategy median --clients-per-round 10 --robust-memory 1M
expect_error "coordinator: sum on disk with a robust rule" "$coord" --insecure --listen tcp://127.0.0.1:0 \
  --strategy median --sum-on-disk on
expect_error "coordinator: sum on disk where no file can be made" "$coord" --insecure --listen tcp://127.0.0.1:0 \
  --sum-on-disk on --spool-dir /nonexistent
expect_error "client: bad attack"           "$client" --insecure --coordinator tcp://127.0.0.1:1 --attack 0

expect_error "client: unreachable (tcp)"    "$client" --insecure --coordinator tcp://127.0.0.1:1 --num-clients 10 --client-index 3
expect_error "client: unreachable (TLS)"    "$client" --coordinator tls+tcp://127.0.0.1:1 --ca "$ca" --cert "$c0" --num-clients 10
expect_error "client: missing data"         "$client" --insecure --coordinator tcp://127.0.0.1:1 --data /nonexistent
expect_error "client: bad partition"        "$client" --insecure --coordinator tcp://127.0.0.1:1 --partition shards:0
expect_error "client: index out of range"   "$client" --insecure --coordinator tcp://127.0.0.1:1 --client-index 4 --num-clients 4
expect_error "client: no coordinator"       "$client" --insecure
expect_error "client: plan, nothing fits"   "$client" --plan --model cnn --memory-budget 1M
expect_error "client: plan, unknown model"  "$client" --plan --model resnet
expect_error "client: plan, broken spec"    "$client" --plan --model "$tmp/broken.json"
expect_error "client: plan, bad budget"     "$client" --plan --model mlp --memory-budget lots
expect_error "client: budget-at, no budget" "$client" --insecure --coordinator tcp://127.0.0.1:1 --budget-at 2:3M
expect_error "client: budget-at malformed"  "$client" --insecure --coordinator tcp://127.0.0.1:1 --memory-budget 8M --budget-at 3M
expect_error "client: budget-at size 0"     "$client" --insecure --coordinator tcp://127.0.0.1:1 --memory-budget 8M --budget-at 2:0

expect_error "pki: bad client count"        "$pki" --out "$tmp/p2" --clients -1
expect_error "pki: unwritable directory"    "$pki" --out /proc/hfl-pki --clients 1

# The sum on disk asked for on a tmpfs (coordinator/sum_place.c): it goes
# there, saying in one line that the file is memory after all.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
  shm=$(mktemp -d /dev/shm/hfl-test-XXXXXX)
  timeout -s TERM 3 "$coord" --insecure --listen tcp://127.0.0.1:0 --sum-on-disk on --spool-dir "$shm" --quiet \
    >/dev/null 2>"$tmp/err" || true
  rmdir "$shm"
  if grep -q "^hfl-coordinator: --sum-on-disk on, but $shm is a tmpfs, which keeps the file in memory$" "$tmp/err"; then
    echo "ok   coordinator: the sum on disk on a tmpfs: $(head -1 "$tmp/err")"
  else
    echo "FAIL coordinator: the sum on disk on a tmpfs said:"; sed 's/^/  | /' "$tmp/err"; fails=$((fails + 1))
  fi
else
  echo "skip coordinator: the sum on disk on a tmpfs: /dev/shm is no tmpfs here"
fi
echo "$fails failed"
[ "$fails" -eq 0 ]
