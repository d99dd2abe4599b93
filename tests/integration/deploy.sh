#!/usr/bin/env bash
# deploy.sh: the deployment recipe (deploy/, docs/deploy.md).
#  1. systemd units: `systemd-analyze verify` on copies whose ExecStart names
#     this build's programs. verify fails on a missing ExecStart binary
#     ("Command ... is not executable"), but it only warns, and exits 0, on
#     an unknown directive or a bad value. So any line it prints about the
#     units is a failure. Then `systemd-analyze security --offline=yes`: the
#     sandboxing the issue asks for is set (dynamic user, no capabilities,
#     @system-service, ProtectSystem, ...), and the overall exposure is at
#     most 2.0. The unit files keep their contract: Restart=on-failure,
#     --config /etc/hfl/X.json with X.json in deploy/systemd, the state
#     directory where the config keeps its state, the key as a credential.
#  2. Kubernetes manifests (deploy/k8s, and deploy/k8s/sim's simulated fleet
#     in hfl-sim roles): kubernetes-validate --strict (unknown fields fail)
#     against the oldest and the newest schemas it ships. They also hold
#     together: Service and probes on the coordinator's port, the Job's
#     completions = client.json's num-clients, the config and PKI paths under
#     the mounts, the state dir on the volume claim, one GPU per client.
#  3. Every JSON config in deploy/, and the ConfigMap's, is accepted by its
#     program's --config FILE --print-config (exit 0, nothing on stderr).
#     Every key it sets shows in the options in effect with its value.
#  4. The systemd example configs run: a PKI whose coordinator CN is
#     client.json's server-name, the coordinator from coordinator.json
#     (/etc/hfl and /var/lib/hfl moved under a temp dir, loopback, 2 rounds)
#     and 2 clients from client.json and client-0.env. The run completes, and
#     writes its state, report, log and a safetensors model. Started again on
#     its state, the coordinator says the run is done and exits 0 with the
#     same model; stopped by SIGTERM mid-run, it exits 143, which the
#     unit's SuccessExitStatus counts clean. docs/deploy.md's PyTorch snippet loads the model (when
#     build/pyvenv has torch). Needs Fashion-MNIST, else this part skips.
#  5. docs/deploy.md: every --option given to hfl-pki, hfl-coordinator or
#     hfl-client is in that program's --help, hfl-pki's subcommands exist,
#     and every deploy/ path it names exists.
# Each checker is also run once on a broken copy (a typo'd directive, an
# unknown manifest field, an unknown config key, a missing sandbox setting,
# an option that does not exist), and must fail it.
# Skips (77) without systemd-analyze (Debian's systemd package) or without
# the Python that scripts/test prepares ($HFL_BUILD_ROOT/pyvenv with the
# kubernetes-validate package from PyPI).
# usage: deploy.sh SOURCE_ROOT HFL_COORDINATOR HFL_CLIENT HFL_PKI
set -u
root=$(realpath "$1") coord=$(realpath "$2") client=$(realpath "$3") pki=$(realpath "$4")
py=${HFL_BUILD_ROOT:-$root/build}/pyvenv/bin/python
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not found (Debian package systemd)"; exit 77
fi
if ! "$py" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  echo "SKIP: $py cannot import kubernetes_validate (pip install kubernetes-validate; scripts/test makes it)"
  exit 77
