#!/usr/bin/env python3
"""cuda_resources.py: the CUDA kernels stay simple to reason about.

Compiles each .cu of the CUDA module for sm_90 with the build's own nvcc
command (from the build's compile_commands.json, the architectures replaced
by sm_90 alone), keeping the PTX, and fails when any kernel

  - has a stack frame or spills (ptxas -v's "Function properties for" line:
    a local array indexed at run time, or register pressure, puts data in
    local memory, which the kernels' cost model and the review assume away);
  - holds an fma (or a floating-point mad) in its PTX, unless it is in
    FMA_ALLOWED below with its reason. Every kernel runs a body it shares
    with the CPU backend (kernels/*_hd.h), built with -fmad=false so that the
    two agree bit for bit; an fma rounds once where the CPU rounds twice.

Both are read per kernel: ptxas's lines per entry function, and the PTX's
.entry blocks (plus any non-inlined .func they call). An entry with no ptxas
line, or an FMA_ALLOWED kernel that is gone or holds no fma, also fails, so
that neither the parse nor the list can go quietly stale.

usage: cuda_resources.py NVCC COMPILE_COMMANDS.json MODULE_SOURCE...
       (no arguments: a build without CUDA, which skips with exit 77)
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ARCH = "90"

# Kernels whose PTX may hold fma: the device's expf and logf (libdevice) are
# written with fma (range reduction, polynomial), so these kernels match the
# CPU within a few ulps, not bit for bit, and their GPU tests say so.
FMA_ALLOWED = {
    "k_causal_softmax": "expf of the softmax row (kernels/lm_hd.h)",
    "k_gelu_fwd": "expf in the GELU's sigmoid form (kernels/lm_hd.h)",
    "k_gelu_bwd": "expf in the GELU's sigmoid form (kernels/lm_hd.h)",
    "k_gelu_fwd_pairs": "expf in the GELU's sigmoid form, two elements a thread (kernels/lm_hd.h)",
    "k_gelu_bwd_pairs": "expf in the GELU's sigmoid form, two elements a thread (kernels/lm_hd.h)",
    "k_softmax_xent": "expf and logf of the loss row (kernels/ops_hd.h)",
}

# fma.* in any type, and mad with a floating-point type (mad.lo.s32 and
# mad.wide are integer index arithmetic, exact).
FMA_RE = re.compile(r"^\s*(?:@!?%p\d+\s+)?(fma\.[\w.]+|mad(?:\.\w+)*\.(?:f16|bf16|f32|f64)\w*)\b", re.M)
BLOCK_RE = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\(", re.M)
CALL_RE = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([\w$]+)")
PROPS_RE = re.compile(r"Function properties for ([\w$]+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      r"(\d+) bytes spill loads")
REGS_RE = re.compile(r"Compiling entry function '([\w$]+)'.*?Used (\d+) registers", re.S)


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return {m: d.split("(")[0] for m, d in zip(names, out.split("\n"))}


def ptx_blocks(ptx):
    """{name: (kind, body)} for every .entry and defined .func."""
    blocks = {}
    for m in BLOCK_RE.finditer(ptx):
        brace = ptx.find("{", m.end())
        semi = ptx.find(";", m.end())
        if brace < 0 or 0 <= semi < brace:
            continue  # a declaration (the parameter list ends with ";", not a body)
        end = ptx.find("\n}", brace)
        blocks[m.group(2)] = (m.group(1), ptx[brace:end])
    return blocks


def fma_count(name, blocks, seen=None):
    """fma instructions in NAME's block and every defined .func it calls."""
    seen = seen if seen is not None else set()
    if name in seen or name not in blocks:
        return 0
    seen.add(name)
    body = blocks[name][1]
    return len(FMA_RE.findall(body)) + sum(fma_count(c, blocks, seen) for c in CALL_RE.findall(body))


