#!/usr/bin/env bash
# prometheus.sh: the coordinator's --metrics scraped by a real Prometheus
# server (proto/metrics_http.h). A 2-client, 3-round run on loopback with --metrics and
# --linger 6; Prometheus (Debian's prometheus package) scrapes it every
# second. Then Prometheus's HTTP API must say: the target was up, and the
# largest hfl_rounds_total it scraped equals the rounds in the report, as do
# hfl_model_version and hfl_updates_accepted_total (the report's round log
# counted here). /status, read while the coordinator lingers, says the run is
# complete. Client 0 runs with --metrics too and starts first; the run waits
# for client 1, which starts only once Prometheus has scraped client 0 (up).
# Client 0 exits when the run ends, maybe before its last scrape, so its
# counters are also read straight from its /metrics while it trains: the
# largest updates-sent value seen lies between 1 and the rounds the report
# credits it with. Skips (77) without Prometheus or Fashion-MNIST.
# Usage: prometheus.sh HFL_COORDINATOR HFL_CLIENT
set -euo pipefail
coord=$1 client=$2
prom=$(command -v prometheus || true)
if [ -z "$prom" ]; then echo "SKIP: prometheus not installed (scripts/test installs it)"; exit 77; fi
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-prometheus-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
read -r mport pport cport < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: hfl
    static_configs:
      - targets: ['127.0.0.1:$mport']
  - job_name: hfl-client
    static_configs:
      - targets: ['127.0.0.1:$cport']
YML
"$prom" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
"$coord" --insecure --listen tcp://127.0.0.1:0 --ready-file "$tmp/url" --rounds 3 --clients-per-round 2 \
  --metrics "127.0.0.1:$mport" --linger 6 --report "$tmp/report.json" --quiet &
cpid=$!
pids+=($cpid)
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.1; done
"$client" --coordinator "$(cat "$tmp/url")" --insecure --client-index 0 --num-clients 2 --quiet \
  --metrics "127.0.0.1:$cport" &
pids+=($!)
python3 - "$pport" <<'PY' # until Prometheus has scraped client 0 (the run waits for client 1)
import json, sys, time, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="hfl-client"}'})
for _ in range(600):
    try:
        res = json.load(urllib.request.urlopen(url, timeout=2))["data"]["result"]
        if res and res[0]["value"][1] == "1":
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
print("FAIL Prometheus never scraped client 0")
sys.exit(1)
PY
python3 - "$cport" "$tmp/client0.max" <<'PY' & # client 0's counter, read while it trains
import re, sys, time, urllib.request
best, seen = -1, False
for _ in range(2400):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read().decode()
        seen = True
        m = re.search(r'^hfl_client_updates_sent_total\{client="client-0"\} (\S+)$', text, re.M)
        if m:
            best = max(best, float(m.group(1)))
    except OSError:
        if seen:
            break
    time.sleep(0.05)
open(sys.argv[2], "w").write(str(best))
PY
poller=$!
"$client" --coordinator "$(cat "$tmp/url")" --insecure --client-index 1 --num-clients 2 --quiet &
pids+=($!)
python3 - "$tmp/report.json" "$mport" <<'PY'
import json, sys, time, urllib.request
# /status while the coordinator lingers after its last round
for _ in range(600):
    try:
        s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[2]}/status", timeout=2))
        if s.get("complete"):
            break
    except OSError:
        pass
    time.sleep(0.1)
ok = s.get("complete") and s.get("rounds_closed") == 3 and s.get("model_version") == 3
print(f"{'ok  ' if ok else 'FAIL'} /status: {s}")
sys.exit(0 if ok else 1)
PY
wait "$cpid"
wait "$poller"
python3 - "$tmp/report.json" "$pport" "$tmp/client0.max" <<'PY'
import json, sys, time, urllib.parse, urllib.request
r = json.load(open(sys.argv[1]))
def q(expr):
    url = f"http://127.0.0.1:{sys.argv[2]}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    res = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
    return float(res[0]["value"][1]) if res else None
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
up = q('max_over_time(up{job="hfl"}[10m])')
check(up == 1, f"Prometheus scraped the coordinator: max up = {up}")
rounds, version = len(r["rounds"]), r["rounds_aggregated"]
accepted = sum(x["clients"] for x in r["rounds"])
for name, want in (("hfl_rounds_total", rounds), ("hfl_model_version", version),
                   ("hfl_updates_accepted_total", accepted)):
    got = q(f"max_over_time({name}[10m])")
    check(got == want, f"{name}: {got} in Prometheus, {want} in the report")
acc = q("last_over_time(hfl_test_accuracy[10m])")
check(acc is not None and abs(acc - r["final_test_acc"]) < 1e-6, f"hfl_test_accuracy {acc}, report {r['final_test_acc']}")
n = q('max_over_time(hfl_round_duration_seconds_count[10m])')
check(n == rounds, f"hfl_round_duration_seconds_count {n}")
cup = q('max_over_time(up{job="hfl-client"}[10m])')
check(cup == 1, f"Prometheus scraped client 0: max up = {cup}")
mine = sum(p["status"] == "ok" for x in r["rounds"] for p in x["participants"] if p["name"] == "client-0")
sent = q('max_over_time(hfl_client_updates_sent_total{client="client-0"}[10m])')
check(sent is not None and 0 <= sent <= mine, f"client 0: {sent} updates sent as Prometheus last saw it, {mine} accepted")
read = float(open(sys.argv[3]).read())
check(1 <= read <= mine, f"client 0's /metrics while it trained: up to {read:.0f} updates sent, {mine} accepted")
sys.exit(1 if fails else 0)
PY
