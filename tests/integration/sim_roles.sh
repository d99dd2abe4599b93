#!/usr/bin/env bash
# sim_roles.sh: a fleet split into roles is the same run. A 3-client
# scenario (client-1 sends fp32 where the others send int8, client-2 sends
# -2 times its update: arguments a role must pass on, or the model moves)
# runs once whole (hfl-sim --rounds 2), and twice in the same HFL_RUN as
# deploy/slurm's two scripts would run it on a cluster, with HFL_SIM_ARGS
# "--rounds 2", here without Slurm (not installed here; the scripts are
# bash, and the scheduler's part is SLURM_ARRAY_TASK_ID): the coordinator
# script, and the array script once per task id, on a PKI made by hfl-pki
# with the scripts' CN. The oracle is the whole run: every report must give
# its final_model_sha256 (the same clients, arguments and seeds; only the
# sockets differ), the second run too (no state left from the first). Then
# bad role arguments, and a scenario with a crash, are refused in one line
# each, exit 2.
# usage: sim_roles.sh SOURCE_ROOT HFL_SIM HFL_PKI
set -u
root=$1 sim=$2 pki=$3
tmp=$(mktemp -d /tmp/hfl-sim-roles-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
cat > "$tmp/tiny.json" <<'JSON'
{"name": "tiny", "model": "mlp", "clients": 3, "clients_per_round": 3, "rounds": 3, "local_epochs": 1,
 "batch": 32, "lr": 0.05, "partition": "iid", "codec": "int8", "seed": 1,
 "client_codecs": {"client-1": "fp32"}, "client_attacks": {"client-2": "-2"}}
JSON
"$sim" "$tmp/tiny.json" --rounds 2 --out "$tmp/whole" --quiet --timeout 240 > "$tmp/whole.log" 2>&1 ||
  { echo "FAIL the whole fleet exited $?"; tail -5 "$tmp/whole.log"; exit 1; }
"$pki" --out "$tmp/run/pki" --clients 3 --cn hfl-coordinator > /dev/null || { echo "FAIL hfl-pki"; exit 1; }
hash() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("final_model_sha256", "none"))' "$1" 2>/dev/null; }
a=$(hash "$tmp/whole/report.json")
export HFL_RUN=$tmp/run HFL_SCENARIO=$tmp/tiny.json HFL_SIM=$sim HFL_HOST=127.0.0.1 HFL_WAIT=60 HFL_SIM_ARGS="--rounds 2"
for run in 1 2; do
  HFL_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export HFL_PORT
  timeout 240 bash "$root/deploy/slurm/hfl-coordinator.sbatch" > "$tmp/coord-$run.log" 2>&1 &
  pids=($!)
  for i in 0 1 2; do
    SLURM_ARRAY_TASK_ID=$i timeout 240 bash "$root/deploy/slurm/hfl-clients.sbatch" > "$tmp/client-$run-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2; do
    wait "${pids[$((i + 1))]}" && ok "run $run: task $i exited 0" || bad "run $run: task $i exited $?: $(tail -1 "$tmp/client-$run-$i.log")"
  done
  wait "${pids[0]}" && ok "run $run: the coordinator script exited 0" ||
    bad "run $run: the coordinator script exited $?: $(tail -2 "$tmp/coord-$run.log")"
  [ ! -e "$tmp/run/coordinator.url" ] && ok "run $run: the URL file is gone after the run" || bad "run $run: coordinator.url outlived the run"
  # each start of the script is a new run, not the last one continued from its state
  grep -q "continuing the run" "$tmp/coord-$run.log" && bad "run $run: the coordinator continued an earlier run" ||
    ok "run $run: a new run"
  b=$(hash "$tmp/run/coordinator/report.json")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "run $run: the same final model whole and in roles: $a" ||
    bad "run $run: final models differ: whole $a, roles $b"
  grep -q "client 1 dialing tls+tcp://127.0.0.1:$HFL_PORT" "$tmp/client-$run-1.log" &&
    ok "run $run: task 1 ran client 1 on the URL the coordinator wrote" || bad "run $run: task 1's log: $(head -1 "$tmp/client-$run-1.log")"
done
pids=()
refuse() { # ARGS...: exit 2 with one line on stderr, nothing on stdout
  local out err rc
  out=$("$sim" "$tmp/tiny.json" --out "$tmp/refused" "$@" 2> "$tmp/err")
  rc=$?
  err=$(cat "$tmp/err")
  if [ "$rc" -eq 2 ] && [ -z "$out" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then ok "refused $*: $err"
  else bad "$*: exit $rc, stdout '$out', stderr '$err'"; fi
}
refuse --role client --pki "$tmp/run/pki" --coordinator tls+tcp://127.0.0.1:1
refuse --role client --index 3 --pki "$tmp/run/pki" --coordinator tls+tcp://127.0.0.1:1
refuse --role client --index 0 --pki "$tmp/run/pki"
refuse --role coordinator
refuse --role coordinator --pki "$tmp/nowhere"
refuse --pki "$tmp/run/pki"
refuse --index 1
refuse --role client --index 0 --pki "$tmp/run/pki" --coordinator tls+tcp://127.0.0.1:1 --netns
refuse --role client --index 0 --pki "$tmp/run/pki" --coordinator "tls+tcp://$(printf 'h%.0s' $(seq 400)):1"
sed 's/"seed": 1,/"seed": 1, "crashes": {"client-1": "2:1"},/' "$tmp/tiny.json" > "$tmp/crash.json"
cp "$tmp/crash.json" "$tmp/tiny.json"
refuse --role coordinator --pki "$tmp/run/pki"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