def sm90_command(entry, out_dir, stem):
    """The build's nvcc command for this file, for sm_90 only, cubin, PTX kept."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    kept, skip = [], 0
    for a in args[1:]:
        if skip:
            skip -= 1
        elif a in ("-gencode", "-o", "-MQ", "-MF", "-MT"):
            skip = 1
        elif a in ("-c", "-MD", "-MMD") or a.startswith(("-gencode=", "--generate-code", "-arch", "--gpu-architecture")):
            pass
        else:
            kept.append(a)
    return kept + ["-gencode", f"arch=compute_{ARCH},code=sm_{ARCH}", "-cubin", "-Xptxas", "-v",
                   "--keep", "--keep-dir", out_dir, "-o", os.path.join(out_dir, stem + ".cubin")]


def check_file(nvcc, entry, tmp):
    """Compiles one file; returns [(kernel, stack, spill_st, spill_ld, regs, fma)]."""
    src = os.path.basename(entry["file"])
    stem = os.path.splitext(src)[0]
    out_dir = os.path.join(tmp, stem)
    os.makedirs(out_dir)
    r = subprocess.run([nvcc] + sm90_command(entry, out_dir, stem), cwd=entry["directory"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL {src}: nvcc exited {r.returncode}:\n{r.stdout}{r.stderr}")
    log = r.stdout + r.stderr
    with open(os.path.join(out_dir, stem + ".ptx")) as f:
        blocks = ptx_blocks(f.read())
    props = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in PROPS_RE.finditer(log)}
    regs = {m.group(1): int(m.group(2)) for m in REGS_RE.finditer(log)}
    entries = [n for n, (kind, _) in blocks.items() if kind == "entry"]
    if not entries:
        sys.exit(f"FAIL {src}: no .entry in its PTX (the parse, or the file, changed)")
    rows = []
    for name in entries:
        if name not in props:
            sys.exit(f"FAIL {src}: ptxas -v printed no 'Function properties for {name}':\n{log}")
        rows.append((name, *props[name], regs.get(name, -1), fma_count(name, blocks)))
    # A non-inlined device function has its own frame: check it as well.
    for name, (kind, _) in blocks.items():
        if kind == "func" and name in props and any(props[name]):
            rows.append((name, *props[name], regs.get(name, -1), 0))
    return src, rows


def main():
    if len(sys.argv) < 4:
        print("SKIP: this build compiles no CUDA (nvcc not found, or -Dcuda=disabled), so there are no kernels to check")
        return 77
    nvcc, commands, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(commands) as f:
        entries = {os.path.basename(e["file"]): e for e in json.load(f)
                   if e["file"].endswith(".cu") and os.path.basename(os.path.dirname(e["file"])) == "cuda"}
    cu = [s for s in sources if s.endswith(".cu")]
    missing = [s for s in cu if s not in entries]
    if not cu or missing:
        sys.exit(f"FAIL no compile command for {missing or 'any .cu'} in {commands}")
    print(f"sm_{ARCH}, {len(cu)} files, with the build's nvcc flags ({commands}); fma allowed only in "
          f"{len(FMA_ALLOWED)} kernels (libdevice expf/logf)")
    fails, n, with_fma = 0, 0, {}
    with tempfile.TemporaryDirectory(prefix="hfl-ptxas-") as tmp:
        results = [check_file(nvcc, entries[s], tmp) for s in cu]
    mangled = [row[0] for _, rows in results for row in rows]
    names = demangle(mangled)
    for src, rows in results:
        for name, stack, st, ld, regs, fma in rows:
            k = names[name]
            n += 1
            problems = []
            if stack or st or ld:
                problems.append(f"{stack} B stack frame, {st} B spill stores, {ld} B spill loads")
            if fma:
                with_fma[k] = fma
                if k not in FMA_ALLOWED:
                    problems.append(f"{fma} fma in its PTX (a body shared with the CPU must round like it)")
            note = f" (allowed: {FMA_ALLOWED[k]})" if fma and k in FMA_ALLOWED else ""
            status = "FAIL" if problems else "ok  "
            fails += bool(problems)
            detail = "; ".join(problems) if problems else f"0 B stack, 0 B spills, {regs} registers, {fma} fma{note}"
            print(f"{status} {src} {k}: {detail}")
    for k, why in FMA_ALLOWED.items():
        if k not in with_fma:
            print(f"FAIL FMA_ALLOWED lists {k} ({why}), but no kernel of that name holds an fma: drop it from the list")
            fails += 1
    print(f"{n} kernels, {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
