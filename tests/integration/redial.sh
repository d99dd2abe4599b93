#!/usr/bin/env bash
# redial.sh: a client whose request was in flight when its coordinator died
# gets no FIN (the connection stays half-open: half_open_proxy.py relays it
# and holds the client's side open when the coordinator's side ends), and
# still finishes the run soon after the coordinator is back, because a
# failed request has the client dial a fresh socket (client/session.c)
# instead of waiting on the old one, which NNG never sees drop.
#
# One client, 2 rounds, through the relay. The coordinator kills itself at
# round 2's first update (HFL_TEST_CRASH=update:2), the client's update in
# flight, and is started again at once on the same port and --state-dir.
# The client's update can only fail by its --timeout T; after that a rejoin
# costs a backoff of at most 0.2 s, a dial, a hello and round 2 again (the
# update already made is sent, not retrained): 0.25 to 0.35 s after T here
# (2 cores), so 4 s leaves room for a loaded machine. The oracles: the
# client exits 0 within T + 4 s of the crash, under 2 T: a client that said
# hello on the old socket would send it down the dead connection and wait
# another T for its reply (without the fresh dial it says hello until
# --retry-for runs out, and fails); the restarted coordinator
# finishes both rounds and counts 1 restart; the relay held at least one
# half-open connection (else this tested nothing).
# Skips (77) without Fashion-MNIST.
# usage: redial.sh HFL_COORDINATOR HFL_CLIENT HALF_OPEN_PROXY
set -u
coord=$1 client=$2 proxy=$3
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
T=6            # the client's --timeout
bound=$((T + 4)) # seconds from the crash to the client's exit; 2 T = 12
tmp=$(mktemp -d /tmp/hfl-test-redial-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; [ -n "${HFL_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL $*"
  for f in coord1 coord2 client proxy; do echo "--- $f.log"; tail -n 15 "$tmp/$f.log" 2>/dev/null; done
  exit 1
}

# start_coord LOG LISTEN [CRASH]: the coordinator, its URL in $tmp/url
start_coord() {
  local log=$tmp/$1.log listen=$2 crash=${3:-}
  rm -f "$tmp/url"
  env ${crash:+HFL_TEST_CRASH=$crash} "$coord" --insecure --listen "$listen" --ready-file "$tmp/url" \
    --rounds 2 --clients-per-round 1 --min-clients 1 --deadline 60 --linger 3 --seed 5 --codec fp32 \
    --report "$tmp/report.json" --state-dir "$tmp/state" >"$log" 2>&1 &
  cpid=$!
  pids+=($cpid)
  for _ in $(seq 300); do [ -s "$tmp/url" ] && return 0; kill -0 $cpid 2>/dev/null || break; sleep 0.1; done
  fail "the coordinator did not start"
}

start_coord coord1 tcp://127.0.0.1:0 update:2
url=$(cat "$tmp/url")
python3 "$proxy" "${url##*:}" "$tmp/proxy.port" >"$tmp/proxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
[ -s "$tmp/proxy.port" ] || fail "the relay did not start"
timeout $((4 * T + 60)) "$client" --coordinator "tcp://127.0.0.1:$(cat "$tmp/proxy.port")" --insecure --client-index 0 --num-clients 30 \
  --precision fp32 --timeout $T --retry-for 60 >"$tmp/client.log" 2>&1 &
kpid=$!
pids+=($kpid)

rc=0; wait $cpid || rc=$?
[ $rc -eq 137 ] || fail "the coordinator ended with $rc, not killed at round 2's first update"
crashed=${EPOCHREALTIME/./} # microseconds
echo "ok   the coordinator killed itself at round 2's first update; starting it again on $url"
start_coord coord2 "$url"

since_ms() { local now=${EPOCHREALTIME/./}; echo $(((now - crashed) / 1000)); }
while kill -0 $kpid 2>/dev/null && [ "$(since_ms)" -le $((bound * 1000)) ]; do sleep 0.05; done
ms=$(since_ms) took=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
kill -0 $kpid 2>/dev/null && fail "the client is still running $took s after the crash, over T + 4 = $bound s (--timeout $T)"
rc=0; wait $kpid || rc=$?
[ $rc -eq 0 ] || fail "the client ended with $rc, $took s after the crash"
echo "ok   the client finished $took s after the crash (at most $bound s, --timeout $T)"
rc=0; wait $cpid || rc=$?
[ $rc -eq 0 ] || fail "the restarted coordinator ended with $rc"
python3 - "$tmp/report.json" <<'PY' || fail "the report"
import json, sys
r = json.load(open(sys.argv[1]))
rounds = [x["round"] for x in r["rounds"]]
ok = rounds == [1, 2] and r.get("restarts") == 1
print(("ok   " if ok else "FAIL ") + "rounds %s, %s restart(s)" % (rounds, r.get("restarts")))
sys.exit(0 if ok else 1)
PY
grep -q "client side held open" "$tmp/proxy.log" || fail "the relay held no half-open connection: nothing was tested"
echo "ok   the relay held a half-open connection: $(grep -c 'held open' "$tmp/proxy.log")"
