#!/usr/bin/env bash
# config.sh: --config FILE and --print-config in every program (util/config.h).
# For each program: --print-config prints one JSON object with every long
# option of its --help (less help, config, print-config), defaults included,
# and exits 0 without doing any work (no TLS files, no coordinator, no files
# written); a value from the config file shows in it, and an option on the
# command line wins over the file wherever it stands; a file that is not
# JSON, or names an option the program does not have, is one stderr line and
# a non-zero exit. hfl-pki also runs for real from a config file.
# usage: config.sh HFL_COORDINATOR HFL_CLIENT HFL_SIM HFL_PKI HFL_DATA
set -u
coord=$1 client=$2 sim=$3 pki=$4 data=$5
tmp=$(mktemp -d /tmp/hfl-config-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# print_config NAME CMD...: runs CMD --print-config into $tmp/out; 0 when it
# exits 0 with nothing on stderr.
print_config() {
  local name=$1; shift
  timeout 60 "$@" --print-config >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$tmp/err" ]; then
    fail "$name: --print-config exit $rc: $(head -c 300 "$tmp/err")"
    return 1
  fi
}

# expect NAME KEY WANT CMD...: CMD --print-config shows KEY with the JSON value WANT.
expect() {
  local name=$1 key=$2 want=$3; shift 3
  print_config "$name" "$@" || return
  local got
  if got=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
got = d.get(sys.argv[2], "<missing>")
print(json.dumps(got))
sys.exit(0 if sys.argv[2] in d and got == json.loads(sys.argv[3]) and type(got) == type(json.loads(sys.argv[3])) else 1)
' "$tmp/out" "$key" "$want" 2>&1); then ok "$name: $key = $got"
  else fail "$name: $key = $got, want $want"; fi
}

# expect_keys NAME CMD...: --print-config's keys are exactly the options --help lists.
expect_keys() {
  local name=$1; shift
  print_config "$name" "$@" || return
  "$@" --help | sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' | grep -vxE 'help|config|print-config' | sort >"$tmp/help_keys"
  python3 -c 'import json, sys; print("\n".join(sorted(json.load(open(sys.argv[1])))))' "$tmp/out" >"$tmp/keys"
  if [ -s "$tmp/help_keys" ] && diff "$tmp/help_keys" "$tmp/keys" >"$tmp/diff"; then
    ok "$name: --print-config has every option of --help ($(wc -l <"$tmp/keys"))"
  else
    fail "$name: --print-config keys differ from --help's options (< help, > print-config):"
    sed 's/^/  | /' "$tmp/diff"
  fi
}

# expect_error NAME WORD CMD...: exit 1..123, exactly one stderr line, naming WORD.
expect_error() {
  local name=$1 word=$2; shift 2
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(grep -c . "$tmp/err")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$word" "$tmp/err"; then
    fail "$name: exit $rc, $lines stderr lines (want one naming '$word'):"; sed 's/^/  | /' "$tmp/err"
  else
    ok "$name: exit $rc: $(cat "$tmp/err")"
  fi
}

# bad_files PROGRAM NAME CMD...: the malformed files, each one line.
bad_files() {
  local name=$1; shift
  expect_error "$name: config not JSON" "$tmp/broken.json" "$@" --config "$tmp/broken.json" --print-config
  expect_error "$name: config with an unknown key" "'colour' is not an option of $name" \
    "$@" --config "$tmp/unknown.json" --print-config
  expect_error "$name: config file missing" "$tmp/none.json" "$@" --config "$tmp/none.json" --print-config
  expect_error "$name: config not an object" "$tmp/array.json" "$@" --config "$tmp/array.json" --print-config
}

# roundtrip NAME PROGRAM ARGS...: --print-config's output read back as a
# config file prints the same (null stands for "not set").
roundtrip() {
  local name=$1 prog=$2; shift 2
  if "$prog" "$@" --print-config >"$tmp/rt1.json" 2>/dev/null &&
     "$prog" --config "$tmp/rt1.json" --print-config >"$tmp/rt2.json" 2>"$tmp/rt.err" &&
     cmp -s "$tmp/rt1.json" "$tmp/rt2.json"; then ok "$name: --print-config reads back as --config"
  else fail "$name: --print-config does not read back: $(head -1 "$tmp/rt.err")"; fi
}

echo '{"rounds": 5,' >"$tmp/broken.json"
echo '{"colour": "blue"}' >"$tmp/unknown.json"
echo '["--rounds", "5"]' >"$tmp/array.json"

# hfl-coordinator: nothing served, no TLS files needed.
cat >"$tmp/coord.json" <<'EOF'
{"rounds": 5, "codec": "fp16", "insecure": true, "lr": 0.01, "listen": "tcp://127.0.0.1:0", "quiet": false}
EOF
expect_keys "hfl-coordinator" "$coord"
expect "hfl-coordinator: default" rounds 10 "$coord"
expect "hfl-coordinator: no TLS files needed" ca null "$coord" --cert "$tmp/none.pem"
expect "hfl-coordinator: from the file" rounds 5 "$coord" --config "$tmp/coord.json"
expect "hfl-coordinator: number from the file" lr 0.01 "$coord" --config "$tmp/coord.json"
expect "hfl-coordinator: flag from the file" insecure true "$coord" --config "$tmp/coord.json"
expect "hfl-coordinator: string from the file" codec '"fp16"' "$coord" --config="$tmp/coord.json"
expect "hfl-coordinator: default beside the file" batch 32 "$coord" --config "$tmp/coord.json"
expect "hfl-coordinator: derived default" over-select 0 "$coord" --config "$tmp/coord.json" --async 3
expect "hfl-coordinator: command line wins (before)" rounds 7 "$coord" --rounds 7 --config "$tmp/coord.json"
expect "hfl-coordinator: command line wins (after)" codec '"int4"' "$coord" --config "$tmp/coord.json" --codec int4
bad_files "hfl-coordinator" "$coord"
roundtrip "hfl-coordinator" "$coord" --rounds 3 --insecure
echo '{"rounds": true}' >"$tmp/bool.json"
expect_error "hfl-coordinator: config flag value for --rounds" "'rounds' takes a value" \
  "$coord" --config "$tmp/bool.json" --print-config
echo '{"rounds": "ten"}' >"$tmp/ten.json"
expect_error "hfl-coordinator: config value checked as on the command line" "--rounds" \
  "$coord" --config "$tmp/ten.json" --print-config

# hfl-client: no coordinator contacted, none needed.
cat >"$tmp/client.json" <<'EOF'
{"coordinator": "tcp://127.0.0.1:1", "insecure": true, "num-clients": 4, "client-index": 2,
 "partition": "dirichlet:0.5", "link": "10:50:20", "precision": "bf16"}
EOF
expect_keys "hfl-client" "$client"
expect "hfl-client: no coordinator needed" coordinator null "$client"
expect "hfl-client: from the file" partition '"dirichlet:0.5"' "$client" --config "$tmp/client.json"
expect "hfl-client: derived name" name '"client-2"' "$client" --config "$tmp/client.json"
expect "hfl-client: link from the file" link '"10:50:20"' "$client" --config "$tmp/client.json"
expect "hfl-client: precision from the file" precision '"bf16"' "$client" --config "$tmp/client.json"
expect "hfl-client: command line wins" num-clients 8 "$client" --num-clients 8 --config "$tmp/client.json"
expect "hfl-client: flag default" quiet false "$client" --config "$tmp/client.json"
bad_files "hfl-client" "$client"
roundtrip "hfl-client" "$client" --coordinator tcp://127.0.0.1:1 --insecure

# hfl-sim: the scenario from the file, or the SCENARIO.json argument (which wins).
cat >"$tmp/sim.json" <<EOF
{"scenario": "$tmp/a.json", "rounds": 3, "codec": "int4", "quiet": true}
EOF
expect_keys "hfl-sim" "$sim"
expect "hfl-sim: scenario from the file" scenario "\"$tmp/a.json\"" "$sim" --config "$tmp/sim.json"
expect "hfl-sim: the argument wins" scenario "\"$tmp/b.json\"" "$sim" "$tmp/b.json" --config "$tmp/sim.json"
expect "hfl-sim: from the file" rounds 3 "$sim" --config "$tmp/sim.json"
expect "hfl-sim: command line wins" rounds 6 "$sim" --config "$tmp/sim.json" --rounds 6
expect "hfl-sim: flag from the file" quiet true "$sim" --config "$tmp/sim.json"
bad_files "hfl-sim" "$sim"
expect_error "hfl-sim: no scenario anywhere" "scenario" "$sim" --rounds 2

# hfl-pki: --print-config writes nothing; the file drives a real run and a subcommand.
cat >"$tmp/pki.json" <<EOF
{"out": "$tmp/pki", "clients": 1, "days": 30, "json": true}
EOF
expect_keys "hfl-pki" "$pki"
expect "hfl-pki: from the file" days 30 "$pki" --config "$tmp/pki.json"
expect "hfl-pki: command line wins" days 7 "$pki" --config "$tmp/pki.json" --days 7
expect "hfl-pki: flag from the file" json true "$pki" --config "$tmp/pki.json"
if [ -e "$tmp/pki" ]; then fail "hfl-pki --print-config wrote $tmp/pki"; else ok "hfl-pki --print-config wrote nothing"; fi
bad_files "hfl-pki" "$pki"
if "$pki" --config "$tmp/pki.json" >"$tmp/pki_out" 2>"$tmp/err" && [ -f "$tmp/pki/client-0.pem" ] &&
   python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/pki_out"; then
  ok "hfl-pki --config: wrote the PKI, --json from the file"
else
  fail "hfl-pki --config: $(head -c 300 "$tmp/err")"
fi
if "$pki" revoke mallory --config "$tmp/pki.json" >/dev/null 2>"$tmp/err" && grep -qx mallory "$tmp/pki/revoked.txt"; then
  ok "hfl-pki revoke NAME --config: revoked in the file's --out"
else
  fail "hfl-pki revoke NAME --config: $(head -c 300 "$tmp/err")"
fi

# hfl-data: the command stays on the command line, the options may come from the file.
cat >"$tmp/data.json" <<EOF
{"num-clients": 3, "partition": "shards:2", "out": "$tmp/shards", "format": "safetensors"}
EOF
expect_keys "hfl-data" "$data"
expect "hfl-data: from the file" partition '"shards:2"' "$data" --config "$tmp/data.json"
expect "hfl-data: command line wins" num-clients 5 "$data" --config "$tmp/data.json" --num-clients 5
expect "hfl-data: default beside the file" seed 1 "$data" --config "$tmp/data.json"
bad_files "hfl-data" "$data"
roundtrip "hfl-data" "$data" --num-clients 2 --out "$tmp/x"
if [ -r /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz ]; then
  if "$data" split --config "$tmp/data.json" >/dev/null 2>"$tmp/err" && [ -f "$tmp/shards/client-0002.safetensors" ]; then
    ok "hfl-data split --config: three safetensors shards in the file's --out"
  else
    fail "hfl-data split --config: $(head -c 300 "$tmp/err")"
  fi
fi

# --help documents both options everywhere.
for p in "$coord" "$client" "$sim" "$pki" "$data"; do
  if "$p" --help | grep -q -- '--config FILE' && "$p" --help | grep -q -- '--print-config'; then
    ok "$(basename "$p") --help documents --config and --print-config"
  else
    fail "$(basename "$p") --help lacks --config or --print-config"
  fi
done

if [ "$fails" -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all config checks passed"