fi
sysd=$root/deploy/systemd k8s=$root/deploy/k8s docs=$root/docs/deploy.md
tmp=$(mktemp -d /tmp/hfl-deploy-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done  # timeout passes SIGTERM on
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
# negative NAME WORD CMD...: a checker run on a broken copy must fail, for the
# planted fault: its output names WORD.
negative() {
  local name=$1 word=$2; shift 2
  if "$@" >"$tmp/neg.out" 2>&1; then
    fail "negative control: $name passed the check"; sed 's/^/  | /' "$tmp/neg.out"
  elif ! grep -qF -- "$word" "$tmp/neg.out"; then
    fail "negative control: $name failed, but not naming '$word':"; sed 's/^/  | /' "$tmp/neg.out"
  else
    ok "negative control: $name is caught: $(grep -m1 -F -- "$word" "$tmp/neg.out" | sed 's/^ *| *//' | cut -c1-150)"
  fi
}

for f in hfl-coordinator.service hfl-client@.service coordinator.json client.json client-0.env; do
  [ -f "$sysd/$f" ] || fail "deploy/systemd/$f is missing"
done
for f in 00-namespace.yaml 10-config.yaml 20-coordinator.yaml 30-clients.yaml; do
  [ -f "$k8s/$f" ] || fail "deploy/k8s/$f is missing"
done
[ -f "$docs" ] || fail "docs/deploy.md is missing"
[ -f "$root/deploy/Dockerfile" ] || fail "deploy/Dockerfile is missing"
[ "$fails" -eq 0 ] || exit 1

# ---- 1. systemd units ---------------------------------------------------------
# stage DIR UNIT...: copies the units into DIR with ExecStart's
# /usr/local/bin/hfl-* replaced by this build's programs (nothing else changes).
stage() {
  local dir=$1; shift
  mkdir -p "$dir"
  for u in "$@"; do
    sed -e "s#^ExecStart=/usr/local/bin/hfl-coordinator #ExecStart=$coord #" \
        -e "s#^ExecStart=/usr/local/bin/hfl-client #ExecStart=$client #" "$u" >"$dir/$(basename "$u")"
  done
}
# verify_units UNIT...: systemd-analyze verify; fails on a non-zero exit or on
# any line about the units (unknown keys and bad values are only warnings).
verify_units() {
  local out=$tmp/verify.out rc
  (cd "$(dirname "$1")" && systemd-analyze verify "$@") >"$out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || grep -q 'hfl-' "$out"; then
    echo "FAIL systemd-analyze verify exit $rc:"; sed 's/^/  | /' "$out"; return 1
  fi
  grep . "$out" | sed 's/^/  (about other units) /'
  return 0
}
# security_units UNIT...: the sandboxing each unit must have, from
# systemd-analyze security --offline's JSON, and an overall exposure <= 2.0.
security_units() {
  local u bad=0
  for u in "$@"; do
    systemd-analyze security --offline=yes --json=short "$u" >"$tmp/sec.json" 2>"$tmp/sec.err" ||
      { echo "FAIL $(basename "$u"): systemd-analyze security: $(head -3 "$tmp/sec.err")"; bad=1; continue; }
    "$py" - "$tmp/sec.json" "$(basename "$u")" <<'PY' || bad=1
import json, sys
rows = {r["json_field"]: r for r in json.load(open(sys.argv[1]))}
unit = sys.argv[2]
need = ["UserOrDynamicUser", "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
        "ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups", "RestrictSUIDSGID",
        "RestrictNamespaces_user", "SystemCallArchitectures", "SystemCallFilter_privileged",
        "SystemCallFilter_mount", "SystemCallFilter_module", "SystemCallFilter_raw_io",
        "RestrictAddressFamilies_AF_PACKET", "RestrictAddressFamilies_OTHER", "AmbientCapabilities"]
need += [k for k in rows if k.startswith("CapabilityBoundingSet_")]  # no capability at all
if unit.startswith("hfl-coordinator"):
    need += ["PrivateDevices", "MemoryDenyWriteExecute"]
missing = [k for k in need if k not in rows or not rows[k]["set"]]
if missing:
    print(f"FAIL {unit}: sandboxing not set: " + ", ".join(
        f"{k} ({rows[k]['name']})" if k in rows else k for k in missing))
    sys.exit(1)
print(f"ok   {unit}: {len(need)} sandboxing settings in place (systemd-analyze security)")
PY
  done
  systemd-analyze security --offline=yes --threshold=20 "$@" >"$tmp/sec.out" 2>&1 ||
    { echo "FAIL overall exposure above 2.0:"; grep -E 'Overall|rror' "$tmp/sec.out" | sed 's/^/  | /'; bad=1; }
  [ $bad -eq 0 ] && grep Overall "$tmp/sec.out" | sed 's/^→ /ok   /'
  return $bad
}
# contract UNIT...: what the units promise besides systemd's own checks.
contract() {
  "$py" - "$sysd" "$@" <<'PY'
import json, os, re, sys
sysd, units = sys.argv[1], sys.argv[2:]
bad = 0
def fail(msg):
    global bad
    print("FAIL " + msg); bad = 1
for path in units:
    name = os.path.basename(path)
    keys = {}
    for line in open(path):
        line = line.strip()
        if line and line[0] not in "#;[" and "=" in line:
            k, v = line.split("=", 1)
            keys.setdefault(k, []).append(v)
    one = lambda k: (keys.get(k) or [""])[-1]
    if one("Restart") != "on-failure": fail(f"{name}: Restart={one('Restart')}, want on-failure")
    if name == "hfl-coordinator.service" and "143" not in one("SuccessExitStatus").split():
        fail(f"{name}: SuccessExitStatus={one('SuccessExitStatus')} lacks 143, a stop by SIGTERM")
    if one("DynamicUser") != "yes" and not one("User"): fail(f"{name}: no DynamicUser=yes or User=")
    ex = one("ExecStart")
    m = re.search(r"--config /etc/hfl/([\w.-]+\.json)", ex)
    if not m or not os.path.isfile(os.path.join(sysd, m.group(1))):
        fail(f"{name}: ExecStart has no --config /etc/hfl/X.json with X.json in deploy/systemd: {ex}"); continue
    conf = json.load(open(os.path.join(sysd, m.group(1))))
    cred = re.search(r"--cert %d/(\S+)", ex)
    loads = [v.split(":", 1) for v in keys.get("LoadCredential", [])]
    if not cred or not any(i == cred.group(1) and p.startswith("/etc/hfl/pki/") for i, p in loads):
        fail(f"{name}: --cert is not a credential loaded from /etc/hfl/pki")
    if not conf.get("ca", "").startswith("/etc/hfl/pki/"): fail(f"{m.group(1)}: ca not under /etc/hfl/pki")
    state = one("StateDirectory")
    sd = conf.get("state-dir") or (re.search(r"--state-dir (\S+)", ex) or [None, ""])[1].replace("%S", "/var/lib")
    if not state or not sd.startswith("/var/lib/" + state):
        fail(f"{name}: state dir {sd or '(none)'} is not in StateDirectory={state}")
    for k in ("report", "save-model", "log"):
        if k in conf and not conf[k].startswith("/var/lib/" + state + "/"):
            fail(f"{m.group(1)}: {k} {conf[k]} is outside StateDirectory={state}, the only writable place")
    if not bad: print(f"ok   {name}: Restart=on-failure, --config /etc/hfl/{m.group(1)}, key as a credential, "
                      f"state in /var/lib/{state}")
sys.exit(bad)
PY
}

units=("$sysd/hfl-coordinator.service" "$sysd/hfl-client@.service")
stage "$tmp/units" "${units[@]}"
if grep -q "^ExecStart=$coord " "$tmp/units/hfl-coordinator.service" &&
   grep -q "^ExecStart=$client " "$tmp/units/hfl-client@.service"; then
  ok "units run /usr/local/bin/hfl-coordinator and /usr/local/bin/hfl-client (verified as this build's)"
else
  fail "units' ExecStart is not /usr/local/bin/hfl-coordinator or /usr/local/bin/hfl-client"
fi
verify_units "$tmp/units/hfl-coordinator.service" "$tmp/units/hfl-client@.service" &&
  ok "systemd-analyze verify: both units, no warnings"
security_units "$tmp/units/hfl-coordinator.service" "$tmp/units/hfl-client@.service" || fails=$((fails + 1))
contract "${units[@]}" || fails=$((fails + 1))

mkdir -p "$tmp/bad"
sed 's/^NoNewPrivileges=yes/NoNewPrivilege=yes/' "${units[0]}" >"$tmp/bad/hfl-coordinator.service"
stage "$tmp/bad/v" "$tmp/bad/hfl-coordinator.service"
negative "verify: NoNewPrivilege= (a typo)" "Unknown key 'NoNewPrivilege'" verify_units "$tmp/bad/v/hfl-coordinator.service"
sed 's/^PrivateTmp=yes/PrivateTmp=maybe/' "${units[1]}" >"$tmp/bad/hfl-client@.service"
stage "$tmp/bad/w" "$tmp/bad/hfl-client@.service"
negative "verify: PrivateTmp=maybe (a bad value)" "maybe" verify_units "$tmp/bad/w/hfl-client@.service"
if [ ! -e /usr/local/bin/hfl-coordinator ]; then  # the unit as shipped, on a machine without it installed
  negative "verify: ExecStart binary missing (/usr/local/bin/hfl-coordinator)" "is not executable" verify_units "${units[0]}"
fi
mkdir -p "$tmp/bad/x"
grep -v '^CapabilityBoundingSet=' "${units[0]}" >"$tmp/bad/x/hfl-coordinator.service"
stage "$tmp/bad/y" "$tmp/bad/x/hfl-coordinator.service"
negative "security: CapabilityBoundingSet= removed" "CapabilityBoundingSet=~CAP_" security_units "$tmp/bad/y/hfl-coordinator.service"
sed 's/^Restart=on-failure/Restart=no/' "${units[1]}" >"$tmp/bad/hfl-client@.service"
negative "contract: Restart=no" "Restart=no" contract "$tmp/bad/hfl-client@.service"

# ---- 2. Kubernetes manifests --------------------------------------------------
# validate FILE...: kubernetes-validate --strict against the oldest and the
# newest Kubernetes the package knows; any line but INFO ... passed fails.
validate() {
  local versions v out=$tmp/kv.out bad=0
  versions=$("$py" -c 'import kubernetes_validate.utils as u; v = u.all_versions(); print(v[0], v[-1])')
  for v in $versions; do
    "$py" -m kubernetes_validate --strict -k "$v" "$@" >"$out" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || grep -qv '^INFO .* passed' "$out"; then
      echo "FAIL kubernetes-validate --strict -k $v exit $rc:"; grep -v '^INFO .* passed' "$out" | sed 's/^/  | /'
      bad=1
    fi
  done
  [ $bad -eq 0 ] && echo "ok   kubernetes-validate --strict: $(grep -c passed "$out") resources pass against $versions"
  return $bad
}
manifests=("$k8s"/*.yaml)
validate "${manifests[@]}" || fails=$((fails + 1))
sed 's/^  completionMode: Indexed/  completionMode: Indexed\n  paralellism: 4/' "$k8s/30-clients.yaml" >"$tmp/bad/clients.yaml"
negative "kubernetes-validate: an unknown Job field (paralellism)" "'paralellism' was unexpected" validate "$tmp/bad/clients.yaml"
sed 's/^      replicas: 1/      replicas: one/; s/^  replicas: 1/  replicas: one/' "$k8s/20-coordinator.yaml" >"$tmp/bad/coord.yaml"
negative "kubernetes-validate: replicas: one" "'one' is not of type" validate "$tmp/bad/coord.yaml"

# coherent DIR: the manifests agree with each other and with the ConfigMap's
# configs, which it writes to $tmp/k8s/coordinator.json and client.json.
coherent() {
  "$py" - "$tmp/k8s" "$@" <<'PY'
import json, os, sys, yaml
out, files = sys.argv[1], sys.argv[2:]
docs = [d for f in files for d in yaml.safe_load_all(open(f)) if d]
bad = 0
def check(cond, msg):
    global bad
    if not cond: print("FAIL " + msg); bad = 1
def one(kind):
    found = [d for d in docs if d["kind"] == kind]
    check(len(found) == 1, f"want one {kind}, found {len(found)}")
    return found[0] if found else {}
ns, cm, svc, sts, job = (one(k) for k in ("Namespace", "ConfigMap", "Service", "StatefulSet", "Job"))
if bad: sys.exit(1)
name = ns["metadata"]["name"]
for d in docs:
    if d is not ns: check(d["metadata"].get("namespace") == name, f"{d['kind']} not in namespace {name}")
os.makedirs(out, exist_ok=True)
conf = {}
for key in ("coordinator.json", "client.json"):
    check(key in cm["data"], f"ConfigMap has no {key}")
    conf[key] = json.loads(cm["data"].get(key, "{}"))
    open(os.path.join(out, key), "w").write(cm["data"].get(key, "{}"))
co, cl = conf["coordinator.json"], conf["client.json"]

def pod_checks(spec, what):
    for c in spec["containers"]:
        check(c["image"] == "registry.example.com/hfl:latest", f"{what}/{c['name']}: image {c['image']}")
        r = c.get("resources", {})
        check("requests" in r and "limits" in r, f"{what}/{c['name']}: no resource requests and limits")
        sc = c.get("securityContext", {})
        check(sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"],
              f"{what}/{c['name']}: privilege escalation or capabilities left")
    check(spec.get("securityContext", {}).get("runAsNonRoot") is True, f"{what}: not runAsNonRoot")
def mounts(spec, container):
    vols = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: (m, vols.get(m["name"])) for m in container["volumeMounts"]}
def under_mount(ms, path, kind, what):
    hit = [(mp, v) for mp, (m, v) in ms.items() if path.startswith(mp.rstrip("/") + "/")]
    check(hit and (kind is None or (hit[0][1] or {}).get(kind) is not None),
          f"{what}: {path} is not on a {kind or 'mounted'} volume")
    return hit[0] if hit else (None, None)

# Coordinator: Service -> StatefulSet port 7450, probes, config, PKI, state volume.
port = int(co["listen"].rsplit(":", 1)[1])
tpl = sts["spec"]["template"]
c = tpl["spec"]["containers"][0]
pod_checks(tpl["spec"], "StatefulSet")
check(sts["spec"]["replicas"] == 1, "StatefulSet replicas != 1")
check(all(tpl["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items()),
      "Service selector does not match the coordinator pods")
cports = {p.get("name"): p["containerPort"] for p in c["ports"]}
sp = svc["spec"]["ports"][0]
check(sp["port"] == port and cports.get(sp["targetPort"], sp["targetPort"]) == port,
      f"Service port {sp['port']} -> {sp['targetPort']}, listen port {port}")
live = c.get("livenessProbe", {}).get("tcpSocket", {}).get("port")
check(cports.get(live, live) == port, f"livenessProbe is not a TCP probe on {port}")
ms = mounts(tpl["spec"], c)
cmd = c["command"]
check("--config" in cmd, "coordinator command has no --config")
cfg = cmd[cmd.index("--config") + 1] if "--config" in cmd else ""
mp, vol = under_mount(ms, cfg, "configMap", "coordinator --config")
check(vol and os.path.basename(cfg) in [i["path"] for i in vol["configMap"].get("items", [{"path": os.path.basename(cfg)}])]
      and vol["configMap"]["name"] == cm["metadata"]["name"], f"coordinator --config {cfg} is not the ConfigMap's")
for k in ("ca", "cert"):
    mp, vol = under_mount(ms, co[k], "secret", f"coordinator {k}")
    check(mp and ms[mp][0].get("readOnly") is True, f"coordinator {k}: Secret not mounted read-only")
claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])}
for k in ("state-dir", "report", "save-model", "log"):
    hit = [mp for mp, (m, v) in ms.items() if co[k].startswith(mp.rstrip("/") + "/") and m["name"] in claims]
    check(hit, f"coordinator {k} {co[k]} is not on the volume claim")

# Clients: Indexed Job, N = num-clients, one GPU each, the coordinator's Service.
js, jt = job["spec"], job["spec"]["template"]
pod_checks(jt["spec"], "Job")
n = cl.get("num-clients", 1)
check(js.get("completionMode") == "Indexed", "Job is not Indexed")
check(js["completions"] == js["parallelism"] == n, f"Job completions {js['completions']}, parallelism "
      f"{js['parallelism']}, client.json num-clients {n}: want all equal")
for k in ("clients-per-round", "min-clients"):
    check(co.get(k, 2) <= n, f"coordinator {k} {co.get(k)} > {n} clients")
cc = jt["spec"]["containers"][0]
check(str(cc["resources"]["limits"].get("nvidia.com/gpu")) == "1", "client does not ask for nvidia.com/gpu: 1")
host, cport = cl["coordinator"].split("://", 1)[1].rsplit(":", 1)
check(host.split(".")[0] == svc["metadata"]["name"] and int(cport) == sp["port"],
      f"client coordinator {cl['coordinator']} is not the Service {svc['metadata']['name']}:{sp['port']}")
check(cl.get("server-name") == svc["metadata"]["name"],
      f"client server-name {cl.get('server-name')} != {svc['metadata']['name']} (hfl-pki --cn in docs/deploy.md)")
ccmd = cc["command"]
idx = [e["name"] for e in cc.get("env", []) if "job-completion-index" in
       e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")]
check(idx and f"$({idx[0]})" in ccmd and any(f"client-$({idx[0]}).pem" in a for a in ccmd),
      "client index (job-completion-index) does not pick --client-index and the certificate")
cms = mounts(jt["spec"], cc)
ccfg = ccmd[ccmd.index("--config") + 1]
under_mount(cms, ccfg, "configMap", "client --config")
cert = [a for a in ccmd if a.endswith(".pem")]
for p in [cl["ca"]] + cert:
    mp, vol = under_mount(cms, p, "secret", f"client {p}")
    check(mp and cms[mp][0].get("readOnly") is True, f"client {p}: Secret not mounted read-only")
if "state-dir" in cl: under_mount(cms, cl["state-dir"] + "/x", None, "client state-dir")
if not bad:
    print(f"ok   manifests agree: Service {svc['metadata']['name']}:{port} and probes, configs and Secrets "
          f"under their mounts, state on the claim, {n} indexed clients with a GPU each")
sys.exit(bad)
PY
}
coherent "${manifests[@]}" || fails=$((fails + 1))
cp "${manifests[@]}" "$tmp/bad/" && sed -i 's/^  completions: 4/  completions: 3/' "$tmp/bad/30-clients.yaml"
negative "coherence: completions 3 with num-clients 4" "completions 3" coherent "$tmp/bad/"[0-9]*.yaml

# The simulated fleet across a cluster (deploy/k8s/sim, hfl-sim --role):
# valid, in one namespace, the Service on the coordinator's --listen port,
# the Job's completions the scenario's clients, pod i client i, and every
# path a command names under a mount of the right kind.
sim_manifests=("$k8s"/sim/*.yaml)
validate "${sim_manifests[@]}" || fails=$((fails + 1))
sim_coherent() {
  "$py" - "$@" <<'PY'
import json, sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
bad = 0
def check(cond, msg):
    global bad
    if not cond: print("FAIL sim: " + msg); bad = 1
kinds = {d["kind"]: d for d in docs}
for k in ("Namespace", "ConfigMap", "Service", "StatefulSet", "Job"):
    check(k in kinds, f"no {k}")
if bad: sys.exit(1)
ns, cm, svc, sts, job = (kinds[k] for k in ("Namespace", "ConfigMap", "Service", "StatefulSet", "Job"))
for d in docs:
    if d is not ns: check(d["metadata"].get("namespace") == ns["metadata"]["name"], f"{d['kind']} in another namespace")
sc = json.loads(cm["data"]["scenario.json"])
def arg(cmd, opt): return cmd[cmd.index(opt) + 1] if opt in cmd else None
def mounted(spec, c, path, kind):
    vols = {v["name"]: v for v in spec["volumes"]}
    hit = [m for m in c["volumeMounts"] if (path + "/").startswith(m["mountPath"].rstrip("/") + "/")]
    return bool(hit) and (kind is None or kind in vols.get(hit[0]["name"], {}))
cspec = sts["spec"]["template"]["spec"]
cc = cspec["containers"][0]
ccmd = cc["command"]
check(ccmd[:1] == ["hfl-sim"] and arg(ccmd, "--role") == "coordinator", "the StatefulSet does not run hfl-sim --role coordinator")
port = int(arg(ccmd, "--listen").rsplit(":", 1)[1])
check(svc["spec"]["ports"][0]["port"] == port, f"Service port {svc['spec']['ports'][0]['port']}, --listen port {port}")
check(all(sts["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items()),
      "the Service selects no coordinator pod")
jspec = job["spec"]["template"]["spec"]
jc = jspec["containers"][0]
jcmd = jc["command"]
check(jcmd[:1] == ["hfl-sim"] and arg(jcmd, "--role") == "client", "the Job does not run hfl-sim --role client")
check(job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == sc["clients"],
      f"completions {job['spec']['completions']} with the scenario's {sc['clients']} clients")
idx = [e["name"] for e in jc.get("env", []) if "job-completion-index" in e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")]
check(idx and arg(jcmd, "--index") == f"$({idx[0]})", "--index is not the pod's completion index")
host = arg(jcmd, "--coordinator").split("//")[1].rsplit(":", 1)
check(host == [svc["metadata"]["name"], str(port)], f"clients dial {host}, the Service is {svc['metadata']['name']}:{port}")
for spec, c, cmd, who in ((cspec, cc, ccmd, "coordinator"), (jspec, jc, jcmd, "client")):
    check(cmd[1].endswith("scenario.json") and mounted(spec, c, cmd[1], "configMap"), f"{who}: the scenario is not the ConfigMap's")
    check(mounted(spec, c, arg(cmd, "--pki") + "/ca.crt", "secret"), f"{who}: --pki is not a Secret")
    check(mounted(spec, c, arg(cmd, "--out") + "/x", None), f"{who}: --out is not on a volume")
if not bad:
    print(f"ok   sim manifests agree: hfl-sim roles, Service {svc['metadata']['name']}:{port}, {sc['clients']} indexed clients of the scenario")
sys.exit(bad)
PY
}
sim_coherent "${sim_manifests[@]}" || fails=$((fails + 1))
sed 's/^  completions: 4/  completions: 5/' "$k8s/sim/sim-fleet.yaml" >"$tmp/bad/sim-fleet.yaml"
negative "sim coherence: completions 5 with 4 clients" "completions 5" sim_coherent "$tmp/bad/sim-fleet.yaml"

# ---- 3. config files ----------------------------------------------------------
# config_ok FILE: its program (by name: coordinator*.json, client*.json)
# accepts it with --print-config, and shows every key it sets with its value.
config_ok() {
  local f=$1 prog rc
  case $(basename "$f") in
    coordinator*.json) prog=$coord ;;
    client*.json) prog=$client ;;
    *) echo "FAIL $f: no program for this config file (coordinator*.json or client*.json)"; return 1 ;;
  esac
  timeout 30 "$prog" --config "$f" --print-config >"$tmp/pc.out" 2>"$tmp/pc.err"
  rc=$?
  if [ $rc -ne 0 ] || [ -s "$tmp/pc.err" ]; then
    echo "FAIL $f: $(basename "$prog") --config --print-config exit $rc: $(head -c 300 "$tmp/pc.err")"; return 1
  fi
  "$py" - "$f" "$tmp/pc.out" "$(basename "$prog")" <<'PY'
import json, sys
want, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
diff = [k for k in want if k not in got or got[k] != want[k]]
if diff:
    print(f"FAIL {sys.argv[1]}: {sys.argv[3]} shows " + ", ".join(f"{k}={got.get(k, '<missing>')!r} (file {want[k]!r})" for k in diff))
    sys.exit(1)
print(f"ok   {sys.argv[1].split('/deploy/')[-1]}: {sys.argv[3]} --print-config takes all {len(want)} keys")
PY
}
configs=()
while IFS= read -r f; do configs+=("$f"); done < <(find "$root/deploy" -name '*.json' | sort)
[ ${#configs[@]} -ge 2 ] || fail "fewer than 2 JSON configs in deploy/"
for f in "${configs[@]}" "$tmp/k8s/coordinator.json" "$tmp/k8s/client.json"; do
  config_ok "$f" || fails=$((fails + 1))
done
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["colour"] = "blue"; json.dump(d, open(sys.argv[2], "w"))' \
  "$sysd/client.json" "$tmp/bad/client.json"
negative "config: an unknown key (colour) in client.json" "'colour' is not an option" config_ok "$tmp/bad/client.json"
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["rounds"] = "fifty"; json.dump(d, open(sys.argv[2], "w"))' \
  "$sysd/coordinator.json" "$tmp/bad/coordinator.json"
negative "config: rounds \"fifty\" in coordinator.json" "'fifty' is not an integer" config_ok "$tmp/bad/coordinator.json"

# ---- 4. the systemd example configs, run on loopback --------------------------
run=$tmp/run
data=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("data", "/usr/share/datasets/fashion-mnist"))' \
  "$sysd/coordinator.json")
if [ ! -r "$data/t10k-images-idx3-ubyte.gz" ]; then
  echo "skip the run from the example configs: no Fashion-MNIST in $data"
else
  mkdir -p "$run"
  # /etc/hfl -> $run/etc/hfl, /var/lib/hfl* -> $run/var/lib/hfl*, listen on loopback.
  "$py" - "$sysd" "$run" <<'PY'
import json, os, sys
sysd, run = sys.argv[1:3]
def move(v):
    if isinstance(v, str):
        for pre in ("/etc/hfl", "/var/lib/hfl"):
            if v.startswith(pre): return run + v
    return v
for name in ("coordinator.json", "client.json"):
    d = {k: move(v) for k, v in json.load(open(os.path.join(sysd, name))).items()}
    if "listen" in d: d["listen"] = "tls+tcp://127.0.0.1:0"
    json.dump(d, open(os.path.join(run, name), "w"), indent=1)
PY
  cn=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["server-name"])' "$sysd/client.json")
  mkdir -p "$run/etc/hfl"
  "$pki" --out "$run/etc/hfl/pki" --clients 2 --cn "$cn" >/dev/null || fail "hfl-pki --out --clients 2 --cn $cn"
  cargs=(--config "$run/coordinator.json" --cert "$run/etc/hfl/pki/coordinator.pem" --rounds 2
         --clients-per-round 2 --min-clients 2 --deadline 60 --linger 1 --ready-file "$run/ready")
  timeout 150 "$coord" "${cargs[@]}" >"$run/coord.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  for _ in $(seq 300); do [ -s "$run/ready" ] && break; sleep 0.1; done
  url=$(cat "$run/ready" 2>/dev/null)
  [ -n "$url" ] || fail "coordinator from coordinator.json never served: $(tail -3 "$run/coord.log")"
  # client-0 takes its own options from client-0.env as the unit does ($HFL_CLIENT_ARGS, split at spaces).
  extra0=$(sed -n 's/^HFL_CLIENT_ARGS=//p' "$sysd/client-0.env")
  [[ $extra0 == *--client-index\ 0* ]] || fail "client-0.env does not give --client-index 0: $extra0"
  cl_pids=()
  for i in 0 1; do
    if [ $i = 0 ]; then extra=$extra0; else extra="--client-index 1"; fi
    # shellcheck disable=SC2086
    timeout 150 "$client" --config "$run/client.json" --cert "$run/etc/hfl/pki/client-$i.pem" \
      --state-dir "$run/var/lib/hfl-client/client-$i" --coordinator "$url" $extra >"$run/client-$i.log" 2>&1 &
    cl_pids+=($!); pids+=($!)
  done
  before=$fails
  for i in 0 1; do
    wait "${cl_pids[$i]}" || fail "client-$i from client.json exit $?: $(tail -3 "$run/client-$i.log")"
  done
  [ "$fails" -eq "$before" ] || kill "$cpid" 2>/dev/null  # no run without its clients: do not wait for the deadline
  wait $cpid || fail "coordinator from coordinator.json exit $?: $(tail -3 "$run/coord.log")"
fi
if [ -s "$run/var/lib/hfl/report.json" ] && [ "$fails" -eq "${before:-0}" ]; then
  "$py" - "$run" "$sysd/coordinator.json" "$cn" <<'PY' || fails=$((fails + 1))
import json, os, struct, sys
run, conf, cn = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
at = lambda k: run + conf[k]
bad = 0
def check(cond, msg):
    global bad
    if not cond: print("FAIL " + msg); bad = 1
r = json.load(open(at("report")))
check(r.get("complete") is True and r.get("rounds_aggregated") == 2, f"report: complete {r.get('complete')}, "
      f"{r.get('rounds_aggregated')} rounds aggregated, want 2")
check(sorted(c["name"] for c in r.get("clients", [])) == ["client-0", "client-1"], "report: clients are not client-0, client-1")
check(os.path.isfile(os.path.join(at("state-dir"), "coordinator.state")), "no coordinator.state in state-dir")
check(os.path.getsize(at("log")) > 0, "empty event log")
raw = open(at("save-model"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
names = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
check("layers.0.weight" in names, f"save-model is not hfl's safetensors: tensors {names}")
if not bad:
    print(f"ok   the example configs run (coordinator CN {cn}, 2 clients over TLS): 2 rounds, test accuracy "
          f"{r['final_test_acc']:.4f}; state, report, log and model {len(names)} tensors in /var/lib/hfl")
open(os.path.join(run, "sha"), "w").write(r["final_model_sha256"])
PY
  # Started again on its state (Restart=, a rescheduled pod): done, exit 0, same model.
  timeout 60 "$coord" "${cargs[@]}" >"$run/again.log" 2>&1
  rc=$?
  sha=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["final_model_sha256"])' \
        "$run/var/lib/hfl/report.json" 2>/dev/null)
  if [ $rc -eq 0 ] && grep -q 'continuing the run' "$run/again.log" && [ "$sha" = "$(cat "$run/sha" 2>/dev/null)" ]; then
    ok "started again on its state: $(grep -m1 'continuing the run' "$run/again.log" | sed "s#$run##"), exit 0, same model"
  else
    fail "coordinator started again on its state: exit $rc, model $sha:"; sed 's/^/  | /' "$run/again.log"
  fi
  # systemctl stop: SIGTERM mid-run exits 143, which the unit counts as clean.
  timeout 60 "$coord" "${cargs[@]}" --state-dir "$run/stopped" --rounds 50 --ready-file "$run/ready2" \
    >"$run/stop.log" 2>&1 &
  spid=$!
  for _ in $(seq 300); do [ -s "$run/ready2" ] && break; sleep 0.1; done
  kill -TERM $spid
  wait $spid
  rc=$?
  if [ $rc -eq 143 ] && grep -q "stopped by SIGTERM after 0 of 50 rounds; started again, it continues from" "$run/stop.log"; then
    ok "SIGTERM: exit 143 (the unit's SuccessExitStatus): $(grep -m1 'stopped by' "$run/stop.log" | sed "s#$run##")"
  else
    fail "SIGTERM: exit $rc, want 143:"; sed 's/^/  | /' "$run/stop.log"
  fi
  # docs/deploy.md's PyTorch snippet on the saved model.
  if "$py" -c 'import torch, safetensors' 2>/dev/null; then
    "$py" - "$docs" "$run/snippet.py" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"python3 - <<'EOF'\n(.*?)\nEOF\n", text, re.S)
open(sys.argv[2], "w").write(m.group(1) if m else "raise SystemExit('no PyTorch snippet in docs/deploy.md')\n")
PY
    cp "$run/var/lib/hfl/model.safetensors" "$run/model.safetensors"
    if (cd "$run" && "$py" snippet.py) >"$run/snippet.log" 2>&1; then
      ok "docs/deploy.md's PyTorch snippet loads the saved model"
    else
      fail "docs/deploy.md's PyTorch snippet:"; sed 's/^/  | /' "$run/snippet.log"
    fi
  else
    echo "skip docs/deploy.md's PyTorch snippet: $py has no torch and safetensors"
  fi
fi

# ---- 5. docs/deploy.md --------------------------------------------------------
# docs_ok DOC: the hfl commands in its sh blocks use options that exist, and
# the deploy/ paths it names exist.
docs_ok() {
  "$coord" --help >"$tmp/help.hfl-coordinator"
  "$client" --help >"$tmp/help.hfl-client"
  "$pki" --help >"$tmp/help.hfl-pki"
  "$py" - "$1" "$tmp" "$root" <<'PY'
import os, re, shlex, sys
doc, tmp, root = sys.argv[1:4]
text = open(doc).read()
helps = {p: open(os.path.join(tmp, "help." + p)).read() for p in ("hfl-coordinator", "hfl-client", "hfl-pki")}
opts = {p: set(re.findall(r"(--[a-z0-9-]+)", h)) for p, h in helps.items()}
bad, seen = 0, 0
for block in re.findall(r"```sh\n(.*?)```", text, re.S):
    block = re.sub(r"<<'EOF'\n.*?\nEOF\n", "\n", block, flags=re.S).replace("\\\n", " ")
    for line in block.splitlines():
        line = line.split(" # ")[0]
        for seg in re.split(r"&&|\|\||[|;']", line):
            try: words = shlex.split(seg)
            except ValueError: words = seg.split()
            for i, w in enumerate(words):
                prog = os.path.basename(w)
                # a command: the segment's first word, or what ssh runs (ssh root@HOST CMD)
                if prog not in helps or not (i == 0 or (i == 2 and words[0] == "ssh")): continue
                seen += 1
                args = words[i + 1:]
                if prog == "hfl-pki" and args and not args[0].startswith("-"):
                    if not re.search(rf"hfl-pki {re.escape(args[0])} ", helps[prog]):
                        print(f"FAIL docs/deploy.md: hfl-pki has no subcommand {args[0]}: {line.strip()}"); bad = 1
                for a in args:
                    if a.startswith("--") and a.split("=")[0] not in opts[prog]:
                        print(f"FAIL docs/deploy.md: {prog} has no option {a}: {line.strip()}"); bad = 1
for p in sorted(set(re.findall(r"\bdeploy/[\w./@-]*\w", text))):
    if not os.path.exists(os.path.join(root, p)):
        print(f"FAIL docs/deploy.md names {p}, which does not exist"); bad = 1
if seen < 5:
    print(f"FAIL docs/deploy.md: only {seen} hfl commands found"); bad = 1
if not bad:
    print(f"ok   docs/deploy.md: {seen} hfl commands use real options and subcommands; its deploy/ paths exist")
sys.exit(bad)
PY
}
docs_ok "$docs" || fails=$((fails + 1))
sed 's/hfl-pki --out pki --clients 4/hfl-pki --out pki --client 4/' "$docs" >"$tmp/bad/deploy.md"
negative "docs: hfl-pki --client (no such option)" "hfl-pki has no option --client" docs_ok "$tmp/bad/deploy.md"

echo "deploy.sh: $fails failure(s)"
[ "$fails" -eq 0 ]
