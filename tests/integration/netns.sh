#!/usr/bin/env bash
# netns.sh: hfl-sim --netns puts each client in a network namespace of its
# own behind a link shaped from its profile. Two clients on a 4 Mbit/s
# profile, one round of the mlp: the run gives the same final_model_sha256
# as on loopback (the link changes the timing, not the math), its round
# takes at least the link's own time (the oracle is the physics: each client
# downloads the 797,126-byte model at 4e6 bit/s, 1.59 s, and uploads its
# int8 update, ~0.4 s, one after the other), where loopback takes a
# fraction of that, and every namespace is gone afterwards, a killed run's
# too. Skips (77),
# saying why, where network namespaces cannot be made; refuses in one line
# when not root.
# usage: netns.sh HFL_SIM
set -u
sim=$1
if [ "$(id -u)" != 0 ]; then echo "SKIP: --netns needs root and this test does not run as root"; exit 77; fi
if ! ip netns add "hfl-probe-$$" 2>/tmp/hfl-netns-probe.$$; then
  echo "SKIP: cannot make a network namespace here: $(head -1 /tmp/hfl-netns-probe.$$)"; rm -f /tmp/hfl-netns-probe.$$; exit 77
fi
ip netns del "hfl-probe-$$"; rm -f /tmp/hfl-netns-probe.$$
tmp=$(mktemp -d /tmp/hfl-netns-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if [ "$2" = ok ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
cat > "$tmp/profiles.json" <<'JSON'
{"slow-link": {"about": "a test device on a 4 Mbit/s link each way, 20 ms one way", "kind": "cpu", "memory": "1G",
               "tflops": {"fp32": 0.1, "fp16": 0, "bf16": 0}, "uplink_mbit": 4, "downlink_mbit": 4, "latency_ms": 20}}
JSON
cat > "$tmp/s.json" <<'JSON'
{"name": "netns-test", "model": "mlp", "clients": 2, "clients_per_round": 2, "rounds": 1, "local_epochs": 1,
 "batch": 32, "lr": 0.05, "partition": "iid", "codec": "int8", "seed": 1, "max_client_samples": 2000,
 "profiles": {"slow-link": 2}, "profile_library": "profiles.json"}
JSON
"$sim" "$tmp/s.json" --out "$tmp/plain" --quiet > "$tmp/plain.txt" 2>&1 || { check "the run on loopback" fail; cat "$tmp/plain.txt"; exit 1; }
true & dead=$!; wait $dead # a pid that is gone: a killed hfl-sim's namespace, which the run removes
ip netns add "hfl-$dead-200-0"
"$sim" "$tmp/s.json" --out "$tmp/net" --netns > "$tmp/net.txt" 2>&1 &
run=$!
wait $run
rc=$?
[ $rc = 0 ] && r=ok || r=fail
check "the run with --netns exits 0 (got $rc)" $r
[ $rc = 0 ] || sed 's/^/  | /' "$tmp/net.txt"
grep -q -- '--netns: 2 clients in namespaces of their own, 2 links shaped' "$tmp/net.txt" && r=ok || r=fail
check "it says the two links are shaped: $(grep -- '--netns:' "$tmp/net.txt")" $r
read -r hp wp < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['final_model_sha256'], r['rounds'][0]['wall_s'])" "$tmp/plain/report.json")
read -r hn wn < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['final_model_sha256'], r['rounds'][0]['wall_s'])" "$tmp/net/report.json" 2>/dev/null || echo "none 0")
[ "$hp" = "$hn" ] && r=ok || r=fail
check "the same final_model_sha256 over the shaped links ($hn) as on loopback ($hp)" $r
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 1.9 else 1)" "$wn" && r=ok || r=fail
check "the round took at least the link's 1.59 s + 0.4 s: ${wn} s (loopback: ${wp} s)" $r
left=$(ip netns list | grep -cE "^hfl-($run|$dead)-" || true) # this run's and the dead one's only
[ "$left" = 0 ] && r=ok || r=fail
check "none of the run's namespaces is left, nor the dead run's hfl-$dead-200-0 ($left)" $r
ip netns del "hfl-$dead-200-0" 2>/dev/null
if command -v setpriv > /dev/null; then
  chmod 755 "$tmp"
  # under the sanitizers: no leak check and no suppressions file, which
  # nobody may not be able to read (a private checkout), and which this
  # check of one refusal line is not about
  out=$(env -u LSAN_OPTIONS ASAN_OPTIONS=detect_leaks=0 \
        setpriv --reuid 65534 --regid 65534 --clear-groups "$sim" "$tmp/s.json" --out "$tmp/nobody" --netns 2>&1)
  rc=$?
  [ $rc != 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] && [[ $out == *"needs root"* ]] && r=ok || r=fail
  check "not root: one line and a non-zero exit ($rc): $out" $r
fi
exit $((fails > 0))
