#!/usr/bin/env bash
# options_help.sh: each program's --help, its options table and the docs agree
# (util/options.h). Read from the programs themselves, not from the table code:
#  - round trip: every value --print-config shows, given back on the command
#    line (--name=value, all at once), is read and shown the same, and every
#    flag --help lists shows true when given, so each option --help names is
#    one the parser takes and --print-config prints in a form it reads back;
#  - defaults: where an option's --help text says "default V" with a literal
#    V, --print-config (no options) shows V: the table's default is the one
#    the help promises;
#  - docs: docs/options.md holds each program's --help, exactly. To rewrite
#    it after changing a table: OPTIONS_DOC_WRITE=1 options_help.sh DOC PROGRAMS...
# usage: options_help.sh DOCS/options.md HFL_COORDINATOR HFL_CLIENT HFL_SIM HFL_PKI HFL_DATA
set -u
exec python3 - "$@" <<'EOF'
import json, os, re, subprocess, sys

doc_path, programs = sys.argv[1], sys.argv[2:]
fails = 0

def fail(msg):
    global fails
    fails += 1
    print("FAIL " + msg)

def run(prog, *args):
    p = subprocess.run([prog, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr

def help_options(text):
    """{name: (arg or None, help text joined)} from --help's '  --name ARG  text' lines."""
    opts, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"  --([a-z0-9-]+)(?: ([^ a-z][^ ]*|[a-z]+\|[^ ]*))?(?: +(.*))?$", line)
        if m:
            cur = m.group(1)
            opts[cur] = [m.group(2), m.group(3) or ""]
        elif cur and line.startswith("    "):
            opts[cur][1] += " " + line.strip()
        else:
            cur = None
    return opts

def as_arg(v):
    """A --print-config value as a command-line value (numbers as a config file gives them)."""
    if isinstance(v, float) and v == int(v) and abs(v) < 1e18:
        return str(int(v))
    return str(v) if not isinstance(v, float) else repr(v)

def literal(v):
    """The value a "default V" phrase names, or None for a placeholder (K, DIR/..., <name>)."""
    v = v.rstrip(",:.")
    m = re.fullmatch(r"([0-9.]+)([KMGT])", v)  # a size
    if m:
        return float(m.group(1)) * 1024 ** ("KMGT".index(m.group(2)) + 1)
    if not v or "<" in v or re.search(r"[A-Z]", v) or v == "and":
        return None
    try:
        return float(v)
    except ValueError:
        return v

sections = []
for prog in programs:
    name = os.path.basename(prog)
    rc, text, err = run(prog, "--help")
    if rc != 0 or err:
        fail(f"{name} --help: exit {rc}: {err[:200]}")
        continue
    sections.append(f"## {name}\n\n```\n{text}```\n")
    opts = help_options(text)
    rc, out, err = run(prog, "--print-config")
    if rc != 0:
        fail(f"{name} --print-config: exit {rc}: {err[:200]}")
        continue
    shown = json.loads(out)

    # round trip: every shown value back through the parser
    args = [f"--{k}={as_arg(v)}" for k, v in shown.items() if v is not None and not isinstance(v, bool)]
    rc, out, err = run(prog, *args, "--print-config")
    if rc != 0:
        fail(f"{name}: its own --print-config values were refused: {err.strip()}")
    elif json.loads(out) != shown:
        again = json.loads(out)
        fail(f"{name}: values given back show differently: " +
             str({k: (shown.get(k), again.get(k)) for k in set(shown) | set(again) if shown.get(k) != again.get(k)}))
    else:
        print(f"ok   {name}: {len(args)} values read back as shown")
    flags = [k for k, (arg, _) in opts.items() if arg is None and k not in ("help", "print-config")]
    for k in flags:
        rc, out, err = run(prog, f"--{k}", "--print-config")
        if rc != 0 or json.loads(out).get(k) is not True:
            fail(f"{name} --{k}: a flag --help lists, shown as {json.loads(out).get(k) if rc == 0 else err.strip()}")
    print(f"ok   {name}: {len(flags)} flags shown true when given")

    # defaults: the help's "default V" against what --print-config shows
    checked = 0
    for k, (arg, help_text) in opts.items():
        m = re.search(r"default(?: ([^\s);]+))?", help_text)  # its first "default", which may name no value
        want = literal(m.group(1)) if m and m.group(1) else None
        if want is None or k not in shown or shown[k] is None or isinstance(shown[k], bool):
            continue
        got = shown[k]
        same = (float(got) == want) if isinstance(want, float) and isinstance(got, (int, float)) else got == want
        if not same:
            fail(f"{name} --{k}: --help says default {m.group(1)}, --print-config shows {json.dumps(got)}")
        checked += 1
    print(f"ok   {name}: {checked} defaults of --help checked against --print-config")

doc = ("# Options\n\nEach program's options, as its `--help` prints them from its options table\n"
       "(util/options.h). `--config FILE` takes the same long names as keys, and\n"
       "`--print-config` prints them with the values in effect.\n"
       "tests/integration/options_help.sh checks this file against the programs;\n"
       "`OPTIONS_DOC_WRITE=1 tests/integration/options_help.sh docs/options.md build/...` rewrites it.\n\n"
       + "\n".join(sections))
if os.environ.get("OPTIONS_DOC_WRITE"):
    open(doc_path, "w").write(doc)
    print(f"wrote {doc_path}")
elif open(doc_path).read() != doc:
    import difflib
    fail(f"{doc_path} is not the programs' --help (rewrite it with OPTIONS_DOC_WRITE=1):")
    sys.stdout.writelines(list(difflib.unified_diff(open(doc_path).read().splitlines(True), doc.splitlines(True),
                                                    doc_path, "--help"))[:40])
else:
    print(f"ok   {doc_path} is every program's --help")
print(f"{fails} failed")
sys.exit(1 if fails else 0)
EOF
