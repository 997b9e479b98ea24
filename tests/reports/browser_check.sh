#!/usr/bin/env bash
# Loads a `strata report` folder's index.html in headless Chromium with the
# network off, takes a screenshot and checks it is not blank (docs/reports.md).
#
#   tests/reports/browser_check.sh DIR OUT.png
#
# Chromium is Debian's `chromium`; when it is missing and we are root with
# apt-get (and STRATA_SKIP_INSTALL is not 1) it is installed first. Where it
# cannot be had the check is skipped: one line saying why, exit 77 (ctest's
# SKIP_RETURN_CODE). The network is off through a new network namespace
# (`unshare --net`, root) or, where that is not allowed, through Chromium
# flags that refuse every connection. STRATA_SCREENSHOT_SIZE=W,H sets the
# window (default 1280,1800).
# Exit: 0 rendered and not blank; 1 failed; 2 usage; 77 skipped.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: browser_check.sh DIR OUT.png" >&2
  exit 2
fi
dir="$(cd "$1" 2>/dev/null && pwd)" || {
  echo "FAIL: no folder $1"
  exit 1
}
out="$2"
[[ -f "$dir/index.html" ]] || {
  echo "FAIL: no $dir/index.html"
  exit 1
}

find_browser() {
  local b
  for b in chromium chromium-browser google-chrome chrome-headless-shell; do
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"
      return 0
    fi
  done
  return 1
}

browser="$(find_browser)"
if [[ -z "$browser" ]]; then
  why="not on PATH"
  if [[ "${STRATA_SKIP_INSTALL:-0}" == "1" ]]; then
    why="not on PATH and STRATA_SKIP_INSTALL=1"
  elif [[ "$(id -u)" != "0" ]] || ! command -v apt-get >/dev/null 2>&1; then
    why="not on PATH, and installing it needs root and apt-get"
  else
    echo "browser_check: installing Debian's chromium (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if timeout 600 apt-get update -qq >/dev/null 2>&1 &&
      timeout 600 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
      browser="$(find_browser)"
    fi
    [[ -n "$browser" ]] || why="apt-get install chromium failed (no network or no package)"
  fi
  if [[ -z "$browser" ]]; then
    echo "SKIP: headless Chromium is not installed and could not be installed ($why)"
    exit 77
  fi
fi

size="${STRATA_SCREENSHOT_SIZE:-1280,1800}"
profile="$(mktemp -d)"
log="$(mktemp)"
trap 'rm -rf "$profile" "$log"' EXIT
mkdir -p "$(dirname "$out")"
rm -f "$out"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

flags=(--headless --disable-gpu --hide-scrollbars --no-first-run --disable-extensions
  --disable-background-networking --disable-sync --disable-component-update
  --user-data-dir="$profile" --window-size="$size" --screenshot="$out_abs")
[[ "$(id -u)" == "0" ]] && flags+=(--no-sandbox)

# Network off: a namespace with no interface but loopback (down) when we
# may make one; else Chromium refuses every host and every proxy connection.
if unshare --net true >/dev/null 2>&1; then
  how="unshare --net (no network interface)"
  launch=(unshare --net)
else
  how="Chromium flags (every host unresolvable, proxy to a closed port)"
  launch=()
  flags+=(--proxy-server="http://127.0.0.1:9" --host-resolver-rules="MAP * ~NOTFOUND")
fi
echo "browser_check: $browser, network off by $how, window $size"

# Chromium writes the screenshot from a scratch folder (HOME must be writable).
(cd "$profile" && HOME="$profile" timeout 120 "${launch[@]}" "$browser" "${flags[@]}" \
  "file://$dir/index.html") >"$log" 2>&1
status=$?
if [[ ! -s "$out_abs" ]]; then
  echo "FAIL: Chromium wrote no screenshot (status $status); its output:"
  cat "$log"
  exit 1
fi

# Not blank: at least 2 % of the pixels differ from the most common colour
# and at least 16 colours appear. A small PNG decoder (zlib + the five
# filters), the standard library only.
python3 - "$out_abs" <<'PY'
import struct, sys, zlib
path = sys.argv[1]
data = open(path, "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    print("FAIL: %s is not a PNG" % path); sys.exit(1)
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
if depth != 8 or ctype not in (2, 6) or interlace:
    print("FAIL: PNG of bit depth %d, colour type %d, interlace %d: not decoded" % (depth, ctype, interlace))
    sys.exit(1)
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
counts = {}
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + 3])
        counts[px] = counts.get(px, 0) + 1
    prev = line
total = w * h
background = max(counts.values())
share = 1 - background / total
print("browser_check: screenshot %dx%d, %.1f %% of pixels off the background, %d colours"
      % (w, h, share * 100, len(counts)))
if share < 0.02 or len(counts) < 16:
    print("FAIL: the page rendered blank (needs >= 2 % off the background and >= 16 colours)")
    sys.exit(1)
PY
