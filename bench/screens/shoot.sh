#!/bin/bash
# Screenshot an executed notebook as a browser shows it, widgets drawn, in headless Chromium.
#   bash bench/screens/shoot.sh NAME EXECUTED.ipynb OUTDIR
# Needs nbconvert and Pillow (in a venv of their own: NBVENV, default /tmp/nbv) and the
# widgets' HTML manager and RequireJS from npm (NPMDIR, default /tmp/npmw):
#   python3 -m venv /tmp/nbv && /tmp/nbv/bin/pip install nbconvert pillow
#   mkdir -p /tmp/npmw && cd /tmp/npmw && npm install @jupyter-widgets/html-manager@1 requirejs
# nbconvert's page loads both from a CDN; they are pointed at the local copies (no network).
set -euo pipefail
name=$1; notebook=$2; out=$3
nbvenv=${NBVENV:-/tmp/nbv}; npmdir=${NPMDIR:-/tmp/npmw}
mkdir -p "$out"
"$nbvenv/bin/jupyter-nbconvert" --to html "$notebook" --output "$name" --output-dir "$out" >/dev/null 2>&1
sed -i \
  -e "s|https://unpkg.com/@jupyter-widgets/html-manager@\*/dist/embed-amd.js|file://$npmdir/node_modules/@jupyter-widgets/html-manager/dist/embed-amd.js|" \
  -e "s|https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js|file://$npmdir/node_modules/requirejs/require.js|" \
  "$out/$name.html"
timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --virtual-time-budget=10000 --allow-file-access-from-files --window-size=1100,12000 \
  --screenshot="$out/${name}_full.png" "file://$(realpath "$out/$name.html")" >/dev/null 2>&1
"$nbvenv/bin/python" - "$out" "$name" <<'PY'
import sys
from PIL import Image
out, name = sys.argv[1], sys.argv[2]
page = Image.open(f"{out}/{name}_full.png"); width, height = page.size; grey = page.convert("L")
last = next(y for y in range(height - 1, 0, -10)
            if min(grey.getpixel((x, y)) for x in range(0, width, 20)) < 250)
for i, top in enumerate(range(0, last, 1400)):
    page.crop((0, top, width, min(top + 1400, last + 20))).save(f"{out}/{name}_part{i}.png")
    print(f"{out}/{name}_part{i}.png")
PY
