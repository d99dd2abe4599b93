#!/usr/bin/env bash
# html_report.sh: hfl-sim's HTML report, looked at by a browser (scenarios/html.h).
# A small fleet (one client on a tight memory budget) runs 3 rounds; the page
# must be self-contained (no URL fetched, no script), and headless Chromium's
# screenshot of it must not be blank: it must show the accuracy line's blue,
# the participation grid's green and the budget outline's red, and over 3% of
# its pixels must be drawn. Skips (77) without Chromium or Fashion-MNIST;
# scripts/test installs Chromium. Usage: html_report.sh HFL_SIM
set -euo pipefail
sim=$1
if [ ! -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed"; exit 77
fi
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: chromium not installed (scripts/test installs it)"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-html-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/fleet.json" <<'JSON'
{"name": "html", "model": "mlp", "clients": 4, "clients_per_round": 3, "rounds": 3, "partition": "iid",
 "codec": "int8", "seed": 3, "client_memory": {"client-1": "6M"}}
JSON
"$sim" "$tmp/fleet.json" --out "$tmp/run" --quiet
page=$tmp/run/report.html
test -s "$page" || { echo "no $page"; exit 1; }
if grep -Eiq '<script|src=|href=|url\(' "$page"; then
  echo "the page fetches or runs something:"; grep -Eio '<script|src=[^ >]*|href=[^ >]*|url\([^)]*\)' "$page" | head; exit 1
fi
grep -q '<svg' "$page" || { echo "no chart in the page"; exit 1; }
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=760,1700 \
  --screenshot="$tmp/shot.png" "file://$page" >/dev/null 2>&1 || true
test -s "$tmp/shot.png" || { echo "chromium wrote no screenshot"; exit 1; }
if [ -n "${HFL_KEEP_SCREENSHOT:-}" ]; then cp "$tmp/shot.png" "$HFL_KEEP_SCREENSHOT"; fi
python3 - "$tmp/shot.png" <<'PY'
# A PNG reader for Chromium's screenshots (8-bit RGB or RGBA, not interlaced).
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        assert depth == 8 and ctype in (2, 6) and interlace == 0, f"PNG kind {depth}/{ctype}/{interlace}"
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
drawn, seen = 0, set()
near = lambda px, rgb: all(abs(px[k] - rgb[k]) <= 24 for k in range(3))
want = {"accuracy blue": (0x1f, 0x5f, 0xa8), "participation green": (0x2a, 0x9d, 0x4b), "budget red": (0xbb, 0x22, 0x22)}
for line in rows:
    for x in range(0, stride, bpp):
        px = line[x:x + 3]
        if min(px) < 235: drawn += 1
        for name, rgb in want.items():
            if near(px, rgb): seen.add(name)
frac = drawn / (w * h)
print(f"screenshot {w}x{h}: {100 * frac:.1f}% drawn; colours seen: {sorted(seen)}")
missing = set(want) - seen
assert frac > 0.03, f"the screenshot is nearly blank ({100 * frac:.2f}% drawn)"
assert not missing, f"not drawn: {sorted(missing)}"
PY
echo "html report: self-contained, and Chromium draws it"
